//! Ragged self-attention: every sequence and head of a batch in one parallel loop, each at its
//! own length, with no padding and no mask.
//!
//! A task is one head of one sequence; or, where a batch has too few sequences to give every
//! thread equal work in whole heads (one long document on many threads), one head of a part of
//! a sequence's queries, with the keys they see (`Split`). It transposes the head's keys into
//! its thread's scratch (`head_dim x len`), then takes the queries a block at a time (eight
//! with AVX-512, six with AVX2, four in portable code, each broadcast from its own row): their
//! scores against blocks of sixteen keys (the keys any of them may see: all of the sequence,
//! or those within the window) accumulate in registers over the head's columns, each key block
//! loaded once for the block of queries; each query's exponentials, with the maximum
//! subtracted, run over whole blocks of the keys it sees (the rest of those blocks masked to
//! zero); and the value rows, weighted by them, add up in registers sixteen columns at a time,
//! each value row loaded once for the block, the sums multiplied by the reciprocal of the
//! exponentials' sum as they are stored. With AVX-512, two blocks of keys (or of columns) go
//! together where the head has them: sixteen chains of FMAs, each broadcast shared by two. Sums
//! are f32, over keys in order.
//!
//! The query block is what keeps the FMA units busy: each accumulator is a chain of dependent
//! FMAs, and a core with two FMA units of four cycles' latency needs eight chains. Sixteen
//! columns are one AVX-512 register, so eight queries make eight chains; with AVX2 they are two
//! registers, so four queries already make eight, and six make twelve, sharing each load of
//! keys or values among more FMAs (eight queries would need more registers than AVX2 has): on
//! an AMD Zen 3, 0% to 7% faster than four, the most for the longest sequences.
//!
//! With [`Products::Bf16`] (flex's bf16, on a CPU with AVX-512 BF16) a task first rounds the
//! head's queries, keys and values to bf16, in pairs of adjacent elements: a query's pairs of
//! columns, the keys' pairs of columns transposed, and the values' pairs of rows (two keys)
//! interleaved column by column; each query's weights are rounded in place after the softmax.
//! `vdpbf16ps` then adds two exact products to each f32 lane per instruction, so both inner
//! loops take half the instructions. The softmax, its sum and every accumulator stay f32.
//!
//! With [`Products::AmxBf16`] (flex's bf16 and int8 on a CPU with AMX) the same bf16 layouts
//! feed AMX's tiles (`tdpbf16ps`, `kernels/amx.rs`) instead: the pairs of a query's columns are
//! a tile's rows, the keys' transposed pairs and the values' interleaved pairs of rows are tiles
//! as they lie, and a tile of a block's weights is their rows after the in-place rounding. A
//! block is 32 queries (two tiles of 16 rows), its scores 32 keys (two tiles of 16 columns) an
//! instruction per 32 columns of the head, its weighted sums 32 columns by 32 keys an
//! instruction, every sum f32 over keys in order as above; the scale, the softmax and the
//! rounding of the weights are AVX-512's. Keys pad to whole 32s, each of a tile's steps.

use std::ops::Range;

use rayon::prelude::*;
use switchyard_core::{Batch, Reach};

use self::disentangled::Tables;
use super::math::{self, MulAdd};
use super::scratch::{Scratch, ScratchSize, Scratches, SendPtr};
use super::{Isa, amx};

mod disentangled;

/// The shape of one attention op.
#[derive(Clone, Copy, Debug)]
pub struct Heads<'a> {
    /// Number of query heads.
    pub heads: usize,
    /// Number of key-value heads: `heads`, or a divisor of it whose groups of query heads share
    /// one.
    pub kv_heads: usize,
    /// Columns per head.
    pub head_dim: usize,
    /// Multiplies every score.
    pub scale: f32,
    /// The keys each query sees: its sliding window, and none after it where causal.
    pub reach: Reach,
    /// Each head's bias by relative position, added to the scaled scores, as
    /// [`switchyard_core::RelativeBias::by_distance`] lays it out for sequences of up to
    /// `(len / heads + 1) / 2` tokens, if any.
    pub position_bias: Option<&'a [f32]>,
    /// Disentangled attention's tables, if any.
    pub disentangled: Option<DisentangledTables<'a>>,
}

/// One op's disentangled attention ([`switchyard_core::Disentangled`]): its tables, and which of
/// their rows each relative position reads.
#[derive(Clone, Copy, Debug)]
pub struct DisentangledTables<'a> {
    /// The row of each relative position for sequences of up to `(rows.len() + 1) / 2` tokens,
    /// as [`switchyard_core::Disentangled::rows_by_distance`] lays them out: that of a key `r`
    /// positions after its query at `r + longest - 1`.
    pub rows: &'a [u32],
    /// `[2 span, heads * head_dim]`: the relative embeddings through the key projection, which
    /// the queries meet, if the op has that term.
    pub keys: Option<&'a [f32]>,
    /// `[2 span, heads * head_dim]`: the relative embeddings through the query projection,
    /// which the keys meet, if the op has that term.
    pub queries: Option<&'a [f32]>,
}

/// What attention multiplies in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// f32 products.
    #[default]
    F32,
    /// Queries, keys, weights and values rounded to bf16 (to nearest, ties to even), their
    /// exact products summed in f32; the softmax in f32.
    Bf16,
    /// [`Products::Bf16`] on AMX's tiles.
    AmxBf16,
}

impl Products {
    /// What attention of heads `head_dim` wide runs in on `isa`, asked for `self`: bf16 only
    /// with [`Isa::Avx512`] (on a CPU that also has AVX-512 BF16, and for
    /// [`Products::AmxBf16`] AMX-BF16 the OS lets the process use, the caller's to check) and
    /// for heads a multiple of 32 columns wide; f32 otherwise.
    pub fn taken(self, isa: Isa, head_dim: usize) -> Products {
        let wide = cfg!(target_arch = "x86_64") && isa == Isa::Avx512;
        if wide && head_dim.is_multiple_of(2 * KB) { self } else { Products::F32 }
    }

    /// Words of the key scratch a head `d` wide over `lpad` padded keys needs: the transposed
    /// keys (in bf16, their pairs and the pairs of up to `lpad` queries, as many words), and
    /// after them the values (in bf16, their pairs of rows).
    fn key_words(self, d: usize, lpad: usize) -> usize {
        match self {
            Products::F32 => 2 * d * lpad,
            Products::Bf16 | Products::AmxBf16 => d * lpad + lpad / 2 * d,
        }
    }

    /// A head's `len` keys padded to whole blocks: of sixteen, or on AMX of 32, a step of its
    /// tiles (their scores never used).
    fn lpad(self, len: usize) -> usize {
        match self {
            Products::AmxBf16 => len.next_multiple_of(AMX_STEP),
            _ => len.next_multiple_of(KB),
        }
    }

    /// The most queries computed together: rows of scores a thread's scratch holds.
    fn block(self) -> usize {
        match self {
            Products::AmxBf16 => AMX_QB,
            _ => MAX_QB,
        }
    }
}

/// The scratch attention of `h` over sequences of at most `max_len` tokens, asked for in
/// `products` on `isa`, needs per thread.
pub fn scratch_size(h: Heads<'_>, max_len: usize, isa: Isa, products: Products) -> ScratchSize {
    let products = products.taken(isa, h.head_dim);
    let lpad = products.lpad(max_len);
    let keys = products.key_words(h.head_dim, lpad);
    let (tables, disentangled) = match h.disentangled {
        Some(_) => {
            let task = disentangled::task_words(h.head_dim, lpad, max_len);
            (disentangled::table_words(h, max_len), task)
        }
        None => (0, 0),
    };
    let scores = products.block() * lpad;
    ScratchSize { keys, scores, disentangled, tables, ..ScratchSize::default() }
}

/// `out` = self-attention of `q`, `k`, `v` within each sequence of `batch`, on the current rayon
/// pool, with the threads' `scratch`: a query per token, or with `per_seq` one per sequence (its
/// first token's, in row `s` of `q` and `out` for sequence `s`); the products in what
/// [`Products::taken`] says for `products`.
///
/// # Safety
/// `k` and `v` hold `batch.tokens() x kv_heads * head_dim` readable values, `q` `batch.tokens()
/// x heads * head_dim` (with `per_seq`, `batch.seqs()` rows of them) and `out` as many as `q`
/// writable ones, overlapping none of them; no other thread writes them meanwhile. `batch`
/// passed [`Batch::check`]. With [`Products::Bf16`], the CPU has AVX-512 BF16; with
/// [`Products::AmxBf16`], that and AMX-BF16 the OS lets the process use
/// ([`super::Isa16::AmxBf16`] is available).
#[allow(clippy::too_many_arguments)]
pub unsafe fn attention(
    isa: Isa,
    products: Products,
    q: *const f32,
    k: *const f32,
    v: *const f32,
    out: *mut f32,
    batch: &Batch<'_>,
    per_seq: bool,
    h: Heads<'_>,
    scratch: &Scratches,
) {
    let ptrs = [SendPtr(q.cast_mut()), SendPtr(k.cast_mut()), SendPtr(v.cast_mut()), SendPtr(out)];
    let products = products.taken(isa, h.head_dim);
    let split = Split::new(batch, h, per_seq, rayon::current_num_threads());
    let mut op_wide = h.disentangled.map(|t| (t, scratch.op_wide()));
    let tables = op_wide.as_mut().map(|(t, buf)| Tables::lay_out(*t, h, batch, buf));
    let run = |task: Task<'_>| {
        scratch.with(|sc| {
            // SAFETY: the caller's contract; a task writes the columns of one head in its rows
            // of queries, which no other task writes.
            unsafe { one_head(isa, products, task, sc) }
        })
    };
    (0..batch.seqs() * h.heads).into_par_iter().for_each(|t| {
        let (s, head) = (t / h.heads, t % h.heads);
        let rows = batch.seq(s);
        let (start, len) = (rows.start, rows.len());
        if per_seq {
            return run(Task { ptrs, start, len, q0: s, queries: 1, first: 0, head, h, tables });
        }
        let part = |c: usize| {
            let (queries, keys) = split.part(c, len);
            run(Task {
                ptrs,
                start: start + keys.start,
                len: keys.len(),
                q0: start + queries.start,
                queries: queries.len(),
                first: queries.start - keys.start,
                head,
                h,
                tables,
            })
        };
        match split.parts(len) {
            1 => part(0),
            n => (0..n).into_par_iter().for_each(part),
        }
    });
}

