//! The interface every backend crate implements.

use crate::{Batch, Bucket, Caps, DType, Error, Graph, HostTensor, Outputs, Result};

/// A device that can hold weights, lower graphs into plans, and run batches through them.
///
/// `upload` converts checkpoint tensors once. `lower` builds a plan for one bucket: everything
/// a run reads and never changes (bound weights, tables, the arena's layout). `state` allocates
/// what one run writes (the arena, scratch), so `run` allocates nothing. A plan is shared, a
/// state is not: two batches run at once on one plan, each with its own state, where the
/// backend allows it (a backend whose device takes one batch at a time serialises them itself).
/// `run` receives a batch that passed [`Batch::check`] and fits the plan's bucket, and computes
/// only the rows the batch really has.
pub trait Backend: Send + Sync {
    /// Weights in the backend's own layout.
    type Weights: Send + Sync;
    /// A graph lowered for one bucket: what every run of it reads.
    type Plan: Send + Sync;
    /// What one run of a plan writes: its arena and scratch.
    type State: Send;

    /// What this backend and its device can do.
    fn caps(&self) -> Caps;

    /// Converts checkpoint tensors (in the order of `graph.weights`) into the backend's weights.
    fn upload(&self, tensors: &[HostTensor<'_>], graph: &Graph) -> Result<Self::Weights>;

    /// Lowers `graph` over `w` into a plan for `bucket`; [`Error::Unsupported`] for an op,
    /// dtype or shape the backend cannot run.
    fn lower(&self, w: &Self::Weights, graph: &Graph, bucket: Bucket) -> Result<Self::Plan>;

    /// Allocates the state one run of `plan` writes; a state serves any number of runs of its
    /// plan, one at a time.
    fn state(&self, plan: &Self::Plan) -> Result<Self::State>;

    /// Runs a checked batch that fits the plan's bucket, writing `out`.
    fn run(
        &self,
        plan: &Self::Plan,
        state: &mut Self::State,
        batch: &Batch<'_>,
        out: &mut Outputs,
    ) -> Result<()>;

    /// This backend storing weights and computing in `dtype`, one of
    /// [`Caps::dtypes`]; [`Error::Unsupported`] naming those otherwise. By default a
    /// backend computes in f32 only.
    fn with_dtype(self, dtype: DType) -> Result<Self>
    where
        Self: Sized,
    {
        if dtype == DType::F32 {
            return Ok(self);
        }
        let caps = self.caps();
        Err(Error::Unsupported(format!(
            "the {} backend ({}) computes in f32 only; {dtype} was asked for",
            caps.backend, caps.device
        )))
    }

    /// Bytes the weights occupy on the device.
    fn weight_bytes(&self, _w: &Self::Weights) -> usize {
        0
    }

    /// Bytes a plan occupies (bound tables; not the weights it shares).
    fn plan_bytes(&self, _p: &Self::Plan) -> usize {
        0
    }

    /// Bytes a run state occupies (its arena and scratch).
    fn state_bytes(&self, _s: &Self::State) -> usize {
        0
    }
}
