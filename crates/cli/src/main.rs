//! `switchyard`: run transformer encoders from Hugging Face checkpoints on any compiled-in device.

// A command-line tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod hub;
mod input;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use switchyard_core::{Backend, Bucket, Buckets, DType};
use switchyard_dispatch::{Device, Dispatch, FORMS};
use switchyard_models::{Marking, Model, Runner, Task};

/// Run transformer encoders (sentence embedders and more) from Hugging Face checkpoints.
#[derive(Parser)]
#[command(name = "switchyard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Embed texts: one JSON line per input, in input order (dense embeddings, or SPLADE term
    /// weights for a sparse encoder).
    Embed {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
        /// A bucket table file (STAGE TOKENS SEQS MARKERS per line) instead of the built-in one.
        #[arg(long)]
        buckets: Option<PathBuf>,
    },
    /// Embed texts and print the cosine similarity of every pair, most similar first.
    Similarity {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
    },
    /// Classify texts (a sequence classifier), or label their words (a token classifier): one
    /// JSON line per input, in input order.
    Classify {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
        /// With a token classifier, label every token rather than each word's first sub-token.
        #[arg(long)]
        every_token: bool,
    },
    /// Rank documents against a query with a cross-encoder: JSON lines, best first.
    Rerank {
        #[command(flatten)]
        model: ModelArgs,
        /// The query.
        #[arg(long)]
        query: String,
        /// The documents (arguments, or --input).
        #[command(flatten)]
        input: InputArgs,
    },
    /// Show how texts tokenize: ids and tokens, one JSON line per input.
    Tokenize {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
    },
    /// List the devices: which this build has, and which need another build.
    Devices,
    /// Show the plan a model lowers to (an EXPLAIN): ops, shapes, FLOPs, bytes, arena.
    Inspect {
        /// The checkpoint directory, or a Hugging Face repository id (OWNER/NAME or
        /// OWNER/NAME@REV).
        #[arg(long)]
        model: String,
        /// The bucket to lower for, as TOKENS,SEQS,MARKERS (default: one sequence of the
        /// model's maximum length).
        #[arg(long)]
        bucket: Option<String>,
        /// Print the plan as JSON for tools.
        #[arg(long)]
        json: bool,
    },
    /// Serve a device of this machine to clients elsewhere, which name it `remote:HOST:PORT`.
    /// The transport is unencrypted: see docs/remote.md before serving beyond loopback.
    RemoteServe {
        /// The device to serve: flex, ndarray, wgpu:N, vulkan:N or cuda:N (default:
        /// $SWITCHYARD_DEVICE, else flex).
        #[arg(long)]
        device: Option<String>,
        /// The address to listen on (port 0: any free port, printed at start).
        #[arg(long, default_value = "127.0.0.1:7878")]
        listen: String,
        /// Allow an address other than loopback, accepting that the transport is unencrypted
        /// and that a token ($SWITCHYARD_REMOTE_TOKEN) is all that keeps other clients out.
        #[arg(long)]
        public: bool,
    },
}

#[derive(clap::Args)]
struct ModelArgs {
    /// The checkpoint directory (config.json, model.safetensors, tokenizer.json), or a Hugging
    /// Face repository id (OWNER/NAME, or OWNER/NAME@REVISION) fetched into the Hugging Face
    /// cache.
    #[arg(long)]
    model: String,
    /// The device to run on (default: $SWITCHYARD_DEVICE, else flex).
    #[arg(long, long_help = format!("The device to run on (default: $SWITCHYARD_DEVICE, else flex). One of: {FORMS}"))]
    device: Option<String>,
    /// The dtype to store weights and compute in: f32, or f16 or bf16 where the device supports
    /// them (`switchyard devices` lists them).
    #[arg(long, default_value = "f32")]
    dtype: DType,
}

#[derive(clap::Args)]
struct InputArgs {
    /// Texts to process.
    texts: Vec<String>,
    /// Read inputs from a file (`-` for stdin): plain lines, or JSON lines with a `text` field.
    #[arg(long, conflicts_with = "texts")]
    input: Option<PathBuf>,
}

