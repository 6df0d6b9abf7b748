//! Ragged self-attention in 16 x 16 tiles, for half precision: the score and value products on
//! tensor cores (cooperative matrices) where the device has them for the dtype, else the same
//! tiles with scalar products.
//!
//! A cube is one plane of 32 units and takes a block of up to [`ROWS`] query rows of one sequence
//! and one head, as the row kernel ([`super::attention`]) takes 32. For each tile of 16 keys of the
//! sequence, staged with their values in shared memory (keys past the sequence's end as zeros):
//! the plane computes the 16 x 16 scores `Q . K^T` in f32 (`head_dim / 16` products of 16 x 16
//! tiles), the block's first 16 units each take one row of them through the online softmax
//! (FlashAttention's running max and sum, in f32) and write its weights in the dtype, and the
//! plane rescales its f32 accumulators `O` (shared, 16 x `head_dim`) and adds `P . V`. The
//! products' inputs are the dtype's values and their sums are f32, on tensor cores as in the
//! scalar tiles, so the two differ only in the order of the sums.
//!
//! With a sliding window, a block walks only the keys within the window of one of its query
//! rows, and each row's softmax leaves out the keys beyond its own window.
//!
//! What it does not take (the row kernel does): f32 (tensor cores would round it to TF32, and the
//! f32 tiles need more shared memory than wgpu guarantees), a query per sequence, heads not a
//! multiple of 16 wide, and more shared memory than the device has.

use burn_cubecl::tensor::CubeTensor;
use cubecl::cmma::{self, MatrixIdent, MatrixLayout};
use cubecl::prelude::*;
use switchyard_burn::RunCx;

use super::attention::{QkvBias, window_end, window_start, with_bias, within};

/// Query rows per cube, keys per tile, and the edge of each product's tiles.
pub(crate) const ROWS: usize = 16;

/// Units per cube: one plane of 32, as cooperative matrix products need.
const UNITS: usize = 32;

/// The score of a key past the sequence's end, and the running maximum before any key.
const MASKED: f32 = -3.0e38;

/// Alignment of the shared tiles the cooperative matrix loads and stores read, in bytes.
const ALIGN: usize = 32;

/// Shared memory a cube takes for heads `head_dim` wide with `elem_bytes` per value: the query,
/// key and value tiles and the weights in the dtype, the scores and accumulators in f32, and a
/// factor per row.
pub(crate) fn shared_bytes(head_dim: usize, elem_bytes: usize) -> usize {
    3 * ROWS * head_dim * elem_bytes
        + ROWS * ROWS * elem_bytes
        + (ROWS * ROWS + ROWS * head_dim + ROWS) * 4
        + 4 * ALIGN
}

