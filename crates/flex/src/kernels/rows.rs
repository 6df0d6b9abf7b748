//! The ops that read and write whole rows: lookups, sums, norms, activations, gated units,
//! column slices, rotary embedding, pooling and marker gathers. Each follows the numerics
//! documented on [`switchyard_core::Op`], sums in f32.
//!
//! Values are given as pointers into the plan's arena. An op that may run in place (its output
//! at its input's address, as the arena layout allows) copies its input row to the output row
//! when they differ, then transforms the output row in place, so it never reads through one
//! reference what it writes through another. Large ops are split into chunks of rows run in
//! parallel on the current rayon pool.

use std::ops::Range;

use rayon::prelude::*;
use switchyard_core::{Act, Batch, Gate, PoolMode};

use super::math::{self, MulAdd};
use super::scratch::SendPtr;
use super::{Isa, multiversion};

/// Values below which an op runs on the calling thread: splitting costs more than it saves.
const PARALLEL_MIN: usize = 1 << 15;

/// The sum of `xs` in f32, eight lanes at a time so that it vectorises.
#[inline(always)]
pub(crate) fn sum(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder().iter().sum::<f32>();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    acc.iter().sum::<f32>() + rest
}

/// The sum of `(x - mean)^2` over `xs`, as [`sum`] does it.
#[inline(always)]
fn sum_sq_dev<M: MulAdd>(xs: &[f32], mean: f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder().iter().map(|v| (v - mean) * (v - mean)).sum::<f32>();
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a = M::mul_add(x - mean, x - mean, *a);
        }
    }
    acc.iter().sum::<f32>() + rest
}

/// Runs `f` over `0..rows` in chunks, in parallel when `rows * width` is large.
fn par_rows(rows: usize, width: usize, f: impl Fn(Range<usize>) + Sync + Send) {
    if rows * width < PARALLEL_MIN || rows < 2 {
        f(0..rows);
        return;
    }
    let chunks = (4 * rayon::current_num_threads()).min(rows);
    let per = rows.div_ceil(chunks);
    (0..rows.div_ceil(per)).into_par_iter().for_each(|c| f(c * per..((c + 1) * per).min(rows)));
}

/// Row `r` of a `width`-wide matrix at `p`.
///
/// # Safety
/// `p` holds at least `r + 1` rows of `width` readable values.
unsafe fn row<'a>(p: *const f32, r: usize, width: usize) -> &'a [f32] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p.add(r * width), width) }
}

/// Row `r` of a `width`-wide matrix at `p`, writable.
///
/// # Safety
/// `p` holds at least `r + 1` rows of `width` writable values, no other reference to which
/// lives meanwhile.
unsafe fn row_mut<'a>(p: *mut f32, r: usize, width: usize) -> &'a mut [f32] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p.add(r * width), width) }
}

/// Row `r` of `out`, holding row `r` of `x` (copied unless `x` is `out`), to transform in place.
///
/// # Safety
/// `x` and `out` hold at least `r + 1` rows of `width` values, readable and writable, either at
/// the same address or not overlapping; no other reference to row `r` of `out` lives meanwhile.
#[inline(always)]
unsafe fn in_place<'a>(out: SendPtr, x: SendPtr, r: usize, width: usize) -> &'a mut [f32] {
    // SAFETY: the caller's contract; the copy reads `x` only when it is not `out`.
    unsafe {
        let o = row_mut(out.get(), r, width);
        if x.get() != out.get() {
            o.copy_from_slice(row(x.get(), r, width));
        }
        o
    }
}

/// `out[r] = scale * table[index(r)]` for `rows` rows of `width`.
///
/// # Safety
/// `out` holds `rows x width` writable values not overlapping `table`; `index(r)` is a row of
/// `table` for every `r`.
pub unsafe fn lookup(
    out: *mut f32,
    table: &[f32],
    rows: usize,
    width: usize,
    scale: f32,
    index: impl Fn(usize) -> usize + Sync + Send,
) {
    let out = SendPtr(out);
    par_rows(rows, width, |range| {
        for r in range {
            let i = index(r);
            let from = &table[i * width..(i + 1) * width];
            // SAFETY: row r of out, only this chunk's.
            let to = unsafe { row_mut(out.get(), r, width) };
            if scale == 1.0 {
                to.copy_from_slice(from);
            } else {
                for (t, f) in to.iter_mut().zip(from) {
                    *t = scale * f;
                }
            }
        }
    });
}

/// How [`combine`] joins two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// `a + b`.
    Add,
    /// `a * b`.
    Mul,
}

