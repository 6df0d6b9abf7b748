//! The checks on whole encoders, batches, plans, errors and edge-case graphs (each op alone is
//! in `ops`).

use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{
    Act, Backend, BatchBuf, Bucket, Buckets, Error, Executor, Graph, GraphBuilder, LaneId, Op,
    Outputs, PoolMode, Reference, Rows, Shape, Val,
};

use crate::harness::{Harness, Pair, batch, random_lens};

/// The encoders every backend must run: post-norm BERT and pre-norm ModernBERT shapes, tiny and
/// a little wider (head sizes 8, 16 and 12, widths not a multiple of a SIMD width).
fn encoders() -> Vec<(&'static str, Graph)> {
    let wide = EncoderSpec { vocab: 97, width: 48, heads: 3, ffn: 100, layers: 2, max_pos: 128 };
    let deep = EncoderSpec { vocab: 61, width: 36, heads: 3, ffn: 52, layers: 4, max_pos: 128 };
    vec![
        ("bert tiny", testkit::bert_like(EncoderSpec::TINY)),
        ("bert wide", testkit::bert_like(wide)),
        ("bert wide, last layer on CLS", testkit::bert_classifier(wide, true)),
        ("modernbert tiny", testkit::modernbert_like(EncoderSpec::TINY)),
        ("modernbert tiny, last layer on CLS", testkit::modernbert_cls_like(EncoderSpec::TINY)),
        ("modernbert deep", testkit::modernbert_like(deep)),
    ]
}

fn spec_of(g: &Graph) -> (usize, bool) {
    let l = g.limits();
    (l.vocab as usize, l.types > 1)
}

pub(crate) fn whole_encoders<B: Backend>(h: &Harness<'_, B>) -> Result<(), String> {
    let buckets: Buckets = "default 256 32 256\n".parse().expect("a valid table");
    for (name, g) in encoders() {
        let mut pair = h.pair(&g, 11, &buckets)?;
        let (vocab, types) = spec_of(&g);
        let mut r = Rng::new(5);
        for round in 0..3 {
            let lens = random_lens(&mut r, 8, 30);
            h.compare(
                &mut pair,
                &batch(&lens, vocab, types, round),
                &format!("{name}, lengths {lens:?}"),
            )?;
        }
    }
    Ok(())
}

pub(crate) fn ragged_batches<B: Backend>(h: &Harness<'_, B>) -> Result<(), String> {
    let bucket = Bucket::new(64, 8, 64);
    let buckets = Buckets::single("default", &[bucket]).expect("a valid bucket");
    for (name, g) in encoders() {
        let mut pair = h.pair(&g, 12, &buckets)?;
        let (vocab, types) = spec_of(&g);
        let cases: [(&str, BatchBuf); 6] = [
            ("one sequence", batch(&[17], vocab, types, 1)),
            ("many sequences", batch(&[9, 3, 12, 1, 7, 5, 2, 11], vocab, types, 2)),
            ("length-1 sequences", batch(&[1, 1, 1], vocab, types, 3)),
            ("a single token", batch(&[1], vocab, types, 4)),
            ("no markers", {
                let mut b = BatchBuf::new();
                b.push(&[1, 2, 3, 4], None, &[]).map_err(|e| e.to_string())?;
                b.push(&[5, 6], None, &[]).map_err(|e| e.to_string())?;
                b
            }),
            ("filling the bucket exactly", {
                let mut b = BatchBuf::new();
                let mut r = Rng::new(6);
                for _ in 0..8 {
                    let ids: Vec<u32> = (0..8).map(|_| r.below(vocab) as u32).collect();
                    b.push(&ids, None, &(0..8).collect::<Vec<u32>>()).map_err(|e| e.to_string())?;
                }
                b
            }),
        ];
        for (what, b) in cases {
            h.compare(&mut pair, &b, &format!("{name}, {what}"))?;
        }
        // An empty batch: every output has zero rows.
        let out = h.compare(&mut pair, &BatchBuf::new(), &format!("{name}, empty batch"))?;
        if out.mats().iter().any(|m| m.rows != 0) {
            return Err(format!("{name}: an empty batch produced rows"));
        }
    }
    Ok(())
}

