//! switchyard-burn: one lowering of a Switchyard [`Graph`] onto any Burn backend.
//!
//! [`Burn<B, K>`] implements [`switchyard_core::Backend`] for every `B: burn_backend::Backend`.
//! The flex, ndarray, cube, tch and remote crates are thin: they pick `B`, a device and their
//! [`Caps`], and may replace the kernel of any single op through [`Kernels`] — a fused GEMM
//! epilogue, a ragged attention — without copying the rest of the lowering.
//!
//! How a graph runs here:
//! - `upload` converts checkpoint tensors once to device tensors of the compute dtype (f32
//!   unless [`Backend::with_dtype`] chose f16 or bf16), storing each in the form its ops read it
//!   (linear weights transposed to `[in, out]`), and skipping unused tensors;
//! - `lower` validates the graph, asks the kernels whether they can run each op
//!   ([`Kernels::check`]), binds each op's weights, and precomputes rotary tables for the bucket;
//! - `run` executes the ops in order on the batch's real rows only: no padding anywhere, and
//!   attention runs per sequence at its own length. Each value is dropped after its last reader
//!   (the live ranges of [`switchyard_core::layout`]), so peak activation memory follows the
//!   layout; Burn itself allocates each op's result, so unlike the reference backend a run does
//!   allocate. A plan is shared by every run; a run's live values are in its [`BurnState`]. Activations take the dtype of the weights they come from (the embedding tables),
//!   so the whole run computes in the compute dtype; outputs are read back as f32.

mod convert;
pub mod generic;
mod runcx;

use std::collections::HashMap;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use burn_backend::Backend as BurnBackend;
use burn_backend::tensor::FloatTensor;
use switchyard_core::{
    Backend, Batch, BatchBuf, Bucket, Caps, DType, Error, Graph, HostTensor, Layout, Op, Outputs,
    PositionBias, Result, Val, W, rope_tables,
};

pub use convert::{burn_dtype, floats, floats_as, ints, read_f32};
pub use runcx::{RunCx, TableRef, positions_in};

/// An op's inputs, in [`Op::inputs`] order; slots the op does not use are `None`.
pub type Inputs<B> = [Option<FloatTensor<B>>; 3];

/// The weights bound to one op at lower time, in the form the generic lowering reads them.
#[derive(Clone, Debug)]
pub enum Bound<B: BurnBackend> {
    /// The op reads no weights.
    None,
    /// A lookup table, `[rows, width]`: an embedding's, or a relative position bias's
    /// `[buckets, heads]`.
    Table(FloatTensor<B>),
    /// A norm's scale and shift: `[width]` for LayerNorm, `[1, width]` for RmsNorm.
    Norm {
        /// The scale.
        gamma: FloatTensor<B>,
        /// The shift, if any.
        beta: Option<FloatTensor<B>>,
    },
    /// A linear layer: the weight transposed to `[in, out]` and the bias as `[1, out]`.
    Linear {
        /// `[in, out]`.
        wt: FloatTensor<B>,
        /// `[1, out]`.
        bias: Option<FloatTensor<B>>,
    },
    /// Disentangled attention's tables, `[2 span, heads * head_dim]` each, where the op has
    /// the term.
    Disentangled {
        /// The relative embeddings through the key projection.
        keys: Option<FloatTensor<B>>,
        /// The relative embeddings through the query projection.
        queries: Option<FloatTensor<B>>,
    },
    /// Rotary tables for every position of the bucket, `[positions, head_dim / 2]` each.
    Rope {
        /// Cosines.
        cos: FloatTensor<B>,
        /// Sines.
        sin: FloatTensor<B>,
    },
}

/// What a backend's own kernel did with an op.
pub enum Outcome<B: BurnBackend> {
    /// It computed the op's output.
    Done(FloatTensor<B>),
    /// It does not handle this op (or these shapes); the inputs go to the generic lowering.
    Declined(Inputs<B>),
    /// It could not compute the op: the run fails with this error.
    Failed(Error),
}

