//! `cargo xtask bench --peers`: Switchyard's flex (the engine alone, and through the Python
//! package) beside ONNX Runtime (fp32 and int8) and sentence-transformers, embedding one corpus of real texts with the real all-MiniLM-L6-v2, at
//! each thread count asked for, in one run.
//!
//! Three corpora: real texts of mixed lengths (truncated at 256 tokens); real texts all cut to
//! 128 tokens, where sorting and ragged batches cannot save anyone padding; and whole documents
//! (licence and copyright files) truncated at 256 tokens, where tokenizing only the part a model
//! keeps pays. Everything it needs
//! is made on first use and kept in caches: a Python environment with the peers (pinned
//! versions, installed with pip into `$HOME/.cache/switchyard/bench-venv`, about 3 GB, for PyPI's
//! torch is a CUDA build), the corpora (`crates/bench/peers/corpus.py`, into `.cache/bench/`),
//! and the ONNX exports (`crates/bench/peers/export_onnx.py`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The peers' packages, pinned so that runs compare (`datasets` and `accelerate` are what
/// sentence-transformers' `fit` needs).
const PACKAGES: [&str; 7] = [
    "torch==2.9.0",
    "transformers==5.24.0",
    "sentence-transformers==6.2.0",
    "onnxruntime==1.32.0",
    "onnx==1.23.2",
    "datasets==5.2.0",
    "accelerate==1.15.0",
];

/// A corpus the peers and flex embed: its file under `.cache/bench`, how many texts of at least
/// how many words `corpus.py` picks (or, for `documents`, how many whole files), and where
/// every engine truncates.
pub(crate) struct Corpus {
    file: &'static str,
    texts: usize,
    min_words: usize,
    documents: bool,
    max_len: usize,
    about: &'static str,
}

/// Mixed lengths, as embedding sees them; then equal lengths, where padding cannot help anyone.
pub(crate) const CORPORA: [Corpus; 2] = [
    Corpus {
        file: "corpus.jsonl",
        texts: 1000,
        min_words: 20,
        documents: false,
        max_len: 256,
        about: "real texts of mixed lengths, truncated at 256 tokens",
    },
    Corpus {
        file: "corpus-128.jsonl",
        texts: 500,
        min_words: 120,
        documents: false,
        max_len: 128,
        about: "real texts of at least 120 words, all truncated to 128 tokens",
    },
];

/// Whole documents, far longer than the model takes, where tokenizing only what it keeps pays
/// (`--peers` here only: the device bundle has no room for them).
const DOCUMENTS: Corpus = Corpus {
    file: "documents.jsonl",
    texts: 100,
    min_words: 0,
    documents: true,
    max_len: 256,
    about: "whole licence and copyright files of 8 to 100 thousand characters, truncated at 256 tokens",
};

impl Corpus {
    /// The corpus' file, built by `corpus.py` from the machine's files if it is not there yet.
    pub(crate) fn ensure(&self) -> Result<PathBuf, String> {
        let root = crate::workspace();
        let corpus = root.join(".cache/bench").join(self.file);
        if !corpus.is_file() {
            let mut cmd = Command::new("python3");
            cmd.arg(root.join("crates/bench/peers/corpus.py")).arg(&corpus);
            if self.documents {
                cmd.args(["--documents", &self.texts.to_string()]);
            } else {
                cmd.args([self.texts.to_string(), self.min_words.to_string()]);
            }
            step(&format!("building the corpus {}", self.file), &mut cmd)?;
        }
        Ok(corpus)
    }

    /// The name of its file of run lines in a results folder (`crates/bench/peers/device.sh`).
    fn runs_file(&self) -> String {
        format!("runs-{}.tsv", self.file.trim_end_matches(".jsonl"))
    }
}

fn home_cache() -> PathBuf {
    std::env::var_os("HOME")
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
        .join(".cache/switchyard")
}

/// Runs `cmd`, saying what it does; an error naming it if it fails.
pub(crate) fn step(what: &str, cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: {what}");
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{what} failed ({s})")),
        Err(e) => Err(format!("{what}: could not start it: {e}")),
    }
}

