//! One module per command, and what they share: the device, the model's runner, progress.

mod classify;
mod devices;
mod embed;
mod inspect;
#[cfg(any(feature = "serve", feature = "remote"))]
mod logs;
mod remote_serve;
mod rerank;
mod serve;
mod similarity;
mod tokenize;
#[cfg(feature = "train")]
mod train;

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use switchyard::{Buckets, Device, Dispatch, Options, Runner};

use crate::args::{Cli, Command, InputArgs, ModelArgs, NO_INPUT};
use crate::progress::Progress;
use switchyard::input::Inputs;

/// Runs the command the command line asks for.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Embed { model, input, prompt, buckets, truncate_dim } => {
            embed::run(&model, &input, &prompt, buckets.as_deref(), truncate_dim)
        }
        Command::Similarity { model, input, prompt } => similarity::run(&model, &input, &prompt),
        Command::Classify { model, input, prompt, every_token } => {
            classify::run(&model, &input, &prompt, every_token)
        }
        Command::Rerank { model, query, input, prompt } => {
            rerank::run(&model, &query, &input, &prompt)
        }
        Command::Tokenize { model, input, prompt } => tokenize::run(&model, &input, &prompt),
        Command::Devices => devices::run(),
        Command::Inspect { model, bucket, json } => inspect::run(&model, bucket.as_deref(), json),
        Command::Serve(args) => serve::run(&args),
        #[cfg(feature = "train")]
        Command::Train(args) => train::run(&args),
        #[cfg(feature = "train")]
        Command::Explain(args) => train::explain(&args),
        Command::RemoteServe(args) => remote_serve::run(&device(args.device.as_deref())?, &args),
    }
}

/// The device `--device` names, else `SWITCHYARD_DEVICE`'s, else flex.
fn device(arg: Option<&str>) -> Result<Device> {
    Ok(match arg {
        Some(d) => d.parse()?,
        None => Device::from_env()?,
    })
}

/// Says on stderr when a model argument names a local directory that reads as a Hugging Face
/// repository id too, so nobody mistakes which one ran.
fn say_source(model: &str) {
    if switchyard::shadows_hub(model) {
        eprintln!(
            "switchyard: using the local directory {model}, not the Hugging Face repository of \
             that name (write ./{model} to say so, or move the directory to use the Hub)"
        );
    }
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
        max_len: None,
    };
    say_source(&args.model);
    switchyard::open_runner(&args.model, &options)
        .with_context(|| format!("loading {}", switchyard::describe(&args.model)))
}

/// Runs `f` over the inputs with a progress line for file input on a terminal.
fn with_progress<T>(
    input: &InputArgs,
    texts: &[String],
    f: impl FnOnce(&[&str], &mut dyn FnMut(usize)) -> switchyard::models::Result<T>,
) -> Result<T> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let bar = Progress::new(Some(texts.len()), input.file().is_some());
    let out = f(&refs, &mut |done| bar.show(done))?;
    bar.finish();
    Ok(out)
}

/// The inputs, opened before the model loads so that a wrong path fails first; an error if no
/// texts are given at all, or the file or stream given is empty.
fn open_inputs(input: &InputArgs) -> Result<Inputs> {
    let mut inputs = input.inputs()?;
    if inputs.at_end()? {
        bail!("{NO_INPUT}");
    }
    Ok(inputs)
}

/// `value` as one line of JSON. Serialized directly, not through `serde_json::Value`, so that an
/// f32 prints as the shortest decimal that reads back as the same f32 (as the HTTP server's
/// answers do), not as the longer decimal of its f64 widening.
fn json_line(value: &impl serde::Serialize) -> Result<String> {
    Ok(serde_json::to_string(value)?)
}

/// Prints the JSON lines `f` makes of the inputs, a chunk at a time, before reading the next
/// chunk: memory holds one chunk, not the file, and results appear as they come. A progress
/// line shows for file input on a terminal.
fn streamed(
    input: &InputArgs,
    mut inputs: Inputs,
    mut f: impl FnMut(&[&str], &mut dyn FnMut(usize)) -> Result<Vec<String>>,
) -> Result<()> {
    let bar = Progress::new(None, input.file().is_some());
    // Written a chunk at a time: stdout alone would write each line separately.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut done = 0;
    while let Some(texts) = inputs.next_chunk()? {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        for line in f(&refs, &mut |d| bar.show(done + d))? {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        done += texts.len();
    }
    bar.finish();
    if done == 0 {
        bail!("{NO_INPUT}");
    }
    Ok(())
}
