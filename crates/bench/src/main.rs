//! `switchyard-bench`: Switchyard's benchmarks, each beside a peer in the same run, as ratios.
//!
//! Run it through `cargo xtask bench` (which builds it in release mode). Each figure is the
//! median of several timed repetitions after a warm-up; the machine's load moves absolute
//! numbers, so compare the ratios, which are measured side by side.

// A benchmark reports to its user on stdout.
#![allow(clippy::print_stdout)]

mod args;
mod corpus;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod host;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod kernel_times;
mod serve;
mod train;
mod weights;

use std::time::{Duration, Instant};

use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{
    Act, Backend, BatchBuf, Bucket, Buckets, DType, Executor, Graph, GraphBuilder, LaneId, Op,
    Outputs, Shape,
};
use switchyard_dispatch::flex::kernels::{Isa8, Isa16};
use switchyard_dispatch::{Device, Dispatch};

/// The backend on the device named `name`, which this build and machine have.
fn open(name: &str) -> Dispatch {
    let device: Device = name.parse().expect("a device name");
    Dispatch::new(&device).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// flex with its linear layers in `dtype` (bf16 or int8).
fn flex_in(dtype: DType) -> Dispatch {
    open("flex").with_dtype(dtype).unwrap_or_else(|e| panic!("flex in {dtype}: {e}"))
}

/// The int8 kernels this CPU has besides its best: what a CPU with only those instructions runs
/// (plain AVX2, for one, on an AMD Zen 2 or Zen 3).
fn other_int8_kernels() -> Vec<Isa8> {
    Isa8::available().into_iter().skip(1).collect()
}

/// flex in int8 as a CPU whose best int8 kernel is `isa8` runs it, with that CPU's f32 and bf16
/// kernels too, so attention and the row ops are those it would run.
fn flex_int8_on(isa8: Isa8) -> switchyard_dispatch::flex::FlexBackend {
    switchyard_dispatch::flex::flex()
        .as_cpu_of(isa8)
        .and_then(|f| f.with_dtype(DType::I8))
        .unwrap_or_else(|e| panic!("flex int8 as a CPU of {isa8:?}: {e}"))
}

/// flex's bf16 on its AVX-512 BF16 kernel, where this CPU's best bf16 kernel is AMX: to set
/// beside it.
fn flex_bf16_without_amx() -> Option<switchyard_dispatch::flex::FlexBackend> {
    let flex = switchyard_dispatch::flex::flex();
    (flex.isa16() == Isa16::AmxBf16).then(|| {
        let flex = flex.with_isa16(Isa16::Avx512Bf16).and_then(|f| f.with_dtype(DType::Bf16));
        flex.unwrap_or_else(|e| panic!("flex bf16 on AVX-512 BF16: {e}"))
    })
}

/// Median wall time of `reps` calls of `f`, after `warm` untimed calls.
fn median(warm: usize, reps: usize, mut f: impl FnMut()) -> Duration {
    for _ in 0..warm {
        f();
    }
    let times: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    middle(times)
}

/// The median of `times` (the upper one of an even count); at least one time.
fn middle(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The seed of the bench graphs' random weights.
const WEIGHTS_SEED: u64 = 1;

fn executor<B: Backend>(be: B, g: &Graph, bucket: Bucket) -> Executor<B> {
    let weights = testkit::random_weights(g, WEIGHTS_SEED);
    let buckets = Buckets::single("bench", &[bucket]).expect("a valid bucket");
    Executor::new(be, &weights.tensors(), g.clone(), "bench", buckets)
        .expect("the bench graph uploads")
}

/// The bucket that holds `batch` exactly.
fn bucket_for(batch: &BatchBuf) -> Bucket {
    Bucket::new(batch.tokens(), batch.seqs(), batch.batch().markers().max(1))
}

/// The rows a cube device's products pad to where their routine takes only whole tiles
/// (`switchyard_cube::ROW_GRANULE`), which a run pads the batch to where its bucket has room.
const PAD_ROWS: usize = 128;

/// The bucket a timed run of `batch` runs in: its sizes with room for its tokens rounded up
/// to [`PAD_ROWS`] in one more sequence, as the default buckets leave a batch room, so that a
/// backend that pads the batch does (where the products pad their own rows instead, a run
/// would time copies that users' runs do not make).
fn bucket_with_room(batch: &BatchBuf) -> Bucket {
    let exact = bucket_for(batch);
    Bucket::new(exact.tokens.next_multiple_of(PAD_ROWS), exact.seqs + 1, exact.markers)
}

/// An executor of `g` on `be` whose one bucket holds `batch`, with room to pad it
/// ([`bucket_with_room`]).
fn executor_for<B: Backend>(be: B, g: &Graph, batch: &BatchBuf) -> Executor<B> {
    executor(be, g, bucket_with_room(batch))
}

fn time_plan<B: Backend>(be: B, g: &Graph, batch: &BatchBuf, reps: usize) -> Duration {
    let mut ex = executor_for(be, g, batch);
    let mut out = Outputs::new();
    median(2, reps, || {
        ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("the bench batch runs");
    })
}

/// The largest difference between any output value of `g` on `batch` computed by `a` and by
/// `b` (one run each, the same weights), over the largest magnitude of `b`'s: how far a new
/// kernel strays from the one it would replace, on the device it is measured on.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn largest_difference<B: Backend>(a: B, b: B, g: &Graph, batch: &BatchBuf) -> f32 {
    let run = |be: B| {
        let mut out = Outputs::new();
        executor_for(be, g, batch).run(LaneId::MAIN, &batch.batch(), &mut out).expect("it runs");
        out
    };
    let (a, b) = (run(a), run(b));
    let values = |o: &Outputs| o.mats().iter().flat_map(|m| m.data.clone()).collect::<Vec<f32>>();
    let (a, b) = (values(&a), values(&b));
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    a.iter().zip(&b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// The median times of graphs `a` and `b` (over the same weights, lanes of one executor), run
/// in turn `reps` times so that a machine's changing speed reaches both alike.
fn time_lanes<B: Backend>(
    be: B,
    a: &Graph,
    b: &Graph,
    batch: &BatchBuf,
    reps: usize,
) -> (Duration, Duration) {
    let bucket = bucket_for(batch);
    let mut ex = executor(be, a, bucket);
    let lane = ex.add_graph(b.clone(), "bench").expect("both graphs read the same weights");
    let mut out = Outputs::new();
    let mut times = [Vec::new(), Vec::new()];
    for i in 0..reps + 2 {
        for (l, t) in [LaneId::MAIN, lane].into_iter().zip(&mut times) {
            let start = Instant::now();
            ex.run(l, &batch.batch(), &mut out).expect("the bench batch runs");
            if i >= 2 {
                t.push(start.elapsed());
            }
        }
    }
    let [mut a, mut b] = times;
    a.sort();
    b.sort();
    (a[reps / 2], b[reps / 2])
}

/// `[m, k] x [k, n]` inside a plan: an embedding lookup of `m` rows feeding one linear layer.
/// The same plan without the linear layer is timed too and subtracted.
fn gemm_graphs(m: usize, k: usize, n: usize) -> (Graph, Graph) {
    let mut g = GraphBuilder::new();
    let table = g.weight("emb", &[m, k]);
    let w = g.weight("w", &[n, k]);
    let x = g.op(Shape::tokens(k), |out| Op::Embed { table, scale: 1.0, out });
    let mut base = g.clone();
    base.output("x", x);
    let y = g.op(Shape::tokens(n), |out| Op::Linear {
        x,
        weight: w,
        bias: None,
        act: Act::Identity,
        residual: None,
        out,
    });
    g.output("y", y);
    (g.finish().expect("valid"), base.finish().expect("valid"))
}

fn gemm_direct(m: usize, k: usize, n: usize, reps: usize) -> Duration {
    let mut r = Rng::new(3);
    let a: Vec<f32> = (0..m * k).map(|_| r.unit()).collect();
    let b: Vec<f32> = (0..k * n).map(|_| r.unit()).collect();
    let mut c = vec![0.0f32; m * n];
    let threads = rayon::current_num_threads();
    median(2, reps, || {
        // SAFETY: `a` is m x k, `b` is k x n and `c` is m x n, all row-major and alive for the
        // call; the strides below describe exactly those layouts.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                k as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(threads),
            );
        }
        std::hint::black_box(&mut c);
    })
}

fn gflops(flops: f64, t: Duration) -> f64 {
    flops / t.as_secs_f64() / 1e9
}

fn bench_gemm(reps: usize) {
    let (m, k, n) = (512, 384, 1536);
    let flops = 2.0 * (m * k * n) as f64;
    let (g, base) = gemm_graphs(m, k, n);
    let mut batch = BatchBuf::new();
    for s in 0..4 {
        let ids: Vec<u32> = (s * 128..(s + 1) * 128).map(|i| i as u32).collect();
        batch.push(&ids, None, &[]).expect("a valid batch");
    }
    let direct = gemm_direct(m, k, n, reps);
    println!(
        "GEMM [{m}, {k}] x [{k}, {n}], {} threads, median of {reps}",
        rayon::current_num_threads()
    );
    println!("  {:<34} {:>9} {:>10} {:>8}", "", "time", "GFLOP/s", "ratio");
    println!(
        "  {:<34} {:>7.2}ms {:>10.1} {:>8.2}",
        "gemm 0.19 called directly",
        ms(direct),
        gflops(flops, direct),
        1.0
    );
    let row = |name: &str, plan: Duration, base: Duration| {
        let net = plan.saturating_sub(base).max(Duration::from_nanos(1));
        println!(
            "  {:<34} {:>7.2}ms {:>10.1} {:>8.2}   (whole plan {:.2}ms, of which lookup + read-back {:.2}ms)",
            format!("{name} plan, GEMM alone"),
            ms(net),
            gflops(flops, net),
            gflops(flops, net) / gflops(flops, direct),
            ms(plan),
            ms(base),
        );
    };
    for name in ["flex", "ndarray"] {
        row(
            name,
            time_plan(open(name), &g, &batch, reps),
            time_plan(open(name), &base, &batch, reps),
        );
    }
    for dtype in [DType::Bf16, DType::I8] {
        row(
            &format!("flex {dtype}"),
            time_plan(flex_in(dtype), &g, &batch, reps),
            time_plan(flex_in(dtype), &base, &batch, reps),
        );
    }
    if let Some(flex) = flex_bf16_without_amx() {
        let without = time_plan(flex_bf16_without_amx().expect("as above"), &base, &batch, reps);
        row("flex bf16 (no AMX)", time_plan(flex, &g, &batch, reps), without);
    }
    for isa8 in other_int8_kernels() {
        row(
            &format!("flex int8 (CPU of {isa8:?})"),
            time_plan(flex_int8_on(isa8), &g, &batch, reps),
            time_plan(flex_int8_on(isa8), &base, &batch, reps),
        );
    }
    row(
        "flex portable",
        time_plan(flex_portable(), &g, &batch, reps),
        time_plan(flex_portable(), &base, &batch, reps),
    );
}

/// flex in f32 as a CPU without AVX2 runs it: the kernels compiled for the build's target (on
/// x86, with no FMA).
fn flex_portable() -> switchyard_dispatch::flex::FlexBackend {
    let isa = switchyard_dispatch::flex::kernels::Isa::Portable;
    switchyard_dispatch::flex::flex().with_isa(isa).expect("portable code runs anywhere")
}

fn ms(t: Duration) -> f64 {
    t.as_secs_f64() * 1e3
}

fn bench_encoder(reps: usize) {
    let spec =
        EncoderSpec { vocab: 30522, width: 384, heads: 12, ffn: 1536, layers: 6, max_pos: 512 };
    let g = testkit::bert_like(spec);
    // A fixed ragged batch: 32 sequences of 11 to 120 tokens, as sentence embedding sees them.
    let batch = ragged(32, 11, 120, spec.vocab);
    let tokens = batch.tokens() as f64;
    println!();
    println!(
        "Encoder: 6 layers, 384 wide, 12 heads, FFN 1536 (all-MiniLM-L6-v2's shape), random weights;"
    );
    println!("  one batch of 32 sequences, {} tokens; median of {reps}", batch.tokens());
    println!("  {:<34} {:>9} {:>12} {:>8}", "", "time", "tokens/s", "ratio");
    let flex = time_plan(open("flex"), &g, &batch, reps);
    let burn_flex = time_plan(switchyard_dispatch::flex::burn_flex(), &g, &batch, reps);
    // Each layer's query, key and value projections as three products, not one.
    let apart = switchyard_dispatch::flex::burn_flex().with_joined_linears(false);
    let burn_flex_apart = time_plan(apart, &g, &batch, reps);
    let bf16 = time_plan(flex_in(DType::Bf16), &g, &batch, reps);
    let int8 = time_plan(flex_in(DType::I8), &g, &batch, reps);
    let nd = time_plan(open("ndarray"), &g, &batch, reps);
    let mut others: Vec<(String, Duration)> = other_int8_kernels()
        .into_iter()
        .map(|isa8| {
            (
                format!("flex int8 (CPU of {isa8:?})"),
                time_plan(flex_int8_on(isa8), &g, &batch, reps),
            )
        })
        .collect();
    if let Some(flex) = flex_bf16_without_amx() {
        others.insert(0, ("flex bf16 (no AMX)".into(), time_plan(flex, &g, &batch, reps)));
    }
    for (name, t) in [
        ("flex", flex),
        ("flex bf16", bf16),
        ("flex int8", int8),
        ("burn-flex (Burn's ops)", burn_flex),
        ("burn-flex, projections apart", burn_flex_apart),
        ("ndarray (peer)", nd),
    ] {
        encoder_row(name, t, tokens, nd);
    }
    for (name, t) in &others {
        encoder_row(name, *t, tokens, nd);
    }
    // f32 on such a CPU, beside its int8 above.
    encoder_row("flex portable", time_plan(flex_portable(), &g, &batch, reps), tokens, nd);
    println!("  (ratio: speed relative to ndarray; above 1 is faster)");
    // A cross-encoder or classifier reads only [CLS]: Switchyard computes its last layer for
    // that row alone. The same head over the whole last layer is the peer.
    let pairs = 3 * reps;
    let (whole, cls) = time_lanes(
        open("flex"),
        &testkit::bert_classifier(spec, false),
        &testkit::bert_classifier(spec, true),
        &batch,
        pairs,
    );
    println!("  The same encoder with a classifier on [CLS] (a cross-encoder), on flex;");
    println!("  median of {pairs}, the two taken in turn:");
    for (name, t) in [("last layer on every token", whole), ("last layer on [CLS] alone", cls)] {
        encoder_row(name, t, tokens, whole);
    }
    println!("  (ratio: speed relative to the whole last layer)");
    // One long document: a single sequence, whose heads are the only work attention has to
    // share among the threads.
    let doc = ragged(1, 512, 512, spec.vocab);
    println!("  One document of {} tokens; median of {reps}:", doc.tokens());
    let (nd, tokens) = (time_plan(open("ndarray"), &g, &doc, reps), doc.tokens() as f64);
    for (name, dtype) in
        [("flex", DType::F32), ("flex bf16", DType::Bf16), ("flex int8", DType::I8)]
    {
        encoder_row(name, time_plan(flex_in(dtype), &g, &doc, reps), tokens, nd);
    }
    encoder_row("ndarray (peer)", nd, tokens, nd);
    println!("  (ratio: speed relative to ndarray)");
}

/// One row of an encoder table: time, tokens a second, and speed relative to `peer`.
fn encoder_row(name: &str, t: Duration, tokens: f64, peer: Duration) {
    let rate = tokens / t.as_secs_f64();
    let ratio = peer.as_secs_f64() / t.as_secs_f64();
    println!("  {name:<34} {:>7.1}ms {rate:>12.0} {ratio:>8.2}", ms(t));
}

/// A fixed ragged batch of `seqs` sequences of `min` to `max` tokens.
fn ragged(seqs: usize, min: usize, max: usize, vocab: usize) -> BatchBuf {
    let mut r = Rng::new(7);
    let mut batch = BatchBuf::new();
    for _ in 0..seqs {
        let len = min + r.below(max - min + 1);
        testkit::push_random_seq(&mut batch, &mut r, len, vocab, false);
    }
    batch
}

/// The cube backend's devices this build and machine have, each with whether it is a software
/// emulation (Mesa's llvmpipe, a CPU), where only correctness-scale sizes are worth running.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpus() -> Vec<(Device, bool)> {
    let cube: Vec<Device> =
        Dispatch::available().into_iter().filter(|d| d.family().backend == "cube").collect();
    if cube.is_empty() {
        println!("(no GPU benchmarks: this machine has no device of this build's cube features)");
    }
    cube.into_iter()
        .filter_map(|d| match Dispatch::new(&d) {
            Ok(be) => Some((d, be.caps().kind == switchyard_core::DeviceKind::Cpu)),
            Err(e) => {
                println!("({d} not benchmarked: {e})");
                None
            }
        })
        .collect()
}

