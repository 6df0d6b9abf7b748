//! Heads: what a model computes from the encoder's final token rows.
//!
//! Each family names its head layers its own way; the functions here pick the names and build
//! the ops. Head weights sit at the checkpoint's root, beside the encoder's `bert.` / `model.`
//! prefix.

use switchyard_core::{Act, Op, PoolMode, Rows, Shape, Val};

use crate::config::{Arch, EncoderConfig};
use crate::encoder::{Encoder, linear_in};
use crate::st::{Dense, Pooling, Splade, SpladeAct};
use crate::{Error, Result};

/// The name of the pooled-embedding output (sequence rows).
pub const EMBEDDING: &str = "embedding";
/// The name of the classifier output: logits per sequence, or per marker for a token classifier.
pub const LOGITS: &str = "logits";
/// The name of the SPLADE output: one vocabulary-wide row of term weights per sequence.
pub const SPARSE: &str = "sparse";
/// The name of the token-states output of an embedding model's second graph: the encoder's
/// final row for every token, before pooling.
pub const TOKENS: &str = "tokens";

/// `x` pooled by `mode`, or `x` itself where the encoder has already kept each sequence's first
/// row (its last layer computed for `[CLS]` alone, which only CLS pooling asks for).
fn pooled(e: &mut Encoder<'_>, x: Val, mode: PoolMode) -> Val {
    let shape = e.g.shape(x);
    match shape.rows {
        Rows::Seqs => {
            debug_assert_eq!(mode, PoolMode::Cls, "first rows kept for a head that pools them");
            x
        }
        _ => e.g.op(Shape::seqs(shape.width), |out| Op::Pool { x, mode, out }),
    }
}

/// Pooled (and optionally L2-normalised) embeddings, as sentence-transformers computes them.
pub(crate) fn embedding(
    e: &mut Encoder<'_>,
    x: Val,
    pooling: Pooling,
    dense: &[Dense],
) -> Result<Val> {
    let mut y = pooled(e, x, pooling.mode);
    for d in dense {
        y = dense_module(e, y, d)?;
    }
    let width = e.g.shape(y).width;
    Ok(match pooling.normalize {
        true => e.g.op(Shape::seqs(width), |out| Op::L2Norm { x: y, eps: 1e-12, out }),
        false => y,
    })
}

/// A sentence-transformers Dense module on the sentence rows `x`: its linear layer
/// (`FOLDER.linear.weight`, `.bias`) and activation, plus `x` (projected by
/// `FOLDER.residual.weight` where the widths differ) if it has a residual connection.
fn dense_module(e: &mut Encoder<'_>, x: Val, d: &Dense) -> Result<Val> {
    let width = e.g.shape(x).width;
    if width != d.in_features {
        return Err(Error::format(format!(
            "{}/config.json: in_features {}, but the embedding before it is {width} wide",
            d.folder, d.in_features
        )));
    }
    let linear = format!("{}.linear", d.folder);
    if d.bias && e.root().find(&format!("{linear}.bias")).is_none() {
        return Err(Error::format(format!(
            "{}/model.safetensors has no `linear.bias`, which its config.json's `bias` asks for",
            d.folder
        )));
    }
    let residual = match (d.residual, width == d.out_features) {
        (false, _) => None,
        (true, true) => Some(x),
        (true, false) => {
            let name = format!("{}.residual", d.folder);
            Some(e.head_linear(&name, x, d.out_features, Act::Identity)?)
        }
    };
    let root = e.root();
    linear_in(&mut e.g, &root, &linear, x, d.out_features, d.act, residual)
}

/// ModernBERT's prediction head (`head.dense`, its activation, `head.norm`), shared by its
/// classifiers and its masked-language-model head.
fn modern_head(e: &mut Encoder<'_>, cfg: &EncoderConfig, x: Val) -> Result<Val> {
    let act = cfg.modern.as_ref().map_or(Act::Gelu, |m| m.head_act);
    let h = e.head_linear("head.dense", x, cfg.hidden, act)?;
    e.head_layer_norm("head.norm", h, cfg.eps)
}

