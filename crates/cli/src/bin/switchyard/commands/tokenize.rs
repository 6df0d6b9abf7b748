//! `switchyard tokenize`: how texts tokenize.

use std::io::Write;

use anyhow::{Context, Result};
use switchyard::Model;

use crate::args::{InputArgs, ModelArgs, PromptArgs};

/// Prints each input's ids, tokens and types, with the prompt chosen before it, as one JSON
/// line.
pub fn run(args: &ModelArgs, input: &InputArgs, prompt: &PromptArgs) -> Result<()> {
    let texts = input.read()?;
    super::say_source(&args.model);
    let dir = switchyard::resolve(&args.model)?;
    let model = Model::load(&dir)
        .with_context(|| format!("loading {}", switchyard::describe(&args.model)))?;
    let prompt = model.prompts().text(prompt.choice())?;
    let mut out = std::io::stdout().lock();
    for text in &texts {
        let e = model.tokenizer().encode(&[prompt, text].concat())?;
        let line =
            serde_json::json!({ "text": text, "ids": e.ids, "tokens": e.tokens, "types": e.types });
        writeln!(out, "{line}")?;
    }
    Ok(())
}
