//! switchyard-models: a Hugging Face checkpoint directory to a Switchyard graph, its weights and
//! its tokenizer.
//!
//! [`Model::load`] reads `config.json`, memory-maps `model.safetensors` (or its shards), loads
//! `tokenizer.json` and the sentence-transformers files, and builds the [`Graph`] for the
//! architecture and head. A model builder never sees a backend: [`Embedder`] runs a model on any
//! [`Backend`] through an [`Executor`].
//!
//! Supported today: BERT-shaped encoders (BERT and its descendants such as MiniLM, BGE, E5 and
//! GTE; RoBERTa and XLM-RoBERTa; DistilBERT) with a pooled-embedding head (CLS, mean, max or last
//! token, optionally L2-normalised) or, for `*ForSequenceClassification` checkpoints, a sequence
//! classification head (classifiers, and cross-encoder rerankers on text pairs).

mod bert;
mod checkpoint;
pub mod config;
pub mod st;
mod tokenize;

use std::path::{Path, PathBuf};

use switchyard_core::{
    Act, Backend, BatchBuf, Buckets, Executor, Graph, HostTensor, LaneId, Op, Outputs, PoolMode,
    Shape,
};

pub use checkpoint::Checkpoint;
pub use config::{Arch, EncoderConfig};
pub use st::{Pooling, SentenceConfig};
pub use tokenize::{Encoded, Tokens};

/// The real model `name` as `cargo xtask fetch-models` puts it in this workspace
/// (`.cache/models/NAME`; the environment variable `SWITCHYARD_MODELS_DIR` overrides the
/// folder), or an error saying to fetch it. For tests and examples.
pub fn fetched_model_dir(name: &str) -> Result<PathBuf> {
    let root = std::env::var_os("SWITCHYARD_MODELS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/models"),
        PathBuf::from,
    );
    let dir = root.join(name);
    if dir.join("model.safetensors").is_file() {
        Ok(dir)
    } else {
        Err(Error::Format(format!(
            "{} is missing: run `cargo xtask fetch-models` first",
            dir.display()
        )))
    }
}

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file is missing or malformed.
    #[error("{0}")]
    Format(String),
    /// The checkpoint asks for something Switchyard does not support (yet).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The graph, a batch or the device failed.
    #[error(transparent)]
    Core(#[from] switchyard_core::Error),
}

/// The result type of switchyard-models.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a model's graph computes.
#[derive(Clone, Debug, PartialEq)]
pub enum Task {
    /// One embedding per sequence (output `embedding`).
    Embed(Pooling),
    /// Class logits per sequence (output `logits`): classifiers, and cross-encoder rerankers
    /// (one label) on text pairs.
    Classify {
        /// The label of each logit, from `id2label` (else `LABEL_i`).
        labels: Vec<String>,
    },
}

/// A loaded checkpoint: its graph, tokenizer and weights (memory-mapped).
pub struct Model {
    checkpoint: Checkpoint,
    graph: Graph,
    task: Task,
    tokens: Tokens,
    config: EncoderConfig,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("dir", &self.checkpoint.dir())
            .field("config", &self.config)
            .field("task", &self.task)
            .finish()
    }
}

