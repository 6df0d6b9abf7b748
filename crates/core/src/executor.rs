//! The executor: a backend, its weights, and the plans built so far for each lane and bucket.

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
    /// Number of plans built so far.
    pub plan_count: usize,
}

struct Lane<B: Backend> {
    graph: Graph,
    stage: String,
    limits: Limits,
    /// One slot per bucket of the lane's stage, in the stage's order.
    plans: Vec<Option<B::Plan>>,
}

impl<B: Backend> Lane<B> {
    /// The plan for bucket `i` of the lane's stage, lowered now if not built yet.
    fn plan(
        &mut self,
        i: usize,
        id: usize,
        backend: &B,
        weights: &B::Weights,
        buckets: &Buckets,
    ) -> Result<&mut B::Plan> {
        let slot = &mut self.plans[i];
        if slot.is_none() {
            let bucket = buckets.stage(&self.stage)[i];
            let _span = tracing::debug_span!("lower", lane = id, %bucket).entered();
            *slot = Some(backend.lower(weights, &self.graph, bucket)?);
        }
        Ok(slot.as_mut().expect("just built"))
    }
}

/// Runs batches through graphs on one backend, lowering a plan per bucket on first use.
pub struct Executor<B: Backend> {
    backend: B,
    weights: B::Weights,
    buckets: Buckets,
    lanes: Vec<Lane<B>>,
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
        let mut ex = Executor { backend, weights, buckets, lanes: Vec::new() };
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
        let plans = std::iter::repeat_with(|| None).take(n).collect();
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

    /// Lowers the plan for `bucket` of a lane ahead of time, if not built yet.
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
        self.ensure_plan(lane.0, i)?;
        Ok(())
    }

    /// Lowers every bucket of every lane, so no later run pays for lowering.
    pub fn warm(&mut self) -> Result<()> {
        for lane in 0..self.lanes.len() {
            for i in 0..self.lanes[lane].plans.len() {
                self.ensure_plan(lane, i)?;
            }
        }
        Ok(())
    }

    fn ensure_plan(&mut self, lane: usize, i: usize) -> Result<&mut B::Plan> {
        self.lanes[lane].plan(i, lane, &self.backend, &self.weights, &self.buckets)
    }

    /// Checks `batch`, picks the smallest bucket of the lane's stage that holds it, lowers
    /// that plan on first use, and runs it into `out`. Returns the bucket used.
    pub fn run(&mut self, lane: LaneId, batch: &Batch<'_>, out: &mut Outputs) -> Result<Bucket> {
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
        let plan =
            self.lanes[lane.0].plan(i, lane.0, &self.backend, &self.weights, &self.buckets)?;
        self.backend.run(plan, batch, out)?;
        Ok(bucket)
    }

    /// Bytes of weights and plans held on the device.
    pub fn memory(&self) -> Memory {
        let mut m =
            Memory { weights: self.backend.weight_bytes(&self.weights), ..Memory::default() };
        for p in self.lanes.iter().flat_map(|l| l.plans.iter().flatten()) {
            m.plans += self.backend.plan_bytes(p);
            m.plan_count += 1;
        }
        m
    }
}