/// Sequence classification logits (`n` labels) from the token rows `x`, with dropout marked
/// where each family's head applies it in training.
pub(crate) fn sequence_classifier(
    e: &mut Encoder<'_>,
    cfg: &EncoderConfig,
    x: Val,
    n: usize,
) -> Result<Val> {
    let d = cfg.hidden;
    let pool = match &cfg.modern {
        Some(m) => m.classifier_pooling,
        None => PoolMode::Cls,
    };
    let cls = pooled(e, x, pool);
    let p = cfg.dropout.classifier;
    let h = match cfg.arch {
        // BERT's pooler, under the model's prefix.
        Arch::Bert | Arch::NomicBert | Arch::Gte => {
            e.linear("pooler.dense", cls, d, Act::Tanh, None)?
        }
        Arch::Albert => e.linear("pooler", cls, d, Act::Tanh, None)?,
        Arch::T5 => return Err(embedding_only("T5", "a sequence classifier")),
        Arch::Gemma => return Err(embedding_only("Gemma", "a sequence classifier")),
        Arch::Qwen3 => return Err(embedding_only("Qwen3", "a sequence classifier")),
        Arch::Roberta | Arch::MpNet | Arch::JinaV3 => {
            e.g.dropout(cls, p);
            e.head_linear("classifier.dense", cls, d, Act::Tanh)?
        }
        // ElectraClassificationHead: GELU where RoBERTa's has tanh.
        Arch::Electra => {
            e.g.dropout(cls, p);
            e.head_linear("classifier.dense", cls, d, Act::Gelu)?
        }
        Arch::DistilBert => e.head_linear("pre_classifier", cls, d, Act::Relu)?,
        Arch::ModernBert => modern_head(e, cfg, cls)?,
        // ContextPooler: the pooler's activation, GELU unless config.json names another.
        Arch::DebertaV2 => {
            let act = cfg.deberta.map_or(Act::Gelu, |db| db.pooler_act);
            e.head_linear("pooler.dense", cls, d, act)?
        }
    };
    e.g.dropout(h, p);
    let out = match cfg.arch {
        Arch::Roberta | Arch::MpNet | Arch::Electra | Arch::JinaV3 => "classifier.out_proj",
        Arch::Bert
        | Arch::DistilBert
        | Arch::Albert
        | Arch::ModernBert
        | Arch::T5
        | Arch::Gemma
        | Arch::Qwen3
        | Arch::DebertaV2
        | Arch::NomicBert
        | Arch::Gte => "classifier",
    };
    e.head_linear(out, h, n, Act::Identity)
}

/// The error for a head Switchyard does not build on `family` (T5's encoder, Gemma), which it
/// runs as an embedding model only.
pub(crate) fn embedding_only(family: &str, what: &str) -> Error {
    Error::unsupported(format!(
        "{family} as {what}: Switchyard runs {family} as an embedding model only"
    ))
}

/// Token classification logits (`n` labels), one row per marker.
///
/// The marked rows are gathered first: every op after the gather is row-wise, so only the
/// marked tokens pay for the head.
pub(crate) fn token_classifier(
    e: &mut Encoder<'_>,
    cfg: &EncoderConfig,
    x: Val,
    n: usize,
) -> Result<Val> {
    let marked = e.g.op(Shape::markers(cfg.hidden), |out| Op::Gather { x, out });
    let h = match cfg.arch {
        Arch::ModernBert => modern_head(e, cfg, marked)?,
        Arch::Bert
        | Arch::Roberta
        | Arch::DistilBert
        | Arch::MpNet
        | Arch::Electra
        | Arch::Albert
        | Arch::DebertaV2
        | Arch::NomicBert
        | Arch::Gte
        | Arch::JinaV3 => marked,
        Arch::T5 => return Err(embedding_only("T5", "a token classifier")),
        Arch::Gemma => return Err(embedding_only("Gemma", "a token classifier")),
        Arch::Qwen3 => return Err(embedding_only("Qwen3", "a token classifier")),
    };
    e.g.dropout(h, cfg.dropout.token_classifier);
    e.head_linear("classifier", h, n, Act::Identity)
}

