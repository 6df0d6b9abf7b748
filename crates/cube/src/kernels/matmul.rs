//! The product `x . wt` of a linear layer where Burn's matmul would compute it (half precision,
//! and f32 outside our fused GEMM): Burn's own choice, one of cubek's routines named at run
//! time, or the fastest of them as measured on the device for the shape.
//!
//! Built without `autotune` (the default), Burn's matmul always runs cubek's first routine that
//! the device has: the single-stage tensor-core routine, else the one without tensor cores. On an
//! H200 that left half precision only 1.25x to 1.4x faster than TF32 (docs/benchmarks.md), where
//! PyTorch's f16 is 6x its f32. Naming the routine lets the benchmark measure each one on a
//! device (`switchyard-bench 15 --matmuls`); [`Matmul::Tuned`] measures them where it runs, on
//! any device, once a shape.

use std::fmt;
use std::str::FromStr;

use cubek::matmul::multi_level::Strategy;
use cubek::matmul::multi_level::components::tile::TileMatmulKind;
use cubek::matmul::multi_level::routines::batch::double_buffering::DoubleBufferingArgs;
use cubek::matmul::multi_level::routines::batch::ordered_double_buffering::OrderedSelectionArgs;
use cubek::matmul::multi_level::routines::batch::simple::SimpleArgs;
use cubek::matmul::routine::BlueprintStrategy;

#[cfg(not(feature = "fusion"))]
use burn_cubecl::tensor::CubeTensor;
#[cfg(not(feature = "fusion"))]
use cubecl::prelude::*;

/// Which routine computes a linear layer's product under the crate's epilogue kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Matmul {
    /// Burn's matmul: cubek's first routine the device has, or with the `autotune` feature, the
    /// one Burn's autotuning measures fastest for the shape.
    #[default]
    Burn,
    /// A named routine of cubek's.
    Routine(Routine),
    /// The fastest of Burn's choice and cubek's routines that run on the device (all but
    /// `tiled-cpu-gemm`), measured there
    /// with CubeCL's tuner the first time a shape comes (its rows rounded up to a power of two,
    /// its width, depth and dtype), then kept for the process ([`tuned_choices`]).
    Tuned,
    /// NVIDIA's cuBLAS, on CUDA devices only: the vendor's product beside cubek's, with the
    /// device waited on around each product (cuBLAS cannot join CubeCL's stream).
    Cublas,
    /// cuBLAS as [`Matmul::Cublas`], ordered against CubeCL's kernels on the device (a flag
    /// each way between the two streams) instead of by the host waiting.
    CublasQueued,
}

/// cubek's matmul routines: how the operands are staged through shared memory (one stage,
/// double-buffered, with producer warps, or through Hopper's TMA unit) and which product
/// instruction the tiles use (`Cmma`: cooperative matrix fragments; `Mma`: explicit register
/// fragments; `Unit`: each unit a tile of scalars, no tensor cores). The `Tiled` ones are
/// cubek's routines on its tile DSL: the `cmma` ones size their stages to fill the device's
/// multiprocessors and take only shapes their stages divide, so their products run on rows
/// padded to [`ROW_GRANULE`]; `TiledCpuGemm` masks ragged edges, and pads too, so that a
/// device without tensor cores runs the padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Routine {
    TiledCmma,
    TiledCmmaAsync,
    TiledCmmaTma,
    SimpleCmma,
    SimpleMma,
    SimpleMultiRowsCmma,
    SimpleMultiRowsMma,
    OrderedCmma,
    OrderedMma,
    DoubleCyclicCmma,
    DoubleCyclicMma,
    DoubleSpecializedCmma,
    DoubleSpecializedMma,
    SpecializedCyclicCmma,
    SpecializedCyclicMma,
    SimpleTmaCmma,
    SimpleTmaMma,
    SpecializedTmaCmma,
    SpecializedTmaMma,
    SimpleUnit,
    DoubleUnit,
    TiledCpuGemm,
}

/// The rows a padding choice's products run on are a multiple of this ([`Matmul::rows_for`]):
/// the tile-DSL `cmma` routines take only shapes their stages divide, and a ragged batch has a
/// new row count nearly every time.
pub const ROW_GRANULE: usize = 128;

/// The tuned choice pads only products of more rows than this, where padding adds at most an
/// eighth: on fewer, the padded rows would cost more than any routine gains (on llvmpipe, 59
/// rows padded to 128 made a layer's products 2.3x slower). Rows rounded up to a power of two
/// name a tuned shape, so every product of one shape is padded, or none is.
const TUNED_PADS_PAST: usize = 8 * ROW_GRANULE;

