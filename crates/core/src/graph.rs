//! The op graph: a model's forward pass as a list of ops over 2-D values.
//!
//! Every value is a matrix of `rows x width`, where `rows` is a row *kind* ([`Rows`]): one row per
//! token, per sequence or per marker. A graph never knows how many rows a batch has; a backend
//! learns that from the [`crate::Batch`] at run time and from the [`crate::Bucket`] at lower time.
//!
//! The batch itself is the graph's implicit input: token ids, token types, positions (counted
//! from each sequence's start) and marker positions are read by the ops that need them.
//!
//! Numerics are part of each op's contract, so every backend computes the same function; the
//! reference interpreter ([`crate::reference`]) is the executable form of these documents.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A value (an activation matrix) of a graph, by index into [`Graph::vals`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Val(pub u32);

/// A weight tensor, by index into [`Graph::weights`] (the checkpoint's tensor list).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct W(pub u32);

impl Val {
    /// The index as `usize`.
    pub const fn idx(self) -> usize {
        self.0 as usize
    }
}

impl W {
    /// The index as `usize`.
    pub const fn idx(self) -> usize {
        self.0 as usize
    }
}

/// What one row of a value stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Rows {
    /// One row per token of the batch.
    Tokens,
    /// One row per sequence of the batch.
    Seqs,
    /// One row per marker: a chosen token position, such as each word's first sub-token.
    Markers,
}

impl Rows {
    /// The lower-case name used in messages.
    pub const fn name(self) -> &'static str {
        match self {
            Rows::Tokens => "tokens",
            Rows::Seqs => "seqs",
            Rows::Markers => "markers",
        }
    }
}

/// The shape of a value: its row kind and its width (columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// What each row stands for.
    pub rows: Rows,
    /// Columns per row.
    pub width: usize,
}

impl Shape {
    /// A shape of `width` columns, one row per token.
    pub const fn tokens(width: usize) -> Self {
        Shape { rows: Rows::Tokens, width }
    }
    /// A shape of `width` columns, one row per sequence.
    pub const fn seqs(width: usize) -> Self {
        Shape { rows: Rows::Seqs, width }
    }
    /// A shape of `width` columns, one row per marker.
    pub const fn markers(width: usize) -> Self {
        Shape { rows: Rows::Markers, width }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{} x {}]", self.rows.name(), self.width)
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
}

/// One step of a graph. Every op writes exactly one value, `out`.
///
/// Accumulation: backends accumulate sums (GEMM dot products, norms' statistics, softmax
/// denominators, means) in at least f32; the reference uses f64.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    /// Word embedding: `out[t] = table[id[t]]`. `table` is `[vocab, width]`; `out` is tokens rows.
    /// The table's row count is the vocabulary a batch's ids are checked against.
    Embed {
        /// The `[vocab, width]` table.
        table: W,
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
    /// RMS normalisation of each row: `x / sqrt(mean(x^2) + eps) * gamma`.
    RmsNorm {
        /// Input rows.
        x: Val,
        /// `[width]` scale.
        gamma: W,
        /// Added to the mean square.
        eps: f32,
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
    /// `out = act(a) * b` (GeGLU with GELU, SwiGLU with SiLU). `out` is `h` wide.
    Glu {
        /// Input rows, `2h` wide.
        x: Val,
        /// Activation applied to the first half.
        act: Act,
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
    /// angle is `p * theta^(-2i / head_dim)`; within each head, with `x1 = x[i]` and
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
        /// Output, same shape as `x`.
        out: Val,
    },
    /// Bidirectional multi-head self-attention within each sequence of the batch.
    ///
    /// Per head `h` and query token `i` of a sequence: `s_j = scale * q_i . k_j` over the key
    /// tokens `j` of the same sequence (and, with `window = Some(w)`, only those with
    /// `|i - j| <= w`), `a = softmax(s)` computed with the maximum subtracted, and
    /// `out_i = sum_j a_j v_j`. Heads are consecutive `head_dim`-column blocks. No token attends
    /// across a sequence boundary, and there is no padding to mask.
    Attention {
        /// Query token rows, `heads * head_dim` wide.
        q: Val,
        /// Key token rows, `heads * head_dim` wide.
        k: Val,
        /// Value token rows, `heads * head_dim` wide.
        v: Val,
        /// Number of heads.
        heads: usize,
        /// Columns per head.
        head_dim: usize,
        /// Multiplies every score; usually `1 / sqrt(head_dim)`.
        scale: f32,
        /// Sliding window: the largest `|i - j|` attended, or `None` for the whole sequence.
        window: Option<usize>,
        /// Output token rows, `heads * head_dim` wide.
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
            Op::Add { a, b, .. } => [Some(a), Some(b), None],
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
            Op::Add { a, b, .. } => [Some(a), Some(b)],
            Op::Linear { residual, .. } => [residual, None],
            Op::LayerNorm { x, .. }
            | Op::RmsNorm { x, .. }
            | Op::Rope { x, .. }
            | Op::Activation { x, .. }
            | Op::L2Norm { x, .. } => [Some(x), None],
            _ => [None, None],
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
            _ => [None, None],
        }
    }
}

