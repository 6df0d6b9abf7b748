//! switchyard-models: a Hugging Face checkpoint directory to a Switchyard graph, its weights and
//! its tokenizer.
//!
//! [`Model::load`] reads `config.json`, memory-maps `model.safetensors` (or its shards), loads
//! `tokenizer.json` and the sentence-transformers files, and builds the [`Graph`] for the
//! architecture and head. A model builder never sees a backend: [`Runner`] runs a model on any
//! [`Backend`] through an [`Executor`].
//!
//! Architectures: BERT and its descendants (MiniLM, BGE, E5, GTE), RoBERTa and XLM-RoBERTa,
//! DistilBERT, and ModernBERT. Heads, chosen from the sentence-transformers files or else from
//! `config.json`'s `architectures`:
//! - pooled embeddings (CLS, mean, max or last token, optionally L2-normalised): plain encoders
//!   and sentence-transformers models;
//! - sequence classification (`*ForSequenceClassification`): classifiers, and cross-encoder
//!   rerankers on text pairs;
//! - token classification (`*ForTokenClassification`), at each word's first sub-token or at
//!   every token;
//! - SPLADE (`*ForMaskedLM`, or a sentence-transformers sparse encoder): the masked-language-model
//!   logits through `log(1 + relu)`, max-pooled, as sparse term weights.

mod bert;
mod checkpoint;
pub mod config;
mod deberta;
mod encoder;
pub mod heads;
mod lm;
mod modernbert;
mod par;
mod rotary;
mod runner;
pub mod scores;
pub mod st;
mod t5;
mod tokenize;

use std::path::Path;

use switchyard_core::{Backend, Buckets, Executor, Graph, HostTensor, PoolMode};

pub use checkpoint::Checkpoint;
pub use config::{Arch, Dropouts, EncoderConfig, ModernConfig, RopeScaling, RotaryConfig};
pub use deberta::{Derived, DerivedNorm};
pub use runner::{Marked, Marking, Read, Runner, TokenLogits};
pub use st::{
    Dense, Pooling, Prompt, Prompts, SentenceConfig, SentenceHead, Splade, SpladeAct, prompted,
};
pub use tokenize::{Encoded, Tokenizer, Truncation};

/// Copies the checkpoint in `from` (`config.json`, `model.safetensors`, `tokenizer.json`) into
/// `to` as a sentence-transformers model: a Transformer, then a Pooling module whose
/// `config.json` is `pooling`. For tests (feature `testkit`).
#[cfg(feature = "testkit")]
pub fn sentence_transformers_copy(from: &Path, to: &Path, pooling: &str) -> std::io::Result<()> {
    copy_checkpoint(from, to)?;
    std::fs::create_dir_all(to.join("1_Pooling"))?;
    let modules = serde_json::json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
    ]);
    std::fs::write(to.join("modules.json"), modules.to_string())?;
    std::fs::write(to.join("1_Pooling/config.json"), pooling)
}

/// Copies `config.json`, `model.safetensors` and `tokenizer.json` from `from` into `to`, made
/// if it is not there.
#[cfg(feature = "testkit")]
fn copy_checkpoint(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(from.join(f), to.join(f))?;
    }
    Ok(())
}

