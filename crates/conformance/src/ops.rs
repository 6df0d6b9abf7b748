//! Every op alone, on random widths (1 to 300, most not a multiple of any SIMD width) and on
//! batches of no rows, one row and many rows.

use switchyard_core::testkit::Rng;
use switchyard_core::{
    Act, Backend, BatchBuf, Buckets, Disentangled, Gate, Graph, GraphBuilder, Op, PoolMode,
    PositionBias, RelativeBias, Shape, Val,
};

use crate::ACTS;
use crate::harness::{Harness, batch, random_lens};

/// An attention case's position bias: a relative bias's buckets and farthest distance, or
/// disentangled attention's rows a side, buckets and terms (content to position, position to
/// content).
#[derive(Clone, Copy)]
enum Bias {
    Relative(usize, usize),
    Disentangled { span: usize, buckets: usize, terms: (bool, bool) },
}

const WIDTHS: [usize; 11] = [1, 3, 7, 8, 16, 17, 33, 64, 100, 255, 300];
const VOCAB: usize = 40;

/// A graph reading one or two random `[tokens x w_in]` inputs and computing `y`.
fn single(w_in: usize, build: impl FnOnce(&mut GraphBuilder, Val, Val) -> Val) -> Graph {
    let mut g = GraphBuilder::new();
    let t1 = g.weight("input.a", &[VOCAB, w_in]);
    let t2 = g.weight("input.b", &[VOCAB, w_in]);
    let a = g.op(Shape::tokens(w_in), |out| Op::Embed { table: t1, scale: 1.0, out });
    // A second input: the same ids through another table.
    let b = g.op(Shape::tokens(w_in), |out| Op::Embed { table: t2, scale: 1.0, out });
    let y = build(&mut g, a, b);
    g.output("y", y);
    g.finish().expect("the op cases are valid graphs")
}

fn linear(k: usize, n: usize, bias: bool, act: Act, residual: bool, rows: &str) -> Graph {
    single(k, |g, a, _| {
        let x = match rows {
            "seqs" => g.op(Shape::seqs(k), |out| Op::Pool { x: a, mode: PoolMode::Mean, out }),
            "markers" => g.op(Shape::markers(k), |out| Op::Gather { x: a, out }),
            _ => a,
        };
        let shape = Shape { rows: g.shape(x).rows, width: n };
        let weight = g.weight("linear.weight", &[n, k]);
        let bias = bias.then(|| g.weight("linear.bias", &[n]));
        let residual = residual.then(|| {
            let t = g.weight("residual", &[VOCAB, n]);
            let r = g.op(Shape::tokens(n), |out| Op::Embed { table: t, scale: 1.0, out });
            match rows {
                "seqs" => g.op(Shape::seqs(n), |out| Op::Pool { x: r, mode: PoolMode::Cls, out }),
                "markers" => g.op(Shape::markers(n), |out| Op::Gather { x: r, out }),
                _ => r,
            }
        });
        g.op(shape, |out| Op::Linear { x, weight, bias, act, residual, out })
    })
}

