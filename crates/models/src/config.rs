//! `config.json`: the architecture and its sizes.

use serde_json::Value;
use switchyard_core::{Act, PoolMode};

use crate::{Error, Result};

/// The encoder families Switchyard builds graphs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// BERT and its descendants with BERT's weight names (MiniLM, BGE, E5, GTE).
    Bert,
    /// RoBERTa and XLM-RoBERTa: BERT's shape, positions offset past the padding index.
    Roberta,
    /// DistilBERT: BERT's shape with its own weight names and no token types.
    DistilBert,
    /// MPNet: BERT's shape with its own weight names, no token types, positions offset past
    /// the padding index, and a relative position bias on every layer's attention scores.
    MpNet,
    /// ELECTRA's discriminator: BERT's names and shape, its embeddings `embedding_size` wide and
    /// projected to the hidden width where the two differ.
    Electra,
    /// T5's encoder: pre-norm with RMS norms, no biases, unscaled attention scores with a
    /// relative position bias from the first layer's table, and a plain or gated feed-forward.
    T5,
    /// ALBERT: BERT's shape with its embeddings `embedding_size` wide and always projected, and
    /// its layers' weights shared: layer `i` of `num_hidden_layers` runs the `inner_group_num`
    /// layers of group `int(i / (num_hidden_layers / num_hidden_groups))`.
    Albert,
    /// ModernBERT: pre-norm, rotary positions, GeGLU, alternating local and global attention,
    /// no biases.
    ModernBert,
    /// DeBERTa v2 and v3: BERT's post-norm layers with disentangled attention over relative
    /// position embeddings shared by every layer, and a pooler on `[CLS]` before a classifier.
    DebertaV2,
    /// NomicBERT (nomic-embed-text v1 and v1.5): BERT's post-norm layers with rotary positions
    /// in place of a position table and a gated feed-forward (SwiGLU), without biases.
    NomicBert,
    /// GTE v1.5 and gte-multilingual (`model_type` `new`, or `gte` as transformers names it):
    /// NomicBERT's shape with biases and, in the original checkpoints, the feed-forward's up and
    /// gate projections in one matrix.
    Gte,
    /// Jina embeddings v3 as transformers reads it (`jina_embeddings_v3`): NomicBERT's shape
    /// with biases and a feed-forward that is not gated.
    JinaV3,
    /// Gemma 3's text model with bidirectional attention (`gemma3_text`, EmbeddingGemma):
    /// pre- and post-norms (RMS, scaled by `1 + weight`) around attention and feed-forward,
    /// queries and keys normalised per head and rotated, key and value heads shared by groups
    /// of query heads, sliding-window and global layers, a gated feed-forward, and embeddings
    /// scaled by the square root of the width.
    Gemma,
    /// Qwen3 (`qwen3`, Qwen3-Embedding): a decoder, run with its causal mask: pre-norms (RMS),
    /// queries and keys normalised per head and rotated, key and value heads shared by groups
    /// of query heads, a gated feed-forward (SwiGLU), no biases.
    Qwen3,
}

/// The settings of the language-model families run as embedders (Gemma, Qwen3) beyond the
/// common sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct LmConfig {
    /// For each layer, whether it attends within the sliding window (else to the whole sequence).
    pub local: Vec<bool>,
    /// The window's radius: a local layer's token attends to tokens at most this many positions
    /// away (`sliding_window / 2`: transformers' bidirectional window is symmetric).
    pub window: usize,
    /// The rotary base of the global layers.
    pub global_theta: f32,
    /// The rotary base of the local layers.
    pub local_theta: f32,
    /// Columns per head (`head_dim`); heads times it need not be the hidden width.
    pub head_dim: usize,
    /// Key and value heads (`num_key_value_heads`); each serves `heads / kv_heads` query heads.
    pub kv_heads: usize,
    /// The attention scores' scale: Gemma's `query_pre_attn_scalar^-0.5`, else
    /// `head_dim^-0.5`.
    pub score_scale: f32,
    /// Whether a token attends to the tokens before it alone (Qwen3's decoder mask).
    pub causal: bool,
}

/// DeBERTa's settings beyond the common sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebertaConfig {
    /// The content-to-position term (`c2p` in `pos_att_type`, with `relative_attention`).
    pub c2p: bool,
    /// The position-to-content term (`p2c` in `pos_att_type`, with `relative_attention`).
    pub p2c: bool,
    /// Relative positions on each side of `rel_embeddings` (`position_buckets` where positive,
    /// else `max_relative_positions`, else `max_position_embeddings`).
    pub span: usize,
    /// Log buckets of relative position (`position_buckets`; 0 for none).
    pub buckets: usize,
    /// The distance the buckets reach (`max_relative_positions`, else
    /// `max_position_embeddings`).
    pub max_distance: usize,
    /// Whether the relative embeddings pass the encoder's LayerNorm (`norm_rel_ebd`).
    pub norm_relative: bool,
    /// Whether the position terms project the embeddings with the layer's own key and query
    /// weights (`share_att_key`), not with `pos_key_proj` and `pos_query_proj`.
    pub share_keys: bool,
    /// Whether absolute position embeddings are added to the word embeddings
    /// (`position_biased_input`).
    pub absolute: bool,
    /// The pooler's activation (`pooler_hidden_act`).
    pub pooler_act: Act,
}

/// T5's settings beyond the common sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct T5Config {
    /// Columns per head (`d_kv`); heads times it need not be the hidden width.
    pub head_dim: usize,
    /// Relative position buckets (`relative_attention_num_buckets`).
    pub buckets: usize,
    /// The distance from which keys share the farthest bucket (`relative_attention_max_distance`).
    pub max_distance: usize,
    /// Whether the feed-forward is gated: `act(x W0) * (x W1)` (`feed_forward_proj` `gated-*`).
    pub gated: bool,
}

/// ModernBERT's settings beyond the common sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct ModernConfig {
    /// For each layer, whether it attends within the sliding window (else to the whole sequence).
    pub local: Vec<bool>,
    /// The sliding window's half-width: a local layer's token attends to tokens at most this
    /// many positions away (`local_attention / 2`).
    pub window: usize,
    /// The rotary base of the global layers.
    pub global_theta: f32,
    /// The rotary base of the local layers.
    pub local_theta: f32,
    /// The activation of the prediction head (`classifier_activation`), which classifiers and
    /// the masked-language-model head share.
    pub head_act: Act,
    /// How a sequence classifier pools the tokens (`classifier_pooling`: CLS or mean).
    pub classifier_pooling: PoolMode,
}

/// The rotary positions of NomicBERT, GTE and Jina v3.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RotaryConfig {
    /// The rotary base (`rope_theta`; NomicBERT's original `rotary_emb_base`).
    pub theta: f32,
    /// How the positions are scaled.
    pub scaling: RopeScaling,
}

/// A rotary model's position scaling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// Unscaled (`rope_type: default`, or no `rope_scaling`).
    None,
    /// GTE's static NTK scaling by a factor (`rope_scaling: {"type": "ntk", "factor": F}`).
    Ntk(f32),
    /// transformers' `linear` rope type: every frequency divided by the factor.
    Linear(f32),
}

impl RotaryConfig {
    /// The base and position scale of the `Rope` op for heads `head_dim` wide.
    ///
    /// NTK scaling, as GTE's own code (and vLLM and text-embeddings-inference after it)
    /// computes it at every position: the base becomes `theta * F` and every frequency is
    /// divided by `F^(2 / head_dim)`, which is the same as scaling the positions by it (and is
    /// `linear` scaling by `F^(2 / head_dim)` of the base `theta * F`).
    pub fn rope(&self, head_dim: usize) -> (f32, f32) {
        let theta = f64::from(self.theta);
        let (theta, scale) = match self.scaling {
            RopeScaling::None => (theta, 1.0),
            RopeScaling::Ntk(f) => {
                let f = f64::from(f);
                (theta * f, f.powf(-2.0 / head_dim as f64))
            }
            RopeScaling::Linear(f) => (theta, 1.0 / f64::from(f)),
        };
        (theta as f32, scale as f32)
    }
}

/// The dropout probabilities training applies, from `config.json` (0 where it names none);
/// inference applies none.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Dropouts {
    /// On the embeddings, after their norm.
    pub embeddings: f32,
    /// On the attention probabilities.
    pub attention: f32,
    /// On the attention block's output projection, before its residual.
    pub attention_out: f32,
    /// In the feed-forward block: BERT's output projection before its residual, ModernBERT's
    /// gated units.
    pub ffn: f32,
    /// Before a sequence classifier's layers.
    pub classifier: f32,
    /// Before a token classifier's layer.
    pub token_classifier: f32,
}

