//! The GEMM in bf16: `out = act(x . w^T + bias) + residual` with `w` rounded to bf16 once, at
//! upload, and `x` rounded to bf16 per value just before, each product exact in f32 and the sums
//! f32 (mixed precision, as PyTorch's CPU autocast computes a linear layer in bf16).
//!
//! A bf16 value is the upper half of an f32's bits, so a product of two is exact in f32: the
//! only errors are the two roundings to bf16 (half a unit in the 8th significant bit of each
//! value) and f32 summation. The weights are packed in panels of `NR` columns, pairs of
//! consecutive `k` per column (what `vdpbf16ps` reads); `k` is padded to an even number with
//! zero weights.
//!
//! Tasks, tiling and the epilogue are the f32 GEMM's ([`super::gemm`]). On a CPU with Intel AMX
//! (Xeon from Sapphire Rapids on, on Linux) a task runs on the tile registers instead of a
//! microkernel (`kernels/amx.rs`): the same panels of 32 columns read as two tiles of 16, its rows
//! 16 at a time straight from the rounded rows, all of `k` summed in the tiles (padded to a
//! multiple of 32) before the epilogue. Elsewhere the microkernel runs on AVX-512 BF16 (32 columns,
//! `vdpbf16ps`: two products per lane per instruction, twice the f32 FMA's) where that instruction
//! makes more products a second than f32 FMAs (the AMD EPYC, Zen 5, of 2026-12-02: 1.85x), or on
//! AVX-512 (32 columns) or AVX2 with FMA (16 columns), which widen the bf16 values to f32 in
//! registers (a shift or a mask of the bits each) and multiply with the f32 GEMM's FMAs: about as
//! fast as f32 there, the weights half the size. Some CPUs with AVX-512 BF16 run `vdpbf16ps` at a
//! quarter of the FMA's rate (an Intel Xeon of family 6 model 207, 2026-12-07: half the products a
//! second), so which of the two runs there is timed once per process ([`Isa16::detect`]). On
//! aarch64 with the bf16 extension (FEAT_BF16: Neoverse V1 and later, Apple M2 and later) it runs
//! `bfmmla` (16 columns; each instruction adds a pair of rows times a pair of columns, four deep:
//! sixteen products, where an f32 `fmla` makes four), whose panels group four `k` per column
//! instead of two. Which runs is chosen at run time; elsewhere portable code (16 columns) widens
//! each value and multiplies with FMA, compiled for the f32 GEMM's instruction set.
//!
//! `bfmmla` rounds as Arm defines it without FEAT_EBF16's IEEE mode: each pair of products is
//! summed, then added to its sum, rounding to odd each time, with subnormal values flushed to
//! zero. That is at most one unit in the last place of f32 a step where the other kernels'
//! FMAs round to nearest (half a unit); next to the two roundings to bf16 it is nothing.

use rayon::prelude::*;
use switchyard_core::Act;

use super::amx;
use super::gemm::{Epilogue, Isa, MR, Tiling, for_each_task, task_blocks, tile_scratch};
use super::math::{self, MulAdd};
use super::multiversion;
use super::scratch::{ScratchSize, Scratches, SendPtr};
use crate::buf::AlignedBuf;

/// Pairs of `k` per block of `k`: a block's panel of weights (32 KB with AVX-512 BF16) stays in
/// L1.
const KP: usize = 256;

/// The instruction set of the bf16 microkernel, chosen once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa16 {
    /// Intel AMX (AMX-BF16, with AVX-512 BF16 beside it): 32 columns per panel, as
    /// [`Isa16::Avx512Bf16`]'s, read as tiles of 16 columns by `tdpbf16ps`, 16 rows x 32 `k` a
    /// tile of input; `k` padded to a multiple of 32.
    AmxBf16,
    /// AVX-512 BF16: 32 columns per tile, `vdpbf16ps`.
    Avx512Bf16,
    /// AVX-512: 32 columns per tile, bf16 widened to f32 in registers.
    Avx512,
    /// AVX2 with FMA: 16 columns per tile, bf16 widened to f32 in registers.
    Avx2,
    /// aarch64 with the bf16 extension (FEAT_BF16): 16 columns per tile, `bfmmla`, panels of
    /// groups of four `k`.
    NeonBf16,
    /// Portable code: 16 columns per tile, bf16 widened to f32, compiled for the f32 GEMM's
    /// instruction set.
    Portable,
}

