//! The GEMM in int8: `out = act(x . w^T + bias) + residual` with `w` quantized once, at upload,
//! per output column, and `x` quantized per row just before, sums of products in i32.
//!
//! A column `j` of `w` is quantized symmetrically: it becomes `round(w / sw_j)` in -127..=127
//! with `sw_j = max |w_j| / 127`. A row `r` of `x` is quantized over its own range, for the
//! instructions that multiply unsigned by signed bytes (VNNI's `vpdpbusd`): with `lo` and `hi`
//! its least and largest values (zero included), `sx_r = (hi - lo) / 255` and a zero point
//! `z_r = round(-lo / sx_r)`, each value becomes `round(x / sx_r) + z_r` in 0..=255, so `x . w^T`
//! is about `sx_r sw_j (qx_r . qw_j - z_r sum(qw_j))`, the zero point's share taken off each sum
//! once. A row's 256 steps then span only the values it has: the output of a GELU, almost all
//! positive, gets twice the resolution a symmetric scale would give it. The weights are packed
//! in panels of `NR` columns, groups of four consecutive `k` per column (what `vpdpbusd` reads);
//! `k` is padded to a multiple of four with zero weights.
//!
//! Tasks, tiling, their loops and the epilogue are the f32 GEMM's ([`super::gemm`]): a task
//! accumulates its tiles in its thread's tile buffer (as i32), block of `k` by block, then turns
//! each sum into f32 with the row's and the column's scales and finishes it as the f32 GEMM
//! does. On a CPU with Intel AMX (on Linux) a task runs on the tile registers instead
//! (`kernels/amx.rs`, as the bf16 GEMM does there): AVX-512 VNNI's panels read as tiles of 16
//! columns, its rows 16 at a time, `k` padded to a multiple of 64, the same exact i32 sums.
//! Elsewhere the microkernel runs on AVX-512 VNNI (32 columns; the bf16 GEMM shares it), AVX-VNNI
//! (16), plain AVX2 (16) or SSSE3 (16, plain AVX2's kernel at half the width) on x86-64, on the
//! int8 matrix multiply (16; `usmmla`, whose panels hold groups of eight `k` instead of four)
//! or the dot product instructions on aarch64 (16; `sdot`, which multiplies signed bytes, so
//! its rows are quantized as `q - 128` with a zero point `z - 128`: the same integers), chosen
//! at run time, else on portable code (16).
//!
//! Plain AVX2 has no instruction that sums products of bytes into i32 lanes: `vpmaddubsw`
//! multiplies unsigned by signed bytes into pairs summed in i16, saturating, and `vpmaddwd`
//! widens those pairs' sums to i32. A pair of bytes up to 255 times weights up to 127 in
//! magnitude would saturate, so for that kernel (and SSSE3's, the same instructions in 128-bit
//! registers) the weights are quantized to -63..=63 instead (`sw_j = max |w_j| / 63`,
//! [`Isa8::weight_max`]): a pair's sum is then at most `2 * 255 * 63 = 32130`, exact in i16,
//! and every sum is exact. It reads the same rows as the other kernels,
//! and its weights have half their steps (what that costs in accuracy: docs/backends.md).
//!
//! Sums are exact in i32 for `k` up to [`MAX_K`].

use rayon::prelude::*;
use switchyard_core::Act;

use super::amx;
use super::gemm::{Epilogue, Isa, MR, Tiling, for_each_task, task_blocks, tile_scratch};
use super::math::{self, MulAdd};
use super::multiversion;
use super::scratch::{ScratchSize, Scratches, SendPtr};
use crate::buf::AlignedBuf;

/// `k` per block of `k`: a block's panel of weights (32 KB with AVX-512 VNNI) stays in L1.
const KB: usize = 1024;

/// The longest rows the int8 GEMM takes: `k` products of a byte (up to 255) and a weight (up to
/// 127 in magnitude), and `z_r sum(qw_j)`, each fit in an i32.
pub const MAX_K: usize = 1 << 16;

/// The instruction set of the int8 microkernel, chosen once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa8 {
    /// Intel AMX (AMX-INT8, with AVX-512 VNNI beside it): [`Isa8::Avx512Vnni`]'s panels of 32
    /// columns read as tiles of 16 columns by `tdpbusd`, 16 rows x 64 `k` a tile of input; `k`
    /// padded to a multiple of 64.
    AmxInt8,
    /// AVX-512 with VNNI: 32 columns per tile.
    Avx512Vnni,
    /// AVX2 with AVX-VNNI: 16 columns per tile.
    AvxVnni,
    /// AVX2 without VNNI: 16 columns per tile, products summed by `vpmaddubsw` and `vpmaddwd`.
    Avx2,
    /// x86-64 without AVX2 but with SSSE3 (Intel since Core 2 and Atom, AMD since Bobcat and
    /// Bulldozer): plain AVX2's kernel in 128-bit registers (`pmaddubsw` and `pmaddwd`), 16
    /// columns per tile.
    Ssse3,
    /// aarch64 with the int8 matrix multiply (`usmmla`, FEAT_I8MM): 16 columns per tile, 2 x 2
    /// blocks of sums of eight products.
    NeonI8mm,
    /// aarch64 with the dot product instructions (`sdot`, FEAT_DotProd): 16 columns per tile,
    /// products of signed bytes.
    NeonDot,
    /// Portable code, vectorised by the compiler for the build's target: 16 columns per tile.
    Portable,
}