/// Each sequence alone and inside a batch gives the same outputs, within tolerance.
pub(crate) fn isolation<B: Backend>(h: &Harness<'_, B>) -> Result<(), String> {
    let buckets: Buckets = "default 16 2 16\ndefault 128 16 128\n".parse().expect("a valid table");
    for (name, g) in encoders() {
        let mut pair = h.pair(&g, 13, &buckets)?;
        let (vocab, types) = spec_of(&g);
        let lens = [6, 1, 13, 4, 9];
        let all = batch(&lens, vocab, types, 21);
        let together = h.compare(&mut pair, &all, &format!("{name}, together"))?;
        let b = all.batch();
        for s in 0..b.seqs() {
            let mut one = BatchBuf::new();
            let r = b.seq(s);
            one.push(&b.ids[r.clone()], Some(&b.types[r]), &b.markers[b.seq_markers(s)])
                .map_err(|e| e.to_string())?;
            let alone = h.compare(&mut pair, &one, &format!("{name}, sequence {s} alone"))?;
            for (m, t) in alone.mats().iter().zip(together.mats()) {
                let rows = match t.kind {
                    Rows::Tokens => b.seq(s),
                    Rows::Seqs => s..s + 1,
                    Rows::Markers => b.seq_markers(s),
                };
                let cut = &t.data[rows.start * t.width..rows.end * t.width];
                let what = format!("{name}, sequence {s} alone vs in the batch");
                h.close_values(&m.name, &m.data, cut, m.width, &what)?;
            }
        }
    }
    Ok(())
}

/// Many different batches through one plan, outputs reused: every result right, and the first
/// batch again gives what it gave the first time.
pub(crate) fn plan_reuse<B: Backend>(h: &Harness<'_, B>) -> Result<(), String> {
    let buckets = Buckets::single("default", &[Bucket::new(96, 12, 96)]).expect("a valid bucket");
    for (name, g) in encoders() {
        let mut pair = h.pair(&g, 14, &buckets)?;
        let (vocab, types) = spec_of(&g);
        let mut r = Rng::new(8);
        let first = batch(&random_lens(&mut r, 5, 12), vocab, types, 30);
        let mut out = Outputs::new();
        pair.test.run(LaneId::MAIN, &first.batch(), &mut out).map_err(|e| e.to_string())?;
        let first_out = out.clone();
        for round in 0..8 {
            let lens = random_lens(&mut r, 12, 8);
            let b = batch(&lens, vocab, types, 31 + round);
            let mut want = Outputs::new();
            pair.test.run(LaneId::MAIN, &b.batch(), &mut out).map_err(|e| e.to_string())?;
            pair.reference.run(LaneId::MAIN, &b.batch(), &mut want).map_err(|e| e.to_string())?;
            h.close(&out, &want, &format!("{name}, batch {round} through the reused plan"))?;
        }
        if pair.test.memory().plan_count != 1 {
            return Err(format!("{name}: {} plans for one bucket", pair.test.memory().plan_count));
        }
        pair.test.run(LaneId::MAIN, &first.batch(), &mut out).map_err(|e| e.to_string())?;
        h.close(&out, &first_out, &format!("{name}, the first batch again"))?;
    }
    Ok(())
}

/// Wrong input gives errors, never panics.
pub(crate) fn errors<B: Backend>(h: &Harness<'_, B>) -> Result<(), String> {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let weights = testkit::random_weights(&g, 1);
    let be = (h.make)();
    let w = be.upload(&weights.tensors(), &g).map_err(|e| e.to_string())?;

    // A batch larger than the plan's bucket.
    let plan = be.lower(&w, &g, Bucket::new(8, 2, 8)).map_err(|e| e.to_string())?;
    let mut state = be.state(&plan).map_err(|e| e.to_string())?;
    let big = batch(&[6, 6], 50, true, 1);
    match be.run(&plan, &mut state, &big.batch(), &mut Outputs::new()) {
        Err(Error::BadBatch(_)) => {}
        other => return Err(format!("a batch larger than the bucket gave {other:?}")),
    }

    // A graph that reads more weights than were uploaded.
    let mut more = g.clone();
    more.weights.push(switchyard_core::WeightSpec { name: "extra".into(), shape: vec![4] });
    if be.lower(&w, &more, Bucket::new(8, 2, 8)).is_ok() {
        return Err("lowering a graph with more weights than uploaded succeeded".into());
    }

    // Weights whose shapes disagree with the graph.
    let other = testkit::bert_like(EncoderSpec { width: 8, heads: 2, ..EncoderSpec::TINY });
    if be.upload(&weights.tensors(), &other).is_ok() {
        return Err("uploading weights of the wrong shapes succeeded".into());
    }

    // An invalid graph.
    let mut broken = g.clone();
    broken.ops.swap(0, 3);
    match be.lower(&w, &broken, Bucket::new(8, 2, 8)) {
        Err(Error::Graph(_) | Error::Unsupported(_)) => Ok(()),
        other => Err(format!("lowering an invalid graph gave {:?}", other.map(|_| "a plan"))),
    }
}

