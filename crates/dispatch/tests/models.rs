//! The real all-MiniLM-L6-v2 through `Dispatch`, on every device this build has, or on the one
//! named by `SWITCHYARD_CONFORMANCE_DEVICE` (as `cargo xtask test-all-backends` does).

use std::path::PathBuf;

use switchyard_core::Buckets;
use switchyard_dispatch::{Device, Dispatch};
use switchyard_models::{Model, Runner};

fn model_dir() -> PathBuf {
    switchyard_models::fetched_model_dir("all-MiniLM-L6-v2").unwrap()
}

#[test]
fn minilm_matches_sentence_transformers_on_each_device() {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("../../models/tests/fixtures/minilm.json")).unwrap();
    let sentences: Vec<&str> =
        fixture["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let want: Vec<Vec<f64>> = fixture["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
        .collect();
    let devices = match std::env::var("SWITCHYARD_CONFORMANCE_DEVICE") {
        Ok(d) => vec![d.parse::<Device>().expect("a device name")],
        Err(_) => Device::available(),
    };
    for d in devices {
        let model = Model::load(&model_dir()).unwrap();
        let mut e = Runner::new(model, Dispatch::new(&d).unwrap(), Buckets::default()).unwrap();
        let got = e.embed(&sentences, |_| {}).unwrap();
        assert_eq!(got.len(), want.len(), "{d}");
        for (s, (a, b)) in sentences.iter().zip(got.iter().zip(&want)) {
            assert_eq!(a.len(), b.len(), "{d}: {s:?}");
            if d == Device::Capture {
                assert!(a.iter().all(|&x| x == 0.0), "capture executes nothing");
                continue;
            }
            // The tolerance of crates/models/tests/minilm.rs: measured worst 2.8e-7 on flex.
            let worst = a.iter().zip(b).map(|(x, y)| (f64::from(*x) - y).abs()).fold(0.0, f64::max);
            assert!(worst <= 2e-6, "{d}: {s:?}: max difference {worst}");
        }
    }
}