impl Isa16 {
    /// The best this CPU has: the first it runs of AMX, AVX-512 BF16 (where `vdpbf16ps` makes
    /// more products a second than f32 FMAs, timed once per process), AVX-512's and AVX2's
    /// widening kernels, NEON BF16, portable code.
    pub fn detect() -> Isa16 {
        Isa16::runnable()
            .into_iter()
            .find(|&isa| isa != Isa16::Avx512Bf16 || dot_outruns_fma())
            .unwrap_or(Isa16::Portable)
    }

    /// Every instruction set this CPU can run, the one [`Isa16::detect`] picks first (for
    /// tests).
    pub fn available() -> Vec<Isa16> {
        let best = Isa16::detect();
        let mut all = Isa16::runnable();
        all.retain(|&i| i != best);
        all.insert(0, best);
        all
    }

    /// Every instruction set this CPU can run, in the order they are preferred: AMX, AVX-512
    /// BF16, AVX-512's and AVX2's widening kernels, NEON BF16, portable code.
    fn runnable() -> Vec<Isa16> {
        let mut all = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512bw") && has!("avx512bf16") {
                if amx::bf16_ready() {
                    all.push(Isa16::AmxBf16);
                }
                all.push(Isa16::Avx512Bf16);
            }
            if has!("avx512f") {
                all.push(Isa16::Avx512);
            }
            if has!("avx2") && has!("fma") {
                all.push(Isa16::Avx2);
            }
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("bf16") {
            all.push(Isa16::NeonBf16);
        }
        all.push(Isa16::Portable);
        all
    }

    /// Columns of a microkernel tile.
    pub const fn nr(self) -> usize {
        match self {
            Isa16::AmxBf16 | Isa16::Avx512Bf16 | Isa16::Avx512 => 32,
            Isa16::Avx2 | Isa16::NeonBf16 | Isa16::Portable => 16,
        }
    }

    /// How its kernel reads the rounded rows.
    pub const fn rows(self) -> Rows16 {
        match self {
            Isa16::Avx512 | Isa16::Avx2 => Rows16::Widened,
            Isa16::AmxBf16 | Isa16::Avx512Bf16 | Isa16::NeonBf16 | Isa16::Portable => Rows16::Pairs,
        }
    }

    /// Consecutive `k` of one column the microkernel reads together: four for `bfmmla`, a pair
    /// for the others.
    pub const fn group(self) -> usize {
        match self {
            Isa16::NeonBf16 => 4,
            Isa16::AmxBf16 | Isa16::Avx512Bf16 | Isa16::Avx512 | Isa16::Avx2 | Isa16::Portable => 2,
        }
    }

    /// What `k` is padded to a multiple of, with zero weights and zero row values: a tile's 32
    /// on AMX, a group elsewhere.
    pub const fn depth(self) -> usize {
        match self {
            Isa16::AmxBf16 => amx::ROW_BYTES / 2,
            _ => self.group(),
        }
    }

    /// Rows past the last one the kernel may read (not use) of the rounded rows: AMX loads
    /// whole tiles of 16 rows.
    const fn rows_past(self) -> usize {
        match self {
            Isa16::AmxBf16 => amx::ROWS - 1,
            _ => 0,
        }
    }
}

