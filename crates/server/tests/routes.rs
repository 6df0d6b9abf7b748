//! Every route over loopback, on the tiny checkpoints, against the runner's own answers; and
//! every error code with its body.

mod common;

use std::sync::Arc;

use base64::Engine as _;
use common::{
    Control, PROMPTS, Running, floats, held_model, held_replica_at, runner, with_prompts, worst,
};
use serde_json::json;
use switchyard_models::{Marking, scores};
use switchyard_server::{Config, DefaultPrompt, ModelSpec, Server};

/// Answers within 1e-6 of the runner's: the same backend on the same batch rows; only the
/// server's normalisation (one division per value) stands between them.
const TOL: f32 = 1e-6;

/// A server with one model per task of the tiny BERT fixtures, embedder first.
fn every_task(config: Config) -> Running {
    let c = Arc::new(Control::default());
    let models = [
        ("embedder", "bert"),
        ("reranker", "bert-cross-encoder"),
        ("classifier", "bert-classifier"),
        ("tagger", "bert-token-classifier"),
        ("splade", "bert-splade"),
    ];
    let specs = models.iter().map(|(name, fixture)| held_model(name, fixture, &[&c])).collect();
    Running::start(config, specs)
}

const TEXTS: [&str; 3] = ["the man is eating food", "a cat sat on the mat", "quick brown fox"];

#[test]
fn embed_gives_the_runners_vectors_normalised_or_not() {
    let s = every_task(Config::default());
    let want = runner("bert").embed(&TEXTS, |_| {}).unwrap();
    let raw = s.post("/embed", &json!({ "inputs": TEXTS, "normalize": false }));
    assert_eq!(raw.status, 200, "{:?}", raw.body);
    for (got, want) in raw.body.as_array().unwrap().iter().zip(&want) {
        assert!(worst(&floats(got), want) <= TOL);
    }
    // The default normalises; a single string is a batch of one.
    let unit = s.post("/embed", &json!({ "inputs": TEXTS[0] }));
    let v = floats(&unit.body[0]);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    assert!(scores::cosine(&v, &want[0]) > 0.99999);
    // The timing headers text-embeddings-inference sends.
    for h in ["x-compute-time", "x-queue-time", "x-inference-time", "x-tokenization-time"] {
        assert!(
            unit.header(h).is_some_and(|v| v.parse::<u64>().is_ok()),
            "{h}: {:?}",
            unit.headers
        );
    }
    assert_eq!(
        unit.header("x-compute-tokens"),
        Some(&*runner("bert").model().tokenizer().encode(TEXTS[0]).unwrap().ids.len().to_string())
    );
}

#[test]
fn embed_cuts_to_the_dimensions_asked_for_and_normalises_after_the_cut() {
    let s = every_task(Config::default());
    let want = runner("bert").embed(&TEXTS, |_| {}).unwrap();
    let post = |body: serde_json::Value| {
        let r = s.post("/embed", &body);
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body.as_array().unwrap().iter().map(floats).collect::<Vec<_>>()
    };
    let cut = post(json!({ "inputs": TEXTS, "dimensions": 8 }));
    let raw = post(json!({ "inputs": TEXTS, "dimensions": 8, "normalize": false }));
    for ((cut, raw), want) in cut.iter().zip(&raw).zip(&want) {
        assert_eq!(raw.len(), 8);
        assert!(worst(raw, &want[..8]) <= TOL, "the first dimensions, as they are");
        let norm = want[..8].iter().map(|x| x * x).sum::<f32>().sqrt();
        let unit: Vec<f32> = want[..8].iter().map(|x| x / norm).collect();
        assert!(worst(cut, &unit) <= TOL, "normalised after the cut");
    }
    // A model that normalises its whole embedding normalises the cut one again.
    let dir = std::env::temp_dir().join(format!("switchyard-server-unit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mean = r#"{"pooling_mode": "mean"}"#;
    switchyard_models::sentence_transformers_copy(&common::tiny("bert"), &dir, mean).unwrap();
    let modules = dir.join("modules.json");
    let mut list: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&modules).unwrap()).unwrap();
    let normalize = json!({"idx": 2, "name": "2", "path": "2_Normalize",
        "type": "sentence_transformers.models.Normalize"});
    list.as_array_mut().unwrap().push(normalize);
    std::fs::write(&modules, list.to_string()).unwrap();
    let c = Arc::new(Control::default());
    let replicas = vec![held_replica_at(dir, "held:0", &c)];
    let unit = Running::start(Config::default(), vec![ModelSpec { name: "unit".into(), replicas }]);
    let r = unit.post("/embed", &json!({ "inputs": TEXTS[0], "dimensions": 8 }));
    let v = floats(&r.body[0]);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((v.len(), (norm - 1.0).abs() < 1e-5) == (8, true), "{v:?}: norm {norm}");
    drop(unit);
    // Outside the model's width, and on routes with nothing to cut, refused.
    for (route, body) in [
        ("/embed", json!({ "inputs": "x", "dimensions": 0 })),
        ("/embed", json!({ "inputs": "x", "dimensions": 33 })),
        ("/embed_all", json!({ "inputs": "x", "dimensions": 4 })),
        ("/embed_sparse?model=splade", json!({ "inputs": "x", "dimensions": 4 })),
    ] {
        let r = s.post(route, &body);
        assert_eq!(r.status, 422, "{route} {body}: {:?}", r.body);
    }
}