/// A weight the graph expects: its checkpoint name and shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightSpec {
    /// The tensor's name in the checkpoint.
    pub name: String,
    /// Its dimensions, outermost first.
    pub shape: Vec<usize>,
}

/// A named result of a graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    /// The name under which [`crate::Outputs`] returns it.
    pub name: String,
    /// The value returned.
    pub val: Val,
}

/// The limits a batch must respect to run through a graph, derived from its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Token ids must be below this (the word embedding's row count).
    pub vocab: u32,
    /// Token types must be below this (the type embedding's row count, else 1).
    pub types: u32,
    /// A sequence may have at most this many tokens (from the position table, if any).
    pub max_len: u32,
}

impl Limits {
    /// No limits at all.
    pub const NONE: Limits = Limits { vocab: u32::MAX, types: u32::MAX, max_len: u32::MAX };
}

/// A model's forward pass: values, the ops that compute them in order, and named outputs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    /// The shape of every value; a [`Val`] indexes this.
    pub vals: Vec<Shape>,
    /// The ops, in execution order; each defines exactly one value, after its inputs.
    pub ops: Vec<Op>,
    /// The named results.
    pub outputs: Vec<Output>,
    /// The weight tensors the ops reference by [`W`], with the shapes they must have.
    pub weights: Vec<WeightSpec>,
}

impl Graph {
    /// The shape of a value. Panics if `v` is out of range; call [`Graph::validate`] first.
    pub fn shape(&self, v: Val) -> Shape {
        self.vals[v.idx()]
    }

    /// The value an output name refers to.
    pub fn output(&self, name: &str) -> Option<Val> {
        self.outputs.iter().find(|o| o.name == name).map(|o| o.val)
    }

    /// Checks the graph: every index in range, every value defined once and before use, and
    /// every width and weight shape consistent. The error names the op and what it expected.
    pub fn validate(&self) -> Result<()> {
        let mut defined = vec![false; self.vals.len()];
        for (i, op) in self.ops.iter().enumerate() {
            let fail = |msg: String| Error::Graph(format!("op {i} ({}): {msg}", op.name()));
            for v in op.inputs().into_iter().flatten() {
                if v.idx() >= self.vals.len() {
                    return Err(fail(format!("reads value {} of {}", v.0, self.vals.len())));
                }
                if !defined[v.idx()] {
                    return Err(fail(format!("reads value {} before any op defines it", v.0)));
                }
            }
            for w in op.weights().into_iter().flatten() {
                if w.idx() >= self.weights.len() {
                    return Err(fail(format!("uses weight {} of {}", w.0, self.weights.len())));
                }
            }
            let out = op.out();
            if out.idx() >= self.vals.len() {
                return Err(fail(format!("writes value {} of {}", out.0, self.vals.len())));
            }
            if std::mem::replace(&mut defined[out.idx()], true) {
                return Err(fail(format!("writes value {}, which an earlier op defined", out.0)));
            }
            self.check_op(op).map_err(fail)?;
        }
        if let Some(v) = defined.iter().position(|d| !d) {
            return Err(Error::Graph(format!("value {v} is never defined by any op")));
        }
        if self.outputs.is_empty() {
            return Err(Error::Graph("the graph has no outputs".into()));
        }
        for (i, o) in self.outputs.iter().enumerate() {
            if o.val.idx() >= self.vals.len() {
                return Err(Error::Graph(format!("output `{}` names value {}", o.name, o.val.0)));
            }
            if self.outputs[..i].iter().any(|p| p.name == o.name) {
                return Err(Error::Graph(format!("output name `{}` appears twice", o.name)));
            }
        }
        Ok(())
    }

