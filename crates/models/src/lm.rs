//! Graph builder for the language-model families run as embedders: Gemma 3's text model with
//! bidirectional attention (EmbeddingGemma) and Qwen3 (Qwen3-Embedding).
//!
//! Both project queries, keys and values apart (a key and value head serves `heads / kv_heads`
//! query heads), normalise queries and keys per head (RMS), rotate them (rotate-half), and
//! end in a final RMS norm; the feed-forward is `down(act(gate x) * up x)`; no biases unless the
//! checkpoint has them (`attention_bias`).
//! - Gemma: word embeddings scaled by `sqrt(width)`; per layer
//!   `x = x + post_norm(attn(input_norm(x)))` and `x = x + post_ff_norm(ffn(pre_ff_norm(x)))`;
//!   every norm scales by `1 + weight`; one rotary base on global layers, another on local ones,
//!   which see only a sliding window (as ModernBERT); scores scaled by
//!   `query_pre_attn_scalar^-0.5`.
//! - Qwen3: per layer `x = x + attn(input_norm(x))` and `x = x + ffn(post_attention_norm(x))`;
//!   norms scale by `weight`; one base; scores scaled by `head_dim^-0.5`; a causal mask.
//!
//! Every weight is read as the checkpoint has it: shared key and value heads are read for the
//! query heads of each group ([`Op::Attention`]'s `kv_heads`), and Gemma's norms scale by
//! `1 + weight` ([`Op::RmsNorm`]'s `unit_offset`).

use switchyard_core::{Act, Op, Shape, Val};

use crate::config::{Arch, EncoderConfig, LmConfig};
use crate::encoder::{Encoder, Names};
use crate::{Checkpoint, Error, Result};

/// The word embeddings' name.
const WORD: &str = "embed_tokens.weight";

fn settings(cfg: &EncoderConfig) -> Result<&LmConfig> {
    cfg.lm.as_ref().ok_or_else(|| Error::format("a Gemma or Qwen3 graph needs their settings"))
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
    let gemma = cfg.arch == Arch::Gemma;
    let names = Names::detect(ck, WORD)?;
    let (d, hd, heads, kv_heads) = (cfg.hidden, gm.head_dim, cfg.heads, gm.kv_heads);
    let t = Shape::tokens(d);
    let mut e = Encoder::start(names, WORD, cfg.vocab, d)?;
    let word = e.word;
    let scale = if gemma { (d as f32).sqrt() } else { 1.0 };
    let mut x = e.g.op(t, |out| Op::Embed { table: word, scale, out });
    let norm = |e: &mut Encoder<'_>, name: &str, x: Val, group: Option<usize>| {
        rms_norm(e, name, x, group, gemma, cfg.eps)
    };
    for (l, &local) in gm.local.iter().enumerate() {
        let pre = format!("layers.{l}");
        let attn = format!("{pre}.self_attn");
        let h = norm(&mut e, &format!("{pre}.input_layernorm"), x, None)?;
        let proj = |e: &mut Encoder<'_>, p: &str, n: usize| {
            e.linear(&format!("{attn}.{p}"), h, n * hd, Act::Identity, None)
        };
        let q = proj(&mut e, "q_proj", heads)?;
        let k = proj(&mut e, "k_proj", kv_heads)?;
        let v = proj(&mut e, "v_proj", kv_heads)?;
        let theta = if local { gm.local_theta } else { gm.global_theta };
        let [q, k] = [("q_norm", q, heads), ("k_norm", k, kv_heads)].map(|(n, p, heads)| {
            norm(&mut e, &format!("{attn}.{n}"), p, Some(hd)).map(|p| {
                e.g.op(Shape::tokens(heads * hd), |out| Op::Rope {
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
            kv_heads,
            head_dim: hd,
            scale: gm.score_scale,
            window: local.then_some(gm.window),
            causal: gm.causal,
            position_bias: None,
            out,
        });
        e.g.dropout(a, cfg.dropout.attention);
        let mlp = format!("{pre}.mlp");
        if gemma {
            let o = e.linear(&format!("{attn}.o_proj"), a, d, Act::Identity, None)?;
            let o = norm(&mut e, &format!("{pre}.post_attention_layernorm"), o, None)?;
            x = e.g.op(e.g.shape(x), |out| Op::Add { a: x, b: o, out });
            let h = norm(&mut e, &format!("{pre}.pre_feedforward_layernorm"), x, None)?;
            let f = gated(&mut e, &mlp, h, cfg, None)?;
            let f = norm(&mut e, &format!("{pre}.post_feedforward_layernorm"), f, None)?;
            x = e.g.op(e.g.shape(x), |out| Op::Add { a: x, b: f, out });
        } else {
            x = e.linear(&format!("{attn}.o_proj"), a, d, Act::Identity, Some(x))?;
            let h = norm(&mut e, &format!("{pre}.post_attention_layernorm"), x, None)?;
            x = gated(&mut e, &mlp, h, cfg, Some(x))?;
        }
    }
    let x = norm(&mut e, "norm", x, None)?;
    Ok((e, x))
}

/// `down(act(gate h) * up h)` (plus `residual`) with the feed-forward `mlp`'s weights.
fn gated(
    e: &mut Encoder<'_>,
    mlp: &str,
    h: Val,
    cfg: &EncoderConfig,
    residual: Option<Val>,
) -> Result<Val> {
    let gate = e.linear(&format!("{mlp}.gate_proj"), h, cfg.ffn, cfg.act, None)?;
    let up = e.linear(&format!("{mlp}.up_proj"), h, cfg.ffn, Act::Identity, None)?;
    let ff = Shape { rows: e.g.shape(h).rows, width: cfg.ffn };
    let gated = e.g.op(ff, |out| Op::Mul { a: gate, b: up, out });
    e.linear(&format!("{mlp}.down_proj"), gated, cfg.hidden, Act::Identity, residual)
}

/// The RMS norm `name` on `x` (per `group` columns where given), scaled by `1 + weight` as
/// Gemma's, or by `weight` itself.
fn rms_norm(
    e: &mut Encoder<'_>,
    name: &str,
    x: Val,
    group: Option<usize>,
    gemma: bool,
    eps: f32,
) -> Result<Val> {
    let width = group.unwrap_or(e.g.shape(x).width);
    let gamma = e.names.weight(&mut e.g, &format!("{name}.weight"), &[width])?;
    let unit_offset = gemma;
    Ok(e.g.op(e.g.shape(x), |out| Op::RmsNorm { x, gamma, eps, group, unit_offset, out }))
}