/// The seam through which a backend replaces the kernel of any single op.
///
/// Every method has a default, so `impl Kernels<B> for MyKernels {}` is the generic lowering.
pub trait Kernels<B: BurnBackend>: Send + Sync + 'static {
    /// Called at lower time for each op, with the dtype the backend computes in:
    /// [`Error::Unsupported`] refuses the graph.
    fn check(&self, _op: &Op, _graph: &Graph, _bucket: Bucket, _dtype: DType) -> Result<()> {
        Ok(())
    }

    /// Runs `op` with a kernel of the backend's own, or declines and hands back the inputs.
    fn run_op(&self, _op: &Op, ins: Inputs<B>, _w: &Bound<B>, _cx: &RunCx<'_, B>) -> Outcome<B> {
        Outcome::Declined(ins)
    }

    /// The tokens a run of a batch of `tokens` computes in `dtype`: more where these kernels
    /// run faster on the batch padded with sequences after its own (products that take only
    /// whole tiles of rows, which would otherwise copy each input to padded rows).
    /// [`Backend::run`] pads the batch so ([`Batch::padded`]) where its plan's bucket holds the
    /// padding, and leaves the padding's rows out of the outputs. `tokens` by default.
    fn run_tokens(&self, tokens: usize, _dtype: DType) -> usize {
        tokens
    }

    /// A guard held through each upload, lower and run, and through work on the Burn backend
    /// itself ([`OnBurn::on_burn`]: training, explanations), so that none of them overlap: for
    /// a library whose results go wrong when two of them do. `None` (the default) lets them
    /// overlap.
    fn exclusive(&self) -> Option<MutexGuard<'static, ()>> {
        None
    }
}

/// The generic lowering alone: Burn's own ops for everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct Generic;

impl<B: BurnBackend> Kernels<B> for Generic {}

/// A Switchyard backend on the Burn backend `B`, with kernels `K` replacing some ops.
#[derive(Debug)]
pub struct Burn<B: BurnBackend, K = Generic> {
    device: B::Device,
    kernels: K,
    caps: Caps,
    dtype: DType,
    /// Whether `upload` joins the weights of linear layers that share an input.
    joined: bool,
}

/// The float dtypes the Burn backend `B` can store and compute in on `device`, f32 first: what
/// [`Caps::dtypes`] says for it.
pub fn float_dtypes<B: BurnBackend>(device: &B::Device) -> Vec<DType> {
    [DType::F32, DType::F16, DType::Bf16]
        .into_iter()
        .filter(|&d| d == DType::F32 || B::supports_dtype(device, burn_dtype(d)))
        .collect()
}

impl<B: BurnBackend, K: Kernels<B>> Burn<B, K> {
    /// A backend on `device` computing in f32, describing itself with `caps` (whose
    /// [`Caps::dtypes`] [`float_dtypes`] gives for `B`).
    pub fn new(device: B::Device, kernels: K, caps: Caps) -> Self {
        let caps = Caps { dtype: DType::F32, ..caps };
        Burn { device, kernels, caps, dtype: DType::F32, joined: true }
    }

    /// The dtype weights are stored and activations computed in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// This backend on the same device and in the same dtype, with `kernels` instead.
    pub fn with_kernels<K2: Kernels<B>>(&self, kernels: K2) -> Burn<B, K2> {
        let (device, caps, dtype) = (self.device.clone(), self.caps.clone(), self.dtype);
        Burn { device, kernels, caps, dtype, joined: self.joined }
    }

    /// This backend with linear layers that share an input (a layer's query, key and value
    /// projections, [`Graph::shared_input_linears`]) joined (`true`, the default) or run apart:
    /// joined, `upload` stores their weight matrices side by side as one `[in, sum of outs]`
    /// matrix (and their biases as one row), and a run computes the group as one product whose
    /// columns are the layers' results, one launch where there were as many as layers, over a
    /// product as wide as all of them. Weights uploaded apart stay apart (training's, from
    /// [`BurnWeights::from_tensors`], always are).
    pub fn with_joined_linears(mut self, joined: bool) -> Self {
        self.joined = joined;
        self
    }

    /// Whether `upload` joins linear layers that share an input.
    pub fn joined_linears(&self) -> bool {
        self.joined
    }

    /// The Burn device.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// The kernels replacing some ops.
    pub fn kernels(&self) -> &K {
        &self.kernels
    }

    /// Runs `plan` on `batch` as `how` says and returns the graph's outputs as device tensors,
    /// in the graph's order (`None` for an output with no rows in this batch, such as a token
    /// classifier's logits for a batch without markers): what `run` reads back, and what
    /// training differentiates.
    pub fn forward(
        &self,
        plan: &BurnPlan<B>,
        state: &mut BurnState<B>,
        batch: &Batch<'_>,
        how: &Forward<B>,
    ) -> Result<Vec<Option<FloatTensor<B>>>> {
        let _one = self.kernels.exclusive();
        self.forward_shared(plan, state, batch, how)
    }

    /// [`Burn::forward`] without taking [`Kernels::exclusive`]'s guard: for callers holding it.
    fn forward_shared(
        &self,
        plan: &BurnPlan<B>,
        state: &mut BurnState<B>,
        batch: &Batch<'_>,
        how: &Forward<B>,
    ) -> Result<Vec<Option<FloatTensor<B>>>> {
        let fed = how.feed.iter().map(|(v, _)| *v).collect();
        let cx = RunCx::new(&plan.graph, batch, &self.device).for_forward(fed, how.dropout);
        self.forward_each(plan, state, &cx, how, &mut |_| Ok(()))
    }

