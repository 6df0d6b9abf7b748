//! `out = act(x . w^T + bias) + residual`: a GEMM whose weights were packed once, at upload, into
//! the layout its microkernel reads, with the bias, activation and residual applied to each
//! tile of the output while it is in cache.
//!
//! The output is cut into tasks of up to `RG` microkernel rows by `CG` column panels, run in
//! parallel on the current rayon pool. A task walks `k` in blocks of `KC`, running the
//! microkernel over its tiles and accumulating in a tile buffer of its thread; after the last
//! block it writes the epilogue's result to `out`. The microkernel computes an `MR x NR` tile
//! from `MR` rows of `x`, read in place (each step broadcasts one value of each row; packing them
//! cost more than it saved, measured), and a packed `kc x NR` panel of `w`, with `NR` columns in
//! SIMD registers: AVX-512 (32 columns) or AVX2 with FMA (16) where the CPU has them, chosen at
//! run time, else portable code the compiler vectorises for the target (16). Sums are f32, in
//! `k` order.

use rayon::prelude::*;
use switchyard_core::Act;

use super::math::{self, MulAdd};
use super::scratch::{ScratchSize, Scratches, SendPtr};
use crate::buf::AlignedBuf;

/// Rows of a microkernel tile.
pub(crate) const MR: usize = 6;
/// Depth of a block of `k`: a `KC x NR` panel of weights (32 KB with AVX-512, 16 KB with AVX2)
/// stays in L1. 192, 256 and 384 measured within 4% of each other on the corpus bench; 256 best.
const KC: usize = 256;
/// Microkernel rows per task, at most.
const RG: usize = 8;
/// Column panels per task, at most.
const CG: usize = 4;

/// The instruction set of the microkernel, chosen once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512F: 32 columns per tile.
    Avx512,
    /// AVX2 with FMA: 16 columns per tile.
    Avx2,
    /// Portable code, vectorised by the compiler for the build's target: 16 columns per tile.
    Portable,
}

impl Isa {
    /// The best this CPU has.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// Every instruction set this CPU can run, best first (for tests).
    pub fn available() -> Vec<Isa> {
        let best = Isa::detect();
        [Isa::Avx512, Isa::Avx2, Isa::Portable]
            .into_iter()
            .skip_while(|&i| i != best)
            .filter(|&i| i != Isa::Avx2 || cfg!(target_arch = "x86_64"))
            .collect()
    }

    /// Columns of a microkernel tile.
    pub const fn nr(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 | Isa::Portable => 16,
        }
    }
}

/// A weight matrix `[n, k]` (PyTorch's `nn.Linear` layout) packed for `x . w^T`: panels of `nr`
/// output columns, each `k` rows of `nr` values, zero past column `n`.
#[derive(Clone, Debug)]
pub struct PackedWeight {
    n: usize,
    k: usize,
    isa: Isa,
    data: AlignedBuf,
}

impl PackedWeight {
    /// Packs the row-major `[n, k]` matrix `w` for `isa`'s microkernel.
    pub fn pack(w: &[f32], n: usize, k: usize, isa: Isa) -> PackedWeight {
        assert_eq!(w.len(), n * k, "a [{n}, {k}] weight");
        let nr = isa.nr();
        let panels = n.div_ceil(nr);
        let mut data = AlignedBuf::zeros(panels * k * nr);
        let d = data.as_mut_slice();
        for (j, row) in w.chunks_exact(k.max(1)).enumerate().take(n) {
            let (p, c) = (j / nr, j % nr);
            let panel = &mut d[p * k * nr..(p + 1) * k * nr];
            for (kk, &v) in row.iter().enumerate() {
                panel[kk * nr + c] = v;
            }
        }
        PackedWeight { n, k, isa, data }
    }

    /// Output columns.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * size_of::<f32>()
    }

    fn panel(&self, p: usize) -> &[f32] {
        let span = self.k * self.isa.nr();
        &self.data.as_slice()[p * span..(p + 1) * span]
    }
}

/// How a GEMM's output is cut into tasks: up to `rg` microkernel rows by `cg` column panels.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tiling {
    micro_rows: usize,
    panels: usize,
    rg: usize,
    cg: usize,
}