/// Empties `dir` unless what it holds was made by `scripts` as they read now, and records them
/// (their text under `dir/made-by/`): a change to a script that makes a cache reaches the next
/// run instead of leaving it stale.
pub(crate) fn cache_made_by(dir: &Path, scripts: &[PathBuf]) -> Result<(), String> {
    let made_by = dir.join("made-by");
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut texts = Vec::new();
    for script in scripts {
        let name =
            script.file_name().ok_or_else(|| format!("{}: no file name", script.display()))?;
        texts.push((made_by.join(name), read(script)?));
    }
    let stale = texts.iter().any(|(copy, text)| std::fs::read(copy).ok().as_ref() != Some(text));
    if stale && dir.exists() {
        eprintln!("xtask: {} was made by other scripts: making it again", dir.display());
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&made_by).map_err(|e| format!("{}: {e}", made_by.display()))?;
    for (copy, text) in texts {
        std::fs::write(&copy, text).map_err(|e| format!("{}: {e}", copy.display()))?;
    }
    Ok(())
}

/// The Python of the peers' environment, made and filled on first use.
pub(crate) fn python() -> Result<PathBuf, String> {
    let venv = home_cache().join("bench-venv");
    let py = venv.join("bin/python");
    let stamp = venv.join("switchyard-packages.txt");
    let want = PACKAGES.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(py);
    }
    step(
        "making the peers' Python environment",
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
    )?;
    step(
        "installing the peers with pip (about 3 GB the first time)",
        Command::new(&py).args(["-m", "pip", "install", "--quiet"]).args(PACKAGES),
    )?;
    std::fs::write(&stamp, want).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(py)
}

/// `switchyard-bench` built in release mode: its path.
pub(crate) fn release_bench() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    step(
        "building switchyard-bench (release)",
        Command::new(cargo).args([
            "build",
            "--release",
            "--quiet",
            "--package",
            "switchyard-bench",
        ]),
    )?;
    Ok(crate::target_dir().join("release/switchyard-bench"))
}

/// One timed run, as `peers.py` and `switchyard-bench corpus` print it.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) engine: String,
    pub(crate) order: String,
    pub(crate) threads: usize,
    pub(crate) texts: usize,
    pub(crate) tokens: usize,
    pub(crate) wall: f64,
    pub(crate) cpu: f64,
    pub(crate) max_diff: f64,
}

/// A `run` line: tab-separated engine, order, threads, texts, tokens, wall and CPU seconds,
/// largest difference.
fn parse(line: &str) -> Option<Run> {
    let f: Vec<&str> = line.trim_end().split('\t').collect();
    let [tag, engine, order, threads, texts, tokens, wall, cpu, max_diff] = f[..] else {
        return None;
    };
    (tag == "run").then_some(())?;
    Some(Run {
        engine: engine.to_owned(),
        order: order.to_owned(),
        threads: threads.parse().ok()?,
        texts: texts.parse().ok()?,
        tokens: tokens.parse().ok()?,
        wall: wall.parse().ok()?,
        cpu: cpu.parse().ok()?,
        max_diff: max_diff.parse().ok()?,
    })
}