impl Routine {
    /// Every routine, tensor-core ones first, the tile-DSL ones (newest) before the rest.
    pub const ALL: [Routine; 22] = [
        Routine::TiledCmma,
        Routine::TiledCmmaAsync,
        Routine::TiledCmmaTma,
        Routine::SimpleCmma,
        Routine::SimpleMma,
        Routine::SimpleMultiRowsCmma,
        Routine::SimpleMultiRowsMma,
        Routine::OrderedCmma,
        Routine::OrderedMma,
        Routine::DoubleCyclicCmma,
        Routine::DoubleCyclicMma,
        Routine::DoubleSpecializedCmma,
        Routine::DoubleSpecializedMma,
        Routine::SpecializedCyclicCmma,
        Routine::SpecializedCyclicMma,
        Routine::SimpleTmaCmma,
        Routine::SimpleTmaMma,
        Routine::SpecializedTmaCmma,
        Routine::SpecializedTmaMma,
        Routine::SimpleUnit,
        Routine::DoubleUnit,
        Routine::TiledCpuGemm,
    ];

    /// The routine's name, as [`Matmul::from_str`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            Routine::SimpleCmma => "simple-cmma",
            Routine::SimpleMma => "simple-mma",
            Routine::SimpleMultiRowsCmma => "simple-multirows-cmma",
            Routine::SimpleMultiRowsMma => "simple-multirows-mma",
            Routine::OrderedCmma => "ordered-cmma",
            Routine::OrderedMma => "ordered-mma",
            Routine::DoubleCyclicCmma => "double-cyclic-cmma",
            Routine::DoubleCyclicMma => "double-cyclic-mma",
            Routine::DoubleSpecializedCmma => "double-specialized-cmma",
            Routine::DoubleSpecializedMma => "double-specialized-mma",
            Routine::SpecializedCyclicCmma => "specialized-cyclic-cmma",
            Routine::SpecializedCyclicMma => "specialized-cyclic-mma",
            Routine::SimpleTmaCmma => "simple-tma-cmma",
            Routine::SimpleTmaMma => "simple-tma-mma",
            Routine::SpecializedTmaCmma => "specialized-tma-cmma",
            Routine::SpecializedTmaMma => "specialized-tma-mma",
            Routine::SimpleUnit => "simple-unit",
            Routine::DoubleUnit => "double-unit",
            Routine::TiledCmma => "tiled-cmma",
            Routine::TiledCmmaAsync => "tiled-cmma-async",
            Routine::TiledCmmaTma => "tiled-cmma-tma",
            Routine::TiledCpuGemm => "tiled-cpu-gemm",
        }
    }

    /// Whether the routine's products run on tensor cores (cooperative matrix instructions).
    pub fn tensor_cores(self) -> bool {
        !matches!(self, Routine::SimpleUnit | Routine::DoubleUnit | Routine::TiledCpuGemm)
    }

    /// Whether the routine is one of cubek's on its tile DSL, which runs on padded rows.
    pub fn tiled(self) -> bool {
        matches!(
            self,
            Routine::TiledCmma
                | Routine::TiledCmmaAsync
                | Routine::TiledCmmaTma
                | Routine::TiledCpuGemm
        )
    }

    /// cubek's strategy for the routine, its tile sizes left for cubek to choose per problem.
    #[cfg_attr(feature = "fusion", allow(dead_code))]
    fn strategy(self) -> cubek::matmul::strategy::Strategy {
        use BlueprintStrategy::Inferred;
        use Routine as R;
        use Strategy as Multi;
        use TileMatmulKind::{Cmma, Mma};
        use cubek::matmul::tiled::{Strategy as Tiled, cmma::CmmaStrategy};
        let kind = if self.name().ends_with("-mma") { Mma } else { Cmma };
        let simple = |multi_rows| Inferred(SimpleArgs { tile_matmul: kind, multi_rows });
        let double = |specialized| Inferred(DoubleBufferingArgs { tile_matmul: kind, specialized });
        let tma = Inferred(SimpleArgs { tile_matmul: kind, multi_rows: false });
        // The ordered routine's selection as Burn's autotuning tries it first.
        let ordered = Inferred(OrderedSelectionArgs {
            tile_matmul: kind,
            partition_k: Some(2),
            row_count: Some(4),
            rows_per_plane: Some(2),
        });
        let cmma = |s: CmmaStrategy| Tiled::Cmma(Inferred(s)).into();
        match self {
            R::SimpleCmma | R::SimpleMultiRowsCmma => {
                Multi::SimpleCyclicCmma(simple(self == R::SimpleMultiRowsCmma)).into()
            }
            R::SimpleMma | R::SimpleMultiRowsMma => {
                Multi::SimpleCyclicMma(simple(self == R::SimpleMultiRowsMma)).into()
            }
            R::OrderedCmma => Multi::OrderedDoubleCmma(ordered).into(),
            R::OrderedMma => Multi::OrderedDoubleMma(ordered).into(),
            R::DoubleCyclicCmma => Multi::DoubleCyclicCmma(double(false)).into(),
            R::DoubleCyclicMma => Multi::DoubleCyclicMma(double(false)).into(),
            R::DoubleSpecializedCmma => Multi::DoubleCyclicCmma(double(true)).into(),
            R::DoubleSpecializedMma => Multi::DoubleCyclicMma(double(true)).into(),
            R::SpecializedCyclicCmma => {
                Multi::SpecializedCyclicCmma(Inferred(Default::default())).into()
            }
            R::SpecializedCyclicMma => {
                Multi::SpecializedCyclicMma(Inferred(Default::default())).into()
            }
            R::SimpleTmaCmma => Multi::SimpleTmaCmma(tma).into(),
            R::SimpleTmaMma => Multi::SimpleTmaMma(tma).into(),
            R::SpecializedTmaCmma => Multi::SpecializedTmaCmma(Inferred(Default::default())).into(),
            R::SpecializedTmaMma => Multi::SpecializedTmaMma(Inferred(Default::default())).into(),
            R::SimpleUnit => Multi::SimpleUnit(Inferred(Default::default())).into(),
            R::DoubleUnit => Multi::DoubleUnit(Inferred(Default::default())).into(),
            R::TiledCmma => cmma(CmmaStrategy::default()),
            R::TiledCmmaAsync => cmma(CmmaStrategy::async_copy()),
            R::TiledCmmaTma => cmma(CmmaStrategy::tma()),
            R::TiledCpuGemm => Tiled::CpuGemm(Inferred(Default::default())).into(),
        }
    }
}