impl Dropouts {
    /// Each probability checked to lie in `[0, 1)`.
    fn checked(self) -> Result<Dropouts> {
        let all = [
            self.embeddings,
            self.attention,
            self.attention_out,
            self.ffn,
            self.classifier,
            self.token_classifier,
        ];
        match all.iter().find(|p| !(0.0..1.0).contains(*p)) {
            Some(p) => Err(Error::format(format!(
                "config.json: a dropout probability of {p}; dropout probabilities lie in [0, 1)"
            ))),
            None => Ok(self),
        }
    }
}

/// The sizes of a BERT-like encoder, from `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderConfig {
    /// Which family.
    pub arch: Arch,
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden width.
    pub hidden: usize,
    /// The embeddings' width: the hidden width but for ELECTRA and ALBERT, which project them to
    /// it.
    pub embedding: usize,
    /// ALBERT's groups of shared layers and the layers in each (`num_hidden_groups`,
    /// `inner_group_num`); one of one for the other families.
    pub groups: (usize, usize),
    /// Layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// Feed-forward activation.
    pub act: Act,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// Rows of the position table.
    pub max_positions: usize,
    /// First position index (RoBERTa: padding index + 1).
    pub position_offset: usize,
    /// ModernBERT's own settings (`None` for the other families).
    pub modern: Option<ModernConfig>,
    /// T5's own settings (`None` for the other families).
    pub t5: Option<T5Config>,
    /// DeBERTa's own settings (`None` for the other families).
    pub deberta: Option<DebertaConfig>,
    /// NomicBERT's, GTE's and Jina v3's rotary positions (`None` for the other families).
    pub rotary: Option<RotaryConfig>,
    /// Gemma's and Qwen3's own settings (`None` for the other families).
    pub lm: Option<LmConfig>,
    /// Where training drops activations, and how much.
    pub dropout: Dropouts,
}

const SUPPORTED: &str = "bert, roberta, xlm-roberta, camembert, distilbert, mpnet, electra, albert, \
     modernbert, t5, deberta-v2, nomic_bert, new (GTE), gte, jina_embeddings_v3, gemma3_text \
     (EmbeddingGemma), qwen3";

/// The relative position buckets MPNet computes its attention bias with (transformers buckets
/// relative positions into 32 whatever `relative_attention_num_buckets` says), and the distance
/// from which they share the farthest.
pub(crate) const MPNET_BUCKETS: (usize, usize) = (32, 128);

fn get_usize(c: &Value, key: &str) -> Result<usize> {
    c.get(key).and_then(Value::as_u64).map(|v| v as usize).ok_or_else(|| {
        Error::format(format!("config.json: `{key}` is missing or not a whole number"))
    })
}

fn get_usize_or(c: &Value, key: &str, default: usize) -> Result<usize> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(_) => get_usize(c, key),
    }
}

fn get_str<'a>(c: &'a Value, key: &str, default: &'a str) -> &'a str {
    c.get(key).and_then(Value::as_str).unwrap_or(default)
}

fn get_f32(c: &Value, key: &str, default: f32) -> Result<f32> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| Error::format(format!("config.json: `{key}` is not a number"))),
    }
}

/// ALBERT's `(num_hidden_groups, inner_group_num)`: each at least 1, the groups dividing the
/// layers as transformers indexes them.
fn albert_groups(c: &Value) -> Result<(usize, usize)> {
    let layers = get_usize(c, "num_hidden_layers")?;
    let groups = get_usize_or(c, "num_hidden_groups", 1)?;
    let inner = get_usize_or(c, "inner_group_num", 1)?;
    if groups == 0 || inner == 0 || groups > layers.max(1) {
        return Err(Error::format(format!(
            "config.json: {groups} groups of {inner} layers for {layers} layers; ALBERT needs at \
             least one of each, and no more groups than layers"
        )));
    }
    Ok((groups, inner))
}

/// Maps a Hugging Face activation name to ours.
pub fn activation(name: &str) -> Result<Act> {
    match name {
        "gelu" => Ok(Act::Gelu),
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Act::GeluTanh),
        "relu" => Ok(Act::Relu),
        "silu" | "swish" => Ok(Act::Silu),
        "tanh" => Ok(Act::Tanh),
        other => Err(Error::unsupported(format!(
            "activation `{other}`; supported: gelu, gelu_new, gelu_pytorch_tanh, relu, silu, tanh"
        ))),
    }
}

/// The most layers an encoder runs (ALBERT's shared layers counted each time they run): far
/// past any published encoder (the largest run 48), a bound on what a `config.json` makes
/// Switchyard build.
pub(crate) const MAX_LAYERS: usize = 1024;