    /// Checks one op's shapes; the message omits the op, which the caller adds.
    fn check_op(&self, op: &Op) -> Result<(), String> {
        let sh = |v: Val| self.vals[v.idx()];
        let wshape = |w: W| self.weights[w.idx()].shape.as_slice();
        let want_w = |w: W, want: &[usize]| -> Result<(), String> {
            let spec = &self.weights[w.idx()];
            if spec.shape == want {
                Ok(())
            } else {
                Err(format!(
                    "weight {} `{}` has shape {:?}, expected {want:?}",
                    w.0, spec.name, spec.shape
                ))
            }
        };
        let same = |what: &str, a: Val, b: Val| -> Result<(), String> {
            if sh(a) == sh(b) {
                Ok(())
            } else {
                Err(format!("{what}: value {} is {} but value {} is {}", a.0, sh(a), b.0, sh(b)))
            }
        };
        let rows = |v: Val, want: Rows| -> Result<(), String> {
            if sh(v).rows == want {
                Ok(())
            } else {
                Err(format!("value {} is {}, expected {} rows", v.0, sh(v), want.name()))
            }
        };
        let positive = |what: &str, eps: f32| -> Result<(), String> {
            if eps.is_finite() && eps > 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be positive and finite, got {eps}"))
            }
        };
        match *op {
            Op::Embed { table, out } | Op::TypeEmbed { table, out } => {
                rows(out, Rows::Tokens)?;
                let t = wshape(table);
                if t.len() != 2 || t[1] != sh(out).width || t[0] == 0 {
                    return Err(format!(
                        "weight {} `{}` has shape {t:?}, expected [rows > 0, {}]",
                        table.0,
                        self.weights[table.idx()].name,
                        sh(out).width
                    ));
                }
            }
            Op::PosEmbed { table, offset, out } => {
                rows(out, Rows::Tokens)?;
                let t = wshape(table);
                if t.len() != 2 || t[1] != sh(out).width || t[0] <= offset {
                    return Err(format!(
                        "weight {} `{}` has shape {t:?}, expected [rows > {offset}, {}]",
                        table.0,
                        self.weights[table.idx()].name,
                        sh(out).width
                    ));
                }
            }
            Op::Add { a, b, out } => {
                same("addends differ", a, b)?;
                same("output differs from input", a, out)?;
            }
            Op::LayerNorm { x, gamma, beta, eps, out } => {
                same("output differs from input", x, out)?;
                positive("eps", eps)?;
                want_w(gamma, &[sh(x).width])?;
                if let Some(b) = beta {
                    want_w(b, &[sh(x).width])?;
                }
            }
            Op::RmsNorm { x, gamma, eps, out } => {
                same("output differs from input", x, out)?;
                positive("eps", eps)?;
                want_w(gamma, &[sh(x).width])?;
            }
            Op::Linear { x, weight, bias, act: _, residual, out } => {
                rows(out, sh(x).rows)?;
                want_w(weight, &[sh(out).width, sh(x).width])?;
                if let Some(b) = bias {
                    want_w(b, &[sh(out).width])?;
                }
                if let Some(r) = residual {
                    same("residual differs from output", r, out)?;
                }
            }
            Op::Glu { x, act: _, out } => {
                rows(out, sh(x).rows)?;
                if sh(x).width != 2 * sh(out).width {
                    return Err(format!(
                        "input is {} wide, expected twice the output width {}",
                        sh(x).width,
                        sh(out).width
                    ));
                }
            }
            Op::Slice { x, start, out } => {
                rows(out, sh(x).rows)?;
                if start.checked_add(sh(out).width).is_none_or(|end| end > sh(x).width) {
                    return Err(format!(
                        "columns {start}..{}+{} exceed the input's width {}",
                        start,
                        sh(out).width,
                        sh(x).width
                    ));
                }
            }
            Op::Rope { x, heads, head_dim, theta, out } => {
                rows(x, Rows::Tokens)?;
                same("output differs from input", x, out)?;
                heads_fit(sh(x).width, heads, head_dim)?;
                if head_dim % 2 != 0 {
                    return Err(format!("head_dim {head_dim} must be even"));
                }
                positive("theta", theta)?;
            }
            Op::Attention { q, k, v, heads, head_dim, scale, window: _, out } => {
                rows(q, Rows::Tokens)?;
                heads_fit(sh(q).width, heads, head_dim)?;
                same("keys differ from queries", q, k)?;
                same("values differ from queries", q, v)?;
                same("output differs from queries", q, out)?;
                if !scale.is_finite() {
                    return Err(format!("scale must be finite, got {scale}"));
                }
            }
            Op::Activation { x, act: _, out } => same("output differs from input", x, out)?,
            Op::Pool { x, mode: _, out } => {
                rows(x, Rows::Tokens)?;
                rows(out, Rows::Seqs)?;
                same_width(sh(x), sh(out))?;
            }
            Op::Gather { x, out } => {
                rows(x, Rows::Tokens)?;
                rows(out, Rows::Markers)?;
                same_width(sh(x), sh(out))?;
            }
            Op::L2Norm { x, eps, out } => {
                same("output differs from input", x, out)?;
                positive("eps", eps)?;
            }
        }
        Ok(())
    }

    /// Checks that `tensors` match the weights this graph expects, in count, order and shape.
    pub fn check_weights(&self, tensors: &[crate::HostTensor<'_>]) -> Result<()> {
        if tensors.len() != self.weights.len() {
            return Err(Error::Format(format!(
                "the graph expects {} weight tensors, got {}",
                self.weights.len(),
                tensors.len()
            )));
        }
        for (i, (t, spec)) in tensors.iter().zip(&self.weights).enumerate() {
            t.check()?;
            if t.shape != spec.shape.as_slice() {
                return Err(Error::Format(format!(
                    "weight {i} `{}` has shape {:?}, expected {:?}",
                    spec.name, t.shape, spec.shape
                )));
            }
        }
        Ok(())
    }

    /// Validates the graph and checks that `uploaded` weights (a count) are the ones it reads:
    /// what every backend's `lower` starts with.
    pub fn check_lowerable(&self, uploaded: usize) -> Result<()> {
        self.validate()?;
        if uploaded != self.weights.len() {
            return Err(Error::Graph(format!(
                "the graph expects {} weights but {} were uploaded",
                self.weights.len(),
                uploaded
            )));
        }
        Ok(())
    }

    /// The limits a batch must respect for this graph: vocabulary, token types, sequence length.
    pub fn limits(&self) -> Limits {
        let mut l = Limits { vocab: u32::MAX, types: 1, max_len: u32::MAX };
        let rows_of = |w: W| {
            let r = self.weights.get(w.idx()).and_then(|s| s.shape.first()).copied();
            u32::try_from(r.unwrap_or(0)).unwrap_or(u32::MAX)
        };
        for op in &self.ops {
            match *op {
                Op::Embed { table, .. } => l.vocab = l.vocab.min(rows_of(table)),
                Op::TypeEmbed { table, .. } => l.types = rows_of(table),
                Op::PosEmbed { table, offset, .. } => {
                    let offset = u32::try_from(offset).unwrap_or(u32::MAX);
                    l.max_len = l.max_len.min(rows_of(table).saturating_sub(offset));
                }
                _ => {}
            }
        }
        l
    }

    /// For each value, the index of the last op that reads it, or `None` if none does.
    pub fn last_uses(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.vals.len()];
        for (i, op) in self.ops.iter().enumerate() {
            for v in op.inputs().into_iter().flatten() {
                last[v.idx()] = Some(i);
            }
        }
        last
    }
}

