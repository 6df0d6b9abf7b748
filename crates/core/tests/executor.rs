//! The executor over the reference backend: bucket choice, lanes, plan reuse and isolation.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{
    Backend, Batch, BatchBuf, Bucket, Buckets, Caps, Error, Executor, Graph, HostTensor, LaneId,
    Outputs, Reference, Result,
};

fn buckets() -> Buckets {
    "default 8 2 8\ndefault 32 4 32\ndefault 128 8 128\nsmall 16 2 16\n".parse().unwrap()
}

fn executor(graph: &Graph) -> Executor<Reference> {
    let weights = testkit::random_weights(graph, 7);
    let tensors = weights.tensors();
    Executor::new(Reference, &tensors, graph.clone(), "default", buckets()).unwrap()
}

fn batch_of(lens: &[usize], seed: u64) -> BatchBuf {
    typed_batch(lens, seed, true)
}

fn typed_batch(lens: &[usize], seed: u64, types: bool) -> BatchBuf {
    let mut r = Rng::new(seed);
    let mut buf = BatchBuf::new();
    for &len in lens {
        testkit::push_random_seq(&mut buf, &mut r, len, EncoderSpec::TINY.vocab, types);
    }
    buf
}

#[test]
fn picks_the_smallest_bucket_and_lowers_each_once() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let mut ex = executor(&g);
    let mut out = Outputs::new();
    let small = batch_of(&[3, 2], 1);
    // Markers are random, so size the bucket expectation by the batch itself.
    assert!(small.batch().markers() <= 5);
    assert_eq!(ex.run(LaneId::MAIN, &small.batch(), &mut out).unwrap(), Bucket::new(8, 2, 8));
    assert_eq!(ex.memory().plan_count, 1);
    let mid = batch_of(&[10, 10, 1], 2);
    assert_eq!(ex.run(LaneId::MAIN, &mid.batch(), &mut out).unwrap(), Bucket::new(32, 4, 32));
    ex.run(LaneId::MAIN, &small.batch(), &mut out).unwrap();
    assert_eq!(ex.memory().plan_count, 2, "plans are reused, not rebuilt");
    assert_eq!(out.get("embedding").unwrap().rows, 2);
    assert_eq!(out.get("tokens").unwrap().rows, small.batch().markers());
}

#[test]
fn a_batch_no_bucket_holds_is_an_error_naming_the_stage() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let mut ex = executor(&g);
    let big = batch_of(&[40, 40, 40, 40], 3); // 160 tokens > 128
    let e = ex.run(LaneId::MAIN, &big.batch(), &mut Outputs::new()).unwrap_err();
    match e {
        Error::NoBucket { stage, tokens, seqs, largest, .. } => {
            assert_eq!(
                (stage.as_str(), tokens, seqs, largest.as_str()),
                ("default", 160, 4, "128,8,128")
            );
        }
        other => panic!("expected NoBucket, got {other}"),
    }
}

#[test]
fn a_bad_batch_is_rejected_before_any_work() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let mut ex = executor(&g);
    let mut buf = BatchBuf::new();
    buf.push(&[1, 2, 50], None, &[]).unwrap();
    let e = ex.run(LaneId::MAIN, &buf.batch(), &mut Outputs::new()).unwrap_err();
    assert!(e.to_string().contains("token 2 has id 50, past the vocabulary of 50"), "{e}");
    assert_eq!(ex.memory().plan_count, 0);

    let mut buf = BatchBuf::new();
    buf.push(&[1; 65], None, &[]).unwrap();
    let e = ex.run(LaneId::MAIN, &buf.batch(), &mut Outputs::new()).unwrap_err();
    assert!(e.to_string().contains("sequence 0 has 65 tokens; the model takes at most 64"), "{e}");
}

/// Each sequence's rows, alone and inside batches of different sizes (and so different
/// buckets and plans), are bit-identical: nothing leaks across sequences or from padding.
#[test]
fn sequences_are_isolated_and_plans_reusable() {
    for g in [testkit::bert_like(EncoderSpec::TINY), testkit::modernbert_like(EncoderSpec::TINY)] {
        let mut ex = executor(&g);
        let lens = [5, 1, 12, 7];
        let all = typed_batch(&lens, 9, g.limits().types > 1);
        let mut together = Outputs::new();
        ex.run(LaneId::MAIN, &all.batch(), &mut together).unwrap();
        let emb = together.get("embedding").unwrap().clone();

        let mut out = Outputs::new();
        for (s, &len) in lens.iter().enumerate() {
            let b = all.batch();
            let r = b.seq(s);
            let mut one = BatchBuf::new();
            let markers = &b.markers[b.seq_markers(s)];
            one.push(&b.ids[r.clone()], Some(&b.types[r]), markers).unwrap();
            ex.run(LaneId::MAIN, &one.batch(), &mut out).unwrap();
            assert_eq!(out.get("embedding").unwrap().row(0), emb.row(s), "sequence {s} of {len}");
            if let Some(tok) = together.get("tokens") {
                let m = b.seq_markers(s);
                assert_eq!(
                    out.get("tokens").unwrap().data,
                    tok.data[m.start * tok.width..m.end * tok.width]
                );
            }
        }
        // The big plan again: same results as the first time.
        ex.run(LaneId::MAIN, &all.batch(), &mut out).unwrap();
        assert_eq!(out, together);
    }
}