/// What `f` returns, or `None` after saying that `who` failed where `f` panics: one kernel set
/// that fails on a device does not cost the others' figures (a GPU lease is short).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn survived<T>(who: &str, f: impl FnOnce() -> T) -> Option<T> {
    let t = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    if t.is_err() {
        println!("  {who}: failed (the panic above says why)");
    }
    t.ok()
}

/// Each kind of op a profile saw, how many ops of it ran and their time in all.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
type OpKinds = Vec<(&'static str, usize, Duration)>;

/// Where a run of `g` on `batch` spends its time on the cube device `be`: each kind of op's
/// share, in the order the graph first runs it (the median of `reps` profiles, each synchronised
/// after every op, after two warm-ups), and the profile's whole time; an error where the plan
/// cannot run there.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn op_shares(
    be: &Dispatch,
    g: &Graph,
    batch: &BatchBuf,
    reps: usize,
) -> switchyard_core::Result<(OpKinds, Duration)> {
    let Dispatch::Cube { backend, .. } = be else { panic!("{} is not a cube device", be.device()) };
    let bucket = bucket_for(batch);
    let weights = testkit::random_weights(g, WEIGHTS_SEED);
    let w = backend.upload(&weights.tensors(), g)?;
    let plan = backend.lower(&w, g, bucket)?;
    let mut state = backend.state(&plan)?;
    let mut profile = || backend.profile(&plan, &mut state, &batch.batch());
    profile()?;
    profile()?;
    let runs = (0..reps).map(|_| profile()).collect::<switchyard_core::Result<Vec<_>>>()?;
    let mut kinds = OpKinds::new();
    for (i, op) in runs[0].iter().enumerate() {
        let mut times: Vec<Duration> = runs.iter().map(|r| r[i].time).collect();
        times.sort();
        let t = times[times.len() / 2];
        match kinds.iter_mut().find(|k| k.0 == op.op) {
            Some(k) => (k.1, k.2) = (k.1 + 1, k.2 + t),
            None => kinds.push((op.op, 1, t)),
        }
    }
    let whole = kinds.iter().map(|k| k.2).sum();
    Ok((kinds, whole))
}

