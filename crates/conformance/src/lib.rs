//! switchyard-conformance: the suite every backend passes, compared against the reference.
//!
//! A backend crate runs it with one line in a test file, which makes one `#[test]` per check
//! (so `cargo test ragged` runs one, and checks run in parallel):
//!
//! ```ignore
//! // In a backend crate's tests/conformance.rs:
//! switchyard_conformance::tests!(my_backend::open_it);
//! // or with options, and a check skipped for this backend with its reason:
//! switchyard_conformance::tests!(make, Options { compare_values: false, ..Options::default() },
//!     skip [concurrent_runs = "why this backend cannot"]);
//! ```
//!
//! Every check builds graphs and batches from a fixed seed, runs them on the backend under test
//! and on [`Reference`](switchyard_core::Reference) (f64), and compares every output within the
//! tolerance of the backend's compute dtype ([`TOLERANCES`]). A check stops at its first
//! failure and panics naming it.

mod checks;
mod harness;
mod ops;

use std::cell::Cell;

use switchyard_core::{Act, Backend, DType};

use crate::harness::Harness;

/// An error bound: `|got - want| <= abs + rel * |want|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tol {
    /// Absolute part.
    pub abs: f32,
    /// Relative part.
    pub rel: f32,
}

/// Tolerances per compute dtype, against the f64 reference.
///
/// f32: an f32 sum of `k` products of unit-sized terms errs by about `sqrt(k) * 6e-8`; with
/// `k <= 300` and a few layers of norms and softmaxes, the worst error measured on flex and
/// ndarray is about 4% of this bound (under 1e-6). The bound leaves that headroom for other
/// summation orders (GPU reductions) while still catching a wrong constant: a GELU-tanh
/// coefficient off by 0.6% errs by 1.7e-4 and fails. f16 and bf16 keep 11 and 8 significant bits.
/// int8 rounds each weight to a multiple of 1/127 of its column's largest magnitude (1/63 on
/// CPUs whose int8 kernel sums pairs in i16) and each linear layer's input to 1/255 of its
/// row's range: on the suite's unit-sized random values a layer errs by about 1%, and the worst
/// error measured on flex is 42% of this bound with 1/127 and 65% with 1/63 (flex int8, every
/// check).
pub const TOLERANCES: [(DType, Tol); 4] = [
    (DType::F32, Tol { abs: 2e-5, rel: 2e-5 }),
    (DType::F16, Tol { abs: 1e-2, rel: 1e-2 }),
    (DType::Bf16, Tol { abs: 5e-2, rel: 5e-2 }),
    (DType::I8, Tol { abs: 4e-2, rel: 4e-2 }),
];

/// Every activation, for checks that cover them all.
pub const ACTS: [Act; 8] = Act::ALL;

/// The tolerance for a compute dtype.
pub fn tolerance(dtype: DType) -> Tol {
    TOLERANCES.iter().find(|(d, _)| *d == dtype).map(|(_, t)| *t).expect("every dtype is listed")
}

/// How to run the suite.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The dtype the backend computes in, which sets the tolerance.
    pub dtype: DType,
    /// Whether to compare values (off for backends that execute nothing, like capture: shapes
    /// and errors are still checked).
    pub compare_values: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { dtype: DType::F32, compare_values: true }
    }
}

/// The checks of the suite: each is one test of a backend's suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    /// Every op alone, on random widths and row counts.
    OpsAlone,
    /// BERT- and ModernBERT-shaped encoders on random ragged batches.
    WholeEncoders,
    /// Batches of one, many, length-1, no markers, a full bucket and none.
    RaggedBatches,
    /// Each sequence alone and inside a batch gives the same outputs.
    Isolation,
    /// Many batches through one plan, and the first again.
    PlanReuse,
    /// Batches at once on one plan, each with its own run state.
    ConcurrentRuns,
    /// Wrong input gives errors, never panics.
    Errors,
    /// Unusual valid graphs run right or are refused as unsupported.
    EdgeGraphs,
}