impl Matmul {
    /// Every choice: Burn's, each routine, the tuned one, then cuBLAS's two.
    pub fn all() -> impl Iterator<Item = Matmul> {
        std::iter::once(Matmul::Burn).chain(Routine::ALL.into_iter().map(Matmul::Routine)).chain([
            Matmul::Tuned,
            Matmul::Cublas,
            Matmul::CublasQueued,
        ])
    }

    /// The rows this choice multiplies for a product of `m` rows: `m` rounded up to a multiple
    /// of [`ROW_GRANULE`] for the tile-DSL routines, and for the tuned choice (which times the
    /// `cmma` ones among the rest) past a thousand rows; `m` itself for the others.
    pub fn rows_for(self, m: usize) -> usize {
        let pads = match self {
            Matmul::Routine(r) => r.tiled(),
            Matmul::Tuned => m > TUNED_PADS_PAST,
            Matmul::Burn | Matmul::Cublas | Matmul::CublasQueued => false,
        };
        if pads { m.next_multiple_of(ROW_GRANULE) } else { m }
    }

    /// Why this choice cannot compute products on `device`, if it cannot be known before a
    /// product: cuBLAS off a CUDA device or without its library. Whether one of cubek's
    /// routines runs depends on the dtype and shape too, so their errors come with a product.
    pub(crate) fn unavailable_on(self, device: &cubecl::Device) -> Option<String> {
        match self {
            Matmul::Cublas | Matmul::CublasQueued => super::cublas::unavailable(device),
            _ => None,
        }
    }
}

impl fmt::Display for Matmul {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Matmul::Burn => f.write_str("burn"),
            Matmul::Routine(r) => f.write_str(r.name()),
            Matmul::Tuned => f.write_str("tuned"),
            Matmul::Cublas => f.write_str("cublas"),
            Matmul::CublasQueued => f.write_str("cublas-queued"),
        }
    }
}

impl FromStr for Matmul {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Matmul::all().find(|m| m.to_string() == s).ok_or_else(|| {
            let names: Vec<String> = Matmul::all().map(|m| m.to_string()).collect();
            format!("no matmul routine `{s}`: expected one of {}", names.join(", "))
        })
    }
}