impl Model {
    /// Loads the checkpoint directory `dir`.
    pub fn load(dir: &Path) -> Result<Model> {
        let checkpoint = Checkpoint::open(dir)?;
        let config = EncoderConfig::from_json(checkpoint.config())?;
        let sentence = st::read(dir)?;
        let position_limit = config.max_positions.saturating_sub(config.position_offset);
        let max_len = sentence.as_ref().and_then(|s| s.max_seq_length).unwrap_or(position_limit);
        if max_len > position_limit {
            return Err(Error::Format(format!(
                "max_seq_length {max_len} exceeds the model's {position_limit} positions"
            )));
        }
        let (mut enc, x) = bert::build(&checkpoint, config.clone())?;
        let d = config.hidden;
        let classifier = architectures(checkpoint.config())
            .iter()
            .any(|a| a.ends_with("ForSequenceClassification"));
        let task = if classifier {
            let labels = labels(&checkpoint)?;
            let n = labels.len();
            let cls = enc.g.op(Shape::seqs(d), |out| Op::Pool { x, mode: PoolMode::Cls, out });
            let logits = match config.arch {
                Arch::Bert => {
                    let h = enc.linear("pooler.dense", cls, d, Act::Tanh, None)?;
                    enc.head_linear("classifier", h, n, Act::Identity)?
                }
                Arch::Roberta => {
                    let h = enc.head_linear("classifier.dense", cls, d, Act::Tanh)?;
                    enc.head_linear("classifier.out_proj", h, n, Act::Identity)?
                }
                Arch::DistilBert => {
                    let h = enc.head_linear("pre_classifier", cls, d, Act::Relu)?;
                    enc.head_linear("classifier", h, n, Act::Identity)?
                }
            };
            enc.g.output("logits", logits);
            Task::Classify { labels }
        } else {
            let pooling =
                sentence.map_or(Pooling { mode: PoolMode::Mean, normalize: false }, |s| s.pooling);
            let pooled = enc.g.op(Shape::seqs(d), |out| Op::Pool { x, mode: pooling.mode, out });
            let emb = if pooling.normalize {
                enc.g.op(Shape::seqs(d), |out| Op::L2Norm { x: pooled, eps: 1e-12, out })
            } else {
                pooled
            };
            enc.g.output("embedding", emb);
            Task::Embed(pooling)
        };
        let graph = enc.g.finish()?;
        let tokens = Tokens::load(dir, max_len)?;
        Ok(Model { checkpoint, graph, task, tokens, config })
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// What the graph computes.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The tokenizer.
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// The encoder's configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// The weights the graph reads, in its order, borrowed from the mapped checkpoint.
    pub fn tensors(&self) -> Result<Vec<HostTensor<'_>>> {
        self.graph.weights.iter().map(|w| self.checkpoint.tensor(&w.name)).collect()
    }

    /// An executor for this model on `backend`, with `buckets` (stage `default`).
    pub fn executor<B: Backend>(&self, backend: B, buckets: Buckets) -> Result<Executor<B>> {
        let largest = buckets.stage(switchyard_core::DEFAULT_STAGE).last().copied();
        if let Some(b) = largest
            && b.tokens < self.tokens.max_len()
        {
            return Err(Error::Format(format!(
                "the largest bucket holds {} tokens, fewer than one sequence of the model's \
                 maximum length {}",
                b.tokens,
                self.tokens.max_len()
            )));
        }
        Ok(Executor::new(
            backend,
            &self.tensors()?,
            self.graph.clone(),
            switchyard_core::DEFAULT_STAGE,
            buckets,
        )?)
    }
}

