//! Arena layout: where each value of a graph lives in one buffer per bucket.
//!
//! A value is live from the op that writes it to the last op that reads it (graph outputs stay
//! live to the end). Values whose live ranges do not overlap share bytes. An op listed by
//! [`Op::in_place_candidates`] may write its output over an input that it reads for the last
//! time; no other two values that are live at once ever overlap. Every value starts on a
//! [`ALIGN`]-byte boundary (a cache line).

use crate::{Bucket, Graph, Op, Val};

/// Alignment of every value in an arena, in bytes: one cache line.
pub const ALIGN: usize = 64;

/// Byte offsets of a graph's values in one arena, for one bucket and element size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Byte offset of each value, indexed by [`Val`].
    pub offsets: Vec<usize>,
    /// Bytes reserved for each value (its largest size in the bucket, rounded up to [`ALIGN`]).
    pub sizes: Vec<usize>,
    /// Live range of each value: the op that writes it and the last op that needs it
    /// (`ops.len()` for graph outputs, which are read after the run), inclusive.
    pub live: Vec<(usize, usize)>,
    /// For a value written in place, the input whose bytes it reuses.
    pub reuses: Vec<Option<Val>>,
    /// Total arena bytes.
    pub total: usize,
}

impl Layout {
    /// Lays out a validated graph's values for `bucket`, with `elem` bytes per element.
    pub fn plan(graph: &Graph, bucket: Bucket, elem: usize) -> Layout {
        let n = graph.vals.len();
        let sizes: Vec<usize> = graph
            .vals
            .iter()
            .map(|s| (bucket.rows(s.rows) * s.width * elem).next_multiple_of(ALIGN))
            .collect();

        let mut live = vec![(0, 0); n];
        for (i, op) in graph.ops.iter().enumerate() {
            live[op.out().idx()] = (i, i);
        }
        for (v, last) in graph.last_uses().into_iter().enumerate() {
            if let Some(last) = last {
                live[v].1 = last;
            }
        }
        for o in &graph.outputs {
            live[o.val.idx()].1 = graph.ops.len();
        }

        // Group values into slots: an in-place output joins its input's slot.
        let mut slot_of: Vec<usize> = (0..n).collect();
        let mut reuses = vec![None; n];
        for (i, op) in graph.ops.iter().enumerate() {
            let out = op.out();
            let donor = op.in_place_candidates().into_iter().flatten().find(|&c| {
                live[c.idx()].1 == i && sizes[c.idx()] == sizes[out.idx()] && !read_otherwise(op, c)
            });
            if let Some(c) = donor {
                slot_of[out.idx()] = slot_of[c.idx()];
                reuses[out.idx()] = Some(c);
            }
        }
        // A slot's live range spans its members'; its size is theirs (they are equal).
        let mut slots: Vec<(usize, usize, usize)> = vec![(usize::MAX, 0, 0); n];
        for v in 0..n {
            let s = &mut slots[slot_of[v]];
            s.0 = s.0.min(live[v].0);
            s.1 = s.1.max(live[v].1);
            s.2 = s.2.max(sizes[v]);
        }

        // Greedy: biggest slots first, each at the lowest offset free throughout its range.
        let mut order: Vec<usize> = (0..n).filter(|&s| slot_of[s] == s).collect();
        order.sort_by_key(|&s| (std::cmp::Reverse(slots[s].2), slots[s].0, s));
        let mut slot_off = vec![0usize; n];
        let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // (start, end, off, size)
        let mut total = 0;
        for s in order {
            let (start, end, size) = slots[s];
            let mut busy: Vec<(usize, usize)> = placed
                .iter()
                .filter(|p| p.3 > 0 && p.0 <= end && start <= p.1)
                .map(|p| (p.2, p.2 + p.3))
                .collect();
            busy.sort_unstable();
            let mut off = 0;
            if size > 0 {
                for (a, b) in busy {
                    if off + size <= a {
                        break;
                    }
                    off = off.max(b);
                }
            }
            slot_off[s] = off;
            placed.push((start, end, off, size));
            total = total.max(off + size);
        }

        let offsets = (0..n).map(|v| slot_off[slot_of[v]]).collect();
        Layout { offsets, sizes, live, reuses, total }
    }

