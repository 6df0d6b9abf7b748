//! `switchyard-bench corpus`: Switchyard embedding a corpus of real texts with a real model, the
//! way `switchyard embed` does, timed as `peers/peers.py` times its peers, for `cargo xtask bench
//! --peers` to set side by side.

use std::time::Instant;

use switchyard_core::{Backend, Buckets, DType, DTypeChoice};
use switchyard_dispatch::flex::kernels::{Isa8, Isa16};
use switchyard_dispatch::{Device, Dispatch};
use switchyard_models::{Model, Runner};

use crate::args::Args;

/// Process CPU seconds so far (every thread's, user and system).
pub(crate) fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes a `rusage` it is given a valid pointer to.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// The texts of a corpus of JSON lines with a `text` field, or what is wrong with the file.
pub fn load(path: &str) -> Result<Vec<String>, String> {
    let data = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    data.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: serde_json::Value =
                serde_json::from_str(l).map_err(|e| format!("{path}:{}: {e}", i + 1))?;
            let text = v["text"].as_str().ok_or(format!("{path}:{}: no `text` string", i + 1))?;
            Ok(text.to_owned())
        })
        .collect()
}

/// What `corpus` takes.
const USAGE: &str = "corpus --model DIR --corpus FILE --threads N [--max-len N] [--dtypes LIST] \
                     [--device D] [--orders file,sorted] [--no-avx512-beside-amx]";

/// `corpus --model DIR --corpus FILE --threads N [--max-len N] [--dtypes LIST] [--device D]
/// [--orders file,sorted] [--no-avx512-beside-amx]`: flex (or the device `D`, such as `cuda:0`,
/// whose threads are its own) in each dtype of `LIST` (default `f32,bf16,int8`; `auto` is the
/// device's pick), in file order and sorted by length (characters, as the peers sort; `--orders`
/// picks one or both), a tab-separated line each, as the peers print theirs: `run`, engine,
/// order, threads, texts, tokens, wall seconds, CPU seconds, largest difference from the first
/// run's embeddings (f32 in file order, by default); then a `cosine` line: engine, order, and
/// the smallest and the median cosine similarity of a text's embedding to the first run's.
/// Each run follows a warm-up: one batch on flex, a whole pass on another device.
/// Where flex runs bf16 or int8 on AMX it also times its AVX-512 kernels, unless
/// `--no-avx512-beside-amx`.
pub fn run(args: &[String]) {
    let args = Args::new(args, USAGE);
    let (model_dir, corpus) = (args.need("--model"), args.need("--corpus"));
    let threads: usize = args.need_parsed("--threads");
    let dtypes: Vec<DTypeChoice> = args
        .opt("--dtypes")
        .unwrap_or_else(|| "f32,bf16,int8".into())
        .split(',')
        .map(|d| d.parse().unwrap_or_else(|e| args.fail(format!("--dtypes {d}: {e}"))))
        .collect();
    let device: Device = args.parsed("--device").unwrap_or_else(Device::flex);
    let on_flex = device == Device::flex();
    let max_len: Option<usize> = args.parsed("--max-len");
    let orders = args.opt("--orders").unwrap_or_else(|| "file,sorted".into());
    let orders: Vec<&str> = orders.split(',').collect();
    if orders.iter().any(|o| !["file", "sorted"].contains(o)) {
        args.fail(format!("--orders {}: expected file, sorted or both", orders.join(",")));
    }
    let beside_amx = !args.flag("--no-avx512-beside-amx");
    let texts = load(&corpus).unwrap_or_else(|e| args.fail(e));
    let load_model = || {
        let mut model = Model::load(model_dir.as_ref()).expect("the model loads");
        if let Some(n) = max_len {
            model.set_max_len(n).expect("a length the model takes");
        }
        model
    };
    let model = load_model();
    let tokens: usize = texts
        .iter()
        .map(|t| model.tokenizer().encode(t).expect("a text tokenizes").ids.len())
        .sum();
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| texts[i].len());
    let mut first: Option<Vec<Vec<f32>>> = None;
    for dtype in dtypes {
        for (backend, engine) in engines(&device, threads, dtype, beside_amx) {
            let runner = Runner::new(load_model(), backend, Buckets::default());
            let mut runner = runner.expect("the model uploads");
            let runs = [("file", None), ("sorted", Some(&order))];
            for (label, perm) in runs.into_iter().filter(|(l, _)| orders.contains(l)) {
                let inputs: Vec<&str> = match perm {
                    None => texts.iter().map(String::as_str).collect(),
                    Some(p) => p.iter().map(|&i| texts[i].as_str()).collect(),
                };
                // On a GPU each batch shape's first run compiles and tunes its kernels: a whole
                // pass warms them all (on the H200, 2026-12-04, after one warm-up batch, a first
                // pass in file order ran 3.3x to 5.7x slower than a sorted one right after it);
                // flex needs one batch.
                let warm = if on_flex { inputs.len().min(32) } else { inputs.len() };
                runner.embed(&inputs[..warm], |_| {}).expect("a warm-up pass");
                let (wall, cpu) = (Instant::now(), cpu_seconds());
                let emb = runner.embed(&inputs, |_| {}).expect("the corpus embeds");
                let (wall, cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
                let emb = match perm {
                    None => emb,
                    Some(p) => {
                        let mut back = vec![Vec::new(); emb.len()];
                        for (row, &i) in emb.into_iter().zip(p) {
                            back[i] = row;
                        }
                        back
                    }
                };
                let first = first.get_or_insert_with(|| emb.clone());
                let max_diff = emb
                    .iter()
                    .flatten()
                    .zip(first.iter().flatten())
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                let n = texts.len();
                println!(
                    "run\t{engine}\t{label}\t{threads}\t{n}\t{tokens}\t{wall}\t{cpu}\t{max_diff}"
                );
                let (least, median) = cosines(&emb, first);
                println!("cosine\t{engine}\t{label}\t{least}\t{median}");
            }
        }
    }
}

