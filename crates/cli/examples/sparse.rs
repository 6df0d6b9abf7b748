//! SPLADE sparse term weights.
//!
//! `cargo run --example sparse -- MODEL [DEVICE]`, where MODEL is a SPLADE checkpoint directory
//! or Hugging Face repository id (such as prithivida/Splade_PP_en_v1) and DEVICE a device name
//! (default flex). Without arguments it runs on a tiny test checkpoint of this repository, whose
//! weights mean nothing.

// An example shows its results on stdout.
#![allow(clippy::print_stdout)]

use switchyard::SparseEncoder;

fn main() -> switchyard::Result<()> {
    let mut args = std::env::args().skip(1);
    let model = args.next().unwrap_or_else(|| tiny("bert-splade"));
    let device = args.next().unwrap_or_else(|| "flex".to_owned());

    let mut splade = SparseEncoder::open(&model, &device)?;
    let text = "Sparse vectors index into an inverted index.";
    let terms = splade.encode(&[text])?.remove(0);
    println!("{text:?}: {} terms", terms.len());
    for t in terms.iter().take(10) {
        println!("  {:>8.4}  {}", t.weight, t.token.as_deref().unwrap_or("?"));
    }
    Ok(())
}

/// A tiny checkpoint made by crates/models/tests/fixtures/make_fixtures.py.
fn tiny(name: &str) -> String {
    format!("{}/../models/tests/fixtures/tiny/{name}", env!("CARGO_MANIFEST_DIR"))
}
