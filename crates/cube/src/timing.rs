//! Each kernel's time on the device, from CubeCL's own profiling: where a run's device time
//! goes kernel by kernel, on any runtime (a GPU lease needs no profiler installed for it).
//!
//! [`log_kernel_times`] has CubeCL time every kernel a cube device of the process launches,
//! each alone (the device waits for it, so kernels no longer overlap and a run takes longer),
//! and append a line for each to a file: `| 1.25ms | EpilogueKernel_2b44ee4b`.
//! [`kernel_times`] adds up such lines by kernel. It can also log each kernel compiled with its
//! source, which [`kernel_sources`] reads back.

use std::path::Path;
use std::time::Duration;

use cubecl::config::compilation::CompilationLogLevel;
use cubecl::config::profiling::ProfilingLogLevel;
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
use switchyard_core::{Error, Result};

/// Has CubeCL time each kernel the process launches on a cube device, alone, and append a
/// line for each to `file`; with `sources`, also append each kernel it compiles there, with its
/// source as the device's compiler gets it (CUDA C++ on `cuda:N`, read by [`kernel_sources`]).
/// CubeCL reads its configuration once, so this comes before any cube device is opened (an
/// error after), and it replaces any `cubecl.toml`.
pub fn log_kernel_times(file: &Path, sources: Option<&Path>) -> Result<()> {
    // CubeCL opens the files when a device starts, and panics where it cannot.
    for f in std::iter::once(file).chain(sources) {
        let io = |source| Error::Io { path: f.to_owned(), source };
        std::fs::OpenOptions::new().create(true).append(true).open(f).map_err(io)?;
    }
    let mut config = CubeClRuntimeConfig::default();
    config.profiling.logger.level = ProfilingLogLevel::Basic;
    config.profiling.logger.file = Some(file.to_owned());
    if let Some(sources) = sources {
        config.compilation.logger.level = CompilationLogLevel::Full;
        config.compilation.logger.file = Some(sources.to_owned());
    }
    if CubeClRuntimeConfig::try_set(config) {
        Ok(())
    } else {
        Err(Error::Device(
            "CubeCL's configuration was read already: ask for kernel times before opening any \
             cube device"
                .into(),
        ))
    }
}

/// A kernel CubeCL compiled, as the sources log of [`log_kernel_times`] holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSource {
    /// The kernel's name, as CubeCL gives it (its generic parameters included).
    pub name: String,
    /// The source's language, as CubeCL tags it (`cpp` for CUDA C++, `wgsl`, ...).
    pub lang: String,
    /// The source the device's compiler was given.
    pub source: String,
}

/// Every kernel of a sources log, in the order compiled; an entry cut short (a log still being
/// written) is left out.
pub fn kernel_sources(log: &str) -> Vec<KernelSource> {
    const START: &str = "[START_KERNEL_COMPILATION]";
    const END: &str = "[END_KERNEL_COMPILATION]";
    let mut all = Vec::new();
    let mut rest = log;
    while let Some(at) = rest.find(START) {
        rest = &rest[at + START.len()..];
        let Some(end) = rest.find(END) else { break };
        let entry = &rest[..end];
        rest = &rest[end + END.len()..];
        let name = entry
            .lines()
            .find_map(|l| l.strip_prefix("name: "))
            .unwrap_or("unnamed")
            .trim()
            .to_owned();
        let Some(fence) = entry.find("source:\n```") else { continue };
        let body = &entry[fence + "source:\n```".len()..];
        let Some((lang, body)) = body.split_once('\n') else { continue };
        let Some(close) = body.rfind("```") else { continue };
        let source = body[..close].trim_end_matches('\n').to_owned();
        all.push(KernelSource { name, lang: lang.trim().to_owned(), source });
    }
    all
}

/// The log `file` from byte `from` on, once CubeCL has written what the device ran: CubeCL
/// writes its lines from a task of its own, so this waits until the file has stopped growing
/// for a moment (at most ten seconds).
pub fn settled_log(file: &Path, from: u64) -> Result<String> {
    let io = |source| Error::Io { path: file.to_owned(), source };
    let size = || std::fs::metadata(file).map(|m| m.len()).map_err(io);
    let (step, quiet) = (Duration::from_millis(50), 6);
    let (mut last, mut still) = (size()?, 0);
    for _ in 0..200 {
        std::thread::sleep(step);
        let now = size()?;
        still = if now == last { still + 1 } else { 0 };
        last = now;
        if still == quiet {
            break;
        }
    }
    let bytes = std::fs::read(file).map_err(io)?;
    let from = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    Ok(String::from_utf8_lossy(&bytes[from..]).into_owned())
}

/// One kernel's launches in a log of [`log_kernel_times`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelTime {
    /// The kernel's name without CubeCL's hash of its variant (so every shape of it counts
    /// together), a long generic name cut to its first and last parts.
    pub name: String,
    /// How many launches the log has.
    pub launches: usize,
    /// Their device time in all.
    pub time: Duration,
}

