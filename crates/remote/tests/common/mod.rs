//! What the remote tests share: a tiny model and a batch to run through a backend.

use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{Backend, BatchBuf, Bucket, Outputs};

/// A model, its weights and a batch: uploaded, lowered and run through `b`.
pub struct Job {
    pub graph: switchyard_core::Graph,
    pub weights: testkit::RandomWeights,
    pub batch: BatchBuf,
    pub bucket: Bucket,
}

impl Job {
    /// The model, its weights and a batch of three sequences.
    pub fn new() -> Job {
        let graph = testkit::bert_like(EncoderSpec::TINY);
        let weights = testkit::random_weights(&graph, 7);
        let mut batch = BatchBuf::new();
        let mut r = Rng::new(11);
        for len in [5, 17, 1] {
            testkit::push_random_seq(&mut batch, &mut r, len, EncoderSpec::TINY.vocab, true);
        }
        Job { graph, weights, batch, bucket: Bucket::new(64, 4, 64) }
    }

    /// Runs the batch again on a plan already lowered.
    pub fn again<B: Backend>(&self, b: &B, plan: &B::Plan) -> switchyard_core::Result<Outputs> {
        let mut out = Outputs::new();
        b.run(plan, &mut b.state(plan)?, &self.batch.batch(), &mut out)?;
        Ok(out)
    }

    /// Uploads, lowers and runs the batch.
    pub fn run<B: Backend>(&self, b: &B) -> switchyard_core::Result<Outputs> {
        let w = b.upload(&self.weights.tensors(), &self.graph)?;
        self.again(b, &b.lower(&w, &self.graph, self.bucket)?)
    }
}
