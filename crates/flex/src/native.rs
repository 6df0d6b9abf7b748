//! flex's own engine: weights packed once for its GEMM, one arena per run laid out by
//! [`switchyard_core::layout`], and its kernels over that arena, in parallel on its thread pool.
//! A warm run allocates nothing: the arena is the run state's, and every kernel's scratch is its
//! thread's, kept from run to run.
//!
//! Activations are f32 throughout. In int8 ([`Precision::Int8`]) the linear layers' weights are
//! quantized at upload and each linear layer's input rows just before it, the GEMM summing in
//! i32 ([`gemm8`]); in bf16 ([`Precision::Bf16`]) both are rounded to bf16 instead, the GEMM
//! summing exact products in f32 ([`gemm16`]). In both, attention's products are bf16 where the
//! CPU has AVX-512 BF16 ([`Products::Bf16`], on AMX's tiles where the bf16 GEMM runs there:
//! [`Products::AmxBf16`]; in int8, where its rows have zero points). Every
//! other op is the f32 engine's.

use std::sync::Arc;

use rayon::prelude::*;
use switchyard_core::{
    Batch, Bucket, Caps, Disentangled, Error, Graph, HostTensor, Layout, Op, Outputs, PositionBias,
    Reach, RelativeBias, Result, Rows, W, rope_tables,
};

use crate::buf::AlignedBuf;
use crate::kernels::attention::{self, DisentangledTables, Heads, Products};
use crate::kernels::gemm::{self, PackedWeight};
use crate::kernels::gemm8::{self, Isa8, PackedWeight8, QuantizedRows};
use crate::kernels::gemm16::{self, Isa16, PackedWeight16};
use crate::kernels::rows::Combine;
use crate::kernels::scratch::{ScratchSize, Scratches};
use crate::kernels::{Isa, rows};

/// What the linear layers compute in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 weights and sums.
    F32,
    /// int8 weights (per output column) and input rows (per row), i32 sums, with `Isa8`'s
    /// microkernel.
    Int8(Isa8),
    /// bf16 weights and input rows, f32 sums of their exact products, with `Isa16`'s
    /// microkernel.
    Bf16(Isa16),
}

/// A linear layer's weight, packed for the GEMM of its precision.
#[derive(Debug)]
enum Linear {
    F32(PackedWeight),
    Int8(PackedWeight8),
    Bf16(PackedWeight16),
}

impl Linear {
    fn bytes(&self) -> usize {
        match self {
            Linear::F32(p) => p.bytes(),
            Linear::Int8(p) => p.bytes(),
            Linear::Bf16(p) => p.bytes(),
        }
    }
}

/// Checkpoint weights, each in the form its ops read it.
#[derive(Debug)]
pub struct NativeWeights {
    /// As in the checkpoint, in f32 (tables, norm parameters, biases), where some op reads it so.
    plain: Vec<Option<Vec<f32>>>,
    /// Packed for the GEMM, where a linear layer reads it.
    linear: Vec<Option<Linear>>,
    bytes: usize,
    /// What attention multiplies in.
    products: Products,
}

impl NativeWeights {
    fn plain(&self, w: W) -> Result<&[f32]> {
        self.plain[w.idx()].as_deref().ok_or_else(|| missing(w))
    }

    fn linear(&self, w: W) -> Result<&Linear> {
        self.linear[w.idx()].as_ref().ok_or_else(|| missing(w))
    }
}

fn missing(w: W) -> Error {
    Error::Graph(format!(
        "weight {} was not uploaded in the form an op reads it: no op of the uploading graph \
         reads it so; upload with a graph that uses every weight as its lanes do",
        w.0
    ))
}

/// Rotary tables for one head size, base and position scale, for every position of the bucket.
#[derive(Debug)]
struct RopeTables {
    head_dim: usize,
    theta: f32,
    position_scale: f32,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl NativePlan {
    /// The shape, reach and position terms of `op`, if it is an attention op.
    fn heads(&self, op: &Op) -> Result<Option<Heads<'_>>> {
        let Op::Attention {
            heads, kv_heads, head_dim, scale, window, causal, position_bias, ..
        } = *op
        else {
            return Ok(None);
        };
        let relative = position_bias.and_then(PositionBias::relative).map(|b| {
            let (_, by_distance) = self
                .position
                .iter()
                .find(|(p, _)| *p == b)
                .expect("lower made the biases of every position-biased op");
            &by_distance[..]
        });
        let disentangled = position_bias.and_then(PositionBias::disentangled);
        Ok(Some(Heads {
            heads,
            kv_heads,
            head_dim,
            scale,
            reach: Reach::of(window, causal),
            position_bias: relative,
            disentangled: disentangled.map(|d| self.disentangled(d)).transpose()?,
        }))
    }