/// The attention of one block of query rows over its sequence, in tiles (see the module docs);
/// with `windowed`, each query row sees only the keys at most `window` rows from it. Rows are
/// `[tokens, heads * head_dim]` of `F`, `q`, `k` and `v` each `*_stride` apart.
#[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
#[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
#[allow(clippy::too_many_arguments)]
fn tiled_attention<F: Float>(
    q: &[F],
    k: &[F],
    v: &[F],
    bias: &[F],
    out: &mut [F],
    cu: &[u32],
    block_seq: &[u32],
    block_first: &[u32],
    q_stride: u32,
    k_stride: u32,
    v_stride: u32,
    q_bias: u32,
    k_bias: u32,
    v_bias: u32,
    heads: u32,
    scale: f32,
    window: u32,
    #[comptime] head_dim: usize,
    #[comptime] tensor_cores: bool,
    #[comptime] windowed: bool,
    #[comptime] has_bias: bool,
    #[define(F)] _dtype: ElemType,
) {
    let block = CUBE_POS_X as usize;
    let col = CUBE_POS_Y as usize * head_dim;
    let seq = block_seq[block] as usize;
    let end = cu[seq + 1] as usize;
    let first = block_first[block] as usize;
    // The keys some query row of the block can see: the sequence, or with a window, the rows
    // within it of the block's first and last query rows.
    let mut lo = cu[seq] as usize;
    let mut hi = end;
    if windowed {
        lo = window_start(lo, first, window);
        hi = window_end(end, min(first + ROWS, end) - 1, window);
    }
    let unit = UNIT_POS as usize;
    let width = heads as usize * head_dim;
    let (q_stride, k_stride, v_stride) = (q_stride as usize, k_stride as usize, v_stride as usize);

    let mut qs = Shared::<[F]>::new_aligned_slice(ROWS * head_dim, ALIGN);
    let mut ks = Shared::<[F]>::new_aligned_slice(ROWS * head_dim, ALIGN);
    let mut vs = Shared::<[F]>::new_aligned_slice(ROWS * head_dim, ALIGN);
    let mut ps = Shared::<[F]>::new_aligned_slice(ROWS * ROWS, ALIGN);
    let mut ss = Shared::<[f32]>::new_aligned_slice(ROWS * ROWS, ALIGN);
    let mut os = Shared::<[f32]>::new_aligned_slice(ROWS * head_dim, ALIGN);
    let mut rows = Shared::<[f32]>::new_slice(ROWS);

    // The block's queries (rows past the sequence's end as zeros) and zeroed accumulators.
    #[unroll]
    for s in 0..comptime!(ROWS * head_dim / UNITS) {
        let e = unit + s * UNITS;
        let row = first + e / head_dim;
        let mut x = F::from_int(0);
        if row < end {
            x = q[row * q_stride + col + e % head_dim];
            if has_bias {
                x = F::cast_from(with_bias(x, bias, q_bias as usize + col + e % head_dim, true));
            }
        }
        qs[e] = x;
        os[e] = 0.0;
    }

    // Unit r < ROWS owns query row r's running max and sum.
    let masked = f32::new(MASKED);
    let mut best = masked;
    let mut sum = 0.0f32;
    let mut t0 = lo;
    while t0 < hi {
        #[unroll]
        for s in 0..comptime!(ROWS * head_dim / UNITS) {
            let e = unit + s * UNITS;
            let j = t0 + e / head_dim;
            let d = e % head_dim;
            let mut kx = F::from_int(0);
            let mut vx = F::from_int(0);
            if j < hi {
                kx = k[j * k_stride + col + d];
                vx = v[j * v_stride + col + d];
                if has_bias {
                    kx = F::cast_from(with_bias(kx, bias, k_bias as usize + col + d, true));
                    vx = F::cast_from(with_bias(vx, bias, v_bias as usize + col + d, true));
                }
            }
            ks[e] = kx;
            vs[e] = vx;
        }
        sync_cube();
        scores::<F>(&qs, &ks, &mut ss, head_dim, tensor_cores);
        sync_cube();
        if unit < ROWS {
            let at = unit * ROWS;
            let row = first + unit;
            let mut top = best;
            #[unroll]
            for j in 0..ROWS {
                top = max(
                    top,
                    select(seen(row, t0 + j, hi, window, windowed), ss[at + j] * scale, masked),
                );
            }
            let fix = f32::exp(best - top);
            let mut add = 0.0f32;
            #[unroll]
            for j in 0..ROWS {
                let keep = seen(row, t0 + j, hi, window, windowed);
                let p = select(keep, f32::exp(ss[at + j] * scale - top), 0.0);
                add += p;
                ps[at + j] = F::cast_from(p);
            }
            sum = sum * fix + add;
            best = top;
            rows[unit] = fix;
        }
        sync_cube();
        #[unroll]
        for s in 0..comptime!(ROWS * head_dim / UNITS) {
            let e = unit + s * UNITS;
            os[e] *= rows[e / head_dim];
        }
        sync_cube();
        values::<F>(&ps, &vs, &mut os, head_dim, tensor_cores);
        sync_cube();
        t0 += ROWS;
    }

    // Every query row in the sequence sees itself, so its sum is at least 1.
    if unit < ROWS {
        rows[unit] = sum;
    }
    sync_cube();
    #[unroll]
    for s in 0..comptime!(ROWS * head_dim / UNITS) {
        let e = unit + s * UNITS;
        let r = e / head_dim;
        let row = first + r;
        if row < end {
            out[row * width + col + e % head_dim] = F::cast_from(os[e] / rows[r]);
        }
    }
}

/// Whether query row `row` sees key row `key`: a key of the block's range (below `hi`), and with
/// `windowed`, at most `window` rows from the query.
#[cube]
fn seen(row: usize, key: usize, hi: usize, window: u32, #[comptime] windowed: bool) -> bool {
    let mut near = true;
    if windowed {
        near = within(row, key, window);
    }
    key < hi && near
}