impl EncoderConfig {
    /// Reads the encoder's sizes from a parsed `config.json`; an error if one of them is zero.
    pub fn from_json(c: &Value) -> Result<EncoderConfig> {
        let config = Self::read(c)?;
        let sizes = [
            ("number of layers", config.layers),
            ("number of attention heads", config.heads),
            ("hidden size", config.hidden),
            ("embedding size", config.embedding),
            ("feed-forward size", config.ffn),
            ("vocabulary size", config.vocab),
            ("number of positions", config.max_positions.saturating_sub(config.position_offset)),
        ];
        if let Some((what, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(Error::format(format!("config.json: the {what} is 0")));
        }
        // Checked before the layers are built: a hostile count would exhaust memory first.
        let run = config.layers.saturating_mul(config.groups.1);
        if run > MAX_LAYERS {
            return Err(Error::unsupported(format!(
                "config.json: {run} layers to run; Switchyard builds encoders of at most \
                 {MAX_LAYERS}"
            )));
        }
        Ok(config)
    }

    fn read(c: &Value) -> Result<EncoderConfig> {
        let model_type = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        match model_type {
            "bert" | "roberta" | "xlm-roberta" | "camembert" | "mpnet" | "electra" | "albert" => {
                let arch = match model_type {
                    "bert" => Arch::Bert,
                    "mpnet" => Arch::MpNet,
                    "electra" => Arch::Electra,
                    "albert" => Arch::Albert,
                    _ => Arch::Roberta,
                };
                if arch == Arch::MpNet {
                    let buckets = get_usize_or(c, "relative_attention_num_buckets", 32)?;
                    if buckets != MPNET_BUCKETS.0 {
                        return Err(Error::unsupported(format!(
                            "config.json: relative_attention_num_buckets {buckets}; \
                             transformers' MPNet buckets positions into {} (its table's rows)",
                            MPNET_BUCKETS.0
                        )));
                    }
                }
                let act =
                    activation(c.get("hidden_act").and_then(Value::as_str).unwrap_or("gelu"))?;
                if let Some(p) = c.get("position_embedding_type").and_then(Value::as_str)
                    && p != "absolute"
                {
                    return Err(Error::unsupported(format!(
                        "position_embedding_type `{p}`; only absolute positions are supported"
                    )));
                }
                // MPNet's padding index is 1 whatever `pad_token_id` says.
                let (vocab, width) = (get_usize(c, "vocab_size")?, get_usize(c, "hidden_size")?);
                let pad = match arch {
                    Arch::MpNet => 1,
                    _ => c.get("pad_token_id").and_then(Value::as_u64).unwrap_or(1) as usize,
                };
                let hidden = get_f32(c, "hidden_dropout_prob", 0.1)?;
                let classifier = match arch {
                    Arch::Albert => get_f32(c, "classifier_dropout_prob", 0.1)?,
                    _ => get_f32(c, "classifier_dropout", hidden)?,
                };
                let dropout = Dropouts {
                    embeddings: hidden,
                    attention: get_f32(c, "attention_probs_dropout_prob", 0.1)?,
                    attention_out: hidden,
                    ffn: hidden,
                    classifier,
                    token_classifier: classifier,
                };
                Ok(EncoderConfig {
                    arch,
                    vocab,
                    hidden: width,
                    embedding: match arch {
                        Arch::Electra => get_usize_or(c, "embedding_size", width)?,
                        Arch::Albert => get_usize_or(c, "embedding_size", 128)?,
                        _ => width,
                    },
                    groups: match arch {
                        Arch::Albert => albert_groups(c)?,
                        _ => (1, 1),
                    },
                    layers: get_usize(c, "num_hidden_layers")?,
                    heads: get_usize(c, "num_attention_heads")?,
                    ffn: get_usize(c, "intermediate_size")?,
                    act,
                    eps: get_f32(c, "layer_norm_eps", 1e-12)?,
                    max_positions: get_usize(c, "max_position_embeddings")?,
                    position_offset: match arch {
                        Arch::Bert | Arch::Electra | Arch::Albert => 0,
                        _ => pad + 1,
                    },
                    modern: None,
                    t5: None,
                    deberta: None,
                    rotary: None,
                    lm: None,
                    dropout: dropout.checked()?,
                })
            }
            "distilbert" => Ok(EncoderConfig {
                arch: Arch::DistilBert,
                vocab: get_usize(c, "vocab_size")?,
                hidden: get_usize(c, "dim")?,
                embedding: get_usize(c, "dim")?,
                groups: (1, 1),
                layers: get_usize(c, "n_layers")?,
                heads: get_usize(c, "n_heads")?,
                ffn: get_usize(c, "hidden_dim")?,
                act: activation(c.get("activation").and_then(Value::as_str).unwrap_or("gelu"))?,
                eps: 1e-12,
                max_positions: get_usize(c, "max_position_embeddings")?,
                position_offset: 0,
                modern: None,
                t5: None,
                deberta: None,
                rotary: None,
                lm: None,
                dropout: Dropouts {
                    embeddings: get_f32(c, "dropout", 0.1)?,
                    attention: get_f32(c, "attention_dropout", 0.1)?,
                    attention_out: 0.0,
                    ffn: get_f32(c, "dropout", 0.1)?,
                    classifier: get_f32(c, "seq_classif_dropout", 0.2)?,
                    token_classifier: get_f32(c, "dropout", 0.1)?,
                }
                .checked()?,
            }),
            "modernbert" => modernbert(c),
            "t5" => t5(c),
            "deberta-v2" => deberta(c),
            "nomic_bert" => rotary_bert(c, Arch::NomicBert),
            "new" | "gte" => rotary_bert(c, Arch::Gte),
            "jina_embeddings_v3" => rotary_bert(c, Arch::JinaV3),
            "gemma3_text" => gemma(c),
            "qwen3" => qwen3(c),
            "" => Err(Error::format(format!(
                "config.json has no `model_type`; supported model types: {SUPPORTED}"
            ))),
            other => Err(Error::unsupported(format!(
                "model type `{other}`; supported model types: {SUPPORTED}"
            ))),
        }
    }

    /// Columns per attention head; an error if the heads do not divide the width.
    ///
    /// Rotary positions (ModernBERT, NomicBERT, GTE, Jina v3) also need it even.
    pub fn head_dim(&self) -> Result<usize> {
        if self.heads == 0 || !self.hidden.is_multiple_of(self.heads) {
            return Err(Error::format(format!(
                "config.json: {} heads do not divide the hidden size {}",
                self.heads, self.hidden
            )));
        }
        let hd = self.hidden / self.heads;
        let rotary =
            matches!(self.arch, Arch::ModernBert | Arch::NomicBert | Arch::Gte | Arch::JinaV3);
        if rotary && !hd.is_multiple_of(2) {
            return Err(Error::format(format!(
                "config.json: rotary positions need an even head width, not {hd}"
            )));
        }
        Ok(hd)
    }
}

/// ModernBERT's `config.json`, as transformers 4.48 and later write it (`layer_types` and
/// `rope_parameters`, or the older `global_attn_every_n_layers` and `*_rope_theta`).
/// T5's encoder from its `config.json`.
fn t5(c: &Value) -> Result<EncoderConfig> {
    let proj = get_str(c, "feed_forward_proj", "relu");
    let (gated, act) = match proj.split_once('-') {
        Some(("gated", act)) => (true, act),
        None => (false, proj),
        Some(_) => {
            return Err(Error::format(format!(
                "config.json: feed_forward_proj `{proj}` is not `ACT` or `gated-ACT`"
            )));
        }
    };
    // transformers reads `gated-gelu` as the tanh approximation, for T5 v1.1's checkpoints.
    let act = if proj == "gated-gelu" { Act::GeluTanh } else { activation(act)? };
    let hidden = get_usize(c, "d_model")?;
    let p = get_f32(c, "dropout_rate", 0.1)?;
    let t5 = T5Config {
        head_dim: get_usize(c, "d_kv")?,
        buckets: get_usize_or(c, "relative_attention_num_buckets", 32)?,
        max_distance: get_usize_or(c, "relative_attention_max_distance", 128)?,
        gated,
    };
    if t5.head_dim == 0 {
        return Err(Error::format("config.json: d_kv is 0"));
    }
    Ok(EncoderConfig {
        arch: Arch::T5,
        vocab: get_usize(c, "vocab_size")?,
        hidden,
        embedding: hidden,
        groups: (1, 1),
        layers: get_usize(c, "num_layers")?,
        heads: get_usize(c, "num_heads")?,
        ffn: get_usize(c, "d_ff")?,
        act,
        eps: get_f32(c, "layer_norm_epsilon", 1e-6)?,
        // Relative positions have no table to run out of; `n_positions` is what its
        // tokenizers truncate at.
        max_positions: get_usize_or(c, "n_positions", 512)?,
        position_offset: 0,
        modern: None,
        t5: Some(t5),
        deberta: None,
        rotary: None,
        lm: None,
        dropout: Dropouts {
            embeddings: p,
            attention: p,
            attention_out: p,
            ffn: p,
            classifier: p,
            token_classifier: p,
        }
        .checked()?,
    })
}

/// The most relative positions a side DeBERTa's tables may hold.
const MAX_RELATIVE: usize = 1 << 16;

/// A whole number that may be negative (DeBERTa's -1 for "unset"); `default` where absent.
fn get_i64_or(c: &Value, key: &str, default: i64) -> Result<i64> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_i64()
            .ok_or_else(|| Error::format(format!("config.json: `{key}` is not a whole number"))),
    }
}

/// DeBERTa v2 / v3 from its `config.json`, as transformers' `DebertaV2Config` reads it.
fn deberta(c: &Value) -> Result<EncoderConfig> {
    let hidden = get_usize(c, "hidden_size")?;
    let heads = get_usize(c, "num_attention_heads")?;
    if get_usize_or(c, "conv_kernel_size", 0)? > 0 {
        return Err(Error::unsupported(
            "config.json: DeBERTa's convolution layer (conv_kernel_size); Switchyard runs \
             DeBERTa v2 and v3 without it",
        ));
    }
    if let Some(size) = c.get("attention_head_size").and_then(Value::as_u64)
        && heads > 0
        && size as usize * heads != hidden
    {
        return Err(Error::unsupported(format!(
            "config.json: attention_head_size {size} with {heads} heads in a width of {hidden}"
        )));
    }
    let kinds: Vec<String> = match c.get("pos_att_type") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(t)) => {
            t.to_lowercase().split('|').map(|k| k.trim().to_owned()).collect()
        }
        Some(Value::Array(ts)) => {
            ts.iter().map(|t| t.as_str().unwrap_or("?").trim().to_lowercase()).collect()
        }
        Some(other) => {
            return Err(Error::format(format!("config.json: pos_att_type {other} is not a list")));
        }
    };
    if let Some(k) = kinds.iter().find(|k| !["c2p", "p2c", ""].contains(&k.as_str())) {
        return Err(Error::unsupported(format!(
            "config.json: pos_att_type `{k}`; DeBERTa v2 and v3 take c2p and p2c"
        )));
    }
    let max_positions = get_usize(c, "max_position_embeddings")?;
    let max_relative = get_i64_or(c, "max_relative_positions", -1)?;
    let max_distance = if max_relative < 1 { max_positions } else { max_relative as usize };
    let buckets = get_i64_or(c, "position_buckets", -1)?.max(0) as usize;
    // Far past any published DeBERTa (256 buckets, 512 positions): a bound on the tables a
    // config.json makes Switchyard compute and hold.
    if buckets.max(max_distance) > MAX_RELATIVE {
        return Err(Error::unsupported(format!(
            "config.json: position_buckets {buckets} and max_relative_positions {max_distance}; \
             Switchyard takes at most {MAX_RELATIVE}"
        )));
    }
    let relative = c.get("relative_attention").and_then(Value::as_bool).unwrap_or(false);
    let norm = get_str(c, "norm_rel_ebd", "none").to_lowercase();
    let deberta = DebertaConfig {
        c2p: relative && kinds.iter().any(|k| k == "c2p"),
        p2c: relative && kinds.iter().any(|k| k == "p2c"),
        span: if buckets > 0 { buckets } else { max_distance },
        buckets,
        max_distance,
        norm_relative: norm.split('|').any(|n| n.trim() == "layer_norm"),
        share_keys: c.get("share_att_key").and_then(Value::as_bool).unwrap_or(false),
        absolute: c.get("position_biased_input").and_then(Value::as_bool).unwrap_or(true),
        pooler_act: activation(get_str(c, "pooler_hidden_act", "gelu"))?,
    };
    let p = get_f32(c, "hidden_dropout_prob", 0.1)?;
    Ok(EncoderConfig {
        arch: Arch::DebertaV2,
        vocab: get_usize(c, "vocab_size")?,
        hidden,
        embedding: get_usize_or(c, "embedding_size", hidden)?,
        groups: (1, 1),
        layers: get_usize(c, "num_hidden_layers")?,
        heads,
        ffn: get_usize(c, "intermediate_size")?,
        act: activation(get_str(c, "hidden_act", "gelu"))?,
        eps: get_f32(c, "layer_norm_eps", 1e-7)?,
        max_positions,
        position_offset: 0,
        modern: None,
        t5: None,
        deberta: Some(deberta),
        rotary: None,
        lm: None,
        dropout: Dropouts {
            embeddings: p,
            attention: get_f32(c, "attention_probs_dropout_prob", 0.1)?,
            attention_out: p,
            ffn: p,
            classifier: get_f32(c, "cls_dropout", p)?,
            token_classifier: p,
        }
        .checked()?,
    })
}