fn cases() -> Vec<(String, Graph)> {
    let mut c: Vec<(String, Graph)> = Vec::new();
    for w in WIDTHS {
        let t = Shape::tokens(w);
        c.push((format!("Embed {w}"), single(w, |_, a, _| a)));
        c.push((
            format!("Embed {w} scaled"),
            single(w, |g, _, _| {
                let table = g.weight("scaled", &[VOCAB, w]);
                g.op(t, |out| Op::Embed { table, scale: 27.7, out })
            }),
        ));
        c.push((
            format!("TypeEmbed {w}"),
            single(w, |g, _, _| {
                let table = g.weight("types", &[2, w]);
                g.op(t, |out| Op::TypeEmbed { table, out })
            }),
        ));
        c.push((
            format!("PosEmbed {w}"),
            single(w, |g, _, _| {
                let table = g.weight("positions", &[66, w]);
                g.op(t, |out| Op::PosEmbed { table, offset: 2, out })
            }),
        ));
        c.push((format!("Add {w}"), single(w, |g, a, b| g.op(t, |out| Op::Add { a, b, out }))));
        c.push((format!("Mul {w}"), single(w, |g, a, b| g.op(t, |out| Op::Mul { a, b, out }))));
        for beta in [true, false] {
            c.push((
                format!("LayerNorm {w} beta {beta}"),
                single(w, |g, x, _| {
                    let gamma = g.weight("norm.weight", &[w]);
                    let beta = beta.then(|| g.weight("norm.bias", &[w]));
                    g.op(t, |out| Op::LayerNorm { x, gamma, beta, eps: 1e-5, out })
                }),
            ));
        }
        // Scales as stored, and as Gemma stores them (offsets from one).
        for unit_offset in [false, true] {
            c.push((
                format!("RmsNorm {w}, unit offset {unit_offset}"),
                single(w, |g, x, _| {
                    let gamma = g.weight("norm.weight", &[w]);
                    g.op(t, |out| Op::RmsNorm {
                        x,
                        gamma,
                        eps: 1e-6,
                        group: None,
                        unit_offset,
                        out,
                    })
                }),
            ));
        }
        // A norm per head, as Gemma's and Qwen3's queries and keys have.
        for n in [2, 4].into_iter().filter(|n| w % n == 0) {
            c.push((
                format!("RmsNorm {w} per {n} columns"),
                single(w, |g, x, _| {
                    let gamma = g.weight("norm.weight", &[n]);
                    let (group, unit_offset) = (Some(n), n == 4);
                    g.op(t, |out| Op::RmsNorm { x, gamma, eps: 1e-6, group, unit_offset, out })
                }),
            ));
        }
        c.push((
            format!("L2Norm {w}"),
            single(w, |g, x, _| g.op(t, |out| Op::L2Norm { x, eps: 1e-12, out })),
        ));
        for mode in [PoolMode::Cls, PoolMode::Last, PoolMode::Mean, PoolMode::Max, PoolMode::Sum] {
            c.push((
                format!("Pool {mode:?} {w}"),
                single(w, |g, x, _| g.op(Shape::seqs(w), |out| Op::Pool { x, mode, out })),
            ));
        }
        c.push((
            format!("Gather {w}"),
            single(w, |g, x, _| g.op(Shape::markers(w), |out| Op::Gather { x, out })),
        ));
        c.push((
            format!("Slice {w} of {}", 2 * w + 1),
            single(2 * w + 1, |g, x, _| g.op(t, |out| Op::Slice { x, start: w / 2 + 1, out })),
        ));
    }
    for (i, act) in ACTS.into_iter().enumerate() {
        let w = WIDTHS[(i * 3) % WIDTHS.len()];
        c.push((
            format!("Activation {act:?} {w}"),
            single(w, |g, x, _| g.op(Shape::tokens(w), |out| Op::Activation { x, act, out })),
        ));
        let h = [1, 7, 64, 150][i % 4];
        for gate in [Gate::First, Gate::Second] {
            c.push((
                format!("Glu {act:?} {h}, gate {gate:?}"),
                single(2 * h, |g, x, _| {
                    g.op(Shape::tokens(h), |out| Op::Glu { x, act, gate, out })
                }),
            ));
        }
        c.push((
            format!("Linear 17->33 {act:?}, bias, residual"),
            linear(17, 33, true, act, true, "tokens"),
        ));
    }
    for (k, n) in [(1, 1), (3, 7), (64, 100), (300, 255), (100, 300)] {
        c.push((format!("Linear {k}->{n}"), linear(k, n, false, Act::Identity, false, "tokens")));
        c.push((
            format!("Linear {k}->{n}, bias, GELU"),
            linear(k, n, true, Act::Gelu, false, "tokens"),
        ));
    }
    c.push(("Linear on sequence rows".into(), linear(33, 7, true, Act::Tanh, true, "seqs")));
    c.push(("Linear on marker rows".into(), linear(33, 7, true, Act::Identity, true, "markers")));
    for (heads, head_dim) in [(1, 2), (3, 8), (2, 64), (4, 6)] {
        // GTE-base's NTK scaling (factor 2) scales positions by 2^(-2 / head_dim).
        for (theta, position_scale) in [(10_000.0, 1.0), (160_000.0, 1.0), (1e6, 0.917)] {
            let w = heads * head_dim;
            c.push((
                format!("Rope {heads}x{head_dim} theta {theta}, positions x {position_scale}"),
                single(w, |g, x, _| {
                    g.op(Shape::tokens(w), |out| Op::Rope {
                        x,
                        heads,
                        head_dim,
                        theta,
                        position_scale,
                        out,
                    })
                }),
            ));
        }
    }
    for (heads, head_dim) in [(1, 1), (2, 3), (4, 16), (3, 32), (12, 25)] {
        // Relative position biases: MPNet's 32 buckets up to 128, and 8 up to 10, which
        // sequences of up to 20 tokens take to their farthest buckets. Disentangled attention:
        // 8 rows a side in 8 buckets up to 12 (log buckets and the clamp both reached), 4 rows
        // a side without buckets (clamped from distance 5), and each term alone.
        let (mpnet, near) = (Some(Bias::Relative(32, 128)), Some(Bias::Relative(8, 10)));
        let both = Some(Bias::Disentangled { span: 8, buckets: 8, terms: (true, true) });
        let c2p = Some(Bias::Disentangled { span: 4, buckets: 0, terms: (true, false) });
        let p2c = Some(Bias::Disentangled { span: 16, buckets: 0, terms: (false, true) });
        // Causal: a decoder's mask, alone and in a window, and a query per sequence (its first
        // token sees itself alone).
        for (window, causal, per_seq, bias) in [
            (None, false, false, None),
            (Some(2), false, false, None),
            (None, false, true, None),
            (Some(2), false, true, None),
            (None, false, false, mpnet),
            (None, false, true, mpnet),
            (Some(2), false, false, near),
            (None, false, false, near),
            (None, false, false, both),
            (None, false, true, both),
            (None, false, false, c2p),
            (Some(2), false, false, p2c),
            (None, true, false, None),
            (Some(2), true, false, None),
            (None, true, true, None),
        ] {
            let w = heads * head_dim;
            let queries = match (causal, per_seq) {
                (false, false) => "",
                (false, true) => ", a query per sequence",
                (true, false) => ", causal",
                (true, true) => ", causal, a query per sequence",
            };
            let biased = match bias {
                Some(Bias::Relative(buckets, most)) => {
                    format!(", {buckets} position buckets to {most}")
                }
                Some(Bias::Disentangled { span, buckets, terms }) => {
                    format!(", disentangled {terms:?} over {span} positions, {buckets} buckets")
                }
                None => String::new(),
            };
            c.push((
                format!("Attention {heads}x{head_dim} window {window:?}{queries}{biased}"),
                single(w, |g, q, k| {
                    let table = g.weight("input.v", &[VOCAB, w]);
                    let v = g.op(Shape::tokens(w), |out| Op::Embed { table, scale: 1.0, out });
                    let scale = 1.0 / (head_dim as f32).sqrt();
                    let q = match per_seq {
                        true => {
                            g.op(Shape::seqs(w), |out| Op::Pool { x: q, mode: PoolMode::Cls, out })
                        }
                        false => q,
                    };
                    let position_bias = bias.map(|b| match b {
                        Bias::Relative(buckets, max_distance) => {
                            PositionBias::Relative(RelativeBias {
                                table: g.weight("attention.position_bias", &[buckets, heads]),
                                buckets,
                                max_distance,
                            })
                        }
                        Bias::Disentangled { span, buckets, terms } => {
                            let mut table =
                                |on: bool, name: &str| on.then(|| g.weight(name, &[2 * span, w]));
                            PositionBias::Disentangled(Disentangled {
                                keys: table(terms.0, "attention.pos_keys"),
                                queries: table(terms.1, "attention.pos_queries"),
                                span,
                                buckets,
                                max_distance: 12,
                            })
                        }
                    });
                    g.op(g.shape(q), |out| Op::Attention {
                        q,
                        k,
                        v,
                        heads,
                        kv_heads: heads,
                        head_dim,
                        scale,
                        window,
                        causal,
                        position_bias,
                        out,
                    })
                }),
            ));
        }
    }
    // Grouped-query attention (Qwen3's 2 query heads a key-value head, EmbeddingGemma's 3):
    // narrower keys and values, in each mask and with a query per sequence.
    for (heads, kv_heads, head_dim) in [(4, 2, 8), (3, 1, 32), (12, 4, 5)] {
        for (window, causal, per_seq, relative) in [
            (None, false, false, false),
            (Some(2), false, false, false),
            (None, true, false, false),
            (Some(2), true, false, false),
            (None, false, true, false),
            (None, false, false, true),
        ] {
            let (w, kw) = (heads * head_dim, kv_heads * head_dim);
            let how = match (window, causal, per_seq, relative) {
                (_, _, true, _) => ", a query per sequence",
                (_, true, _, _) => ", causal",
                (_, _, _, true) => ", 8 position buckets to 10",
                _ => "",
            };
            c.push((
                format!("Attention {heads}x{head_dim} on {kv_heads} key-value heads window {window:?}{how}"),
                single(w, |g, q, _| {
                    let mut input = |name: &str| {
                        let table = g.weight(name, &[VOCAB, kw]);
                        g.op(Shape::tokens(kw), |out| Op::Embed { table, scale: 1.0, out })
                    };
                    let (k, v) = (input("input.k"), input("input.v"));
                    let q = match per_seq {
                        true => {
                            g.op(Shape::seqs(w), |out| Op::Pool { x: q, mode: PoolMode::Cls, out })
                        }
                        false => q,
                    };
                    let position_bias = relative.then(|| {
                        PositionBias::Relative(RelativeBias {
                            table: g.weight("attention.position_bias", &[8, heads]),
                            buckets: 8,
                            max_distance: 10,
                        })
                    });
                    g.op(g.shape(q), |out| Op::Attention {
                        q,
                        k,
                        v,
                        heads,
                        kv_heads,
                        head_dim,
                        scale: 1.0 / (head_dim as f32).sqrt(),
                        window,
                        causal,
                        position_bias,
                        out,
                    })
                }),
            ));
        }
    }
    c
}

/// Runs every op case on an empty batch, a single token, and random ragged batches.
pub(crate) fn every_op_alone<B: Backend>(h: &Harness<'_, B>) -> Result<(), String> {
    let buckets: Buckets = "default 128 16 128\n".parse().expect("a valid table");
    let mut r = Rng::new(17);
    for (seed, (name, g)) in cases().into_iter().enumerate() {
        let mut pair = h.pair(&g, seed as u64, &buckets)?;
        let types = g.limits().types > 1;
        h.compare(&mut pair, &BatchBuf::new(), &format!("{name}, no rows"))?;
        h.compare(&mut pair, &batch(&[1], VOCAB, types, 1), &format!("{name}, one row"))?;
        for round in 0..2 {
            let lens = random_lens(&mut r, 6, 20);
            h.compare(
                &mut pair,
                &batch(&lens, VOCAB, types, round),
                &format!("{name}, lengths {lens:?}"),
            )?;
        }
    }
    Ok(())
}