    /// [`Burn::forward`] of `cx`'s batch with nothing fed and no dropout, in the context `cx`
    /// (made by [`RunCx::new`] for this plan's graph): the index tensors and memos earlier runs
    /// in `cx` put on the device are reused, so a second run in one context only launches
    /// kernels, as recording a device graph needs.
    pub fn forward_in(
        &self,
        plan: &BurnPlan<B>,
        state: &mut BurnState<B>,
        cx: &RunCx<'_, B>,
    ) -> Result<Vec<Option<FloatTensor<B>>>> {
        if !std::ptr::eq(cx.graph, &plan.graph) {
            return Err(Error::Graph("a run context made for another plan's graph".into()));
        }
        if cx.feeds_or_drops() {
            return Err(Error::Graph(
                "a run context for a forward with values fed or dropped".into(),
            ));
        }
        let _one = self.kernels.exclusive();
        self.forward_each(plan, state, cx, &Forward::default(), &mut |_| Ok(()))
    }

    /// `batch` padded to the tokens the kernels run it at ([`Kernels::run_tokens`]), where
    /// they ask for more and the plan's bucket holds the padding: its tokens in as few padding
    /// sequences as the position table allows. `None` where the batch runs as it is.
    fn padding(&self, plan: &BurnPlan<B>, batch: &Batch<'_>) -> Result<Option<BatchBuf>> {
        let (tokens, seqs, markers) = (batch.tokens(), batch.seqs(), batch.markers());
        let want = self.kernels.run_tokens(tokens, self.dtype);
        if want <= tokens {
            return Ok(None);
        }
        let limits = plan.graph.limits();
        let pads = (want - tokens).div_ceil(limits.max_len.max(1) as usize);
        if !plan.bucket.holds(want, seqs + pads, markers) {
            tracing::trace!(tokens, want, bucket = %plan.bucket, "no room to pad the batch");
            return Ok(None);
        }
        batch.padded(Bucket::new(want, seqs + pads, markers), &limits).map(Some)
    }

    /// How long each op of one run of `plan` on `batch` takes, in the graph's order (ops a batch
    /// skips left out): the device is synchronised after each op, so the times add up to more
    /// than a run's, and each includes its launches' latency. Where a plan's time goes on an
    /// asynchronous device, which a run's time cannot say. The outputs are read back after the
    /// last op (outside the times), so that a run the device failed is an error here as it is
    /// in [`switchyard_core::Backend::run`], not a list of times.
    pub fn profile(
        &self,
        plan: &BurnPlan<B>,
        state: &mut BurnState<B>,
        batch: &Batch<'_>,
    ) -> Result<Vec<OpTime>> {
        let _one = self.kernels.exclusive();
        let sync =
            || B::sync(&self.device).map_err(|e| Error::Device(format!("synchronising: {e:?}")));
        sync()?;
        let mut times = Vec::new();
        let mut last = Instant::now();
        let cx = RunCx::new(&plan.graph, batch, &self.device);
        let outs = self.forward_each(plan, state, &cx, &Forward::default(), &mut |op| {
            sync()?;
            let now = Instant::now();
            times.push(OpTime { op: op.name(), time: now - last });
            last = now;
            Ok(())
        })?;
        // A device may report a failed launch only when a result is read (wgpu does), not when
        // it is synchronised.
        for t in outs.into_iter().flatten() {
            read_f32::<B>(t)?;
        }
        Ok(times)
    }

