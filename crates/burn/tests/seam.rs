//! The per-op seam, weight forms and sizes of the Burn lowering, on burn-flex.

use burn_backend::Backend as BurnBackend;
use burn_backend::ops::FloatTensorOps;
use burn_flex::{Flex, FlexDevice};
use switchyard_burn::{
    Bound, Burn, BurnVisitor, Forward, Generic, Inputs, Kernels, OnBurn, Outcome, RunCx, generic,
    read_outputs,
};
use switchyard_core::testkit::{self, EncoderSpec};
use switchyard_core::{
    Act, Backend, Batch, BatchBuf, Bucket, Caps, DType, DeviceKind, Error, Graph, GraphBuilder, Op,
    Outputs, PoolMode, PositionBias, Reference, RelativeBias, Result, Shape,
};

fn caps() -> Caps {
    Caps::new("test", "host CPU", DeviceKind::Cpu)
}

/// The seed of every test's random weights, so that runs on two backends compare.
const SEED: u64 = 4;

fn run<B: Backend>(be: &B, g: &Graph, batch: &BatchBuf) -> Result<Outputs> {
    let (plan, mut state) = planned(be, g)?;
    let mut out = Outputs::new();
    be.run(&plan, &mut state, &batch.batch(), &mut out)?;
    Ok(out)
}

/// `g` with the tests' random weights, lowered for a bucket of 64 tokens, and a run state.
fn planned<B: Backend>(be: &B, g: &Graph) -> Result<(B::Plan, B::State)> {
    let weights = testkit::random_weights(g, SEED);
    let w = be.upload(&weights.tensors(), g)?;
    let plan = be.lower(&w, g, Bucket::new(64, 8, 64))?;
    let state = be.state(&plan)?;
    Ok((plan, state))
}

fn sample() -> BatchBuf {
    let mut b = BatchBuf::new();
    b.push(&[1, 2, 3, 4], Some(&[0, 0, 1, 1]), &[0, 3]).unwrap();
    b.push(&[5, 6], None, &[1]).unwrap();
    b
}

/// Replaces every Linear with `2 * generic` and declines everything else.
struct Doubling;

impl Kernels<Flex> for Doubling {
    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<Flex>,
        w: &Bound<Flex>,
        cx: &RunCx<'_, Flex>,
    ) -> Outcome<Flex> {
        match op {
            Op::Linear { .. } => {
                let y = generic::run_op::<Flex>(op, ins, w, cx);
                Outcome::Done(<Flex as FloatTensorOps<Flex>>::float_mul_scalar(y, 2.0f64.into()))
            }
            _ => Outcome::Declined(ins),
        }
    }
}

fn one_linear() -> Graph {
    let mut g = GraphBuilder::new();
    let t = g.weight("emb", &[10, 4]);
    let w = g.weight("w", &[3, 4]);
    let x = g.op(Shape::tokens(4), |out| Op::Embed { table: t, scale: 1.0, out });
    let y = g.op(Shape::tokens(3), |out| Op::Linear {
        x,
        weight: w,
        bias: None,
        act: Act::Identity,
        residual: None,
        out,
    });
    let z = g.op(Shape::tokens(3), |out| Op::Activation { x: y, act: Act::Identity, out });
    g.output("y", z);
    g.finish().unwrap()
}

#[test]
fn a_kernel_replaces_one_op_and_declines_the_rest() {
    let g = one_linear();
    let plain = run(&Burn::<Flex>::new(FlexDevice, Generic, caps()), &g, &sample()).unwrap();
    let doubled = run(&Burn::<Flex, _>::new(FlexDevice, Doubling, caps()), &g, &sample()).unwrap();
    let (p, d) = (&plain.get("y").unwrap().data, &doubled.get("y").unwrap().data);
    assert!(p.iter().any(|x| x.abs() > 1e-3));
    for (a, b) in p.iter().zip(d) {
        assert!((2.0 * a - b).abs() <= 1e-6, "{a} doubled is not {b}");
    }
}

/// Fails the first `n` Linear ops it is given, then declines them to the generic lowering.
struct FailsFirst(std::sync::atomic::AtomicUsize);

