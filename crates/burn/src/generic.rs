//! The generic lowering: every op in terms of Burn's backend API, for any Burn backend.
//!
//! Each function computes one op on `[rows, width]` float tensors and follows the numerics
//! documented on [`switchyard_core::Op`]. Backends replace single ops through
//! [`crate::Kernels`] and may call these for the cases they do not handle.

use std::sync::{Arc, Mutex};

use burn_backend::ops::AttentionModuleOptions;
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use burn_backend::{Backend as BurnBackend, Distribution, Shape, Slice, TensorMetadata};
use burn_std::IndexingUpdateOp;
use switchyard_core::{Act, Disentangled, Op, PoolMode, PositionBias, Reach, RelativeBias};

use crate::{Bound, Inputs, RunCx};

/// `[rows, width]` of a 2-D tensor.
pub fn dims<B: BurnBackend>(t: &FloatTensor<B>) -> [usize; 2] {
    t.shape().dims()
}

/// Columns `start .. end` of a 2-D tensor.
pub fn cols<B: BurnBackend>(t: FloatTensor<B>, start: usize, end: usize) -> FloatTensor<B> {
    B::float_slice(t, &[Slice::from(..), range(start, end)])
}

/// Rows `start .. end` of a 2-D tensor.
pub fn rows<B: BurnBackend>(t: FloatTensor<B>, start: usize, end: usize) -> FloatTensor<B> {
    B::float_slice(t, &[range(start, end), Slice::from(..)])
}

fn range(start: usize, end: usize) -> Slice {
    Slice::new(start as isize, Some(end as isize), 1)
}

fn reshape<B: BurnBackend>(t: FloatTensor<B>, shape: &[usize]) -> FloatTensor<B> {
    B::float_reshape(t, Shape::from(shape.to_vec()))
}

/// Exact GELU, `0.5 x (1 + erf(x / sqrt 2))`. Under autodiff it is spelled out in `erf`, whose
/// derivative is exact on every backend: Burn's default `gelu_backward` (ndarray's, CubeCL's) is
/// the derivative of the tanh approximation, off by up to about 1% of the gradient.
pub fn gelu<B: BurnBackend>(x: FloatTensor<B>) -> FloatTensor<B> {
    if !B::ad_enabled(&x.device()) {
        return B::gelu(x);
    }
    let e = B::float_erf(B::float_div_scalar(x.clone(), std::f64::consts::SQRT_2.into()));
    B::float_mul_scalar(B::float_mul(x, B::float_add_scalar(e, 1.0f64.into())), 0.5f64.into())
}

/// Applies an activation element-wise.
pub fn activation<B: BurnBackend>(x: FloatTensor<B>, act: Act) -> FloatTensor<B> {
    match act {
        Act::Identity => x,
        Act::Gelu => gelu::<B>(x),
        Act::GeluTanh => {
            // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let x3 = B::float_mul(B::float_mul(x.clone(), x.clone()), x.clone());
            let inner = B::float_add(x.clone(), B::float_mul_scalar(x3, 0.044_715f64.into()));
            let t = B::float_tanh(B::float_mul_scalar(inner, c.into()));
            let half = B::float_mul_scalar(B::float_add_scalar(t, 1.0f64.into()), 0.5f64.into());
            B::float_mul(x, half)
        }
        Act::Relu => B::relu(x),
        Act::Silu => B::float_mul(x.clone(), B::sigmoid(x)),
        Act::Tanh => B::float_tanh(x),
        Act::Sigmoid => B::sigmoid(x),
        Act::Log1pRelu => B::float_log(B::float_add_scalar(B::relu(x), 1.0f64.into())),
    }
}

/// `act(x . wt + bias) + residual`, with `wt` stored `[in, out]` and `bias` `[1, out]`.
pub fn linear<B: BurnBackend>(
    x: FloatTensor<B>,
    wt: &FloatTensor<B>,
    bias: Option<&FloatTensor<B>>,
    act: Act,
    residual: Option<FloatTensor<B>>,
) -> FloatTensor<B> {
    let mut y = B::float_matmul(x, wt.clone());
    if let Some(b) = bias {
        y = B::float_add(y, b.clone());
    }
    y = activation::<B>(y, act);
    match residual {
        Some(r) => B::float_add(y, r),
        None => y,
    }
}

