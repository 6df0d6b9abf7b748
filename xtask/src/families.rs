//! `cargo xtask bench --families`: what each model family's own parts cost, on flex and on its
//! peers. Random-weight encoders of one shape (deberta-v3-xsmall's sizes: 12 layers, 384 wide, 6
//! heads), one per family (`crates/bench/peers/same_shape.py`, from the real all-MiniLM-L6-v2's
//! tokenizer and pooling), each embed the first [`TEXTS`] texts of `--peers`' mixed corpus on
//! flex (f32), ONNX Runtime fp32 (where the family exports to ONNX) and sentence-transformers,
//! each sorted by length, at each thread count. The table gives each engine's seconds, flex's
//! speed over each peer, and each family's time over the BERT's on the same engine: what its
//! parts cost there. The models, their exports and the cut corpus are kept in
//! `.cache/bench/families`.

use std::path::Path;
use std::process::{Command, ExitCode};

use crate::peers::{CORPORA, Run, cache_made_by, python, release_bench, runs, step};

/// The families `same_shape.py` makes, the BERT first: every other is set against it.
const FAMILIES: [&str; 7] = ["bert", "deberta", "nomic", "gte", "jina", "gemma", "qwen3"];

/// Texts of the mixed corpus embedded: enough for every engine to run its batches at speed,
/// few enough that seven families on three engines take minutes.
const TEXTS: usize = 300;

