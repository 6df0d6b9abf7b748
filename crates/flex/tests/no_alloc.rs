//! A warm run of flex's own engine, in f32 and in int8, allocates nothing, on any of its threads.
//!
//! The counting allocator counts every thread's allocations (flex's kernels run on its pool's
//! threads), so this binary holds one test: nothing else may allocate while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{Backend, BatchBuf, Buckets, DType, Executor, LaneId, Outputs};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to the system allocator unchanged; counting touches only an
// atomic, which neither allocates nor has a destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_warm_run_allocates_nothing_on_any_thread() {
    // The allocator counts: a run of nothing at all is seen to allocate nothing, and a Vec is.
    let before = ALLOCS.load(Ordering::SeqCst);
    let v = std::hint::black_box(vec![1u8; 10]);
    assert!(ALLOCS.load(Ordering::SeqCst) > before);
    drop(v);

    let spec = EncoderSpec { vocab: 97, width: 48, heads: 3, ffn: 100, layers: 2, max_pos: 128 };
    let graphs = [testkit::bert_like(spec), testkit::modernbert_like(spec)];
    let dtypes = [DType::F32, DType::Bf16, DType::I8];
    for (g, dtype) in graphs.iter().flat_map(|g| dtypes.map(|d| (g, d))) {
        let weights = testkit::random_weights(g, 3);
        let buckets: Buckets = "default 256 8 256\n".parse().expect("a bucket table");
        let be = switchyard_flex::with_threads(Some(2)).expect("a pool");
        let be = be.with_dtype(dtype).expect("flex computes in f32, bf16 and int8");
        let mut ex = Executor::new(be, &weights.tensors(), g.clone(), "default", buckets)
            .expect("an executor");
        let types = g.limits().types > 1;
        let mut r = Rng::new(5);
        let (mut big, mut small, mut long) = (BatchBuf::new(), BatchBuf::new(), BatchBuf::new());
        for len in [90, 1, 120, 30] {
            testkit::push_random_seq(&mut big, &mut r, len, spec.vocab, types);
        }
        testkit::push_random_seq(&mut small, &mut r, 7, spec.vocab, types);
        // One sequence, whose three heads attention cuts into parts for two threads.
        testkit::push_random_seq(&mut long, &mut r, 120, spec.vocab, types);
        let mut out = Outputs::new();
        // Warm: the plan, its run state, the outputs and each thread's scratch sized for the
        // largest batch (twice, so that every pool thread has met the largest work).
        ex.run(LaneId::MAIN, &big.batch(), &mut out).expect("a run");
        ex.run(LaneId::MAIN, &big.batch(), &mut out).expect("a run");

        let before = ALLOCS.load(Ordering::SeqCst);
        ex.run(LaneId::MAIN, &small.batch(), &mut out).expect("a run");
        ex.run(LaneId::MAIN, &big.batch(), &mut out).expect("a run");
        ex.run(LaneId::MAIN, &long.batch(), &mut out).expect("a run");
        let allocated = ALLOCS.load(Ordering::SeqCst) - before;
        assert_eq!(allocated, 0, "a warm run in {dtype} allocated {allocated} times");
    }
}