#[test]
fn prompts_go_before_each_text_as_the_model_names_them() {
    let c = Arc::new(Control::default());
    let replicas = vec![held_replica_at(with_prompts("routes"), "held:0", &c)];
    let s = Running::start(Config::default(), vec![ModelSpec { name: "e5".into(), replicas }]);
    // The same encoder without prompts, on texts with each prompt written before them.
    let mut plain = runner("bert");
    let mut with = |prompt: &str| {
        let texts = TEXTS.map(|t| format!("{prompt}{t}"));
        (plain.embed(&texts.each_ref().map(String::as_str), |_| {}).unwrap(), texts)
    };
    let (query, query_texts) = with(PROMPTS[0].1);
    let (passage, _) = with(PROMPTS[1].1);
    let close = |got: &serde_json::Value, want: &[Vec<f32>]| {
        let got = got.as_array().unwrap();
        assert_eq!(got.len(), want.len());
        got.iter().zip(want).all(|(g, w)| worst(&floats(g), w) <= TOL)
    };

    // The default prompt, `query`, unless the request names another.
    let r = s.post("/embed", &json!({ "inputs": TEXTS, "normalize": false }));
    assert!(close(&r.body, &query), "{:?}", r.body);
    let named = json!({ "inputs": TEXTS, "normalize": false, "prompt_name": "passage" });
    let r = s.post("/embed", &named);
    assert!(close(&r.body, &passage), "{:?}", r.body);
    let r = s.post("/embed_all", &json!({ "inputs": TEXTS[0], "prompt_name": "passage" }));
    let tokens = plain.model().tokenizer().encode(&format!("{}{}", PROMPTS[1].1, TEXTS[0]));
    assert_eq!(r.body[0].as_array().unwrap().len(), tokens.unwrap().ids.len());

    // OpenAI's API names no prompt: the default applies.
    let r = s.post("/v1/embeddings", &json!({ "model": "e5", "input": TEXTS[1] }));
    let v = floats(&r.body["data"][0]["embedding"]);
    assert!(scores::cosine(&v, &query[1]) > 0.99999, "{:?}", r.body);

    // /similarity puts it before the source sentence and the others.
    let body = json!({
        "inputs": { "source_sentence": TEXTS[0], "sentences": [TEXTS[1], TEXTS[2]] },
        "prompt_name": "passage"
    });
    let sims = floats(&s.post("/similarity", &body).body);
    let want = [scores::cosine(&passage[0], &passage[1]), scores::cosine(&passage[0], &passage[2])];
    assert!(worst(&sims, &want) <= 1e-5, "{sims:?} {want:?}");

    // /tokenize shows the tokens the model sees.
    let r = s.post("/tokenize", &json!({ "inputs": TEXTS[0] }));
    let ids: Vec<u64> =
        r.body[0].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    let want = plain.model().tokenizer().encode(&query_texts[0]).unwrap().ids;
    assert_eq!(ids, want.iter().map(|&i| u64::from(i)).collect::<Vec<_>>());

    // A name the model does not have is refused, saying which it has; an empty input is still
    // an empty input.
    for path in ["/embed", "/embed_all", "/tokenize"] {
        let r = s.post(path, &json!({ "inputs": "x", "prompt_name": "doc" }));
        assert_eq!(r.status, 422, "{path}: {:?}", r.body);
        let e = r.body["error"].as_str().unwrap();
        assert!(e.contains(r#"no prompt named "doc"; its prompts: passage, query"#), "{e}");
    }
    assert_eq!(s.post("/embed", &json!({ "inputs": "" })).status, 422);
}

#[test]
fn the_servers_default_prompt_goes_before_requests_that_name_none() {
    let e5 = |tag: &str| {
        let c = Arc::new(Control::default());
        ModelSpec {
            name: "e5".into(),
            replicas: vec![held_replica_at(with_prompts(tag), "held:0", &c)],
        }
    };
    let config = |d: DefaultPrompt| Config { default_prompt: d, ..Config::default() };
    let mut plain = runner("bert");
    let mut with = |prompt: &str| {
        let texts = TEXTS.map(|t| format!("{prompt}{t}"));
        plain.embed(&texts.each_ref().map(String::as_str), |_| {}).unwrap()
    };
    let (bare, query, passage) = (with(""), with(PROMPTS[0].1), with(PROMPTS[1].1));
    let embed = |s: &Running, body: serde_json::Value| {
        let r = s.post("/embed", &body);
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body.as_array().unwrap().iter().map(floats).collect::<Vec<_>>()
    };
    let close = |got: &[Vec<f32>], want: &[Vec<f32>]| {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| worst(g, w) <= TOL)
    };

    // `passage` instead of the model's `query`, where a request names none; a name still wins.
    let s = Running::start(config(DefaultPrompt::Named("passage".into())), vec![e5("named")]);
    let got = embed(&s, json!({ "inputs": TEXTS, "normalize": false }));
    assert!(close(&got, &passage), "{got:?}");
    let got = embed(&s, json!({ "inputs": TEXTS, "normalize": false, "prompt_name": "query" }));
    assert!(close(&got, &query), "{got:?}");
    let r = s.post("/v1/embeddings", &json!({ "input": TEXTS[1] }));
    let v = floats(&r.body["data"][0]["embedding"]);
    assert!(scores::cosine(&v, &passage[1]) > 0.99999, "{:?}", r.body);
    // /info says which prompts each model has, and which goes before a request naming none.
    let info = s.get("/info").body;
    assert_eq!(info["models"][0]["default_prompt"], json!(PROMPTS[1].1), "{info}");
    assert_eq!(info["models"][0]["prompts"]["query"], json!(PROMPTS[0].1), "{info}");
    drop(s);

    // A text, empty for none even where the model has a default.
    let s = Running::start(config(DefaultPrompt::Text(String::new())), vec![e5("none")]);
    let got = embed(&s, json!({ "inputs": TEXTS, "normalize": false }));
    assert!(close(&got, &bare), "{got:?}");
    assert_eq!(s.get("/info").body["models"][0]["default_prompt"], json!(""));
    drop(s);

    // Refused at start: a name a model does not have, and a default with no model to take it.
    let e = Server::new(config(DefaultPrompt::Named("doc".into())), vec![e5("doc")]).err();
    let e = e.expect("an unknown default prompt is refused").to_string();
    assert!(
        e.contains(
            r#"model "e5": the model has no prompt named "doc"; its prompts: passage, query"#
        ),
        "{e}"
    );
    let c = Arc::new(Control::default());
    let reranker = vec![held_model("reranker", "bert-cross-encoder", &[&c])];
    let e = Server::new(config(DefaultPrompt::Text("query: ".into())), reranker).err();
    let e = e.expect("a default prompt no model takes is refused").to_string();
    assert!(e.contains("none is served"), "{e}");
}

#[test]
fn openai_embeddings_take_texts_or_token_ids_and_give_floats_or_base64() {
    let s = every_task(Config::default());
    let r = s.post("/v1/embeddings", &json!({ "model": "embedder", "input": TEXTS }));
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        (r.body["object"].as_str(), r.body["model"].as_str()),
        (Some("list"), Some("embedder"))
    );
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    let tokenizer = runner("bert");
    let tokenizer = tokenizer.model().tokenizer();
    let ids: Vec<Vec<u32>> = TEXTS.iter().map(|t| tokenizer.encode(t).unwrap().ids).collect();
    let total: usize = ids.iter().map(Vec::len).sum();
    assert_eq!(r.body["usage"]["prompt_tokens"], json!(total));
    let first = floats(&data[0]["embedding"]);

    // Token ids give what their text gives; base64 is the same floats, little-endian.
    let by_ids = s.post("/v1/embeddings", &json!({ "input": ids[0], "encoding_format": "base64" }));
    assert_eq!(by_ids.status, 200, "{:?}", by_ids.body);
    let b64 = by_ids.body["data"][0]["embedding"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
    let decoded: Vec<f32> =
        bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(decoded, first);
    let lists = s.post("/v1/embeddings", &json!({ "input": [ids[1], ids[2]] }));
    assert_eq!(floats(&lists.body["data"][1]["embedding"]), floats(&data[2]["embedding"]));

    // `dimensions` cuts and renormalises.
    let cut = s.post("/v1/embeddings", &json!({ "input": TEXTS[0], "dimensions": 4 }));
    let v = floats(&cut.body["data"][0]["embedding"]);
    let norm = first[..4].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(worst(&v, &first[..4].iter().map(|x| x / norm).collect::<Vec<_>>()) <= TOL);

    let models = s.get("/v1/models");
    let ids: Vec<&str> =
        models.body["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["embedder", "reranker", "classifier", "tagger", "splade"]);

    // Errors come in OpenAI's shape.
    for (body, status) in [
        (json!({ "input": [] }), 422),
        (json!({ "input": [1.5] }), 422),
        (json!({ "input": [999_999] }), 422),
        (json!({ "input": "x", "model": "nope" }), 404),
        (json!({ "input": "x", "model": "reranker" }), 400),
        (json!({ "input": "x", "dimensions": 0 }), 422),
        (json!({ "input": "x", "dimensions": 33 }), 422),
        (json!({ "input": "x", "encoding_format": "hex" }), 422),
    ] {
        let r = s.post("/v1/embeddings", &body);
        assert_eq!(r.status, status, "{body}: {:?}", r.body);
        assert!(
            r.body["error"]["message"].is_string() && r.body["error"]["type"].is_string(),
            "{:?}",
            r.body
        );
    }
}

#[test]
fn rerank_orders_texts_by_the_cross_encoders_sigmoid() {
    let s = every_task(Config::default());
    let query = "what is the man eating";
    let logits = runner("bert-cross-encoder").classify_pairs(query, &TEXTS, |_| {}).unwrap();
    let r = s.post(
        "/rerank?model=reranker",
        &json!({ "query": query, "texts": TEXTS, "return_text": true }),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let ranked = r.body.as_array().unwrap();
    let order: Vec<usize> = ranked.iter().map(|x| x["index"].as_u64().unwrap() as usize).collect();
    let want: Vec<f32> = logits.iter().map(|l| l[0]).collect();
    assert_eq!(order, scores::ranking(&want));
    for x in ranked {
        let i = x["index"].as_u64().unwrap() as usize;
        assert!((x["score"].as_f64().unwrap() as f32 - scores::sigmoid(want[i])).abs() <= TOL);
        assert_eq!(x["text"], json!(TEXTS[i]));
    }
    let raw = s.post(
        "/rerank?model=reranker",
        &json!({ "query": query, "texts": TEXTS, "raw_scores": true }),
    );
    let top = &raw.body[0];
    assert!((top["score"].as_f64().unwrap() as f32 - want[order[0]]).abs() <= TOL);
    assert!(top.get("text").is_none());
    // The embedder is no reranker.
    assert_eq!(s.post("/rerank", &json!({ "query": query, "texts": TEXTS })).status, 400);
}

#[test]
fn similarity_compares_by_the_models_function() {
    let dir = std::env::temp_dir().join(format!("switchyard-server-dot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mean = r#"{"pooling_mode": "mean"}"#;
    switchyard_models::sentence_transformers_copy(&common::tiny("bert"), &dir, mean).unwrap();
    let config = json!({ "similarity_fn_name": "dot" }).to_string();
    std::fs::write(dir.join("config_sentence_transformers.json"), config).unwrap();
    let c = Arc::new(Control::default());
    let replicas = vec![held_replica_at(dir, "held:0", &c)];
    let s = Running::start(Config::default(), vec![ModelSpec { name: "dot".into(), replicas }]);
    let want = runner("bert").embed(&TEXTS, |_| {}).unwrap();
    let body = json!({ "inputs": { "source_sentence": TEXTS[0], "sentences": &TEXTS[1..] } });
    let r = s.post("/similarity", &body);
    assert_eq!(r.status, 200, "{:?}", r.body);
    let dots: Vec<f32> =
        want[1..].iter().map(|v| scores::Similarity::Dot.of(&want[0], v)).collect();
    // The same backend on the same rows as the runner's; the products (tens) differ in their
    // last bits at most.
    assert!(worst(&floats(&r.body), &dots) <= 1e-5, "{:?} vs {dots:?}", r.body);
    assert_eq!(s.get("/info").body["models"][0]["similarity_fn_name"], json!("dot"));
}

#[test]
fn a_classifiers_prompt_goes_before_each_first_text() {
    let prompts = json!({ "query": "the sea: ", "web": "some long text: " });
    let copy = |fixture: &str| {
        let dir = std::env::temp_dir()
            .join(format!("switchyard-server-{fixture}-prompts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (from, p) = (common::tiny(fixture), prompts.clone());
        switchyard_models::cross_encoder_copy(&from, &dir, p, Some("query")).unwrap();
        dir
    };
    let c = Arc::new(Control::default());
    let spec = |name: &str, fixture: &str| ModelSpec {
        name: name.into(),
        replicas: vec![held_replica_at(copy(fixture), "held:0", &c)],
    };
    let models = vec![
        spec("reranker", "bert-cross-encoder"),
        spec("classifier", "bert-classifier"),
        held_model("tagger", "bert-token-classifier", &[&c]),
    ];
    let s = Running::start(Config::default(), models);
    let query = "what is the man eating";
    // The models without prompts, on texts with the prompt written before the first: the
    // model's default, or the one a request names.
    for (name, text) in [(None, "the sea: "), (Some("web"), "some long text: ")] {
        let logits = runner("bert-cross-encoder")
            .classify_pairs(&format!("{text}{query}"), &TEXTS, |_| {})
            .unwrap();
        let body =
            json!({ "query": query, "texts": TEXTS, "raw_scores": true, "prompt_name": name });
        let r = s.post("/rerank?model=reranker", &body);
        assert_eq!(r.status, 200, "{:?}", r.body);
        for x in r.body.as_array().unwrap() {
            let i = x["index"].as_u64().unwrap() as usize;
            assert!((x["score"].as_f64().unwrap() as f32 - logits[i][0]).abs() <= TOL, "{x}");
        }
    }
    let mut classifier = runner("bert-classifier");
    let prompted = format!("the sea: {}", TEXTS[0]);
    let one = classifier.classify(&[&prompted], |_| {}).unwrap().remove(0);
    let pair = classifier.classify_pairs(&prompted, &[TEXTS[1]], |_| {}).unwrap().remove(0);
    let r = s.post(
        "/predict?model=classifier",
        &json!({ "inputs": [[TEXTS[0]], [TEXTS[0], TEXTS[1]]], "raw_scores": true }),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let labels = classifier.model().task().labels().to_vec();
    for (got, want) in r.body.as_array().unwrap().iter().zip([one, pair]) {
        for x in got.as_array().unwrap() {
            let i = labels.iter().position(|l| *l == x["label"]).unwrap();
            assert!((x["score"].as_f64().unwrap() as f32 - want[i]).abs() <= TOL, "{x}");
        }
    }
    let named = s.post(
        "/predict?model=classifier",
        &json!({ "inputs": [TEXTS[0]], "raw_scores": true, "prompt_name": "web" }),
    );
    let web = classifier.classify(&[&format!("some long text: {}", TEXTS[0])], |_| {}).unwrap();
    for x in named.body.as_array().unwrap() {
        let i = labels.iter().position(|l| *l == x["label"]).unwrap();
        assert!((x["score"].as_f64().unwrap() as f32 - web[0][i]).abs() <= TOL, "{x}");
    }
    assert_eq!(s.get("/info").body["models"][0]["default_prompt"], json!("the sea: "));
    // A name the model does not have, and any name for a token classifier, are refused.
    let bad = json!({ "query": query, "texts": TEXTS, "prompt_name": "doc" });
    assert_eq!(s.post("/rerank?model=reranker", &bad).status, 422);
    let tagged = json!({ "inputs": TEXTS[0], "prompt_name": "web" });
    let r = s.post("/predict?model=tagger", &tagged);
    assert_eq!(r.status, 422, "{:?}", r.body);
}

#[test]
fn predict_labels_texts_pairs_and_words() {
    let s = every_task(Config::default());
    let mut classifier = runner("bert-classifier");
    let labels = classifier.model().task().labels().to_vec();
    let logits = classifier.classify(&TEXTS[..1], |_| {}).unwrap();
    let probs = scores::probabilities(&logits[0]);
    let single = s.post("/predict?model=classifier", &json!({ "inputs": TEXTS[0] }));
    assert_eq!(single.status, 200, "{:?}", single.body);
    let best = scores::best(&probs);
    assert_eq!(single.body[0]["label"], json!(labels[best.0]));
    assert!((single.body[0]["score"].as_f64().unwrap() as f32 - best.1).abs() <= TOL);
    assert_eq!(single.body.as_array().unwrap().len(), labels.len());

    // A batch of a text and a pair gives a list per input.
    let batch = s.post(
        "/predict?model=classifier",
        &json!({ "inputs": [[TEXTS[0]], [TEXTS[1], TEXTS[2]]] }),
    );
    assert_eq!(batch.status, 200, "{:?}", batch.body);
    assert_eq!(batch.body[0], single.body);
    assert_eq!(batch.body.as_array().unwrap().len(), 2);

    // A token classifier labels each word with its byte span.
    let text = "the quick brown fox jumps";
    let mut tagger = runner("bert-token-classifier");
    let want = tagger.classify_tokens(&[text], Marking::FirstSubToken, |_| {}).unwrap();
    let words = s.post("/predict?model=tagger", &json!({ "inputs": text }));
    assert_eq!(words.status, 200, "{:?}", words.body);
    let words = words.body.as_array().unwrap();
    assert_eq!(words.len(), want[0].len());
    for (w, t) in words.iter().zip(&want[0]) {
        let (start, end) = t.span;
        assert_eq!(
            (w["start"].as_u64(), w["end"].as_u64()),
            (Some(start as u64), Some(end as u64))
        );
        assert_eq!(w["text"], json!(&text[start..end]));
        let best = scores::best(&scores::probabilities(&t.logits));
        assert_eq!(w["label"], json!(tagger.model().task().labels()[best.0]));
    }
    let pairs = s.post("/predict?model=tagger", &json!({ "inputs": ["a", "b"] }));
    assert_eq!(pairs.status, 422);
    assert_eq!(
        s.post("/predict?model=classifier", &json!({ "inputs": ["a", "b", "c"] })).status,
        422
    );
}

#[test]
fn embed_sparse_gives_the_splade_terms() {
    let s = every_task(Config::default());
    let want = runner("bert-splade").sparse(&TEXTS[..1], |_| {}).unwrap();
    let r = s.post("/embed_sparse?model=splade", &json!({ "inputs": TEXTS[0] }));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let got: Vec<(u32, f32)> = r.body[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["index"].as_u64().unwrap() as u32, t["value"].as_f64().unwrap() as f32))
        .collect();
    assert_eq!(got.len(), want[0].len());
    for ((gi, gv), (wi, wv)) in got.iter().zip(&want[0]) {
        assert!(gi == wi && (gv - wv).abs() <= TOL);
    }
    assert_eq!(s.post("/embed_all?model=splade", &json!({ "inputs": "x" })).status, 400);
}

#[test]
fn tokenize_and_decode_round_trip() {
    let s = every_task(Config::default());
    let r = s.post("/tokenize", &json!({ "inputs": [TEXTS[0]] }));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let tokens = r.body[0].as_array().unwrap();
    assert_eq!(tokens.first().unwrap()["special"], json!(true));
    assert_eq!(tokens[1]["text"], json!("the"));
    assert_eq!((tokens[1]["start"].as_u64(), tokens[1]["stop"].as_u64()), (Some(0), Some(3)));
    let ids = |tokens: &serde_json::Value| -> Vec<u64> {
        tokens.as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect()
    };
    let bare = s.post("/tokenize", &json!({ "inputs": TEXTS[0], "add_special_tokens": false }));
    assert_eq!(bare.body[0].as_array().unwrap().len(), tokens.len() - 2);
    // (The tiny tokenizer does not mark [CLS] and [SEP] as special for decoding.)
    let text = s.post(
        "/decode",
        &json!({ "ids": [ids(&bare.body[0]), ids(&r.body[0])], "skip_special_tokens": false }),
    );
    assert_eq!(text.body, json!([TEXTS[0], format!("[CLS] {} [SEP]", TEXTS[0])]));
}

#[test]
fn info_and_health_describe_every_model() {
    let s = every_task(Config::default());
    let info = s.get("/info");
    assert_eq!(info.status, 200);
    assert_eq!(info.body["model_id"], json!("embedder"));
    assert_eq!(info.body["model_type"]["embedding"]["pooling"], json!("mean"));
    assert_eq!(info.body["max_input_length"], json!(64));
    assert_eq!(info.body["models"].as_array().unwrap().len(), 5);
    assert_eq!(
        info.body["models"][0]["devices"][0],
        json!({ "device": "held:0", "dtype": "float32", "healthy": true })
    );
    let reranker = s.get("/info?model=reranker");
    assert!(reranker.body["model_type"]["reranker"]["id2label"].is_object());
    let health = s.get("/health");
    assert_eq!((health.status, &health.body["status"]), (200, &json!("ok")));
    assert_eq!(s.get("/nowhere").status, 404);
}

#[test]
fn limits_and_bad_requests_get_their_codes_and_bodies() {
    let config = Config { max_client_batch_size: 4, payload_limit: 4096, ..Config::default() };
    let s = every_task(config);
    let long = "the ".repeat(100);
    for (path, body, status) in [
        ("/embed", json!({ "inputs": ["a", "b", "c", "d", "e"] }), 413),
        ("/embed", json!({ "inputs": long }), 413),
        ("/embed", json!({ "inputs": [] }), 422),
        ("/embed", json!({ "inputs": "" }), 422),
        ("/embed", json!({ "inputs": 7 }), 422),
        ("/embed", json!({ "text": "no inputs" }), 422),
        ("/embed", json!({ "inputs": "x", "prompt_name": "query" }), 422),
        ("/embed?model=nope", json!({ "inputs": "x" }), 404),
        ("/embed?model=tagger", json!({ "inputs": "x" }), 400),
        ("/embed", json!({ "inputs": "x".repeat(5000) }), 413),
    ] {
        let r = s.post(path, &body);
        assert_eq!(r.status, status, "{path} {body}: {:?}", r.body);
        assert!(r.body["error"].is_string() && r.body["error_type"].is_string(), "{:?}", r.body);
    }
    let malformed = s.post_raw("/embed", b"{\"inputs\": [\"a\",");
    assert_eq!(malformed.status, 422, "{:?}", malformed.body);
    // Truncation, asked for or on by default, takes what is otherwise refused.
    for direction in ["Right", "Left"] {
        let body = json!({ "inputs": long, "truncate": true, "truncation_direction": direction });
        assert_eq!(s.post("/embed", &body).status, 200);
    }
    let auto = every_task(Config { auto_truncate: true, ..Config::default() });
    assert_eq!(auto.post("/embed", &json!({ "inputs": long })).status, 200);
}

#[test]
fn an_api_key_guards_every_route_but_health() {
    let s = every_task(Config { api_key: Some("sesame".into()), ..Config::default() });
    let body = json!({ "inputs": "x" });
    let refused = s.post("/embed", &body);
    assert_eq!((refused.status, &refused.body["error_type"]), (401, &json!("Unauthorized")));
    assert_eq!(s.post_with_key("/embed", "sesamf", &body).status, 401);
    assert_eq!(s.post_with_key("/embed", "sesame", &body).status, 200);
    let openai = s.post("/v1/embeddings", &json!({ "input": "x" }));
    assert_eq!(openai.status, 401);
    assert_eq!(openai.body["error"]["type"], json!("authentication_error"));
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.get("/metrics").status, 401);
}

#[test]
fn openapi_describes_every_route_from_the_handlers() {
    let s = every_task(Config::default());
    let doc = s.get("/openapi.json");
    assert_eq!(doc.status, 200);
    let paths: Vec<&str> =
        doc.body["paths"].as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = vec![
        "/",
        "/embed",
        "/similarity",
        "/embed_sparse",
        "/embed_all",
        "/rerank",
        "/predict",
        "/tokenize",
        "/decode",
        "/info",
        "/health",
        "/metrics",
        "/openapi.json",
        "/v1/embeddings",
        "/v1/models",
    ];
    want.sort_unstable();
    let mut got = paths.clone();
    got.sort_unstable();
    assert_eq!(got, want);
    // Every documented route exists on the server.
    for path in paths {
        let methods = doc.body["paths"][path].as_object().unwrap();
        let status = if methods.contains_key("get") {
            s.get(path).status
        } else {
            s.post(path, &json!({})).status
        };
        assert_ne!(status, 404, "{path} is documented but not served");
    }
    // Request and response types are described, down to their fields.
    let schemas = &doc.body["components"]["schemas"];
    assert!(schemas["Truncate"]["properties"]["truncation_direction"].is_object(), "{schemas}");
    let embed = schemas["EmbedRequest"].to_string();
    assert!(embed.contains("#/components/schemas/Truncate") && embed.contains("inputs"), "{embed}");
    assert!(schemas["ErrorBody"]["properties"]["error_type"].is_object());
}

#[test]
fn cors_headers_are_sent_only_to_the_origins_allowed() {
    let preflight = |s: &Running, origin: &str| {
        let r = ureq::request("OPTIONS", &s.url("/embed"))
            .set("Origin", origin)
            .set("Access-Control-Request-Method", "POST")
            .call()
            .unwrap();
        r.header("access-control-allow-origin").map(str::to_owned)
    };
    let open = every_task(Config {
        cors_origins: vec!["https://app.example".into()],
        ..Config::default()
    });
    assert_eq!(preflight(&open, "https://app.example").as_deref(), Some("https://app.example"));
    assert_eq!(preflight(&open, "https://evil.example"), None);
    let closed = every_task(Config::default());
    let r =
        ureq::request("OPTIONS", &closed.url("/embed")).set("Origin", "https://app.example").call();
    let allowed = match r {
        Ok(r) | Err(ureq::Error::Status(_, r)) => {
            r.header("access-control-allow-origin").map(str::to_owned)
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(allowed, None);
}

#[test]
fn embed_all_gives_every_tokens_vector() {
    let s = every_task(Config::default());
    let r = s.post("/embed_all", &json!({ "inputs": TEXTS[..2] }));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let mut local = runner("bert");
    let pooled = local.embed(&TEXTS[..2], |_| {}).unwrap();
    for (i, states) in r.body.as_array().unwrap().iter().enumerate() {
        let rows: Vec<Vec<f32>> = states.as_array().unwrap().iter().map(floats).collect();
        let n = local.model().tokenizer().encode(TEXTS[i]).unwrap().ids.len();
        assert_eq!(rows.len(), n);
        // The tiny embedder mean-pools: the mean of its token vectors is its embedding.
        let mean: Vec<f32> =
            (0..rows[0].len()).map(|j| rows.iter().map(|r| r[j]).sum::<f32>() / n as f32).collect();
        assert!(worst(&mean, &pooled[i]) <= 1e-5);
    }
}