/// Per family: the masked-language-model head's transform, norm, decoder and decoder bias (the
/// decoder's own, which the forward pass reads, before the older shared name).
struct MlmNames {
    dense: &'static str,
    norm: &'static str,
    decoder: &'static str,
    bias: [&'static str; 2],
}

/// SPLADE term weights: the masked-language-model logits through `log(1 + relu(.))` (and a
/// second `log(1 + .)` for `log1p_relu`), pooled over each sequence's tokens by `pooling`'s max
/// or sum. The decoder is
/// tied to the word embeddings unless the checkpoint has its own and `config.json` unties them.
pub(crate) fn splade(
    e: &mut Encoder<'_>,
    cfg: &EncoderConfig,
    x: Val,
    tied: bool,
    pooling: Splade,
) -> Result<Val> {
    let (names, act, eps) = match cfg.arch {
        Arch::Bert => (
            MlmNames {
                dense: "cls.predictions.transform.dense",
                norm: "cls.predictions.transform.LayerNorm",
                decoder: "cls.predictions.decoder.weight",
                bias: ["cls.predictions.decoder.bias", "cls.predictions.bias"],
            },
            cfg.act,
            cfg.eps,
        ),
        // RobertaLMHead and MPNetLMHead apply GELU whatever the encoder's activation.
        Arch::Roberta | Arch::MpNet => (
            MlmNames {
                dense: "lm_head.dense",
                norm: "lm_head.layer_norm",
                decoder: "lm_head.decoder.weight",
                bias: ["lm_head.decoder.bias", "lm_head.bias"],
            },
            Act::Gelu,
            cfg.eps,
        ),
        Arch::DistilBert => (
            MlmNames {
                dense: "vocab_transform",
                norm: "vocab_layer_norm",
                decoder: "vocab_projector.weight",
                bias: ["vocab_projector.bias", "vocab_projector.bias"],
            },
            cfg.act,
            cfg.eps,
        ),
        // ElectraForMaskedLM is the generator, whose head narrows to the embedding width, as
        // ALBERT's does.
        Arch::Electra => {
            return Err(Error::unsupported(
                "ELECTRA's masked-language model (its generator) as a SPLADE encoder",
            ));
        }
        Arch::Albert => {
            return Err(Error::unsupported("ALBERT's masked-language model as a SPLADE encoder"));
        }
        Arch::T5 => return Err(embedding_only("T5", "a SPLADE encoder")),
        Arch::Gemma => return Err(embedding_only("Gemma", "a SPLADE encoder")),
        Arch::Qwen3 => return Err(embedding_only("Qwen3", "a SPLADE encoder")),
        Arch::DebertaV2 => {
            return Err(Error::unsupported("DeBERTa's masked-language model as a SPLADE encoder"));
        }
        Arch::NomicBert | Arch::Gte | Arch::JinaV3 => {
            return Err(Error::unsupported(
                "NomicBERT's, GTE's and Jina v3's masked-language models as SPLADE encoders",
            ));
        }
        Arch::ModernBert => (
            MlmNames {
                dense: "head.dense",
                norm: "head.norm",
                decoder: "decoder.weight",
                bias: ["decoder.bias", "decoder.bias"],
            },
            cfg.modern.as_ref().map_or(Act::Gelu, |m| m.head_act),
            cfg.eps,
        ),
    };
    let (d, v) = (cfg.hidden, cfg.vocab);
    let h = e.head_linear(names.dense, x, d, act)?;
    let h = e.head_layer_norm(names.norm, h, eps)?;
    let weight = if tied {
        e.word
    } else {
        e.head_optional(names.decoder, &[v, d])?.ok_or_else(|| {
            Error::format(format!(
                "config.json unties the decoder from the word embeddings, but the checkpoint \
                 has no `{}`",
                names.decoder
            ))
        })?
    };
    let bias = match e.head_optional(names.bias[0], &[v])? {
        Some(b) => Some(b),
        None => e.head_optional(names.bias[1], &[v])?,
    };
    let logits = e.g.op(Shape::tokens(v), |out| Op::Linear {
        x: h,
        weight,
        bias,
        act: Act::Log1pRelu,
        residual: None,
        out,
    });
    let weights = match pooling.act {
        SpladeAct::Relu => logits,
        // log1p is applied to values already past relu, where `Log1pRelu` is log1p.
        SpladeAct::Log1pRelu => {
            e.g.op(Shape::tokens(v), |out| Op::Activation { x: logits, act: Act::Log1pRelu, out })
        }
    };
    Ok(e.g.op(Shape::seqs(v), |out| Op::Pool { x: weights, mode: pooling.pool, out }))
}

/// The kind of head [`new_head`] adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewHeadKind {
    /// A sequence classifier (`*ForSequenceClassification`), also a cross-encoder.
    Sequence,
    /// A token classifier (`*ForTokenClassification`).
    Tokens,
}

