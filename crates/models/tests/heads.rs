//! Token-classification and SPLADE heads on tiny random checkpoints, against transformers.
//!
//! `fixtures/make_fixtures.py` recorded, per sentence, the token classifiers' logits at every
//! token with each token's word index, and the masked-language models' SPLADE vectors
//! (`max over tokens of log(1 + relu(logits))`), all without padding.

mod common;

use common::{expected, rows, strings, tiny, worst};
use switchyard_core::{Buckets, Reference};
use switchyard_models::{Marking, Model, Runner, Task};

/// Logits and weights of about 1: 1e-5 absolute is f32 accumulation over a few hundred terms
/// with room to spare (the worst seen is about 1e-6).
const TOL: f64 = 1e-5;

const TOKEN_CLASSIFIERS: [&str; 9] = [
    "bert-token-classifier",
    "roberta-token-classifier",
    "distilbert-token-classifier",
    "mpnet-token-classifier",
    "electra-token-classifier",
    "albert-token-classifier",
    "modernbert-token-classifier",
    "deberta-token-classifier",
    "nomic-token-classifier",
];

/// The positions transformers' word indices give: each word's first token, or every token that
/// belongs to a word.
fn positions(words: &serde_json::Value, marking: Marking) -> Vec<usize> {
    let words: Vec<Option<u64>> = words.as_array().unwrap().iter().map(|w| w.as_u64()).collect();
    (0..words.len())
        .filter(|&i| {
            words[i].is_some()
                && (marking == Marking::EveryToken || i == 0 || words[i - 1] != words[i])
        })
        .collect()
}

#[test]
fn token_classifiers_match_transformers_at_first_sub_tokens_and_every_token() {
    for name in TOKEN_CLASSIFIERS {
        let v = expected(name);
        let sentences = strings(&v["sentences"]);
        let model = Model::load(&tiny(name)).unwrap();
        let Task::ClassifyTokens { labels } = model.task() else {
            panic!("{name}: {:?}", model.task())
        };
        assert_eq!(labels, &["O", "B-THING", "I-THING", "B-ACT", "I-ACT"], "{name}");
        let mut run = Runner::new(model, switchyard_flex::flex(), Buckets::default()).unwrap();
        let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
        for marking in [Marking::FirstSubToken, Marking::EveryToken] {
            let got = run.classify_tokens(&texts, marking, |_| {}).unwrap();
            for (i, tokens) in got.iter().enumerate() {
                let want = rows(&v["logits"][i]);
                let at: Vec<usize> = tokens.iter().map(|t| t.position as usize).collect();
                assert_eq!(at, positions(&v["words"][i], marking), "{name} {marking:?}: {i}");
                for t in tokens {
                    let w = worst(&t.logits, &want[t.position as usize]);
                    assert!(w <= TOL, "{name} {marking:?}: sentence {i}: difference {w}");
                }
            }
        }
    }
}

/// Words split into several tokens are labelled once, and their span covers the whole word.
#[test]
fn first_sub_token_spans_cover_whole_words() {
    let model = Model::load(&tiny("bert-token-classifier")).unwrap();
    let mut run = Runner::new(model, Reference, Buckets::default()).unwrap();
    let text = "cats sat on mats";
    let mut words = |marking| -> Vec<String> {
        run.classify_tokens(&[text], marking, |_| {}).unwrap()[0]
            .iter()
            .map(|t| text[t.span.0..t.span.1].to_owned())
            .collect()
    };
    assert_eq!(words(Marking::FirstSubToken), ["cats", "sat", "on", "mats"]);
    assert_eq!(words(Marking::EveryToken), ["cat", "s", "sat", "on", "mat", "s"]);
}