/// The first of `keys` that `c` has (a value other than null), with that key.
fn first_of<'a>(c: &'a Value, keys: &[&'static str]) -> Option<(&'static str, &'a Value)> {
    keys.iter().find_map(|&k| c.get(k).filter(|v| !v.is_null()).map(|v| (k, v)))
}

/// A whole number under the first of `keys` that `c` has; an error naming them all if none.
fn usize_of(c: &Value, keys: &[&'static str]) -> Result<usize> {
    match first_of(c, keys) {
        Some((key, _)) => get_usize(c, key),
        None => Err(Error::format(format!("config.json: none of {} is present", keys.join(", ")))),
    }
}

/// A number under the first of `keys` that `c` has, else `default`.
fn f32_of(c: &Value, keys: &[&'static str], default: f32) -> Result<f32> {
    match first_of(c, keys) {
        Some((key, _)) => get_f32(c, key, default),
        None => Ok(default),
    }
}

/// transformers' defaults for NomicBERT, GTE and Jina v3, where `config.json` leaves a setting out.
struct RotaryDefaults {
    family: &'static str,
    theta: f32,
    act: &'static str,
    eps: f32,
    positions: usize,
    hidden_dropout: f32,
    attention_dropout: f32,
}

/// NomicBERT, GTE and Jina v3 from their `config.json`: transformers' own keys (`hidden_size`,
/// `rope_parameters`, ...), or the keys of the checkpoints published with their own code
/// (NomicBERT's GPT-2-style `n_embd`, `rotary_emb_base`, `activation_function`; GTE's `new`
/// with `rope_theta`). Settings that change the computation in ways not built here are errors.
fn rotary_bert(c: &Value, arch: Arch) -> Result<EncoderConfig> {
    let d = match arch {
        Arch::Gte => RotaryDefaults {
            family: "GTE",
            theta: 160_000.0,
            act: "gelu",
            eps: 1e-12,
            positions: 8192,
            hidden_dropout: 0.1,
            attention_dropout: 0.0,
        },
        Arch::JinaV3 => RotaryDefaults {
            family: "Jina v3",
            theta: 20_000.0,
            act: "gelu",
            eps: 1e-5,
            positions: 8194,
            hidden_dropout: 0.1,
            attention_dropout: 0.1,
        },
        _ => RotaryDefaults {
            family: "NomicBERT",
            theta: 1000.0,
            act: "silu",
            eps: 1e-12,
            positions: 2048,
            hidden_dropout: 0.0,
            attention_dropout: 0.0,
        },
    };
    let refuse =
        |what: String| Err(Error::unsupported(format!("config.json: {what} ({})", d.family)));
    let is_true = |key: &str| c.get(key).and_then(Value::as_bool).unwrap_or(false);
    let flags = [
        "prenorm",
        "causal",
        "parallel_block",
        "logn_attention_scale",
        "logn_attention_clip1",
        "rotary_emb_interleaved",
    ];
    for key in flags {
        if is_true(key) {
            return refuse(format!("`{key}: true`"));
        }
    }
    for key in ["rotary_scaling_factor", "rotary_emb_scale_base"] {
        if let Some((_, v)) = first_of(c, &[key]) {
            return refuse(format!("{key} {v}; only unscaled rotary positions are supported"));
        }
    }
    if get_usize_or(c, "num_experts", 0)? > 0 {
        return refuse("mixture-of-experts layers (`num_experts`)".into());
    }
    let fraction = get_f32(c, "rotary_emb_fraction", 1.0)?;
    if fraction != 1.0 {
        return refuse(format!("rotary_emb_fraction {fraction}; only 1 is supported"));
    }
    if let Some(p) = c.get("position_embedding_type").and_then(Value::as_str)
        && p != "rope"
    {
        return refuse(format!("position_embedding_type `{p}`; only `rope` is supported"));
    }
    if let Some(n) = c.get("layer_norm_type").and_then(Value::as_str)
        && n != "layer_norm"
    {
        return refuse(format!("layer_norm_type `{n}`; only `layer_norm` is supported"));
    }
    // transformers' `hidden_act` drives a gated feed-forward; the original NomicBERT names
    // the gated unit itself.
    let act = match c.get("activation_function").and_then(Value::as_str) {
        Some("swiglu") => Act::Silu,
        Some("geglu") => Act::Gelu,
        Some("glu") => Act::Sigmoid,
        Some(other) => {
            return refuse(format!(
                "activation_function `{other}`; supported: swiglu, geglu, glu (gated \
                 feed-forwards)"
            ));
        }
        None => activation(get_str(c, "hidden_act", d.act))?,
    };
    let hidden = usize_of(c, &["hidden_size", "n_embd"])?;
    let heads = usize_of(c, &["num_attention_heads", "n_head"])?;
    let rotary = rotary_settings(c, arch, &d, (heads > 0).then(|| hidden / heads))?;
    let hidden_drop = f32_of(c, &["hidden_dropout_prob", "resid_pdrop"], d.hidden_dropout)?;
    Ok(EncoderConfig {
        arch,
        vocab: get_usize(c, "vocab_size")?,
        hidden,
        embedding: hidden,
        groups: (1, 1),
        layers: usize_of(c, &["num_hidden_layers", "n_layer"])?,
        heads,
        ffn: usize_of(c, &["intermediate_size", "n_inner"])?,
        act,
        eps: f32_of(c, &["layer_norm_eps", "layer_norm_epsilon"], d.eps)?,
        // Rotary positions have no table to run out of; this is the longest sequence the model
        // is published for. nomic-embed-text-v1.5's config.json gives 8192 as `n_positions`
        // beside a `max_position_embeddings` of 2048 (the length it was trained at), and
        // sentence-transformers' `max_seq_length` of 8192.
        max_positions: match first_of(c, &["n_positions", "max_position_embeddings"]) {
            Some((key, _)) => get_usize(c, key)?,
            None => d.positions,
        },
        position_offset: 0,
        modern: None,
        t5: None,
        deberta: None,
        rotary: Some(rotary),
        lm: None,
        dropout: Dropouts {
            embeddings: f32_of(c, &["hidden_dropout_prob", "embd_pdrop"], hidden_drop)?,
            attention: f32_of(
                c,
                &["attention_probs_dropout_prob", "attn_pdrop"],
                d.attention_dropout,
            )?,
            attention_out: hidden_drop,
            ffn: hidden_drop,
            classifier: f32_of(c, &["classifier_dropout"], hidden_drop)?,
            token_classifier: f32_of(c, &["classifier_dropout"], hidden_drop)?,
        }
        .checked()?,
    })
}

/// A rotary family's base and position scaling: transformers' `rope_parameters` (`default`, or
/// `linear` as the converted GTE checkpoints state GTE's NTK scaling), else the keys of the
/// family's own code (`rope_theta` or `rotary_emb_base`, and GTE's `rope_scaling`). Where a
/// config has both `rope_parameters` and `rope_scaling`, they must give heads `head_dim` wide
/// the same frequencies.
fn rotary_settings(
    c: &Value,
    arch: Arch,
    d: &RotaryDefaults,
    head_dim: Option<usize>,
) -> Result<RotaryConfig> {
    let refuse = |what: String| Error::unsupported(format!("config.json: {what} ({})", d.family));
    let base = |theta: f32| match theta.is_finite() && theta > 1.0 {
        true => Ok(theta),
        false => Err(Error::format(format!("config.json: a rotary base of {theta}"))),
    };
    let factor = |p: &Value, what: &str| match p.get("factor").and_then(Value::as_f64) {
        Some(f) if f.is_finite() && f >= 1.0 => Ok(f as f32),
        _ => Err(Error::format(format!("config.json: {what} {p} needs a `factor` of at least 1"))),
    };
    // The keys of each family's own code; GTE's code alone defines a scaling.
    let scaling = first_of(c, &["rope_scaling"]).map(|(_, v)| v);
    let own = || -> Result<RotaryConfig> {
        let theta = base(f32_of(c, &["rope_theta", "rotary_emb_base"], d.theta)?)?;
        let scaling = match scaling {
            None => RopeScaling::None,
            Some(s) if arch != Arch::Gte => {
                return Err(refuse(format!(
                    "rope_scaling {s}; only unscaled rotary positions are supported"
                )));
            }
            Some(s) => {
                let ty = s.get("type").or_else(|| s.get("rope_type")).and_then(Value::as_str);
                if ty != Some("ntk") {
                    return Err(refuse(format!(
                        "rope_scaling {s}; only `\"type\": \"ntk\"` is supported"
                    )));
                }
                if let Some(b) = s.get("mixed_b").filter(|b| !b.is_null()) {
                    return Err(refuse(format!(
                        "rope_scaling's mixed_b {b}; only plain NTK scaling is supported"
                    )));
                }
                // Below 1, GTE's code leaves positions unscaled where others scale them.
                RopeScaling::Ntk(factor(s, "rope_scaling")?)
            }
        };
        Ok(RotaryConfig { theta, scaling })
    };
    let Some(p) = c.get("rope_parameters").filter(|p| !p.is_null()) else {
        return own();
    };
    let theta = base(get_f32(p, "rope_theta", d.theta)?)?;
    let partial = get_f32(p, "partial_rotary_factor", 1.0)?;
    if partial != 1.0 {
        return Err(refuse(format!("partial_rotary_factor {partial}; only 1 is supported")));
    }
    let stated = match get_str(p, "rope_type", "default") {
        "default" => RotaryConfig { theta, scaling: RopeScaling::None },
        "linear" => {
            RotaryConfig { theta, scaling: RopeScaling::Linear(factor(p, "rope_parameters")?) }
        }
        ty => return Err(refuse(format!("rope_type `{ty}`; supported: default, linear"))),
    };
    if let (Some(s), Some(hd)) = (scaling, head_dim) {
        let (a, b) = (stated.rope(hd), own()?.rope(hd));
        let near = |x: f32, y: f32| (x - y).abs() <= 1e-6 * x.abs().max(y.abs());
        if !(near(a.0, b.0) && near(a.1, b.1)) {
            return Err(Error::format(format!(
                "config.json: rope_parameters {p} and rope_scaling {s} give different rotary \
                 frequencies"
            )));
        }
    }
    Ok(stated)
}

/// For each of `layers` layers, whether it attends within a sliding window: `layer_types`, else
/// `legacy(layer)` (the older keys' pattern).
fn local_layers(c: &Value, layers: usize, legacy: impl Fn(usize) -> bool) -> Result<Vec<bool>> {
    let local = match c.get("layer_types") {
        Some(Value::Array(types)) => types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(Error::unsupported(format!(
                    "config.json: layer type {t}; supported: full_attention, sliding_attention"
                ))),
            })
            .collect::<Result<Vec<_>>>()?,
        _ => (0..layers).map(legacy).collect(),
    };
    if local.len() != layers {
        return Err(Error::format(format!(
            "config.json: {} layer types for {layers} layers",
            local.len()
        )));
    }
    Ok(local)
}