/// A task (one head of a sequence, or a part of its queries) takes at most one part in this many
/// of a thread's share of the op's work, so that the threads finish close together.
const SHARE_PARTS: usize = 4;
/// Queries of a part of a sequence: a multiple of every instruction set's query block (eight,
/// six and four), so that the parts' blocks are the whole sequence's.
const PART_STEP: usize = 24;
/// The fewest queries of a part: each part transposes and copies the keys and values it sees
/// again, which costs about what the products of a few of its queries do (cutting each head of
/// a 512-token document into six parts of 96 queries measured within the noise of not cutting).
const MIN_PART: usize = 48;

/// How the queries of each sequence of one attention op are cut into tasks: all in one where
/// the op has work enough for every thread in whole heads; where one head of a sequence would
/// be more than a quarter ([`SHARE_PARTS`]) of a thread's share (a batch of a few long
/// sequences, on many threads), in parts of [`PART_STEP`]'s multiples, each with the keys its
/// queries see. Every value is computed as in one task, so results do not depend on the cut.
#[derive(Clone, Copy, Debug)]
struct Split {
    /// The most work (queries times the keys each sees) one task should take.
    most: usize,
    reach: Reach,
}

impl Split {
    /// The cut of attention of `h` over `batch` on `threads` threads (none with `per_seq`).
    fn new(batch: &Batch<'_>, h: Heads<'_>, per_seq: bool, threads: usize) -> Split {
        let cut = |most| Split { most, reach: h.reach };
        if per_seq || threads <= 1 {
            return cut(usize::MAX);
        }
        // Saturating: a 32-bit target's usize could not hold a huge batch's products.
        let total = (0..batch.seqs())
            .map(|s| work(batch.seq(s).len(), h.reach))
            .fold(0usize, usize::saturating_add)
            .saturating_mul(h.heads);
        cut((total / SHARE_PARTS.saturating_mul(threads)).max(1))
    }

    /// How many parts a sequence of `len` tokens is cut into.
    fn parts(&self, len: usize) -> usize {
        len.div_ceil(self.chunk(len))
    }

    /// Part `c` of a sequence of `len` tokens: its queries, and the keys they see.
    fn part(&self, c: usize, len: usize) -> (Range<usize>, Range<usize>) {
        let chunk = self.chunk(len);
        let queries = c * chunk..((c + 1) * chunk).min(len);
        let keys = self.keys(&queries, len);
        (queries, keys)
    }

    /// Queries per part for a sequence of `len` tokens.
    fn chunk(&self, len: usize) -> usize {
        let parts = work(len, self.reach).div_ceil(self.most);
        if parts <= 1 {
            return len.max(1);
        }
        len.div_ceil(parts).next_multiple_of(PART_STEP).max(MIN_PART)
    }

    /// The keys the queries `queries` of a sequence of `len` tokens see: all of them, or those
    /// within their reach, from a multiple of 32 (so that the keys fall into the blocks of
    /// sixteen, and AMX's steps of 32, of the whole sequence, and each sum runs over the same
    /// groups in the same order).
    fn keys(&self, queries: &Range<usize>, len: usize) -> Range<usize> {
        let (lo, _) = self.reach.keys(queries.start, len);
        let (_, hi) = self.reach.keys(queries.end.saturating_sub(1), len);
        lo / AMX_STEP * AMX_STEP..hi
    }
}

/// The products of one head of a sequence of `len` tokens: each query's keys, at most.
fn work(len: usize, reach: Reach) -> usize {
    len.saturating_mul(reach.widest(len))
}

/// The most queries computed together (with AVX-512), sharing each load of keys and values.
const MAX_QB: usize = 8;
/// Keys per block of scores: one AVX-512 register, two AVX2 ones.
const KB: usize = 16;
/// Queries of a block on AMX: two tiles of sixteen rows.
const AMX_QB: usize = 2 * amx::ROWS;
/// Keys (or columns) of a step of AMX's products: a tile's row of 32 bf16.
const AMX_STEP: usize = amx::ROW_BYTES / 2;

/// One head of (part of) one sequence: key and value rows `start..start + len`, the columns of
/// head `head`; `queries` queries, in rows `q0..q0 + queries` of `q` and `out`, the first at
/// position `first` among the keys.
#[derive(Clone, Copy)]
struct Task<'a> {
    ptrs: [SendPtr; 4],
    start: usize,
    len: usize,
    q0: usize,
    queries: usize,
    first: usize,
    head: usize,
    h: Heads<'a>,
    /// The op's disentangled tables laid out by distance, where it has them.
    tables: Option<Tables<'a>>,
}

/// What a head's inner loops share: its columns, the width of the batch's query (and output)
/// rows and of its key (and value) rows, the padded length of its keys, the scale of its
/// scores, and the words from one step of values to the next (a row's width in f32, a head's
/// pairs of rows in bf16).
#[derive(Clone, Copy)]
struct Layout {
    d: usize,
    width: usize,
    kwidth: usize,
    lpad: usize,
    scale: f32,
    vstride: usize,
}

/// Where a head's inner loops read its queries and values: query `i` of the task at `q + i *
/// qstride`, and step `j` of the values (a row, or a pair of rows) at `v + j * vstride`, from
/// the head's first column.
#[derive(Clone, Copy)]
struct Reads {
    q: *const f32,
    qstride: usize,
    v: *const f32,
    vstride: usize,
}

/// Runs `task` with the query block and the instructions of `isa`, its products in `products`
/// (as [`Products::taken`] left it).
///
/// # Safety
/// As [`attention`]'s, for the task's rows and columns.
unsafe fn one_head(isa: Isa, products: Products, task: Task<'_>, scratch: &mut Scratch) {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn avx512(task: Task<'_>, scratch: &mut Scratch) {
        // SAFETY: the caller's contract.
        unsafe { head_body::<x86::Avx512>(task, scratch) }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
    unsafe fn avx512_bf16(task: Task<'_>, scratch: &mut Scratch) {
        // SAFETY: the caller's contract.
        unsafe { head_body::<x86::Avx512Bf16>(task, scratch) }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(task: Task<'_>, scratch: &mut Scratch) {
        // SAFETY: the caller's contract.
        unsafe { head_body::<x86::Avx2>(task, scratch) }
    }
    match (isa, products) {
        // SAFETY: `isa` was detected on this CPU, so it has the features enabled, and with
        // bf16 products the caller vouched for AVX-512 BF16 (and AMX-BF16); `taken` kept the
        // head's width a multiple of 32.
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, Products::Bf16) => unsafe { avx512_bf16(task, scratch) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, Products::AmxBf16) => unsafe { amx_head(task, scratch) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, _) => unsafe { avx512(task, scratch) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, _) => unsafe { avx2(task, scratch) },
        // SAFETY: the caller's contract.
        _ => unsafe { head_body::<Four>(task, scratch) },
    }
}

/// `N` values at `p`, unaligned.
///
/// # Safety
/// `p` points to `N` readable f32.
#[inline(always)]
unsafe fn load<const N: usize>(p: *const f32) -> [f32; N] {
    // SAFETY: the caller's contract; f32 arrays have no invalid bit patterns.
    unsafe { p.cast::<[f32; N]>().read_unaligned() }
}

/// `acc[t] += a * b[t]` for one block of sixteen, with `M`'s multiply-add.
#[inline(always)]
fn fma16<M: MulAdd>(acc: &mut [f32; KB], a: f32, b: &[f32; KB]) {
    for (s, &x) in acc.iter_mut().zip(b) {
        *s = M::mul_add(a, x, *s);
    }
}

/// The inner loops of a head: the keys' transpose, and for a block of `QB` queries, their
/// scores and weighted sums over sixteen keys or columns.
trait Block {
    /// Queries computed together.
    const QB: usize;
    /// What the products are.
    const PRODUCTS: Products = Products::F32;
    /// Keys one step of [`Block::weighted`] takes: two where weights and values come in pairs
    /// of bf16.
    const STEP: usize = 1;
    /// The multiply-add of the softmax and the columns past the blocks of sixteen, compiled
    /// beside the block's kernels.
    type Fma: MulAdd;
    /// The block of the same instruction set in f32, whose scores disentangled terms take.
    type F32: Block;

    /// Readies a head for the loops: its transposed keys into `kt` (`PRODUCTS.key_words(d,
    /// lpad)` words), and where the queries and values are read; by default
    /// [`Block::transpose_keys`], the others read where they are. `q` is the head's first
    /// query, `k` and `v` its first key and value row, each at the head's first column.
    ///
    /// # Safety
    /// `k` and `v` hold `len` rows of `kwidth >= d` values, `q` `queries` rows of `width >= d`;
    /// `kt` the words above, writable.
    #[inline(always)]
    unsafe fn prepare(
        q: *const f32,
        k: *const f32,
        v: *const f32,
        (len, queries): (usize, usize),
        kt: *mut f32,
        l: Layout,
    ) -> Reads {
        let _ = queries;
        // SAFETY: the caller's contract; the values' copy lies after the keys' d x lpad words.
        unsafe {
            Self::transpose_keys(k, len, kt, l);
            let vt = kt.add(l.d * l.lpad);
            copy_values(v, len, vt, l);
            Reads { q, qstride: l.width, v: vt, vstride: l.d }
        }
    }