/// `x . wt` for `x: [m, k]` and `wt: [k, n]` of one float dtype, by `how`: an error where the
/// routine cannot run on this device, in this dtype or at these sizes. A choice that pads rows
/// ([`Matmul::rows_for`]) multiplies `x` with zero rows below it and returns the first `m` rows
/// of its product.
#[cfg(not(feature = "fusion"))]
pub(crate) fn product(x: CubeTensor, wt: &CubeTensor, how: Matmul) -> Result<CubeTensor, String> {
    use burn_backend::ops::FloatTensorOps;
    if how == Matmul::Burn {
        return Ok(burn_cubecl::CubeBackend::float_matmul(x, wt.clone()));
    }
    let x = super::contiguous(x);
    let wt = super::contiguous(wt.clone());
    let [m, _] = super::dims(&x);
    let [_, n] = super::dims(&wt);
    let rows = how.rows_for(m);
    let x = if rows > m { pad_rows(x, rows)? } else { x };
    let out = super::empty(&x, [rows, n]);
    match how {
        Matmul::Routine(routine) => launch(how, &(x, wt, out.clone()))
            .map_err(|e| format!("cubek's {} matmul: {e}", routine.name()))?,
        Matmul::Cublas => super::cublas::product(&x, &wt, &out, super::cublas::Order::Host)?,
        Matmul::CublasQueued => {
            super::cublas::product(&x, &wt, &out, super::cublas::Order::Device)?
        }
        _ => tune::run((x, wt, out.clone()))?,
    }
    Ok(if rows > m { burn_cubecl::kernel::slice(out, &[0..m, 0..n]) } else { out })
}

/// Units per cube of [`pad_kernel`], whose grid is the epilogue's.
#[cfg(not(feature = "fusion"))]
const PAD_UNITS: usize = super::epilogue::UNITS;

/// `dst` is `src`'s `len` values, then zeros to its `total`.
#[cfg(not(feature = "fusion"))]
#[cfg_attr(not(all(test, feature = "wgpu")), cube(launch))]
#[cfg_attr(all(test, feature = "wgpu"), cube(launch, create_dummy_kernel))]
fn pad_kernel<F: Float>(
    src: &[F],
    dst: &mut [F],
    len: u32,
    total: u32,
    #[define(F)] _dtype: ElemType,
) {
    let cube = (CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X) as usize;
    let i = cube * PAD_UNITS + UNIT_POS as usize;
    if i < len as usize {
        dst[i] = src[i];
    } else if i < total as usize {
        dst[i] = F::cast_from(0.0f32);
    }
}

/// `x` (plain rows, `[m, k]`) with zero rows below it to `rows` in all, in a new tensor.
#[cfg(not(feature = "fusion"))]
fn pad_rows(x: CubeTensor, rows: usize) -> Result<CubeTensor, String> {
    let k = super::dims(&x)[1];
    let out = super::empty(&x, [rows, k]);
    pad_into(x, &out)?;
    Ok(out)
}

/// Writes `x` (plain rows, `[m, k]`) into the first rows of `out` (`[rows, k]`, `rows >= m`),
/// and zeros into the rest.
#[cfg(not(feature = "fusion"))]
fn pad_into(x: CubeTensor, out: &CubeTensor) -> Result<(), String> {
    let [m, k] = super::dims(&x);
    let rows = super::dims(out)[0];
    let (len, total) = (m * k, rows * k);
    let (gx, gy) = super::epilogue::grid(total)
        .ok_or_else(|| format!("padding [{m}, {k}] to {rows} rows: more than one launch holds"))?;
    let dtype = burn_backend::cubecl::dtype_to_storage_type(x.dtype);
    pad_kernel::launch(
        &x.client.clone(),
        CubeCount::Static(gx, gy, 1),
        CubeDim::new_1d(PAD_UNITS as u32),
        x.into_buffer_arg(),
        out.clone().into_buffer_arg(),
        len as u32,
        total as u32,
        dtype,
    );
    Ok(())
}

/// A product's operands: `x: [m, k]`, `wt: [k, n]` and the `out: [m, n]` it is written to,
/// each plain rows.
#[cfg(not(feature = "fusion"))]
type Operands = (CubeTensor, CubeTensor, CubeTensor);

/// Writes `x . wt` into `out` by `how`, Burn's choice or a named routine (not the tuned choice,
/// which is one of these): cubek's reason where it cannot.
#[cfg(not(feature = "fusion"))]
fn launch(how: Matmul, (x, wt, out): &Operands) -> Result<(), String> {
    use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
    use cubek::std::InputBinding;
    let strategy: cubek::matmul::strategy::Strategy = match how {
        Matmul::Routine(routine) => routine.strategy(),
        // What Burn's matmul launches for plain rows when built without `autotune`.
        _ => Default::default(),
    };
    let elem = burn_backend::cubecl::dtype_to_storage_type(x.dtype);
    let mut dtypes =
        MatmulElems::from_globals(&MatmulGlobalElems { lhs: elem, rhs: elem, out: elem });
    cubek::matmul::launch::launch_ref(
        &strategy,
        &x.client,
        InputBinding::new(x.clone().binding(), elem),
        InputBinding::new(wt.clone().binding(), elem),
        out.clone().binding(),
        &mut dtypes,
    )
    .map_err(|e| format!("{e:?}").trim_end().to_string())
}

