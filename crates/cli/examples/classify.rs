//! Classifying texts, and labelling their words.
//!
//! `cargo run --example classify -- [MODEL [DEVICE]]`, where MODEL is a sequence or token
//! classifier's checkpoint directory or Hugging Face repository id and DEVICE a device name
//! (default flex). Without arguments it runs a tiny test sequence classifier and token
//! classifier of this repository, whose labels mean nothing.

// An example shows its results on stdout.
#![allow(clippy::print_stdout)]

use switchyard::{Classifier, Task};

fn main() -> switchyard::Result<()> {
    let mut args = std::env::args().skip(1);
    let models = match args.next() {
        Some(m) => vec![m],
        None => vec![tiny("bert-classifier"), tiny("bert-token-classifier")],
    };
    let device = args.next().unwrap_or_else(|| "flex".to_owned());
    let texts = ["I loved this film.", "Ada Lovelace was born in London."];

    for model in models {
        let mut classifier = Classifier::open(&model, &device)?;
        if matches!(classifier.model().task(), Task::ClassifyTokens { .. }) {
            for (text, words) in texts.iter().zip(classifier.label_words(&texts)?) {
                let tagged: Vec<String> =
                    words.iter().map(|w| format!("{}/{}", w.text, w.label)).collect();
                println!("{text:?}: {}", tagged.join(" "));
            }
        } else {
            for (text, p) in texts.iter().zip(classifier.predict(&texts)?) {
                println!("{text:?}: {} ({:.3})", p.label, p.score);
            }
        }
    }
    Ok(())
}

/// A tiny checkpoint made by crates/models/tests/fixtures/make_fixtures.py.
fn tiny(name: &str) -> String {
    format!("{}/../models/tests/fixtures/tiny/{name}", env!("CARGO_MANIFEST_DIR"))
}