    /// [`math::exp_sum_in`]: the softmax's exponentials (those outside `range` zero) and their
    /// sum, compiled for the block's instructions.
    ///
    /// # Safety
    /// The caller enabled the block's instructions; `xs` is whole blocks of sixteen.
    #[inline(always)]
    unsafe fn exp_sum(xs: &mut [f32], range: Range<usize>, shift: f32) -> f32 {
        math::exp_sum_in::<Self::Fma>(xs, range, shift)
    }

    /// Makes a query's weights, the whole blocks `blocks` of `row` (its `lpad` scores), what
    /// [`Block::weighted`] reads; by default they stay as they are.
    ///
    /// # Safety
    /// `row` holds `blocks.end` values; `blocks` are whole blocks of sixteen.
    #[inline(always)]
    unsafe fn weights(row: *mut f32, blocks: Range<usize>) {
        let _ = (row, blocks);
    }

    /// `kt[c * lpad + j] = k[j * kwidth + c]` for keys `j < len` and columns `c < d`, and zero
    /// for `len <= j < lpad`.
    ///
    /// # Safety
    /// `k` holds `len` rows of `kwidth >= d` values; `kt` `d x lpad` writable ones.
    #[inline(always)]
    unsafe fn transpose_keys(k: *const f32, len: usize, kt: *mut f32, l: Layout) {
        // SAFETY: the caller's contract.
        unsafe { transpose_columns(k, len, 0..l.d, kt, l) }
    }

    /// `sc[qi * lpad + jb + t] = scale * sum_c q[qi][c] * kt[c * lpad + jb + t]` for the
    /// block's queries `q` (rows of `d` values, as [`Block::prepare`] left them) and keys
    /// `jb..jb + 16`.
    ///
    /// # Safety
    /// `kt` holds `d x lpad` values, each `q[qi]` `d`, `sc` `QB x lpad`; `jb + 16 <= lpad`.
    unsafe fn scores(kt: *const f32, q: &[*const f32; MAX_QB], sc: *mut f32, l: Layout, jb: usize);

    /// `out[qi * width + t] = inv[qi] * sum_{j in keys} sc[qi * lpad + j] * v[j * vstride +
    /// t]` for the first `nq` of the block's queries and sixteen columns `t`, `keys` counted in
    /// steps of [`Block::STEP`] keys (as [`Block::prepare`] and [`Block::weights`] left the
    /// values and weights).
    ///
    /// # Safety
    /// `v` holds steps `keys` of `vstride` values from 16 columns on, `sc` `QB x lpad`, `out`
    /// `nq` rows of `width` writable ones from 16 columns on, overlapping neither.
    unsafe fn weighted(
        v: *const f32,
        sc: *const f32,
        out: *mut f32,
        l: Layout,
        keys: Range<usize>,
        nq: usize,
        inv: &[f32; MAX_QB],
    );

    /// [`Block::scores`] for the keys `jb..jb + 32`, both blocks in one pass where the
    /// instruction set has the registers (by default, one block after the other).
    ///
    /// # Safety
    /// As [`Block::scores`]'s, with `jb + 32 <= lpad`.
    #[inline(always)]
    unsafe fn scores2(
        kt: *const f32,
        q: &[*const f32; MAX_QB],
        sc: *mut f32,
        l: Layout,
        jb: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            Self::scores(kt, q, sc, l, jb);
            Self::scores(kt, q, sc, l, jb + KB);
        }
    }

    /// [`Block::weighted`] for thirty-two columns, both blocks in one pass where the
    /// instruction set has the registers (by default, one block after the other).
    ///
    /// # Safety
    /// As [`Block::weighted`]'s, for 32 columns.
    #[inline(always)]
    unsafe fn weighted2(
        v: *const f32,
        sc: *const f32,
        out: *mut f32,
        l: Layout,
        keys: Range<usize>,
        nq: usize,
        inv: &[f32; MAX_QB],
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            Self::weighted(v, sc, out, l, keys.clone(), nq, inv);
            Self::weighted(v.add(KB), sc, out.add(KB), l, keys, nq, inv);
        }
    }
}

/// The head's value rows, `d` columns of `len` rows of `kwidth`, copied to `vt` one after
/// another: read in the batch's rows, a row in a few cache lines every `kwidth` values, the
/// rows of a head fall into a few sets of the L1 cache (with MiniLM's 384 columns, 16 of 64)
/// and evict each other before the next block of queries reads them again.
///
/// # Safety
/// `v` holds `len` rows of `kwidth >= d` values; `vt` `len x d` writable ones.
#[inline(always)]
unsafe fn copy_values(v: *const f32, len: usize, vt: *mut f32, l: Layout) {
    for j in 0..len {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(v.add(j * l.kwidth), vt.add(j * l.d), l.d) };
    }
}

/// The transpose of [`Block::transpose_keys`] for the columns `cols` only, one value at a time.
///
/// # Safety
/// As [`Block::transpose_keys`]'s, with `cols.end <= d`.
#[inline(always)]
unsafe fn transpose_columns(
    k: *const f32,
    len: usize,
    cols: Range<usize>,
    kt: *mut f32,
    l: Layout,
) {
    let Layout { kwidth, lpad, .. } = l;
    for j in 0..lpad {
        for c in cols.clone() {
            // SAFETY: the caller's contract.
            unsafe { *kt.add(c * lpad + j) = if j < len { *k.add(j * kwidth + c) } else { 0.0 } };
        }
    }
}

/// Four queries in arrays the compiler vectorises: with AVX2, eight registers of accumulators.
struct Four;

impl Block for Four {
    const QB: usize = 4;
    type Fma = math::Baseline;
    type F32 = Four;

    #[inline(always)]
    unsafe fn scores(kt: *const f32, q: &[*const f32; MAX_QB], sc: *mut f32, l: Layout, jb: usize) {
        let Layout { d, lpad, scale, .. } = l;
        let (mut a0, mut a1, mut a2, mut a3) = ([0.0; KB], [0.0; KB], [0.0; KB], [0.0; KB]);
        for c in 0..d {
            // SAFETY: the caller's contract.
            let (kv, qv) = unsafe {
                (load::<KB>(kt.add(c * lpad + jb)), [0, 1, 2, 3].map(|qi| *q[qi].add(c)))
            };
            fma16::<Self::Fma>(&mut a0, qv[0], &kv);
            fma16::<Self::Fma>(&mut a1, qv[1], &kv);
            fma16::<Self::Fma>(&mut a2, qv[2], &kv);
            fma16::<Self::Fma>(&mut a3, qv[3], &kv);
        }
        for (qi, a) in [a0, a1, a2, a3].iter().enumerate() {
            // SAFETY: the caller's contract.
            let dst = unsafe { std::slice::from_raw_parts_mut(sc.add(qi * lpad + jb), KB) };
            for (s, &x) in dst.iter_mut().zip(a) {
                *s = x * scale;
            }
        }
    }

