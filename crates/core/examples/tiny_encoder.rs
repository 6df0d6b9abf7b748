//! Runs a tiny random BERT-like encoder on the reference backend and prints what it did.
//!
//! `cargo run -p switchyard-core --example tiny_encoder`

// An example talks to its user on stdout.
#![allow(clippy::print_stdout)]

use switchyard_core::testkit::{self, EncoderSpec};
use switchyard_core::{BatchBuf, Buckets, Executor, LaneId, Outputs, Reference};

fn main() -> Result<(), switchyard_core::Error> {
    let graph = testkit::bert_like(EncoderSpec::TINY);
    let weights = testkit::random_weights(&graph, 42);
    let tensors = weights.tensors();
    let mut ex = Executor::new(Reference, &tensors, graph, "default", Buckets::default())?;

    // Three ragged sequences, end to end; no padding anywhere.
    let mut batch = BatchBuf::new();
    batch.push(&[1, 7, 3, 9, 2], None, &[])?;
    batch.push(&[1, 4, 2], None, &[])?;
    batch.push(&[1, 7, 3, 9, 5, 5, 2], None, &[])?;

    let mut out = Outputs::new();
    let bucket = ex.run(LaneId::MAIN, &batch.batch(), &mut out)?;
    let emb = out.get("embedding").expect("the test encoder has an `embedding` output");
    println!("ran {} tokens in {} sequences in bucket {bucket}", batch.tokens(), batch.seqs());
    for (s, row) in emb.iter_rows().enumerate() {
        let head: Vec<String> = row.iter().take(4).map(|x| format!("{x:+.4}")).collect();
        println!("sequence {s}: [{}, ...] ({} wide, L2-normalised)", head.join(", "), row.len());
    }
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    println!("cosine(0, 2) = {:.4}", dot(emb.row(0), emb.row(2)));
    println!("memory: {:?}", ex.memory());
    Ok(())
}