/// What `true` means in the boolean mask a Burn backend's `attention` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskMeaning {
    /// `true` keeps a key out of the softmax: Burn's documented convention.
    TrueExcludes,
    /// `true` lets a key in: PyTorch's, which burn-tch 0.22.1 passes through unconverted.
    TrueIncludes,
}

/// An attention op's position bias with its tables on the device.
#[derive(Clone, Copy)]
pub enum BoundBias<'a, B: BurnBackend> {
    /// A relative position bias with its `[buckets, heads]` table.
    Relative(RelativeBias, &'a FloatTensor<B>),
    /// Disentangled attention with its `[2 span, heads * head_dim]` tables (keys', queries').
    Disentangled(Disentangled, Option<&'a FloatTensor<B>>, Option<&'a FloatTensor<B>>),
}

/// An attention op's position bias, if it has one, with its tables on the device.
pub type PositionTables<'a, B> = Option<BoundBias<'a, B>>;

/// Self-attention of each sequence on its own, with no padding: one Burn attention call per
/// sequence, on `[1, heads, len, head_dim]` views of its rows (each of `kv_heads` key-value
/// heads repeated for the query heads that share it).
#[allow(clippy::too_many_arguments)]
pub fn attention<B: BurnBackend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f32,
    reach: Reach,
    bias: PositionTables<'_, B>,
    cx: &RunCx<'_, B>,
) -> FloatTensor<B> {
    let meaning = MaskMeaning::TrueExcludes;
    attention_masked::<B>(q, k, v, heads, kv_heads, head_dim, scale, reach, bias, meaning, cx)
}

/// [`attention`] on a backend whose `attention` reads its sliding-window mask as `meaning` says.
#[allow(clippy::too_many_arguments)]
pub fn attention_masked<B: BurnBackend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f32,
    reach: Reach,
    bias: PositionTables<'_, B>,
    meaning: MaskMeaning,
    cx: &RunCx<'_, B>,
) -> FloatTensor<B> {
    let options = AttentionModuleOptions { scale: Some(f64::from(scale)), ..Default::default() };
    let shape = Heads { heads, kv_heads, head_dim, reach, bias, scale, meaning };
    per_sequence::<B>(&q, &k, &v, shape, cx, |q, k, v, mask, bias| {
        B::attention(q, k, v, mask, bias, options)
    })
}

/// [`attention`] with dropout `p` on the attention probabilities, as training runs it: scores,
/// the position bias, the window's mask, softmax, dropout, then the values, in Burn's primitive
/// ops.
#[allow(clippy::too_many_arguments)]
pub fn attention_dropped<B: BurnBackend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    scale: f32,
    reach: Reach,
    bias: PositionTables<'_, B>,
    p: f32,
    cx: &RunCx<'_, B>,
) -> FloatTensor<B> {
    let meaning = MaskMeaning::TrueExcludes;
    let shape = Heads { heads, kv_heads, head_dim, reach, bias, scale, meaning };
    per_sequence::<B>(&q, &k, &v, shape, cx, |q, k, v, mask, bias| {
        let scores =
            B::float_mul_scalar(B::float_matmul(q, B::float_transpose(k)), f64::from(scale).into());
        let scores = match bias {
            Some(b) => B::float_add(scores, b),
            None => scores,
        };
        let scores = match mask {
            Some(m) => B::float_mask_fill(scores, m, f32::NEG_INFINITY.into()),
            None => scores,
        };
        let probs = dropout::<B>(B::softmax(scores, 3), p, cx.device);
        B::float_matmul(probs, v)
    })
}

/// An attention op's position bias with the tables `lower` bound for it.
pub fn position_bias_of<B: BurnBackend>(
    bias: Option<PositionBias>,
    w: &Bound<B>,
) -> PositionTables<'_, B> {
    match (bias, w) {
        (Some(PositionBias::Relative(b)), Bound::Table(table)) => {
            Some(BoundBias::Relative(b, table))
        }
        (Some(PositionBias::Disentangled(d)), Bound::Disentangled { keys, queries }) => {
            Some(BoundBias::Disentangled(d, keys.as_ref(), queries.as_ref()))
        }
        (None, _) => None,
        (Some(_), _) => unreachable!("lower binds a position bias's tables"),
    }
}