/// The rotary base of the layers of `kind` (`full_attention`, `sliding_attention`):
/// `rope_parameters[kind]`, else the older top-level key `legacy`; any scaling is an error.
fn layer_theta(c: &Value, kind: &str, legacy: &str, default: f32) -> Result<f32> {
    if c.get("rope_scaling").is_some_and(|v| !v.is_null()) {
        return Err(Error::unsupported("config.json: rope_scaling"));
    }
    let theta = match c.get("rope_parameters").and_then(|r| r.get(kind)) {
        Some(p) => {
            let ty = get_str(p, "rope_type", "default");
            if ty != "default" {
                return Err(Error::unsupported(format!(
                    "config.json: rope_type `{ty}` for {kind}; only `default` is supported"
                )));
            }
            get_f32(p, "rope_theta", default)?
        }
        None => get_f32(c, legacy, default)?,
    };
    match theta.is_finite() && theta > 1.0 {
        true => Ok(theta),
        false => Err(Error::format(format!("config.json: a rotary base of {theta}"))),
    }
}

/// The key and value heads (`num_key_value_heads`, which must divide the `heads` query heads)
/// and the heads' width (`head_dim`, even for rotary positions), with these defaults.
fn grouped_heads(c: &Value, heads: usize, kv: usize, width: usize) -> Result<(usize, usize)> {
    let kv_heads = match c.get("num_key_value_heads").filter(|v| !v.is_null()) {
        Some(_) => get_usize(c, "num_key_value_heads")?,
        None => kv,
    };
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(Error::format(format!(
            "config.json: {kv_heads} key and value heads do not divide {heads} query heads"
        )));
    }
    let head_dim = get_usize_or(c, "head_dim", width)?;
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(Error::format(format!(
            "config.json: rotary positions need an even head width, not {head_dim}"
        )));
    }
    if heads.checked_mul(head_dim).is_none() {
        return Err(Error::format(format!("config.json: {heads} heads of {head_dim} columns")));
    }
    Ok((kv_heads, head_dim))
}

/// Qwen3 (Qwen3-Embedding), with transformers' defaults where `config.json` is silent: a
/// decoder run with its causal mask. Sliding-window layers are refused.
fn qwen3(c: &Value) -> Result<EncoderConfig> {
    if c.get("use_sliding_window").and_then(Value::as_bool) == Some(true) {
        return Err(Error::unsupported(
            "config.json: `use_sliding_window: true` (Qwen3); only full attention is supported",
        ));
    }
    let layers = get_usize(c, "num_hidden_layers")?;
    if local_layers(c, layers, |_| false)?.contains(&true) {
        return Err(Error::unsupported(
            "config.json: sliding_attention layers (Qwen3); only full attention is supported",
        ));
    }
    let heads = get_usize(c, "num_attention_heads")?;
    // transformers: 32 key and value heads where config.json names none.
    let (kv_heads, head_dim) = grouped_heads(c, heads, 32, 128)?;
    // transformers' `rope_parameters` (one set for every layer), else `rope_theta`.
    if c.get("rope_scaling").is_some_and(|v| !v.is_null()) {
        return Err(Error::unsupported("config.json: rope_scaling (Qwen3)"));
    }
    let theta = match c.get("rope_parameters").filter(|p| !p.is_null()) {
        Some(p) => {
            let ty = get_str(p, "rope_type", "default");
            if ty != "default" {
                return Err(Error::unsupported(format!(
                    "config.json: rope_type `{ty}` (Qwen3); only `default` is supported"
                )));
            }
            get_f32(p, "rope_theta", 10_000.0)?
        }
        None => get_f32(c, "rope_theta", 10_000.0)?,
    };
    if !(theta.is_finite() && theta > 1.0) {
        return Err(Error::format(format!("config.json: a rotary base of {theta}")));
    }
    let lm = LmConfig {
        local: vec![false; layers],
        window: 0,
        global_theta: theta,
        local_theta: theta,
        head_dim,
        kv_heads,
        score_scale: (head_dim as f64).powf(-0.5) as f32,
        causal: true,
    };
    lm_encoder(c, Arch::Qwen3, heads, get_str(c, "hidden_act", "silu"), 32_768, lm)
}