/// Runs `cmd` and reads the runs it prints.
pub(crate) fn runs(what: &str, cmd: &mut Command) -> Result<Vec<Run>, String> {
    eprintln!("xtask bench: {what}");
    let out = cmd.output().map_err(|e| format!("{what}: could not start it: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().filter_map(parse).collect())
}

/// The task: exits non-zero if any step fails.
pub fn bench_peers(threads: &[usize]) -> ExitCode {
    match run(threads) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench --peers: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(threads: &[usize]) -> Result<(), String> {
    if crate::models::fetch_models() != ExitCode::SUCCESS {
        return Err("the real models could not be fetched".into());
    }
    let root = crate::workspace();
    let model = root.join(".cache/models/all-MiniLM-L6-v2");
    let peers = root.join("crates/bench/peers");
    let cache = root.join(".cache/bench");
    let py = python()?;
    let onnx = cache.join("onnx");
    cache_made_by(&onnx, &[peers.join("export_onnx.py")])?;
    if !onnx.join("model-int8.onnx").is_file() {
        step(
            "exporting all-MiniLM-L6-v2 to ONNX (fp32, int8)",
            Command::new(&py).arg(peers.join("export_onnx.py")).arg(&model).arg(&onnx),
        )?;
    }
    let bench = release_bench()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = crate::target_dir();
    step(
        "building the Python package's native module (release)",
        Command::new(&cargo).args([
            "build",
            "--release",
            "--quiet",
            "--package",
            "switchyard-python",
        ]),
    )?;
    let package = target.join("python-package-release");
    crate::python::stage(
        &root.join("crates/python/python/switchyard"),
        &target.join("release"),
        &package,
    )?;
    for c in CORPORA.iter().chain([&DOCUMENTS]) {
        let corpus = c.ensure()?;
        let max_len = c.max_len.to_string();
        let mut all = Vec::new();
        for &n in threads {
            let n = n.to_string();
            all.extend(runs(
                &format!("Switchyard flex on {}, {n} threads", c.file),
                Command::new(&bench)
                    .args(["corpus", "--model"])
                    .arg(&model)
                    .arg("--corpus")
                    .arg(&corpus)
                    .args(["--threads", &n, "--max-len", &max_len]),
            )?);
            all.extend(runs(
                &format!("ONNX Runtime and sentence-transformers on {}, {n} threads", c.file),
                Command::new(&py)
                    .env("PYTHONPATH", &package)
                    .arg(peers.join("peers.py"))
                    .arg("--model")
                    .arg(&model)
                    .arg("--onnx")
                    .arg(&onnx)
                    .arg("--corpus")
                    .arg(&corpus)
                    .args(["--threads", &n, "--max-len", &max_len])
                    .args(["--engines", "py,ort,ort-int8,st"]),
            )?);
        }
        report(c.about, &all);
    }
    Ok(())
}

/// `cargo xtask bench --report DIR`: the tables of `--peers` from the run lines that
/// `crates/bench/peers/device.sh` wrote into `DIR` on another machine (`runs-corpus.tsv`,
/// `runs-corpus-128.tsv`, `runs-gpu-corpus.tsv`); the files it finds, or an error if none.
pub fn report_dir(dir: &Path) -> ExitCode {
    let read = |name: &str| -> Option<Vec<Run>> {
        let text = std::fs::read_to_string(dir.join(name)).ok()?;
        Some(text.lines().filter_map(parse).collect())
    };
    let mut found = 0;
    if let Ok(machine) = std::fs::read_to_string(dir.join("machine.txt")) {
        println!("{}", machine.trim_end());
    }
    for c in &CORPORA {
        if let Some(all) = read(&c.runs_file()) {
            found += 1;
            report(c.about, &all);
        }
    }
    if let Some(all) = read("runs-gpu-corpus.tsv") {
        found += 1;
        report("real texts of mixed lengths, truncated at 256 tokens, on the GPU", &all);
        for line in versus_best(&all, "switchyard", "st-cuda") {
            println!("{line}");
        }
    }
    if found == 0 {
        eprintln!("xtask bench --report: no runs-*.tsv with run lines in {}", dir.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// `cargo xtask bench --gpu`: runs the benchmarks (`bench`, whose output it passes through and
/// keeps in `.cache/bench/gpu-ours.txt`), then, where `python3` has torch and transformers,
/// `peers/gpu_peer.py` on the same batches beside them.
pub fn with_gpu_peer(bench: &mut Command) -> Result<(), String> {
    let out = bench
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start cargo: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    print!(
        "{}",
        text.lines()
            .filter(|l| !l.starts_with("gpu\t"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    if !out.status.success() {
        return Err(format!("the benchmarks failed ({})", out.status));
    }
    let root = crate::workspace();
    let ours = root.join(".cache/bench/gpu-ours.txt");
    std::fs::create_dir_all(root.join(".cache/bench")).map_err(|e| e.to_string())?;
    std::fs::write(&ours, text.as_bytes()).map_err(|e| format!("{}: {e}", ours.display()))?;
    if !text.lines().any(|l| l.starts_with("gpu\t")) {
        return Ok(());
    }
    let torch = Command::new("python3").args(["-c", "import torch, transformers"]).output();
    if !torch.is_ok_and(|o| o.status.success()) {
        println!(
            "(no PyTorch peer: python3 cannot import torch and transformers; the batches are in {})",
            ours.display()
        );
        return Ok(());
    }
    step(
        "PyTorch on the same batches",
        Command::new("python3")
            .arg(root.join("crates/bench/peers/gpu_peer.py"))
            .arg("--ours")
            .arg(&ours),
    )
}

/// One timed training run, as `switchyard-bench train` and `peers/train_peer.py` print it.
struct TrainRun {
    engine: String,
    threads: usize,
    records: usize,
    tokens: usize,
    wall: f64,
    cpu: f64,
    peak_mib: f64,
}

/// A training `run` line: engine, threads, records, tokens, wall and CPU seconds, peak memory.
fn parse_train(line: &str) -> Option<TrainRun> {
    let f: Vec<&str> = line.trim_end().split('\t').collect();
    let [tag, engine, threads, records, tokens, wall, cpu, peak] = f[..] else {
        return None;
    };
    (tag == "run").then_some(())?;
    Some(TrainRun {
        engine: engine.to_owned(),
        threads: threads.parse().ok()?,
        records: records.parse().ok()?,
        tokens: tokens.parse().ok()?,
        wall: wall.parse().ok()?,
        cpu: cpu.parse().ok()?,
        peak_mib: peak.parse().ok()?,
    })
}

/// `cargo xtask bench --train`: all-MiniLM-L6-v2 fine-tuned with MultipleNegativesRankingLoss
/// on flex (`switchyard-bench train`) beside sentence-transformers' `fit` on PyTorch
/// (`peers/train_peer.py`), on the same anchor-positive pairs from the machine's manual pages
/// (`peers/man_pages.py`), batch and truncation, at each thread count.
pub fn bench_train(threads: &[usize]) -> ExitCode {
    let result = (|| -> Result<(), String> {
        if crate::models::fetch_models() != ExitCode::SUCCESS {
            return Err("the real models could not be fetched".into());
        }
        let root = crate::workspace();
        let model = root.join(".cache/models/all-MiniLM-L6-v2");
        let peers = root.join("crates/bench/peers");
        let man = root.join(".cache/bench/man");
        let data = man.join("pairs-train.jsonl");
        if !data.is_file() {
            step(
                "building training pairs from the manual pages",
                Command::new("python3").arg(peers.join("man_pages.py")).arg(&man),
            )?;
        }
        let py = python()?;
        let bench = release_bench()?;
        let (batch, max_len) = ("32", "128");
        let mut all = Vec::new();
        for &n in threads {
            let n = n.to_string();
            let common = |cmd: &mut Command| {
                cmd.arg("--model").arg(&model).arg("--data").arg(&data);
                cmd.args(["--threads", &n, "--batch", batch, "--max-len", max_len]);
            };
            for (what, mut cmd) in [
                (format!("Switchyard flex training, {n} threads"), {
                    let mut c = Command::new(&bench);
                    c.arg("train");
                    c
                }),
                (format!("sentence-transformers fit, {n} threads"), {
                    let mut c = Command::new(&py);
                    c.arg(peers.join("train_peer.py"));
                    c
                }),
            ] {
                common(&mut cmd);
                eprintln!("xtask bench: {what}");
                let out = cmd.output().map_err(|e| format!("{what}: could not start it: {e}"))?;
                if !out.status.success() {
                    return Err(format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr)));
                }
                eprint!("{}", String::from_utf8_lossy(&out.stderr));
                all.extend(String::from_utf8_lossy(&out.stdout).lines().filter_map(parse_train));
            }
        }
        println!();
        println!(
            "all-MiniLM-L6-v2, MultipleNegativesRankingLoss, one epoch of manual-page pairs, \
             batches of {batch}, truncated at {max_len} tokens"
        );
        println!(
            "{:>7}  {:<26} {:>7} {:>8} {:>9} {:>9} {:>10} {:>9} {:>9}",
            "threads",
            "engine",
            "records",
            "tokens",
            "wall s",
            "tokens/s",
            "per CPU-s",
            "x ST",
            "peak MiB"
        );
        for r in &all {
            let st =
                all.iter().find(|p| p.threads == r.threads && p.engine.starts_with("sentence"));
            let x = st.map_or(f64::NAN, |p| p.wall / r.wall * r.tokens as f64 / p.tokens as f64);
            println!(
                "{:>7}  {:<26} {:>7} {:>8} {:>9.1} {:>9.0} {:>10.0} {:>9.2} {:>9.0}",
                r.threads,
                r.engine,
                r.records,
                r.tokens,
                r.wall,
                r.tokens as f64 / r.wall,
                r.tokens as f64 / r.cpu,
                x,
                r.peak_mib
            );
        }
        println!(
            "(tokens: each text's, special tokens included, no padding; x ST: tokens per second \
             over sentence-transformers' at the same thread count; peak MiB: the process's peak resident \
             memory, the Python runtime and torch included for the peer)"
        );
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench --train: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask bench --serve`: `switchyard serve`'s server under load beside the CLI's way of
/// embedding the same corpus (64 clients, one client, a second device on loopback), then the
/// soak; both print their own tables.
pub fn bench_serve() -> ExitCode {
    let result = (|| -> Result<(), String> {
        if crate::models::fetch_models() != ExitCode::SUCCESS {
            return Err("the real models could not be fetched".into());
        }
        let root = crate::workspace();
        let model = root.join(".cache/models/all-MiniLM-L6-v2");
        let corpus = CORPORA[0].ensure()?;
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut bench = Command::new(cargo);
        bench.args(["run", "--release", "--quiet", "--package", "switchyard-bench", "--"]);
        let common = |cmd: &mut Command| {
            cmd.arg("--model").arg(&model).arg("--corpus").arg(&corpus);
            cmd.args(["--max-len", &CORPORA[0].max_len.to_string()]);
        };
        let mut serve = Command::new(bench.get_program());
        serve.args(bench.get_args()).args([
            "serve",
            "--clients",
            "64",
            "--texts",
            "500",
            "--remote",
        ]);
        common(&mut serve);
        step("the server beside the CLI", &mut serve)?;
        let mut soak = Command::new(bench.get_program());
        soak.args(bench.get_args()).args(["soak", "--requests", "10000"]);
        common(&mut soak);
        step("the soak", &mut soak)
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench --serve: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Texts per wall second and per CPU second of `r` as ratios to those of `engine`'s run sorted by
/// length at the same thread count (NaN without one).
fn ratios(all: &[Run], r: &Run, engine: &str) -> (f64, f64) {
    let peer =
        all.iter().find(|p| p.threads == r.threads && p.engine == engine && p.order == "sorted");
    peer.map_or((f64::NAN, f64::NAN), |p| (p.wall / r.wall, p.cpu / r.cpu))
}

/// Each run of an engine named `ours...` as a multiple of the fastest run of an engine named
/// `peer...` (sentence-transformers on the GPU, in fp32 or fp16: its users' best).
fn versus_best(all: &[Run], ours: &str, peer: &str) -> Vec<String> {
    let speed = |r: &Run| r.texts as f64 / r.wall;
    let best = all
        .iter()
        .filter(|r| r.engine.starts_with(peer))
        .max_by(|a, b| speed(a).total_cmp(&speed(b)));
    let Some(best) = best else { return Vec::new() };
    all.iter()
        .filter(|r| r.engine.starts_with(ours))
        .map(|r| {
            format!(
                "{} ({}): {:.2}x {} ({:.1} texts/s)",
                r.engine,
                r.order,
                speed(r) / speed(best),
                best.engine,
                speed(best)
            )
        })
        .collect()
}

/// For each engine and order run at more than one thread count: its speed at each count as a
/// multiple of its speed at the fewest threads (the "16 threads >= 6x of 2").
fn scaling(all: &[Run]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for r in all {
        let key = (r.engine.as_str(), r.order.as_str());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let mut same: Vec<&Run> =
            all.iter().filter(|p| (p.engine.as_str(), p.order.as_str()) == key).collect();
        same.sort_by_key(|p| p.threads);
        let [base, rest @ ..] = &same[..] else { continue };
        if rest.is_empty() || base.threads == rest[rest.len() - 1].threads {
            continue;
        }
        let steps: Vec<String> = rest
            .iter()
            .map(|p| format!("{} threads {:.2}x", p.threads, base.wall / p.wall))
            .collect();
        lines.push(format!(
            "scaling of {} ({}) over its {} threads: {}",
            key.0,
            key.1,
            base.threads,
            steps.join(", ")
        ));
    }
    lines
}

/// A ratio for the table, or `-` where its peer did not run.
fn cell(ratio: f64) -> String {
    if ratio.is_nan() { "-".to_owned() } else { format!("{ratio:.2}") }
}

/// The table: texts per wall second and per CPU second, each as a ratio to ONNX Runtime fp32
/// sorted by length at the same thread count, and speed as a ratio to ONNX Runtime int8.
fn report(about: &str, all: &[Run]) {
    let Some(first) = all.first() else { return };
    println!();
    println!(
        "all-MiniLM-L6-v2 on {} {about} ({} tokens); embeddings, tokenizing included",
        first.texts, first.tokens
    );
    println!(
        "{:>7}  {:<30} {:<22} {:>10} {:>10} {:>9} {:>9} {:>10} {:>9}",
        "threads",
        "engine",
        "order",
        "texts/s",
        "per CPU-s",
        "x ORT",
        "x ORT CPU",
        "x ORT-int8",
        "max diff"
    );
    for r in all {
        let (x, xc) = ratios(all, r, "ort");
        let (x8, _) = ratios(all, r, "ort-int8");
        println!(
            "{:>7}  {:<30} {:<22} {:>10.1} {:>10.1} {:>9} {:>9} {:>10} {:>9.1e}",
            r.threads,
            r.engine,
            r.order,
            r.texts as f64 / r.wall,
            r.texts as f64 / r.cpu,
            cell(x),
            cell(xc),
            cell(x8),
            r.max_diff
        );
    }
    println!(
        "(x ORT, x ORT-int8: speed relative to ONNX Runtime fp32 or int8 sorted by length at the \
         same thread count, - where it did not run; max diff: the largest difference from the \
         program's first run's embeddings, f32's: so for bf16 and int8 runs, from f32)"
    );
    for line in scaling(all) {
        println!("{line}");
    }
    for py in all.iter().filter(|r| r.engine == "switchyard python") {
        let engine = all.iter().find(|r| {
            r.engine == "switchyard flex" && r.order == py.order && r.threads == py.threads
        });
        if let Some(e) = engine {
            println!(
                "the Python package at {} threads, {}: {:.3}x the engine's texts/s",
                py.threads,
                py.order,
                e.wall / py.wall
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_lines_parse_and_other_lines_do_not() {
        let r = parse("run\tort\tsorted\t2\t1000\t90000\t3.5\t6.9\t0.0\n").unwrap();
        assert_eq!(
            (r.engine.as_str(), r.order.as_str(), r.threads, r.tokens),
            ("ort", "sorted", 2, 90000)
        );
        assert_eq!((r.wall, r.cpu), (3.5, 6.9));
        assert!(parse("Batches: 100%").is_none());
        assert!(parse("run\tort\tsorted").is_none());
        assert!(parse("cosine\tort\tsorted\t0.99\t0.999").is_none());
    }

    #[test]
    fn a_ratio_without_its_peer_is_a_dash() {
        assert_eq!(cell(f64::NAN), "-");
        assert_eq!(cell(1.234), "1.23");
    }

    #[test]
    fn a_report_needs_a_file_of_runs() {
        let dir = std::env::temp_dir().join(format!("switchyard-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(report_dir(&dir), ExitCode::FAILURE, "an empty folder is an error");
        let line = "run\tort\tsorted\t2\t1000\t90000\t3.5\t6.9\t0.0\n";
        std::fs::write(dir.join(CORPORA[1].runs_file()), line).unwrap();
        assert_eq!(report_dir(&dir), ExitCode::SUCCESS);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ours_are_set_against_the_fastest_peer() {
        let run = |engine: &str, wall| Run {
            engine: engine.into(),
            order: "file".into(),
            threads: 16,
            texts: 100,
            tokens: 1000,
            wall,
            cpu: wall,
            max_diff: 0.0,
        };
        let all = [run("switchyard cuda:0", 1.0), run("st-cuda", 4.0), run("st-cuda-fp16", 2.0)];
        assert_eq!(
            versus_best(&all, "switchyard", "st-cuda"),
            ["switchyard cuda:0 (file): 2.00x st-cuda-fp16 (50.0 texts/s)"]
        );
        assert!(versus_best(&all[..1], "switchyard", "st-cuda").is_empty());
    }

    #[test]
    fn scaling_is_each_thread_count_over_the_fewest() {
        let run = |engine: &str, threads, wall| Run {
            engine: engine.into(),
            order: "file".into(),
            threads,
            texts: 10,
            tokens: 100,
            wall,
            cpu: wall,
            max_diff: 0.0,
        };
        let all = [run("a", 16, 1.0), run("a", 2, 6.0), run("a", 8, 2.0), run("b", 2, 1.0)];
        assert_eq!(
            scaling(&all),
            ["scaling of a (file) over its 2 threads: 8 threads 3.00x, 16 threads 6.00x"]
        );
    }

    #[test]
    fn a_cache_made_by_a_changed_script_is_made_again() {
        let dir = std::env::temp_dir().join(format!("xtask-made-by-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (cache, script) = (dir.join("cache"), dir.join("make.py"));
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::write(&script, "one").unwrap();
        let made = cache.join("model.onnx");
        // A cache from before the scripts were recorded is made again, once.
        std::fs::write(&made, "old").unwrap();
        cache_made_by(&cache, std::slice::from_ref(&script)).unwrap();
        assert!(!made.exists());
        std::fs::write(&made, "new").unwrap();
        cache_made_by(&cache, std::slice::from_ref(&script)).unwrap();
        assert!(made.exists(), "the same script keeps what it made");
        std::fs::write(&script, "two").unwrap();
        cache_made_by(&cache, std::slice::from_ref(&script)).unwrap();
        assert!(!made.exists(), "a changed script empties the cache");
        assert_eq!(std::fs::read(cache.join("made-by/make.py")).unwrap(), b"two");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