/// The batches the GPU benchmarks time, each its name, shape and `ragged`'s sequences and length
/// range: on a software device a small batch of the MiniLM shape only; on a real GPU 32 and 256
/// sequences of the MiniLM shape and of bge-base's.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_batches(software: bool) -> Vec<(&'static str, EncoderSpec, (usize, usize, usize))> {
    let minilm =
        EncoderSpec { vocab: 30522, width: 384, heads: 12, ffn: 1536, layers: 6, max_pos: 512 };
    let bge_base =
        EncoderSpec { vocab: 30522, width: 768, heads: 12, ffn: 3072, layers: 12, max_pos: 512 };
    if software {
        return vec![("MiniLM shape", minilm, (4, 8, 24))];
    }
    vec![
        ("MiniLM shape", minilm, (32, 11, 120)),
        ("MiniLM shape", minilm, (256, 11, 120)),
        ("bge-base shape", bge_base, (32, 11, 120)),
        ("bge-base shape", bge_base, (256, 11, 120)),
    ]
}

/// The batch's fields in a `gpu` line, as `peers/gpu_peer.py` reads them.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_batch_id(what: &str, (seqs, min, max): (usize, usize, usize), batch: &BatchBuf) -> String {
    format!("{what}\t{seqs}\t{min}\t{max}\t{}", batch.tokens())
}

