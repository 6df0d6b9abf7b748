//! The op vocabulary, with the numerics every backend follows.

use serde::{Deserialize, Serialize};

use super::{Val, W};

/// Which half of a gated linear unit's input is its gate, the half activated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Gate {
    /// `act(a) * b` for `x = [a | b]`: GeGLU and SwiGLU as most checkpoints lay them out.
    First,
    /// `a * act(b)` for `x = [a | b]`: GTE's up-then-gate projection.
    Second,
}

impl Gate {
    /// Where the gate and the value it multiplies start in a row of two halves `h` wide.
    pub fn starts(self, h: usize) -> (usize, usize) {
        match self {
            Gate::First => (0, h),
            Gate::Second => (h, 0),
        }
    }
}

/// An element-wise activation function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Act {
    /// `x`.
    Identity,
    /// Exact GELU: `0.5 x (1 + erf(x / sqrt 2))`.
    Gelu,
    /// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `max(x, 0)`.
    Relu,
    /// SiLU (swish): `x / (1 + exp(-x))`.
    Silu,
    /// `tanh x` (the BERT pooler).
    Tanh,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `ln(1 + max(x, 0))`, SPLADE's term weighting.
    Log1pRelu,
}

impl Act {
    /// Every activation, for checks that cover them all.
    pub const ALL: [Act; 8] = [
        Act::Identity,
        Act::Gelu,
        Act::GeluTanh,
        Act::Relu,
        Act::Silu,
        Act::Tanh,
        Act::Sigmoid,
        Act::Log1pRelu,
    ];

    /// Applies the activation to one value, in f64. Backends must match this within tolerance.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Act::Identity => x,
            Act::Gelu => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
            Act::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            Act::Relu => x.max(0.0),
            Act::Silu => x / (1.0 + (-x).exp()),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Log1pRelu => x.max(0.0).ln_1p(),
        }
    }
}

/// How [`Op::Pool`] reduces a sequence's token rows to one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PoolMode {
    /// The sequence's first token (`[CLS]`).
    Cls,
    /// The sequence's last token.
    Last,
    /// The arithmetic mean over the sequence's tokens.
    Mean,
    /// The column-wise maximum over the sequence's tokens.
    Max,
    /// The column-wise sum over the sequence's tokens.
    Sum,
}

/// The keys an attention query sees, relative to its own position within its sequence: at most
/// `before` positions before it and `after` after it; `None` reaches the sequence's edge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reach {
    /// The farthest key before the query, or `None` for the sequence's start.
    pub before: Option<usize>,
    /// The farthest key after the query, or `None` for the sequence's end.
    pub after: Option<usize>,
}

impl Reach {
    /// An [`Op::Attention`]'s reach: its window on both sides, and nothing after the query
    /// where it is causal.
    pub const fn of(window: Option<usize>, causal: bool) -> Reach {
        Reach { before: window, after: if causal { Some(0) } else { window } }
    }

    /// Whether every query sees its whole sequence.
    pub const fn is_whole(self) -> bool {
        self.before.is_none() && self.after.is_none()
    }

    /// The keys `lo..hi` the query at position `i` of a sequence of `len` tokens sees.
    pub fn keys(self, i: usize, len: usize) -> (usize, usize) {
        let lo = self.before.map_or(0, |b| i.saturating_sub(b));
        let hi = self.after.map_or(len, |a| i.saturating_add(a).saturating_add(1).min(len));
        (lo, hi)
    }

    /// The most keys one query of a sequence of `len` tokens sees.
    pub fn widest(self, len: usize) -> usize {
        match (self.before, self.after) {
            (Some(b), Some(a)) => b.saturating_add(a).saturating_add(1).min(len),
            _ => len,
        }
    }
}

/// A learned bias on each attention score by the key's position relative to the query's, in
/// buckets: exact for near keys, logarithmic up to `max_distance`, half the buckets for keys
/// before the query and half for keys after it (MPNet's, T5's bidirectional form).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelativeBias {
    /// `[buckets, heads]`: each bucket's bias, per head.
    pub table: W,
    /// Buckets of relative position; even.
    pub buckets: usize,
    /// The distance from which keys share the farthest bucket of their side.
    pub max_distance: usize,
}

