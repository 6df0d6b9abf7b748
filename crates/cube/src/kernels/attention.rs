//! Ragged (varlen) self-attention over `cu` offsets: every sequence at its own length, all of
//! them in one launch, with no padding and no mask tensor.
//!
//! A cube takes a block of up to [`BLOCK`] consecutive query rows of one sequence and one head;
//! each unit owns one query row. Where the queries are one per sequence (its first token's), a
//! cube takes one sequence and one head, and its first unit owns the query; the others only help
//! stage the tiles. The cube walks the keys its block can see (the whole sequence,
//! or the sliding window around the block) in tiles staged through shared memory, and each unit
//! keeps a running max, a running sum and its `head_dim` accumulators (the online softmax of
//! FlashAttention), so scores are never stored. Each softmax step takes a group of keys (one by
//! default): their scores as independent sums, then one rescale of the running sums.
//!
//! Rows may be f32, f16 or bf16 (the kernel is generic over the element): each value is widened
//! to f32 as it is read, and scores, the softmax and the accumulators stay f32 (as
//! FlashAttention's half-precision kernels keep them), so half precision rounds only the inputs
//! and the output.
//!
//! Every loop over `head_dim`, a group or a tile is unrolled, so a unit's only runtime loops are
//! over tiles and groups of keys. Besides keeping the accumulators in registers, this matters on Mesa's
//! llvmpipe, which ends any shader loop after 65535 iterations in all, silently: with
//! rolled loops, a sequence longer than about 32768 / head_dim keys came out wrong there.

use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use switchyard_burn::RunCx;
use switchyard_core::{Batch, Bucket, RelativeBias};

/// Query rows per cube (units per cube).
pub(crate) const BLOCK: usize = 32;

/// Shared memory for one tile (of keys, or of values), in f32s: the two tiles take 16 KiB, the
/// least wgpu guarantees a workgroup.
const TILE_FLOATS: usize = 2048;

/// The widest head the kernel takes: each unit keeps `head_dim` accumulators in registers, and
/// the unrolled loops grow with it. Encoders use 32 to 128; 256 is the widest any checkpoint we
/// know has. From 128 wide, part of a unit's query and accumulators spill to local memory on an
/// H200 (slower but exact: `cuda_check` counts it; 64 wide takes 167 registers, none spilled).
pub(crate) const MAX_HEAD_DIM: usize = 256;

/// The score of a key a query does not see, and the running maximum before any key: finite, so
/// that `exp(MASKED - max)` is 0 and `exp(max - max)` is 1, never NaN.
const MASKED: f32 = -3.0e38;

/// Keys per tile for a head of `head_dim`: as many as fit in [`TILE_FLOATS`], at most one per
/// unit, and never fewer than one.
fn tile_keys(head_dim: usize) -> usize {
    (TILE_FLOATS / head_dim).clamp(1, BLOCK)
}