/// Copies the sequence classifier in `from` (`config.json`, `model.safetensors`,
/// `tokenizer.json`) into `to` as sentence-transformers 6 saves a `CrossEncoder`, naming
/// `prompts` (a map of names to texts) and the default prompt `default`. For tests (feature
/// `testkit`).
#[cfg(feature = "testkit")]
pub fn cross_encoder_copy(
    from: &Path,
    to: &Path,
    prompts: serde_json::Value,
    default: Option<&str>,
) -> std::io::Result<()> {
    copy_checkpoint(from, to)?;
    let files = [
        (
            "modules.json",
            serde_json::json!([{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.base.modules.transformer.Transformer"}]),
        ),
        (
            "sentence_bert_config.json",
            serde_json::json!({"transformer_task": "sequence-classification",
                "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
                "module_output_name": "scores"}),
        ),
        (
            "config_sentence_transformers.json",
            serde_json::json!({"activation_fn": "torch.nn.modules.activation.Sigmoid",
                "default_prompt_name": default, "model_type": "CrossEncoder", "prompts": prompts}),
        ),
    ];
    for (name, json) in files {
        std::fs::write(to.join(name), json.to_string())?;
    }
    Ok(())
}

/// The real model `name` as `cargo xtask fetch-models` puts it in this workspace
/// (`.cache/models/NAME`; the environment variable `SWITCHYARD_MODELS_DIR` overrides the
/// folder), or an error saying to fetch it. For tests (feature `testkit`).
#[cfg(feature = "testkit")]
pub fn fetched_model_dir(name: &str) -> Result<std::path::PathBuf> {
    let root = std::env::var_os("SWITCHYARD_MODELS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/models"),
        std::path::PathBuf::from,
    );
    let dir = root.join(name);
    if dir.join("model.safetensors").is_file() {
        Ok(dir)
    } else {
        Err(Error::format(format!(
            "{} is missing: run `cargo xtask fetch-models` first",
            dir.display()
        )))
    }
}

/// Everything that can go wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// An input longer than the model takes, where truncation was refused.
    #[error("the input has at least {tokens} tokens; the model takes at most {max}")]
    TooLong {
        /// The tokens counted before refusing, special tokens included: the whole input's, or
        /// those of a prefix of a long text that was too long already.
        tokens: usize,
        /// The model's maximum length.
        max: usize,
    },
    /// A prompt name the model's sentence-transformers configuration does not have.
    #[error("the model has no prompt named {name:?}; its prompts: {}", if known.is_empty() { "none" } else { known })]
    UnknownPrompt {
        /// The name asked for.
        name: String,
        /// The names it has, comma-separated.
        known: String,
    },
    /// Everything else, in core's terms: a file that cannot be read (`Io`), is missing or
    /// malformed (`Format`) or asks for what Switchyard does not support (`Unsupported`); or the
    /// graph, a batch or the device failed.
    #[error(transparent)]
    Core(#[from] switchyard_core::Error),
}

impl Error {
    /// A file that is missing or malformed.
    pub(crate) fn format(msg: impl Into<String>) -> Error {
        Error::Core(switchyard_core::Error::Format(msg.into()))
    }

    /// A checkpoint that asks for something Switchyard does not support (yet).
    pub(crate) fn unsupported(msg: impl Into<String>) -> Error {
        Error::Core(switchyard_core::Error::Unsupported(msg.into()))
    }

    /// Reading `path` failed.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Core(switchyard_core::Error::Io { path: path.to_owned(), source })
    }
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
    /// Label logits per marked token (output `logits`, one row per marker).
    ClassifyTokens {
        /// The label of each logit, from `id2label` (else `LABEL_i`).
        labels: Vec<String>,
    },
    /// SPLADE term weights per sequence (output `sparse`, a vocabulary wide).
    Sparse,
}

impl Task {
    /// What kind of model this is, in words, for messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Task::Embed(_) => "an embedding model",
            Task::Classify { .. } => "a sequence classifier",
            Task::ClassifyTokens { .. } => "a token classifier",
            Task::Sparse => "a sparse (SPLADE) encoder",
        }
    }

    /// The labels of a classifier's logits (empty for other tasks).
    pub fn labels(&self) -> &[String] {
        match self {
            Task::Classify { labels } | Task::ClassifyTokens { labels } => labels,
            Task::Embed(_) | Task::Sparse => &[],
        }
    }
}

/// A one-label cross-encoder's score function, found as sentence-transformers finds its
/// `activation_fn`: in `config_sentence_transformers.json` (`from_st`), else in `config.json`
/// under `sentence_transformers` (sentence-transformers 4 and 5), else as its older
/// `sbert_ce_default_activation_function`; the sigmoid where none is named. A path outside
/// `torch` is passed over, as sentence-transformers passes over an untrusted one; another
/// `torch.nn` class is an error.
fn score_fn(config: &serde_json::Value, from_st: Option<&str>) -> Result<scores::ScoreFn> {
    let named = from_st
        .or_else(|| config.pointer("/sentence_transformers/activation_fn")?.as_str())
        .or_else(|| config.get("sbert_ce_default_activation_function")?.as_str());
    match named {
        Some(path) if path.starts_with("torch.") => {
            scores::ScoreFn::of_torch(path).ok_or_else(|| {
                Error::unsupported(format!(
                    "the cross-encoder's activation_fn `{path}`; supported: torch.nn's Sigmoid, \
                 Identity and Tanh"
                ))
            })
        }
        _ => Ok(scores::ScoreFn::default()),
    }
}

