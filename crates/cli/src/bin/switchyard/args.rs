//! The command line: every command and flag, as clap parses them.

use std::io::IsTerminal;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use switchyard::dispatch::{FAMILIES, forms, forms_served};
use switchyard::{DType, DTypeChoice, Prompt};

use switchyard::input::{Format, Inputs};

/// Run transformer encoders (sentence embedders and more) from Hugging Face checkpoints.
#[derive(Parser)]
#[command(name = "switchyard", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Embed texts: one JSON line per input, in input order (dense embeddings, or SPLADE term
    /// weights for a sparse encoder).
    Embed {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        prompt: PromptArgs,
        /// A bucket table file (STAGE TOKENS SEQS MARKERS per line) instead of the built-in one.
        #[arg(long)]
        buckets: Option<PathBuf>,
        /// Keep each dense embedding's first N dimensions (a Matryoshka model's shorter
        /// embedding), as sentence-transformers' truncate_dim does: not normalised again.
        #[arg(long)]
        truncate_dim: Option<NonZeroUsize>,
    },
    /// Embed texts and print the similarity of every pair, most similar first (cosine, or the
    /// function the model's sentence-transformers configuration names: dot, euclidean,
    /// manhattan).
    Similarity {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        prompt: PromptArgs,
    },
    /// Classify texts (a sequence classifier), or label their words (a token classifier): one
    /// JSON line per input, in input order.
    Classify {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        prompt: PromptArgs,
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
        /// The documents (arguments, --input, or lines piped to stdin).
        #[command(flatten)]
        input: InputArgs,
        /// The prompt before the query.
        #[command(flatten)]
        prompt: PromptArgs,
    },
    /// Show how texts tokenize: ids and tokens, one JSON line per input (with the prompt the
    /// model puts before them).
    Tokenize {
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        input: InputArgs,
        #[command(flatten)]
        prompt: PromptArgs,
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
    /// Serve models over HTTP: text-embeddings-inference's routes and OpenAI's embeddings API,
    /// batching inputs across requests and devices (docs/server.md).
    Serve(Box<ServeArgs>),
    /// Fine-tune a model on JSON-lines records and write it as a Hugging Face directory that
    /// transformers and sentence-transformers load (docs/training.md).
    #[cfg(feature = "train")]
    Train(Box<TrainArgs>),
    /// Attribute an output to the input's tokens and words with integrated gradients: a
    /// classifier's label, a cross-encoder's score, an embedder's similarity of two texts.
    #[cfg(feature = "train")]
    Explain(ExplainArgs),
    /// Serve a device of this machine to clients elsewhere, which name it `remote:HOST:PORT`.
    /// The transport is unencrypted: see docs/remote.md before serving beyond loopback.
    RemoteServe(RemoteServeArgs),
}

/// `switchyard remote-serve`'s flags.
#[derive(clap::Args)]
pub struct RemoteServeArgs {
    /// The device to serve (default: $SWITCHYARD_DEVICE, else flex).
    #[arg(long, long_help = format!(
        "The device to serve (default: $SWITCHYARD_DEVICE, else flex): one of {}",
        forms_served(FAMILIES)
    ))]
    pub device: Option<String>,
    /// The address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub listen: String,
    /// Allow an address other than loopback, accepting that the transport is unencrypted
    /// and that a token ($SWITCHYARD_REMOTE_TOKEN) is all that keeps other clients out.
    #[arg(long)]
    pub public: bool,
    /// The most connections held at once; the next is answered 503 and closed.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// The largest message a session may send, in MiB: at least the largest weight tensor
    /// of the models its clients upload (all-MiniLM-L6-v2's is 45 MiB, bge-large's 120).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_message_mib: u32,
    /// Seconds from a connection's start until its session must be open (token presented).
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    pub handshake_timeout: f64,
    /// Seconds a session may be silent before it is closed (its client reopens it on its
    /// next call, uploading its weights again).
    #[arg(long, default_value_t = 900.0, value_parser = seconds)]
    pub idle_timeout: f64,
}

/// A positive, finite number of seconds.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e9 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number of seconds")),
    }
}