impl InputArgs {
    fn read(&self) -> Result<Vec<String>> {
        let texts = match &self.input {
            Some(path) => input::read(path)?,
            None => self.texts.clone(),
        };
        if texts.is_empty() {
            bail!("no input: give texts as arguments, or --input FILE (- for stdin)");
        }
        Ok(texts)
    }
}

fn device(arg: Option<&str>) -> Result<Device> {
    Ok(match arg {
        Some(d) => d.parse()?,
        None => Device::from_env()?,
    })
}

fn load(arg: &str) -> Result<Model> {
    let path = hub::resolve(arg)?;
    Model::load(&path).with_context(|| format!("loading the model in {}", path.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Embed { model, input, buckets } => embed(&model, &input, buckets.as_deref()),
        Command::Similarity { model, input } => similarity(&model, &input),
        Command::Classify { model, input, every_token } => {
            let marking = if every_token { Marking::EveryToken } else { Marking::FirstSubToken };
            classify(&model, &input, marking)
        }
        Command::Rerank { model, query, input } => rerank(&model, &query, &input),
        Command::Tokenize { model, input } => tokenize(&model, &input),
        Command::Devices => devices(),
        Command::Inspect { model, bucket, json } => inspect(&model, bucket.as_deref(), json),
        Command::RemoteServe { device: d, listen, public } => {
            remote_serve(&device(d.as_deref())?, &listen, public)
        }
    }
}

/// A runner for `args`' model on its device, with `buckets` (default: the built-in table).
fn runner(args: &ModelArgs, buckets: Option<&Path>) -> Result<Runner<Dispatch>> {
    let backend = Dispatch::new(&device(args.device.as_deref())?)?.with_dtype(args.dtype)?;
    let buckets = match buckets {
        Some(p) => Buckets::from_file(p)?,
        None => Buckets::default(),
    };
    Ok(Runner::new(load(&args.model)?, backend, buckets)?)
}

/// Runs `f` over the inputs with a progress line for file input on a terminal.
fn with_progress<T>(
    input: &InputArgs,
    texts: &[String],
    f: impl FnOnce(&[&str], &mut dyn FnMut(usize)) -> switchyard_models::Result<T>,
) -> Result<T> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let bar = Progress::new(texts.len(), input.input.is_some());
    let out = f(&refs, &mut |done| bar.show(done))?;
    bar.finish();
    Ok(out)
}

