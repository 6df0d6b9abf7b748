//! The cost model: each op's input and output shapes, FLOPs and bytes moved at given sizes.
//!
//! A multiply-add counts as two FLOPs, any other element-wise function as one; bytes moved are
//! f32 reads of every input and weight plus the write of the output.

use std::fmt::Write as _;

use switchyard_core::{Graph, Op, PositionBias, Rows};

use crate::OpRecord;

/// Row counts of each kind, and the sequence lengths attention sees.
pub(crate) struct Sizes<'a> {
    pub(crate) tokens: usize,
    pub(crate) seqs: usize,
    pub(crate) markers: usize,
    pub(crate) lens: &'a dyn Fn() -> Box<dyn Iterator<Item = usize> + 'a>,
}

impl Sizes<'_> {
    fn rows(&self, r: Rows) -> usize {
        match r {
            Rows::Tokens => self.tokens,
            Rows::Seqs => self.seqs,
            Rows::Markers => self.markers,
        }
    }
}

fn op_record(graph: &Graph, index: usize, op: &Op, s: &Sizes<'_>) -> OpRecord {
    let dims = |v: switchyard_core::Val| {
        let sh = graph.shape(v);
        [s.rows(sh.rows), sh.width]
    };
    let inputs: Vec<[usize; 2]> = op.inputs().into_iter().flatten().map(dims).collect();
    let output = dims(op.out());
    let elems = |d: [usize; 2]| (d[0] * d[1]) as u64;
    let (n, w) = (output[0] as u64, output[1] as u64);
    let io_bytes = 4 * (inputs.iter().map(|&d| elems(d)).sum::<u64>() + n * w);
    let weight_bytes: u64 = op
        .weights()
        .into_iter()
        .flatten()
        .map(|wt| 4 * graph.weights[wt.idx()].shape.iter().product::<usize>() as u64)
        .sum();
    let (flops, detail, bytes) = match *op {
        // A lookup reads one table row per output row, not the whole table.
        Op::Embed { scale, .. } if scale != 1.0 => (n * w, format!("x {scale}"), 8 * n * w),
        Op::Embed { .. } | Op::TypeEmbed { .. } => (0, String::new(), 8 * n * w),
        Op::PosEmbed { offset, .. } => (0, format!("offset {offset}"), 8 * n * w),
        Op::Add { .. } | Op::Mul { .. } => (n * w, String::new(), io_bytes),
        Op::LayerNorm { eps, beta, .. } => (
            8 * n * w,
            format!("eps {eps:e}{}", if beta.is_some() { "" } else { ", no beta" }),
            io_bytes + weight_bytes,
        ),
        Op::RmsNorm { eps, group, unit_offset, .. } => {
            let per = group.map_or(String::new(), |g| format!(", per {g} columns"));
            let offset = if unit_offset { ", scale 1 + gamma" } else { "" };
            (5 * n * w, format!("eps {eps:e}{per}{offset}"), io_bytes + weight_bytes)
        }
        Op::Linear { act, bias, residual, .. } => {
            let k = inputs[0][1] as u64;
            let epilogue = n
                * w
                * (u64::from(bias.is_some())
                    + u64::from(act != switchyard_core::Act::Identity)
                    + u64::from(residual.is_some()));
            let mut d = format!("{k} -> {w}");
            if bias.is_some() {
                d.push_str(", bias");
            }
            if act != switchyard_core::Act::Identity {
                let _ = write!(d, ", {act:?}");
            }
            if residual.is_some() {
                d.push_str(", + residual");
            }
            (2 * n * k * w + epilogue, d, io_bytes + weight_bytes)
        }
        Op::Glu { act, .. } => (2 * n * w, format!("{act:?}"), io_bytes),
        Op::Slice { start, .. } => (0, format!("columns {start}..{}", start as u64 + w), io_bytes),
        Op::Rope { heads, head_dim, theta, position_scale, .. } => {
            let scaled = match position_scale {
                1.0 => String::new(),
                s => format!(", positions x {s}"),
            };
            (3 * n * w, format!("{heads}x{head_dim}, theta {theta}{scaled}"), io_bytes)
        }
        Op::Attention { q, heads, kv_heads, head_dim, window, causal, position_bias, .. } => {
            // Each query's keys, the window and the causal mask counted; the one query of a
            // sequence is its first token's.
            let per_seq = graph.shape(q).rows == Rows::Seqs;
            let reach = switchyard_core::Reach::of(window, causal);
            let seen = |i, l| {
                let (lo, hi) = reach.keys(i, l);
                (hi - lo) as u64
            };
            let pairs: u64 = (s.lens)()
                .map(|l| match per_seq {
                    false => (0..l).map(|i| seen(i, l)).sum(),
                    true => seen(0, l),
                })
                .sum();
            let hd = head_dim as u64;
            let heads_u = heads as u64;
            let mut flops = heads_u * pairs * (4 * hd + 3);
            let mut d = format!("{heads}x{head_dim}");
            if kv_heads != heads {
                d.push_str(&format!(" on {kv_heads} key-value heads"));
            }
            if let Some(win) = window {
                d.push_str(&format!(", window {win}"));
            }
            if causal {
                d.push_str(", causal");
            }
            match position_bias {
                Some(PositionBias::Relative(b)) => d.push_str(&format!(
                    ", position bias {} buckets to {}",
                    b.buckets, b.max_distance
                )),
                Some(PositionBias::Disentangled(dis)) => {
                    // Each term is one more product of a head's columns a pair.
                    let terms = u64::from(dis.keys.is_some()) + u64::from(dis.queries.is_some());
                    flops += heads_u * pairs * terms * 2 * hd;
                    let names = match (dis.keys.is_some(), dis.queries.is_some()) {
                        (true, true) => "c2p and p2c",
                        (true, false) => "c2p",
                        _ => "p2c",
                    };
                    d.push_str(&format!(", disentangled {names} over {} positions", dis.span));
                    if dis.buckets > 0 {
                        d.push_str(&format!(" in {} buckets to {}", dis.buckets, dis.max_distance));
                    }
                }
                None => {}
            }
            if per_seq {
                d.push_str(", first token's query");
            }
            (flops, d, io_bytes)
        }
        Op::Activation { act, .. } => (n * w, format!("{act:?}"), io_bytes),
        Op::Pool { mode, .. } => (elems(inputs[0]), format!("{mode:?}"), io_bytes),
        Op::Gather { .. } => (0, String::new(), 8 * n * w),
        Op::L2Norm { .. } => (3 * n * w, String::new(), io_bytes),
    };
    OpRecord { index, op: op.name(), detail, inputs, output, flops, bytes }
}

pub(crate) fn plan_ops(graph: &Graph, s: &Sizes<'_>) -> Vec<OpRecord> {
    graph.ops.iter().enumerate().map(|(i, op)| op_record(graph, i, op, s)).collect()
}
