//! `cargo xtask device-bundle [--cuda]`: what the benchmarks need on a machine that has no Rust
//! toolchain and no network (a GPU host, a many-core one), in `.cache/device/`, small enough to
//! carry there: the release `switchyard-bench` stripped and compressed with xz (with `--cuda`,
//! the cuda-nvrtc build of `build-cuda`), all-MiniLM-L6-v2 with its weights in f16, also in xz
//! (restored to f32 there, so every engine loads the same weights), and both corpora.
//! `crates/bench/peers/device.sh` runs them there; `cargo xtask bench --report DIR` reads what
//! it wrote.
//!
//! `--tests` writes `.cache/device-tests/` instead: the cube crate's test binaries built with
//! cuda-nvrtc, stripped and in xz, which `crates/bench/peers/device-tests.sh` runs on `cuda:0`
//! there (its kernels in every dtype, the conformance suite), carried in a call of their own.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::peers::{CORPORA, release_bench, step};

/// What a bundle may weigh: the device tool carries at most 64 MiB with the working tree, which
/// is about 5 MiB.
const BUDGET: u64 = 58 << 20;

/// The task.
pub fn bundle(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--tests") {
        return match tests() {
            Ok((dir, bytes)) => {
                println!(
                    "xtask device-bundle: {} ({:.1} MiB); there, from the repository's root:\n  \
                     crates/bench/peers/device-tests.sh OUT_DIR\n(carry .cache/device-tests)",
                    dir.display(),
                    mib(bytes)
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("xtask device-bundle: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let cuda = args.iter().any(|a| a == "--cuda");
    match make(cuda) {
        Ok((dir, bytes)) => {
            println!(
                "xtask device-bundle: {} ({:.1} MiB); there, from the repository's root:\n  \
                 crates/bench/peers/device.sh {} OUT_DIR [THREADS]\n\
                 (carry .cache/device), then here: cargo xtask bench --report OUT_DIR",
                dir.display(),
                mib(bytes),
                if cuda { "cpu|gpu|all" } else { "cpu" },
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask device-bundle: {e}");
            ExitCode::FAILURE
        }
    }
}

fn make(cuda: bool) -> Result<(PathBuf, u64), String> {
    if crate::models::fetch_models() != ExitCode::SUCCESS {
        return Err("the real models could not be fetched".into());
    }
    let root = crate::workspace();
    let corpora = CORPORA.iter().map(|c| c.ensure()).collect::<Result<Vec<_>, _>>()?;
    // The plain release build converts the weights either way: it runs here, the CUDA one may not.
    let plain = release_bench()?;
    let bench = if cuda {
        let bins = crate::cuda::build(false)?;
        bins.into_iter().find(|b| b.ends_with("switchyard-bench")).expect("build-cuda's bench")
    } else {
        plain.clone()
    };
    let dir = fresh(root.join(".cache/device"))?;
    // Without its symbols (51 MB to 41 for the plain build, 123 to 92 for the CUDA one), then
    // xz: 7 MB and 14 MB.
    let bin = dir.join("switchyard-bench");
    step(
        &format!("stripping {}", bench.display()),
        Command::new("strip").arg("-o").arg(&bin).arg(&bench),
    )?;
    step("compressing it with xz", Command::new("xz").args(["-9", "-T2"]).arg(&bin))?;
    let model = dir.join("all-MiniLM-L6-v2");
    step(
        "writing all-MiniLM-L6-v2 with f16 weights",
        Command::new(&plain)
            .args(["weights", "--dtype", "f16"])
            .arg(root.join(".cache/models/all-MiniLM-L6-v2"))
            .arg(&model),
    )?;
    // 45 MB to 41: with the CUDA binary, what keeps the bundle inside the budget.
    step(
        "compressing the weights with xz",
        Command::new("xz").args(["-9", "-T2"]).arg(model.join("model.safetensors")),
    )?;
    for c in &corpora {
        let name = c.file_name().expect("a corpus file");
        std::fs::copy(c, dir.join(name)).map_err(|e| format!("{}: {e}", c.display()))?;
    }
    within_budget(dir)
}

/// `.cache/device-tests/`: each test binary of the cube crate's cuda-nvrtc build, stripped and
/// in xz, named for its source (`kernels.xz` for `tests/kernels.rs`, `lib.xz` for the unit
/// tests).
fn tests() -> Result<(PathBuf, u64), String> {
    let built = crate::cuda::build_tests("switchyard-cube")?;
    let dir = fresh(crate::workspace().join(".cache/device-tests"))?;
    for (source, binary) in built {
        let stem = Path::new(&source).file_stem().and_then(|s| s.to_str()).unwrap_or("test");
        let bin = dir.join(stem);
        step(
            &format!("stripping {}", binary.display()),
            Command::new("strip").arg("-o").arg(&bin).arg(&binary),
        )?;
        step("compressing it with xz", Command::new("xz").args(["-9", "-T2"]).arg(&bin))?;
    }
    within_budget(dir)
}

/// `dir`, emptied.
fn fresh(dir: PathBuf) -> Result<PathBuf, String> {
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// `dir` and its size, or an error where the device tool could not carry it.
fn within_budget(dir: PathBuf) -> Result<(PathBuf, u64), String> {
    let bytes = size(&dir)?;
    if bytes > BUDGET {
        return Err(format!(
            "{} holds {:.1} MiB, more than the {} MiB the device tool can carry beside the tree",
            dir.display(),
            mib(bytes),
            BUDGET >> 20
        ));
    }
    Ok((dir, bytes))
}

/// Bytes in MiB.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// The bytes of every file under `dir`.
fn size(dir: &Path) -> Result<u64, String> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let meta = entry.metadata().map_err(|e| format!("{}: {e}", entry.path().display()))?;
        total += if meta.is_dir() { size(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}