/// Whether `vdpbf16ps` makes more products a second than f32 FMAs on this CPU, which has AVX-512
/// BF16 ([`Isa16::runnable`] lists it): timed the first time asked.
fn dot_outruns_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static VERDICT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        // SAFETY: asked only of a CPU with avx512f and avx512bf16, where AVX-512 BF16 is
        // runnable.
        *VERDICT.get_or_init(|| unsafe { x86::dot_outruns_fma() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `v` rounded to bf16 (to nearest, ties to even), as its 16 bits; a NaN stays a NaN.
#[inline(always)]
pub fn to_bf16(v: f32) -> u16 {
    let bits = v.to_bits();
    let rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
    // A NaN's payload may round into the exponent (or past it): keep it a quiet NaN instead.
    if v.is_nan() { ((bits >> 16) | 0x40) as u16 } else { rounded as u16 }
}

/// The f32 whose upper half is the bf16 `h`: exact.
#[inline(always)]
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// A weight matrix `[n, k]` rounded to bf16 and packed for `x . w^T`.
#[derive(Clone, Debug)]
pub struct PackedWeight16 {
    n: usize,
    k: usize,
    isa: Isa16,
    /// Panels of `nr` columns, each `kpad / group` groups of `nr x group` values: a group's
    /// values of column 0, then column 1's, and so on; with groups of four, the columns in pairs
    /// whose groups `bfmmla` reads together, so the same order.
    data: Vec<u16>,
}

impl PackedWeight16 {
    /// Rounds and packs the row-major `[n, k]` matrix `w` for `isa`'s microkernel.
    pub fn pack(w: &[f32], n: usize, k: usize, isa: Isa16) -> PackedWeight16 {
        assert_eq!(w.len(), n * k, "a [{n}, {k}] weight");
        let (nr, group) = (isa.nr(), isa.group());
        let kpad = k.next_multiple_of(isa.depth());
        let panels = n.div_ceil(nr);
        let mut data = vec![0u16; panels * kpad * nr];
        for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
            let (p, c) = (j / nr, j % nr);
            let panel = &mut data[p * kpad * nr..(p + 1) * kpad * nr];
            for (kk, &v) in row.iter().enumerate() {
                panel[(kk / group) * nr * group + c * group + kk % group] = to_bf16(v);
            }
        }
        PackedWeight16 { n, k, isa, data }
    }

    /// Output columns.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }

    /// `k` padded to the kernel's depth ([`Isa16::depth`]): the values of a rounded input row.
    pub fn kpad(&self) -> usize {
        self.k.next_multiple_of(self.isa.depth())
    }

    /// `u16` of one input row rounded for this weight's kernel.
    pub fn row_len(&self) -> usize {
        self.kpad() / 2 * self.isa.rows().pair_len()
    }

    /// `u16` the rounded rows of an `m`-row input take for this weight's kernel: `m` rows, and
    /// on AMX room for the 15 more its last tile may read.
    pub fn rows_len(&self, m: usize) -> usize {
        (m + self.isa.rows_past()) * self.row_len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * size_of::<u16>()
    }

    fn panel(&self, p: usize) -> &[u16] {
        let span = self.kpad() * self.isa.nr();
        &self.data[p * span..(p + 1) * span]
    }
}

/// How a bf16 kernel reads the rounded rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows16 {
    /// Each value's bf16, pairs of consecutive values together (what `vdpbf16ps` multiplies),
    /// `kpad` values a row.
    Pairs,
    /// Each value's bf16 widened to f32 (the bf16 in the upper half), as the AVX2 kernel
    /// broadcasts it: two `u16` a value, `2 * kpad` a row.
    Widened,
}

impl Rows16 {
    /// `u16` a row holds for each pair of values.
    const fn pair_len(self) -> usize {
        match self {
            Rows16::Pairs => 2,
            Rows16::Widened => 4,
        }
    }
}

/// Rounds `m` rows of `k = w.k()` values at `x` to bf16 for the bf16 GEMM with `w`, into `out`
/// in the form `w`'s kernel reads ([`Rows16`]; `w.row_len()` a row, zero past `k`), in parallel
/// on the current rayon pool, compiled for `isa`.
///
/// # Safety
/// `x` holds `m x w.k()` readable values that no thread writes meanwhile.
pub unsafe fn round_rows(isa: Isa, x: *const f32, m: usize, w: &PackedWeight16, out: &mut [u16]) {
    let (x, k, form, len) = (SendPtr(x.cast_mut()), w.k, w.isa.rows(), w.row_len());
    out[..m * len].par_chunks_mut(len.max(1)).enumerate().for_each(|(r, row)| {
        // SAFETY: row r < m of x, and a row of the form's length for k values.
        unsafe { round_row(isa, SendPtr(x.get().add(r * k)), k, form, row) }
    });
}

multiversion! {
    /// One row of [`round_rows`]: `k` values at `x` into `row` in `form`, the rest of `row`
    /// zero.
    ///
    /// # Safety
    /// `x` holds `k` readable values, and `row` has at least the `u16` `form` stores for `k`
    /// values.
    unsafe fn round_row(x: SendPtr, k: usize, form: Rows16, row: &mut [u16]) {
        // SAFETY: the caller's contract.
        let xr = unsafe { std::slice::from_raw_parts(x.get().cast_const(), k) };
        match form {
            Rows16::Pairs => {
                for (d, &v) in row.iter_mut().zip(xr) {
                    *d = to_bf16(v);
                }
                row[k..].fill(0);
            }
            Rows16::Widened => {
                // Little-endian: the low `u16` of a value's f32 first, zero for a bf16.
                for (d, &v) in row.chunks_exact_mut(2).zip(xr) {
                    (d[0], d[1]) = (0, to_bf16(v));
                }
                row[2 * k..].fill(0);
            }
        }
    }
}

