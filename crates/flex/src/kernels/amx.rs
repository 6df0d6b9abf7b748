//! Intel AMX (Advanced Matrix Extensions, Xeon from Sapphire Rapids on) for the bf16 and int8
//! GEMMs: whether this CPU and its OS let the process use the tile registers, and the
//! instructions the kernels run, as inline assembly (Rust's AMX intrinsics and its detection of
//! the features are not stable).
//!
//! A tile register holds up to 16 rows of 64 bytes. `tdpbf16ps` adds to a tile of 16 x 16 f32
//! the products of a tile of 16 rows of 32 bf16 and a tile of 16 rows of 16 columns' pairs of
//! bf16 (the layout of flex's bf16 panels): 8192 products an instruction, each pair's two exact
//! products added to the sum in turn, rounding to nearest even, subnormal inputs and results
//! flushed to zero. `tdpbusd` does the same in i32 for 16 rows of 64 unsigned bytes and 16
//! columns' groups of four signed bytes (flex's int8 panels): 16384 products, exact. Linux lends
//! a process the tiles' 8 KB of state only when asked (`arch_prctl(ARCH_REQ_XCOMP_PERM,
//! XFEATURE_XTILEDATA)`, Linux 5.16 on), which [`bf16_ready`] and [`int8_ready`] do once;
//! elsewhere AMX is not used.

