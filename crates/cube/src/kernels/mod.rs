//! CubeCL kernels of our own, through switchyard-burn's per-op seam, where Burn's generic path
//! does more work than the op needs:
//! - [`attention`]: ragged self-attention over the batch's `cu` offsets in one launch, where the
//!   generic path makes one Burn attention call (and, with a window, one mask) per sequence;
//! - [`gemm`]: a linear layer with its bias, activation and residual applied in the GEMM's
//!   epilogue, where the generic path makes a pass over the output for each.
//!
//! They run on f32 tensors of the unfused backend. Anything else (another dtype, a head wider
//! than [`attention::MAX_HEAD_DIM`], a batch or output needing more than 65535 cubes along a
//! grid dimension, a `fusion` build, whose tensors are fusion handles) goes to the generic
//! lowering, and [`CubeKernels::launched`] shows which path ran.

#[cfg(not(feature = "fusion"))]
mod attention;
#[cfg(not(feature = "fusion"))]
mod gemm;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use switchyard_burn::Kernels;
#[cfg(not(feature = "fusion"))]
use switchyard_burn::{Bound, Inputs, Ran, RunCx};
#[cfg(not(feature = "fusion"))]
use switchyard_core::Op;

/// Which of the crate's own kernels a backend uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSet {
    /// Ragged self-attention.
    pub attention: bool,
    /// Linear layers with a fused epilogue.
    pub linear: bool,
}

impl KernelSet {
    /// Every kernel of this crate.
    pub const ALL: KernelSet = KernelSet { attention: true, linear: true };
    /// None: Burn's generic lowering for every op.
    pub const NONE: KernelSet = KernelSet { attention: false, linear: false };
    /// The kernels measured to win, the default: ragged attention only. On the one device
    /// measured (llvmpipe, `cargo xtask bench --gpu`), it made the MiniLM-shaped encoder 1.2x
    /// faster, while the fused GEMM made it 2x slower than Burn's tuned matmul; the GEMM stays
    /// opt-in until a GPU measures otherwise.
    pub const MEASURED: KernelSet = KernelSet { attention: true, linear: false };
}

impl Default for KernelSet {
    fn default() -> Self {
        KernelSet::MEASURED
    }
}

/// How many ops each of the crate's kernels has run, since the backend was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Launched {
    /// Attention ops run by the ragged attention kernel.
    pub attention: usize,
    /// Linear ops run by the fused-epilogue GEMM.
    pub linear: usize,
}

/// The cube backend's kernels: the chosen [`KernelSet`], and counts of what they ran.
#[derive(Clone, Debug, Default)]
pub struct CubeKernels {
    set: KernelSet,
    attention: Arc<AtomicUsize>,
    linear: Arc<AtomicUsize>,
}

impl CubeKernels {
    /// Kernels using `set`.
    pub fn new(set: KernelSet) -> Self {
        CubeKernels { set, ..CubeKernels::default() }
    }

    /// The kernels in use.
    pub fn set(&self) -> KernelSet {
        self.set
    }

    /// How many ops the crate's kernels have run (clones share the counts).
    pub fn launched(&self) -> Launched {
        Launched {
            attention: self.attention.load(Ordering::Relaxed),
            linear: self.linear.load(Ordering::Relaxed),
        }
    }
}

#[cfg(feature = "fusion")]
impl Kernels<burn_cubecl::Cube> for CubeKernels {}

#[cfg(not(feature = "fusion"))]
impl Kernels<burn_cubecl::CubeBackend> for CubeKernels {
    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<burn_cubecl::CubeBackend>,
        w: &Bound<burn_cubecl::CubeBackend>,
        cx: &RunCx<'_, burn_cubecl::CubeBackend>,
    ) -> Ran<burn_cubecl::CubeBackend> {
        match (op, ins, w) {
            (
                &Op::Attention { heads, head_dim, scale, window, .. },
                [Some(q), Some(k), Some(v)],
                _,
            ) if self.set.attention
                && head_dim <= attention::MAX_HEAD_DIM
                && attention::launchable(cx.batch)
                && all_f32(&[&q, &k, &v]) =>
            {
                self.attention.fetch_add(1, Ordering::Relaxed);
                Ran::Done(attention::run(q, k, v, heads, head_dim, scale, window, cx.batch))
            }
            (&Op::Linear { act, .. }, [Some(x), residual, None], Bound::Linear { wt, bias })
                if self.set.linear
                    && gemm::launchable(dims(&x)[0], dims(wt)[1])
                    && all_f32(&[&x, wt])
                    && bias.iter().chain(&residual).all(|t| all_f32(&[t])) =>
            {
                self.linear.fetch_add(1, Ordering::Relaxed);
                Ran::Done(gemm::run(x, wt, bias.as_ref(), act, residual))
            }
            (_, ins, _) => Ran::Declined(ins),
        }
    }
}

#[cfg(not(feature = "fusion"))]
use burn_cubecl::tensor::CubeTensor;

/// Cubes per grid dimension that every runtime launches (wgpu's limit).
#[cfg(not(feature = "fusion"))]
const MAX_CUBES: usize = 65_535;

#[cfg(not(feature = "fusion"))]
fn all_f32(ts: &[&CubeTensor]) -> bool {
    ts.iter().all(|t| t.dtype == burn_backend::DType::F32)
}

/// `t` laid out as plain rows (copied only if it is not already).
#[cfg(not(feature = "fusion"))]
fn contiguous(t: CubeTensor) -> CubeTensor {
    burn_cubecl::kernel::into_contiguous(t)
}

/// `[rows, width]` of a 2-D tensor.
#[cfg(not(feature = "fusion"))]
fn dims(t: &CubeTensor) -> [usize; 2] {
    let s = t.meta.shape();
    [s[0], s[1]]
}

/// An uninitialised f32 tensor of `shape` on `like`'s device.
#[cfg(not(feature = "fusion"))]
fn empty(like: &CubeTensor, shape: [usize; 2]) -> CubeTensor {
    burn_cubecl::ops::numeric::empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        burn_backend::Shape::from(shape.to_vec()),
        burn_backend::DType::F32,
    )
}

/// An uninitialised f32 tensor shaped like `like`.
#[cfg(not(feature = "fusion"))]
fn empty_like(like: &CubeTensor) -> CubeTensor {
    empty(like, dims(like))
}

/// `values` uploaded to a device buffer, and their count.
#[cfg(not(feature = "fusion"))]
fn u32s(client: &cubecl::client::Client, values: &[u32]) -> (cubecl::server::Handle, usize) {
    (client.create_from_slice(<u32 as cubecl::CubeElement>::as_bytes(values)), values.len())
}
