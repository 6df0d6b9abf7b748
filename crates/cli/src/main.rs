//! `switchyard`: run transformer encoders from Hugging Face checkpoints on any compiled-in device.

// A command-line tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod input;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use switchyard_core::{Backend, Bucket, Buckets};
use switchyard_dispatch::{Device, Dispatch, FORMS};
use switchyard_models::{Embedder, Model, Task};

/// Run transformer encoders (sentence embedders and more) from Hugging Face checkpoints.
#[derive(Parser)]
#[command(name = "switchyard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Embed texts: one JSON line per input, in input order.
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
    /// Classify texts with a sequence classifier: one JSON line per input, in input order.
    Classify {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
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
        /// The checkpoint directory.
        #[arg(long)]
        model: PathBuf,
        /// The bucket to lower for, as TOKENS,SEQS,MARKERS (default: one sequence of the
        /// model's maximum length).
        #[arg(long)]
        bucket: Option<String>,
        /// Print the plan as JSON for tools.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct ModelArgs {
    /// The checkpoint directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    model: PathBuf,
    /// The device to run on (default: $SWITCHYARD_DEVICE, else flex).
    #[arg(long, long_help = format!("The device to run on (default: $SWITCHYARD_DEVICE, else flex). One of: {FORMS}"))]
    device: Option<String>,
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

fn load(path: &Path) -> Result<Model> {
    Model::load(path).with_context(|| format!("loading the model in {}", path.display()))
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
        Command::Classify { model, input } => classify(&model, &input),
        Command::Rerank { model, query, input } => rerank(&model, &query, &input),
        Command::Tokenize { model, input } => tokenize(&model, &input),
        Command::Devices => devices(),
        Command::Inspect { model, bucket, json } => inspect(&model, bucket.as_deref(), json),
    }
}

/// The embeddings of the inputs, in order, with a progress line for file input on a terminal.
fn embeddings(
    args: &ModelArgs,
    input: &InputArgs,
    buckets: Option<&Path>,
) -> Result<(Vec<String>, Vec<Vec<f32>>)> {
    let texts = input.read()?;
    let device = device(args.device.as_deref())?;
    let backend = Dispatch::new(&device)?;
    let buckets = match buckets {
        Some(p) => Buckets::from_file(p)?,
        None => Buckets::default(),
    };
    let model = load(&args.model)?;
    let mut embedder = Embedder::new(model, backend, buckets)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let bar = Progress::new(texts.len(), input.input.is_some());
    let rows = embedder.embed(&refs, |done| bar.show(done))?;
    bar.finish();
    Ok((texts, rows))
}

fn embed(args: &ModelArgs, input: &InputArgs, buckets: Option<&Path>) -> Result<()> {
    let (texts, rows) = embeddings(args, input, buckets)?;
    let mut out = std::io::stdout().lock();
    for (text, row) in texts.iter().zip(rows) {
        let line = serde_json::json!({ "text": text, "embedding": row });
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn similarity(args: &ModelArgs, input: &InputArgs) -> Result<()> {
    let (texts, rows) = embeddings(args, input, None)?;
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

/// A runner for `args`' model on its device, with the built-in buckets.
fn runner(args: &ModelArgs) -> Result<Embedder<Dispatch>> {
    let backend = Dispatch::new(&device(args.device.as_deref())?)?;
    Ok(Embedder::new(load(&args.model)?, backend, Buckets::default())?)
}

fn labels(e: &Embedder<Dispatch>) -> Vec<String> {
    match e.model().task() {
        Task::Classify { labels } => labels.clone(),
        Task::Embed(_) => Vec::new(),
    }
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

fn classify(args: &ModelArgs, input: &InputArgs) -> Result<()> {
    let texts = input.read()?;
    let mut run = runner(args)?;
    let labels = labels(&run);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let bar = Progress::new(texts.len(), input.input.is_some());
    let rows = run.classify(&refs, |done| bar.show(done))?;
    bar.finish();
    let mut out = std::io::stdout().lock();
    for (text, logits) in texts.iter().zip(rows) {
        // One label: a sigmoid score, as sentence-transformers reports it; several: softmax.
        let probs = if logits.len() == 1 { vec![sigmoid(logits[0])] } else { softmax(&logits) };
        let best = probs.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
        let line = serde_json::json!({
            "text": text, "label": labels[best], "score": probs[best], "logits": logits, "labels": labels,
        });
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn rerank(args: &ModelArgs, query: &str, input: &InputArgs) -> Result<()> {
    let docs = input.read()?;
    let mut run = runner(args)?;
    if labels(&run).len() != 1 {
        bail!(
            "rerank needs a cross-encoder with one output label; this model has {:?}",
            labels(&run)
        );
    }
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let bar = Progress::new(docs.len(), input.input.is_some());
    let rows = run.classify_pairs(query, &refs, |done| bar.show(done))?;
    bar.finish();
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
        let status = if d.compiled() {
            let caps = Dispatch::new(&d)?.caps();
            match caps.kind {
                switchyard_core::DeviceKind::Virtual => {
                    "available (records plans, executes nothing)".to_owned()
                }
                _ => format!(
                    "available ({} backend on {}, {} threads)",
                    caps.backend, caps.device, caps.threads
                ),
            }
        } else if switchyard_dispatch::FEATURES.contains(&feature) {
            format!("not in this build: rebuild with the cargo feature `{feature}`")
        } else {
            format!("not built yet: this version has no `{feature}` backend")
        };
        println!("{name:<18} {status}");
    }
    println!("\ndefault: {} (set SWITCHYARD_DEVICE or --device to change)", Device::from_env()?);
    Ok(())
}

#[cfg(feature = "capture")]
fn inspect(model: &Path, bucket: Option<&str>, json: bool) -> Result<()> {
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
        println!("{} ({:.1} MB of weights)", model.display(), cap.weight_bytes(&w) as f64 / 1e6);
        print!("{}", plan.record().table());
    }
    Ok(())
}

#[cfg(not(feature = "capture"))]
fn inspect(_: &Path, _: Option<&str>, _: bool) -> Result<()> {
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