/// `switchyard serve`'s flags.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A model to serve: a checkpoint directory or a Hugging Face repository id, optionally
    /// named (NAME=PATH_OR_REPO; default name: the repository id, or the directory's name).
    /// Repeat for several models; requests pick one by name, and the first is the default.
    #[arg(long = "model", required = true)]
    pub models: Vec<String>,
    /// A device to run every model on (default: $SWITCHYARD_DEVICE, else flex). Repeat for
    /// several: each gets a replica of each model, and batches go to whichever is idle.
    #[arg(long = "device")]
    pub devices: Vec<String>,
    /// The dtype to store weights and compute in (as for `embed`).
    #[arg(long, default_value = "auto")]
    pub dtype: DTypeChoice,
    /// Threads for flex (default: $SWITCHYARD_THREADS, else every core).
    #[arg(long)]
    pub threads: Option<NonZeroUsize>,
    /// A bucket table file instead of the built-in one.
    #[arg(long)]
    pub buckets: Option<PathBuf>,
    /// The address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Allow an address other than loopback (then set --api-key, and put TLS in front).
    #[arg(long)]
    pub public: bool,
    /// Require `Authorization: Bearer KEY` on every route but /health (default:
    /// $SWITCHYARD_API_KEY, which keeps the key out of the process list).
    #[arg(long)]
    pub api_key: Option<String>,
    /// The most inputs one request may carry (413 past it).
    #[arg(long, default_value_t = 32)]
    pub max_client_batch_size: usize,
    /// The most requests queued or running at once (429 past it).
    #[arg(long, default_value_t = 512)]
    pub max_concurrent_requests: usize,
    /// The most tokens in one batch (default: the largest bucket the model's batches use).
    #[arg(long)]
    pub max_batch_tokens: Option<usize>,
    /// The most inputs in one batch (default: the largest bucket's sequences).
    #[arg(long)]
    pub max_batch_requests: Option<usize>,
    /// Truncate over-long inputs even when a request does not set `truncate`.
    #[arg(long)]
    pub auto_truncate: bool,
    /// Put the prompt of this name before the texts of requests that name none (default: each
    /// model's default prompt, where it names one). Every embedding model served must have it.
    #[arg(long)]
    pub default_prompt_name: Option<String>,
    /// Put this text before the texts of requests that name no prompt instead (`""` for none,
    /// even where a model has a default).
    #[arg(long, conflicts_with = "default_prompt_name")]
    pub default_prompt: Option<String>,
    /// The largest request body in bytes (413 past it).
    #[arg(long, default_value_t = 2_000_000)]
    pub payload_limit: usize,
    /// Seconds a request may take from arrival to answer (408 past it).
    #[arg(long, default_value_t = 300)]
    pub request_timeout: u64,
    /// An origin browsers may call the server from (`*` for any); repeat for several.
    #[arg(long = "cors-allow-origin")]
    pub cors_origins: Vec<String>,
    /// Log as JSON lines (default: text); RUST_LOG sets the level (default: info).
    #[arg(long)]
    pub json_logs: bool,
}

/// What `switchyard train` teaches a model.
#[cfg(feature = "train")]
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum TaskArg {
    /// An embedding model: `{"anchor", "positive", "negative"?}` records
    /// (MultipleNegativesRankingLoss) or `{"text", "text_pair", "score"}` (CoSENT).
    Embed,
    /// A sequence classifier or cross-encoder: `{"text", "text_pair"?, "label"}`.
    Classify,
    /// A token classifier: `{"words": [...], "labels": [...]}`.
    Tokens,
}