impl Tiling {
    /// The tiling of `m` rows and `panels` column panels: enough tasks for every thread of the
    /// current pool several times over, narrower for small batches.
    pub(crate) fn new(m: usize, panels: usize) -> Tiling {
        let micro_rows = m.div_ceil(MR);
        let want = 4 * rayon::current_num_threads();
        let (mut rg, mut cg) = (RG.min(micro_rows).max(1), CG.min(panels).max(1));
        while micro_rows.div_ceil(rg) * panels.div_ceil(cg) < want && (cg > 1 || rg > 1) {
            if cg > 1 {
                cg = cg.div_ceil(2);
            } else {
                rg = rg.div_ceil(2);
            }
        }
        Tiling { micro_rows, panels, rg, cg }
    }

    /// How many tasks there are.
    pub(crate) fn tasks(&self) -> usize {
        self.micro_rows.div_ceil(self.rg) * self.panels.div_ceil(self.cg)
    }

    /// Task `t`'s span of an `m`-row output: its first row, its rows, its first panel, its
    /// panels.
    pub(crate) fn span(&self, t: usize, m: usize) -> Span {
        let tasks_n = self.panels.div_ceil(self.cg);
        let (tm, tn) = (t / tasks_n, t % tasks_n);
        let r0 = tm * self.rg * MR;
        let p0 = tn * self.cg;
        Span { r0, rows: (m - r0).min(self.rg * MR), p0, panels: self.cg.min(self.panels - p0) }
    }
}

/// The part of the output one task computes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    /// First row.
    pub(crate) r0: usize,
    /// Rows.
    pub(crate) rows: usize,
    /// First column panel.
    pub(crate) p0: usize,
    /// Column panels.
    pub(crate) panels: usize,
}

/// What a GEMM does to its output tile before writing it: `act(y + bias) + residual`.
pub(crate) struct Epilogue<'a> {
    /// Output columns.
    pub(crate) n: usize,
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) act: Act,
    pub(crate) residual: Option<SendPtr>,
    pub(crate) out: SendPtr,
}

impl<'a> Epilogue<'a> {
    /// `act(y + bias) + residual` into the `n` columns of each row at `out`.
    pub(crate) fn new(
        n: usize,
        bias: Option<&'a [f32]>,
        act: Act,
        residual: Option<*const f32>,
        out: *mut f32,
    ) -> Self {
        let residual = residual.map(|r| SendPtr(r.cast_mut()));
        Epilogue { n, bias, act, residual, out: SendPtr(out) }
    }

    /// Finishes `row`, columns `c0..` of output row `r`, and writes it to `out`, in one pass.
    /// The residual is read before `out` is written, so it may be `out` itself.
    ///
    /// # Safety
    /// Row `r` of the residual and of `out`, columns `c0..c0 + row.len()`, lie inside them, and
    /// no other thread writes those columns of `out` meanwhile.
    #[inline(always)]
    pub(crate) unsafe fn finish<M: MulAdd>(&self, r: usize, c0: usize, row: &mut [f32]) {
        let (n, cols) = (self.n, row.len());
        debug_assert!(cols <= ZEROS.len(), "a task's row is at most {} columns", ZEROS.len());
        let bias = self.bias.map_or(&ZEROS[..cols], |b| &b[c0..c0 + cols]);
        let at = r * n + c0;
        // SAFETY: the caller's contract. A residual is `out` itself or overlaps nothing
        // written, so the two slices below alias only when they are one.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(self.out.0.add(at), cols);
            match &self.residual {
                Some(res) if res.0 == self.out.0 => {
                    math::act_into::<M>(self.act, dst, row, bias, None)
                }
                Some(res) => {
                    let res = std::slice::from_raw_parts(res.0.add(at).cast_const(), cols);
                    math::act_into::<M>(self.act, dst, row, bias, Some(res));
                }
                None => math::act_into::<M>(self.act, dst, row, bias, Some(&ZEROS[..cols])),
            }
        }
    }
}