impl Kernels<Flex> for FailsFirst {
    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<Flex>,
        _: &Bound<Flex>,
        _: &RunCx<'_, Flex>,
    ) -> Outcome<Flex> {
        use std::sync::atomic::Ordering;
        let left = self.0.load(Ordering::Relaxed);
        match op {
            Op::Linear { .. } if left > 0 => {
                self.0.store(left - 1, Ordering::Relaxed);
                Outcome::Failed(Error::Unsupported("no such routine here".into()))
            }
            _ => Outcome::Declined(ins),
        }
    }
}

#[test]
fn a_kernel_that_fails_an_op_fails_the_run_with_its_error_and_the_next_run_is_whole() {
    let g = one_linear();
    let be = Burn::<Flex, _>::new(FlexDevice, FailsFirst(1.into()), caps());
    let (plan, mut state) = planned(&be, &g).unwrap();
    let mut out = Outputs::new();
    let e = be.run(&plan, &mut state, &sample().batch(), &mut out).unwrap_err();
    assert!(matches!(&e, Error::Unsupported(m) if m == "no such routine here"), "{e}");
    be.run(&plan, &mut state, &sample().batch(), &mut out).unwrap();
    let want = run(&Burn::<Flex>::new(FlexDevice, Generic, caps()), &g, &sample()).unwrap();
    assert_eq!(out.get("y").unwrap().data, want.get("y").unwrap().data);
}

/// Declines every op, holding each Linear until another run is inside one too (or half a
/// second passes), and counts the most inside at once; runs take turns on `TURNS` where
/// `turns` says so.
struct Overlaps {
    turns: bool,
    inside: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

static TURNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Kernels<Flex> for Overlaps {
    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<Flex>,
        _: &Bound<Flex>,
        _: &RunCx<'_, Flex>,
    ) -> Outcome<Flex> {
        use std::sync::atomic::Ordering;
        if matches!(op, Op::Linear { .. }) {
            self.inside.fetch_add(1, Ordering::SeqCst);
            // Waits up to half a second for another run to come inside too.
            let since = std::time::Instant::now();
            while self.inside.load(Ordering::SeqCst) < 2 && since.elapsed().as_millis() < 500 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.most.fetch_max(self.inside.load(Ordering::SeqCst), Ordering::SeqCst);
            self.inside.fetch_sub(1, Ordering::SeqCst);
        }
        Outcome::Declined(ins)
    }

    fn exclusive(&self) -> Option<std::sync::MutexGuard<'static, ()>> {
        self.turns.then(|| TURNS.lock().unwrap())
    }
}

/// The most runs of `turns`' kernels inside a Linear at once, of four started together.
fn most_overlapping(turns: bool) -> usize {
    let kernels = Overlaps { turns, inside: 0.into(), most: 0.into() };
    let be = Burn::<Flex, _>::new(FlexDevice, kernels, caps());
    let g = one_linear();
    let (plan, _) = planned(&be, &g).unwrap();
    let start = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut state = be.state(&plan).unwrap();
                let mut out = Outputs::new();
                start.wait();
                be.run(&plan, &mut state, &sample().batch(), &mut out).unwrap();
            });
        }
    });
    be.kernels().most.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn runs_of_kernels_that_ask_for_turns_never_overlap() {
    assert_eq!(most_overlapping(true), 1);
    // The measure sees overlap where there is any.
    assert!(most_overlapping(false) > 1, "runs without turns overlapped");
}

/// Says when the work on the Burn backend starts.
struct Started(std::sync::mpsc::Sender<()>);

impl BurnVisitor for Started {
    type Out = ();
    fn visit<B: BurnBackend>(self, _: B::Device, _: Caps) {
        self.0.send(()).unwrap();
    }
}

/// Work on the Burn backend itself (training, explanations) takes the turn runs take: it does
/// not start while the turn is held elsewhere. Without turns it does not wait.
#[test]
fn work_on_the_burn_backend_waits_for_the_turn() {
    use std::time::Duration;
    for turns in [true, false] {
        let kernels = Overlaps { turns, inside: 0.into(), most: 0.into() };
        let be = Burn::<Flex, _>::new(FlexDevice, kernels, caps());
        let held = TURNS.lock().unwrap();
        let (started, starts) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| be.on_burn(Started(started)));
            let early = starts.recv_timeout(Duration::from_millis(300)).is_ok();
            assert_eq!(early, !turns, "turns {turns}: started while the turn was held");
            drop(held);
            if turns {
                starts.recv_timeout(Duration::from_secs(60)).expect("the work, after the turn");
            }
        });
    }
}

/// Declines every op, counting how often the runs make what their Linear ops share.
struct Memoizing(std::sync::atomic::AtomicUsize);

