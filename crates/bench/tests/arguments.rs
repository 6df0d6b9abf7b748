//! A subcommand given a missing or malformed argument says what is wrong and how it is used,
//! with exit status 2, instead of panicking.

use std::process::Command;

/// The exit status and standard error of `switchyard-bench ARGS`.
fn bench(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard-bench")).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn missing_and_malformed_arguments_are_errors_with_the_usage() {
    let missing = std::env::temp_dir().join("switchyard-bench-no-such-corpus.jsonl");
    let missing = missing.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&["corpus"], "--model is needed"),
        (&["corpus", "--model", "m", "--corpus", "c"], "--threads is needed"),
        (&["corpus", "--model", "m", "--corpus", "c", "--threads", "two"], "--threads two: "),
        (&["corpus", "--model", "m", "--corpus", "c", "--threads"], "--threads takes a value"),
        (&["corpus", "--model", "m", "--corpus", missing, "--threads", "1"], missing),
        (
            &[
                "corpus",
                "--model",
                "m",
                "--corpus",
                missing,
                "--threads",
                "1",
                "--orders",
                "random",
            ],
            "--orders random: expected",
        ),
        (&["serve", "--corpus", "c"], "--model is needed"),
    ];
    for (args, says) in cases {
        let (code, stderr) = bench(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says) && stderr.contains("usage: switchyard-bench"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// `kernel-times` refuses, before opening a device, what CubeCL's profiling cannot time.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[test]
fn kernel_times_refuses_what_cubecl_cannot_time() {
    let cases: [(&[&str], &str); 2] = [
        (&["kernel-times", "--device", "flex"], "flex is not a cube device"),
        (
            &["kernel-times", "--device", "wgpu:0", "--matmul", "cublas"],
            "--matmul cublas: cuBLAS's products are not CubeCL kernels",
        ),
    ];
    for (args, says) in cases {
        let (code, stderr) = bench(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says) && stderr.contains("usage: switchyard-bench"), "{stderr}");
    }
}

/// `--without` names a matmul choice, and one that is none ends the bench before it starts,
/// listing the choices.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[test]
fn without_takes_only_a_matmul_choice() {
    let (code, stderr) = bench(&["3", "--without", "fast"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--without: no matmul routine `fast`"), "{stderr}");
    assert!(stderr.contains("cublas, cublas-queued"), "{stderr}");
    assert!(stderr.contains("usage: switchyard-bench [REPS]"), "{stderr}");
    let (code, stderr) = bench(&["3", "--gpus-only", "--without"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--without takes a value"), "{stderr}");
}
