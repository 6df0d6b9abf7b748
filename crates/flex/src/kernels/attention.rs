//! Ragged self-attention: every sequence and head of a batch in one parallel loop, each at its
//! own length, with no padding and no mask.
//!
//! A task is one head of one sequence. It transposes the head's keys into its thread's scratch
//! (`head_dim x len`), then takes the queries four at a time (transposed into scratch too):
//! their scores against blocks of sixteen keys (the keys any of them may see: all of the
//! sequence, or those within the window) accumulate in registers over the head's columns, each
//! key block loaded once for the four; each query's softmax, with the maximum subtracted, runs
//! over the keys it sees; and the value rows, weighted by it, add up in registers sixteen columns
//! at a time, each value row loaded once for the four queries. Sums are f32, over keys in
//! order.

use rayon::prelude::*;
use switchyard_core::Batch;

use super::scratch::{ScratchSize, Scratches, SendPtr};
use super::{Isa, math, multiversion};
use crate::buf::AlignedBuf;

/// The shape of one attention op.
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    /// Number of heads.
    pub heads: usize,
    /// Columns per head.
    pub head_dim: usize,
    /// Multiplies every score.
    pub scale: f32,
    /// The largest `|i - j|` attended, if any.
    pub window: Option<usize>,
}

/// The scratch attention of `h` over sequences of at most `max_len` tokens needs per thread.
pub fn scratch_size(h: Heads, max_len: usize) -> ScratchSize {
    let lpad = max_len.next_multiple_of(KB);
    ScratchSize {
        keys: h.head_dim * lpad,
        scores: QB * (lpad + h.head_dim),
        ..ScratchSize::default()
    }
}

/// `out` = self-attention of `q`, `k`, `v` within each sequence of `batch`, on the current rayon
/// pool, with the threads' `scratch`.
///
/// # Safety
/// `q`, `k` and `v` hold `batch.tokens() x heads * head_dim` readable values and `out` as many
/// writable ones, overlapping none of them; no other thread writes them meanwhile. `batch`
/// passed [`Batch::check`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn attention(
    isa: Isa,
    q: *const f32,
    k: *const f32,
    v: *const f32,
    out: *mut f32,
    batch: &Batch<'_>,
    h: Heads,
    scratch: &Scratches,
) {
    let ptrs = [SendPtr(q.cast_mut()), SendPtr(k.cast_mut()), SendPtr(v.cast_mut()), SendPtr(out)];
    (0..batch.seqs() * h.heads).into_par_iter().for_each(|t| {
        let (s, head) = (t / h.heads, t % h.heads);
        let rows = batch.seq(s);
        scratch.with(|sc| {
            // SAFETY: the caller's contract; a task writes the columns of one head in the rows
            // of one sequence, which no other task writes.
            unsafe {
                one_head(isa, ptrs, rows.start, rows.len(), head, h, &mut sc.keys, &mut sc.scores)
            }
        });
    });
}

/// Queries computed together, sharing each load of keys and values.
const QB: usize = 4;
/// Keys per block of scores: one AVX-512 register, two AVX2 ones.
const KB: usize = 16;

/// `N` values at `p`, unaligned.
///
/// # Safety
/// `p` points to `N` readable f32.
#[inline(always)]
unsafe fn load<const N: usize>(p: *const f32) -> [f32; N] {
    // SAFETY: the caller's contract; f32 arrays have no invalid bit patterns.
    unsafe { p.cast::<[f32; N]>().read_unaligned() }
}

/// `acc[t] += a * b[t]` for one block of sixteen.
#[inline(always)]
fn fma16(acc: &mut [f32; KB], a: f32, b: &[f32; KB]) {
    for (s, &x) in acc.iter_mut().zip(b) {
        *s = a.mul_add(x, *s);
    }
}