/// Zeros for a missing bias or residual: a task's row has at most `CG` panels of 32 columns.
/// (Adding them makes an output of -0.0 +0.0, the one difference from not adding.)
static ZEROS: [f32; CG * 32] = [0.0; CG * 32];

/// One GEMM call: its operands and how it is cut into tasks.
struct Job<'a> {
    x: SendPtr,
    m: usize,
    w: &'a PackedWeight,
    epilogue: Epilogue<'a>,
    tiling: Tiling,
}

/// The scratch a GEMM over at most `m` rows of `w` needs per thread.
pub fn scratch_size(m: usize, w: &PackedWeight) -> ScratchSize {
    tile_scratch(m, w.isa.nr())
}

/// The tile buffer a task over at most `m` rows of panels `nr` columns wide needs (f32 or i32
/// words).
pub(crate) fn tile_scratch(m: usize, nr: usize) -> ScratchSize {
    let rows = (RG * MR).min(m.next_multiple_of(MR));
    ScratchSize { ctile: rows * CG * nr, ..ScratchSize::default() }
}

/// Runs `task(t, tile buffer)` for every task of `tiling` on the current rayon pool, each with
/// its thread's tile buffer from `scratch`.
pub(crate) fn for_each_task(
    tiling: Tiling,
    scratch: &Scratches,
    task: impl Fn(usize, &mut AlignedBuf) + Sync,
) {
    (0..tiling.tasks()).into_par_iter().for_each(|t| scratch.with(|s| task(t, &mut s.ctile)));
}

/// `out = act(x . w^T + bias) + residual` for `m` rows, on the current rayon pool, with the
/// threads' `scratch`.
///
/// # Safety
/// `x` holds `m x w.k()` readable values (row-major) and `out` `m x w.n()` writable ones; a
/// `residual` holds `m x w.n()` readable values and is either `out` itself or overlaps nothing
/// written; `x` overlaps no value written; `bias` has `w.n()` values. No other thread writes
/// any of them meanwhile.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    x: *const f32,
    m: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    act: Act,
    residual: Option<*const f32>,
    out: *mut f32,
    scratch: &Scratches,
) {
    if m == 0 || w.n == 0 {
        return;
    }
    let tiling = Tiling::new(m, w.n.div_ceil(w.isa.nr()));
    let epilogue = Epilogue::new(w.n, bias, act, residual, out);
    let job = Job { x: SendPtr(x.cast_mut()), m, w, epilogue, tiling };
    // SAFETY: the caller's contract covers every address a task touches; tasks write disjoint
    // rows x columns of `out`, and each tile buffer is its thread's alone.
    for_each_task(tiling, scratch, |t, ctile| unsafe { run_task(&job, t, ctile) });
}

/// Runs task `t` with the microkernel of the packed weight's instruction set.
///
/// # Safety
/// As [`gemm`]'s, for the rows and columns of task `t`.
unsafe fn run_task(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
    match job.w.isa {
        // SAFETY: the instruction set was detected on this CPU when the weight was packed, so
        // the features the function enables are present; the rest is the caller's contract.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::task_avx512(job, t, ctile) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::task_avx2(job, t, ctile) },
        // SAFETY: the caller's contract; the portable kernel needs no feature.
        _ => unsafe { task::<Portable>(job, t, ctile) },
    }
}

/// A microkernel: an `MR x NR` tile of `c` (row stride `ldc`) from `kc` steps of `MR` rows of
/// `x` (the `kc` values at each of `a`) and a packed `NR`-column panel of `w`, added to `c`
/// unless `first`.
trait Micro {
    const NR: usize;
    /// The multiply-add of the epilogue compiled beside the microkernel.
    type Fma: MulAdd;

    /// # Safety
    /// Each of `a` holds `kc` values, `b` `kc * NR`, `c` an `MR x NR` tile at row stride `ldc`;
    /// the CPU has the kernel's target features.
    unsafe fn tile(
        kc: usize,
        a: &[*const f32; MR],
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        first: bool,
    );
}

