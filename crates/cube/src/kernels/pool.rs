//! Pooling each sequence's token rows into one row, in one launch for every mode, where the
//! generic path makes several: a mean is a buffer of zeros, a scatter-add, an upload of the
//! reciprocal lengths and a product (the sums in the rows' dtype; a sum stops before the
//! upload); a max is one reduction per sequence and a concatenation (SPLADE's max over a
//! 30522-wide vocabulary: a launch per sequence); the first or last row an upload of indices
//! and a gather.
//!
//! A cube of [`UNITS`] units takes [`UNITS`] consecutive columns of one sequence, and each unit
//! walks its column down the sequence's rows, reading them in the dtype of the rows and summing
//! (or comparing) in f32, so half precision rounds only the result. The sequence offsets are
//! the batch's `cu`, on the device once a run for every kernel that reads them.

use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use switchyard_burn::RunCx;
use switchyard_core::{Bucket, PoolMode};

/// Units per cube: columns per cube.
const UNITS: usize = 64;

/// The longest sequence a unit walks: Mesa's llvmpipe ends any shader loop after 65535
/// iterations, silently (see the attention kernel), and a unit's loop takes one a row.
const MAX_ROWS: usize = 65_535;

/// The kernel's modes, as a comptime number.
const MEAN: u32 = 0;
const MAX: u32 = 1;
const FIRST: u32 = 2;
const LAST: u32 = 3;
const SUM: u32 = 4;

/// `out[s] = pool(x[cu[s]..cu[s + 1]])` per column, for every sequence `s`: the mean, the max,
/// the first row, the last or the sum, by `mode`. Sequences are never empty (`Batch::check`).
#[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
#[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
fn pool_kernel<F: Float>(
    x: &[F],
    out: &mut [F],
    cu: &[u32],
    width: u32,
    #[comptime] mode: u32,
    #[define(F)] _dtype: ElemType,
) {
    let col = (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X) as usize;
    let seq = CUBE_POS_Y as usize;
    let w = width as usize;
    // No barrier below, so a unit past the last column may leave alone.
    if col >= w {
        terminate!();
    }
    let start = cu[seq] as usize;
    let end = cu[seq + 1] as usize;
    let mut r = start;
    if comptime!(mode == LAST) {
        r = end - 1;
    }
    let mut acc = f32::cast_from(x[r * w + col]);
    if comptime!(mode == MEAN || mode == MAX || mode == SUM) {
        r += 1;
        while r < end {
            let v = f32::cast_from(x[r * w + col]);
            if comptime!(mode == MAX) {
                acc = f32::max(acc, v);
            } else {
                acc += v;
            }
            r += 1;
        }
        if comptime!(mode == MEAN) {
            acc /= f32::cast_from(end - start);
        }
    }
    out[seq * w + col] = F::cast_from(acc);
}

/// The grid for `seqs` sequences of `width` columns: `None` where a dimension would need more
/// than the 65535 cubes it holds.
fn grid(seqs: usize, width: usize) -> Option<(u32, u32)> {
    let x = width.div_ceil(UNITS).max(1);
    (x <= super::MAX_CUBES && seqs <= super::MAX_CUBES).then_some((x as u32, seqs.max(1) as u32))
}

/// Whether one launch pools every sequence of the run's batch over `width` columns.
pub(crate) fn launchable(cx: &RunCx<'_, CubeBackend>, width: usize) -> bool {
    fits(cx.sizes(), width, || {
        let b = cx.batch();
        (0..b.seqs()).map(|s| b.seq(s).len()).max().unwrap_or(0)
    })
}

/// Whether one launch pools a batch of `sizes` over `width` columns, its `longest` sequence
/// asked for only where its tokens could make one too long for a unit's loop.
fn fits(sizes: Bucket, width: usize, longest: impl FnOnce() -> usize) -> bool {
    grid(sizes.seqs, width).is_some() && (sizes.tokens <= MAX_ROWS || longest() <= MAX_ROWS)
}

