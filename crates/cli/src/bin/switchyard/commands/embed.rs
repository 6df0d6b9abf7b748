//! `switchyard embed`: one JSON line per input, dense or sparse, streamed.

use std::path::Path;

use anyhow::Result;
use switchyard::Task;

use super::{open_inputs, runner, streamed};
use crate::args::{InputArgs, ModelArgs};

/// Embeds the inputs, printing `{"text", "embedding"}` (or `"sparse"` terms for SPLADE) per line,
/// a chunk of inputs at a time.
pub fn run(args: &ModelArgs, input: &InputArgs, buckets: Option<&Path>) -> Result<()> {
    let inputs = open_inputs(input)?;
    let mut run = runner(args, buckets)?;
    let sparse = *run.model().task() == Task::Sparse;
    streamed(input, inputs, |texts, progress| {
        if sparse {
            let rows = run.sparse(texts, progress)?;
            let tokenizer = run.model().tokenizer();
            return Ok(texts
                .iter()
                .zip(rows)
                .map(|(text, terms)| {
                    let terms: Vec<serde_json::Value> = terms
                        .iter()
                        .map(|&(id, weight)| {
                            let token = tokenizer.token(id);
                            serde_json::json!({ "id": id, "token": token, "weight": weight })
                        })
                        .collect();
                    serde_json::json!({ "text": text, "sparse": terms }).to_string()
                })
                .collect());
        }
        let rows = run.embed(texts, progress)?;
        Ok(texts
            .iter()
            .zip(rows)
            .map(|(text, row)| serde_json::json!({ "text": text, "embedding": row }).to_string())
            .collect())
    })
}
