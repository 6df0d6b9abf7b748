//! CubeCL kernels of our own, through switchyard-burn's per-op seam, where Burn's generic path
//! does more work than the op needs:
//! - [`attention`]: ragged self-attention over the batch's `cu` offsets in one launch, where the
//!   generic path makes one Burn attention call (and, with a window, one mask) per sequence;
//!   where a layer's query, key and value are one joined product read by the attention op alone,
//!   the attention kernels add the projections' bias as they read each value, so the
//!   projections are their product and no epilogue launch;
//! - [`gemm`]: a linear layer with its bias, activation and residual applied in the GEMM's
//!   epilogue, where the generic path makes a pass over the output for each;
//! - [`norm`]: LayerNorm in one launch with f32 statistics, where the generic path makes nine,
//!   and L2 normalisation in one, where it makes five; where a linear layer's output is read
//!   only by a LayerNorm (a residual block's end), the norm applies the layer's bias and
//!   residual too, so the layer is its product and the add and norm one launch; and where a
//!   LayerNorm reads an encoder's embeddings, it gathers each token's rows of the token,
//!   position and type tables and sums them itself, one launch where there were six;
//! - [`pool`]: each sequence's mean, max, first or last row in one launch, where the generic
//!   path makes four for a mean and one per sequence for a max;
//! - [`epilogue`]: where the fused GEMM does not run, Burn's matmul followed by one launch for
//!   the bias, activation and residual, where the generic path makes one for each;
//! - [`tiles`] (opt-in, [`CubeKernels::with_tiled_attention`]): half-precision ragged attention
//!   in 16 x 16 tiles, its products on tensor cores where the device has them;
//! - [`matmul`]: the product under the epilogue by Burn's choice, a named routine of cubek's, or
//!   the fastest of them as measured on the device ([`Matmul::Tuned`]).
//!
//! They run on tensors of the unfused backend: attention, the norms, pooling and the epilogue in
//! f32, f16 and bf16 (f32 arithmetic in each), the GEMM in f32 only (in half precision Burn's matmul runs
//! on tensor cores, which a scalar GEMM cannot match). Anything else (another dtype, a head
//! wider than [`attention::MAX_HEAD_DIM`], a batch or output needing more cubes than a launch
//! holds, a `fusion` build, whose tensors are fusion handles) goes to the generic lowering, and
//! [`CubeKernels::launched`] shows which path ran.
//!
//! On a device with TF32 tensor cores (an NVIDIA GPU since Ampere), Burn's matmul and attention
//! compute f32 products in TF32, 10 bits of mantissa: on an H200 that put whole encoders 1e-4
//! off the f64 reference, where f32 is 1e-6 off. There every kernel is on by default (the GEMM
//! taking each f32 linear layer, the epilogue each half-precision one), so f32 means f32, and a plan the kernels could not run whole is refused at lower time rather than
//! run in TF32. A kernel set chosen without them (`with_kernels`) runs Burn's TF32 ops.

#[cfg(not(feature = "fusion"))]
mod attention;
mod cublas;
#[cfg(all(test, feature = "wgpu", not(feature = "fusion")))]
mod cuda_check;
#[cfg(not(feature = "fusion"))]
mod epilogue;
#[cfg(not(feature = "fusion"))]
mod gemm;
mod matmul;
#[cfg(not(feature = "fusion"))]
mod norm;
#[cfg(not(feature = "fusion"))]
mod pool;
#[cfg(not(feature = "fusion"))]
mod tiles;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use matmul::{Matmul, ROW_GRANULE, Routine, TunedChoice, tuned_choices};
use switchyard_burn::Kernels;
#[cfg(not(feature = "fusion"))]
use switchyard_burn::generic::BoundBias;
#[cfg(not(feature = "fusion"))]
use switchyard_burn::{Bound, Inputs, Outcome, RunCx, positions_in};
use switchyard_core::Result;
#[cfg(not(feature = "fusion"))]
use switchyard_core::{Act, Batch, Bucket, DType, Error, Graph, Op, PositionBias};

/// The most keys the attention kernel takes in one online-softmax step: one a unit of its
/// 32-unit cubes (its unrolled group loops grow with it).
const MAX_KEY_GROUP: usize = 32;

/// Which of the crate's own kernels a backend uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSet {
    /// Ragged self-attention.
    pub attention: bool,
    /// Linear layers with a fused epilogue.
    pub linear: bool,
    /// LayerNorm in one launch.
    pub norm: bool,
    /// Where the fused GEMM does not run, a linear layer's bias, activation and residual in one
    /// launch after Burn's matmul.
    pub epilogue: bool,
    /// Pooling, and L2 normalisation, each in one launch.
    pub pool: bool,
    /// A linear layer's epilogue applied by the one-launch LayerNorm that alone reads its
    /// output (a residual block's add and norm), where the epilogue kernel would take the layer:
    /// its product, then one launch, where apart they make two and a pass over the output.
    pub norm_epilogue: bool,
    /// A layer's joined query, key and value projection's bias added by the attention kernel
    /// that alone reads them, as it reads each value, where the epilogue kernel would take the
    /// projection: one launch and a pass over the product fewer a layer.
    pub attention_bias: bool,
    /// An encoder's embeddings (its token, position and type rows, gathered and summed) computed
    /// by the one-launch LayerNorm after them, as it reads each row, where the generic path
    /// makes a launch for each lookup and each sum.
    pub embed_norm: bool,
}

impl KernelSet {
    /// Every kernel of this crate.
    pub const ALL: KernelSet = KernelSet {
        attention: true,
        linear: true,
        norm: true,
        epilogue: true,
        pool: true,
        norm_epilogue: true,
        attention_bias: true,
        embed_norm: true,
    };
    /// None: Burn's generic lowering for every op.
    pub const NONE: KernelSet = KernelSet {
        attention: false,
        linear: false,
        norm: false,
        epilogue: false,
        pool: false,
        norm_epilogue: false,
        attention_bias: false,
        embed_norm: false,
    };
    /// The kernels measured to win where Burn's ops compute f32 exactly, the default there:
    /// ragged attention, LayerNorm, the epilogue after Burn's matmul and pooling. On llvmpipe
    /// (`cargo xtask bench --gpu`) attention made the MiniLM-shaped encoder 1.2x faster,
    /// LayerNorm beside it 1.1x more (median of seven runs) and the epilogue 1.05x more (of
    /// three), pooling alone ran 1.5x to 1.8x faster (a mean and L2) and 1.2x to 1.7x (SPLADE's
    /// max), while the fused GEMM made the encoder 2x slower than Burn's tuned matmul. The
    /// epilogue in the LayerNorm after it made no measurable difference there (0.98x to 1.09x)
    /// but saves a launch and a pass over the output a residual block, so it is on; so are the
    /// projections' bias in the attention kernel, whose outputs are the epilogue's bit for bit,
    /// and the embeddings in their LayerNorm (neither yet timed on a GPU).
    pub const MEASURED: KernelSet = KernelSet { linear: false, ..KernelSet::ALL };

