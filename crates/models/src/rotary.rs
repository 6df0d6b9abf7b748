//! Graph builder for NomicBERT, GTE and Jina embeddings v3: post-norm BERTs with rotary
//! positions.
//!
//! The embeddings are word (+ token type) rows through a LayerNorm, with no position table;
//! per layer `x = LN(x + attn(x))` with queries and keys rotated (rotate-half, one base), then
//! `x = LN(x + ffn(x))`: gated, `down(act(gate x) * up x)`, for NomicBERT and GTE, plain,
//! `fc2(act(fc1 x))`, for Jina v3. Biases are read where the checkpoint has them (GTE's and
//! Jina's; NomicBERT has none).
//!
//! The weights carry the names of the code each family was published with, which transformers
//! also writes (it renames them only in memory): NomicBERT's (`encoder.layers.N.attn.Wqkv`,
//! `mlp.fc11` up and `mlp.fc12` gate, `norm1`, `norm2`), GTE's
//! (`encoder.layer.N.attention.qkv_proj`, `mlp.up_gate_proj` with the up projection's rows
//! before the gate's, `attn_ln`, `mlp_ln`) and Jina's (NomicBERT's with `mixer` for `attn` and
//! `mlp.fc1`, `mlp.fc2`).
//! Dropout (training only) is marked where transformers applies it.

use switchyard_core::{Act, Gate, Op, Shape, Val};

use crate::config::{Arch, EncoderConfig};
use crate::encoder::{Encoder, Names};
use crate::{Checkpoint, Error, Result};

/// The word embeddings' name in every layout.
const WORD: &str = "embeddings.word_embeddings.weight";

