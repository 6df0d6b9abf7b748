//! The cube crate's own kernels against the f64 reference, on shapes the shared suite does not
//! reach: sequences longer than one block of queries and one tile of keys, windows that cross
//! block and tile edges, heads up to the widest the kernel takes, attention in the
//! half-precision dtypes the device has, LayerNorm across the cube's width in each dtype, pooling
//! in each mode and dtype, GEMMs over many `k` steps, and the products of cubek's routines chosen
//! by name. Each test also checks that the kernel really ran (the generic path would pass the
//! value checks too) and that it stands down where it should.
//!
//! Tolerance: the suite's f32 bound (2e-5 + 2e-5 |want|), unchanged, for our kernels. Burn's
//! own ops, where a test runs them, meet it too, except on a device where they compute f32
//! products in TF32: there they are held to f16's bound (see `generic_tolerance`). In f16 and
//! bf16, the suite's bound for that dtype.

#![cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cpu"))]

mod common;

use switchyard_conformance::{ACTS, Tol, tolerance};
use switchyard_core::testkit::{Rng, push_random_seq, random_weights};
use switchyard_core::{
    Act, BatchBuf, Buckets, DType, Error, Executor, Graph, GraphBuilder, LaneId, Op, Outputs,
    PoolMode, Reference, Shape,
};
use switchyard_cube::{
    Cube, KernelSet, Launched, Matmul, Routine, with_kernels, with_key_group, with_matmul,
    with_tiled_attention,
};

const VOCAB: usize = 50;

fn device(set: KernelSet) -> Cube {
    with_kernels(&common::open().expect("the device under test"), set)
}

/// Runs `graph` on `cube` and on the reference over sequences of `lens`, and checks every
/// output value within the f32 tolerance.
fn check(cube: Cube, graph: &Graph, lens: &[usize], what: &str) {
    check_within(cube, graph, lens, what, tolerance(DType::F32));
}

/// The bound Burn's own ops on `cube` meet: f32's, or where they compute f32 products in TF32,
/// f16's (TF32 keeps f16's 10-bit mantissa, with f32's range and f32 accumulation).
fn generic_tolerance(cube: &Cube) -> Tol {
    tolerance(if cube.kernels().tf32() { DType::F16 } else { DType::F32 })
}

/// [`check`] within `tol`.
fn check_within(cube: Cube, graph: &Graph, lens: &[usize], what: &str, tol: Tol) {
    let (got, want) = run_both(cube, graph, lens).expect("a run on the cube backend");
    assert_close(&got, &want, what, tol);
}

/// Every value of `got` within `tol` of `want`'s.
fn assert_close(got: &Outputs, want: &Outputs, what: &str, tol: Tol) {
    assert_eq!(got.mats().len(), want.mats().len(), "{what}");
    for (g, w) in got.mats().iter().zip(want.mats()) {
        assert_eq!(g.data.len(), w.data.len(), "{what}");
        for (i, (&a, &b)) in g.data.iter().zip(&w.data).enumerate() {
            let bound = tol.abs + tol.rel * b.abs();
            assert!(
                (a - b).abs() <= bound,
                "{what}: row {} column {}: got {a}, expected {b} (tolerance {bound:e})",
                i / g.width,
                i % g.width
            );
        }
    }
}

/// The half-precision dtypes the device under test computes in (llvmpipe: f16).
fn half_dtypes() -> Vec<DType> {
    let cube = common::open().expect("the device under test");
    let caps = switchyard_core::Backend::caps(&cube);
    caps.dtypes.iter().copied().filter(|d| matches!(d, DType::F16 | DType::Bf16)).collect()
}

/// The outputs of `graph` over sequences of `lens` on `cube` and on the reference.
fn run_both(
    cube: Cube,
    graph: &Graph,
    lens: &[usize],
) -> switchyard_core::Result<(Outputs, Outputs)> {
    run_both_typed(cube, graph, lens, false)
}

/// [`run_both`], each sequence's second half of token type 1 where `types`.
fn run_both_typed(
    cube: Cube,
    graph: &Graph,
    lens: &[usize],
    types: bool,
) -> switchyard_core::Result<(Outputs, Outputs)> {
    run_both_in(cube, graph, lens, types, "default 2048 16 2048\n")
}

/// [`run_both_typed`] with the bucket table `buckets`.
fn run_both_in(
    cube: Cube,
    graph: &Graph,
    lens: &[usize],
    types: bool,
    buckets: &str,
) -> switchyard_core::Result<(Outputs, Outputs)> {
    let buckets: Buckets = buckets.parse().expect("a valid table");
    let weights = random_weights(graph, 7);
    let tensors = weights.tensors();
    let mut test = Executor::new(cube, &tensors, graph.clone(), "default", buckets.clone())?;
    let mut reference = Executor::new(Reference, &tensors, graph.clone(), "default", buckets)
        .expect("upload to the reference");
    let mut r = Rng::new(lens.len() as u64);
    let mut batch = BatchBuf::new();
    for &len in lens {
        push_random_seq(&mut batch, &mut r, len, VOCAB, types);
    }
    let (mut got, mut want) = (Outputs::new(), Outputs::new());
    test.run(LaneId::MAIN, &batch.batch(), &mut got)?;
    reference.run(LaneId::MAIN, &batch.batch(), &mut want).expect("a run on the reference");
    Ok((got, want))
}

/// Self-attention over three random token tables (q, k, v).
fn attention(heads: usize, head_dim: usize, window: Option<usize>) -> Graph {
    attention_over(heads, head_dim, window, false)
}

/// Attention over random token tables, with a query per token or, where `per_seq`, one per
/// sequence: its first token's.
fn attention_over(heads: usize, head_dim: usize, window: Option<usize>, per_seq: bool) -> Graph {
    grouped_attention((heads, heads), head_dim, (window, false), per_seq)
}

/// [`attention_over`] with `heads.0` query heads on `heads.1` key-value heads, causal or not.
fn grouped_attention(
    (heads, kv_heads): (usize, usize),
    head_dim: usize,
    (window, causal): (Option<usize>, bool),
    per_seq: bool,
) -> Graph {
    let mut g = GraphBuilder::new();
    let w = heads * head_dim;
    let input = |g: &mut GraphBuilder, name: &str, w: usize| {
        let table = g.weight(name, &[VOCAB, w]);
        g.op(Shape::tokens(w), |out| Op::Embed { table, scale: 1.0, out })
    };
    let kw = kv_heads * head_dim;
    let (mut q, k, v) = (input(&mut g, "q", w), input(&mut g, "k", kw), input(&mut g, "v", kw));
    let rows = if per_seq { Shape::seqs(w) } else { Shape::tokens(w) };
    if per_seq {
        q = g.op(rows, |out| Op::Pool { x: q, mode: PoolMode::Cls, out });
    }
    let scale = 1.0 / (head_dim as f32).sqrt();
    let y = g.op(rows, |out| Op::Attention {
        q,
        k,
        v,
        heads,
        kv_heads,
        head_dim,
        scale,
        window,
        causal,
        position_bias: None,
        out,
    });
    g.output("y", y);
    g.finish().expect("a valid graph")
}