/// What [`per_sequence`] needs of an attention op besides its inputs.
struct Heads<'a, B: BurnBackend> {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    reach: Reach,
    bias: PositionTables<'a, B>,
    /// Multiplies the scores (the disentangled terms' too).
    scale: f32,
    meaning: MaskMeaning,
}

/// Runs `attend` on each sequence's `[1, heads, len, head_dim]` views of `q`, `k` and `v`, with
/// the sliding window's `[1, heads, len, len]` mask (`true` meaning what `meaning` says) where the
/// window is shorter than the sequence, and the position bias's `[1, heads, len, len]` scores
/// where the op has one; and joins the results back into token rows. Where `q` has one row per
/// sequence (its first token's query), its views are `[1, heads, 1, head_dim]`, the mask and
/// bias `[1, heads, 1, len]`, and the result is one row per sequence.
fn per_sequence<B: BurnBackend>(
    q: &FloatTensor<B>,
    k: &FloatTensor<B>,
    v: &FloatTensor<B>,
    h: Heads<'_, B>,
    cx: &RunCx<'_, B>,
    attend: impl Fn(
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        Option<BoolTensor<B>>,
        Option<FloatTensor<B>>,
    ) -> FloatTensor<B>,
) -> FloatTensor<B> {
    let Heads { heads, kv_heads, head_dim, reach, bias, scale, meaning } = h;
    let outside = meaning == MaskMeaning::TrueExcludes;
    let b = cx.batch();
    let w = heads * head_dim;
    // Fewer query rows than keys: one per sequence. (Equal counts with a query per sequence
    // mean one token per sequence, where both readings agree.)
    let per_seq = dims::<B>(q)[0] != dims::<B>(k)[0];
    // Rows `first..first + l` of `t` as `[1, n, l, head_dim]` for its `n` heads, each repeated
    // for the query heads of its group (`[1, n, group, l, head_dim]` as `[1, heads, l,
    // head_dim]`): the queries as they are, keys and values on shared heads repeated.
    let split = |t: &FloatTensor<B>, first: usize, l: usize, n: usize| {
        let r = rows::<B>(t.clone(), first, first + l);
        let r = B::float_swap_dims(reshape::<B>(r, &[1, l, n, head_dim]), 1, 2);
        if n == heads {
            return r;
        }
        let r = B::float_repeat_dim(reshape::<B>(r, &[1, n, 1, l, head_dim]), 2, heads / n);
        reshape::<B>(r, &[1, heads, l, head_dim])
    };
    let biases = match bias {
        Some(BoundBias::Relative(rb, table)) => longest_biases::<B>(rb, table, heads, cx),
        _ => None,
    };
    let disentangled = match bias {
        Some(BoundBias::Disentangled(d, keys, queries)) => {
            longest_disentangled::<B>(d, [keys, queries], heads, head_dim, cx)
        }
        _ => None,
    };
    let mut outs = Vec::with_capacity(b.seqs());
    for s in 0..b.seqs() {
        let (start, l) = (b.cu[s] as usize, b.seq(s).len());
        // The queries' rows and count: the sequence's tokens, or its one row.
        let (q0, lq) = if per_seq { (s, 1) } else { (start, l) };
        // Query row i sits at position i (the one query of a sequence at 0).
        let partial = (0..lq).any(|i| reach.keys(i, l) != (0, l));
        let mask = partial.then(|| {
            let hidden = |i, j| {
                let (lo, hi) = reach.keys(i, l);
                !(lo..hi).contains(&j)
            };
            let m: Vec<bool> = (0..lq * l).map(|ij| hidden(ij / l, ij % l) == outside).collect();
            let m = crate::convert::bools::<B>(&m, &[1, 1, lq, l], cx.device);
            B::bool_expand(m, Shape::from(vec![1, heads, lq, l]))
        });
        let bias = biases.as_ref().map(|all| {
            let corner = B::float_slice(all.clone(), &[Slice::from(..), range(0, lq), range(0, l)]);
            reshape::<B>(corner, &[1, heads, lq, l])
        });
        let (qs, ks) = (split(q, q0, lq, heads), split(k, start, l, kv_heads));
        let bias = match &disentangled {
            Some(d) => Some(d.scores(&qs, &ks, [lq, l], heads, scale)),
            None => bias,
        };
        let o = attend(qs, ks, split(v, start, l, kv_heads), mask, bias);
        outs.push(reshape::<B>(B::float_swap_dims(o, 1, 2), &[lq, w]));
    }
    if outs.len() == 1 { outs.pop().expect("one sequence") } else { B::float_cat(outs, 0) }
}

