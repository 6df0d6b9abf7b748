//! `switchyard classify`: a label per text, or per word for a token classifier.

use std::io::Write;

use anyhow::Result;
use switchyard::Task;
use switchyard::models::Marking;
use switchyard::models::scores::{best, probabilities, softmax};

use super::{runner, with_progress};
use crate::args::{InputArgs, ModelArgs};

/// Classifies each input (or labels its words, or with `every_token` its tokens), printing one
/// JSON line per input.
pub fn run(args: &ModelArgs, input: &InputArgs, every_token: bool) -> Result<()> {
    let marking = if every_token { Marking::EveryToken } else { Marking::FirstSubToken };
    let texts = input.read()?;
    let mut run = runner(args, None)?;
    let labels = run.model().task().labels().to_vec();
    let mut out = std::io::stdout().lock();
    if matches!(run.model().task(), Task::ClassifyTokens { .. }) {
        let rows = with_progress(input, &texts, |t, p| run.classify_tokens(t, marking, p))?;
        for (text, tokens) in texts.iter().zip(rows) {
            let tokens: Vec<serde_json::Value> = tokens
                .iter()
                .map(|t| {
                    let (i, score) = best(&softmax(&t.logits));
                    serde_json::json!({
                        "text": text.get(t.span.0..t.span.1), "start": t.span.0, "end": t.span.1,
                        "label": labels[i], "score": score,
                    })
                })
                .collect();
            writeln!(out, "{}", serde_json::json!({ "text": text, "tokens": tokens }))?;
        }
        return Ok(());
    }
    let rows = with_progress(input, &texts, |t, p| run.classify(t, p))?;
    for (text, logits) in texts.iter().zip(rows) {
        let (i, score) = best(&probabilities(&logits));
        let line = serde_json::json!({
            "text": text, "label": labels[i], "score": score, "logits": logits, "labels": labels,
        });
        writeln!(out, "{line}")?;
    }
    Ok(())
}
