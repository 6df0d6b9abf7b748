//! The interface every backend crate implements.

use crate::{Batch, Bucket, Caps, Graph, HostTensor, Outputs, Result};

/// A device that can hold weights, lower graphs into plans, and run batches through them.
///
/// `upload` converts checkpoint tensors once. `lower` allocates: a plan owns everything a run
/// needs for its bucket (an arena laid out by [`crate::layout`]), so `run` allocates nothing.
/// `run` receives a batch that passed [`Batch::check`] and fits the plan's bucket, and computes
/// only the rows the batch really has.
pub trait Backend: Send + Sync {
    /// Weights in the backend's own layout.
    type Weights: Send + Sync;
    /// A graph lowered for one bucket, with its arena.
    type Plan: Send;

    /// What this backend and its device can do.
    fn caps(&self) -> Caps;

    /// Converts checkpoint tensors (in the order of `graph.weights`) into the backend's weights.
    fn upload(&self, tensors: &[HostTensor<'_>], graph: &Graph) -> Result<Self::Weights>;

    /// Lowers `graph` over `w` into a plan for `bucket`; [`crate::Error::Unsupported`] for an
    /// op, dtype or shape the backend cannot run.
    fn lower(&self, w: &Self::Weights, graph: &Graph, bucket: Bucket) -> Result<Self::Plan>;

    /// Runs a checked batch that fits the plan's bucket, writing `out`.
    fn run(&self, plan: &mut Self::Plan, batch: &Batch<'_>, out: &mut Outputs) -> Result<()>;

    /// Bytes the weights occupy on the device.
    fn weight_bytes(&self, _w: &Self::Weights) -> usize {
        0
    }

    /// Bytes a plan occupies (its arena and scratch).
    fn plan_bytes(&self, _p: &Self::Plan) -> usize {
        0
    }
}