    /// The default on a device: [`KernelSet::ALL`] where Burn's ops would compute f32 products
    /// in TF32 (`tf32`), else [`KernelSet::MEASURED`].
    pub fn default_for(tf32: bool) -> KernelSet {
        if tf32 { KernelSet::ALL } else { KernelSet::MEASURED }
    }
}

impl Default for KernelSet {
    fn default() -> Self {
        KernelSet::MEASURED
    }
}

/// How many ops each of the crate's kernels has run, since the backend was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Launched {
    /// Attention ops run by the ragged attention kernels, the tiled one's included.
    pub attention: usize,
    /// Attention ops run by the tiled attention kernel.
    pub tiled: usize,
    /// Linear ops run by the fused-epilogue GEMM.
    pub linear: usize,
    /// LayerNorm ops run by the one-launch LayerNorm.
    pub norm: usize,
    /// Linear ops run as Burn's matmul and the one-launch epilogue.
    pub epilogue: usize,
    /// Pooling and L2 normalisation ops run by the one-launch kernels.
    pub pool: usize,
    /// LayerNorm ops that applied the epilogue of the linear layer before them (that layer
    /// counted in `epilogue`).
    pub norm_epilogue: usize,
    /// Attention ops that added the bias of the joined projection before them (that
    /// projection counted in `epilogue`).
    pub attention_bias: usize,
    /// LayerNorm ops that gathered and summed the embeddings before them (those norms counted
    /// in `norm`).
    pub embed_norm: usize,
    /// Products whose routine takes only whole tiles of rows that copied their input to
    /// padded rows (those layers counted in `epilogue`): none where the batch was padded.
    pub padded: usize,
}

/// The cube backend's kernels: the chosen [`KernelSet`], the routine of the products under the
/// epilogue, whether the device's Burn ops compute f32 products in TF32, and counts of what the
/// kernels ran.
#[derive(Clone, Debug, Default)]
pub struct CubeKernels {
    set: KernelSet,
    matmul: Matmul,
    /// Keys per online-softmax step of the attention kernel; 0 reads as 1.
    key_group: usize,
    /// Whether half-precision attention runs in 16 x 16 tiles (tensor cores where the device
    /// has them) where the tiled kernel takes the op.
    tiles: bool,
    tf32: bool,
    attention: Arc<AtomicUsize>,
    tiled: Arc<AtomicUsize>,
    linear: Arc<AtomicUsize>,
    norm: Arc<AtomicUsize>,
    epilogue: Arc<AtomicUsize>,
    pool: Arc<AtomicUsize>,
    norm_epilogue: Arc<AtomicUsize>,
    attention_bias: Arc<AtomicUsize>,
    embed_norm: Arc<AtomicUsize>,
    padded: Arc<AtomicUsize>,
}

impl CubeKernels {
    /// Kernels using `set`, on a device whose Burn ops compute f32 exactly.
    pub fn new(set: KernelSet) -> Self {
        CubeKernels { set, ..CubeKernels::default() }
    }

    /// The default kernels for `device`, knowing whether its Burn ops would use TF32, with the
    /// choices of the process's environment ([`crate::MATMUL_ENV`], [`crate::ATTENTION_ENV`]):
    /// an error where those are not values they take.
    pub(crate) fn for_device(device: &cubecl::Device) -> Result<Self> {
        use cubecl::prelude::Scalar;
        let tf32 = device.client().properties().supports_type(cubecl::tf32::elem_type_native());
        let chosen = crate::env::choices_on(device)?;
        Ok(CubeKernels {
            set: KernelSet::default_for(tf32),
            tf32,
            matmul: chosen.matmul,
            tiles: chosen.tiles,
            ..CubeKernels::default()
        })
    }

    /// What these kernels do other than by default, as `matmul tuned, attention in tiles`:
    /// `None` where nothing (the kernel set aside).
    pub fn overrides(&self) -> Option<String> {
        let mut what = Vec::new();
        if self.matmul != Matmul::default() {
            what.push(format!("matmul {}", self.matmul));
        }
        if self.tiles {
            what.push("attention in tiles".to_owned());
        }
        if self.key_group() > 1 {
            what.push(format!("{}-key attention steps", self.key_group()));
        }
        (!what.is_empty()).then(|| what.join(", "))
    }

    /// The same device's kernels using `set` instead, with fresh counts.
    pub fn with_set(&self, set: KernelSet) -> Self {
        CubeKernels { set, ..self.fresh() }
    }

    /// The same choices with fresh counts.
    fn fresh(&self) -> Self {
        CubeKernels {
            set: self.set,
            matmul: self.matmul,
            key_group: self.key_group,
            tiles: self.tiles,
            tf32: self.tf32,
            ..CubeKernels::default()
        }
    }

    /// The same kernels with the epilogue's products computed by `matmul`, with fresh counts.
    /// A routine other than [`Matmul::Burn`] computes every linear layer the epilogue kernel
    /// takes, those with nothing to apply after the product included; a run where it cannot
    /// (a routine the device lacks) fails with [`Error::Unsupported`].
    pub fn with_matmul(&self, matmul: Matmul) -> Self {
        CubeKernels { matmul, ..self.fresh() }
    }

    /// The same kernels with the attention kernel taking `keys` keys per online-softmax step
    /// (clamped to 1 to 32), with fresh counts: the scores of a group are independent sums, and
    /// the running sums are rescaled once a group rather than once a key. 1, the default, is the
    /// kernel as measured on the H200 (docs/benchmarks.md); larger groups are for the benchmark
    /// to measure. Each key of a group holds a score in a register: with heads 64 wide, 8 keys
    /// spill 8 bytes a unit to local memory on an H200, 4 none (`cuda_check`).
    pub fn with_key_group(&self, keys: usize) -> Self {
        CubeKernels { key_group: keys.clamp(1, MAX_KEY_GROUP), ..self.fresh() }
    }

