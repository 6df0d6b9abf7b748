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

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use switchyard_core::{
    Backend, Batch, Bucket, Caps, DeviceKind, Graph, HostTensor, Layout, Op, Outputs, Result, Rows,
};

/// The capture backend. Clones share one event log.
#[derive(Clone, Debug, Default)]
pub struct Capture {
    log: Arc<Mutex<Vec<Event>>>,
}

/// Something the capture backend was asked to do.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Event {
    /// Weights were uploaded.
    Upload(UploadRecord),
    /// A graph was lowered for a bucket.
    Lower(PlanRecord),
    /// A batch was run.
    Run(RunRecord),
}

/// One weight tensor as uploaded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WeightRecord {
    /// Its checkpoint name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its dtype in the checkpoint.
    pub dtype: String,
    /// Its size in bytes.
    pub bytes: usize,
}

/// An upload: every weight and the total.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UploadRecord {
    /// The weights, in graph order.
    pub weights: Vec<WeightRecord>,
    /// Their total size in bytes.
    pub total_bytes: usize,
}

/// One op of a plan at the plan's sizes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpRecord {
    /// Its index in the graph.
    pub index: usize,
    /// The op's name.
    pub op: &'static str,
    /// Its parameters, briefly (activation, heads, window, ...).
    pub detail: String,
    /// Each input's `[rows, width]`.
    pub inputs: Vec<[usize; 2]>,
    /// The output's `[rows, width]`.
    pub output: [usize; 2],
    /// Floating-point operations.
    pub flops: u64,
    /// Bytes read and written.
    pub bytes: u64,
}

/// A lowered plan: its ops, its totals and its arena.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanRecord {
    /// The bucket it was lowered for.
    pub bucket: [usize; 3],
    /// Every op, in order.
    pub ops: Vec<OpRecord>,
    /// Sum of the ops' FLOPs.
    pub flops: u64,
    /// Sum of the ops' bytes moved.
    pub bytes: u64,
    /// Arena bytes from the layout, at 4 bytes per element.
    pub arena_bytes: usize,
    /// What the values would take with no sharing at all.
    pub unshared_bytes: usize,
}

/// A run: the batch's real sizes and the work it would do.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunRecord {
    /// The plan's bucket.
    pub bucket: [usize; 3],
    /// Tokens in the batch.
    pub tokens: usize,
    /// Sequences in the batch.
    pub seqs: usize,
    /// Markers in the batch.
    pub markers: usize,
    /// FLOPs at the batch's real sizes.
    pub flops: u64,
    /// Bytes moved at the batch's real sizes.
    pub bytes: u64,
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

/// Row counts of each kind, and the sequence lengths attention sees.
struct Sizes<'a> {
    tokens: usize,
    seqs: usize,
    markers: usize,
    lens: &'a dyn Fn() -> Box<dyn Iterator<Item = usize> + 'a>,
}

impl Sizes<'_> {
    fn rows(&self, r: Rows) -> usize {
        match r {
            Rows::Tokens => self.tokens,
            Rows::Seqs => self.seqs,
            Rows::Markers => self.markers,
        }
    }
}

