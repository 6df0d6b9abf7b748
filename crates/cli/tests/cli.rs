//! The `switchyard` binary, end to end, on the real all-MiniLM-L6-v2.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn model_dir() -> PathBuf {
    switchyard_models::fetched_model_dir("all-MiniLM-L6-v2").unwrap()
}

fn switchyard(args: &[&str]) -> Output {
    switchyard_with(args, &[])
}

/// `switchyard ARGS` with the environment variables `env` set.
fn switchyard_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .env_remove("SWITCHYARD_DEVICE")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("SWITCHYARD_CUBE_MATMUL")
        .env_remove("SWITCHYARD_CUBE_ATTENTION")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

/// A sentence, its paraphrase, and an unrelated one.
const THREE: [&str; 3] = ["A man is eating food.", "A man eats a meal.", "The stock market fell."];

/// `switchyard COMMAND --model DIR` followed by [`THREE`].
fn on_three(command: &str, model: &std::path::Path) -> Output {
    let mut args = vec![command, "--model", model.to_str().unwrap()];
    args.extend(THREE);
    switchyard(&args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn lines(o: &Output) -> Vec<serde_json::Value> {
    text(&o.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

fn cosine(a: &[serde_json::Value], b: &[serde_json::Value]) -> f64 {
    let f = |v: &[serde_json::Value]| v.iter().map(|x| x.as_f64().unwrap()).collect::<Vec<_>>();
    let (a, b) = (f(a), f(b));
    a.iter().zip(&b).map(|(x, y)| x * y).sum::<f64>()
}

#[test]
fn embed_prints_one_normalised_embedding_per_input_in_order() {
    let m = model_dir();
    let o = on_three("embed", &m);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows = lines(&o);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[1]["text"], "A man eats a meal.");
    let e: Vec<&Vec<serde_json::Value>> =
        rows.iter().map(|r| r["embedding"].as_array().unwrap()).collect();
    assert_eq!(e[0].len(), 384);
    let (close, far) = (cosine(e[0], e[1]), cosine(e[0], e[2]));
    assert!((cosine(e[0], e[0]) - 1.0).abs() < 1e-5, "normalised");
    assert!(close > 0.7 && far < 0.3 && close > far, "paraphrase {close}, unrelated {far}");
}

#[test]
fn embed_truncate_dim_keeps_the_first_dimensions_as_they_are() {
    let m = model_dir();
    let m = m.to_str().unwrap();
    let embedding = |args: &[&str]| {
        let o = switchyard(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        lines(&o).remove(0)["embedding"].clone()
    };
    let full = embedding(&["embed", "--model", m, THREE[0]]);
    let cut = embedding(&["embed", "--model", m, "--truncate-dim", "8", THREE[0]]);
    // The same kernels on the same text: the first eight values, not normalised again.
    assert_eq!(cut.as_array().unwrap()[..], full.as_array().unwrap()[..8]);
    for (args, want) in [
        (
            vec!["--model", m, "--truncate-dim", "385"],
            "--truncate-dim 385: this model's embeddings have 384 dimensions",
        ),
        (
            vec!["--model", &tiny("bert-splade"), "--truncate-dim", "8"],
            "cuts dense embeddings; this is a sparse encoder",
        ),
    ] {
        let o = switchyard(&[&["embed"][..], &args, &["x"]].concat());
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(text(&o.stderr).contains(want), "{}", text(&o.stderr));
    }
    let o = switchyard(&["embed", "--model", m, "--truncate-dim", "0", "x"]);
    assert_eq!(o.status.code(), Some(2), "zero is a usage error");
}

#[test]
fn embed_reads_json_lines_from_a_file_and_runs_on_other_devices() {
    let m = model_dir();
    let dir = std::env::temp_dir().join(format!("switchyard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("in.jsonl");
    std::fs::write(&file, "{\"text\": \"first line\"}\n{\"text\": \"second\"}\n\n").unwrap();
    let flex =
        switchyard(&["embed", "--model", m.to_str().unwrap(), "--input", file.to_str().unwrap()]);
    assert!(flex.status.success(), "{}", text(&flex.stderr));
    let nd = switchyard(&[
        "embed",
        "--model",
        m.to_str().unwrap(),
        "--device",
        "ndarray",
        "--input",
        file.to_str().unwrap(),
    ]);
    assert!(nd.status.success(), "{}", text(&nd.stderr));
    let (a, b) = (lines(&flex), lines(&nd));
    assert_eq!(a.len(), 2);
    assert_eq!(a[1]["text"], "second");
    for (x, y) in a.iter().zip(&b) {
        let c = cosine(x["embedding"].as_array().unwrap(), y["embedding"].as_array().unwrap());
        assert!(c > 0.99999, "flex and ndarray agree: {c}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_are_one_line_and_name_the_fix() {
    let o = switchyard(&["embed", "--model", "/nonexistent/model", "hi"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("/nonexistent/model is not a directory"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let m = model_dir();
    let o = switchyard(&["embed", "--model", m.to_str().unwrap(), "--device", "tpu", "hi"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("unknown device `tpu`; expected one of: flex"),
        "{}",
        text(&o.stderr)
    );

    let o = switchyard(&["embed", "--model", m.to_str().unwrap(), "--device", "metal:0", "hi"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("rebuild with the cargo feature `metal`"), "{err}");

    let o = switchyard(&["embed", "--model", m.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("no input"), "{}", text(&o.stderr));
    // Said before loading the model: an empty stdin is no input, whatever the model.
    for command in ["embed", "classify", "similarity", "tokenize"] {
        let o = switchyard(&[command, "--model", "/nonexistent/model"]);
        assert_eq!(o.status.code(), Some(1));
        let err = text(&o.stderr);
        assert!(err.starts_with("switchyard: no input"), "{command}: {err}");
    }

    let o = switchyard(&["embed"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
}

/// A pseudo-terminal: its controlling side, and a handle on its terminal to give a child as
/// its stdin.
#[cfg(unix)]
fn terminal() -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::ffi::CStr;
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt returns a new descriptor or -1, and nothing else owns it.
    let fd = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
    assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is the open descriptor just made, owned from here on by `control`.
    let control = unsafe { std::fs::File::from_raw_fd(fd) };
    // SAFETY: `fd` is a pseudo-terminal's controlling side, open for the calls' duration;
    // ptsname's result is read before any other call could overwrite it.
    let name = unsafe {
        assert_eq!(libc::grantpt(fd), 0, "grantpt");
        assert_eq!(libc::unlockpt(fd), 0, "unlockpt");
        let name = libc::ptsname(fd);
        assert!(!name.is_null(), "ptsname");
        CStr::from_ptr(name).to_str().unwrap().to_owned()
    };
    let tty = std::fs::OpenOptions::new().read(true).write(true).open(name).unwrap();
    (control, tty.into())
}

#[cfg(unix)]
#[test]
fn at_a_terminal_without_texts_the_commands_say_so_instead_of_waiting() {
    let (_control, tty) = terminal();
    for command in
        [&["embed"][..], &["classify"], &["similarity"], &["tokenize"], &["rerank", "--query", "q"]]
    {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(command)
            .args(["--model", "/nonexistent/model"])
            .env_remove("SWITCHYARD_DEVICE")
            .stdin(Stdio::from(tty.try_clone().unwrap()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Nothing is typed at the terminal: a command reading it would wait for ever.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("{command:?} waited for input at a terminal");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{command:?}");
        let err = text(&o.stderr);
        assert!(
            err.starts_with("switchyard: no input: give texts as arguments"),
            "{command:?}: {err}"
        );
    }
}

#[test]
fn tokenize_shows_ids_and_tokens() {
    let m = model_dir();
    let o = switchyard(&["tokenize", "--model", m.to_str().unwrap(), "Hello world"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let row = &lines(&o)[0];
    assert_eq!(row["tokens"], serde_json::json!(["[CLS]", "hello", "world", "[SEP]"]));
    assert_eq!(row["ids"], serde_json::json!([101, 7592, 2088, 102]));
}

#[test]
fn devices_lists_what_this_build_has() {
    let o = switchyard(&["devices"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("available (flex backend on host CPU"), "{out}");
    assert!(out.contains("available (records plans, executes nothing)"), "{out}");
    assert!(
        out.contains("metal[:N]") && out.contains("rebuild with the cargo feature `metal`"),
        "{out}"
    );
    assert!(out.contains("default: flex"), "{out}");
    // Every family of the table is listed, compiled in or not.
    for family in ["cubecl-cpu", "tch:cuda", "wgpu", "cuda", "metal"] {
        assert!(out.lines().any(|l| l.starts_with(family)), "{family}: {out}");
    }
    // A remote device is not probed: it needs a server's address.
    assert!(out.contains("in this build: name a server as remote:HOST:PORT"), "{out}");
}

/// The cube backend's kernel choices from the environment: a cube device's line names them, and
/// a value they do not take makes the device unusable, saying why. Where this build has wgpu
/// and this machine an adapter (CI: Mesa's llvmpipe).
#[test]
fn devices_name_the_cube_kernels_the_environment_chose() {
    let wgpu0 = |o: &Output| {
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout).lines().find(|l| l.starts_with("wgpu:0")).map(str::to_owned)
    };
    let Some(plain) = wgpu0(&switchyard(&["devices"])) else { return };
    if !plain.contains("available (") {
        return;
    }
    assert!(!plain.contains("matmul"), "{plain}");
    let chosen = [("SWITCHYARD_CUBE_MATMUL", "tuned"), ("SWITCHYARD_CUBE_ATTENTION", "tiles")];
    let line = wgpu0(&switchyard_with(&["devices"], &chosen)).expect("listed as before");
    assert!(
        line.contains("available (") && line.contains("(matmul tuned, attention in tiles)"),
        "{line}"
    );
    let line = wgpu0(&switchyard_with(&["devices"], &[("SWITCHYARD_CUBE_MATMUL", "fast")]))
        .expect("listed as before");
    let why = "SWITCHYARD_CUBE_MATMUL: no matmul routine `fast`: expected one of burn,";
    assert!(line.contains("not usable here: ") && line.contains(why), "{line}");
    // A routine known but not for this device: refused when the device opens, not at a run.
    let line = wgpu0(&switchyard_with(&["devices"], &[("SWITCHYARD_CUBE_MATMUL", "cublas")]))
        .expect("listed as before");
    let why = "SWITCHYARD_CUBE_MATMUL=cublas: cuBLAS computes products on CUDA devices";
    assert!(line.contains("not usable here: ") && line.contains(why), "{line}");
}

#[test]
fn inspect_prints_the_plan_with_totals_and_as_json() {
    let m = model_dir();
    let o = switchyard(&["inspect", "--model", m.to_str().unwrap(), "--bucket", "512,8,0"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("plan for bucket 512 tokens, 8 sequences, 0 markers"), "{out}");
    assert!(out.contains("Attention") && out.contains("12x32"), "{out}");
    assert!(out.contains("total: "), "{out}");

    let o = switchyard(&["inspect", "--model", m.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["bucket"], serde_json::json!([256, 1, 0]));
    assert!(v["flops"].as_u64().unwrap() > 1_000_000_000);

    // Buckets no batch could fill are one-line errors, at once (this one used to run forever).
    for (bucket, why) in [
        ("256,4294967296,0", "more sequences than tokens"),
        ("0,1,0", "has no room"),
        ("99999999999,1,0", "too large"),
        ("257,1,0", "more tokens than 1 sequences of at most 256 tokens"),
    ] {
        let o = switchyard(&["inspect", "--model", m.to_str().unwrap(), "--bucket", bucket]);
        assert_eq!(o.status.code(), Some(1), "{bucket}");
        let err = text(&o.stderr);
        assert!(err.contains(why) && err.lines().count() == 1, "{bucket}: {err}");
        assert!(!err.contains("  "), "a run of spaces from a wrapped literal: {err}");
    }
}

#[test]
fn similarity_ranks_pairs_by_cosine() {
    let m = model_dir();
    let o = on_three("similarity", &m);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let first = out.lines().next().unwrap();
    assert!(first.contains("\"A man is eating food.\"  \"A man eats a meal.\""), "{out}");
    assert_eq!(out.lines().count(), 3);
    let o = switchyard(&["similarity", "--model", m.to_str().unwrap(), "alone"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn similarity_and_explain_compare_by_the_models_function() {
    let dir = std::env::temp_dir().join(format!("switchyard-cli-dot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mean = r#"{"pooling_mode": "mean"}"#;
    switchyard_models::sentence_transformers_copy(tiny("bert").as_ref(), &dir, mean).unwrap();
    let config = dir.join("config_sentence_transformers.json");
    let m = dir.to_str().unwrap();
    let (a, b) = ("the man is eating food", "a cat sat on the mat");
    let o = switchyard(&["embed", "--model", m, a, b]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Vec<Vec<f32>> = lines(&o)
        .iter()
        .map(|l| {
            l["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
        })
        .collect();
    for s in switchyard_models::scores::Similarity::ALL {
        std::fs::write(&config, serde_json::json!({ "similarity_fn_name": s.name() }).to_string())
            .unwrap();
        let o = switchyard(&["similarity", "--model", m, a, b]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        // Printed to four decimals.
        let want = format!("{:.4}  {a:?}  {b:?}", s.of(&v[0], &v[1]));
        assert_eq!(text(&o.stdout).trim(), want, "{s:?}");
        let o = switchyard(&["explain", "--model", m, a, b]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let e = &lines(&o)[0];
        assert_eq!(e["target"], format!("{} similarity", s.name()));
        // burn's kernels under autodiff against flex's: a few ulps of values near 1 to 10.
        let value = e["value"].as_f64().unwrap() as f32;
        assert!((value - s.of(&v[0], &v[1])).abs() < 1e-4, "{s:?}: {value}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tiny(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/tests/fixtures/tiny")
        .join(name)
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn classify_prints_the_best_label_and_its_probability() {
    let o = switchyard(&[
        "classify",
        "--model",
        &tiny("bert-classifier"),
        "the quick fox",
        "a lazy dog",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows = lines(&o);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        let logits: Vec<f64> =
            r["logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let best = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        assert_eq!(r["label"], r["labels"][best]);
        let z: f64 = logits.iter().map(|l| (l - logits[best]).exp()).sum();
        assert!(
            (r["score"].as_f64().unwrap() - 1.0 / z).abs() < 1e-5,
            "softmax probability of the best label"
        );
    }
    let o = switchyard(&["classify", "--model", &tiny("bert"), "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("not a sequence classifier"), "{}", text(&o.stderr));
}

#[test]
fn rerank_sorts_documents_by_cross_encoder_score() {
    let docs = [
        "a brown fox jumps over the dog",
        "man eating food",
        "transformers are built around attention",
    ];
    let mut args = vec!["rerank", "--model", "", "--query", "the quick fox"];
    let model = tiny("bert-cross-encoder");
    args[2] = &model;
    args.extend(docs);
    let o = switchyard(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows = lines(&o);
    assert_eq!(rows.len(), 3);
    let scores: Vec<f64> = rows.iter().map(|r| r["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    for r in &rows {
        let i = r["index"].as_u64().unwrap() as usize;
        assert_eq!(r["document"], docs[i]);
        let logit = r["logit"].as_f64().unwrap();
        assert!((r["score"].as_f64().unwrap() - 1.0 / (1.0 + (-logit).exp())).abs() < 1e-6);
    }
    let o = switchyard(&["rerank", "--model", &tiny("bert-classifier"), "--query", "q", "d"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("needs a cross-encoder (a sequence classifier with one label)"),
        "{}",
        text(&o.stderr)
    );
    assert!(text(&o.stderr).contains("with labels ["), "{}", text(&o.stderr));
    // A model without labels is named for what it is, without an empty list of labels.
    let o = switchyard(&["rerank", "--model", &tiny("bert"), "--query", "q", "d"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("this model is an embedding model") && !err.contains("labels"), "{err}");
}

/// The tiny classifier `name` copied to a fresh folder named by `tag`, with the files
/// sentence-transformers 6 saves for a `CrossEncoder` naming the prompts of
/// tiny/bert-cross-encoder/expected-prompts.json (`query` the default); and that file.
fn with_prompts(name: &str, tag: &str) -> (PathBuf, serde_json::Value) {
    let dir = std::env::temp_dir().join(format!("switchyard-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = PathBuf::from(tiny("bert-cross-encoder")).join("expected-prompts.json");
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let (prompts, default) = (e["prompts"].clone(), e["default_prompt_name"].as_str());
    switchyard_models::cross_encoder_copy(tiny(name).as_ref(), &dir, prompts, default).unwrap();
    (dir, e)
}

#[test]
fn rerank_puts_the_prompt_before_the_query_as_sentence_transformers_does() {
    let (dir, e) = with_prompts("bert-cross-encoder", "rerank-prompts");
    let m = dir.to_str().unwrap();
    for (flags, which) in [
        (&[][..], "default"),
        (&["--prompt-name", "web"][..], "web"),
        (&["--prompt", ""][..], "none"),
    ] {
        for (pair, want) in
            e["pairs"].as_array().unwrap().iter().zip(e["logits"][which].as_array().unwrap())
        {
            let (q, d) = (pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
            let o =
                switchyard(&[&["rerank", "--model", m, "--query", q][..], flags, &[d]].concat());
            assert!(o.status.success(), "{}", text(&o.stderr));
            let (got, want) = (lines(&o)[0]["logit"].as_f64().unwrap(), want.as_f64().unwrap());
            // sentence-transformers 6.3's `CrossEncoder.predict` on the same pair, in f32 on
            // torch: the kernels' summation orders differ by a few ulps of the logits.
            assert!((got - want).abs() < 1e-5, "{which}: {q:?} {d:?}: {got} vs {want}");
        }
    }
    let o = switchyard(&["rerank", "--model", m, "--prompt-name", "doc", "--query", "q", "d"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains(r#"no prompt named "doc"; its prompts: query, web"#));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The tiny checkpoint `name` copied to a fresh folder named by `tag`, its `config.json`
/// changed by `edit`.
fn edited(name: &str, tag: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let from = PathBuf::from(tiny(name));
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(from.join(f), dir.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(from.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

#[test]
fn classify_scores_by_the_problem_type_as_transformers_pipeline_does() {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    for (problem, score) in
        [("multi_label_classification", &sigmoid as &dyn Fn(f64) -> f64), ("regression", &|x| x)]
    {
        let dir = edited("bert-classifier", problem, |c| c["problem_type"] = problem.into());
        let o = switchyard(&["classify", "--model", dir.to_str().unwrap(), "the quick fox"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let r = lines(&o).remove(0);
        let logits: Vec<f64> =
            r["logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let best = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        assert_eq!(r["label"], r["labels"][best], "{problem}");
        let got = r["score"].as_f64().unwrap();
        assert!((got - score(logits[best])).abs() < 1e-6, "{problem}: score {got}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn rerank_scores_by_the_activation_the_model_names() {
    // The tiny cross-encoder, naming Identity as the ms-marco cross-encoders do.
    let dir = edited("bert-cross-encoder", "identity", |c| {
        c["sbert_ce_default_activation_function"] = "torch.nn.modules.linear.Identity".into();
    });
    let rank = |m: &str| {
        let o = switchyard(&["rerank", "--model", m, "--query", "the quick fox", "a brown fox"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let l = lines(&o).remove(0);
        (l["logit"].as_f64().unwrap(), l["score"].as_f64().unwrap())
    };
    let (logit, score) = rank(dir.to_str().unwrap());
    assert_eq!(score, logit, "Identity: the score is the logit");
    let (plain_logit, sigmoid) = rank(&tiny("bert-cross-encoder"));
    assert_eq!(plain_logit, logit);
    assert!((sigmoid - 1.0 / (1.0 + (-logit).exp())).abs() < 1e-6, "none named: the sigmoid");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn classify_puts_the_prompt_before_each_text() {
    let (dir, _) = with_prompts("bert-classifier", "classify-prompts");
    let (m, plain) = (dir.to_str().unwrap(), tiny("bert-classifier"));
    let classify = |model: &str, flags: &[&str], text: &str| {
        let o = switchyard(&[&["classify", "--model", model][..], flags, &[text]].concat());
        assert!(o.status.success(), "{}", self::text(&o.stderr));
        lines(&o).remove(0)
    };
    let t = "the quick fox";
    // The same text through the same kernels: the same logits.
    let prompted = classify(m, &[], t);
    assert_eq!(prompted["logits"], classify(&plain, &[], &format!("query: {t}"))["logits"]);
    assert_eq!(prompted["text"], t, "the line shows the input, not the prompted text");
    assert_ne!(prompted["logits"], classify(&plain, &[], t)["logits"]);
    let web = classify(m, &["--prompt-name", "web"], t);
    assert_eq!(web["logits"], classify(&plain, &[], &format!("web search: {t}"))["logits"]);
    assert_eq!(classify(m, &["--prompt", ""], t)["logits"], classify(&plain, &[], t)["logits"]);
    // A token classifier's words are the text's: it takes no prompt.
    let ner = tiny("bert-token-classifier");
    let o = switchyard(&["classify", "--model", &ner, "--prompt", "x: ", t]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("are for a sequence classifier"), "{}", text(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn classify_labels_each_word_of_a_token_classifier() {
    let model = tiny("bert-token-classifier");
    let words = |extra: &[&str]| -> Vec<serde_json::Value> {
        let mut args = vec!["classify", "--model", &model];
        args.extend(extra);
        args.push("cats sat on mats");
        let o = switchyard(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let rows = lines(&o);
        assert_eq!(rows.len(), 1);
        rows[0]["tokens"].as_array().unwrap().clone()
    };
    let labels = ["O", "B-THING", "I-THING", "B-ACT", "I-ACT"];
    let first = words(&[]);
    let texts: Vec<&str> = first.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["cats", "sat", "on", "mats"]);
    for t in &first {
        assert!(labels.contains(&t["label"].as_str().unwrap()), "{t}");
        let score = t["score"].as_f64().unwrap();
        assert!(score > 1.0 / 5.0 && score <= 1.0, "the best of five probabilities: {t}");
    }
    assert_eq!((first[3]["start"].as_u64(), first[3]["end"].as_u64()), (Some(12), Some(16)));
    let every = words(&["--every-token"]);
    let texts: Vec<&str> = every.iter().map(|t| t["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["cat", "s", "sat", "on", "mat", "s"]);
}

#[test]
fn embed_prints_splade_terms_for_a_sparse_encoder() {
    let model = switchyard_models::fetched_model_dir("splade-tiny").unwrap();
    let o = switchyard(&["embed", "--model", model.to_str().unwrap(), "A man is eating food."]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows = lines(&o);
    let terms = rows[0]["sparse"].as_array().unwrap();
    let weights: Vec<f64> = terms.iter().map(|t| t["weight"].as_f64().unwrap()).collect();
    assert!(weights.windows(2).all(|w| w[0] >= w[1]) && weights[weights.len() - 1] > 0.0);
    let top: Vec<&str> = terms[..3].iter().map(|t| t["token"].as_str().unwrap()).collect();
    assert_eq!(top, ["man", "food", "eating"], "the sentence's own words weigh most");
    let o = switchyard(&["similarity", "--model", model.to_str().unwrap(), "a", "b"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("is a sparse (SPLADE) encoder, not an embedding model"));
}

/// A scratch Hugging Face cache (`HF_HOME`), removed on drop.
struct HfHome(PathBuf);

impl HfHome {
    fn new(tag: &str) -> HfHome {
        let dir = std::env::temp_dir().join(format!("switchyard-hf-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        HfHome(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for HfHome {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_repository_id_without_network_is_a_clear_error() {
    let home = HfHome::new("offline");
    // A port on loopback that nothing listens on: the connection is refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = [("HF_HOME", home.path()), ("HF_ENDPOINT", endpoint.as_str())];
    let o = switchyard_with(&["embed", "--model", "someone/some-model", "x"], &env);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("could not fetch someone/some-model from the Hugging Face Hub"), "{err}");
    assert!(err.contains("pass its directory instead") && err.lines().count() == 1, "{err}");

    let env = [("HF_HOME", home.path()), ("HF_HUB_OFFLINE", "1")];
    let o = switchyard_with(&["embed", "--model", "someone/some-model", "x"], &env);
    let err = text(&o.stderr);
    assert!(err.contains("HF_HUB_OFFLINE is set and someone/some-model is not in"), "{err}");

    let o = switchyard(&["embed", "--model", "./no/such/dir", "x"]);
    assert!(text(&o.stderr).contains("./no/such/dir is not a directory"), "{}", text(&o.stderr));
}

#[test]
fn a_repository_id_loads_from_the_hugging_face_cache() {
    // The cache layout the hub clients share: refs/main names a snapshot holding the files.
    let home = HfHome::new("cache");
    let repo = home.0.join("hub/models--tiny--bert-classifier");
    let snapshot = repo.join("snapshots/0123abcd");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123abcd").unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(PathBuf::from(tiny("bert-classifier")).join(f), snapshot.join(f)).unwrap();
    }
    let env = [("HF_HOME", home.path()), ("HF_HUB_OFFLINE", "1")];
    let by_id = switchyard_with(&["classify", "--model", "tiny/bert-classifier", "a dog"], &env);
    assert!(by_id.status.success(), "{}", text(&by_id.stderr));
    let by_dir = switchyard(&["classify", "--model", &tiny("bert-classifier"), "a dog"]);
    assert_eq!(lines(&by_id), lines(&by_dir));
}

/// `switchyard remote-serve` on a free loopback port, killed when dropped.
struct RemoteServe {
    child: std::process::Child,
    /// The lines of its stderr after the first, read as they come so the server never blocks.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The device name it tells clients to use.
    device: String,
}

impl RemoteServe {
    fn start(args: &[&str]) -> RemoteServe {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .arg("remote-serve")
            .args(args)
            .env_remove("SWITCHYARD_DEVICE")
            .env_remove("SWITCHYARD_REMOTE_TOKEN")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        stderr.read_line(&mut first).unwrap();
        let device = first.split("--device ").nth(1).unwrap_or_default().trim().to_owned();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let server = RemoteServe { child, log, device };
        assert!(first.contains("serving `flex` on 127.0.0.1:"), "{first}");
        assert!(first.contains("loopback only") && first.contains("no token"), "{first}");
        assert!(server.device.starts_with("remote:127.0.0.1:"), "{first}");
        server
    }
}

impl RemoteServe {
    /// Its address.
    fn addr(&self) -> std::net::SocketAddr {
        self.device.trim_start_matches("remote:").parse().unwrap()
    }

    /// Stops it and returns what it logged after its first line.
    fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The reader thread ends at the pipe's end; give it the moment it needs.
        std::thread::sleep(std::time::Duration::from_millis(200));
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Drop for RemoteServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn embed_on_a_remote_serve_device_matches_local_flex() {
    let server = RemoteServe::start(&["--device", "flex", "--listen", "127.0.0.1:0"]);
    let m = model_dir();
    let mut args = vec!["embed", "--model", m.to_str().unwrap(), "--device", &server.device];
    args.extend(THREE);
    let remote = switchyard(&args);
    assert!(remote.status.success(), "{}", text(&remote.stderr));
    let local = on_three("embed", &m);
    // The server hosts burn-flex; flex here runs its own kernels. Each is within 2e-6 of
    // sentence-transformers (the MiniLM tests), so within 4e-6 of each other.
    let (remote, local) = (lines(&remote), lines(&local));
    assert_eq!(remote.len(), local.len());
    for (r, l) in remote.iter().zip(&local) {
        assert_eq!(r["text"], l["text"]);
        let (r, l) = (r["embedding"].as_array().unwrap(), l["embedding"].as_array().unwrap());
        for (a, b) in r.iter().zip(l) {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!((a - b).abs() <= 4e-6, "remote {a} vs local {b}");
        }
    }
}

#[test]
fn remote_serve_shrugs_off_bad_clients_with_a_log_line_each() {
    use std::io::{Read, Write};
    let server = RemoteServe::start(&["--listen", "127.0.0.1:0", "--handshake-timeout", "0.5"]);
    let addr = server.addr();
    let upgrade = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
    };
    // burn-remote's /data route, whose handler panicked on a stray frame; a session whose
    // first frame is garbage; a silent connection; bytes that are not HTTP.
    let mut bad = Vec::new();
    for bytes in [
        [upgrade("/data").as_bytes(), &[0x82, 0x83, 0, 0, 0, 0, 1, 2, 3]].concat(),
        [upgrade("/session").as_bytes(), &[0x82, 0x83, 0, 0, 0, 0, 1, 2, 3]].concat(),
        Vec::new(),
        b"\x16\x03\x01 not http at all\r\n\r\n".to_vec(),
    ] {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(&bytes).unwrap();
        bad.push(s);
    }
    for mut s in bad {
        s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        assert!(s.read_to_end(&mut rest).is_ok(), "the server closes every bad connection");
    }
    let m = model_dir();
    let o =
        switchyard(&["embed", "--model", m.to_str().unwrap(), "--device", &server.device, "hi"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let log = server.stop();
    let text = log.join("\n");
    assert!(!text.contains("panicked") && !text.contains("backtrace"), "{text}");
    let closed = log.iter().filter(|l| l.contains("connection closed")).count();
    assert_eq!(closed, 3, "a line each for /data, the silent connection, the bytes: {text}");
    assert!(log.len() <= 5, "{text}");
}

#[test]
fn remote_serve_refuses_what_it_cannot_serve_safely() {
    let o = switchyard(&["remote-serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("refusing to listen on 0.0.0.0:0") && err.contains("--public"), "{err}");

    let o = switchyard(&["remote-serve", "--device", "capture", "--listen", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("`capture` cannot be served"), "{}", text(&o.stderr));

    let o = switchyard(&["remote-serve", "--listen", "localhost"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("is not an address with a port"), "{}", text(&o.stderr));

    for (flag, value) in [
        ("--max-connections", "0"),
        ("--max-message-mib", "0"),
        ("--max-message-mib", "1025"),
        ("--idle-timeout", "0"),
        ("--handshake-timeout", "nan"),
    ] {
        let o = switchyard(&["remote-serve", "--listen", "127.0.0.1:0", flag, value]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        assert!(text(&o.stderr).contains(flag), "{flag} {value}: {}", text(&o.stderr));
    }
}

#[test]
fn a_remote_device_with_no_server_is_a_one_line_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let device = format!("remote:127.0.0.1:{port}");
    let m = model_dir();
    let args = ["embed", "--model", m.to_str().unwrap(), "--device", &device, "hi"];
    let o = switchyard_with(&args, &[("SWITCHYARD_REMOTE_TIMEOUT", "1")]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains(&format!("{device} failed to connect")), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn dtype_f16_embeds_close_to_f32_and_a_device_without_it_refuses() {
    let m = model_dir();
    let m = m.to_str().unwrap();
    let full = switchyard(&["embed", "--model", m, THREE[0]]);
    let half = switchyard(&["embed", "--model", m, "--dtype", "f16", THREE[0]]);
    assert!(half.status.success(), "{}", text(&half.stderr));
    let (a, b) = (lines(&full), lines(&half));
    let (a, b) = (a[0]["embedding"].as_array().unwrap(), b[0]["embedding"].as_array().unwrap());
    // f16 keeps 11 significant bits: the embedding moves, but only slightly.
    let c = cosine(a, b);
    assert!(c > 0.999 && a != b, "f16 against f32: cosine {c}");
    let o = switchyard(&["embed", "--model", m, "--device", "ndarray", "--dtype", "bf16", "hi"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("cannot compute in bf16; it can in: f32"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let o = switchyard(&["embed", "--model", m, "--dtype", "f8", "hi"]);
    assert!(text(&o.stderr).contains("unknown dtype `f8`"), "{}", text(&o.stderr));
}

#[test]
fn dtype_auto_is_the_default_and_means_f32_on_a_cpu() {
    let m = model_dir();
    let m = m.to_str().unwrap();
    let embed = |dtype: &[&str]| {
        let o = switchyard(&[&["embed", "--model", m], dtype, &[THREE[0]]].concat());
        assert!(o.status.success(), "{dtype:?}: {}", text(&o.stderr));
        lines(&o)[0]["embedding"].clone()
    };
    let (default, auto, f32) =
        (embed(&[]), embed(&["--dtype", "auto"]), embed(&["--dtype", "f32"]));
    assert_eq!(default, auto);
    assert_eq!(auto, f32, "flex's auto is f32");
    assert_ne!(auto, embed(&["--dtype", "bf16"]), "a different dtype shows");
}

#[test]
fn int8_and_threads_embed_close_to_f32_and_what_cannot_apply_is_refused() {
    let m = model_dir();
    let m = m.to_str().unwrap();
    let full = switchyard(&["embed", "--model", m, THREE[0]]);
    let int8 = switchyard(&["embed", "--model", m, "--dtype", "int8", "--threads", "1", THREE[0]]);
    assert!(int8.status.success(), "{}", text(&int8.stderr));
    let (a, b) = (lines(&full), lines(&int8));
    let (a, b) = (a[0]["embedding"].as_array().unwrap(), b[0]["embedding"].as_array().unwrap());
    // int8 keeps a cosine of at least 0.98 on MiniLM (crates/models/tests/minilm.rs).
    let c = cosine(a, b);
    assert!(c > 0.98 && c < 0.99999, "int8 against f32: cosine {c}");
    let o = switchyard(&["embed", "--model", m, "--device", "ndarray", "--threads", "2", "hi"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("thread count can be set for flex only"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let o = switchyard(&["embed", "--model", m, "--device", "capture", "hi"]);
    assert_eq!(o.status.code(), Some(1), "capture makes up no embeddings");
    assert!(text(&o.stdout).is_empty() && text(&o.stderr).contains("switchyard inspect"));
    let o = switchyard(&["embed", "--model", m, "--threads", "0", "hi"]);
    assert_eq!(o.status.code(), Some(2), "clap refuses zero threads");
    let o = switchyard(&["embed", "--model", m, "--threads", "100000", "hi"]);
    assert_eq!(o.status.code(), Some(1), "far more threads than cores is an error, not a stall");
    let err = text(&o.stderr);
    assert!(err.contains("100000 threads asked for") && err.contains("at most"), "{err}");
}

/// `embed` prints each chunk of 1024 inputs before it reads the next: here the first results
/// arrive while stdin is still open, which they could not if the whole input were read first.
#[test]
fn embed_streams_results_before_its_input_ends() {
    use std::io::{BufRead, Write};
    let m = model_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["embed", "--model", m.to_str().unwrap(), "--input", "-"])
        .env_remove("SWITCHYARD_DEVICE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary runs");
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        tx.send(lines.next().map(Result::unwrap)).unwrap();
        lines.count() + 1
    });
    for i in 0..1024 {
        writeln!(stdin, "sentence number {i}").unwrap();
    }
    stdin.flush().unwrap();
    let first = rx.recv_timeout(std::time::Duration::from_secs(120));
    // Ended either way, so that a failure does not leave the child waiting on its stdin.
    writeln!(stdin, "one more").unwrap();
    drop(stdin);
    let first = first.expect("a first result while stdin is open").expect("a line");
    assert!(first.contains("\"sentence number 0\""), "{first}");
    assert!(child.wait().unwrap().success());
    assert_eq!(reader.join().unwrap(), 1025);
}

/// Lines piped to stdin, with no texts and no --input, are the inputs, as `--input -` reads them
/// (here JSON lines, read as such with `--format auto`); `--format` beside texts is a usage error.
#[test]
fn texts_piped_to_stdin_are_read_without_input() {
    use std::io::Write;
    let m = model_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["embed", "--model", m.to_str().unwrap()])
        .env_remove("SWITCHYARD_DEVICE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut stdin = child.stdin.take().unwrap();
    for t in THREE {
        writeln!(stdin, "{}", serde_json::json!({ "text": t })).unwrap();
    }
    drop(stdin);
    let piped = child.wait_with_output().unwrap();
    assert!(piped.status.success(), "{}", text(&piped.stderr));
    let args = on_three("embed", &m);
    assert!(args.status.success(), "{}", text(&args.stderr));
    assert_eq!(lines(&piped), lines(&args));

    let o = switchyard(&["embed", "--model", m.to_str().unwrap(), "--format", "text", "hi"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// A copy of all-MiniLM-L6-v2 in a fresh folder named by `tag`, naming E5's prompts (`query`,
/// the default, and `passage`) in its `config_sentence_transformers.json`.
fn minilm_with_prompts(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    };
    let m = model_dir();
    copy(&m, &dir);
    copy(&m.join("1_Pooling"), &dir.join("1_Pooling"));
    let config = serde_json::json!({
        "prompts": { "query": "query: ", "passage": "passage: " },
        "default_prompt_name": "query"
    });
    std::fs::write(dir.join("config_sentence_transformers.json"), config.to_string()).unwrap();
    dir
}

#[test]
fn embed_puts_the_prompt_chosen_before_each_text() {
    let (m, e5) = (model_dir(), minilm_with_prompts("prompts"));
    let (m, e5) = (m.to_str().unwrap(), e5.to_str().unwrap());
    let embedding = |args: &[&str]| {
        let o = switchyard(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        lines(&o).remove(0)
    };
    let same = |a: &serde_json::Value, b: &serde_json::Value| {
        let (a, b) = (a["embedding"].as_array().unwrap(), b["embedding"].as_array().unwrap());
        // The same text through the same kernels: equal but for the last bit or so.
        a.iter().zip(b).all(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-6)
    };
    let t = THREE[0];
    let query = embedding(&["embed", "--model", m, &format!("query: {t}")]);
    let passage = embedding(&["embed", "--model", m, &format!("passage: {t}")]);
    let bare = embedding(&["embed", "--model", m, t]);

    // The model's default prompt, unless a flag chooses another or none; the text printed is
    // the input's.
    let default = embedding(&["embed", "--model", e5, t]);
    assert!(same(&default, &query) && !same(&default, &bare));
    assert_eq!(default["text"], t);
    assert!(same(&embedding(&["embed", "--model", e5, "--prompt-name", "passage", t]), &passage));
    assert!(same(&embedding(&["embed", "--model", e5, "--prompt", "", t]), &bare));
    assert!(same(&embedding(&["embed", "--model", m, "--prompt", "passage: ", t]), &passage));

    // similarity and tokenize see the same texts.
    let o = switchyard(&["tokenize", "--model", e5, "--prompt-name", "passage", "Hello"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        lines(&o)[0]["tokens"],
        serde_json::json!(["[CLS]", "passage", ":", "hello", "[SEP]"])
    );
    let o = switchyard(&["similarity", "--model", e5, "--prompt-name", "passage", t, THREE[1]]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o2 = switchyard(&["similarity", "--model", e5, t, THREE[1]]);
    assert_ne!(text(&o.stdout), text(&o2.stdout), "the prompt changes the similarity");

    // A name the model does not have, and both flags at once, are refused.
    let o = switchyard(&["embed", "--model", e5, "--prompt-name", "doc", t]);
    assert_eq!(o.status.code(), Some(1));
    let e = text(&o.stderr);
    assert!(e.contains(r#"no prompt named "doc"; its prompts: passage, query"#), "{e}");
    let o = switchyard(&["embed", "--model", e5, "--prompt-name", "query", "--prompt", "q: ", t]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    std::fs::remove_dir_all(e5).unwrap();
}

#[test]
fn a_local_directory_named_like_a_repository_wins_and_says_so() {
    let root = std::env::temp_dir().join(format!("switchyard-shadow-{}", std::process::id()));
    let dir = root.join("sentence-transformers/all-MiniLM-L6-v2");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(std::path::Path::new(&tiny("bert")).join(f), dir.join(f)).unwrap();
    }
    let run = |model: &str| {
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["embed", "--model", model, "a cat"])
            .current_dir(&root)
            .env_remove("SWITCHYARD_DEVICE")
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap()
    };
    // The tiny directory ran (32-wide vectors, not MiniLM's 384), and stderr says which was used.
    let o = run("sentence-transformers/all-MiniLM-L6-v2");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(lines(&o)[0]["embedding"].as_array().unwrap().len(), 32);
    assert!(text(&o.stderr).contains("using the local directory"), "{}", text(&o.stderr));
    // A broken one fails naming the directory, not the Hub.
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let o = run("sentence-transformers/all-MiniLM-L6-v2");
    let e = text(&o.stderr);
    assert!(!o.status.success() && e.contains("loading the model in the local directory"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn outputs_print_each_f32_in_its_shortest_form() {
    // The significant digits of each number in `out`: at most 9 for an f32's shortest decimal,
    // 15 to 17 for the decimal of its widening to f64.
    fn longest_number(out: &str) -> usize {
        out.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e'))
            .filter(|t| t.contains('.'))
            .map(|t| {
                let mantissa = t.split('e').next().unwrap_or_default();
                mantissa.chars().filter(char::is_ascii_digit).skip_while(|&c| c == '0').count()
            })
            .max()
            .unwrap_or(0)
    }
    let runs = [
        ["embed", "--model", &tiny("bert"), "a dog runs", "hello world"],
        ["classify", "--model", &tiny("bert-classifier"), "a dog runs", "hello world"],
        ["classify", "--model", &tiny("bert-token-classifier"), "a dog runs", "hello world"],
        ["embed", "--model", &tiny("bert-splade"), "a dog runs", "hello world"],
    ];
    for args in runs {
        let o = switchyard(&args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        let out = text(&o.stdout);
        assert!(out.contains('.'), "{args:?} printed no numbers: {out}");
        assert!(longest_number(&out) <= 9, "{args:?}: {out}");
    }
    let o = switchyard(&[
        "rerank",
        "--model",
        &tiny("bert-cross-encoder"),
        "--query",
        "dog",
        "a dog",
        "a cat",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(longest_number(&text(&o.stdout)) <= 9, "{}", text(&o.stdout));
}