/// The biases of the batch's longest sequence, `[heads, queries, keys]`, made once a run for
/// each bias: every layer of a model shares one table. A sequence's are their corner, as
/// positions count from each sequence's start; a query per sequence (its first token's) reads
/// the corner's first row. `None` for an empty batch.
fn longest_biases<B: BurnBackend>(
    rb: RelativeBias,
    table: &FloatTensor<B>,
    heads: usize,
    cx: &RunCx<'_, B>,
) -> Option<FloatTensor<B>> {
    type Made<B> = Arc<Mutex<Vec<(RelativeBias, FloatTensor<B>)>>>;
    let b = cx.batch();
    let longest = (0..b.seqs()).map(|s| b.seq(s).len()).max().filter(|&l| l > 0)?;
    let made = cx.memo("generic attention: position biases", Made::<B>::default);
    let mut made = made.lock().expect("not poisoned");
    if let Some((_, t)) = made.iter().find(|(key, _)| *key == rb) {
        return Some(t.clone());
    }
    let by_distance = rb.buckets_by_distance(longest);
    let idx = (0..longest * longest)
        .map(|ij| by_distance[ij % longest + longest - 1 - ij / longest] as i64)
        .collect();
    let idx = crate::convert::ints::<B>(idx, cx.device);
    let picked = reshape::<B>(B::float_select(table.clone(), 0, idx), &[longest, longest, heads]);
    let t = B::float_permute(picked, &[2, 0, 1]);
    made.push((rb, t.clone()));
    Some(t)
}

/// Disentangled attention's tables for the batch's longest sequence (`len` tokens): each
/// table's rows by relative position, `[1, heads, head_dim, 2 len - 1]` (that of a key `r`
/// positions after its query at `r + len - 1`), and the `[len, len]` indices that read them:
/// `j - i + len - 1` at `[i, j]` (content to position) and its transpose (position to content).
#[derive(Clone)]
struct LongestDisentangled<B: BurnBackend> {
    keys: Option<FloatTensor<B>>,
    queries: Option<FloatTensor<B>>,
    by_key: IntTensor<B>,
    by_query: IntTensor<B>,
}

impl<B: BurnBackend> LongestDisentangled<B> {
    /// One sequence's disentangled scores, `[1, heads, lq, l]`, times `scale`: `q` holds its
    /// `lq` queries (its first `lq` tokens'), `k` its `l` keys, as `[1, heads, rows, head_dim]`.
    fn scores(
        &self,
        q: &FloatTensor<B>,
        k: &FloatTensor<B>,
        [lq, l]: [usize; 2],
        heads: usize,
        scale: f32,
    ) -> FloatTensor<B> {
        let corner = |idx: &IntTensor<B>, rows: usize, cols: usize| {
            let c = B::int_slice(idx.clone(), &[range(0, rows), range(0, cols)]);
            let c = B::int_reshape(c, Shape::from(vec![1, 1, rows, cols]));
            B::int_expand(c, Shape::from(vec![1, heads, rows, cols]))
        };
        let mut terms = Vec::with_capacity(2);
        if let Some(keys) = &self.keys {
            // Each query against every row, then row `j - i + len - 1` for key `j`.
            let all = B::float_matmul(q.clone(), keys.clone());
            terms.push(B::float_gather(3, all, corner(&self.by_key, lq, l)));
        }
        if let Some(queries) = &self.queries {
            // Each key against every row, row `j - i + len - 1` for query `i`, then transposed.
            let all = B::float_matmul(k.clone(), queries.clone());
            let picked = B::float_gather(3, all, corner(&self.by_query, l, lq));
            terms.push(B::float_swap_dims(picked, 2, 3));
        }
        let sum = terms.into_iter().reduce(B::float_add).expect("validate: at least one term");
        B::float_mul_scalar(sum, f64::from(scale).into())
    }
}