/// A linear layer `[k -> n]` over a random token table, with an optional bias and residual.
fn linear(k: usize, n: usize, act: Act, bias: bool, residual: bool) -> Graph {
    switchyard_core::testkit::linear_layer(VOCAB, k, n, act, bias, residual)
}

/// LayerNorm over a random token table `width` wide, with or without a shift.
fn layer_norm(width: usize, beta: bool) -> Graph {
    let mut g = GraphBuilder::new();
    let table = g.weight("x", &[VOCAB, width]);
    let x = g.op(Shape::tokens(width), |out| Op::Embed { table, scale: 1.0, out });
    let gamma = g.weight("g", &[width]);
    let beta = beta.then(|| g.weight("b", &[width]));
    let y = g.op(Shape::tokens(width), |out| Op::LayerNorm { x, gamma, beta, eps: 1e-12, out });
    g.output("y", y);
    g.finish().expect("a valid graph")
}

/// Lengths around the kernel's 32-query blocks and its key tiles (32, 16 or 8 keys).
const LENS: [usize; 7] = [1, 7, 31, 32, 33, 97, 150];

#[test]
fn ragged_attention_matches_the_reference_across_blocks_tiles_and_windows() {
    for (heads, head_dim) in [(2, 8), (3, 64), (1, 128), (1, 256)] {
        for window in [None, Some(0), Some(5), Some(40)] {
            let cube = device(KernelSet::ALL);
            let kernels = cube.kernels().clone();
            let what = format!("{heads}x{head_dim} window {window:?}");
            check(cube, &attention(heads, head_dim, window), &LENS, &what);
            assert_eq!(
                kernels.launched(),
                Launched { attention: 1, ..Launched::default() },
                "{what}"
            );
        }
    }
}

#[test]
fn a_query_per_sequence_attends_over_all_its_keys_across_tiles_and_windows() {
    // Each case compiles its own shader (minutes in all on llvmpipe for every pairing): each
    // window and each head width once.
    for (heads, head_dim, window) in
        [(2, 8, None), (2, 8, Some(0)), (3, 64, Some(5)), (1, 256, Some(40))]
    {
        let cube = device(KernelSet::ALL);
        let kernels = cube.kernels().clone();
        let what = format!("{heads}x{head_dim} window {window:?}, a query per sequence");
        check(cube, &attention_over(heads, head_dim, window, true), &LENS, &what);
        assert_eq!(kernels.launched().attention, 1, "{what}");
    }
    for dtype in half_dtypes() {
        let cube = device(KernelSet::ALL);
        let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("a listed dtype");
        let what = format!("{dtype} 3x64, a query per sequence");
        check_within(cube, &attention_over(3, 64, Some(5), true), &LENS, &what, tolerance(dtype));
    }
}

/// Lengths around the tiled kernel's blocks of 16 query rows and its tiles of 16 keys.
const TILE_LENS: [usize; 7] = [1, 15, 16, 17, 33, 64, 150];

/// `cube` in `dtype`, with half-precision attention in tiles or not.
fn tiled(tiles: bool, dtype: DType) -> (Cube, switchyard_cube::CubeKernels) {
    let cube = with_tiled_attention(&device(KernelSet::ALL), tiles);
    let kernels = cube.kernels().clone();
    (switchyard_core::Backend::with_dtype(cube, dtype).expect("a listed dtype"), kernels)
}

#[test]
fn tiled_attention_matches_the_reference_and_the_row_kernel_in_half_precision() {
    // Against the row kernel, which reads the same rounded inputs and sums in f32: the tiles
    // also round each softmax weight to the dtype, and each kernel its output, about 1e-3 in f16
    // (2^-11 each); 3e-3 leaves headroom, while a weight or row lost errs by 1e-1 or more. bf16
    // keeps 3 fewer bits (2^-8): 8 times the bound.
    let near = |dtype| match dtype {
        DType::Bf16 => Tol { abs: 2.4e-2, rel: 2.4e-2 },
        _ => Tol { abs: 3e-3, rel: 3e-3 },
    };
    // Windows of none, one and a few rows: blocks whose keys start inside the sequence, and a
    // window wider than a block of 16 rows.
    let cases = [(2, 16, None), (3, 32, None), (2, 64, None), (2, 16, Some(0)), (2, 16, Some(5))];
    for dtype in half_dtypes() {
        for (heads, head_dim, window) in cases.into_iter().chain([(2, 16, Some(40))]) {
            let graph = attention(heads, head_dim, window);
            let what = format!("tiles, {dtype}, {heads} heads of {head_dim}, window {window:?}");
            let (cube, kernels) = tiled(true, dtype);
            let (got, want) = run_both(cube, &graph, &TILE_LENS).expect("a run in tiles");
            assert_close(&got, &want, &what, tolerance(dtype));
            let launched = Launched { attention: 1, tiled: 1, ..Launched::default() };
            assert_eq!(kernels.launched(), launched, "{what}");
            let (rows, _) = run_both(tiled(false, dtype).0, &graph, &TILE_LENS).expect("a run");
            assert_close(&got, &rows, &format!("{what}, against the row kernel"), near(dtype));
        }
    }
}

/// Query heads sharing key-value heads (Gemma's, Qwen3's) and causal attention (Qwen3's) run in
/// the row kernel, which reads each key-value head for its group and masks the keys after each
/// query: grouped alone, in a window and with a query per sequence; causal alone, in a window,
/// on shared heads and with a query per sequence (the first token sees itself alone); and in
/// half precision with tiles chosen (the tiled kernel takes neither).
#[test]
fn shared_key_value_heads_and_causal_masks_run_in_the_row_kernel() {
    let cases = [
        ((4, 2), 8, (None, false), false),
        ((3, 1), 64, (Some(5), false), false),
        ((4, 2), 16, (None, false), true),
        ((2, 2), 8, (None, true), false),
        ((3, 3), 64, (Some(5), true), false),
        ((4, 2), 16, (None, true), false),
        ((2, 2), 8, (Some(40), true), true),
    ];
    for (heads, head_dim, mask, per_seq) in cases {
        let cube = device(KernelSet::ALL);
        let kernels = cube.kernels().clone();
        let what =
            format!("{heads:?}x{head_dim} (window, causal) {mask:?}, per sequence {per_seq}");
        check(cube, &grouped_attention(heads, head_dim, mask, per_seq), &LENS, &what);
        assert_eq!(kernels.launched().attention, 1, "{what}");
    }
    for dtype in half_dtypes() {
        for (heads, causal) in [((4, 2), false), ((2, 2), true)] {
            let what = format!("tiles, {dtype}, {heads:?} heads of 16, causal {causal}");
            let (cube, kernels) = tiled(true, dtype);
            let graph = grouped_attention(heads, 16, (None, causal), false);
            check_within(cube, &graph, &TILE_LENS, &what, tolerance(dtype));
            let launched = Launched { attention: 1, ..Launched::default() };
            assert_eq!(kernels.launched(), launched, "{what}");
        }
    }
}

