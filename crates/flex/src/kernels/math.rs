//! Element functions in f32 written without branches or calls, so that loops over slices of
//! them vectorise: `exp` and `ln` as polynomials after a range reduction, `erf` as one
//! polynomial on a clamped range, and each activation of [`Act`] from them.
//!
//! Accuracy, checked against f64 in the tests below over the ranges activations see: `exp` and
//! `ln` within 2 ulp; `erf` within 4e-7 absolute (its fit, 7e-8, plus f32 rounding); every
//! activation within 1e-6 absolute plus 1e-6 relative,
//! far inside the conformance suite's f32 bound (2e-5 + 2e-5 |want|), both with multiply-adds
//! fused ([`Fused`]) and in two roundings ([`Split`]).

// The polynomials' coefficients are written as published, a digit or two past f32.
#![allow(clippy::excessive_precision)]

use std::ops::Range;

use switchyard_core::Act;

/// How a kernel computes `a * b + c`: each kernel body is compiled once per instruction set,
/// and takes the form that its instructions do in one step.
pub trait MulAdd {
    /// `a * b + c`.
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// One rounding (`f32::mul_add`): for code compiled with FMA instructions (every AVX2 and
/// AVX-512 body; the portable one where the target always has them, as aarch64 does).
pub struct Fused;

/// Two roundings: for code compiled without FMA instructions, where `f32::mul_add` is a call
/// into libm's fma, one value at a time (in software on a CPU without FMA).
pub struct Split;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl MulAdd for Split {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// The multiply-add of portable code compiled for the build's target: [`Split`] on x86 unless
/// the build enables FMA (the baseline has none), [`Fused`] elsewhere (aarch64's baseline has
/// FMA).
#[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), not(target_feature = "fma")))]
pub type Baseline = Split;
/// The multiply-add of portable code compiled for the build's target: [`Split`] on x86 unless
/// the build enables FMA (the baseline has none), [`Fused`] elsewhere (aarch64's baseline has
/// FMA).
#[cfg(not(all(any(target_arch = "x86", target_arch = "x86_64"), not(target_feature = "fma"))))]
pub type Baseline = Fused;

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two, so that `n * LN2_HI` is exact for the `n` that `exp` meets.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `e^x` for `x` in [-87.33, 88.37] (the normal f32 range); outside, `x` is clamped to it.
#[inline(always)]
pub fn exp<M: MulAdd>(x: f32) -> f32 {
    // 1.5 * 2^23: adding it rounds to a whole number, which the low mantissa bits then hold.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.33, 88.37);
    // x = n ln2 + r with |r| <= ln2 / 2, n = round(x log2 e) found without a float-to-int
    // conversion (whose saturating semantics would keep the loop from vectorising).
    let t = M::mul_add(x, LOG2E, ROUND);
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    // e^r on [-ln2/2, ln2/2]: Cephes' minimax polynomial for expf.
    let p = 1.987_569_1e-4_f32;
    let p = M::mul_add(p, r, 1.398_199_9e-3);
    let p = M::mul_add(p, r, 8.333_452e-3);
    let p = M::mul_add(p, r, 4.166_579_6e-2);
    let p = M::mul_add(p, r, 1.666_666_5e-1);
    let p = M::mul_add(p, r, 5.000_000_1e-1);
    let er = M::mul_add(p, r * r, r) + 1.0;
    // 2^n through the exponent bits; n is in [-126, 127] after the clamp, and it is the low
    // bits of t (a NaN gives some scale, and NaN for the product).
    let scale = f32::from_bits(t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    er * scale
}

/// `ln x` for `x > 0` (finite); what it gives elsewhere is unspecified.
#[inline(always)]
pub fn ln<M: MulAdd>(x: f32) -> f32 {
    const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
    let bits = x.to_bits();
    // x = m 2^e with m in [1, 2).
    let e = ((bits >> 23) & 0xff) as i32 - 127;
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    // Move m to [sqrt(1/2), sqrt(2)) so that ln m is small.
    let big = m > 2.0 * SQRT_HALF;
    let m = if big { m * 0.5 } else { m };
    let e = (if big { e + 1 } else { e }) as f32;
    let f = m - 1.0;
    // ln(1 + f) = f - f^2/2 + f^3 P(f): Cephes' polynomial for logf.
    let p = 7.037_683_6e-2_f32;
    let p = M::mul_add(p, f, -1.151_461e-1);
    let p = M::mul_add(p, f, 1.167_699_9e-1);
    let p = M::mul_add(p, f, -1.242_014_1e-1);
    let p = M::mul_add(p, f, 1.424_932_3e-1);
    let p = M::mul_add(p, f, -1.666_805_8e-1);
    let p = M::mul_add(p, f, 2.000_071_5e-1);
    let p = M::mul_add(p, f, -2.499_999_4e-1);
    let p = M::mul_add(p, f, 3.333_333e-1);
    let f2 = f * f;
    let y = f2 * f * p - 0.5 * f2 + f;
    M::mul_add(e, std::f32::consts::LN_2, y)
}

/// Where [`erf_abs`]'s polynomial stops: `erf 3.8` is 1 within 7.7e-8, below half an ulp of 1.
const ERF_CLAMP: f32 = 3.8;

/// `erf |z|` within 4e-7 (absolute), with neither a division nor an exponential: a degree-15
/// polynomial in `t = |z| / 1.9 - 1` on `[0, 3.8]`, and 1 past it. The coefficients are erf's
/// Chebyshev fit there (numpy's `chebfit` of degree 15 at 8000 Chebyshev points, `cheb2poly`),
/// rounded to f32; most of the error is f32 rounding near `t = -1`. The form with `exp` and a
/// division it replaces (erfc's Chebyshev fit from Numerical Recipes) cost twice as much per
/// value: GELU went from 4.5% to 2.3% of all-MiniLM-L6-v2's GEMM time in f32, and int8 ran 6%
/// faster (measured).
#[inline(always)]
fn erf_abs<M: MulAdd>(z: f32) -> f32 {
    const C: [f32; 16] = [
        0.992_790_46,
        0.057_998_106,
        -0.209_370_51,
        0.434_038_76,
        -0.531_552_55,
        0.298_260_03,
        0.153_239_25,
        -0.419_151_34,
        0.258_033_81,
        0.102_845_885,
        -0.236_227_92,
        0.065_000_877,
        0.085_832_223,
        -0.049_442_131,
        -0.012_744_781,
        0.010_449_82,
    ];
    let z = z.abs();
    let t = M::mul_add(z.min(ERF_CLAMP), 2.0 / ERF_CLAMP, -1.0);
    let mut p = C[15];
    for &c in C[..15].iter().rev() {
        p = M::mul_add(p, t, c);
    }
    if z >= ERF_CLAMP { 1.0 } else { p }
}

/// Exact GELU: `x/2 (1 + erf(x / sqrt 2))`, within 2e-7 |x| of it (absolute).
#[inline(always)]
pub fn gelu<M: MulAdd>(x: f32) -> f32 {
    let e = erf_abs::<M>(x * std::f32::consts::FRAC_1_SQRT_2).copysign(x);
    let h = 0.5 * x;
    M::mul_add(h, e, h)
}

/// `tanh x`.
#[inline(always)]
pub fn tanh<M: MulAdd>(x: f32) -> f32 {
    // 1 - 2 / (e^(2|x|) + 1), with the sign put back; |x| > 9 is +-1 in f32.
    let a = x.abs().min(9.0);
    let t = 1.0 - 2.0 / (exp::<M>(2.0 * a) + 1.0);
    t.copysign(x)
}

/// The logistic function.
#[inline(always)]
pub fn sigmoid<M: MulAdd>(x: f32) -> f32 {
    1.0 / (1.0 + exp::<M>(-x))
}

/// `act(x)`, for every activation of the graph.
#[inline(always)]
pub fn act<M: MulAdd>(act: Act, x: f32) -> f32 {
    match act {
        Act::Identity => x,
        Act::Gelu => gelu::<M>(x),
        Act::GeluTanh => {
            let c = 0.797_884_56_f32; // sqrt(2 / pi)
            0.5 * x * (1.0 + tanh::<M>(c * M::mul_add(0.044_715 * x * x, x, x)))
        }
        Act::Relu => x.max(0.0),
        Act::Silu => x * sigmoid::<M>(x),
        Act::Tanh => tanh::<M>(x),
        Act::Sigmoid => sigmoid::<M>(x),
        Act::Log1pRelu => ln::<M>(1.0 + x.max(0.0)),
    }
}

/// `$each!(f)` with `f` the element function of activation `$a` computed with `$m`'s
/// multiply-add: the match is outside the loop `$each` writes, so each loop body is one
/// function and vectorises.
macro_rules! with_act {
    ($a:expr, $m:ty, $each:ident) => {
        match $a {
            Act::Identity => $each!(|x: f32| x),
            Act::Gelu => $each!(gelu::<$m>),
            Act::GeluTanh => $each!(|x| act::<$m>(Act::GeluTanh, x)),
            Act::Relu => $each!(|x: f32| x.max(0.0)),
            Act::Silu => $each!(|x: f32| x * sigmoid::<$m>(x)),
            Act::Tanh => $each!(tanh::<$m>),
            Act::Sigmoid => $each!(sigmoid::<$m>),
            Act::Log1pRelu => $each!(|x: f32| ln::<$m>(1.0 + x.max(0.0))),
        }
    };
}

/// Applies `a` to every value of `xs`, in place, in one loop body per activation.
#[inline(always)]
pub fn act_in_place<M: MulAdd>(a: Act, xs: &mut [f32]) {
    if a == Act::Identity {
        return;
    }
    macro_rules! each {
        ($f:expr) => {
            for x in xs.iter_mut() {
                *x = $f(*x);
            }
        };
    }
    with_act!(a, M, each)
}

/// `out[j] = a(xs[j] + bias[j]) + add[j]` for every `j` of `out`, in one pass and one loop body
/// per activation. `add` is `None` to add `out`'s own values, which a GEMM's residual written in
/// place is.
///
/// # Panics
/// If a slice is shorter than `out`.
#[inline(always)]
pub fn act_into<M: MulAdd>(a: Act, out: &mut [f32], xs: &[f32], bias: &[f32], add: Option<&[f32]>) {
    let n = out.len();
    let (xs, bias) = (&xs[..n], &bias[..n]);
    macro_rules! each {
        ($f:expr) => {
            match add {
                Some(add) => {
                    for (((o, &x), &b), &r) in out.iter_mut().zip(xs).zip(bias).zip(&add[..n]) {
                        *o = $f(x + b) + r;
                    }
                }
                None => {
                    for ((o, &x), &b) in out.iter_mut().zip(xs).zip(bias) {
                        *o += $f(x + b);
                    }
                }
            }
        };
    }
    with_act!(a, M, each)
}

/// Values per block of [`max_in`] and [`exp_sum_in`].
const LANES: usize = 16;

/// Whether the block of sixteen from `j0` lies inside `range`.
#[inline(always)]
fn inside(j0: usize, range: &Range<usize>) -> bool {
    range.start <= j0 && j0 + LANES <= range.end
}

/// The largest of `xs[range]` (-inf for none; NaN is passed over), reading `xs` in whole
/// blocks of sixteen, those at the ends of `range` masked, so that every block vectorises.
///
/// # Panics
/// If `xs` is not whole blocks of sixteen (a debug assertion).
#[inline(always)]
pub fn max_in(xs: &[f32], range: Range<usize>) -> f32 {
    debug_assert!(xs.len().is_multiple_of(LANES) && range.end <= xs.len());
    let larger = |a: f32, x: f32| if x > a { x } else { a };
    let mut acc = [f32::NEG_INFINITY; LANES];
    for (bi, block) in xs.chunks_exact(LANES).enumerate() {
        let j0 = bi * LANES;
        if inside(j0, &range) {
            for (a, &x) in acc.iter_mut().zip(block) {
                *a = larger(*a, x);
            }
        } else {
            for (t, (a, &x)) in acc.iter_mut().zip(block).enumerate() {
                let x = if range.contains(&(j0 + t)) { x } else { f32::NEG_INFINITY };
                *a = larger(*a, x);
            }
        }
    }
    acc.into_iter().fold(f32::NEG_INFINITY, larger)
}

/// Replaces each `x` of `xs[range]` by `e^(x - shift)` and every other value of `xs` by zero,
/// and returns the sum, in whole blocks of sixteen as [`max_in`] reads them.
///
/// # Panics
/// If `xs` is not whole blocks of sixteen (a debug assertion).
#[inline(always)]
pub fn exp_sum_in<M: MulAdd>(xs: &mut [f32], range: Range<usize>, shift: f32) -> f32 {
    debug_assert!(xs.len().is_multiple_of(LANES) && range.end <= xs.len());
    let mut acc = [0.0f32; LANES];
    for (bi, block) in xs.chunks_exact_mut(LANES).enumerate() {
        let j0 = bi * LANES;
        if inside(j0, &range) {
            for (a, x) in acc.iter_mut().zip(block) {
                *x = exp::<M>(*x - shift);
                *a += *x;
            }
        } else {
            for (t, (a, x)) in acc.iter_mut().zip(block).enumerate() {
                let e = exp::<M>(*x - shift);
                *x = if range.contains(&(j0 + t)) { e } else { 0.0 };
                *a += *x;
            }
        }
    }
    acc.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evenly spaced points of `[lo, hi]`.
    fn grid(lo: f64, hi: f64, n: usize) -> impl Iterator<Item = f32> {
        (0..=n).map(move |i| (lo + (hi - lo) * i as f64 / n as f64) as f32)
    }

    fn ulps(a: f32, b: f64) -> f64 {
        let b32 = b as f32;
        ((a.to_bits() as i64 - b32.to_bits() as i64).abs()) as f64
    }

    /// Runs `$check::<M>` with multiply-adds fused and split.
    macro_rules! both {
        ($name:ident, $check:ident) => {
            #[test]
            fn $name() {
                $check::<Fused>();
                $check::<Split>();
            }
        };
    }

    both!(exp_is_within_two_ulp_and_saturates, exp_check);
    fn exp_check<M: MulAdd>() {
        for x in grid(-87.0, 88.0, 200_000) {
            let want = f64::from(x).exp();
            let got = exp::<M>(x);
            assert!(ulps(got, want) <= 2.0, "exp({x}) = {got} want {want}");
        }
        assert_eq!(exp::<M>(-1000.0), exp::<M>(-87.33));
        assert!(exp::<M>(-1000.0) < 1e-37 && exp::<M>(1000.0).is_finite());
    }

    both!(erf_is_within_its_bound_and_exactly_one_past_the_clamp, erf_check);
    fn erf_check<M: MulAdd>() {
        for z in grid(0.0, 6.0, 120_000) {
            let (got, want) = (erf_abs::<M>(z), libm::erf(f64::from(z)));
            assert!((f64::from(got) - want).abs() <= 4e-7, "erf({z}) = {got} want {want}");
            assert_eq!(erf_abs::<M>(-z), got, "erf_abs is even");
        }
        assert_eq!(erf_abs::<M>(ERF_CLAMP), 1.0);
        assert_eq!(gelu::<M>(-30.0), 0.0);
        assert_eq!(gelu::<M>(30.0), 30.0);
    }

    both!(ln_is_within_two_ulp, ln_check);
    fn ln_check<M: MulAdd>() {
        for x in grid(1e-30, 10.0, 50_000).chain(grid(1.0, 1e6, 50_000)).filter(|x| *x > 0.0) {
            let want = f64::from(x).ln();
            let got = ln::<M>(x);
            let ok = ulps(got, want) <= 2.0 || (f64::from(got) - want).abs() < 1e-7;
            assert!(ok, "ln({x}) = {got} want {want}");
        }
    }

    both!(max_and_exp_sum_match_their_definitions, exp_sum_check);
    fn exp_sum_check<M: MulAdd>() {
        let xs: Vec<f32> = grid(-3.0, 2.0, 47).collect();
        assert_eq!(max_in(&xs, 0..48), 2.0);
        assert_eq!(max_in(&xs, 3..8), xs[7]);
        assert_eq!(max_in(&xs, 20..40), xs[39], "a range across two blocks");
        assert_eq!(max_in(&xs, 5..5), f32::NEG_INFINITY);
        let mut nan = xs.clone();
        nan[10] = f32::NAN;
        assert_eq!(max_in(&nan, 0..20), xs[19], "NaN is passed over");
        for range in [0..48, 3..8, 17..45, 16..32, 6..6] {
            let mut ys = xs.clone();
            let sum = exp_sum_in::<M>(&mut ys, range.clone(), 2.0);
            let want: f64 = xs[range.clone()].iter().map(|&x| (f64::from(x) - 2.0).exp()).sum();
            assert!((f64::from(sum) - want).abs() <= 1e-6 * want, "{range:?}: {sum} vs {want}");
            for (j, (y, x)) in ys.iter().zip(&xs).enumerate() {
                let e = if range.contains(&j) { exp::<M>(x - 2.0) } else { 0.0 };
                assert_eq!(*y, e, "{range:?}: value {j}");
            }
        }
    }

    both!(activations_match_the_f64_definitions, act_check);
    fn act_check<M: MulAdd>() {
        for a in Act::ALL {
            let mut worst = 0.0f64;
            for x in grid(-30.0, 30.0, 120_000) {
                let want = a.apply(f64::from(x));
                let err = (f64::from(act::<M>(a, x)) - want).abs() / (1e-6 + 1e-6 * want.abs());
                worst = worst.max(err);
            }
            assert!(worst <= 1.0, "{a:?}: worst error {worst} of the bound");
            let mut xs: Vec<f32> = grid(-5.0, 5.0, 1000).collect();
            let each: Vec<f32> = xs.iter().map(|&x| act::<M>(a, x)).collect();
            act_in_place::<M>(a, &mut xs);
            assert_eq!(xs, each, "{a:?}: the slice form is the scalar one");
        }
    }

    #[test]
    fn split_multiply_adds_round_twice() {
        // 1 + 2^-12 squared is 1 + 2^-11 + 2^-24: the last term survives one rounding only.
        let a = 1.0 + 2f32.powi(-12);
        assert_eq!(Fused::mul_add(a, a, -1.0), 2f32.powi(-11) + 2f32.powi(-24));
        assert_eq!(Split::mul_add(a, a, -1.0), 2f32.powi(-11));
    }
}
