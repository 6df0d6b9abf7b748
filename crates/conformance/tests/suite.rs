//! The suite itself: the reference passes it, and a backend that is slightly wrong fails it.

use switchyard_conformance::{Check, Options, check};
use switchyard_core::{
    Backend, Batch, Bucket, Caps, Graph, HostTensor, Outputs, Reference, Result,
    reference::{RefPlan, RefState},
};

mod the_reference_passes {
    switchyard_conformance::tests!(|| switchyard_core::Reference);
}

/// A check no backend can pass, skipped with its reason: the macro makes it an ignored test.
mod a_check_can_be_skipped_with_its_reason {
    switchyard_conformance::tests!(
        || switchyard_core::Reference,
        switchyard_conformance::Options::default(),
        skip [edge_graphs = "skipped to show the form", errors = "likewise"]
    );
}

/// The reference with every output nudged by `delta`.
struct Nudged(f32);

impl Backend for Nudged {
    type Weights = <Reference as Backend>::Weights;
    type Plan = RefPlan;
    type State = RefState;
    fn caps(&self) -> Caps {
        Caps { backend: "nudged".into(), ..Reference.caps() }
    }
    fn upload(&self, t: &[HostTensor<'_>], g: &Graph) -> Result<Self::Weights> {
        Reference.upload(t, g)
    }
    fn lower(&self, w: &Self::Weights, g: &Graph, b: Bucket) -> Result<RefPlan> {
        Reference.lower(w, g, b)
    }
    fn state(&self, p: &RefPlan) -> Result<RefState> {
        Reference.state(p)
    }
    fn run(&self, p: &RefPlan, s: &mut RefState, b: &Batch<'_>, out: &mut Outputs) -> Result<()> {
        Reference.run(p, s, b, out)?;
        out.map_values(|x| x + self.0);
        Ok(())
    }
}

#[test]
fn a_backend_off_by_more_than_the_tolerance_fails_every_check_that_compares() {
    for c in [Check::OpsAlone, Check::WholeEncoders, Check::ConcurrentRuns, Check::EdgeGraphs] {
        let r = std::panic::catch_unwind(|| check(c, || Nudged(1e-3), Options::default()));
        let msg = r.expect_err("the suite must reject a wrong backend");
        let msg = msg.downcast_ref::<String>().expect("a text panic");
        assert!(msg.contains(&format!("conformance of `nudged`, {}", c.name())), "{msg}");
    }
}

#[test]
fn shape_only_runs_ignore_values_but_not_shapes() {
    // Values are off by far more than any tolerance, but shapes and errors are right.
    for c in Check::ALL {
        check(c, || Nudged(1.0), Options { compare_values: false, ..Options::default() });
    }
}

#[test]
fn check_names_are_distinct_test_names() {
    let names: Vec<&str> = Check::ALL.iter().map(|c| c.name()).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    assert!(names.iter().all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
}