impl RelativeBias {
    /// The bucket of a key `rel` positions after its query (before it where `rel < 0`),
    /// computed in f32 as transformers' MPNet computes it.
    pub fn bucket(self, rel: i64) -> usize {
        let half = self.buckets / 2;
        // transformers buckets `query - key`; keys after the query take the upper half.
        let side = if rel > 0 { half } else { 0 };
        let n = rel.unsigned_abs() as usize;
        let exact = half / 2;
        if n < exact {
            return side + n;
        }
        let ratio = (n as f32 / exact as f32).ln();
        let span = (self.max_distance as f64 / exact as f64).ln() as f32;
        let far = exact + (ratio / span * (half - exact) as f32) as usize;
        side + far.min(half - 1)
    }

    /// The bucket of each relative position `-(len - 1)..=len - 1`, in order: that of `r` at
    /// `r + len - 1`.
    pub fn buckets_by_distance(self, len: usize) -> Vec<usize> {
        let span = (2 * len).saturating_sub(1);
        (0..span).map(|r| self.bucket(r as i64 - len as i64 + 1)).collect()
    }

    /// Each head's bias for relative positions `-(len - 1)..=len - 1`: `[heads, 2 len - 1]`,
    /// bias of head `h` at relative position `r` at `h * (2 len - 1) + r + len - 1`, read from
    /// the `[buckets, heads]` table `table`.
    pub fn by_distance(self, table: &[f32], heads: usize, len: usize) -> Vec<f32> {
        let buckets = self.buckets_by_distance(len);
        let span = buckets.len();
        let mut out = vec![0.0; heads * span];
        for (r, b) in buckets.into_iter().enumerate() {
            for h in 0..heads {
                out[h * span + r] = table[b * heads + h];
            }
        }
        out
    }
}

/// DeBERTa's disentangled attention (v2 and v3): each score also takes the query's product with
/// the key's relative position embedded through the layer's key projection (content to
/// position), and the key's product with the same position embedded through its query
/// projection (position to content).
///
/// For a query at position `i` and a key at `j`, the row read is [`Disentangled::row`] of
/// `j - i`: `clamp(bucket(i - j) + span, 0, 2 span - 1)`, where `bucket` is DeBERTa's log
/// bucketing (the identity without buckets). Both terms are multiplied by the op's `scale`,
/// as the content score is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Disentangled {
    /// `[2 span, heads * head_dim]`: the relative embeddings through the key projection, whose
    /// rows the queries meet (content to position), or `None` without that term.
    pub keys: Option<W>,
    /// `[2 span, heads * head_dim]`: the relative embeddings through the query projection,
    /// whose rows the keys meet (position to content), or `None` without that term.
    pub queries: Option<W>,
    /// Relative positions on each side of the tables: they have `2 span` rows.
    pub span: usize,
    /// Position buckets (`position_buckets`): distances up to half of them exact, farther ones
    /// logarithmic up to `max_distance`; 0 for exact distances throughout.
    pub buckets: usize,
    /// The distance the logarithmic buckets reach (`max_relative_positions`).
    pub max_distance: usize,
}

impl Disentangled {
    /// DeBERTa's bucket of the relative position `rel` (query minus key), computed in f32 as
    /// transformers' `make_log_bucket_position` computes it.
    pub fn bucket(self, rel: i64) -> i64 {
        let mid = (self.buckets / 2) as i64;
        if self.buckets == 0 || self.max_distance == 0 || rel.abs() <= mid {
            return rel;
        }
        let ratio = (rel.abs() as f32 / mid as f32).ln();
        let range = (((self.max_distance - 1) as f64 / mid as f64) as f32).ln();
        let far = (ratio / range * (mid - 1) as f32).ceil() + mid as f32;
        far as i64 * rel.signum()
    }

    /// The table row of a key `rel` positions after its query (before it where `rel < 0`).
    pub fn row(self, rel: i64) -> usize {
        let top = 2 * self.span as i64 - 1;
        (self.bucket(-rel) + self.span as i64).clamp(0, top) as usize
    }

    /// The row of each relative position `-(len - 1)..=len - 1`, in order: that of `r` at
    /// `r + len - 1`.
    pub fn rows_by_distance(self, len: usize) -> Vec<usize> {
        let span = (2 * len).saturating_sub(1);
        (0..span).map(|r| self.row(r as i64 - len as i64 + 1)).collect()
    }
}

/// How an attention op's scores depend on the positions of query and key, beyond their content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PositionBias {
    /// A learned bias by bucket of relative position (MPNet, T5).
    Relative(RelativeBias),
    /// DeBERTa's content-to-position and position-to-content terms.
    Disentangled(Disentangled),
}