    #[inline(always)]
    unsafe fn weighted(
        v: *const f32,
        sc: *const f32,
        out: *mut f32,
        l: Layout,
        keys: Range<usize>,
        nq: usize,
        inv: &[f32; MAX_QB],
    ) {
        let Layout { width, lpad, vstride, .. } = l;
        let (mut o0, mut o1, mut o2, mut o3) = ([0.0; KB], [0.0; KB], [0.0; KB], [0.0; KB]);
        for j in keys {
            // SAFETY: the caller's contract.
            let (vj, p) = unsafe {
                (
                    load::<KB>(v.add(j * vstride)),
                    [*sc.add(j), *sc.add(lpad + j), *sc.add(2 * lpad + j), *sc.add(3 * lpad + j)],
                )
            };
            fma16::<Self::Fma>(&mut o0, p[0], &vj);
            fma16::<Self::Fma>(&mut o1, p[1], &vj);
            fma16::<Self::Fma>(&mut o2, p[2], &vj);
            fma16::<Self::Fma>(&mut o3, p[3], &vj);
        }
        for (qi, o) in [o0, o1, o2, o3].iter().enumerate().take(nq) {
            let o = o.map(|x| x * inv[qi]);
            // SAFETY: the caller's contract.
            unsafe { out.add(qi * width).cast::<[f32; KB]>().write_unaligned(o) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::marker::PhantomData;
    use std::ops::Range;

    use super::{Block, KB, Layout, MAX_QB, Products, Reads, copy_values, transpose_columns};
    use crate::kernels::math::Fused;

    /// Eight queries, one AVX-512 register of sixteen keys or columns each: eight chains of
    /// FMAs (or of `vdpbf16ps`, as `D` multiplies).
    pub(super) struct Wide<D>(PhantomData<D>);

    /// AVX-512 in f32.
    pub(super) type Avx512 = Wide<F32Dot>;
    /// AVX-512 with bf16 products.
    pub(super) type Avx512Bf16 = Wide<Bf16Dot>;

    impl<D: Dot> Block for Wide<D> {
        const QB: usize = 8;
        const PRODUCTS: Products = D::PRODUCTS;
        type F32 = Avx512;
        const STEP: usize = D::PER;
        type Fma = Fused;

        #[inline(always)]
        unsafe fn prepare(
            q: *const f32,
            k: *const f32,
            v: *const f32,
            lens: (usize, usize),
            kt: *mut f32,
            l: Layout,
        ) -> Reads {
            // SAFETY: the caller's contract: `key_words` holds the keys' region (d x lpad
            // words) and then the values'.
            unsafe {
                let (q, qstride) = D::prepare_keys(q, k, lens, kt, l);
                let (v, vstride) = D::prepare_values(v, lens.0, kt.add(l.d * l.lpad), l);
                Reads { q, qstride, v, vstride }
            }
        }

        #[inline(always)]
        unsafe fn weights(row: *mut f32, blocks: Range<usize>) {
            // SAFETY: the caller's contract.
            unsafe { D::weights(row, blocks) }
        }

        #[inline(always)]
        unsafe fn exp_sum(xs: &mut [f32], range: Range<usize>, shift: f32) -> f32 {
            // SAFETY: the caller's contract (a `Wide` block's instructions include avx512f).
            unsafe { exp_sum16(xs, range, shift) }
        }

        #[inline(always)]
        unsafe fn scores(
            kt: *const f32,
            q: &[*const f32; MAX_QB],
            sc: *mut f32,
            l: Layout,
            jb: usize,
        ) {
            // SAFETY: the caller's contract.
            unsafe { scores_n::<1, D>(kt, q, sc, l, jb) }
        }

        #[inline(always)]
        unsafe fn weighted(
            v: *const f32,
            sc: *const f32,
            out: *mut f32,
            l: Layout,
            keys: Range<usize>,
            nq: usize,
            inv: &[f32; MAX_QB],
        ) {
            // SAFETY: the caller's contract.
            unsafe { weighted_n::<1, D>(v, sc, out, l, keys, nq, inv) }
        }

        #[inline(always)]
        unsafe fn scores2(
            kt: *const f32,
            q: &[*const f32; MAX_QB],
            sc: *mut f32,
            l: Layout,
            jb: usize,
        ) {
            // SAFETY: the caller's contract.
            unsafe { scores_n::<2, D>(kt, q, sc, l, jb) }
        }

        #[inline(always)]
        unsafe fn weighted2(
            v: *const f32,
            sc: *const f32,
            out: *mut f32,
            l: Layout,
            keys: Range<usize>,
            nq: usize,
            inv: &[f32; MAX_QB],
        ) {
            // SAFETY: the caller's contract.
            unsafe { weighted_n::<2, D>(v, sc, out, l, keys, nq, inv) }
        }
    }

    /// How [`Wide`] multiplies: an element broadcast from a query or a weight (one f32, or a
    /// pair of bf16 in its word) times a register of keys or values, into f32 sums; and how it
    /// readies a head's keys and queries, its values and its weights for that.
    pub(super) trait Dot {
        /// What the products are.
        const PRODUCTS: Products;
        /// Columns (in the scores) and keys (in the weighted sums) one element covers.
        const PER: usize;

        /// The element at `p`, in every lane.
        ///
        /// # Safety
        /// `p` points to a readable word; the caller enabled avx512f.
        unsafe fn splat(p: *const f32) -> __m512;

        /// `acc` plus the products of `x` and `y`, lane by lane.
        ///
        /// # Safety
        /// The caller enabled the instructions the products need.
        unsafe fn dot(acc: __m512, x: __m512, y: __m512) -> __m512;

        /// The head's keys, transposed into `kt` (`d x lpad` words), and where its queries are
        /// read (the first, and the words from one to the next).
        ///
        /// # Safety
        /// As [`Block::prepare`]'s, `kt` holding `d x lpad` words; the caller enabled what
        /// `Self` needs.
        unsafe fn prepare_keys(
            q: *const f32,
            k: *const f32,
            lens: (usize, usize),
            kt: *mut f32,
            l: Layout,
        ) -> (*const f32, usize);

        /// Where the head's values are read (the first step, and the words from one to the
        /// next), written into `vt`.
        ///
        /// # Safety
        /// As [`Block::prepare`]'s, `vt` holding the words [`Products::key_words`] counts after
        /// the keys' `d x lpad`; the caller enabled what `Self` needs.
        unsafe fn prepare_values(
            v: *const f32,
            len: usize,
            vt: *mut f32,
            l: Layout,
        ) -> (*const f32, usize);

        /// [`Block::weights`].
        ///
        /// # Safety
        /// As [`Block::weights`]'s; the caller enabled what `Self` needs.
        unsafe fn weights(row: *mut f32, blocks: Range<usize>);
    }

    /// f32 products: `vfmadd`.
    pub(super) struct F32Dot;

    impl Dot for F32Dot {
        const PRODUCTS: Products = Products::F32;
        const PER: usize = 1;

        #[inline(always)]
        unsafe fn splat(p: *const f32) -> __m512 {
            // SAFETY: the caller's contract.
            unsafe { _mm512_set1_ps(*p) }
        }

        #[inline(always)]
        unsafe fn dot(acc: __m512, x: __m512, y: __m512) -> __m512 {
            // SAFETY: the caller enabled avx512f.
            unsafe { _mm512_fmadd_ps(x, y, acc) }
        }

        /// Tiles of sixteen keys by sixteen columns, transposed in registers; the columns past
        /// the last whole sixteen one value at a time. The queries are read where they are.
        #[inline(always)]
        unsafe fn prepare_keys(
            q: *const f32,
            k: *const f32,
            (len, _): (usize, usize),
            kt: *mut f32,
            l: Layout,
        ) -> (*const f32, usize) {
            // SAFETY: the caller's contract, with avx512f enabled by the caller.
            unsafe {
                let (load, store) = (|p| _mm512_loadu_ps(p), |p, v| _mm512_storeu_ps(p, v));
                transpose_tiles::<_, KB>(k, len, kt, l, _mm512_setzero_ps(), load, store, |r| {
                    transpose16(r)
                })
            }
            (q, l.width)
        }

        /// The values copied row after row ([`copy_values`]).
        #[inline(always)]
        unsafe fn prepare_values(
            v: *const f32,
            len: usize,
            vt: *mut f32,
            l: Layout,
        ) -> (*const f32, usize) {
            // SAFETY: the caller's contract: `vt` holds lpad x d words.
            unsafe { copy_values(v, len, vt, l) };
            (vt, l.d)
        }

        #[inline(always)]
        unsafe fn weights(_: *mut f32, _: Range<usize>) {}
    }

    /// bf16 products: `vdpbf16ps`, two exact products a lane, on words holding two bf16 (the
    /// first in the low half).
    pub(super) struct Bf16Dot;

    /// Two rows of sixteen f32, `lo` and `hi`, rounded to bf16 into one register: `lo`'s in the
    /// low 256 bits, `hi`'s in the high.
    ///
    /// # Safety
    /// The caller enabled avx512f and avx512bf16.
    #[inline(always)]
    unsafe fn bf16x32(lo: __m512, hi: __m512) -> __m512 {
        // SAFETY: register operations only; `__m512bh` is the bits of an `__m512`.
        unsafe { std::mem::transmute::<__m512bh, __m512>(_mm512_cvtne2ps_pbh(hi, lo)) }
    }

    /// Row `r` of `n` rows of `width` values at `p`, sixteen values from column `c`; zero for
    /// `r >= n`.
    ///
    /// # Safety
    /// Rows below `n` hold `c + 16` readable values; the caller enabled avx512f.
    #[inline(always)]
    unsafe fn row16(p: *const f32, width: usize, (r, n): (usize, usize), c: usize) -> __m512 {
        // SAFETY: the caller's contract.
        unsafe { if r < n { _mm512_loadu_ps(p.add(r * width + c)) } else { _mm512_setzero_ps() } }
    }

    impl Dot for Bf16Dot {
        const PRODUCTS: Products = Products::Bf16;
        const PER: usize = 2;

        #[inline(always)]
        unsafe fn splat(p: *const f32) -> __m512 {
            // SAFETY: the caller's contract; the word is read as bits, not as a float.
            unsafe { _mm512_castsi512_ps(_mm512_set1_epi32(p.cast::<i32>().read())) }
        }

        #[inline(always)]
        unsafe fn dot(acc: __m512, x: __m512, y: __m512) -> __m512 {
            // SAFETY: the caller enabled avx512bf16; the casts only reinterpret registers.
            unsafe {
                let bh = |r: __m512| std::mem::transmute::<__m512, __m512bh>(r);
                _mm512_dpbf16_ps(acc, bh(x), bh(y))
            }
        }

        /// Into `kt`, two regions of words holding pairs of bf16: the keys' pairs of columns
        /// transposed (`d / 2 x lpad`: word `c * lpad + j` holds columns `2c, 2c + 1` of key
        /// `j`, zero past `len`), and the queries' pairs of columns (`queries x d / 2`).
        #[inline(always)]
        unsafe fn prepare_keys(
            q: *const f32,
            k: *const f32,
            (len, queries): (usize, usize),
            kt: *mut f32,
            l: Layout,
        ) -> (*const f32, usize) {
            let Layout { d, width, kwidth, lpad, .. } = l;
            let d2 = d / 2;
            debug_assert!(d.is_multiple_of(2 * KB), "Products::taken keeps heads of whole 32s");
            // SAFETY: the caller's contract: every load is inside a row below `len` (or
            // `queries`), `d` columns; every store inside the two regions, which the caller's
            // `d x lpad` words hold (queries <= lpad).
            unsafe {
                let qt = kt.add(d2 * lpad);
                for j0 in (0..lpad).step_by(KB) {
                    for c0 in (0..d).step_by(2 * KB) {
                        let pairs: [__m512; KB] = std::array::from_fn(|r| {
                            let j = (j0 + r, len);
                            bf16x32(row16(k, kwidth, j, c0), row16(k, kwidth, j, c0 + KB))
                        });
                        for (t, keys) in transpose16(pairs).into_iter().enumerate() {
                            _mm512_storeu_ps(kt.add((c0 / 2 + t) * lpad + j0), keys);
                        }
                    }
                }
                for i in 0..queries {
                    for c0 in (0..d).step_by(2 * KB) {
                        let r = (i, queries);
                        let pairs = bf16x32(row16(q, width, r, c0), row16(q, width, r, c0 + KB));
                        _mm512_storeu_ps(qt.add(i * d2 + c0 / 2), pairs);
                    }
                }
                (qt, d2)
            }
        }

        /// The values' pairs of rows, into `vt`: word `j * d + c` holds column `c` of rows
        /// `2j, 2j + 1`, zero past `len`.
        #[inline(always)]
        unsafe fn prepare_values(
            v: *const f32,
            len: usize,
            vt: *mut f32,
            l: Layout,
        ) -> (*const f32, usize) {
            let Layout { d, kwidth, .. } = l;
            debug_assert!(d.is_multiple_of(KB), "Products::taken keeps heads of whole 32s");
            // SAFETY: the caller's contract: every load inside a row below `len`, `d` columns;
            // every store inside the `lpad / 2 x d` words of `vt` (2j < len <= lpad).
            unsafe {
                // Word 2t of the pair register takes row 2j's column t, word 2t + 1 row
                // 2j + 1's: interleaved halves.
                let mix = _mm512_set_epi16(
                    31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                    5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0,
                );
                for j in 0..len.div_ceil(2) {
                    for c0 in (0..d).step_by(KB) {
                        let (a, b) = ((2 * j, len), (2 * j + 1, len));
                        let both = bf16x32(row16(v, kwidth, a, c0), row16(v, kwidth, b, c0));
                        let pairs = _mm512_permutexvar_epi16(mix, _mm512_castps_si512(both));
                        _mm512_storeu_si512(vt.add(j * d + c0).cast(), pairs);
                    }
                }
                (vt, d)
            }
        }

        /// In place: the bf16 of weight `j` becomes the row's `j`th half word, so that word
        /// `j` holds the pair of keys `2j, 2j + 1`; each block is read before its half is
        /// written, and that half lies before every block still to be read.
        #[inline(always)]
        unsafe fn weights(row: *mut f32, blocks: Range<usize>) {
            // SAFETY: the caller's contract, with avx512f and avx512bf16 enabled by the caller.
            unsafe {
                for j0 in blocks.step_by(KB) {
                    let half = _mm512_cvtneps_pbh(_mm512_loadu_ps(row.add(j0)));
                    let bits = std::mem::transmute::<__m256bh, __m256i>(half);
                    _mm256_storeu_si256(row.cast::<u16>().add(j0).cast(), bits);
                }
            }
        }
    }

    /// Six queries, two AVX2 registers of sixteen keys or columns each: twelve chains of FMAs,
    /// each load of keys or values shared by six broadcasts. The keys are transposed eight by
    /// eight in registers (one value at a time, the transpose took about a fifth of attention's
    /// time on an AMD Zen 3).
    pub(super) struct Avx2;

    /// Queries of an AVX2 block.
    const QB2: usize = 6;

    impl Block for Avx2 {
        const QB: usize = QB2;
        type Fma = Fused;
        type F32 = Avx2;

        #[inline(always)]
        unsafe fn transpose_keys(k: *const f32, len: usize, kt: *mut f32, l: Layout) {
            // SAFETY: the caller's contract, with avx2 enabled by the caller.
            unsafe {
                let (load, store) = (|p| _mm256_loadu_ps(p), |p, v| _mm256_storeu_ps(p, v));
                transpose_tiles::<_, 8>(k, len, kt, l, _mm256_setzero_ps(), load, store, |r| {
                    transpose8(r)
                })
            }
        }

        #[inline(always)]
        unsafe fn scores(
            kt: *const f32,
            q: &[*const f32; MAX_QB],
            sc: *mut f32,
            l: Layout,
            jb: usize,
        ) {
            let Layout { d, lpad, scale, .. } = l;
            // SAFETY: the caller's contract, with avx2 and fma enabled by the caller.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); 2]; QB2];
                for c in 0..d {
                    let keys = kt.add(c * lpad + jb);
                    let (k0, k1) = (_mm256_loadu_ps(keys), _mm256_loadu_ps(keys.add(8)));
                    for (a, row) in acc.iter_mut().zip(q) {
                        let x = _mm256_broadcast_ss(&*row.add(c));
                        a[0] = _mm256_fmadd_ps(x, k0, a[0]);
                        a[1] = _mm256_fmadd_ps(x, k1, a[1]);
                    }
                }
                let scale = _mm256_set1_ps(scale);
                for (qi, a) in acc.iter().enumerate() {
                    let dst = sc.add(qi * lpad + jb);
                    _mm256_storeu_ps(dst, _mm256_mul_ps(a[0], scale));
                    _mm256_storeu_ps(dst.add(8), _mm256_mul_ps(a[1], scale));
                }
            }
        }

        #[inline(always)]
        unsafe fn weighted(
            v: *const f32,
            sc: *const f32,
            out: *mut f32,
            l: Layout,
            keys: Range<usize>,
            nq: usize,
            inv: &[f32; MAX_QB],
        ) {
            let Layout { width, lpad, vstride, .. } = l;
            // SAFETY: the caller's contract, with avx2 and fma enabled by the caller.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); 2]; QB2];
                for j in keys {
                    let row = v.add(j * vstride);
                    let (v0, v1) = (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)));
                    for (qi, a) in acc.iter_mut().enumerate() {
                        let p = _mm256_broadcast_ss(&*sc.add(qi * lpad + j));
                        a[0] = _mm256_fmadd_ps(p, v0, a[0]);
                        a[1] = _mm256_fmadd_ps(p, v1, a[1]);
                    }
                }
                for (qi, a) in acc.iter().enumerate().take(nq) {
                    let (dst, inv) = (out.add(qi * width), _mm256_set1_ps(inv[qi]));
                    _mm256_storeu_ps(dst, _mm256_mul_ps(a[0], inv));
                    _mm256_storeu_ps(dst.add(8), _mm256_mul_ps(a[1], inv));
                }
            }
        }
    }

    /// `rows[r * lpad + j] *= s` for rows `r < nq` and keys `j` in `keys`, whole blocks of
    /// sixteen.
    ///
    /// # Safety
    /// `rows` holds `nq` rows of `lpad >= keys.end` writable values; the caller enabled avx512f.
    #[inline(always)]
    pub(super) unsafe fn scale_rows(
        rows: *mut f32,
        lpad: usize,
        nq: usize,
        keys: Range<usize>,
        s: f32,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let s = _mm512_set1_ps(s);
            for r in 0..nq {
                for j in keys.clone().step_by(KB) {
                    let p = rows.add(r * lpad + j);
                    _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), s));
                }
            }
        }
    }

    /// `out[r * width + t] = sums[32 r + t] * inv[r]` for rows `r < inv.len()` and 32 columns
    /// `t`.
    ///
    /// # Safety
    /// `sums` holds `inv.len()` rows of 32 values, `out` as many rows of `width` from 32
    /// writable ones, not overlapping `sums`; the caller enabled avx512f.
    #[inline(always)]
    pub(super) unsafe fn scale_rows_to(sums: *const f32, out: *mut f32, width: usize, inv: &[f32]) {
        // SAFETY: the caller's contract.
        unsafe {
            for (r, &inv) in inv.iter().enumerate() {
                let (src, dst, inv) =
                    (sums.add(2 * KB * r), out.add(r * width), _mm512_set1_ps(inv));
                _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_loadu_ps(src), inv));
                _mm512_storeu_ps(dst.add(KB), _mm512_mul_ps(_mm512_loadu_ps(src.add(KB)), inv));
            }
        }
    }

    /// `2^f` for `|f| <= 1/2`: the Taylor polynomial of `e^(f ln 2)` of degree 7, whose
    /// remainder, `(ln 2 / 2)^8 / 8!` = 5.2e-9 at most, is below half an f32 step of the result.
    const EXP2: [f32; 8] = [
        1.0,
        std::f32::consts::LN_2,
        0.240_226_5,
        5.550_411e-2,
        9.618_129e-3,
        1.333_355_8e-3,
        1.540_353e-4,
        1.525_273_4e-5,
    ];

    /// [`crate::kernels::math::exp_sum_in`] with AVX-512's rounding and scaling: `e^y` for `y =
    /// x - shift` as `2^n 2^f`, `n` the nearest whole number to `t = y log2 e`
    /// (`vrndscaleps`), `f = t - n` exactly, `2^f` by [`EXP2`] and the power of two by
    /// `vscalefps`, which flushes to zero below the smallest subnormal and needs no clamp. The
    /// relative error is a few f32 steps plus `t`'s rounding, `|y| 2^-24` (tested).
    ///
    /// # Safety
    /// The caller enabled avx512f; `xs` is whole blocks of sixteen.
    #[inline(always)]
    pub(super) unsafe fn exp_sum16(xs: &mut [f32], range: Range<usize>, shift: f32) -> f32 {
        debug_assert!(xs.len().is_multiple_of(KB) && range.end <= xs.len());
        // SAFETY: every load and store is one whole block of `xs`; avx512f is the caller's.
        unsafe {
            let (shift, log2e) = (_mm512_set1_ps(shift), _mm512_set1_ps(std::f32::consts::LOG2_E));
            let lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
            let (lo, hi) =
                (_mm512_set1_epi32(range.start as i32), _mm512_set1_epi32(range.end as i32));
            let mut acc = _mm512_setzero_ps();
            for j0 in (0..xs.len()).step_by(KB) {
                let p = xs.as_mut_ptr().add(j0);
                let t = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(p), shift), log2e);
                let n =
                    _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
                let f = _mm512_sub_ps(t, n);
                let mut e = _mm512_set1_ps(EXP2[7]);
                for &c in EXP2[..7].iter().rev() {
                    e = _mm512_fmadd_ps(e, f, _mm512_set1_ps(c));
                }
                let key = _mm512_add_epi32(lanes, _mm512_set1_epi32(j0 as i32));
                let seen = _mm512_cmpge_epi32_mask(key, lo) & _mm512_cmplt_epi32_mask(key, hi);
                let e = _mm512_maskz_mov_ps(seen, _mm512_scalef_ps(e, n));
                _mm512_storeu_ps(p, e);
                acc = _mm512_add_ps(acc, e);
            }
            _mm512_reduce_add_ps(acc)
        }
    }

    /// [`Block::scores`] for `N` blocks of sixteen keys from `jb`: `8 x N` accumulators, eight
    /// queries by `N` blocks, each query's element broadcast once for all `N`, `D::PER` columns
    /// an element.
    ///
    /// # Safety
    /// As [`Block::scores`]'s, with `jb + 16 N <= lpad`; avx512f and what `D` needs enabled by
    /// the caller.
    #[inline(always)]
    unsafe fn scores_n<const N: usize, D: Dot>(
        kt: *const f32,
        q: &[*const f32; MAX_QB],
        sc: *mut f32,
        l: Layout,
        jb: usize,
    ) {
        let Layout { d, lpad, scale, .. } = l;
        // SAFETY: the caller's contract.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); MAX_QB]; N];
            for c in 0..d / D::PER {
                let keys: [__m512; N] =
                    std::array::from_fn(|b| _mm512_loadu_ps(kt.add(c * lpad + jb + b * KB)));
                for (qi, row) in q.iter().enumerate() {
                    let x = D::splat(row.add(c));
                    for (a, k) in acc.iter_mut().zip(&keys) {
                        a[qi] = D::dot(a[qi], x, *k);
                    }
                }
            }
            let scale = _mm512_set1_ps(scale);
            for (b, a) in acc.iter().enumerate() {
                for (qi, s) in a.iter().enumerate() {
                    _mm512_storeu_ps(sc.add(qi * lpad + jb + b * KB), _mm512_mul_ps(*s, scale));
                }
            }
        }
    }

    /// [`Block::weighted`] for `N` blocks of sixteen columns: `8 x N` accumulators, eight
    /// queries by `N` blocks, each weight broadcast once for all `N`, `D::PER` keys a step.
    ///
    /// # Safety
    /// As [`Block::weighted`]'s, for `16 N` columns; avx512f and what `D` needs enabled by the
    /// caller.
    #[inline(always)]
    unsafe fn weighted_n<const N: usize, D: Dot>(
        v: *const f32,
        sc: *const f32,
        out: *mut f32,
        l: Layout,
        keys: Range<usize>,
        nq: usize,
        inv: &[f32; MAX_QB],
    ) {
        let Layout { width, lpad, vstride, .. } = l;
        // SAFETY: the caller's contract.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); MAX_QB]; N];
            for j in keys {
                let vals: [__m512; N] =
                    std::array::from_fn(|b| _mm512_loadu_ps(v.add(j * vstride + b * KB)));
                for qi in 0..MAX_QB {
                    let p = D::splat(sc.add(qi * lpad + j));
                    for (a, x) in acc.iter_mut().zip(&vals) {
                        a[qi] = D::dot(a[qi], p, *x);
                    }
                }
            }
            for (b, a) in acc.iter().enumerate() {
                for (qi, o) in a.iter().enumerate().take(nq) {
                    let o = _mm512_mul_ps(*o, _mm512_set1_ps(inv[qi]));
                    _mm512_storeu_ps(out.add(qi * width + b * KB), o);
                }
            }
        }
    }

    /// [`Block::transpose_keys`] in tiles of `T` keys by `T` columns: `T` rows loaded into
    /// registers of `T` values (`zero` past the keys), `transpose`d, and stored; the columns
    /// past the last whole tile one value at a time.
    ///
    /// # Safety
    /// As [`Block::transpose_keys`]'s, with `T` dividing sixteen (so `lpad`); `load` and `store`
    /// move `T` values.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn transpose_tiles<V: Copy, const T: usize>(
        k: *const f32,
        len: usize,
        kt: *mut f32,
        l: Layout,
        zero: V,
        load: impl Fn(*const f32) -> V,
        store: impl Fn(*mut f32, V),
        transpose: impl Fn([V; T]) -> [V; T],
    ) {
        let Layout { d, kwidth, lpad, .. } = l;
        let full = d / T * T;
        for j0 in (0..lpad).step_by(T) {
            for c0 in (0..full).step_by(T) {
                let rows = std::array::from_fn(|r| {
                    if j0 + r >= len {
                        return zero;
                    }
                    // SAFETY: row j0 + r < len of k, columns c0..c0 + T <= d.
                    load(unsafe { k.add((j0 + r) * kwidth + c0) })
                });
                for (t, col) in transpose(rows).into_iter().enumerate() {
                    // SAFETY: row c0 + t < d of kt, keys j0..j0 + T <= lpad.
                    store(unsafe { kt.add((c0 + t) * lpad + j0) }, col);
                }
            }
        }
        // SAFETY: the caller's contract.
        unsafe { transpose_columns(k, len, full..d, kt, l) }
    }

    /// The transpose of eight rows of eight values: `out[t][r] = rows[r][t]`.
    ///
    /// Pairs of rows interleave (`unpack`), then fours (`shuffle_ps`): register `4 * g + p`
    /// then holds columns `p` and `4 + p` of rows `4 * g..4 * g + 4` in its two 128-bit lanes,
    /// which `permute2f128` gathers.
    #[inline(always)]
    unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        // SAFETY: register operations only, with avx2 enabled by the caller.
        unsafe {
            let t: [__m256; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
                if i % 2 == 0 { _mm256_unpacklo_ps(a, b) } else { _mm256_unpackhi_ps(a, b) }
            });
            let u: [__m256; 8] = std::array::from_fn(|i| {
                let (g, p) = (i / 4, i % 4);
                let (a, b) = (t[4 * g + p / 2], t[4 * g + 2 + p / 2]);
                if p % 2 == 0 {
                    _mm256_shuffle_ps::<0x44>(a, b)
                } else {
                    _mm256_shuffle_ps::<0xee>(a, b)
                }
            });
            std::array::from_fn(|c| {
                let (a, b) = (u[c % 4], u[4 + c % 4]);
                if c < 4 {
                    _mm256_permute2f128_ps::<0x20>(a, b)
                } else {
                    _mm256_permute2f128_ps::<0x31>(a, b)
                }
            })
        }
    }

    /// The transpose of sixteen rows of sixteen values: `out[t][r] = rows[r][t]`.
    ///
    /// Pairs of rows interleave (`unpack`), then fours (`shuffle_ps`), then the 128-bit lanes
    /// of fours gather (`shuffle_f32x4`, twice): after the second step, lane `l` of register
    /// `4 * g + p` holds column `4 * l + p` of rows `4 * g..4 * g + 4`.
    #[inline(always)]
    unsafe fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
        // SAFETY: register operations only, with avx512f enabled by the caller.
        unsafe {
            let t: [__m512; 16] = std::array::from_fn(|i| {
                let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
                if i % 2 == 0 { _mm512_unpacklo_ps(a, b) } else { _mm512_unpackhi_ps(a, b) }
            });
            // u[4g + p]: column 4l + p of rows 4g..4g + 4, in lane l.
            let u: [__m512; 16] = std::array::from_fn(|i| {
                let (g, p) = (i / 4, i % 4);
                let (a, b) = (t[4 * g + p / 2], t[4 * g + 2 + p / 2]);
                if p % 2 == 0 {
                    _mm512_shuffle_ps::<0x44>(a, b)
                } else {
                    _mm512_shuffle_ps::<0xee>(a, b)
                }
            });
            // v[8h + 4e + p]: columns 4e + p and 8 + 4e + p of rows 8h..8h + 8, in lanes (0, 2)
            // and (1, 3).
            let v: [__m512; 16] = std::array::from_fn(|i| {
                let (hh, e, p) = (i / 8, i / 4 % 2, i % 4);
                let (a, b) = (u[8 * hh + p], u[8 * hh + 4 + p]);
                if e == 0 {
                    _mm512_shuffle_f32x4::<0x88>(a, b)
                } else {
                    _mm512_shuffle_f32x4::<0xdd>(a, b)
                }
            });
            std::array::from_fn(|c| {
                let (a, b) = (v[c % 8], v[8 + c % 8]);
                if c < 8 {
                    _mm512_shuffle_f32x4::<0x88>(a, b)
                } else {
                    _mm512_shuffle_f32x4::<0xdd>(a, b)
                }
            })
        }
    }
}

