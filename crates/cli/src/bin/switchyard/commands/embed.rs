//! `switchyard embed`: one JSON line per input, dense or sparse.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use switchyard::Task;

use super::{runner, with_progress};
use crate::args::{InputArgs, ModelArgs};

/// Embeds the inputs, printing `{"text", "embedding"}` (or `"sparse"` terms for SPLADE) per line.
pub fn run(args: &ModelArgs, input: &InputArgs, buckets: Option<&Path>) -> Result<()> {
    let texts = input.read()?;
    let mut run = runner(args, buckets)?;
    let mut out = std::io::stdout().lock();
    if *run.model().task() == Task::Sparse {
        let rows = with_progress(input, &texts, |t, p| run.sparse(t, p))?;
        let tokenizer = run.model().tokenizer();
        for (text, terms) in texts.iter().zip(rows) {
            let terms: Vec<serde_json::Value> = terms
                .iter()
                .map(|&(id, weight)| {
                    serde_json::json!({ "id": id, "token": tokenizer.token(id), "weight": weight })
                })
                .collect();
            writeln!(out, "{}", serde_json::json!({ "text": text, "sparse": terms }))?;
        }
        return Ok(());
    }
    let rows = with_progress(input, &texts, |t, p| run.embed(t, p))?;
    for (text, row) in texts.iter().zip(rows) {
        let line = serde_json::json!({ "text": text, "embedding": row });
        writeln!(out, "{line}")?;
    }
    Ok(())
}