/// `switchyard train`'s flags; the defaults are sentence-transformers'.
#[cfg(feature = "train")]
#[derive(clap::Args)]
pub struct TrainArgs {
    /// The checkpoint to start from: a directory or a Hugging Face repository id.
    #[arg(long)]
    pub model: String,
    /// What to train it for.
    #[arg(long, value_enum)]
    pub task: TaskArg,
    /// The training records, one JSON object a line.
    #[arg(long)]
    pub data: PathBuf,
    /// Evaluation records of the same kind: evaluated before training and after each epoch
    /// (Spearman for scored pairs, top-1 retrieval accuracy for anchor-positive pairs, accuracy
    /// and macro-F1 for classifiers).
    #[arg(long)]
    pub eval: Option<PathBuf>,
    /// Where the trained model, `checkpoint-N/` folders and `training.json` go.
    #[arg(long)]
    pub out: PathBuf,
    /// Labels of a classifier head to create, for a model without one (comma-separated, in
    /// logit order).
    #[arg(long, value_delimiter = ',')]
    pub labels: Option<Vec<String>>,
    /// The device to train on (default: $SWITCHYARD_DEVICE, else flex): one whose backend runs
    /// on Burn (`switchyard devices` says which).
    #[arg(long)]
    pub device: Option<String>,
    /// The dtype to train in: f32 (the only one training supports yet).
    #[arg(long, default_value = "f32")]
    pub dtype: DType,
    /// Threads for flex (default: $SWITCHYARD_THREADS, else every core).
    #[arg(long)]
    pub threads: Option<NonZeroUsize>,
    /// Passes over the data.
    #[arg(long, default_value_t = switchyard::training::Settings::default().epochs)]
    pub epochs: usize,
    /// The peak learning rate.
    #[arg(long, default_value_t = switchyard::training::Settings::default().lr)]
    pub lr: f64,
    /// The share of steps warming the rate up from 0 (it then decays linearly to 0).
    #[arg(long, default_value_t = switchyard::training::Settings::default().warmup_ratio)]
    pub warmup_ratio: f64,
    /// AdamW's weight decay (not on biases and norm weights).
    #[arg(long, default_value_t = switchyard::training::Settings::default().adamw.weight_decay)]
    pub weight_decay: f64,
    /// Clip the gradients' joint L2 norm to this.
    #[arg(long, default_value_t = switchyard::training::Settings::default().max_grad_norm)]
    pub max_grad_norm: f64,
    /// The most records a batch holds (the in-batch negatives of an embedding model).
    #[arg(long, default_value_t = switchyard::training::Settings::default().batch_size)]
    pub batch_size: usize,
    /// The most tokens a batch holds (batches are ragged: no padding).
    #[arg(long, default_value_t = switchyard::training::Settings::default().batch_tokens)]
    pub batch_tokens: usize,
    /// Truncate inputs at this many tokens instead of the model's maximum.
    #[arg(long)]
    pub max_len: Option<usize>,
    /// Seeds the shuffle, dropout and a new head's weights.
    #[arg(long, default_value_t = switchyard::training::Settings::default().seed)]
    pub seed: u64,
    /// Keep the records in file order instead of shuffling them each epoch.
    #[arg(long)]
    pub no_shuffle: bool,
    /// Train without the model's dropout.
    #[arg(long)]
    pub no_dropout: bool,
    /// Save a checkpoint (`OUT/checkpoint-N/`) every this many steps.
    #[arg(long)]
    pub save_steps: Option<u64>,
    /// Continue from the latest checkpoint in --out (with the same data and flags).
    #[arg(long)]
    pub resume: bool,
}

/// `switchyard explain`'s flags.
#[cfg(feature = "train")]
#[derive(clap::Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A classifier's label to explain (name or index; default: the predicted one).
    #[arg(long)]
    pub label: Option<String>,
    /// The query: a cross-encoder's, scored against each text; or, for an embedding model,
    /// the text each input's similarity is explained with (else give exactly two texts).
    #[arg(long)]
    pub query: Option<String>,
    /// Points on the path from the baseline to the input (the error falls as 1 / steps²).
    #[arg(long, default_value_t = 50)]
    pub steps: usize,
    /// Print one readable line per explanation, the strongest words marked, instead of a JSON
    /// line with every token and word.
    #[arg(long)]
    pub readable: bool,
    /// With --readable, how many of the strongest words to mark.
    #[arg(long, default_value_t = 3)]
    pub top: usize,
    #[command(flatten)]
    pub prompt: PromptArgs,
    #[command(flatten)]
    pub input: InputArgs,
}