/// Adds head `head`'s position bias, where `h` has one, to the first `nq` rows of a block's
/// scores (`lpad` apart): row `qi`, the query at position `at + qi` among the task's keys, over
/// the keys `seen(qi)` it sees.
#[inline(always)]
fn add_position_bias(
    sc: &mut [f32],
    lpad: usize,
    nq: usize,
    h: Heads<'_>,
    head: usize,
    at: usize,
    seen: impl Fn(usize) -> (usize, usize),
) {
    let Some(bias) = h.position_bias else { return };
    let span = bias.len() / h.heads;
    let row = &bias[head * span..(head + 1) * span];
    // The bias of a key `r` positions after its query is at `r + longest - 1`.
    let longest = span.div_ceil(2);
    for qi in 0..nq {
        let (a, b) = seen(qi);
        // Queries lie within the longest sequence's positions, so this does not underflow.
        let from = longest - 1 - (at + qi);
        let scores = &mut sc[qi * lpad + a..qi * lpad + b];
        for (s, &x) in scores.iter_mut().zip(&row[a + from..b + from]) {
            *s += x;
        }
    }
}

/// The softmax of a block of queries, in place in its rows of scores (`lpad` apart): for each of
/// the first `inv.len()` rows, query `qi` seeing the keys `seen(qi)`, the exponentials of its
/// scores over the whole blocks of sixteen keys they fall in, with their maximum subtracted and
/// zero for the keys of those blocks it does not see, and the reciprocal of their sum into
/// `inv[qi]`; every other value of the keys `steps` (those the weighted sums take) zero, in every
/// row of `sc`.
///
/// # Safety
/// The caller enabled `B`'s instructions; every row's keys seen lie in `steps`, within `lpad`.
#[inline(always)]
unsafe fn softmax<B: Block>(
    sc: &mut [f32],
    lpad: usize,
    seen: impl Fn(usize) -> (usize, usize),
    steps: Range<usize>,
    inv: &mut [f32],
) {
    let nq = inv.len();
    for (qi, inv) in inv.iter_mut().enumerate() {
        let (a, b) = seen(qi);
        let (ba, bb) = (a / KB * KB, b.next_multiple_of(KB));
        let row = &mut sc[qi * lpad..(qi + 1) * lpad];
        let blocks = &mut row[ba..bb];
        let max = math::max_in(blocks, a - ba..b - ba);
        // The sum is at least 1 (the largest score's term), as no sequence is empty.
        // SAFETY: the caller enabled B's instructions; the row is whole blocks.
        *inv = 1.0 / unsafe { B::exp_sum(blocks, a - ba..b - ba, max) };
        if steps.start < ba {
            row[steps.start..ba].fill(0.0);
        }
        if bb < steps.end {
            row[bb..steps.end].fill(0.0);
        }
    }
    for row in sc.chunks_exact_mut(lpad).skip(nq) {
        row[steps.clone()].fill(0.0);
    }
}