impl Check {
    /// Every check, in the order the suite lists them.
    pub const ALL: [Check; 8] = [
        Check::OpsAlone,
        Check::WholeEncoders,
        Check::RaggedBatches,
        Check::Isolation,
        Check::PlanReuse,
        Check::ConcurrentRuns,
        Check::Errors,
        Check::EdgeGraphs,
    ];

    /// The check's name, which is also its test's.
    pub const fn name(self) -> &'static str {
        match self {
            Check::OpsAlone => "ops_alone",
            Check::WholeEncoders => "whole_encoders",
            Check::RaggedBatches => "ragged_batches",
            Check::Isolation => "isolation",
            Check::PlanReuse => "plan_reuse",
            Check::ConcurrentRuns => "concurrent_runs",
            Check::Errors => "errors",
            Check::EdgeGraphs => "edge_graphs",
        }
    }
}

/// Runs one check on backends made by `make`, with `opts`; panics naming what failed.
pub fn check<B: Backend>(check: Check, make: impl Fn() -> B, opts: Options) {
    let h = Harness { make: &make, opts, worst: Cell::new(0.0) };
    let result = match check {
        Check::OpsAlone => ops::every_op_alone(&h),
        Check::WholeEncoders => checks::whole_encoders(&h),
        Check::RaggedBatches => checks::ragged_batches(&h),
        Check::Isolation => checks::isolation(&h),
        Check::PlanReuse => checks::plan_reuse(&h),
        Check::ConcurrentRuns => checks::concurrent_runs(&h),
        Check::Errors => checks::errors(&h),
        Check::EdgeGraphs => checks::edge_graphs(&h),
    };
    let backend = make().caps().backend;
    if let Err(msg) = result {
        panic!("conformance of `{backend}`, {}: {msg}", check.name());
    }
    tracing::info!(
        backend,
        check = check.name(),
        worst_error_over_tolerance = h.worst.get(),
        "passed"
    );
}