#[test]
fn tiled_attention_leaves_to_the_row_kernel_what_it_does_not_take() {
    let mut cases = vec![(DType::F32, attention(2, 16, None), "f32")];
    for dtype in half_dtypes() {
        cases.push((dtype, attention(2, 8, None), "heads of 8"));
        cases.push((dtype, attention_over(2, 16, None, true), "a query per sequence"));
    }
    for (dtype, graph, why) in cases {
        let what = format!("tiles, {dtype}, {why}");
        let (cube, kernels) = tiled(true, dtype);
        check_within(cube, &graph, &TILE_LENS, &what, tolerance(dtype));
        // The query per sequence is its first token's, pooled by our pooling kernel.
        let pool = usize::from(why == "a query per sequence");
        let launched = Launched { attention: 1, pool, ..Launched::default() };
        assert_eq!(kernels.launched(), launched, "{what}");
    }
}

#[test]
fn an_encoders_attention_runs_in_tiles_over_the_shares_of_its_joined_projections() {
    use switchyard_core::testkit::{EncoderSpec, bert_like};
    // Heads of 16: each share of the joined product starts 32 f16 columns (64 bytes) in.
    let spec = EncoderSpec { vocab: VOCAB, width: 64, heads: 4, ffn: 96, layers: 2, max_pos: 200 };
    for dtype in half_dtypes() {
        let (cube, kernels) = tiled(true, dtype);
        let what = format!("an encoder in {dtype}, attention in tiles");
        check_within(cube, &bert_like(spec), &[1, 40, 150], &what, tolerance(dtype));
        assert_eq!(kernels.launched().tiled, spec.layers, "{what}");
    }
}

/// Self-attention over projections of one token table with a bias each, made in the graph in
/// `order` (0: query, 1: key, 2: value), so they run as one joined product; the key's result is
/// an output of the graph too where `read`.
fn projected_attention(order: [usize; 3], read: bool) -> Graph {
    let (heads, head_dim) = (2, 16);
    let w = heads * head_dim;
    let mut g = GraphBuilder::new();
    let table = g.weight("x", &[VOCAB, 24]);
    let x = g.op(Shape::tokens(24), |out| Op::Embed { table, scale: 1.0, out });
    let mut qkv = [None; 3];
    for i in order {
        let (weight, bias) =
            (g.weight(format!("w{i}"), &[w, 24]), Some(g.weight(format!("b{i}"), &[w])));
        let act = Act::Identity;
        qkv[i] = Some(g.op(Shape::tokens(w), |out| Op::Linear {
            x,
            weight,
            bias,
            act,
            residual: None,
            out,
        }));
    }
    let [q, k, v] = qkv.map(|v| v.expect("each made"));
    let scale = 1.0 / (head_dim as f32).sqrt();
    let window = None;
    let y = g.op(Shape::tokens(w), |out| Op::Attention {
        q,
        k,
        v,
        heads,
        kv_heads: heads,
        head_dim,
        scale,
        window,
        causal: false,
        position_bias: None,
        out,
    });
    g.output("y", y);
    if read {
        g.output("k", k);
    }
    g.finish().expect("a valid graph")
}

/// A joined query, key and value projection leaves its bias to the attention kernel that alone
/// reads its results: one launch fewer a layer, and the outputs the epilogue's bit for bit, in
/// every dtype, in rows and in tiles, in whatever order the graph makes the projections. Where
/// another op reads one of them, or the set leaves the bias out of attention, the epilogue
/// adds it.
#[test]
fn a_joined_projections_bias_is_added_by_the_attention_kernel_that_alone_reads_it() {
    use switchyard_core::testkit::{EncoderSpec, bert_like};
    let spec = EncoderSpec { vocab: VOCAB, width: 64, heads: 4, ffn: 96, layers: 2, max_pos: 200 };
    let graphs = [
        (bert_like(spec), spec.layers, "an encoder"),
        (projected_attention([1, 2, 0], false), 1, "projections made key, value, query"),
        (projected_attention([0, 1, 2], true), 0, "the key read by an output too"),
    ];
    let mut cases = vec![(DType::F32, false)];
    cases.extend(half_dtypes().into_iter().flat_map(|d| [(d, false), (d, true)]));
    for (graph, folds, name) in &graphs {
        for &(dtype, tiles) in &cases {
            let what = format!("{name}, {dtype}, tiles {tiles}");
            let run = |attention_bias: bool| {
                let set = KernelSet { attention_bias, ..KernelSet::MEASURED };
                let cube = with_tiled_attention(&device(set), tiles);
                let kernels = cube.kernels().clone();
                let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
                let (got, want) = run_both(cube, graph, &[1, 40, 150]).expect("a run");
                assert_close(&got, &want, &what, tolerance(dtype));
                (got, kernels.launched())
            };
            let ((folded, on), (apart, off)) = (run(true), run(false));
            assert_eq!((on.attention_bias, off.attention_bias), (*folds, 0), "{what}");
            assert_eq!((on.epilogue, on.attention), (off.epilogue, off.attention), "{what}");
            for (a, b) in folded.mats().iter().zip(apart.mats()) {
                assert!(a.data == b.data, "{what}: `{}` differs from the epilogue's", a.name);
            }
        }
    }
}

/// The attention's output of one run of `graph` with the kernels `set`, given the values `fed`
/// (each filled with a pattern), dropping as training does where `dropout`; and what the
/// kernels ran.
fn forward(
    graph: &Graph,
    set: KernelSet,
    fed: &[switchyard_core::Val],
    dropout: bool,
) -> (Vec<f32>, Launched) {
    use switchyard_burn::Forward;
    use switchyard_core::{Backend, Bucket};
    let mut batch = BatchBuf::new();
    push_random_seq(&mut batch, &mut Rng::new(3), 40, VOCAB, false);
    let rows = batch.batch().tokens();
    let be = device(set);
    let given = |v: switchyard_core::Val| {
        let width = graph.shape(v).width;
        let values: Vec<f32> = (0..rows * width).map(|i| (i % 7) as f32 * 0.1).collect();
        (v, switchyard_burn::floats::<burn_cubecl::Cube>(values, &[rows, width], be.device()))
    };
    let w = be.upload(&random_weights(graph, 7).tensors(), graph).expect("uploaded");
    let plan = be.lower(&w, graph, Bucket::new(64, 4, 64)).expect("lowered");
    let mut state = be.state(&plan).expect("a state");
    let how = Forward { feed: fed.iter().map(|&v| given(v)).collect(), dropout };
    let got = be.forward(&plan, &mut state, &batch.batch(), &how).expect("a run");
    let y = got[0].clone().expect("the attention's output");
    (switchyard_burn::read_f32::<burn_cubecl::Cube>(y).expect("read back"), be.kernels().launched())
}