/// What [`Matmul::Tuned`] chose for one shape on one device, and what the choosing cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunedChoice {
    /// The device, as CubeCL names it for tuning.
    pub device: String,
    /// The shape: rows rounded up to a power of two, depth, width and dtype.
    pub shape: String,
    /// The routine measured fastest.
    pub matmul: Matmul,
    /// The time the tuning took: every candidate compiled, launched and timed, and the
    /// fastest's product checked against Burn's.
    pub took: std::time::Duration,
}

/// Every choice [`Matmul::Tuned`] has made in this process, in the order made.
pub fn tuned_choices() -> Vec<TunedChoice> {
    #[cfg(not(feature = "fusion"))]
    return tune::choices();
    #[cfg(feature = "fusion")]
    Vec::new()
}

/// [`Matmul::Tuned`]: CubeCL's tuner over Burn's choice and every routine, once per device and
/// shape; later products of the shape run the choice directly. A choice other than Burn's is
/// kept only if its product on the tuning operands agrees with Burn's: the tuner measures speed,
/// not results, and a routine that writes wrong values fast would otherwise win.
#[cfg(not(feature = "fusion"))]
mod tune {
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Instant;

    use burn_cubecl::CubeTuneId;
    use cubecl::tune::{LocalTuner, Tunable, TunableSet, local_tuner};

    use super::{Matmul, Operands, Routine, TunedChoice, launch};

    /// The candidates, identified by their choice; Burn's first, as the tuner's fallback.
    pub(super) type Set = TunableSet<String, Operands, (), Matmul>;

    static TUNER: LocalTuner<String, CubeTuneId> = local_tuner!("switchyard-product");

    /// The choices made so far, by device and shape.
    static CHOICES: Mutex<Vec<TunedChoice>> = Mutex::new(Vec::new());

    /// The shape a choice is kept for: the rows rounded up to a power of two (a ragged batch
    /// has a new row count nearly every time), the depth, the width and the dtype.
    pub(super) fn shape((x, wt, _): &Operands) -> String {
        let [m, k] = super::super::dims(x);
        let n = super::super::dims(wt)[1];
        format!("[{}, {k}] x [{k}, {n}] {:?}", m.next_power_of_two(), x.dtype)
    }

    fn candidates() -> Set {
        let one = |how: Matmul| {
            Tunable::identified(how, move |ops: Operands| {
                launch(how, &ops).map_err(|e| format!("{how}: {e}"))
            })
        };
        let set = TunableSet::new(shape, |_: &String, ops: &Operands| ops.clone());
        let set = set.with(one(Matmul::Burn));
        // Not the tile DSL's routine without tensor cores: tuned for CPUs, it was 17x to 150x
        // slower than Burn's choice on llvmpipe, and timing it would slow every tuning.
        let routines = Routine::ALL.into_iter().filter(|&r| r != Routine::TiledCpuGemm);
        routines.fold(set, |set, r| set.with(one(Matmul::Routine(r))))
    }

    /// The largest difference from Burn's product a routine's may show, as a share of the
    /// largest magnitude in Burn's: rounding apart (TF32 or half-precision products, another
    /// order of sums: about 1e-3 of it), a product with tiles missing or misplaced is off by
    /// the order of the values themselves.
    pub(super) const AGREE: f32 = 2e-2;

