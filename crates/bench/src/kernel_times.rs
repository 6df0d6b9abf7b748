//! `switchyard-bench kernel-times`: where one GPU batch's device time goes, kernel by kernel,
//! from CubeCL's own profiling (each kernel timed alone on the device), beside the whole run's
//! time. What a short GPU lease needs to choose between fixing the products, attention or the
//! launches between kernels, without a profiler on the machine.

use std::time::{Duration, Instant};

use switchyard_core::testkit;
use switchyard_core::{Backend, DTypeChoice, LaneId, Outputs};
use switchyard_dispatch::cube::{
    Matmul, Pools, device_memory, kernel_times, log_kernel_times, settled_log, with_matmul,
    with_tiled_attention,
};
use switchyard_dispatch::{Device, Dispatch};

use crate::args::Args;
use crate::{executor_for, gpu_batches, ms, ragged};

const USAGE: &str = "kernel-times --device D [--shape minilm|bge-base] [--seqs N] \
                     [--dtype auto|f32|f16|bf16] [--runs N] [--tiles] [--matmul NAME] \
                     [--sources FILE]";

/// Untimed runs before the timed ones.
const WARM_UPS: usize = 2;

/// Times each kernel of `--runs` runs (default 3) of the bench's ragged batch of `--seqs`
/// sequences (default 256) of the `--shape` encoder (default bge-base) on the cube device
/// `--device`, in `--dtype` (default the device's own), with the device's default kernels, or
/// half-precision attention in tiles (`--tiles`) and the products by `--matmul` (a routine's
/// name, `tuned` or `burn`, the default; `cublas-queued`, whose products CubeCL sees as the time
/// its kernel waits for each; not `cublas`, whose products CubeCL does not see at all). With
/// `--sources FILE`, every kernel CubeCL compiles is appended to FILE with its source (CUDA C++
/// on `cuda:N`), for `switchyard_cube`'s NVRTC report on a machine without the GPU.
pub(crate) fn run(args: &[String]) {
    let args = Args::new(args, USAGE);
    let device: Device = args.need_parsed("--device");
    let shape = args.opt("--shape").unwrap_or_else(|| "bge-base".into());
    let seqs: usize = args.parsed("--seqs").unwrap_or(256);
    let dtype: DTypeChoice = args.parsed("--dtype").unwrap_or(DTypeChoice::Auto);
    let runs: usize = args.parsed("--runs").unwrap_or(3).max(1);
    let tiles = args.flag("--tiles");
    let matmul: Matmul = args.parsed("--matmul").unwrap_or_default();
    let sources = args.opt("--sources").map(std::path::PathBuf::from);
    let Some((what, spec, (_, min, max))) = gpu_batches(false)
        .into_iter()
        .find(|(what, ..)| what.to_lowercase().starts_with(&shape.to_lowercase()))
    else {
        args.fail(format!("--shape {shape}: expected minilm or bge-base"))
    };
    if device.family().backend != "cube" {
        args.fail(format!("{device} is not a cube device: CubeCL times only its own kernels"))
    }
    if matmul == Matmul::Cublas {
        args.fail(
            "--matmul cublas: cuBLAS's products are not CubeCL kernels, which are all this \
             times; `--gpus-only` and `--matmuls` time them, and here `--matmul cublas-queued` \
             shows each as the time a kernel waits for it",
        )
    }
    let log = std::env::temp_dir().join(format!("switchyard-kernels-{}.log", std::process::id()));
    // Before the device opens: CubeCL reads its configuration once.
    if let Err(e) = log_kernel_times(&log, sources.as_deref()) {
        args.fail(e)
    }
    let fail = |e: switchyard_core::Error| -> ! {
        let _ = std::fs::remove_file(&log);
        args.fail(e)
    };
    let be = Dispatch::new(&device).unwrap_or_else(|e| fail(e));
    let be = crate::on_cube(&be, |c| with_tiled_attention(&with_matmul(c, matmul), tiles));
    let dtype = dtype.resolve(&be.caps());
    let be = be.with_dtype(dtype).unwrap_or_else(|e| fail(e));
    let batch = ragged(seqs, min, max, spec.vocab);
    let Dispatch::Cube { backend: probe, .. } = &be else { unreachable!("a cube device") };
    let probe = probe.with_kernels(probe.kernels().clone());
    let mut ex = executor_for(be, &testkit::bert_like(spec), &batch);
    let mut out = Outputs::new();
    // Warm-up runs compile and tune; then the timed ones, alone in the log.
    for _ in 0..WARM_UPS {
        ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("the batch runs");
    }
    let from = settled_log(&log, 0).map(|l| l.len() as u64).unwrap_or_else(|e| fail(e));
    let start = Instant::now();
    for _ in 0..runs {
        ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("the batch runs");
    }
    let wall = start.elapsed() / runs as u32;
    let text = settled_log(&log, from).unwrap_or_else(|e| fail(e));
    let _ = std::fs::remove_file(&log);
    let times = kernel_times(&text);
    let device_time: Duration = times.iter().map(|k| k.time).sum::<Duration>() / runs as u32;
    println!(
        "{device}, {what}, {} seqs, {} tokens, {dtype}, attention {}, matmul {matmul}: each \
         kernel alone on the device (CubeCL's profiling), per run, mean of {runs}",
        batch.seqs(),
        batch.tokens(),
        if tiles { "in tiles" } else { "in rows" },
    );
    println!(
        "  a run: {:.2}ms wall with every kernel timed alone, of which {:.2}ms in kernels \
         (compare the run's time without profiling in the GPU bench: the rest of that is launches)",
        ms(wall),
        ms(device_time)
    );
    // The kernels' counts are shared by the probe's clone, over every run, warm-ups included.
    let all = (runs + WARM_UPS) as f64;
    let took = probe.kernels().launched();
    let per = |n: usize| n as f64 / all;
    println!(
        "  ops our kernels took, a run: attention {} ({} in tiles, {} adding the projections' \
         bias), LayerNorm {} ({} with the epilogue before it, {} gathering the embeddings), \
         linear epilogues {}, our GEMM {}, pooling and L2 {}; {} kernels launched in all",
        per(took.attention),
        per(took.tiled),
        per(took.attention_bias),
        per(took.norm),
        per(took.norm_epilogue),
        per(took.embed_norm),
        per(took.epilogue),
        per(took.linear),
        per(took.pool),
        times.iter().map(|k| k.launches).sum::<usize>() as f64 / runs as f64,
    );
    let memory = device_memory(&probe);
    let mb =
        |p: Pools| format!("{:.1} MB in {} allocations", p.bytes_reserved as f64 / 1e6, p.pages);
    println!(
        "  device memory after the runs: tensors {} ({:.1} MB live), the runtime's own {}",
        mb(memory.tensors),
        memory.tensors.bytes_in_use as f64 / 1e6,
        mb(memory.runtime)
    );
    println!("  {:<56} {:>9} {:>9} {:>7}", "kernel", "launches", "ms", "share");
    for k in &times {
        let per_run = k.time / runs as u32;
        let share = 100.0 * per_run.as_secs_f64() / device_time.as_secs_f64().max(1e-12);
        let launches = k.launches as f64 / runs as f64;
        println!("  {:<56} {launches:>9.1} {:>9.3} {share:>6.1}%", k.name, ms(per_run));
    }
}