/// Where the run is given the query or the value (a share of the joined product), the bias is
/// not left to attention, which would add it to the value given; nor where it drops some of
/// the attention's output, which then runs the generic way. The outputs are those of the set
/// without the fold, bit for bit. (The key's bias moves every score of a query alike, which
/// the softmax cancels, so only the query's and the value's show.) A graph that marks dropout
/// at the attention (as real checkpoints do) still folds where the run drops nothing.
#[test]
fn a_projection_given_to_the_run_or_a_dropped_attention_keeps_the_bias_out_of_attention() {
    let on = KernelSet::MEASURED;
    let off = KernelSet { attention_bias: false, ..on };
    let graph = projected_attention([0, 1, 2], false);
    let lin: Vec<_> =
        graph.ops.iter().filter(|op| matches!(op, Op::Linear { .. })).map(Op::out).collect();
    for fed in [lin[0], lin[2]] {
        let ((folded, took), (apart, _)) =
            (forward(&graph, on, &[fed], false), forward(&graph, off, &[fed], false));
        assert_eq!(took.attention_bias, 0, "{fed:?} given");
        assert!(folded == apart, "{fed:?} given: the outputs differ");
    }
    // So rare a dropout that nothing is dropped: the outputs are comparable, not random.
    let mut dropped = graph.clone();
    let y = dropped.output("y").expect("the attention's output");
    dropped.dropout.push(switchyard_core::Dropout { val: y, p: 1e-9 });
    let ((folded, took), (apart, _)) =
        (forward(&dropped, on, &[], true), forward(&dropped, off, &[], true));
    assert_eq!(took.attention_bias, 0, "dropped");
    assert!(folded == apart, "dropped: the outputs differ");
    let (_, took) = forward(&dropped, on, &[], false);
    assert_eq!(took.attention_bias, 1, "dropout marked, none applied");
}

#[test]
fn attention_taking_keys_in_groups_matches_the_reference() {
    // 3 does not divide a tile of 32 keys, so groups run past its end, and windows cut groups
    // at either side. Narrow heads: each case compiles its own shader, and llvmpipe takes
    // minutes over one with groups of wide heads unrolled.
    for (group, window) in [(3, None), (3, Some(0)), (3, Some(5)), (8, Some(40))] {
        let cube = with_key_group(&device(KernelSet::ALL), group);
        let kernels = cube.kernels().clone();
        let what = format!("groups of {group}, window {window:?}");
        check(cube, &attention(2, 8, window), &LENS, &what);
        assert_eq!(kernels.launched().attention, 1, "{what}");
    }
    let cube = with_key_group(&device(KernelSet::ALL), 3);
    let what = "groups of 3, a query per sequence";
    check(cube, &attention_over(2, 8, Some(5), true), &LENS, what);
    for dtype in half_dtypes() {
        let cube = with_key_group(&device(KernelSet::ALL), 4);
        let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("a listed dtype");
        let what = format!("{dtype} groups of 4");
        check_within(cube, &attention(2, 16, None), &LENS, &what, tolerance(dtype));
    }
    let cube = common::open().expect("the device under test");
    assert_eq!(cube.kernels().key_group(), 1, "one key a step by default");
    assert_eq!(with_key_group(&cube, 0).kernels().key_group(), 1);
    assert_eq!(with_key_group(&cube, 100).kernels().key_group(), 32);
    let kept = with_kernels(&with_key_group(&cube, 4), KernelSet::NONE);
    assert_eq!(kept.kernels().key_group(), 4, "choosing a kernel set keeps the group");
}

#[test]
fn attention_ops_of_both_kinds_in_one_run_share_the_batch_tables_of_their_kind() {
    // The tables a launch reads are uploaded once a run for each kind (a query per token, a
    // query per sequence): three ops, the third reading the first kind's again.
    let (heads, head_dim) = (2, 8);
    let w = heads * head_dim;
    let mut g = GraphBuilder::new();
    let input = |g: &mut GraphBuilder, name: &str| {
        let table = g.weight(name, &[VOCAB, w]);
        g.op(Shape::tokens(w), |out| Op::Embed { table, scale: 1.0, out })
    };
    let (q, k, v) = (input(&mut g, "q"), input(&mut g, "k"), input(&mut g, "v"));
    let (scale, window) = (0.5, None);
    let a = g.op(Shape::tokens(w), |out| Op::Attention {
        q,
        k,
        v,
        heads,
        kv_heads: heads,
        head_dim,
        scale,
        window,
        causal: false,
        position_bias: None,
        out,
    });
    let first = g.op(Shape::seqs(w), |out| Op::Pool { x: a, mode: PoolMode::Cls, out });
    let q = first;
    let b = g.op(Shape::seqs(w), |out| Op::Attention {
        q,
        k,
        v,
        heads,
        kv_heads: heads,
        head_dim,
        scale,
        window,
        causal: false,
        position_bias: None,
        out,
    });
    let q = a;
    let c = g.op(Shape::tokens(w), |out| Op::Attention {
        q,
        k,
        v,
        heads,
        kv_heads: heads,
        head_dim,
        scale,
        window,
        causal: false,
        position_bias: None,
        out,
    });
    g.output("per sequence", b);
    g.output("per token", c);
    let graph = g.finish().expect("a valid graph");
    let cube = device(KernelSet::ALL);
    let kernels = cube.kernels().clone();
    check(cube, &graph, &LENS, "three attention ops");
    assert_eq!(kernels.launched().attention, 3);
}

#[test]
fn ragged_attention_runs_in_half_precision_with_f32_arithmetic() {
    // llvmpipe through Vulkan, where CI runs this, has f16.
    for dtype in half_dtypes() {
        for (heads, head_dim, window) in [(2, 8, None), (3, 64, Some(5)), (1, 256, None)] {
            let cube = device(KernelSet::ALL);
            let kernels = cube.kernels().clone();
            let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("a listed dtype");
            let what = format!("{dtype} {heads}x{head_dim} window {window:?}");
            let graph = attention(heads, head_dim, window);
            check_within(cube, &graph, &LENS, &what, tolerance(dtype));
            assert_eq!(
                kernels.launched(),
                Launched { attention: 1, ..Launched::default() },
                "{what}"
            );
        }
    }
}

#[test]
fn attention_wider_than_the_kernel_takes_goes_to_the_generic_path() {
    let cube = device(KernelSet::ALL);
    let kernels = cube.kernels().clone();
    let wide = attention(1, 264, Some(3));
    if kernels.tf32() {
        // Burn's attention here would compute in TF32: refused while the kernel is chosen.
        let e = run_both(cube, &wide, &[40, 3]).map(|_| ()).expect_err("refused in f32");
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("heads 264 wide"), "{e}");
        assert!(e.to_string().contains("TF32"), "{e}");
        let generic = device(KernelSet::NONE);
        let tol = generic_tolerance(&generic);
        check_within(generic, &wide, &[40, 3], "1x264, Burn's attention", tol);
    } else {
        check(cube, &wide, &[40, 3], "1x264");
    }
    assert_eq!(kernels.launched().attention, 0);
}

#[test]
fn layer_norm_in_one_launch_matches_the_reference_in_every_dtype() {
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    for dtype in dtypes {
        // Widths under, at and over the 128 units of a cube, with and without a shift.
        // The norm reads a token lookup: it gathers the rows itself, unless the set says not.
        let widths = [(1, true), (7, false), (128, true), (384, true), (1000, false)];
        for ((width, beta), embed_norm) in widths.into_iter().flat_map(|w| [(w, false), (w, true)])
        {
            let cube = device(KernelSet { embed_norm, ..KernelSet::ALL });
            let kernels = cube.kernels().clone();
            let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("a listed dtype");
            let what = format!("{dtype} width {width} beta {beta} gathered {embed_norm}");
            check_within(cube, &layer_norm(width, beta), &[1, 64, 70], &what, tolerance(dtype));
            let gathered = usize::from(embed_norm);
            let want = Launched { norm: 1, embed_norm: gathered, ..Launched::default() };
            assert_eq!(kernels.launched(), want, "{what}");
        }
    }
}