/// A Gemma or Qwen3 `config.json`'s common sizes around its own settings `lm`: the
/// feed-forward's activation `act`, and `positions` where `max_position_embeddings` is absent.
fn lm_encoder(
    c: &Value,
    arch: Arch,
    heads: usize,
    act: &str,
    positions: usize,
    lm: LmConfig,
) -> Result<EncoderConfig> {
    let hidden = get_usize(c, "hidden_size")?;
    let attention = get_f32(c, "attention_dropout", 0.0)?;
    Ok(EncoderConfig {
        arch,
        vocab: get_usize(c, "vocab_size")?,
        hidden,
        embedding: hidden,
        groups: (1, 1),
        layers: lm.local.len(),
        heads,
        ffn: get_usize(c, "intermediate_size")?,
        act: activation(act)?,
        eps: get_f32(c, "rms_norm_eps", 1e-6)?,
        max_positions: get_usize_or(c, "max_position_embeddings", positions)?,
        position_offset: 0,
        modern: None,
        t5: None,
        deberta: None,
        rotary: None,
        lm: Some(lm),
        dropout: Dropouts { attention, ..Dropouts::default() }.checked()?,
    })
}

/// Gemma 3's text model (EmbeddingGemma), with transformers' defaults where `config.json` is
/// silent. Only bidirectional attention is built: a causal Gemma is a decoder.
fn gemma(c: &Value) -> Result<EncoderConfig> {
    if c.get("use_bidirectional_attention").and_then(Value::as_bool) != Some(true) {
        return Err(Error::unsupported(
            "config.json: a Gemma 3 with causal attention (`use_bidirectional_attention` not \
             true) is a decoder; only EmbeddingGemma's bidirectional attention is supported",
        ));
    }
    if let Some(cap) = c.get("attn_logit_softcapping").filter(|v| !v.is_null()) {
        return Err(Error::unsupported(format!(
            "config.json: attn_logit_softcapping {cap}; only uncapped attention scores are \
             supported"
        )));
    }
    let layers = get_usize(c, "num_hidden_layers")?;
    let pattern = get_usize_or(c, "sliding_window_pattern", 6)?.max(1);
    let local = local_layers(c, layers, |l| !(l + 1).is_multiple_of(pattern))?;
    let heads = get_usize(c, "num_attention_heads")?;
    let (kv_heads, head_dim) = grouped_heads(c, heads, 4, 256)?;
    let scalar = get_f32(c, "query_pre_attn_scalar", 256.0)?;
    if !(scalar.is_finite() && scalar > 0.0) {
        return Err(Error::format(format!("config.json: a query_pre_attn_scalar of {scalar}")));
    }
    let lm = LmConfig {
        local,
        window: get_usize_or(c, "sliding_window", 4096)? / 2,
        global_theta: layer_theta(c, "full_attention", "rope_theta", 1_000_000.0)?,
        local_theta: layer_theta(c, "sliding_attention", "rope_local_base_freq", 10_000.0)?,
        head_dim,
        kv_heads,
        score_scale: f64::from(scalar).powf(-0.5) as f32,
        causal: false,
    };
    let act = get_str(c, "hidden_activation", "gelu_pytorch_tanh");
    lm_encoder(c, Arch::Gemma, heads, act, 131_072, lm)
}