/// Each sequence of the run's batch pooled by `mode` from `x: [tokens, width]` (f32, f16 or
/// bf16), as `[seqs, width]` in `x`'s dtype.
pub(crate) fn run(x: CubeTensor, mode: PoolMode, cx: &RunCx<'_, CubeBackend>) -> CubeTensor {
    let x = super::contiguous(x);
    let [_, width] = super::dims(&x);
    let seqs = cx.sizes().seqs;
    let out = super::empty(&x, [seqs, width]);
    let client = x.client.clone();
    let dtype = burn_backend::cubecl::dtype_to_storage_type(x.dtype);
    let (gx, gy) = grid(seqs, width).expect("checked by launchable");
    let cu = super::offsets(cx, &client);
    let mode = match mode {
        PoolMode::Mean => MEAN,
        PoolMode::Max => MAX,
        PoolMode::Cls => FIRST,
        PoolMode::Last => LAST,
        PoolMode::Sum => SUM,
    };
    pool_kernel::launch(
        &client,
        CubeCount::Static(gx, gy, 1),
        CubeDim::new_1d(UNITS as u32),
        x.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        super::u32s_arg(&cu),
        width as u32,
        mode,
        dtype,
    );
    out
}

/// The kernel's variants as CUDA C++ for [`super::cuda_check`]: every mode in f16, and the mean in
/// f32 and bf16 (the mean in bf16 on GPUs other than the H200).
#[cfg(all(test, feature = "wgpu"))]
pub(super) fn cuda_variants(sm: &super::cuda_check::Sm) -> Vec<super::cuda_check::Variant> {
    use cubecl::ir::FloatKind::{BF16, F16, F32};
    let build = |dtype, mode: u32| {
        let kernel = pool_kernel::create_dummy_kernel(
            sm.props(),
            sm.target(),
            CubeCount::Static(6, 2, 1),
            CubeDim::new_1d(UNITS as u32),
            sm.buffer(64 * 384),
            sm.buffer(2 * 384),
            sm.buffer(3),
            384,
            mode,
            ElemType::Float(dtype),
        );
        sm.variant(format!("pooling {dtype:?} mode {mode}"), kernel)
    };
    if !sm.every() {
        return vec![build(BF16, MEAN)];
    }
    let mut all: Vec<_> =
        [MEAN, MAX, FIRST, LAST, SUM].into_iter().map(|m| build(F16, m)).collect();
    all.push(build(F32, MEAN));
    all.push(build(BF16, MEAN));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_covers_every_column_of_every_sequence_and_refuses_what_no_launch_holds() {
        assert_eq!(grid(3, 1), Some((1, 3)));
        assert_eq!(grid(3, UNITS), Some((1, 3)));
        assert_eq!(grid(3, UNITS + 1), Some((2, 3)));
        // SPLADE's vocabulary.
        assert_eq!(grid(256, 30_522), Some((477, 256)));
        assert_eq!(grid(65_535, 8), Some((1, 65_535)));
        assert_eq!(grid(65_536, 8), None);
        assert_eq!(grid(1, 65_535 * UNITS), Some((65_535, 1)));
        assert_eq!(grid(1, 65_535 * UNITS + 1), None);
    }

    #[test]
    fn a_sequence_longer_than_a_shader_loop_may_run_is_not_launched() {
        let sizes = |tokens| Bucket::new(tokens, 2, 0);
        let unasked = || -> usize { panic!("the lengths are not read") };
        assert!(fits(sizes(MAX_ROWS), 384, unasked), "no sequence can be too long");
        assert!(fits(sizes(MAX_ROWS + 3), 384, || MAX_ROWS));
        assert!(!fits(sizes(MAX_ROWS + 3), 384, || MAX_ROWS + 1));
        assert!(!fits(Bucket::new(8, 65_536, 0), 384, unasked), "too many sequences");
    }
}
