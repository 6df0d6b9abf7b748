//! `switchyard tokenize`: how texts tokenize.

use std::io::Write;

use anyhow::{Context, Result};
use switchyard::Model;

use crate::args::{InputArgs, ModelArgs};

/// Prints each input's ids, tokens and types as one JSON line.
pub fn run(args: &ModelArgs, input: &InputArgs) -> Result<()> {
    let texts = input.read()?;
    super::say_source(&args.model);
    let dir = switchyard::resolve(&args.model)?;
    let model = Model::load(&dir)
        .with_context(|| format!("loading {}", switchyard::describe(&args.model)))?;
    let mut out = std::io::stdout().lock();
    for text in &texts {
        let e = model.tokenizer().encode(text)?;
        let line =
            serde_json::json!({ "text": text, "ids": e.ids, "tokens": e.tokens, "types": e.types });
        writeln!(out, "{line}")?;
    }
    Ok(())
}