    /// Disentangled attention `d`'s tables, and their rows by distance.
    fn disentangled(&self, d: Disentangled) -> Result<DisentangledTables<'_>> {
        let (_, rows) = self
            .disentangled
            .iter()
            .find(|(p, _)| *p == d)
            .expect("lower made the rows of every disentangled op");
        let table = |t: Option<W>| t.map(|t| self.weights.plain(t)).transpose();
        Ok(DisentangledTables { rows, keys: table(d.keys)?, queries: table(d.queries)? })
    }
}

impl RopeTables {
    /// Whether these are the tables of a `Rope` op with these settings.
    fn matches(&self, head_dim: usize, theta: f32, position_scale: f32) -> bool {
        (self.head_dim, self.theta, self.position_scale) == (head_dim, theta, position_scale)
    }
}

/// A graph lowered for one bucket: the weights it reads, its arena's layout, its rotary tables
/// and its attention's position biases by distance.
#[derive(Debug)]
pub struct NativePlan {
    weights: Arc<NativeWeights>,
    graph: Graph,
    bucket: Bucket,
    layout: Layout,
    rope: Vec<RopeTables>,
    /// Each relative position bias's table by distance ([`RelativeBias::by_distance`]), for
    /// the longest sequence the plan takes.
    position: Vec<(RelativeBias, Vec<f32>)>,
    /// Each disentangled attention op's rows by distance ([`Disentangled::rows_by_distance`]),
    /// for the longest sequence the plan takes.
    disentangled: Vec<(Disentangled, Vec<u32>)>,
}

/// What one run writes: the arena, the kernels' scratch for each thread of the pool, and in
/// int8 or bf16 the input rows of the linear layer running, quantized or rounded.
#[derive(Debug)]
pub struct NativeState {
    arena: AlignedBuf,
    scratch: Scratches,
    quantized: QuantizedRows,
    rounded: Vec<u16>,
}

const F32: usize = size_of::<f32>();

