//! LayerNorm in one kernel: `(x - mean) / sqrt(var + eps) * gamma + beta` for each row, where
//! Burn's generic `layer_norm` makes nine passes (two means, a subtraction, a product, a square
//! root, a division, a scale, a shift and a scalar add), each a launch; and L2 normalisation,
//! `x / max(||x||, eps)`, in one kernel where the generic path makes five.
//!
//! A cube of [`UNITS`] units takes one row: each unit sums a strided share of it, the cube adds
//! the shares in shared memory, and the variance is a second pass over the centred values (two
//! passes, not `E[x^2] - mean^2`, which cancels badly when the mean is large). Rows may be f32,
//! f16 or bf16; the statistics and the arithmetic are f32 in every dtype, so half precision
//! rounds only the inputs and the output, where Burn's ops would also reduce in it.
//!
//! Where a linear layer's output is read by a LayerNorm alone, the layer leaves its epilogue
//! ([`Epilogue`]: bias, activation, residual) to the norm, which applies it to each value as it
//! reads it: a residual block's add and norm in one launch, the sum never written out.

use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use super::U32s;
use super::epilogue::Epilogue;
use super::gemm::{activate, code};
use switchyard_core::Act;

/// Units per cube (per row).
const UNITS: usize = 128;

/// The sum over the cube of each unit's `v`, in every unit.
#[cube]
fn cube_sum(partial: &mut Shared<[f32]>, v: f32) -> f32 {
    let unit = UNIT_POS as usize;
    partial[unit] = v;
    sync_cube();
    // A runtime value: a comptime one would be folded, and the loop with it.
    let mut stride = comptime![UNITS / 2].runtime();
    while stride > 0 {
        if unit < stride {
            let both = partial[unit] + partial[unit + stride];
            partial[unit] = both;
        }
        sync_cube();
        stride /= 2;
    }
    let total = partial[0];
    // Before any unit writes its next share over `partial[0]`.
    sync_cube();
    total
}

/// Element `i` of the row LayerNorm reads: `x[i]`, or where a linear layer's epilogue is left to
/// it (`act(x + bias) + residual`, `x` the layer's product), that applied in f32 and rounded to
/// `F`, as the epilogue's own store would round it. Each operand's row starts at its `*_at`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn input<F: Float>(
    x: &[F],
    bias: &[F],
    residual: &[F],
    x_at: usize,
    bias_at: usize,
    residual_at: usize,
    i: usize,
    #[comptime] act: u32,
    #[comptime] has_bias: bool,
    #[comptime] has_residual: bool,
) -> f32 {
    let mut v = f32::cast_from(x[x_at + i]);
    if has_bias {
        v += f32::cast_from(bias[bias_at + i]);
    }
    v = activate(v, act);
    if has_residual {
        v += f32::cast_from(residual[residual_at + i]);
    }
    if comptime![has_bias || has_residual || act != 0] {
        v = f32::cast_from(F::cast_from(v));
    }
    v
}

