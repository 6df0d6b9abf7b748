//! Graph builder for Gemma 3's text model with bidirectional attention (EmbeddingGemma).
//!
//! The word embeddings are scaled by `sqrt(width)`; per layer
//! `x = x + post_norm(attn(input_norm(x)))` and `x = x + post_ff_norm(ffn(pre_ff_norm(x)))`,
//! then a final norm. Every norm is RMS with the scale `1 + weight`. Attention projects queries,
//! keys and values apart (a key and value head serves `heads / kv_heads` query heads), normalises
//! queries and keys per head, rotates them (one base on global layers, another on local ones, as
//! ModernBERT) and scales scores by `query_pre_attn_scalar^-0.5`; local layers see only a
//! sliding window. The feed-forward is `down(act(gate x) * up x)`. No biases unless the
//! checkpoint has them (`attention_bias`).
//!
//! Two kinds of weights are derived at load ([`derive_weights`]): each norm's `1 + weight`, and
//! where key and value heads are shared, their projections repeated once per query head they
//! serve, so that attention runs as if every query head had its own.

use switchyard_core::{Act, Op, Shape, Val};

use crate::config::{EncoderConfig, GemmaConfig};
use crate::encoder::{Encoder, Names};
use crate::{Checkpoint, Error, Result};

/// The word embeddings' name.
const WORD: &str = "embed_tokens.weight";

/// Each layer's norms, relative to `layers.N`.
const LAYER_NORMS: [&str; 4] = [
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
];

/// The suffix of a norm's derived `1 + weight`.
const PLUS_ONE: &str = "weight.plus_one";

/// The suffix of a key or value projection's derived rows, one block per query head.
const PER_QUERY_HEAD: &str = "per_query_head";

fn settings(cfg: &EncoderConfig) -> Result<&GemmaConfig> {
    cfg.gemma.as_ref().ok_or_else(|| Error::format("a Gemma graph needs Gemma's settings"))
}

/// Adds the norms' `1 + weight` and, where key and value heads are shared, their projections
/// repeated per query head, to `ck`.
pub(crate) fn derive_weights(ck: &mut Checkpoint, cfg: &EncoderConfig) -> Result<()> {
    let gm = settings(cfg)?;
    let _span = tracing::info_span!("derive", weights = "Gemma's norm scales").entered();
    let names = Names::detect(ck, WORD)?;
    let read = |name: &str, want: &[usize]| names.values(name, want);
    let need = |name: &str, want: &[usize]| names.need_values(name, want);
    let (d, hd) = (cfg.hidden, gm.head_dim);
    let mut norms: Vec<(String, usize)> = vec![("norm".into(), d)];
    let mut shared = Vec::new();
    for l in 0..cfg.layers {
        let pre = format!("layers.{l}");
        norms.extend(LAYER_NORMS.iter().map(|n| (format!("{pre}.{n}"), d)));
        norms.extend(["q_norm", "k_norm"].map(|n| (format!("{pre}.self_attn.{n}"), hd)));
        if gm.kv_heads < cfg.heads {
            shared.extend(["k_proj", "v_proj"].map(|p| format!("{pre}.self_attn.{p}")));
        }
    }
    let mut derived = Vec::new();
    for (norm, width) in norms {
        let mut w = need(&format!("{norm}.weight"), &[width])?;
        for v in &mut w {
            *v += 1.0;
        }
        derived.push((names.full(&format!("{norm}.{PLUS_ONE}")), vec![width], w));
    }
    let repeat = cfg.heads / gm.kv_heads;
    let block = |rows: &[f32], cols: usize| -> Vec<f32> {
        // Query head h reads key and value head h / repeat, as transformers' `repeat_kv`.
        let head = hd * cols;
        (0..cfg.heads)
            .flat_map(|h| &rows[h / repeat * head..(h / repeat + 1) * head])
            .copied()
            .collect()
    };
    for proj in shared {
        let weight = need(&format!("{proj}.weight"), &[gm.kv_heads * hd, d])?;
        let name = names.full(&format!("{proj}.{PER_QUERY_HEAD}.weight"));
        derived.push((name, vec![cfg.heads * hd, d], block(&weight, d)));
        if let Some(bias) = read(&format!("{proj}.bias"), &[gm.kv_heads * hd])? {
            let name = names.full(&format!("{proj}.{PER_QUERY_HEAD}.bias"));
            derived.push((name, vec![cfg.heads * hd], block(&bias, 1)));
        }
    }
    for (name, shape, values) in derived {
        ck.derive(name, shape, &values)?;
    }
    Ok(())
}

