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
//! token, optionally L2-normalised).

mod bert;
mod checkpoint;
pub mod config;
pub mod st;
mod tokenize;

use std::path::{Path, PathBuf};

use switchyard_core::{
    Backend, BatchBuf, Buckets, Executor, Graph, HostTensor, LaneId, Op, Outputs, Shape,
};

pub use checkpoint::Checkpoint;
pub use config::{Arch, EncoderConfig};
pub use st::{Pooling, SentenceConfig};
pub use tokenize::{Encoded, Tokens};

/// Where `cargo xtask fetch-models` puts the real model `name` in this workspace
/// (`.cache/models/NAME`; the environment variable `SWITCHYARD_MODELS_DIR` overrides the
/// folder). For tests and examples.
pub fn fetched_model_dir(name: &str) -> PathBuf {
    let root = std::env::var_os("SWITCHYARD_MODELS_DIR").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("..")
                .join(".cache")
                .join("models")
        },
        PathBuf::from,
    );
    root.join(name)
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
        let pooling = sentence
            .map_or(Pooling { mode: switchyard_core::PoolMode::Mean, normalize: false }, |s| {
                s.pooling
            });
        let (mut enc, x) = bert::build(&checkpoint, config.clone())?;
        let d = config.hidden;
        let pooled = enc.g.op(Shape::seqs(d), |out| Op::Pool { x, mode: pooling.mode, out });
        let emb = if pooling.normalize {
            enc.g.op(Shape::seqs(d), |out| Op::L2Norm { x: pooled, eps: 1e-12, out })
        } else {
            pooled
        };
        enc.g.output("embedding", emb);
        let graph = enc.g.finish()?;
        let tokens = Tokens::load(dir, max_len)?;
        Ok(Model { checkpoint, graph, task: Task::Embed(pooling), tokens, config })
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
    pub fn embed(
        &mut self,
        texts: &[&str],
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<Vec<f32>>> {
        let largest = *self
            .exec
            .lane_buckets(LaneId::MAIN)?
            .last()
            .ok_or_else(|| Error::Format("the executor has no buckets".into()))?;
        let mut result = Vec::with_capacity(texts.len());
        let mut pending: Vec<Encoded> = Vec::new();
        let mut tokens = 0;
        for (i, text) in texts.iter().enumerate() {
            let e = self.model.tokens.encode(text)?;
            if !pending.is_empty()
                && (tokens + e.ids.len() > largest.tokens || pending.len() == largest.seqs)
            {
                self.flush(&mut pending, &mut result)?;
                tokens = 0;
                progress(i);
            }
            tokens += e.ids.len();
            pending.push(e);
        }
        if !pending.is_empty() {
            self.flush(&mut pending, &mut result)?;
        }
        progress(texts.len());
        Ok(result)
    }

    fn flush(&mut self, pending: &mut Vec<Encoded>, result: &mut Vec<Vec<f32>>) -> Result<()> {
        self.buf.clear();
        for e in pending.drain(..) {
            self.buf.push(&e.ids, Some(&e.types), &[])?;
        }
        self.exec.run(LaneId::MAIN, &self.buf.batch(), &mut self.out)?;
        let m = self
            .out
            .get("embedding")
            .ok_or_else(|| Error::Format("the graph has no `embedding` output".into()))?;
        result.extend(m.iter_rows().map(<[f32]>::to_vec));
        Ok(())
    }
}