/// The task: exits non-zero if any step fails.
pub fn bench_families(threads: &[usize]) -> ExitCode {
    match run(threads) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench --families: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(threads: &[usize]) -> Result<(), String> {
    if crate::models::fetch_models() != ExitCode::SUCCESS {
        return Err("the real models could not be fetched".into());
    }
    let root = crate::workspace();
    let minilm = root.join(".cache/models/all-MiniLM-L6-v2");
    let peers = root.join("crates/bench/peers");
    let cache = root.join(".cache/bench/families");
    let py = python()?;
    cache_made_by(&cache, &[peers.join("same_shape.py"), peers.join("export_onnx.py")])?;
    let corpus = cut_corpus(&CORPORA[0].ensure()?, &cache)?;
    let mut exported = Vec::new();
    for family in FAMILIES {
        let model = cache.join(family);
        if !model.join("config.json").is_file() {
            step(
                &format!("making a random-weight {family} of the shared shape"),
                Command::new(&py)
                    .arg(peers.join("same_shape.py"))
                    .arg(&minilm)
                    .arg(&cache)
                    .arg(family),
            )?;
        }
        let onnx = cache.join(format!("onnx-{family}"));
        let export = || {
            step(
                &format!("exporting the {family} to ONNX"),
                Command::new(&py).arg(peers.join("export_onnx.py")).arg(&model).arg(&onnx),
            )
        };
        // A family that neither of torch's ONNX exporters takes runs without ONNX Runtime.
        if onnx.join("model.onnx").is_file() || export().is_ok() {
            exported.push(family);
        } else {
            eprintln!("xtask bench --families: no ONNX Runtime for the {family}");
        }
    }
    let bench = release_bench()?;
    for &n in threads {
        let n = n.to_string();
        let mut all: Vec<(&str, Run)> = Vec::new();
        for family in FAMILIES {
            let model = cache.join(family);
            let flex = runs(
                &format!("Switchyard flex, the {family}, {n} threads"),
                Command::new(&bench)
                    .args(["corpus", "--model"])
                    .arg(&model)
                    .arg("--corpus")
                    .arg(&corpus)
                    .args(["--threads", &n, "--dtypes", "f32", "--orders", "sorted"]),
            )?;
            let engines = if exported.contains(&family) { "ort,st" } else { "st" };
            let peers = runs(
                &format!("the peers ({engines}), the {family}, {n} threads"),
                Command::new(&py)
                    .arg(peers.join("peers.py"))
                    .arg("--model")
                    .arg(&model)
                    .arg("--onnx")
                    .arg(cache.join(format!("onnx-{family}")))
                    .arg("--corpus")
                    .arg(&corpus)
                    .args(["--threads", &n, "--max-len", "256", "--orders", "sorted"])
                    .args(["--engines", engines]),
            )?;
            all.extend(flex.into_iter().chain(peers).map(|r| (family, r)));
        }
        for line in table(&all) {
            println!("{line}");
        }
    }
    Ok(())
}

/// The first [`TEXTS`] lines of `corpus`, in a file of their own under `cache`.
fn cut_corpus(corpus: &Path, cache: &Path) -> Result<std::path::PathBuf, String> {
    let cut = cache.join(format!("corpus-{TEXTS}.jsonl"));
    let text = std::fs::read_to_string(corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    let lines: Vec<&str> = text.lines().take(TEXTS).collect();
    std::fs::create_dir_all(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    std::fs::write(&cut, lines.join("\n") + "\n").map_err(|e| format!("{}: {e}", cut.display()))?;
    Ok(cut)
}

/// The run of `engine` on `family`, sorted by length (as each engine sorts), if there is one.
fn sorted_run<'a>(all: &'a [(&str, Run)], family: &str, engine: &str) -> Option<&'a Run> {
    let sorted = |r: &Run| r.order == "sorted" || r.order == "sorted by the engine";
    all.iter().find(|(f, r)| *f == family && r.engine == engine && sorted(r)).map(|(_, r)| r)
}

/// The table of one thread count's runs: seconds, flex's speed over each peer, each family's
/// time over the BERT's on each engine, and how far the peers' embeddings agree; `-` where a
/// run is missing.
fn table(all: &[(&str, Run)]) -> Vec<String> {
    let Some((_, first)) = all.first() else { return Vec::new() };
    let engines = ["switchyard flex", "ort", "st"];
    let columns = [
        "family",
        "flex",
        "ORT",
        "ST",
        "flex x ORT",
        "flex x ST",
        "flex / BERT",
        "ORT / BERT",
        "ST / BERT",
        "ST vs ORT",
    ];
    let row = |cells: [String; 10]| {
        let [name, rest @ ..] = cells;
        rest.iter().zip(&columns[1..]).fold(format!("{name:<8}"), |line, (cell, column)| {
            format!("{line} {cell:>w$}", w = column.len().max(7))
        })
    };
    let mut lines = vec![
        String::new(),
        format!(
            "random-weight encoders of one shape on {} texts ({} tokens), {} threads, f32, \
             sorted by length: wall seconds",
            first.texts, first.tokens, first.threads
        ),
        row(columns.map(str::to_owned)),
    ];
    let cell = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.2}"));
    let time = |family: &str, engine: &str| sorted_run(all, family, engine).map(|r| r.wall);
    for family in FAMILIES {
        let [flex, ort, st] = engines.map(|e| time(family, e));
        let [bflex, bort, bst] = engines.map(|e| time("bert", e));
        let over = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
        // peers.py's differences are from its first engine's embeddings: ONNX Runtime's.
        let agree = ort.and(sorted_run(all, family, "st")).map(|r| format!("{:.1e}", r.max_diff));
        lines.push(row([
            family.to_owned(),
            cell(flex),
            cell(ort),
            cell(st),
            cell(over(ort, flex)),
            cell(over(st, flex)),
            cell(over(flex, bflex)),
            cell(over(ort, bort)),
            cell(over(st, bst)),
            agree.unwrap_or_else(|| "-".to_owned()),
        ]));
    }
    lines.push(
        "(flex x ORT, flex x ST: flex's speed over ONNX Runtime fp32's and \
         sentence-transformers'; / BERT: the family's time over the BERT's on that engine; ST vs \
         ORT: the largest difference between the two peers' normalised embeddings, which says \
         whether the export computes the family)"
            .to_owned(),
    );
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(engine: &str, order: &str, wall: f64) -> Run {
        Run {
            engine: engine.to_owned(),
            order: order.to_owned(),
            threads: 2,
            texts: 300,
            tokens: 30858,
            wall,
            cpu: 2.0 * wall,
            max_diff: 0.0,
        }
    }

    #[test]
    fn families_are_set_against_their_peers_and_the_bert() {
        let all = vec![
            ("bert", run("switchyard flex", "sorted", 6.0)),
            ("bert", run("ort", "file", 30.0)),
            ("bert", run("ort", "sorted", 12.0)),
            ("bert", Run { max_diff: 1.2e-7, ..run("st", "sorted by the engine", 9.0) }),
            ("deberta", run("switchyard flex", "sorted", 7.5)),
            ("deberta", run("ort", "sorted", 18.0)),
            ("deberta", run("st", "sorted by the engine", 22.5)),
            // No export: ONNX Runtime's columns are dashes.
            ("nomic", run("switchyard flex", "sorted", 9.0)),
            ("nomic", run("st", "sorted by the engine", 13.5)),
        ];
        let lines = table(&all);
        let row = |family: &str| {
            let line = lines.iter().find(|l| l.starts_with(family)).expect("a row");
            line.split_whitespace().skip(1).map(str::to_owned).collect::<Vec<_>>()
        };
        let bert = ["6.00", "12.00", "9.00", "2.00", "1.50", "1.00", "1.00", "1.00", "1.2e-7"];
        assert_eq!(row("bert"), bert);
        let deberta = ["7.50", "18.00", "22.50", "2.40", "3.00", "1.25", "1.50", "2.50", "0.0e0"];
        assert_eq!(row("deberta"), deberta);
        assert_eq!(row("nomic"), ["9.00", "-", "13.50", "-", "1.50", "1.50", "-", "1.50", "-"]);
        // A family with no runs at all is a row of dashes, not a missing row.
        assert_eq!(row("qwen3"), ["-"; 9]);
    }
}
