//! A linear layer in one kernel: `act(x . wt + bias) + residual`, the epilogue applied to each
//! output while it is still in registers, instead of three or four passes over the output.
//!
//! Tiled GEMM: a cube of 16 x 16 units computes a 64 x 64 block of the output, each unit a
//! 4 x 4 patch, walking `k` in steps of 16 with both operands' tiles staged in shared memory
//! (8 KiB). Edges are handled by zero-filling the tiles and skipping stores, so any `m`, `k`,
//! `n` works. All loops but those over `k` are unrolled, so a unit loops `k` times in all (see
//! the attention kernel for why that count matters on llvmpipe).

use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use switchyard_core::Act;

/// Units per cube side.
const UNITS: usize = 16;
/// Outputs per unit side.
const PATCH: usize = 4;
/// Output block side per cube.
const BLOCK: usize = UNITS * PATCH;
/// Depth of a `k` step.
const DEPTH: usize = 16;

/// The activation's code in the kernel.
pub(super) fn code(act: Act) -> u32 {
    match act {
        Act::Identity => 0,
        Act::Gelu => 1,
        Act::GeluTanh => 2,
        Act::Relu => 3,
        Act::Silu => 4,
        Act::Tanh => 5,
        Act::Sigmoid => 6,
        Act::Log1pRelu => 7,
    }
}

/// Applies the activation `act` (a [`code`]), following [`Act`]'s definitions.
#[cube]
pub(super) fn activate(y: f32, #[comptime] act: u32) -> f32 {
    let mut r = y;
    if comptime![act == 1] {
        r = 0.5 * y * (1.0 + Erf::erf(y * std::f32::consts::FRAC_1_SQRT_2));
    } else if comptime![act == 2] {
        let inner = 0.797_884_6f32 * (y + 0.044_715f32 * y * y * y);
        r = 0.5 * y * (1.0 + f32::tanh(inner));
    } else if comptime![act == 3] {
        r = max(y, 0.0);
    } else if comptime![act == 4] {
        r = y / (1.0 + f32::exp(-y));
    } else if comptime![act == 5] {
        r = f32::tanh(y);
    } else if comptime![act == 6] {
        r = 1.0 / (1.0 + f32::exp(-y));
    } else if comptime![act == 7] {
        r = f32::log1p(max(y, 0.0));
    }
    r
}

/// `out = act(x . wt + bias) + residual` for `x: [m, k]`, `wt: [k, n]`, `bias: [n]`,
/// `residual: [m, n]`; `bias` and `residual` are read only when their flags say so.
#[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
#[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
#[allow(clippy::too_many_arguments)]
fn linear_kernel(
    x: &[f32],
    wt: &[f32],
    bias: &[f32],
    residual: &[f32],
    out: &mut [f32],
    m: u32,
    k: u32,
    n: u32,
    #[comptime] act: u32,
    #[comptime] has_bias: bool,
    #[comptime] has_residual: bool,
) {
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let tx = UNIT_POS_X as usize;
    let ty = UNIT_POS_Y as usize;
    let unit = ty * UNITS + tx;
    let row0 = CUBE_POS_Y as usize * BLOCK;
    let col0 = CUBE_POS_X as usize * BLOCK;

    // a: BLOCK rows x DEPTH, b: DEPTH x BLOCK columns.
    let mut a = Shared::<[f32]>::new_slice(BLOCK * DEPTH);
    let mut b = Shared::<[f32]>::new_slice(DEPTH * BLOCK);
    let mut acc = Array::<f32>::new(PATCH * PATCH);
    #[unroll]
    for i in 0..PATCH * PATCH {
        acc[i] = 0.0;
    }
    let mut left = Array::<f32>::new(PATCH);
    let mut right = Array::<f32>::new(PATCH);

    let mut k0 = 0usize;
    while k0 < k {
        // Each of the 256 units stages 4 values of each tile.
        #[unroll]
        for s in 0..(BLOCK * DEPTH) / (UNITS * UNITS) {
            let e = unit + s * UNITS * UNITS;
            let (r, c) = (row0 + e / DEPTH, k0 + e % DEPTH);
            let mut val = 0.0f32;
            if r < m && c < k {
                val = x[r * k + c];
            }
            a[e] = val;
            let (r, c) = (k0 + e / BLOCK, col0 + e % BLOCK);
            let mut val = 0.0f32;
            if r < k && c < n {
                val = wt[r * n + c];
            }
            b[e] = val;
        }
        sync_cube();
        for kk in 0..DEPTH {
            #[unroll]
            for i in 0..PATCH {
                left[i] = a[(ty * PATCH + i) * DEPTH + kk];
                right[i] = b[kk * BLOCK + tx * PATCH + i];
            }
            #[unroll]
            for i in 0..PATCH {
                #[unroll]
                for j in 0..PATCH {
                    acc[i * PATCH + j] += left[i] * right[j];
                }
            }
        }
        sync_cube();
        k0 += DEPTH;
    }

    #[unroll]
    for i in 0..PATCH {
        let r = row0 + ty * PATCH + i;
        #[unroll]
        for j in 0..PATCH {
            let c = col0 + tx * PATCH + j;
            if r < m && c < n {
                let mut y = acc[i * PATCH + j];
                if has_bias {
                    y += bias[c];
                }
                y = activate(y, act);
                if has_residual {
                    y += residual[r * n + c];
                }
                out[r * n + c] = y;
            }
        }
    }
}