fn modernbert(c: &Value) -> Result<EncoderConfig> {
    let layers = get_usize(c, "num_hidden_layers")?;
    let every = get_usize_or(c, "global_attn_every_n_layers", 3)?.max(1);
    let local = local_layers(c, layers, |l| !l.is_multiple_of(every))?;
    let theta = |kind: &str, legacy: &str, default: f32| layer_theta(c, kind, legacy, default);
    let pooling = match get_str(c, "classifier_pooling", "cls") {
        "cls" => PoolMode::Cls,
        "mean" => PoolMode::Mean,
        other => {
            return Err(Error::unsupported(format!(
                "config.json: classifier_pooling `{other}`; supported: cls, mean"
            )));
        }
    };
    let hidden = get_usize(c, "hidden_size")?;
    Ok(EncoderConfig {
        arch: Arch::ModernBert,
        vocab: get_usize(c, "vocab_size")?,
        hidden,
        embedding: hidden,
        groups: (1, 1),
        layers,
        heads: get_usize(c, "num_attention_heads")?,
        ffn: get_usize(c, "intermediate_size")?,
        act: activation(get_str(c, "hidden_activation", "gelu"))?,
        eps: get_f32(c, "norm_eps", 1e-5)?,
        max_positions: get_usize_or(c, "max_position_embeddings", 8192)?,
        position_offset: 0,
        t5: None,
        deberta: None,
        rotary: None,
        lm: None,
        modern: Some(ModernConfig {
            local,
            window: get_usize_or(c, "local_attention", 128)? / 2,
            global_theta: theta("full_attention", "global_rope_theta", 160_000.0)?,
            local_theta: theta("sliding_attention", "local_rope_theta", 10_000.0)?,
            head_act: activation(get_str(c, "classifier_activation", "gelu"))?,
            classifier_pooling: pooling,
        }),
        dropout: Dropouts {
            embeddings: get_f32(c, "embedding_dropout", 0.0)?,
            attention: get_f32(c, "attention_dropout", 0.0)?,
            attention_out: get_f32(c, "attention_dropout", 0.0)?,
            ffn: get_f32(c, "mlp_dropout", 0.0)?,
            classifier: get_f32(c, "classifier_dropout", 0.0)?,
            token_classifier: get_f32(c, "classifier_dropout", 0.0)?,
        }
        .checked()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bert_roberta_and_distilbert() {
        let bert = serde_json::json!({"model_type": "bert", "vocab_size": 100, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
            "hidden_act": "gelu", "layer_norm_eps": 1e-12, "max_position_embeddings": 64});
        let c = EncoderConfig::from_json(&bert).unwrap();
        assert_eq!((c.arch, c.head_dim().unwrap(), c.position_offset), (Arch::Bert, 8, 0));

        let mut roberta = bert.clone();
        roberta["model_type"] = "xlm-roberta".into();
        roberta["pad_token_id"] = 1.into();
        roberta["hidden_act"] = "gelu_new".into();
        let c = EncoderConfig::from_json(&roberta).unwrap();
        assert_eq!((c.arch, c.position_offset, c.act), (Arch::Roberta, 2, Act::GeluTanh));

        let distil = serde_json::json!({"model_type": "distilbert", "vocab_size": 100, "dim": 32,
            "n_layers": 2, "n_heads": 4, "hidden_dim": 64, "activation": "relu",
            "max_position_embeddings": 64});
        let c = EncoderConfig::from_json(&distil).unwrap();
        assert_eq!((c.arch, c.act, c.ffn), (Arch::DistilBert, Act::Relu, 64));
    }

    #[test]
    fn reads_mpnet_with_positions_from_two_and_refuses_another_bucket_count() {
        let mut mpnet = serde_json::json!({"model_type": "mpnet", "vocab_size": 100,
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 48, "max_position_embeddings": 64, "pad_token_id": 0});
        let c = EncoderConfig::from_json(&mpnet).unwrap();
        // MPNet's padding index is 1 whatever pad_token_id says.
        assert_eq!((c.arch, c.position_offset, c.act), (Arch::MpNet, 2, Act::Gelu));
        mpnet["relative_attention_num_buckets"] = 64.into();
        let e = EncoderConfig::from_json(&mpnet).unwrap_err().to_string();
        assert!(e.contains("relative_attention_num_buckets 64"), "{e}");
    }

    #[test]
    fn a_config_that_runs_more_layers_than_any_encoder_is_refused() {
        let mut bert = serde_json::json!({"model_type": "bert", "vocab_size": 100,
            "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
            "max_position_embeddings": 64, "num_hidden_layers": MAX_LAYERS});
        EncoderConfig::from_json(&bert).unwrap();
        bert["num_hidden_layers"] = 1_000_000_000_000_000_u64.into();
        let e = EncoderConfig::from_json(&bert).unwrap_err().to_string();
        assert!(e.contains("1000000000000000 layers to run; Switchyard builds"), "{e}");
        // ALBERT runs each group's shared layers once per layer of the group.
        let mut albert = bert.clone();
        albert["model_type"] = "albert".into();
        (albert["num_hidden_layers"], albert["inner_group_num"]) = (512.into(), 3.into());
        let e = EncoderConfig::from_json(&albert).unwrap_err().to_string();
        assert!(e.contains("1536 layers to run"), "{e}");
    }

    #[test]
    fn reads_albert_groups_and_refuses_impossible_ones() {
        let mut albert = serde_json::json!({"model_type": "albert", "vocab_size": 100,
            "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
            "intermediate_size": 48, "max_position_embeddings": 64, "num_hidden_groups": 2});
        let c = EncoderConfig::from_json(&albert).unwrap();
        // transformers' defaults: embeddings 128 wide, one layer a group.
        assert_eq!((c.arch, c.embedding, c.groups), (Arch::Albert, 128, (2, 1)));
        for (groups, inner) in [(0, 1), (5, 1), (2, 0)] {
            albert["num_hidden_groups"] = groups.into();
            albert["inner_group_num"] = inner.into();
            let e = EncoderConfig::from_json(&albert).unwrap_err().to_string();
            assert!(e.contains(&format!("{groups} groups of {inner} layers for 4")), "{e}");
        }
    }

    #[test]
    fn reads_t5_feed_forwards_and_refuses_malformed_ones() {
        let mut t5 = serde_json::json!({"model_type": "t5", "vocab_size": 100, "d_model": 32,
            "d_kv": 6, "d_ff": 48, "num_layers": 2, "num_heads": 4});
        let c = EncoderConfig::from_json(&t5).unwrap();
        let want = T5Config { head_dim: 6, buckets: 32, max_distance: 128, gated: false };
        assert_eq!((c.arch, c.act, c.t5, c.max_positions), (Arch::T5, Act::Relu, Some(want), 512));
        // `gated-gelu` is the tanh approximation; another gated activation is its own.
        for (proj, act) in [("gated-gelu", Act::GeluTanh), ("gated-silu", Act::Silu)] {
            t5["feed_forward_proj"] = proj.into();
            let c = EncoderConfig::from_json(&t5).unwrap();
            assert_eq!((c.act, c.t5.map(|t| t.gated)), (act, Some(true)), "{proj}");
        }
        for (proj, want) in [("gelu-gated", "is not `ACT` or `gated-ACT`"), ("mish", "`mish`")] {
            t5["feed_forward_proj"] = proj.into();
            let e = EncoderConfig::from_json(&t5).unwrap_err().to_string();
            assert!(e.contains(want), "{proj}: {e}");
        }
        t5["feed_forward_proj"] = "relu".into();
        t5["d_kv"] = 0.into();
        let e = EncoderConfig::from_json(&t5).unwrap_err().to_string();
        assert!(e.contains("d_kv is 0"), "{e}");
    }

    fn modern() -> Value {
        serde_json::json!({"model_type": "modernbert", "vocab_size": 100, "hidden_size": 32,
            "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 48,
            "local_attention": 8, "classifier_pooling": "mean"})
    }

    #[test]
    fn reads_modernbert_old_and_new_layer_settings() {
        // Older configs: a global layer every n layers, thetas as top-level keys.
        let mut old = modern();
        old["global_attn_every_n_layers"] = 2.into();
        old["local_rope_theta"] = 500.0.into();
        let c = EncoderConfig::from_json(&old).unwrap();
        let m = c.modern.unwrap();
        assert_eq!(m.local, [false, true, false, true]);
        assert_eq!((m.window, m.global_theta, m.local_theta), (4, 160_000.0, 500.0));
        assert_eq!((m.classifier_pooling, c.eps, c.act), (PoolMode::Mean, 1e-5, Act::Gelu));

        // transformers 5: explicit layer types and per-kind rope parameters.
        let mut new = modern();
        new["layer_types"] = serde_json::json!([
            "full_attention",
            "full_attention",
            "sliding_attention",
            "full_attention"
        ]);
        new["rope_parameters"] = serde_json::json!({
            "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}});
        let m = EncoderConfig::from_json(&new).unwrap().modern.unwrap();
        assert_eq!(m.local, [false, false, true, false]);
        assert_eq!((m.global_theta, m.local_theta), (1000.0, 10.0));
    }

    #[test]
    fn modernbert_settings_we_cannot_honour_are_errors() {
        let mut c = modern();
        c["rope_parameters"] = serde_json::json!({"full_attention": {"rope_type": "yarn"}});
        let e = EncoderConfig::from_json(&c).unwrap_err().to_string();
        assert!(e.contains("rope_type `yarn`"), "{e}");
        let mut c = modern();
        c["layer_types"] = serde_json::json!(["full_attention"]);
        let e = EncoderConfig::from_json(&c).unwrap_err().to_string();
        assert!(e.contains("1 layer types for 4 layers"), "{e}");
        let mut c = modern();
        c["num_attention_heads"] = 32.into();
        let e = EncoderConfig::from_json(&c).unwrap().head_dim().unwrap_err().to_string();
        assert!(e.contains("rotary positions need an even head width, not 1"), "{e}");
    }

    /// The keys of nomic-embed-text-v1.5's `config.json` (NomicBERT's own code, GPT-2's names)
    /// and of gte-base-en-v1.5's (`new`), as published with them, at small sizes.
    #[test]
    fn reads_nomic_bert_and_gte_in_their_published_keys() {
        let mut nomic = serde_json::json!({"model_type": "nomic_bert", "vocab_size": 100,
            "n_embd": 32, "n_head": 4, "n_inner": 48, "n_layer": 2, "n_positions": 8192,
            "activation_function": "swiglu", "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0,
            "rotary_emb_interleaved": false, "rotary_scaling_factor": null, "prenorm": false,
            "causal": false, "layer_norm_epsilon": 1e-12, "qkv_proj_bias": false,
            "mlp_fc1_bias": false, "mlp_fc2_bias": false, "type_vocab_size": 2,
            "max_trained_positions": 2048, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
            "rotary_emb_scale_base": null,
            "attn_pdrop": 0.0});
        let c = EncoderConfig::from_json(&nomic).unwrap();
        let sizes = (c.hidden, c.heads, c.ffn, c.layers, c.max_positions, c.position_offset);
        assert_eq!(sizes, (32, 4, 48, 2, 8192, 0));
        // Its config.json today also carries transformers' keys: the trained length as
        // `max_position_embeddings`, beside `n_positions`, which the model is published for.
        nomic["max_position_embeddings"] = 2048.into();
        nomic["rope_parameters"] =
            serde_json::json!({"rope_theta": 1000.0, "rope_type": "default"});
        nomic["rotary_emb_scale_base"] = Value::Null;
        assert_eq!(EncoderConfig::from_json(&nomic).unwrap().max_positions, 8192);
        let rotary = Some(RotaryConfig { theta: 1000.0, scaling: RopeScaling::None });
        assert_eq!((c.arch, c.act, c.rotary, c.eps), (Arch::NomicBert, Act::Silu, rotary, 1e-12));
        assert_eq!(c.dropout, Dropouts::default());
        nomic["activation_function"] = "gelu".into();
        let e = EncoderConfig::from_json(&nomic).unwrap_err().to_string();
        assert!(e.contains("activation_function `gelu`; supported: swiglu"), "{e}");
        nomic["activation_function"] = "swiglu".into();
        nomic["rotary_emb_fraction"] = 0.5.into();
        let e = EncoderConfig::from_json(&nomic).unwrap_err().to_string();
        assert!(e.contains("rotary_emb_fraction 0.5"), "{e}");

        let mut gte = serde_json::json!({"model_type": "new", "vocab_size": 100,
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 48, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
            "max_position_embeddings": 8192, "type_vocab_size": 0, "rope_theta": 500000,
            "rope_scaling": null, "position_embedding_type": "rope",
            "layer_norm_type": "layer_norm", "logn_attention_scale": false,
            "logn_attention_clip1": false, "pack_qkv": true, "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.0});
        let c = EncoderConfig::from_json(&gte).unwrap();
        assert_eq!((c.arch, c.act, c.rotary.unwrap().theta), (Arch::Gte, Act::Gelu, 500_000.0));
        assert_eq!((c.dropout.attention, c.dropout.ffn, c.dropout.classifier), (0.0, 0.1, 0.1));
        gte["layer_norm_type"] = "rms_norm".into();
        let e = EncoderConfig::from_json(&gte).unwrap_err().to_string();
        assert!(e.contains("layer_norm_type `rms_norm`"), "{e}");
        gte["layer_norm_type"] = "layer_norm".into();
        gte["num_attention_heads"] = 32.into();
        let e = EncoderConfig::from_json(&gte).unwrap().head_dim().unwrap_err().to_string();
        assert!(e.contains("rotary positions need an even head width, not 1"), "{e}");
        gte["rope_theta"] = 0.5.into();
        let e = EncoderConfig::from_json(&gte).unwrap_err().to_string();
        assert!(e.contains("a rotary base of 0.5"), "{e}");
        gte["rope_theta"] = 500_000.into();
        gte["position_embedding_type"] = "absolute".into();
        let e = EncoderConfig::from_json(&gte).unwrap_err().to_string();
        assert!(e.contains("position_embedding_type `absolute`; only `rope`"), "{e}");
        gte["position_embedding_type"] = "rope".into();
        gte["rope_parameters"] = serde_json::json!({"rope_type": "dynamic", "factor": 2.0});
        let e = EncoderConfig::from_json(&gte).unwrap_err().to_string();
        assert!(e.contains("rope_type `dynamic`; supported: default, linear"), "{e}");
        gte["rope_parameters"] = Value::Null;
        gte["n_embd"] = gte["hidden_size"].take();
        assert_eq!(EncoderConfig::from_json(&gte).unwrap().hidden, 32, "either key");
        gte["n_embd"] = Value::Null;
        let e = EncoderConfig::from_json(&gte).unwrap_err().to_string();
        assert!(e.contains("none of hidden_size, n_embd is present"), "{e}");
        // Jina v3 takes transformers' defaults where its config.json is silent.
        let jina = serde_json::json!({"model_type": "jina_embeddings_v3", "vocab_size": 100,
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 48});
        let c = EncoderConfig::from_json(&jina).unwrap();
        let theta = c.rotary.unwrap().theta;
        assert_eq!((c.arch, c.act, theta, c.eps), (Arch::JinaV3, Act::Gelu, 20_000.0, 1e-5));
        assert_eq!((c.max_positions, c.dropout.attention, c.dropout.ffn), (8194, 0.1, 0.1));
    }

    #[test]
    fn gte_scales_rotary_positions_as_its_own_code_and_transformers_do() {
        // gte-base-en-v1.5's settings, in the keys of GTE's own code.
        let mut gte = serde_json::json!({"model_type": "new", "vocab_size": 100,
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 48, "rope_theta": 500000,
            "rope_scaling": {"factor": 2.0, "type": "ntk"}});
        let rotary = EncoderConfig::from_json(&gte).unwrap().rotary.unwrap();
        assert_eq!(rotary, RotaryConfig { theta: 500_000.0, scaling: RopeScaling::Ntk(2.0) });
        // Heads 8 wide: the base doubles, the frequencies fall by 2^(2/8).
        let (theta, scale) = rotary.rope(8);
        assert_eq!(theta, 1e6);
        assert!((scale - 2f32.powf(-0.25)).abs() < 1e-7, "{scale}");
        let plain = RotaryConfig { theta: 500.0, scaling: RopeScaling::None };
        assert_eq!(plain.rope(8), (500.0, 1.0));
        // transformers' spelling of the type is read too.
        gte["rope_scaling"] = serde_json::json!({"factor": 8.0, "rope_type": "ntk"});
        let rotary = EncoderConfig::from_json(&gte).unwrap().rotary.unwrap();
        assert_eq!(rotary.scaling, RopeScaling::Ntk(8.0));

        // The same frequencies as transformers states them: `linear` by 2^(2/8) of base 1e6.
        let linear = serde_json::json!({"rope_type": "linear", "rope_theta": 1e6,
            "factor": 1.189_207_115_002_721});
        gte["rope_parameters"] = linear.clone();
        gte["rope_scaling"] = Value::Null;
        let rotary = EncoderConfig::from_json(&gte).unwrap().rotary.unwrap();
        assert_eq!(rotary.scaling, RopeScaling::Linear(1.189_207_1));
        let (theta, scale) = rotary.rope(8);
        assert_eq!(theta, 1e6);
        assert!((scale - 2f32.powf(-0.25)).abs() < 1e-7, "{scale}");
        // Both stated, agreeing: read; disagreeing: an error naming both.
        gte["rope_scaling"] = serde_json::json!({"factor": 2.0, "type": "ntk"});
        assert_eq!(EncoderConfig::from_json(&gte).unwrap().rotary.unwrap().rope(8).0, 1e6);
        gte["rope_scaling"] = serde_json::json!({"factor": 4.0, "type": "ntk"});
        let e = EncoderConfig::from_json(&gte).unwrap_err().to_string();
        assert!(e.contains("and rope_scaling {\"factor\":4.0,\"type\":\"ntk\"} give different"));
        gte["rope_scaling"] = Value::Null;

        let refused = [
            ("rope_parameters", serde_json::json!({"rope_type": "yarn"}), "rope_type `yarn`"),
            ("rope_parameters", serde_json::json!({"rope_type": "linear"}), "a `factor` of at"),
            (
                "rope_parameters",
                serde_json::json!({"rope_type": "default", "partial_rotary_factor": 0.5}),
                "partial_rotary_factor 0.5",
            ),
            ("rope_scaling", serde_json::json!({"factor": 2.0, "type": "linear"}), "only `\"type"),
            (
                "rope_scaling",
                serde_json::json!({"factor": 2.0, "type": "ntk", "mixed_b": 0.5}),
                "mixed_b 0.5",
            ),
            ("rope_scaling", serde_json::json!({"factor": 0.5, "type": "ntk"}), "a `factor` of"),
            ("rope_scaling", serde_json::json!({"type": "ntk"}), "a `factor` of at least 1"),
        ];
        for (key, value, why) in refused {
            let mut c = gte.clone();
            c["rope_parameters"] = Value::Null;
            c[key] = value;
            let e = EncoderConfig::from_json(&c).unwrap_err().to_string();
            assert!(e.contains(why), "{key}: {e}");
        }
        // Only GTE's code defines NTK scaling; the other families refuse `rope_scaling`, and
        // take transformers' `linear`.
        gte["model_type"] = "nomic_bert".into();
        let rotary = EncoderConfig::from_json(&gte).unwrap().rotary.unwrap();
        assert_eq!(rotary.scaling, RopeScaling::Linear(1.189_207_1));
        gte["rope_parameters"] = Value::Null;
        gte["rope_scaling"] = serde_json::json!({"factor": 2.0, "type": "ntk"});
        let e = EncoderConfig::from_json(&gte).unwrap_err().to_string();
        let want = "rope_scaling {\"factor\":2.0,\"type\":\"ntk\"}; only unscaled";
        assert!(e.contains(want), "{e}");
        assert!(e.contains("(NomicBERT)"), "{e}");
    }

    #[test]
    fn dropout_follows_each_family_and_is_checked() {
        let mut bert = serde_json::json!({"model_type": "bert", "vocab_size": 100,
            "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 64, "max_position_embeddings": 64,
            "hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": 0.05,
            "classifier_dropout": null});
        let d = EncoderConfig::from_json(&bert).unwrap().dropout;
        assert_eq!((d.embeddings, d.attention, d.attention_out, d.ffn), (0.2, 0.05, 0.2, 0.2));
        assert_eq!((d.classifier, d.token_classifier), (0.2, 0.2));
        bert["classifier_dropout"] = 0.3.into();
        assert_eq!(EncoderConfig::from_json(&bert).unwrap().dropout.classifier, 0.3);
        bert["hidden_dropout_prob"] = 1.0.into();
        let e = EncoderConfig::from_json(&bert).unwrap_err().to_string();
        assert!(e.contains("a dropout probability of 1"), "{e}");
        let distil = serde_json::json!({"model_type": "distilbert", "vocab_size": 100, "dim": 32,
            "n_layers": 2, "n_heads": 4, "hidden_dim": 64, "max_position_embeddings": 64});
        let d = EncoderConfig::from_json(&distil).unwrap().dropout;
        assert_eq!((d.attention_out, d.classifier, d.token_classifier), (0.0, 0.2, 0.1));
        assert_eq!(EncoderConfig::from_json(&modern()).unwrap().dropout, Dropouts::default());
    }

    #[test]
    fn unknown_or_broken_configs_say_what_is_supported() {
        let e = EncoderConfig::from_json(&serde_json::json!({"model_type": "gpt2"})).unwrap_err();
        assert!(e.to_string().contains("model type `gpt2`; supported model types: bert"), "{e}");
        let e = EncoderConfig::from_json(&serde_json::json!({"model_type": "bert"})).unwrap_err();
        assert!(e.to_string().contains("`vocab_size` is missing"), "{e}");
        let e = activation("mish").unwrap_err();
        assert!(e.to_string().contains("activation `mish`"), "{e}");
    }
}