    /// The byte range of a value in the arena.
    pub fn range(&self, v: Val) -> std::ops::Range<usize> {
        self.offsets[v.idx()]..self.offsets[v.idx()] + self.sizes[v.idx()]
    }

    /// Sum of every value's size: what the graph would need with no reuse at all.
    pub fn unshared(&self) -> usize {
        self.sizes.iter().sum()
    }
}

/// Whether `op` reads `c` other than as the element-wise operand it could overwrite.
fn read_otherwise(op: &Op, c: Val) -> bool {
    match *op {
        // The GEMM reads all of `x` for every output row: its residual may be overwritten, `x` not.
        Op::Linear { x, .. } => x == c,
        // The others read a candidate only at the position (or row) they write.
        Op::Embed { .. }
        | Op::TypeEmbed { .. }
        | Op::PosEmbed { .. }
        | Op::Add { .. }
        | Op::Mul { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Glu { .. }
        | Op::Slice { .. }
        | Op::Rope { .. }
        | Op::Attention { .. }
        | Op::Activation { .. }
        | Op::Pool { .. }
        | Op::Gather { .. }
        | Op::L2Norm { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Act, GraphBuilder, Op, Shape};

    /// A random but valid graph of `ops` ops mixing in-place, GEMM and row-kind-changing ops.
    fn random_graph(seed: u64, ops: usize) -> Graph {
        let mut r = crate::testkit::Rng::new(seed);
        let mut g = GraphBuilder::new();
        let table = g.weight("emb", &[10, 8]);
        let mut vals = vec![g.op(Shape::tokens(8), |out| Op::Embed { table, scale: 1.0, out })];
        for i in 0..ops {
            let x = vals[r.below(vals.len())];
            let sh = g.shape(x);
            let v = match r.below(5) {
                0 => g.op(sh, |out| Op::Activation { x, act: Act::Relu, out }),
                1 => {
                    let same: Vec<Val> =
                        vals.iter().copied().filter(|&v| g.shape(v) == sh).collect();
                    let b = same[r.below(same.len())];
                    g.op(sh, |out| Op::Add { a: x, b, out })
                }
                2 => {
                    let w = [4, 8, 12][r.below(3)];
                    let weight = g.weight(format!("w{i}"), &[w, sh.width]);
                    let shape = Shape { rows: sh.rows, width: w };
                    let residual = vals
                        .iter()
                        .copied()
                        .filter(|&v| g.shape(v) == shape && r.below(2) == 0)
                        .last();
                    g.op(shape, |out| Op::Linear {
                        x,
                        weight,
                        bias: None,
                        act: Act::Gelu,
                        residual,
                        out,
                    })
                }
                3 if sh.rows == crate::Rows::Tokens => g.op(Shape::seqs(sh.width), |out| {
                    Op::Pool { x, mode: crate::PoolMode::Mean, out }
                }),
                _ => g.op(sh, |out| Op::L2Norm { x, eps: 1e-12, out }),
            };
            vals.push(v);
        }
        let last = *vals.last().unwrap();
        g.output("last", last);
        g.output("first", vals[1.min(vals.len() - 1)]);
        g.finish().unwrap()
    }

    fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
        a.0 <= b.1 && b.0 <= a.1
    }

    #[test]
    fn live_values_never_overlap_except_in_place() {
        for seed in 0..200 {
            let g = random_graph(seed, 40);
            let l = Layout::plan(&g, Bucket::new(33, 5, 7), 4);
            for u in 0..g.vals.len() {
                let (ru, uv) = (l.range(Val(u as u32)), Val(u as u32));
                assert_eq!(ru.start % ALIGN, 0);
                assert!(ru.end <= l.total);
                for v in u + 1..g.vals.len() {
                    let rv = l.range(Val(v as u32));
                    let bytes = ru.start < rv.end && rv.start < ru.end && !ru.is_empty();
                    if bytes && overlaps(l.live[u], l.live[v]) {
                        // Only a direct in-place pair may share bytes while both are live.
                        assert_eq!(l.reuses[v], Some(uv), "seed {seed}: values {u} and {v}");
                        let op = &g.ops[l.live[v].0];
                        assert!(op.in_place_candidates().contains(&Some(uv)), "seed {seed}");
                        assert_eq!(
                            l.live[u].1, l.live[v].0,
                            "the input dies where the output is born"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn outputs_live_to_the_end() {
        let g = random_graph(7, 30);
        let l = Layout::plan(&g, Bucket::new(16, 2, 0), 4);
        for o in &g.outputs {
            assert_eq!(l.live[o.val.idx()].1, g.ops.len());
        }
    }

    #[test]
    fn in_place_chain_shares_one_slot() {
        let mut g = GraphBuilder::new();
        let table = g.weight("emb", &[10, 16]);
        let mut x = g.op(Shape::tokens(16), |out| Op::Embed { table, scale: 1.0, out });
        let first = x;
        for _ in 0..10 {
            x = g.op(Shape::tokens(16), |out| Op::Activation { x, act: Act::Tanh, out });
        }
        g.output("y", x);
        let g = g.finish().unwrap();
        let l = Layout::plan(&g, Bucket::new(8, 1, 0), 4);
        assert!(g.vals.iter().enumerate().all(|(v, _)| l.offsets[v] == l.offsets[first.idx()]));
        assert_eq!(l.total, 8 * 16 * 4);
    }

    #[test]
    fn residual_gemm_does_not_overwrite_its_own_input() {
        let mut g = GraphBuilder::new();
        let table = g.weight("emb", &[10, 8]);
        let w = g.weight("w", &[8, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table, scale: 1.0, out });
        let y = g.op(Shape::tokens(8), |out| Op::Linear {
            x,
            weight: w,
            bias: None,
            act: Act::Identity,
            residual: Some(x),
            out,
        });
        g.output("y", y);
        let g = g.finish().unwrap();
        let l = Layout::plan(&g, Bucket::new(4, 1, 0), 4);
        assert_eq!(l.reuses[y.idx()], None);
        assert_ne!(l.offsets[x.idx()], l.offsets[y.idx()]);
    }

    #[test]
    fn long_chain_needs_far_less_than_the_sum() {
        let mut g = GraphBuilder::new();
        let table = g.weight("emb", &[10, 384]);
        let w = g.weight("w", &[384, 384]);
        let mut x = g.op(Shape::tokens(384), |out| Op::Embed { table, scale: 1.0, out });
        for _ in 0..100 {
            x = g.op(Shape::tokens(384), |out| Op::Linear {
                x,
                weight: w,
                bias: None,
                act: Act::Identity,
                residual: None,
                out,
            });
        }
        g.output("y", x);
        let g = g.finish().unwrap();
        let l = Layout::plan(&g, Bucket::new(512, 16, 0), 4);
        let one = 512 * 384 * 4;
        // A GEMM reads one value while writing another: two slots suffice for any chain length.
        assert_eq!(l.total, 2 * one);
        assert_eq!(l.unshared(), 101 * one);
    }

    #[test]
    fn sizes_follow_the_bucket_and_round_to_a_cache_line() {
        let mut g = GraphBuilder::new();
        let table = g.weight("emb", &[10, 3]);
        let x = g.op(Shape::tokens(3), |out| Op::Embed { table, scale: 1.0, out });
        let p = g.op(Shape::seqs(3), |out| Op::Pool { x, mode: crate::PoolMode::Cls, out });
        let m = g.op(Shape::markers(3), |out| Op::Gather { x, out });
        g.output("p", p);
        g.output("m", m);
        let g = g.finish().unwrap();
        let l = Layout::plan(&g, Bucket::new(100, 2, 0), 4);
        assert_eq!(l.sizes, [1216, 64, 0]);
        assert_eq!(l.total, 1216 + 64);
    }
}
