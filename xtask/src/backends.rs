//! `cargo xtask test-all-backends`: the workspace's tests, then the conformance suite and the
//! real-model test on each backend, one process per backend so a failure is attributed to it.

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};

/// The dispatch features that `test-all-backends` compiles in together.
const FEATURES: &str = "switchyard-dispatch/ndarray,switchyard-dispatch/capture";

/// The same, with LibTorch: a second build, made only where LibTorch is present.
const TCH_FEATURES: &str =
    "switchyard-dispatch/ndarray,switchyard-dispatch/capture,switchyard-dispatch/tch";

/// How a backend's row runs.
enum Run {
    /// In the workspace build.
    Workspace,
    /// In the LibTorch build, when `cargo xtask fetch-libtorch` has assembled LibTorch.
    LibTorch,
    /// Not at all, for this reason.
    Skip(&'static str),
}

/// A backend of the design and whether this workspace can run it here.
struct Row {
    backend: &'static str,
    device: &'static str,
    run: Run,
}

const ROWS: [Row; 6] = [
    Row { backend: "flex", device: "flex", run: Run::Workspace },
    Row { backend: "ndarray", device: "ndarray", run: Run::Workspace },
    Row { backend: "capture", device: "capture", run: Run::Workspace },
    Row {
        backend: "cube",
        device: "cuda, rocm, wgpu, vulkan, metal, webgpu, cpu",
        run: Run::Skip("not built yet: switchyard-cube does not exist in this version"),
    },
    Row { backend: "tch", device: "tch:cpu", run: Run::LibTorch },
    Row {
        backend: "remote",
        device: "remote:HOST:PORT",
        run: Run::Skip("not built yet: switchyard-remote does not exist in this version"),
    },
];

/// Runs dispatch's per-device tests on `device` with `features`, exactly the workspace run's
/// cargo arguments otherwise so nothing rebuilds (any other selection of packages or targets
/// may resolve features differently); the name filters pick dispatch's two per-device tests,
/// plus `extra` tests of the backend's own crate.
fn device_tests(
    device: &str,
    features: &str,
    env: &[(String, String)],
    extra: &[&str],
) -> (bool, Counts) {
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("SWITCHYARD_CONFORMANCE_DEVICE", device));
    let mut args = vec![
        "test",
        "--workspace",
        "--features",
        features,
        "--",
        "conformance_through_dispatch",
        "minilm_matches_sentence_transformers_on_each_device",
    ];
    args.extend(extra);
    cargo_test(&args, &env)
}

/// Test counts from cargo's `test result:` lines.
#[derive(Default, Clone, Copy)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
        self.ignored += o.ignored;
    }
}

/// Runs `cargo ARGS`, passing its output through, and counts the tests it reports.
fn cargo_test(args: &[&str], env: &[(&str, &str)]) -> (bool, Counts) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let child =
        Command::new(cargo).args(args).envs(env.iter().copied()).stdout(Stdio::piped()).spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xtask: could not start cargo: {e}");
            return (false, Counts::default());
        }
    };
    let mut counts = Counts::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            if let Some(c) = parse_result(&line) {
                counts.add(c);
            }
        }
    }
    let ok = child.wait().map(|s| s.success()).unwrap_or(false);
    (ok, counts)
}

/// Parses `test result: ok. 3 passed; 0 failed; 1 ignored; ...`.
fn parse_result(line: &str) -> Option<Counts> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let mut c = Counts::default();
    for part in rest.split([';', '.']) {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else { continue };
        let Ok(n) = n.parse::<u64>() else { continue };
        match what {
            "passed" => c.passed = n,
            "failed" => c.failed = n,
            "ignored" => c.ignored = n,
            _ => {}
        }
    }
    Some(c)
}

/// The task: exits non-zero if any test or any runnable backend failed.
pub fn test_all() -> ExitCode {
    if crate::models::fetch_models() != ExitCode::SUCCESS {
        eprintln!("xtask: the real models could not be fetched; the model tests need them");
        return ExitCode::FAILURE;
    }
    let mut total = Counts::default();
    eprintln!("xtask: the workspace's tests, dispatch with every CPU backend compiled in");
    let (workspace_ok, c) = cargo_test(&["test", "--workspace", "--features", FEATURES], &[]);
    total.add(c);

    let mut table = Vec::new();
    let mut all_ok = workspace_ok;
    for row in ROWS {
        let ran = match row.run {
            Run::Skip(why) => Err(format!("skipped: {why}")),
            Run::Workspace => {
                eprintln!("xtask: conformance and model tests on `{}`", row.device);
                Ok(device_tests(row.device, FEATURES, &[], &[]))
            }
            Run::LibTorch => {
                let dir = crate::libtorch::dir();
                if crate::libtorch::present(&dir) {
                    eprintln!("xtask: conformance and model tests on `{}` (LibTorch)", row.device);
                    let env = crate::libtorch::env(&dir);
                    let own = ["caps_report_libtorch", "a_cuda_device_libtorch_cannot_see"];
                    Ok(device_tests(row.device, TCH_FEATURES, &env, &own))
                } else {
                    Err(format!(
                        "skipped: LibTorch 2.9.0 is not in {}; run `cargo xtask fetch-libtorch`",
                        dir.display()
                    ))
                }
            }
        };
        let result = match ran {
            Err(skipped) => skipped,
            Ok((ok, c)) => {
                total.add(c);
                // A filter that matches nothing would pass vacuously: that is a failure too.
                let ran = c.passed > 0;
                all_ok &= ok && ran;
                match (ok, ran) {
                    (true, true) => format!("passed ({} tests)", c.passed),
                    (true, false) => "FAILED (no test ran)".to_owned(),
                    (false, _) => format!("FAILED ({} failed)", c.failed.max(1)),
                }
            }
        };
        table.push((row.backend, row.device, result));
    }

    println!();
    println!("{:<9} {:<45} result", "backend", "device");
    for (b, d, r) in &table {
        println!("{b:<9} {d:<45} {r}");
    }
    println!(
        "{:<9} {:<45} {}",
        "workspace",
        "(every crate's tests)",
        if workspace_ok { "passed" } else { "FAILED" }
    );
    println!();
    println!(
        "test-all-backends: {} passed, {} failed, {} skipped",
        total.passed, total.failed, total.ignored
    );
    if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cargo_test_summaries() {
        let c = parse_result("test result: ok. 12 passed; 1 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.21s").unwrap();
        assert_eq!((c.passed, c.failed, c.ignored), (12, 1, 3));
        assert!(parse_result("running 3 tests").is_none());
    }
}