/// The head a checkpoint asks for, before its graph is built.
enum HeadKind {
    /// Pooling, then the Dense modules, then the L2 norm if the pooling asks for it.
    Embed(Pooling, Vec<Dense>),
    Classify,
    ClassifyTokens,
    /// SPLADE pooling of the masked-language-model logits.
    Sparse(Splade),
}

/// The head: the sentence-transformers modules if they name one, else `config.json`'s
/// `architectures` (a bare encoder embeds with mean pooling, as sentence-transformers does).
fn head_kind(ck: &Checkpoint, sentence: Option<&SentenceConfig>) -> Result<HeadKind> {
    match sentence.and_then(|s| s.head.map(|h| (h, s))) {
        Some((SentenceHead::Pooled(p), s)) => return Ok(HeadKind::Embed(p, s.dense.clone())),
        Some((SentenceHead::Splade(s), _)) => return Ok(HeadKind::Sparse(s)),
        None => {}
    }
    let mean = HeadKind::Embed(Pooling { mode: PoolMode::Mean, normalize: false }, Vec::new());
    let archs = architectures(ck.config());
    let Some(arch) = archs.first() else { return Ok(mean) };
    let head = arch.find("For").map_or("", |i| &arch[i..]);
    match head {
        "" => Ok(mean),
        "ForSequenceClassification" => Ok(HeadKind::Classify),
        "ForTokenClassification" => Ok(HeadKind::ClassifyTokens),
        "ForMaskedLM" => Ok(HeadKind::Sparse(Splade::default())),
        other => Err(Error::unsupported(format!(
            "the head of `{arch}` ({other}); supported: a bare encoder (embeddings), \
             ForSequenceClassification, ForTokenClassification, ForMaskedLM (SPLADE)"
        ))),
    }
}

/// Whether the head reads each sequence's first row alone (`[CLS]` pooling: BERT-family
/// classifiers and cross-encoders, ModernBERT's with `classifier_pooling: cls`, embedders that
/// pool CLS such as BGE). Then the last layer's attention takes that row's query alone, over
/// every token's keys and values, and its output projection and feed-forward run on one row per
/// sequence: the same values, with only the layer's key and value projections left per token.
fn last_layer_on_cls(kind: &HeadKind, config: &EncoderConfig) -> bool {
    if config.arch == Arch::T5 {
        return false;
    }
    match kind {
        HeadKind::Embed(pooling, _) => pooling.mode == PoolMode::Cls,
        HeadKind::Classify => {
            config.modern.as_ref().is_none_or(|m| m.classifier_pooling == PoolMode::Cls)
        }
        HeadKind::ClassifyTokens | HeadKind::Sparse(_) => false,
    }
}