impl Isa8 {
    /// The best this CPU has.
    pub fn detect() -> Isa8 {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512bw") && has!("avx512vnni") {
                if amx::int8_ready() {
                    return Isa8::AmxInt8;
                }
                return Isa8::Avx512Vnni;
            }
            if has!("avx2") && has!("avxvnni") {
                return Isa8::AvxVnni;
            }
            if has!("avx2") {
                return Isa8::Avx2;
            }
            if has!("ssse3") {
                return Isa8::Ssse3;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            use std::arch::is_aarch64_feature_detected as has;
            if has!("i8mm") {
                return Isa8::NeonI8mm;
            }
            if has!("dotprod") {
                return Isa8::NeonDot;
            }
        }
        Isa8::Portable
    }

    /// Every instruction set this CPU can run, best first (for tests).
    pub fn available() -> Vec<Isa8> {
        let best = Isa8::detect();
        let all = [
            Isa8::AmxInt8,
            Isa8::Avx512Vnni,
            Isa8::AvxVnni,
            Isa8::Avx2,
            Isa8::Ssse3,
            Isa8::NeonI8mm,
            Isa8::NeonDot,
            Isa8::Portable,
        ];
        all.into_iter()
            .skip_while(|&i| i != best)
            .filter(|&i| match i {
                #[cfg(target_arch = "x86_64")]
                Isa8::AvxVnni => std::arch::is_x86_feature_detected!("avxvnni"),
                #[cfg(target_arch = "x86_64")]
                Isa8::Ssse3 => std::arch::is_x86_feature_detected!("ssse3"),
                #[cfg(not(target_arch = "x86_64"))]
                Isa8::AvxVnni | Isa8::Ssse3 => false,
                #[cfg(target_arch = "aarch64")]
                Isa8::NeonDot => std::arch::is_aarch64_feature_detected!("dotprod"),
                #[cfg(not(target_arch = "aarch64"))]
                Isa8::NeonI8mm | Isa8::NeonDot => false,
                _ => true,
            })
            .collect()
    }

    /// Columns of a microkernel tile.
    pub const fn nr(self) -> usize {
        match self {
            Isa8::AmxInt8 | Isa8::Avx512Vnni => 32,
            Isa8::AvxVnni
            | Isa8::Avx2
            | Isa8::Ssse3
            | Isa8::NeonI8mm
            | Isa8::NeonDot
            | Isa8::Portable => 16,
        }
    }

    /// Consecutive `k` of one column the microkernel reads together: 8 for `NeonI8mm` (its
    /// blocks are eight deep), 4 for the rest (`vpdpbusd` and `sdot` sum four products).
    pub const fn group(self) -> usize {
        match self {
            Isa8::NeonI8mm => 8,
            _ => 4,
        }
    }

    /// What `k` is padded to a multiple of, with zero weights and the zero point in the rows: a
    /// tile's 64 on AMX, a group elsewhere.
    pub const fn depth(self) -> usize {
        match self {
            Isa8::AmxInt8 => amx::ROW_BYTES,
            _ => self.group(),
        }
    }

    /// Rows past the last one the kernel may read (not use) of the quantized rows: AMX loads
    /// whole tiles of 16 rows.
    const fn rows_past(self) -> usize {
        match self {
            Isa8::AmxInt8 => amx::ROWS - 1,
            _ => 0,
        }
    }

    /// The largest magnitude of a quantized weight: 127, or 63 for plain AVX2 and SSSE3, whose
    /// pairs of products of a byte and a weight are summed in i16.
    pub const fn weight_max(self) -> i8 {
        match self {
            Isa8::Avx2 | Isa8::Ssse3 => 63,
            _ => 127,
        }
    }

    /// What the kernel's input bytes are offset by: 128 for `NeonDot`, whose `sdot` multiplies
    /// signed bytes, so its rows hold `q - 128` (`q` in 0..=255 flipped to -128..=127) and their
    /// zero points `z - 128`; 0 for the rest, which read `q` as an unsigned byte.
    pub const fn row_offset(self) -> i32 {
        match self {
            Isa8::NeonDot => 128,
            _ => 0,
        }
    }
}

/// A weight matrix `[n, k]` quantized to int8 per output column and packed for `x . w^T`.
#[derive(Clone, Debug)]
pub struct PackedWeight8 {
    n: usize,
    k: usize,
    isa: Isa8,
    /// Panels of `nr` columns, each `row_bytes() / g` groups of `nr x g` values (`g` the
    /// kernel's [`Isa8::group`]: `g` consecutive `k` of a column, the columns in order).
    data: Vec<i8>,
    /// Each column's scale.
    scales: Vec<f32>,
    /// Each column's `sum(q)`, which each row's zero point multiplies.
    sums: Vec<i32>,
}

impl PackedWeight8 {
    /// Quantizes (to `isa.weight_max()` in magnitude) and packs the row-major `[n, k]` matrix
    /// `w` for `isa`'s microkernel.
    ///
    /// # Panics
    /// If `w` is not `n x k` values, or `k` exceeds [`MAX_K`].
    pub fn pack(w: &[f32], n: usize, k: usize, isa: Isa8) -> PackedWeight8 {
        assert_eq!(w.len(), n * k, "a [{n}, {k}] weight");
        assert!(k <= MAX_K, "int8 rows of {k} values, past {MAX_K}");
        let (nr, g) = (isa.nr(), isa.group());
        let kp = k.next_multiple_of(isa.depth());
        let panels = n.div_ceil(nr);
        let mut data = vec![0i8; panels * kp * nr];
        let (mut scales, mut sums) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let top = f32::from(isa.weight_max());
        for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
            let amax = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = if amax > 0.0 { amax / top } else { 1.0 };
            let inv = 1.0 / scale;
            let (p, c) = (j / nr, j % nr);
            let panel = &mut data[p * kp * nr..(p + 1) * kp * nr];
            let mut sum = 0i32;
            for (kk, &v) in row.iter().enumerate() {
                let q = round_small((v * inv).clamp(-top, top)) as i8;
                panel[(kk / g) * nr * g + c * g + kk % g] = q;
                sum += i32::from(q);
            }
            scales.push(scale);
            sums.push(sum);
        }
        PackedWeight8 { n, k, isa, data, scales, sums }
    }

    /// Output columns.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes of one input row quantized for this weight's GEMM: a byte a value, `k` padded to
    /// a multiple of the kernel's [`Isa8::depth`].
    pub fn row_bytes(&self) -> usize {
        self.k.next_multiple_of(self.isa.depth())
    }

    /// Bytes the quantized rows of an `m`-row input take for this weight's GEMM: `m` rows, and
    /// on AMX room for the 15 more its last tile may read.
    pub fn rows_bytes(&self, m: usize) -> usize {
        (m + self.isa.rows_past()) * self.row_bytes()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() + (self.scales.len() + self.sums.len()) * 4
    }

    fn panel(&self, p: usize) -> &[i8] {
        let span = self.row_bytes() * self.isa.nr();
        &self.data[p * span..(p + 1) * span]
    }
}