impl PositionBias {
    /// The relative bias, if that is what this is.
    pub fn relative(self) -> Option<RelativeBias> {
        match self {
            PositionBias::Relative(b) => Some(b),
            PositionBias::Disentangled(_) => None,
        }
    }

    /// The disentangled terms, if that is what this is.
    pub fn disentangled(self) -> Option<Disentangled> {
        match self {
            PositionBias::Disentangled(d) => Some(d),
            PositionBias::Relative(_) => None,
        }
    }
}

/// One step of a graph. Every op writes exactly one value, `out`.
///
/// Accumulation: backends accumulate sums (GEMM dot products, norms' statistics, softmax
/// denominators, means) in at least f32; the reference uses f64.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Word embedding: `out[t] = scale * table[id[t]]`. `table` is `[vocab, width]`; `out` is
    /// tokens rows. The table's row count is the vocabulary a batch's ids are checked against.
    Embed {
        /// The `[vocab, width]` table.
        table: W,
        /// Multiplies every row: 1 in most models; Gemma's is `sqrt(width)`.
        scale: f32,
        /// The token rows produced.
        out: Val,
    },
    /// Token-type embedding: `out[t] = table[type[t]]`, `table` is `[type_vocab, width]`.
    TypeEmbed {
        /// The `[type_vocab, width]` table.
        table: W,
        /// The token rows produced.
        out: Val,
    },
    /// Absolute position embedding: `out[t] = table[offset + p(t)]`, where `p(t)` counts from 0
    /// at the first token of `t`'s sequence. RoBERTa uses `offset = padding_idx + 1`.
    /// A sequence may have at most `rows(table) - offset` tokens.
    PosEmbed {
        /// The `[max_positions, width]` table.
        table: W,
        /// Added to each position before the lookup.
        offset: usize,
        /// The token rows produced.
        out: Val,
    },
    /// `out = a + b`, element-wise, all three of one shape.
    Add {
        /// First addend.
        a: Val,
        /// Second addend.
        b: Val,
        /// The sum.
        out: Val,
    },
    /// `out = a * b`, element-wise, all three of one shape (a gated feed-forward's gate times
    /// its value, where the two come from separate layers).
    Mul {
        /// First factor.
        a: Val,
        /// Second factor.
        b: Val,
        /// The product.
        out: Val,
    },
    /// Layer normalisation of each row: `(x - mean) / sqrt(var + eps) * gamma + beta`, with the
    /// biased variance (divided by the width). `beta` absent means zero (ModernBERT).
    LayerNorm {
        /// Input rows.
        x: Val,
        /// `[width]` scale.
        gamma: W,
        /// `[width]` shift, if any.
        beta: Option<W>,
        /// Added to the variance.
        eps: f32,
        /// Output, same shape as `x`.
        out: Val,
    },
    /// RMS normalisation of each row, `x / sqrt(mean(x^2) + eps) * gamma` (with `unit_offset`,
    /// `* (1 + gamma)`), or with `group`, of each run of `group` columns of a row on its own (a
    /// norm per attention head).
    RmsNorm {
        /// Input rows.
        x: Val,
        /// `[width]` scale, or `[group]`, the same for every group.
        gamma: W,
        /// Added to the mean square.
        eps: f32,
        /// Columns normalised together, dividing the width; `None` for the whole row.
        group: Option<usize>,
        /// Whether the scale is `1 + gamma`: Gemma stores its norms' scales as their offsets
        /// from one.
        unit_offset: bool,
        /// Output, same shape as `x`.
        out: Val,
    },
    /// GEMM with a fused epilogue: `out = act(x . weight^T + bias) + residual`.
    ///
    /// `weight` is `[out_width, in_width]` (the PyTorch `nn.Linear` layout), `bias` is
    /// `[out_width]`, `residual` has `out`'s shape. The activation applies before the residual.
    Linear {
        /// Input rows, `in_width` wide.
        x: Val,
        /// The `[out_width, in_width]` matrix.
        weight: W,
        /// The `[out_width]` bias, if any.
        bias: Option<W>,
        /// Activation applied to `x . weight^T + bias`.
        act: Act,
        /// Added after the activation, if any.
        residual: Option<Val>,
        /// Output rows, `out_width` wide, same row kind as `x`.
        out: Val,
    },
    /// Gated linear unit: with `x = [a | b]` split into halves of width `h`,
    /// `out = act(a) * b` (GeGLU with GELU, SwiGLU with SiLU), or `a * act(b)` where the gate
    /// is the second half. `out` is `h` wide.
    Glu {
        /// Input rows, `2h` wide.
        x: Val,
        /// Activation applied to the gate.
        act: Act,
        /// Which half is the gate.
        gate: Gate,
        /// Output rows, `h` wide.
        out: Val,
    },
    /// Columns `start .. start + width(out)` of `x` (splits a fused QKV projection).
    Slice {
        /// Input rows.
        x: Val,
        /// First column taken.
        start: usize,
        /// Output rows, same row kind as `x`.
        out: Val,
    },
    /// Rotary position embedding on token rows holding `heads` heads of `head_dim` columns.
    ///
    /// For position `p` (counted from 0 at each sequence's start) and `i < head_dim / 2`, the
    /// angle is `p * position_scale * theta^(-2i / head_dim)` ([`crate::rope_angle`]); within each head, with `x1 = x[i]` and
    /// `x2 = x[i + head_dim / 2]` (the "rotate half" layout of GPT-NeoX and ModernBERT),
    /// `out[i] = x1 cos - x2 sin` and `out[i + head_dim / 2] = x2 cos + x1 sin`.
    Rope {
        /// Input token rows, `heads * head_dim` wide.
        x: Val,
        /// Number of heads.
        heads: usize,
        /// Columns per head; even.
        head_dim: usize,
        /// The frequency base (10000 in most models; ModernBERT's global layers use 160000).
        theta: f32,
        /// Multiplies every position: 1 in most models; below 1 where a model scales its
        /// positions (GTE's NTK scaling).
        position_scale: f32,
        /// Output, same shape as `x`.
        out: Val,
    },
    /// Multi-head self-attention within each sequence of the batch, bidirectional or causal.
    ///
    /// Per head `h` and query token `i` of a sequence: `s_j = scale * q_i . k_j` over the key
    /// tokens `j` of the same sequence (with `window = Some(w)`, only those with
    /// `|i - j| <= w`; with `causal`, only those with `j <= i`: see [`Reach`]), plus, with a [`PositionBias::Relative`] `b`, `table[b.bucket(j - i)][h]`,
    /// or with a [`PositionBias::Disentangled`] `d`, `scale * (q_i . K[r] + k_j . Q[r])` over
    /// head `h`'s columns of `d`'s tables at row `r = d.row(j - i)` (positions counted within
    /// the sequence), `a = softmax(s)` computed with the maximum subtracted, and
    /// `out_i = sum_j a_j v_j`. Heads are consecutive `head_dim`-column blocks. With fewer
    /// key-value heads than query heads (grouped-query attention), query head `h` reads
    /// key-value head `h / (heads / kv_heads)`, as each key-value head was repeated for its
    /// group. No token attends across a sequence boundary, and there is no padding to mask.
    ///
    /// With `q` in sequence rows, each sequence has one query, its first token's (position 0 for
    /// the window), and `out` has one row per sequence: a model that reads only `[CLS]`'s final
    /// row computes its last layer for that row alone.
    Attention {
        /// Query rows, `heads * head_dim` wide: one per token, or one per sequence (the first
        /// token's).
        q: Val,
        /// Key token rows, `kv_heads * head_dim` wide.
        k: Val,
        /// Value token rows, `kv_heads * head_dim` wide.
        v: Val,
        /// Number of query heads.
        heads: usize,
        /// Number of key-value heads: `heads`, or a divisor of it that groups of query heads
        /// share.
        kv_heads: usize,
        /// Columns per head.
        head_dim: usize,
        /// Multiplies every score; usually `1 / sqrt(head_dim)`.
        scale: f32,
        /// Sliding window: the largest `|i - j|` attended, or `None` for the whole sequence.
        window: Option<usize>,
        /// Whether a query sees only the keys at or before its own position (`j <= i`, a
        /// decoder's mask), within the window if there is one.
        causal: bool,
        /// What each score adds by the relative position of query and key, or `None`.
        position_bias: Option<PositionBias>,
        /// Output rows, the shape of `q`.
        out: Val,
    },
    /// An element-wise activation: `out = act(x)`.
    Activation {
        /// Input rows.
        x: Val,
        /// The function.
        act: Act,
        /// Output, same shape as `x`.
        out: Val,
    },
    /// Pools each sequence's token rows into one sequence row (see [`PoolMode`]).
    Pool {
        /// Token rows.
        x: Val,
        /// The reduction.
        mode: PoolMode,
        /// Sequence rows, same width.
        out: Val,
    },
    /// Gathers the token row at each marker: marker `m` of sequence `s` at relative position
    /// `p` reads token row `cu[s] + p`.
    Gather {
        /// Token rows.
        x: Val,
        /// Marker rows, same width.
        out: Val,
    },
    /// L2 normalisation of each row: `x / max(||x||_2, eps)` (PyTorch's `F.normalize`).
    L2Norm {
        /// Input rows.
        x: Val,
        /// Lower bound on the norm.
        eps: f32,
        /// Output, same shape as `x`.
        out: Val,
    },
}