#[test]
fn lanes_share_weights_and_may_use_other_stages() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let mut ex = executor(&g);
    let mut cls_only = g.clone();
    cls_only.outputs.retain(|o| o.name == "cls");
    let lane = ex.add_graph(cls_only, "small").unwrap();
    assert_eq!(lane, LaneId(1));
    assert_eq!(ex.lane_buckets(lane).unwrap(), [Bucket::new(16, 2, 16)]);

    let b = batch_of(&[4, 6], 4);
    let (mut full, mut cls) = (Outputs::new(), Outputs::new());
    ex.run(LaneId::MAIN, &b.batch(), &mut full).unwrap();
    assert_eq!(ex.run(lane, &b.batch(), &mut cls).unwrap(), Bucket::new(16, 2, 16));
    assert_eq!(cls.mats().len(), 1);
    assert_eq!(cls.get("cls"), full.get("cls"));

    let other = testkit::modernbert_like(EncoderSpec::TINY);
    let e = ex.add_graph(other, "default").unwrap_err();
    assert!(e.to_string().contains("same weight list"), "{e}");
    let e = ex.add_graph(g.clone(), "nope").unwrap_err();
    assert!(
        e.to_string().contains("stage `nope` has no buckets; the table has: default, small"),
        "{e}"
    );
    let e = ex.run(LaneId(5), &b.batch(), &mut cls).unwrap_err();
    assert!(e.to_string().contains("no lane 5; the executor has 2"), "{e}");
}

#[test]
fn prepare_warm_and_memory() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let mut ex = executor(&g);
    let numel: usize = g.weights.iter().map(|w| w.shape.iter().product::<usize>()).sum();
    assert_eq!(ex.memory().weights, numel * 8, "the reference keeps f64 weights");
    assert_eq!(ex.memory().plans, 0);

    ex.prepare(LaneId::MAIN, Bucket::new(32, 4, 32)).unwrap();
    assert_eq!(ex.memory().plan_count, 1);
    let e = ex.prepare(LaneId::MAIN, Bucket::new(33, 4, 32)).unwrap_err();
    assert!(
        e.to_string()
            .contains("bucket 33,4,32 is not in stage `default` (8,2,8 32,4,32 128,8,128)"),
        "{e}"
    );

    ex.warm().unwrap();
    let m = ex.memory();
    assert_eq!(m.plan_count, 3);
    assert!(m.states > 0, "warm makes the executor's run states too");
    // A larger bucket's run state holds a larger arena.
    let mut small = executor(&g);
    small.prepare(LaneId::MAIN, Bucket::new(8, 2, 8)).unwrap();
    let mut large = executor(&g);
    large.prepare(LaneId::MAIN, Bucket::new(128, 8, 128)).unwrap();
    assert!(large.memory().states > 4 * small.memory().states);
}

#[test]
fn new_rejects_weights_that_do_not_match_the_graph() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let weights = testkit::random_weights(&g, 1);
    let tensors = weights.tensors();
    let e = Executor::new(Reference, &tensors[1..], g.clone(), "default", buckets()).unwrap_err();
    assert!(e.to_string().contains("expects"), "{e}");
    let mut broken = g.clone();
    broken.outputs.clear();
    let e = Executor::new(Reference, &tensors, broken, "default", buckets()).unwrap_err();
    assert!(matches!(e, Error::Graph(_)), "{e}");
}

#[test]
fn an_empty_batch_runs_to_empty_outputs() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let mut ex = executor(&g);
    let mut out = Outputs::new();
    ex.run(LaneId::MAIN, &BatchBuf::new().batch(), &mut out).unwrap();
    assert!(out.mats().iter().all(|m| m.rows == 0 && m.data.is_empty()));
}

/// The reference, except that a run waits (up to ten seconds) until another run has started too:
/// two runs both succeed only if they run at the same time.
#[derive(Default)]
struct Rendezvous {
    started: AtomicUsize,
}