/// `out[i] = softmax(q[i] . k[j] * scale (+ the position bias) over the keys j of i's sequence
/// (within the window; with `causal`, none after i)) . v`, for each head, whose keys and values
/// are those of key-value head `head / kv_group`. With `has_pos`, the bias of key `j` is
/// `pos[pos_bucket[j + pos_mid - i] * heads + head]`: `pos` the `[buckets, heads]` table,
/// `pos_bucket` the bucket of each relative position from `-pos_mid` on. Rows are
/// `[tokens, heads * head_dim]` of `F` (keys and values `heads / kv_group` heads wide; with
/// `per_seq`, `q` and `out` are `[seqs, heads * head_dim]`, each sequence's row its first
/// token's); arithmetic is f32.
#[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
#[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
#[allow(clippy::too_many_arguments)]
fn varlen_attention<F: Float>(
    q: &[F],
    k: &[F],
    v: &[F],
    bias: &[F],
    pos: &[F],
    pos_bucket: &[u32],
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
    kv_group: u32,
    scale: f32,
    window: u32,
    pos_mid: u32,
    #[comptime] head_dim: usize,
    #[comptime] tile: usize,
    #[comptime] windowed: bool,
    #[comptime] causal: bool,
    #[comptime] per_seq: bool,
    #[comptime] group: usize,
    #[comptime] has_bias: bool,
    #[comptime] has_pos: bool,
    #[define(F)] _dtype: ElemType,
) {
    let block = CUBE_POS_X as usize;
    let head = CUBE_POS_Y as usize;
    let seq = block_seq[block] as usize;
    let start = cu[seq] as usize;
    let end = cu[seq + 1] as usize;
    let first = block_first[block] as usize;
    // The unit's query token, and the row of `q` and `out` that holds it.
    let row = first + UNIT_POS as usize;
    let mut active = row < end;
    let mut at = row;
    // The block's last query token.
    let mut last = min(first + CUBE_DIM_X as usize, end) - 1;
    if per_seq {
        active = UNIT_POS == 0;
        at = seq;
        last = first;
    }
    let width = heads as usize * head_dim;
    // Rows of `q`, `k` and `v` may be further apart than `width` (columns of a wider product).
    let (q_stride, k_stride, v_stride) = (q_stride as usize, k_stride as usize, v_stride as usize);
    let col = head * head_dim;
    // The columns of the key-value head this query head reads (one of each `kv_group`).
    let kcol = head / kv_group as usize * head_dim;

    // The keys some query of this block can see.
    let mut lo = start;
    let mut hi = end;
    if windowed {
        lo = window_start(start, first, window);
        hi = window_end(end, last, window);
    }
    if causal {
        // None after the block's last query.
        hi = min(hi, last + 1);
    }

    // An inactive unit reads a valid row and discards the result; it still stages tiles.
    let mut me = min(row, end - 1);
    if per_seq {
        me = seq;
    }
    let mut query = Array::<f32>::new(head_dim);
    let mut acc = Array::<f32>::new(head_dim);
    #[unroll]
    for d in 0..head_dim {
        let x = with_bias(q[me * q_stride + col + d], bias, q_bias as usize + col + d, has_bias);
        query[d] = x * scale;
        acc[d] = 0.0;
    }
    // Finite, so the first correction exp(max - new_max) is 0 rather than NaN.
    let masked = f32::new(MASKED);
    let mut best = masked;
    let mut sum = 0.0f32;

    let mut keys = Shared::<[f32]>::new_slice(tile * head_dim);
    let mut vals = Shared::<[f32]>::new_slice(tile * head_dim);
    let mut t0 = lo;
    while t0 < hi {
        let n = min(tile, hi - t0);
        #[unroll]
        for s in 0..comptime!((tile * head_dim).div_ceil(BLOCK)) {
            let e = UNIT_POS as usize + s * BLOCK;
            if e < n * head_dim {
                let j = t0 + e / head_dim;
                let d = e % head_dim;
                let (kb, vb) = (k_bias as usize + kcol + d, v_bias as usize + kcol + d);
                keys[e] = with_bias(k[j * k_stride + kcol + d], bias, kb, has_bias);
                vals[e] = with_bias(v[j * v_stride + kcol + d], bias, vb, has_bias);
            }
        }
        sync_cube();
        if active {
            // Keys in groups of `group`: the group's scores first (independent sums), then one
            // rescale of the running sums for the group.
            let mut r0 = 0usize;
            while r0 < n {
                let mut near = true;
                if windowed {
                    // Whether any key of the group is within the window of the query.
                    let (a, b) = (t0 + r0, t0 + r0 + group - 1);
                    near = b + window as usize >= row && a <= row + window as usize;
                }
                if causal {
                    // Whether any key of the group is at or before the query.
                    near = near && t0 + r0 <= row;
                }
                if near {
                    let mut scores = Array::<f32>::new(group);
                    let mut top = best;
                    #[unroll]
                    for g in 0..group {
                        let r = r0 + g;
                        // Past the tile's keys, a valid row whose score is masked out.
                        let at = min(r, n - 1) * head_dim;
                        let mut dot = 0.0f32;
                        #[unroll]
                        for d in 0..head_dim {
                            dot += query[d] * keys[at + d];
                        }
                        if has_pos {
                            // The key is in the query's sequence, at most `pos_mid` before it.
                            let key = t0 + min(r, n - 1);
                            let b = pos_bucket[key + pos_mid as usize - row] as usize;
                            dot += f32::cast_from(pos[b * heads as usize + head]);
                        }
                        let mut seen = r < n;
                        if windowed {
                            seen = seen && within(row, t0 + r, window);
                        }
                        if causal {
                            seen = seen && t0 + r <= row;
                        }
                        scores[g] = select(seen, dot, masked);
                        top = max(top, scores[g]);
                    }
                    let fix = f32::exp(best - top);
                    sum *= fix;
                    #[unroll]
                    for d in 0..head_dim {
                        acc[d] *= fix;
                    }
                    #[unroll]
                    for g in 0..group {
                        let at = min(r0 + g, n - 1) * head_dim;
                        let p = select(scores[g] > masked, f32::exp(scores[g] - top), 0.0);
                        sum += p;
                        #[unroll]
                        for d in 0..head_dim {
                            acc[d] += p * vals[at + d];
                        }
                    }
                    best = top;
                }
                r0 += group;
            }
        }
        sync_cube();
        t0 += tile;
    }

    if active {
        // Every query sees itself, so `sum` is at least 1 here.
        #[unroll]
        for d in 0..head_dim {
            out[at * width + col + d] = F::cast_from(acc[d] / sum);
        }
    }
}

