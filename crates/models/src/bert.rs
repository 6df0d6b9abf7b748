//! Graph builder for BERT-shaped encoders: BERT, RoBERTa / XLM-R, DistilBERT, MPNet, ELECTRA,
//! ALBERT and DeBERTa v2 / v3.
//!
//! All are post-norm: embeddings (word + position [+ type]) then LayerNorm, and per layer
//! `x = LN(x + attn(x))`, `x = LN(x + ffn(x))`. They differ in weight names, in RoBERTa's and
//! MPNet's position offset, in DistilBERT's and MPNet's lack of token types, in MPNet's relative
//! position bias (one table for all layers) on the attention scores, in ELECTRA's and ALBERT's
//! embeddings, which may be narrower than their layers and then pass through a projection, and
//! in ALBERT's layers, which share their weights, and in DeBERTa's disentangled attention (see
//! [`crate::deberta`]), whose embeddings may lack absolute positions and are projected before
//! their norm. Dropout (training only) is marked where
//! transformers applies it: after the embeddings' norm, on the attention probabilities,
//! and on each block's output before its residual (DistilBERT: the feed-forward block's only).

use switchyard_core::{Act, Op, PositionBias, RelativeBias, Shape, Val};

use crate::Result;
use crate::checkpoint::Checkpoint;
use crate::config::{Arch, EncoderConfig, MPNET_BUCKETS};
use crate::deberta;
use crate::encoder::{Encoder, Names};

/// Per-family weight names, relative to the prefix.
struct Scheme {
    word: &'static str,
    position: &'static str,
    token_type: Option<&'static str>,
    emb_norm: &'static str,
    layer: &'static str,
    q: &'static str,
    k: &'static str,
    v: &'static str,
    o: &'static str,
    attn_norm: &'static str,
    ffn_in: &'static str,
    ffn_out: &'static str,
    out_norm: &'static str,
}

const BERT: Scheme = Scheme {
    word: "embeddings.word_embeddings",
    position: "embeddings.position_embeddings",
    token_type: Some("embeddings.token_type_embeddings"),
    emb_norm: "embeddings.LayerNorm",
    layer: "encoder.layer",
    q: "attention.self.query",
    k: "attention.self.key",
    v: "attention.self.value",
    o: "attention.output.dense",
    attn_norm: "attention.output.LayerNorm",
    ffn_in: "intermediate.dense",
    ffn_out: "output.dense",
    out_norm: "output.LayerNorm",
};

const DISTILBERT: Scheme = Scheme {
    word: "embeddings.word_embeddings",
    position: "embeddings.position_embeddings",
    token_type: None,
    emb_norm: "embeddings.LayerNorm",
    layer: "transformer.layer",
    q: "attention.q_lin",
    k: "attention.k_lin",
    v: "attention.v_lin",
    o: "attention.out_lin",
    attn_norm: "sa_layer_norm",
    ffn_in: "ffn.lin1",
    ffn_out: "ffn.lin2",
    out_norm: "output_layer_norm",
};

const MPNET: Scheme = Scheme {
    word: "embeddings.word_embeddings",
    position: "embeddings.position_embeddings",
    token_type: None,
    emb_norm: "embeddings.LayerNorm",
    layer: "encoder.layer",
    q: "attention.attn.q",
    k: "attention.attn.k",
    v: "attention.attn.v",
    o: "attention.attn.o",
    attn_norm: "attention.LayerNorm",
    ffn_in: "intermediate.dense",
    ffn_out: "output.dense",
    out_norm: "output.LayerNorm",
};

/// DeBERTa v2 / v3's names.
const DEBERTA: Scheme = Scheme {
    q: "attention.self.query_proj",
    k: "attention.self.key_proj",
    v: "attention.self.value_proj",
    ..BERT
};

/// ALBERT's names; its layers sit under `encoder.albert_layer_groups.G.albert_layers.J`.
const ALBERT: Scheme = Scheme {
    word: "embeddings.word_embeddings",
    position: "embeddings.position_embeddings",
    token_type: Some("embeddings.token_type_embeddings"),
    emb_norm: "embeddings.LayerNorm",
    layer: "encoder.albert_layer_groups",
    q: "attention.query",
    k: "attention.key",
    v: "attention.value",
    o: "attention.dense",
    attn_norm: "attention.LayerNorm",
    ffn_in: "ffn",
    ffn_out: "ffn_output",
    out_norm: "full_layer_layer_norm",
};

