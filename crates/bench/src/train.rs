//! `switchyard-bench train`: fine-tuning a real model on flex as `switchyard train` does, timed
//! as `peers/train_peer.py` times sentence-transformers' `fit`, for `cargo xtask bench --train`
//! to set side by side.

use burn_backend::Backend as BurnBackend;
use switchyard_burn::BurnVisitor;
use switchyard_core::Caps;
use switchyard_dispatch::{Device, Dispatch};
use switchyard_train::{Job, Settings, Task, TrainReport, Trainer};

/// The process's peak resident memory so far, in MiB (`VmHWM`).
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

struct Fit<'a>(&'a Job);

impl BurnVisitor for Fit<'_> {
    type Out = TrainReport;
    fn visit<B: BurnBackend>(self, device: B::Device, caps: Caps) -> TrainReport {
        Trainer::<B>::fit(device, caps, self.0, &mut |_| {}).expect("the training run")
    }
}

/// `train --model DIR --data FILE --threads N --batch N --max-len N [--epochs N]`: one epoch
/// (by default) of MultipleNegativesRankingLoss on the anchor-positive records of FILE in file
/// order, sentence-transformers' other defaults (learning rate 2e-5, 10% warm-up, weight decay
/// 0.01, clipping at 1, dropout on), on flex on N threads; prints a tab-separated line as the
/// peer does: `run`, engine, threads, records, tokens, wall seconds of the steps, CPU seconds,
/// and peak memory in MiB.
pub fn run(args: &[String]) {
    let usage = "train --model DIR --data FILE --threads N --batch N --max-len N [--epochs N]";
    let args = crate::args::Args::new(args, usage);
    let threads: usize = args.need_parsed("--threads");
    let epochs = args.parsed("--epochs").unwrap_or(1);
    let data = std::path::PathBuf::from(args.need("--data"));
    let records = std::fs::read_to_string(&data)
        .expect("the data")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count();
    let out = std::env::temp_dir().join(format!("switchyard-bench-train-{}", std::process::id()));
    let job = Job {
        model: args.need("--model").into(),
        task: Task::Embed,
        data,
        eval: None,
        out: out.clone(),
        labels: None,
        max_len: Some(args.need_parsed("--max-len")),
        resume: false,
        settings: Settings {
            epochs,
            batch_size: args.need_parsed("--batch"),
            batch_tokens: usize::MAX,
            shuffle: false,
            ..Settings::default()
        },
    };
    let backend = switchyard_dispatch::flex::with_threads(Some(threads)).expect("flex");
    let flex = Dispatch::Flex { device: Device::flex(), backend };
    let cpu = crate::corpus::cpu_seconds();
    let report = flex.on_burn(Fit(&job)).expect("flex trains");
    let cpu = crate::corpus::cpu_seconds() - cpu;
    println!(
        "run\tswitchyard flex\t{threads}\t{records}\t{}\t{:.3}\t{:.3}\t{:.0}",
        report.tokens,
        report.seconds,
        cpu,
        peak_mib()
    );
    let _ = std::fs::remove_dir_all(&out);
}