/// The scratch a bf16 GEMM over at most `m` rows of `w` needs per thread.
pub fn scratch_size(m: usize, w: &PackedWeight16) -> ScratchSize {
    match w.isa {
        // A task's tile buffer holds its rows rounded up to whole tiles of 16: at most 48
        // (`gemm::RG x MR`), or `m` rounded up to 16 when that is fewer.
        Isa16::AmxBf16 => tile_scratch(m.next_multiple_of(amx::ROWS), w.isa.nr()),
        _ => tile_scratch(m, w.isa.nr()),
    }
}

/// One bf16 GEMM call.
struct Job<'a> {
    rows: &'a [u16],
    m: usize,
    w: &'a PackedWeight16,
    epilogue: Epilogue<'a>,
    tiling: Tiling,
}

/// `out = act(x . w^T + bias) + residual` for `m` rows given as [`round_rows`] left them
/// (`rows`), on the current rayon pool, with the threads' `scratch`; the portable microkernel is
/// compiled for `isa`.
///
/// # Safety
/// `out` holds `m x w.n()` writable values; a `residual` holds `m x w.n()` readable values and
/// is either `out` itself or overlaps nothing written; `bias` has `w.n()` values; `rows` holds
/// `m` rows rounded for `w` (`w.row_len()` values each) in its first `w.rows_len(m)` values. No
/// other thread writes any of them meanwhile.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm16(
    isa: Isa,
    rows: &[u16],
    m: usize,
    w: &PackedWeight16,
    bias: Option<&[f32]>,
    act: Act,
    residual: Option<*const f32>,
    out: *mut f32,
    scratch: &Scratches,
) {
    if m == 0 || w.n == 0 {
        return;
    }
    assert!(rows.len() >= w.rows_len(m), "rows rounded for this weight");
    let tiling = Tiling::new(m, w.n.div_ceil(w.isa.nr()));
    let epilogue = Epilogue::new(w.n, bias, act, residual, out);
    let job = Job { rows, m, w, epilogue, tiling };
    // SAFETY: the caller's contract covers every address a task touches; tasks write disjoint
    // rows x columns of `out`, and each tile buffer is its thread's alone.
    for_each_task(tiling, scratch, |t, ctile| unsafe { run_task(isa, &job, t, ctile) });
}