/// `x` widened to f32, with `bias[at]` added where `has_bias` (a projection's bias left to the
/// attention kernel) and the sum rounded to `F`, as the epilogue's store would round it: the
/// same values the kernel would read had the epilogue run first.
#[cube]
pub(crate) fn with_bias<F: Float>(x: F, bias: &[F], at: usize, #[comptime] has_bias: bool) -> f32 {
    let mut v = f32::cast_from(x);
    if has_bias {
        v = f32::cast_from(F::cast_from(v + f32::cast_from(bias[at])));
    }
    v
}

/// The first key of a sequence starting at `start` that a window of `window` rows lets a block
/// whose first query row is `first` see.
#[cube]
pub(crate) fn window_start(start: usize, first: usize, window: u32) -> usize {
    let win = window as usize;
    let mut lo = start;
    if first > start + win {
        lo = first - win;
    }
    lo
}

/// One past the last key of a sequence ending before `end` that a window of `window` rows lets a
/// block whose last query row is `last` see.
#[cube]
pub(crate) fn window_end(end: usize, last: usize, window: u32) -> usize {
    min(end, last + window as usize + 1)
}

/// Whether key row `key` is within `window` rows of query row `row`.
#[cube]
pub(crate) fn within(row: usize, key: usize, window: u32) -> bool {
    let gap = select(key > row, key - row, row - key);
    gap <= window as usize
}

/// The cubes of a launch in blocks of `block` query rows over a batch of `sizes`, whatever its
/// lengths: a sequence's full blocks and at most one partial block each.
fn cubes_for(sizes: Bucket, block: usize) -> usize {
    sizes.tokens / block + sizes.seqs
}

/// Whether one launch of cubes of `block` query rows covers every batch of `sizes` (or that
/// fits a bucket of them).
pub(crate) fn launchable(sizes: Bucket, block: usize) -> bool {
    cubes_for(sizes, block) <= super::MAX_CUBES
}

/// The cubes of a launch: for each block of up to `block` query rows (with `per_seq`, each
/// sequence's first), its sequence and its first row. Without `per_seq`, as many as any batch
/// of these sizes needs ([`cubes_for`]): those past the batch's blocks take the empty sequence
/// after the last (the offsets' last entry twice, [`super::offsets`]), so they have no rows and
/// no keys. So the launch depends on the batch's sizes alone, and a recorded run replays any
/// batch of them ([`crate::Recorded::replay_on`]). (An exit at the top of the kernels for them
/// made ptxas spill the row kernel's registers in f16 at heads 64, on the edge at 168.)
fn blocks(batch: &Batch<'_>, per_seq: bool, block: usize) -> (Vec<u32>, Vec<u32>) {
    let (mut seqs, mut firsts) = (Vec::new(), Vec::new());
    for s in 0..batch.seqs() {
        let rows = batch.seq(s);
        let step = if per_seq { rows.len() } else { block };
        for first in rows.step_by(step) {
            seqs.push(s as u32);
            firsts.push(first as u32);
        }
    }
    if !per_seq && batch.seqs() > 0 {
        let cubes = cubes_for(batch.sizes(), block);
        seqs.resize(cubes, batch.seqs() as u32);
        firsts.resize(cubes, batch.tokens() as u32);
    }
    (seqs, firsts)
}

/// The batch's tables a launch reads, on the device, each a handle and its count of u32s.
#[derive(Clone)]
pub(crate) struct Tables {
    /// Cubes in the launch.
    cubes: u32,
    /// The batch's sequence offsets.
    cu: super::U32s,
    /// Each cube's sequence.
    block_seq: super::U32s,
    /// Each cube's first query row.
    block_first: super::U32s,
}

