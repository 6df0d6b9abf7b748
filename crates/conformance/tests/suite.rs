//! The suite itself: the reference passes it, and a backend that is slightly wrong fails it.

use switchyard_conformance::{Options, suite, suite_with};
use switchyard_core::{
    Backend, Batch, Bucket, Caps, Graph, HostTensor, Outputs, Reference, Result, reference::RefPlan,
};

#[test]
fn the_reference_passes() {
    suite(|| Reference);
}

/// The reference with every output nudged by `delta`.
struct Nudged(f32);

impl Backend for Nudged {
    type Weights = <Reference as Backend>::Weights;
    type Plan = RefPlan;
    fn caps(&self) -> Caps {
        Caps { backend: "nudged".into(), ..Reference.caps() }
    }
    fn upload(&self, t: &[HostTensor<'_>], g: &Graph) -> Result<Self::Weights> {
        Reference.upload(t, g)
    }
    fn lower(&self, w: &Self::Weights, g: &Graph, b: Bucket) -> Result<RefPlan> {
        Reference.lower(w, g, b)
    }
    fn run(&self, p: &mut RefPlan, b: &Batch<'_>, out: &mut Outputs) -> Result<()> {
        Reference.run(p, b, out)?;
        out.map_values(|x| x + self.0);
        Ok(())
    }
}

#[test]
fn a_backend_off_by_more_than_the_tolerance_fails() {
    let r = std::panic::catch_unwind(|| suite(|| Nudged(1e-3)));
    let msg = r.expect_err("the suite must reject a wrong backend");
    let msg = msg.downcast_ref::<String>().expect("a text panic");
    assert!(msg.contains("conformance of `nudged` failed"), "{msg}");
    assert!(msg.contains("whole encoders") && msg.contains("ops alone"), "{msg}");
}

#[test]
fn shape_only_runs_ignore_values_but_not_shapes() {
    // Values are off by far more than any tolerance, but shapes and errors are right.
    suite_with(|| Nudged(1.0), Options { compare_values: false, ..Options::default() });
}
