//! `switchyard`: run transformer encoders from Hugging Face checkpoints on any compiled-in device.

// A command-line tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod args;
mod commands;
mod input;
mod progress;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match commands::run(args::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: {e:#}");
            ExitCode::FAILURE
        }
    }
}