impl Tables {
    /// The launch's cube count and its three tables as kernel arguments.
    pub(crate) fn args(&self) -> (u32, BufferArg, BufferArg, BufferArg) {
        let arg = super::u32s_arg;
        (self.cubes, arg(&self.cu), arg(&self.block_seq), arg(&self.block_first))
    }
}

/// The tables of the run's batch in blocks of `block` query rows (with `per_seq`, one a
/// sequence), uploaded by the run's first attention op that reads them.
pub(crate) fn tables(
    cx: &RunCx<'_, CubeBackend>,
    client: &Client,
    block: usize,
    per_seq: bool,
) -> Tables {
    let key = match per_seq {
        true => ["cube attention: a query per sequence", "cube attention: its rows"],
        false => {
            ["cube attention: each block's sequence", "cube attention: each block's first row"]
        }
    };
    let block_seq = super::u32_table(cx, client, key[0], block, move |b| {
        blocks(b, per_seq, block).0.into_iter().map(i64::from).collect()
    });
    let block_first = super::u32_table(cx, client, key[1], block, move |b| {
        blocks(b, per_seq, block).1.into_iter().map(i64::from).collect()
    });
    Tables { cubes: block_seq.1 as u32, cu: super::offsets(cx, client), block_seq, block_first }
}

/// `t` as rows the kernel reads in place, and how many elements apart they start: as it is
/// where its columns are consecutive (a whole tensor, or some columns of a wider one, such as a
/// share of a joined projection), else copied into plain rows.
pub(crate) fn rows(t: CubeTensor) -> (CubeTensor, u32) {
    let [_, width] = super::dims(&t);
    let s = t.meta.strides();
    let in_place = s[1] == 1 && s[0] >= width && u32::try_from(s[0]).is_ok();
    let t = if in_place { t } else { super::contiguous(t) };
    // Plain rows are `width` (heads times head_dim) apart, far within u32.
    let stride = t.meta.strides()[0] as u32;
    (t, stride)
}

/// Self-attention of every sequence of the run's batch over `[tokens, heads * head_dim]` query
/// rows and `[tokens, kv_heads * head_dim]` key and value rows (query head `h` reading key-value
/// head `h / (heads / kv_heads)`), all three of one float dtype (the output's); with `per_seq`,
/// `q` has one row per sequence, its first token's query, and so has the result. Each
/// online-softmax step takes `group` keys (1 to [`super::MAX_KEY_GROUP`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    (heads, kv_heads): (usize, usize),
    head_dim: usize,
    scale: f32,
    (window, causal): (Option<usize>, bool),
    per_seq: bool,
    group: usize,
    bias: Option<&QkvBias>,
    position: Option<&PositionArgs>,
    cx: &RunCx<'_, CubeBackend>,
) -> CubeTensor {
    let Launch {
        qkv: [(q, q_stride), (k, k_stride), (v, v_stride)],
        bias,
        bias_at,
        has_bias,
        out,
        tables,
        client,
        dtype,
    } = Launch::new([q, k, v], bias, cx, BLOCK, per_seq);
    let (pos, pos_bucket, pos_mid) = PositionArgs::args(position, &q, &tables);
    let (cubes, cu, block_seq, block_first) = tables.args();
    varlen_attention::launch(
        &client,
        CubeCount::Static(cubes, heads as u32, 1),
        CubeDim::new_1d(BLOCK as u32),
        q.into_buffer_arg(),
        k.into_buffer_arg(),
        v.into_buffer_arg(),
        bias.into_buffer_arg(),
        pos.into_buffer_arg(),
        pos_bucket,
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
        (heads / kv_heads) as u32,
        scale,
        window_arg(window),
        pos_mid,
        head_dim,
        tile_keys(head_dim),
        window.is_some(),
        causal,
        per_seq,
        group,
        has_bias,
        position.is_some(),
        dtype,
    );
    out
}

/// What both attention kernels' launches take besides their own parameters: the rows they read
/// in place with their strides, the bias or a stand-in, the output, and the batch's tables.
pub(crate) struct Launch {
    /// The query, key and value rows, each with the elements between its rows' starts.
    pub(crate) qkv: [(CubeTensor, u32); 3],
    /// The joined projections' bias, or the query bound in its place (unread).
    pub(crate) bias: CubeTensor,
    /// Where the query's, key's and value's columns start in the bias.
    pub(crate) bias_at: [u32; 3],
    /// Whether the kernel adds the bias.
    pub(crate) has_bias: bool,
    /// The output, shaped like the query.
    pub(crate) out: CubeTensor,
    /// The batch's tables in blocks of the kernel's query rows.
    pub(crate) tables: Tables,
    /// The device's client.
    pub(crate) client: Client,
    /// The rows' dtype.
    pub(crate) dtype: ElemType,
}

