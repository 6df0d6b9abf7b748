//! flex's own kernels against f64, on every instruction set this CPU has, on the shapes the
//! conformance suite does not reach: `k` across several blocks, widths off every tile edge,
//! residuals written in place, long sequences.

use switchyard_conformance::{Check, Options, check};
use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{
    Act, Backend, BatchBuf, Bucket, Buckets, DType, Disentangled, Executor, GraphBuilder, LaneId,
    Op, Outputs, PositionBias, Reach, Reference, Shape,
};
use switchyard_flex::kernels::attention::{Heads, Products, attention};
use switchyard_flex::kernels::gemm::{PackedWeight, gemm};
use switchyard_flex::kernels::gemm8::{PackedWeight8, QuantizedRows, gemm8, quantize_rows};
use switchyard_flex::kernels::gemm16::{
    PackedWeight16, Rows16, from_bf16, gemm16, round_rows, to_bf16,
};
use switchyard_flex::kernels::scratch::Scratches;
use switchyard_flex::kernels::{Isa, Isa8, Isa16};

/// The f32 tolerance of the conformance suite.
fn close(got: f32, want: f64) -> bool {
    (f64::from(got) - want).abs() <= 2e-5 + 2e-5 * want.abs()
}

fn values(r: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| r.unit() * scale).collect()
}

/// `act(x . w^T + bias) + residual` in f64.
fn gemm_f64(
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    res: &[f32],
    (m, k, n): (usize, usize, usize),
    act: Act,
) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k).map(|p| f64::from(x[i * k + p]) * f64::from(w[j * k + p])).sum();
            out[i * n + j] = act.apply(dot + f64::from(bias[j])) + f64::from(res[i * n + j]);
        }
    }
    out
}

/// GEMM shapes `(m, k, n)`: `k` off multiples of four and across blocks of `k`, `n` off tile
/// edges, rows past several tasks.
const SHAPES: [(usize, usize, usize); 6] =
    [(1, 1, 1), (7, 5, 3), (6, 384, 16), (13, 385, 33), (50, 1000, 70), (97, 1536, 64)];

#[test]
fn gemm_matches_f64_on_every_isa_shape_and_epilogue() {
    let mut r = Rng::new(17);
    let scratch = Scratches::for_current_pool();
    for isa in Isa::available() {
        for &(m, k, n) in &SHAPES {
            let scale = 1.0 / (k as f32).sqrt();
            let (x, w) = (values(&mut r, m * k, 1.0), values(&mut r, n * k, scale));
            let (bias, res) = (values(&mut r, n, 1.0), values(&mut r, m * n, 1.0));
            let packed = PackedWeight::pack(&w, n, k, isa);
            for act in [Act::Identity, Act::Gelu, Act::Tanh] {
                let want = gemm_f64(&x, &w, &bias, &res, (m, k, n), act);
                // Apart, and with the residual overwritten in place.
                let mut apart = vec![f32::NAN; m * n];
                let mut in_place = res.clone();
                // SAFETY: x is m x k, the outputs and residual m x n, bias n; `in_place` is its
                // own residual, which the contract allows.
                unsafe {
                    gemm(
                        x.as_ptr(),
                        m,
                        &packed,
                        Some(&bias),
                        act,
                        Some(res.as_ptr()),
                        apart.as_mut_ptr(),
                        &scratch,
                    );
                    let p = in_place.as_mut_ptr();
                    gemm(x.as_ptr(), m, &packed, Some(&bias), act, Some(p), p, &scratch);
                }
                for (i, w) in want.iter().enumerate() {
                    assert!(
                        close(apart[i], *w),
                        "{isa:?} {m}x{k}x{n} {act:?} [{i}]: {} vs {w}",
                        apart[i]
                    );
                    assert_eq!(apart[i], in_place[i], "{isa:?} {m}x{k}x{n}: in place differs");
                }
            }
        }
    }
}

#[test]
fn gemm_without_bias_or_residual_and_with_empty_sides() {
    let (m, k, n) = (9, 40, 20);
    let mut r = Rng::new(3);
    let (x, w) = (values(&mut r, m * k, 1.0), values(&mut r, n * k, 0.2));
    let scratch = Scratches::for_current_pool();
    for isa in Isa::available() {
        let packed = PackedWeight::pack(&w, n, k, isa);
        let mut out = vec![0.0; m * n];
        // SAFETY: sizes as the contract asks.
        unsafe { gemm(x.as_ptr(), m, &packed, None, Act::Relu, None, out.as_mut_ptr(), &scratch) };
        let want = gemm_f64(&x, &w, &vec![0.0; n], &vec![0.0; m * n], (m, k, n), Act::Relu);
        assert!(out.iter().zip(&want).all(|(a, b)| close(*a, *b)), "{isa:?}");
        // No rows: nothing is touched.
        // SAFETY: nothing is read or written for m = 0.
        unsafe {
            gemm(x.as_ptr(), 0, &packed, None, Act::Identity, None, std::ptr::null_mut(), &scratch)
        };
    }
}

/// Each column's largest magnitude over `isa8`'s largest weight: the step its int8 weights
/// round to.
fn weight_steps(w: &[f32], k: usize, isa8: Isa8) -> Vec<f64> {
    let top = f64::from(isa8.weight_max());
    w.chunks(k.max(1))
        .map(|c| f64::from(c.iter().fold(0.0f32, |m, x| m.max(x.abs()))) / top)
        .collect()
}