/// One head of one sequence on AMX's tiles, [`AMX_QB`] queries at a time (the module's doc).
///
/// # Safety
/// As [`attention`]'s with [`Products::AmxBf16`], for the task's rows and columns; the head's
/// width is a multiple of 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma")]
unsafe fn amx_head(task: Task<'_>, scratch: &mut Scratch) {
    type B = x86::Avx512Bf16;
    const F32: usize = size_of::<f32>();
    let Task { ptrs, start, len, q0, queries, first, head, h, tables } = task;
    let Scratch { keys, scores, disentangled, .. } = scratch;
    let (d, width, kwidth) = (h.head_dim, h.heads * h.head_dim, h.kv_heads * h.head_dim);
    // The head's columns of the queries and output, and of the keys and values it reads.
    let (col, kcol) = (head * d, head / (h.heads / h.kv_heads) * d);
    let [q, k, v, out] = ptrs.map(SendPtr::get);
    let lpad = Products::AmxBf16.lpad(len);
    keys.ensure(Products::AmxBf16.key_words(d, lpad));
    scores.ensure(AMX_QB * lpad);
    let kt = keys.as_mut_slice().as_mut_ptr();
    let sc = &mut scores.as_mut_slice()[..AMX_QB * lpad];
    let layout = Layout { d, width, kwidth, lpad, scale: h.scale, vstride: kwidth };
    // The keys' pairs transposed (d / 2 x lpad words, zero past len), then the queries' pairs
    // (up to lpad rows of d / 2: a block's rows past the task's are read, their results not
    // used), then the values' pairs of rows (lpad / 2 x d), zero past len as well: their
    // weights are zero, and stale values could be infinite.
    // SAFETY: rows start..start + len of k and v, q0..q0 + queries of q, the head's d
    // columns; kt holds the words `key_words` says, the values' from d x lpad on.
    let reads = unsafe {
        let (qh, kh, vh) =
            (q.add(q0 * width + col), k.add(start * kwidth + kcol), v.add(start * kwidth + kcol));
        let reads = B::prepare(qh, kh, vh, (len, queries), kt, layout);
        let pairs = len.div_ceil(2);
        kt.add(d * lpad + pairs * d).write_bytes(0, (lpad / 2 - pairs) * d);
        reads
    };
    let seen = |i: usize| h.reach.keys(first + i, len);
    // SAFETY: rows start..start + len of k, the head's columns; `prepare` left bf16 keys.
    let mut terms = tables.map(|t| unsafe {
        let keys = (k.add(start * kwidth + kcol).cast_const(), None, len);
        t.for_task::<B>(head, keys, disentangled, layout)
    });
    let (scp, ldsc) = (sc.as_mut_ptr(), lpad * F32);
    // A block's weighted sums for 32 columns, before they are divided by the sums.
    let mut sums = [0.0f32; AMX_QB * AMX_STEP];
    // SAFETY: the caller's contract: bf16_ready said yes.
    let mut tiles = unsafe { amx::Tiles::configure() };
    let mut i0 = 0;
    while i0 < queries {
        let nq = AMX_QB.min(queries - i0);
        let blocks = nq.div_ceil(amx::ROWS);
        // The keys some query of the block sees, in whole steps.
        let (lo, hi) = (seen(i0).0, seen(i0 + nq - 1).1);
        let (slo, shi) = (lo / AMX_STEP * AMX_STEP, hi.next_multiple_of(AMX_STEP));
        // Scores of 32 keys at a time: the block's rows of query pairs by two tiles of the
        // keys' transposed pairs, d / 32 steps.
        // SAFETY: rows i0..i0 + 16 blocks <= lpad of the queries' pairs; pair rows of the
        // keys' transpose, keys jb..jb + 32 <= lpad; rows of the scores, the same keys.
        unsafe {
            let a = (reads.q.add(i0 * reads.qstride).cast::<u8>(), reads.qstride * F32);
            for jb in (slo..shi).step_by(AMX_STEP) {
                let b = (kt.add(jb).cast_const().cast::<u8>(), ldsc);
                tiles.bf16_block(blocks, d / AMX_STEP, a, b, (scp.add(jb).cast(), ldsc));
            }
        }
        // SAFETY: rows below nq of the scores, keys slo..shi <= lpad, whole blocks.
        unsafe { x86::scale_rows(scp, lpad, nq, slo..shi, h.scale) };
        add_position_bias(sc, lpad, nq, h, head, first + i0, |qi| seen(i0 + qi));
        if let Some(terms) = &mut terms {
            // SAFETY: the block's rows of q, the head's columns.
            let qh = (unsafe { q.add((q0 + i0) * width + col) }.cast_const(), width);
            let block = (nq, first + i0, lpad);
            // SAFETY: the caller enabled B's instructions, and with them B::F32's; `terms` was
            // made for this task with this lpad.
            unsafe { terms.add::<<B as Block>::F32>(sc, block, |qi| seen(i0 + qi), qh) };
        }
        let mut inv = [0.0f32; AMX_QB];
        // SAFETY: the caller enabled B's instructions.
        unsafe { softmax::<B>(sc, lpad, |qi| seen(i0 + qi), slo..shi, &mut inv[..nq]) };
        for qi in 0..blocks * amx::ROWS {
            // SAFETY: row qi of the block's scores, lpad values; slo..shi are whole blocks.
            unsafe { B::weights(scp.add(qi * lpad), slo..shi) };
        }
        // Weighted sums of 32 columns at a time: the block's rows of weights (bf16 from key
        // slo, 2 slo bytes into each row) by two tiles of the values' pairs of rows.
        for c0 in (0..d).step_by(AMX_STEP) {
            // SAFETY: the weights' rows as above, keys slo..shi; pair rows slo / 2..shi / 2 <=
            // lpad / 2 of the values, columns c0..c0 + 32 <= d; the block's nq rows of out,
            // columns c0..c0 + 32 of the head, which only this task writes.
            unsafe {
                let a = (scp.cast::<u8>().add(2 * slo).cast_const(), ldsc);
                let b = (reads.v.add(slo / 2 * d + c0).cast::<u8>(), d * F32);
                let c = (sums.as_mut_ptr().cast::<u8>(), AMX_STEP * F32);
                tiles.bf16_block(blocks, (shi - slo) / AMX_STEP, a, b, c);
                let o = out.add((q0 + i0) * width + col + c0);
                x86::scale_rows_to(sums.as_ptr(), o, width, &inv[..nq]);
            }
        }
        i0 += nq;
    }
}