/// The weight prefix of each layer the encoder runs, in order: `LAYER.i`, or for ALBERT the
/// shared layers of each layer's group, as transformers indexes them.
fn layer_prefixes(s: &Scheme, cfg: &EncoderConfig) -> Vec<String> {
    match cfg.arch {
        Arch::Albert => {
            let (groups, inner) = cfg.groups;
            (0..cfg.layers)
                .flat_map(|i| {
                    // As transformers computes it, in floating point: `int(i / (L / G))`.
                    let g = (i as f64 / (cfg.layers as f64 / groups as f64)) as usize;
                    (0..inner).map(move |j| format!("{}.{g}.albert_layers.{j}", s.layer))
                })
                .collect()
        }
        _ => (0..cfg.layers).map(|l| format!("{}.{l}", s.layer)).collect(),
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
    let s = match cfg.arch {
        Arch::DistilBert => &DISTILBERT,
        Arch::MpNet => &MPNET,
        Arch::Albert => &ALBERT,
        Arch::DebertaV2 => &DEBERTA,
        Arch::Bert
        | Arch::Roberta
        | Arch::Electra
        | Arch::ModernBert
        | Arch::T5
        | Arch::Gemma
        | Arch::Qwen3
        | Arch::NomicBert
        | Arch::Gte
        | Arch::JinaV3 => &BERT,
    };
    let names = Names::detect(ck, &format!("{}.weight", s.word))?;
    let d = cfg.hidden;
    let hd = cfg.head_dim()?;
    // The embeddings' width: the hidden width, or ELECTRA's or ALBERT's own, projected to it
    // below.
    let de = cfg.embedding;
    let mut e = Encoder::start(names, &format!("{}.weight", s.word), cfg.vocab, de)?;
    let t = Shape::tokens(de);
    let word = e.word;
    let mut x = e.g.op(t, |out| Op::Embed { table: word, scale: 1.0, out });
    // DeBERTa adds absolute positions only where `position_biased_input` says so.
    if cfg.deberta.is_none_or(|db| db.absolute) {
        let name = format!("{}.weight", s.position);
        let pos = e.names.weight(&mut e.g, &name, &[cfg.max_positions, de])?;
        let p = e.g.op(t, |out| Op::PosEmbed { table: pos, offset: cfg.position_offset, out });
        x = e.g.op(t, |out| Op::Add { a: x, b: p, out });
    }
    if let Some(tt) = s.token_type {
        x = e.add_token_types(&format!("{tt}.weight"), x)?;
    }
    // DeBERTa projects its embeddings before their norm, ELECTRA and ALBERT after it.
    if cfg.arch == Arch::DebertaV2 && de != d {
        x = e.linear("embeddings.embed_proj", x, d, Act::Identity, None)?;
    }
    x = e.layer_norm(s.emb_norm, x, cfg.eps)?;
    let drop = cfg.dropout;
    e.g.dropout(x, drop.embeddings);
    if cfg.arch == Arch::Albert {
        x = e.linear("encoder.embedding_hidden_mapping_in", x, d, Act::Identity, None)?;
    } else if de != d && cfg.arch != Arch::DebertaV2 {
        x = e.linear("embeddings_project", x, d, Act::Identity, None)?;
    }
    let position_bias = match cfg.arch {
        Arch::MpNet => {
            let (buckets, max_distance) = MPNET_BUCKETS;
            let name = "encoder.relative_attention_bias.weight";
            let table = e.names.weight(&mut e.g, name, &[buckets, cfg.heads])?;
            Some(PositionBias::Relative(RelativeBias { table, buckets, max_distance }))
        }
        _ => None,
    };
    let layers = layer_prefixes(s, cfg);
    for (l, pre) in layers.iter().enumerate() {
        // Keys and values from every token; the query, and all that follows it, from the rows
        // the head reads.
        let kv = x;
        if cls_only && l + 1 == layers.len() {
            x = e.first_rows(kv);
        }
        let q = e.linear(&format!("{pre}.{}", s.q), x, d, Act::Identity, None)?;
        let k = e.linear(&format!("{pre}.{}", s.k), kv, d, Act::Identity, None)?;
        let v = e.linear(&format!("{pre}.{}", s.v), kv, d, Act::Identity, None)?;
        let (position_bias, scale) = match cfg.deberta {
            Some(db) => deberta::attention(&mut e, pre, db, cfg.heads * hd, hd)?,
            None => (position_bias, 1.0 / (hd as f32).sqrt()),
        };
        let a = e.g.op(e.g.shape(x), |out| Op::Attention {
            q,
            k,
            v,
            heads: cfg.heads,
            kv_heads: cfg.heads,
            head_dim: hd,
            scale,
            window: None,
            causal: false,
            position_bias,
            out,
        });
        e.g.dropout(a, drop.attention);
        let h = e.linear(&format!("{pre}.{}", s.o), a, d, Act::Identity, Some(x))?;
        e.g.dropout(h, drop.attention_out);
        x = e.layer_norm(&format!("{pre}.{}", s.attn_norm), h, cfg.eps)?;
        let f = e.linear(&format!("{pre}.{}", s.ffn_in), x, cfg.ffn, cfg.act, None)?;
        let h = e.linear(&format!("{pre}.{}", s.ffn_out), f, d, Act::Identity, Some(x))?;
        e.g.dropout(h, drop.ffn);
        x = e.layer_norm(&format!("{pre}.{}", s.out_norm), h, cfg.eps)?;
    }
    Ok((e, x))
}