impl Backend for Rendezvous {
    type Weights = <Reference as Backend>::Weights;
    type Plan = <Reference as Backend>::Plan;
    type State = <Reference as Backend>::State;
    fn caps(&self) -> Caps {
        Reference.caps()
    }
    fn upload(&self, t: &[HostTensor<'_>], g: &Graph) -> Result<Self::Weights> {
        Reference.upload(t, g)
    }
    fn lower(&self, w: &Self::Weights, g: &Graph, b: Bucket) -> Result<Self::Plan> {
        Reference.lower(w, g, b)
    }
    fn state(&self, p: &Self::Plan) -> Result<Self::State> {
        Reference.state(p)
    }
    fn run(
        &self,
        p: &Self::Plan,
        s: &mut Self::State,
        b: &Batch<'_>,
        out: &mut Outputs,
    ) -> Result<()> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.started.load(Ordering::SeqCst) < 2 {
            if Instant::now() > deadline {
                return Err(Error::Device("no other run started meanwhile".into()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Reference.run(p, s, b, out)
    }
}

#[test]
fn two_batches_run_at_once_on_one_executor_and_plan() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let weights = testkit::random_weights(&g, 7);
    let ex =
        Executor::new(Rendezvous::default(), &weights.tensors(), g.clone(), "default", buckets())
            .unwrap();
    // Both batches fit the same bucket, so both runs use one plan, each with its own state.
    let (a, b) = (batch_of(&[3, 4], 11), batch_of(&[6], 12));
    let run = |batch: &BatchBuf| {
        let mut scratch = ex.scratch();
        let mut out = Outputs::new();
        ex.run_with(&mut scratch, LaneId::MAIN, &batch.batch(), &mut out)
            .map(|bucket| (bucket, out))
    };
    let (ra, rb) = std::thread::scope(|s| {
        let ha = s.spawn(|| run(&a));
        let hb = s.spawn(|| run(&b));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    let ((bucket_a, out_a), (bucket_b, out_b)) = (ra.unwrap(), rb.unwrap());
    assert_eq!((bucket_a, bucket_b), (Bucket::new(8, 2, 8), Bucket::new(8, 2, 8)));
    assert_eq!(ex.memory().plan_count, 1, "one plan, lowered once");
    // Each equals the same batch run alone.
    let mut alone = executor(&g);
    for (batch, got) in [(&a, out_a), (&b, out_b)] {
        let mut want = Outputs::new();
        alone.run(LaneId::MAIN, &batch.batch(), &mut want).unwrap();
        assert_eq!(got, want);
    }
}

#[test]
fn a_scratch_serves_only_the_executor_that_made_it() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let (first, second) = (executor(&g), executor(&g));
    let mut scratch = first.scratch();
    let b = batch_of(&[2], 13);
    first.run_with(&mut scratch, LaneId::MAIN, &b.batch(), &mut Outputs::new()).unwrap();
    let e = second.run_with(&mut scratch, LaneId::MAIN, &b.batch(), &mut Outputs::new());
    let e = e.unwrap_err().to_string();
    assert!(e.contains("a scratch made by another executor"), "{e}");
}

#[test]
fn eval_f64_is_the_reference_run_without_the_rounding_to_f32() {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let weights = testkit::random_weights(&g, 7);
    let f64s: Vec<Vec<f64>> = weights.tensors().iter().map(|t| t.iter_f64().collect()).collect();
    let buf = batch_of(&[5, 3, 7], 4);
    let exact = Reference::eval_f64(&g, f64s.clone(), &buf.batch()).unwrap();
    let mut out = Outputs::new();
    executor(&g).run(LaneId::MAIN, &buf.batch(), &mut out).unwrap();
    assert_eq!(exact.len(), g.outputs.len());
    for (o, want) in g.outputs.iter().zip(&exact) {
        let got = &out.get(&o.name).unwrap().data;
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(want) {
            assert_eq!(*a, *b as f32, "output `{}`", o.name);
        }
    }
    // Weights of the wrong size, or a batch past the vocabulary, are errors.
    let mut short = f64s.clone();
    short[0].pop();
    let e = Reference::eval_f64(&g, short, &buf.batch()).unwrap_err();
    assert!(e.to_string().contains("values, expected"), "{e}");
    let mut bad = BatchBuf::new();
    bad.push(&[u32::MAX], None, &[]).unwrap();
    assert!(Reference::eval_f64(&g, f64s, &bad.batch()).is_err());
}

/// A classifier whose last layer is computed for each first token alone reads the same weights
/// as the whole layer, so both run as lanes of one executor, and gives the same logits: the
/// reference computes each kept row exactly as the whole layer does.
#[test]
fn a_last_layer_on_cls_alone_gives_the_whole_layers_logits() {
    for (cls, whole) in [
        (
            testkit::bert_classifier(EncoderSpec::TINY, true),
            testkit::bert_classifier(EncoderSpec::TINY, false),
        ),
        (
            testkit::modernbert_cls_like(EncoderSpec::TINY),
            testkit::modernbert_like(EncoderSpec::TINY),
        ),
    ] {
        let mut ex = executor(&cls);
        let lane = ex.add_graph(whole, "default").unwrap();
        let batch = typed_batch(&[5, 1, 12, 7], 4, cls.limits().types > 1);
        let (mut a, mut b) = (Outputs::new(), Outputs::new());
        ex.run(LaneId::MAIN, &batch.batch(), &mut a).unwrap();
        ex.run(lane, &batch.batch(), &mut b).unwrap();
        let name = &cls.outputs[0].name;
        let (a, b) = (a.get(name).unwrap(), b.get(name).unwrap());
        assert_eq!((a.rows, a.width), (b.rows, b.width), "{name}");
        assert_eq!(a.data, b.data, "{name}");
    }
}
