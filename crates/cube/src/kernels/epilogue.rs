//! A linear layer's epilogue in one launch: `y = act(y + bias) + residual` over the output of
//! Burn's matmul, in place, where the generic path makes a launch for each of the three.
//!
//! This is how a linear layer runs where our fused GEMM does not: in f16 and bf16, where Burn's
//! matmul runs on tensor cores, and in f32 where Burn's matmul is exact and measured faster than
//! ours. Each unit takes one value; the arithmetic is f32 in every dtype, so in half precision
//! the bias, the activation and the residual add round once, at the store. Where a LayerNorm
//! alone reads the layer's output, the layer is its product and the norm applies the
//! [`Epilogue`] (`norm`'s kernel).

use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use switchyard_core::Act;

use super::gemm::{activate, code};
use super::matmul::Matmul;

/// Units per cube.
pub(crate) const UNITS: usize = 256;

/// `y[i] = act(y[i] + bias[i % n]) + residual[i]` for the `len` values of `y`, rows `n` wide;
/// `bias` and `residual` are read only when their flags say so.
#[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
#[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
#[allow(clippy::too_many_arguments)]
fn epilogue_kernel<F: Float>(
    y: &mut [F],
    bias: &[F],
    residual: &[F],
    len: u32,
    n: u32,
    #[comptime] act: u32,
    #[comptime] has_bias: bool,
    #[comptime] has_residual: bool,
    #[define(F)] _dtype: ElemType,
) {
    let cube = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize;
    let i = cube * UNITS + UNIT_POS as usize;
    if i < len as usize {
        let mut v = f32::cast_from(y[i]);
        if has_bias {
            v += f32::cast_from(bias[i % n as usize]);
        }
        v = activate(v, act);
        if has_residual {
            v += f32::cast_from(residual[i]);
        }
        y[i] = F::cast_from(v);
    }
}

/// The grid for `len` values, [`UNITS`] a cube, folded into a second dimension past the 65535
/// cubes a dimension holds: `None` past what one launch holds (or past `u32` values).
pub(crate) fn grid(len: usize) -> Option<(u32, u32)> {
    let cubes = len.div_ceil(UNITS);
    let x = cubes.clamp(1, super::MAX_CUBES);
    let y = cubes.div_ceil(x).max(1);
    (y <= super::MAX_CUBES && u32::try_from(len).is_ok()).then_some((x as u32, y as u32))
}

/// Whether one launch covers an `[m, n]` output.
pub(crate) fn launchable(m: usize, n: usize) -> bool {
    m.checked_mul(n).is_some_and(|len| grid(len).is_some())
}

/// A linear layer's epilogue, `y = act(y + bias) + residual` over its product `y`: `bias`
/// `[1, n]`, `residual` shaped like `y`, each in `y`'s dtype.
#[derive(Clone, Debug)]
pub(crate) struct Epilogue {
    /// The bias, if any.
    pub(crate) bias: Option<CubeTensor>,
    /// The activation, after the bias.
    pub(crate) act: Act,
    /// The residual, added after the activation, if any.
    pub(crate) residual: Option<CubeTensor>,
}

impl Default for Epilogue {
    /// Nothing to apply.
    fn default() -> Self {
        Epilogue { bias: None, act: Act::Identity, residual: None }
    }
}

impl Epilogue {
    /// Whether it changes nothing.
    pub(crate) fn is_nothing(&self) -> bool {
        self.bias.is_none() && self.residual.is_none() && self.act == Act::Identity
    }

    /// Applied to `y` (plain rows, `[m, n]`) in place, in one launch (none where it changes
    /// nothing).
    pub(crate) fn apply(self, y: CubeTensor) -> CubeTensor {
        if self.is_nothing() {
            return y;
        }
        let [m, n] = super::dims(&y);
        let Epilogue { bias, act, residual } = self;
        let (has_bias, has_residual) = (bias.is_some(), residual.is_some());
        // An absent operand is bound as `y`, which the kernel never reads in its place.
        let bias = bias.map_or_else(|| y.clone(), super::contiguous);
        let residual = residual.map_or_else(|| y.clone(), super::contiguous);
        let (gx, gy) = grid(m * n).expect("checked by launchable");
        let dtype = burn_backend::cubecl::dtype_to_storage_type(y.dtype);
        epilogue_kernel::launch(
            &y.client.clone(),
            CubeCount::Static(gx, gy, 1),
            CubeDim::new_1d(UNITS as u32),
            y.clone().into_buffer_arg(),
            bias.into_buffer_arg(),
            residual.into_buffer_arg(),
            (m * n) as u32,
            n as u32,
            code(act),
            has_bias,
            has_residual,
            dtype,
        );
        y
    }
}

/// `x . wt` by `matmul`, as plain rows: an error where `matmul` cannot run here.
pub(crate) fn product(
    x: CubeTensor,
    wt: &CubeTensor,
    matmul: Matmul,
) -> Result<CubeTensor, String> {
    Ok(super::contiguous(super::matmul::product(x, wt, matmul)?))
}

/// The kernel's variants as CUDA C++ for [`super::cuda_check`]: every activation with a bias in
/// f16, and in each dtype a bias and GELU, and a bias and residual (in bf16 on GPUs other than the
/// H200).
#[cfg(all(test, feature = "wgpu"))]
pub(super) fn cuda_variants(sm: &super::cuda_check::Sm) -> Vec<super::cuda_check::Variant> {
    use cubecl::ir::FloatKind::{BF16, F16, F32};
    let build = |dtype, act: Act, residual| {
        let kernel = epilogue_kernel::create_dummy_kernel(
            sm.props(),
            sm.target(),
            CubeCount::Static(4, 1, 1),
            CubeDim::new_1d(UNITS as u32),
            sm.buffer(4 * UNITS),
            sm.buffer(64),
            sm.buffer(4 * UNITS),
            4 * UNITS as u32,
            64,
            code(act),
            true,
            residual,
            ElemType::Float(dtype),
        );
        let name =
            format!("epilogue {dtype:?} {act:?}{}", if residual { " + residual" } else { "" });
        sm.variant(name, kernel)
    };
    let mut all = Vec::new();
    if !sm.every() {
        return vec![build(BF16, Act::Gelu, false), build(BF16, Act::Identity, true)];
    }
    for act in Act::ALL {
        all.push(build(F16, act, false));
    }
    for dtype in [F32, BF16] {
        all.push(build(dtype, Act::Gelu, false));
    }
    for dtype in [F32, F16, BF16] {
        all.push(build(dtype, Act::Identity, true));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_covers_every_value_and_refuses_what_no_launch_holds() {
        assert_eq!(grid(1), Some((1, 1)));
        assert_eq!(grid(256 * 65_535), Some((65_535, 1)));
        assert_eq!(grid(256 * 65_535 + 1), Some((65_535, 2)));
        assert!(launchable(30_000, 1536));
        assert!(!launchable(1 << 20, 1 << 13), "2^33 values exceed u32 indices");
        assert!(!launchable(usize::MAX, 2));
    }
}