/// Converts and packs the checkpoint tensors for `graph`, the linear layers' in `precision`,
/// for attention multiplying in `products` (bf16 only where the CPU has AVX-512 BF16); the
/// tensors in parallel on the current rayon pool.
pub(crate) fn upload(
    isa: Isa,
    (precision, products): (Precision, Products),
    tensors: &[HostTensor<'_>],
    graph: &Graph,
) -> Result<NativeWeights> {
    graph.check_weights(tensors)?;
    let forms = graph.weight_reads();
    let one = |(t, &(plain, linear)): (&HostTensor<'_>, &(bool, bool))| -> Result<_> {
        let (n, k) = (t.shape[0], t.shape.get(1).copied().unwrap_or(1));
        if linear && matches!(precision, Precision::Int8(_)) && k > gemm8::MAX_K {
            return Err(Error::Unsupported(format!(
                "int8 linear layers of {k} inputs: flex's int8 sums take at most {}",
                gemm8::MAX_K
            )));
        }
        let mut values = Vec::new();
        t.extend_f32(&mut values);
        let packed = linear.then(|| match precision {
            Precision::F32 => Linear::F32(PackedWeight::pack(&values, n, k, isa)),
            Precision::Int8(isa8) => Linear::Int8(PackedWeight8::pack(&values, n, k, isa8)),
            Precision::Bf16(isa16) => Linear::Bf16(PackedWeight16::pack(&values, n, k, isa16)),
        });
        Ok((packed, plain.then_some(values)))
    };
    let done: Vec<_> = tensors.par_iter().zip(&forms).map(one).collect::<Result<_>>()?;
    let mut w = NativeWeights {
        plain: Vec::with_capacity(tensors.len()),
        linear: Vec::with_capacity(tensors.len()),
        bytes: 0,
        products,
    };
    for (packed, plain) in done {
        w.bytes += packed.as_ref().map_or(0, Linear::bytes);
        w.bytes += plain.as_ref().map_or(0, |v| v.len() * F32);
        w.linear.push(packed);
        w.plain.push(plain);
    }
    Ok(w)
}

/// Lowers `graph` over `w` for `bucket`.
pub(crate) fn lower(w: &Arc<NativeWeights>, graph: &Graph, bucket: Bucket) -> Result<NativePlan> {
    graph.check_lowerable(w.plain.len())?;
    // Every weight an op reads must be there in the form it reads it.
    for op in &graph.ops {
        for (i, wt) in op.weights().into_iter().enumerate() {
            let Some(wt) = wt else { continue };
            if matches!(op, Op::Linear { .. }) && i == 0 {
                w.linear(wt)?;
            } else {
                w.plain(wt)?;
            }
        }
    }
    let mut rope: Vec<RopeTables> = Vec::new();
    for op in &graph.ops {
        if let Op::Rope { head_dim, theta, position_scale, .. } = *op
            && !rope.iter().any(|r| r.matches(head_dim, theta, position_scale))
        {
            let (cos, sin) = rope_tables(bucket.tokens, head_dim, theta, position_scale);
            rope.push(RopeTables { head_dim, theta, position_scale, cos, sin });
        }
    }
    let longest = bucket.tokens.min(graph.limits().max_len as usize);
    let mut position: Vec<(RelativeBias, Vec<f32>)> = Vec::new();
    let mut disentangled: Vec<(Disentangled, Vec<u32>)> = Vec::new();
    for op in &graph.ops {
        match *op {
            Op::Attention { heads, position_bias: Some(PositionBias::Relative(b)), .. }
                if !position.iter().any(|(p, _)| *p == b) =>
            {
                position.push((b, b.by_distance(w.plain(b.table)?, heads, longest)));
            }
            Op::Attention { position_bias: Some(PositionBias::Disentangled(d)), .. } => {
                let rows = d.rows_by_distance(longest).into_iter().map(|r| r as u32).collect();
                disentangled.push((d, rows));
            }
            _ => {}
        }
    }
    Ok(NativePlan {
        weights: Arc::clone(w),
        graph: graph.clone(),
        bucket,
        layout: Layout::plan(graph, bucket, F32),
        rope,
        position,
        disentangled,
    })
}

/// The run state of `plan` for a pool of `threads`: its arena, and scratch for the largest
/// work of the plan's bucket.
pub(crate) fn state(isa: Isa, plan: &NativePlan, threads: usize) -> Result<NativeState> {
    let g = &plan.graph;
    let longest = (plan.bucket.tokens).min(g.limits().max_len as usize);
    let mut size = ScratchSize::default();
    let (mut quantized_bytes, mut quantized_rows, mut rounded) = (0, 0, 0);
    for op in &g.ops {
        match *op {
            Op::Linear { x, weight, .. } => {
                let rows = plan.bucket.rows(g.shape(x).rows);
                size = size.max(match plan.weights.linear(weight)? {
                    Linear::F32(w) => gemm::scratch_size(rows, w),
                    Linear::Int8(w) => {
                        quantized_bytes = quantized_bytes.max(w.rows_bytes(rows));
                        quantized_rows = quantized_rows.max(rows);
                        gemm8::scratch_size(rows, w)
                    }
                    Linear::Bf16(w) => {
                        rounded = rounded.max(w.rows_len(rows));
                        gemm16::scratch_size(rows, w)
                    }
                });
            }
            Op::Attention { .. } => {
                let h = plan.heads(op)?.expect("an attention op has heads");
                let products = plan.weights.products;
                size = size.max(attention::scratch_size(h, longest, isa, products));
            }
            _ => {}
        }
    }
    Ok(NativeState {
        arena: AlignedBuf::zeros(plan.layout.total / F32),
        scratch: Scratches::new(threads, size),
        quantized: QuantizedRows::with_room(quantized_rows, quantized_bytes),
        rounded: vec![0; rounded],
    })
}

impl NativeWeights {
    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl NativePlan {
    /// Bytes held besides the weights (the rotary tables, the position biases).
    pub(crate) fn bytes(&self) -> usize {
        let rope: usize = self.rope.iter().map(|r| r.cos.len() + r.sin.len()).sum();
        let position: usize = self.position.iter().map(|(_, b)| b.len()).sum();
        (rope + position) * F32
    }
}

impl NativeState {
    /// Bytes held (the arena, the scratch, the quantized or rounded rows).
    pub(crate) fn bytes(&self) -> usize {
        self.arena.len() * F32
            + self.scratch.bytes()
            + self.quantized.held()
            + self.rounded.len() * size_of::<u16>()
    }
}

/// Runs `batch` through `plan` on the current rayon pool, writing `out`.
pub(crate) fn run(
    isa: Isa,
    plan: &NativePlan,
    state: &mut NativeState,
    batch: &Batch<'_>,
    out: &mut Outputs,
) -> Result<()> {
    plan.bucket.admit(batch)?;
    let g = &plan.graph;
    let NativeState { arena, scratch, quantized, rounded } = state;
    let arena = arena.as_mut_slice();
    let base = arena.as_mut_ptr();
    // The address of value v: values live at the layout's offsets, which lie inside the arena.
    let at = |v: switchyard_core::Val| -> *mut f32 {
        // SAFETY: the offset of every value of the graph is inside the arena the layout sized.
        unsafe { base.add(plan.layout.offsets[v.idx()] / F32) }
    };
    let w = &plan.weights;
    // In int8 or bf16, the value whose rows `quantized` or `rounded` holds: linear layers
    // reading the same input (a BERT layer's query, key and value) quantize or round it once.
    let mut prepared_from = None;
    for op in &g.ops {
        let o = op.out();
        let shape = g.shape(o);
        let rows = batch.rows(shape.rows);
        if rows == 0 {
            continue;
        }
        let width = shape.width;
        // SAFETY: for every kernel called below, the layout places each value where it does
        // not overlap any other value live at the same time, except an output written in place
        // over an input (same address, same size), which the kernels that may run in place
        // allow; each value has room for the bucket's rows, and the batch fits the bucket.
        unsafe {
            match *op {
                Op::Embed { table, scale, .. } => {
                    let ids = batch.ids;
                    rows::lookup(at(o), w.plain(table)?, rows, width, scale, |t| ids[t] as usize);
                }
                Op::TypeEmbed { table, .. } => {
                    let types = batch.types;
                    rows::lookup(at(o), w.plain(table)?, rows, width, 1.0, |t| types[t] as usize);
                }
                Op::PosEmbed { table, offset, .. } => {
                    let cu = batch.cu;
                    // A token's position: its distance from its sequence's start.
                    let pos = |t: usize| {
                        let s = cu.partition_point(|&c| c as usize <= t) - 1;
                        offset + t - cu[s] as usize
                    };
                    rows::lookup(at(o), w.plain(table)?, rows, width, 1.0, pos);
                }
                Op::Add { a, b, .. } => {
                    rows::combine(isa, Combine::Add, at(o), at(a), at(b), rows * width);
                }
                Op::Mul { a, b, .. } => {
                    rows::combine(isa, Combine::Mul, at(o), at(a), at(b), rows * width);
                }
                Op::LayerNorm { x, gamma, beta, eps, .. } => {
                    let beta = beta.map(|b| w.plain(b)).transpose()?;
                    rows::layer_norm(isa, at(o), at(x), rows, width, w.plain(gamma)?, beta, eps);
                }
                Op::RmsNorm { x, gamma, eps, group, unit_offset, .. } => {
                    // Groups of a row are contiguous: each is a row of its own.
                    let n = group.unwrap_or(width);
                    let (x, g) = (at(x), w.plain(gamma)?);
                    let offset = if unit_offset { 1.0 } else { 0.0 };
                    rows::rms_norm(isa, at(o), x, rows * width / n, n, (g, offset), eps);
                }
                Op::Linear { x, weight, bias, act, residual, .. } => {
                    let bias = bias.map(|b| w.plain(b)).transpose()?;
                    let residual = residual.map(|r| at(r).cast_const());
                    match w.linear(weight)? {
                        Linear::F32(wt) => {
                            gemm::gemm(at(x), rows, wt, bias, act, residual, at(o), scratch);
                        }
                        Linear::Int8(wt) => {
                            // Values are written once, and `x`, read here, is not yet
                            // overwritten: its rows are what they were when quantized.
                            if prepared_from != Some(x) {
                                gemm8::quantize_rows(isa, at(x), rows, wt, quantized);
                                prepared_from = Some(x);
                            }
                            let q = &*quantized;
                            gemm8::gemm8(q, rows, wt, bias, act, residual, at(o), scratch);
                        }
                        Linear::Bf16(wt) => {
                            // As in int8: `x`'s rows are what they were when rounded.
                            if prepared_from != Some(x) {
                                gemm16::round_rows(isa, at(x), rows, wt, rounded);
                                prepared_from = Some(x);
                            }
                            let h = &rounded[..];
                            gemm16::gemm16(isa, h, rows, wt, bias, act, residual, at(o), scratch);
                        }
                    }
                }
                Op::Glu { x, act, gate, .. } => {
                    rows::glu(isa, at(o), at(x), rows, width, act, gate)
                }
                Op::Slice { x, start, .. } => {
                    rows::slice(at(o), at(x), rows, g.shape(x).width, start, width);
                }
                Op::Rope { x, heads, head_dim, theta, position_scale, .. } => {
                    let t = plan
                        .rope
                        .iter()
                        .find(|r| r.matches(head_dim, theta, position_scale))
                        .expect("lower made a table for every rotary op");
                    rows::rope(at(o), at(x), batch, heads, head_dim, &t.cos, &t.sin);
                }
                Op::Attention { q, k, v, .. } => {
                    let h = plan.heads(op)?.expect("an attention op has heads");
                    let per_seq = g.shape(q).rows == Rows::Seqs;
                    let (q, k, v, o) = (at(q), at(k), at(v), at(o));
                    let products = w.products;
                    attention::attention(isa, products, q, k, v, o, batch, per_seq, h, scratch);
                }
                Op::Activation { x, act, .. } => {
                    rows::activation(isa, at(o), at(x), rows, width, act);
                }
                Op::Pool { x, mode, .. } => rows::pool(at(o), at(x), batch, width, mode),
                Op::Gather { x, .. } => rows::gather_markers(at(o), at(x), batch, width),
                Op::L2Norm { x, eps, .. } => rows::l2_norm(isa, at(o), at(x), rows, width, eps),
            }
        }
    }
    let arena = state.arena.as_slice();
    for (m, o) in out.prepare(g, batch).iter_mut().zip(&g.outputs) {
        let start = plan.layout.offsets[o.val.idx()] / F32;
        let n = m.data.len();
        m.data.copy_from_slice(&arena[start..start + n]);
    }
    Ok(())
}

/// The caps of the native engine on `threads` threads, with the instruction sets of its f32,
/// int8 and bf16 kernels.
pub(crate) fn caps(threads: usize, isa: Isa, isa8: Isa8, isa16: Isa16) -> Caps {
    let device = device(isa, isa8, isa16);
    Caps::new("flex", &device, switchyard_core::DeviceKind::Cpu).with_threads(threads)
}

/// The host CPU in words, with what its f32, int8 and bf16 kernels run on, and that f16 runs
/// Burn's generic ops (burn-flex), not this engine.
pub(crate) fn device(isa: Isa, isa8: Isa8, isa16: Isa16) -> String {
    // Portable code is vectorised for the build's target: NEON on aarch64.
    let portable =
        if cfg!(target_arch = "aarch64") { "portable code (NEON)" } else { "portable code" };
    let f32s = match isa {
        Isa::Avx512 => "AVX-512",
        Isa::Avx2 => "AVX2",
        Isa::Portable => portable,
    };
    let int8 = match isa8 {
        Isa8::AmxInt8 => "AMX",
        Isa8::Avx512Vnni => "AVX-512 VNNI",
        Isa8::AvxVnni => "AVX-VNNI",
        Isa8::Avx2 => "AVX2",
        Isa8::Ssse3 => "SSSE3",
        Isa8::NeonI8mm => "NEON int8 matrix multiply",
        Isa8::NeonDot => "NEON dot product",
        Isa8::Portable => portable,
    };
    let bf16 = match isa16 {
        Isa16::AmxBf16 => "bf16 on AMX",
        Isa16::Avx512Bf16 => "bf16 on AVX-512 BF16",
        Isa16::Avx512 => "bf16 widened to f32 on AVX-512 (about as fast as f32)",
        Isa16::Avx2 => "bf16 widened to f32 on AVX2 (no faster than f32)",
        Isa16::NeonBf16 => "bf16 on NEON BF16",
        Isa16::Portable => "bf16 widened to f32 (slower than f32)",
    };
    format!("host CPU: f32 on {f32s}, int8 on {int8}, {bf16}, f16 on Burn's ops (slower than f32)")
}