/// An encoder's embeddings `width` wide and their LayerNorm: a token lookup, plus a position
/// lookup (its rows `offset` on) and a type lookup where asked, summed in that order; the sum
/// is an output of the graph too where `read`.
fn embeddings(width: usize, positions: Option<usize>, types: bool, read: bool) -> Graph {
    let mut g = GraphBuilder::new();
    let t = Shape::tokens(width);
    let table = g.weight("tokens", &[VOCAB, width]);
    let mut x = g.op(t, |out| Op::Embed { table, scale: 1.0, out });
    if let Some(offset) = positions {
        let table = g.weight("positions", &[200 + offset, width]);
        let p = g.op(t, |out| Op::PosEmbed { table, offset, out });
        x = g.op(t, |out| Op::Add { a: x, b: p, out });
    }
    if types {
        let table = g.weight("types", &[2, width]);
        let y = g.op(t, |out| Op::TypeEmbed { table, out });
        x = g.op(t, |out| Op::Add { a: y, b: x, out });
    }
    let (gamma, beta) = (g.weight("g", &[width]), Some(g.weight("b", &[width])));
    let y = g.op(t, |out| Op::LayerNorm { x, gamma, beta, eps: 1e-12, out });
    g.output("y", y);
    if read {
        g.output("sum", x);
    }
    g.finish().expect("a valid graph")
}

/// An encoder's embeddings in their LayerNorm's one launch: the norm gathers each token's row,
/// its position's (from any offset) and its type's and sums them as it reads them, in every
/// dtype, where the lookups and sums would take up to five launches; where the graph reads the
/// sum too, the lookups and sums run as ops. The outputs are the reference's in each case.
#[test]
fn an_encoders_embeddings_are_gathered_and_summed_by_their_layer_norm() {
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    let cases = [
        (Some(0), true, false, 1),
        (Some(2), false, false, 1),
        (None, true, false, 1),
        (Some(0), true, true, 0),
    ];
    for dtype in dtypes {
        for (i, &(positions, types, read, gathered)) in cases.iter().enumerate() {
            // Widths under, at and over the norm's 128 units a row.
            let width = [24, 128, 384, 40][i];
            let graph = embeddings(width, positions, types, read);
            let cube = device(KernelSet::MEASURED);
            let kernels = cube.kernels().clone();
            let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
            let what = format!("{dtype} width {width} positions {positions:?} types {types}");
            let (got, want) = run_both_typed(cube, &graph, &[1, 64, 150], types).expect("a run");
            assert_close(&got, &want, &what, tolerance(dtype));
            let want = Launched { norm: 1, embed_norm: gathered, ..Launched::default() };
            assert_eq!(kernels.launched(), want, "{what}");
        }
    }
    // An encoder's: one launch where there were six (three lookups, two sums and the norm).
    use switchyard_core::testkit::{EncoderSpec, bert_like};
    let spec = EncoderSpec { vocab: VOCAB, width: 64, heads: 4, ffn: 96, layers: 1, max_pos: 200 };
    let cube = device(KernelSet::MEASURED);
    let kernels = cube.kernels().clone();
    let (got, want) = run_both_typed(cube, &bert_like(spec), &[1, 40, 150], true).expect("runs");
    assert_close(&got, &want, "an encoder", tolerance(DType::F32));
    assert_eq!(kernels.launched().embed_norm, 1, "an encoder");
}

/// A linear layer from `k` to `n` columns with the epilogue `act`, `bias` and a residual, and a
/// LayerNorm of its output; the layer's output is an output of the graph too where `read`.
fn linear_then_norm(k: usize, n: usize, act: Act, bias: bool, read: bool) -> Graph {
    let mut g = GraphBuilder::new();
    let table = g.weight("x", &[VOCAB, k]);
    let x = g.op(Shape::tokens(k), |out| Op::Embed { table, scale: 1.0, out });
    let table = g.weight("r", &[VOCAB, n]);
    let residual = Some(g.op(Shape::tokens(n), |out| Op::Embed { table, scale: 1.0, out }));
    let weight = g.weight("w", &[n, k]);
    let bias = bias.then(|| g.weight("b", &[n]));
    let y = g.op(Shape::tokens(n), |out| Op::Linear { x, weight, bias, act, residual, out });
    let (gamma, beta) = (g.weight("g", &[n]), Some(g.weight("beta", &[n])));
    let z = g.op(Shape::tokens(n), |out| Op::LayerNorm { x: y, gamma, beta, eps: 1e-12, out });
    g.output("z", z);
    if read {
        g.output("y", y);
    }
    g.finish().expect("a valid graph")
}

/// A residual block's add and norm in one launch: the epilogue of a linear layer that only a
/// LayerNorm reads is applied by that norm, for every activation, with and without a bias, in
/// every dtype; where the graph reads the layer's output too, or the set leaves the epilogue
/// out of the norm, the layer applies its own. The outputs are the reference's in each case.
#[test]
fn a_linear_layers_epilogue_runs_in_the_layer_norm_that_alone_reads_it() {
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    let on = KernelSet::MEASURED;
    let off = KernelSet { norm_epilogue: false, ..on };
    for dtype in dtypes {
        for (i, &act) in ACTS.iter().enumerate() {
            // Widths under, at and over the norm's 128 units a row.
            let (k, n) = [(24, 7), (40, 128), (16, 384), (8, 1000)][i % 4];
            for (set, bias, read) in [(on, true, false), (on, i % 2 == 0, true), (off, true, false)]
            {
                let cube = device(set);
                let kernels = cube.kernels().clone();
                let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
                let what = format!("{dtype} {act:?} [{k}, {n}] bias {bias} read {read} {set:?}");
                let graph = linear_then_norm(k, n, act, bias, read);
                check_within(cube, &graph, &[1, 64, 70], &what, tolerance(dtype));
                let folded = usize::from(set.norm_epilogue && !read);
                let want =
                    Launched { epilogue: 1, norm: 1, norm_epilogue: folded, ..Default::default() };
                assert_eq!(kernels.launched(), want, "{what}");
            }
        }
    }
}

/// An encoder's residual blocks each end in one launch for the add and the norm: two a layer.
#[test]
fn an_encoders_residual_adds_run_in_its_layer_norms() {
    use switchyard_core::testkit::{EncoderSpec, bert_like};
    let spec = EncoderSpec { vocab: VOCAB, width: 64, heads: 4, ffn: 96, layers: 2, max_pos: 200 };
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    for dtype in dtypes {
        let cube = device(KernelSet::MEASURED);
        let kernels = cube.kernels().clone();
        let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
        check_within(cube, &bert_like(spec), &[1, 40, 150], &format!("{dtype}"), tolerance(dtype));
        // The embeddings' norm has no linear layer before it.
        let launched = kernels.launched();
        assert_eq!((launched.norm, launched.norm_epilogue), (2 * spec.layers + 1, 2 * spec.layers));
    }
}