/// Our pooling kernels beside Burn's ops on `cube`, over sequences of the lengths of `batch`:
/// an embedder's mean and L2 normalisation `width` wide, and SPLADE's max over a 30522-wide
/// vocabulary, each with the gather of its token rows, in each float dtype the device has.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn bench_pooling(name: &str, cube: &Dispatch, width: usize, batch: &BatchBuf, reps: usize) {
    use switchyard_core::PoolMode;
    use switchyard_dispatch::cube::KernelSet;
    let caps = cube.caps();
    let ours = match cube {
        Dispatch::Cube { backend, .. } => backend.kernels().set(),
        other => panic!("{} is not a cube device", other.device()),
    };
    // The same lengths over a table of 8 rows, which a 30522-wide one keeps small.
    let mut lens = BatchBuf::new();
    let mut r = Rng::new(7);
    let b = batch.batch();
    for s in 0..b.seqs() {
        testkit::push_random_seq(&mut lens, &mut r, b.seq(s).len(), 8, false);
    }
    let cases = [
        (format!("mean and L2, {width} wide"), testkit::pooled(8, width, PoolMode::Mean, true)),
        ("max over 30522 columns".to_owned(), testkit::pooled(8, 30522, PoolMode::Max, false)),
    ];
    println!("  pooling alone, from the token rows' gather (ratio: Burn's ops' time over ours)");
    let floats = [DType::F32, DType::F16, DType::Bf16];
    for dtype in floats.into_iter().filter(|d| caps.dtypes.contains(d)) {
        for (what, g) in &cases {
            let who = format!("{name}, {what}, {dtype}");
            let time = |set| {
                let be = with_kernels(cube, set).with_dtype(dtype).expect("a listed dtype");
                time_plan(be, g, &lens, reps)
            };
            let Some((mine, burns)) = survived(&who, || {
                (time(KernelSet { pool: true, ..ours }), time(KernelSet { pool: false, ..ours }))
            }) else {
                continue;
            };
            println!(
                "  {:<46} {:>7.2}ms ours, {:>7.2}ms Burn's {:>8.2}",
                who,
                ms(mine),
                ms(burns),
                burns.as_secs_f64() / mine.as_secs_f64()
            );
        }
    }
}

/// The rows of the token table the matmul routines' layers read.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
const SMALL_VOCAB: usize = 512;