    /// One op through the backend's kernels, else the generic lowering.
    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<B>,
        w: &Bound<B>,
        cx: &RunCx<'_, B>,
    ) -> Result<FloatTensor<B>> {
        match self.kernels.run_op(op, ins, w, cx) {
            Outcome::Done(y) => Ok(y),
            Outcome::Declined(ins) => Ok(generic::run_op::<B>(op, ins, w, cx)),
            Outcome::Failed(e) => Err(e),
        }
    }

    /// [`Burn::forward`], calling `each` after each op it runs.
    fn forward_each(
        &self,
        plan: &BurnPlan<B>,
        state: &mut BurnState<B>,
        cx: &RunCx<'_, B>,
        how: &Forward<B>,
        each: &mut dyn FnMut(&Op) -> Result<()>,
    ) -> Result<Vec<Option<FloatTensor<B>>>> {
        let batch = cx.batch_unread();
        plan.bucket.admit(batch)?;
        // A run that failed half way may have left values behind.
        state.vals.iter_mut().for_each(|v| *v = None);
        let graph = &plan.graph;
        if batch.seqs() == 0 {
            return Ok(vec![None; graph.outputs.len()]);
        }
        for (i, op) in graph.ops.iter().enumerate() {
            let o = op.out();
            // Only marker rows can be absent from a non-empty batch; ops on them are skipped.
            if batch.rows(graph.shape(o).rows) == 0 {
                continue;
            }
            let ins = take_inputs::<B>(op, i, &plan.last_use, &mut state.vals);
            let fed = |v: Val| how.feed.iter().find(|(f, _)| *f == v).map(|(_, t)| t.clone());
            let p = if how.dropout { graph.dropout_at(o) } else { 0.0 };
            let y = match (&plan.joint[i], fed(o)) {
                // The joined product, unless every share of it is given.
                (Some(Joint::Lead(shares)), mine)
                    if shares.iter().any(|s| fed(s.val).is_none()) =>
                {
                    let all = self.run_op(op, ins, &plan.bound[i], cx)?;
                    for s in &shares[1..] {
                        let share = fed(s.val)
                            .unwrap_or_else(|| generic::cols::<B>(all.clone(), s.start, s.end));
                        state.vals[s.val.idx()] = Some(share);
                    }
                    let own = shares[0];
                    mine.unwrap_or_else(|| generic::cols::<B>(all, own.start, own.end))
                }
                (_, Some(t)) => t,
                (Some(Joint::Follow), None) => state.vals[o.idx()].take().ok_or_else(|| {
                    let name = op.name();
                    Error::Graph(format!("op {i} ({name}): its joined product was not computed"))
                })?,
                (_, None) if p > 0.0 => {
                    generic::run_op_dropped::<B>(op, ins, &plan.bound[i], p, cx)
                }
                (_, None) => self.run_op(op, ins, &plan.bound[i], cx)?,
            };
            if plan.last_use[o.idx()].is_some() {
                state.vals[o.idx()] = Some(y);
            }
            each(op)?;
        }
        let outs = graph
            .outputs
            .iter()
            .map(|o| {
                let rows = batch.rows(graph.shape(o.val).rows);
                // An output read by later ops as well is still needed by the next output.
                (rows > 0).then(|| state.vals[o.val.idx()].clone()).flatten()
            })
            .collect();
        state.vals.iter_mut().for_each(|v| *v = None);
        Ok(outs)
    }
}

/// Work to run on a Burn backend, whichever it is: what [`OnBurn::on_burn`] hands a Switchyard
/// backend's Burn type and device to (how training runs on every device that is a Burn
/// backend, wrapping it in burn-autodiff).
pub trait BurnVisitor: Send {
    /// What the work gives back.
    type Out: Send;

    /// Runs the work on the Burn backend `B`, on `device`, which the Switchyard backend of
    /// `caps` runs on.
    fn visit<B: BurnBackend>(self, device: B::Device, caps: Caps) -> Self::Out;
}

/// A Switchyard backend whose device is a Burn backend's.
pub trait OnBurn {
    /// Runs `work` on this backend's Burn backend and device (on its threads, where it has
    /// threads of its own).
    fn on_burn<V: BurnVisitor>(&self, work: V) -> V::Out;
}

impl<B: BurnBackend, K: Kernels<B>> OnBurn for Burn<B, K> {
    /// Holds the kernels' turn ([`Kernels::exclusive`]) throughout the work: a training job
    /// or an explanation runs the library as runs do.
    fn on_burn<V: BurnVisitor>(&self, work: V) -> V::Out {
        let _turn = self.kernels.exclusive();
        work.visit::<B>(self.device.clone(), self.caps.clone())
    }
}

/// Checkpoint weights on a Burn device, each in the form its ops read it.
#[derive(Debug)]
pub struct BurnWeights<B: BurnBackend> {
    /// As in the checkpoint (tables, norm parameters, biases), where some op reads it so.
    plain: Vec<Option<FloatTensor<B>>>,
    /// Transposed to `[in, out]`, for the linear layers.
    transposed: Vec<Option<FloatTensor<B>>>,
    /// Linear layers that share an input, their weights side by side
    /// ([`Burn::with_joined_linears`]).
    joined: Vec<Joined<B>>,
    /// For each weight, where a joined group holds it (its own slots above are then empty).
    part: Vec<Option<Part>>,
    bytes: usize,
}

/// The weights of linear layers that share an input, side by side.
#[derive(Debug)]
struct Joined<B: BurnBackend> {
    /// The layers' matrices transposed and side by side: `[in, sum of outs]`.
    wt: FloatTensor<B>,
    /// Their biases in one row, `[1, sum of outs]`, if they have them.
    bias: Option<FloatTensor<B>>,
}

/// Where a joined group holds one weight: the group, and the weight's columns there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Part {
    group: usize,
    /// A bias (columns of the group's bias row), else a matrix (of its `wt`).
    bias: bool,
    start: usize,
    end: usize,
}

