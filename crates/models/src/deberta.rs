//! DeBERTa v2 / v3's disentangled attention: the tables its position terms read, and each
//! layer's attention settings.
//!
//! Every layer embeds relative positions with the encoder's one `rel_embeddings` table (through
//! its LayerNorm where `norm_rel_ebd` says so), projected by the layer's key weights (the
//! content-to-position term, which the queries meet) and its query weights (position to
//! content, which the keys meet): its own `key_proj` / `query_proj` with `share_att_key`, else
//! `pos_key_proj` / `pos_query_proj`. Those projections depend on the weights alone, so they are
//! computed once at load, in f32 as transformers computes them, and join the checkpoint as
//! `encoder.layer.L.attention.self.pos_key_layer` and `pos_query_layer` (transformers' names
//! for them); each layer's attention op reads its two (see
//! [`switchyard_core::Disentangled`]). The scores are scaled by `1 / sqrt(head_dim * (1 +
//! terms))`, as transformers scales them.

use switchyard_core::{Disentangled, PositionBias};

use crate::Result;
use crate::checkpoint::Checkpoint;
use crate::config::{DebertaConfig, EncoderConfig};
use crate::encoder::{Encoder, Names};

/// A derived table of layer prefix `pre` (`encoder.layer.L`): the keys' or the queries'.
fn table(pre: &str, keys: bool) -> String {
    let which = if keys { "pos_key_layer" } else { "pos_query_layer" };
    format!("{pre}.attention.self.{which}")
}

/// The position bias and the scale of the attention of the layer whose weights sit under `pre`,
/// `width` (heads times `head_dim`) wide; its tables declared in `e`'s graph.
pub(crate) fn attention(
    e: &mut Encoder<'_>,
    pre: &str,
    db: DebertaConfig,
    width: usize,
    head_dim: usize,
) -> Result<(Option<PositionBias>, f32)> {
    let terms = usize::from(db.c2p) + usize::from(db.p2c);
    let scale = 1.0 / ((head_dim * (1 + terms)) as f32).sqrt();
    if terms == 0 {
        return Ok((None, scale));
    }
    let shape = [2 * db.span, width];
    let mut declare = |on: bool, keys: bool| match on {
        true => e.names.weight(&mut e.g, &table(pre, keys), &shape).map(Some),
        false => Ok(None),
    };
    let (keys, queries) = (declare(db.c2p, true)?, declare(db.p2c, false)?);
    let d = Disentangled {
        keys,
        queries,
        span: db.span,
        buckets: db.buckets,
        max_distance: db.max_distance,
    };
    Ok((Some(PositionBias::Disentangled(d)), scale))
}

/// Computes every layer's position tables from `ck`'s weights and adds them to it; nothing for
/// a configuration without position terms.
pub(crate) fn derive_tables(ck: &mut Checkpoint, cfg: &EncoderConfig) -> Result<()> {
    let Some(db) = cfg.deberta.filter(|db| db.c2p || db.p2c) else { return Ok(()) };
    let _span = tracing::info_span!("derive", tables = "DeBERTa's position tables").entered();
    let names = Names::detect(ck, "embeddings.word_embeddings.weight")?;
    let (d, rows) = (cfg.hidden, 2 * db.span);
    let read = |name: &str, want: &[usize]| names.values(name, want);
    let need = |name: &str, want: &[usize]| names.need_values(name, want);
    let mut relative = need("encoder.rel_embeddings.weight", &[rows, d])?;
    if db.norm_relative {
        let gamma = need("encoder.LayerNorm.weight", &[d])?;
        let beta = read("encoder.LayerNorm.bias", &[d])?;
        layer_norm(&mut relative, d, &gamma, beta.as_deref(), cfg.eps);
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let mut derived = Vec::new();
    for l in 0..cfg.layers {
        let pre = format!("encoder.layer.{l}");
        for (on, keys, own, shared) in [
            (db.c2p, true, "pos_key_proj", "key_proj"),
            (db.p2c, false, "pos_query_proj", "query_proj"),
        ] {
            if !on {
                continue;
            }
            let proj = format!("{pre}.attention.self.{}", if db.share_keys { shared } else { own });
            let weight = need(&format!("{proj}.weight"), &[d, d])?;
            let bias = read(&format!("{proj}.bias"), &[d])?;
            let values = project(&relative, d, &weight, bias.as_deref(), threads);
            derived.push((names.full(&table(&pre, keys)), values));
        }
    }
    for (name, values) in derived {
        ck.derive(name, vec![rows, d], &values)?;
    }
    Ok(())
}

/// LayerNorm of each `d`-wide row of `x` in place (statistics in f64, biased variance).
fn layer_norm(x: &mut [f32], d: usize, gamma: &[f32], beta: Option<&[f32]>, eps: f32) {
    for row in x.chunks_exact_mut(d) {
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / d as f64;
        let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / d as f64;
        let inv = 1.0 / (var + f64::from(eps)).sqrt();
        for (i, v) in row.iter_mut().enumerate() {
            let shift = beta.map_or(0.0, |b| f64::from(b[i]));
            *v = ((f64::from(*v) - mean) * inv * f64::from(gamma[i]) + shift) as f32;
        }
    }
}

/// `x W^T + b` for the `d`-wide rows of `x` and the `[d, d]` weight `w`, rows on `threads`
/// threads.
fn project(x: &[f32], d: usize, w: &[f32], b: Option<&[f32]>, threads: usize) -> Vec<f32> {
    let rows: Vec<&[f32]> = x.chunks_exact(d).collect();
    let out = crate::par::map_ordered(&rows, threads, |row| {
        let mut y: Vec<f32> = w.chunks_exact(d).map(|wo| dot(row, wo)).collect();
        if let Some(b) = b {
            y.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
        y
    });
    out.concat()
}

/// `a . b` over eight partial sums, which vectorise.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    let mut acc = [0.0f32; 8];
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}