fn heads_fit(width: usize, heads: usize, head_dim: usize) -> Result<(), String> {
    if heads == 0 || head_dim == 0 || heads.checked_mul(head_dim) != Some(width) {
        return Err(format!("{heads} heads of {head_dim} columns do not make width {width}"));
    }
    Ok(())
}

fn same_width(a: Shape, b: Shape) -> Result<(), String> {
    if a.width == b.width {
        Ok(())
    } else {
        Err(format!("input is {a} but output is {b}; widths must match"))
    }
}

/// Builds a [`Graph`] op by op, allocating values as it goes.
#[derive(Clone, Debug, Default)]
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a weight tensor the graph will read.
    pub fn weight(&mut self, name: impl Into<String>, shape: &[usize]) -> W {
        self.graph.weights.push(WeightSpec { name: name.into(), shape: shape.to_vec() });
        W(u32::try_from(self.graph.weights.len() - 1).expect("fewer than 2^32 weights"))
    }

    /// Declares a new value of the given shape.
    pub fn val(&mut self, shape: Shape) -> Val {
        self.graph.vals.push(shape);
        Val(u32::try_from(self.graph.vals.len() - 1).expect("fewer than 2^32 values"))
    }

    /// The shape of a value declared so far.
    pub fn shape(&self, v: Val) -> Shape {
        self.graph.vals[v.idx()]
    }

    /// Appends an op whose `out` was declared with [`GraphBuilder::val`]; returns `out`.
    pub fn push(&mut self, op: Op) -> Val {
        let out = op.out();
        self.graph.ops.push(op);
        out
    }

    /// Declares `out` with `shape` and appends the op `make(out)`.
    pub fn op(&mut self, shape: Shape, make: impl FnOnce(Val) -> Op) -> Val {
        let out = self.val(shape);
        self.push(make(out))
    }

    /// Names a value as a graph output.
    pub fn output(&mut self, name: impl Into<String>, val: Val) {
        self.graph.outputs.push(Output { name: name.into(), val });
    }

    /// The graph, validated.
    pub fn finish(self) -> Result<Graph> {
        self.graph.validate()?;
        Ok(self.graph)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-layer post-norm encoder block with a pooled, normalised output.
    fn block() -> Graph {
        let mut g = GraphBuilder::new();
        let (d, heads) = (8, 2);
        let emb = g.weight("emb", &[20, d]);
        let pos = g.weight("pos", &[16, d]);
        let ln_g = g.weight("ln.g", &[d]);
        let ln_b = g.weight("ln.b", &[d]);
        let wq = g.weight("q", &[d, d]);
        let wo = g.weight("o", &[d, d]);
        let t = Shape::tokens(d);
        let e = g.op(t, |out| Op::Embed { table: emb, out });
        let p = g.op(t, |out| Op::PosEmbed { table: pos, offset: 2, out });
        let x = g.op(t, |out| Op::Add { a: e, b: p, out });
        let x = g.op(t, |out| Op::LayerNorm { x, gamma: ln_g, beta: Some(ln_b), eps: 1e-12, out });
        let q = g.op(t, |out| Op::Linear {
            x,
            weight: wq,
            bias: None,
            act: Act::Identity,
            residual: None,
            out,
        });
        let q = g.op(t, |out| Op::Rope { x: q, heads, head_dim: 4, theta: 1e4, out });
        let a = g.op(t, |out| Op::Attention {
            q,
            k: q,
            v: x,
            heads,
            head_dim: 4,
            scale: 0.5,
            window: Some(3),
            out,
        });
        let y = g.op(t, |out| Op::Linear {
            x: a,
            weight: wo,
            bias: None,
            act: Act::Gelu,
            residual: Some(x),
            out,
        });
        let s = g.op(Shape::seqs(d), |out| Op::Pool { x: y, mode: PoolMode::Mean, out });
        let s = g.op(Shape::seqs(d), |out| Op::L2Norm { x: s, eps: 1e-12, out });
        g.output("embedding", s);
        g.finish().unwrap()
    }

    fn invalid(g: &Graph) -> String {
        match g.validate() {
            Err(Error::Graph(m)) => m,
            other => panic!("expected an invalid graph, got {other:?}"),
        }
    }

    #[test]
    fn a_well_formed_graph_validates_and_reports_limits() {
        let g = block();
        g.validate().unwrap();
        assert_eq!(g.limits(), Limits { vocab: 20, types: 1, max_len: 14 });
        assert_eq!(g.output("embedding"), Some(Val(9)));
        assert_eq!(g.output("nope"), None);
    }

    #[test]
    fn graphs_round_trip_through_serde() {
        let g = block();
        let json = serde_json::to_string(&g).unwrap();
        let back: Graph = serde_json::from_str(&json).unwrap();
        assert_eq!(back, g);
    }

    #[test]
    fn validate_names_the_op_and_what_it_expected() {
        let base = block();
        let mut cases: Vec<(Graph, &str)> = Vec::new();

        let mut g = base.clone();
        g.weights[5].shape = vec![8, 7]; // `o` feeds op 7
        cases.push((g, "op 7 (Linear): weight 5 `o` has shape [8, 7], expected [8, 8]"));

        let mut g = base.clone();
        g.weights[2].shape = vec![9]; // LayerNorm gamma
        cases.push((g, "op 3 (LayerNorm): weight 2 `ln.g` has shape [9], expected [8]"));

        let mut g = base.clone();
        g.vals[1].width = 6; // PosEmbed output
        cases
            .push((g, "op 1 (PosEmbed): weight 1 `pos` has shape [16, 8], expected [rows > 2, 6]"));

        let mut g = base.clone();
        g.ops[2] = Op::Add { a: Val(0), b: Val(9), out: Val(2) };
        cases.push((g, "op 2 (Add): reads value 9 before any op defines it"));

        let mut g = base.clone();
        g.ops[4] = Op::Linear {
            x: Val(3),
            weight: W(42),
            bias: None,
            act: Act::Identity,
            residual: None,
            out: Val(4),
        };
        cases.push((g, "op 4 (Linear): uses weight 42 of 6"));

        let mut g = base.clone();
        g.ops[5] = Op::Rope { x: Val(4), heads: 3, head_dim: 4, theta: 1e4, out: Val(5) };
        cases.push((g, "op 5 (Rope): 3 heads of 4 columns do not make width 8"));

        let mut g = base.clone();
        g.ops[5] = Op::Rope { x: Val(4), heads: 8, head_dim: 1, theta: 1e4, out: Val(5) };
        cases.push((g, "op 5 (Rope): head_dim 1 must be even"));

        let mut g = base.clone();
        g.ops[3] = Op::LayerNorm { x: Val(2), gamma: W(2), beta: None, eps: 0.0, out: Val(3) };
        cases.push((g, "op 3 (LayerNorm): eps must be positive"));

        let mut g = base.clone();
        g.vals[8].rows = Rows::Tokens; // Pool output
        cases.push((g, "op 8 (Pool): value 8 is [tokens x 8], expected seqs rows"));

        let mut g = base.clone();
        g.ops[1] = Op::PosEmbed { table: W(1), offset: 0, out: Val(0) };
        cases.push((g, "op 1 (PosEmbed): writes value 0, which an earlier op defined"));

        let mut g = base.clone();
        g.ops.pop();
        cases.push((g, "value 9 is never defined by any op"));

        let mut g = base.clone();
        g.outputs.clear();
        cases.push((g, "the graph has no outputs"));

        let mut g = base.clone();
        g.outputs.push(Output { name: "embedding".into(), val: Val(8) });
        cases.push((g, "output name `embedding` appears twice"));

        let mut g = base.clone();
        g.ops[6] = Op::Attention {
            q: Val(5),
            k: Val(5),
            v: Val(8),
            heads: 2,
            head_dim: 4,
            scale: 1.0,
            window: None,
            out: Val(6),
        };
        cases.push((g, "op 6 (Attention): reads value 8 before any op defines it"));

        for (g, want) in cases {
            let msg = invalid(&g);
            assert!(msg.contains(want), "expected `{want}` in `{msg}`");
        }
    }

    #[test]
    fn shape_checks_cover_every_row_changing_op() {
        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[4, 6]);
        let x = g.op(Shape::tokens(6), |out| Op::Embed { table: emb, out });
        g.op(Shape::tokens(4), |out| Op::Glu { x, act: Act::Silu, out });
        g.output("y", Val(1));
        assert!(g.clone().finish().unwrap_err().to_string().contains("twice the output width 4"));

        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[4, 6]);
        let x = g.op(Shape::tokens(6), |out| Op::Embed { table: emb, out });
        let y = g.op(Shape::tokens(4), |out| Op::Slice { x, start: 3, out });
        g.output("y", y);
        assert!(
            g.finish()
                .unwrap_err()
                .to_string()
                .contains("columns 3..3+4 exceed the input's width 6")
        );

        let mut g = GraphBuilder::new();
        let emb = g.weight("emb", &[4, 6]);
        let x = g.op(Shape::tokens(6), |out| Op::Embed { table: emb, out });
        let y = g.op(Shape::markers(5), |out| Op::Gather { x, out });
        g.output("y", y);
        assert!(g.finish().unwrap_err().to_string().contains("widths must match"));
    }

    #[test]
    fn check_weights_compares_count_and_shapes() {
        let g = block();
        let bytes: Vec<Vec<u8>> =
            g.weights.iter().map(|w| vec![0; w.shape.iter().product::<usize>() * 4]).collect();
        let ts: Vec<crate::HostTensor<'_>> = g
            .weights
            .iter()
            .zip(&bytes)
            .map(|(w, b)| crate::HostTensor { dtype: crate::DType::F32, shape: &w.shape, bytes: b })
            .collect();
        g.check_weights(&ts).unwrap();
        let e = g.check_weights(&ts[..3]).unwrap_err();
        assert!(e.to_string().contains("expects 6 weight tensors, got 3"), "{e}");
        let mut bad = ts.clone();
        bad[0] = crate::HostTensor { dtype: crate::DType::F32, shape: &[8, 8], bytes: &bytes[4] };
        let e = g.check_weights(&bad).unwrap_err();
        assert!(e.to_string().contains("weight 0 `emb` has shape [8, 8], expected [20, 8]"), "{e}");
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