/// `out = a + b` or `a * b`, as `how` says, `len` values; `out` may be `a` or `b`.
///
/// # Safety
/// Each holds `len` values (readable, `out` writable); `out` is `a`, `b`, or overlaps neither.
pub unsafe fn combine(
    isa: Isa,
    how: Combine,
    out: *mut f32,
    a: *const f32,
    b: *const f32,
    len: usize,
) {
    // `out` starts as whichever input it is not the other of, then takes in the other (both
    // ways of joining commute).
    let (first, other) = if b == out.cast_const() { (b, a) } else { (a, b) };
    let (o, f, other) = (SendPtr(out), SendPtr(first.cast_mut()), SendPtr(other.cast_mut()));
    par_rows(len.div_ceil(1024), 1024, |range| {
        let (s, e) = (range.start * 1024, (range.end * 1024).min(len));
        // SAFETY: values s..e of each, only this chunk's.
        unsafe { combine_range(isa, how, o, f, other, s, e) }
    });
}

multiversion! {
    /// Values `s..e` of `combine`.
    ///
    /// # Safety
    /// As [`combine`]'s, for those values.
    unsafe fn combine_range(
        how: Combine,
        out: SendPtr,
        first: SendPtr,
        other: SendPtr,
        s: usize,
        e: usize,
    ) {
        // SAFETY: the caller's contract, for values s..e only; `other` is read through `dst`
        // when it is `out`.
        unsafe {
            let at = |p: SendPtr| SendPtr(p.get().add(s));
            let dst = in_place(at(out), at(first), 0, e - s);
            let join = |x: &mut f32, y: f32| match how {
                Combine::Add => *x += y,
                Combine::Mul => *x *= y,
            };
            if other.get() == out.get() {
                dst.iter_mut().for_each(|x| join(x, *x));
            } else {
                let src = std::slice::from_raw_parts(other.get().add(s), e - s);
                dst.iter_mut().zip(src).for_each(|(x, y)| join(x, *y));
            }
        }
    }
}

/// Layer normalisation of each row, biased variance, `beta` absent meaning zero.
///
/// # Safety
/// `x` holds `rows x width` readable values and `out` as many writable ones, at the same
/// address or not overlapping; `gamma` (and `beta`) have `width` values.
#[allow(clippy::too_many_arguments)]
pub unsafe fn layer_norm(
    isa: Isa,
    out: *mut f32,
    x: *const f32,
    rows: usize,
    width: usize,
    gamma: &[f32],
    beta: Option<&[f32]>,
    eps: f32,
) {
    let (o, x) = (SendPtr(out), SendPtr(x.cast_mut()));
    par_rows(rows, width, |range| {
        // SAFETY: these rows, only this chunk's.
        unsafe { layer_norm_rows(isa, o, x, range, width, gamma, beta, eps) }
    });
}

multiversion! {
    /// Rows `range` of [`layer_norm`].
    ///
    /// # Safety
    /// As [`layer_norm`]'s, for those rows.
    unsafe fn layer_norm_rows<M>(
        out: SendPtr,
        x: SendPtr,
        range: Range<usize>,
        width: usize,
        gamma: &[f32],
        beta: Option<&[f32]>,
        eps: f32,
    ) {
        let n = width as f32;
        for r in range {
            // SAFETY: row r, only this chunk's.
            let v = unsafe { in_place(out, x, r, width) };
            let mean = sum(v) / n;
            let inv = 1.0 / (sum_sq_dev::<M>(v, mean) / n + eps).sqrt();
            match beta {
                Some(b) => {
                    for ((v, g), b) in v.iter_mut().zip(gamma).zip(b) {
                        *v = M::mul_add((*v - mean) * inv, *g, *b);
                    }
                }
                None => v.iter_mut().zip(gamma).for_each(|(v, g)| *v = (*v - mean) * inv * g),
            }
        }
    }
}

/// RMS normalisation of each row, scaled by `gamma.0` plus `gamma.1` (0, or 1 for a scale stored
/// as its offset from one).
///
/// # Safety
/// As [`layer_norm`]'s.
pub unsafe fn rms_norm(
    isa: Isa,
    out: *mut f32,
    x: *const f32,
    rows: usize,
    width: usize,
    gamma: (&[f32], f32),
    eps: f32,
) {
    let (o, x) = (SendPtr(out), SendPtr(x.cast_mut()));
    par_rows(rows, width, |range| {
        // SAFETY: these rows, only this chunk's.
        unsafe { rms_norm_rows(isa, o, x, range, width, gamma, eps) }
    });
}