/// A 16 x 16 operand (`ident`: `A`, `B` or the accumulator) of a cooperative matrix product,
/// read from `tile` as `layout` with rows (or columns) `stride` apart.
#[cube]
fn fragment<E: CubePrimitive>(
    #[comptime] ident: MatrixIdent,
    layout: MatrixLayout,
    tile: &[E],
    stride: u32,
) -> cmma::Matrix<E> {
    cmma::Matrix::<E>::from_slice(ident, ROWS, ROWS, ROWS, layout, tile, stride)
}

/// `ss = qs . ks^T`: 16 x 16 f32 scores of the block's query rows against a tile of keys, both
/// `[16, head_dim]` of `F`.
#[cube]
fn scores<F: Float>(
    qs: &[F],
    ks: &[F],
    ss: &mut [f32],
    #[comptime] head_dim: usize,
    #[comptime] tensor_cores: bool,
) {
    if tensor_cores {
        let (all, stride) = (ROWS * head_dim, head_dim as u32);
        let acc = cmma::Matrix::<f32>::from_value(
            MatrixIdent::Accumulator,
            ROWS,
            ROWS,
            ROWS,
            MatrixLayout::Undefined,
            0.0,
        );
        #[unroll]
        for c in 0..comptime!(head_dim / ROWS) {
            // Columns c*16.. of the queries, and of the keys read as K^T (column-major).
            let from = c * ROWS;
            let a = fragment::<F>(MatrixIdent::A, MatrixLayout::RowMajor, &qs[from..all], stride);
            let b = fragment::<F>(MatrixIdent::B, MatrixLayout::ColMajor, &ks[from..all], stride);
            cmma::execute(&a, &b, &acc, &acc);
        }
        cmma::store(ss, &acc, ROWS as u32, MatrixLayout::RowMajor);
    } else {
        #[unroll]
        for i in 0..comptime!(ROWS * ROWS / UNITS) {
            let e = UNIT_POS as usize + i * UNITS;
            let (qa, ka) = ((e / ROWS) * head_dim, (e % ROWS) * head_dim);
            let mut dot = 0.0f32;
            #[unroll]
            for d in 0..head_dim {
                dot += f32::cast_from(qs[qa + d]) * f32::cast_from(ks[ka + d]);
            }
            ss[e] = dot;
        }
    }
}

/// `os += ps . vs`: the block's f32 accumulators `[16, head_dim]` plus the 16 x 16 weights times
/// a tile of values `[16, head_dim]`, both of `F`.
#[cube]
fn values<F: Float>(
    ps: &[F],
    vs: &[F],
    os: &mut [f32],
    #[comptime] head_dim: usize,
    #[comptime] tensor_cores: bool,
) {
    if tensor_cores {
        let (all, stride) = (ROWS * head_dim, head_dim as u32);
        let row_major = MatrixLayout::RowMajor;
        let a = fragment::<F>(MatrixIdent::A, row_major, &ps[0..ROWS * ROWS], ROWS as u32);
        #[unroll]
        for c in 0..comptime!(head_dim / ROWS) {
            // Columns c*16.. of the values, and of the accumulators, read and written in place.
            let from = c * ROWS;
            let b = fragment::<F>(MatrixIdent::B, row_major, &vs[from..all], stride);
            let acc = fragment::<f32>(MatrixIdent::Accumulator, row_major, &os[from..all], stride);
            cmma::execute(&a, &b, &acc, &acc);
            cmma::store(&mut os[from..all], &acc, stride, row_major);
        }
    } else {
        #[unroll]
        for i in 0..comptime!(ROWS * head_dim / UNITS) {
            let e = UNIT_POS as usize + i * UNITS;
            let (pa, d) = ((e / head_dim) * ROWS, e % head_dim);
            let mut acc = os[e];
            #[unroll]
            for j in 0..ROWS {
                acc += f32::cast_from(ps[pa + j]) * f32::cast_from(vs[j * head_dim + d]);
            }
            os[e] = acc;
        }
    }
}

/// Whether the device computes 16 x 16 x 16 products of `dtype` into f32 on cooperative
/// matrices, in planes of 32 units.
pub(crate) fn tensor_cores(client: &Client, dtype: ElemType) -> bool {
    tensor_cores_in(client.properties(), dtype)
}