impl<B: BurnBackend> BurnWeights<B> {
    /// Weights from tensors already on the device, one per graph weight in the graph's order,
    /// each as the checkpoint has it (a linear layer's matrix `[out, in]`): training's
    /// parameters, which `lower` binds as it binds uploaded weights, transposing where an op
    /// reads another form.
    pub fn from_tensors(tensors: Vec<FloatTensor<B>>) -> Self {
        let bytes = tensors
            .iter()
            .map(|t| {
                let dtype = burn_backend::TensorMetadata::dtype(t);
                burn_backend::TensorMetadata::shape(t).num_elements() * dtype.size()
            })
            .sum();
        let (transposed, part) = (vec![None; tensors.len()], vec![None; tensors.len()]);
        let plain = tensors.into_iter().map(Some).collect();
        BurnWeights { plain, transposed, joined: Vec::new(), part, bytes }
    }

    fn plain(&self, w: W) -> Result<FloatTensor<B>> {
        match (&self.plain[w.idx()], &self.transposed[w.idx()], self.part[w.idx()]) {
            (Some(t), _, _) => Ok(t.clone()),
            (None, Some(t), _) => Ok(B::float_transpose(t.clone())),
            (None, None, Some(p)) if p.bias => {
                let row = self.row(w)?;
                Ok(B::float_reshape(row, burn_backend::Shape::from(vec![p.end - p.start])))
            }
            (None, None, Some(_)) => Ok(B::float_transpose(self.transposed(w)?)),
            (None, None, None) => Err(missing(w)),
        }
    }

    fn transposed(&self, w: W) -> Result<FloatTensor<B>> {
        match (&self.transposed[w.idx()], &self.plain[w.idx()], self.part[w.idx()]) {
            (Some(t), _, _) => Ok(t.clone()),
            (None, Some(t), _) => Ok(B::float_transpose(t.clone())),
            (None, None, Some(p)) if !p.bias => {
                Ok(generic::cols::<B>(self.joined[p.group].wt.clone(), p.start, p.end))
            }
            (None, None, _) => Err(missing(w)),
        }
    }

    fn row(&self, w: W) -> Result<FloatTensor<B>> {
        if let Some(p) = self.part[w.idx()].filter(|p| p.bias) {
            let row = self.joined[p.group].bias.clone().ok_or_else(|| missing(w))?;
            return Ok(generic::cols::<B>(row, p.start, p.end));
        }
        let t = self.plain(w)?;
        let n = burn_backend::TensorMetadata::shape(&t).num_elements();
        Ok(B::float_reshape(t, burn_backend::Shape::from(vec![1, n])))
    }

    /// Where `ops`, a group of [`Graph::shared_input_linears`], are one joined group of these
    /// weights, in order and whole: the group, and each op's value and columns in its product.
    fn joined_as(&self, graph: &Graph, ops: &[usize]) -> Option<(usize, Vec<Share>)> {
        let mut shares = Vec::with_capacity(ops.len());
        let mut at = None;
        for &i in ops {
            let Op::Linear { weight, bias, out, .. } = graph.ops[i] else { return None };
            let p = self.part[weight.idx()].filter(|p| !p.bias)?;
            let (group, start) = at.unwrap_or((p.group, 0));
            if (p.group, p.start) != (group, start) {
                return None;
            }
            let biased = self.joined[group].bias.is_some();
            let b = bias.map(|b| self.part[b.idx()]);
            if b.is_some() != biased || b.is_some_and(|b| b != Some(Part { bias: true, ..p })) {
                return None;
            }
            shares.push(Share { val: out, start: p.start, end: p.end });
            at = Some((group, p.end));
        }
        let (group, end) = at?;
        let width = generic::dims::<B>(&self.joined[group].wt)[1];
        (end == width).then_some((group, shares))
    }
}

/// One linear layer's share of a joined product: its value and its columns.
#[derive(Clone, Copy, Debug)]
struct Share {
    val: Val,
    start: usize,
    end: usize,
}

/// An op's part in a joined group of linear layers, in a plan.
#[derive(Clone, Debug)]
enum Joint {
    /// The group's first op: it computes the joined product and hands each op its share.
    Lead(Vec<Share>),
    /// A later op: its share is ready when it runs.
    Follow,
}

/// A joined group's weights on the host, in f32.
struct HostJoined {
    /// `[in, width]`, row-major: each layer's matrix transposed, side by side.
    wt: Vec<f32>,
    /// `[width]`: the layers' biases one after the other, if they have them.
    bias: Option<Vec<f32>>,
    /// The layers' input width.
    k: usize,
    /// The sum of their output widths.
    width: usize,
}

