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

/// A weight the model computes from stored ones when it loads: `LayerNorm(input) proj^T + bias`
/// (DeBERTa's position tables). Every name is a checkpoint tensor's; training computes the same
/// on its tape, so that the gradient reaches the stored tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct Derived {
    /// The graph weight it becomes (`[rows, d]`).
    pub name: String,
    /// The `[rows, d]` rows it projects.
    pub input: String,
    /// The LayerNorm over `input`'s rows first, if any.
    pub norm: Option<DerivedNorm>,
    /// The projection's `[d, d]` weight (`[out, in]`, as transformers stores a linear layer's).
    pub proj: String,
    /// The projection's bias, if any.
    pub bias: Option<String>,
    /// The dropout probability training applies to the normalised rows before projecting them.
    pub dropout: f32,
    /// Which dropout mask it takes: weights with the same one share it (transformers draws one
    /// per layer, which both of its tables read).
    pub mask: usize,
}

/// A LayerNorm's tensors and epsilon.
#[derive(Clone, Debug, PartialEq)]
pub struct DerivedNorm {
    /// Its scale.
    pub gamma: String,
    /// Its shift, if any.
    pub beta: Option<String>,
    /// Added to the variance.
    pub eps: f32,
}

/// Every layer's position tables as [`Derived`] weights of `ck` (none for a configuration
/// without position terms), computed and added to it.
pub(crate) fn derive_tables(ck: &mut Checkpoint, cfg: &EncoderConfig) -> Result<Vec<Derived>> {
    let Some(db) = cfg.deberta.filter(|db| db.c2p || db.p2c) else { return Ok(Vec::new()) };
    let _span = tracing::info_span!("derive", tables = "DeBERTa's position tables").entered();
    let names = Names::detect(ck, "embeddings.word_embeddings.weight")?;
    let (d, rows) = (cfg.hidden, 2 * db.span);
    // The checkpoint names of tensors the tables are made of, their shapes checked.
    let may = |name: &str, want: &[usize]| names.checked(name, want);
    let need = |name: &str, want: &[usize]| {
        may(name, want)?.ok_or_else(|| {
            crate::Error::format(format!("the checkpoint has no tensor `{}`", names.full(name)))
        })
    };
    let input = need("encoder.rel_embeddings.weight", &[rows, d])?;
    let norm = match db.norm_relative {
        true => Some(DerivedNorm {
            gamma: need("encoder.LayerNorm.weight", &[d])?,
            beta: may("encoder.LayerNorm.bias", &[d])?,
            eps: cfg.eps,
        }),
        false => None,
    };
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
            derived.push(Derived {
                name: names.full(&table(&pre, keys)),
                input: input.clone(),
                norm: norm.clone(),
                proj: need(&format!("{proj}.weight"), &[d, d])?,
                bias: may(&format!("{proj}.bias"), &[d])?,
                dropout: cfg.dropout.attention_out,
                mask: l,
            });
        }
    }
    let Some(first) = derived.first() else { return Ok(derived) };
    // Every table projects the same rows.
    let x = rows_of(ck, first, d)?;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    for w in &derived {
        let values = project(&x, d, &values(ck, &w.proj)?, opt(ck, &w.bias)?.as_deref(), threads);
        ck.derive(w.name.clone(), vec![rows, d], &values)?;
    }
    Ok(derived)
}

/// The `d`-wide rows `w` projects: its input, through its LayerNorm if it has one.
fn rows_of(ck: &Checkpoint, w: &Derived, d: usize) -> Result<Vec<f32>> {
    let mut x = values(ck, &w.input)?;
    if let Some(n) = &w.norm {
        layer_norm(&mut x, d, &values(ck, &n.gamma)?, opt(ck, &n.beta)?.as_deref(), n.eps);
    }
    Ok(x)
}

/// The values of `ck`'s tensor `name` as f32.
fn values(ck: &Checkpoint, name: &str) -> Result<Vec<f32>> {
    let t = ck.tensor(name)?;
    let mut v = Vec::with_capacity(t.numel());
    t.extend_f32(&mut v);
    Ok(v)
}