impl Kernels<Flex> for Memoizing {
    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<Flex>,
        _: &Bound<Flex>,
        cx: &RunCx<'_, Flex>,
    ) -> Outcome<Flex> {
        if let Op::Linear { .. } = op {
            let rows = cx.memo("rows", || {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                cx.sizes().tokens
            });
            assert_eq!(rows, cx.sizes().tokens);
            // Another type under the same key is made anew, never misread.
            assert_eq!(cx.memo("kind", || 1u8), 1);
            assert_eq!(cx.memo("kind", || 0.5f32), 0.5);
        }
        Outcome::Declined(ins)
    }
}

/// Positions from an offset are each token's position plus the offset, a table of the batch
/// made once a run for each offset (a run's second lookup writes nothing to the device, as a
/// device graph needs).
#[test]
fn positions_from_an_offset_are_made_once_a_run() {
    use burn_backend::ops::IntTensorOps;
    let g = testkit::bert_like(EncoderSpec::TINY);
    let batch = sample();
    let b = batch.batch();
    let cx = RunCx::<Flex>::new(&g, &b, &FlexDevice);
    let read = |t| {
        let data = burn_backend::read_sync(<Flex as IntTensorOps<Flex>>::int_into_data(t));
        data.expect("read").convert::<i64>().try_to_vec::<i64>().expect("ints")
    };
    assert_eq!(read(cx.positions_from(0)), [0, 1, 2, 3, 0, 1]);
    assert_eq!(read(cx.positions_from(2)), [2, 3, 4, 5, 2, 3]);
    assert_eq!(read(cx.positions_from(2)), [2, 3, 4, 5, 2, 3], "again, from the table");
    assert_eq!(read(cx.positions()), [0, 1, 2, 3, 0, 1]);
    let mut tables = 0;
    cx.for_each_table(&b, |_, _| tables += 1);
    assert_eq!(tables, 2, "one for each offset");
}

/// A table of the batch is made once a run for each number under its key, and
/// `for_each_table` gives each table's values for another batch; reading the batch's contents
/// marks the run ([`RunCx::read_batch`]), reading its sizes or tables does not.
#[test]
fn tables_are_made_once_a_run_and_remade_for_another_batch() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let batch = sample();
    let b = batch.batch();
    let cx = RunCx::<Flex>::new(&g, &b, &FlexDevice);
    let uploads = std::cell::Cell::new(0);
    for n in [0, 1, 0] {
        let lengths =
            move |b: &Batch<'_>| (0..b.seqs()).map(|s| (b.seq(s).len() + n) as i64).collect();
        let v = cx.table("test: lengths", n, lengths, |v| {
            uploads.set(uploads.get() + 1);
            v
        });
        assert_eq!(v, [4 + n as i64, 2 + n as i64]);
    }
    assert_eq!(uploads.get(), 2, "once for each number");
    let _ = cx.positions();
    assert_eq!((cx.sizes().tokens, cx.sizes().seqs, cx.sizes().markers), (6, 2, 3));
    assert!(!cx.read_batch(), "tables and sizes read no contents");

    let mut other = BatchBuf::new();
    other.push(&[7], None, &[0]).unwrap();
    other.push(&[8, 9, 10, 11, 12], None, &[1, 4]).unwrap();
    let mut remade = Vec::new();
    cx.for_each_table(&other.batch(), |t, values| remade.push((t.key, t.len, values)));
    let want: [(&str, usize, Vec<i64>); 3] = [
        ("test: lengths", 2, vec![1, 5]),
        ("test: lengths", 2, vec![2, 6]),
        ("burn: positions", 6, vec![0, 0, 1, 2, 3, 4]),
    ];
    assert_eq!(remade, want);
    assert_eq!(cx.batch().tokens(), 6);
    assert!(cx.read_batch(), "the batch's contents were handed out");
}

#[test]
fn a_memo_is_made_once_a_run_and_shared_by_its_ops() {
    let g = testkit::bert_like(EncoderSpec { layers: 3, ..EncoderSpec::TINY });
    let be = Burn::<Flex, _>::new(FlexDevice, Memoizing(0.into()), caps());
    let (plan, mut state) = planned(&be, &g).unwrap();
    let mut out = Outputs::new();
    for runs in 1..=2 {
        be.run(&plan, &mut state, &sample().batch(), &mut out).unwrap();
        assert_eq!(be.kernels().0.load(std::sync::atomic::Ordering::Relaxed), runs, "once a run");
    }
}