/// cubek's matmul routines (and the tuned choice and cuBLAS) on each GPU, in the device's own
/// dtype: for each batch of [`gpu_batches`], the encoder's four linear layer shapes timed alone
/// under each (the layer's op alone, the device synchronised around it), then the whole encoder
/// with the choice that made a layer's linears fastest, beside Burn's choice and the tuned one,
/// as `gpu` lines for the PyTorch peer.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn bench_matmuls(reps: usize, without: &[switchyard_dispatch::cube::Matmul]) {
    use switchyard_dispatch::cube::{Matmul, with_matmul};
    for (device, software) in gpus() {
        let name = device.to_string();
        let cube = Dispatch::new(&device).expect("it started above");
        let dtype = cube.caps().auto;
        let tuned_before = switchyard_dispatch::cube::tuned_choices().len();
        let with = |matmul| {
            let be = on_cube(&cube, |c| with_matmul(c, matmul));
            be.with_dtype(dtype).expect("its own dtype")
        };
        println!();
        println!(
            "{name} ({}): cubek's matmul routines in {dtype}; median of {reps}",
            cube.caps().device
        );
        // The largest batch first: the furthest behind PyTorch (bge-base's 256 sequences, at
        // 0.28x on the H200), and what says most should a lease end early.
        for (what, spec, ragged_args) in gpu_batches(software).into_iter().rev() {
            let (seqs, min, max) = ragged_args;
            let batch = ragged(seqs, min, max, spec.vocab);
            let m = batch.tokens();
            // The same lengths (`ragged` draws as many numbers whatever the vocabulary) over a
            // small table: [30522, 3072] would not fit one buffer on llvmpipe.
            let small = ragged(seqs, min, max, SMALL_VOCAB);
            assert_eq!(small.tokens(), m);
            // Each shape a layer has: the query, key and value projections joined, the output
            // projection, the FFN's two.
            let (d, ffn) = (spec.width, spec.ffn);
            let shapes = [(d, 3 * d), (d, d), (d, ffn), (ffn, d)];
            let graphs: Vec<Graph> = shapes
                .iter()
                .map(|&(k, n)| testkit::linear_layer(SMALL_VOCAB, k, n, Act::Identity, true, false))
                .collect();
            println!(
                "  {what}, {} seqs, {m} tokens: each linear layer alone, ms (TFLOP/s)",
                batch.seqs()
            );
            let header: String =
                shapes.iter().map(|(k, n)| format!(" {:>16}", format!("{k}->{n}"))).collect();
            println!("    {:<26}{header} {:>9}", "routine", "a layer");
            let mut best: Option<(Matmul, Duration)> = None;
            let mut burns = None;
            for matmul in Matmul::all().filter(|m| !without.contains(m)) {
                let be = with(matmul);
                let times: switchyard_core::Result<Vec<Duration>> = graphs
                    .iter()
                    .map(|g| {
                        let (kinds, _) = op_shares(&be, g, &small, reps)?;
                        Ok(kinds.iter().find(|k| k.0 == "Linear").map_or(Duration::ZERO, |k| k.2))
                    })
                    .collect();
                let times = match times {
                    Ok(t) => t,
                    Err(e) => {
                        let why = e.to_string();
                        let why = why.lines().next().unwrap_or_default();
                        println!("    {:<26} {why}", matmul.to_string());
                        continue;
                    }
                };
                let layer: Duration = times.iter().sum();
                let cells: String = times
                    .iter()
                    .zip(&shapes)
                    .map(|(t, &(k, n))| {
                        let tflops = 2.0 * (m * k * n) as f64 / t.as_secs_f64() / 1e12;
                        format!(" {:>16}", format!("{:.3} ({tflops:.0})", ms(*t)))
                    })
                    .collect();
                println!("    {:<26}{cells} {:>7.3}ms", matmul.to_string(), ms(layer));
                if matmul == Matmul::Burn {
                    burns = Some(layer);
                }
                if best.is_none_or(|(_, t)| layer < t) {
                    best = Some((matmul, layer));
                }
            }
            let Some((fastest, layer)) = best else { continue };
            if let Some(burns) = burns {
                let ratio = burns.as_secs_f64() / layer.as_secs_f64();
                println!("    fastest: {fastest}, {ratio:.2}x Burn's choice on a layer's linears");
            }
            // The whole encoder, Burn's choice, the fastest and the tuned one, taken in turn;
            // on a CUDA device cuBLAS's two orderings too, which a layer's linears timed alone
            // (the device synchronised around each) cannot tell apart.
            let g = testkit::bert_like(spec);
            let id = gpu_batch_id(what, ragged_args, &batch);
            let mut whole = vec![Matmul::Burn, fastest, Matmul::Tuned];
            if name.starts_with("cuda:") {
                whole.extend([Matmul::Cublas, Matmul::CublasQueued]);
            }
            let mut seen = std::collections::HashSet::new();
            whole.retain(|m| !without.contains(m) && seen.insert(*m));
            for matmul in whole {
                let who = format!("{name}, our kernels, matmul {matmul}, {dtype}");
                let Some(t) = survived(&who, || time_plan(with(matmul), &g, &batch, reps)) else {
                    continue;
                };
                println!("    whole encoder, matmul {matmul:<26} {:>7.2}ms", ms(t));
                println!("gpu\t{id}\t{who}\t{:.3}", ms(t));
            }
        }
        // What the tuned matmul chose for each shape it met, and what choosing cost.
        println!("  the tuned matmul's choices (rows rounded up to a power of two):");
        for c in switchyard_dispatch::cube::tuned_choices().into_iter().skip(tuned_before) {
            println!(
                "    {:<40} {:<26} tuned in {:.2}s",
                c.shape,
                c.matmul.to_string(),
                c.took.as_secs_f64()
            );
        }
    }
}

/// f32, and the device's own dtype where that is another.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn f32_and_auto(caps: &switchyard_core::Caps) -> Vec<DType> {
    if caps.auto == DType::F32 { vec![DType::F32] } else { vec![DType::F32, caps.auto] }
}

/// `be`, a cube device, as `f` remakes its backend.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn on_cube(
    be: &Dispatch,
    f: impl FnOnce(&switchyard_dispatch::cube::Cube) -> switchyard_dispatch::cube::Cube,
) -> Dispatch {
    match be {
        Dispatch::Cube { device, backend } => {
            Dispatch::Cube { device: device.clone(), backend: f(backend) }
        }
        other => panic!("{} is not a cube device", other.device()),
    }
}

/// `be`, a cube device, with the kernels of `set` instead of its own.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn with_kernels(be: &Dispatch, set: switchyard_dispatch::cube::KernelSet) -> Dispatch {
    on_cube(be, |c| switchyard_dispatch::cube::with_kernels(c, set))
}

