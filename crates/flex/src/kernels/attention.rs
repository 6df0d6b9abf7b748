//! Ragged self-attention: every sequence and head of a batch in one parallel loop, each at its
//! own length, with no padding and no mask.
//!
//! A task is one head of one sequence. It transposes the head's keys into its thread's scratch
//! (`head_dim x len`), then takes the queries four at a time: their scores against blocks of
//! sixteen keys (the keys any of them may see: all of the sequence, or those within the window)
//! accumulate in registers over the head's columns; each query's softmax, with the maximum
//! subtracted, runs over the keys it sees; and the value rows, weighted by it, add up in
//! registers sixteen columns at a time, each value row loaded once for the four queries. Sums
//! are f32, over keys in order.

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
    ScratchSize { keys: h.head_dim * lpad, scores: QB * lpad, ..ScratchSize::default() }
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
        // Keys padded to whole blocks with zeros, whose scores are never read.
        let lpad = len.next_multiple_of(KB);
        keys.ensure(d * lpad);
        scores.ensure(QB * lpad);
        let (kt, sc) = (keys.as_mut_slice(), scores.as_mut_slice());
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
        let mut i0 = 0;
        while i0 < len {
            let nq = QB.min(len - i0);
            // Every key some query of the block sees, in whole blocks of keys.
            let (lo, hi) = (seen(i0).0, seen(i0 + nq - 1).1);
            let (blo, bhi) = (lo / KB * KB, hi.next_multiple_of(KB));
            // SAFETY: rows start + i0 .. + nq of q, the head's columns.
            let qrow = |qi: usize, c: usize| unsafe { *q.add((start + i0 + qi) * width + col + c) };
            // Scores of the block: sc[qi * lpad + j] = scale * q . k_j.
            let mut jb = blo;
            while jb < bhi {
                let mut acc = [[0.0f32; KB]; QB];
                for c in 0..d {
                    let kv: &[f32; KB] = kt[c * lpad + jb..c * lpad + jb + KB].try_into().expect("a block");
                    for (qi, a) in acc.iter_mut().enumerate().take(nq) {
                        let qc = qrow(qi, c);
                        for (s, &kk) in a.iter_mut().zip(kv) {
                            *s = qc.mul_add(kk, *s);
                        }
                    }
                }
                for (qi, a) in acc.iter().enumerate().take(nq) {
                    for (s, &x) in sc[qi * lpad + jb..qi * lpad + jb + KB].iter_mut().zip(a) {
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
            // out_i = sum_j p_ij v_j, sixteen columns at a time, then the rest.
            let mut c0 = 0;
            while c0 < d {
                let cw = KB.min(d - c0);
                let mut acc = [[0.0f32; KB]; QB];
                for j in lo..hi {
                    // SAFETY: row start + j of v, columns col + c0 .. + cw of the head.
                    let vj = unsafe { std::slice::from_raw_parts(v.add((start + j) * width + col + c0), cw) };
                    for (qi, a) in acc.iter_mut().enumerate().take(nq) {
                        let p = sc[qi * lpad + j];
                        for (o, &x) in a.iter_mut().zip(vj) {
                            *o = p.mul_add(x, *o);
                        }
                    }
                }
                for (qi, a) in acc.iter().enumerate().take(nq) {
                    // SAFETY: row start + i0 + qi of out, the head's columns c0 .. + cw; out
                    // overlaps no input, and only this task writes them.
                    let o = unsafe {
                        std::slice::from_raw_parts_mut(out.add((start + i0 + qi) * width + col + c0), cw)
                    };
                    o.copy_from_slice(&a[..cw]);
                }
                c0 += cw;
            }
            i0 += nq;
        }
    }
}