    /// Whether `got` is `want` within [`AGREE`] of `want`'s largest magnitude.
    pub(super) fn agree(got: &[f32], want: &[f32]) -> bool {
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() <= AGREE * scale)
    }

    /// `fastest` where its product of `ops` by `run` agrees with Burn's (see [`agree`]), else
    /// Burn's choice, with a warning.
    pub(super) fn checked(
        fastest: Matmul,
        ops: &Operands,
        run: impl Fn(Matmul, &Operands) -> Result<(), String>,
    ) -> Matmul {
        if fastest == Matmul::Burn {
            return fastest;
        }
        let product = |how: Matmul| -> Result<Vec<f32>, String> {
            let (x, wt, out) = ops;
            let out = super::super::empty_like(out);
            run(how, &(x.clone(), wt.clone(), out.clone()))?;
            switchyard_burn::read_f32::<burn_cubecl::CubeBackend>(out).map_err(|e| e.to_string())
        };
        let shape = shape(ops);
        match (product(fastest), product(Matmul::Burn)) {
            (Ok(got), Ok(want)) if agree(&got, &want) => fastest,
            (got, want) => {
                let why = match (got, want) {
                    (Err(e), _) | (_, Err(e)) => e,
                    _ => format!("its product is more than {AGREE} off Burn's"),
                };
                tracing::warn!(%shape, matmul = %fastest, %why, "the fastest routine is not \
                    kept; Burn's choice computes this shape");
                Matmul::Burn
            }
        }
    }

    pub(super) fn choices() -> Vec<TunedChoice> {
        CHOICES.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Writes the product into the operands' `out` by the choice for its shape, tuning first
    /// where there is none yet.
    pub(super) fn run(ops: Operands) -> Result<(), String> {
        run_with(&TUNER, candidates, launch, ops)
    }

    /// [`run`] by `tuner` over `candidates`, each choice launched by `launch`: what a test
    /// swaps to make the fastest candidate a wrong one.
    pub(super) fn run_with(
        tuner: &LocalTuner<String, CubeTuneId>,
        candidates: impl Fn() -> Set + Send + Sync + 'static,
        launch: impl Fn(Matmul, &Operands) -> Result<(), String>,
        ops: Operands,
    ) -> Result<(), String> {
        let client = ops.0.client.clone();
        let id = CubeTuneId::new(&client, &ops.0.device);
        let (device, shape) = (id.to_string(), shape(&ops));
        let chosen = CHOICES
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|c| c.device == device && c.shape == shape)
            .map(|c| c.matmul);
        if let Some(matmul) = chosen {
            return launch(matmul, &ops).or_else(|e| {
                // Chosen at another row count of the shape; Burn's choice runs at any.
                tracing::warn!(%shape, %matmul, error = %e, "the tuned routine \
                    cannot run at these rows; Burn's choice computes this product");
                launch(Matmul::Burn, &ops)
            });
        }
        let set: Arc<Set> = tuner.init(&id, candidates);
        let start = Instant::now();
        // Times every candidate on these operands, then writes the product by the fastest (or,
        // while another thread is tuning the shape, by the first candidate that runs).
        tuner.execute(&id, &client, set.clone(), ops.clone());
        if let Some(fastest) = tuner.fastest_identity(&id, &set, &shape) {
            let matmul = checked(fastest, &ops, &launch);
            if matmul != fastest {
                // The product just written is the rejected routine's.
                launch(matmul, &ops)?;
            }
            let took = start.elapsed();
            let mut all = CHOICES.lock().unwrap_or_else(PoisonError::into_inner);
            if !all.iter().any(|c| c.device == device && c.shape == shape) {
                tracing::debug!(%device, %shape, %matmul, ?took, "tuned a product");
                all.push(TunedChoice { device, shape, matmul, took });
            }
        }
        Ok(())
    }
}