multiversion! {
    /// Rows `range` of [`rms_norm`].
    ///
    /// # Safety
    /// As [`layer_norm`]'s, for those rows.
    unsafe fn rms_norm_rows<M>(
        out: SendPtr,
        x: SendPtr,
        range: Range<usize>,
        width: usize,
        gamma: (&[f32], f32),
        eps: f32,
    ) {
        let (gamma, offset) = gamma;
        for r in range {
            // SAFETY: row r, only this chunk's.
            let v = unsafe { in_place(out, x, r, width) };
            let inv = 1.0 / (sum_sq_dev::<M>(v, 0.0) / width as f32 + eps).sqrt();
            v.iter_mut().zip(gamma).for_each(|(v, g)| *v = *v * inv * (g + offset));
        }
    }
}

/// L2 normalisation of each row: `x / max(||x||, eps)`.
///
/// # Safety
/// As [`layer_norm`]'s.
pub unsafe fn l2_norm(isa: Isa, out: *mut f32, x: *const f32, rows: usize, width: usize, eps: f32) {
    let (o, x) = (SendPtr(out), SendPtr(x.cast_mut()));
    par_rows(rows, width, |range| {
        // SAFETY: these rows, only this chunk's.
        unsafe { l2_norm_rows(isa, o, x, range, width, eps) }
    });
}

multiversion! {
    /// Rows `range` of [`l2_norm`].
    ///
    /// # Safety
    /// As [`layer_norm`]'s, for those rows.
    unsafe fn l2_norm_rows<M>(out: SendPtr, x: SendPtr, range: Range<usize>, width: usize, eps: f32) {
        for r in range {
            // SAFETY: row r, only this chunk's.
            let v = unsafe { in_place(out, x, r, width) };
            let norm = sum_sq_dev::<M>(v, 0.0).sqrt().max(eps);
            v.iter_mut().for_each(|v| *v /= norm);
        }
    }
}

/// `out = act(x)`, element-wise, `rows x width` values.
///
/// # Safety
/// As [`layer_norm`]'s.
pub unsafe fn activation(
    isa: Isa,
    out: *mut f32,
    x: *const f32,
    rows: usize,
    width: usize,
    act: Act,
) {
    let (o, x) = (SendPtr(out), SendPtr(x.cast_mut()));
    par_rows(rows, width, |range| {
        // SAFETY: these rows, only this chunk's.
        unsafe { activation_rows(isa, o, x, range, width, act) }
    });
}

multiversion! {
    /// Rows `range` of [`activation`].
    ///
    /// # Safety
    /// As [`layer_norm`]'s, for those rows.
    unsafe fn activation_rows<M>(out: SendPtr, x: SendPtr, range: Range<usize>, width: usize, act: Act) {
        for r in range {
            // SAFETY: row r, only this chunk's.
            math::act_in_place::<M>(act, unsafe { in_place(out, x, r, width) });
        }
    }
}

/// Gated unit: with each row of `x` split into halves `[a | b]` of `h`, `out = act(a) * b`, or
/// `a * act(b)` where `gate` is the second half.
///
/// # Safety
/// `x` holds `rows x 2h` readable values, `out` `rows x h` writable ones overlapping no input.
pub unsafe fn glu(
    isa: Isa,
    out: *mut f32,
    x: *const f32,
    rows: usize,
    h: usize,
    act: Act,
    gate: Gate,
) {
    let (o, x) = (SendPtr(out), SendPtr(x.cast_mut()));
    par_rows(rows, 2 * h, |range| {
        // SAFETY: these rows, only this chunk's.
        unsafe { glu_rows(isa, o, x, range, h, act, gate.starts(h)) }
    });
}

multiversion! {
    /// Rows `range` of [`glu`].
    ///
    /// # Safety
    /// As [`glu`]'s, for those rows.
    unsafe fn glu_rows<M>(
        out: SendPtr,
        x: SendPtr,
        range: Range<usize>,
        h: usize,
        act: Act,
        starts: (usize, usize),
    ) {
        let (gate, value) = starts;
        for r in range {
            // SAFETY: row r of each; out overlaps no input.
            let (o, xr) = unsafe { (row_mut(out.get(), r, h), row(x.get(), r, 2 * h)) };
            o.copy_from_slice(&xr[gate..gate + h]);
            math::act_in_place::<M>(act, o);
            o.iter_mut().zip(&xr[value..value + h]).for_each(|(v, b)| *v *= b);
        }
    }
}