/// Each GPU device beside flex on the same batches: on a software device a small batch of the
/// MiniLM shape only; on a real GPU 32 and 256 sequences of the MiniLM shape and of bge-base's,
/// also in f16 and bf16 where the device has them. `quick` times only the kernel sets with our
/// attention (without it, Burn's per-sequence attention is 8x to 24x slower on an H200), and
/// not flex.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn bench_gpus(reps: usize, quick: bool, without: &[switchyard_dispatch::cube::Matmul]) {
    use switchyard_dispatch::cube::KernelSet;
    for (device, software) in gpus() {
        let name = device.to_string();
        let cube = Dispatch::new(&device).expect("it started above");
        let caps = cube.caps();
        println!();
        println!(
            "{name} ({}){}; median of {reps}",
            caps.device,
            if software { ", a CPU emulating a GPU: correctness-scale sizes only" } else { "" }
        );
        println!("  {:<46} {:>9} {:>12} {:>8}", "", "time", "tokens/s", "ratio");
        for (what, spec, (seqs, min, max)) in gpu_batches(software) {
            let batch = ragged(seqs, min, max, spec.vocab);
            let g = testkit::bert_like(spec);
            let tokens = batch.tokens() as f64;
            let label = format!("{what}, {} seqs, {} tokens", batch.seqs(), batch.tokens());
            println!("  {label}");
            let attention_norm = KernelSet { attention: true, norm: true, ..KernelSet::NONE };
            let attention = KernelSet { attention: true, ..KernelSet::NONE };
            let mut sets = vec![
                ("all of our kernels", KernelSet::ALL),
                ("our attention, norm and epilogue", KernelSet::MEASURED),
                ("our attention and norm", attention_norm),
                ("our attention only", attention),
            ];
            if !quick {
                sets.extend([
                    ("our GEMM only", KernelSet { linear: true, ..KernelSet::NONE }),
                    ("our norm only", KernelSet { norm: true, ..KernelSet::NONE }),
                    ("our epilogue only", KernelSet { epilogue: true, ..KernelSet::NONE }),
                    ("Burn's ops only", KernelSet::NONE),
                ]);
            }
            let mut rows: Vec<(String, Duration)> = sets
                .into_iter()
                .filter_map(|(what, set)| {
                    let who = format!("{name}, {what}");
                    let t =
                        survived(&who, || time_plan(with_kernels(&cube, set), &g, &batch, reps));
                    Some((who, t?))
                })
                .collect();
            // Half-precision weights and activations, where the device has them: with our
            // attention, norm and epilogue (f32 arithmetic; the GEMM is f32 only), with fewer of
            // them, and Burn's ops alone.
            for dtype in [DType::F16, DType::Bf16] {
                if !caps.dtypes.contains(&dtype) {
                    continue;
                }
                let mut sets = vec![
                    ("our kernels", KernelSet::MEASURED),
                    ("our attention and norm", attention_norm),
                    ("our attention only", attention),
                ];
                if !quick {
                    sets.push(("Burn's ops", KernelSet::NONE));
                }
                for (what, set) in sets {
                    let who = format!("{name}, {what}, {dtype}");
                    let t = survived(&who, || {
                        let be =
                            with_kernels(&cube, set).with_dtype(dtype).expect("a listed dtype");
                        time_plan(be, &g, &batch, reps)
                    });
                    rows.extend(t.map(|t| (who, t)));
                }
            }
            // The attention kernel taking keys in groups, with the device's default kernels, in
            // f32 and in its own dtype.
            let dtypes = f32_and_auto(&caps);
            for dtype in dtypes {
                for group in [4, 8] {
                    let who = format!("{name}, default kernels, {group}-key steps, {dtype}");
                    let t = survived(&who, || {
                        use switchyard_dispatch::cube::with_key_group;
                        let be = on_cube(&cube, |c| with_key_group(c, group));
                        time_plan(be.with_dtype(dtype).expect("a listed dtype"), &g, &batch, reps)
                    });
                    rows.extend(t.map(|t| (who, t)));
                }
            }
            // Each layer's query, key and value projections as three products (and their
            // epilogues), where they are one by default: what joining them gains.
            for dtype in f32_and_auto(&caps) {
                let who = format!("{name}, default kernels, projections apart, {dtype}");
                let t = survived(&who, || {
                    let be = on_cube(&cube, |c| {
                        c.with_kernels(c.kernels().clone()).with_joined_linears(false)
                    });
                    time_plan(be.with_dtype(dtype).expect("a listed dtype"), &g, &batch, reps)
                });
                rows.extend(t.map(|t| (who, t)));
            }
            // Each residual block's linear epilogue in a launch of its own before the LayerNorm,
            // where by default the norm applies it; each layer's projections' bias in a launch
            // of its own before attention, where by default attention adds it; the embeddings'
            // lookups and sums as five launches before their norm, where by default the norm
            // gathers them: what each fold gains (with `quick`, in the device's own dtype
            // alone, which is what users run there).
            let dtypes = if quick { vec![caps.auto] } else { f32_and_auto(&caps) };
            let apart = [
                ("add and norm apart", [false, true, true]),
                ("projections' bias apart", [true, false, true]),
                ("embeddings apart", [true, true, false]),
            ];
            for (what, [norm_epilogue, attention_bias, embed_norm]) in apart {
                for &dtype in &dtypes {
                    let who = format!("{name}, default kernels, {what}, {dtype}");
                    let t = survived(&who, || {
                        let be = on_cube(&cube, |c| {
                            let s = c.kernels().set();
                            let set = KernelSet {
                                norm_epilogue: norm_epilogue && s.norm_epilogue,
                                attention_bias: attention_bias && s.attention_bias,
                                embed_norm: embed_norm && s.embed_norm,
                                ..s
                            };
                            switchyard_dispatch::cube::with_kernels(c, set)
                        });
                        time_plan(be.with_dtype(dtype).expect("a listed dtype"), &g, &batch, reps)
                    });
                    rows.extend(t.map(|t| (who, t)));
                }
            }
            // Half-precision attention in 16 x 16 tiles (tensor cores where the device has them)
            // with the device's default kernels otherwise; then with the tuned matmul too, in
            // the device's own dtype.
            for dtype in [DType::F16, DType::Bf16] {
                if !caps.dtypes.contains(&dtype) {
                    continue;
                }
                let who = format!("{name}, default kernels, attention in tiles, {dtype}");
                let tiles = |on| {
                    use switchyard_dispatch::cube::with_tiled_attention;
                    let be = on_cube(&cube, |c| with_tiled_attention(c, on));
                    be.with_dtype(dtype).expect("a listed dtype")
                };
                let t = survived(&who, || time_plan(tiles(true), &g, &batch, reps));
                rows.extend(t.map(|t| (who.clone(), t)));
                // The tiles round each softmax weight to the dtype: about 1e-3 in f16.
                let d =
                    survived(&who, || largest_difference(tiles(true), tiles(false), &g, &batch));
                if let Some(d) = d {
                    println!(
                        "  {who}: outputs within {d:.1e} of the row kernel's (of their largest)"
                    );
                }
            }
            // In the device's own dtype: tiles with the tuned matmul; on a CUDA device, cuBLAS's
            // products beside cubek's (with the device waited on around each), alone and with
            // tiles.
            if caps.auto != DType::F32 {
                use switchyard_dispatch::cube::{Matmul, with_matmul, with_tiled_attention};
                let dtype = caps.auto;
                let mut runs = vec![(Matmul::Tuned, true)];
                if name.starts_with("cuda:") {
                    for cublas in [Matmul::Cublas, Matmul::CublasQueued] {
                        runs.extend([(cublas, false), (cublas, true)]);
                    }
                }
                let with = |matmul, tiles| {
                    let be =
                        on_cube(&cube, |c| with_tiled_attention(&with_matmul(c, matmul), tiles));
                    be.with_dtype(dtype).expect("its own dtype")
                };
                for (matmul, tiles) in runs.into_iter().filter(|(m, _)| !without.contains(m)) {
                    let who = match tiles {
                        true => format!("{name}, attention in tiles, matmul {matmul}, {dtype}"),
                        false => format!("{name}, default kernels, matmul {matmul}, {dtype}"),
                    };
                    let t = survived(&who, || time_plan(with(matmul, tiles), &g, &batch, reps));
                    rows.extend(t.map(|t| (who.clone(), t)));
                    // A fast product is only a win if it is the product: against the defaults.
                    let d = survived(&who, || {
                        largest_difference(
                            with(matmul, tiles),
                            with(Matmul::Burn, false),
                            &g,
                            &batch,
                        )
                    });
                    if let Some(d) = d {
                        println!(
                            "  {who}: outputs within {d:.1e} of the defaults' (of their largest)"
                        );
                    }
                }
            }
            // The `gpu` lines for `peers/gpu_peer.py`, which runs PyTorch on the same batches.
            let mut machine = Vec::new();
            let batch_id = gpu_batch_id(what, (seqs, min, max), &batch);
            for (who, t) in &rows {
                machine.push(format!("gpu\t{batch_id}\t{who}\t{:.3}", ms(*t)));
            }
            // The ratio's base: flex, or where `quick` leaves it out, the first row.
            let base = if quick {
                let Some(&(_, first)) = rows.first() else { continue };
                first
            } else {
                let flex = time_plan(open("flex"), &g, &batch, reps);
                rows.push(("flex (peer)".to_owned(), flex));
                flex
            };
            for (who, t) in rows {
                println!(
                    "  {:<46} {:>7.1}ms {:>12.0} {:>8.2}",
                    who,
                    ms(t),
                    tokens / t.as_secs_f64(),
                    base.as_secs_f64() / t.as_secs_f64()
                );
            }
            machine.iter().for_each(|l| println!("{l}"));
            // Where the time goes, in f32 and in the device's own dtype, with its default
            // kernels.
            let dtypes = f32_and_auto(&caps);
            for dtype in dtypes {
                let who = format!("{name}, its default kernels, {dtype}");
                let be = Dispatch::new(&device).expect("it started above");
                let be = be.with_dtype(dtype).expect("a listed dtype");
                let Some(shares) = survived(&who, || op_shares(&be, &g, &batch, reps)) else {
                    continue;
                };
                let (kinds, whole) = match shares {
                    Ok(shares) => shares,
                    Err(e) => {
                        println!("  {who}: no profile: {e}");
                        continue;
                    }
                };
                println!("  {who}, synchronised after each op: {:.1}ms in all", ms(whole));
                for (op, count, t) in kinds {
                    let share = t.as_secs_f64() / whole.as_secs_f64();
                    println!("    {op:<24} x{count:<4} {:>7.2}ms {:>6.1}%", ms(t), 100.0 * share);
                }
                // Unsynchronised again: how much of a run the host spends queuing the launches
                // and how much waiting for the device. With `kernel-times`' time in kernels, it
                // says what bounds the batch: the GPU, the launching thread, or neither.
                let Some(s) = survived(&who, || host::host_split(be, &g, &batch, reps)) else {
                    continue;
                };
                println!(
                    "  {who}, on the host, medians: a run {:.2}ms, building and queuing its \
                     launches (forward) {:.2}ms, waiting for the device and reading back {:.2}ms",
                    ms(s.wall),
                    ms(s.forward),
                    ms(s.read)
                );
            }
            // A classifier reads [CLS] alone, so its last layer runs on that row; beside it the
            // whole layer, both with the device's default kernels, taken in turn. Not `gpu`
            // lines: PyTorch's peer times the whole encoder.
            let graphs = [false, true].map(|cls| testkit::bert_classifier(spec, cls));
            let Some((whole, cls)) = survived(&format!("{name}, as a classifier"), || {
                let be = Dispatch::new(&device).expect("it started above");
                time_lanes(be, &graphs[0], &graphs[1], &batch, reps)
            }) else {
                continue;
            };
            println!(
                "  as a classifier on [CLS], default kernels (ratio: to the whole last layer)"
            );
            for (who, t) in [("whole last layer", whole), ("last layer on [CLS] alone", cls)] {
                let ratio = whole.as_secs_f64() / t.as_secs_f64();
                let rate = tokens / t.as_secs_f64();
                println!(
                    "  {:<46} {:>7.1}ms {rate:>12.0} {ratio:>8.2}",
                    format!("{name}, {who}"),
                    ms(t)
                );
            }
            bench_pooling(&name, &cube, spec.width, &batch, reps);
        }
        println!(
            "  (ratio: speed relative to {}; above 1 is faster. Our kernels: ragged attention, \
             the fused-epilogue GEMM, one-launch LayerNorm and the epilogue after Burn's matmul; \
             Burn's ops only: the same lowering without them)",
            if quick { "the first row" } else { "flex" }
        );
        bench_replayed(&device, software, reps);
    }
}