fn embed(args: &ModelArgs, input: &InputArgs, buckets: Option<&Path>) -> Result<()> {
    let texts = input.read()?;
    let mut run = runner(args, buckets)?;
    let mut out = std::io::stdout().lock();
    if *run.model().task() == Task::Sparse {
        let rows = with_progress(input, &texts, |t, p| run.sparse(t, p))?;
        let tokens = run.model().tokens();
        for (text, terms) in texts.iter().zip(rows) {
            let terms: Vec<serde_json::Value> = terms
                .iter()
                .map(|&(id, weight)| {
                    serde_json::json!({ "id": id, "token": tokens.token(id), "weight": weight })
                })
                .collect();
            writeln!(out, "{}", serde_json::json!({ "text": text, "sparse": terms }))?;
        }
        return Ok(());
    }
    let rows = with_progress(input, &texts, |t, p| run.embed(t, p))?;
    for (text, row) in texts.iter().zip(rows) {
        let line = serde_json::json!({ "text": text, "embedding": row });
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn similarity(args: &ModelArgs, input: &InputArgs) -> Result<()> {
    let texts = input.read()?;
    let mut run = runner(args, None)?;
    let rows = with_progress(input, &texts, |t, p| run.embed(t, p))?;
    if texts.len() < 2 {
        bail!("similarity needs at least two texts");
    }
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    let mut pairs = Vec::new();
    for i in 0..rows.len() {
        for j in i + 1..rows.len() {
            let dot: f32 = rows[i].iter().zip(&rows[j]).map(|(a, b)| a * b).sum();
            pairs.push((dot / (norm(&rows[i]) * norm(&rows[j])), i, j));
        }
    }
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut out = std::io::stdout().lock();
    for (c, i, j) in pairs {
        writeln!(out, "{c:.4}  {:?}  {:?}", texts[i], texts[j])?;
    }
    Ok(())
}

fn softmax(x: &[f32]) -> Vec<f32> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|v| (v - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The index and probability of the most likely label.
fn best(probs: &[f32]) -> (usize, f32) {
    probs.iter().copied().enumerate().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((0, 0.0))
}

fn classify(args: &ModelArgs, input: &InputArgs, marking: Marking) -> Result<()> {
    let texts = input.read()?;
    let mut run = runner(args, None)?;
    let labels = run.model().task().labels().to_vec();
    let mut out = std::io::stdout().lock();
    if matches!(run.model().task(), Task::ClassifyTokens { .. }) {
        let rows = with_progress(input, &texts, |t, p| run.classify_tokens(t, marking, p))?;
        for (text, tokens) in texts.iter().zip(rows) {
            let tokens: Vec<serde_json::Value> = tokens
                .iter()
                .map(|t| {
                    let (i, score) = best(&softmax(&t.logits));
                    serde_json::json!({
                        "text": text.get(t.span.0..t.span.1), "start": t.span.0, "end": t.span.1,
                        "label": labels[i], "score": score,
                    })
                })
                .collect();
            writeln!(out, "{}", serde_json::json!({ "text": text, "tokens": tokens }))?;
        }
        return Ok(());
    }
    let rows = with_progress(input, &texts, |t, p| run.classify(t, p))?;
    for (text, logits) in texts.iter().zip(rows) {
        // One label: a sigmoid score, as sentence-transformers reports it; several: softmax.
        let probs = if logits.len() == 1 { vec![sigmoid(logits[0])] } else { softmax(&logits) };
        let (i, score) = best(&probs);
        let line = serde_json::json!({
            "text": text, "label": labels[i], "score": score, "logits": logits, "labels": labels,
        });
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn rerank(args: &ModelArgs, query: &str, input: &InputArgs) -> Result<()> {
    let docs = input.read()?;
    let mut run = runner(args, None)?;
    let task = run.model().task();
    if !matches!(task, Task::Classify { labels } if labels.len() == 1) {
        bail!(
            "rerank needs a cross-encoder (a sequence classifier with one label); this model is \
             {} with labels {:?}",
            task.describe(),
            task.labels()
        );
    }
    let rows = with_progress(input, &docs, |t, p| run.classify_pairs(query, t, p))?;
    let mut ranked: Vec<(usize, f32)> = rows.iter().map(|r| r[0]).enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut out = std::io::stdout().lock();
    for (index, logit) in ranked {
        let line = serde_json::json!({ "index": index, "document": docs[index], "score": sigmoid(logit), "logit": logit });
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn tokenize(args: &ModelArgs, input: &InputArgs) -> Result<()> {
    let texts = input.read()?;
    let model = load(&args.model)?;
    let mut out = std::io::stdout().lock();
    for text in &texts {
        let e = model.tokens().encode(text)?;
        let line =
            serde_json::json!({ "text": text, "ids": e.ids, "tokens": e.tokens, "types": e.types });
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn devices() -> Result<()> {
    let all = [
        ("flex", Device::Flex),
        ("ndarray", Device::NdArray),
        ("cpu", Device::Cpu),
        ("cuda:N", Device::Cuda(0)),
        ("rocm:N", Device::Rocm(0)),
        ("vulkan:N", Device::Vulkan(0)),
        ("wgpu:N", Device::Wgpu(0)),
        ("metal:N", Device::Metal(0)),
        ("webgpu", Device::WebGpu),
        ("tch:cpu", Device::TchCpu),
        ("tch:cuda:N", Device::TchCuda(0)),
        ("remote:HOST:PORT", Device::Remote { host: "HOST".into(), port: 0 }),
        ("capture", Device::Capture),
    ];
    println!("{:<18} status", "device");
    for (name, d) in all {
        let feature = d.feature();
        let status = if d.compiled() && matches!(d, Device::Remote { .. }) {
            "in this build: name a server as remote:HOST:PORT (see `switchyard remote-serve`)"
                .to_owned()
        } else if d.compiled() {
            // Compiled in is not the same as present: a device this machine lacks says why.
            match Dispatch::new(&d).map(|b| b.caps()) {
                Err(e) => format!("in this build, not usable here: {e}"),
                Ok(caps) if caps.kind == switchyard_core::DeviceKind::Virtual => {
                    "available (records plans, executes nothing)".to_owned()
                }
                Ok(caps) => {
                    let dtypes: Vec<&str> = caps.float_dtypes.iter().map(|d| d.name()).collect();
                    format!(
                        "available ({} backend on {}, {} threads, computes in {})",
                        caps.backend,
                        caps.device,
                        caps.threads,
                        dtypes.join("/")
                    )
                }
            }
        } else {
            format!("not in this build: rebuild with the cargo feature `{feature}`")
        };
        println!("{name:<18} {status}");
    }
    println!("\ndefault: {} (set SWITCHYARD_DEVICE or --device to change)", Device::from_env()?);
    Ok(())
}

#[cfg(feature = "capture")]
fn inspect(model: &str, bucket: Option<&str>, json: bool) -> Result<()> {
    let m = load(model)?;
    let bucket = match bucket {
        Some(b) => b.parse::<Bucket>()?,
        None => Bucket::new(m.tokens().max_len(), 1, 0),
    };
    let cap = switchyard_capture::Capture::new();
    let w = cap.upload(&m.tensors()?, m.graph())?;
    let plan = cap.lower(&w, m.graph(), bucket)?;
    if json {
        println!("{}", serde_json::to_string_pretty(plan.record())?);
    } else {
        println!("{model} ({:.1} MB of weights)", cap.weight_bytes(&w) as f64 / 1e6);
        print!("{}", plan.record().table());
    }
    Ok(())
}

#[cfg(feature = "remote")]
fn remote_serve(device: &Device, listen: &str, public: bool) -> Result<()> {
    let addr: std::net::SocketAddr = listen.parse().with_context(|| {
        format!("--listen `{listen}` is not an address with a port, such as 127.0.0.1:7878")
    })?;
    let token = std::env::var(switchyard_remote::TOKEN_ENV).ok().filter(|t| !t.is_empty());
    let server = switchyard_dispatch::server(device, token.as_deref())?;
    let listener = switchyard_remote::bind(addr, public)?;
    let bound = listener.local_addr()?;
    let reach = if bound.ip().is_loopback() {
        "loopback only: clients on this machine, or through an SSH tunnel"
    } else {
        "reachable from the network, unencrypted"
    };
    let token = if token.is_some() { "a token is required" } else { "no token required" };
    eprintln!(
        "switchyard: serving `{device}` on {bound} ({reach}; {token}); clients use --device {}",
        switchyard_remote::device_name(bound)
    );
    server.serve(listener)?;
    Ok(())
}

#[cfg(not(feature = "remote"))]
fn remote_serve(_: &Device, _: &str, _: bool) -> Result<()> {
    bail!(
        "remote-serve needs the remote backend: rebuild switchyard with the cargo feature `remote`"
    )
}

#[cfg(not(feature = "capture"))]
fn inspect(_: &str, _: Option<&str>, _: bool) -> Result<()> {
    bail!("inspect needs the capture backend: rebuild switchyard with the cargo feature `capture`")
}

/// A progress line on stderr, shown only for file input on a terminal.
struct Progress {
    total: usize,
    on: bool,
}

impl Progress {
    fn new(total: usize, from_file: bool) -> Self {
        Progress { total, on: from_file && std::io::stderr().is_terminal() }
    }

    fn show(&self, done: usize) {
        if self.on {
            let width = 30;
            let filled = (done * width).checked_div(self.total).unwrap_or(width);
            eprint!(
                "\r[{}{}] {done}/{}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                self.total
            );
        }
    }

    fn finish(&self) {
        if self.on {
            eprintln!();
        }
    }
}