/// [`tensor_cores`] for a device of properties `props`.
pub(crate) fn tensor_cores_in(props: &DeviceProperties, dtype: ElemType) -> bool {
    use cubecl::ir::FloatKind;
    let f32 = ElemType::Float(FloatKind::F32);
    let config = cubecl::ir::features::MmaConfig {
        a_type: dtype,
        b_type: dtype,
        cd_type: f32,
        m: ROWS as u32,
        n: ROWS as u32,
        k: ROWS as u32,
    };
    props.hardware.plane_size_min == UNITS as u32
        && props.hardware.plane_size_max == UNITS as u32
        && props.features.matmul.cmma.contains(&config)
}

/// Whether the tiled kernel takes attention over `q`'s rows in heads `head_dim` wide, for the
/// run's batch: f16 or bf16, heads a multiple of 16 wide, the tiles within the device's shared
/// memory, and the batch within one launch.
pub(crate) fn takes(
    q: &CubeTensor,
    head_dim: usize,
    cx: &RunCx<'_, burn_cubecl::CubeBackend>,
) -> bool {
    use burn_backend::DType::{BF16, F16};
    let shared = q.client.properties().hardware.max_shared_memory_size;
    matches!(q.dtype, F16 | BF16)
        && head_dim.is_multiple_of(ROWS)
        && shared_bytes(head_dim, 2) <= shared
        && super::attention::launchable(cx.sizes(), ROWS)
}

/// Self-attention of every sequence of the run's batch over `[tokens, heads * head_dim]` rows of
/// f16 or bf16, in tiles; each query row its own token's.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    heads: usize,
    head_dim: usize,
    scale: f32,
    window: Option<usize>,
    bias: Option<&QkvBias>,
    cx: &RunCx<'_, burn_cubecl::CubeBackend>,
) -> CubeTensor {
    let super::attention::Launch {
        qkv: [(q, q_stride), (k, k_stride), (v, v_stride)],
        bias,
        bias_at,
        has_bias,
        out,
        tables,
        client,
        dtype,
    } = super::attention::Launch::new([q, k, v], bias, cx, ROWS, false);
    let (cubes, cu, block_seq, block_first) = tables.args();
    tiled_attention::launch(
        &client,
        CubeCount::Static(cubes, heads as u32, 1),
        CubeDim::new_1d(UNITS as u32),
        q.into_buffer_arg(),
        k.into_buffer_arg(),
        v.into_buffer_arg(),
        bias.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        cu,
        block_seq,
        block_first,
        q_stride,
        k_stride,
        v_stride,
        bias_at[0],
        bias_at[1],
        bias_at[2],
        heads as u32,
        scale,
        super::attention::window_arg(window),
        head_dim,
        tensor_cores(&client, dtype),
        window.is_some(),
        has_bias,
        dtype,
    );
    out
}

/// The tiled kernel's CUDA C++ for heads `head_dim` wide in `dtype`, with the tensor-core path or
/// not and a window or not, as [`super::cuda_check`] builds it for an H200.
#[cfg(all(test, feature = "wgpu"))]
fn cuda_source(
    sm: &super::cuda_check::Sm,
    dtype: ElemType,
    head_dim: usize,
    tensor_cores: bool,
    windowed: bool,
    bias: bool,
) -> String {
    let width = 2 * head_dim;
    let kernel = tiled_attention::create_dummy_kernel(
        sm.props(),
        sm.target(),
        CubeCount::Static(1, 2, 1),
        CubeDim::new_1d(UNITS as u32),
        sm.buffer(64 * width),
        sm.buffer(64 * width),
        sm.buffer(64 * width),
        sm.buffer(3 * width),
        sm.buffer(64 * width),
        sm.buffer(2),
        sm.buffer(1),
        sm.buffer(1),
        width as u32,
        width as u32,
        width as u32,
        0,
        width as u32,
        2 * width as u32,
        2,
        0.125,
        8,
        head_dim,
        tensor_cores,
        windowed,
        bias,
        dtype,
    );
    sm.source(kernel)
}