/// Joins the weights of `ops`, the linear layers of a group of
/// [`Graph::shared_input_linears`] (the `group`-th), recording where each weight went in `part`.
fn join(
    graph: &Graph,
    ops: &[usize],
    tensors: &[HostTensor<'_>],
    group: usize,
    part: &mut [Option<Part>],
) -> HostJoined {
    let layers: Vec<(W, Option<W>)> = ops
        .iter()
        .filter_map(|&i| match graph.ops[i] {
            Op::Linear { weight, bias, .. } => Some((weight, bias)),
            _ => None,
        })
        .collect();
    let width: usize = layers.iter().map(|(w, _)| tensors[w.idx()].shape[0]).sum();
    let k = layers.first().map_or(0, |(w, _)| tensors[w.idx()].shape[1]);
    let mut wt = vec![0.0f32; k * width];
    let mut bias = layers.iter().all(|(_, b)| b.is_some()).then(|| Vec::with_capacity(width));
    let mut start = 0;
    for &(weight, b) in &layers {
        let t = &tensors[weight.idx()];
        transpose_into(&convert::host_f32(t), k, &mut wt, width, start);
        let end = start + t.shape[0];
        part[weight.idx()] = Some(Part { group, bias: false, start, end });
        if let (Some(b), Some(all)) = (b, bias.as_mut()) {
            all.extend(convert::host_f32(&tensors[b.idx()]));
            part[b.idx()] = Some(Part { group, bias: true, start, end });
        }
        start = end;
    }
    HostJoined { wt, bias, k, width }
}

/// Copies the row-major matrix `values`, `cols` wide, transposed into the row-major matrix
/// `dst`, `width` wide, as its columns from `start` on.
fn transpose_into(values: &[f32], cols: usize, dst: &mut [f32], width: usize, start: usize) {
    if cols == 0 {
        return;
    }
    for (r, row) in values.chunks_exact(cols).enumerate() {
        for (c, &x) in row.iter().enumerate() {
            dst[c * width + start + r] = x;
        }
    }
}

fn missing(w: W) -> Error {
    Error::Graph(format!(
        "weight {} was not uploaded: no op of the uploading graph reads it; \
         upload with a graph that uses every weight its lanes need",
        w.0
    ))
}

/// A graph lowered for one bucket: its ops with weights bound.
#[derive(Debug)]
pub struct BurnPlan<B: BurnBackend> {
    graph: Graph,
    bucket: Bucket,
    bound: Vec<Bound<B>>,
    /// Each op's part in a joined group of linear layers, if it has one.
    joint: Vec<Option<Joint>>,
    /// For each value, the last op that reads it (`ops.len()` for outputs, `None` if unread).
    last_use: Vec<Option<usize>>,
    bytes: usize,
}

impl<B: BurnBackend> BurnPlan<B> {
    /// The graph the plan runs.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}

/// One op's time in a [`Burn::profile`].
#[derive(Clone, Copy, Debug)]
pub struct OpTime {
    /// The op's kind, as [`Op::name`] gives it.
    pub op: &'static str,
    /// From the end of the op before to the device's end of this one.
    pub time: Duration,
}

/// How [`Burn::forward`] runs a plan, beyond computing its graph.
#[derive(Clone, Debug)]
pub struct Forward<B: BurnBackend> {
    /// Values given instead of computed: the op that writes each is skipped, and its readers
    /// read the tensor given (which must have the value's rows for the batch).
    pub feed: Vec<(Val, FloatTensor<B>)>,
    /// Whether the graph's dropout applies, as in training.
    pub dropout: bool,
}

impl<B: BurnBackend> Default for Forward<B> {
    fn default() -> Self {
        Forward { feed: Vec::new(), dropout: false }
    }
}

/// What one run holds: a slot for each value, filled while the value is live (Burn allocates
/// each op's result).
#[derive(Debug)]
pub struct BurnState<B: BurnBackend> {
    vals: Vec<Option<FloatTensor<B>>>,
}

impl<B: BurnBackend, K: Kernels<B>> Backend for Burn<B, K> {
    type Weights = BurnWeights<B>;
    type Plan = BurnPlan<B>;
    type State = BurnState<B>;

    fn caps(&self) -> Caps {
        self.caps.clone()
    }

    /// This backend computing in `dtype`: weights are stored in it, and activations follow.
    fn with_dtype(mut self, dtype: DType) -> Result<Self> {
        self.caps.check_dtype(dtype)?;
        self.dtype = dtype;
        self.caps.dtype = dtype;
        Ok(self)
    }

    fn upload(&self, tensors: &[HostTensor<'_>], graph: &Graph) -> Result<Self::Weights> {
        let _span =
            tracing::info_span!("upload", backend = %self.caps.backend, tensors = tensors.len())
                .entered();
        graph.check_weights(tensors)?;
        let _one = self.kernels.exclusive();
        let forms = graph.weight_reads();
        let groups = if self.joined { graph.shared_input_linears() } else { Vec::new() };
        let mut w = BurnWeights {
            plain: Vec::with_capacity(tensors.len()),
            transposed: Vec::with_capacity(tensors.len()),
            joined: Vec::with_capacity(groups.len()),
            part: vec![None; tensors.len()],
            bytes: 0,
        };
        let dtype = burn_dtype(self.dtype);
        for (group, ops) in groups.iter().enumerate() {
            let joined = join(graph, ops, tensors, group, &mut w.part);
            w.bytes +=
                (joined.wt.len() + joined.bias.as_ref().map_or(0, Vec::len)) * self.dtype.size();
            let [k, n] = [joined.k, joined.width];
            w.joined.push(Joined {
                wt: floats_as::<B>(joined.wt, &[k, n], &self.device, dtype),
                bias: joined.bias.map(|b| floats_as::<B>(b, &[1, n], &self.device, dtype)),
            });
        }
        for (i, (t, &(plain, transposed))) in tensors.iter().zip(&forms).enumerate() {
            if w.part[i].is_some() {
                w.plain.push(None);
                w.transposed.push(None);
                continue;
            }
            let values = convert::host_f32(t);
            let n = values.len();
            w.transposed.push(transposed.then(|| {
                let (rows, cols) = (t.shape[0], t.shape[1]);
                let mut tv = vec![0.0f32; n];
                transpose_into(&values, cols, &mut tv, rows, 0);
                floats_as::<B>(tv, &[cols, rows], &self.device, dtype)
            }));
            w.plain.push(plain.then(|| floats_as::<B>(values, t.shape, &self.device, dtype)));
            w.bytes += n * self.dtype.size() * (usize::from(plain) + usize::from(transposed));
        }
        Ok(w)
    }

    fn lower(&self, w: &Self::Weights, graph: &Graph, bucket: Bucket) -> Result<Self::Plan> {
        let _span = tracing::debug_span!("lower", backend = %self.caps.backend, %bucket).entered();
        graph.check_lowerable(w.plain.len())?;
        let _one = self.kernels.exclusive();
        let layout = Layout::plan(graph, bucket, self.dtype.size());
        let mut bytes = layout.total;
        // Rotary tables by head size and the bits of the base and position scale.
        type RopeKey = (usize, u32, u32);
        let mut rope_cache: HashMap<RopeKey, (FloatTensor<B>, FloatTensor<B>)> = HashMap::new();
        let mut bound = Vec::with_capacity(graph.ops.len());
        for (i, op) in graph.ops.iter().enumerate() {
            self.kernels.check(op, graph, bucket, self.dtype).map_err(|e| annotate(e, i, op))?;
            bound.push(match *op {
                Op::Embed { table, .. }
                | Op::TypeEmbed { table, .. }
                | Op::PosEmbed { table, .. } => Bound::Table(w.plain(table)?),
                Op::LayerNorm { gamma, beta, .. } => Bound::Norm {
                    gamma: w.plain(gamma)?,
                    beta: beta.map(|b| w.plain(b)).transpose()?,
                },
                Op::RmsNorm { gamma, .. } => Bound::Norm { gamma: w.row(gamma)?, beta: None },
                Op::Linear { weight, bias, .. } => Bound::Linear {
                    wt: w.transposed(weight)?,
                    bias: bias.map(|b| w.row(b)).transpose()?,
                },
                Op::Attention { position_bias: Some(PositionBias::Relative(b)), .. } => {
                    Bound::Table(w.plain(b.table)?)
                }
                Op::Attention { position_bias: Some(PositionBias::Disentangled(d)), .. } => {
                    Bound::Disentangled {
                        keys: d.keys.map(|t| w.plain(t)).transpose()?,
                        queries: d.queries.map(|t| w.plain(t)).transpose()?,
                    }
                }
                Op::Rope { head_dim, theta, position_scale, .. } => {
                    let (cos, sin) = rope_cache
                        .entry((head_dim, theta.to_bits(), position_scale.to_bits()))
                        .or_insert_with(|| {
                            let (c, s) =
                                rope_tables(bucket.tokens, head_dim, theta, position_scale);
                            bytes += (c.len() + s.len()) * self.dtype.size();
                            let shape = [bucket.tokens, head_dim / 2];
                            let dtype = burn_dtype(self.dtype);
                            (
                                floats_as::<B>(c, &shape, &self.device, dtype),
                                floats_as::<B>(s, &shape, &self.device, dtype),
                            )
                        })
                        .clone();
                    Bound::Rope { cos, sin }
                }
                Op::Add { .. }
                | Op::Mul { .. }
                | Op::Glu { .. }
                | Op::Slice { .. }
                | Op::Attention { .. }
                | Op::Activation { .. }
                | Op::Pool { .. }
                | Op::Gather { .. }
                | Op::L2Norm { .. } => Bound::None,
            });
        }
        let mut joint = vec![None; graph.ops.len()];
        for ops in graph.shared_input_linears() {
            let Some((group, shares)) = w.joined_as(graph, &ops) else { continue };
            let Joined { wt, bias } = &w.joined[group];
            bound[ops[0]] = Bound::Linear { wt: wt.clone(), bias: bias.clone() };
            joint[ops[0]] = Some(Joint::Lead(shares));
            for &i in &ops[1..] {
                bound[i] = Bound::None;
                joint[i] = Some(Joint::Follow);
            }
        }
        let mut last_use = graph.last_uses();
        for o in &graph.outputs {
            last_use[o.val.idx()] = Some(graph.ops.len());
        }
        Ok(BurnPlan { graph: graph.clone(), bucket, bound, joint, last_use, bytes })
    }

    fn state(&self, plan: &Self::Plan) -> Result<Self::State> {
        Ok(BurnState { vals: vec![None; plan.graph.vals.len()] })
    }

    fn run(
        &self,
        plan: &Self::Plan,
        state: &mut Self::State,
        batch: &Batch<'_>,
        out: &mut Outputs,
    ) -> Result<()> {
        let _span =
            tracing::trace_span!("run", backend = %self.caps.backend, tokens = batch.tokens())
                .entered();
        let _one = self.kernels.exclusive();
        let padded = self.padding(plan, batch)?;
        // Two parts a bench can time apart (`forward`, `read`): on an asynchronous device the
        // first only queues the ops' launches and the second waits for the device to run them.
        let results = {
            let _forward = tracing::trace_span!("forward").entered();
            match &padded {
                Some(buf) => {
                    let all =
                        self.forward_shared(plan, state, &buf.batch(), &Forward::default())?;
                    own_rows(plan, batch, all)
                }
                None => self.forward_shared(plan, state, batch, &Forward::default())?,
            }
        };
        let _read = tracing::trace_span!("read").entered();
        read_outputs(plan, batch, results, out)
    }

    fn weight_bytes(&self, w: &Self::Weights) -> usize {
        w.bytes
    }

    fn plan_bytes(&self, p: &Self::Plan) -> usize {
        p.bytes
    }
}

/// `results`, a forward's outputs of `plan` on `batch` padded ([`Batch::padded`]), cut to
/// `batch`'s own rows, which come before the padding's: as a forward of `batch` would give them.
pub fn own_rows<B: BurnBackend>(
    plan: &BurnPlan<B>,
    batch: &Batch<'_>,
    results: Vec<Option<FloatTensor<B>>>,
) -> Vec<Option<FloatTensor<B>>> {
    let graph = &plan.graph;
    let outputs = graph.outputs.iter().zip(results);
    outputs
        .map(|(o, t)| {
            let rows = batch.rows(graph.shape(o.val).rows);
            let t = t.filter(|_| rows > 0)?;
            Some(generic::rows::<B>(t, 0, rows))
        })
        .collect()
}

/// Reads `results`, a forward's outputs of `plan` on `batch` ([`Burn::forward`]), back into
/// `out` as f32, as [`Backend::run`] does.
pub fn read_outputs<B: BurnBackend>(
    plan: &BurnPlan<B>,
    batch: &Batch<'_>,
    results: Vec<Option<FloatTensor<B>>>,
    out: &mut Outputs,
) -> Result<()> {
    let mats = out.prepare(&plan.graph, batch);
    for (m, t) in mats.iter_mut().zip(results) {
        let Some(t) = t else { continue };
        let v = read_f32::<B>(t)?;
        if v.len() != m.data.len() {
            return Err(Error::Device(format!(
                "output `{}` came back with {} values, expected {}",
                m.name,
                v.len(),
                m.data.len()
            )));
        }
        m.data.copy_from_slice(&v);
    }
    Ok(())
}

/// The op's inputs: moved out of their slots at their last use, cloned otherwise (a value read
/// twice by one op is cloned for all but its last slot).
fn take_inputs<B: BurnBackend>(
    op: &Op,
    i: usize,
    last_use: &[Option<usize>],
    vals: &mut [Option<FloatTensor<B>>],
) -> Inputs<B> {
    let names = op.inputs();
    let mut ins: Inputs<B> = [None, None, None];
    for (j, v) in names.iter().enumerate() {
        let Some(v) = *v else { continue };
        let again = names[j + 1..].contains(&Some(v));
        let slot = &mut vals[v.idx()];
        ins[j] = if last_use[v.idx()] == Some(i) && !again { slot.take() } else { slot.clone() };
    }
    ins
}

fn annotate(e: Error, i: usize, op: &Op) -> Error {
    match e {
        Error::Unsupported(m) => Error::Unsupported(format!("op {i} ({}): {m}", op.name())),
        other => other,
    }
}