/// One head of one sequence, `QB` queries at a time.
///
/// # Safety
/// As [`attention`]'s, for the task's rows and columns.
#[inline(always)]
unsafe fn head_body<B: Block>(task: Task<'_>, scratch: &mut Scratch) {
    let Task { ptrs, start, len, q0, queries, first, head, h, tables } = task;
    let Scratch { keys, scores, disentangled, .. } = scratch;
    let qb = B::QB;
    let (d, width, kwidth) = (h.head_dim, h.heads * h.head_dim, h.kv_heads * h.head_dim);
    // The head's columns of the queries and output, and of the keys and values it reads.
    let (col, kcol) = (head * d, head / (h.heads / h.kv_heads) * d);
    let [q, k, v, out] = ptrs.map(SendPtr::get);
    // Keys padded to whole blocks with zeros, whose scores are never used.
    let lpad = len.next_multiple_of(KB);
    keys.ensure(B::PRODUCTS.key_words(d, lpad));
    scores.ensure(qb * lpad);
    let kt = keys.as_mut_slice();
    // Scores of a block of queries: QB rows of lpad.
    let sc = &mut scores.as_mut_slice()[..qb * lpad];
    let layout = Layout { d, width, kwidth, lpad, scale: h.scale, vstride: kwidth };
    // The head's keys, transposed (kt[c * lpad + j] = k[start + j][col + c], zero past len,
    // in f32), and where its queries and values are read.
    // SAFETY: rows start..start + len of k and v, q0..q0 + queries of q, the head's d columns;
    // kt holds the words `key_words` says.
    let reads = unsafe {
        let (qh, kh, vh) =
            (q.add(q0 * width + col), k.add(start * kwidth + kcol), v.add(start * kwidth + kcol));
        B::prepare(qh, kh, vh, (len, queries), kt.as_mut_ptr(), layout)
    };
    let layout = Layout { vstride: reads.vstride, ..layout };
    let step = B::STEP;
    // The keys query i (at position first + i) may see.
    let seen = |i: usize| h.reach.keys(first + i, len);
    // SAFETY: rows start..start + len of k, the head's columns; in f32, `prepare` left the
    // keys transposed in kt.
    let mut terms = tables.map(|t| unsafe {
        let f32_keys = (B::PRODUCTS == Products::F32).then_some(kt.as_ptr());
        let keys = (k.add(start * kwidth + kcol).cast_const(), f32_keys, len);
        t.for_task::<B>(head, keys, disentangled, layout)
    });
    let (ktp, scp) = (kt.as_ptr(), sc.as_mut_ptr());
    let mut i0 = 0;
    while i0 < queries {
        // A block of QB queries; past the last query, rows repeat it and their results are not
        // written.
        let nq = qb.min(queries - i0);
        // SAFETY: the task's queries, as `prepare` left them.
        let rows =
            std::array::from_fn(|qi| unsafe { reads.q.add((i0 + qi.min(nq - 1)) * reads.qstride) });
        // Every key some query of the block sees, in whole blocks of keys; and in whole steps
        // of the weighted sums, the keys they take (those outside lo..hi with zero weight).
        let (lo, hi) = (seen(i0).0, seen(i0 + nq - 1).1);
        let (blo, bhi) = (lo / KB * KB, hi.next_multiple_of(KB));
        let (slo, shi) = (lo / step * step, hi.next_multiple_of(step));
        // Scores: sc[qi * lpad + j] = scale * q_qi . k_j, the block's accumulators in registers.
        let mut jb = blo;
        while jb + 2 * KB <= bhi {
            // SAFETY: blocks jb and jb + 16 of the transposed keys and of the scores.
            unsafe { B::scores2(ktp, &rows, scp, layout, jb) };
            jb += 2 * KB;
        }
        while jb < bhi {
            // SAFETY: block jb of the transposed keys and of the scores, inside their buffers.
            unsafe { B::scores(ktp, &rows, scp, layout, jb) };
            jb += KB;
        }
        // Each query's softmax over the keys it sees, unnormalised, as weights over lo..hi
        // (zero for the keys of the block it does not see); the weighted sums are multiplied
        // by the reciprocal of its sum. The exponentials run over whole blocks of keys, those
        // outside the query's keys set to zero.
        add_position_bias(sc, lpad, nq, h, head, first + i0, |qi| seen(i0 + qi));
        if let Some(terms) = &mut terms {
            // SAFETY: the block's rows of q, the head's columns.
            let qh = (unsafe { q.add((q0 + i0) * width + col) }.cast_const(), width);
            let block = (nq, first + i0, lpad);
            // SAFETY: the caller enabled B's instructions, and with them B::F32's; `terms` was
            // made for this task with this lpad.
            unsafe { terms.add::<<B as Block>::F32>(sc, block, |qi| seen(i0 + qi), qh) };
        }
        let mut inv = [0.0f32; MAX_QB];
        // SAFETY: the caller enabled B's instructions.
        unsafe { softmax::<B>(sc, lpad, |qi| seen(i0 + qi), slo..shi, &mut inv[..nq]) };
        for qi in 0..qb {
            // SAFETY: row qi of the block's scores, lpad values; blo..bhi are whole blocks.
            unsafe { B::weights(scp.add(qi * lpad), blo..bhi) };
        }
        // out_i = sum_j p_ij v_j, sixteen columns at a time, the block's accumulators in registers;
        // then the columns past the last block of sixteen.
        let full = d / KB * KB;
        let steps = slo / step..shi / step;
        let mut c0 = 0;
        while c0 + 2 * KB <= full {
            // SAFETY: as below, for columns c0..c0 + 32.
            unsafe {
                let (vs, os) = (reads.v.add(c0), out.add((q0 + i0) * width + col + c0));
                B::weighted2(vs, scp, os, layout, steps.clone(), nq, &inv);
            }
            c0 += 2 * KB;
        }
        while c0 < full {
            // SAFETY: the steps of values the block sees and the block's nq rows of out,
            // columns c0..c0 + 16 of the head; out overlaps no input, and only this task
            // writes them.
            unsafe {
                let (vs, os) = (reads.v.add(c0), out.add((q0 + i0) * width + col + c0));
                B::weighted(vs, scp, os, layout, steps.clone(), nq, &inv);
            }
            c0 += KB;
        }
        // Columns past the blocks of sixteen: f32 weights and values only, as `taken` leaves
        // bf16 products to heads of whole blocks.
        debug_assert!(full == d || B::PRODUCTS == Products::F32);
        for c in full..d {
            for qi in 0..nq {
                let mut o = 0.0f32;
                for j in lo..hi {
                    // SAFETY: row start + j of v, column c of the head.
                    let x = unsafe { *v.add((start + j) * kwidth + kcol + c) };
                    o = B::Fma::mul_add(sc[qi * lpad + j], x, o);
                }
                // SAFETY: as for the blocks of sixteen.
                unsafe { *out.add((q0 + i0 + qi) * width + col + c) = o * inv[qi] };
            }
        }
        i0 += nq;
    }
}