/// Input rows quantized for the int8 GEMM: their bytes, each row's scale and its zero point.
#[derive(Clone, Debug, Default)]
pub struct QuantizedRows {
    bytes: Vec<u8>,
    scales: Vec<f32>,
    zeros: Vec<i32>,
}

impl QuantizedRows {
    /// Room for `rows` rows in `bytes` bytes (`m` rows for a weight `w` take
    /// `w.rows_bytes(m)`).
    pub fn with_room(rows: usize, bytes: usize) -> QuantizedRows {
        QuantizedRows { bytes: vec![0; bytes], scales: vec![0.0; rows], zeros: vec![0; rows] }
    }

    /// The rows' bytes, one row after another.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Each row's scale.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// Each row's zero point: the byte that stands for zero, as the kernel reads the bytes
    /// ([`Isa8::row_offset`]).
    pub fn zeros(&self) -> &[i32] {
        &self.zeros
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.bytes.len() + (self.scales.len() + self.zeros.len()) * 4
    }

    /// Whether `m` rows quantized for `w` fit.
    fn holds(&self, m: usize, w: &PackedWeight8) -> bool {
        self.bytes.len() >= w.rows_bytes(m) && self.scales.len() >= m && self.zeros.len() >= m
    }
}

/// Quantizes `m` rows of `k = w.k()` values at `x` into `rows` for the int8 GEMM with `w`: each
/// row's scale, zero point and values (`w.row_bytes()` a row, the zero point past `k`), offset
/// as `w`'s kernel reads them ([`Isa8::row_offset`]), in parallel on the current rayon pool,
/// compiled for `isa`.
///
/// # Panics
/// If `rows` has no room for `m` rows of `w`.
///
/// # Safety
/// `x` holds `m x w.k()` readable values that no thread writes meanwhile.
pub unsafe fn quantize_rows(
    isa: Isa,
    x: *const f32,
    m: usize,
    w: &PackedWeight8,
    rows: &mut QuantizedRows,
) {
    assert!(rows.holds(m, w), "room for {m} rows quantized for this weight");
    let (x, k, len, offset) = (SendPtr(x.cast_mut()), w.k, w.row_bytes(), w.isa.row_offset());
    let QuantizedRows { bytes, scales, zeros } = rows;
    let (scales, zeros) = (&mut scales[..m], &mut zeros[..m]);
    bytes[..m * len].par_chunks_mut(len.max(1)).zip(scales).zip(zeros).enumerate().for_each(
        |(r, ((row, scale), zero))| {
            // SAFETY: row r < m of x, and a row of at least k bytes.
            unsafe { quantize_row(isa, SendPtr(x.get().add(r * k)), k, offset, row, scale, zero) }
        },
    );
}

/// `2^23`: added to a value in 0..=255, it leaves that value rounded (to nearest, ties to even,
/// as the FPU rounds) in the low byte of the sum's bits. Below 2^23 the spacing of f32s is 1/2,
/// so what is added must keep every sum at or past it.
const ROUND: f32 = 8_388_608.0;

/// `x` rounded to the nearest integer, ties to even, for `|x| <= 2^22` (a NaN stays one).
/// `round_ties_even` is a call to libm's `rintf` where the build's baseline has no SSE4.1, and
/// packing a weight made one a value: most of an int8 model's load.
#[inline(always)]
fn round_small(x: f32) -> f32 {
    // Past 1.5 * 2^23 f32s are whole numbers, so the sum rounds `x` as the FPU does; the
    // second operation is exact.
    const MAGIC: f32 = 12_582_912.0;
    (x + MAGIC) - MAGIC
}

/// A key for `v` whose order as an i32 is the order of the values, with a NaN of either sign
/// past the infinity of its sign.
#[inline(always)]
fn order_key(v: f32) -> i32 {
    let b = v.to_bits() as i32;
    b ^ (((b >> 31) as u32) >> 1) as i32
}

/// The value whose [`order_key`] is `k`.
#[inline(always)]
fn from_order_key(k: i32) -> f32 {
    f32::from_bits((k ^ (((k >> 31) as u32) >> 1) as i32) as u32)
}

multiversion! {
    /// One row of [`quantize_rows`]: `k` values at `x` into `row`, the rest of `row` the zero
    /// point, with its scale and zero point, each byte and the zero point less `offset` (0 or
    /// 128: the byte's top bit flipped). A NaN in the row becomes its scale, so it spreads to
    /// the row's sums; a row of zeros keeps scale 1.
    ///
    /// # Safety
    /// `x` holds `k` readable values, and `row` has at least `k` bytes.
    unsafe fn quantize_row(
        x: SendPtr,
        k: usize,
        offset: i32,
        row: &mut [u8],
        scale: &mut f32,
        zero: &mut i32,
    ) {
        // SAFETY: the caller's contract.
        let xr = unsafe { std::slice::from_raw_parts(x.get().cast_const(), k) };
        // The row's range, zero included, compared as integer keys (which vectorise); a NaN
        // lies past either end.
        let (lo, hi) = xr.iter().fold((0, 0), |(lo, hi): (i32, i32), &v| {
            let key = order_key(v);
            (lo.min(key), hi.max(key))
        });
        let (lo, hi) = (from_order_key(lo), from_order_key(hi));
        let range = hi - lo;
        *scale = if range > 0.0 || range.is_nan() { range / 255.0 } else { 1.0 };
        let inv = 1.0 / *scale;
        // -lo / scale is in 0..=255; a NaN becomes zero here and spreads by the scale.
        let z = (-lo * inv).round_ties_even();
        let z = if z.is_nan() { 0.0 } else { z.clamp(0.0, 255.0) };
        *zero = z as i32 - offset;
        // `q - 128` as a byte is `q` with its top bit flipped.
        let flip = if offset == 0 { 0 } else { 0x80 };
        let (bottom, top, add) = (-z, 255.0 - z, ROUND + z);
        for (d, &v) in row.iter_mut().zip(xr) {
            *d = ((v * inv).clamp(bottom, top) + add).to_bits() as u8 ^ flip;
        }
        row[k..].fill(z as u8 ^ flip);
    }
}