/// `out[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta` for each row `r` of `width`;
/// `beta` is read only when `has_beta`. Where a linear layer's epilogue is left to it, `x[r]` is
/// the layer's product and the row normalised is `act(x[r] + bias) + residual[r]`; `bias` and
/// `residual` are read only when their flags say so. Where `gathered` (an encoder's embeddings),
/// the rows are tables' rows: row `r` normalises `x[x_rows[r]] + bias[bias_rows[r]] +
/// residual[residual_rows[r]]` (the token's, its type's and its position's), `act` the identity;
/// the `*_rows` tables are read only then.
#[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
#[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
#[allow(clippy::too_many_arguments)]
fn layer_norm_kernel<F: Float>(
    x: &[F],
    bias: &[F],
    residual: &[F],
    gamma: &[F],
    beta: &[F],
    out: &mut [F],
    x_rows: &[u32],
    bias_rows: &[u32],
    residual_rows: &[u32],
    rows: u32,
    width: u32,
    eps: f32,
    #[comptime] has_beta: bool,
    #[comptime] act: u32,
    #[comptime] has_bias: bool,
    #[comptime] has_residual: bool,
    #[comptime] gathered: bool,
    #[define(F)] _dtype: ElemType,
) {
    // The whole cube leaves together (the grid's last column may overhang the rows), so no
    // unit misses a barrier.
    let row = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize;
    if row >= rows as usize {
        terminate!();
    }
    let w = width as usize;
    let base = row * w;
    // Where the row's operands start.
    let (mut x_at, mut bias_at, mut residual_at) = (base, 0usize, base);
    if gathered {
        x_at = x_rows[row] as usize * w;
        bias_at = bias_rows[row] as usize * w;
        residual_at = residual_rows[row] as usize * w;
    }
    let mut partial = Shared::<[f32]>::new_slice(UNITS);

    let mut sum = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < w {
        sum += input(x, bias, residual, x_at, bias_at, residual_at, i, act, has_bias, has_residual);
        i += UNITS;
    }
    let total = cube_sum(&mut partial, sum);
    let mean = total / f32::cast_from(width);

    let mut squares = 0.0f32;
    i = UNIT_POS as usize;
    while i < w {
        let v =
            input(x, bias, residual, x_at, bias_at, residual_at, i, act, has_bias, has_residual);
        let d = v - mean;
        squares += d * d;
        i += UNITS;
    }
    let total_squares = cube_sum(&mut partial, squares);
    let var = total_squares / f32::cast_from(width);
    let rstd = 1.0f32 / f32::sqrt(var + eps);

    i = UNIT_POS as usize;
    while i < w {
        let v =
            input(x, bias, residual, x_at, bias_at, residual_at, i, act, has_bias, has_residual);
        let mut y = (v - mean) * rstd * f32::cast_from(gamma[i]);
        if has_beta {
            y += f32::cast_from(beta[i]);
        }
        out[base + i] = F::cast_from(y);
        i += UNITS;
    }
}

/// `out[r] = x[r] / max(||x[r]||, eps)` for each row `r` of `width`.
#[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
#[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
fn l2_norm_kernel<F: Float>(
    x: &[F],
    out: &mut [F],
    rows: u32,
    width: u32,
    eps: f32,
    #[define(F)] _dtype: ElemType,
) {
    // As in `layer_norm_kernel`: the whole cube leaves together.
    let row = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize;
    if row >= rows as usize {
        terminate!();
    }
    let w = width as usize;
    let base = row * w;
    let mut partial = Shared::<[f32]>::new_slice(UNITS);

    let mut squares = 0.0f32;
    let mut i = UNIT_POS as usize;
    while i < w {
        let v = f32::cast_from(x[base + i]);
        squares += v * v;
        i += UNITS;
    }
    let total = cube_sum(&mut partial, squares);
    let inv = 1.0f32 / f32::max(f32::sqrt(total), eps);

    i = UNIT_POS as usize;
    while i < w {
        out[base + i] = F::cast_from(f32::cast_from(x[base + i]) * inv);
        i += UNITS;
    }
}

/// The grid for `rows` rows, one cube each, folded into a second dimension past the 65535
/// cubes a dimension holds: `None` past 65535 x 65535 rows.
fn grid(rows: usize) -> Option<(u32, u32)> {
    let x = rows.clamp(1, super::MAX_CUBES);
    let y = rows.div_ceil(x).max(1);
    (y <= super::MAX_CUBES).then_some((x as u32, y as u32))
}

/// Whether one launch covers `rows` rows.
pub(crate) fn launchable(rows: usize) -> bool {
    grid(rows).is_some()
}