/// How a new tensor starts, as transformers initialises it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal, mean 0, with this standard deviation (`initializer_range`).
    Normal(f32),
    /// All zeros (biases).
    Zeros,
    /// All ones (norm scales).
    Ones,
}

/// A head for a checkpoint that has none, to train from scratch: what its `config.json` names
/// it, the prefix its encoder's tensors take in that class, and the tensors to add.
#[derive(Clone, Debug, PartialEq)]
pub struct NewHead {
    /// The architecture, as `config.json`'s `architectures` names it.
    pub architecture: String,
    /// The prefix of the encoder's tensors (`bert.`, `roberta.`, `distilbert.`, `model.`).
    pub prefix: &'static str,
    /// The new tensors (name, shape, how each starts), named as in that class.
    pub tensors: Vec<(String, Vec<usize>, Init)>,
}

/// The head of `kind` with `labels` outputs for the encoder of `cfg` and its `config.json`, as
/// transformers builds it (weights drawn with the config's `initializer_range`); tensors the
/// checkpoint already has (`has`, asked with the class's names, such as BERT's pooler) are not
/// added again.
pub fn new_head(
    cfg: &EncoderConfig,
    config: &serde_json::Value,
    kind: NewHeadKind,
    labels: usize,
    has: &dyn Fn(&str) -> bool,
) -> Result<NewHead> {
    let model_type = config.get("model_type").and_then(serde_json::Value::as_str).unwrap_or("");
    let (class, prefix) = match model_type {
        "bert" => ("Bert", "bert."),
        "roberta" => ("Roberta", "roberta."),
        "xlm-roberta" => ("XLMRoberta", "roberta."),
        "distilbert" => ("DistilBert", "distilbert."),
        "mpnet" => ("MPNet", "mpnet."),
        "electra" => ("Electra", "electra."),
        "albert" => ("Albert", "albert."),
        "camembert" => ("Camembert", "roberta."),
        "modernbert" => ("ModernBert", "model."),
        "nomic_bert" => ("NomicBert", "nomic_bert."),
        "gte" => ("Gte", "gte."),
        // GTE's own code (`model_type: new`) names its classes `New*`.
        "new" => ("New", "new."),
        "jina_embeddings_v3" => ("JinaEmbeddingsV3", "roberta."),
        "deberta-v2" => ("DebertaV2", "deberta."),
        other => return Err(Error::unsupported(format!("a new head for model type `{other}`"))),
    };
    let flag = |key: &str| config.get(key).and_then(serde_json::Value::as_bool).unwrap_or(false);
    let std = config.get("initializer_range").and_then(serde_json::Value::as_f64).unwrap_or(0.02);
    let (d, n, std) = (cfg.hidden, labels, std as f32);
    let mut tensors = Vec::new();
    let mut linear = |name: &str, out: usize, bias: bool| {
        tensors.push((format!("{name}.weight"), vec![out, d], Init::Normal(std)));
        if bias {
            tensors.push((format!("{name}.bias"), vec![out], Init::Zeros));
        }
    };
    match (cfg.arch, kind) {
        // BERT's pooler under the encoder's prefix, then the classifier.
        (Arch::Bert | Arch::NomicBert | Arch::Gte, NewHeadKind::Sequence) => {
            if !has(&format!("{prefix}pooler.dense.weight")) {
                linear(&format!("{prefix}pooler.dense"), d, true);
            }
            linear("classifier", n, true);
        }
        (Arch::Roberta | Arch::MpNet | Arch::Electra | Arch::JinaV3, NewHeadKind::Sequence) => {
            linear("classifier.dense", d, true);
            linear("classifier.out_proj", n, true);
        }
        (Arch::Albert, NewHeadKind::Sequence) => {
            if !has("albert.pooler.weight") {
                linear("albert.pooler", d, true);
            }
            linear("classifier", n, true);
        }
        (Arch::DistilBert, NewHeadKind::Sequence) => {
            linear("pre_classifier", d, true);
            linear("classifier", n, true);
        }
        (Arch::ModernBert, _) => {
            // ModernBERT's head: `classifier_bias` and `norm_bias` are off by default.
            linear("head.dense", d, flag("classifier_bias"));
            linear("classifier", n, true);
            tensors.push(("head.norm.weight".into(), vec![d], Init::Ones));
            if flag("norm_bias") {
                tensors.push(("head.norm.bias".into(), vec![d], Init::Zeros));
            }
        }
        (Arch::T5, _) => return Err(embedding_only("T5", "a classifier")),
        (Arch::Gemma, _) => return Err(embedding_only("Gemma", "a classifier")),
        (Arch::Qwen3, _) => return Err(embedding_only("Qwen3", "a classifier")),
        // ContextPooler (as wide as the encoder), then the classifier.
        (Arch::DebertaV2, NewHeadKind::Sequence) => {
            linear("pooler.dense", d, true);
            linear("classifier", n, true);
        }
        (_, NewHeadKind::Tokens) => linear("classifier", n, true),
    }
    let what = match kind {
        NewHeadKind::Sequence => "ForSequenceClassification",
        NewHeadKind::Tokens => "ForTokenClassification",
    };
    Ok(NewHead { architecture: format!("{class}{what}"), prefix, tensors })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rotary encoder's `config.json` of `model_type`, 32 wide.
    fn rotary(model_type: &str) -> serde_json::Value {
        serde_json::json!({"model_type": model_type, "vocab_size": 100, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48})
    }

    /// The names transformers' classes (and GTE's own `New*`) give a new classifier: BERT's
    /// pooler under the encoder's prefix, unless the checkpoint has one; RoBERTa's head for
    /// Jina v3.
    #[test]
    fn new_sequence_heads_of_the_rotary_families_take_their_class_names() {
        for (model_type, class, prefix, first) in [
            ("nomic_bert", "NomicBertForSequenceClassification", "nomic_bert.", "pooler.dense"),
            ("gte", "GteForSequenceClassification", "gte.", "pooler.dense"),
            ("new", "NewForSequenceClassification", "new.", "pooler.dense"),
            ("jina_embeddings_v3", "JinaEmbeddingsV3ForSequenceClassification", "roberta.", ""),
        ] {
            let config = rotary(model_type);
            let cfg = EncoderConfig::from_json(&config).unwrap();
            let head = new_head(&cfg, &config, NewHeadKind::Sequence, 3, &|_| false).unwrap();
            assert_eq!((head.architecture.as_str(), head.prefix), (class, prefix));
            let names: Vec<&str> = head.tensors.iter().map(|t| t.0.as_str()).collect();
            let want: Vec<String> = match first {
                "" => ["classifier.dense", "classifier.out_proj"]
                    .iter()
                    .flat_map(|l| [format!("{l}.weight"), format!("{l}.bias")])
                    .collect(),
                _ => [format!("{prefix}{first}"), "classifier".into()]
                    .iter()
                    .flat_map(|l| [format!("{l}.weight"), format!("{l}.bias")])
                    .collect(),
            };
            assert_eq!(names, want, "{model_type}");
            // A pooler the checkpoint has already is kept, not drawn again.
            let kept = new_head(&cfg, &config, NewHeadKind::Sequence, 3, &|_| true).unwrap();
            let pooler = kept.tensors.iter().any(|t| t.0.contains("pooler"));
            assert!(!pooler, "{model_type}");
        }
    }
}