/// Columns `start .. start + width` of each row of the `in_width`-wide `x`.
///
/// # Safety
/// `x` holds `rows x in_width` readable values, `out` `rows x width` writable ones overlapping
/// no input; `start + width <= in_width`.
pub unsafe fn slice(
    out: *mut f32,
    x: *const f32,
    rows: usize,
    in_width: usize,
    start: usize,
    width: usize,
) {
    let (out, x) = (SendPtr(out), SendPtr(x.cast_mut()));
    par_rows(rows, width, |range| {
        for r in range {
            // SAFETY: row r of each.
            let (o, xr) = unsafe { (row_mut(out.get(), r, width), row(x.get(), r, in_width)) };
            o.copy_from_slice(&xr[start..start + width]);
        }
    });
}

/// Rotary embedding, rotate-half layout: each token's heads rotated by the angles of its
/// position, read from `cos` and `sin` (`[positions, head_dim / 2]`).
///
/// # Safety
/// As [`layer_norm`]'s for `batch.tokens()` rows of `heads * head_dim`; the tables hold every
/// position of the batch.
pub unsafe fn rope(
    out: *mut f32,
    x: *const f32,
    batch: &Batch<'_>,
    heads: usize,
    head_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    let (width, half) = (heads * head_dim, head_dim / 2);
    let (o, xp) = (SendPtr(out), SendPtr(x.cast_mut()));
    (0..batch.seqs()).into_par_iter().for_each(|s| {
        let range = batch.seq(s);
        for (p, t) in range.clone().enumerate() {
            // SAFETY: token t's row of each, which only this sequence's task touches.
            let r = unsafe { in_place(o, xp, t, width) };
            let (c, sn) = (&cos[p * half..(p + 1) * half], &sin[p * half..(p + 1) * half]);
            for hd in r.chunks_exact_mut(head_dim) {
                let (x1, x2) = hd.split_at_mut(half);
                for i in 0..half {
                    let (a, b) = (x1[i], x2[i]);
                    x1[i] = a * c[i] - b * sn[i];
                    x2[i] = b * c[i] + a * sn[i];
                }
            }
        }
    });
}

/// Each sequence's token rows of `x` pooled into one row of `out`.
///
/// # Safety
/// `x` holds `batch.tokens() x width` readable values, `out` `batch.seqs() x width` writable
/// ones overlapping no input.
pub unsafe fn pool(out: *mut f32, x: *const f32, batch: &Batch<'_>, width: usize, mode: PoolMode) {
    let (out, x) = (SendPtr(out), SendPtr(x.cast_mut()));
    par_rows(batch.seqs(), width * 16, |range| {
        for s in range {
            let toks = batch.seq(s);
            // SAFETY: row s of out, only this chunk's.
            let o = unsafe { row_mut(out.get(), s, width) };
            // SAFETY: the sequence's token rows of x.
            let rows = || toks.clone().map(|t| unsafe { row(x.get(), t, width) });
            // SAFETY: the first and the last token row of the sequence.
            let (first, last) =
                unsafe { (row(x.get(), toks.start, width), row(x.get(), toks.end - 1, width)) };
            match mode {
                PoolMode::Cls => o.copy_from_slice(first),
                PoolMode::Last => o.copy_from_slice(last),
                PoolMode::Mean | PoolMode::Sum => {
                    o.fill(0.0);
                    rows().for_each(|r| o.iter_mut().zip(r).for_each(|(a, v)| *a += v));
                    if mode == PoolMode::Mean {
                        let inv = 1.0 / toks.len() as f32;
                        o.iter_mut().for_each(|a| *a *= inv);
                    }
                }
                PoolMode::Max => {
                    o.fill(f32::NEG_INFINITY);
                    rows().for_each(|r| o.iter_mut().zip(r).for_each(|(a, v)| *a = a.max(*v)));
                }
            }
        }
    });
}

/// The token row at each marker of `batch`.
///
/// # Safety
/// `x` holds `batch.tokens() x width` readable values, `out` `batch.markers() x width`
/// writable ones overlapping no input.
pub unsafe fn gather_markers(out: *mut f32, x: *const f32, batch: &Batch<'_>, width: usize) {
    let (out, x) = (SendPtr(out), SendPtr(x.cast_mut()));
    par_rows(batch.seqs(), width * 16, |range| {
        for s in range {
            for m in batch.seq_markers(s) {
                let t = batch.cu[s] as usize + batch.markers[m] as usize;
                // SAFETY: marker m's row of out (only this sequence's) and token t's of x.
                unsafe { row_mut(out.get(), m, width) }
                    .copy_from_slice(unsafe { row(x.get(), t, width) });
            }
        }
    });
}
