//! The real all-MiniLM-L6-v2 through `Dispatch`, on the device `SWITCHYARD_CONFORMANCE_DEVICE`
//! names (as `cargo xtask test-all-backends` does for each device; `remote` is a flex server this
//! test binary starts), else on flex.

mod common;

use std::path::{Path, PathBuf};

use switchyard_core::{Backend, Buckets, DType};
use switchyard_dispatch::{Device, Dispatch};
use switchyard_models::{Model, Runner};

fn model_dir() -> PathBuf {
    switchyard_models::fetched_model_dir("all-MiniLM-L6-v2").unwrap()
}

/// sentence-transformers' sentences and their f32 embeddings (crates/models/tests/fixtures).
fn fixture() -> (Vec<String>, Vec<Vec<f64>>) {
    let fixture: serde_json::Value =
        serde_json::from_str(include_str!("../../models/tests/fixtures/minilm.json")).unwrap();
    let sentences =
        fixture["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().into());
    (sentences.collect(), rows(&fixture["embeddings"]))
}

/// A JSON array of arrays of numbers.
fn rows(v: &serde_json::Value) -> Vec<Vec<f64>> {
    let row =
        |r: &serde_json::Value| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    v.as_array().unwrap().iter().map(row).collect()
}

/// The largest absolute difference between two rows of the same length.
fn worst(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "row lengths differ");
    got.iter().zip(want).map(|(x, y)| (f64::from(*x) - y).abs()).fold(0.0, f64::max)
}

/// On a cube device, a check to call after the run that its kernels folded what they fold on
/// the real model: the embeddings into their LayerNorm, every layer's residual adds into its
/// LayerNorms and its projections' bias into its attention, where the epilogue kernel takes the
/// linear layers (not where the f32 GEMM does: it applies the bias and residual itself). A
/// checkpoint's dropout, which inference does not apply, must not stop them.
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cubecl-cpu"))]
fn assert_folded(be: &Dispatch, dtype: DType) -> impl FnOnce() + use<> {
    let kernels = match be {
        Dispatch::Cube { backend, .. } => Some(backend.kernels().clone()),
        #[allow(unreachable_patterns)] // with the cube backend alone
        _ => None,
    };
    move || {
        let Some(k) = kernels else { return };
        if k.set().linear && dtype == DType::F32 {
            return;
        }
        let l = k.launched();
        assert!(l.attention > 0, "{dtype}: attention ran in our kernel");
        assert_eq!(l.attention_bias, l.attention, "{dtype}: every layer's bias in its attention");
        assert_eq!(l.norm_epilogue, 2 * l.attention, "{dtype}: both adds of a layer in its norms");
        assert!(l.embed_norm > 0, "{dtype}: the embeddings in their norm");
        assert_eq!(l.norm, l.norm_epilogue + l.embed_norm, "{dtype}: no norm apart");
    }
}

#[cfg(not(any(feature = "wgpu", feature = "cuda", feature = "rocm", feature = "cubecl-cpu")))]
fn assert_folded(_: &Dispatch, _: DType) -> impl FnOnce() + use<> {
    || {}
}

#[test]
fn minilm_matches_sentence_transformers_on_each_device() {
    let (sentences, want) = fixture();
    let sentences: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let d = common::device();
    let model = Model::load(&model_dir()).unwrap();
    let be = Dispatch::new(&d).unwrap();
    let folded = assert_folded(&be, DType::F32);
    let mut e = Runner::new(model, be, Buckets::default()).unwrap();
    let got = e.embed(&sentences, |_| {}).unwrap();
    folded();
    // The tolerance of crates/models/tests/minilm.rs: measured worst 2.8e-7 on flex.
    assert_close(&d, "all-MiniLM-L6-v2", &sentences, &got, &want, 2e-6);
}

/// Each embedding of `got` within `tolerance` of `want`'s in every value, on device `d`
/// (zeros of the right width on capture, which executes nothing).
fn assert_close(
    d: &Device,
    model: &str,
    sentences: &[&str],
    got: &[Vec<f32>],
    want: &[Vec<f64>],
    tolerance: f64,
) {
    assert_eq!(got.len(), want.len(), "{d} {model}");
    for (s, (a, b)) in sentences.iter().zip(got.iter().zip(want)) {
        assert_eq!(a.len(), b.len(), "{d} {model}: {s:?}");
        if d.family().backend == "capture" {
            assert!(a.iter().all(|&x| x == 0.0), "capture executes nothing");
            continue;
        }
        let worst = worst(a, b);
        assert!(worst <= tolerance, "{d} {model}: {s:?}: max difference {worst}");
    }
}