/// The kernel's variants as CUDA C++ for [`super::cuda_check`]: the rows' padding in each dtype (in
/// bf16 on GPUs other than the H200).
#[cfg(all(test, feature = "wgpu", not(feature = "fusion")))]
pub(super) fn cuda_variants(sm: &super::cuda_check::Sm) -> Vec<super::cuda_check::Variant> {
    use cubecl::ir::FloatKind::{BF16, F16, F32};
    let build = |dtype| {
        let kernel = pad_kernel::create_dummy_kernel(
            sm.props(),
            sm.target(),
            CubeCount::Static(2, 1, 1),
            CubeDim::new_1d(PAD_UNITS as u32),
            sm.buffer(PAD_UNITS),
            sm.buffer(2 * PAD_UNITS),
            PAD_UNITS as u32,
            2 * PAD_UNITS as u32,
            ElemType::Float(dtype),
        );
        sm.variant(format!("row padding {dtype:?}"), kernel)
    };
    let dtypes: &[_] = if sm.every() { &[F32, F16, BF16] } else { &[BF16] };
    dtypes.iter().map(|&dtype| build(dtype)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "fusion"))]
    #[test]
    fn a_product_agrees_within_a_share_of_its_largest_value() {
        use tune::{AGREE, agree};
        let want = [1.0, -2.0, 0.0];
        assert!(agree(&want, &want));
        assert!(agree(&[1.0 + 0.9 * AGREE * 2.0, -2.0, 0.0], &want));
        assert!(!agree(&[1.0 + 1.1 * AGREE * 2.0, -2.0, 0.0], &want));
        assert!(!agree(&[1.0, -2.0], &want), "a value missing");
        assert!(agree(&[0.0; 3], &[0.0; 3]));
        assert!(!agree(&[1e-3, 0.0, 0.0], &[0.0; 3]), "only zeros agree with zeros");
    }

    /// On llvmpipe: a fastest routine is kept only where its product is Burn's.
    #[cfg(all(feature = "wgpu", not(feature = "fusion")))]
    #[test]
    fn a_fastest_routine_whose_product_is_wrong_or_fails_gives_way_to_burns_choice() {
        use burn_cubecl::CubeBackend;
        let cube = crate::wgpu::open(0).expect("a wgpu adapter");
        let tensor = |values: Vec<f32>, shape: &[usize]| {
            switchyard_burn::floats::<CubeBackend>(values, shape, cube.device())
        };
        let x = tensor((0..35).map(|i| (i % 7) as f32 - 3.0).collect(), &[5, 7]);
        let other = tensor((0..35).map(|i| (i % 5) as f32).collect(), &[5, 7]);
        let wt = tensor((0..21).map(|i| (i % 3) as f32 + 0.5).collect(), &[7, 3]);
        let out = super::super::empty(&x, [5, 3]);
        let ops: Operands = (x, wt, out);
        let routine = Matmul::Routine(Routine::SimpleUnit);
        // Every routine computing Burn's product: the fastest is kept.
        let right = |_: Matmul, ops: &Operands| launch(Matmul::Burn, ops);
        assert_eq!(tune::checked(routine, &ops, right), routine);
        // The fastest multiplying other rows, or failing: Burn's choice instead.
        let wrong = |how: Matmul, (x, wt, out): &Operands| match how {
            Matmul::Burn => launch(how, &(x.clone(), wt.clone(), out.clone())),
            _ => launch(Matmul::Burn, &(other.clone(), wt.clone(), out.clone())),
        };
        assert_eq!(tune::checked(routine, &ops, wrong), Matmul::Burn);
        let failing = |how: Matmul, ops: &Operands| match how {
            Matmul::Burn => launch(how, ops),
            _ => Err("no such routine here".to_owned()),
        };
        assert_eq!(tune::checked(routine, &ops, failing), Matmul::Burn);
        assert_eq!(tune::checked(Matmul::Burn, &ops, failing), Matmul::Burn);
    }

    /// On llvmpipe, through the tuner itself: a candidate that is fastest because it writes the
    /// wrong product is timed, chosen, refused, and Burn's product is what the run leaves and
    /// what later runs of the shape use.
    #[cfg(all(feature = "wgpu", not(feature = "fusion")))]
    #[test]
    fn a_tuned_shape_whose_fastest_candidate_is_wrong_runs_burns_choice() {
        use burn_cubecl::{CubeBackend, CubeTuneId};
        use cubecl::tune::{LocalTuner, Tunable, TunableSet, local_tuner};
        static TUNER: LocalTuner<String, CubeTuneId> = local_tuner!("switchyard-product-test");
        let cube = crate::wgpu::open(0).expect("a wgpu adapter");
        let tensor = |values: Vec<f32>, shape: &[usize]| {
            switchyard_burn::floats::<CubeBackend>(values, shape, cube.device())
        };
        // A shape no other test tunes: 6 rows (8 when rounded), 11 deep, 5 wide.
        let x = tensor((0..66).map(|i| (i % 7) as f32 - 3.0).collect(), &[6, 11]);
        let other = tensor((0..66).map(|i| (i % 5) as f32).collect(), &[6, 11]);
        let wt = tensor((0..55).map(|i| (i % 3) as f32 + 0.5).collect(), &[11, 5]);
        let read = |t: CubeTensor| switchyard_burn::read_f32::<CubeBackend>(t).expect("read");
        let want = {
            let out = super::super::empty(&x, [6, 5]);
            launch(Matmul::Burn, &(x.clone(), wt.clone(), out.clone())).expect("Burn's product");
            read(out)
        };
        let wrong = Matmul::Routine(Routine::SimpleUnit);
        // The wrong candidate: `other`'s product, once. Burn's: its product twenty times over,
        // so that the wrong one is the fastest by far.
        let wrongly = move |(_, wt, out): &Operands| {
            launch(Matmul::Burn, &(other.clone(), wt.clone(), out.clone()))
        };
        let run_as = {
            let wrongly = wrongly.clone();
            move |how: Matmul, ops: &Operands| match how {
                Matmul::Burn => launch(how, ops),
                _ => wrongly(ops),
            }
        };
        let candidates = move || -> tune::Set {
            let wrongly = wrongly.clone();
            TunableSet::new(tune::shape, |_: &String, ops: &Operands| ops.clone())
                .with(Tunable::identified(Matmul::Burn, |ops: Operands| {
                    (0..20).try_for_each(|_| launch(Matmul::Burn, &ops))
                }))
                .with(Tunable::identified(wrong, move |ops: Operands| wrongly(&ops)))
        };
        let out = super::super::empty(&x, [6, 5]);
        let ops: Operands = (x.clone(), wt.clone(), out.clone());
        tune::run_with(&TUNER, candidates.clone(), &run_as, ops).expect("a product");
        assert_eq!(read(out), want, "the run's product is Burn's");
        let shape = "[8, 11] x [11, 5] F32";
        let chosen: Vec<Matmul> =
            tuned_choices().into_iter().filter(|c| c.shape == shape).map(|c| c.matmul).collect();
        assert_eq!(chosen, [Matmul::Burn], "{:?}", tuned_choices());
        // The shape again: no tuning, Burn's choice.
        let out = super::super::empty(&x, [6, 5]);
        tune::run_with(&TUNER, candidates, &run_as, (x, wt, out.clone())).expect("a product");
        assert_eq!(read(out), want);
    }

    /// On llvmpipe: padding keeps every value of the rows and zeros the rows below them, over
    /// whatever the buffer held (a routine timed by the tuner is checked on the whole padded
    /// product, where a stray value would fail it), in f32 and f16.
    #[cfg(all(feature = "wgpu", not(feature = "fusion")))]
    #[test]
    fn padded_rows_keep_the_values_and_are_zeros_below() {
        use burn_backend::ops::FloatTensorOps;
        use burn_cubecl::CubeBackend;
        let cube = crate::wgpu::open(0).expect("a wgpu adapter");
        let floats = |values: Vec<f32>, shape: &[usize], dtype: burn_backend::DType| {
            let t = switchyard_burn::floats::<CubeBackend>(values, shape, cube.device());
            CubeBackend::float_cast(t, dtype.into())
        };
        let values: Vec<f32> = (1..=15).map(|i| i as f32).collect();
        for dtype in [burn_backend::DType::F32, burn_backend::DType::F16] {
            let x = floats(values.clone(), &[3, 5], dtype);
            let out = floats(vec![7.0; 40], &[8, 5], dtype);
            pad_into(x.clone(), &out).expect("padded");
            let got = switchyard_burn::read_f32::<CubeBackend>(out).expect("read");
            assert_eq!(got[..15], values[..], "{dtype:?}");
            assert!(got[15..].iter().all(|v| *v == 0.0), "{dtype:?}: {:?}", &got[15..]);
            let padded = pad_rows(x, ROW_GRANULE).expect("padded");
            assert_eq!(super::super::dims(&padded), [ROW_GRANULE, 5]);
        }
    }

    #[test]
    fn every_choice_reads_back_from_its_name_and_an_unknown_name_lists_them() {
        let all: Vec<Matmul> = Matmul::all().collect();
        assert_eq!(all.len(), 26);
        for m in &all {
            assert_eq!(m.to_string().parse::<Matmul>(), Ok(*m));
        }
        let names: std::collections::HashSet<String> = all.iter().map(|m| m.to_string()).collect();
        assert_eq!(names.len(), all.len(), "names are distinct");
        let e = "fast".parse::<Matmul>().unwrap_err();
        assert!(e.contains("`fast`") && e.contains("burn, tiled-cmma, tiled-cmma-async"), "{e}");
        assert!(!Routine::SimpleUnit.tensor_cores() && Routine::SpecializedTmaMma.tensor_cores());
        assert!(!Routine::TiledCpuGemm.tensor_cores() && Routine::TiledCmmaTma.tensor_cores());
        // The four tile-DSL routines pad any rows; the tuned choice past 1024 rows.
        let padding = |m: usize| all.iter().filter(|c| c.rows_for(m) != m).count();
        assert_eq!((padding(59), padding(1024), padding(1025), padding(2190)), (4, 0, 5, 5));
        assert_eq!(Matmul::Tuned.rows_for(2190), 2304);
        assert_eq!(Matmul::Routine(Routine::TiledCpuGemm).rows_for(59), 128);
        assert_eq!(Matmul::Burn.rows_for(2190), 2190);
    }

    #[test]
    fn each_routine_asks_cubek_for_its_own_strategy_and_product_instruction() {
        for r in Routine::ALL {
            let s = r.strategy().to_string();
            let kind = if r.name().ends_with("-mma") { "_mma" } else { "cmma" };
            if r.tensor_cores() {
                assert!(s.contains(kind), "{}: {s}", r.name());
            }
        }
        let names: std::collections::HashSet<String> =
            Routine::ALL.iter().map(|r| r.strategy().to_string()).collect();
        assert_eq!(names.len(), Routine::ALL.len(), "{names:?}");
    }
}
