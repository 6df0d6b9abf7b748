//! `switchyard`: run transformer encoders from Hugging Face checkpoints on any compiled-in device.

// A command-line tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod args;
mod commands;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match commands::run(args::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each said once: a cause whose text an error's own
/// message already holds (`path: os error` over the OS error) is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string().replace('\n', " ");
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    #[test]
    fn each_cause_is_said_once_on_one_line() {
        let os = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let io = switchyard::core::Error::Io { path: "/m/config.json".into(), source: os };
        let e = Err::<(), _>(io).context("loading the model /m\nagain").unwrap_err();
        assert_eq!(super::one_line(&e), "loading the model /m again: /m/config.json: denied");
    }
}
