//! `switchyard train` and `switchyard explain`, end to end on tiny fixture checkpoints.

#![cfg(feature = "train")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn switchyard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .env_remove("SWITCHYARD_DEVICE")
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

fn tiny(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../models/tests/fixtures/tiny")
        .join(name)
        .display()
        .to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("switchyard-cli-train-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const WORDS: [&str; 12] =
    ["the", "man", "is", "eating", "food", "quick", "brown", "fox", "sea", "text", "cat", "mat"];

#[test]
fn train_makes_a_classifier_that_classify_reads() {
    let dir = scratch("classify");
    let data = dir.join("train.jsonl");
    let lines: Vec<String> = (0..24)
        .map(|i| {
            let words: Vec<&str> = (0..4).map(|k| WORDS[(i * 5 + k * 3) % WORDS.len()]).collect();
            let label = if words.contains(&"fox") { "fox" } else { "other" };
            serde_json::json!({"text": words.join(" "), "label": label}).to_string()
        })
        .collect();
    std::fs::write(&data, lines.join("\n")).unwrap();
    let out = dir.join("out");
    let (d, o) = (data.to_str().unwrap(), out.to_str().unwrap());
    let r = switchyard(&[
        "train",
        "--model",
        &tiny("bert"),
        "--task",
        "classify",
        "--labels",
        "other,fox",
        "--data",
        d,
        "--eval",
        d,
        "--out",
        o,
        "--epochs",
        "8",
        "--lr",
        "3e-3",
        "--batch-size",
        "8",
        "--no-dropout",
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let summary: serde_json::Value = serde_json::from_str(text(&r.stdout).trim()).unwrap();
    assert_eq!(summary["steps"], 24);
    assert!(summary["last_loss"].as_f64() < summary["first_loss"].as_f64(), "{summary}");
    assert_eq!(summary["after"]["metrics"][0][0], "accuracy");
    let err = text(&r.stderr);
    assert!(
        err.contains("training: 24 steps, cross-entropy") && err.contains("eval before training"),
        "{err}"
    );
    assert!(!out.join("initial").exists(), "the head's starting point is removed after a run");
    let c = switchyard(&["classify", "--model", o, "the quick brown fox"]);
    assert!(c.status.success(), "{}", text(&c.stderr));
    let line: serde_json::Value = serde_json::from_str(text(&c.stdout).trim()).unwrap();
    assert_eq!(line["labels"], serde_json::json!(["other", "fox"]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn explain_prints_attributions_that_add_up() {
    let r = switchyard(&[
        "explain",
        "--model",
        &tiny("bert-classifier"),
        "--label",
        "positive",
        "the quick brown fox",
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let e: serde_json::Value = serde_json::from_str(text(&r.stdout).trim()).unwrap();
    assert_eq!(
        (e["target"].as_str().unwrap(), e["label"].as_str().unwrap()),
        ("logit of `positive`", "positive")
    );
    let words = e["inputs"][0]["words"].as_array().unwrap();
    assert_eq!(
        words.iter().map(|w| w["word"].as_str().unwrap()).collect::<Vec<_>>(),
        ["the", "quick", "brown", "fox"]
    );
    let sum: f64 = words.iter().map(|w| w["attribution"].as_f64().unwrap()).sum();
    let change = e["value"].as_f64().unwrap() - e["baseline"].as_f64().unwrap();
    assert!((sum - change).abs() <= 1e-3 * change.abs() + 1e-6, "{sum} vs {change}");

    // A cross-encoder's pair: the document's words index the document.
    let r = switchyard(&[
        "explain",
        "--model",
        &tiny("bert-cross-encoder"),
        "--query",
        "the quick fox",
        "a brown dog",
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let e: serde_json::Value = serde_json::from_str(text(&r.stdout).trim()).unwrap();
    let words: Vec<(String, u64)> = e["inputs"][0]["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["word"].as_str().unwrap().to_owned(), w["segment"].as_u64().unwrap()))
        .collect();
    let want: Vec<(String, u64)> =
        [("the", 0), ("quick", 0), ("fox", 0), ("a", 1), ("brown", 1), ("dog", 1)]
            .map(|(w, s)| (w.to_owned(), s))
            .into();
    assert_eq!(words, want);

    // Readable: the two texts of a similarity, the strongest word of each marked.
    let r = switchyard(&[
        "explain",
        "--model",
        &tiny("bert"),
        "--readable",
        "--top",
        "1",
        "a man is eating food",
        "the man",
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let line = text(&r.stdout);
    assert!(line.starts_with("cosine similarity "), "{line}");
    assert_eq!(line.matches('[').count(), 2, "{line}");
}

/// The tiny BERT as a sentence-transformers model with E5-style prompts made of words of its
/// vocabulary, `query` the default.
fn tiny_with_prompts(dir: &Path) -> String {
    let mean = r#"{"pooling_mode_mean_tokens": true}"#;
    switchyard_models::sentence_transformers_copy(Path::new(&tiny("bert")), dir, mean).unwrap();
    let config = serde_json::json!({
        "prompts": {"query": "the sea: ", "passage": "some long text: "},
        "default_prompt_name": "query"
    });
    std::fs::write(dir.join("config_sentence_transformers.json"), config.to_string()).unwrap();
    dir.display().to_string()
}

#[test]
fn explain_holds_the_models_prompt_as_embed_puts_it() {
    let dir = scratch("prompts");
    let m = tiny_with_prompts(&dir);
    let (a, b) = ("a man is eating food", "the cat sat");
    // The cosine of `embed`'s vectors with these prompt flags.
    let cosine = |flags: &[&str]| {
        let r = switchyard(&[&["embed", "--model", &m][..], flags, &[a, b]].concat());
        assert!(r.status.success(), "{}", text(&r.stderr));
        let v: Vec<Vec<f64>> = text(&r.stdout)
            .lines()
            .map(|l| {
                let l: serde_json::Value = serde_json::from_str(l).unwrap();
                l["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
            })
            .collect();
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
        dot(&v[0], &v[1]) / (dot(&v[0], &v[0]) * dot(&v[1], &v[1])).sqrt()
    };
    let explain = |flags: &[&str]| {
        let r = switchyard(&[&["explain", "--model", &m][..], flags, &[a, b]].concat());
        assert!(r.status.success(), "{}", text(&r.stderr));
        serde_json::from_str::<serde_json::Value>(text(&r.stdout).trim()).unwrap()
    };
    for flags in [&[][..], &["--prompt-name", "passage"], &["--prompt", ""]] {
        let e = explain(flags);
        // The same similarity `embed` gives with the same prompt: f32 kernels of two backends
        // (burn's under autodiff, and flex's), which agree to a few ulps of the cosine.
        let (value, want) = (e["value"].as_f64().unwrap(), cosine(flags));
        assert!((value - want).abs() <= 1e-5, "{flags:?}: {value} vs {want}");
        let input = &e["inputs"][0];
        // The words and spans are the text's; the prompt's tokens are held as [CLS] is.
        let words: Vec<&str> = input["words"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["word"].as_str().unwrap())
            .collect();
        assert_eq!(words, ["a", "man", "is", "eating", "food"], "{flags:?}");
        let tokens = input["tokens"].as_array().unwrap();
        let held = tokens.iter().filter(|t| t["special"] == true).count();
        let prompt_tokens = match flags {
            [] => 3,             // the sea :
            [_, "passage"] => 4, // some long text :
            _ => 0,
        };
        assert_eq!(held, 2 + prompt_tokens, "{flags:?}: {tokens:?}");
        assert!(tokens.iter().filter(|t| t["special"] == true).all(|t| t["attribution"] == 0.0));
        let sum: f64 = tokens.iter().map(|t| t["attribution"].as_f64().unwrap()).sum::<f64>()
            + e["inputs"][1]["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["attribution"].as_f64().unwrap())
                .sum::<f64>();
        let change = value - e["baseline"].as_f64().unwrap();
        assert!((sum - change).abs() <= 1e-3 * change.abs() + 1e-5, "{sum} vs {change}");
    }
    assert!((explain(&[])["value"].as_f64().unwrap() - cosine(&["--prompt", ""])).abs() > 1e-4);

    let r = switchyard(&["explain", "--model", &m, "--prompt-name", "doc", a, b]);
    assert!(text(&r.stderr).contains(r#"no prompt named "doc""#), "{}", text(&r.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn explain_holds_a_cross_encoders_prompt_before_the_query_as_rerank_puts_it() {
    let dir = scratch("ce-prompts");
    let prompts = serde_json::json!({"query": "the sea: ", "web": "some long text: "});
    let from = tiny("bert-cross-encoder");
    switchyard_models::cross_encoder_copy(from.as_ref(), &dir, prompts, Some("query")).unwrap();
    let m = dir.display().to_string();
    let (q, d) = ("the quick fox", "a man is eating food");
    let logit = |flags: &[&str]| {
        let r = switchyard(&[&["rerank", "--model", &m, "--query", q][..], flags, &[d]].concat());
        assert!(r.status.success(), "{}", text(&r.stderr));
        let l: serde_json::Value = serde_json::from_str(text(&r.stdout).trim()).unwrap();
        l["logit"].as_f64().unwrap()
    };
    for (flags, prompt_tokens) in
        [(&[][..], 3), (&["--prompt-name", "web"][..], 4), (&["--prompt", ""][..], 0)]
    {
        let r = switchyard(&[&["explain", "--model", &m, "--query", q][..], flags, &[d]].concat());
        assert!(r.status.success(), "{}", text(&r.stderr));
        let e: serde_json::Value = serde_json::from_str(text(&r.stdout).trim()).unwrap();
        // The logit `rerank` gives with the same prompt, from burn's kernels under autodiff
        // and flex's: a few ulps apart.
        let (value, want) = (e["value"].as_f64().unwrap(), logit(flags));
        assert!((value - want).abs() <= 1e-5, "{flags:?}: {value} vs {want}");
        let input = &e["inputs"][0];
        // The query's words and spans are its own and the document's are untouched; the
        // prompt's tokens are held as [CLS] and [SEP] are.
        let words = |segment: u64| -> Vec<&str> {
            let words = input["words"].as_array().unwrap().iter();
            words.filter(|w| w["segment"] == segment).map(|w| w["word"].as_str().unwrap()).collect()
        };
        assert_eq!(words(0), ["the", "quick", "fox"], "{flags:?}");
        assert_eq!(words(1), ["a", "man", "is", "eating", "food"], "{flags:?}");
        let tokens = input["tokens"].as_array().unwrap();
        let held: Vec<&serde_json::Value> =
            tokens.iter().filter(|t| t["special"] == true).collect();
        assert_eq!(held.len(), 3 + prompt_tokens, "{flags:?}: {tokens:?}");
        assert!(held.iter().all(|t| t["attribution"] == 0.0));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn train_and_explain_refuse_what_they_cannot_do_in_one_line() {
    let dir = scratch("refusals");
    let data = dir.join("d.jsonl");
    std::fs::write(&data, "{\"text\": \"a\", \"label\": \"x\"}\n").unwrap();
    let (d, o) = (data.to_str().unwrap(), dir.join("out").display().to_string());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--dtype".into(), "bf16".into()], "--dtype bf16 is not supported"),
        (vec!["--device".into(), "capture".into()], "computes nothing"),
        (vec!["--resume".into()], "holds no checkpoint"),
    ];
    for (extra, want) in cases {
        let mut args: Vec<String> = [
            "train",
            "--model",
            &tiny("bert"),
            "--task",
            "classify",
            "--labels",
            "x,y",
            "--data",
            d,
            "--out",
            &o,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = switchyard(&args);
        let err = text(&r.stderr);
        assert!(!r.status.success() && err.contains(want), "expected `{want}`: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let r = switchyard(&[
        "train",
        "--model",
        &tiny("bert"),
        "--task",
        "embed",
        "--data",
        "/nonexistent.jsonl",
        "--out",
        &o,
    ]);
    assert!(text(&r.stderr).contains("/nonexistent.jsonl"), "{}", text(&r.stderr));
    for (args, want) in [
        (vec!["explain", "--model", &tiny("bert"), "only one"], "give exactly two"),
        (vec!["explain", "--model", &tiny("bert-cross-encoder"), "doc"], "give --query"),
        (vec!["explain", "--model", &tiny("bert-splade"), "x"], "a sparse (SPLADE) encoder"),
        (
            vec!["explain", "--model", &tiny("bert"), "--label", "x", "a", "b"],
            "--label is for a sequence classifier",
        ),
    ] {
        let r = switchyard(&args);
        let err = text(&r.stderr);
        assert!(!r.status.success() && err.contains(want), "expected `{want}`: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// transformers and sentence-transformers load what `switchyard train` writes: the fixture
/// `exports.json` (crates/train/tests/fixtures/check_exports.py) holds their outputs for the
/// exports of these same deterministic `switchyard train` runs; Switchyard reading its export
/// now gives them. Measured when the fixture was made: within 8.3e-7 (each library against
/// `switchyard` on the same export); the bound leaves room for another CPU's rounding through
/// the training steps.
#[test]
fn exports_load_in_transformers_and_sentence_transformers() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../train/tests/fixtures");
    let minilm = switchyard_models::fetched_model_dir("all-MiniLM-L6-v2").unwrap();
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("exports.json")).unwrap())
            .unwrap();
    let sentences: Vec<&str> =
        spec["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let query = spec["query"].as_str().unwrap();
    let dir = scratch("exports");
    let close = |what: &str, got: f64, want: f64| {
        assert!((got - want).abs() <= 1e-5, "{what}: switchyard {got}, the library {want}");
    };
    let tiny_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny");
    for (name, case) in spec["cases"].as_object().unwrap() {
        let out = dir.join(name);
        let mut args: Vec<String> = vec!["train".into()];
        for a in case["args"].as_array().unwrap() {
            let a = a.as_str().unwrap();
            let a = a
                .replace("{TINY}", tiny_root.to_str().unwrap())
                .replace("{FIX}", fixtures.to_str().unwrap())
                .replace("{MINILM}", minilm.to_str().unwrap());
            args.push(a);
        }
        args.extend([
            "--out".into(),
            out.display().to_string(),
            "--no-shuffle".into(),
            "--no-dropout".into(),
        ]);
        let r = switchyard(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(r.status.success(), "{name}: {}", text(&r.stderr));
        let o = out.to_str().unwrap();
        let run = |cmd: &[&str]| -> Vec<serde_json::Value> {
            let r = switchyard(cmd);
            assert!(r.status.success(), "{name}: {}", text(&r.stderr));
            text(&r.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
        };
        let reference = &case["reference"];
        // A command on the model, then the sentences.
        let on = |cmd: &[&str]| run(&[cmd, sentences.as_slice()].concat());
        match case["kind"].as_str().unwrap() {
            kind @ ("embed" | "sentence-embed") => {
                let lines = on(&["embed", "--model", o]);
                let libs: &[&str] = if kind == "embed" {
                    &["transformers", "sentence-transformers"]
                } else {
                    &["sentence-transformers"]
                };
                for lib in libs {
                    for (line, want) in lines.iter().zip(reference[lib].as_array().unwrap()) {
                        for (g, w) in line["embedding"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .zip(want.as_array().unwrap())
                        {
                            close(
                                &format!("{name} ({lib})"),
                                g.as_f64().unwrap(),
                                w.as_f64().unwrap(),
                            );
                        }
                    }
                }
            }
            "classify" => {
                let lines = on(&["classify", "--model", o]);
                for (line, want) in lines.iter().zip(reference["transformers"].as_array().unwrap())
                {
                    assert_eq!(line["labels"], reference["labels"], "{name}");
                    for (g, w) in
                        line["logits"].as_array().unwrap().iter().zip(want.as_array().unwrap())
                    {
                        close(name, g.as_f64().unwrap(), w.as_f64().unwrap());
                    }
                }
            }
            "rerank" => {
                for line in on(&["rerank", "--model", o, "--query", query]) {
                    let i = line["index"].as_u64().unwrap() as usize;
                    close(
                        name,
                        line["logit"].as_f64().unwrap(),
                        reference["transformers"][i].as_f64().unwrap(),
                    );
                    close(
                        name,
                        line["score"].as_f64().unwrap(),
                        reference["sentence-transformers"][i].as_f64().unwrap(),
                    );
                }
            }
            "tokens" => {
                let labels = reference["labels"].as_array().unwrap();
                let lines = on(&["classify", "--model", o]);
                for (line, want) in lines.iter().zip(reference["transformers"].as_array().unwrap())
                {
                    let words = line["tokens"].as_array().unwrap();
                    let want = want.as_array().unwrap();
                    assert_eq!(words.len(), want.len(), "{name}");
                    for (w, logits) in words.iter().zip(want) {
                        let logits: Vec<f64> = logits
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_f64().unwrap())
                            .collect();
                        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let sum: f64 = logits.iter().map(|x| (x - max).exp()).sum();
                        let best = logits.iter().position(|&x| x == max).unwrap();
                        assert_eq!(w["label"], labels[best], "{name}");
                        close(name, w["score"].as_f64().unwrap(), 1.0 / sum);
                    }
                }
            }
            other => panic!("{name}: an unknown kind {other}"),
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