/// Each GPU batch's run with the device's default kernels, in f32 and the device's own dtype,
/// beside the same run recorded as a device graph and replayed (no launches from the host):
/// what device graphs could gain on each batch. Last of the GPU bench, so that a runtime whose
/// recording fails or hangs costs none of the rest.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn bench_replayed(device: &Device, software: bool, reps: usize) {
    let name = device.to_string();
    let open = |dtype| {
        let be = Dispatch::new(device).expect("it started above");
        be.with_dtype(dtype).expect("a listed dtype")
    };
    println!(
        "  replayed from a device graph of the run, and of the run padded to more tokens and a \
         sequence more, outputs read back (ratios: to the run)"
    );
    let dtypes = f32_and_auto(&open(DType::F32).caps());
    for (what, spec, (seqs, min, max)) in gpu_batches(software) {
        let batch = ragged(seqs, min, max, spec.vocab);
        let g = testkit::bert_like(spec);
        for &dtype in &dtypes {
            let who = format!("{name}, {what}, {seqs} seqs, default kernels, {dtype}");
            let Some(run) = survived(&who, || time_plan(open(dtype), &g, &batch, reps)) else {
                continue;
            };
            match survived(&who, || host::replayed(&open(dtype), &g, &batch, reps)) {
                Some(Ok(host::Replays { exact, padded: (sizes, padded) })) => println!(
                    "  {who}: a run {:.2}ms, replayed {:.2}ms {:>8.2}; padded to {} tokens in \
                     {} seqs, replayed {:.2}ms {:>8.2}",
                    ms(run),
                    ms(exact),
                    run.as_secs_f64() / exact.as_secs_f64(),
                    sizes.tokens,
                    sizes.seqs,
                    ms(padded),
                    run.as_secs_f64() / padded.as_secs_f64()
                ),
                Some(Err(e)) => println!("  {who}: a run {:.2}ms, no device graph: {e}", ms(run)),
                None => {}
            }
        }
    }
}