/// Token rows of `width` pooled by `mode`, then L2-normalised where `normalize`.
fn pooling(width: usize, mode: PoolMode, normalize: bool) -> Graph {
    switchyard_core::testkit::pooled(VOCAB, width, mode, normalize)
}

#[test]
fn pooling_and_l2_in_one_launch_each_match_the_reference_in_every_mode_and_dtype() {
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    let modes = [PoolMode::Mean, PoolMode::Max, PoolMode::Cls, PoolMode::Last];
    for dtype in dtypes {
        for (i, mode) in modes.into_iter().enumerate() {
            // Widths under, at and over the 64 columns of a cube and the 128 units of the L2
            // kernel's; sequences of one row, and longer than a cube's width. The mean alone,
            // whose scale a normalisation after it would hide.
            let (width, normalize) = [(64, false), (65, true), (384, true), (1, false)][i];
            let cube = device(KernelSet::ALL);
            let kernels = cube.kernels().clone();
            let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("a listed dtype");
            let what = format!("{dtype} {mode:?} width {width} normalised {normalize}");
            let graph = pooling(width, mode, normalize);
            check_within(cube, &graph, &[1, 64, 70, 300], &what, tolerance(dtype));
            let pool = 1 + usize::from(normalize);
            assert_eq!(kernels.launched(), Launched { pool, ..Launched::default() }, "{what}");
        }
    }
}

#[test]
fn fused_linear_matches_the_reference_for_every_epilogue() {
    for (i, act) in ACTS.into_iter().enumerate() {
        for (bias, residual) in [(false, false), (true, false), (false, true), (true, true)] {
            // Widths off the 64-wide blocks and the 16-deep steps, cycling with the case.
            let (k, n) = [(1, 1), (17, 65), (100, 63), (300, 130)][(i + 2 * usize::from(bias)) % 4];
            let cube = device(KernelSet::ALL);
            let kernels = cube.kernels().clone();
            let what = format!("{act:?} bias {bias} residual {residual}, {k} -> {n}");
            check(cube, &linear(k, n, act, bias, residual), &[1, 64, 70], &what);
            assert_eq!(kernels.launched(), Launched { linear: 1, ..Launched::default() }, "{what}");
        }
    }
}

#[test]
fn burns_matmul_with_our_epilogue_matches_the_reference_in_every_dtype() {
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    let only = KernelSet { epilogue: true, ..KernelSet::NONE };
    for dtype in dtypes {
        for (i, act) in ACTS.into_iter().enumerate() {
            let (bias, residual) = [(true, false), (false, true), (true, true)][i % 3];
            let (k, n) = [(17, 65), (100, 63), (300, 130)][i % 3];
            let cube = device(only);
            // Burn's matmul: in f32 on a TF32 device, TF32 products.
            let tol = if dtype == DType::F32 { generic_tolerance(&cube) } else { tolerance(dtype) };
            let kernels = cube.kernels().clone();
            let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("a listed dtype");
            let what = format!("{dtype} {act:?} bias {bias} residual {residual}, {k} -> {n}");
            check_within(cube, &linear(k, n, act, bias, residual), &[1, 64, 70], &what, tol);
            assert_eq!(
                kernels.launched(),
                Launched { epilogue: 1, ..Launched::default() },
                "{what}"
            );
        }
    }
    // With nothing to apply, Burn's matmul alone is the whole layer.
    let cube = device(only);
    let kernels = cube.kernels().clone();
    let tol = generic_tolerance(&cube);
    check_within(cube, &linear(17, 65, Act::Identity, false, false), &[3], "bare matmul", tol);
    assert_eq!(kernels.launched(), Launched::default());
}

#[test]
fn a_deep_gemm_over_many_k_steps_matches_the_reference() {
    let cube = device(KernelSet::ALL);
    let kernels = cube.kernels().clone();
    check(cube, &linear(1536, 384, Act::Identity, true, true), &[100, 29], "1536 -> 384");
    assert_eq!(kernels.launched().linear, 1);
}

#[test]
fn with_no_kernels_every_op_runs_the_generic_lowering() {
    let cases = [
        (attention(2, 8, Some(5)), &LENS[..], "attention"),
        (linear(17, 65, Act::Gelu, true, true), &[3, 9][..], "linear"),
        (layer_norm(384, true), &[3, 9][..], "layer norm"),
        (pooling(384, PoolMode::Mean, true), &[3, 9][..], "pooling"),
    ];
    for (graph, lens, what) in cases {
        let cube = device(KernelSet::NONE);
        let kernels = cube.kernels().clone();
        let tol = generic_tolerance(&cube);
        check_within(cube, &graph, lens, what, tol);
        assert_eq!(kernels.launched(), Launched::default(), "{what}");
    }
}

#[test]
fn long_sequences_run_whole() {
    // Mesa's llvmpipe ends a shader loop after 65535 iterations: a kernel that loops over
    // `head_dim` per key stops early past about 32768 / head_dim keys, silently.
    for (heads, head_dim, len) in [(1, 64, 1100), (1, 128, 600)] {
        let cube = device(KernelSet::ALL);
        let kernels = cube.kernels().clone();
        let what = format!("{heads}x{head_dim}, {len} tokens");
        check(cube, &attention(heads, head_dim, None), &[len], &what);
        assert_eq!(kernels.launched().attention, 1, "{what}");
    }
    let cube = device(KernelSet::ALL);
    check(cube, &linear(4096, 8, Act::Identity, false, false), &[3], "4096 -> 8");
}

#[test]
fn a_new_device_uses_the_kernels_measured_to_win_or_those_that_keep_f32_exact() {
    let cube = common::open().expect("the device under test");
    let kernels = cube.kernels();
    let want = if kernels.tf32() { KernelSet::ALL } else { KernelSet::MEASURED };
    assert_eq!(kernels.set(), want, "TF32 in Burn's ops: {}", kernels.tf32());
    assert_eq!(KernelSet::MEASURED, KernelSet { linear: false, ..KernelSet::ALL });
    // Choosing other kernels keeps what the device is.
    assert_eq!(with_kernels(&cube, KernelSet::NONE).kernels().tf32(), kernels.tf32());
}

#[cfg(feature = "wgpu")]
#[test]
fn a_software_adapter_computes_f32_products_in_f32() {
    let adapter = switchyard_cube::wgpu::adapters().into_iter().next().expect("a wgpu adapter");
    if adapter.kind == "Cpu" && common::name() == "wgpu:0" {
        assert!(!common::open().expect("the device under test").kernels().tf32());
    }
}

/// The half-precision tests above loop over the dtypes the device has; on the device CI runs
/// them on, llvmpipe through Vulkan, that must include f16, or they would test nothing.
#[cfg(feature = "wgpu")]
#[test]
fn llvmpipe_through_vulkan_has_f16_so_the_half_precision_tests_run() {
    let adapter = switchyard_cube::wgpu::adapters().into_iter().next().expect("a wgpu adapter");
    if adapter.kind == "Cpu" && adapter.api == "Vulkan" && common::name() == "wgpu:0" {
        assert!(half_dtypes().contains(&DType::F16), "{adapter:?}");
    }
}