impl Launch {
    /// The launch's operands for `q`, `k` and `v`, with the run's tables in blocks of `block`
    /// query rows (with `per_seq`, one a sequence), uploaded by the run's first attention op
    /// that reads them.
    pub(crate) fn new(
        [q, k, v]: [CubeTensor; 3],
        bias: Option<&QkvBias>,
        cx: &RunCx<'_, CubeBackend>,
        block: usize,
        per_seq: bool,
    ) -> Launch {
        let qkv = [rows(q), rows(k), rows(v)];
        let (bias, bias_at, has_bias) = QkvBias::args(bias, &qkv[0].0);
        let out = super::empty_like(&qkv[0].0);
        let client = qkv[0].0.client.clone();
        let dtype = burn_backend::cubecl::dtype_to_storage_type(qkv[0].0.dtype);
        let tables = tables(cx, &client, block, per_seq);
        Launch { qkv, bias, bias_at, has_bias, out, tables, client, dtype }
    }
}

/// The buckets by relative position uploaded this run, by the bias they are for.
type MadeBuckets = std::sync::Arc<std::sync::Mutex<Vec<(RelativeBias, super::U32s)>>>;

/// A relative position bias as the row kernel reads it: the `[buckets, heads]` table in the
/// rows' dtype, and the bucket of each relative position from `-mid` to `mid` (`mid` one less
/// than the longest sequence a batch of the run's sizes may hold).
pub(crate) struct PositionArgs {
    /// The table.
    pub(crate) table: CubeTensor,
    /// The buckets by relative position.
    pub(crate) buckets: super::U32s,
    /// The relative position of the buckets' first entry, negated.
    pub(crate) mid: u32,
}

impl PositionArgs {
    /// The bias `b` with its bound `table`, its buckets uploaded once a run.
    pub(crate) fn new(
        b: RelativeBias,
        table: &CubeTensor,
        cx: &RunCx<'_, CubeBackend>,
    ) -> PositionArgs {
        // The longest sequence a batch of the run's sizes may hold, not this batch's, so that
        // a recorded run's launch replays any batch of those sizes.
        let longest = cx.sizes().tokens.min(cx.graph.limits().max_len as usize).max(1);
        let client = table.client.clone();
        // Uploaded once a run for each bucketing: every layer of a model shares one.
        let made = cx.memo("cube attention: position buckets", MadeBuckets::default);
        let mut made = made.lock().expect("not poisoned");
        let buckets = match made
            .iter()
            .find(|(m, _)| m.buckets == b.buckets && m.max_distance == b.max_distance)
        {
            Some((_, u)) => u.clone(),
            None => {
                let v: Vec<u32> =
                    b.buckets_by_distance(longest).into_iter().map(|k| k as u32).collect();
                let u = super::u32s(&client, &v);
                made.push((b, u.clone()));
                u
            }
        };
        let mid = (longest - 1) as u32;
        PositionArgs { table: super::contiguous(table.clone()), buckets, mid }
    }

    /// A kernel's position arguments: the table, the buckets and `mid`; without a bias, `like`
    /// and the batch's offsets bound in their place (unread) and zero.
    fn args(
        position: Option<&PositionArgs>,
        like: &CubeTensor,
        tables: &Tables,
    ) -> (CubeTensor, BufferArg, u32) {
        match position {
            Some(p) => (p.table.clone(), super::u32s_arg(&p.buckets), p.mid),
            None => (like.clone(), super::u32s_arg(&tables.cu), 0),
        }
    }
}

/// A joined query, key and value projection's bias, left to the attention kernels to add as
/// they read each value: the joined `[1, n]` bias, in the rows' dtype, and the columns where the
/// query's, the key's and the value's biases start in it.
#[derive(Clone, Debug)]
pub(crate) struct QkvBias {
    /// The joined bias.
    pub(crate) bias: CubeTensor,
    /// Where the query's, key's and value's columns start.
    pub(crate) at: [usize; 3],
}