/// The kernel's variants as CUDA C++ for [`super::cuda_check`]: f16 and bf16 with heads 32 to 128
/// wide (64 on GPUs other than the H200) on tensor cores where the GPU has them for the dtype, a
/// window in f16, and f16 in scalar tiles.
#[cfg(all(test, feature = "wgpu"))]
pub(super) fn cuda_variants(sm: &super::cuda_check::Sm) -> Vec<super::cuda_check::Variant> {
    use super::cuda_check::Variant;
    use cubecl::ir::FloatKind::{BF16, F16};
    // Tensor cores where the GPU has them for the dtype, as the kernel's launch asks.
    let build = |dtype, head_dim: usize, tensor_cores: bool, windowed, bias| {
        let tensor_cores = tensor_cores && sm.tensor_cores(ElemType::Float(dtype));
        let how = if tensor_cores { "tensor cores" } else { "scalar tiles" };
        let window = if windowed { ", windowed" } else { "" };
        let bias_ = if bias { ", adding the projections' bias" } else { "" };
        let elem = ElemType::Float(dtype);
        Variant {
            name: format!("tiled attention {dtype:?} heads {head_dim}, {how}{window}{bias_}"),
            source: cuda_source(sm, elem, head_dim, tensor_cores, windowed, bias),
            may_spill: false,
        }
    };
    let mut all = Vec::new();
    let widths: &[usize] = if sm.every() { &[32, 64, 128] } else { &[64] };
    for dtype in [F16, BF16] {
        for &head_dim in widths {
            all.push(build(dtype, head_dim, true, false, false));
        }
    }
    all.push(build(F16, 64, true, true, false));
    all.push(build(F16, 64, true, false, true));
    if sm.every() {
        all.push(build(F16, 64, false, false, false));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CUDA C++ source of the tiled kernel on an H100/H200-class GPU (compute capability
    /// 9.0, as CubeCL's CUDA runtime describes one), which has the tensor-core shape `dtype`
    /// needs.
    #[cfg(feature = "wgpu")]
    fn cuda_source(dtype: ElemType, head_dim: usize, tensor_cores: bool) -> String {
        let sm = super::super::cuda_check::Sm::new(90);
        assert!(sm.tensor_cores(dtype), "sm_90 has {dtype:?} tensor cores");
        super::cuda_source(&sm, dtype, head_dim, tensor_cores, false, false)
    }

    /// CubeCL expands the tensor-core path only for a device with cooperative matrices, which
    /// CI lacks: compiled here to CUDA for such a device, it makes `head_dim / 16` products a
    /// key tile for the scores and as many for the values, the values' reading and writing the
    /// f32 accumulators in place; without tensor cores, none.
    #[cfg(feature = "wgpu")]
    #[test]
    fn the_tensor_core_path_compiles_to_cuda_matrix_products_in_f16_and_bf16() {
        use cubecl::ir::FloatKind;
        for (kind, header) in [(FloatKind::F16, "cuda_fp16.h"), (FloatKind::BF16, "cuda_bf16.h")] {
            for head_dim in [32, 64] {
                let src = cuda_source(ElemType::Float(kind), head_dim, true);
                let count = |what: &str| src.matches(what).count();
                assert!(src.contains("#include <mma.h>") && src.contains(header), "{kind:?}");
                assert_eq!(count("wmma::mma_sync("), 2 * head_dim / 16, "{kind:?} {head_dim}");
                let acc = "reinterpret_cast<float *>";
                let loads =
                    src.lines().filter(|l| l.contains("load_matrix_sync") && l.contains(acc));
                assert_eq!(loads.count(), head_dim / 16, "the accumulators, read in place");
                // The scores' store, then each accumulator tile's.
                assert_eq!(count("wmma::store_matrix_sync("), 1 + head_dim / 16);
            }
        }
        let scalar = cuda_source(ElemType::Float(FloatKind::F16), 64, false);
        assert!(!scalar.contains("wmma"), "scalar tiles use no matrix instructions");
    }

    #[test]
    fn a_cubes_tiles_fit_the_shared_memory_wgpu_guarantees_up_to_heads_of_64_in_half_precision() {
        assert!(shared_bytes(64, 2) <= 16 * 1024, "{}", shared_bytes(64, 2));
        assert!(shared_bytes(128, 2) > 16 * 1024);
        assert!(shared_bytes(256, 2) <= 48 * 1024, "within what CUDA gives a cube by default");
    }
}