/// Which model, on which device, in which dtype.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// The checkpoint directory (config.json, model.safetensors, tokenizer.json), or a Hugging
    /// Face repository id (OWNER/NAME, or OWNER/NAME@REVISION) fetched into the Hugging Face
    /// cache.
    #[arg(long)]
    pub model: String,
    /// The device to run on (default: $SWITCHYARD_DEVICE, else flex).
    #[arg(long, long_help = format!(
        "The device to run on (default: $SWITCHYARD_DEVICE, else flex). One of: {}",
        forms()
    ))]
    pub device: Option<String>,
    /// The dtype to store weights and compute in: auto (the device's pick: f16 on a GPU with
    /// half-precision tensor cores, f32 elsewhere), f32, or f16, bf16 or int8 (linear layers
    /// quantized) where the device supports them (`switchyard devices` lists them).
    #[arg(long, default_value = "auto")]
    pub dtype: DTypeChoice,
    /// Threads for flex (default: $SWITCHYARD_THREADS, else every core); other devices refuse
    /// it.
    #[arg(long)]
    pub threads: Option<NonZeroUsize>,
}

/// Which prompt goes before each text (a cross-encoder's query): a sentence-transformers
/// model's own (config_sentence_transformers.json), or one given.
#[derive(clap::Args)]
pub struct PromptArgs {
    /// Put the model's prompt of this name before each text, or a cross-encoder's query (such
    /// as E5's `query` or `passage`). Default: the model's default prompt, where it names one.
    #[arg(long)]
    pub prompt_name: Option<String>,
    /// Put this text there instead (`--prompt ""` for none, even where the model has a
    /// default).
    #[arg(long, conflicts_with = "prompt_name")]
    pub prompt: Option<String>,
}

impl PromptArgs {
    /// The prompt these flags choose.
    pub fn choice(&self) -> Prompt<'_> {
        Prompt::choose(self.prompt_name.as_deref(), self.prompt.as_deref())
    }

    /// Whether a flag chose a prompt (rather than leaving the model's default).
    pub fn chosen(&self) -> bool {
        self.prompt_name.is_some() || self.prompt.is_some()
    }
}

/// The texts to process: arguments, a file, or lines piped to stdin.
#[derive(clap::Args)]
pub struct InputArgs {
    /// Texts to process; without them (and without --input), the lines piped to stdin.
    pub texts: Vec<String>,
    /// Read inputs from a file (`-` for stdin): plain lines, or JSON lines with a `text` field.
    #[arg(long, conflicts_with = "texts")]
    pub input: Option<PathBuf>,
    /// How the input file's (or stdin's) lines are read: auto (JSON lines if the first line is a
    /// JSON object, else plain text), jsonl, or text.
    #[arg(long, value_enum, default_value = "auto", conflicts_with = "texts")]
    pub format: Format,
}

impl InputArgs {
    /// The file the inputs are read from: --input, or stdin (`-`) where no texts are given and
    /// stdin is not a terminal (a pipe, or a file redirected to it); `None` for texts given as
    /// arguments, or none at all.
    pub fn file(&self) -> Option<&Path> {
        match &self.input {
            Some(path) => Some(path),
            None => {
                (self.texts.is_empty() && !std::io::stdin().is_terminal()).then(|| Path::new("-"))
            }
        }
    }

    /// The inputs, a chunk at a time.
    pub fn inputs(&self) -> Result<Inputs> {
        match self.file() {
            Some(path) => Ok(Inputs::open(path, self.format)?),
            None => Ok(Inputs::texts(self.texts.clone())),
        }
    }

    /// Every input; an error if there are none (see [`Inputs::next_chunk`] for the others).
    pub fn read(&self) -> Result<Vec<String>> {
        let texts = self.inputs()?.all()?;
        if texts.is_empty() {
            bail!("{NO_INPUT}");
        }
        Ok(texts)
    }
}

/// The error for a command given nothing to process.
pub const NO_INPUT: &str =
    "no input: give texts as arguments, --input FILE, or lines on stdin (a pipe or a file)";