/// Makes one `#[test]` per [`Check`] for backends made by `$make` (an expression usable as
/// `impl Fn() -> B`), with [`Options`] (default: f32, comparing values), and for each check
/// named in `skip [name = "reason", ...]` an ignored test giving the reason.
#[macro_export]
macro_rules! tests {
    ($make:expr $(,)?) => {
        $crate::tests!($make, $crate::Options::default());
    };
    ($make:expr, $opts:expr $(, skip [$($skip:ident = $why:literal),* $(,)?])? $(,)?) => {
        $crate::tests!(@ops_alone ($make, $opts) [$($($skip = $why),*)?]);
        $crate::tests!(@whole_encoders ($make, $opts) [$($($skip = $why),*)?]);
        $crate::tests!(@ragged_batches ($make, $opts) [$($($skip = $why),*)?]);
        $crate::tests!(@isolation ($make, $opts) [$($($skip = $why),*)?]);
        $crate::tests!(@plan_reuse ($make, $opts) [$($($skip = $why),*)?]);
        $crate::tests!(@concurrent_runs ($make, $opts) [$($($skip = $why),*)?]);
        $crate::tests!(@errors ($make, $opts) [$($($skip = $why),*)?]);
        $crate::tests!(@edge_graphs ($make, $opts) [$($($skip = $why),*)?]);
    };
    (@ops_alone ($make:expr, $opts:expr) [ops_alone = $why:literal $(, $($rest:tt)*)?]) => {
        #[test]
        #[ignore = $why]
        fn ops_alone() {}
    };
    (@ops_alone ($make:expr, $opts:expr) [$other:ident = $w:literal $(, $($rest:tt)*)?]) => {
        $crate::tests!(@ops_alone ($make, $opts) [$($($rest)*)?]);
    };
    (@ops_alone ($make:expr, $opts:expr) []) => {
        #[test]
        fn ops_alone() {
            $crate::check($crate::Check::OpsAlone, $make, $opts);
        }
    };
    (@whole_encoders ($make:expr, $opts:expr) [whole_encoders = $why:literal $(, $($rest:tt)*)?]) => {
        #[test]
        #[ignore = $why]
        fn whole_encoders() {}
    };
    (@whole_encoders ($make:expr, $opts:expr) [$other:ident = $w:literal $(, $($rest:tt)*)?]) => {
        $crate::tests!(@whole_encoders ($make, $opts) [$($($rest)*)?]);
    };
    (@whole_encoders ($make:expr, $opts:expr) []) => {
        #[test]
        fn whole_encoders() {
            $crate::check($crate::Check::WholeEncoders, $make, $opts);
        }
    };
    (@ragged_batches ($make:expr, $opts:expr) [ragged_batches = $why:literal $(, $($rest:tt)*)?]) => {
        #[test]
        #[ignore = $why]
        fn ragged_batches() {}
    };
    (@ragged_batches ($make:expr, $opts:expr) [$other:ident = $w:literal $(, $($rest:tt)*)?]) => {
        $crate::tests!(@ragged_batches ($make, $opts) [$($($rest)*)?]);
    };
    (@ragged_batches ($make:expr, $opts:expr) []) => {
        #[test]
        fn ragged_batches() {
            $crate::check($crate::Check::RaggedBatches, $make, $opts);
        }
    };
    (@isolation ($make:expr, $opts:expr) [isolation = $why:literal $(, $($rest:tt)*)?]) => {
        #[test]
        #[ignore = $why]
        fn isolation() {}
    };
    (@isolation ($make:expr, $opts:expr) [$other:ident = $w:literal $(, $($rest:tt)*)?]) => {
        $crate::tests!(@isolation ($make, $opts) [$($($rest)*)?]);
    };
    (@isolation ($make:expr, $opts:expr) []) => {
        #[test]
        fn isolation() {
            $crate::check($crate::Check::Isolation, $make, $opts);
        }
    };
    (@plan_reuse ($make:expr, $opts:expr) [plan_reuse = $why:literal $(, $($rest:tt)*)?]) => {
        #[test]
        #[ignore = $why]
        fn plan_reuse() {}
    };
    (@plan_reuse ($make:expr, $opts:expr) [$other:ident = $w:literal $(, $($rest:tt)*)?]) => {
        $crate::tests!(@plan_reuse ($make, $opts) [$($($rest)*)?]);
    };
    (@plan_reuse ($make:expr, $opts:expr) []) => {
        #[test]
        fn plan_reuse() {
            $crate::check($crate::Check::PlanReuse, $make, $opts);
        }
    };
    (@concurrent_runs ($make:expr, $opts:expr) [concurrent_runs = $why:literal $(, $($rest:tt)*)?]) => {
        #[test]
        #[ignore = $why]
        fn concurrent_runs() {}
    };
    (@concurrent_runs ($make:expr, $opts:expr) [$other:ident = $w:literal $(, $($rest:tt)*)?]) => {
        $crate::tests!(@concurrent_runs ($make, $opts) [$($($rest)*)?]);
    };
    (@concurrent_runs ($make:expr, $opts:expr) []) => {
        #[test]
        fn concurrent_runs() {
            $crate::check($crate::Check::ConcurrentRuns, $make, $opts);
        }
    };
    (@errors ($make:expr, $opts:expr) [errors = $why:literal $(, $($rest:tt)*)?]) => {
        #[test]
        #[ignore = $why]
        fn errors() {}
    };
    (@errors ($make:expr, $opts:expr) [$other:ident = $w:literal $(, $($rest:tt)*)?]) => {
        $crate::tests!(@errors ($make, $opts) [$($($rest)*)?]);
    };
    (@errors ($make:expr, $opts:expr) []) => {
        #[test]
        fn errors() {
            $crate::check($crate::Check::Errors, $make, $opts);
        }
    };
    (@edge_graphs ($make:expr, $opts:expr) [edge_graphs = $why:literal $(, $($rest:tt)*)?]) => {
        #[test]
        #[ignore = $why]
        fn edge_graphs() {}
    };
    (@edge_graphs ($make:expr, $opts:expr) [$other:ident = $w:literal $(, $($rest:tt)*)?]) => {
        $crate::tests!(@edge_graphs ($make, $opts) [$($($rest)*)?]);
    };
    (@edge_graphs ($make:expr, $opts:expr) []) => {
        #[test]
        fn edge_graphs() {
            $crate::check($crate::Check::EdgeGraphs, $make, $opts);
        }
    };
}