/// Unusual but valid graphs: each either lowers and matches the reference, or is refused at
/// lower with [`Error::Unsupported`] — never a panic, never another error.
pub(crate) fn edge_graphs<B: Backend>(h: &Harness<'_, B>) -> Result<(), String> {
    let buckets = Buckets::single("default", &[Bucket::new(32, 4, 32)]).expect("a valid bucket");
    for (name, g) in edge_cases() {
        let weights = testkit::random_weights(&g, 3);
        let stage = "default";
        let mut test = match Executor::new(
            (h.make)(),
            &weights.tensors(),
            g.clone(),
            stage,
            buckets.clone(),
        ) {
            Ok(ex) => ex,
            Err(Error::Unsupported(_)) => continue,
            Err(e) => return Err(format!("{name}: upload: {e}")),
        };
        match test.prepare(LaneId::MAIN, Bucket::new(32, 4, 32)) {
            Ok(()) => {}
            Err(Error::Unsupported(_)) => continue,
            Err(e) => {
                return Err(format!("{name}: lower gave {e}, expected success or Unsupported"));
            }
        }
        let reference =
            Executor::new(Reference, &weights.tensors(), g.clone(), stage, buckets.clone())
                .map_err(|e| e.to_string())?;
        let mut pair = Pair { test, reference };
        let (vocab, types) = spec_of(&g);
        h.compare(&mut pair, &batch(&[1, 9, 4], vocab, types, 2), name)?;
    }
    Ok(())
}

fn edge_cases() -> Vec<(&'static str, Graph)> {
    let mut out = Vec::new();
    // Attention with one head of one column, and a window of zero (each token sees itself).
    for (name, heads, head_dim, window) in [
        ("1x1 attention", 1, 1, None),
        ("window 0", 2, 3, Some(0)),
        ("window past every length", 1, 4, Some(1000)),
    ] {
        let mut g = GraphBuilder::new();
        let w = heads * head_dim;
        let table = g.weight("emb", &[20, w]);
        let x = g.op(Shape::tokens(w), |out| Op::Embed { table, scale: 1.0, out });
        let y = g.op(Shape::tokens(w), |out| Op::Attention {
            q: x,
            k: x,
            v: x,
            heads,
            kv_heads: heads,
            head_dim,
            scale: 0.7,
            window,
            causal: false,
            position_bias: None,
            out,
        });
        g.output("y", y);
        out.push((name, g.finish().expect("valid")));
    }
    // A value read twice by one op, an unread value, and an output that is also read later.
    let mut g = GraphBuilder::new();
    let table = g.weight("emb", &[20, 5]);
    let x = g.op(Shape::tokens(5), |out| Op::Embed { table, scale: 1.0, out });
    let _unread = g.op(Shape::tokens(5), |out| Op::Activation { x, act: Act::Tanh, out });
    let d = g.op(Shape::tokens(5), |out| Op::Add { a: x, b: x, out });
    let p = g.op(Shape::seqs(5), |out| Op::Pool { x: d, mode: PoolMode::Max, out });
    let q = g.op(Shape::seqs(5), |out| Op::L2Norm { x: p, eps: 1e-12, out });
    g.output("doubled", d);
    g.output("pooled", p);
    g.output("normed", q);
    out.push(("shared values", g.finish().expect("valid")));
    // Outputs of every row kind at once, and a graph output that is the first value.
    let mut g = GraphBuilder::new();
    let table = g.weight("emb", &[20, 3]);
    let x: Val = g.op(Shape::tokens(3), |out| Op::Embed { table, scale: 1.0, out });
    let m = g.op(Shape::markers(3), |out| Op::Gather { x, out });
    let s = g.op(Shape::seqs(3), |out| Op::Pool { x, mode: PoolMode::Last, out });
    g.output("tokens", x);
    g.output("markers", m);
    g.output("seqs", s);
    out.push(("every row kind", g.finish().expect("valid")));
    out
}

/// Two batches at once on one executor, each with its own run state: both right. (A backend
/// whose device takes one batch at a time may run them one after the other.)
pub(crate) fn concurrent_runs<B: Backend>(h: &Harness<'_, B>) -> Result<(), String> {
    let buckets = Buckets::single("default", &[Bucket::new(64, 8, 64)]).expect("a valid bucket");
    for (name, g) in encoders() {
        let pair = h.pair(&g, 15, &buckets)?;
        let (vocab, types) = spec_of(&g);
        let batches: Vec<BatchBuf> =
            (0..4).map(|i| batch(&[3 + i, 9, 1, 2 * i + 1], vocab, types, 40 + i as u64)).collect();
        let runs: Vec<Result<Outputs, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = batches
                .iter()
                .map(|b| {
                    let test = &pair.test;
                    s.spawn(move || {
                        let mut scratch = test.scratch();
                        let mut out = Outputs::new();
                        test.run_with(&mut scratch, LaneId::MAIN, &b.batch(), &mut out)
                            .map(|_| out)
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a run panicked".into())))
                .collect()
        });
        for (i, (got, b)) in runs.into_iter().zip(&batches).enumerate() {
            let got = got.map_err(|e| format!("{name}, concurrent run {i}: {e}"))?;
            let mut want = Outputs::new();
            let mut reference = pair.reference.scratch();
            pair.reference
                .run_with(&mut reference, LaneId::MAIN, &b.batch(), &mut want)
                .map_err(|e| e.to_string())?;
            h.close(&got, &want, &format!("{name}, concurrent run {i}"))?;
        }
    }
    Ok(())
}
