//! The training job: a head made from labels, learning a task, checkpoints and resuming, dropout,
//! and every refusal, on tiny fixture checkpoints and burn-flex.
//!
//! Dropout draws from burn-flex's one random generator, shared by the process: only
//! `resuming_continues_the_run_exactly` trains with dropout on, so no other test draws from it
//! meanwhile.

use std::path::{Path, PathBuf};

use burn_flex::{Flex, FlexDevice};
use switchyard_core::{Buckets, Caps, DeviceKind, Reference};
use switchyard_models::{Model, Task as ModelTask};
use switchyard_train::{Error, Job, Progress, Settings, Task, Trainer};

fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny").join(name)
}

fn caps() -> Caps {
    Caps::new("flex", "burn-flex under autodiff", DeviceKind::Cpu)
}

/// A fresh folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-train-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn job(model: PathBuf, task: Task, data: PathBuf, out: PathBuf) -> Job {
    Job {
        model,
        task,
        data,
        eval: None,
        out,
        labels: None,
        max_len: None,
        resume: false,
        settings: Settings { dropout: false, ..Settings::default() },
    }
}

fn fit(job: &Job) -> Result<switchyard_train::TrainReport, Error> {
    Trainer::<Flex>::fit(FlexDevice, caps(), job, &mut |_| {})
}

const WORDS: [&str; 12] =
    ["the", "man", "is", "eating", "food", "quick", "brown", "fox", "sea", "text", "cat", "mat"];

/// Texts labelled by whether they hold "fox": a task a classifier can learn.
fn fox_records(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let words: Vec<&str> = (0..4).map(|k| WORDS[(i * 5 + k * 3) % WORDS.len()]).collect();
            let label = if words.contains(&"fox") { "fox" } else { "other" };
            format!("{{\"text\": \"{}\", \"label\": \"{label}\"}}", words.join(" "))
        })
        .collect()
}

