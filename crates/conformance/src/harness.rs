//! The harness: a backend and the reference on the same graph, weights and batches, and the
//! comparison of their outputs.

use std::cell::Cell;

use switchyard_core::testkit::{self, Rng};
use switchyard_core::{Backend, BatchBuf, Buckets, Executor, Graph, LaneId, Outputs, Reference};

use crate::{Options, tolerance};

/// The backend maker and options, shared by every check.
pub(crate) struct Harness<'a, B> {
    pub(crate) make: &'a dyn Fn() -> B,
    pub(crate) opts: Options,
    /// The largest error seen, as a fraction of its tolerance.
    pub(crate) worst: Cell<f32>,
}

/// One graph on the backend under test and on the reference, with the same weights.
pub(crate) struct Pair<B: Backend> {
    pub(crate) test: Executor<B>,
    pub(crate) reference: Executor<Reference>,
}

impl<B: Backend> Harness<'_, B> {
    pub(crate) fn pair(
        &self,
        graph: &Graph,
        seed: u64,
        buckets: &Buckets,
    ) -> Result<Pair<B>, String> {
        let weights = testkit::random_weights(graph, seed);
        let tensors = weights.tensors();
        let stage = buckets.stages().next().ok_or("no stage")?.to_owned();
        let test = Executor::new((self.make)(), &tensors, graph.clone(), &stage, buckets.clone())
            .map_err(|e| format!("upload failed: {e}"))?;
        let reference = Executor::new(Reference, &tensors, graph.clone(), &stage, buckets.clone())
            .map_err(|e| format!("reference upload failed: {e}"))?;
        Ok(Pair { test, reference })
    }

    /// Runs a batch on both and compares; returns the backend's outputs.
    pub(crate) fn compare(
        &self,
        pair: &mut Pair<B>,
        batch: &BatchBuf,
        what: &str,
    ) -> Result<Outputs, String> {
        let (mut got, mut want) = (Outputs::new(), Outputs::new());
        pair.test
            .run(LaneId::MAIN, &batch.batch(), &mut got)
            .map_err(|e| format!("{what}: {e}"))?;
        pair.reference
            .run(LaneId::MAIN, &batch.batch(), &mut want)
            .map_err(|e| format!("{what}: reference: {e}"))?;
        self.close(&got, &want, what)?;
        Ok(got)
    }

    /// Checks values of one output within tolerance (if this run compares values).
    pub(crate) fn close_values(
        &self,
        name: &str,
        got: &[f32],
        want: &[f32],
        width: usize,
        what: &str,
    ) -> Result<(), String> {
        if !self.opts.compare_values {
            return Ok(());
        }
        if got.len() != want.len() {
            return Err(format!(
                "{what}: output `{name}` has {} values, expected {}",
                got.len(),
                want.len()
            ));
        }
        let tol = tolerance(self.opts.dtype);
        for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
            let bound = tol.abs + tol.rel * b.abs();
            let ratio = if a.is_nan() { f32::INFINITY } else { (a - b).abs() / bound };
            self.worst.set(self.worst.get().max(ratio));
            if ratio.is_nan() || ratio > 1.0 {
                return Err(format!(
                    "{what}: output `{name}` row {} column {}: got {a}, expected {b} (tolerance {bound:e})",
                    i / width.max(1),
                    i % width.max(1)
                ));
            }
        }
        Ok(())
    }

    /// Checks that two outputs have the same shapes and (if comparing) values within tolerance.
    pub(crate) fn close(&self, got: &Outputs, want: &Outputs, what: &str) -> Result<(), String> {
        if got.mats().len() != want.mats().len() {
            return Err(format!(
                "{what}: {} outputs, expected {}",
                got.mats().len(),
                want.mats().len()
            ));
        }
        for (g, w) in got.mats().iter().zip(want.mats()) {
            if (g.name.as_str(), g.kind, g.rows, g.width)
                != (w.name.as_str(), w.kind, w.rows, w.width)
            {
                return Err(format!(
                    "{what}: output `{}` is {:?} {}x{}, expected `{}` {:?} {}x{}",
                    g.name, g.kind, g.rows, g.width, w.name, w.kind, w.rows, w.width
                ));
            }
            self.close_values(&g.name, &g.data, &w.data, g.width, what)?;
        }
        Ok(())
    }
}

/// A batch of random sequences of lengths `lens`.
pub(crate) fn batch(lens: &[usize], vocab: usize, types: bool, seed: u64) -> BatchBuf {
    let mut r = Rng::new(seed);
    let mut buf = BatchBuf::new();
    for &len in lens {
        testkit::push_random_seq(&mut buf, &mut r, len, vocab, types);
    }
    buf
}

/// Between 1 and `max_seqs` sequences of 1 to `max_len` tokens.
pub(crate) fn random_lens(r: &mut Rng, max_seqs: usize, max_len: usize) -> Vec<usize> {
    let seqs = 1 + r.below(max_seqs);
    (0..seqs).map(|_| 1 + r.below(max_len)).collect()
}