impl Op {
    /// The op's name, as in messages.
    pub const fn name(&self) -> &'static str {
        match self {
            Op::Embed { .. } => "Embed",
            Op::TypeEmbed { .. } => "TypeEmbed",
            Op::PosEmbed { .. } => "PosEmbed",
            Op::Add { .. } => "Add",
            Op::Mul { .. } => "Mul",
            Op::LayerNorm { .. } => "LayerNorm",
            Op::RmsNorm { .. } => "RmsNorm",
            Op::Linear { .. } => "Linear",
            Op::Glu { .. } => "Glu",
            Op::Slice { .. } => "Slice",
            Op::Rope { .. } => "Rope",
            Op::Attention { .. } => "Attention",
            Op::Activation { .. } => "Activation",
            Op::Pool { .. } => "Pool",
            Op::Gather { .. } => "Gather",
            Op::L2Norm { .. } => "L2Norm",
        }
    }

    /// The value the op writes.
    pub const fn out(&self) -> Val {
        match *self {
            Op::Embed { out, .. }
            | Op::TypeEmbed { out, .. }
            | Op::PosEmbed { out, .. }
            | Op::Add { out, .. }
            | Op::Mul { out, .. }
            | Op::LayerNorm { out, .. }
            | Op::RmsNorm { out, .. }
            | Op::Linear { out, .. }
            | Op::Glu { out, .. }
            | Op::Slice { out, .. }
            | Op::Rope { out, .. }
            | Op::Attention { out, .. }
            | Op::Activation { out, .. }
            | Op::Pool { out, .. }
            | Op::Gather { out, .. }
            | Op::L2Norm { out, .. } => out,
        }
    }

    /// The values the op reads, in a fixed order (unused slots are `None`).
    pub fn inputs(&self) -> [Option<Val>; 3] {
        match *self {
            Op::Embed { .. } | Op::TypeEmbed { .. } | Op::PosEmbed { .. } => [None; 3],
            Op::Add { a, b, .. } | Op::Mul { a, b, .. } => [Some(a), Some(b), None],
            Op::Linear { x, residual, .. } => [Some(x), residual, None],
            Op::Attention { q, k, v, .. } => [Some(q), Some(k), Some(v)],
            Op::LayerNorm { x, .. }
            | Op::RmsNorm { x, .. }
            | Op::Glu { x, .. }
            | Op::Slice { x, .. }
            | Op::Rope { x, .. }
            | Op::Activation { x, .. }
            | Op::Pool { x, .. }
            | Op::Gather { x, .. }
            | Op::L2Norm { x, .. } => [Some(x), None, None],
        }
    }

    /// The inputs whose memory `out` may reuse when that input is not read afterwards.
    ///
    /// These ops compute each output element from input elements at the same position (or, for
    /// row-wise ops, from the same row, reading it whole before writing), so a backend can run
    /// them in place.
    pub fn in_place_candidates(&self) -> [Option<Val>; 2] {
        match *self {
            Op::Add { a, b, .. } | Op::Mul { a, b, .. } => [Some(a), Some(b)],
            Op::Linear { residual, .. } => [residual, None],
            Op::LayerNorm { x, .. }
            | Op::RmsNorm { x, .. }
            | Op::Rope { x, .. }
            | Op::Activation { x, .. }
            | Op::L2Norm { x, .. } => [Some(x), None],
            // These read other rows or columns than the one they write (embeddings read none).
            Op::Embed { .. }
            | Op::TypeEmbed { .. }
            | Op::PosEmbed { .. }
            | Op::Glu { .. }
            | Op::Slice { .. }
            | Op::Attention { .. }
            | Op::Pool { .. }
            | Op::Gather { .. } => [None, None],
        }
    }

    /// The weights the op reads.
    pub fn weights(&self) -> [Option<W>; 2] {
        match *self {
            Op::Embed { table, .. } | Op::TypeEmbed { table, .. } | Op::PosEmbed { table, .. } => {
                [Some(table), None]
            }
            Op::LayerNorm { gamma, beta, .. } => [Some(gamma), beta],
            Op::RmsNorm { gamma, .. } => [Some(gamma), None],
            Op::Linear { weight, bias, .. } => [Some(weight), bias],
            Op::Attention { position_bias, .. } => match position_bias {
                Some(PositionBias::Relative(b)) => [Some(b.table), None],
                Some(PositionBias::Disentangled(d)) => [d.keys, d.queries],
                None => [None, None],
            },
            Op::Add { .. }
            | Op::Mul { .. }
            | Op::Glu { .. }
            | Op::Slice { .. }
            | Op::Rope { .. }
            | Op::Activation { .. }
            | Op::Pool { .. }
            | Op::Gather { .. }
            | Op::L2Norm { .. } => [None, None],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers 5.25's `MPNetEncoder.relative_position_bucket` (32 buckets up to distance
    /// 128) over relative positions -1100..=1100, as runs: the first position of each run and
    /// its bucket. At distances 16, 32 and 64 the logarithms' quotient is a whole number, where
    /// a rounding error below it would move the distance into the bucket before.
    const MPNET_BUCKETS: [(i64, usize); 31] = [
        (-1100, 15),
        (-90, 14),
        (-63, 13),
        (-45, 12),
        (-31, 11),
        (-22, 10),
        (-15, 9),
        (-11, 8),
        (-7, 7),
        (-6, 6),
        (-5, 5),
        (-4, 4),
        (-3, 3),
        (-2, 2),
        (-1, 1),
        (0, 0),
        (1, 17),
        (2, 18),
        (3, 19),
        (4, 20),
        (5, 21),
        (6, 22),
        (7, 23),
        (8, 24),
        (12, 25),
        (16, 26),
        (23, 27),
        (32, 28),
        (46, 29),
        (64, 30),
        (91, 31),
    ];

    #[test]
    fn relative_buckets_are_mpnets() {
        let b = RelativeBias { table: W(0), buckets: 32, max_distance: 128 };
        for (i, &(first, bucket)) in MPNET_BUCKETS.iter().enumerate() {
            let end = MPNET_BUCKETS.get(i + 1).map_or(1101, |r| r.0);
            for rel in first..end {
                assert_eq!(b.bucket(rel), bucket, "relative position {rel}");
            }
        }
    }

    #[test]
    fn biases_by_distance_read_each_heads_bucket() {
        let b = RelativeBias { table: W(0), buckets: 32, max_distance: 128 };
        // Two heads: bucket k's bias is k for head 0 and -k for head 1.
        let table: Vec<f32> = (0..32).flat_map(|k| [k as f32, -(k as f32)]).collect();
        let len = 20;
        let d = b.by_distance(&table, 2, len);
        let span = 2 * len - 1;
        assert_eq!(d.len(), 2 * span);
        for r in -(len as i64 - 1)..len as i64 {
            let at = (r + len as i64 - 1) as usize;
            assert_eq!(d[at], b.bucket(r) as f32, "head 0 at {r}");
            assert_eq!(d[span + at], -(b.bucket(r) as f32), "head 1 at {r}");
        }
    }

    #[test]
    fn activations_match_known_values() {
        let cases = [
            (Act::Identity, -1.5, -1.5),
            (Act::Gelu, 1.0, 0.841_344_746_068_542_9),
            (Act::GeluTanh, 1.0, 0.841_191_990_608_276_8),
            (Act::Relu, -1.0, 0.0),
            (Act::Silu, 1.0, 0.731_058_578_630_004_9),
            (Act::Tanh, 0.5, 0.462_117_157_260_009_8),
            (Act::Sigmoid, 0.0, 0.5),
            (Act::Log1pRelu, std::f64::consts::E - 1.0, 1.0),
            (Act::Log1pRelu, -3.0, 0.0),
        ];
        for (act, x, want) in cases {
            assert!((act.apply(x) - want).abs() < 1e-15, "{act:?}({x}) = {}", act.apply(x));
        }
    }
}