/// Rows of a tile: of input rows, of `k`'s pairs or groups of four, and of output rows.
pub(crate) const ROWS: usize = 16;
/// Bytes of a tile's row: 32 bf16 or 64 int8 `k` of an input row.
pub(crate) const ROW_BYTES: usize = 64;

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Tiles, bf16_ready, int8_ready, task};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::asm;
    use std::sync::OnceLock;

    use super::ROWS;
    use crate::buf::AlignedBuf;
    use crate::kernels::gemm::Span;

    /// Runs a GEMM task (`span` of an output `n` columns wide) on the tiles: for each of its
    /// panels of 32 columns (`panel(p)`, read as two tiles of 16 columns), its rows a block of
    /// two tiles of 16 at a time (one where a single tile is left), `block` summing each
    /// block's four (or two) tiles of 16 x 16 over all of `k` in the tile registers and
    /// storing them to the task's tile buffer; then `finish(row, first column, sums)` for
    /// each of its rows, the sums as f32 words (f32, or an i32's bits). `a` is the task's
    /// first row, rows `lda` bytes apart; the last tile's rows past the task's are read and not
    /// used.
    ///
    /// # Safety
    /// The CPU has what `block` runs, and [`bf16_ready`] or [`int8_ready`] said so; `a` holds
    /// the span's rows and 15 more, and they and each panel the steps `block` reads; `finish` may be called with any row of the span and its columns.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn task(
        span: Span,
        n: usize,
        (a, lda): (*const u8, usize),
        panel: impl Fn(usize) -> *const u8,
        ctile: &mut AlignedBuf,
        block: impl Fn(&mut Tiles, usize, (*const u8, usize), (*const u8, usize), (*mut u8, usize)),
        mut finish: impl FnMut(usize, usize, &mut [f32]),
    ) {
        // Columns of a panel, and the bytes of its rows (32 columns' pairs of bf16 or groups
        // of four bytes).
        const NR: usize = 32;
        const LDB: usize = 128;
        let Span { r0, rows, p0, panels } = span;
        let (ldc, tiles) = (panels * NR, rows.div_ceil(ROWS));
        ctile.ensure(tiles * ROWS * ldc);
        let ct = ctile.as_mut_slice();
        let c = ct.as_mut_ptr().cast::<u8>();
        // SAFETY: the caller's contract covers the rows and panels; each block's tiles lie
        // inside the tile buffer, ensured above.
        unsafe {
            let mut amx = Tiles::configure();
            for jp in 0..panels {
                let b = panel(p0 + jp);
                let mut i = 0;
                while i < tiles {
                    let blocks = (tiles - i).min(2);
                    let at = (i * ROWS * ldc + jp * NR) * size_of::<f32>();
                    let ai = a.add(i * ROWS * lda);
                    let ct = (c.add(at), ldc * size_of::<f32>());
                    block(&mut amx, blocks, (ai, lda), (b, LDB), ct);
                    i += blocks;
                }
            }
        }
        let (c0, cols) = (p0 * NR, (panels * NR).min(n - p0 * NR));
        for i in 0..rows {
            finish(r0 + i, c0, &mut ct[i * ldc..i * ldc + cols]);
        }
    }

    /// Whether `tdpbf16ps` can run here: the CPU has AMX-BF16 and [`tiles`] are usable.
    pub fn bf16_ready() -> bool {
        // CPUID leaf 7's EDX bit 22: AMX-BF16.
        tiles().is_some_and(|edx| edx >> 22 & 1 == 1)
    }

    /// Whether `tdpbusd` can run here: the CPU has AMX-INT8 and [`tiles`] are usable.
    pub fn int8_ready() -> bool {
        // CPUID leaf 7's EDX bit 25: AMX-INT8.
        tiles().is_some_and(|edx| edx >> 25 & 1 == 1)
    }

    /// CPUID leaf 7's EDX, if the CPU has AMX-TILE, palette 1 has eight tiles of at least 16
    /// rows of 64 bytes (every AMX CPU so far), and the OS granted this process their state
    /// (asked once).
    fn tiles() -> Option<u32> {
        static TILES: OnceLock<Option<u32>> = OnceLock::new();
        *TILES.get_or_init(|| {
            use std::arch::x86_64::__cpuid_count;
            if __cpuid_count(0, 0).eax < 0x1d {
                return None;
            }
            let edx = __cpuid_count(7, 0).edx;
            let palette = __cpuid_count(0x1d, 1);
            let (row_bytes, names) = (palette.ebx & 0xffff, palette.ebx >> 16);
            let rows = palette.ecx & 0xffff;
            // Bit 24: AMX-TILE.
            let tile = edx >> 24 & 1 == 1;
            let shape = row_bytes >= 64 && names >= 8 && rows >= ROWS as u32;
            (tile && shape && granted()).then_some(edx)
        })
    }

    /// Asks Linux for the tiles' state for this process; whether it granted it.
    #[cfg(target_os = "linux")]
    fn granted() -> bool {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only changes which register state the kernel
        // saves for this process; it reads and writes no memory of ours.
        unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
    }

    /// Other systems are not asked: AMX is not used there.
    #[cfg(not(target_os = "linux"))]
    fn granted() -> bool {
        false
    }

    /// Defines the kernels of [`Tiles`], one for each instruction of `$op`'s form, which read
    /// 64 bytes of each row of `a` and 16 rows of 128 bytes of `b` (`ldb` bytes apart) a step.
    macro_rules! blocks {
        ($($(#[$doc:meta])* $name:ident, $op:literal;)+) => {$(
            $(#[$doc])*
            ///
            /// # Safety
            /// The rows, panel and tiles lie inside readable (`a`, `b`) and writable (`c`)
            /// memory; `blocks` is 1 or 2; the CPU has the instruction.
            #[inline(always)]
            pub(crate) unsafe fn $name(
                &mut self,
                blocks: usize,
                steps: usize,
                (a, lda): (*const u8, usize),
                (b, ldb): (*const u8, usize),
                (c, ldc): (*mut u8, usize),
            ) {
                // SAFETY: the caller's contract: every tile load reads 16 rows of 64 bytes
                // inside `a` or `b`, and every store writes 16 rows of 64 bytes inside `c`. The
                // tile registers are this thread's, configured by `configure`; no code of the
                // compiler's uses them.
                unsafe {
                    asm!("tilezero tmm0", "tilezero tmm1", options(nostack, nomem));
                    if blocks == 2 {
                        asm!("tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
                    }
                    for s in 0..steps {
                        let (a, b) = (a.add(s * 64), b.add(s * ROWS * ldb));
                        if blocks == 2 {
                            asm!(
                                "tileloadd tmm4, [{a} + {lda}*1]",
                                "tileloadd tmm6, [{b} + {ldb}*1]",
                                "tileloadd tmm7, [{b1} + {ldb}*1]",
                                concat!($op, " tmm0, tmm4, tmm6"),
                                "tileloadd tmm5, [{a1} + {lda}*1]",
                                concat!($op, " tmm1, tmm4, tmm7"),
                                concat!($op, " tmm2, tmm5, tmm6"),
                                concat!($op, " tmm3, tmm5, tmm7"),
                                a = in(reg) a,
                                a1 = in(reg) a.add(ROWS * lda),
                                b = in(reg) b,
                                b1 = in(reg) b.add(64),
                                lda = in(reg) lda,
                                ldb = in(reg) ldb,
                                options(nostack, readonly),
                            );
                        } else {
                            asm!(
                                "tileloadd tmm4, [{a} + {lda}*1]",
                                "tileloadd tmm6, [{b} + {ldb}*1]",
                                "tileloadd tmm7, [{b1} + {ldb}*1]",
                                concat!($op, " tmm0, tmm4, tmm6"),
                                concat!($op, " tmm1, tmm4, tmm7"),
                                a = in(reg) a,
                                b = in(reg) b,
                                b1 = in(reg) b.add(64),
                                lda = in(reg) lda,
                                ldb = in(reg) ldb,
                                options(nostack, readonly),
                            );
                        }
                    }
                    asm!(
                        "tilestored [{c} + {ldc}*1], tmm0",
                        "tilestored [{c1} + {ldc}*1], tmm1",
                        c = in(reg) c,
                        c1 = in(reg) c.add(64),
                        ldc = in(reg) ldc,
                        options(nostack),
                    );
                    if blocks == 2 {
                        let c = c.add(ROWS * ldc);
                        asm!(
                            "tilestored [{c} + {ldc}*1], tmm2",
                            "tilestored [{c1} + {ldc}*1], tmm3",
                            c = in(reg) c,
                            c1 = in(reg) c.add(64),
                            ldc = in(reg) ldc,
                            options(nostack),
                        );
                    }
                }
            }
        )+};
    }

    /// The tile configuration every kernel loads: palette 1, all eight tiles 16 rows of 64 bytes.
    #[repr(C, align(64))]
    struct Config([u8; 64]);

    static CONFIG: Config = {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < 8 {
            // Bytes of a row (a little-endian u16 at 16 + 2t), then rows (a byte at 48 + t).
            c[16 + 2 * t] = 64;
            c[48 + t] = ROWS as u8;
            t += 1;
        }
        Config(c)
    };

    /// The tiles of this thread, configured for the kernels below, released when dropped (so a
    /// context switch saves none of their state).
    pub(crate) struct Tiles(());

    impl Tiles {
        /// Configures this thread's tiles.
        ///
        /// # Safety
        /// [`bf16_ready`] or [`int8_ready`] returned true.
        #[inline(always)]
        pub(crate) unsafe fn configure() -> Tiles {
            // SAFETY: the caller's contract; the configuration is valid and 64 bytes long.
            unsafe {
                asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly))
            };
            Tiles(())
        }

        blocks! {
            /// `c[r][j] = sum over k of a[r][k] b[k / 2][j][k % 2]` in f32 for a block of
            /// `blocks` (1 or 2) x 2 tiles of 16 x 16 sums at `c` (rows `ldc` bytes apart):
            /// rows of `a` (bf16, `lda` bytes apart; block `i`'s 16 rows from `a + 16 i lda`)
            /// times a panel of 32 columns' pairs at `b` (a pair of `k` every `ldb` bytes; tile
            /// `j`'s columns at `b + 64 j`), over `steps` steps of 32 `k` (64 bytes of `a`, 16
            /// `ldb` of `b`), with `tdpbf16ps`.
            bf16_block, "tdpbf16ps";
            /// The same in i32 sums of products of unsigned bytes of `a` and signed bytes of
            /// `b` (groups of four `k` where bf16 has pairs; steps of 64 `k`), with `tdpbusd`.
            int8_block, "tdpbusd";
        }
    }

    impl Drop for Tiles {
        #[inline(always)]
        fn drop(&mut self) {
            // SAFETY: returns this thread's tiles to their initial state; touches no memory.
            unsafe { asm!("tilerelease", options(nostack, nomem)) };
        }
    }
}
