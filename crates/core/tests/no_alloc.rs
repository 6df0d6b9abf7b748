//! A warm `Executor::run` on the reference backend allocates nothing.
//!
//! The counting allocator counts per thread, so tests running in parallel in this binary do
//! not disturb each other.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{BatchBuf, Buckets, Executor, LaneId, Outputs, Reference};

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every method forwards to the system allocator unchanged; counting touches only a
// const-initialised thread-local `Cell`, which neither allocates nor has a destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCS.with(Cell::get)
}

#[test]
fn warm_run_allocates_nothing() {
    for g in [testkit::bert_like(EncoderSpec::TINY), testkit::modernbert_like(EncoderSpec::TINY)] {
        let weights = testkit::random_weights(&g, 3);
        let tensors = weights.tensors();
        let buckets: Buckets = "default 64 8 64\n".parse().unwrap();
        let mut ex = Executor::new(Reference, &tensors, g.clone(), "default", buckets).unwrap();
        let mut r = Rng::new(5);
        let (mut big, mut small) = (BatchBuf::new(), BatchBuf::new());
        let types = g.limits().types > 1;
        for len in [9, 1, 20, 3] {
            testkit::push_random_seq(&mut big, &mut r, len, EncoderSpec::TINY.vocab, types);
        }
        testkit::push_random_seq(&mut small, &mut r, 4, EncoderSpec::TINY.vocab, types);
        let mut out = Outputs::new();
        // Warm: the plan is lowered and the outputs sized for the largest batch.
        ex.run(LaneId::MAIN, &big.batch(), &mut out).unwrap();

        let before = allocations();
        ex.run(LaneId::MAIN, &small.batch(), &mut out).unwrap();
        ex.run(LaneId::MAIN, &big.batch(), &mut out).unwrap();
        assert_eq!(allocations() - before, 0, "a warm run allocated");
    }
}

#[test]
fn the_counter_sees_allocations() {
    let before = allocations();
    let v = std::hint::black_box(vec![1u8; 100]);
    assert!(allocations() > before);
    drop(v);
}
