//! The product `x . wt` of a linear layer where Burn's matmul would compute it (half precision,
//! and f32 outside our fused GEMM): Burn's own choice, or one of cubek's routines named at run
//! time.
//!
//! Built without `autotune` (the default), Burn's matmul always runs cubek's first routine that
//! the device has: the single-stage tensor-core routine, else the one without tensor cores. On an
//! H200 that left half precision only 1.25x to 1.4x faster than TF32 (docs/benchmarks.md), where
//! PyTorch's f16 is 6x its f32. Naming the routine lets the benchmark measure each one on a
//! device (`switchyard-bench 15 --matmuls`), so that a device's default can be the one measured fastest.

use std::fmt;
use std::str::FromStr;

use cubek::matmul::multi_level::Strategy;
use cubek::matmul::multi_level::components::tile::TileMatmulKind;
use cubek::matmul::multi_level::routines::batch::double_buffering::DoubleBufferingArgs;
use cubek::matmul::multi_level::routines::batch::ordered_double_buffering::OrderedSelectionArgs;
use cubek::matmul::multi_level::routines::batch::simple::SimpleArgs;
use cubek::matmul::routine::BlueprintStrategy;

/// Which routine computes a linear layer's product under the crate's epilogue kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Matmul {
    /// Burn's matmul: cubek's first routine the device has, or with the `autotune` feature, the
    /// one Burn's autotuning measures fastest for the shape.
    #[default]
    Burn,
    /// A named routine of cubek's.
    Routine(Routine),
}

/// cubek's matmul routines: how the operands are staged through shared memory (one stage,
/// double-buffered, with producer warps, or through Hopper's TMA unit) and which product
/// instruction the tiles use (`Cmma`: cooperative matrix fragments; `Mma`: explicit register
/// fragments; `Unit`: each unit a tile of scalars, no tensor cores).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Routine {
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
}

impl Routine {
    /// Every routine, tensor-core ones first.
    pub const ALL: [Routine; 18] = [
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
        }
    }

    /// Whether the routine's products run on tensor cores (cooperative matrix instructions).
    pub fn tensor_cores(self) -> bool {
        !matches!(self, Routine::SimpleUnit | Routine::DoubleUnit)
    }

    /// cubek's strategy for the routine, its tile sizes left for cubek to choose per problem.
    #[cfg_attr(feature = "fusion", allow(dead_code))]
    fn strategy(self) -> Strategy {
        use Routine as R;
        use TileMatmulKind::{Cmma, Mma};
        let kind = if self.name().ends_with("-mma") { Mma } else { Cmma };
        let simple =
            |multi_rows| BlueprintStrategy::Inferred(SimpleArgs { tile_matmul: kind, multi_rows });
        let double = |specialized| {
            BlueprintStrategy::Inferred(DoubleBufferingArgs { tile_matmul: kind, specialized })
        };
        let tma = BlueprintStrategy::Inferred(SimpleArgs { tile_matmul: kind, multi_rows: false });
        // The ordered routine's selection as Burn's autotuning tries it first.
        let ordered = BlueprintStrategy::Inferred(OrderedSelectionArgs {
            tile_matmul: kind,
            partition_k: Some(2),
            row_count: Some(4),
            rows_per_plane: Some(2),
        });
        match self {
            R::SimpleCmma | R::SimpleMultiRowsCmma => {
                Strategy::SimpleCyclicCmma(simple(self == R::SimpleMultiRowsCmma))
            }
            R::SimpleMma | R::SimpleMultiRowsMma => {
                Strategy::SimpleCyclicMma(simple(self == R::SimpleMultiRowsMma))
            }
            R::OrderedCmma => Strategy::OrderedDoubleCmma(ordered),
            R::OrderedMma => Strategy::OrderedDoubleMma(ordered),
            R::DoubleCyclicCmma => Strategy::DoubleCyclicCmma(double(false)),
            R::DoubleCyclicMma => Strategy::DoubleCyclicMma(double(false)),
            R::DoubleSpecializedCmma => Strategy::DoubleCyclicCmma(double(true)),
            R::DoubleSpecializedMma => Strategy::DoubleCyclicMma(double(true)),
            R::SpecializedCyclicCmma => {
                Strategy::SpecializedCyclicCmma(BlueprintStrategy::Inferred(Default::default()))
            }
            R::SpecializedCyclicMma => {
                Strategy::SpecializedCyclicMma(BlueprintStrategy::Inferred(Default::default()))
            }
            R::SimpleTmaCmma => Strategy::SimpleTmaCmma(tma),
            R::SimpleTmaMma => Strategy::SimpleTmaMma(tma),
            R::SpecializedTmaCmma => {
                Strategy::SpecializedTmaCmma(BlueprintStrategy::Inferred(Default::default()))
            }
            R::SpecializedTmaMma => {
                Strategy::SpecializedTmaMma(BlueprintStrategy::Inferred(Default::default()))
            }
            R::SimpleUnit => Strategy::SimpleUnit(BlueprintStrategy::Inferred(Default::default())),
            R::DoubleUnit => Strategy::DoubleUnit(BlueprintStrategy::Inferred(Default::default())),
        }
    }
}