/// A loaded checkpoint: its graph, tokenizer and weights (memory-mapped).
pub struct Model {
    checkpoint: Checkpoint,
    graph: Graph,
    task: Task,
    tokenizer: Tokenizer,
    config: EncoderConfig,
    /// For an embedding model, the same encoder giving every token's final row (output
    /// [`heads::TOKENS`]) instead of the pooled embedding.
    token_graph: Option<Graph>,
    /// The prompts its sentence-transformers configuration names.
    prompts: Prompts,
    /// How its embeddings are compared.
    similarity: scores::Similarity,
    /// A one-label cross-encoder's score of its logit.
    score_fn: scores::ScoreFn,
    /// How a sequence classifier's logits become its labels' scores.
    class_scores: scores::ClassScores,
    /// The graph weights computed from stored tensors at load.
    derived: Vec<Derived>,
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
        let mut checkpoint = Checkpoint::open(dir)?;
        let config = EncoderConfig::from_json(checkpoint.config())?;
        let sentence = st::read(dir)?;
        for d in sentence.iter().flat_map(|s| &s.dense) {
            checkpoint.map_module(&d.folder)?;
        }
        let position_limit = config.max_positions.saturating_sub(config.position_offset);
        let max_len = sentence.as_ref().and_then(|s| s.max_seq_length).unwrap_or(position_limit);
        if max_len > position_limit {
            return Err(Error::format(format!(
                "max_seq_length {max_len} exceeds the model's {position_limit} positions"
            )));
        }
        let derived = match config.arch {
            Arch::DebertaV2 => deberta::derive_tables(&mut checkpoint, &config)?,
            _ => Vec::new(),
        };
        let kind = head_kind(&checkpoint, sentence.as_ref())?;
        let family = match config.arch {
            Arch::T5 => Some("T5"),
            Arch::Gemma => Some("Gemma"),
            Arch::Qwen3 => Some("Qwen3"),
            _ => None,
        };
        if let Some(family) = family {
            let refused = |what| Err(heads::embedding_only(family, what));
            match kind {
                HeadKind::Embed(..) => {}
                HeadKind::Classify => return refused("a sequence classifier"),
                HeadKind::ClassifyTokens => return refused("a token classifier"),
                HeadKind::Sparse(_) => return refused("a SPLADE encoder"),
            }
        }
        let _span = tracing::info_span!("build", arch = ?config.arch).entered();
        let cls_only = last_layer_on_cls(&kind, &config);
        let build = |cls_only| match config.arch {
            Arch::ModernBert => modernbert::build(&checkpoint, &config, cls_only),
            Arch::NomicBert | Arch::Gte | Arch::JinaV3 => {
                rotary::build(&checkpoint, &config, cls_only)
            }
            Arch::Gemma | Arch::Qwen3 => lm::build(&checkpoint, &config, cls_only),
            // Its heads pool the final norm's rows: no last layer for the first row alone.
            Arch::T5 => t5::build(&checkpoint, &config),
            Arch::Bert
            | Arch::Roberta
            | Arch::DistilBert
            | Arch::MpNet
            | Arch::Electra
            | Arch::Albert
            | Arch::DebertaV2 => bert::build(&checkpoint, &config, cls_only),
        };
        let (mut enc, x) = build(cls_only)?;
        let mut token_graph = None;
        let task = match kind {
            HeadKind::Embed(pooling, dense) => {
                let (mut tokens, all) = match cls_only {
                    true => build(false).map(|(e, all)| (e.g, all))?,
                    false => (enc.g.clone(), x),
                };
                tokens.output(heads::TOKENS, all);
                token_graph = Some(tokens.finish()?);
                let emb = heads::embedding(&mut enc, x, pooling, &dense)?;
                enc.g.output(heads::EMBEDDING, emb);
                Task::Embed(pooling)
            }
            HeadKind::Classify => {
                let labels = labels(&checkpoint)?;
                let logits = heads::sequence_classifier(&mut enc, &config, x, labels.len())?;
                enc.g.output(heads::LOGITS, logits);
                Task::Classify { labels }
            }
            HeadKind::ClassifyTokens => {
                let labels = labels(&checkpoint)?;
                let logits = heads::token_classifier(&mut enc, &config, x, labels.len())?;
                enc.g.output(heads::LOGITS, logits);
                Task::ClassifyTokens { labels }
            }
            HeadKind::Sparse(pooling) => {
                let tied = checkpoint
                    .config()
                    .get("tie_word_embeddings")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(true);
                let sparse = heads::splade(&mut enc, &config, x, tied, pooling)?;
                enc.g.output(heads::SPARSE, sparse);
                Task::Sparse
            }
        };
        let graph = enc.g.finish()?;
        if let Some(tokens) = token_graph.as_mut() {
            // Both graphs share one upload as two lanes of an executor, so they must list the
            // same weights. The head's own (Dense modules') come after the encoder's, which
            // both graphs declare alike: the token graph lists them too, unread.
            let encoder = tokens.weights.len();
            tokens.weights.extend_from_slice(graph.weights.get(encoder..).unwrap_or_default());
        }
        let tokenizer = Tokenizer::load(dir, max_len)?;
        if let Some((token, id)) = tokenizer.largest_id()
            && id as usize >= config.vocab
        {
            return Err(Error::format(format!(
                "tokenizer.json gives `{token}` the id {id}, past the model's {} embedding rows \
                 (vocab_size in config.json): the tokenizer does not belong to this model",
                config.vocab
            )));
        }
        let one_label = matches!(&task, Task::Classify { labels } if labels.len() == 1);
        let activation_fn = sentence.as_ref().and_then(|s| s.activation_fn.as_deref());
        let score_fn = if one_label {
            score_fn(checkpoint.config(), activation_fn)?
        } else {
            scores::ScoreFn::default()
        };
        let problem_type = checkpoint.config().get("problem_type").and_then(|t| t.as_str());
        let class_scores = scores::ClassScores::of(problem_type, task.labels().len());
        let (prompts, similarity) = sentence.map(|s| (s.prompts, s.similarity)).unwrap_or_default();
        Ok(Model {
            checkpoint,
            graph,
            task,
            tokenizer,
            config,
            token_graph,
            prompts,
            similarity,
            score_fn,
            class_scores,
            derived,
        })
    }

    /// The checkpoint it was read from.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The graph weights it computed from stored tensors when it loaded (DeBERTa's position
    /// tables; none for most models), which training computes from those tensors instead.
    pub fn derived(&self) -> &[Derived] {
        &self.derived
    }

    /// For an embedding model, the graph of every token's final row before pooling (output
    /// [`heads::TOKENS`]); `None` for other tasks.
    pub fn token_graph(&self) -> Option<&Graph> {
        self.token_graph.as_ref()
    }

    /// What the graph computes.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The width of an embedding model's embeddings (`None` for other tasks).
    pub fn embedding_dim(&self) -> Option<usize> {
        self.graph.output(heads::EMBEDDING).map(|v| self.graph.shape(v).width)
    }

    /// What a one-label cross-encoder's score is of its logit: sentence-transformers'
    /// `activation_fn` where the model names one, else the sigmoid.
    pub fn score_fn(&self) -> scores::ScoreFn {
        self.score_fn
    }

    /// How a sequence classifier's logits become its labels' scores: by `problem_type` in
    /// `config.json`, as transformers' text-classification pipeline chooses.
    pub fn class_scores(&self) -> scores::ClassScores {
        self.class_scores
    }

    /// How an embedding model's vectors are compared: its sentence-transformers configuration's
    /// `similarity_fn_name`, else cosine.
    pub fn similarity(&self) -> scores::Similarity {
        self.similarity
    }

    /// The prompts its sentence-transformers configuration names (none for other checkpoints).
    pub fn prompts(&self) -> &Prompts {
        &self.prompts
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Truncates inputs at `max_len` tokens (special tokens included) instead of the
    /// checkpoint's length, as sentence-transformers' `max_seq_length` does: an error if the
    /// model's positions do not reach that far or `max_len` cannot hold the special tokens.
    pub fn set_max_len(&mut self, max_len: usize) -> Result<()> {
        let limit = self.config.max_positions.saturating_sub(self.config.position_offset);
        if max_len > limit {
            return Err(Error::format(format!(
                "a maximum length of {max_len} tokens: the model's positions reach {limit}"
            )));
        }
        self.tokenizer.set_max_len(max_len)
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
            && b.tokens < self.tokenizer.max_len()
        {
            return Err(Error::format(format!(
                "the largest bucket holds {} tokens, fewer than one sequence of the model's \
                 maximum length {}",
                b.tokens,
                self.tokenizer.max_len()
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

/// A classifier's labels: as many as its output rows, named by `id2label` where it has them.
fn labels(ck: &Checkpoint) -> Result<Vec<String>> {
    let rows = ["classifier.weight", "classifier.out_proj.weight"]
        .iter()
        .find_map(|n| ck.shape(n))
        .and_then(|s| s.first().copied())
        .ok_or_else(|| {
            Error::format(
                "a classifier without `classifier.weight` or `classifier.out_proj.weight`",
            )
        })?;
    let names = ck.config().get("id2label").and_then(serde_json::Value::as_object);
    if let Some(names) = names
        && (names.len() != rows || (0..rows).any(|i| !names.contains_key(&i.to_string())))
    {
        return Err(Error::format(format!(
            "config.json: id2label names {} labels, but the classifier has {rows} outputs \
             (ids 0 to {})",
            names.len(),
            rows.saturating_sub(1)
        )));
    }
    Ok((0..rows)
        .map(|i| {
            names
                .and_then(|m| m.get(&i.to_string()))
                .and_then(serde_json::Value::as_str)
                .map_or_else(|| format!("LABEL_{i}"), str::to_owned)
        })
        .collect())
}
