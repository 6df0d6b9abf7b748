//! Training through `Dispatch::on_burn`, on the device `SWITCHYARD_CONFORMANCE_DEVICE` names (as
//! `cargo xtask test-all-backends` does for each device), else on flex: switchyard-train's
//! PyTorch fixtures (gradients of tiny models, short AdamW runs) on that device's Burn backend
//! under burn-autodiff, at the bounds its own tests hold burn-flex to; a device that does not
//! train says which do.

mod common;

use burn_backend::Backend as BurnBackend;
use switchyard_burn::BurnVisitor;
use switchyard_core::{Caps, Error};
use switchyard_dispatch::Dispatch;
use switchyard_train::testkit::{GradientCheck, ParityCheck, check_gradients, check_parity};

struct Gradients(&'static str);

impl BurnVisitor for Gradients {
    type Out = GradientCheck;
    fn visit<B: BurnBackend>(self, device: B::Device, caps: Caps) -> GradientCheck {
        check_gradients::<B>(device, caps, self.0)
    }
}

struct Parity(&'static str);

impl BurnVisitor for Parity {
    type Out = ParityCheck;
    fn visit<B: BurnBackend>(self, device: B::Device, caps: Caps) -> ParityCheck {
        check_parity::<B>(device, caps, self.0)
    }
}

mod training_through_dispatch {
    use super::*;

    fn open() -> Option<Dispatch> {
        let d = common::device();
        d.family().trains.then(|| Dispatch::new(&d).expect("the device under test is present"))
    }

    #[test]
    fn gradients_match_pytorch() {
        let Some(backend) = open() else { return };
        // A cross-encoder (pairs, token types, BERT's pooler), ModernBERT (rotary, sliding
        // windows, GeGLU, mean pooling through its head) and DeBERTa (disentangled attention,
        // its position tables computed on the tape).
        for name in ["bert-cross-encoder", "modernbert-classifier", "deberta-classifier"] {
            let c = backend.on_burn(Gradients(name)).unwrap();
            let d = common::device();
            assert!(
                c.loss <= 1e-5 && c.relative <= 1e-4 && c.key_bias <= 1e-4,
                "{d}: {name}: {c:?}"
            );
        }
    }

    #[test]
    fn a_short_run_matches_pytorch() {
        let Some(backend) = open() else { return };
        let c = backend.on_burn(Parity("mnrl")).unwrap();
        let (ours, torch) = &c.losses;
        let d = common::device();
        for (a, b) in ours.iter().zip(torch) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{d}: losses {c:?}");
        }
        assert!(c.weights <= 2e-5 && c.key_bias <= 1.0, "{d}: {c:?}");
    }

    #[test]
    fn a_device_that_does_not_train_says_which_do() {
        let d = common::device();
        if d.family().trains {
            return;
        }
        let backend = Dispatch::new(&d).expect("the device under test is present");
        let e = backend.on_burn(Parity("mnrl")).unwrap_err();
        assert!(
            matches!(&e, Error::Unsupported(m) if m.contains("cannot train") && m.contains("flex")),
            "{e}"
        );
    }
}

#[cfg(feature = "remote")]
#[test]
#[ignore = "run by the remote tests as their server process"]
fn remote_server_process() {
    common::serve_if_asked();
}