#[cfg(test)]
mod tests {
    use switchyard_core::BatchBuf;

    use super::*;

    /// A batch of sequences of `lens` tokens.
    fn batch_of(lens: &[usize]) -> BatchBuf {
        let mut b = BatchBuf::new();
        for &len in lens {
            b.push(&vec![0; len], None, &[]).expect("a sequence");
        }
        b
    }

    /// The parts `split` cuts a sequence of `len` tokens into: their queries, and their keys;
    /// checked to take every query once, in order.
    fn parts(split: Split, len: usize) -> Vec<(Range<usize>, Range<usize>)> {
        let cut: Vec<_> = (0..split.parts(len)).map(|c| split.part(c, len)).collect();
        let ends: Vec<usize> = cut.iter().map(|(q, _)| q.end).collect();
        let starts: Vec<usize> = cut.iter().map(|(q, _)| q.start).collect();
        assert_eq!(starts[0], 0, "{cut:?}");
        assert_eq!(&starts[1..], &ends[..ends.len() - 1], "{cut:?}");
        assert_eq!(ends.last(), Some(&len), "{cut:?}");
        cut
    }

    #[test]
    fn long_sequences_are_cut_only_where_whole_heads_leave_threads_idle() {
        let h = Heads {
            heads: 12,
            kv_heads: 12,
            head_dim: 32,
            scale: 1.0,
            reach: Reach::default(),
            position_bias: None,
            disentangled: None,
        };
        let one = batch_of(&[512]);
        // Twelve heads of one sequence on two threads: six each, no cut.
        assert_eq!(parts(Split::new(&one.batch(), h, false, 2), 512).len(), 1);
        // On sixteen threads, a head is 16/12 of a thread's share: parts of at most a quarter
        // of a share, 4 x 16 / 12 of a head, rounded up to whole query blocks (96 queries).
        let split = Split::new(&one.batch(), h, false, 16);
        let cut = parts(split, 512);
        assert_eq!(cut.len(), 6);
        assert!(cut.iter().all(|(q, k)| q.start % PART_STEP == 0 && *k == (0..512)), "{cut:?}");
        assert_eq!(cut.last().map(|(q, _)| q.clone()), Some(480..512));
        // One query per sequence, or one thread: never cut.
        assert_eq!(parts(Split::new(&one.batch(), h, true, 16), 512).len(), 1);
        assert_eq!(parts(Split::new(&one.batch(), h, false, 1), 512).len(), 1);
        // A batch of many sequences of equal length has work enough in whole heads.
        let many = batch_of(&[128; 32]);
        assert_eq!(parts(Split::new(&many.batch(), h, false, 16), 128).len(), 1);
        // Short sequences are not cut below the fewest queries of a part.
        let short = batch_of(&[60]);
        assert_eq!(parts(Split::new(&short.batch(), h, false, 64), 60).len(), 2);
        assert_eq!(Split::new(&short.batch(), h, false, 64).chunk(60), MIN_PART);
    }

    #[test]
    fn a_windowed_part_takes_the_keys_its_queries_see_from_a_whole_block() {
        let h = Heads {
            heads: 1,
            kv_heads: 1,
            head_dim: 32,
            scale: 1.0,
            reach: Reach::of(Some(20), false),
            position_bias: None,
            disentangled: None,
        };
        let one = batch_of(&[1000]);
        let cut = parts(Split::new(&one.batch(), h, false, 16), 1000);
        assert!(cut.len() > 2, "{cut:?}");
        for (q, k) in &cut {
            assert_eq!(k.start % AMX_STEP, 0, "{q:?} {k:?}");
            assert!(k.start <= q.start.saturating_sub(20), "{q:?} {k:?}");
            assert!(q.start.saturating_sub(20) - k.start < AMX_STEP, "{q:?} {k:?}");
            assert_eq!(k.end, (q.end + 20).min(1000), "{q:?} {k:?}");
        }
    }

    /// AVX-512's softmax exponentials against f64: within `(4 + |y|) 2^-24` relative of
    /// `e^y` (a few steps of rounding, and `y log2 e`'s), zero outside the range, and their sum.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_sum16_is_within_its_bound_of_f64() {
        use super::x86::exp_sum16;
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return;
        }
        let shift = 3.25f32;
        let xs: Vec<f32> = (0..8192).map(|i| shift - 100.0 * i as f32 / 8191.0).collect();
        let mut got = xs.clone();
        let range = 5..8190;
        // SAFETY: this CPU has avx512f; 8192 is whole blocks.
        let sum = unsafe { exp_sum16(&mut got, range.clone(), shift) };
        let mut want_sum = 0.0f64;
        for (j, (&x, &g)) in xs.iter().zip(&got).enumerate() {
            if !range.contains(&j) {
                assert_eq!(g, 0.0, "{j}");
                continue;
            }
            let y = f64::from(x - shift);
            let want = y.exp();
            want_sum += want;
            let bound = (4.0 + y.abs()) * 2f64.powi(-24) * want + f64::from(f32::from_bits(1));
            assert!((f64::from(g) - want).abs() <= bound, "e^{y}: {g} vs {want}");
        }
        assert!((f64::from(sum) - want_sum).abs() <= 1e-6 * want_sum, "{sum} vs {want_sum}");
    }
}