/// The tiny checkpoint `name`'s mean-pooled outputs on the device against transformers'
/// (crates/models/tests/fixtures/tiny), within the 1e-5 the models crate holds flex and the
/// reference to (values of about 1).
fn tiny_matches_transformers(d: &Device, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny");
    let dir = dir.join(name);
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    let want: serde_json::Value = serde_json::from_str(&text).unwrap();
    let sentences: Vec<&str> =
        want["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    let model = Model::load(&dir).unwrap();
    let mut e = Runner::new(model, Dispatch::new(d).unwrap(), Buckets::default()).unwrap();
    let got = e.embed(&sentences, |_| {}).unwrap();
    assert_close(d, name, &sentences, &got, &rows(&want["mean_pooled"]), 1e-5);
}

/// The families whose attention scores depend on relative positions, on the device: MPNet's
/// bias (shared by every layer), T5's (with RMS norms and a gated feed-forward), and DeBERTa's
/// disentangled attention (v3's shape, each layer's own tables; backends without a kernel for
/// it run Burn's ops). The last sentence is 142 tokens long, so keys reach every bucket on both
/// sides of their queries.
#[test]
fn position_bias_families_match_transformers_on_each_device() {
    let d = common::device();
    for name in ["mpnet", "t5-gated", "deberta"] {
        tiny_matches_transformers(&d, name);
    }
}

/// The post-norm rotary families on the device: NomicBERT (separate gate and up projections),
/// GTE (one up-and-gate matrix sliced, an activation alone; and with NTK-scaled positions) and
/// Jina v3 (not gated), rotated up to position 141.
#[test]
fn rotary_families_match_transformers_on_each_device() {
    let d = common::device();
    for name in ["nomic", "gte", "gte-ntk", "jina"] {
        tiny_matches_transformers(&d, name);
    }
}

/// Gemma with bidirectional attention on the device (scaled embeddings, per-head norms, shared
/// key and value heads, heads wider than the model's width over heads, local layers), and
/// Qwen3 with its causal mask.
#[test]
fn gemma_and_qwen3_match_transformers_on_each_device() {
    let d = common::device();
    for name in ["gemma", "qwen3"] {
        tiny_matches_transformers(&d, name);
    }
}

/// In each half-precision dtype the device computes in, every embedding keeps the direction of
/// sentence-transformers' f32 one, per sentence. f16: cosine at least 0.9999, the bound set for
/// GPUs in half precision (measured worst: 0.999996 on flex, tch:cpu and llvmpipe). bf16: at
/// least 0.9995, since its 8 bits do not keep 0.9999 where every op computes in bf16, norms and
/// softmax included (tch:cpu: 0.99984 worst); flex's bf16, linear layers only, keeps 0.99997.
#[test]
#[allow(clippy::print_stderr)] // each cosine, for the figures in docs/backends.md
fn minilm_in_half_precision_keeps_its_direction_on_each_device() {
    let (sentences, want) = fixture();
    let sentences: Vec<&str> = sentences.iter().map(String::as_str).collect();
    let d = common::device();
    let dtypes = Dispatch::new(&d).unwrap().caps().dtypes;
    for dtype in dtypes.into_iter().filter(|t| matches!(t, DType::F16 | DType::Bf16)) {
        let backend = Dispatch::new(&d).unwrap().with_dtype(dtype).unwrap();
        let folded = assert_folded(&backend, dtype);
        let model = Model::load(&model_dir()).unwrap();
        let mut e = Runner::new(model, backend, Buckets::default()).unwrap();
        let got = e.embed(&sentences, |_| {}).unwrap();
        folded();
        if d.family().backend == "capture" {
            continue;
        }
        for (s, (a, b)) in sentences.iter().zip(got.iter().zip(&want)) {
            let dot: f64 = a.iter().zip(b).map(|(x, y)| f64::from(*x) * y).sum();
            let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
            let cos =
                dot / (norm(&mut a.iter().map(|&x| f64::from(x))) * norm(&mut b.iter().copied()));
            eprintln!("{d} {dtype}: cosine {cos:.7} {s:?}");
            let bound = if dtype == DType::F16 { 0.9999 } else { 0.9995 };
            assert!(cos >= bound, "{d} in {dtype}: {s:?}: cosine {cos} (bound {bound})");
        }
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