/// One task: the microkernel over its tiles, block of `k` by block, then the epilogue into
/// `out`.
///
/// # Safety
/// As [`gemm`]'s, for the rows and columns of task `t`; the CPU has `M`'s target features.
#[inline(always)]
unsafe fn task<M: Micro>(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
    let (k, w, x) = (job.w.k, job.w, job.x.0.cast_const());
    // SAFETY: the caller's contract; the driver keeps every row below m, every block of `k`
    // inside the rows and the panel, and every tile inside the tile buffer.
    unsafe {
        task_blocks(
            job.tiling.span(t, job.m),
            (job.m, w.n, M::NR),
            (k, KC),
            ctile,
            |p, kb| w.panel(p)[kb * M::NR..].as_ptr(),
            |r, kb| x.add(r * k + kb),
            |kc, a, b, c: *mut f32, ldc, first| M::tile(kc, a, b, c, ldc, first),
            |r, c0, row| job.epilogue.finish::<M::Fma>(r, c0, row),
        )
    }
}

/// The loops of one task of a packed GEMM (f32, int8 or bf16): for each block of up to `block`
/// of the `groups` groups of `k` (one value, or the two or four one step of a microkernel
/// reads), for each of the span's column panels and microkernel rows, `tile` adds the block's
/// products to the task's tile of `nr`-column panels in `ctile`, whose words hold `C` (f32 or
/// i32 sums); then `finish(row, first column, values)` finishes each of the span's rows.
/// `panel(p, g)` is panel `p` of the weights from group `g`, `row(r, g)` row `r` of the input
/// from group `g`; a tile past the batch reads its last row again, and its results are not
/// finished.
///
/// # Safety
/// `panel` and `row` give pointers to at least `block` groups from `g` of what `tile` reads;
/// `tile` may be called with them and a tile of `MR x nr` `C` at any row stride inside
/// `ctile`, and `finish` with any row of the span and the columns of its panels (clipped to
/// `n`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn task_blocks<A, B, C>(
    span: Span,
    (m, n, nr): (usize, usize, usize),
    (groups, block): (usize, usize),
    ctile: &mut AlignedBuf,
    panel: impl Fn(usize, usize) -> *const B,
    row: impl Fn(usize, usize) -> *const A,
    tile: impl Fn(usize, &[*const A; MR], *const B, *mut C, usize, bool),
    mut finish: impl FnMut(usize, usize, &mut [f32]),
) {
    const { assert!(size_of::<C>() == size_of::<f32>(), "a tile word holds an f32 or an i32") };
    let Span { r0, rows, p0, panels } = span;
    let micro_rows = rows.div_ceil(MR);
    let ldc = panels * nr;
    ctile.ensure(micro_rows * MR * ldc);
    let ct = ctile.as_mut_slice();
    if groups == 0 {
        ct[..micro_rows * MR * ldc].fill(0.0);
    }
    let c = ct.as_mut_ptr().cast::<C>();
    let mut g0 = 0;
    while g0 < groups {
        let gc = block.min(groups - g0);
        for jp in 0..panels {
            let b = panel(p0 + jp, g0);
            for ip in 0..micro_rows {
                let a: [*const A; MR] =
                    std::array::from_fn(|i| row((r0 + ip * MR + i).min(m - 1), g0));
                // SAFETY: the tile's rows lie inside the tile buffer, which holds micro_rows *
                // MR rows of ldc words; the rest is the caller's.
                tile(gc, &a, b, unsafe { c.add(ip * MR * ldc + jp * nr) }, ldc, g0 == 0);
            }
        }
        g0 += gc;
    }
    let (c0, cols) = (p0 * nr, (panels * nr).min(n - p0 * nr));
    for i in 0..rows {
        finish(r0 + i, c0, &mut ct[i * ldc..i * ldc + cols]);
    }
}

/// The portable microkernel: plain loops over fixed-size arrays, vectorised by the compiler.
struct Portable;

impl Micro for Portable {
    const NR: usize = 16;
    type Fma = math::Baseline;