/// [`LongestDisentangled`] for `d` and its `[keys, queries]` tables, made once a run for each
/// op; `None` for an empty batch.
fn longest_disentangled<B: BurnBackend>(
    d: Disentangled,
    tables: [Option<&FloatTensor<B>>; 2],
    heads: usize,
    head_dim: usize,
    cx: &RunCx<'_, B>,
) -> Option<LongestDisentangled<B>> {
    type Made<B> = Arc<Mutex<Vec<(Disentangled, LongestDisentangled<B>)>>>;
    let b = cx.batch();
    let len = (0..b.seqs()).map(|s| b.seq(s).len()).max().filter(|&l| l > 0)?;
    let made = cx.memo("generic attention: disentangled tables", Made::<B>::default);
    let mut made = made.lock().expect("not poisoned");
    if let Some((_, t)) = made.iter().find(|(key, _)| *key == d) {
        return Some(t.clone());
    }
    let rows = d.rows_by_distance(len).into_iter().map(|r| r as i64).collect();
    let rows = crate::convert::ints::<B>(rows, cx.device);
    let by_distance = |table: &FloatTensor<B>| {
        let picked = B::float_select(table.clone(), 0, rows.clone());
        let picked = reshape::<B>(picked, &[2 * len - 1, heads, head_dim]);
        reshape::<B>(B::float_permute(picked, &[1, 2, 0]), &[1, heads, head_dim, 2 * len - 1])
    };
    // At [a, b]: b - a + len - 1 (b's row after a's), or its transpose.
    let index = |transposed: bool| {
        let at = |a: usize, b: usize| (b + len - 1 - a) as i64;
        let idx = (0..len * len)
            .map(|ab| {
                let (a, b) = (ab / len, ab % len);
                if transposed { at(b, a) } else { at(a, b) }
            })
            .collect();
        B::int_reshape(crate::convert::ints::<B>(idx, cx.device), Shape::from(vec![len, len]))
    };
    let t = LongestDisentangled {
        keys: tables[0].map(by_distance),
        queries: tables[1].map(by_distance),
        by_key: index(false),
        by_query: index(true),
    };
    made.push((d, t.clone()));
    Some(t)
}

/// Zeroes each element with probability `p` and scales the others by `1 / (1 - p)`
/// (inverted dropout, as PyTorch's `nn.Dropout` in training), with the device's random numbers.
pub fn dropout<B: BurnBackend>(x: FloatTensor<B>, p: f32, device: &B::Device) -> FloatTensor<B> {
    let keep = 1.0 - f64::from(p);
    let mask = B::float_random(x.shape(), Distribution::Bernoulli(keep), device, x.dtype().into());
    B::float_mul_scalar(B::float_mul(x, mask), (1.0 / keep).into())
}

/// Rotary embedding with `cos` and `sin` tables of `[positions, head_dim / 2]`.
pub fn rope<B: BurnBackend>(
    x: FloatTensor<B>,
    heads: usize,
    head_dim: usize,
    cos: &FloatTensor<B>,
    sin: &FloatTensor<B>,
    cx: &RunCx<'_, B>,
) -> FloatTensor<B> {
    let [t, w] = dims::<B>(&x);
    let half = head_dim / 2;
    let pick = |table: &FloatTensor<B>| {
        reshape::<B>(B::float_select(table.clone(), 0, cx.positions()), &[t, 1, half])
    };
    let (c, s) = (pick(cos), pick(sin));
    let x = reshape::<B>(x, &[t, heads, head_dim]);
    let part = |a: usize, e: usize| {
        B::float_slice(x.clone(), &[Slice::from(..), Slice::from(..), range(a, e)])
    };
    let (x1, x2) = (part(0, half), part(half, head_dim));
    let o1 = B::float_sub(B::float_mul(x1.clone(), c.clone()), B::float_mul(x2.clone(), s.clone()));
    let o2 = B::float_add(B::float_mul(x2, c), B::float_mul(x1, s));
    reshape::<B>(B::float_cat(vec![o1, o2], 2), &[t, w])
}

