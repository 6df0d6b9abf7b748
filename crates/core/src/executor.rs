//! The executor: a backend, its weights, and the plans built so far for each lane and bucket.
//!
//! Plans are shared: they are built once, on first use or ahead of time, and never change.
//! What a run writes lives in a [`Scratch`]: [`Executor::run`] uses the executor's own, and
//! [`Executor::run_with`] a caller's, so threads sharing one executor run batches at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::{
    Backend, Batch, Bucket, Buckets, Caps, Error, Graph, HostTensor, Limits, Outputs, Result,
};

/// A lane of an executor: one graph over the shared weights (e.g. the full model, or the
/// encoder alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaneId(pub usize);

impl LaneId {
    /// The lane created with the executor.
    pub const MAIN: LaneId = LaneId(0);
}

/// Bytes an executor holds on its device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Bytes of weights.
    pub weights: usize,
    /// Bytes of all plans built so far.
    pub plans: usize,
    /// Bytes of the run states of the executor's own scratch (a caller's scratch is its own).
    pub states: usize,
    /// Number of plans built so far.
    pub plan_count: usize,
}

struct Lane<B: Backend> {
    graph: Graph,
    stage: String,
    limits: Limits,
    /// One slot per bucket of the lane's stage, in the stage's order, filled on first use.
    plans: Vec<OnceLock<B::Plan>>,
}

/// Run states for the plans of one executor, one per lane and bucket, made on first use: what
/// one caller's runs write. One scratch serves one run at a time, of the executor that made it.
pub struct Scratch<B: Backend> {
    /// The executor whose plans the states belong to.
    owner: u64,
    states: Vec<Vec<Option<B::State>>>,
}

/// Numbers executors, so a scratch knows whose plans its states were made for.
static EXECUTORS: AtomicU64 = AtomicU64::new(1);

impl<B: Backend> std::fmt::Debug for Scratch<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let made = self.states.iter().flatten().filter(|s| s.is_some()).count();
        write!(f, "Scratch({made} states)")
    }
}

/// Runs batches through graphs on one backend, lowering a plan per bucket on first use.
pub struct Executor<B: Backend> {
    /// This executor's number, which its scratches carry.
    id: u64,
    backend: B,
    weights: B::Weights,
    buckets: Buckets,
    lanes: Vec<Lane<B>>,
    /// Held while a plan is lowered, so concurrent first uses of a bucket lower it once.
    lowering: Mutex<()>,
    /// The states of [`Executor::run`].
    own: Mutex<Scratch<B>>,
}

impl<B: Backend> std::fmt::Debug for Executor<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("backend", &self.backend.caps().backend)
            .field("lanes", &self.lanes.len())
            .field("memory", &self.memory())
            .finish()
    }
}