    #[inline(always)]
    unsafe fn tile(
        kc: usize,
        a: &[*const f32; MR],
        b: *const f32,
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
        for p in 0..kc {
            // SAFETY: step p of each row and of the panel.
            let (ap, bp): ([f32; MR], &[f32; 16]) =
                unsafe { (a.map(|r| *r.add(p)), &*b.add(p * 16).cast::<[f32; 16]>()) };
            for (row, &av) in acc.iter_mut().zip(&ap) {
                for (s, &bv) in row.iter_mut().zip(bp) {
                    *s = Self::Fma::mul_add(av, bv, *s);
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

    use super::{Job, MR, Micro, task};
    use crate::buf::AlignedBuf;
    use crate::kernels::math::Fused;

    /// AVX2 with FMA: 16 columns in two registers per row, 12 accumulators.
    pub(super) struct Avx2;

    impl Micro for Avx2 {
        const NR: usize = 16;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn tile(
            kc: usize,
            a: &[*const f32; MR],
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: every pointer stays inside the rows, panel and tile the caller vouched
            // for, and the caller enabled avx2 and fma.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); 2]; MR];
                if !first {
                    for (i, r) in acc.iter_mut().enumerate() {
                        r[0] = _mm256_loadu_ps(c.add(i * ldc));
                        r[1] = _mm256_loadu_ps(c.add(i * ldc + 8));
                    }
                }
                for p in 0..kc {
                    let b0 = _mm256_load_ps(b.add(p * 16));
                    let b1 = _mm256_load_ps(b.add(p * 16 + 8));
                    for (r, ai) in acc.iter_mut().zip(a) {
                        let av = _mm256_broadcast_ss(&*ai.add(p));
                        r[0] = _mm256_fmadd_ps(av, b0, r[0]);
                        r[1] = _mm256_fmadd_ps(av, b1, r[1]);
                    }
                }
                for (i, r) in acc.iter().enumerate() {
                    _mm256_storeu_ps(c.add(i * ldc), r[0]);
                    _mm256_storeu_ps(c.add(i * ldc + 8), r[1]);
                }
            }
        }
    }

    /// AVX-512F: 32 columns in two registers per row, 12 accumulators.
    pub(super) struct Avx512;

    impl Micro for Avx512 {
        const NR: usize = 32;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn tile(
            kc: usize,
            a: &[*const f32; MR],
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            first: bool,
        ) {
            // SAFETY: as for `Avx2`, with avx512f enabled by the caller.
            unsafe {
                let mut acc = [[_mm512_setzero_ps(); 2]; MR];
                if !first {
                    for (i, r) in acc.iter_mut().enumerate() {
                        r[0] = _mm512_loadu_ps(c.add(i * ldc));
                        r[1] = _mm512_loadu_ps(c.add(i * ldc + 16));
                    }
                }
                for p in 0..kc {
                    let b0 = _mm512_load_ps(b.add(p * 32));
                    let b1 = _mm512_load_ps(b.add(p * 32 + 16));
                    for (r, ai) in acc.iter_mut().zip(a) {
                        let av = _mm512_set1_ps(*ai.add(p));
                        r[0] = _mm512_fmadd_ps(av, b0, r[0]);
                        r[1] = _mm512_fmadd_ps(av, b1, r[1]);
                    }
                }
                for (i, r) in acc.iter().enumerate() {
                    _mm512_storeu_ps(c.add(i * ldc), r[0]);
                    _mm512_storeu_ps(c.add(i * ldc + 16), r[1]);
                }
            }
        }
    }

    /// A task with the AVX2 microkernel, and the packing and epilogue compiled for AVX2.
    ///
    /// # Safety
    /// As `task`'s; the CPU has avx2 and fma.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn task_avx2(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        // SAFETY: the caller's contract, and the features are enabled here.
        unsafe { task::<Avx2>(job, t, ctile) }
    }

    /// A task with the AVX-512 microkernel, and the packing and epilogue compiled for AVX-512.
    ///
    /// # Safety
    /// As `task`'s; the CPU has avx512f.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn task_avx512(job: &Job<'_>, t: usize, ctile: &mut AlignedBuf) {
        // SAFETY: the caller's contract, and the features are enabled here.
        unsafe { task::<Avx512>(job, t, ctile) }
    }
}
