//! The flex backend passes the shared conformance suite, in f32, f16, bf16 and int8.

use switchyard_conformance::Options;
use switchyard_core::testkit::{self, EncoderSpec};
use switchyard_core::{
    Act, Backend, BatchBuf, Bucket, Buckets, DType, Executor, GraphBuilder, LaneId, Op, Outputs,
    Shape,
};
use switchyard_flex::kernels::Isa8;

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
    switchyard_flex::flex().with_dtype(dtype).expect("flex computes in f16, bf16 and int8")
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

/// The suite with int8 linear layers, at its tolerance.
mod conformance_in_int8 {
    use super::*;
    switchyard_conformance::tests!(
        || flex_in(DType::I8),
        Options { dtype: DType::I8, ..Options::default() }
    );
}

/// The largest difference between a small encoder's outputs in f32 and in `dtype`.
fn worst_difference_from_f32(other: switchyard_flex::FlexBackend) -> f32 {
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
    let other = run(other);
    full.iter().zip(&other).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max)
}

#[test]
fn f16_really_computes_in_f16() {
    // The suite's f16 tolerance would pass f32 results too: check that f16 rounding shows.
    let worst = worst_difference_from_f32(flex_in(DType::F16));
    assert!(worst > 1e-5 && worst < 2e-2, "f16 against f32: worst difference {worst}");
}

#[test]
fn bf16_really_rounds() {
    // bf16 keeps 8 significant bits: its rounding shows, well inside the suite's tolerance.
    let worst = worst_difference_from_f32(flex_in(DType::Bf16));
    assert!(worst > 1e-4 && worst < 2e-2, "bf16 against f32: worst difference {worst}");
}

#[test]
fn int8_really_quantizes() {
    // Likewise for int8, on each kernel this CPU has: its rounding (a step of 1/255 of a row's
    // range, 1/127 of a column's largest magnitude, 1/63 on plain AVX2 and SSSE3) shows, far past
    // f32's rounding and inside the suite's int8 tolerance (measured on an AMD Zen 4: 7.8e-4, and
    // 2.2e-3 with plain AVX2's weights and bf16 attention).
    for isa8 in Isa8::available() {
        let be = switchyard_flex::flex().with_isa8(isa8).expect("a kernel of this CPU");
        let worst = worst_difference_from_f32(be.with_dtype(DType::I8).expect("int8"));
        assert!(worst > 2e-4 && worst < 4e-2, "{isa8:?} against f32: worst difference {worst}");
    }
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
fn int8_and_bf16_linear_weights_take_a_quarter_and_half_the_memory() {
    let spec = EncoderSpec { vocab: 50, width: 64, heads: 2, ffn: 128, layers: 2, max_pos: 64 };
    let g = testkit::bert_like(spec);
    let weights = testkit::random_weights(&g, 1);
    let bytes = |be: switchyard_flex::FlexBackend| {
        be.weight_bytes(&be.upload(&weights.tensors(), &g).expect("upload"))
    };
    let (f32s, int8s) = (bytes(switchyard_flex::flex()), bytes(flex_in(DType::I8)));
    // The linear layers' weights shrink fourfold; the embedding tables and norms stay f32.
    let linear: usize = g
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Linear { weight, .. } => {
                Some(g.weights[weight.idx()].shape.iter().product::<usize>())
            }
            _ => None,
        })
        .sum();
    let saved = f32s - int8s;
    assert!(
        saved >= linear * 3 * 9 / 10 && saved <= linear * 3,
        "{f32s} bytes in f32, {int8s} in int8, {linear} linear weights"
    );
    // In bf16 they halve (a panel's columns past the weight's are padding).
    let bf16s = bytes(flex_in(DType::Bf16));
    let saved = f32s - bf16s;
    assert!(
        saved >= linear * 2 * 9 / 10 && saved <= linear * 2,
        "{f32s} bytes in f32, {bf16s} in bf16, {linear} linear weights"
    );
}