/// The scratch an int8 GEMM over at most `m` rows of `w` needs per thread.
pub fn scratch_size(m: usize, w: &PackedWeight8) -> ScratchSize {
    match w.isa {
        // A task's tile buffer holds its rows rounded up to whole tiles of 16 (see gemm16's).
        Isa8::AmxInt8 => tile_scratch(m.next_multiple_of(amx::ROWS), w.isa.nr()),
        _ => tile_scratch(m, w.isa.nr()),
    }
}

/// One int8 GEMM call.
struct Job<'a> {
    rows: &'a QuantizedRows,
    m: usize,
    w: &'a PackedWeight8,
    epilogue: Epilogue<'a>,
    tiling: Tiling,
}

/// `out = act(x . w^T + bias) + residual` for `m` rows as [`quantize_rows`] left them in
/// `rows`, on the current rayon pool, with the threads' `scratch`.
///
/// # Safety
/// `out` holds `m x w.n()` writable values; a `residual` holds `m x w.n()` readable values and
/// is either `out` itself or overlaps nothing written; `bias` has `w.n()` values. No other
/// thread writes any of them meanwhile.
///
/// # Panics
/// If `rows` has no room for `m` rows of `w`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm8(
    rows: &QuantizedRows,
    m: usize,
    w: &PackedWeight8,
    bias: Option<&[f32]>,
    act: Act,
    residual: Option<*const f32>,
    out: *mut f32,
    scratch: &Scratches,
) {
    if m == 0 || w.n == 0 {
        return;
    }
    assert!(rows.holds(m, w), "{m} rows quantized for this weight");
    let tiling = Tiling::new(m, w.n.div_ceil(w.isa.nr()));
    let epilogue = Epilogue::new(w.n, bias, act, residual, out);
    let job = Job { rows, m, w, epilogue, tiling };
    // SAFETY: the caller's contract covers every address a task touches; tasks write disjoint
    // rows x columns of `out`, and each tile buffer is its thread's alone.
    for_each_task(tiling, scratch, |t, ctile| unsafe { run_task(&job, t, ctile) });
}