/// Runs in one context reuse its memos (the batch's tables go to the device once) and compute
/// what a forward does; a context of another plan, or of a forward with values fed, is refused.
#[test]
fn runs_in_one_context_share_its_memos_and_compute_what_a_forward_does() {
    let g = testkit::bert_like(EncoderSpec { layers: 3, ..EncoderSpec::TINY });
    let be = Burn::<Flex, _>::new(FlexDevice, Memoizing(0.into()), caps());
    let (plan, mut state) = planned(&be, &g).unwrap();
    let batch = sample();
    let b = batch.batch();
    let read = |outs| {
        let mut out = Outputs::new();
        read_outputs(&plan, &b, outs, &mut out).unwrap();
        out
    };
    let made = || be.kernels().0.load(std::sync::atomic::Ordering::Relaxed);
    let fresh = read(be.forward(&plan, &mut state, &b, &Forward::default()).unwrap());
    let cx = RunCx::new(plan.graph(), &b, be.device());
    for _ in 0..2 {
        let again = read(be.forward_in(&plan, &mut state, &cx).unwrap());
        assert_outputs_match(&again, &fresh, "a run in a context");
    }
    assert_eq!(made(), 2, "once for the forward, once for both runs in the context");

    let (other, _) = planned(&be, &g).unwrap();
    let e = be.forward_in(&other, &mut state, &cx).unwrap_err();
    assert!(matches!(&e, Error::Graph(m) if m.contains("another plan")), "{e}");
    let fed = RunCx::new(plan.graph(), &b, be.device()).for_forward(vec![g.outputs[0].val], false);
    let e = be.forward_in(&plan, &mut state, &fed).unwrap_err();
    assert!(matches!(&e, Error::Graph(m) if m.contains("fed or dropped")), "{e}");
}

/// Refuses attention with a window.
struct NoWindows;

impl Kernels<Flex> for NoWindows {
    fn check(&self, op: &Op, _: &Graph, _: Bucket, _: DType) -> Result<()> {
        match op {
            Op::Attention { window: Some(_), .. } => {
                Err(Error::Unsupported("sliding windows".into()))
            }
            _ => Ok(()),
        }
    }
}

/// Refuses linear layers computed in f16.
struct NoHalfLinear;

impl Kernels<Flex> for NoHalfLinear {
    fn check(&self, op: &Op, _: &Graph, _: Bucket, dtype: DType) -> Result<()> {
        match op {
            Op::Linear { .. } if dtype == DType::F16 => Err(Error::Unsupported("f16".into())),
            _ => Ok(()),
        }
    }
}

#[test]
fn the_check_at_lower_time_sees_the_compute_dtype() {
    let caps = caps().with_dtypes(switchyard_burn::float_dtypes::<Flex>(&FlexDevice));
    let f32 = Burn::<Flex, _>::new(FlexDevice, NoHalfLinear, caps);
    let weights = testkit::random_weights(&one_linear(), SEED);
    let bucket = Bucket::new(16, 2, 16);
    let w = f32.upload(&weights.tensors(), &one_linear()).unwrap();
    f32.lower(&w, &one_linear(), bucket).expect("f32 is not refused");
    let f16 = f32.with_dtype(DType::F16).unwrap();
    let w = f16.upload(&weights.tensors(), &one_linear()).unwrap();
    match f16.lower(&w, &one_linear(), bucket) {
        Err(Error::Unsupported(m)) => assert!(m.contains("(Linear): f16"), "{m}"),
        other => panic!("expected Unsupported, got {:?}", other.map(|_| "a plan")),
    }
}

#[test]
fn changing_kernels_keeps_the_device_caps_and_compute_dtype() {
    let caps = caps().with_dtypes(switchyard_burn::float_dtypes::<Flex>(&FlexDevice));
    let half =
        Burn::<Flex, Generic>::new(FlexDevice, Generic, caps).with_dtype(DType::F16).unwrap();
    let doubled = half.with_kernels(Doubling);
    assert_eq!((doubled.dtype(), doubled.caps()), (DType::F16, half.caps()));
    assert_eq!(doubled.caps().dtype, DType::F16);
    let weights = testkit::random_weights(&one_linear(), SEED);
    let w = doubled.upload(&weights.tensors(), &one_linear()).unwrap();
    assert_eq!(
        doubled.weight_bytes(&w),
        half.weight_bytes(&half.upload(&weights.tensors(), &one_linear()).unwrap())
    );
}

