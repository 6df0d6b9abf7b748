//! The capture backend records uploads, plans and runs, and executes nothing.

use switchyard_capture::{Capture, Event};
use switchyard_conformance::Options;
use switchyard_core::testkit::{self, EncoderSpec};
use switchyard_core::{Act, Backend, BatchBuf, Bucket, GraphBuilder, Layout, Op, Outputs, Shape};

/// The shape and error parts of the suite: capture computes nothing to compare.
mod conformance {
    use super::*;
    switchyard_conformance::tests!(
        Capture::new,
        Options { compare_values: false, ..Options::default() }
    );
}

#[test]
fn records_upload_lower_and_run() {
    let mut g = GraphBuilder::new();
    let t = g.weight("emb", &[10, 8]);
    let w = g.weight("w", &[32, 8]);
    let x = g.op(Shape::tokens(8), |out| Op::Embed { table: t, scale: 1.0, out });
    let y = g.op(Shape::tokens(32), |out| Op::Linear {
        x,
        weight: w,
        bias: None,
        act: Act::Identity,
        residual: None,
        out,
    });
    let a = g.op(Shape::tokens(32), |out| Op::Attention {
        q: y,
        k: y,
        v: y,
        heads: 4,
        kv_heads: 4,
        head_dim: 8,
        scale: 0.3,
        window: None,
        causal: false,
        position_bias: None,
        out,
    });
    let p =
        g.op(Shape::seqs(32), |out| Op::Pool { x: a, mode: switchyard_core::PoolMode::Cls, out });
    g.output("p", p);
    let g = g.finish().unwrap();

    let cap = Capture::new();
    let weights = testkit::random_weights(&g, 1);
    let w = cap.upload(&weights.tensors(), &g).unwrap();
    assert_eq!(cap.weight_bytes(&w), (10 * 8 + 32 * 8) * 4);
    let bucket = Bucket::new(16, 4, 0);
    let plan = cap.lower(&w, &g, bucket).unwrap();
    assert_eq!(cap.plan_bytes(&plan), Layout::plan(&g, bucket, 4).total);

    let rec = plan.record().clone();
    assert_eq!(rec.ops.len(), 4);
    assert_eq!(rec.ops[1].flops, 2 * 16 * 8 * 32, "a GEMM is 2 n k m");
    assert_eq!(rec.ops[1].inputs, vec![[16, 8]]);
    assert_eq!(rec.ops[1].output, [16, 32]);
    // Four sequences of 4 tokens: 4 heads x 4 x 16 query-key pairs x (4 x 8 + 3).
    assert_eq!(rec.ops[2].flops, 4 * 4 * 16 * (4 * 8 + 3));

    let mut b = BatchBuf::new();
    b.push(&[1, 2, 3], None, &[]).unwrap();
    b.push(&[4], None, &[]).unwrap();
    let mut out = Outputs::new();
    out.prepare(&g, &b.batch());
    out.map_values(|_| 7.0);
    cap.run(&plan, &mut (), &b.batch(), &mut out).unwrap();
    let m = out.get("p").unwrap();
    assert_eq!((m.rows, m.width), (2, 32));
    assert!(m.data.iter().all(|&x| x == 0.0), "outputs are zeros of the right shape");

    let events = cap.events();
    assert_eq!(events.len(), 3);
    let Event::Run(run) = &events[2] else { panic!("expected a run, got {:?}", events[2]) };
    assert_eq!((run.tokens, run.seqs, run.markers), (4, 2, 0));
    // Real lengths 3 and 1: 9 + 1 query-key pairs.
    let gemm = 2 * 4 * 8 * 32;
    let att = 4 * 10 * (4 * 8 + 3);
    let pool = 4 * 32;
    assert_eq!(run.flops, gemm + att + pool);
}

#[test]
fn plans_print_as_a_table_and_serialise() {
    let g = testkit::modernbert_like(EncoderSpec::TINY);
    let cap = Capture::new();
    let w = cap.upload(&testkit::random_weights(&g, 1).tensors(), &g).unwrap();
    let plan = cap.lower(&w, &g, Bucket::new(64, 4, 0)).unwrap();
    let table = plan.record().table();
    assert!(table.contains("plan for bucket 64 tokens, 4 sequences, 0 markers"), "{table}");
    assert!(table.contains("Attention") && table.contains("window 2"), "{table}");
    assert!(table.contains(&format!("total: {} ops", g.ops.len())), "{table}");
    let json = serde_json::to_value(plan.record()).unwrap();
    assert_eq!(json["ops"].as_array().unwrap().len(), g.ops.len());
    assert!(json["flops"].as_u64().unwrap() > 0);
}

