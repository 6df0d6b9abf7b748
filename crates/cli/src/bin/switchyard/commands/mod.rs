//! One module per command, and what they share: the device, the model's runner, progress.

mod classify;
mod devices;
mod embed;
mod inspect;
mod remote_serve;
mod rerank;
mod similarity;
mod tokenize;

use std::path::Path;

use anyhow::{Context, Result};
use switchyard::{Buckets, Device, Dispatch, Options, Runner};

use crate::args::{Cli, Command, InputArgs, ModelArgs};
use crate::progress::Progress;

/// Runs the command the command line asks for.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Embed { model, input, buckets } => embed::run(&model, &input, buckets.as_deref()),
        Command::Similarity { model, input } => similarity::run(&model, &input),
        Command::Classify { model, input, every_token } => {
            classify::run(&model, &input, every_token)
        }
        Command::Rerank { model, query, input } => rerank::run(&model, &query, &input),
        Command::Tokenize { model, input } => tokenize::run(&model, &input),
        Command::Devices => devices::run(),
        Command::Inspect { model, bucket, json } => inspect::run(&model, bucket.as_deref(), json),
        Command::RemoteServe { device: d, listen, public } => {
            remote_serve::run(&device(d.as_deref())?, &listen, public)
        }
    }
}

/// The device `--device` names, else `SWITCHYARD_DEVICE`'s, else flex.
fn device(arg: Option<&str>) -> Result<Device> {
    Ok(match arg {
        Some(d) => d.parse()?,
        None => Device::from_env()?,
    })
}

/// The runner for `args`' model on its device, with `buckets` (default: the built-in table).
fn runner(args: &ModelArgs, buckets: Option<&Path>) -> Result<Runner<Dispatch>> {
    let options = Options {
        device: device(args.device.as_deref())?,
        dtype: args.dtype,
        buckets: match buckets {
            Some(p) => Buckets::from_file(p)?,
            None => Buckets::default(),
        },
        threads: args.threads,
    };
    switchyard::open_runner(&args.model, &options)
        .with_context(|| format!("loading the model {}", args.model))
}

/// Runs `f` over the inputs with a progress line for file input on a terminal.
fn with_progress<T>(
    input: &InputArgs,
    texts: &[String],
    f: impl FnOnce(&[&str], &mut dyn FnMut(usize)) -> switchyard::models::Result<T>,
) -> Result<T> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let bar = Progress::new(texts.len(), input.input.is_some());
    let out = f(&refs, &mut |done| bar.show(done))?;
    bar.finish();
    Ok(out)
}