#[test]
fn a_kernel_can_refuse_an_op_at_lower() {
    let be = Burn::<Flex, _>::new(FlexDevice, NoWindows, caps());
    let bert = testkit::bert_like(EncoderSpec::TINY);
    run(&be, &bert, &sample()).unwrap();
    let modern = testkit::modernbert_like(EncoderSpec::TINY);
    match run(&be, &modern, &sample()) {
        Err(Error::Unsupported(m)) => assert!(m.contains("(Attention): sliding windows"), "{m}"),
        other => panic!("expected Unsupported, got {:?}", other.map(|_| "outputs")),
    }
}

#[test]
fn weight_and_plan_bytes_are_real_sizes() {
    let be = Burn::<Flex>::new(FlexDevice, Generic, caps());
    let g = testkit::bert_like(EncoderSpec::TINY);
    let weights = testkit::random_weights(&g, 1);
    let w = be.upload(&weights.tensors(), &g).unwrap();
    let numel: usize = g.weights.iter().map(|w| w.shape.iter().product::<usize>()).sum();
    assert_eq!(be.weight_bytes(&w), numel * 4, "each weight once, in f32");

    let small = be.lower(&w, &g, Bucket::new(16, 2, 16)).unwrap();
    let large = be.lower(&w, &g, Bucket::new(1024, 64, 1024)).unwrap();
    let layout = switchyard_core::Layout::plan(&g, Bucket::new(1024, 64, 1024), 4);
    assert_eq!(
        be.plan_bytes(&large),
        layout.total,
        "no rotary tables in BERT: just the activations"
    );
    assert!(be.plan_bytes(&large) > 32 * be.plan_bytes(&small));

    // ModernBERT's rotary tables are shared by every op with the same head size and base.
    let m = testkit::modernbert_like(EncoderSpec::TINY);
    let mw = be.upload(&testkit::random_weights(&m, 1).tensors(), &m).unwrap();
    let plan = be.lower(&mw, &m, Bucket::new(100, 4, 0)).unwrap();
    let tables = 2 * (2 * 100 * (EncoderSpec::TINY.width / EncoderSpec::TINY.heads / 2) * 4);
    let act = switchyard_core::Layout::plan(&m, Bucket::new(100, 4, 0), 4).total;
    assert_eq!(be.plan_bytes(&plan), act + tables, "two bases (global, local), cos and sin each");
}

/// The embedding matrix again as an output projection onto the vocabulary (tied, as MLM heads
/// do): the same weight read as a table and as a linear layer.
fn tied_projection(
    g: &mut GraphBuilder,
    x: switchyard_core::Val,
    emb: switchyard_core::W,
) -> switchyard_core::Val {
    g.op(Shape::tokens(12), |out| Op::Linear {
        x,
        weight: emb,
        bias: None,
        act: Act::Identity,
        residual: None,
        out,
    })
}

/// `logits` within the conformance suite's f32 tolerance of the reference backend's.
fn assert_matches_reference(got: &Outputs, g: &Graph) {
    let want = run(&Reference, g, &sample()).unwrap();
    for (a, b) in got.get("logits").unwrap().data.iter().zip(&want.get("logits").unwrap().data) {
        assert!((a - b).abs() <= 2e-5 + 2e-5 * b.abs(), "{a} vs {b}");
    }
}

#[test]
fn unread_weights_are_not_uploaded_and_tied_weights_serve_both_ops() {
    let mut g = GraphBuilder::new();
    let emb = g.weight("emb", &[12, 6]);
    let _unused = g.weight("unused", &[1000, 6]);
    let x = g.op(Shape::tokens(6), |out| Op::Embed { table: emb, scale: 1.0, out });
    let y = tied_projection(&mut g, x, emb);
    g.output("logits", y);
    let g = g.finish().unwrap();

    let be = Burn::<Flex>::new(FlexDevice, Generic, caps());
    let weights = testkit::random_weights(&g, 2);
    let w = be.upload(&weights.tensors(), &g).unwrap();
    assert_eq!(be.weight_bytes(&w), 2 * 12 * 6 * 4, "the tied matrix in both forms, nothing else");

    assert_matches_reference(&run(&be, &g, &sample()).unwrap(), &g);
}