#[test]
fn caps_say_what_each_dtype_runs_on() {
    let flex = switchyard_flex::flex();
    let device = flex.caps().device;
    assert!(device.starts_with("host CPU: f32 on "), "{device}");
    let bf16 = match switchyard_flex::kernels::Isa16::detect() {
        switchyard_flex::kernels::Isa16::AmxBf16 => "bf16 on AMX",
        switchyard_flex::kernels::Isa16::Avx512Bf16 => "bf16 on AVX-512 BF16",
        switchyard_flex::kernels::Isa16::Avx512 => {
            "bf16 widened to f32 on AVX-512 (about as fast as f32)"
        }
        switchyard_flex::kernels::Isa16::Avx2 => "bf16 widened to f32 on AVX2 (no faster than f32)",
        switchyard_flex::kernels::Isa16::NeonBf16 => "bf16 on NEON BF16",
        switchyard_flex::kernels::Isa16::Portable => "bf16 widened to f32 (slower than f32)",
    };
    let f16 = ", f16 on Burn's ops (slower than f32)";
    assert!(device.ends_with(&format!("{bf16}{f16}")), "{device}");
    let portable = flex.with_isa16(switchyard_flex::kernels::Isa16::Portable).expect("portable");
    let device = portable.caps().device;
    assert!(device.ends_with(&format!("bf16 widened to f32 (slower than f32){f16}")), "{device}");
    // Every x86-64 CPU with AVX2 has an int8 kernel of its own, VNNI or not.
    let avx2 = Isa8::Avx2;
    if Isa8::available().contains(&avx2) {
        let device = switchyard_flex::flex().with_isa8(avx2).expect("available").caps().device;
        assert!(device.contains(", int8 on AVX2, "), "{device}");
        // As a CPU whose best is plain AVX2 runs: AVX2's kernels for f32 and bf16 too.
        let device = switchyard_flex::flex().as_cpu_of(avx2).expect("available").caps().device;
        let want = "f32 on AVX2, int8 on AVX2, bf16 widened to f32 on AVX2";
        assert!(device.contains(want), "{device}");
    }
    // Every aarch64 CPU with the dot product instructions has an int8 kernel of its own, and
    // one with the int8 matrix multiply another, beside this CPU's bf16 kernel (Armv8.6 has
    // both extensions; a CPU with the dot product alone, such as a Neoverse N1, neither).
    let own_bf16 = match switchyard_flex::kernels::Isa16::detect() {
        switchyard_flex::kernels::Isa16::NeonBf16 => "bf16 on NEON BF16",
        _ => "bf16 widened to f32",
    };
    for (isa8, name, bf16) in [
        (Isa8::NeonI8mm, "NEON int8 matrix multiply", own_bf16),
        (Isa8::NeonDot, "NEON dot product", "bf16 widened to f32"),
    ] {
        if Isa8::available().contains(&isa8) {
            let device = switchyard_flex::flex().as_cpu_of(isa8).expect("available");
            let want = format!("f32 on portable code (NEON), int8 on {name}, {bf16}");
            assert!(device.caps().device.contains(&want), "{}", device.caps().device);
        }
    }
    let portable = switchyard_flex::flex().as_cpu_of(Isa8::Portable).expect("runs anywhere");
    let device = portable.caps().device;
    // Portable code is vectorised for the build's target, which on aarch64 is NEON.
    let code = if cfg!(target_arch = "aarch64") { "portable code (NEON)" } else { "portable code" };
    let want = format!("f32 on {code}, int8 on {code}, bf16 widened to f32 (slower");
    assert!(device.contains(&want), "{device}");
}

#[test]
fn caps_list_the_dtypes_flex_computes_in() {
    let caps = switchyard_flex::flex().caps();
    assert_eq!(caps.dtypes, [DType::F32, DType::F16, DType::Bf16, DType::I8]);
    assert_eq!(caps.dtype, DType::F32, "f32 until asked otherwise");
}

#[test]
fn int8_refuses_linear_layers_past_its_exact_sums() {
    // Rows of 65537 values: past the i32 sums `gemm8::MAX_K` allows, so int8 refuses at upload
    // where f32 takes them.
    let k = switchyard_flex::kernels::gemm8::MAX_K + 1;
    let mut g = GraphBuilder::new();
    let (table, w) = (g.weight("table", &[4, k]), g.weight("w", &[2, k]));
    let x = g.op(Shape::tokens(k), |out| Op::Embed { table, scale: 1.0, out });
    let y = g.op(Shape::tokens(2), |out| Op::Linear {
        x,
        weight: w,
        bias: None,
        act: Act::Identity,
        residual: None,
        out,
    });
    g.output("y", y);
    let g = g.finish().expect("a valid graph");
    let weights = testkit::random_weights(&g, 3);
    let int8 = flex_in(DType::I8);
    let Err(err) = int8.upload(&weights.tensors(), &g) else { panic!("int8 refuses") };
    assert!(err.to_string().contains("at most 65536"), "{err}");
    let f32s = switchyard_flex::flex();
    assert!(f32s.upload(&weights.tensors(), &g).is_ok(), "f32 takes it");
}
