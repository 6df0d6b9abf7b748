//! Ranking documents against a query with a cross-encoder.
//!
//! `cargo run --example rerank -- MODEL [DEVICE]`, where MODEL is a cross-encoder's checkpoint
//! directory or Hugging Face repository id (such as cross-encoder/ms-marco-MiniLM-L6-v2) and
//! DEVICE a device name (default flex). Without arguments it runs on a tiny test checkpoint of
//! this repository, whose numbers mean nothing.

// An example shows its results on stdout.
#![allow(clippy::print_stdout)]

use switchyard::Reranker;

fn main() -> switchyard::Result<()> {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| tiny("bert-cross-encoder"));
    let device = args.next().unwrap_or_else(|| "flex".to_owned());

    let mut reranker = Reranker::open(&model, &device)?;
    let query = "How many people live in Berlin?";
    let docs = [
        "Berlin has a population of 3,520,031 registered inhabitants.",
        "New York City is famous for the Metropolitan Museum of Art.",
        "Berlin is the capital of Germany.",
    ];
    for r in reranker.rank(query, &docs)? {
        println!("{:.4}  {}", r.score, docs[r.index]);
    }
    Ok(())
}

/// A tiny checkpoint made by crates/models/tests/fixtures/make_fixtures.py.
fn tiny(name: &str) -> String {
    format!("{}/../models/tests/fixtures/tiny/{name}", env!("CARGO_MANIFEST_DIR"))
}