/// The feed-forward's input projections.
enum Ffn {
    /// Gated: the gate and the up projection apart.
    Split { gate: &'static str, up: &'static str },
    /// Gated: one `[2 ffn, width]` matrix, the up projection's rows first.
    UpThenGate(&'static str),
    /// Not gated: one projection, then the activation.
    Plain(&'static str),
}

/// How a checkpoint names the weights, relative to its prefix.
struct Layout {
    emb_norm: &'static str,
    layer: &'static str,
    /// The `[3 width, width]` projection to queries, keys and values.
    qkv: &'static str,
    o: &'static str,
    attn_norm: &'static str,
    ffn: Ffn,
    down: &'static str,
    out_norm: &'static str,
}

/// NomicBERT's own names (nomic-embed-text's published checkpoints).
const NOMIC: Layout = Layout {
    emb_norm: "emb_ln",
    layer: "encoder.layers",
    qkv: "attn.Wqkv",
    o: "attn.out_proj",
    attn_norm: "norm1",
    ffn: Ffn::Split { gate: "mlp.fc12", up: "mlp.fc11" },
    down: "mlp.fc2",
    out_norm: "norm2",
};

/// GTE's own names (the `new` checkpoints).
const GTE: Layout = Layout {
    emb_norm: "embeddings.LayerNorm",
    layer: "encoder.layer",
    qkv: "attention.qkv_proj",
    o: "attention.o_proj",
    attn_norm: "attn_ln",
    ffn: Ffn::UpThenGate("mlp.up_gate_proj"),
    down: "mlp.down_proj",
    out_norm: "mlp_ln",
};

/// Jina embeddings v3's names, as transformers writes them.
const JINA: Layout = Layout {
    emb_norm: "emb_ln",
    layer: "encoder.layers",
    qkv: "mixer.Wqkv",
    o: "mixer.out_proj",
    attn_norm: "norm1",
    ffn: Ffn::Plain("mlp.fc1"),
    down: "mlp.fc2",
    out_norm: "norm2",
};

/// The family's layout, checked against the checkpoint's first layer.
fn layout(names: &Names<'_>, arch: Arch) -> Result<&'static Layout> {
    let (l, family) = match arch {
        Arch::Gte => (&GTE, "GTE"),
        Arch::JinaV3 => (&JINA, "Jina v3"),
        _ => (&NOMIC, "NomicBERT"),
    };
    let probe = format!("{}.0.{}.weight", l.layer, l.o);
    match names.find(&probe) {
        Some(_) => Ok(l),
        None => Err(Error::format(format!(
            "the checkpoint has no `{}` ({family}'s name for the first layer's attention \
             output); is it the architecture its config.json names?",
            names.full(&probe)
        ))),
    }
}

/// Builds the encoder body; returns it with the final token rows, or with `cls_only` each
/// sequence's first row, the last layer computed for that row alone (see
/// [`crate::last_layer_on_cls`]).
pub(crate) fn build<'a>(
    ck: &'a Checkpoint,
    cfg: &EncoderConfig,
    cls_only: bool,
) -> Result<(Encoder<'a>, Val)> {
    let rotary = cfg.rotary.ok_or_else(|| {
        Error::format("a NomicBERT, GTE or Jina v3 graph needs its rotary settings")
    })?;
    let names = Names::detect(ck, WORD)?;
    let l = layout(&names, cfg.arch)?;
    let d = cfg.hidden;
    let hd = cfg.head_dim()?;
    let (theta, position_scale) = rotary.rope(hd);
    let mut e = Encoder::start(names, WORD, cfg.vocab, d)?;
    let word = e.word;
    let x = e.g.op(Shape::tokens(d), |out| Op::Embed { table: word, scale: 1.0, out });
    let x = e.add_token_types("embeddings.token_type_embeddings.weight", x)?;
    let mut x = e.layer_norm(l.emb_norm, x, cfg.eps)?;
    let drop = cfg.dropout;
    e.g.dropout(x, drop.embeddings);
    for i in 0..cfg.layers {
        let pre = format!("{}.{i}", l.layer);
        let t = e.g.shape(x);
        let qkv = e.linear(&format!("{pre}.{}", l.qkv), x, 3 * d, Act::Identity, None)?;
        let [q, k, v] = [0, 1, 2].map(|j| e.g.op(t, |out| Op::Slice { x: qkv, start: j * d, out }));
        let [mut q, k] = [q, k].map(|p| {
            e.g.op(t, |out| Op::Rope {
                x: p,
                heads: cfg.heads,
                head_dim: hd,
                theta,
                position_scale,
                out,
            })
        });
        // Keys and values from every token; the query, and all that follows it, from the rows
        // the head reads (rotated at their own positions before they are kept).
        if cls_only && i + 1 == cfg.layers {
            q = e.first_rows(q);
            x = e.first_rows(x);
        }
        let a = e.g.op(e.g.shape(x), |out| Op::Attention {
            q,
            k,
            v,
            heads: cfg.heads,
            kv_heads: cfg.heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window: None,
            causal: false,
            position_bias: None,
            out,
        });
        e.g.dropout(a, drop.attention);
        let h = e.linear(&format!("{pre}.{}", l.o), a, d, Act::Identity, Some(x))?;
        e.g.dropout(h, drop.attention_out);
        x = e.layer_norm(&format!("{pre}.{}", l.attn_norm), h, cfg.eps)?;
        let rows = e.g.shape(x).rows;
        let wide = Shape { rows, width: cfg.ffn };
        let f = match l.ffn {
            Ffn::Split { gate, up } => {
                let gate = e.linear(&format!("{pre}.{gate}"), x, cfg.ffn, cfg.act, None)?;
                let up = e.linear(&format!("{pre}.{up}"), x, cfg.ffn, Act::Identity, None)?;
                e.g.op(wide, |out| Op::Mul { a: gate, b: up, out })
            }
            Ffn::UpThenGate(name) => {
                let f = e.linear(&format!("{pre}.{name}"), x, 2 * cfg.ffn, Act::Identity, None)?;
                let (act, gate) = (cfg.act, Gate::Second);
                let gated = e.g.op(wide, |out| Op::Glu { x: f, act, gate, out });
                // GTE drops the gated units; NomicBERT (Gemma's feed-forward) does not.
                e.g.dropout(gated, drop.ffn);
                gated
            }
            Ffn::Plain(name) => e.linear(&format!("{pre}.{name}"), x, cfg.ffn, cfg.act, None)?,
        };
        let h = e.linear(&format!("{pre}.{}", l.down), f, d, Act::Identity, Some(x))?;
        e.g.dropout(h, drop.ffn);
        x = e.layer_norm(&format!("{pre}.{}", l.out_norm), h, cfg.eps)?;
    }
    Ok((e, x))
}