#[test]
fn a_query_per_sequence_costs_one_row_of_scores() {
    // The second case also carries a relative position bias, which the table names.
    for (window, pairs) in [(None, 3 + 1), (Some(1), 2 + 1)] {
        let mut g = GraphBuilder::new();
        let t = g.weight("emb", &[10, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table: t, scale: 1.0, out });
        let mode = switchyard_core::PoolMode::Cls;
        let q = g.op(Shape::seqs(8), |out| Op::Pool { x, mode, out });
        let position_bias = window.map(|_| {
            switchyard_core::PositionBias::Relative(switchyard_core::RelativeBias {
                table: g.weight("bias", &[8, 2]),
                buckets: 8,
                max_distance: 10,
            })
        });
        let a = g.op(Shape::seqs(8), |out| Op::Attention {
            q,
            k: x,
            v: x,
            heads: 2,
            kv_heads: 2,
            head_dim: 4,
            scale: 0.5,
            window,
            causal: false,
            position_bias,
            out,
        });
        g.output("a", a);
        let (g, cap, plan) = lowered(g);
        let table = plan.record().table();
        assert!(table.contains("first token's query"), "{table}");
        let named = table.contains("position bias 8 buckets to 10");
        assert_eq!(named, window.is_some(), "{table}");
        let mut b = BatchBuf::new();
        b.push(&[1, 2, 3], None, &[]).unwrap();
        b.push(&[4], None, &[]).unwrap();
        let mut out = Outputs::new();
        out.prepare(&g, &b.batch());
        cap.run(&plan, &mut (), &b.batch(), &mut out).unwrap();
        let Event::Run(run) = &cap.events()[2] else { panic!("expected a run") };
        // Lengths 3 and 1: one query each, over 3 and 1 keys (2 and 1 within the window);
        // the pool before it reads 4 tokens' 8 columns.
        assert_eq!(run.flops, 2 * pairs * (4 * 4 + 3) + 4 * 8, "{window:?}");
        assert_eq!(out.get("a").unwrap().rows, 2);
    }
}

#[test]
fn disentangled_attention_costs_a_product_a_term_and_names_its_terms() {
    for (terms, named) in [((true, true), "c2p and p2c"), ((false, true), "p2c")] {
        let mut g = GraphBuilder::new();
        let t = g.weight("emb", &[10, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table: t, scale: 1.0, out });
        let mut table = |on: bool, name: &str| on.then(|| g.weight(name, &[8, 8]));
        let (keys, queries) = (table(terms.0, "keys"), table(terms.1, "queries"));
        let d =
            switchyard_core::Disentangled { keys, queries, span: 4, buckets: 4, max_distance: 6 };
        let a = g.op(Shape::tokens(8), |out| Op::Attention {
            q: x,
            k: x,
            v: x,
            heads: 2,
            kv_heads: 2,
            head_dim: 4,
            scale: 0.5,
            window: None,
            causal: false,
            position_bias: Some(switchyard_core::PositionBias::Disentangled(d)),
            out,
        });
        g.output("a", a);
        let (_, _, plan) = lowered(g);
        let table = plan.record().table();
        let want = format!("disentangled {named} over 4 positions in 4 buckets to 6");
        assert!(table.contains(&want), "{table}");
        // Four sequences of 4 tokens: 2 heads x 64 pairs x (4 x 4 + 3), and 2 x 4 more a term.
        let n = u64::from(terms.0) + u64::from(terms.1);
        assert_eq!(plan.record().ops[1].flops, 2 * 64 * (4 * 4 + 3 + n * 2 * 4), "{named}");
    }
}

#[test]
fn shared_key_value_heads_cost_their_query_heads_products_and_their_own_reads() {
    let mut g = GraphBuilder::new();
    let t = g.weight("emb", &[10, 8]);
    let x = g.op(Shape::tokens(8), |out| Op::Embed { table: t, scale: 1.0, out });
    let kv = g.op(Shape::tokens(4), |out| Op::Slice { x, start: 0, out });
    let a = g.op(Shape::tokens(8), |out| Op::Attention {
        q: x,
        k: kv,
        v: kv,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
        scale: 0.5,
        window: None,
        causal: false,
        position_bias: None,
        out,
    });
    g.output("a", a);
    let (_, _, plan) = lowered(g);
    let table = plan.record().table();
    assert!(table.contains("2x4 on 1 key-value heads"), "{table}");
    let op = &plan.record().ops[2];
    // Four sequences of 4 tokens: 2 query heads x 64 pairs x (4 x 4 + 3); the queries and the
    // output 16 x 8 floats, the keys and values 16 x 4 each.
    assert_eq!(op.flops, 2 * 64 * (4 * 4 + 3));
    assert_eq!(op.bytes, 4 * (2 * 16 * 8 + 2 * 16 * 4));
}

/// `g` finished, with random weights uploaded to a capture device, and lowered for a bucket of
/// 16 tokens in 4 sequences.
fn lowered(g: GraphBuilder) -> (switchyard_core::Graph, Capture, switchyard_capture::CapturePlan) {
    let g = g.finish().unwrap();
    let cap = Capture::new();
    let w = cap.upload(&testkit::random_weights(&g, 1).tensors(), &g).unwrap();
    let plan = cap.lower(&w, &g, Bucket::new(16, 4, 0)).unwrap();
    (g, cap, plan)
}