/// What a server saw of one batch: ops run, tensors dropped, and reads answered (round trips).
#[derive(Default)]
struct Traffic {
    ops: usize,
    drops: usize,
    reads: usize,
}

/// Counts the events in `sub` since it was last drained.
fn traffic(sub: &mut switchyard_dispatch::remote::telemetry::TelemetrySubscription) -> Traffic {
    use switchyard_dispatch::remote::telemetry::TelemetryEvent;
    let mut events = Vec::new();
    sub.drain_into(&mut events);
    let mut t = Traffic::default();
    for e in &events {
        match **e {
            TelemetryEvent::Op { .. } => t.ops += 1,
            TelemetryEvent::TensorDropped { .. } => t.drops += 1,
            TelemetryEvent::Read { .. } | TelemetryEvent::Sync { .. } => t.reads += 1,
            _ => {}
        }
    }
    t
}

/// A remote device on loopback (a flex server in this process, which hosts burn-flex) beside
/// burn-flex run locally, the same engine: the per-batch overhead of going through burn-remote,
/// and what a batch sends.
fn bench_remote(reps: usize) {
    use switchyard_dispatch::remote::{self, RemoteOptions, Serve, Server};
    let spec =
        EncoderSpec { vocab: 30522, width: 384, heads: 12, ffn: 1536, layers: 6, max_pos: 512 };
    let g = testkit::bert_like(spec);
    let (probe, mut sub) = remote::telemetry::TelemetryProbe::channel(1 << 20);
    let listener =
        remote::bind("127.0.0.1:0".parse().expect("an address"), false).expect("a loopback port");
    let serving = Server::of(&switchyard_dispatch::flex::burn_flex(), None)
        .with_telemetry(probe)
        .spawn(listener)
        .expect("a server");
    let connect = || {
        remote::connect("127.0.0.1", serving.addr().port(), RemoteOptions::default())
            .expect("the server in this process")
    };
    println!();
    println!("Remote: a flex server on loopback (in this process, hosting burn-flex) beside");
    println!("  burn-flex run locally,");
    println!("  all-MiniLM-L6-v2's shape, random weights; median of {reps}");
    println!(
        "  {:<34} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6}",
        "", "local", "remote", "ratio", "ops", "drops", "reads"
    );
    for (what, batch) in [
        ("1 seq, 16 tokens", ragged(1, 16, 16, spec.vocab)),
        ("32 seqs", ragged(32, 11, 120, spec.vocab)),
    ] {
        let local = time_plan(switchyard_dispatch::flex::burn_flex(), &g, &batch, reps);
        let remote = time_plan(connect(), &g, &batch, reps);
        // One more batch alone, to count what it sends.
        let bucket = bucket_for(&batch);
        let mut ex = executor(connect(), &g, bucket);
        let mut out = Outputs::new();
        ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("the bench batch runs");
        traffic(&mut sub);
        ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("the bench batch runs");
        let t = traffic(&mut sub);
        println!(
            "  {:<34} {:>7.1}ms {:>7.1}ms {:>8.2} {:>6} {:>6} {:>6}",
            format!("{what} ({} tokens)", batch.tokens()),
            ms(local),
            ms(remote),
            local.as_secs_f64() / remote.as_secs_f64(),
            t.ops,
            t.drops,
            t.reads
        );
    }
    println!("  (ratio: remote speed relative to local burn-flex; per batch, the server ran `ops`");
    println!("  ops, dropped `drops` tensors, and answered `reads` reads, each a round trip)");
}

/// The matmul choices each `--without NAME` leaves out of the GPU benchmarks (what a lease found
/// hanging or failing, so the rest still run); exits naming the choices where a name is none.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn left_out(args: &[String]) -> Vec<switchyard_dispatch::cube::Matmul> {
    const USAGE: &str = "[REPS] [--gpus-only | --matmuls] [--quick] [--without MATMUL]...";
    let usage = args::Args::new(args, USAGE);
    if args.last().is_some_and(|a| a == "--without") {
        usage.fail("--without takes a value")
    }
    args.windows(2)
        .filter(|w| w[0] == "--without")
        .map(|w| w[1].parse().unwrap_or_else(|e| usage.fail(format!("--without: {e}"))))
        .collect()
}

/// `switchyard-bench [REPS] [--gpus-only | --matmuls] [--quick] [--without MATMUL]...`: every
/// benchmark, or only the GPU devices' (`--quick`: fewer kernel sets on them, and no flex
/// beside; `--without`: no rows with that matmul choice);
/// `switchyard-bench corpus ...`: see [`corpus::run`]; `serve ...` and `soak ...`: see
/// [`serve::serve`] and [`serve::soak`]; `train ...` and `weights ...`: see [`train::run`] and
/// [`weights::run`].
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("corpus") => return corpus::run(&args[1..]),
        Some("serve") => return serve::serve(&args[1..]),
        Some("soak") => return serve::soak(&args[1..]),
        Some("train") => return train::run(&args[1..]),
        Some("weights") => return weights::run(&args[1..]),
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        Some("kernel-times") => return kernel_times::run(&args[1..]),
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        Some("kernel-times") => {
            println!("(no kernel times: this build has neither the wgpu nor the cuda feature)");
            return;
        }
        _ => {}
    }
    let gpus_only = args.iter().any(|a| a == "--gpus-only" || a == "--matmuls");
    let reps = args.iter().find_map(|a| a.parse().ok()).unwrap_or(15);
    // Before any benchmark runs: a name that is no choice ends the bench at once.
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    let without = left_out(&args);
    if !gpus_only {
        bench_gemm(reps);
        bench_encoder(reps.div_ceil(3).max(3));
        bench_remote(reps.div_ceil(3).max(3));
    }
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    {
        if args.iter().any(|a| a == "--matmuls") {
            bench_matmuls(reps.div_ceil(3).max(3), &without);
        } else {
            bench_gpus(reps.div_ceil(3).max(3), args.iter().any(|a| a == "--quick"), &without);
        }
    }
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    if gpus_only {
        println!("(no GPU benchmarks: this build has neither the wgpu nor the cuda feature)");
    }
}

#[cfg(all(test, feature = "wgpu"))]
mod pad_rows_tests {
    /// The bench leaves the room the cube crate pads to.
    #[test]
    fn the_room_left_is_the_cube_crates_granule() {
        assert_eq!(super::PAD_ROWS, switchyard_dispatch::cube::ROW_GRANULE);
    }
}