    /// The same kernels with half-precision attention computed in 16 x 16 tiles (`on`), with
    /// fresh counts: the score and value products on tensor cores where the device has them for
    /// the dtype, else as scalar tiles. The tiled kernel takes f16 and bf16 attention over every
    /// token, without a window, in heads a multiple of 16 wide that fit the device's shared
    /// memory; the row kernel takes the rest. Not yet measured on a GPU, so off by default.
    pub fn with_tiled_attention(&self, on: bool) -> Self {
        CubeKernels { tiles: on, ..self.fresh() }
    }

    /// Whether half-precision attention runs in tiles where the tiled kernel takes it.
    pub fn tiled_attention(&self) -> bool {
        self.tiles
    }

    /// Keys per online-softmax step of the attention kernel.
    pub fn key_group(&self) -> usize {
        self.key_group.max(1)
    }

    /// The routine of the epilogue's products.
    pub fn matmul(&self) -> Matmul {
        self.matmul
    }

    /// The kernels in use.
    pub fn set(&self) -> KernelSet {
        self.set
    }

    /// Whether Burn's matmul and attention on this device compute f32 products in TF32
    /// (tensor cores), so that only this crate's kernels compute them in f32.
    pub fn tf32(&self) -> bool {
        self.tf32
    }

    /// How many ops the crate's kernels have run (clones share the counts).
    pub fn launched(&self) -> Launched {
        Launched {
            attention: self.attention.load(Ordering::Relaxed),
            tiled: self.tiled.load(Ordering::Relaxed),
            linear: self.linear.load(Ordering::Relaxed),
            norm: self.norm.load(Ordering::Relaxed),
            epilogue: self.epilogue.load(Ordering::Relaxed),
            pool: self.pool.load(Ordering::Relaxed),
            norm_epilogue: self.norm_epilogue.load(Ordering::Relaxed),
            attention_bias: self.attention_bias.load(Ordering::Relaxed),
            embed_norm: self.embed_norm.load(Ordering::Relaxed),
            padded: self.padded.load(Ordering::Relaxed),
        }
    }
}

#[cfg(not(feature = "fusion"))]
impl CubeKernels {
    /// Whether the attention kernels take an attention op with heads `head_dim` wide over the
    /// run's batch (its rows of one float dtype aside).
    fn takes_attention(&self, head_dim: usize, cx: &RunCx<'_, burn_cubecl::CubeBackend>) -> bool {
        self.set.attention
            && head_dim <= attention::MAX_HEAD_DIM
            && attention::launchable(cx.sizes(), attention::BLOCK)
    }

    /// Where the joined projection whose lead layer writes `out` (not `own`: its product is
    /// wider than that layer's output) may leave its epilogue `then`, a bias alone, to the
    /// attention op that alone reads its three results: that op's fold, sure to be taken.
    fn bias_fold(
        &self,
        out: switchyard_core::Val,
        then: &Epilogue,
        own: bool,
        cx: &RunCx<'_, burn_cubecl::CubeBackend>,
    ) -> Option<BiasFold> {
        let bias = then.bias.as_ref()?;
        if own || !self.set.attention_bias || then.act != Act::Identity || then.residual.is_some() {
            return None;
        }
        let fold = bias_folds(cx).iter().find(|f| f.lead == out).copied()?;
        let whole = dims(bias) == [1, fold.width];
        // A run given one of the three, or dropping some of the attention's output (the op
        // then runs the generic way), adds the bias in the epilogue.
        let fed = fold.qkv.iter().any(|&v| cx.is_fed(v));
        let ours = !cx.drops(fold.attention) && self.takes_attention(fold.head_dim, cx);
        (whole && !fed && ours).then_some(fold)
    }

    /// The graph's [`EmbedFold`]s this run takes: none where the set leaves the fold out or the
    /// norm kernel cannot take the batch, nor one whose values the run is given or drops.
    fn embed_folds(&self, cx: &RunCx<'_, burn_cubecl::CubeBackend>) -> Arc<Vec<EmbedFold>> {
        cx.memo("cube: embeddings left to their norm", || {
            if !(self.set.embed_norm && self.set.norm && norm::launchable(cx.sizes().tokens)) {
                return Arc::default();
            }
            let taken = |f: &EmbedFold| {
                let mut all = f.leaves.iter().chain(&f.sums).chain([&f.norm_out]);
                !all.any(|&v| cx.is_fed(v) || cx.drops(v))
            };
            Arc::new(find_embed_folds(cx.graph).into_iter().filter(taken).collect())
        })
    }

    /// The LayerNorm of the embeddings that the lookups of `norm_in`'s [`EmbedFold`] left to it
    /// (their tables), in one launch.
    fn embeddings_norm(
        &self,
        norm_in: switchyard_core::Val,
        gamma: &CubeTensor,
        beta: Option<&CubeTensor>,
        eps: f32,
        cx: &RunCx<'_, burn_cubecl::CubeBackend>,
    ) -> Outcome<burn_cubecl::CubeBackend> {
        let folds = self.embed_folds(cx);
        let missing = || {
            let why = "the embeddings left to their LayerNorm were not all found";
            Outcome::Failed(Error::Device(why.into()))
        };
        let Some(fold) = folds.iter().find(|f| f.norm_in == norm_in) else { return missing() };
        let leaves: Vec<(Op, CubeTensor)> = {
            let left = left_embeddings(cx);
            let mut left = left.lock().expect("not poisoned");
            let mine = |(v, ..): &(switchyard_core::Val, Op, CubeTensor)| fold.leaves.contains(v);
            let (taken, kept) = left.drain(..).partition(mine);
            *left = kept;
            taken.into_iter().map(|(_, op, t)| (op, t)).collect()
        };
        if leaves.len() != fold.leaves.len() {
            return missing();
        }
        // Upload stores every weight in the backend's one float dtype, which the kernel needs.
        let tables: Vec<&CubeTensor> = leaves.iter().map(|(_, t)| t).chain([gamma]).collect();
        if !all_float(&tables) || beta.is_some_and(|b| b.dtype != gamma.dtype) {
            let why = "the embedding tables and their LayerNorm's weights differ in dtype";
            return Outcome::Failed(Error::Device(why.into()));
        }
        self.norm.fetch_add(1, Ordering::Relaxed);
        self.embed_norm.fetch_add(1, Ordering::Relaxed);
        let client = gamma.client.clone();
        let (mut tokens, mut positions, mut types) = (None, None, None);
        // Each table of the batch goes to the device once a run, however many folds read it.
        for (op, table) in leaves {
            let ints = |b: &[u32]| b.iter().map(|&i| i64::from(i)).collect();
            match op {
                Op::Embed { .. } => {
                    tokens =
                        Some((table, u32_table(cx, &client, TOKEN_IDS, 0, move |b| ints(b.ids))));
                }
                Op::TypeEmbed { .. } => {
                    let rows = u32_table(cx, &client, TOKEN_TYPES, 0, move |b| ints(b.types));
                    types = Some((table, rows));
                }
                Op::PosEmbed { offset, .. } => {
                    // Row numbers of a table, which the batch's limits keep within it.
                    let positions_of = move |b: &Batch<'_>| positions_in(b, offset);
                    let rows = u32_table(cx, &client, POSITIONS, offset, positions_of);
                    positions = Some((table, rows));
                }
                _ => {}
            }
        }
        let Some(tokens) = tokens else { return missing() };
        let e = norm::Embeddings { tokens, positions, types };
        Outcome::Done(norm::embeddings(e, gamma, beta, eps))
    }
}