/// Runs task `t` with the microkernel of the packed weight's instruction set.
///
/// # Safety
/// As [`gemm8`]'s, for the rows and columns of task `t`.
unsafe fn run_task(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
    match job.w.isa {
        // SAFETY: the instruction set was detected on this CPU when the weight was packed, so
        // the features the function enables are present; the rest is the caller's contract.
        #[cfg(target_arch = "x86_64")]
        Isa8::AmxInt8 => unsafe { x86::task_amx(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa8::Avx512Vnni => unsafe { x86::task_avx512(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa8::AvxVnni => unsafe { x86::task_avx_vnni(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa8::Avx2 => unsafe { x86::task_avx2(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa8::Ssse3 => unsafe { x86::task_ssse3(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        Isa8::NeonI8mm => unsafe { arm::task_neon_i8mm(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        Isa8::NeonDot => unsafe { arm::task_neon_dot(job, t, ctile) },
        // SAFETY: the caller's contract; the portable kernel needs no feature.
        _ => unsafe { task::<Portable>(job, t, ctile) },
    }
}

/// An int8 microkernel: an `MR x NR` tile of i32 sums at `c` (row stride `ldc`) from `groups`
/// groups of `GROUP` bytes of `MR` rows (at `a`) and a packed panel of `NR` columns, added to
/// `c` unless `first`.
trait Micro {
    const NR: usize;
    /// Bytes of a row per group: its instruction set's [`Isa8::group`].
    const GROUP: usize = 4;
    /// The multiply-add of the epilogue compiled beside the microkernel.
    type Fma: MulAdd;

    /// # Safety
    /// Each of `a` holds `GROUP * groups` bytes, `b` `groups * NR * GROUP`, `c` an `MR x NR`
    /// tile at row stride `ldc`; the CPU has the kernel's target features.
    unsafe fn tile(
        groups: usize,
        a: &[*const u8; MR],
        b: *const i8,
        c: *mut i32,
        ldc: usize,
        first: bool,
    );
}

/// One task: the microkernel over its tiles, block of `k` by block, then each sum scaled to f32
/// and finished as the f32 GEMM does.
///
/// # Safety
/// As [`gemm8`]'s, for the rows and columns of task `t`; the CPU has `M`'s target features.
#[inline(always)]
unsafe fn task<M: Micro>(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
    let (w, q, g) = (job.w, &job.rows.bytes[..], M::GROUP);
    debug_assert_eq!(g, w.isa.group(), "{:?}'s panels are packed for its microkernel", w.isa);
    let len = w.row_bytes();
    // SAFETY: the caller's contract; the driver keeps every row below m, every block of groups
    // inside the rows and the panel, and every tile inside the tile buffer.
    unsafe {
        task_blocks(
            job.tiling.span(t, job.m),
            (job.m, w.n, M::NR),
            (len / g, KB / g),
            ctile,
            |p, g0| w.panel(p)[g0 * M::NR * g..].as_ptr(),
            |r, g0| q[r * len + g0 * g..].as_ptr(),
            |groups, a, b, c: *mut i32, ldc, first| M::tile(groups, a, b, c, ldc, first),
            |r, c0, row| finish::<M::Fma>(job, r, c0, row),
        )
    }
}

/// Finishes `row`, the i32 sums of output row `r` from column `c0` (each in an f32's bits):
/// with the zero point's share taken off and the row's and columns' scales, f32 values, then
/// the epilogue's.
///
/// # Safety
/// As [`Epilogue::finish`]'s.
#[inline(always)]
unsafe fn finish<F: MulAdd>(job: &Job<'_>, r: usize, c0: usize, row: &mut [f32]) {
    let (w, cols) = (job.w, row.len());
    let (ws, sums) = (&w.scales[c0..c0 + cols], &w.sums[c0..c0 + cols]);
    let (xs, z) = (job.rows.scales[r], job.rows.zeros[r]);
    for ((v, &s), &sum) in row.iter_mut().zip(ws).zip(sums) {
        // The word holds the i32 sum; with the zero point's share taken off (both fit an i32:
        // `MAX_K`) it becomes the f32 value.
        *v = (v.to_bits() as i32 - z * sum) as f32 * (xs * s);
    }
    // SAFETY: the caller's contract.
    unsafe { job.epilogue.finish::<F>(r, c0, row) };
}

/// The portable microkernel: plain loops over fixed-size arrays of i32.
struct Portable;

impl Micro for Portable {
    const NR: usize = 16;
    type Fma = math::Baseline;

    #[inline(always)]
    unsafe fn tile(
        groups: usize,
        a: &[*const u8; MR],
        b: *const i8,
        c: *mut i32,
        ldc: usize,
        first: bool,
    ) {
        let mut acc = [[0i32; 16]; MR];
        if !first {
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: row i of the tile, 16 columns.
                row.copy_from_slice(unsafe { std::slice::from_raw_parts(c.add(i * ldc), 16) });
            }
        }
        for g in 0..groups {
            // SAFETY: group g of each row and of the panel.
            let bg: &[i8; 64] = unsafe { &*b.add(g * 64).cast::<[i8; 64]>() };
            for (row, ai) in acc.iter_mut().zip(a) {
                // SAFETY: group g of the row.
                let av: [u8; 4] = unsafe { ai.add(g * 4).cast::<[u8; 4]>().read_unaligned() };
                for (col, s) in row.iter_mut().enumerate() {
                    for t in 0..4 {
                        *s += i32::from(av[t]) * i32::from(bg[col * 4 + t]);
                    }
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: row i of the tile, 16 columns.
            unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), 16) }.copy_from_slice(row);
        }
    }
}

/// Defines `unsafe fn $name(job, t, ctile)`: task `t` with microkernel `$micro`, compiled with
/// the target features `$features`, so that the microkernel and the epilogue use them.
///
/// The function's safety contract is `task`'s, and the CPU has `$features`.
macro_rules! task_with {
    ($(#[$doc:meta])* $name:ident, $micro:ty, $features:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As `task`'s; the CPU has the target features this function enables.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $name(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
            // SAFETY: the caller's contract, and the features are enabled here.
            unsafe { task::<$micro>(job, t, ctile) }
        }
    };
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    use super::{Job, MR, Micro, finish, task};
    use crate::buf::AlignedBuf;
    use crate::kernels::amx;
    use crate::kernels::math::{Baseline, Fused};

    /// AVX-512 VNNI: 32 columns in two registers of i32 per row, 12 accumulators.
    pub(super) struct Avx512;

    impl Micro for Avx512 {
        const NR: usize = 32;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn tile(
            groups: usize,
            a: &[*const u8; MR],
            b: *const i8,
            c: *mut i32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: the caller's contract, which is `tile512`'s; the caller enabled avx512f,
            // avx512bw and avx512vnni.
            unsafe {
                tile512(groups, a, b.cast(), c, ldc, first, |s, a, b| _mm512_dpbusd_epi32(s, a, b))
            }
        }
    }

    /// The AVX-512 microkernel of the int8 and the bf16 GEMMs: an `MR x 32` tile of 32-bit
    /// sums at `c` (row stride `ldc`, added to unless `first`) from `groups` groups of four
    /// bytes of each of `MR` rows (four bytes of int8, or two bf16) and a panel of 32 columns
    /// (128 bytes a group), in two registers per row, 12 accumulators: `dot(sums, row group
    /// broadcast, panel register)` is `vpdpbusd`, or `vdpbf16ps` on the sums' bits.
    ///
    /// # Safety
    /// Each of `a` holds `4 * groups` bytes, `b` `128 * groups`, `c` an `MR x 32` tile at row
    /// stride `ldc`; the CPU has avx512f and what `dot` uses.
    #[inline(always)]
    pub(crate) unsafe fn tile512(
        groups: usize,
        a: &[*const u8; MR],
        b: *const u8,
        c: *mut i32,
        ldc: usize,
        first: bool,
        dot: impl Fn(__m512i, __m512i, __m512i) -> __m512i,
    ) {
        // SAFETY: every pointer stays inside the rows, panel and tile the caller vouched for,
        // and the caller enabled the features.
        unsafe {
            let mut acc = [[_mm512_setzero_si512(); 2]; MR];
            if !first {
                for (i, r) in acc.iter_mut().enumerate() {
                    r[0] = _mm512_loadu_si512(c.add(i * ldc).cast());
                    r[1] = _mm512_loadu_si512(c.add(i * ldc + 16).cast());
                }
            }
            for g in 0..groups {
                let b0 = _mm512_loadu_si512(b.add(g * 128).cast());
                let b1 = _mm512_loadu_si512(b.add(g * 128 + 64).cast());
                for (r, ai) in acc.iter_mut().zip(a) {
                    let av = _mm512_set1_epi32(ai.add(g * 4).cast::<i32>().read_unaligned());
                    r[0] = dot(r[0], av, b0);
                    r[1] = dot(r[1], av, b1);
                }
            }
            for (i, r) in acc.iter().enumerate() {
                _mm512_storeu_si512(c.add(i * ldc).cast(), r[0]);
                _mm512_storeu_si512(c.add(i * ldc + 16).cast(), r[1]);
            }
        }
    }

    /// AVX-VNNI: 16 columns in two registers of i32 per row, 12 accumulators.
    pub(super) struct AvxVnni;

    impl Micro for AvxVnni {
        const NR: usize = 16;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn tile(
            groups: usize,
            a: &[*const u8; MR],
            b: *const i8,
            c: *mut i32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: as for `Avx512`, with avx2 and avxvnni enabled by the caller.
            unsafe {
                let mut acc = [[_mm256_setzero_si256(); 2]; MR];
                if !first {
                    for (i, r) in acc.iter_mut().enumerate() {
                        r[0] = _mm256_loadu_si256(c.add(i * ldc).cast());
                        r[1] = _mm256_loadu_si256(c.add(i * ldc + 8).cast());
                    }
                }
                for g in 0..groups {
                    let b0 = _mm256_loadu_si256(b.add(g * 64).cast());
                    let b1 = _mm256_loadu_si256(b.add(g * 64 + 32).cast());
                    for (r, ai) in acc.iter_mut().zip(a) {
                        let av = _mm256_set1_epi32(ai.add(g * 4).cast::<i32>().read_unaligned());
                        r[0] = _mm256_dpbusd_avx_epi32(r[0], av, b0);
                        r[1] = _mm256_dpbusd_avx_epi32(r[1], av, b1);
                    }
                }
                for (i, r) in acc.iter().enumerate() {
                    _mm256_storeu_si256(c.add(i * ldc).cast(), r[0]);
                    _mm256_storeu_si256(c.add(i * ldc + 8).cast(), r[1]);
                }
            }
        }
    }

    /// Plain AVX2: 16 columns in two registers of i32 per row, three rows at a time (six
    /// accumulators, leaving registers for the products). For each group of four values, the
    /// row's bytes are broadcast; `vpmaddubsw` multiplies them by the panel's weights and sums
    /// them in pairs (exact: the weights are at most 63 in magnitude, see the module's comment),
    /// and `vpmaddwd` by ones sums the pairs to i32: what `vpdpbusd` does in one instruction.
    pub(super) struct Avx2;

    /// Rows of `Avx2`'s tile that share each load of the panel.
    const HALF: usize = MR / 2;

    impl Micro for Avx2 {
        const NR: usize = 16;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn tile(
            groups: usize,
            a: &[*const u8; MR],
            b: *const i8,
            c: *mut i32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: as for `Avx512`, with avx2 enabled by the caller.
            unsafe {
                let ones = _mm256_set1_epi16(1);
                // Four bytes broadcast from memory: `vbroadcastss` only loads, where an integer
                // broadcast is compiled to a move and a shuffle.
                let splat = |p: *const u8| _mm256_castps_si256(_mm256_broadcast_ss(&*p.cast()));
                for (h, rows) in a.chunks_exact(HALF).enumerate() {
                    let c = c.add(h * HALF * ldc);
                    let mut acc = [[_mm256_setzero_si256(); 2]; HALF];
                    if !first {
                        for (i, r) in acc.iter_mut().enumerate() {
                            r[0] = _mm256_loadu_si256(c.add(i * ldc).cast());
                            r[1] = _mm256_loadu_si256(c.add(i * ldc + 8).cast());
                        }
                    }
                    for g in 0..groups {
                        let b0 = _mm256_loadu_si256(b.add(g * 64).cast());
                        let b1 = _mm256_loadu_si256(b.add(g * 64 + 32).cast());
                        for (r, ai) in acc.iter_mut().zip(rows) {
                            let x = splat(ai.add(g * 4));
                            let dot = |s: __m256i, w: __m256i| {
                                let pairs = _mm256_maddubs_epi16(x, w);
                                _mm256_add_epi32(s, _mm256_madd_epi16(pairs, ones))
                            };
                            r[0] = dot(r[0], b0);
                            r[1] = dot(r[1], b1);
                        }
                    }
                    for (i, r) in acc.iter().enumerate() {
                        _mm256_storeu_si256(c.add(i * ldc).cast(), r[0]);
                        _mm256_storeu_si256(c.add(i * ldc + 8).cast(), r[1]);
                    }
                }
            }
        }
    }

    /// SSSE3: plain AVX2's kernel in 128-bit registers, 16 columns in four registers of i32 per
    /// row, two rows at a time: eight accumulators and the group's four registers of weights in
    /// SSE's sixteen. (Three rows, the weights read from memory by each `pmaddubsw`, ran at 0.7x
    /// of this.)
    pub(super) struct Ssse3;

    /// Rows of `Ssse3`'s tile that share each load of the panel.
    const SSE_ROWS: usize = 2;

    impl Micro for Ssse3 {
        const NR: usize = 16;
        type Fma = Baseline;

        #[inline(always)]
        unsafe fn tile(
            groups: usize,
            a: &[*const u8; MR],
            b: *const i8,
            c: *mut i32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: as for `Avx512`, with ssse3 enabled by the caller.
            unsafe {
                let ones = _mm_set1_epi16(1);
                for (h, rows) in a.chunks_exact(SSE_ROWS).enumerate() {
                    let c = c.add(h * SSE_ROWS * ldc);
                    let mut acc = [[_mm_setzero_si128(); 4]; SSE_ROWS];
                    if !first {
                        for (i, r) in acc.iter_mut().enumerate() {
                            for (j, v) in r.iter_mut().enumerate() {
                                *v = _mm_loadu_si128(c.add(i * ldc + 4 * j).cast());
                            }
                        }
                    }
                    for g in 0..groups {
                        let w: [__m128i; 4] =
                            std::array::from_fn(|j| _mm_loadu_si128(b.add(g * 64 + 16 * j).cast()));
                        for (r, ai) in acc.iter_mut().zip(rows) {
                            let x = _mm_set1_epi32(ai.add(g * 4).cast::<i32>().read_unaligned());
                            for (v, &wj) in r.iter_mut().zip(&w) {
                                let pairs = _mm_maddubs_epi16(x, wj);
                                *v = _mm_add_epi32(*v, _mm_madd_epi16(pairs, ones));
                            }
                        }
                    }
                    for (i, r) in acc.iter().enumerate() {
                        for (j, v) in r.iter().enumerate() {
                            _mm_storeu_si128(c.add(i * ldc + 4 * j).cast(), *v);
                        }
                    }
                }
            }
        }
    }

    task_with! {
        /// A task with the SSSE3 microkernel, the rest compiled for SSSE3 (no FMA: the epilogue
        /// rounds twice, as portable code on x86 does).
        task_ssse3, Ssse3, "ssse3"
    }

    task_with! {
        /// A task with the AVX-512 VNNI microkernel, the rest compiled for AVX-512 too.
        task_avx512, Avx512, "avx512f,avx512bw,avx512vnni,avx2,fma"
    }

    /// A task on AMX ([`amx::task`]) with `tdpbusd`, its epilogue compiled for AVX-512.
    ///
    /// # Safety
    /// As `task`'s; the CPU has AMX-INT8, avx512f, avx512bw and avx512vnni, and
    /// [`amx::int8_ready`] returned true.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
    pub(super) unsafe fn task_amx(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        let (w, len) = (job.w, job.w.row_bytes());
        let span = job.tiling.span(t, job.m);
        let steps = len / amx::ROW_BYTES;
        // SAFETY: the caller's contract: rows span.r0.. of the quantized rows, with the room
        // `rows_bytes` gives past the last, and panels of `steps` steps of 16 groups of 32
        // columns.
        unsafe {
            let a = job.rows.bytes.as_ptr().add(span.r0 * len);
            amx::task(
                span,
                w.n,
                (a, len),
                |p| w.panel(p).as_ptr().cast(),
                ctile,
                |tiles, blocks, a, b, c| tiles.int8_block(blocks, steps, a, b, c),
                |r, c0, row| finish::<Fused>(job, r, c0, row),
            )
        }
    }

    task_with! {
        /// A task with the AVX-VNNI microkernel, the rest compiled for AVX2.
        task_avx_vnni, AvxVnni, "avx2,avxvnni,fma"
    }

    task_with! {
        /// A task with the plain AVX2 microkernel, the rest compiled for AVX2 too.
        task_avx2, Avx2, "avx2,fma"
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod arm {
    use std::arch::aarch64::*;

    /// Defines `unsafe fn $name(sums, a, b) -> sums`: the one NEON instruction `$ins`, which
    /// adds products of `a` and `b` (registers of arrangement `$arr`) to the four 32-bit lanes
    /// of `sums`. Their intrinsics are not stable in Rust yet; the instructions are.
    macro_rules! accumulating {
        ($(#[$doc:meta])* $name:ident, $ins:literal, $arr:literal, $s:ty, $a:ty, $b:ty) => {
            $(#[$doc])*
            ///
            /// # Safety
            /// The CPU has the instruction's extension (the caller enabled it).
            #[inline(always)]
            unsafe fn $name(sums: $s, a: $a, b: $b) -> $s {
                let mut s = sums;
                // SAFETY: the instruction reads and writes these registers only; the caller's
                // contract.
                unsafe {
                    std::arch::asm!(
                        concat!($ins, " {s:v}.4s, {a:v}.", $arr, ", {b:v}.", $arr),
                        s = inout(vreg) s,
                        a = in(vreg) a,
                        b = in(vreg) b,
                        options(pure, nomem, nostack, preserves_flags),
                    );
                }
                s
            }
        };
    }
    pub(crate) use accumulating;

    use super::{Job, MR, Micro, task};
    use crate::buf::AlignedBuf;
    use crate::kernels::math::Baseline;

    accumulating! {
        /// `sums + a . b` in each i32 lane, four products of signed bytes each: `sdot`
        /// (`vdotq_s32`; the caller enabled `dotprod`).
        sdot, "sdot", "16b", int32x4_t, int8x16_t, int8x16_t
    }

    /// NEON with the dot product: 16 columns in four registers of i32 per row, 24
    /// accumulators. For each group of four values the row's bytes (offset to signed, see
    /// [`super::Isa8::row_offset`]) are broadcast, and each `sdot` adds four columns' products
    /// of the group: what `vpdpbusd` does for unsigned rows.
    pub(super) struct NeonDot;

    impl Micro for NeonDot {
        const NR: usize = 16;
        type Fma = Baseline;

        #[inline(always)]
        unsafe fn tile(
            groups: usize,
            a: &[*const u8; MR],
            b: *const i8,
            c: *mut i32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: every pointer stays inside the rows, panel and tile the caller vouched
            // for, and the caller enabled dotprod.
            unsafe {
                let mut acc = [[vdupq_n_s32(0); 4]; MR];
                if !first {
                    for (i, r) in acc.iter_mut().enumerate() {
                        for (j, v) in r.iter_mut().enumerate() {
                            *v = vld1q_s32(c.add(i * ldc + 4 * j));
                        }
                    }
                }
                // Each row's pointer moves on by a group (`ld1r` has no indexed address).
                let (mut rows, mut p) = (*a, b);
                for _ in 0..groups {
                    let w = [
                        vld1q_s8(p),
                        vld1q_s8(p.add(16)),
                        vld1q_s8(p.add(32)),
                        vld1q_s8(p.add(48)),
                    ];
                    p = p.add(64);
                    for (r, ai) in acc.iter_mut().zip(&mut rows) {
                        let x = vdupq_n_s32(ai.cast::<i32>().read_unaligned());
                        let x = vreinterpretq_s8_s32(x);
                        *ai = ai.add(4);
                        for (v, &wj) in r.iter_mut().zip(&w) {
                            *v = sdot(*v, wj, x);
                        }
                    }
                }
                for (i, r) in acc.iter().enumerate() {
                    for (j, v) in r.iter().enumerate() {
                        vst1q_s32(c.add(i * ldc + 4 * j), *v);
                    }
                }
            }
        }
    }

    accumulating! {
        /// `sums + a . b^T` in a 2 x 2 block of i32 (`[r0 c0, r0 c1, r1 c0, r1 c1]`): two rows
        /// of eight unsigned bytes in `a`, two columns of eight signed bytes in `b`, `usmmla`
        /// (`vusmmlaq_s32`; the caller enabled `i8mm`).
        usmmla, "usmmla", "16b", int32x4_t, uint8x16_t, int8x16_t
    }

    /// Row pairs of the tile.
    const PAIRS: usize = MR / 2;

    /// The microkernel of the matrix multiply instructions, in int8 (`usmmla`) and bf16
    /// (`bfmmla`): an `MR x 16` tile of 32-bit sums at `c` (row stride `ldc`, added to unless
    /// `first`) from `groups` groups of eight bytes of each of `MR` rows (eight bytes of int8,
    /// or four bf16) and a panel of 16 columns (128 bytes a group: eight pairs of columns, each
    /// pair's two groups together). The tile is held in 2 x 2 blocks (a pair of rows by a pair
    /// of columns, `[r0 c0, r0 c1, r1 c0, r1 c1]`, eight registers per pair of rows), 24
    /// accumulators; for each group each pair of rows is loaded into one register, and
    /// `mmla(sums, row pair, column pair)` adds their products, on the registers' bits.
    ///
    /// # Safety
    /// Each of `a` holds `8 * groups` bytes, `b` `128 * groups`, `c` an `MR x 16` tile at row
    /// stride `ldc`; the CPU has what `mmla` uses.
    #[inline(always)]
    pub(crate) unsafe fn tile_mmla(
        groups: usize,
        a: &[*const u8; MR],
        b: *const u8,
        c: *mut u32,
        ldc: usize,
        first: bool,
        mmla: impl Fn(uint32x4_t, uint8x16_t, uint8x16_t) -> uint32x4_t,
    ) {
        // SAFETY: every pointer stays inside the rows, panel and tile the caller vouched for.
        unsafe {
            let mut acc = [[vdupq_n_u32(0); 8]; PAIRS];
            if !first {
                for (p, r) in acc.iter_mut().enumerate() {
                    let (top, bottom) = (c.add(2 * p * ldc), c.add((2 * p + 1) * ldc));
                    for (j, v) in r.iter_mut().enumerate() {
                        *v = vcombine_u32(vld1_u32(top.add(2 * j)), vld1_u32(bottom.add(2 * j)));
                    }
                }
            }
            let (mut rows, mut p) = (*a, b);
            for _ in 0..groups {
                let x: [uint8x16_t; PAIRS] = std::array::from_fn(|i| {
                    vcombine_u8(vld1_u8(rows[2 * i]), vld1_u8(rows[2 * i + 1]))
                });
                for r in &mut rows {
                    *r = r.add(8);
                }
                for j in 0..8 {
                    let w = vld1q_u8(p.add(16 * j));
                    for (r, &xi) in acc.iter_mut().zip(&x) {
                        r[j] = mmla(r[j], xi, w);
                    }
                }
                p = p.add(128);
            }
            for (p, r) in acc.iter().enumerate() {
                let (top, bottom) = (c.add(2 * p * ldc), c.add((2 * p + 1) * ldc));
                for (j, v) in r.iter().enumerate() {
                    vst1_u32(top.add(2 * j), vget_low_u32(*v));
                    vst1_u32(bottom.add(2 * j), vget_high_u32(*v));
                }
            }
        }
    }

    /// NEON with the int8 matrix multiply: [`tile_mmla`] with `usmmla`, whose each instruction
    /// adds 32 products (a pair of rows by a pair of columns, eight deep), twice `sdot`'s. The
    /// rows are unsigned bytes, as VNNI's.
    pub(super) struct NeonI8mm;

    impl Micro for NeonI8mm {
        const NR: usize = 16;
        const GROUP: usize = 8;
        type Fma = Baseline;

        #[inline(always)]
        unsafe fn tile(
            groups: usize,
            a: &[*const u8; MR],
            b: *const i8,
            c: *mut i32,
            ldc: usize,
            first: bool,
        ) {
            // The casts only reinterpret registers.
            let mmla = |s: uint32x4_t, x: uint8x16_t, w: uint8x16_t| {
                // SAFETY: the caller enabled i8mm.
                unsafe {
                    let sums = usmmla(vreinterpretq_s32_u32(s), x, vreinterpretq_s8_u8(w));
                    vreinterpretq_u32_s32(sums)
                }
            };
            // SAFETY: the caller's contract, which is `tile_mmla`'s in bytes.
            unsafe { tile_mmla(groups, a, b.cast(), c.cast(), ldc, first, mmla) }
        }
    }

    task_with! {
        /// A task with the NEON int8 matrix multiply microkernel.
        task_neon_i8mm, NeonI8mm, "neon,i8mm"
    }

    task_with! {
        /// A task with the NEON dot product microkernel.
        task_neon_dot, NeonDot, "neon,dotprod"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_small_rounds_as_round_ties_even() {
        // Halves (the ties), their neighbours, whole numbers and the range's ends.
        let mut xs: Vec<f32> = (-600..=600).map(|i| i as f32 / 4.0).collect();
        xs.extend([0.5f32, 1.5, 2.5, -0.5, -2.5, 126.5, 127.5, -127.5, 0.49999997, 4_194_304.0]);
        xs.extend([-4_194_303.5, 1e-30, -1e-30, -0.0]);
        xs.extend((0..10_000).map(|i| (i as f32 * 0.7301).sin() * 127.0));
        for x in xs {
            assert_eq!(round_small(x), x.round_ties_even(), "{x}");
        }
        assert!(round_small(f32::NAN).is_nan());
    }
}