fn op_record(graph: &Graph, index: usize, op: &Op, s: &Sizes<'_>) -> OpRecord {
    let dims = |v: switchyard_core::Val| {
        let sh = graph.shape(v);
        [s.rows(sh.rows), sh.width]
    };
    let inputs: Vec<[usize; 2]> = op.inputs().into_iter().flatten().map(dims).collect();
    let output = dims(op.out());
    let elems = |d: [usize; 2]| (d[0] * d[1]) as u64;
    let (n, w) = (output[0] as u64, output[1] as u64);
    let io_bytes = 4 * (inputs.iter().map(|&d| elems(d)).sum::<u64>() + n * w);
    let weight_bytes: u64 = op
        .weights()
        .into_iter()
        .flatten()
        .map(|wt| 4 * graph.weights[wt.idx()].shape.iter().product::<usize>() as u64)
        .sum();
    let (flops, detail, bytes) = match *op {
        // A lookup reads one table row per output row, not the whole table.
        Op::Embed { .. } | Op::TypeEmbed { .. } => (0, String::new(), 8 * n * w),
        Op::PosEmbed { offset, .. } => (0, format!("offset {offset}"), 8 * n * w),
        Op::Add { .. } => (n * w, String::new(), io_bytes),
        Op::LayerNorm { eps, beta, .. } => (
            8 * n * w,
            format!("eps {eps:e}{}", if beta.is_some() { "" } else { ", no beta" }),
            io_bytes + weight_bytes,
        ),
        Op::RmsNorm { eps, .. } => (5 * n * w, format!("eps {eps:e}"), io_bytes + weight_bytes),
        Op::Linear { act, bias, residual, .. } => {
            let k = inputs[0][1] as u64;
            let epilogue = n
                * w
                * (u64::from(bias.is_some())
                    + u64::from(act != switchyard_core::Act::Identity)
                    + u64::from(residual.is_some()));
            let mut d = format!("{k} -> {w}");
            if bias.is_some() {
                d.push_str(", bias");
            }
            if act != switchyard_core::Act::Identity {
                let _ = write!(d, ", {act:?}");
            }
            if residual.is_some() {
                d.push_str(", + residual");
            }
            (2 * n * k * w + epilogue, d, io_bytes + weight_bytes)
        }
        Op::Glu { act, .. } => (2 * n * w, format!("{act:?}"), io_bytes),
        Op::Slice { start, .. } => (0, format!("columns {start}..{}", start as u64 + w), io_bytes),
        Op::Rope { heads, head_dim, theta, .. } => {
            (3 * n * w, format!("{heads}x{head_dim}, theta {theta}"), io_bytes)
        }
        Op::Attention { heads, head_dim, window, .. } => {
            let pairs: u64 = (s.lens)()
                .map(|l| {
                    let keys = window.map_or(l, |win| l.min(2 * win + 1));
                    (l * keys) as u64
                })
                .sum();
            let hd = head_dim as u64;
            let heads_u = heads as u64;
            let flops = heads_u * pairs * (4 * hd + 3);
            let d = match window {
                Some(win) => format!("{heads}x{head_dim}, window {win}"),
                None => format!("{heads}x{head_dim}"),
            };
            (flops, d, io_bytes)
        }
        Op::Activation { act, .. } => (n * w, format!("{act:?}"), io_bytes),
        Op::Pool { mode, .. } => (elems(inputs[0]), format!("{mode:?}"), io_bytes),
        Op::Gather { .. } => (0, String::new(), 8 * n * w),
        Op::L2Norm { .. } => (3 * n * w, String::new(), io_bytes),
    };
    OpRecord { index, op: op.name(), detail, inputs, output, flops, bytes }
}

fn plan_ops(graph: &Graph, s: &Sizes<'_>) -> Vec<OpRecord> {
    graph.ops.iter().enumerate().map(|(i, op)| op_record(graph, i, op, s)).collect()
}

impl Backend for Capture {
    type Weights = CaptureWeights;
    type Plan = CapturePlan;

    fn caps(&self) -> Caps {
        Caps {
            backend: "capture".into(),
            device: "capture".into(),
            kind: DeviceKind::Virtual,
            threads: 0,
            dtypes: vec![
                switchyard_core::DType::F32,
                switchyard_core::DType::F16,
                switchyard_core::DType::Bf16,
            ],
            float_dtypes: vec![switchyard_core::DType::F32],
            fixed_shapes: false,
            padded_attention: false,
            unified_memory: true,
            memory_bytes: None,
        }
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

    fn run(&self, plan: &mut CapturePlan, batch: &Batch<'_>, out: &mut Outputs) -> Result<()> {
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

impl PlanRecord {
    /// The plan as a readable table with totals, for people.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let [t, q, m] = self.bucket;
        let _ = writeln!(s, "plan for bucket {t} tokens, {q} sequences, {m} markers");
        let _ = writeln!(
            s,
            "{:>4}  {:<10} {:<34} {:<24} {:>14} {:>10} {:>10}",
            "#", "op", "detail", "inputs", "output", "MFLOP", "MB"
        );
        for o in &self.ops {
            let ins: Vec<String> = o.inputs.iter().map(|d| format!("{}x{}", d[0], d[1])).collect();
            let _ = writeln!(
                s,
                "{:>4}  {:<10} {:<34} {:<24} {:>14} {:>10.2} {:>10.3}",
                o.index,
                o.op,
                o.detail,
                ins.join(" "),
                format!("{}x{}", o.output[0], o.output[1]),
                o.flops as f64 / 1e6,
                o.bytes as f64 / 1e6,
            );
        }
        let _ = writeln!(
            s,
            "total: {} ops, {:.1} MFLOP, {:.1} MB moved; arena {:.2} MB ({:.2} MB without sharing)",
            self.ops.len(),
            self.flops as f64 / 1e6,
            self.bytes as f64 / 1e6,
            self.arena_bytes as f64 / 1e6,
            self.unshared_bytes as f64 / 1e6,
        );
        s
    }
}
