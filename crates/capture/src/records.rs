//! What the capture backend records: uploads, plans and runs, with their sizes and costs.

use serde::Serialize;

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