/// The smallest and the median cosine similarity of each row of `a` to the same row of `b`.
fn cosines(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f64, f64) {
    let mut cos: Vec<f64> = a
        .iter()
        .zip(b)
        .map(|(x, y)| {
            let dot = |p: &[f32], q: &[f32]| -> f64 {
                p.iter().zip(q).map(|(&u, &v)| f64::from(u) * f64::from(v)).sum()
            };
            dot(x, y) / (dot(x, x) * dot(y, y)).sqrt()
        })
        .collect();
    cos.sort_by(f64::total_cmp);
    match cos.first() {
        Some(&least) => (least, cos[cos.len() / 2]),
        None => (f64::NAN, f64::NAN),
    }
}

/// The backends `corpus` times in `dtype` on `device`, each with its engine's name: the device
/// as it picks its kernels, and where flex's bf16 or int8 runs on AMX, its AVX-512 kernels
/// beside it (the GEMM's and attention's) if `beside_amx`.
fn engines(
    device: &Device,
    threads: usize,
    dtype: DTypeChoice,
    beside_amx: bool,
) -> Vec<(Dispatch, String)> {
    // flex, running `avx512_for` on AVX-512 instead of AMX: its GEMM, and attention's bf16
    // products (which follow the bf16 GEMM's instructions, in int8 too).
    let on_flex = |avx512_for: Option<DType>| {
        let flex = switchyard_dispatch::flex::with_threads(Some(threads)).expect("flex");
        let flex = match avx512_for {
            Some(DType::Bf16) => flex.with_isa16(Isa16::Avx512Bf16),
            Some(DType::I8) => flex.as_cpu_of(Isa8::Avx512Vnni),
            _ => Ok(flex),
        };
        let flex = flex.expect("AVX-512 beside AMX");
        Dispatch::Flex { device: Device::flex(), backend: flex }
    };
    let backend = if *device == Device::flex() {
        on_flex(None)
    } else {
        Dispatch::new(device).expect("the device opens")
    };
    let dtype = dtype.resolve(&backend.caps());
    // Kernel choices the environment made on a cube device (`SWITCHYARD_CUBE_MATMUL`, ...).
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    let chosen = match &backend {
        Dispatch::Cube { backend, .. } => backend.kernels().overrides(),
        _ => None,
    };
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    let chosen: Option<String> = None;
    let chosen = chosen.map(|c| format!(" ({c})")).unwrap_or_default();
    let name = |kernel: &str| match dtype {
        DType::F32 => format!("switchyard {device}{kernel}{chosen}"),
        d => format!("switchyard {device} {d}{kernel}{chosen}"),
    };
    let amx = match &backend {
        Dispatch::Flex { backend, .. } => match dtype {
            DType::Bf16 => backend.isa16() == Isa16::AmxBf16,
            DType::I8 => backend.isa8() == Isa8::AmxInt8,
            _ => false,
        },
        _ => false,
    };
    let mut engines = vec![(backend, name(""))];
    if amx && beside_amx {
        engines.push((on_flex(Some(dtype)), name(" (no AMX)")));
    }
    engines
        .into_iter()
        .map(|(b, name)| (b.with_dtype(dtype).expect("the device computes in this dtype"), name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::cosines;

    #[test]
    fn cosines_are_each_rows_least_and_median() {
        let a = [vec![1.0, 0.0], vec![0.0, 2.0], vec![3.0, 4.0]];
        let b = [vec![2.0, 0.0], vec![1.0, 0.0], vec![4.0, 3.0]];
        // Rows: parallel (1), orthogonal (0), and 24/25.
        let (least, median) = cosines(&a, &b);
        assert!(least.abs() < 1e-12, "{least}");
        assert!((median - 0.96).abs() < 1e-12, "{median}");
        assert!(cosines(&[], &[]).0.is_nan());
    }
}