#[test]
fn a_head_made_from_labels_learns_the_task_and_exports_as_transformers_names_it() {
    let dir = scratch("head");
    let data = write(&dir, "train.jsonl", &fox_records(24));
    let out = dir.join("out");
    let mut j = job(tiny("bert"), Task::Classify, data.clone(), out.clone());
    j.eval = Some(data);
    j.labels = Some(vec!["other".into(), "fox".into()]);
    j.settings.epochs = 12;
    j.settings.lr = 2e-3;
    j.settings.batch_size = 8;
    let mut events = Vec::new();
    let report = Trainer::<Flex>::fit(FlexDevice, caps(), &j, &mut |p: &Progress| {
        events.push(format!("{p:?}"))
    })
    .unwrap();
    assert_eq!(report.steps, 36);
    assert_eq!(report.losses.len(), 36);
    let acc =
        |e: &switchyard_train::Eval| e.metrics.iter().find(|(k, _)| k == "accuracy").unwrap().1;
    let (before, after) = (acc(report.before.as_ref().unwrap()), acc(report.evals.last().unwrap()));
    assert!(after >= 0.95 && after > before, "accuracy {before} before, {after} after");
    assert!(
        events.iter().any(|e| e.starts_with("Start"))
            && events.iter().filter(|e| e.starts_with("Step")).count() == 36
    );
    // The result: a BertForSequenceClassification with the labels, the encoder under `bert.`.
    let trained = Model::load(&out).unwrap();
    assert_eq!(trained.task(), &ModelTask::Classify { labels: vec!["other".into(), "fox".into()] });
    let config = trained.checkpoint().config();
    assert_eq!(config["architectures"][0], "BertForSequenceClassification");
    assert_eq!(config["label2id"]["fox"], 1);
    let ck = trained.checkpoint();
    assert!(ck.has("bert.embeddings.word_embeddings.weight") && ck.has("classifier.weight"));
    assert!(ck.has("bert.pooler.dense.weight"));
    assert!(out.join("tokenizer.json").is_file() && out.join("training.json").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The heads `--labels` makes for MPNet, ELECTRA and Jina v3 (RoBERTa's dense and out_proj),
/// ALBERT, NomicBERT, GTE and DeBERTa (the pooler, then the classifier) learn the fox task
/// through each family's encoder: MPNet's position bias, ELECTRA's projected embeddings,
/// ALBERT's layers shared between groups, rotary positions, NomicBERT's and GTE's gated
/// feed-forwards (GTE's sliced from one matrix), and DeBERTa's disentangled attention (its
/// position tables computed on the tape). Each export loads back as transformers names the
/// class, and decides every eval text as the trained model did.
#[test]
fn heads_made_from_labels_train_through_mpnet_electra_albert_deberta_and_the_rotary_families() {
    let labels = vec!["other".to_owned(), "fox".to_owned()];
    for (name, class, head) in [
        ("mpnet", "MPNetForSequenceClassification", "classifier.out_proj.weight"),
        ("electra", "ElectraForSequenceClassification", "classifier.out_proj.weight"),
        ("albert", "AlbertForSequenceClassification", "albert.pooler.weight"),
        ("nomic", "NomicBertForSequenceClassification", "nomic_bert.pooler.dense.weight"),
        ("gte", "GteForSequenceClassification", "gte.pooler.dense.weight"),
        ("jina", "JinaEmbeddingsV3ForSequenceClassification", "classifier.out_proj.weight"),
        ("deberta", "DebertaV2ForSequenceClassification", "pooler.dense.weight"),
    ] {
        let dir = scratch(&format!("head-{name}"));
        let records = fox_records(24);
        let data = write(&dir, "train.jsonl", &records);
        let out = dir.join("out");
        let mut j = job(tiny(name), Task::Classify, data.clone(), out.clone());
        j.eval = Some(data);
        j.labels = Some(labels.clone());
        (j.settings.epochs, j.settings.lr, j.settings.batch_size) = (12, 2e-3, 8);
        let report = fit(&j).unwrap();
        let acc =
            |e: &switchyard_train::Eval| e.metrics.iter().find(|(k, _)| k == "accuracy").unwrap().1;
        let (before, after) =
            (acc(report.before.as_ref().unwrap()), acc(report.evals.last().unwrap()));
        assert!(after >= 0.95 && after > before, "{name}: accuracy {before} before, {after}");

        let trained = Model::load(&out).unwrap();
        assert_eq!(trained.task(), &ModelTask::Classify { labels: labels.clone() }, "{name}");
        assert_eq!(trained.checkpoint().config()["architectures"][0], class);
        assert!(trained.checkpoint().has(head), "{name}: {head}");
        let records: Vec<serde_json::Value> =
            records.iter().map(|r| serde_json::from_str(r).unwrap()).collect();
        let texts: Vec<&str> = records.iter().map(|r| r["text"].as_str().unwrap()).collect();
        let mut runner =
            switchyard_models::Runner::new(trained, Reference, Buckets::default()).unwrap();
        let logits = runner.classify(&texts, |_| {}).unwrap();
        let right = logits
            .iter()
            .zip(&records)
            .filter(|(l, r)| (l[1] > l[0]) == (r["label"] == "fox"))
            .count();
        assert_eq!(right as f64 / texts.len() as f64, after, "{name}: the export decides alike");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_token_classifier_head_from_labels_trains_on_words() {
    let dir = scratch("tokens");
    let lines: Vec<String> = (0..8)
        .map(|i| {
            let words: Vec<&str> = (0..5).map(|k| WORDS[(i + k * 2) % WORDS.len()]).collect();
            let labels: Vec<&str> =
                words.iter().map(|w| if *w == "fox" { "ANIMAL" } else { "O" }).collect();
            serde_json::json!({"words": words, "labels": labels}).to_string()
        })
        .collect();
    let data = write(&dir, "words.jsonl", &lines);
    let mut j = job(tiny("modernbert"), Task::Tokens, data, dir.join("out"));
    j.labels = Some(vec!["O".into(), "ANIMAL".into()]);
    j.settings.epochs = 2;
    let report = fit(&j).unwrap();
    assert_eq!(report.losses.len(), 2);
    let trained = Model::load(&dir.join("out")).unwrap();
    assert!(matches!(trained.task(), ModelTask::ClassifyTokens { labels } if labels.len() == 2));
    assert_eq!(
        trained.checkpoint().config()["architectures"][0],
        "ModernBertForTokenClassification"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run stopped after a checkpoint and resumed ends with the weights of the run that never
/// stopped, dropout included: the shuffle, the schedule, AdamW's state and each step's dropout
/// seed all come back; for BERT and for DeBERTa (whose optimizer state covers the tensors its
/// position tables are made of).
#[test]
fn resuming_continues_the_run_exactly() {
    // DeBERTa's position tables are computed on the tape, with dropout of their own.
    for name in ["bert", "deberta"] {
        let dir = scratch(&format!("resume-{name}"));
        let pairs: Vec<String> = (0..12)
            .map(|i| {
                let a = format!("{} {}", WORDS[i % 12], WORDS[(i + 1) % 12]);
                let p =
                    format!("{} {} {}", WORDS[(i + 1) % 12], WORDS[i % 12], WORDS[(i + 4) % 12]);
                serde_json::json!({"anchor": a, "positive": p}).to_string()
            })
            .collect();
        let data = write(&dir, "pairs.jsonl", &pairs);
        let mut j = job(tiny(name), Task::Embed, data, dir.join("whole"));
        j.settings.epochs = 2;
        j.settings.batch_size = 4;
        j.settings.lr = 1e-3;
        j.settings.dropout = true;
        j.settings.save_steps = Some(2);
        let whole = fit(&j).unwrap();
        assert_eq!(whole.steps, 6);
        let saved: Vec<String> = std::fs::read_dir(dir.join("whole"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("checkpoint-"))
            .collect();
        assert_eq!(
            saved.len(),
            2,
            "{name}: checkpoints at steps 2 and 4, the end being the export: {saved:?}"
        );

        // The same run stopped at step 2: only its first checkpoint survives.
        let stopped = dir.join("stopped");
        std::fs::create_dir_all(&stopped).unwrap();
        let from = dir.join("whole/checkpoint-2");
        let to = stopped.join("checkpoint-2");
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(&from).unwrap().flatten() {
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
        let mut r = j.clone();
        r.out = stopped.clone();
        r.resume = true;
        let resumed = fit(&r).unwrap();
        assert_eq!(resumed.steps, 6);
        assert_eq!(resumed.losses, whole.losses, "{name}: the resumed run repeats the losses");
        let a = std::fs::read(dir.join("whole/model.safetensors")).unwrap();
        let b = std::fs::read(stopped.join("model.safetensors")).unwrap();
        assert!(a == b, "{name}: the resumed run ends with the same weights, bit for bit");
        // Dropout was on: the losses differ from a run without it.
        let mut plain = j.clone();
        plain.out = dir.join("plain");
        plain.settings.dropout = false;
        plain.settings.save_steps = None;
        let without = fit(&plain).unwrap();
        assert_ne!(
            without.losses[0], whole.losses[0],
            "{name}: dropout changes the first step's loss"
        );
        // Resuming with other settings is refused.
        let mut other = r.clone();
        other.settings.lr = 2e-3;
        let e = fit(&other).unwrap_err().to_string();
        assert!(e.contains("made with other data or settings"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn scored_pairs_train_with_cosent_and_report_spearman() {
    let dir = scratch("cosent");
    let lines: Vec<String> = (0..10)
        .map(|i| {
            serde_json::json!({"text": WORDS[i], "text_pair": WORDS[(i + 1) % 12], "score": (i % 4) as f32 / 3.0})
                .to_string()
        })
        .collect();
    let data = write(&dir, "scored.jsonl", &lines);
    let mut j = job(tiny("distilbert"), Task::Embed, data.clone(), dir.join("out"));
    j.eval = Some(data);
    let report = fit(&j).unwrap();
    let m = &report.before.unwrap().metrics;
    assert_eq!(m[0].0, "spearman");
    assert!((-1.0..=1.0).contains(&m[0].1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn records_that_cannot_be_used_are_errors_naming_their_line() {
    let dir = scratch("bad-data");
    let cases: [(&str, Task, &[&str], &str); 8] = [
        (
            "bert",
            Task::Embed,
            &["{\"anchor\": \"a\", \"positive\": \"b\"}", "{nope"],
            "bad.jsonl:2: not JSON",
        ),
        ("bert", Task::Embed, &["{\"anchor\": \"a\"}"], "bad.jsonl:1: no `positive`"),
        ("bert", Task::Embed, &["{\"text\": \"a\"}"], "bad.jsonl:1: an embedding model trains on"),
        (
            "bert",
            Task::Embed,
            &[
                "{\"anchor\": \"a\", \"positive\": \"b\"}",
                "{\"text\": \"a\", \"text_pair\": \"b\", \"score\": 1}",
            ],
            "bad.jsonl:2: a record for CoSENTLoss after records for MultipleNegativesRankingLoss",
        ),
        (
            "bert",
            Task::Embed,
            &[
                "{\"anchor\": \"a\", \"positive\": \"b\"}",
                "{\"anchor\": \"a\", \"positive\": \"b\", \"negative\": \"c\"}",
            ],
            "bad.jsonl:2: 3 texts where the first record has 2",
        ),
        (
            "bert-classifier",
            Task::Classify,
            &["{\"text\": \"a\", \"label\": \"happy\"}"],
            "the label `happy` is not one of the model's: negative, neutral, positive",
        ),
        (
            "bert-cross-encoder",
            Task::Classify,
            &["{\"text\": \"a\", \"text_pair\": \"b\", \"label\": 2}"],
            "a number in [0, 1]",
        ),
        (
            "bert-token-classifier",
            Task::Tokens,
            &["{\"words\": [\"a\", \"b\"], \"labels\": [\"O\"]}"],
            "bad.jsonl:1: 2 words but 1 labels",
        ),
    ];
    for (model, task, lines, want) in cases {
        let lines: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        let data = write(&dir, "bad.jsonl", &lines);
        let e = fit(&job(tiny(model), task, data, dir.join("out"))).unwrap_err();
        assert!(matches!(e, Error::Data { .. }), "{e:?}");
        assert!(e.to_string().contains(want), "expected `{want}` in `{e}`");
    }
    let no_words = write(&dir, "words.jsonl", &["{\"words\": [], \"labels\": []}".to_owned()]);
    let e = fit(&job(tiny("bert-token-classifier"), Task::Tokens, no_words, dir.join("out")))
        .unwrap_err();
    assert!(e.to_string().contains("words.jsonl:1: no word to learn from: 0 words"), "{e}");
    let empty = write(&dir, "empty.jsonl", &[String::new()]);
    let e = fit(&job(tiny("bert"), Task::Embed, empty, dir.join("out"))).unwrap_err();
    assert!(e.to_string().contains("holds no records"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn settings_and_tasks_that_do_not_fit_are_refused() {
    let dir = scratch("refusals");
    let data = write(&dir, "train.jsonl", &fox_records(4));
    let out = dir.join("out");
    let base = job(tiny("bert"), Task::Classify, data.clone(), out.clone());
    let mut cases: Vec<(Job, &str)> = Vec::new();
    cases.push((base.clone(), "--task classify cannot train an embedding model; --labels"));
    let mut j = base.clone();
    j.labels = Some(vec!["a".into(), "a".into()]);
    cases.push((j, "--labels names `a` twice"));
    let mut j = base.clone();
    j.model = tiny("bert-classifier");
    j.labels = Some(vec!["x".into(), "y".into()]);
    cases.push((j, "with the labels negative, neutral, positive; --labels must name those"));
    let mut j = base.clone();
    j.task = Task::Embed;
    j.labels = Some(vec!["x".into()]);
    cases.push((j, "an embedding model has none"));
    let mut j = base.clone();
    j.settings.epochs = 0;
    cases.push((j, "must be at least 1"));
    let mut j = base.clone();
    j.settings.lr = 0.0;
    cases.push((j, "the rate must be above 0"));
    let mut j = base.clone();
    j.resume = true;
    cases.push((j, "holds no checkpoint"));
    let mut j = base.clone();
    j.model = tiny("bert-splade");
    j.labels = Some(vec!["x".into(), "y".into()]);
    cases.push((j, "a SPLADE model cannot be given a classifier's head"));
    for (j, want) in cases {
        let e = fit(&j).unwrap_err().to_string();
        assert!(e.contains(want), "expected `{want}` in `{e}`");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The tiny BERT as a sentence-transformers model with a Dense module (32 to 16, Tanh) after
/// mean pooling, in `dir`.
fn with_dense(dir: &Path) {
    let mean = r#"{"pooling_mode_mean_tokens": true}"#;
    switchyard_models::sentence_transformers_copy(&tiny("bert"), dir, mean).unwrap();
    let t = |i: u32, path: &str, ty: &str| {
        serde_json::json!({"idx": i, "name": i.to_string(), "path": path,
                           "type": format!("sentence_transformers.models.{ty}")})
    };
    let modules = serde_json::json!([
        t(0, "", "Transformer"),
        t(1, "1_Pooling", "Pooling"),
        t(2, "2_Dense", "Dense")
    ]);
    std::fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
    std::fs::create_dir_all(dir.join("2_Dense")).unwrap();
    std::fs::write(dir.join("2_Dense/config.json"), r#"{"in_features": 32, "out_features": 16}"#)
        .unwrap();
    let w: Vec<f32> = (0..16 * 32).map(|i| ((i * 7 % 11) as f32 - 5.0) / 20.0).collect();
    let tensors = [
        switchyard_train::export::Tensor::f32("linear.weight", vec![16, 32], &w),
        switchyard_train::export::Tensor::f32("linear.bias", vec![16], &[0.1; 16]),
    ];
    switchyard_train::export::write_safetensors(&dir.join("2_Dense/model.safetensors"), &tensors)
        .unwrap();
}

/// A Dense module trains with the encoder, and the export puts its weights back in its own
/// folder, as sentence-transformers saves them; a classifier made from such a model leaves them
/// behind with the module.
#[test]
fn a_dense_modules_weights_train_and_export_to_its_folder() {
    let dir = scratch("dense");
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    with_dense(&model);
    let lines: Vec<String> = (0..8)
        .map(|i| serde_json::json!({"anchor": WORDS[i], "positive": WORDS[i + 4]}).to_string())
        .collect();
    let data = write(&dir, "pairs.jsonl", &lines);
    let out = dir.join("out");
    let mut j = job(model.clone(), Task::Embed, data, out.clone());
    (j.settings.lr, j.settings.batch_size, j.settings.epochs) = (1e-2, 4, 2);
    fit(&j).unwrap();

    let names = |path: &Path| -> Vec<String> {
        let bytes = std::fs::read(path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut n: Vec<String> = st.names().into_iter().map(str::to_owned).collect();
        n.sort();
        n
    };
    assert_eq!(names(&out.join("2_Dense/model.safetensors")), ["linear.bias", "linear.weight"]);
    assert!(names(&out.join("model.safetensors")).iter().all(|n| !n.contains("Dense")));
    assert!(out.join("2_Dense/config.json").is_file());
    let (before, after) = (Model::load(&model).unwrap(), Model::load(&out).unwrap());
    let g = after.graph();
    assert_eq!(g.shape(g.output(switchyard_models::heads::EMBEDDING).unwrap()).width, 16);
    let weight = |m: &Model| m.checkpoint().tensor("2_Dense.linear.weight").unwrap().bytes.to_vec();
    assert_ne!(weight(&before), weight(&after), "training moved the Dense module's weights");

    let data = write(&dir, "fox.jsonl", &fox_records(8));
    let mut j = job(model, Task::Classify, data, dir.join("classifier"));
    j.labels = Some(vec!["other".into(), "fox".into()]);
    fit(&j).unwrap();
    assert!(names(&dir.join("classifier/model.safetensors")).iter().all(|n| !n.contains("Dense")));
    assert!(!dir.join("classifier/2_Dense").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Qwen3 (a causal decoder) and Gemma (norms scaling by `1 + weight`, local layers), both with
/// query heads sharing key-value heads and pooled here by the mean of their rows, train as
/// embedders; each export loads back as its family, with every weight where the original has
/// it (the shared key projection and a norm moved), and ranks the pairs as the trained model
/// did.
#[test]
fn qwen3_and_gemma_train_as_embedders_and_export_as_themselves() {
    use switchyard_models::Arch;
    // Six pairs of words, no word on both sides.
    let (anchors, positives) = (&WORDS[..6], &WORDS[6..]);
    let lines: Vec<String> = (0..6)
        .map(|i| serde_json::json!({"anchor": anchors[i], "positive": positives[i]}).to_string())
        .collect();
    for (name, arch) in [("qwen3", Arch::Qwen3), ("gemma", Arch::Gemma)] {
        let dir = scratch(&format!("lm-{name}"));
        let data = write(&dir, "pairs.jsonl", &lines);
        let out = dir.join("out");
        let mut j = job(tiny(name), Task::Embed, data.clone(), out.clone());
        j.eval = Some(data);
        (j.settings.lr, j.settings.batch_size, j.settings.epochs) = (1e-2, 6, 20);
        let report = fit(&j).unwrap();
        let acc =
            |e: &switchyard_train::Eval| e.metrics.iter().find(|(k, _)| k == "accuracy").unwrap().1;
        let (before, after) =
            (acc(report.before.as_ref().unwrap()), acc(report.evals.last().unwrap()));
        assert!(after == 1.0 && after > before, "{name}: accuracy {before} before, {after} after");

        let (original, trained) = (Model::load(&tiny(name)).unwrap(), Model::load(&out).unwrap());
        assert_eq!(trained.config().arch, arch);
        let names = |m: &Model| {
            let mut n: Vec<String> =
                m.checkpoint().names().into_iter().map(str::to_owned).collect();
            n.sort();
            n
        };
        assert_eq!(names(&trained), names(&original), "{name}");
        for w in ["layers.0.self_attn.k_proj.weight", "layers.0.input_layernorm.weight"] {
            let bytes = |m: &Model| m.checkpoint().tensor(w).unwrap().bytes.to_vec();
            assert_ne!(bytes(&original), bytes(&trained), "{name}: training moved {w}");
        }
        let mut runner =
            switchyard_models::Runner::new(trained, Reference, Buckets::default()).unwrap();
        let (a, p) =
            (runner.embed(anchors, |_| {}).unwrap(), runner.embed(positives, |_| {}).unwrap());
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(x, y)| x * y).sum::<f32>();
        let hits = a
            .iter()
            .enumerate()
            .filter(|(i, a)| {
                let best = (0..p.len()).max_by(|&x, &y| dot(a, &p[x]).total_cmp(&dot(a, &p[y])));
                best == Some(*i)
            })
            .count();
        assert_eq!(hits as f64 / 6.0, after, "{name}: the export ranks the pairs alike");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