/// Builds the encoder body; returns it with the final (normalised) token rows, or with
/// `cls_only` each sequence's first row, the last layer computed for that row alone (see
/// [`crate::last_layer_on_cls`]).
pub(crate) fn build<'a>(
    ck: &'a Checkpoint,
    cfg: &EncoderConfig,
    cls_only: bool,
) -> Result<(Encoder<'a>, Val)> {
    let gm = settings(cfg)?;
    let names = Names::detect(ck, WORD)?;
    let (d, hd, heads) = (cfg.hidden, gm.head_dim, cfg.heads);
    let (t, inner) = (Shape::tokens(d), Shape::tokens(heads * hd));
    let mut e = Encoder::start(names, WORD, cfg.vocab, d)?;
    let word = e.word;
    let scale = (d as f32).sqrt();
    let mut x = e.g.op(t, |out| Op::Embed { table: word, scale, out });
    let shared = gm.kv_heads < heads;
    for (l, &local) in gm.local.iter().enumerate() {
        let pre = format!("layers.{l}");
        let attn = format!("{pre}.self_attn");
        let h = norm(&mut e, &format!("{pre}.input_layernorm"), x, None, cfg.eps)?;
        let kv = |p: &str| match shared {
            true => format!("{attn}.{p}.{PER_QUERY_HEAD}"),
            false => format!("{attn}.{p}"),
        };
        let q = e.linear(&format!("{attn}.q_proj"), h, heads * hd, Act::Identity, None)?;
        let k = e.linear(&kv("k_proj"), h, heads * hd, Act::Identity, None)?;
        let v = e.linear(&kv("v_proj"), h, heads * hd, Act::Identity, None)?;
        let theta = if local { gm.local_theta } else { gm.global_theta };
        let [q, k] = [("q_norm", q), ("k_norm", k)].map(|(n, p)| {
            norm(&mut e, &format!("{attn}.{n}"), p, Some(hd), cfg.eps).map(|p| {
                e.g.op(inner, |out| Op::Rope {
                    x: p,
                    heads,
                    head_dim: hd,
                    theta,
                    position_scale: 1.0,
                    out,
                })
            })
        });
        let (mut q, k) = (q?, k?);
        // Keys and values from every token; the query, and all that follows it, from the rows
        // the head reads (rotated at their own positions before they are kept).
        if cls_only && l + 1 == gm.local.len() {
            q = e.first_rows(q);
            x = e.first_rows(x);
        }
        let rows = e.g.shape(x).rows;
        let a = e.g.op(Shape { rows, width: heads * hd }, |out| Op::Attention {
            q,
            k,
            v,
            heads,
            head_dim: hd,
            scale: gm.score_scale,
            window: local.then_some(gm.window),
            position_bias: None,
            out,
        });
        e.g.dropout(a, cfg.dropout.attention);
        let o = e.linear(&format!("{attn}.o_proj"), a, d, Act::Identity, None)?;
        let o = norm(&mut e, &format!("{pre}.post_attention_layernorm"), o, None, cfg.eps)?;
        x = e.g.op(e.g.shape(x), |out| Op::Add { a: x, b: o, out });
        let h = norm(&mut e, &format!("{pre}.pre_feedforward_layernorm"), x, None, cfg.eps)?;
        let mlp = format!("{pre}.mlp");
        let gate = e.linear(&format!("{mlp}.gate_proj"), h, cfg.ffn, cfg.act, None)?;
        let up = e.linear(&format!("{mlp}.up_proj"), h, cfg.ffn, Act::Identity, None)?;
        let ff = Shape { rows, width: cfg.ffn };
        let gated = e.g.op(ff, |out| Op::Mul { a: gate, b: up, out });
        let f = e.linear(&format!("{mlp}.down_proj"), gated, d, Act::Identity, None)?;
        let f = norm(&mut e, &format!("{pre}.post_feedforward_layernorm"), f, None, cfg.eps)?;
        x = e.g.op(e.g.shape(x), |out| Op::Add { a: x, b: f, out });
    }
    let x = norm(&mut e, "norm", x, None, cfg.eps)?;
    Ok((e, x))
}

/// Gemma's RMS norm `name` on `x` (per `group` columns where given), scaled by the derived
/// `1 + weight`.
fn norm(e: &mut Encoder<'_>, name: &str, x: Val, group: Option<usize>, eps: f32) -> Result<Val> {
    let width = group.unwrap_or(e.g.shape(x).width);
    let gamma = e.names.weight(&mut e.g, &format!("{name}.{PLUS_ONE}"), &[width])?;
    Ok(e.g.op(e.g.shape(x), |out| Op::RmsNorm { x, gamma, eps, group, out }))
}
