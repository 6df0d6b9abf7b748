//! DeBERTa's disentangled terms, added to a block's scores.
//!
//! The terms of query `i` and key `j` read the table rows of their distance `j - i`: the
//! query's product with a row of the key table (content to position), and the key's with a row
//! of the query table (position to content). Along a run of keys the distance grows by one a
//! key, so each op first lays every head's columns of both tables out by distance and
//! transposed ([`Tables`]): column `c` of every distance the batch meets in one contiguous row,
//! as a head's transposed keys lie.
//!
//! - Content to position is then a product of the block's queries with the key table's
//!   distances, computed by the block's own f32 score kernel (each distance loaded once for the
//!   block's queries), into a row of products by distance for each query; the query's scores
//!   then take, key after key, its products at their distances: one contiguous run a row.
//! - Position to content multiplies, for each block of sixteen keys, their transposed column
//!   by the query table's column at the sixteen distances each query of the block meets them
//!   at: one vector FMA a column and query, each key column loaded once for the block's queries,
//!   a chain of FMAs a query.
//!
//! Sums are f32 over the head's columns in order; both terms are added, times the scale, as
//! the scores are.

use rayon::prelude::*;
use switchyard_core::Batch;

use super::{Block, DisentangledTables, Heads, KB, Layout, MAX_QB, load};
use crate::buf::AlignedBuf;
use crate::kernels::math::MulAdd;

/// Distances laid out for a batch whose longest sequence has `longest` tokens: from the
/// smallest (`1 - longest`) to past the largest by any padding of its keys (a block of
/// sixteen, or an AMX step of 32) and one block more, in whole blocks of sixteen.
fn stride(longest: usize) -> usize {
    (2 * longest + 64).next_multiple_of(KB)
}

/// Words of an op's [`Tables`] over sequences of at most `longest` tokens.
pub(super) fn table_words(h: Heads<'_>, longest: usize) -> usize {
    let Some(t) = h.disentangled else { return 0 };
    let tables = usize::from(t.keys.is_some()) + usize::from(t.queries.is_some());
    tables * h.heads * h.head_dim * stride(longest)
}

/// Words of one thread's scratch for a task's terms over `lpad` padded keys of sequences of at
/// most `longest` tokens: the keys transposed in f32, and a block's products by distance.
pub(super) fn task_words(d: usize, lpad: usize, longest: usize) -> usize {
    d * lpad + MAX_QB * stride(longest)
}

/// An op's disentangled tables, each head's columns laid out by distance and transposed.
#[derive(Clone, Copy)]
pub(super) struct Tables<'a> {
    /// `heads x d x stride`: column `c` of head `head`'s row of the key table for a key `r`
    /// positions after its query at `(head * d + c) * stride + r + longest - 1`; zero for
    /// distances no two tokens of the batch are apart.
    keys: Option<&'a [f32]>,
    /// The query table, laid out alike.
    queries: Option<&'a [f32]>,
    /// Words from one column to the next.
    stride: usize,
    /// The batch's longest sequence.
    longest: usize,
    d: usize,
    /// Multiplies both terms, as it does the scores.
    scale: f32,
}