#[cfg(feature = "fusion")]
impl Kernels<burn_cubecl::Cube> for CubeKernels {}

#[cfg(not(feature = "fusion"))]
impl Kernels<burn_cubecl::CubeBackend> for CubeKernels {
    /// Where Burn's ops would compute f32 products in TF32, refuses an op that one of the chosen
    /// kernels should run in f32 but could not run for every batch of `bucket`.
    fn check(&self, op: &Op, graph: &Graph, bucket: Bucket, dtype: DType) -> Result<()> {
        if !self.tf32 || dtype != DType::F32 {
            return Ok(());
        }
        let why = match *op {
            Op::Attention { head_dim, position_bias, .. } if self.set.attention => {
                if disentangled(position_bias) {
                    "disentangled attention (the kernel does not take it)".to_owned()
                } else if head_dim > attention::MAX_HEAD_DIM {
                    format!(
                        "heads {head_dim} wide (the f32 kernel takes up to {})",
                        attention::MAX_HEAD_DIM
                    )
                } else if !attention::launchable(bucket, attention::BLOCK) {
                    format!(
                        "a bucket of {} tokens in {} sequences in one launch",
                        bucket.tokens, bucket.seqs
                    )
                } else {
                    return Ok(());
                }
            }
            Op::Linear { weight, .. } if self.set.linear => {
                // A layer joined with others that share its input runs as their one product.
                let n = graph
                    .shared_input_linears()
                    .into_iter()
                    .find(|group| group.iter().any(|&i| graph.ops[i] == *op))
                    .map_or(graph.weights[weight.0 as usize].shape[0], |group| {
                        group.iter().map(|&i| graph.shape(graph.ops[i].out()).width).sum()
                    });
                if gemm::launchable(bucket.tokens, n) {
                    return Ok(());
                }
                format!("a [{}, {n}] output in one launch", bucket.tokens)
            }
            _ => return Ok(()),
        };
        Err(Error::Unsupported(format!(
            "{why}: this device's own ops would compute it in TF32, not f32; \
             compute in f16 or bf16, or choose kernels without this one"
        )))
    }

    /// Where the products of the epilogue kernel's layers take only whole tiles of rows
    /// ([`Matmul::rows_for`]), the batch's tokens rounded up to them, so that the products
    /// of the token rows need no copy of their inputs to padded rows: at most
    /// [`ROW_GRANULE`] - 1 tokens more through the encoder, where each layer's products
    /// would copy four inputs (a bge-base layer's over 17946 tokens in f16: about 380 MB read
    /// and written).
    /// In f32 with the fused GEMM, which takes the layers itself, the batch as it is.
    fn run_tokens(&self, tokens: usize, dtype: DType) -> usize {
        let gemm = self.set.linear && dtype == DType::F32;
        if self.set.epilogue && !gemm { self.matmul.rows_for(tokens) } else { tokens }
    }

