//! Whole tiny models against PyTorch on burn-flex: gradients of every parameter, and training
//! runs of a few AdamW steps, against what `tests/fixtures/make_fixtures.py` recorded from torch,
//! transformers and sentence-transformers (dropout off in both). `cargo xtask test-all-backends`
//! runs the same checks on every device that trains (crates/dispatch/tests/training.rs).
//!
//! Measured on burn-flex: gradients within 7.5e-6 of torch's relative to each tensor's size,
//! losses within 3e-6, weights after 4 to 6 steps within 1.7e-6. The bounds are about ten times
//! that, and far below the size of a wrong gradient or a wrong step. Attention key biases (whose
//! exact gradient is zero, see `testkit::key_bias`) are held to 1e-4 of the model's gradient
//! size, and after training to the distance AdamW can move a weight.

// The measured differences are printed, as docs/training.md quotes them.
#![allow(clippy::print_stderr)]

use burn_flex::{Flex, FlexDevice};
use switchyard_core::{Caps, DeviceKind};
use switchyard_train::testkit::{self, check_gradients, check_parity};

fn caps() -> Caps {
    Caps::new("flex", "burn-flex under autodiff", DeviceKind::Cpu)
}

#[test]
fn gradients_of_whole_models_match_pytorch_autograd() {
    let models = testkit::gradient_models();
    assert_eq!(models.len(), 9);
    for name in models {
        let c = check_gradients::<Flex>(FlexDevice, caps(), &name);
        eprintln!("{name}: {c:?}");
        assert!(c.loss <= 1e-5, "{name}: loss {c:?}");
        assert!(c.relative <= 1e-4, "{name}: gradients {c:?}");
        assert!(c.key_bias <= 1e-4, "{name}: key biases {c:?}");
    }
}

#[test]
fn a_few_adamw_steps_match_pytorch() {
    let cases = testkit::parity_cases();
    assert_eq!(cases.len(), 6);
    for case in cases {
        let c = check_parity::<Flex>(FlexDevice, caps(), &case);
        eprintln!("{case}: {c:?}");
        let (ours, torch) = &c.losses;
        assert_eq!(ours.len(), torch.len(), "{case}");
        for (i, (a, b)) in ours.iter().zip(torch).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{case}: step {}: {a} vs torch {b}",
                i + 1
            );
        }
        assert!(c.weights <= 2e-5, "{case}: weights {c:?}");
        assert!(c.key_bias <= 1.0, "{case}: key biases {c:?}");
    }
}