impl QkvBias {
    /// A kernel's bias arguments: the bias, its three starts and whether to read it; without
    /// one, `like` bound in its place (unread) and zeros.
    pub(crate) fn args(bias: Option<&QkvBias>, like: &CubeTensor) -> (CubeTensor, [u32; 3], bool) {
        match bias {
            // Starts are columns of a bias row, far within u32.
            Some(b) => (super::contiguous(b.bias.clone()), b.at.map(|a| a as u32), true),
            None => (like.clone(), [0; 3], false),
        }
    }
}

/// The widest window the kernels are given: wider than any sequence a bucket holds (4M tokens),
/// so it sees every key, and small enough that a query row plus it stays within u32, the
/// kernels' index arithmetic on a GPU.
const WINDOW_CAP: usize = 1 << 24;

/// A sliding window as the attention kernels take it (see [`WINDOW_CAP`]); without a window,
/// the cap, which the kernels do not read.
pub(crate) fn window_arg(window: Option<usize>) -> u32 {
    window.map_or(WINDOW_CAP, |w| w.min(WINDOW_CAP)) as u32
}

/// The kernel's variants as CUDA C++ for [`super::cuda_check`]: each dtype with heads 32 to 128
/// wide (256 in f32 and f16), in f16 a window, a causal mask, a query per sequence and groups of
/// keys, and in f32 a causal mask in a window (on GPUs other than the H200, heads 64 wide in each
/// dtype); heads from 128 wide and groups from 8 keys may spill, as [`MAX_HEAD_DIM`] and
/// `with_key_group` say.
#[cfg(all(test, feature = "wgpu"))]
pub(super) fn cuda_variants(sm: &super::cuda_check::Sm) -> Vec<super::cuda_check::Variant> {
    use cubecl::ir::FloatKind::{BF16, F16, F32};
    let build = |dtype, head_dim: usize, (windowed, causal), per_seq, group, bias, pos| {
        let width = 2 * head_dim;
        let kernel = varlen_attention::create_dummy_kernel(
            sm.props(),
            sm.target(),
            CubeCount::Static(1, 2, 1),
            CubeDim::new_1d(BLOCK as u32),
            sm.buffer(64 * width),
            sm.buffer(64 * width),
            sm.buffer(64 * width),
            sm.buffer(3 * width),
            sm.buffer(64),
            sm.buffer(127),
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
            1,
            0.125,
            8,
            63,
            head_dim,
            tile_keys(head_dim),
            windowed,
            causal,
            per_seq,
            group,
            bias,
            pos,
            ElemType::Float(dtype),
        );
        let name = format!(
            "attention {dtype:?} heads {head_dim}{}{}{}{}{}, keys {group} a step",
            if windowed { " windowed" } else { "" },
            if causal { " causal" } else { "" },
            if per_seq { " a query a sequence" } else { "" },
            if bias { " adding the projections' bias" } else { "" },
            if pos { " with a position bias" } else { "" },
        );
        let mut v = sm.variant(name, kernel);
        v.may_spill = head_dim >= 128 || group >= 8;
        v
    };
    let mut all = Vec::new();
    if !sm.every() {
        return [F32, F16, BF16]
            .map(|dtype| build(dtype, 64, (false, false), false, 1, true, false))
            .into();
    }
    for dtype in [F32, F16, BF16] {
        for head_dim in [32, 64, 128] {
            all.push(build(dtype, head_dim, (false, false), false, 1, false, false));
        }
        // As encoders run it: adding the projections' bias.
        all.push(build(dtype, 64, (false, false), false, 1, true, false));
    }
    all.push(build(F32, MAX_HEAD_DIM, (false, false), false, 1, false, false));
    all.push(build(F16, MAX_HEAD_DIM, (false, false), false, 1, false, false));
    all.push(build(F16, 64, (true, false), false, 1, false, false));
    // Qwen3's causal mask, alone and in a window.
    all.push(build(F16, 64, (false, true), false, 1, false, false));
    all.push(build(F32, 64, (true, true), false, 1, false, false));
    all.push(build(F16, 64, (false, false), true, 1, false, false));
    // MPNet's relative position bias, in f32 and f16.
    all.push(build(F32, 64, (false, false), false, 1, true, true));
    all.push(build(F16, 64, (false, false), false, 1, true, true));
    // The groups the benchmarks time (`with_key_group`); more keys a step take longer to
    // compile (32: 25 s) than the check is worth.
    for group in [4, 8] {
        all.push(build(F16, 64, (false, false), false, group, false, false));
    }
    all
}

