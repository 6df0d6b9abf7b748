//! The flex backend passes the shared conformance suite, in f32 and in f16 and bf16.

use switchyard_conformance::Options;
use switchyard_core::testkit::{self, EncoderSpec};
use switchyard_core::{Backend, BatchBuf, Bucket, Buckets, DType, Executor, LaneId, Outputs};

mod conformance {
    switchyard_conformance::tests!(switchyard_flex::flex);
}

#[test]
fn caps_report_the_thread_pool() {
    let caps = switchyard_flex::flex().caps();
    assert_eq!(caps.backend, "flex");
    assert_eq!(caps.threads, std::thread::available_parallelism().map_or(1, usize::from));
    let one = switchyard_flex::with_threads(Some(1)).expect("a pool of one thread");
    assert_eq!(one.caps().threads, 1);
}

/// The flex backend computing in `dtype`.
fn flex_in(dtype: DType) -> switchyard_flex::FlexBackend {
    switchyard_flex::flex().with_dtype(dtype).expect("flex computes in f16 and bf16")
}

/// The suite with weights and activations in f16, at its tolerance.
mod conformance_in_f16 {
    use super::*;
    switchyard_conformance::tests!(
        || flex_in(DType::F16),
        Options { dtype: DType::F16, ..Options::default() }
    );
}

/// The suite with weights and activations in bf16, at its tolerance.
mod conformance_in_bf16 {
    use super::*;
    switchyard_conformance::tests!(
        || flex_in(DType::Bf16),
        Options { dtype: DType::Bf16, ..Options::default() }
    );
}

#[test]
fn f16_really_computes_in_f16() {
    // The suite's f16 tolerance would pass f32 results too: check that f16 rounding shows.
    let spec = EncoderSpec { vocab: 50, width: 32, heads: 2, ffn: 64, layers: 1, max_pos: 64 };
    let g = testkit::bert_like(spec);
    let weights = testkit::random_weights(&g, 1);
    let buckets = Buckets::single("b", &[Bucket::new(16, 2, 16)]).expect("a valid bucket");
    let mut batch = BatchBuf::new();
    batch.push(&[1, 7, 9, 30], None, &[]).expect("a small batch");
    let run = |be: switchyard_flex::FlexBackend| {
        let mut ex =
            Executor::new(be, &weights.tensors(), g.clone(), "b", buckets.clone()).expect("upload");
        let mut out = Outputs::new();
        ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("a run");
        out.mats()[0].data.clone()
    };
    let full = run(switchyard_flex::flex());
    let half = run(switchyard_flex::flex().with_dtype(DType::F16).expect("flex has f16"));
    let worst = full.iter().zip(&half).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(worst > 1e-5 && worst < 2e-2, "f16 against f32: worst difference {worst}");
}

#[test]
fn half_precision_weights_take_half_the_memory() {
    let spec = EncoderSpec { vocab: 50, width: 32, heads: 2, ffn: 64, layers: 1, max_pos: 64 };
    let g = testkit::bert_like(spec);
    let weights = testkit::random_weights(&g, 1);
    let f16s = switchyard_flex::flex().with_dtype(DType::F16).expect("flex computes in f16");
    assert_eq!(f16s.caps().dtype, DType::F16);
    let half = f16s.weight_bytes(&f16s.upload(&weights.tensors(), &g).expect("upload"));
    let numel: usize = g.weights.iter().map(|w| w.shape.iter().product::<usize>()).sum();
    assert_eq!(half, numel * 2, "each weight once, two bytes a value");
}

#[test]
fn caps_list_the_float_dtypes_flex_computes_in() {
    let caps = switchyard_flex::flex().caps();
    assert_eq!(caps.float_dtypes, [DType::F32, DType::F16, DType::Bf16]);
    assert_eq!(caps.dtype, DType::F32, "f32 until asked otherwise");
}