/// LayerNorm of each row of `x: [rows, width]` with `gamma` and `beta` (`[width]`), all of one
/// float dtype (the output's); where `before` is given, `x` is a linear layer's product and the
/// rows normalised are its epilogue's (`bias: [1, width]`, `residual` shaped like `x`).
pub(crate) fn run(
    x: CubeTensor,
    gamma: &CubeTensor,
    beta: Option<&CubeTensor>,
    eps: f32,
    before: Option<Epilogue>,
) -> CubeTensor {
    let x = super::contiguous(x);
    let [rows, width] = super::dims(&x);
    let out = super::empty_like(&x);
    let Epilogue { bias, act, residual } = before.unwrap_or_default();
    let operands = Operands { x, bias, residual, act, rows: None };
    launch(operands, gamma, beta, eps, out, [rows, width])
}

/// An encoder's embeddings as a LayerNorm reads them, gathered from their tables: each token's
/// row of the token table, plus its position's and its type's rows where the encoder has those
/// tables. Each table (`[rows, width]`, of one float dtype) comes with each token's row of it.
pub(crate) struct Embeddings {
    /// The token table and each token's id.
    pub(crate) tokens: (CubeTensor, U32s),
    /// The position table and each token's row of it, if any.
    pub(crate) positions: Option<(CubeTensor, U32s)>,
    /// The type table and each token's type, if any.
    pub(crate) types: Option<(CubeTensor, U32s)>,
}

/// LayerNorm of each token's embedding (the sum of its rows of `e`'s tables, in f32, rounded to
/// the dtype once), with `gamma` and `beta`, in one launch: `[tokens, width]`.
pub(crate) fn embeddings(
    e: Embeddings,
    gamma: &CubeTensor,
    beta: Option<&CubeTensor>,
    eps: f32,
) -> CubeTensor {
    let (table, ids) = e.tokens;
    let table = super::contiguous(table);
    let [_, width] = super::dims(&table);
    let out = super::empty(&table, [ids.1, width]);
    let (positions, position_rows) = e.positions.unzip();
    let (types, type_rows) = e.types.unzip();
    // The kernel's `bias` is the type's row, its `residual` the position's; a table absent is
    // unread, and so are its rows, bound as the tokens'.
    let rows = Some([
        ids.clone(),
        type_rows.unwrap_or_else(|| ids.clone()),
        position_rows.unwrap_or_else(|| ids.clone()),
    ]);
    let operands =
        Operands { x: table, bias: types, residual: positions, act: Act::Identity, rows };
    launch(operands, gamma, beta, eps, out, [ids.1, width])
}

/// What a LayerNorm normalises: `act(x + bias) + residual` row by row, or where `rows` is given
/// (each token's row numbers in `x`, `bias` and `residual`), tables' rows.
struct Operands {
    x: CubeTensor,
    bias: Option<CubeTensor>,
    residual: Option<CubeTensor>,
    act: Act,
    rows: Option<[U32s; 3]>,
}

/// Launches `layer_norm_kernel` over `operands` into `out`, `[rows, width]`.
fn launch(
    operands: Operands,
    gamma: &CubeTensor,
    beta: Option<&CubeTensor>,
    eps: f32,
    out: CubeTensor,
    [rows, width]: [usize; 2],
) -> CubeTensor {
    let Operands { x, bias, residual, act, rows: gathered } = operands;
    let client = x.client.clone();
    let dtype = burn_backend::cubecl::dtype_to_storage_type(x.dtype);
    let (gx, gy) = grid(rows).expect("checked by launchable");
    let gamma = super::contiguous(gamma.clone());
    // An absent operand is bound as another, unread.
    let beta_arg = super::contiguous(beta.unwrap_or(&gamma).clone());
    let (has_bias, has_residual) = (bias.is_some(), residual.is_some());
    let bias = super::contiguous(bias.unwrap_or_else(|| gamma.clone()));
    let residual = super::contiguous(residual.unwrap_or_else(|| x.clone()));
    let unread = || gamma.clone().into_buffer_arg();
    let [x_rows, bias_rows, residual_rows] = match &gathered {
        Some(r) => r.each_ref().map(super::u32s_arg),
        None => [unread(), unread(), unread()],
    };
    layer_norm_kernel::launch(
        &client,
        CubeCount::Static(gx, gy, 1),
        CubeDim::new_1d(UNITS as u32),
        x.into_buffer_arg(),
        bias.into_buffer_arg(),
        residual.into_buffer_arg(),
        gamma.clone().into_buffer_arg(),
        beta_arg.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        x_rows,
        bias_rows,
        residual_rows,
        rows as u32,
        width as u32,
        eps,
        beta.is_some(),
        code(act),
        has_bias,
        has_residual,
        gathered.is_some(),
        dtype,
    );
    out
}