impl Matmul {
    /// Every choice: Burn's, then each routine.
    pub fn all() -> impl Iterator<Item = Matmul> {
        std::iter::once(Matmul::Burn).chain(Routine::ALL.into_iter().map(Matmul::Routine))
    }
}

impl fmt::Display for Matmul {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Matmul::Burn => f.write_str("burn"),
            Matmul::Routine(r) => f.write_str(r.name()),
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
/// routine cannot run on this device, in this dtype or at these sizes.
#[cfg(not(feature = "fusion"))]
pub(crate) fn product(
    x: burn_cubecl::tensor::CubeTensor,
    wt: &burn_cubecl::tensor::CubeTensor,
    how: Matmul,
) -> Result<burn_cubecl::tensor::CubeTensor, String> {
    use burn_backend::ops::FloatTensorOps;
    use cubek::matmul::definition::{MatmulElems, MatmulGlobalElems};
    use cubek::std::InputBinding;
    let Matmul::Routine(routine) = how else {
        return Ok(burn_cubecl::CubeBackend::float_matmul(x, wt.clone()));
    };
    let x = super::contiguous(x);
    let wt = super::contiguous(wt.clone());
    let [m, _] = super::dims(&x);
    let [_, n] = super::dims(&wt);
    let out = super::empty(&x, [m, n]);
    let elem = burn_backend::cubecl::dtype_to_storage_type(x.dtype);
    let mut dtypes =
        MatmulElems::from_globals(&MatmulGlobalElems { lhs: elem, rhs: elem, out: elem });
    let client = x.client.clone();
    cubek::matmul::launch::launch_ref(
        &routine.strategy().into(),
        &client,
        InputBinding::new(x.binding(), elem),
        InputBinding::new(wt.binding(), elem),
        out.clone().binding(),
        &mut dtypes,
    )
    .map_err(|e| format!("cubek's {} matmul: {}", routine.name(), format!("{e:?}").trim_end()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_reads_back_from_its_name_and_an_unknown_name_lists_them() {
        let all: Vec<Matmul> = Matmul::all().collect();
        assert_eq!(all.len(), 19);
        for m in &all {
            assert_eq!(m.to_string().parse::<Matmul>(), Ok(*m));
        }
        let names: std::collections::HashSet<String> = all.iter().map(|m| m.to_string()).collect();
        assert_eq!(names.len(), all.len(), "names are distinct");
        let e = "fast".parse::<Matmul>().unwrap_err();
        assert!(e.contains("`fast`") && e.contains("burn, simple-cmma"), "{e}");
        assert!(!Routine::SimpleUnit.tensor_cores() && Routine::SpecializedTmaMma.tensor_cores());
    }

    #[test]
    fn each_routine_asks_cubek_for_its_own_strategy_and_product_instruction() {
        for r in Routine::ALL {
            let s = r.strategy().to_string();
            let kind = if r.name().ends_with("-mma") { "_mma" } else { "_cmma" };
            if r.tensor_cores() {
                assert!(s.contains(kind), "{}: {s}", r.name());
            }
        }
        let names: std::collections::HashSet<String> =
            Routine::ALL.iter().map(|r| r.strategy().to_string()).collect();
        assert_eq!(names.len(), Routine::ALL.len(), "{names:?}");
    }
}