/// The lines of `log` added up by kernel, the longest total first; lines that are not a
/// kernel's time are skipped.
pub fn kernel_times(log: &str) -> Vec<KernelTime> {
    let mut times: Vec<KernelTime> = Vec::new();
    for line in log.lines() {
        let Some((time, name)) = line_of(line) else { continue };
        match times.iter_mut().find(|k| k.name == name) {
            Some(k) => {
                k.launches += 1;
                k.time += time;
            }
            None => times.push(KernelTime { name, launches: 1, time }),
        }
    }
    times.sort_by_key(|k| std::cmp::Reverse(k.time));
    times
}

/// A line `| DURATION | NAME`: the duration and the kernel's short name.
fn line_of(line: &str) -> Option<(Duration, String)> {
    let rest = line.trim().strip_prefix('|')?;
    let (time, name) = rest.split_once('|')?;
    Some((duration(time.trim())?, short_name(name.trim())?))
}

/// A duration as Rust's `Debug` writes it: `1.5s`, `2.36ms`, `260.4µs`, `35ns`.
fn duration(s: &str) -> Option<Duration> {
    let units = [("ns", 1e-9), ("µs", 1e-6), ("us", 1e-6), ("ms", 1e-3), ("s", 1.0)];
    let (value, scale) = units.iter().find_map(|(u, f)| Some((s.strip_suffix(u)?, *f)))?;
    let secs = value.parse::<f64>().ok()? * scale;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// `name` without its trailing `_hash`; a generic name (parts joined by ` | `) longer than 60
/// characters as its first and last parts.
fn short_name(name: &str) -> Option<String> {
    let name = match name.rsplit_once('_') {
        Some((base, hash)) if !hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            base
        }
        _ => name,
    };
    if name.is_empty() {
        return None;
    }
    let parts: Vec<&str> = name.split(" | ").collect();
    Some(match parts.as_slice() {
        [first, .., last] if name.len() > 60 => format!("{first} … {last}"),
        _ => name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_rust_writes_them() {
        let ms = Duration::from_micros;
        assert_eq!(duration("2.363142ms"), Some(ms(2363) + Duration::from_nanos(142)));
        assert_eq!(duration("260.435µs"), Some(Duration::from_nanos(260_435)));
        assert_eq!(duration("35ns"), Some(Duration::from_nanos(35)));
        assert_eq!(duration("1.5s"), Some(Duration::from_millis(1500)));
        for bad in ["", "ms", "-1ms", "1.5", "fast"] {
            assert_eq!(duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_log_adds_up_by_kernel_across_shapes_longest_first() {
        let matmul = "MatmulEntry | TensorArgs | DynamicScalar | __Lhs | SimpleMatmulFamily | \
                      UnitWriterFamily | RowMajorGlobalPartitionMatmul";
        let log = format!(
            "| 2.5ms | SelectKernel_ed869afd\n\
             | 1.5ms | {matmul}_d979aac6\n\
             something else\n\
             | 3ms | {matmul}_59042e9d\n\
             | 500µs | KernelBinop | AddOp_6f2ad5cd\n\
             | 1ms | SelectKernel_ed869afd\n"
        );
        let times = kernel_times(&log);
        let got: Vec<(&str, usize, Duration)> =
            times.iter().map(|k| (k.name.as_str(), k.launches, k.time)).collect();
        let ms = Duration::from_micros;
        assert_eq!(
            got,
            [
                ("MatmulEntry … RowMajorGlobalPartitionMatmul", 2, ms(4500)),
                ("SelectKernel", 2, ms(3500)),
                ("KernelBinop | AddOp", 1, ms(500)),
            ]
        );
    }

    #[test]
    fn a_sources_log_gives_each_kernel_its_name_language_and_source() {
        let log = "[START_KERNEL_COMPILATION]\nname: VarlenAttention<f16>\nid: KernelId { .. }\n\
                   source:\n```cpp\nextern \"C\" __global__ void k() {\n}\n```\n\
                   [END_KERNEL_COMPILATION]\nsomething else\n\
                   [START_KERNEL_COMPILATION]\nname: Pad\nsource:\n```wgsl\nfn main() {}\n```\n\
                   [END_KERNEL_COMPILATION]\n[START_KERNEL_COMPILATION]\nname: Cut\nsource:\n```cpp\n";
        let got = kernel_sources(log);
        let want = [
            ("VarlenAttention<f16>", "cpp", "extern \"C\" __global__ void k() {\n}"),
            ("Pad", "wgsl", "fn main() {}"),
        ];
        let got: Vec<(&str, &str, &str)> =
            got.iter().map(|k| (k.name.as_str(), k.lang.as_str(), k.source.as_str())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_name_keeps_an_ending_that_is_not_a_hash() {
        assert_eq!(short_name("my_kernel").as_deref(), Some("my_kernel"));
        assert_eq!(short_name("Kernel_12ab").as_deref(), Some("Kernel"));
        assert_eq!(short_name("_ab12"), None);
    }
}