/// The step each row of `x` rounds to: its range, zero included, over 255.
fn row_steps(x: &[f32], k: usize) -> Vec<f64> {
    x.chunks(k.max(1))
        .map(|r| {
            let (lo, hi) = r.iter().fold((0.0f32, 0.0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            f64::from(hi - lo) / 255.0
        })
        .collect()
}

/// The int8 GEMM `act(x . w^T + bias) + residual` on `isa8`, its input quantized on `isa`,
/// apart and with the residual overwritten in place (which must agree exactly).
#[allow(clippy::too_many_arguments)]
fn run_gemm8(
    isa: Isa,
    isa8: Isa8,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    res: &[f32],
    (m, k, n): (usize, usize, usize),
    act: Act,
) -> Vec<f32> {
    let packed = PackedWeight8::pack(w, n, k, isa8);
    let scratch = Scratches::for_current_pool();
    let mut rows = QuantizedRows::with_room(m, packed.rows_bytes(m));
    let mut apart = vec![f32::NAN; m * n];
    let mut in_place = res.to_vec();
    // SAFETY: x is m x k, the outputs and residual m x n, bias n; `in_place` is its own
    // residual, which the contract allows.
    unsafe {
        quantize_rows(isa, x.as_ptr(), m, &packed, &mut rows);
        let r = Some(res.as_ptr());
        gemm8(&rows, m, &packed, Some(bias), act, r, apart.as_mut_ptr(), &scratch);
        let p = in_place.as_mut_ptr();
        gemm8(&rows, m, &packed, Some(bias), act, Some(p), p, &scratch);
    }
    assert_eq!(apart, in_place, "{isa8:?} {m}x{k}x{n}: in place differs");
    apart
}

#[test]
fn int8_gemm_is_within_its_rounding_of_f64_on_every_isa_and_shape() {
    // The int8 kernel's blocks of k are 1024 long, so the longest shape spans two; the first
    // row is zeros, and the second all positive (as a GELU's output nearly is).
    let mut r = Rng::new(29);
    for &(m, k, n) in &SHAPES {
        let mut x = values(&mut r, m * k, 1.0);
        x[..k].fill(0.0);
        if m > 1 {
            x[k..2 * k].iter_mut().for_each(|v| *v = v.abs());
        }
        let w = values(&mut r, n * k, 1.0 / (k as f32).sqrt());
        let (bias, res) = (values(&mut r, n, 1.0), values(&mut r, m * n, 1.0));
        let sx = row_steps(&x, k);
        // Relu and identity move no value further than their input moved.
        for act in [Act::Identity, Act::Relu] {
            let want = gemm_f64(&x, &w, &bias, &res, (m, k, n), act);
            let best = Isa::available()[0];
            let mut firsts: Vec<(i8, Vec<f32>)> = Vec::new();
            for isa8 in Isa8::available() {
                let top = isa8.weight_max();
                let sw = weight_steps(&w, k, isa8);
                let first = run_gemm8(best, isa8, &x, &w, &bias, &res, (m, k, n), act);
                // Quantizing rounds the same everywhere and sums of integers are exact, so the
                // kernels whose weights have the same steps agree to the bit, whatever the
                // instruction set that quantized the rows.
                match firsts.iter().find(|(t, _)| *t == top) {
                    Some((_, other)) => assert_eq!(&first, other, "{isa8:?} {m}x{k}x{n}"),
                    None => firsts.push((top, first.clone())),
                }
                for isa in Isa::available() {
                    let got = run_gemm8(isa, isa8, &x, &w, &bias, &res, (m, k, n), act);
                    assert_eq!(got, first, "{isa:?} {isa8:?} {m}x{k}x{n}");
                }
                for (idx, (&g, &v)) in first.iter().zip(&want).enumerate() {
                    let (i, j) = (idx / n, idx % n);
                    // Each product errs by at most half a step of x times |w| plus half a step
                    // of w times |x| plus a quarter of both steps; f32 rounding adds the rest.
                    let bound: f64 = (0..k)
                        .map(|p| {
                            let (a, b) = (f64::from(x[i * k + p]), f64::from(w[j * k + p]));
                            sx[i] / 2.0 * b.abs() + sw[j] / 2.0 * a.abs() + sx[i] * sw[j] / 4.0
                        })
                        .sum::<f64>()
                        + 1e-5 * (1.0 + v.abs());
                    let err = (f64::from(g) - v).abs();
                    assert!(err <= bound, "{isa8:?} {m}x{k}x{n} {act:?} [{i},{j}]: {g} vs {v}");
                }
            }
        }
    }
}

/// Row `x` quantized over its range with a zero point, in the kernel's own f32 steps: its
/// values (each minus the zero point) and its scale.
fn quantized_row(x: &[f32]) -> (Vec<i32>, f32) {
    let (lo, hi) = x.iter().fold((0.0f32, 0.0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    let z = (-lo * (1.0 / scale)).round_ties_even();
    quantized(x, scale, -z, 255.0 - z)
}

/// Column `c` quantized symmetrically to at most `top` in magnitude: its values and scale.
fn quantized_column(c: &[f32], top: i8) -> (Vec<i32>, f32) {
    let (amax, top) = (c.iter().fold(0.0f32, |m, v| m.max(v.abs())), f32::from(top));
    quantized(c, if amax > 0.0 { amax / top } else { 1.0 }, -top, top)
}

/// `x` over `scale`, within `bottom..=top`, rounded to nearest even; and `scale`.
fn quantized(x: &[f32], scale: f32, bottom: f32, top: f32) -> (Vec<i32>, f32) {
    let inv = 1.0 / scale;
    let q = x.iter().map(|&v| (v * inv).clamp(bottom, top).round_ties_even() as i32).collect();
    (q, scale)
}

#[test]
fn int8_gemm_is_the_product_of_its_quantized_rows_and_columns_on_every_isa() {
    // A model of the quantization (each row over its range with a zero point; each column
    // symmetric, to the kernel's largest weight) and its integer sums, in f64: the kernels add
    // only the rounding of the exact i32 sum to f32 and two products by scales, a few 2^-24 of
    // the result. Row 0 is zeros, row 1 all positive, row 2 all negative.
    let (m, k, n) = (9, 385, 40);
    let mut r = Rng::new(5);
    let mut x = values(&mut r, m * k, 1.0);
    x[..k].fill(0.0);
    x[k..2 * k].iter_mut().for_each(|v| *v = v.abs());
    x[2 * k..3 * k].iter_mut().for_each(|v| *v = -v.abs());
    let w = values(&mut r, n * k, 0.1);
    let zeros = (vec![0.0; n], vec![0.0; m * n]);
    for isa8 in Isa8::available() {
        let columns: Vec<(Vec<i32>, f32)> =
            w.chunks(k).map(|c| quantized_column(c, isa8.weight_max())).collect();
        let got = run_gemm8(Isa::detect(), isa8, &x, &w, &zeros.0, &zeros.1, (m, k, n), {
            Act::Identity
        });
        for (i, row) in x.chunks(k).enumerate() {
            let (qx, sx) = quantized_row(row);
            for (j, (qw, sw)) in columns.iter().enumerate() {
                let sum: i64 = qx.iter().zip(qw).map(|(&a, &b)| i64::from(a * b)).sum();
                let want = sum as f64 * f64::from(sx) * f64::from(*sw);
                let g = f64::from(got[i * n + j]);
                assert!(
                    (g - want).abs() <= 4.0 * f64::from(f32::EPSILON) * want.abs(),
                    "{isa8:?} [{i},{j}]: {g} vs {want}"
                );
            }
        }
    }
}

#[test]
fn int8_gemm_is_exact_at_the_ends_of_its_range_on_every_isa() {
    // Every weight quantizes to its kernel's largest magnitude (127, or 63 for plain AVX2 and
    // SSSE3), and every value of x to an end of its range, the byte 0 or 255 (each row spans
    // -128..=127, so scale 1 and zero point 128). A pair of products is then 2 * 255 * 63 =
    // 32130 with plain AVX2 and SSSE3, near the i16 they sum pairs in (32767; with weights of
    // 127 it would saturate), and 2 * 255 * 127 elsewhere. The sums are whole numbers, exact in
    // f32, so each output is exact within the scales' rounding.
    let (m, k, n) = (7, 1000, 33);
    let mut r = Rng::new(37);
    let sign = |r: &mut Rng| if r.unit() < 0.0 { -1.0f32 } else { 1.0 };
    let mut signs: Vec<f32> = (0..m * k).map(|_| sign(&mut r)).collect();
    // Both signs in every row, so that each row with a zero point spans -128..=127.
    for row in signs.chunks_mut(k) {
        (row[0], row[1]) = (-1.0, 1.0);
    }
    let mut w: Vec<f32> = (0..n * k).map(|_| sign(&mut r)).collect();
    // Column 0 agrees with row 0 everywhere: a sum of 1000 products of the largest magnitudes.
    w[..k].copy_from_slice(&signs[..k]);
    let x: Vec<f32> = signs.iter().map(|&s| if s < 0.0 { -128.0 } else { 127.0 }).collect();
    for isa8 in Isa8::available() {
        let want = gemm_f64(&x, &w, &vec![0.0; n], &vec![0.0; m * n], (m, k, n), Act::Identity);
        let got =
            run_gemm8(Isa::detect(), isa8, &x, &w, &vec![0.0; n], &vec![0.0; m * n], (m, k, n), {
                Act::Identity
            });
        for (i, (&g, &v)) in got.iter().zip(&want).enumerate() {
            // The weights' scales are 1/127 or 1/63, rounded to f32: a relative error of a few
            // 2^-24.
            assert!(
                (f64::from(g) - v).abs() <= 1e-5 * v.abs().max(1.0),
                "{isa8:?} [{i}]: {g} vs {v}"
            );
        }
    }
}

#[test]
fn quantizing_rounds_to_nearest_even_over_each_rows_range_and_spreads_nan_on_every_isa() {
    // Rows of six values, padded to eight bytes with the zero point. Row 0 has scale 1: it
    // spans -128..=127 (zero point 128); 2.5, -3.5 and -0.5 are ties, and -6.6 is not (a
    // negative value rounded in the wrong spacing of f32s comes out a step off). Row 1 is zeros
    // (scale 1). Row 2 holds a NaN, row 4 a negative one, which become their scales. Row 3 is
    // positive: its 256 steps span 0..=255 (scale 1, zero point 0), where a symmetric scale
    // would be 255/127.
    let (m, k) = (5, 6);
    let mut x = vec![127.0, 2.5, -3.5, -0.5, -128.0, -6.6];
    x.extend([0.0; 6]);
    x.extend([1.0, f32::NAN, 2.0, 3.0, 4.0, 5.0]);
    x.extend([0.0, 51.0, 25.5, 12.5, 255.0, 6.6]);
    x.extend([1.0, -f32::NAN, 2.0, 3.0, 4.0, 5.0]);
    // Rows are quantized alike for every int8 kernel (offset as it reads them); the quantizing is
    // compiled per `isa`.
    for isa in Isa::available() {
        for isa8 in Isa8::available() {
            let w = PackedWeight8::pack(&[1.0; 2 * 6], 2, k, isa8);
            let len = w.row_bytes();
            // A byte a value, padded with the zero point to a multiple of four, eight for
            // NEON's int8 matrix multiply, 64 on AMX.
            assert_eq!(len, k.next_multiple_of(isa8.depth()), "{isa8:?}");
            let mut q = QuantizedRows::with_room(m, w.rows_bytes(m));
            // SAFETY: x holds m x k values; q has room for m rows.
            unsafe { quantize_rows(isa, x.as_ptr(), m, &w, &mut q) };
            // A kernel of signed bytes reads each byte less 128: its top bit flipped.
            let offset = isa8.row_offset();
            let flip = if offset == 0 { 0 } else { 0x80 };
            let row = |i: usize| q.bytes()[i * len..(i + 1) * len].iter().map(|b| b ^ flip);
            // Each row's first eight bytes, and that the rest are its last (the zero point).
            let row = |i: usize| {
                let row = row(i).collect::<Vec<u8>>();
                assert!(row[8..].iter().all(|&b| b == row[7]), "{isa8:?}: {row:?}");
                row[..8].to_vec()
            };
            let at = format!("{isa:?} {isa8:?}");
            assert_eq!(row(0), [255, 130, 124, 128, 0, 121, 128, 128], "{at}");
            assert_eq!(row(1), [0; 8], "{at}: a row of zeros");
            assert_eq!(row(3), [0, 51, 26, 12, 255, 7, 0, 0], "{at}: a positive row");
            assert_eq!([0, 1, 3].map(|i| q.zeros()[i] + offset), [128, 0, 0], "{at}");
            assert_eq!(q.scales()[3], 1.0, "{at}");
            assert_eq!((q.scales()[0], q.scales()[1]), (1.0, 1.0), "{at}");
            assert!(q.scales()[2].is_nan(), "{at}: a NaN spreads through its row's scale");
            assert!(q.scales()[4].is_nan(), "{at}: so does a negative NaN");
        }
    }
}

#[test]
fn int8_gemm_of_nothing_touches_nothing() {
    let w = vec![0.5f32; 8 * 12];
    for isa8 in Isa8::available() {
        let packed = PackedWeight8::pack(&w, 8, 12, isa8);
        // SAFETY: nothing is read or written for m = 0.
        unsafe {
            gemm8(
                &QuantizedRows::default(),
                0,
                &packed,
                None,
                Act::Identity,
                None,
                std::ptr::null_mut(),
                &Scratches::for_current_pool(),
            )
        };
    }
}

/// The bf16 GEMM `act(x . w^T + bias) + residual` on `isa16`, its input rounded and its portable
/// kernel compiled for `isa`, apart and with the residual overwritten in place (which must agree
/// exactly).
#[allow(clippy::too_many_arguments)]
fn run_gemm16(
    isa: Isa,
    isa16: Isa16,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    res: &[f32],
    (m, k, n): (usize, usize, usize),
    act: Act,
) -> Vec<f32> {
    let packed = PackedWeight16::pack(w, n, k, isa16);
    let scratch = Scratches::for_current_pool();
    let mut rows = vec![7u16; packed.rows_len(m)];
    let mut apart = vec![f32::NAN; m * n];
    let mut in_place = res.to_vec();
    // SAFETY: x is m x k, rows holds m rows of k2, the outputs and residual m x n, bias n;
    // `in_place` is its own residual, which the contract allows.
    unsafe {
        round_rows(isa, x.as_ptr(), m, &packed, &mut rows);
        let r = Some(res.as_ptr());
        gemm16(isa, &rows, m, &packed, Some(bias), act, r, apart.as_mut_ptr(), &scratch);
        let p = in_place.as_mut_ptr();
        gemm16(isa, &rows, m, &packed, Some(bias), act, Some(p), p, &scratch);
    }
    assert_eq!(apart, in_place, "{isa:?} {isa16:?} {m}x{k}x{n}: in place differs");
    apart
}

#[test]
fn bf16_gemm_is_within_its_rounding_of_f64_on_every_isa_and_shape() {
    // The bf16 kernel's blocks of k are 512 long, so the two longest shapes span two and three.
    let mut r = Rng::new(31);
    for &(m, k, n) in &SHAPES {
        let x = values(&mut r, m * k, 1.0);
        let w = values(&mut r, n * k, 1.0 / (k as f32).sqrt());
        let (bias, res) = (values(&mut r, n, 1.0), values(&mut r, m * n, 1.0));
        for act in [Act::Identity, Act::Relu] {
            let want = gemm_f64(&x, &w, &bias, &res, (m, k, n), act);
            let best = Isa::available()[0];
            let isas = Isa16::available().into_iter().map(|i| (best, i));
            let portable = Isa::available().into_iter().map(|i| (i, Isa16::Portable));
            let reference = run_gemm16(best, Isa16::Portable, &x, &w, &bias, &res, (m, k, n), act);
            for (isa, isa16) in isas.chain(portable) {
                let got = run_gemm16(isa, isa16, &x, &w, &bias, &res, (m, k, n), act);
                let at = format!("{isa:?} {isa16:?} {m}x{k}x{n} {act:?}");
                if matches!(isa16, Isa16::Avx512 | Isa16::Avx2) {
                    // Their FMAs run in the portable kernel's order: the same sums, bit for bit.
                    assert_eq!(got, reference, "{at}: differs from the portable kernel");
                }
                for (idx, (&g, &v)) in got.iter().zip(&want).enumerate() {
                    let (i, j) = (idx / n, idx % n);
                    // Rounding to bf16 moves a value by at most 2^-8 of itself, so a product
                    // errs by at most (2^-7 + 2^-16) of |x w|; the f32 sums of k exact products
                    // by at most k 2^-24 of the sum of |x w|; the epilogue's f32 rounding adds
                    // the rest. Relu and identity move no value further than their input moved.
                    let abs: f64 = (0..k)
                        .map(|p| (f64::from(x[i * k + p]) * f64::from(w[j * k + p])).abs())
                        .sum();
                    let bound = abs * (2f64.powi(-7) + 2f64.powi(-16) + k as f64 * 2f64.powi(-24))
                        + 1e-5 * (1.0 + v.abs());
                    let err = (f64::from(g) - v).abs();
                    assert!(err <= bound, "{at} [{i},{j}]: {g} vs {v} (bound {bound:e})");
                }
            }
        }
    }
}

/// Where Linux lists AMX among the CPU's flags (which it does only where it enabled the tiles'
/// state), flex's bf16 and int8 GEMMs run on it, given the AVX-512 this process's CPU reports
/// (an emulated CPU, such as `qemu-x86_64 -cpu Nehalem`'s, reports less than the host's flags
/// say); elsewhere on AVX-512 or less. A detection that missed AMX would leave the tiles unused
/// with every other test passing.
#[test]
fn amx_is_taken_where_linux_lists_it() {
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else { return };
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).unwrap_or_default();
    let listed = |f: &str| flags.split_whitespace().any(|g| g == f);
    #[cfg(target_arch = "x86_64")]
    let (avx512_bf16, avx512_vnni) = {
        use std::arch::is_x86_feature_detected as has;
        let avx512 = has!("avx512f") && has!("avx512bw");
        (avx512 && has!("avx512bf16"), avx512 && has!("avx512vnni"))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (avx512_bf16, avx512_vnni) = (false, false);
    let bf16 = avx512_bf16 && listed("amx_tile") && listed("amx_bf16");
    let int8 = avx512_vnni && listed("amx_tile") && listed("amx_int8");
    assert_eq!(Isa16::detect() == Isa16::AmxBf16, bf16, "bf16: {:?}", Isa16::detect());
    assert_eq!(Isa8::detect() == Isa8::AmxInt8, int8, "int8: {:?}", Isa8::detect());
}

/// flex asks for batches of [`AMX_BATCH_TOKENS`] exactly where its linear layers run on AMX: in
/// bf16 and int8 on their AMX kernels, not in f32 or f16, nor on the AVX-512 kernels of the same
/// CPU.
#[test]
fn flex_asks_for_small_batches_only_on_amx() {
    use switchyard_flex::AMX_BATCH_TOKENS;
    let hint = |be: switchyard_flex::FlexBackend, dtype| {
        be.with_dtype(dtype).expect("flex has the dtype").caps().batch_tokens
    };
    for dtype in [DType::F32, DType::F16] {
        assert_eq!(hint(switchyard_flex::flex(), dtype), None, "{dtype:?}");
    }
    for isa16 in Isa16::available() {
        let be = switchyard_flex::flex().with_isa16(isa16).expect("available");
        let want = (isa16 == Isa16::AmxBf16).then_some(AMX_BATCH_TOKENS);
        assert_eq!(hint(be, DType::Bf16), want, "{isa16:?}");
    }
    for isa8 in Isa8::available() {
        let be = switchyard_flex::flex().with_isa8(isa8).expect("available");
        let want = (isa8 == Isa8::AmxInt8).then_some(AMX_BATCH_TOKENS);
        assert_eq!(hint(be, DType::I8), want, "{isa8:?}");
    }
    // The hint follows the kernels chosen after the dtype too.
    if Isa8::available().contains(&Isa8::AmxInt8) {
        let be = switchyard_flex::flex().with_dtype(DType::I8).expect("int8");
        assert_eq!(be.caps().batch_tokens, Some(AMX_BATCH_TOKENS));
        let be = be.as_cpu_of(Isa8::Avx512Vnni).expect("AVX-512 VNNI beside AMX");
        assert_eq!(be.caps().batch_tokens, None);
    }
}

#[test]
fn bf16_gemm_really_rounds_its_operands() {
    // x = 1 + 2^-8 rounds to 1 in bf16 (a tie, to even) and w = 1 + 3 2^-8 to 1 + 2^-6: the
    // product is 1 + 2^-6 in bf16 where f32 gives about 1 + 2^-8 + 3 2^-8.
    let (m, k, n) = (1, 2, 1);
    let x = [1.0 + 2f32.powi(-8), 0.0];
    let w = [1.0 + 3.0 * 2f32.powi(-8), 5.0];
    for isa16 in Isa16::available() {
        let got =
            run_gemm16(Isa::detect(), isa16, &x, &w, &[0.0], &[0.0], (m, k, n), Act::Identity);
        assert_eq!(got, [1.0 + 2f32.powi(-6)], "{isa16:?}");
    }
}

#[test]
fn bf16_rounds_to_nearest_even_and_keeps_nan_and_infinity() {
    let one = 0x3f80u16;
    assert_eq!(to_bf16(1.0), one);
    assert_eq!(to_bf16(1.0 + 2f32.powi(-8)), one, "a tie rounds to the even neighbour");
    assert_eq!(to_bf16(1.0 + 3.0 * 2f32.powi(-8)), one + 2, "a tie rounds to the even neighbour");
    assert_eq!(to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), one + 1, "past a tie rounds up");
    assert_eq!(to_bf16(-2.5), 0xc020);
    assert_eq!(to_bf16(f32::INFINITY), 0x7f80);
    assert_eq!(to_bf16(f32::MAX), 0x7f80, "past the largest bf16 rounds to infinity");
    // A NaN whose payload lies in the low bits only would truncate to infinity.
    assert!(from_bf16(to_bf16(f32::from_bits(0x7f80_0001))).is_nan());
    assert!(from_bf16(to_bf16(-f32::NAN)).is_nan());
    for v in [0.0f32, -0.0, 1.5, -0.093_75, 65536.0] {
        assert_eq!(from_bf16(to_bf16(v)).to_bits(), v.to_bits(), "{v} is a bf16 value");
    }
    // Rows are rounded value by value, and zero past k; widened, each bf16 is the upper half
    // of its f32.
    let x = [1.0 + 2f32.powi(-8), f32::NAN, -2.5];
    for isa in Isa::available() {
        for isa16 in Isa16::available() {
            let w = PackedWeight16::pack(&[1.0; 3], 1, 3, isa16);
            let mut rows = vec![7u16; w.rows_len(1)];
            // SAFETY: x holds one row of 3 values; rows has the room for it.
            unsafe { round_rows(isa, x.as_ptr(), 1, &w, &mut rows) };
            let at = format!("{isa:?} {isa16:?}");
            let rows = &rows[..w.row_len()];
            let values: Vec<u16> = match isa16.rows() {
                Rows16::Pairs => rows.to_vec(),
                Rows16::Widened => {
                    assert!(rows.iter().step_by(2).all(|&low| low == 0), "{at}: {rows:x?}");
                    rows.iter().skip(1).step_by(2).copied().collect()
                }
            };
            // k pads to the kernel's depth: 4 for NEON's groups and on AMX 32 (2 elsewhere).
            assert_eq!(values.len(), 3usize.next_multiple_of(isa16.depth()), "{at}");
            assert_eq!((values[0], values[2]), (one, 0xc020), "{at}");
            assert!(values[3..].iter().all(|&v| v == 0), "{at}: zero past k: {values:x?}");
            assert!(from_bf16(values[1]).is_nan(), "{at}");
        }
    }
}

/// The whole suite on each instruction set other than the one flex picks by default (which
/// `tests/conformance.rs` runs).
#[test]
fn conformance_on_every_other_isa() {
    for isa in Isa::available().into_iter().skip(1) {
        let make = || switchyard_flex::flex().with_isa(isa).expect("an available instruction set");
        for c in Check::ALL {
            check(c, make, Options::default());
        }
    }
    let int8 = Options { dtype: DType::I8, ..Options::default() };
    for isa8 in Isa8::available().into_iter().skip(1) {
        let make = || {
            let be = switchyard_flex::flex().with_dtype(DType::I8).expect("flex has int8");
            be.with_isa8(isa8).expect("an available instruction set")
        };
        for c in Check::ALL {
            check(c, make, int8);
        }
    }
    let bf16 = Options { dtype: DType::Bf16, ..Options::default() };
    for isa16 in Isa16::available().into_iter().skip(1) {
        let make = || {
            let be = switchyard_flex::flex().with_dtype(DType::Bf16).expect("flex has bf16");
            be.with_isa16(isa16).expect("an available instruction set")
        };
        for c in Check::ALL {
            check(c, make, bf16);
        }
    }
}

/// Disentangled attention's tables: rows a side, position buckets (0 for exact distances), the
/// distance the buckets reach, and which terms (content to position, position to content).
#[derive(Clone, Copy, Debug)]
struct Rel {
    span: usize,
    buckets: usize,
    max_distance: usize,
    terms: (bool, bool),
}

/// One attention op of `heads` query heads on `kv_heads` key-value heads, with disentangled
/// terms where `rel` says, over a batch of long and short sequences, on `be`.
fn attention_out<B: Backend>(
    be: B,
    (heads, kv_heads): (usize, usize),
    head_dim: usize,
    (window, causal): (Option<usize>, bool),
    rel: Option<Rel>,
    lens: &[usize],
) -> Outputs {
    let (w, kw) = (heads * head_dim, kv_heads * head_dim);
    let mut g = GraphBuilder::new();
    let (tq, tk, tv) =
        (g.weight("q", &[64, w]), g.weight("k", &[64, kw]), g.weight("v", &[64, kw]));
    let q = g.op(Shape::tokens(w), |out| Op::Embed { table: tq, scale: 1.0, out });
    let k = g.op(Shape::tokens(kw), |out| Op::Embed { table: tk, scale: 1.0, out });
    let v = g.op(Shape::tokens(kw), |out| Op::Embed { table: tv, scale: 1.0, out });
    let scale = 1.0 / (head_dim as f32).sqrt();
    let position_bias = rel.map(|r| {
        let mut table = |on: bool, name: &str| on.then(|| g.weight(name, &[2 * r.span, w]));
        PositionBias::Disentangled(Disentangled {
            keys: table(r.terms.0, "pos_keys"),
            queries: table(r.terms.1, "pos_queries"),
            span: r.span,
            buckets: r.buckets,
            max_distance: r.max_distance,
        })
    });
    let y = g.op(Shape::tokens(w), |out| Op::Attention {
        q,
        k,
        v,
        heads,
        kv_heads,
        head_dim,
        scale,
        window,
        causal,
        position_bias,
        out,
    });
    g.output("y", y);
    let g = g.finish().expect("a valid graph");
    let weights = testkit::random_weights(&g, 5);
    let buckets = Buckets::single("b", &[Bucket::new(2048, 8, 8)]).expect("a valid bucket");
    let mut ex = Executor::new(be, &weights.tensors(), g, "b", buckets).expect("an executor");
    let mut batch = BatchBuf::new();
    let mut r = Rng::new(9);
    for &len in lens {
        let ids: Vec<u32> = (0..len).map(|_| r.below(64) as u32).collect();
        batch.push(&ids, None, &[]).expect("a sequence");
    }
    let mut out = Outputs::new();
    ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("a run");
    out
}

#[test]
fn attention_over_long_sequences_and_windows_on_every_isa() {
    let lens = [1, 700, 33, 257];
    for isa in Isa::available() {
        // Heads of one, two and four pairs of sixteen columns, one pair and one more sixteen,
        // fewer than sixteen, and off a multiple of eight (the AVX2 transpose's tiles).
        // Causal ones too, alone and in a window, and query heads sharing key-value heads.
        let shapes = [
            ((2, 2), 64, (None, false)),
            ((3, 3), 8, (Some(5), false)),
            ((1, 1), 128, (Some(300), false)),
            ((2, 2), 32, (None, false)),
            ((1, 1), 56, (Some(20), false)),
            ((2, 2), 12, (None, false)),
            ((2, 2), 64, (None, true)),
            ((1, 1), 56, (Some(20), true)),
            ((4, 2), 64, (None, false)),
            ((3, 1), 12, (Some(20), false)),
            ((6, 2), 32, (None, true)),
        ];
        for (heads, head_dim, window) in shapes {
            let flex = switchyard_flex::flex().with_isa(isa).expect("an available instruction set");
            let got = attention_out(flex, heads, head_dim, window, None, &lens);
            let want = attention_out(Reference, heads, head_dim, window, None, &lens);
            let (g, w) = (&got.get("y").expect("y").data, &want.get("y").expect("y").data);
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                assert!(
                    close(*a, f64::from(*b)),
                    "{isa:?} {heads:?}x{head_dim} {window:?} [{i}]: {a} vs {b}"
                );
            }
        }
    }
}

/// Attention over a few long sequences on sixteen threads, where each head of a long sequence
/// is cut into parts of its queries, is bit for bit attention on one thread, where it is not:
/// on every instruction set, in f32 and bf16 products, with and without windows.
#[test]
fn attention_is_the_same_however_its_sequences_are_cut() {
    let lens = [700, 1, 257, 96];
    for isa in Isa::available() {
        let shapes = [
            ((2, 2), 64, (None, false)),
            ((1, 1), 32, (Some(5), false)),
            ((3, 3), 48, (Some(100), false)),
            ((2, 2), 64, (None, true)),
            ((3, 3), 48, (Some(100), true)),
            ((4, 2), 64, (None, false)),
        ];
        for (heads, head_dim, window) in shapes {
            for dtype in [DType::F32, DType::Bf16] {
                let on = |threads| {
                    let be = switchyard_flex::with_threads(Some(threads)).expect("a pool");
                    let be = be.with_isa(isa).expect("an available instruction set");
                    let be = be.with_dtype(dtype).expect("flex has the dtype");
                    let out = attention_out(be, heads, head_dim, window, None, &lens);
                    out.get("y").expect("y").clone()
                };
                let name = format!("{isa:?} {dtype:?} {heads:?}x{head_dim} {window:?}");
                assert_eq!(on(16).data, on(1).data, "{name}");
            }
        }
    }
}

/// DeBERTa's disentangled terms over long sequences (distances exact, clamped, and in log
/// buckets; each term alone and both; a window) on every instruction set, against the
/// reference; and bit for bit the same however the sequences are cut (each task lays its tables
/// out for its own queries and keys), in f32 and bf16 products.
#[test]
fn disentangled_attention_over_long_sequences_on_every_isa() {
    let lens = [1, 700, 33, 257];
    let rel = |span, buckets, max_distance, terms| Rel { span, buckets, max_distance, terms };
    let cases = [
        // deberta-v3's tables: 256 rows a side, exact to 128, log buckets to 512.
        ((2, 2), 64, (None, false), rel(256, 256, 512, (true, true))),
        // Exact distances, clamped past 40.
        ((3, 3), 8, (None, false), rel(40, 0, 0, (true, false))),
        ((1, 1), 56, (Some(20), false), rel(16, 0, 0, (false, true))),
        ((2, 2), 12, (None, false), rel(8, 8, 12, (true, true))),
        ((2, 2), 32, (None, false), rel(128, 64, 300, (true, true))),
    ];
    for isa in Isa::available() {
        for (heads, head_dim, window, rel) in cases {
            let name = format!("{isa:?} {heads:?}x{head_dim} {window:?} {rel:?}");
            let flex = switchyard_flex::flex().with_isa(isa).expect("an available instruction set");
            let got = attention_out(flex, heads, head_dim, window, Some(rel), &lens);
            let want = attention_out(Reference, heads, head_dim, window, Some(rel), &lens);
            let (g, w) = (&got.get("y").expect("y").data, &want.get("y").expect("y").data);
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                assert!(close(*a, f64::from(*b)), "{name} [{i}]: {a} vs {b}");
            }
            for dtype in [DType::F32, DType::Bf16] {
                let on = |threads| {
                    let be = switchyard_flex::with_threads(Some(threads)).expect("a pool");
                    let be = be.with_isa(isa).expect("an available instruction set");
                    let be = be.with_dtype(dtype).expect("flex has the dtype");
                    let out = attention_out(be, heads, head_dim, window, Some(rel), &lens);
                    out.get("y").expect("y").clone()
                };
                assert_eq!(on(16).data, on(1).data, "{name} {dtype:?}");
            }
        }
    }
}

/// `x` rounded to bf16, as f64.
fn bf16(x: f32) -> f64 {
    f64::from(from_bf16(to_bf16(x)))
}

/// Attention with bf16 products, as flex's bf16 runs it on a CPU with AVX-512 BF16 (and on AMX), against an
/// f64 model of the same roundings: each output within `4e-5` of the sum of its terms'
/// magnitudes (f32 sums of up to 700 terms, 700 x 2^-24, and f32 exponentials), plus one bf16
/// step of each weight that lies within 1% of a step of halfway between two bf16 (where the
/// kernel's f32 weight, off the f64 one by its f32 score and exponential, a fraction of a
/// percent of a bf16 step, may round the other way). The outputs differ from the f32 products'
/// outputs by far more than that bound.
#[test]
#[allow(clippy::print_stderr)] // the skip, and each shape's margin
fn bf16_attention_is_its_roundings_of_f64() {
    if !Isa16::available().contains(&Isa16::Avx512Bf16) {
        eprintln!("skipped: this CPU has no AVX-512 BF16");
        return;
    }
    // On AVX-512 BF16, and on AMX's tiles where this CPU has them.
    let mut kinds = vec![Products::Bf16];
    if Isa16::available().contains(&Isa16::AmxBf16) {
        kinds.push(Products::AmxBf16);
    }
    let lens = [1usize, 700, 33, 257, 2, 18];
    let tokens: usize = lens.iter().sum();
    let mut batch = BatchBuf::new();
    for &len in &lens {
        batch.push(&vec![0; len], None, &[]).expect("a sequence");
    }
    let batch = batch.batch();
    // Heads of one to four pairs of sixteen columns, with and without windows, causal or not,
    // and heads off a multiple of 32, which run in f32.
    // Query heads sharing key-value heads too.
    let shapes = [
        ((2, 2), 64, Reach::default()),
        ((1, 1), 32, Reach::of(Some(20), false)),
        ((3, 3), 96, Reach::of(Some(5), false)),
        ((1, 1), 128, Reach::default()),
        ((2, 2), 48, Reach::default()),
        ((2, 2), 64, Reach::of(None, true)),
        ((1, 1), 32, Reach::of(Some(20), true)),
        ((4, 2), 64, Reach::default()),
        ((3, 1), 32, Reach::of(None, true)),
    ];
    for ((heads, kv_heads), d, reach) in shapes {
        let (width, kwidth) = (heads * d, kv_heads * d);
        let mut r = Rng::new(d as u64);
        let (q, k, v) = (
            values(&mut r, tokens * width, 2.0),
            values(&mut r, tokens * kwidth, 2.0),
            values(&mut r, tokens * kwidth, 2.0),
        );
        let scale = 1.0 / (d as f32).sqrt();
        let (position_bias, disentangled) = (None, None);
        let h = Heads { heads, kv_heads, head_dim: d, scale, reach, position_bias, disentangled };
        let run = |products| {
            let mut out = vec![f32::NAN; tokens * width];
            let scratch = Scratches::for_current_pool();
            let (q, k, v, o) = (q.as_ptr(), k.as_ptr(), v.as_ptr(), out.as_mut_ptr());
            // SAFETY: q and out hold tokens x width values, k and v tokens x kwidth, out
            // overlapping none; this CPU has AVX-512 BF16.
            unsafe { attention(Isa::Avx512, products, q, k, v, o, &batch, false, h, &scratch) };
            out
        };
        let f32s = run(Products::F32);
        for &products in &kinds {
            let got = run(products);
            let rounds = products.taken(Isa::Avx512, d) == products;
            assert_eq!(rounds, d % 32 == 0, "{d}");
            let (mut worst, mut apart) = (0.0f64, 0.0f64);
            let mut start = 0;
            for &len in &lens {
                for hd in 0..heads {
                    let at = |x: &[f32], t: usize, c: usize| x[(start + t) * width + hd * d + c];
                    // The key or value column of the head's key-value head.
                    let kv = hd / (heads / kv_heads);
                    let at_kv =
                        |x: &[f32], t: usize, c: usize| x[(start + t) * kwidth + kv * d + c];
                    let seen = |i: usize| {
                        let (lo, hi) = reach.keys(i, len);
                        lo..hi
                    };
                    let round = |x: f32| if rounds { bf16(x) } else { f64::from(x) };
                    for i in 0..len {
                        let s: Vec<f64> = seen(i)
                            .map(|j| {
                                let dot: f64 = (0..d)
                                    .map(|c| round(at(&q, i, c)) * round(at_kv(&k, j, c)))
                                    .sum();
                                dot * f64::from(h.scale)
                            })
                            .collect();
                        let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                        let sum: f64 = e.iter().sum();
                        // Each weight as the kernel multiplies it, and how far the kernel's may be.
                        let (w, slack): (Vec<f64>, Vec<f64>) = e
                            .iter()
                            .map(|&e| {
                                if !rounds {
                                    return (e, 0.0);
                                }
                                let w = bf16(e as f32);
                                let step = f64::from(from_bf16(to_bf16(w as f32) + 1)) - w;
                                let near = ((e - w).abs() - step / 2.0).abs() <= 1e-2 * step;
                                (w, if near { step } else { 0.0 })
                            })
                            .unzip();
                        for c in 0..d {
                            let vals: Vec<f64> = seen(i).map(|j| round(at_kv(&v, j, c))).collect();
                            let want: f64 =
                                w.iter().zip(&vals).map(|(w, v)| w * v).sum::<f64>() / sum;
                            let mag: f64 = e.iter().zip(&vals).map(|(e, v)| (e * v).abs()).sum();
                            let loose: f64 =
                                slack.iter().zip(&vals).map(|(s, v)| (s * v).abs()).sum();
                            let bound = (4e-5 * mag + loose) / sum;
                            let (g, f) = (f64::from(at(&got, i, c)), f64::from(at(&f32s, i, c)));
                            assert!(
                                (g - want).abs() <= bound,
                                "{heads}/{kv_heads}x{d} {reach:?} len {len} head {hd} [{i}][{c}]: {g} vs {want}"
                            );
                            worst = worst.max((g - want).abs() / bound.max(f64::MIN_POSITIVE));
                            apart = apart.max((g - f).abs());
                        }
                    }
                }
                start += len;
            }
            if rounds {
                assert!(
                    apart > 1e-3,
                    "{products:?} {heads}/{kv_heads}x{d}: bf16 products really round ({apart})"
                );
            } else {
                assert_eq!(
                    got, f32s,
                    "{products:?} {heads}/{kv_heads}x{d}: heads off a multiple of 32 run in f32"
                );
            }
            eprintln!(
                "{products:?} {heads}/{kv_heads}x{d} {reach:?}: worst {worst:.3} of the bound, {apart:.2e} from f32"
            );
        }
    }
}

/// flex runs attention in bf16 products where its bf16 GEMM runs on AVX-512 BF16 (or AMX), in
/// bf16 and in int8 (on every int8 kernel); in f32 otherwise (its bf16 GEMM widening to f32,
/// as where `vdpbf16ps` is slow). On a graph of attention alone, outputs in bf16 products differ
/// from f32's, the others are f32's.
#[test]
fn attention_takes_bf16_products_in_bf16_and_in_int8() {
    let lens = [40, 3, 90];
    let on = |be: switchyard_flex::FlexBackend, dtype| {
        let be = be.with_dtype(dtype).expect("flex has the dtype");
        let out = attention_out(be, (2, 2), 32, (None, false), None, &lens);
        out.get("y").expect("y").data.clone()
    };
    let flex = switchyard_flex::flex;
    let f32s = on(flex(), DType::F32);
    let dot = |isa16| matches!(isa16, Isa16::Avx512Bf16 | Isa16::AmxBf16);
    // This CPU's pick, and AVX-512 BF16's kernel where it has it but picked another.
    let mut isas = vec![Isa16::detect()];
    if !dot(Isa16::detect()) && Isa16::available().contains(&Isa16::Avx512Bf16) {
        isas.push(Isa16::Avx512Bf16);
    }
    let mut cases = Vec::new();
    for isa16 in isas {
        let with = || flex().with_isa16(isa16).expect("a bf16 kernel of this CPU");
        cases.push((format!("bf16 {isa16:?}"), on(with(), DType::Bf16), dot(isa16)));
        for isa8 in Isa8::available() {
            let be = with().with_isa8(isa8).expect("an int8 kernel of this CPU");
            cases.push((format!("int8 {isa8:?} {isa16:?}"), on(be, DType::I8), dot(isa16)));
        }
    }
    for (name, got, in_bf16) in cases {
        let apart = got.iter().zip(&f32s).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        if in_bf16 {
            assert!(apart > 1e-3, "{name}: attention in bf16 products rounds ({apart})");
        } else {
            assert_eq!(apart, 0.0, "{name}: attention in f32");
        }
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let g = testkit::bert_like(EncoderSpec {
        vocab: 97,
        width: 48,
        heads: 3,
        ffn: 100,
        layers: 2,
        max_pos: 128,
    });
    let weights = testkit::random_weights(&g, 2);
    let mut batch = BatchBuf::new();
    let mut r = Rng::new(4);
    for len in [40, 3, 90, 17] {
        testkit::push_random_seq(&mut batch, &mut r, len, 97, true);
    }
    let run = |threads| {
        let be = switchyard_flex::with_threads(Some(threads)).expect("a pool");
        let mut ex =
            Executor::new(be, &weights.tensors(), g.clone(), "default", Buckets::default())
                .expect("an executor");
        let mut out = Outputs::new();
        ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("a run");
        out
    };
    // Each output value is summed in one order by one task whatever the split; on sixteen
    // threads attention cuts the 90-token sequence's heads into parts of its queries.
    let one = run(1);
    assert_eq!(one, run(3));
    assert_eq!(one, run(16));
}

#[test]
fn portable_code_multiply_adds_as_its_target_does() {
    // With a = 1 + 2^-12, a^2 = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11. The second step of
    // `a a - a a` then gives -2^-24 where it is fused and 0 where it rounds twice.
    let a = 1.0 + 2f32.powi(-12);
    let (x, w) = ([a, a], [a, -a]);
    let scratch = Scratches::for_current_pool();
    let split = cfg!(all(target_arch = "x86_64", not(target_feature = "fma")));
    for isa in Isa::available() {
        let packed = PackedWeight::pack(&w, 1, 2, isa);
        let mut out = [f32::NAN];
        // SAFETY: x is 1 x 2, w 1 x 2, out 1 x 1.
        unsafe {
            gemm(x.as_ptr(), 1, &packed, None, Act::Identity, None, out.as_mut_ptr(), &scratch)
        };
        // The portable kernel on x86 is compiled for the baseline, which has no FMA: there a
        // fused multiply-add is a call into libm (software on a CPU without FMA), one value
        // at a time: its GEMM ran 35x slower than in two roundings (`cargo xtask bench`).
        let want = if isa == Isa::Portable && split { 0.0 } else { -(2f32.powi(-24)) };
        assert_eq!(out[0], want, "{isa:?}");
    }
}