#[test]
fn a_lane_may_read_a_weight_in_another_form_than_the_upload_graph() {
    // Uploaded for a graph that reads `emb` as a table; lowered for one that also multiplies by it.
    let mut g = GraphBuilder::new();
    let emb = g.weight("emb", &[12, 6]);
    let x = g.op(Shape::tokens(6), |out| Op::Embed { table: emb, scale: 1.0, out });
    g.output("x", x);
    let upload_graph = g.clone().finish().unwrap();
    let y = tied_projection(&mut g, x, emb);
    g.output("logits", y);
    let lane = g.finish().unwrap();

    let be = Burn::<Flex>::new(FlexDevice, Generic, caps());
    let weights = testkit::random_weights(&lane, SEED);
    let w = be.upload(&weights.tensors(), &upload_graph).unwrap();
    let plan = be.lower(&w, &lane, Bucket::new(64, 8, 64)).unwrap();
    let mut out = Outputs::new();
    be.run(&plan, &mut be.state(&plan).unwrap(), &sample().batch(), &mut out).unwrap();
    assert_matches_reference(&out, &lane);
}

#[test]
fn a_profile_times_each_op_the_batch_runs_in_order_and_leaves_the_plan_runnable() {
    let g = one_linear();
    let be = Burn::<Flex>::new(FlexDevice, Generic, caps());
    let (plan, mut state) = planned(&be, &g).unwrap();
    let times = be.profile(&plan, &mut state, &sample().batch()).unwrap();
    let names: Vec<&str> = times.iter().map(|t| t.op).collect();
    assert_eq!(names, g.ops.iter().map(Op::name).collect::<Vec<_>>());
    // The same state runs the plan afterwards, as it would have without the profile.
    let mut out = Outputs::new();
    be.run(&plan, &mut state, &sample().batch(), &mut out).unwrap();
    let want = run(&be, &g, &sample()).unwrap();
    assert_eq!(out.get("y").unwrap().data, want.get("y").unwrap().data);
    // A batch the bucket cannot hold is refused, as a run refuses it.
    let mut big = BatchBuf::new();
    big.push(&[1; 65], None, &[]).unwrap();
    assert!(be.profile(&plan, &mut state, &big.batch()).is_err());
}

/// Declines every op, noting the width of each linear layer's product it is given.
#[derive(Default)]
struct Widths(std::sync::Mutex<Vec<usize>>);

impl Kernels<Flex> for Widths {
    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<Flex>,
        w: &Bound<Flex>,
        _: &RunCx<'_, Flex>,
    ) -> Outcome<Flex> {
        if let (Op::Linear { .. }, Bound::Linear { wt, .. }) = (op, w) {
            self.0.lock().unwrap().push(generic::dims::<Flex>(wt)[1]);
        }
        Outcome::Declined(ins)
    }
}

