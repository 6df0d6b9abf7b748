//! `switchyard rerank`: documents ranked against a query by a cross-encoder.

use std::io::Write;

use anyhow::{Result, bail};
use switchyard::Task;
use switchyard::models::scores::ranking;

use super::{json_line, runner, with_progress};
use crate::args::{InputArgs, ModelArgs, PromptArgs};

/// The line of a ranked document (fields in the order the lines have always had them).
#[derive(serde::Serialize)]
struct Ranked<'a> {
    document: &'a str,
    index: usize,
    logit: f32,
    score: f32,
}

/// Ranks the inputs against `query` (with the prompt `prompt` chooses before it), printing one
/// JSON line per document, best first.
pub fn run(args: &ModelArgs, query: &str, input: &InputArgs, prompt: &PromptArgs) -> Result<()> {
    let docs = input.read()?;
    let mut run = runner(args, None)?;
    let task = run.model().task();
    if !matches!(task, Task::Classify { labels } if labels.len() == 1) {
        let labels = task.labels();
        let with =
            if labels.is_empty() { String::new() } else { format!(" with labels {labels:?}") };
        bail!(
            "rerank needs a cross-encoder (a sequence classifier with one label); this model is \
             {}{with}",
            task.describe(),
        );
    }
    let query = [run.model().prompts().text(prompt.choice())?, query].concat();
    let rows = with_progress(input, &docs, |t, p| run.classify_pairs(&query, t, p))?;
    let logits: Vec<f32> = rows.iter().map(|r| r[0]).collect();
    let score = run.model().score_fn();
    let mut out = std::io::stdout().lock();
    for index in ranking(&logits) {
        let (document, logit) = (&docs[index], logits[index]);
        let line = json_line(&Ranked { document, index, logit, score: score.apply(logit) })?;
        writeln!(out, "{line}")?;
    }
    Ok(())
}