/// Runs task `t` with the microkernel of the packed weight's instruction set.
///
/// # Safety
/// As [`gemm16`]'s, for the rows and columns of task `t`.
unsafe fn run_task(isa: Isa, job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
    match (job.w.isa, isa) {
        // SAFETY: the instruction set was detected on this CPU when the weight was packed, so
        // the features the function enables are present; the rest is the caller's contract.
        #[cfg(target_arch = "x86_64")]
        (Isa16::AmxBf16, _) => unsafe { x86::task_amx_bf16(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Isa16::Avx512Bf16, _) => unsafe { x86::task_avx512_bf16(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Isa16::Avx512, _) => unsafe { x86::task_avx512_widened(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Isa16::Avx2, _) => unsafe { x86::task_avx2_widened(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        (Isa16::NeonBf16, _) => unsafe { arm::task_neon_bf16(job, t, ctile) },
        // SAFETY: `isa` was detected on this CPU; the rest is the caller's contract.
        #[cfg(target_arch = "x86_64")]
        (Isa16::Portable, Isa::Avx512) => unsafe { x86::task_avx512(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Isa16::Portable, Isa::Avx2) => unsafe { x86::task_avx2(job, t, ctile) },
        // SAFETY: the caller's contract; the portable kernel needs no feature.
        _ => unsafe { task::<Portable<math::Baseline>>(job, t, ctile) },
    }
}

/// A bf16 microkernel: an `MR x NR` tile of f32 sums at `c` (row stride `ldc`) from `pairs`
/// pairs of bf16 values of `MR` rows (at `a`) and a packed panel of `NR` columns, added to `c`
/// unless `first`. `pairs` is a multiple of the instruction set's group, in pairs.
trait Micro {
    const NR: usize;
    /// The multiply-add of the epilogue compiled beside the microkernel.
    type Fma: MulAdd;

    /// # Safety
    /// Each of `a` holds `2 * pairs` values, `b` `pairs * NR * 2`, `c` an `MR x NR` tile at row
    /// stride `ldc`; the CPU has the kernel's target features.
    unsafe fn tile(
        pairs: usize,
        a: &[*const u16; MR],
        b: *const u16,
        c: *mut f32,
        ldc: usize,
        first: bool,
    );
}

/// One task: the microkernel over its tiles, block of `k` by block, then the epilogue.
///
/// # Safety
/// As [`gemm16`]'s, for the rows and columns of task `t`; the CPU has `M`'s target features.
#[inline(always)]
unsafe fn task<M: Micro>(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
    let kpad = job.w.kpad();
    let (w, rows) = (job.w, job.rows);
    let (len, pair) = (w.row_len(), w.isa.rows().pair_len());
    // SAFETY: the caller's contract; each block's rows, panel and tile are the driver's, which
    // it keeps inside `rows`, the panel and the tile buffer.
    unsafe {
        task_blocks(
            job.tiling.span(t, job.m),
            (job.m, w.n, M::NR),
            (kpad / 2, KP),
            ctile,
            |p, g0| w.panel(p)[g0 * M::NR * 2..].as_ptr(),
            |r, g0| rows[r * len + g0 * pair..].as_ptr(),
            |pairs, a, b, c: *mut f32, ldc, first| M::tile(pairs, a, b, c, ldc, first),
            |r, c0, row| job.epilogue.finish::<M::Fma>(r, c0, row),
        )
    }
}

/// The portable microkernel: bf16 widened to f32, plain loops over fixed-size arrays, with
/// the multiply-adds of `F`.
struct Portable<F>(std::marker::PhantomData<F>);

impl<F: MulAdd> Micro for Portable<F> {
    const NR: usize = 16;
    type Fma = F;

    #[inline(always)]
    unsafe fn tile(
        pairs: usize,
        a: &[*const u16; MR],
        b: *const u16,
        c: *mut f32,
        ldc: usize,
        first: bool,
    ) {
        let mut acc = [[0.0f32; 16]; MR];
        if !first {
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: row i of the tile, 16 columns.
                row.copy_from_slice(unsafe { std::slice::from_raw_parts(c.add(i * ldc), 16) });
            }
        }
        for g in 0..pairs {
            // SAFETY: pair g of the panel: 16 columns of two values.
            let bg: &[u16; 32] = unsafe { &*b.add(g * 32).cast::<[u16; 32]>() };
            let (b0, b1): ([f32; 16], [f32; 16]) = (
                std::array::from_fn(|col| from_bf16(bg[col * 2])),
                std::array::from_fn(|col| from_bf16(bg[col * 2 + 1])),
            );
            for (row, ai) in acc.iter_mut().zip(a) {
                // SAFETY: pair g of the row.
                let (a0, a1) =
                    unsafe { (from_bf16(*ai.add(g * 2)), from_bf16(*ai.add(g * 2 + 1))) };
                for ((s, &x0), &x1) in row.iter_mut().zip(&b0).zip(&b1) {
                    *s = F::mul_add(a1, x1, F::mul_add(a0, x0, *s));
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: row i of the tile, 16 columns.
            unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), 16) }.copy_from_slice(row);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Job, MR, Micro, Portable, task};
    use crate::buf::AlignedBuf;
    use crate::kernels::amx;
    use crate::kernels::gemm8::x86::tile512;
    use crate::kernels::math::Fused;

    /// AVX-512 BF16: 32 columns in two registers of f32 per row, 12 accumulators, on the int8
    /// GEMM's microkernel.
    pub(super) struct Avx512Bf16;

    impl Micro for Avx512Bf16 {
        const NR: usize = 32;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn tile(
            pairs: usize,
            a: &[*const u16; MR],
            b: *const u16,
            c: *mut f32,
            ldc: usize,
            first: bool,
        ) {
            // A pair of bf16 is four bytes, as `tile512` reads a row; the panel's pairs of 32
            // columns are its 128 bytes a group. `__m512bh` and `__m512` are the bits of an
            // `__m512i`, so the casts only reinterpret registers.
            let dot = |s: __m512i, a: __m512i, b: __m512i| -> __m512i {
                // SAFETY: the caller enabled avx512bf16.
                unsafe {
                    let bf16 = |v| std::mem::transmute::<__m512i, __m512bh>(v);
                    let sums = _mm512_dpbf16_ps(_mm512_castsi512_ps(s), bf16(a), bf16(b));
                    _mm512_castps_si512(sums)
                }
            };
            // SAFETY: the caller's contract, which is `tile512`'s in bytes; the caller enabled
            // avx512f, avx512bw and avx512bf16.
            unsafe { tile512(pairs, &a.map(|r| r.cast()), b.cast(), c.cast(), ldc, first, dot) }
        }
    }

    /// AVX2 with FMA: 16 columns in two registers of f32 per row, 12 accumulators. A register
    /// of the panel holds eight columns' pairs, the first of each pair in the low half of its
    /// lane: shifted up 16 bits it is the f32 of the pair's first values, masked to its high
    /// half the second's. The rows are widened already ([`super::Rows16::Widened`]), so each
    /// value is broadcast as the f32 kernel broadcasts. Each pair's first products add up
    /// before its second's, so every sum is in `k` order, as the portable kernel's.
    pub(super) struct Avx2;

    impl Micro for Avx2 {
        const NR: usize = 16;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn tile(
            pairs: usize,
            a: &[*const u16; MR],
            b: *const u16,
            c: *mut f32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: every pointer stays inside the rows, panel and tile the caller vouched
            // for, and the caller enabled avx2 and fma; a row holds four `u16` a pair.
            unsafe {
                let high = _mm256_set1_epi32(0xffff_0000_u32 as i32);
                let firsts = |v: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
                let seconds = |v: __m256i| _mm256_castsi256_ps(_mm256_and_si256(v, high));
                let mut acc = [[_mm256_setzero_ps(); 2]; MR];
                if !first {
                    for (i, r) in acc.iter_mut().enumerate() {
                        r[0] = _mm256_loadu_ps(c.add(i * ldc));
                        r[1] = _mm256_loadu_ps(c.add(i * ldc + 8));
                    }
                }
                for g in 0..pairs {
                    let panel = |half: usize| _mm256_loadu_si256(b.add(g * 32 + half * 16).cast());
                    let (b0, b1) = (firsts(panel(0)), firsts(panel(1)));
                    for (r, ai) in acc.iter_mut().zip(a) {
                        let x = _mm256_broadcast_ss(&*ai.add(g * 4).cast());
                        r[0] = _mm256_fmadd_ps(x, b0, r[0]);
                        r[1] = _mm256_fmadd_ps(x, b1, r[1]);
                    }
                    let (b0, b1) = (seconds(panel(0)), seconds(panel(1)));
                    for (r, ai) in acc.iter_mut().zip(a) {
                        let x = _mm256_broadcast_ss(&*ai.add(g * 4 + 2).cast());
                        r[0] = _mm256_fmadd_ps(x, b0, r[0]);
                        r[1] = _mm256_fmadd_ps(x, b1, r[1]);
                    }
                }
                for (i, r) in acc.iter().enumerate() {
                    _mm256_storeu_ps(c.add(i * ldc), r[0]);
                    _mm256_storeu_ps(c.add(i * ldc + 8), r[1]);
                }
            }
        }
    }

    /// AVX-512: [`Avx2`]'s kernel in registers twice as wide, 32 columns in two of them per
    /// row, 12 accumulators; the same sums, in the same order.
    pub(super) struct Avx512;

    impl Micro for Avx512 {
        const NR: usize = 32;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn tile(
            pairs: usize,
            a: &[*const u16; MR],
            b: *const u16,
            c: *mut f32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: every pointer stays inside the rows, panel and tile the caller vouched
            // for, and the caller enabled avx512f; a row holds four `u16` a pair, a pair of
            // the panel 64 (two registers of sixteen columns' pairs).
            unsafe {
                let high = _mm512_set1_epi32(0xffff_0000_u32 as i32);
                let firsts = |v: __m512i| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
                let seconds = |v: __m512i| _mm512_castsi512_ps(_mm512_and_si512(v, high));
                let mut acc = [[_mm512_setzero_ps(); 2]; MR];
                if !first {
                    for (i, r) in acc.iter_mut().enumerate() {
                        r[0] = _mm512_loadu_ps(c.add(i * ldc));
                        r[1] = _mm512_loadu_ps(c.add(i * ldc + 16));
                    }
                }
                for g in 0..pairs {
                    let panel = |half: usize| _mm512_loadu_si512(b.add(g * 64 + half * 32).cast());
                    let (b0, b1) = (firsts(panel(0)), firsts(panel(1)));
                    for (r, ai) in acc.iter_mut().zip(a) {
                        let x = _mm512_set1_ps(*ai.add(g * 4).cast::<f32>());
                        r[0] = _mm512_fmadd_ps(x, b0, r[0]);
                        r[1] = _mm512_fmadd_ps(x, b1, r[1]);
                    }
                    let (b0, b1) = (seconds(panel(0)), seconds(panel(1)));
                    for (r, ai) in acc.iter_mut().zip(a) {
                        let x = _mm512_set1_ps(*ai.add(g * 4 + 2).cast::<f32>());
                        r[0] = _mm512_fmadd_ps(x, b0, r[0]);
                        r[1] = _mm512_fmadd_ps(x, b1, r[1]);
                    }
                }
                for (i, r) in acc.iter().enumerate() {
                    _mm512_storeu_ps(c.add(i * ldc), r[0]);
                    _mm512_storeu_ps(c.add(i * ldc + 16), r[1]);
                }
            }
        }
    }

    /// A task with the AVX-512 widening microkernel, the rest compiled for AVX-512 too.
    ///
    /// # Safety
    /// As `task`'s; the CPU has avx512f.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn task_avx512_widened(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        // SAFETY: the caller's contract, and the features are enabled here.
        unsafe { task::<Avx512>(job, t, ctile) }
    }

    /// Whether `vdpbf16ps` makes more products a second than `vfmadd` on f32 here: each timed on 8
    /// independent sums of a few thousand instructions, three times in turn, the fastest of each
    /// kept. Loops of nothing else made 1.85x the products on an AMD EPYC (Zen 5, 2026-12-02) and
    /// 0.49x on an Intel Xeon (family 6 model 207, 2026-12-07), so the verdict has room either side.
    ///
    /// # Safety
    /// The CPU has avx512f and avx512bf16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn dot_outruns_fma() -> bool {
        use std::hint::black_box;
        use std::time::Instant;
        const ROUNDS: usize = 2048;
        let (mut dot, mut fma) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            let x = black_box(_mm512_set1_ps(1.0));
            let mut acc = [_mm512_setzero_ps(); 8];
            let start = Instant::now();
            for _ in 0..ROUNDS {
                for s in &mut acc {
                    *s = _mm512_fmadd_ps(x, x, *s);
                }
            }
            black_box(acc);
            fma = fma.min(start.elapsed().as_secs_f64());
            // SAFETY: `__m512bh` holds the bits of an `__m512`: the cast only reinterprets.
            let h = unsafe { std::mem::transmute::<__m512, __m512bh>(x) };
            let mut acc = [_mm512_setzero_ps(); 8];
            let start = Instant::now();
            for _ in 0..ROUNDS {
                for s in &mut acc {
                    *s = _mm512_dpbf16_ps(*s, h, h);
                }
            }
            black_box(acc);
            dot = dot.min(start.elapsed().as_secs_f64());
        }
        // Two products a lane per `vdpbf16ps`, one per `vfmadd`.
        2.0 / dot > 1.0 / fma
    }

    /// A task with the AVX2 microkernel, the rest compiled for AVX2 too.
    ///
    /// # Safety
    /// As `task`'s; the CPU has avx2 and fma.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn task_avx2_widened(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        // SAFETY: the caller's contract, and the features are enabled here.
        unsafe { task::<Avx2>(job, t, ctile) }
    }

    /// A task with the AVX-512 BF16 microkernel, the rest compiled for AVX-512 too.
    ///
    /// # Safety
    /// As `task`'s; the CPU has avx512f, avx512bw and avx512bf16.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
    pub(super) unsafe fn task_avx512_bf16(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        // SAFETY: the caller's contract, and the features are enabled here.
        unsafe { task::<Avx512Bf16>(job, t, ctile) }
    }

    /// A task on AMX ([`amx::task`]) with `tdpbf16ps`, its epilogue compiled for AVX-512.
    ///
    /// # Safety
    /// As `task`'s; the CPU has AMX-BF16, avx512f, avx512bw and avx512bf16, and
    /// [`amx::bf16_ready`] returned true.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
    pub(super) unsafe fn task_amx_bf16(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        let (w, len) = (job.w, job.w.row_len());
        let span = job.tiling.span(t, job.m);
        let steps = w.kpad() / (amx::ROW_BYTES / 2);
        // SAFETY: the caller's contract: rows span.r0.. of the rounded rows, with the room
        // `rows_len` gives past the last, and panels of `steps` steps of 16 pairs of 32
        // columns.
        unsafe {
            let a = job.rows.as_ptr().add(span.r0 * len).cast::<u8>();
            amx::task(
                span,
                w.n,
                (a, len * size_of::<u16>()),
                |p| w.panel(p).as_ptr().cast(),
                ctile,
                |tiles, blocks, a, b, c| tiles.bf16_block(blocks, steps, a, b, c),
                |r, c0, row| job.epilogue.finish::<Fused>(r, c0, row),
            )
        }
    }

    /// A task with the portable microkernel compiled for AVX-512.
    ///
    /// # Safety
    /// As `task`'s; the CPU has avx512f.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn task_avx512(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        // SAFETY: the caller's contract, and the features are enabled here.
        unsafe { task::<Portable<Fused>>(job, t, ctile) }
    }

    /// A task with the portable microkernel compiled for AVX2.
    ///
    /// # Safety
    /// As `task`'s; the CPU has avx2 and fma.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn task_avx2(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        // SAFETY: the caller's contract, and the features are enabled here.
        unsafe { task::<Portable<Fused>>(job, t, ctile) }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use std::arch::aarch64::*;

    use super::{Job, MR, Micro, task};
    use crate::buf::AlignedBuf;
    use crate::kernels::gemm8::arm::{accumulating, tile_mmla};
    use crate::kernels::math::Baseline;

    accumulating! {
        /// `sums + a . b^T` in a 2 x 2 block of f32 (`[r0 c0, r0 c1, r1 c0, r1 c1]`): two rows
        /// of four bf16 in `a`, two columns of four in `b`, `bfmmla` (`vbfmmlaq_f32`; the
        /// caller enabled `bf16`).
        bfmmla, "bfmmla", "8h", float32x4_t, uint16x8_t, uint16x8_t
    }

    /// NEON with the bf16 extension: the int8 matrix multiply's microkernel
    /// ([`tile_mmla`]) with `bfmmla`, whose each instruction adds 16 products (a pair of rows
    /// by a pair of columns, four deep). A group of four bf16 is eight bytes, as `tile_mmla`
    /// reads a row, and the panel's groups of 16 columns are its 128 bytes.
    pub(super) struct NeonBf16;

    impl Micro for NeonBf16 {
        const NR: usize = 16;
        type Fma = Baseline;

        #[inline(always)]
        unsafe fn tile(
            pairs: usize,
            a: &[*const u16; MR],
            b: *const u16,
            c: *mut f32,
            ldc: usize,
            first: bool,
        ) {
            debug_assert!(pairs.is_multiple_of(2), "whole groups of four");
            // The casts only reinterpret registers.
            let mmla = |s: uint32x4_t, x: uint8x16_t, w: uint8x16_t| {
                // SAFETY: the caller enabled bf16.
                unsafe {
                    let (x, w) = (vreinterpretq_u16_u8(x), vreinterpretq_u16_u8(w));
                    vreinterpretq_u32_f32(bfmmla(vreinterpretq_f32_u32(s), x, w))
                }
            };
            // SAFETY: the caller's contract, which is `tile_mmla`'s in bytes.
            unsafe {
                let a = a.map(|r| r.cast());
                tile_mmla(pairs / 2, &a, b.cast(), c.cast(), ldc, first, mmla)
            }
        }
    }

    /// A task with the NEON bf16 microkernel.
    ///
    /// # Safety
    /// As `task`'s; the CPU has the bf16 extension.
    #[target_feature(enable = "neon,bf16")]
    pub(super) unsafe fn task_neon_bf16(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        // SAFETY: the caller's contract, and the features are enabled here.
        unsafe { task::<NeonBf16>(job, t, ctile) }
    }
}
