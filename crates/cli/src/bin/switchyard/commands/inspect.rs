//! `switchyard inspect`: the plan a model lowers to, from the capture backend.

#[cfg(feature = "capture")]
use anyhow::Context;
use anyhow::{Result, bail};

/// Prints the plan of `model` for `bucket` (default: one sequence of its maximum length), as a
/// table or as JSON.
#[cfg(feature = "capture")]
pub fn run(model: &str, bucket: Option<&str>, json: bool) -> Result<()> {
    use switchyard::core::{Backend, Bucket};
    use switchyard::dispatch::capture::Capture;

    super::say_source(model);
    let dir = switchyard::resolve(model)?;
    let m = switchyard::Model::load(&dir)
        .with_context(|| format!("loading {}", switchyard::describe(model)))?;
    let max_len = m.tokenizer().max_len();
    let bucket = match bucket {
        Some(b) => b.parse::<Bucket>()?,
        None => Bucket::new(max_len, 1, 0),
    };
    if bucket.tokens > bucket.seqs.saturating_mul(max_len) {
        bail!(
            "bucket {bucket} holds more tokens than {} sequences of at most {max_len} tokens \
             (the model's maximum length) could fill",
            bucket.seqs
        );
    }
    let cap = Capture::new();
    let w = cap.upload(&m.tensors()?, m.graph())?;
    let plan = cap.lower(&w, m.graph(), bucket)?;
    if json {
        println!("{}", serde_json::to_string_pretty(plan.record())?);
    } else {
        println!("{model} ({:.1} MB of weights)", cap.weight_bytes(&w) as f64 / 1e6);
        print!("{}", plan.record().table());
    }
    Ok(())
}

/// Without the capture backend there is no plan to show.
#[cfg(not(feature = "capture"))]
pub fn run(_: &str, _: Option<&str>, _: bool) -> Result<()> {
    bail!("inspect needs the capture backend: rebuild switchyard with the cargo feature `capture`")
}