impl<'a> Tables<'a> {
    /// Lays `t`'s tables out for `batch` in `buf` (grown to [`table_words`] if it must be), a
    /// head and table on each thread of the current pool.
    pub(super) fn lay_out(
        t: DisentangledTables<'_>,
        h: Heads<'_>,
        batch: &Batch<'_>,
        buf: &'a mut AlignedBuf,
    ) -> Tables<'a> {
        let longest = (0..batch.seqs()).map(|s| batch.seq(s).len()).max().unwrap_or(0).max(1);
        buf.ensure(table_words(h, longest));
        let (d, width, stride) = (h.head_dim, h.heads * h.head_dim, stride(longest));
        // t.rows holds the row of distance r at r + plan - 1, for the plan's longest sequence.
        let plan = t.rows.len().div_ceil(2);
        let head_words = d * stride;
        let tables = [t.keys, t.queries];
        let n = tables.iter().flatten().count();
        let buf = &mut buf.as_mut_slice()[..n * h.heads * head_words];
        buf.par_chunks_mut(head_words).enumerate().for_each(|(at, out)| {
            let table = tables.iter().flatten().nth(at / h.heads).expect("a table a chunk");
            let col = at % h.heads * d;
            for x in 0..stride {
                // Distance x + 1 - longest, where two tokens of the batch may be that far apart.
                let met = x + 1 < 2 * longest;
                let row = met.then(|| t.rows[x + plan - longest] as usize * width + col);
                match row {
                    Some(row) => {
                        for (c, &v) in table[row..row + d].iter().enumerate() {
                            out[c * stride + x] = v;
                        }
                    }
                    None => (0..d).for_each(|c| out[c * stride + x] = 0.0),
                }
            }
        });
        let buf = &*buf;
        let (keys, queries) = buf.split_at(if t.keys.is_some() { h.heads * head_words } else { 0 });
        let (keys, queries) = (t.keys.map(|_| keys), t.queries.map(|_| queries));
        Tables { keys, queries, stride, longest, d, scale: h.scale }
    }

    /// What head `head` of a task reads beside the tables: its keys transposed in f32
    /// (`f32_keys` where the task has them, else transposed from `k`, the head's first column
    /// of its `len` rows, by `B::F32`), and room for a block's products by distance; both in
    /// `buf`, grown to [`task_words`] if it must be.
    ///
    /// # Safety
    /// The caller enabled `B`'s instructions; `k` holds `len` rows of `l.kwidth` values;
    /// `f32_keys` holds `d x lpad` of them.
    #[inline(always)]
    pub(super) unsafe fn for_task<'s, B: Block>(
        self,
        head: usize,
        (k, f32_keys, len): (*const f32, Option<*const f32>, usize),
        buf: &'s mut AlignedBuf,
        l: Layout,
    ) -> Terms<'s>
    where
        'a: 's,
    {
        buf.ensure(task_words(self.d, l.lpad, self.longest));
        let (kt, products) = buf.as_mut_slice().split_at_mut(l.d * l.lpad);
        let kt = match f32_keys {
            Some(kt) => kt,
            None => {
                // SAFETY: the caller's contract; kt holds d x lpad words.
                unsafe { B::F32::transpose_keys(k, len, kt.as_mut_ptr(), l) };
                kt.as_ptr()
            }
        };
        Terms { tables: self, head, kt, products }
    }
}

/// One task's disentangled terms: the op's tables, the task's head, its keys transposed in f32
/// (`d x lpad`, zero past its keys) and room for a block's products by distance.
pub(super) struct Terms<'s> {
    tables: Tables<'s>,
    head: usize,
    kt: *const f32,
    products: &'s mut [f32],
}

