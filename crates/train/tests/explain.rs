//! Integrated gradients: the attributions add up to the output's change (completeness), the
//! error shrinks as the midpoint rule's `1 / steps^2`, and a token that cannot reach the output
//! gets exactly zero.

use std::path::{Path, PathBuf};

use burn_flex::{Flex, FlexDevice};
use switchyard_core::{Act, Caps, DeviceKind, GraphBuilder, Op, PoolMode, Shape};
use switchyard_models::scores::Similarity;
use switchyard_models::{Encoded, Model};
use switchyard_train::Graded;
use switchyard_train::explain::{Target, integrated_gradients};

fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny").join(name)
}

fn caps() -> Caps {
    Caps::new("flex", "burn-flex under autodiff", DeviceKind::Cpu)
}

fn graded(model: &Model) -> Graded<Flex> {
    Graded::of_model(FlexDevice, caps(), model).unwrap()
}

/// Completeness: `|sum - (F(x) - F(x'))| <= 1e-3 |F(x) - F(x')|` at 64 steps, where the midpoint
/// rule's error on these tiny models measures 2.6e-5 to 4.6e-4 of the change (DeBERTa's the
/// largest); and the error at 64 steps is below the error at 4 (measured 250 to 700 times, as
/// `1 / steps^2` predicts). The exception is the Manhattan similarity, which is not smooth
/// (below).
#[test]
fn attributions_add_up_to_the_change_of_each_kind_of_output() {
    let classifier = Model::load(&tiny("bert-classifier")).unwrap();
    let cross = Model::load(&tiny("bert-cross-encoder")).unwrap();
    let embedder = Model::load(&tiny("bert")).unwrap();
    // Disentangled attention, its position tables computed on the tape.
    let deberta = Model::load(&tiny("deberta-classifier")).unwrap();
    let fox = "the quick brown fox jumps over the lazy dog";
    let text = classifier.tokenizer().encode(fox).unwrap();
    let dtext = deberta.tokenizer().encode(fox).unwrap();
    let pair = cross.tokenizer().encode_pair("the quick fox", "a brown fox jumps").unwrap();
    let (a, b) = (
        embedder.tokenizer().encode("a man is eating food").unwrap(),
        embedder.tokenizer().encode("the man eats").unwrap(),
    );
    let mut cases: Vec<(&Model, Vec<&Encoded>, Target)> = vec![
        (&classifier, vec![&text], Target::Logit(2)),
        (&cross, vec![&pair], Target::Logit(0)),
        (&deberta, vec![&dtext], Target::Logit(1)),
    ];
    for s in Similarity::ALL {
        cases.push((&embedder, vec![&a, &b], Target::Similarity(s)));
    }
    for (model, inputs, target) in cases {
        let g = graded(model);
        let fine = integrated_gradients(&g, &inputs, target, 64, Some(0)).unwrap();
        let coarse = integrated_gradients(&g, &inputs, target, 4, Some(0)).unwrap();
        let change = (fine.value - fine.baseline).abs();
        assert!(change > 1e-3, "{target:?}: the output must move for the test to mean anything");
        // Manhattan's `|a_i - b_i|` has a kink wherever a coordinate of `a - b` changes sign on
        // the path; the integrand jumps there, and the midpoint rule's error falls as
        // `1 / steps` instead (measured 1.3e-3 of the change, 61 times less than at 4 steps).
        let bound = if target == Target::Similarity(Similarity::Manhattan) { 1e-2 } else { 1e-3 };
        assert!(
            fine.error <= bound * change,
            "{target:?}: error {} for a change of {change}",
            fine.error
        );
        assert!(
            fine.error < coarse.error,
            "{target:?}: {} at 64 steps, {} at 4",
            fine.error,
            coarse.error
        );
        for (tokens, e) in fine.inputs.iter().zip(&inputs) {
            assert_eq!(tokens.len(), e.ids.len());
            for t in tokens.iter().filter(|t| t.special) {
                assert_eq!(
                    t.attribution, 0.0,
                    "{target:?}: special token `{}` keeps its embedding",
                    t.token
                );
            }
            assert!(tokens.iter().any(|t| t.attribution != 0.0), "{target:?}");
        }
        let words: f32 = fine.words().iter().flatten().map(|w| w.attribution).sum();
        let tokens: f32 = fine.inputs.iter().flatten().map(|t| t.attribution).sum();
        assert!((words - tokens).abs() <= 1e-5 * (1.0 + tokens.abs()), "words sum their tokens");
    }
}

/// One layer of attention within a window of one token, pooled at the first token: tokens 2 and
/// later cannot reach the output, so they get exactly zero, while tokens 0 and 1 do not.
#[test]
fn a_token_that_cannot_reach_the_output_gets_zero() {
    let mut g = GraphBuilder::new();
    let table = g.weight("word", &[8, 4]);
    let head = g.weight("head.weight", &[2, 4]);
    let x = g.op(Shape::tokens(4), |out| Op::Embed { table, scale: 1.0, out });
    let a = g.op(Shape::tokens(4), |out| Op::Attention {
        q: x,
        k: x,
        v: x,
        heads: 1,
        kv_heads: 1,
        head_dim: 4,
        scale: 0.5,
        window: Some(1),
        causal: false,
        position_bias: None,
        out,
    });
    let cls = g.op(Shape::seqs(4), |out| Op::Pool { x: a, mode: PoolMode::Cls, out });
    let y = g.op(Shape::seqs(2), |out| Op::Linear {
        x: cls,
        weight: head,
        bias: None,
        act: Act::Identity,
        residual: None,
        out,
    });
    g.output("logits", y);
    let graph = g.finish().unwrap();
    let weights = switchyard_core::testkit::random_weights(&graph, 3);
    let graded = Graded::<Flex>::new(FlexDevice, caps(), graph, &weights.tensors()).unwrap();
    let n = 6;
    let input = Encoded {
        ids: (1..=n as u32).collect(),
        types: vec![0; n],
        tokens: (1..=n).map(|i| format!("t{i}")).collect(),
        words: (0..n as u32).map(Some).collect(),
        offsets: (0..n).map(|i| (3 * i, 3 * i + 2)).collect(),
        special: vec![false; n],
    };
    let e = integrated_gradients(&graded, &[&input], Target::Logit(1), 16, Some(0)).unwrap();
    let a: Vec<f32> = e.inputs[0].iter().map(|t| t.attribution).collect();
    assert!(a[0] != 0.0 && a[1] != 0.0, "{a:?}");
    assert!(a[2..].iter().all(|&x| x == 0.0), "{a:?}");
}

#[test]
fn mistaken_requests_are_errors() {
    let model = Model::load(&tiny("bert-classifier")).unwrap();
    let g = graded(&model);
    let t = model.tokenizer().encode("the dog").unwrap();
    let e = integrated_gradients(&g, &[&t], Target::Logit(7), 8, Some(0)).unwrap_err();
    assert!(e.to_string().contains("label 7 of a model with 3 labels"), "{e}");
    let e = integrated_gradients(&g, &[&t], Target::Similarity(Similarity::Cosine), 8, Some(0))
        .unwrap_err();
    assert!(e.to_string().contains("explains 2 inputs, not 1"), "{e}");
    let e = integrated_gradients(&g, &[&t], Target::Logit(0), 0, Some(0)).unwrap_err();
    assert!(e.to_string().contains("at least one step"), "{e}");
}