impl Widths {
    /// The widths noted since the last call.
    fn take(&self) -> Vec<usize> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Every value of each output of `a` within the conformance suite's f32 tolerance of `b`'s.
fn assert_outputs_match(a: &Outputs, b: &Outputs, what: &str) {
    for (x, y) in a.mats().iter().zip(b.mats()) {
        assert_eq!((&x.name, x.data.len()), (&y.name, y.data.len()), "{what}");
        for (p, q) in x.data.iter().zip(&y.data) {
            assert!((p - q).abs() <= 2e-5 + 2e-5 * q.abs(), "{what}: {}: {p} vs {q}", x.name);
        }
    }
}

#[test]
fn linear_layers_sharing_an_input_run_as_one_product_and_match_them_run_apart() {
    let spec = EncoderSpec::TINY;
    let (d, ffn) = (spec.width, spec.ffn);
    let joined = Burn::<Flex, _>::new(FlexDevice, Widths::default(), caps());
    let apart =
        Burn::<Flex, _>::new(FlexDevice, Widths::default(), caps()).with_joined_linears(false);
    assert!(joined.joined_linears() && !apart.joined_linears());
    // Each layer's query, key and value projections as one product; the pooler's tanh apart.
    let g = testkit::bert_like(spec);
    let (a, b) = (run(&joined, &g, &sample()).unwrap(), run(&apart, &g, &sample()).unwrap());
    assert_outputs_match(&a, &b, "an encoder");
    assert_outputs_match(&a, &run(&Reference, &g, &sample()).unwrap(), "against the reference");
    let layer = [3 * d, d, ffn, d];
    assert_eq!(
        joined.kernels().take(),
        [layer, layer].concat().into_iter().chain([d]).collect::<Vec<_>>()
    );
    let layer = [d, d, d, d, ffn, d];
    assert_eq!(
        apart.kernels().take(),
        [layer, layer].concat().into_iter().chain([d]).collect::<Vec<_>>()
    );
    // A last layer whose query reads each sequence's first row: its keys and values joined.
    let g = testkit::bert_classifier(spec, true);
    let (a, b) = (run(&joined, &g, &sample()).unwrap(), run(&apart, &g, &sample()).unwrap());
    assert_outputs_match(&a, &b, "a classifier on [CLS]");
    let widths = joined.kernels().take();
    assert_eq!(widths[4..9], [d, 2 * d, d, ffn, d], "{widths:?}");
    // The weights take the room they took apart.
    let weights = testkit::random_weights(&g, SEED);
    let w = joined.upload(&weights.tensors(), &g).unwrap();
    let numel: usize = g.weights.iter().map(|w| w.shape.iter().product::<usize>()).sum();
    assert_eq!(joined.weight_bytes(&w), numel * 4);
}

#[test]
fn weights_joined_at_upload_serve_a_lane_that_reads_them_apart() {
    // Uploaded for the whole encoder, whose every layer joins its projections; lowered for the
    // same weights with the last layer's query on the first rows alone, whose projections are
    // then not the uploaded group in order (keys and values without the query).
    let spec = EncoderSpec::TINY;
    let upload = testkit::bert_classifier(spec, false);
    let lane = testkit::bert_classifier(spec, true);
    assert_eq!(upload.weights, lane.weights);
    let be = Burn::<Flex, _>::new(FlexDevice, Widths::default(), caps());
    let weights = testkit::random_weights(&lane, SEED);
    let w = be.upload(&weights.tensors(), &upload).unwrap();
    let plan = be.lower(&w, &lane, Bucket::new(64, 8, 64)).unwrap();
    let mut out = Outputs::new();
    be.run(&plan, &mut be.state(&plan).unwrap(), &sample().batch(), &mut out).unwrap();
    assert_outputs_match(&out, &run(&Reference, &lane, &sample()).unwrap(), "the lane");
    let d = spec.width;
    let widths = be.kernels().take();
    assert_eq!(widths[4..10], [d, d, d, d, spec.ffn, d], "the last layer apart: {widths:?}");
}

#[test]
fn a_share_of_a_joined_product_given_to_the_run_is_used_and_the_others_computed() {
    use switchyard_burn::Forward;
    let g = testkit::bert_like(EncoderSpec::TINY);
    let lin: Vec<_> =
        g.ops.iter().filter(|op| matches!(op, Op::Linear { .. })).map(Op::out).collect();
    let (q, k, v) = (lin[0], lin[1], lin[2]);
    let batch = sample();
    let rows = batch.batch().tokens();
    let given = |v: switchyard_core::Val| {
        let values: Vec<f32> = (0..rows * g.shape(v).width).map(|i| (i % 7) as f32 * 0.1).collect();
        switchyard_burn::floats::<Flex>(values, &[rows, g.shape(v).width], &FlexDevice)
    };
    let embedding = |joined: bool, fed: &[switchyard_core::Val]| {
        let be = Burn::<Flex>::new(FlexDevice, Generic, caps()).with_joined_linears(joined);
        let (plan, mut state) = planned(&be, &g).unwrap();
        let how = Forward { feed: fed.iter().map(|&v| (v, given(v))).collect(), dropout: false };
        let got = be.forward(&plan, &mut state, &batch.batch(), &how).unwrap();
        switchyard_burn::read_f32::<Flex>(got[0].clone().expect("an embedding")).unwrap()
    };
    let computed = embedding(true, &[]);
    for fed in [vec![q], vec![k], vec![q, k, v]] {
        let (a, b) = (embedding(true, &fed), embedding(false, &fed));
        assert!(a.iter().zip(&computed).any(|(x, y)| (x - y).abs() > 1e-3), "{fed:?} was used");
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 2e-5 + 2e-5 * y.abs(), "{fed:?}: {x} vs {y}");
        }
    }
}

/// Asks for every batch's tokens rounded up to a multiple of `.0`, and records the sizes of the
/// batch each op runs on.
struct Padding(usize, std::sync::Mutex<Vec<Bucket>>);