#[test]
fn a_named_routine_computes_every_linear_layer_the_epilogue_takes() {
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    // The routines without tensor cores run on every device, in f32 exactly; the tile-DSL one
    // on a batch padded to a granule (135 tokens here, 256 padded).
    for routine in [Routine::SimpleUnit, Routine::DoubleUnit, Routine::TiledCpuGemm] {
        for dtype in &dtypes {
            for (act, bias, residual) in [(Act::Gelu, true, false), (Act::Identity, false, false)] {
                let cube = with_matmul(&device(KernelSet::MEASURED), Matmul::Routine(routine));
                let kernels = cube.kernels().clone();
                let cube = switchyard_core::Backend::with_dtype(cube, *dtype).expect("listed");
                let what = format!("{} {dtype} {act:?} bias {bias}", routine.name());
                let graph = linear(100, 63, act, bias, residual);
                check_within(cube, &graph, &[1, 64, 70], &what, tolerance(*dtype));
                // The bare layer too: Burn's matmul would have taken it whole.
                assert_eq!(kernels.launched().epilogue, 1, "{what}");
                assert_eq!(kernels.matmul(), Matmul::Routine(routine));
            }
        }
    }
}

/// A routine that takes only whole tiles of rows gets a batch padded to them, so that no
/// product copies its input to padded rows; where the bucket has no room for the padding, each
/// product pads its own input.
#[test]
fn a_routine_of_whole_row_tiles_runs_the_batch_padded_rather_than_copy_each_input() {
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    let graph = linear(100, 63, Act::Gelu, true, false);
    // 135 tokens in 3 sequences: 256 in 4 padded, which the first table has room for.
    let lens = [1, 64, 70];
    for dtype in dtypes {
        for (buckets, copies) in [("default 2048 16 2048\n", 0), ("default 135 3 135\n", 1)] {
            let routine = Matmul::Routine(Routine::TiledCpuGemm);
            let cube = with_matmul(&device(KernelSet::MEASURED), routine);
            let kernels = cube.kernels().clone();
            let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
            let what = format!("{dtype}, buckets {}", buckets.trim());
            let (got, want) = run_both_in(cube, &graph, &lens, false, buckets).expect("a run");
            assert_close(&got, &want, &what, tolerance(dtype));
            let launched = kernels.launched();
            assert_eq!((launched.epilogue, launched.padded), (1, copies), "{what}");
        }
    }
}

#[test]
fn the_tuned_matmul_times_the_routines_once_a_shape_and_runs_the_fastest() {
    use switchyard_cube::tuned_choices;
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    // A depth no other test uses, so that the choices below are this test's.
    let (k, n) = (101, 63);
    let mine = |dtype: DType| {
        let dtype = format!("{:?}", dtype).to_uppercase();
        let mut c = tuned_choices();
        c.retain(|c| c.shape.contains(&format!("x [{k}, {n}]")) && c.shape.ends_with(&dtype));
        c
    };
    for dtype in dtypes {
        let graph = linear(k, n, Act::Gelu, true, false);
        let what = format!("tuned, {dtype}");
        // A run of the layer over sequences of `lens` with the tuned matmul, checked.
        let run = |lens: &[usize]| {
            let cube = with_matmul(&device(KernelSet::MEASURED), Matmul::Tuned);
            let kernels = cube.kernels().clone();
            let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
            check_within(cube, &graph, lens, &what, tolerance(dtype));
            assert_eq!(kernels.launched().epilogue, 1, "{what}");
        };
        // 135 rows: tuned for 256.
        run(&[1, 64, 70]);
        let first = mine(dtype);
        assert_eq!(first.len(), 1, "{what}: one choice for the shape: {first:?}");
        let choice = &first[0];
        assert!(choice.shape.starts_with(&format!("[256, {k}]")), "{choice:?}");
        assert!(choice.matmul != Matmul::Tuned && choice.took > std::time::Duration::ZERO);
        // What it chose runs here (on llvmpipe, none of the tensor-core routines).
        let chosen = with_matmul(&device(KernelSet::MEASURED), choice.matmul);
        let chosen = switchyard_core::Backend::with_dtype(chosen, dtype).expect("listed");
        check_within(chosen, &graph, &[1, 64, 70], &what, tolerance(dtype));
        // 130 rows: the same shape, run by the same choice, not tuned again.
        run(&[40, 90]);
        assert_eq!(mine(dtype), first, "{what}");
        // 300 rows: another shape, tuned in its turn.
        run(&[150, 150]);
        let shapes: Vec<String> = mine(dtype).into_iter().map(|c| c.shape).collect();
        assert_eq!(shapes.len(), 2, "{what}: {shapes:?}");
        assert!(shapes[1].starts_with(&format!("[512, {k}]")), "{shapes:?}");
    }
}

/// A tensor-core routine of each family: cubek's multi-level one, and its tile-DSL one (on rows
/// padded to a granule, in a layer whose widths its stages divide).
#[test]
fn a_tensor_core_routine_runs_where_the_device_has_them_and_is_a_clear_error_where_not() {
    for (routine, k, n) in [(Routine::SimpleCmma, 100, 63), (Routine::TiledCmma, 128, 64)] {
        let cube = common::open().expect("the device under test");
        // `auto` is f32 exactly where the device has no cooperative matrix products in f16.
        let dtype = switchyard_core::Backend::caps(&cube).auto;
        let cube = with_matmul(&cube, Matmul::Routine(routine));
        let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("its own dtype");
        let graph = linear(k, n, Act::Identity, true, true);
        let name = routine.name();
        if dtype != DType::F32 {
            check_within(cube, &graph, &[1, 64, 70], name, tolerance(dtype));
            continue;
        }
        match run_both(cube, &graph, &[1, 64, 70]) {
            Err(Error::Unsupported(e)) => {
                assert!(e.contains(name) && e.to_lowercase().contains("unavailable"), "{e}");
                assert_eq!(e, e.trim_end(), "no trailing blank lines");
            }
            other => panic!("{name}: expected Unsupported, got {:?}", other.map(|_| "outputs")),
        }
    }
}

/// cuBLAS's two choices: the host waiting around each product, and the handover on the device.
const CUBLAS: [Matmul; 2] = [Matmul::Cublas, Matmul::CublasQueued];