impl Terms<'_> {
    /// Adds the scale times both terms to the first `nq` rows of a block's scores `sc` (`lpad`
    /// apart): row `qi` for the query at position `at + qi` among the task's keys, whose
    /// head's columns `q` holds at `qi * width`, over the whole blocks of sixteen keys that
    /// hold those it sees (`seen(qi)`), `F::QB` queries at a time.
    ///
    /// # Safety
    /// The caller enabled `F`'s instructions; `q` is readable as above; the task's sequence is
    /// one of the batch the tables were laid out for, and `lpad` the one `for_task` was given.
    #[inline(always)]
    pub(super) unsafe fn add<F: Block>(
        &mut self,
        sc: &mut [f32],
        (nq, at, lpad): (usize, usize, usize),
        seen: impl Fn(usize) -> (usize, usize),
        (q, width): (*const f32, usize),
    ) {
        // The queries of a group: the block's of the instruction set, as the f32 kernels take.
        const { assert!(matches!(F::QB, 4 | 6 | 8)) };
        let Terms { tables, head, kt, ref mut products } = *self;
        let Tables { stride, longest, d, scale, .. } = tables;
        // Where key j and query i (at position at + i) meet in the laid-out tables.
        let dist = |j: usize, i: usize| longest - 1 + j - (at + i);
        let mut g0 = 0;
        while g0 < nq {
            let g = F::QB.min(nq - g0);
            let (lo, hi) = (seen(g0).0, seen(g0 + g - 1).1);
            let (blo, bhi) = (lo / KB * KB, hi.next_multiple_of(KB));
            // A group of queries: rows past its last repeat it (their results not used).
            // SAFETY: rows below nq, by the caller's contract.
            let rows: [*const f32; MAX_QB] =
                std::array::from_fn(|r| unsafe { q.add((g0 + r.min(g - 1)) * width) });
            if let Some(keys) = tables.keys {
                // The group's products with every distance its rows meet, in whole blocks.
                let (xlo, xhi) = (dist(blo, g0 + g - 1) / KB * KB, dist(bhi - 1, g0) + 1);
                let table = keys[head * d * stride..].as_ptr();
                let layout = Layout { d, width, kwidth: width, lpad: stride, scale, vstride: 0 };
                let pp = products.as_mut_ptr();
                let mut xb = xlo;
                while xb < xhi {
                    // SAFETY: the head's d columns of stride distances, xb + 16 <= stride;
                    // F::QB rows of stride products; the caller enabled F's instructions.
                    unsafe { F::scores(table, &rows, pp, layout, xb) };
                    xb += KB;
                }
                for r in 0..g {
                    let (a, b) = seen(g0 + r);
                    let (a, b) = (a / KB * KB, b.next_multiple_of(KB));
                    let from = dist(a, g0 + r);
                    let p = &products[r * stride + from..][..b - a];
                    for (s, &p) in sc[(g0 + r) * lpad + a..(g0 + r) * lpad + b].iter_mut().zip(p) {
                        *s += p;
                    }
                }
            }
            if let Some(queries) = tables.queries {
                let table = &queries[head * d * stride..][..d * stride];
                let dists: [usize; MAX_QB] = std::array::from_fn(|r| dist(0, g0 + r.min(g - 1)));
                for jb in (blo..bhi).step_by(KB) {
                    let mut add = |acc: &[[f32; KB]]| {
                        for (r, acc) in acc.iter().take(g).enumerate() {
                            let row = &mut sc[(g0 + r) * lpad + jb..][..KB];
                            for (s, a) in row.iter_mut().zip(acc) {
                                *s += scale * a;
                            }
                        }
                    };
                    let keys = (jb, lpad);
                    // SAFETY: keys jb..jb + 16 <= lpad of the transposed keys; the distances
                    // the group meets them at lie within the table.
                    unsafe {
                        match F::QB {
                            8 => add(&position_to_content::<F::Fma, 8>(table, kt, keys, dists, d)),
                            6 => add(&position_to_content::<F::Fma, 6>(table, kt, keys, dists, d)),
                            _ => add(&position_to_content::<F::Fma, 4>(table, kt, keys, dists, d)),
                        }
                    }
                }
            }
            g0 += g;
        }
    }
}

/// For `Q` queries, whose key 0 each meets at distance `dists[r]`, and the sixteen keys from
/// `jb`: `sum_c kt[c][jb + t] * table[c][dists[r] + jb + t]` (tables and transposed keys
/// `stride` and `lpad` apart).
///
/// # Safety
/// `kt` holds `d x lpad` values, `jb + 16 <= lpad`; every distance read lies within `table`.
#[inline(always)]
unsafe fn position_to_content<M: MulAdd, const Q: usize>(
    table: &[f32],
    kt: *const f32,
    (jb, lpad): (usize, usize),
    dists: [usize; MAX_QB],
    d: usize,
) -> [[f32; KB]; Q] {
    let stride = table.len() / d;
    debug_assert!(dists.iter().take(Q).all(|&x| (d - 1) * stride + x + jb + KB <= table.len()));
    let mut acc = [[0.0f32; KB]; Q];
    // Each query's distances from key jb, column 0.
    let at: [*const f32; Q] = std::array::from_fn(|r| table[dists[r] + jb..].as_ptr());
    for c in 0..d {
        // SAFETY: the caller's contract.
        let k = unsafe { load::<KB>(kt.add(c * lpad + jb)) };
        for (acc, at) in acc.iter_mut().zip(at) {
            // SAFETY: the caller's contract.
            let x = unsafe { load::<KB>(at.add(c * stride)) };
            for ((s, k), x) in acc.iter_mut().zip(k).zip(x) {
                *s = M::mul_add(k, x, *s);
            }
        }
    }
    acc
}
