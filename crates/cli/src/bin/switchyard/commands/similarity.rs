//! `switchyard similarity`: every pair's similarity, most similar first.

use std::io::Write;

use anyhow::{Result, bail};
use switchyard::models::prompted;

use super::{runner, with_progress};
use crate::args::{InputArgs, ModelArgs, PromptArgs};

/// Embeds the inputs with the prompt chosen before each and prints each pair's similarity (by
/// the model's function: cosine unless it names another), most similar first.
pub fn run(args: &ModelArgs, input: &InputArgs, prompt: &PromptArgs) -> Result<()> {
    let texts = input.read()?;
    if texts.len() < 2 {
        bail!("similarity needs at least two texts");
    }
    let mut run = runner(args, None)?;
    let inputs = prompted(run.model().prompts().text(prompt.choice())?, &texts);
    let rows = with_progress(input, &inputs, |t, p| run.embed(t, p))?;
    let similarity = run.model().similarity();
    let mut pairs = Vec::new();
    for i in 0..rows.len() {
        for j in i + 1..rows.len() {
            pairs.push((similarity.of(&rows[i], &rows[j]), i, j));
        }
    }
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut out = std::io::stdout().lock();
    for (c, i, j) in pairs {
        writeln!(out, "{c:.4}  {:?}  {:?}", texts[i], texts[j])?;
    }
    Ok(())
}