/// Whether one launch covers an `[m, n]` output within the 65535 cubes per grid dimension.
pub(crate) fn launchable(m: usize, n: usize) -> bool {
    m.div_ceil(BLOCK) <= super::MAX_CUBES && n.div_ceil(BLOCK) <= super::MAX_CUBES
}

/// `act(x . wt + bias) + residual` on f32 tensors: `x: [m, k]`, `wt: [k, n]`, `bias: [1, n]`,
/// `residual: [m, n]`.
pub(crate) fn run(
    x: CubeTensor,
    wt: &CubeTensor,
    bias: Option<&CubeTensor>,
    act: Act,
    residual: Option<CubeTensor>,
) -> CubeTensor {
    let x = super::contiguous(x);
    let wt = super::contiguous(wt.clone());
    let [m, k] = super::dims(&x);
    let n = super::dims(&wt)[1];
    let out = super::empty(&x, [m, n]);
    let (has_bias, has_residual) = (bias.is_some(), residual.is_some());
    // An absent operand is bound as `x`, which the kernel never reads in its place.
    let bias = bias.map_or_else(|| x.clone(), |b| super::contiguous(b.clone()));
    let residual = residual.map_or_else(|| x.clone(), super::contiguous);
    let cubes = |len: usize| len.div_ceil(BLOCK) as u32;
    linear_kernel::launch(
        &x.client.clone(),
        CubeCount::Static(cubes(n), cubes(m), 1),
        CubeDim::new_2d(UNITS as u32, UNITS as u32),
        x.into_buffer_arg(),
        wt.into_buffer_arg(),
        bias.into_buffer_arg(),
        residual.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        m as u32,
        k as u32,
        n as u32,
        code(act),
        has_bias,
        has_residual,
    );
    out
}

/// The kernel's variants as CUDA C++ for [`super::cuda_check`]: f32 with a bias and GELU, and with
/// a bias and residual.
#[cfg(all(test, feature = "wgpu"))]
pub(super) fn cuda_variants(sm: &super::cuda_check::Sm) -> Vec<super::cuda_check::Variant> {
    use cubecl::ir::FloatKind::{BF16, F16, F32};
    let build = |act: Act, residual| {
        let kernel = linear_kernel::create_dummy_kernel(
            sm.props(),
            sm.target(),
            CubeCount::Static(2, 2, 1),
            CubeDim::new_2d(UNITS as u32, UNITS as u32),
            sm.buffer(128 * 64),
            sm.buffer(64 * 128),
            sm.buffer(128),
            sm.buffer(128 * 128),
            sm.buffer(128 * 128),
            128,
            64,
            128,
            code(act),
            true,
            residual,
        );
        let what = if residual { "bias + residual" } else { "bias" };
        sm.variant(format!("fused GEMM F32 {act:?} {what}"), kernel)
    };
    let _ = (F16, BF16, F32);
    vec![build(Act::Gelu, false), build(Act::Identity, true)]
}
