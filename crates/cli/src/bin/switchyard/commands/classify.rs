//! `switchyard classify`: a label per text, or per word for a token classifier, streamed.

use anyhow::Result;
use switchyard::Task;
use switchyard::models::Marking;
use switchyard::models::scores::{best, probabilities, softmax};

use super::{open_inputs, runner, streamed};
use crate::args::{InputArgs, ModelArgs};

/// Classifies each input (or labels its words, or with `every_token` its tokens), printing one
/// JSON line per input, a chunk of inputs at a time.
pub fn run(args: &ModelArgs, input: &InputArgs, every_token: bool) -> Result<()> {
    let marking = if every_token { Marking::EveryToken } else { Marking::FirstSubToken };
    let inputs = open_inputs(input)?;
    let mut run = runner(args, None)?;
    let labels = run.model().task().labels().to_vec();
    let per_token = matches!(run.model().task(), Task::ClassifyTokens { .. });
    streamed(input, inputs, |texts, progress| {
        if per_token {
            let rows = run.classify_tokens(texts, marking, progress)?;
            return Ok(texts
                .iter()
                .zip(rows)
                .map(|(text, tokens)| {
                    let tokens: Vec<serde_json::Value> = tokens
                        .iter()
                        .map(|t| {
                            let (i, score) = best(&softmax(&t.logits));
                            serde_json::json!({
                                "text": text.get(t.span.0..t.span.1), "start": t.span.0,
                                "end": t.span.1, "label": labels[i], "score": score,
                            })
                        })
                        .collect();
                    serde_json::json!({ "text": text, "tokens": tokens }).to_string()
                })
                .collect());
        }
        let rows = run.classify(texts, progress)?;
        Ok(texts
            .iter()
            .zip(rows)
            .map(|(text, logits)| {
                let (i, score) = best(&probabilities(&logits));
                serde_json::json!({
                    "text": text, "label": labels[i], "score": score, "logits": logits,
                    "labels": labels,
                })
                .to_string()
            })
            .collect())
    })
}