impl<B: Backend> Executor<B> {
    /// Validates `graph`, uploads `tensors` (in `graph.weights` order) to `backend`, and makes
    /// `graph` the main lane, whose batches run in the buckets of `stage`.
    pub fn new(
        backend: B,
        tensors: &[HostTensor<'_>],
        graph: Graph,
        stage: &str,
        buckets: Buckets,
    ) -> Result<Self> {
        let _span = tracing::info_span!("upload", backend = %backend.caps().backend).entered();
        graph.validate()?;
        graph.check_weights(tensors)?;
        let weights = backend.upload(tensors, &graph)?;
        let id = EXECUTORS.fetch_add(1, Ordering::Relaxed);
        let mut ex = Executor {
            id,
            backend,
            weights,
            buckets,
            lanes: Vec::new(),
            lowering: Mutex::new(()),
            own: Mutex::new(Scratch { owner: id, states: Vec::new() }),
        };
        ex.push_lane(graph, stage)?;
        Ok(ex)
    }

    /// Adds another graph over the same weights (the same weight list); returns its lane.
    pub fn add_graph(&mut self, graph: Graph, stage: &str) -> Result<LaneId> {
        graph.validate()?;
        if graph.weights != self.lanes[0].graph.weights {
            return Err(Error::Graph(
                "a lane must use the same weight list as the executor's main graph".into(),
            ));
        }
        self.push_lane(graph, stage)
    }

    fn push_lane(&mut self, graph: Graph, stage: &str) -> Result<LaneId> {
        let n = self.buckets.stage(stage).len();
        if n == 0 {
            let known: Vec<&str> = self.buckets.stages().collect();
            return Err(Error::Graph(format!(
                "stage `{stage}` has no buckets; the table has: {}",
                known.join(", ")
            )));
        }
        let limits = graph.limits();
        let plans = std::iter::repeat_with(OnceLock::new).take(n).collect();
        self.lanes.push(Lane { graph, stage: stage.to_owned(), limits, plans });
        Ok(LaneId(self.lanes.len() - 1))
    }

    fn lane(&self, lane: LaneId) -> Result<&Lane<B>> {
        self.lanes.get(lane.0).ok_or_else(|| {
            Error::Graph(format!("no lane {}; the executor has {}", lane.0, self.lanes.len()))
        })
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The backend's capabilities.
    pub fn caps(&self) -> Caps {
        self.backend.caps()
    }

    /// The graph of a lane.
    pub fn graph(&self, lane: LaneId) -> Result<&Graph> {
        Ok(&self.lane(lane)?.graph)
    }

    /// The buckets a lane's batches run in, smallest first.
    pub fn lane_buckets(&self, lane: LaneId) -> Result<&[Bucket]> {
        let stage = &self.lane(lane)?.stage;
        Ok(self.buckets.stage(stage))
    }

    /// Lowers the plan for `bucket` of a lane ahead of time, with the executor's own run
    /// state for it, if not built yet.
    pub fn prepare(&mut self, lane: LaneId, bucket: Bucket) -> Result<()> {
        let l = self.lane(lane)?;
        let list = self.buckets.stage(&l.stage);
        let Some(i) = list.iter().position(|b| *b == bucket) else {
            return Err(Error::Graph(format!(
                "bucket {bucket} is not in stage `{}` ({})",
                l.stage,
                list.iter().map(Bucket::to_string).collect::<Vec<_>>().join(" ")
            )));
        };
        self.ready(lane.0, i)
    }

    /// Lowers every bucket of every lane, with the executor's own run states, so no later
    /// [`Executor::run`] pays for lowering or allocates.
    pub fn warm(&mut self) -> Result<()> {
        for lane in 0..self.lanes.len() {
            for i in 0..self.lanes[lane].plans.len() {
                self.ready(lane, i)?;
            }
        }
        Ok(())
    }

    /// Builds plan `i` of `lane` and its state in the executor's own scratch.
    fn ready(&mut self, lane: usize, i: usize) -> Result<()> {
        let mut own = self.take_own();
        let made = self.plan(lane, i).and_then(|plan| {
            own.state(&self.backend, plan, lane, i, self.lanes[lane].plans.len()).map(drop)
        });
        *self.own.get_mut().unwrap_or_else(PoisonError::into_inner) = own;
        made
    }

    /// The executor's own scratch, taken out to run with (put back after).
    fn take_own(&mut self) -> Scratch<B> {
        let own = self.own.get_mut().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(own, Scratch { owner: self.id, states: Vec::new() })
    }

    /// Plan `i` of `lane`, lowered now if not built yet (once, even when called at once from
    /// several threads).
    fn plan(&self, lane: usize, i: usize) -> Result<&B::Plan> {
        let l = &self.lanes[lane];
        if let Some(p) = l.plans[i].get() {
            return Ok(p);
        }
        let _lowering = self.lowering.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = l.plans[i].get() {
            return Ok(p);
        }
        let bucket = self.buckets.stage(&l.stage)[i];
        let _span = tracing::debug_span!("lower", lane, %bucket).entered();
        let plan = self.backend.lower(&self.weights, &l.graph, bucket)?;
        Ok(l.plans[i].get_or_init(|| plan))
    }

    /// An empty scratch for [`Executor::run_with`]; it makes run states as its runs need them.
    pub fn scratch(&self) -> Scratch<B> {
        Scratch { owner: self.id, states: Vec::new() }
    }

    /// Checks `batch`, picks the smallest bucket of the lane's stage that holds it, lowers
    /// that plan on first use, and runs it into `out` with the executor's own run state.
    /// Returns the bucket used.
    pub fn run(&mut self, lane: LaneId, batch: &Batch<'_>, out: &mut Outputs) -> Result<Bucket> {
        let mut own = self.take_own();
        let ran = self.run_with(&mut own, lane, batch, out);
        *self.own.get_mut().unwrap_or_else(PoisonError::into_inner) = own;
        ran
    }

    /// [`Executor::run`] with the run state in `scratch`: threads sharing the executor, each
    /// with a scratch of its own, run batches at once (where the backend allows it).
    pub fn run_with(
        &self,
        scratch: &mut Scratch<B>,
        lane: LaneId,
        batch: &Batch<'_>,
        out: &mut Outputs,
    ) -> Result<Bucket> {
        if scratch.owner != self.id {
            return Err(Error::Graph(
                "a scratch made by another executor; make one with this executor's `scratch()`"
                    .into(),
            ));
        }
        let l = self.lane(lane)?;
        batch.check(&l.limits)?;
        let i = self.buckets.pick(&l.stage, batch.tokens(), batch.seqs(), batch.markers())?;
        let bucket = self.buckets.stage(&l.stage)[i];
        let _span = tracing::trace_span!(
            "run",
            lane = lane.0,
            tokens = batch.tokens(),
            seqs = batch.seqs()
        )
        .entered();
        let plan = self.plan(lane.0, i)?;
        let state = scratch.state(&self.backend, plan, lane.0, i, l.plans.len())?;
        self.backend.run(plan, state, batch, out)?;
        Ok(bucket)
    }

    /// Bytes of weights, plans and the executor's own run states held on the device.
    pub fn memory(&self) -> Memory {
        let mut m =
            Memory { weights: self.backend.weight_bytes(&self.weights), ..Memory::default() };
        for p in self.lanes.iter().flat_map(|l| l.plans.iter().filter_map(OnceLock::get)) {
            m.plans += self.backend.plan_bytes(p);
            m.plan_count += 1;
        }
        let own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        m.states = own.states.iter().flatten().flatten().map(|s| self.backend.state_bytes(s)).sum();
        m
    }
}

impl<B: Backend> Scratch<B> {
    /// The state for bucket `i` (of `buckets`) of `lane`, made for `plan` on first use.
    fn state(
        &mut self,
        backend: &B,
        plan: &B::Plan,
        lane: usize,
        i: usize,
        buckets: usize,
    ) -> Result<&mut B::State> {
        if self.states.len() <= lane {
            self.states.resize_with(lane + 1, Vec::new);
        }
        let slots = &mut self.states[lane];
        if slots.len() < buckets {
            slots.resize_with(buckets, || None);
        }
        let slot = &mut slots[i];
        if slot.is_none() {
            *slot = Some(backend.state(plan)?);
        }
        Ok(slot.as_mut().expect("just made"))
    }
}