impl Padding {
    fn new(granule: usize) -> Self {
        Padding(granule, Default::default())
    }

    /// The sizes the ops of the runs since the last call ran on, once each.
    fn seen(&self) -> Vec<Bucket> {
        let mut seen = std::mem::take(&mut *self.1.lock().unwrap());
        seen.dedup();
        seen
    }
}

impl Kernels<Flex> for Padding {
    fn run_tokens(&self, tokens: usize, _dtype: DType) -> usize {
        tokens.next_multiple_of(self.0)
    }

    fn run_op(
        &self,
        _op: &Op,
        ins: Inputs<Flex>,
        _w: &Bound<Flex>,
        cx: &RunCx<'_, Flex>,
    ) -> Outcome<Flex> {
        self.1.lock().unwrap().push(cx.sizes());
        Outcome::Declined(ins)
    }
}

/// Where the kernels ask for more tokens, a run computes the batch padded by sequences after
/// its own, in as few as the position table allows, and its outputs are the batch's own rows,
/// as an unpadded run's; where the plan's bucket has no room for the padding, the batch runs as
/// it is.
#[test]
fn a_run_pads_the_batch_to_the_tokens_its_kernels_ask_for_and_returns_its_own_rows() {
    // The bucket holds 64 tokens in 8 sequences; each batch is 6 tokens in 2, with 3 markers.
    let untyped = {
        let mut b = BatchBuf::new();
        b.push(&[1, 2, 3, 4], None, &[0, 3]).unwrap();
        b.push(&[5, 6], None, &[1]).unwrap();
        b
    };
    // Outputs of sequences' and markers' rows, positions up to 8.
    let encoder = testkit::bert_like(EncoderSpec { max_pos: 8, ..EncoderSpec::TINY });
    let encoder_runs = [
        // 10 tokens of padding in sequences of at most 8: two.
        (16, Bucket::new(16, 4, 3)),
        (32, Bucket::new(32, 6, 3)),
        // 58 tokens would need 8 more sequences: no room, so no padding.
        (64, Bucket::new(6, 2, 3)),
    ];
    // Outputs of tokens' rows, positions unlimited.
    let layer_runs = [(64, Bucket::new(64, 3, 3)), (128, Bucket::new(6, 2, 3))];
    for (g, batch, runs) in
        [(encoder, sample(), &encoder_runs[..]), (one_linear(), untyped, &layer_runs[..])]
    {
        let want = run(&Burn::<Flex, _>::new(FlexDevice, Generic, caps()), &g, &batch).unwrap();
        for &(granule, ran_on) in runs {
            let be = Burn::<Flex, _>::new(FlexDevice, Padding::new(granule), caps());
            let got = run(&be, &g, &batch).unwrap();
            let what = format!("{} ops, padded to {granule} tokens", g.ops.len());
            assert_eq!(be.kernels().seen(), [ran_on], "{what}");
            assert_outputs_match(&got, &want, &what);
        }
    }
}

/// Two attention layers read one relative position bias table, the second with a query per
/// sequence: the generic path makes the longest sequence's biases once a run, and the second
/// layer reads the first rows of each sequence's corner of them.
#[test]
fn one_position_bias_serves_layers_with_token_and_sequence_queries() {
    let mut g = GraphBuilder::new();
    let emb = g.weight("emb", &[12, 8]);
    let table = g.weight("bias", &[8, 2]);
    let position_bias =
        Some(PositionBias::Relative(RelativeBias { table, buckets: 8, max_distance: 3 }));
    let x = g.op(Shape::tokens(8), |out| Op::Embed { table: emb, scale: 1.0, out });
    let attend = |g: &mut GraphBuilder, q, k| {
        g.op(g.shape(q), |out| Op::Attention {
            q,
            k,
            v: k,
            heads: 2,
            kv_heads: 2,
            head_dim: 4,
            scale: 0.5,
            window: None,
            causal: false,
            position_bias,
            out,
        })
    };
    let h = attend(&mut g, x, x);
    let first = g.op(Shape::seqs(8), |out| Op::Pool { x: h, mode: PoolMode::Cls, out });
    let y = attend(&mut g, first, h);
    g.output("logits", y);
    let g = g.finish().unwrap();
    let be = Burn::<Flex>::new(FlexDevice, Generic, caps());
    assert_matches_reference(&run(&be, &g, &sample()).unwrap(), &g);
}
