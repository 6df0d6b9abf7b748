//! `switchyard classify`: a label per text, or per word for a token classifier, streamed.

use anyhow::{Result, bail};
use serde::Serialize;
use switchyard::Task;
use switchyard::models::scores::{best, softmax};
use switchyard::models::{Marking, prompted};

use super::{json_line, open_inputs, runner, streamed};
use crate::args::{InputArgs, ModelArgs, PromptArgs};

/// The line of a classified text (fields in the order the lines have always had them).
#[derive(Serialize)]
struct Classified<'a> {
    label: &'a str,
    labels: &'a [String],
    logits: &'a [f32],
    score: f32,
    text: &'a str,
}

/// The line of a text whose words (or tokens) are classified.
#[derive(Serialize)]
struct Words<'a> {
    text: &'a str,
    tokens: Vec<Word<'a>>,
}

/// One classified word (or token), with its byte span.
#[derive(Serialize)]
struct Word<'a> {
    end: usize,
    label: &'a str,
    score: f32,
    start: usize,
    text: Option<&'a str>,
}

/// Classifies each input with the prompt `prompt` chooses before it (or labels its words, or
/// with `every_token` its tokens), printing one JSON line per input, a chunk of inputs at a
/// time.
pub fn run(
    args: &ModelArgs,
    input: &InputArgs,
    prompt: &PromptArgs,
    every_token: bool,
) -> Result<()> {
    let marking = if every_token { Marking::EveryToken } else { Marking::FirstSubToken };
    let inputs = open_inputs(input)?;
    let mut run = runner(args, None)?;
    let labels = run.model().task().labels().to_vec();
    let per_token = matches!(run.model().task(), Task::ClassifyTokens { .. });
    if per_token && prompt.chosen() {
        bail!(
            "--prompt-name and --prompt are for a sequence classifier; this is a token classifier"
        );
    }
    let prompt = if per_token { "" } else { run.model().prompts().text(prompt.choice())? };
    let prompt = prompt.to_owned();
    let scores = run.model().class_scores();
    streamed(input, inputs, |texts, progress| {
        if per_token {
            let rows = run.classify_tokens(texts, marking, progress)?;
            return texts
                .iter()
                .zip(rows)
                .map(|(text, tokens)| {
                    let tokens = tokens
                        .iter()
                        .map(|t| {
                            let (i, score) = best(&softmax(&t.logits));
                            let (start, end) = t.span;
                            let text = text.get(start..end);
                            Word { end, label: &labels[i], score, start, text }
                        })
                        .collect();
                    json_line(&Words { text, tokens })
                })
                .collect();
        }
        let prompted = prompted(&prompt, texts);
        let inputs: Vec<&str> = prompted.iter().map(String::as_str).collect();
        let rows = run.classify(&inputs, progress)?;
        texts
            .iter()
            .zip(rows)
            .map(|(text, logits)| {
                let (i, score) = best(&scores.apply(&logits));
                let label = &labels[i];
                json_line(&Classified { label, labels: &labels, logits: &logits, score, text })
            })
            .collect()
    })
}
