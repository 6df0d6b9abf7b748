//! The real all-MiniLM-L6-v2 through `Dispatch`, on the device `SWITCHYARD_CONFORMANCE_DEVICE`
//! names (as `cargo xtask test-all-backends` does for each device; `remote` is a flex server this
//! test binary starts), else on flex.

mod common;

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
    let d = common::device();
    let model = Model::load(&model_dir()).unwrap();
    let mut e = Runner::new(model, Dispatch::new(&d).unwrap(), Buckets::default()).unwrap();
    let got = e.embed(&sentences, |_| {}).unwrap();
    assert_eq!(got.len(), want.len(), "{d}");
    for (s, (a, b)) in sentences.iter().zip(got.iter().zip(&want)) {
        assert_eq!(a.len(), b.len(), "{d}: {s:?}");
        if d.family().backend == "capture" {
            assert!(a.iter().all(|&x| x == 0.0), "capture executes nothing");
            continue;
        }
        // The tolerance of crates/models/tests/minilm.rs: measured worst 2.8e-7 on flex.
        let worst = a.iter().zip(b).map(|(x, y)| (f64::from(*x) - y).abs()).fold(0.0, f64::max);
        assert!(worst <= 2e-6, "{d}: {s:?}: max difference {worst}");
    }
}

/// The dispatch promise across machines: two remote servers and a local flex device in one
/// process, the same model on each, the same outputs.
#[cfg(all(feature = "remote", feature = "flex"))]
#[test]
fn two_remote_servers_and_local_flex_give_the_same_embeddings() {
    let sentences =
        ["A remote device is named by its host and port.", "Zwei Server, ein Modell.", "ok"];
    let servers = [common::Server::start(), common::Server::start()];
    let devices = [servers[0].device(), servers[1].device(), Device::flex()];
    assert_ne!(devices[0], devices[1]);
    let mut runners: Vec<Runner<Dispatch>> = devices
        .iter()
        .map(|d| {
            let model = Model::load(&model_dir()).unwrap();
            Runner::new(model, Dispatch::new(d).unwrap(), Buckets::default()).unwrap()
        })
        .collect();
    let mut got = Vec::new();
    // Interleaved, so each call must go to the device that holds its runner's weights.
    for _ in 0..2 {
        for r in &mut runners {
            got.push(r.embed(&sentences, |_| {}).unwrap());
        }
    }
    // The servers host burn-flex, which runs the same ops on both sides of one machine: their
    // values are identical. Local flex runs its own kernels: within the MiniLM test's 2e-6 of
    // the reference each, so within 4e-6 of each other.
    let (remote, local) = (&got[0], &got[2]);
    for i in [1, 3, 4] {
        assert_eq!(&got[i], remote, "call {i}: the servers agree exactly, every time");
    }
    assert_eq!(&got[5], local, "local flex gives the same values every time");
    for (a, b) in remote.iter().flatten().zip(local.iter().flatten()) {
        assert!((a - b).abs() <= 4e-6, "remote {a} vs local {b}");
    }
}

#[cfg(feature = "remote")]
#[test]
#[ignore = "run by the remote tests as their server process"]
fn remote_server_process() {
    common::serve_if_asked();
}
