//! switchyard-capture: a backend that executes nothing and records what would run.
//!
//! `upload` records the weights' shapes and bytes; `lower` records the plan — each op with its
//! input and output shapes at the bucket's sizes, its FLOPs and bytes moved — and the arena size
//! from [`switchyard_core::layout`]; `run` records the batch's real sizes and the work it would
//! do, and fills the outputs with zeros of the right shapes. It serves `switchyard inspect` (an
//! EXPLAIN for a model) and tests that check what a graph asks of a device.
//!
//! Cost model: a multiply-add counts as two FLOPs, any other element-wise function as one; bytes
//! moved are f32 reads of every input and weight plus the write of the output. At lower time,
//! attention assumes the bucket's tokens split evenly over its sequences; at run time it uses the
//! real sequence lengths.

mod cost;
mod records;
mod table;

use std::sync::{Arc, Mutex};

use switchyard_core::{
    Backend, Batch, Bucket, Caps, DeviceKind, Graph, HostTensor, Layout, Outputs, Result,
};

use crate::cost::{Sizes, plan_ops};
pub use crate::records::{Event, OpRecord, PlanRecord, RunRecord, UploadRecord, WeightRecord};

/// The capture backend. Clones share one event log.
#[derive(Clone, Debug, Default)]
pub struct Capture {
    log: Arc<Mutex<Vec<Event>>>,
}

/// Weights as the capture backend keeps them: only their record.
#[derive(Clone, Debug)]
pub struct CaptureWeights {
    record: UploadRecord,
    count: usize,
}

impl CaptureWeights {
    /// What was uploaded.
    pub fn record(&self) -> &UploadRecord {
        &self.record
    }
}

/// A plan as the capture backend keeps it: the graph and the record.
#[derive(Clone, Debug)]
pub struct CapturePlan {
    graph: Graph,
    bucket: Bucket,
    record: PlanRecord,
}

impl CapturePlan {
    /// What was lowered.
    pub fn record(&self) -> &PlanRecord {
        &self.record
    }
}

impl Capture {
    /// A capture backend with an empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every event so far, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn record(&self, e: Event) {
        if let Ok(mut l) = self.log.lock() {
            l.push(e);
        }
    }
}

/// How many capture devices there are: one, which needs no hardware.
pub fn devices() -> usize {
    1
}

/// A capture backend with an empty log, as the table of backends opens it.
pub fn open() -> Result<Capture> {
    Ok(Capture::new())
}

impl Backend for Capture {
    type Weights = CaptureWeights;
    type Plan = CapturePlan;
    type State = ();

    fn caps(&self) -> Caps {
        Caps::new("capture", "nothing: it records plans", DeviceKind::Virtual).with_threads(0)
    }

    fn upload(&self, tensors: &[HostTensor<'_>], graph: &Graph) -> Result<CaptureWeights> {
        graph.check_weights(tensors)?;
        let weights: Vec<WeightRecord> = tensors
            .iter()
            .zip(&graph.weights)
            .map(|(t, spec)| WeightRecord {
                name: spec.name.clone(),
                shape: t.shape.to_vec(),
                dtype: t.dtype.to_string(),
                bytes: t.bytes.len(),
            })
            .collect();
        let record = UploadRecord { total_bytes: weights.iter().map(|w| w.bytes).sum(), weights };
        self.record(Event::Upload(record.clone()));
        Ok(CaptureWeights { record, count: tensors.len() })
    }

    fn lower(&self, w: &CaptureWeights, graph: &Graph, bucket: Bucket) -> Result<CapturePlan> {
        graph.check_lowerable(w.count)?;
        let per_seq = bucket.tokens / bucket.seqs.max(1);
        let even = move || {
            Box::new(std::iter::repeat_n(per_seq, bucket.seqs)) as Box<dyn Iterator<Item = usize>>
        };
        let sizes = Sizes {
            tokens: bucket.tokens,
            seqs: bucket.seqs,
            markers: bucket.markers,
            lens: &even,
        };
        let ops = plan_ops(graph, &sizes);
        let layout = Layout::plan(graph, bucket, 4);
        let record = PlanRecord {
            bucket: [bucket.tokens, bucket.seqs, bucket.markers],
            flops: ops.iter().map(|o| o.flops).sum(),
            bytes: ops.iter().map(|o| o.bytes).sum(),
            ops,
            arena_bytes: layout.total,
            unshared_bytes: layout.unshared(),
        };
        self.record(Event::Lower(record.clone()));
        Ok(CapturePlan { graph: graph.clone(), bucket, record })
    }

    fn state(&self, _plan: &CapturePlan) -> Result<()> {
        Ok(())
    }

    fn run(
        &self,
        plan: &CapturePlan,
        _state: &mut (),
        batch: &Batch<'_>,
        out: &mut Outputs,
    ) -> Result<()> {
        let b = plan.bucket;
        b.admit(batch)?;
        let lens = || {
            Box::new((0..batch.seqs()).map(|s| batch.seq(s).len()))
                as Box<dyn Iterator<Item = usize> + '_>
        };
        let sizes = Sizes {
            tokens: batch.tokens(),
            seqs: batch.seqs(),
            markers: batch.markers(),
            lens: &lens,
        };
        let ops = plan_ops(&plan.graph, &sizes);
        self.record(Event::Run(RunRecord {
            bucket: [b.tokens, b.seqs, b.markers],
            tokens: batch.tokens(),
            seqs: batch.seqs(),
            markers: batch.markers(),
            flops: ops.iter().map(|o| o.flops).sum(),
            bytes: ops.iter().map(|o| o.bytes).sum(),
        }));
        for m in out.prepare(&plan.graph, batch) {
            m.data.fill(0.0);
        }
        Ok(())
    }

    fn weight_bytes(&self, w: &CaptureWeights) -> usize {
        w.record.total_bytes
    }

    fn plan_bytes(&self, p: &CapturePlan) -> usize {
        p.record.arena_bytes
    }
}