multiversion! {
    /// One head of one sequence: rows `start..start + len`, columns of head `head`.
    ///
    /// # Safety
    /// As [`attention`]'s, for those rows and columns.
    #[allow(clippy::too_many_arguments)]
    unsafe fn one_head(
        ptrs: [SendPtr; 4],
        start: usize,
        len: usize,
        head: usize,
        h: Heads,
        keys: &mut AlignedBuf,
        scores: &mut AlignedBuf,
    ) {
        let (d, width) = (h.head_dim, h.heads * h.head_dim);
        let col = head * d;
        let [q, k, v, out] = ptrs.map(SendPtr::get);
        // Keys padded to whole blocks with zeros, whose scores are never used.
        let lpad = len.next_multiple_of(KB);
        keys.ensure(d * lpad);
        scores.ensure(QB * (lpad + d));
        let kt = keys.as_mut_slice();
        // Scores of a block of queries (QB rows of lpad), then its queries, transposed (d rows
        // of QB).
        let (sc, qt) = scores.as_mut_slice().split_at_mut(QB * lpad);
        // The head's keys, transposed: kt[c * lpad + j] = k[start + j][col + c].
        for j in 0..lpad {
            if j < len {
                // SAFETY: row start + j of k, the head's d columns.
                let kr = unsafe { std::slice::from_raw_parts(k.add((start + j) * width + col), d) };
                for (c, &x) in kr.iter().enumerate() {
                    kt[c * lpad + j] = x;
                }
            } else {
                (0..d).for_each(|c| kt[c * lpad + j] = 0.0);
            }
        }
        // The keys query i may see.
        let seen = |i: usize| match h.window {
            Some(w) => (i.saturating_sub(w), (i + w + 1).min(len)),
            None => (0, len),
        };
        let (ktp, scp, qtp) = (kt.as_ptr(), sc.as_mut_ptr(), qt.as_ptr());
        let mut i0 = 0;
        while i0 < len {
            // A block of QB queries; past the sequence's end, rows repeat its last query and
            // their results are not written.
            let nq = QB.min(len - i0);
            for c in 0..d {
                for qi in 0..QB {
                    let r = start + i0 + qi.min(nq - 1);
                    // SAFETY: row r of q, a column of the head.
                    qt[c * QB + qi] = unsafe { *q.add(r * width + col + c) };
                }
            }
            // Every key some query of the block sees, in whole blocks of keys.
            let (lo, hi) = (seen(i0).0, seen(i0 + nq - 1).1);
            let (blo, bhi) = (lo / KB * KB, hi.next_multiple_of(KB));
            // Scores: sc[qi * lpad + j] = scale * q_qi . k_j, four accumulators in registers.
            let mut jb = blo;
            while jb < bhi {
                let (mut a0, mut a1, mut a2, mut a3) = ([0.0; KB], [0.0; KB], [0.0; KB], [0.0; KB]);
                for c in 0..d {
                    // SAFETY: block jb of row c of the transposed keys, and row c of the
                    // transposed queries: both inside their buffers.
                    let (kv, qv) = unsafe {
                        (load::<KB>(ktp.add(c * lpad + jb)), load::<QB>(qtp.add(c * QB)))
                    };
                    fma16(&mut a0, qv[0], &kv);
                    fma16(&mut a1, qv[1], &kv);
                    fma16(&mut a2, qv[2], &kv);
                    fma16(&mut a3, qv[3], &kv);
                }
                for (qi, a) in [a0, a1, a2, a3].iter().enumerate() {
                    // SAFETY: block jb of row qi of the scores.
                    let dst = unsafe { std::slice::from_raw_parts_mut(scp.add(qi * lpad + jb), KB) };
                    for (s, &x) in dst.iter_mut().zip(a) {
                        *s = x * h.scale;
                    }
                }
                jb += KB;
            }
            // Each query's softmax over the keys it sees, as weights over lo..hi (zero for the
            // keys of the block it does not see), the sum folded in.
            for qi in 0..nq {
                let (a, b) = seen(i0 + qi);
                let row = &mut sc[qi * lpad..(qi + 1) * lpad];
                let max = math::max(&row[a..b]);
                let inv = 1.0 / math::exp_sum(&mut row[a..b], max);
                row[a..b].iter_mut().for_each(|x| *x *= inv);
                row[lo..a].fill(0.0);
                row[b..hi].fill(0.0);
            }
            for qi in nq..QB {
                sc[qi * lpad + lo..qi * lpad + hi].fill(0.0);
            }
            // out_i = sum_j p_ij v_j, sixteen columns at a time, four accumulators in
            // registers; then the columns past the last block of sixteen.
            let full = d / KB * KB;
            let mut c0 = 0;
            while c0 < full {
                let (mut o0, mut o1, mut o2, mut o3) = ([0.0; KB], [0.0; KB], [0.0; KB], [0.0; KB]);
                for j in lo..hi {
                    // SAFETY: row start + j of v, columns c0..c0 + 16 of the head; column j of
                    // each row of the scores.
                    let (vj, p) = unsafe {
                        (
                            load::<KB>(v.add((start + j) * width + col + c0)),
                            [
                                *scp.add(j),
                                *scp.add(lpad + j),
                                *scp.add(2 * lpad + j),
                                *scp.add(3 * lpad + j),
                            ],
                        )
                    };
                    fma16(&mut o0, p[0], &vj);
                    fma16(&mut o1, p[1], &vj);
                    fma16(&mut o2, p[2], &vj);
                    fma16(&mut o3, p[3], &vj);
                }
                for (qi, o) in [o0, o1, o2, o3].iter().enumerate().take(nq) {
                    // SAFETY: row start + i0 + qi of out, the head's columns c0..c0 + 16; out
                    // overlaps no input, and only this task writes them.
                    unsafe { out.add((start + i0 + qi) * width + col + c0).cast::<[f32; KB]>().write_unaligned(*o) };
                }
                c0 += KB;
            }
            for c in full..d {
                for qi in 0..nq {
                    let mut o = 0.0f32;
                    for j in lo..hi {
                        // SAFETY: row start + j of v, column c of the head.
                        let x = unsafe { *v.add((start + j) * width + col + c) };
                        o = sc[qi * lpad + j].mul_add(x, o);
                    }
                    // SAFETY: as for the blocks of sixteen.
                    unsafe { *out.add((start + i0 + qi) * width + col + c) = o };
                }
            }
            i0 += nq;
        }
    }
}
