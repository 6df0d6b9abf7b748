//! Sentence embeddings and their similarities.
//!
//! `cargo run --example embed -- MODEL [DEVICE]`, where MODEL is a checkpoint directory or a
//! Hugging Face repository id (such as sentence-transformers/all-MiniLM-L6-v2) and DEVICE a
//! device name (default flex). Without arguments it runs on a tiny test checkpoint of this
//! repository, whose numbers mean nothing.

// An example shows its results on stdout.
#![allow(clippy::print_stdout)]

use switchyard::Embedder;
use switchyard::models::scores::cosine;

fn main() -> switchyard::Result<()> {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| tiny("bert"));
    let device = args.next().unwrap_or_else(|| "flex".to_owned());

    let mut embedder = Embedder::open(&model, &device)?;
    let texts = ["A man is eating food.", "A man eats a meal.", "The stock market fell."];
    let vectors = embedder.embed(&texts)?;
    println!("{} embeddings of {} dimensions", vectors.len(), embedder.dim());
    for (i, a) in texts.iter().enumerate() {
        for (j, b) in texts.iter().enumerate().skip(i + 1) {
            println!("{:.4}  {a:?}  {b:?}", cosine(&vectors[i], &vectors[j]));
        }
    }
    Ok(())
}

/// A tiny checkpoint made by crates/models/tests/fixtures/make_fixtures.py.
fn tiny(name: &str) -> String {
    format!("{}/../models/tests/fixtures/tiny/{name}", env!("CARGO_MANIFEST_DIR"))
}
