//! Graph builder for ModernBERT.
//!
//! Pre-norm: the embeddings are normalised once, then per layer `x = x + attn(norm(x))` (layer 0
//! has no attention norm) and `x = x + mlp(norm(x))`, and a final norm. Attention reads one fused
//! QKV projection, rotates queries and keys (a different base on global and local layers), and
//! local layers see only a sliding window. The MLP is GeGLU. Norms and linear layers have no
//! biases unless the checkpoint carries them. Dropout (training only; 0 in ModernBERT's
//! defaults) is marked where transformers applies it.

use switchyard_core::{Act, Gate, Op, Shape, Val};

use crate::config::{EncoderConfig, ModernConfig};
use crate::encoder::{Encoder, Names};
use crate::{Checkpoint, Error, Result};

/// Builds the encoder body; returns it with the final (normalised) token rows, or with
/// `cls_only` each sequence's first row, the last layer computed for that row alone (see
/// [`crate::last_layer_on_cls`]).
pub(crate) fn build<'a>(
    ck: &'a Checkpoint,
    cfg: &EncoderConfig,
    cls_only: bool,
) -> Result<(Encoder<'a>, Val)> {
    let m: &ModernConfig = cfg
        .modern
        .as_ref()
        .ok_or_else(|| Error::format("a ModernBERT graph needs ModernBERT's settings"))?;
    let names = Names::detect(ck, "embeddings.tok_embeddings.weight")?;
    let d = cfg.hidden;
    let hd = cfg.head_dim()?;
    let t = Shape::tokens(d);
    let mut e = Encoder::start(names, "embeddings.tok_embeddings.weight", cfg.vocab, d)?;
    let word = e.word;
    let x = e.g.op(t, |out| Op::Embed { table: word, scale: 1.0, out });
    let mut x = e.layer_norm("embeddings.norm", x, cfg.eps)?;
    let drop = cfg.dropout;
    e.g.dropout(x, drop.embeddings);
    for (l, &local) in m.local.iter().enumerate() {
        let pre = format!("layers.{l}");
        let h = if l == 0 { x } else { e.layer_norm(&format!("{pre}.attn_norm"), x, cfg.eps)? };
        let qkv = e.linear(&format!("{pre}.attn.Wqkv"), h, 3 * d, Act::Identity, None)?;
        let theta = if local { m.local_theta } else { m.global_theta };
        let mut qk = [Val(0); 2];
        for (i, slot) in qk.iter_mut().enumerate() {
            let part = e.g.op(t, |out| Op::Slice { x: qkv, start: i * d, out });
            *slot = e.g.op(t, |out| Op::Rope {
                x: part,
                heads: cfg.heads,
                head_dim: hd,
                theta,
                position_scale: 1.0,
                out,
            });
        }
        let v = e.g.op(t, |out| Op::Slice { x: qkv, start: 2 * d, out });
        // Keys and values from every token; the query, and all that follows it, from the rows
        // the head reads (rotated at their own positions before they are kept).
        let mut q = qk[0];
        if cls_only && l + 1 == m.local.len() {
            q = e.first_rows(q);
            x = e.first_rows(x);
        }
        let a = e.g.op(e.g.shape(x), |out| Op::Attention {
            q,
            k: qk[1],
            v,
            heads: cfg.heads,
            kv_heads: cfg.heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window: local.then_some(m.window),
            causal: false,
            position_bias: None,
            out,
        });
        e.g.dropout(a, drop.attention);
        x = e.linear(&format!("{pre}.attn.Wo"), a, d, Act::Identity, Some(x))?;
        e.g.dropout(x, drop.attention_out);
        let h = e.layer_norm(&format!("{pre}.mlp_norm"), x, cfg.eps)?;
        let wi = e.linear(&format!("{pre}.mlp.Wi"), h, 2 * cfg.ffn, Act::Identity, None)?;
        let gate = Shape { rows: e.g.shape(x).rows, width: cfg.ffn };
        let gated = e.g.op(gate, |out| Op::Glu { x: wi, act: cfg.act, gate: Gate::First, out });
        e.g.dropout(gated, drop.ffn);
        x = e.linear(&format!("{pre}.mlp.Wo"), gated, d, Act::Identity, Some(x))?;
    }
    let x = e.layer_norm("final_norm", x, cfg.eps)?;
    Ok((e, x))
}