    fn run_op(
        &self,
        op: &Op,
        ins: Inputs<burn_cubecl::CubeBackend>,
        w: &Bound<burn_cubecl::CubeBackend>,
        cx: &RunCx<'_, burn_cubecl::CubeBackend>,
    ) -> Outcome<burn_cubecl::CubeBackend> {
        match (op, ins, w) {
            // Causal attention and query heads sharing key-value heads take the row kernel,
            // not the tiled one.
            (
                &Op::Attention {
                    q: qv,
                    heads,
                    kv_heads,
                    head_dim,
                    scale,
                    window,
                    causal,
                    position_bias,
                    ..
                },
                [Some(q), Some(k), Some(v)],
                w,
            ) if self.takes_attention(head_dim, cx)
                && !disentangled(position_bias)
                && all_float(&[&q, &k, &v]) =>
            {
                self.attention.fetch_add(1, Ordering::Relaxed);
                // The bias of the projections before, where they left it to this op.
                let bias = {
                    let left = left_to_attention(cx);
                    let left = left.lock().expect("not poisoned");
                    left.iter().find(|(v, _)| *v == qv).map(|(_, b)| b.clone())
                };
                if bias.is_some() {
                    self.attention_bias.fetch_add(1, Ordering::Relaxed);
                }
                let bias = bias.as_ref();
                let per_seq = cx.graph.shape(qv).rows == switchyard_core::Rows::Seqs;
                let position = match switchyard_burn::generic::position_bias_of(position_bias, w) {
                    Some(BoundBias::Relative(b, table)) => {
                        Some(attention::PositionArgs::new(b, table, cx))
                    }
                    _ => None,
                };
                let shared = kv_heads != heads;
                if self.tiles
                    && !per_seq
                    && !shared
                    && !causal
                    && position.is_none()
                    && tiles::takes(&q, head_dim, cx)
                {
                    self.tiled.fetch_add(1, Ordering::Relaxed);
                    return Outcome::Done(tiles::run(
                        q, k, v, heads, head_dim, scale, window, bias, cx,
                    ));
                }
                let g = self.key_group();
                Outcome::Done(attention::run(
                    q,
                    k,
                    v,
                    (heads, kv_heads),
                    head_dim,
                    scale,
                    (window, causal),
                    per_seq,
                    g,
                    bias,
                    position.as_ref(),
                    cx,
                ))
            }
            (&Op::Linear { act, .. }, [Some(x), residual, None], Bound::Linear { wt, bias })
                if self.set.linear
                    && gemm::launchable(dims(&x)[0], dims(wt)[1])
                    && all_f32(&[&x, wt])
                    && bias.iter().chain(&residual).all(|t| all_f32(&[t])) =>
            {
                self.linear.fetch_add(1, Ordering::Relaxed);
                Outcome::Done(gemm::run(x, wt, bias.as_ref(), act, residual))
            }
            (
                &Op::Linear { act, out, .. },
                [Some(x), residual, None],
                Bound::Linear { wt, bias },
            ) if self.set.epilogue
                && (bias.is_some()
                    || residual.is_some()
                    || act != Act::Identity
                    || self.matmul != Matmul::Burn)
                && epilogue::launchable(dims(&x)[0], dims(wt)[1])
                && all_float(&[&x, wt])
                && bias.iter().chain(&residual).all(|t| t.dtype == x.dtype) =>
            {
                self.epilogue.fetch_add(1, Ordering::Relaxed);
                let then = Epilogue { bias: bias.clone(), act, residual };
                // A product wider than the layer's output is its share of a joined product,
                // which other layers read too.
                let own = dims(wt)[1] == cx.graph.shape(out).width;
                let left =
                    own && self.set.norm_epilogue && self.set.norm && norm_reads_alone(out, cx);
                let m = dims(&x)[0];
                if self.matmul.rows_for(m) > m {
                    self.padded.fetch_add(1, Ordering::Relaxed);
                }
                let y = match epilogue::product(x, wt, self.matmul) {
                    Ok(y) => y,
                    Err(e) => return Outcome::Failed(Error::Unsupported(e)),
                };
                if left {
                    left_to_norm(cx).lock().expect("not poisoned").push((out, then));
                    return Outcome::Done(y);
                }
                match (self.bias_fold(out, &then, own, cx), then.bias) {
                    (Some(fold), Some(bias)) => {
                        let bias = attention::QkvBias { bias, at: fold.at };
                        left_to_attention(cx)
                            .lock()
                            .expect("not poisoned")
                            .push((fold.qkv[0], bias));
                        Outcome::Done(y)
                    }
                    (_, bias) => Outcome::Done(Epilogue { bias, ..then }.apply(y)),
                }
            }
            (
                Op::Embed { out, .. } | Op::PosEmbed { out, .. } | Op::TypeEmbed { out, .. },
                [None, None, None],
                Bound::Table(table),
            ) if self.embed_folds(cx).iter().any(|f| f.leaves.contains(out)) => {
                // The norm gathers the rows; the value is a stand-in no other op reads.
                let left = left_embeddings(cx);
                left.lock().expect("not poisoned").push((*out, op.clone(), table.clone()));
                Outcome::Done(table.clone())
            }
            (&Op::Add { out, .. }, [Some(a), Some(_), None], _)
                if self.embed_folds(cx).iter().any(|f| f.sums.contains(&out)) =>
            {
                // A sum the norm makes as it reads the rows: a stand-in no other op reads.
                Outcome::Done(a)
            }
            (
                &Op::LayerNorm { x: xv, eps, .. },
                [Some(_), None, None],
                Bound::Norm { gamma, beta },
            ) if self.embed_folds(cx).iter().any(|f| f.norm_in == xv) => {
                self.embeddings_norm(xv, gamma, beta.as_ref(), eps, cx)
            }
            (
                &Op::LayerNorm { x: xv, eps, .. },
                [Some(x), None, None],
                Bound::Norm { gamma, beta },
            ) => {
                // An epilogue left to this norm is applied whichever path takes it.
                let before = {
                    let left = left_to_norm(cx);
                    let mut left = left.lock().expect("not poisoned");
                    let at = left.iter().position(|(v, _)| *v == xv);
                    at.map(|i| left.swap_remove(i).1)
                };
                if self.set.norm
                    && norm::launchable(dims(&x)[0])
                    && all_float(&[&x, gamma])
                    && beta.iter().all(|b| b.dtype == x.dtype)
                {
                    self.norm.fetch_add(1, Ordering::Relaxed);
                    if before.is_some() {
                        self.norm_epilogue.fetch_add(1, Ordering::Relaxed);
                    }
                    Outcome::Done(norm::run(x, gamma, beta.as_ref(), eps, before))
                } else {
                    let x = match before {
                        Some(epilogue) => epilogue.apply(x),
                        None => x,
                    };
                    Outcome::Declined([Some(x), None, None])
                }
            }
            (&Op::Pool { mode, .. }, [Some(x), None, None], _)
                if self.set.pool
                    && dims(&x)[0] == cx.sizes().tokens
                    && pool::launchable(cx, dims(&x)[1])
                    && all_float(&[&x]) =>
            {
                self.pool.fetch_add(1, Ordering::Relaxed);
                Outcome::Done(pool::run(x, mode, cx))
            }
            (&Op::L2Norm { eps, .. }, [Some(x), None, None], _)
                if self.set.pool && norm::launchable(dims(&x)[0]) && all_float(&[&x]) =>
            {
                self.pool.fetch_add(1, Ordering::Relaxed);
                Outcome::Done(norm::l2(x, eps))
            }
            (_, ins, _) => Outcome::Declined(ins),
        }
    }
}

#[cfg(not(feature = "fusion"))]
use burn_cubecl::tensor::CubeTensor;
#[cfg(not(feature = "fusion"))]
use epilogue::Epilogue;

/// Cubes per grid dimension that every runtime launches (wgpu's limit).
#[cfg(not(feature = "fusion"))]
const MAX_CUBES: usize = 65_535;

/// Whether an attention op's position bias is DeBERTa's disentangled terms, which the attention
/// kernels leave to Burn's ops.
#[cfg(not(feature = "fusion"))]
fn disentangled(bias: Option<PositionBias>) -> bool {
    matches!(bias, Some(PositionBias::Disentangled(_)))
}

#[cfg(not(feature = "fusion"))]
fn all_f32(ts: &[&CubeTensor]) -> bool {
    ts.iter().all(|t| t.dtype == burn_backend::DType::F32)
}

