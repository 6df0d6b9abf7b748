//! `switchyard embed`: one JSON line per input, dense or sparse, streamed.

use std::num::NonZeroUsize;
use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;
use switchyard::Task;
use switchyard::models::prompted;

use super::{json_line, open_inputs, runner, streamed};
use crate::args::{InputArgs, ModelArgs, PromptArgs};

/// The line of a dense embedding (fields in the order the lines have always had them).
#[derive(Serialize)]
struct Dense<'a> {
    embedding: &'a [f32],
    text: &'a str,
}

/// The line of a sparse embedding.
#[derive(Serialize)]
struct Sparse<'a> {
    sparse: Vec<Term>,
    text: &'a str,
}

/// One term of a sparse embedding.
#[derive(Serialize)]
struct Term {
    id: u32,
    token: Option<String>,
    weight: f32,
}

/// Embeds the inputs with the prompt chosen before each, printing `{"text", "embedding"}` (the
/// first `truncate_dim` dimensions, where given; or `"sparse"` terms for SPLADE) per line, a
/// chunk of inputs at a time.
pub fn run(
    args: &ModelArgs,
    input: &InputArgs,
    prompt: &PromptArgs,
    buckets: Option<&Path>,
    truncate_dim: Option<NonZeroUsize>,
) -> Result<()> {
    let inputs = open_inputs(input)?;
    let mut run = runner(args, buckets)?;
    let sparse = *run.model().task() == Task::Sparse;
    let keep = match truncate_dim.map(NonZeroUsize::get) {
        Some(_) if sparse => {
            bail!("--truncate-dim cuts dense embeddings; this is a sparse encoder")
        }
        Some(d) => {
            // A model with no embedding (a classifier) is refused by `embed` below.
            if let Some(width) = run.model().embedding_dim()
                && d > width
            {
                bail!("--truncate-dim {d}: this model's embeddings have {width} dimensions");
            }
            d
        }
        None => usize::MAX,
    };
    let prompt = run.model().prompts().text(prompt.choice())?.to_owned();
    streamed(input, inputs, |texts, progress| {
        let prompted = prompted(&prompt, texts);
        let inputs: Vec<&str> = prompted.iter().map(String::as_str).collect();
        if sparse {
            let rows = run.sparse(&inputs, progress)?;
            let tokenizer = run.model().tokenizer();
            return texts
                .iter()
                .zip(rows)
                .map(|(text, terms)| {
                    let sparse = terms
                        .iter()
                        .map(|&(id, weight)| Term { id, token: tokenizer.token(id), weight })
                        .collect();
                    json_line(&Sparse { sparse, text })
                })
                .collect();
        }
        let rows = run.embed(&inputs, progress)?;
        texts
            .iter()
            .zip(rows)
            .map(|(text, row)| json_line(&Dense { embedding: &row[..keep.min(row.len())], text }))
            .collect()
    })
}