#[test]
fn splade_heads_match_transformers_tied_and_untied() {
    for name in
        ["bert-splade", "roberta-splade", "distilbert-splade", "mpnet-splade", "modernbert-splade"]
    {
        let v = expected(name);
        let sentences = strings(&v["sentences"]);
        let want = rows(&v["weights"]);
        let model = Model::load(&tiny(name)).unwrap();
        assert_eq!(model.task(), &Task::Sparse, "{name}");
        let decoders =
            model.graph().weights.iter().filter(|w| w.name.ends_with("decoder.weight")).count();
        // Only RoBERTa's fixture unties its decoder; the others read the word embeddings.
        assert_eq!(decoders, usize::from(name == "roberta-splade"), "{name}");
        let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
        let mut run = Runner::new(model, switchyard_flex::flex(), Buckets::default()).unwrap();
        let got = run.sparse(&texts, |_| {}).unwrap();
        for (i, (terms, want)) in got.iter().zip(&want).enumerate() {
            let mut dense = vec![0.0f32; want.len()];
            for &(id, w) in terms {
                dense[id as usize] = w;
            }
            let d = worst(&dense, want);
            assert!(d <= TOL, "{name}: sentence {i}: difference {d}");
            assert!(terms.iter().all(|&(_, w)| w > 0.0), "{name}: only non-zero terms");
            assert!(terms.windows(2).all(|p| p[0].1 >= p[1].1), "{name}: heaviest first");
            let nonzero = want.iter().filter(|&&w| w > TOL).count();
            assert!(terms.len() >= nonzero && nonzero > 0, "{name}: {} terms", terms.len());
        }
    }
}

/// bert-splade as a sentence-transformers sparse encoder whose `SpladePooling` has
/// `pooling_strategy` `strategy` and `activation_function` `act`, in a fresh folder.
fn splade_pooled(strategy: &str, act: &str) -> std::path::PathBuf {
    let tag = format!("{strategy}-{act}-{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("switchyard-splade-pooling-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("1_SpladePooling")).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(tiny("bert-splade").join(f), dir.join(f)).unwrap();
    }
    let st = "sentence_transformers.sparse_encoder.models";
    let modules = serde_json::json!([
        {"idx": 0, "name": "0", "path": "", "type": format!("{st}.MLMTransformer")},
        {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": format!("{st}.SpladePooling")},
    ]);
    std::fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
    let pooling = serde_json::json!({"pooling_strategy": strategy, "activation_function": act});
    std::fs::write(dir.join("1_SpladePooling/config.json"), pooling.to_string()).unwrap();
    dir
}

#[test]
fn splade_pooling_matches_sentence_transformers_for_each_strategy_and_activation() {
    // tiny/bert-splade/pooling.json: sentence-transformers' SparseEncoder's weights.
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tiny("bert-splade").join("pooling.json")).unwrap(),
    )
    .unwrap();
    let sentences = strings(&v["sentences"]);
    let texts: Vec<&str> = sentences.iter().map(String::as_str).collect();
    for strategy in ["max", "sum"] {
        for act in ["relu", "log1p_relu"] {
            let what = format!("{strategy} {act}");
            let dir = splade_pooled(strategy, act);
            let model = Model::load(&dir).unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            let mut run = Runner::new(model, switchyard_flex::flex(), Buckets::default()).unwrap();
            let got = run.sparse(&texts, |_| {}).unwrap();
            for (i, (terms, want)) in got.iter().zip(rows(&v["weights"][&what])).enumerate() {
                let mut dense = vec![0.0f32; want.len()];
                for &(id, w) in terms {
                    dense[id as usize] = w;
                }
                // A sum adds a token's weight, each within TOL, for each of a sentence's tokens
                // (under 20): the bound scales with the largest weight, up to about 18.
                let scale = want.iter().fold(1.0f64, |m, w| m.max(w.abs()));
                let d = worst(&dense, &want);
                assert!(d <= TOL * scale, "{what}: sentence {i}: difference {d}");
                assert!(want.iter().any(|&w| w > 0.1), "{what}: sentence {i}: weights to compare");
            }
        }
    }
}

#[test]
fn a_runner_refuses_what_its_model_does_not_compute() {
    let model = Model::load(&tiny("bert-splade")).unwrap();
    let mut run = Runner::new(model, Reference, Buckets::default()).unwrap();
    let e = run.embed(&["a"], |_| {}).unwrap_err().to_string();
    assert!(e.contains("is a sparse (SPLADE) encoder, not an embedding model"), "{e}");
    let e = run.classify_tokens(&["a"], Marking::EveryToken, |_| {}).unwrap_err().to_string();
    assert!(e.contains("not a token classifier"), "{e}");

    let model = Model::load(&tiny("bert-token-classifier")).unwrap();
    let mut run = Runner::new(model, Reference, Buckets::default()).unwrap();
    let e = run.sparse(&["a"], |_| {}).unwrap_err().to_string();
    assert!(e.contains("is a token classifier, not a sparse (SPLADE) encoder"), "{e}");
}
