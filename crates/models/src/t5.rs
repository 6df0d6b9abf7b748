//! Graph builder for T5's encoder (sentence-t5, GTR and their kin).
//!
//! Pre-norm with RMS norms (no mean, no shift): per layer `x = x + o(attn(norm(x)))` and
//! `x = x + ffn(norm(x))`, then a final norm. No linear layer has a bias, and attention scores
//! are not scaled (T5 folds the scale into its weights' initialisation). Every layer's scores
//! get the relative position bias of the first layer's table. The feed-forward is
//! `wo(act(wi x))`, or gated, `wo(act(wi_0 x) * wi_1 x)`. Dropout (training only) is marked where
//! transformers applies it: after the embeddings, on the attention probabilities, after the
//! feed-forward's activation, on each block's output before its residual, and after the final
//! norm.

use switchyard_core::{Act, Op, PositionBias, RelativeBias, Shape, Val};

use crate::config::{EncoderConfig, T5Config};
use crate::encoder::{Encoder, Names};
use crate::{Checkpoint, Error, Result};

/// Builds the encoder body; returns it with the final (normalised) token rows.
pub(crate) fn build<'a>(ck: &'a Checkpoint, cfg: &EncoderConfig) -> Result<(Encoder<'a>, Val)> {
    let t5: T5Config = cfg.t5.ok_or_else(|| Error::format("a T5 graph needs T5's settings"))?;
    // The word embeddings: `shared` (T5EncoderModel, T5Model), else the encoder's own copy.
    let word = ["shared.weight", "encoder.embed_tokens.weight"]
        .into_iter()
        .find(|w| Names::detect(ck, w).is_ok())
        .unwrap_or("shared.weight");
    let names = Names::detect(ck, word)?;
    let (d, inner) = (cfg.hidden, cfg.heads * t5.head_dim);
    let t = Shape::tokens(d);
    let mut e = Encoder::start(names, word, cfg.vocab, d)?;
    let table = e.word;
    let mut x = e.g.op(t, |out| Op::Embed { table, scale: 1.0, out });
    let drop = cfg.dropout;
    e.g.dropout(x, drop.embeddings);
    let bias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
    let table = e.names.weight(&mut e.g, bias, &[t5.buckets, cfg.heads])?;
    let position_bias = Some(PositionBias::Relative(RelativeBias {
        table,
        buckets: t5.buckets,
        max_distance: t5.max_distance,
    }));
    for l in 0..cfg.layers {
        let pre = format!("encoder.block.{l}.layer");
        let h = rms_norm(&mut e, &format!("{pre}.0.layer_norm"), x, cfg.eps)?;
        let attn = format!("{pre}.0.SelfAttention");
        let [q, k, v] = ["q", "k", "v"]
            .map(|p| e.linear(&format!("{attn}.{p}"), h, inner, Act::Identity, None));
        let (q, k, v) = (q?, k?, v?);
        let a = e.g.op(Shape::tokens(inner), |out| Op::Attention {
            q,
            k,
            v,
            heads: cfg.heads,
            kv_heads: cfg.heads,
            head_dim: t5.head_dim,
            scale: 1.0,
            window: None,
            causal: false,
            position_bias,
            out,
        });
        e.g.dropout(a, drop.attention);
        x = e.linear(&format!("{attn}.o"), a, d, Act::Identity, Some(x))?;
        e.g.dropout(x, drop.attention_out);
        let h = rms_norm(&mut e, &format!("{pre}.1.layer_norm"), x, cfg.eps)?;
        let ff = format!("{pre}.1.DenseReluDense");
        let f = if t5.gated {
            let gate = e.linear(&format!("{ff}.wi_0"), h, cfg.ffn, cfg.act, None)?;
            let value = e.linear(&format!("{ff}.wi_1"), h, cfg.ffn, Act::Identity, None)?;
            e.g.op(Shape::tokens(cfg.ffn), |out| Op::Mul { a: gate, b: value, out })
        } else {
            e.linear(&format!("{ff}.wi"), h, cfg.ffn, cfg.act, None)?
        };
        e.g.dropout(f, drop.ffn);
        x = e.linear(&format!("{ff}.wo"), f, d, Act::Identity, Some(x))?;
        e.g.dropout(x, drop.ffn);
    }
    let x = rms_norm(&mut e, "encoder.final_layer_norm", x, cfg.eps)?;
    e.g.dropout(x, drop.embeddings);
    Ok((e, x))
}

/// T5's RMS norm with the layer `name`'s scale.
fn rms_norm(e: &mut Encoder<'_>, name: &str, x: Val, eps: f32) -> Result<Val> {
    let width = e.g.shape(x).width;
    let gamma = e.names.weight(&mut e.g, &format!("{name}.weight"), &[width])?;
    Ok(e.g.op(e.g.shape(x), |out| Op::RmsNorm {
        x,
        gamma,
        eps,
        group: None,
        unit_offset: false,
        out,
    }))
}