/// Pools each sequence's token rows into one row.
pub fn pool<B: BurnBackend>(
    x: FloatTensor<B>,
    mode: PoolMode,
    cx: &RunCx<'_, B>,
) -> FloatTensor<B> {
    match mode {
        PoolMode::Cls => B::float_select(x, 0, cx.firsts()),
        PoolMode::Last => B::float_select(x, 0, cx.lasts()),
        PoolMode::Mean | PoolMode::Sum => {
            let b = cx.batch();
            let [_, w] = dims::<B>(&x);
            let zeros = B::float_zeros(Shape::from(vec![b.seqs(), w]), cx.device, x.dtype().into());
            let sums = B::float_select_assign(zeros, 0, cx.segments(), x, IndexingUpdateOp::Add);
            if mode == PoolMode::Sum {
                return sums;
            }
            let inv: Vec<f32> = (0..b.seqs()).map(|s| 1.0 / b.seq(s).len() as f32).collect();
            let inv = crate::convert::floats_as::<B>(inv, &[b.seqs(), 1], cx.device, sums.dtype());
            B::float_mul(sums, inv)
        }
        PoolMode::Max => {
            let b = cx.batch();
            let per_seq: Vec<FloatTensor<B>> = (0..b.seqs())
                .map(|s| B::float_max_dim(rows::<B>(x.clone(), b.seq(s).start, b.seq(s).end), 0))
                .collect();
            B::float_cat(per_seq, 0)
        }
    }
}

/// Row-wise `x / sqrt(mean(x^2) + eps) * gamma`, `gamma` stored `[1, width]`.
pub fn rms_norm<B: BurnBackend>(
    x: FloatTensor<B>,
    gamma: &FloatTensor<B>,
    eps: f32,
    unit_offset: bool,
) -> FloatTensor<B> {
    let ms = B::float_mean_dim(B::float_mul(x.clone(), x.clone()), 1);
    let inv = B::float_recip(B::float_sqrt(B::float_add_scalar(ms, f64::from(eps).into())));
    let scale = match unit_offset {
        true => B::float_add_scalar(gamma.clone(), 1.0.into()),
        false => gamma.clone(),
    };
    B::float_mul(B::float_mul(x, inv), scale)
}

/// Row-wise `x / max(||x||, eps)`.
pub fn l2_norm<B: BurnBackend>(x: FloatTensor<B>, eps: f32) -> FloatTensor<B> {
    let norm = B::float_sqrt(B::float_sum_dim(B::float_mul(x.clone(), x.clone()), 1));
    B::float_div(x, B::float_clamp_min(norm, f64::from(eps).into()))
}

/// Runs one op the generic way with the graph's dropout `p` at its output applied, as training
/// does ([`switchyard_core::Dropout`] says where): a linear layer's result is dropped before its
/// residual is added, attention's probabilities are dropped, and any other op's result.
pub fn run_op_dropped<B: BurnBackend>(
    op: &Op,
    ins: Inputs<B>,
    w: &Bound<B>,
    p: f32,
    cx: &RunCx<'_, B>,
) -> FloatTensor<B> {
    match (op, w) {
        (Op::Linear { act, residual: Some(_), .. }, Bound::Linear { wt, bias }) => {
            let [x, r, _] = ins;
            let y = linear::<B>(x.expect("a linear layer's input"), wt, bias.as_ref(), *act, None);
            let y = dropout::<B>(y, p, cx.device);
            B::float_add(y, r.expect("a linear layer's residual"))
        }
        (
            Op::Attention {
                heads, kv_heads, head_dim, scale, window, causal, position_bias, ..
            },
            _,
        ) => {
            let reach = Reach::of(*window, *causal);
            let [q, k, v] = ins.map(|t| t.expect("attention's query, key and value"));
            let bias = position_bias_of::<B>(*position_bias, w);
            let (hs, kvh, hd) = (*heads, *kv_heads, *head_dim);
            attention_dropped::<B>(q, k, v, hs, kvh, hd, *scale, reach, bias, p, cx)
        }
        _ => dropout::<B>(run_op::<B>(op, ins, w, cx), p, cx.device),
    }
}