/// Whether `ts` are all of one float dtype: f32, f16 or bf16.
#[cfg(not(feature = "fusion"))]
fn all_float(ts: &[&CubeTensor]) -> bool {
    use burn_backend::DType::{BF16, F16, F32};
    let first = ts.first().map(|t| t.dtype);
    matches!(first, Some(F32 | F16 | BF16)) && ts.iter().all(|t| Some(t.dtype) == first)
}

/// `t` laid out as plain rows (copied only if it is not already).
#[cfg(not(feature = "fusion"))]
fn contiguous(t: CubeTensor) -> CubeTensor {
    burn_cubecl::kernel::into_contiguous(t)
}

/// `[rows, width]` of a 2-D tensor.
#[cfg(not(feature = "fusion"))]
fn dims(t: &CubeTensor) -> [usize; 2] {
    let s = t.meta.shape();
    [s[0], s[1]]
}

/// An uninitialised tensor of `shape` on `like`'s device, in `like`'s dtype.
#[cfg(not(feature = "fusion"))]
fn empty(like: &CubeTensor, shape: [usize; 2]) -> CubeTensor {
    burn_cubecl::ops::numeric::empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        burn_backend::Shape::from(shape.to_vec()),
        like.dtype,
    )
}

/// An uninitialised tensor shaped like `like`, in its dtype.
#[cfg(not(feature = "fusion"))]
fn empty_like(like: &CubeTensor) -> CubeTensor {
    empty(like, dims(like))
}

/// A buffer of u32s on the device and its count.
#[cfg(not(feature = "fusion"))]
pub(crate) type U32s = (cubecl::server::Handle, usize);

/// The [`RunCx::table`] key of the batch's token ids as [`U32s`], once a run reads them.
#[cfg(not(feature = "fusion"))]
const TOKEN_IDS: &str = "cube: token ids";

/// The [`RunCx::table`] key of the batch's token types as [`U32s`], once a run reads them.
#[cfg(not(feature = "fusion"))]
const TOKEN_TYPES: &str = "cube: token types";

/// The [`RunCx::table`] key of each token's position (plus an offset, the table's number) as
/// [`U32s`], once a run reads them.
#[cfg(not(feature = "fusion"))]
const POSITIONS: &str = "cube: positions from an offset";

/// `values` uploaded to a device buffer, and their count.
#[cfg(not(feature = "fusion"))]
pub(crate) fn u32s(client: &cubecl::client::Client, values: &[u32]) -> U32s {
    (client.create_from_slice(<u32 as cubecl::CubeElement>::as_bytes(values)), values.len())
}