/// On a CUDA device (`SWITCHYARD_CUBE_DEVICE=cuda:N`), cuBLAS computes every linear layer the
/// epilogue takes, alone and in an encoder whose joined projections attention reads in place, in
/// each dtype within its bound (f32 exactly: cuBLAS's f32 sums, no TF32), ordered against
/// CubeCL's kernels either way; elsewhere a run with it is a clear error, not a silent fall back
/// to Burn's matmul.
#[test]
fn cublas_computes_the_linear_layers_on_cuda_and_is_a_clear_error_elsewhere() {
    use switchyard_core::testkit::{EncoderSpec, bert_like};
    let spec = EncoderSpec { vocab: VOCAB, width: 64, heads: 4, ffn: 96, layers: 2, max_pos: 200 };
    let graphs = [
        ("a layer", linear(100, 63, Act::Gelu, true, true), 1),
        ("an encoder", bert_like(spec), spec.layers * 4 + 1),
    ];
    let on_cuda = common::name().starts_with("cuda:");
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    for (dtype, matmul) in dtypes.into_iter().flat_map(|d| CUBLAS.map(|m| (d, m))) {
        for (what, graph, products) in &graphs {
            let make = || with_matmul(&device(KernelSet::MEASURED), matmul);
            let cube = make();
            let kernels = cube.kernels().clone();
            let in_dtype =
                |cube| switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
            let cube = in_dtype(cube);
            let what = format!("{matmul}, {what}, {dtype}");
            if on_cuda {
                check_within(cube, graph, &[1, 64, 70], &what, tolerance(dtype));
                assert_eq!(kernels.launched().epilogue, *products, "{what}");
                // Two host threads (two CubeCL streams) queueing products on the device at
                // once, their flags taken in turn from the one handle.
                std::thread::scope(|s| {
                    for lens in [[3, 90, 41], [77, 2, 120]] {
                        let (cube, what) = (in_dtype(make()), format!("{what}, two threads"));
                        s.spawn(move || check_within(cube, graph, &lens, &what, tolerance(dtype)));
                    }
                });
                continue;
            }
            match run_both(cube, graph, &[1, 64, 70]) {
                Err(Error::Unsupported(e)) => {
                    assert!(e.contains("cuBLAS") && e.contains("CUDA devices"), "{what}: {e}");
                }
                other => panic!("{what}: expected Unsupported, got {:?}", other.map(|_| "outputs")),
            }
        }
    }
}

#[test]
fn a_layers_projections_run_as_one_product_whose_shares_attention_reads() {
    use switchyard_core::testkit::{EncoderSpec, bert_like};
    // Heads of 16 over 64 columns: in f32, each share starts 256 bytes into the joined product,
    // where wgpu places a buffer's views, so attention reads the shares in place.
    let spec = EncoderSpec { vocab: VOCAB, width: 64, heads: 4, ffn: 96, layers: 2, max_pos: 200 };
    let graph = bert_like(spec);
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    for dtype in dtypes {
        for (joined, products) in [(true, 4), (false, 6)] {
            let cube = device(KernelSet::MEASURED).with_joined_linears(joined);
            let kernels = cube.kernels().clone();
            let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
            let what = format!("{dtype}, projections joined: {joined}");
            check_within(cube, &graph, &[1, 40, 150], &what, tolerance(dtype));
            // Each layer's products, and the pooler's, each with its epilogue in one launch.
            let launched = kernels.launched();
            assert_eq!(launched.epilogue, spec.layers * products + 1, "{what}");
            assert_eq!(launched.attention, spec.layers, "{what}");
        }
    }
}

#[test]
fn burns_matmul_is_the_default_routine() {
    let cube = common::open().expect("the device under test");
    assert_eq!(cube.kernels().matmul(), Matmul::Burn);
    let named = with_matmul(&cube, Matmul::Routine(Routine::DoubleUnit));
    assert_eq!(with_kernels(&named, KernelSet::NONE).kernels().matmul(), named.kernels().matmul());
}

/// A profile of a run the device failed is an error, as the run is. On llvmpipe a table larger
/// than one buffer may hold fails when the run executes, which wgpu reports only when a result is
/// read back, not when the device is synchronised: a profile used to return times for it.
#[test]
fn a_profile_fails_where_the_run_fails() {
    use switchyard_core::{Backend, Bucket};
    let mut g = GraphBuilder::new();
    let table = g.weight("x", &[30_522, 1536]);
    let x = g.op(Shape::tokens(1536), |out| Op::Embed { table, scale: 1.0, out });
    g.output("x", x);
    let g = g.finish().expect("a valid graph");
    let cube = common::open().expect("the device under test");
    let weights = random_weights(&g, 1);
    let w = cube.upload(&weights.tensors(), &g).expect("an upload");
    let plan = cube.lower(&w, &g, Bucket::new(64, 4, 64)).expect("a plan");
    let mut state = cube.state(&plan).expect("a run state");
    let mut batch = BatchBuf::new();
    push_random_seq(&mut batch, &mut Rng::new(3), 9, VOCAB, false);
    let profile = cube.profile(&plan, &mut state, &batch.batch()).map(|t| t.len());
    let run = cube.run(&plan, &mut state, &batch.batch(), &mut Outputs::new());
    assert_eq!(profile.is_err(), run.is_err(), "profile {profile:?}, run {run:?}");
    #[cfg(feature = "wgpu")]
    {
        let adapter = switchyard_cube::wgpu::adapters().into_iter().next().expect("an adapter");
        if adapter.kind == "Cpu" && common::name() == "wgpu:0" {
            let e = profile.expect_err(
                "llvmpipe holds no 187 MB buffer (if it now does, this test needs a larger table)",
            );
            assert!(e.to_string().contains("reading a result back failed"), "{e}");
        }
    }
}

/// Once a run of a bucket's largest batch has warmed the device, runs of that bucket ask the
/// driver for no memory: the same batch again leaves the device's memory as it was, and other
/// batches reuse the tensor pools' pages, every run's tensors freed at its end (the runtime's
/// cache of launch uniforms may grow by a new shape's; it is bounded). The thread's own stream,
/// as the test's neighbours run on the same device.
#[test]
fn a_warm_run_takes_no_new_device_memory_and_keeps_nothing() {
    use switchyard_core::testkit::{EncoderSpec, bert_like};
    use switchyard_cube::thread_memory;
    let spec = EncoderSpec { vocab: VOCAB, width: 64, heads: 4, ffn: 96, layers: 2, max_pos: 200 };
    let graph = bert_like(spec);
    let weights = random_weights(&graph, 7);
    let tensors = weights.tensors();
    let batch = |lens: &[usize]| {
        let (mut r, mut batch) = (Rng::new(3), BatchBuf::new());
        for &len in lens {
            push_random_seq(&mut batch, &mut r, len, VOCAB, false);
        }
        batch
    };
    let largest = batch(&[200, 200, 200, 200, 200]);
    let others = [batch(&[3, 5]), batch(&[1, 40, 150]), batch(&[7]), batch(&[150, 40, 1])];
    let mut dtypes = vec![DType::F32];
    dtypes.extend(half_dtypes());
    for dtype in dtypes {
        let cube = common::open().expect("the device under test");
        let cube = switchyard_core::Backend::with_dtype(cube, dtype).expect("listed");
        let probe = cube.with_kernels(cube.kernels().clone());
        let buckets: Buckets = "default 1024 8 1024\n".parse().expect("a valid table");
        let mut ex =
            Executor::new(cube, &tensors, graph.clone(), "default", buckets).expect("an upload");
        let mut out = Outputs::new();
        let mut run = |b: &BatchBuf| ex.run(LaneId::MAIN, &b.batch(), &mut out).expect("a run");
        run(&largest);
        let warm = thread_memory(&probe);
        run(&largest);
        assert_eq!(thread_memory(&probe), warm, "{dtype}: the same batch again");
        for (i, b) in others.iter().enumerate() {
            run(b);
            let now = thread_memory(&probe);
            assert_eq!(now.tensors, warm.tensors, "{dtype}: batch {i} after the largest");
        }
    }
}