/// Runs one op the generic way. `ins` holds the op's inputs in [`Op::inputs`] order; `w` the
/// weights bound at lower time.
pub fn run_op<B: BurnBackend>(
    op: &Op,
    ins: Inputs<B>,
    w: &Bound<B>,
    cx: &RunCx<'_, B>,
) -> FloatTensor<B> {
    let [a, b, c] = ins;
    let need = |t: Option<FloatTensor<B>>| t.expect("the plan passes every input an op reads");
    match (op, w) {
        (Op::Embed { scale, .. }, Bound::Table(t)) => {
            let rows = B::float_select(t.clone(), 0, cx.ids());
            match *scale {
                1.0 => rows,
                s => B::float_mul_scalar(rows, f64::from(s).into()),
            }
        }
        (Op::TypeEmbed { .. }, Bound::Table(t)) => B::float_select(t.clone(), 0, cx.types()),
        (Op::PosEmbed { offset, .. }, Bound::Table(t)) => {
            B::float_select(t.clone(), 0, cx.positions_from(*offset))
        }
        (Op::Add { .. }, _) => B::float_add(need(a), need(b)),
        (Op::Mul { .. }, _) => B::float_mul(need(a), need(b)),
        (Op::LayerNorm { eps, .. }, Bound::Norm { gamma, beta }) => {
            B::layer_norm(need(a), gamma.clone(), beta.clone(), f64::from(*eps))
        }
        (Op::RmsNorm { eps, group: None, unit_offset, .. }, Bound::Norm { gamma, .. }) => {
            rms_norm::<B>(need(a), gamma, *eps, *unit_offset)
        }
        (Op::RmsNorm { eps, group: Some(n), unit_offset, .. }, Bound::Norm { gamma, .. }) => {
            // Each group of a row as a row of its own.
            let x = need(a);
            let [t, w] = dims::<B>(&x);
            let y = rms_norm::<B>(reshape::<B>(x, &[t * w / n, *n]), gamma, *eps, *unit_offset);
            reshape::<B>(y, &[t, w])
        }
        (Op::Linear { act, .. }, Bound::Linear { wt, bias }) => {
            linear::<B>(need(a), wt, bias.as_ref(), *act, b)
        }
        (Op::Glu { act, gate, .. }, _) => {
            let x = need(a);
            let [_, w2] = dims::<B>(&x);
            let h = w2 / 2;
            let (g, v) = gate.starts(h);
            let gate = activation::<B>(cols::<B>(x.clone(), g, g + h), *act);
            B::float_mul(gate, cols::<B>(x, v, v + h))
        }
        (Op::Slice { start, out, .. }, _) => {
            cols::<B>(need(a), *start, start + cx.graph.shape(*out).width)
        }
        (Op::Rope { heads, head_dim, .. }, Bound::Rope { cos, sin }) => {
            rope::<B>(need(a), *heads, *head_dim, cos, sin, cx)
        }
        (
            Op::Attention {
                heads, kv_heads, head_dim, scale, window, causal, position_bias, ..
            },
            _,
        ) => {
            let reach = Reach::of(*window, *causal);
            let bias = position_bias_of::<B>(*position_bias, w);
            let (hs, kvh, hd) = (*heads, *kv_heads, *head_dim);
            attention::<B>(need(a), need(b), need(c), hs, kvh, hd, *scale, reach, bias, cx)
        }
        (Op::Activation { act, .. }, _) => activation::<B>(need(a), *act),
        (Op::Pool { mode, .. }, _) => pool::<B>(need(a), *mode, cx),
        (Op::Gather { .. }, _) => B::float_select(need(a), 0, cx.markers()),
        (Op::L2Norm { eps, .. }, _) => l2_norm::<B>(need(a), *eps),
        (op, _) => unreachable!("lower binds the weights {} needs", op.name()),
    }
}