/// A table of the run's batch as [`U32s`] ([`RunCx::table`]: made once a run for each `n` under
/// `key`, by `values`, which gives numbers within u32 for any batch).
#[cfg(not(feature = "fusion"))]
fn u32_table(
    cx: &RunCx<'_, burn_cubecl::CubeBackend>,
    client: &cubecl::client::Client,
    key: &'static str,
    n: usize,
    values: impl Fn(&Batch<'_>) -> Vec<i64> + Send + 'static,
) -> U32s {
    cx.table(key, n, values, |v| {
        let v: Vec<u32> = v.into_iter().map(|x| x as u32).collect();
        u32s(client, &v)
    })
}

/// The epilogues of linear layers left to the LayerNorm that reads each layer's output, by
/// that output, this run.
#[cfg(not(feature = "fusion"))]
type LeftToNorm = Arc<std::sync::Mutex<Vec<(switchyard_core::Val, Epilogue)>>>;

/// This run's [`LeftToNorm`].
#[cfg(not(feature = "fusion"))]
fn left_to_norm(cx: &RunCx<'_, burn_cubecl::CubeBackend>) -> LeftToNorm {
    cx.memo("cube: epilogues left to LayerNorm", LeftToNorm::default)
}

/// Whether a LayerNorm is the one reader of `v`, which is not an output, and the run drops
/// none of the norm's output (training runs such a norm the generic way): then the norm's arm
/// in `run_op` is sure to see `v` and apply an epilogue left to it.
#[cfg(not(feature = "fusion"))]
fn norm_reads_alone(v: switchyard_core::Val, cx: &RunCx<'_, burn_cubecl::CubeBackend>) -> bool {
    let graph = cx.graph;
    if graph.outputs.iter().any(|o| o.val == v) {
        return false;
    }
    let mut readers = graph.ops.iter().filter(|op| op.inputs().contains(&Some(v)));
    match (readers.next(), readers.next()) {
        (Some(&Op::LayerNorm { out, .. }), None) => !cx.drops(out),
        _ => false,
    }
}

/// Whether one op of `graph` alone reads `v`, which is not an output of the graph.
#[cfg(not(feature = "fusion"))]
fn read_by_one_op(graph: &Graph, v: switchyard_core::Val) -> bool {
    !graph.outputs.iter().any(|o| o.val == v)
        && graph.ops.iter().filter(|op| op.inputs().contains(&Some(v))).count() == 1
}

/// Biases of joined projections left to the attention op that reads their results, by the
/// op's query value, this run.
#[cfg(not(feature = "fusion"))]
type LeftToAttention = Arc<std::sync::Mutex<Vec<(switchyard_core::Val, attention::QkvBias)>>>;

/// This run's [`LeftToAttention`].
#[cfg(not(feature = "fusion"))]
fn left_to_attention(cx: &RunCx<'_, burn_cubecl::CubeBackend>) -> LeftToAttention {
    cx.memo("cube: biases left to attention", LeftToAttention::default)
}

/// An attention op whose query, key and value are one joined projection's three results, each
/// with a bias and nothing else after the product, read by that op alone: the attention kernel
/// can add their bias as it reads them (where the run neither gives it one of them nor drops
/// some of its output).
#[cfg(not(feature = "fusion"))]
#[derive(Clone, Copy, Debug)]
struct BiasFold {
    /// The output of the joined group's first layer, which runs the product.
    lead: switchyard_core::Val,
    /// The attention op's query, key and value.
    qkv: [switchyard_core::Val; 3],
    /// Where each one's columns start in the joined product (and its bias).
    at: [usize; 3],
    /// The joined product's width.
    width: usize,
    /// The attention op's heads' width.
    head_dim: usize,
    /// The attention op's output.
    attention: switchyard_core::Val,
}

/// The graph's [`BiasFold`]s, found once a run.
#[cfg(not(feature = "fusion"))]
fn bias_folds(cx: &RunCx<'_, burn_cubecl::CubeBackend>) -> Arc<Vec<BiasFold>> {
    cx.memo("cube: biases the attention kernel can add", || Arc::new(find_bias_folds(cx.graph)))
}

/// Each attention op of `graph` that a [`BiasFold`] describes. The group's layers are joined
/// side by side in graph order (`Graph::shared_input_linears`), so each one's columns start
/// where the widths before it end; a run checks the joined bias is that wide before it folds.
#[cfg(not(feature = "fusion"))]
fn find_bias_folds(graph: &Graph) -> Vec<BiasFold> {
    let groups = graph.shared_input_linears();
    let read_by_one_alone = |v| read_by_one_op(graph, v);
    let fold = |op: &Op| {
        let Op::Attention {
            q, k, v, heads, kv_heads, head_dim, out, position_bias, causal, ..
        } = *op
        else {
            return None;
        };
        // The kernel does not take disentangled attention, so it cannot add the biases; with a
        // causal mask or shared key-value heads the fold is not tried (no test covers it).
        if disentangled(position_bias) || causal || kv_heads != heads {
            return None;
        }
        let qkv = [q, k, v];
        let distinct = q != k && k != v && q != v;
        if !distinct || !qkv.into_iter().all(read_by_one_alone) {
            return None;
        }
        let outs = |g: &Vec<usize>| g.iter().map(|&i| graph.ops[i].out()).collect::<Vec<_>>();
        let group =
            groups.iter().find(|g| g.len() == 3 && qkv.iter().all(|v| outs(g).contains(v)))?;
        let mut starts = Vec::with_capacity(3);
        let mut width = 0;
        for &i in group {
            let Op::Linear { bias: Some(_), act: Act::Identity, out, .. } = graph.ops[i] else {
                return None;
            };
            starts.push((out, width));
            width += graph.shape(out).width;
        }
        let start = |v| starts.iter().find(|(o, _)| *o == v).map(|&(_, at)| at);
        let at = [start(q)?, start(k)?, start(v)?];
        let lead = graph.ops[group[0]].out();
        Some(BiasFold { lead, qkv, at, width, head_dim, attention: out })
    };
    graph.ops.iter().filter_map(fold).collect()
}

/// The embedding tables lookups left to the LayerNorm after them, by the lookup's value, with
/// the lookup op, this run.
#[cfg(not(feature = "fusion"))]
type LeftEmbeddings = Arc<std::sync::Mutex<Vec<(switchyard_core::Val, Op, CubeTensor)>>>;

/// This run's [`LeftEmbeddings`].
#[cfg(not(feature = "fusion"))]
fn left_embeddings(cx: &RunCx<'_, burn_cubecl::CubeBackend>) -> LeftEmbeddings {
    cx.memo("cube: embeddings left to their norm: tables", LeftEmbeddings::default)
}

/// An encoder's embeddings and the LayerNorm after them, which the norm kernel computes in one
/// launch: the norm's input is the sum, through `Add` ops, of a token lookup and at most one
/// position and one type lookup, and each of those values is read by the op after it alone
/// (not a graph output).
#[cfg(not(feature = "fusion"))]
#[derive(Clone, Debug)]
struct EmbedFold {
    /// The LayerNorm's input.
    norm_in: switchyard_core::Val,
    /// The LayerNorm's output.
    norm_out: switchyard_core::Val,
    /// The lookups.
    leaves: Vec<switchyard_core::Val>,
    /// The sums between them and the norm.
    sums: Vec<switchyard_core::Val>,
}

/// Each LayerNorm of `graph` over embeddings that an [`EmbedFold`] describes.
#[cfg(not(feature = "fusion"))]
fn find_embed_folds(graph: &Graph) -> Vec<EmbedFold> {
    use switchyard_core::Val;
    let writer = |v: Val| graph.ops.iter().find(|op| op.out() == v);
    let alone = |v| read_by_one_op(graph, v);
    let fold = |op: &Op| {
        let Op::LayerNorm { x, out, .. } = *op else { return None };
        let (mut leaves, mut sums, mut kinds) = (Vec::new(), Vec::new(), [0usize; 3]);
        let mut next = vec![x];
        while let Some(v) = next.pop() {
            if !alone(v) {
                return None;
            }
            match writer(v)? {
                &Op::Add { a, b, .. } => {
                    sums.push(v);
                    next.extend([a, b]);
                }
                // The fused kernel gathers rows as they are: a scaled embedding is not folded.
                lookup @ (Op::Embed { scale: 1.0, .. }
                | Op::PosEmbed { .. }
                | Op::TypeEmbed { .. }) => {
                    let kind = match lookup {
                        Op::Embed { .. } => 0,
                        Op::PosEmbed { .. } => 1,
                        _ => 2,
                    };
                    kinds[kind] += 1;
                    leaves.push(v);
                }
                _ => return None,
            }
        }
        (kinds[0] == 1 && kinds[1] <= 1 && kinds[2] <= 1).then_some(EmbedFold {
            norm_in: x,
            norm_out: out,
            leaves,
            sums,
        })
    };
    graph.ops.iter().filter_map(fold).collect()
}

/// The run's sequence offsets (`cu`) on the device, and their count, with the last entry twice:
/// an empty sequence after the batch's, for the attention kernels' spare blocks. Uploaded by the
/// run's first kernel that reads them, shared by the rest.
#[cfg(not(feature = "fusion"))]
fn offsets(cx: &RunCx<'_, burn_cubecl::CubeBackend>, client: &cubecl::client::Client) -> U32s {
    u32_table(cx, client, "cube: sequence offsets", 0, |b| {
        b.cu.iter().chain(b.cu.last()).map(|&c| i64::from(c)).collect()
    })
}

/// A buffer of [`u32s`] as a kernel argument.
#[cfg(not(feature = "fusion"))]
fn u32s_arg((handle, len): &U32s) -> cubecl::prelude::BufferArg {
    // SAFETY: `u32s` made the handle a live device buffer of `len` u32s.
    unsafe { cubecl::prelude::BufferArg::from_raw_parts(handle.clone(), *len) }
}

#[cfg(all(test, not(feature = "fusion")))]
mod tests {
    use switchyard_core::{GraphBuilder, Shape};

    use super::*;

    /// One attention op with heads `head_dim` wide, then a linear layer to `n`.
    fn graph(head_dim: usize, n: usize) -> Graph {
        let mut g = GraphBuilder::new();
        let table = g.weight("x", &[10, head_dim]);
        let x = g.op(Shape::tokens(head_dim), |out| Op::Embed { table, scale: 1.0, out });
        let scale = 1.0;
        let (heads, window) = (1, None);
        let a = g.op(Shape::tokens(head_dim), |out| Op::Attention {
            q: x,
            k: x,
            v: x,
            heads,
            kv_heads: heads,
            head_dim,
            scale,
            window,
            causal: false,
            position_bias: None,
            out,
        });
        let weight = g.weight("w", &[n, head_dim]);
        let (bias, act, residual) = (None, Act::Identity, None);
        let y = g.op(Shape::tokens(n), |out| Op::Linear { x: a, weight, bias, act, residual, out });
        g.output("y", y);
        g.finish().expect("a valid graph")
    }

    /// The first refusal of `graph`'s ops by `k` in `dtype`, if any.
    fn refusal(k: &CubeKernels, g: &Graph, bucket: Bucket, dtype: DType) -> Option<String> {
        let backend = |op| Kernels::<burn_cubecl::CubeBackend>::check(k, op, g, bucket, dtype);
        g.ops.iter().find_map(|op| backend(op).err()).map(|e| e.to_string())
    }

    #[test]
    fn with_tf32_in_burns_ops_what_the_kernels_cannot_run_in_f32_is_refused() {
        let k = CubeKernels { set: KernelSet::ALL, tf32: true, ..CubeKernels::default() };
        let small = Bucket::new(64, 4, 64);
        assert_eq!(refusal(&k, &graph(64, 8), small, DType::F32), None);
        let wide = refusal(&k, &graph(264, 8), small, DType::F32).expect("refused");
        assert!(wide.contains("heads 264 wide") && wide.contains("TF32"), "{wide}");
        let huge = Bucket::new(70_000 * 32, 4, 64);
        let e = refusal(&k, &graph(64, 8), huge, DType::F32).expect("refused");
        assert!(e.contains("2240000 tokens"), "{e}");
        let out = refusal(&k, &graph(64, 70_000 * 64), small, DType::F32).expect("refused");
        assert!(out.contains("[64, 4480000] output"), "{out}");
        // Three layers that fit one launch each, but not joined into one product.
        let joined = refusal(&k, &projections(1_500_000), small, DType::F32).expect("refused");
        assert!(joined.contains("[64, 4500000] output"), "{joined}");
        assert_eq!(refusal(&k, &projections(1_000_000), small, DType::F32), None);
        // Disentangled attention goes to Burn's ops, whose products would be TF32 in f32.
        let e = refusal(&k, &disentangled_graph(), small, DType::F32).expect("refused");
        assert!(e.contains("disentangled attention") && e.contains("TF32"), "{e}");
        assert_eq!(refusal(&k, &disentangled_graph(), small, DType::F16), None);
        // The kernel takes causal masks and shared key-value heads.
        for (kv_heads, causal) in [(2, false), (2, true), (1, false), (1, true)] {
            let g = masked_graph(kv_heads, causal);
            assert_eq!(refusal(&k, &g, small, DType::F32), None, "{kv_heads} {causal}");
        }
    }

    /// One attention op of two query heads 8 wide on `kv_heads` key-value heads, causal or not.
    fn masked_graph(kv_heads: usize, causal: bool) -> Graph {
        let mut g = GraphBuilder::new();
        let table = g.weight("x", &[10, 16]);
        let x = g.op(Shape::tokens(16), |out| Op::Embed { table, scale: 1.0, out });
        let kv = g.op(Shape::tokens(8 * kv_heads), |out| Op::Slice { x, start: 0, out });
        let a = g.op(Shape::tokens(16), |out| Op::Attention {
            q: x,
            k: kv,
            v: kv,
            heads: 2,
            kv_heads,
            head_dim: 8,
            scale: 1.0,
            window: None,
            causal,
            position_bias: None,
            out,
        });
        g.output("a", a);
        g.finish().expect("a valid graph")
    }

    /// One attention op with both of DeBERTa's disentangled terms, heads 8 wide.
    fn disentangled_graph() -> Graph {
        let mut g = GraphBuilder::new();
        let table = g.weight("x", &[10, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table, scale: 1.0, out });
        let (keys, queries) = (Some(g.weight("keys", &[8, 8])), Some(g.weight("queries", &[8, 8])));
        let d =
            switchyard_core::Disentangled { keys, queries, span: 4, buckets: 0, max_distance: 4 };
        let a = g.op(Shape::tokens(8), |out| Op::Attention {
            q: x,
            k: x,
            v: x,
            heads: 1,
            kv_heads: 1,
            head_dim: 8,
            scale: 1.0,
            window: None,
            causal: false,
            position_bias: Some(PositionBias::Disentangled(d)),
            out,
        });
        g.output("a", a);
        g.finish().expect("a valid graph")
    }

    /// Three linear layers to `n` reading one embedding: one product when joined.
    fn projections(n: usize) -> Graph {
        let mut g = GraphBuilder::new();
        let table = g.weight("x", &[10, 8]);
        let x = g.op(Shape::tokens(8), |out| Op::Embed { table, scale: 1.0, out });
        for name in ["q", "k", "v"] {
            let weight = g.weight(name, &[n, 8]);
            let (bias, act, residual) = (None, Act::Identity, None);
            let y =
                g.op(Shape::tokens(n), |out| Op::Linear { x, weight, bias, act, residual, out });
            g.output(name, y);
        }
        g.finish().expect("a valid graph")
    }

    #[test]
    fn without_tf32_or_in_half_precision_or_with_burns_ops_chosen_nothing_is_refused() {
        let wide = graph(264, 8);
        let small = Bucket::new(64, 4, 64);
        let exact = CubeKernels::new(KernelSet::ALL);
        assert_eq!(refusal(&exact, &wide, small, DType::F32), None);
        let k = CubeKernels { set: KernelSet::ALL, tf32: true, ..CubeKernels::default() };
        assert_eq!(refusal(&k, &wide, small, DType::F16), None);
        assert_eq!(refusal(&k.with_set(KernelSet::NONE), &wide, small, DType::F32), None);
        assert!(k.with_set(KernelSet::NONE).tf32(), "the device stays what it is");
    }
}