/// `config.json`'s `architectures`.
fn architectures(c: &serde_json::Value) -> Vec<String> {
    c.get("architectures")
        .and_then(serde_json::Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The classifier's labels: as many as its output rows, named by `id2label` where it has them.
fn labels(ck: &Checkpoint) -> Result<Vec<String>> {
    let rows = ["classifier.weight", "classifier.out_proj.weight"]
        .iter()
        .find_map(|n| ck.shape(n))
        .and_then(|s| s.first().copied())
        .ok_or_else(|| {
            Error::Format(
                "a sequence classifier without `classifier.weight` or `classifier.out_proj.weight`"
                    .into(),
            )
        })?;
    let names = ck.config().get("id2label").and_then(serde_json::Value::as_object);
    Ok((0..rows)
        .map(|i| {
            names
                .and_then(|m| m.get(&i.to_string()))
                .and_then(serde_json::Value::as_str)
                .map_or_else(|| format!("LABEL_{i}"), str::to_owned)
        })
        .collect())
}

/// Embeds texts with a model on a backend, batching them to fit the largest bucket.
pub struct Embedder<B: Backend> {
    model: Model,
    exec: Executor<B>,
    buf: BatchBuf,
    out: Outputs,
}

impl<B: Backend> Embedder<B> {
    /// Uploads `model`'s weights to `backend`.
    pub fn new(model: Model, backend: B, buckets: Buckets) -> Result<Self> {
        let exec = model.executor(backend, buckets)?;
        Ok(Embedder { model, exec, buf: BatchBuf::new(), out: Outputs::new() })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The executor (for its caps and memory).
    pub fn executor(&self) -> &Executor<B> {
        &self.exec
    }

    /// One embedding per text, in order. `progress` is called with the number of texts done
    /// after each batch.
    pub fn embed(&mut self, texts: &[&str], progress: impl FnMut(usize)) -> Result<Vec<Vec<f32>>> {
        self.expect(|t| matches!(t, Task::Embed(_)), "an embedding model")?;
        let tokens = &self.model.tokens;
        let encoded = texts.iter().map(|t| tokens.encode(t));
        Self::rows(&mut self.exec, &mut self.buf, &mut self.out, encoded, "embedding", progress)
    }

    /// Class logits per text, in order (for a sequence classifier).
    pub fn classify(
        &mut self,
        texts: &[&str],
        progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>> {
        self.expect(|t| matches!(t, Task::Classify { .. }), "a sequence classifier")?;
        let tokens = &self.model.tokens;
        let encoded = texts.iter().map(|t| tokens.encode(t));
        Self::rows(&mut self.exec, &mut self.buf, &mut self.out, encoded, "logits", progress)
    }

    /// Class logits for each `(query, document)` pair, in document order (for a cross-encoder).
    pub fn classify_pairs(
        &mut self,
        query: &str,
        docs: &[&str],
        progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>> {
        self.expect(
            |t| matches!(t, Task::Classify { .. }),
            "a cross-encoder (a sequence classifier)",
        )?;
        let tokens = &self.model.tokens;
        let encoded = docs.iter().map(|d| tokens.encode_pair(query, d));
        Self::rows(&mut self.exec, &mut self.buf, &mut self.out, encoded, "logits", progress)
    }

    fn expect(&self, ok: impl Fn(&Task) -> bool, what: &str) -> Result<()> {
        if ok(&self.model.task) {
            Ok(())
        } else {
            Err(Error::Unsupported(format!(
                "this model is {}, not {what}",
                match self.model.task {
                    Task::Embed(_) => "an embedding model",
                    Task::Classify { .. } => "a sequence classifier",
                }
            )))
        }
    }

    /// Runs encoded inputs in batches that fit the largest bucket; returns `output`'s rows.
    fn rows(
        exec: &mut Executor<B>,
        buf: &mut BatchBuf,
        out: &mut Outputs,
        encoded: impl Iterator<Item = Result<Encoded>>,
        output: &str,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>> {
        let largest = *exec
            .lane_buckets(LaneId::MAIN)?
            .last()
            .ok_or_else(|| Error::Format("the executor has no buckets".into()))?;
        let mut result = Vec::new();
        let mut pending: Vec<Encoded> = Vec::new();
        let mut tokens = 0;
        for e in encoded {
            let e = e?;
            if !pending.is_empty()
                && (tokens + e.ids.len() > largest.tokens || pending.len() == largest.seqs)
            {
                Self::flush(exec, buf, out, &mut pending, output, &mut result)?;
                tokens = 0;
                progress(result.len());
            }
            tokens += e.ids.len();
            pending.push(e);
        }
        if !pending.is_empty() {
            Self::flush(exec, buf, out, &mut pending, output, &mut result)?;
        }
        progress(result.len());
        Ok(result)
    }

    fn flush(
        exec: &mut Executor<B>,
        buf: &mut BatchBuf,
        out: &mut Outputs,
        pending: &mut Vec<Encoded>,
        output: &str,
        result: &mut Vec<Vec<f32>>,
    ) -> Result<()> {
        buf.clear();
        for e in pending.drain(..) {
            buf.push(&e.ids, Some(&e.types), &[])?;
        }
        exec.run(LaneId::MAIN, &buf.batch(), out)?;
        let m = out
            .get(output)
            .ok_or_else(|| Error::Format(format!("the graph has no `{output}` output")))?;
        result.extend(m.iter_rows().map(<[f32]>::to_vec));
        Ok(())
    }
}
