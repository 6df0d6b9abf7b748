//! A backend is its declaration in the table: this test declares a fake one (the reference
//! interpreter posing as two devices) in a table of its own, and gets parsing, printing,
//! listing, opening, routing and the serve refusal from that declaration alone.

// The fake rides on the `flex` feature, which every test build of this crate has; a real
// backend names a feature of its own.
#![cfg(feature = "flex")]

use switchyard_core::testkit::{self, EncoderSpec, Rng};
use switchyard_core::{Backend, BatchBuf, Buckets, Error, Executor, LaneId, Outputs, Reference};
use switchyard_dispatch::{Device, forms_in};

/// The fake backend's module: what a backend crate exports for the table.
mod fake {
    use switchyard_core::{Error, Reference, Result};

    /// Two fake devices.
    pub fn devices() -> usize {
        2
    }

    /// Fake device `index`.
    pub fn open(index: usize) -> Result<Reference> {
        if index < devices() {
            Ok(Reference)
        } else {
            Err(Error::Device(format!("fake:{index}: there are {} fake devices", devices())))
        }
    }
}

switchyard_dispatch::backends! {
    backend "fake" Fake = Reference {
        /// The f64 reference interpreter, posing as two devices.
        "fake" indexed fake, feature "flex", ci [skip "a test's own backend"];
    }
}

fn device(s: &str) -> switchyard_core::Result<Device> {
    Device::parse_in(FAMILIES, s)
}

#[test]
fn the_declaration_names_parses_and_lists_its_devices() {
    assert_eq!(forms_in(FAMILIES), "fake[:N]");
    let f = &FAMILIES[0];
    assert_eq!(
        (f.name, f.backend, f.feature, f.compiled, f.served),
        ("fake", "fake", "flex", true, false)
    );
    assert_eq!(f.about.trim(), "The f64 reference interpreter, posing as two devices.");
    assert_eq!(device("fake:1").unwrap().to_string(), "fake:1");
    assert_eq!(device("FAKE").unwrap().to_string(), "fake:0");
    let e = device("flex").unwrap_err().to_string();
    assert!(e.contains("unknown device `flex`; expected one of: fake[:N]"), "{e}");
    let listed: Vec<String> = Dispatch::available().iter().map(Device::to_string).collect();
    assert_eq!(listed, ["fake:0", "fake:1"]);
}

/// A tiny encoder's outputs for one sequence on `be`.
fn run<B: Backend>(be: B) -> Outputs {
    let g = testkit::bert_like(EncoderSpec::TINY);
    let weights = testkit::random_weights(&g, 3);
    let mut batch = BatchBuf::new();
    testkit::push_random_seq(&mut batch, &mut Rng::new(1), 7, EncoderSpec::TINY.vocab, true);
    let mut ex = Executor::new(be, &weights.tensors(), g, "default", Buckets::default())
        .expect("an executor");
    let mut out = Outputs::new();
    ex.run(LaneId::MAIN, &batch.batch(), &mut out).expect("a run");
    out
}

#[test]
fn the_declaration_opens_and_routes_to_its_backend() {
    let fake = Dispatch::new(&device("fake:1").unwrap()).unwrap();
    assert_eq!(fake.caps().backend, "reference");
    assert_eq!(fake.device().to_string(), "fake:1");
    assert_eq!(run(fake), run(Reference));
    let e = Dispatch::new(&device("fake:2").unwrap()).unwrap_err();
    assert!(matches!(&e, Error::Device(m) if m.contains("there are 2 fake devices")), "{e}");
}

#[cfg(feature = "remote")]
#[test]
fn a_backend_the_table_does_not_mark_served_is_refused_as_a_server() {
    let Err(e) = server(&device("fake:0").unwrap(), None) else { panic!("not served") };
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("`fake:0` cannot be served"), "{e}");
}