/// Each row of `x: [rows, width]` (f32, f16 or bf16) divided by its L2 norm, or by `eps` where
/// the norm is smaller.
pub(crate) fn l2(x: CubeTensor, eps: f32) -> CubeTensor {
    let x = super::contiguous(x);
    let [rows, width] = super::dims(&x);
    let out = super::empty_like(&x);
    let client = x.client.clone();
    let dtype = burn_backend::cubecl::dtype_to_storage_type(x.dtype);
    let (gx, gy) = grid(rows).expect("checked by launchable");
    l2_norm_kernel::launch(
        &client,
        CubeCount::Static(gx, gy, 1),
        CubeDim::new_1d(UNITS as u32),
        x.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        rows as u32,
        width as u32,
        eps,
        dtype,
    );
    out
}

/// The kernel's variants as CUDA C++ for [`super::cuda_check`]: LayerNorm alone and with a residual
/// block's epilogue before it, and the L2 norm, in each dtype (in bf16 on GPUs other than the
/// H200).
#[cfg(all(test, feature = "wgpu"))]
pub(super) fn cuda_variants(sm: &super::cuda_check::Sm) -> Vec<super::cuda_check::Variant> {
    use cubecl::ir::FloatKind::{BF16, F16, F32};
    let mut all = Vec::new();
    let dtypes: &[_] = if sm.every() { &[F32, F16, BF16] } else { &[BF16] };
    for &dtype in dtypes {
        for (bias, residual, gathered) in
            [(false, false, false), (true, true, false), (true, true, true)]
        {
            let kernel = layer_norm_kernel::create_dummy_kernel(
                sm.props(),
                sm.target(),
                CubeCount::Static(4, 1, 1),
                CubeDim::new_1d(UNITS as u32),
                sm.buffer(4 * 384),
                sm.buffer(384),
                sm.buffer(4 * 384),
                sm.buffer(384),
                sm.buffer(384),
                sm.buffer(4 * 384),
                sm.buffer(4),
                sm.buffer(4),
                sm.buffer(4),
                4,
                384,
                1e-12,
                true,
                0,
                bias,
                residual,
                gathered,
                ElemType::Float(dtype),
            );
            let what = match (residual, gathered) {
                (_, true) => "over gathered embeddings",
                (true, false) => "with bias and residual",
                (false, false) => "alone",
            };
            all.push(sm.variant(format!("LayerNorm {dtype:?} {what}"), kernel));
        }
        let kernel = l2_norm_kernel::create_dummy_kernel(
            sm.props(),
            sm.target(),
            CubeCount::Static(4, 1, 1),
            CubeDim::new_1d(UNITS as u32),
            sm.buffer(4 * 384),
            sm.buffer(4 * 384),
            4,
            384,
            1e-12,
            ElemType::Float(dtype),
        );
        all.push(sm.variant(format!("L2 norm {dtype:?}"), kernel));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_covers_every_row_once_and_refuses_what_no_launch_holds() {
        assert_eq!(grid(0), Some((1, 1)));
        assert_eq!(grid(7), Some((7, 1)));
        assert_eq!(grid(65_535), Some((65_535, 1)));
        assert_eq!(grid(65_536), Some((65_535, 2)));
        let (x, y) = grid(1_000_000).unwrap();
        assert!(
            (x as usize * y as usize) >= 1_000_000 && (x as usize * (y as usize - 1)) < 1_000_000
        );
        assert!(launchable(65_535 * 65_535));
        assert!(!launchable(65_535 * 65_535 + 1));
    }
}