#[cfg(test)]
mod tests {
    #[cfg(feature = "wgpu")]
    use super::super::dims;
    use super::*;
    #[cfg(feature = "wgpu")]
    use burn_backend::ops::FloatTensorOps;

    #[test]
    fn tiles_fill_the_shared_budget_and_hold_at_least_one_key() {
        assert_eq!(tile_keys(32), 32);
        assert_eq!(tile_keys(64), 32);
        assert_eq!(tile_keys(128), 16);
        assert_eq!(tile_keys(256), 8);
        assert_eq!(tile_keys(4096), 1);
        for hd in [1, 7, 64, 100, 128, MAX_HEAD_DIM] {
            assert!(tile_keys(hd) * hd <= TILE_FLOATS, "head_dim {hd}");
        }
    }

    #[test]
    fn a_batch_needing_more_cubes_than_a_grid_holds_is_not_launched() {
        assert!(!launchable(Bucket::new(70_000, 70_000, 0), BLOCK));
        assert!(launchable(Bucket::new(70_000, 1, 0), BLOCK), "2188 blocks");
        assert!(launchable(Bucket::new(32 * 65_000, 535, 0), BLOCK), "65535 at most");
        assert!(!launchable(Bucket::new(32 * 65_000, 536, 0), BLOCK));
    }

    /// Columns of a wider product (a share of a layer's joined projections) are read where
    /// they are: no copy, rows as far apart as the product's. Other strides are copied.
    #[cfg(feature = "wgpu")]
    #[test]
    fn a_share_of_a_wider_product_is_read_in_place() {
        use burn_cubecl::CubeBackend;
        use switchyard_burn::generic;
        let cube = crate::wgpu::open(0).expect("a wgpu adapter");
        let values: Vec<f32> = (0..8 * 192).map(|i| i as f32).collect();
        let all = switchyard_burn::floats::<CubeBackend>(values, &[8, 192], cube.device());
        // 64 f32 columns: shares start 256 bytes apart, as wgpu aligns a buffer's views.
        let share = generic::cols::<CubeBackend>(all.clone(), 64, 128);
        let in_use = all.handle.size_in_used() - 128 * 4;
        assert_eq!(share.handle.size_in_used(), in_use, "a view of the product");
        let (share, stride) = rows(share);
        assert_eq!((stride, dims(&share)), (192, [8, 64]), "read in place");
        let (plain, stride) = rows(<CubeBackend as FloatTensorOps<_>>::float_transpose(all));
        assert_eq!((stride, dims(&plain)), (8, [192, 8]), "copied into plain rows");
    }

    #[test]
    fn blocks_cover_every_row_once_within_its_sequence_and_fill_what_its_sizes_may_need() {
        let cu = [0u32, 1, 33, 33 + 65];
        let ids = vec![0u32; 98];
        let types = vec![0u32; 98];
        let batch = Batch { ids: &ids, cu: &cu, types: &types, markers: &[], mcu: &[0; 4] };
        // Past the batch's own blocks, as many as a batch of 98 tokens in 3 sequences may need
        // (98 / 32 + 3 = 6), each the empty sequence after the last: no rows.
        let (seqs, firsts) = blocks(&batch, false, BLOCK);
        assert_eq!(seqs, [0, 1, 2, 2, 2, 3]);
        assert_eq!(firsts, [0, 1, 33, 65, 97, 98]);
        let (seqs, firsts) = blocks(&batch, false, 16);
        assert_eq!(seqs, [0, 1, 1, 2, 2, 2, 2, 2, 3]);
        assert_eq!(firsts, [0, 1, 17, 33, 49, 65, 81, 97, 98]);
        let (seqs, firsts) = blocks(&batch, true, BLOCK);
        assert_eq!(seqs, [0, 1, 2]);
        assert_eq!(firsts, [0, 1, 33]);
        // Any lengths of those sizes need no more.
        for cu in [[0u32, 32, 64, 98], [0, 31, 62, 98], [0, 1, 2, 98], [0, 96, 97, 98]] {
            let batch = Batch { cu: &cu, ..batch };
            let own: usize = (0..3).map(|s| batch.seq(s).len().div_ceil(BLOCK)).sum();
            assert!(own <= blocks(&batch, false, BLOCK).0.len(), "{cu:?}");
            assert_eq!(blocks(&batch, false, BLOCK).0.len(), 6, "{cu:?}");
        }
    }
}