/// [`values`] of `name`, if there is one.
fn opt(ck: &Checkpoint, name: &Option<String>) -> Result<Option<Vec<f32>>> {
    name.as_deref().map(|n| values(ck, n)).transpose()
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

/// Rows of `x` a projection task takes, and outputs a tile of it accumulates at once: a tile's
/// sums stay in registers while each weight row streams past once for all its rows.
const TILE_ROWS: usize = 4;
const TILE_COLS: usize = 16;

/// `x W^T + b` for the `d`-wide rows of `x` and the `[d, d]` weight `w`, blocks of rows on
/// `threads` threads.
fn project(x: &[f32], d: usize, w: &[f32], b: Option<&[f32]>, threads: usize) -> Vec<f32> {
    // `[in, out]`, so that a step along the inputs reads a run of outputs' weights.
    let mut wt = vec![0.0f32; d * d];
    for (o, row) in w.chunks_exact(d).enumerate() {
        for (i, &v) in row.iter().enumerate() {
            wt[i * d + o] = v;
        }
    }
    let blocks: Vec<&[f32]> = x.chunks(TILE_ROWS * d).collect();
    let full_tile = full_tile();
    let out = crate::par::map_ordered(&blocks, threads, |rows| {
        let n = rows.len() / d;
        let mut y = match b {
            Some(b) => b.repeat(n),
            None => vec![0.0; n * d],
        };
        let mut o = 0;
        while o < d {
            let width = TILE_COLS.min(d - o);
            if n == TILE_ROWS && width == TILE_COLS {
                full_tile(rows, &wt, d, o, &mut y);
            } else {
                for (r, row) in rows.chunks_exact(d).enumerate() {
                    for (k, &a) in row.iter().enumerate() {
                        let ws = &wt[k * d + o..k * d + o + width];
                        y[r * d + o..r * d + o + width].iter_mut().zip(ws).for_each(|(v, w)| {
                            *v += a * w;
                        });
                    }
                }
            }
            o += width;
        }
        y
    });
    out.concat()
}

/// A [`tile`] of [`TILE_ROWS`] rows and [`TILE_COLS`] outputs.
type FullTile = fn(&[f32], &[f32], usize, usize, &mut [f32]);

/// The [`FullTile`] in the widest vectors this CPU has.
fn full_tile() -> FullTile {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: this kernel is chosen only where the CPU has AVX2 and FMA, detected above.
        return |x, wt, d, o, y| unsafe { tile_avx2(x, wt, d, o, y) };
    }
    tile::<TILE_ROWS, TILE_COLS, false>
}

/// [`tile`] compiled for AVX2 with fused multiply-adds: about twice the baseline's speed.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn tile_avx2(x: &[f32], wt: &[f32], d: usize, o: usize, y: &mut [f32]) {
    tile::<TILE_ROWS, TILE_COLS, true>(x, wt, d, o, y);
}

/// Adds to outputs `o..o + C` of `y`'s `R` rows the products of `x`'s `R` rows (`d` wide) and
/// the `[d, d]` transposed weight `wt`, each product added in one rounding when `FUSED` (only
/// where the CPU has fused multiply-adds: elsewhere `mul_add` is a library call).
#[inline(always)]
fn tile<const R: usize, const C: usize, const FUSED: bool>(
    x: &[f32],
    wt: &[f32],
    d: usize,
    o: usize,
    y: &mut [f32],
) {
    let rows: [&[f32]; R] = std::array::from_fn(|r| &x[r * d..(r + 1) * d]);
    let mut acc = [[0.0f32; C]; R];
    for (k, ws) in wt.chunks_exact(d).enumerate() {
        let ws: &[f32; C] = ws[o..o + C].try_into().expect("a tile's width");
        for (acc, row) in acc.iter_mut().zip(&rows) {
            let a = row[k];
            for (v, w) in acc.iter_mut().zip(ws) {
                *v = if FUSED { a.mul_add(*w, *v) } else { *v + a * w };
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        y[r * d + o..r * d + o + C].iter_mut().zip(acc).for_each(|(v, a)| *v += a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The projection in tiles (whole ones, and rows and outputs left over) is `x W^T + b`, as
    /// a sum in f64 computes it, on one thread and on several. The bound allows f32 sums of 67
    /// products rounded in another order.
    #[test]
    fn projection_in_tiles_is_the_matrix_product() {
        for (rows, d) in [(16, 32), (7, 37), (3, 67), (9, 16)] {
            let x: Vec<f32> =
                (0..rows * d).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
            let w: Vec<f32> = (0..d * d).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
            let b: Vec<f32> = (0..d).map(|i| i as f32 / d as f32).collect();
            for (bias, threads) in [(None, 1), (Some(b.as_slice()), 1), (Some(b.as_slice()), 3)] {
                let y = project(&x, d, &w, bias, threads);
                assert_eq!(y.len(), rows * d);
                for r in 0..rows {
                    for o in 0..d {
                        let mut want = bias.map_or(0.0, |b| f64::from(b[o]));
                        for k in 0..d {
                            want += f64::from(x[r * d + k]) * f64::from(w[o * d + k]);
                        }
                        let got = f64::from(y[r * d + o]);
                        assert!(
                            (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "{rows}x{d}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
