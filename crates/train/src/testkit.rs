//! The PyTorch fixtures of this crate's tests, checked on any Burn backend: what switchyard-train's
//! own tests run on burn-flex, and what `cargo xtask test-all-backends` runs on every device that
//! trains (feature `testkit`; not part of the interface).
//!
//! `tests/fixtures/make_fixtures.py` wrote, from torch, transformers and sentence-transformers:
//! for eight tiny models, every parameter's gradient of `L = sum(out * R)` over the inputs the
//! fixture lists (`R[i][j] = sin(0.7 i + 1.3 j + 0.1)`); and five short AdamW runs, each step's
//! loss and the final weights (dropout off in both).

use std::path::{Path, PathBuf};

use burn_backend::Backend as BurnBackend;
use burn_backend::ops::FloatTensorOps;
use switchyard_core::{BatchBuf, Caps};
use switchyard_models::{Encoded, Model};

use crate::{Ad, Graded, Job, Settings, Task, Trainer};

/// This crate's fixture folder.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A tiny checkpoint of switchyard-models' fixtures.
pub fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/tiny").join(name)
}

fn json(file: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join(file)).expect("a fixture");
    serde_json::from_str(&text).expect("a JSON fixture")
}

/// The tensors of a safetensors fixture under `prefix/`, by the rest of their names.
pub fn torch_tensors(file: &str, prefix: &str) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(fixtures().join(file)).expect("a fixture");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("a safetensors fixture");
    let mut out: Vec<(String, Vec<usize>, Vec<f32>)> = st
        .tensors()
        .into_iter()
        .filter_map(|(name, view)| {
            let rest = name.strip_prefix(prefix)?.strip_prefix('/')?.to_owned();
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            Some((rest, view.shape().to_vec(), values))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Attention key biases: their gradient is zero in exact arithmetic (softmax ignores what is
/// added to every score of a query alike), so every engine's gradient of them is rounding
/// noise, and AdamW, which divides a gradient by its own size, moves them by noise too.
pub fn key_bias(name: &str) -> bool {
    name.ends_with("attention.self.key.bias") || name.ends_with("attention.k_lin.bias")
}

/// The tiny models with PyTorch gradients.
pub fn gradient_models() -> Vec<String> {
    json("gradients.json")["models"].as_object().expect("models").keys().cloned().collect()
}

/// How a backend's gradients compare with PyTorch's for one model.
#[derive(Clone, Debug)]
pub struct GradientCheck {
    /// `|L - L_torch| / (1 + |L_torch|)`.
    pub loss: f64,
    /// Over every weight but the key biases: the largest `|g - g_torch| / (|g_torch| + rms)`,
    /// `rms` the root mean square of that tensor's torch gradient.
    pub relative: f64,
    /// Over the key biases: the largest `|g - g_torch|` as a share of the model's gradient RMS.
    pub key_bias: f64,
}

/// Runs the gradient fixture of `name` on `B`.
pub fn check_gradients<B: BurnBackend>(device: B::Device, caps: Caps, name: &str) -> GradientCheck {
    let case = &json("gradients.json")["models"][name];
    let model = Model::load(&tiny(name)).expect("a tiny model");
    let t = model.tokenizer();
    let kind = case["kind"].as_str().expect("a kind");
    // Each input a text, or a `[text, pair]` whose pair may be null.
    let encoded: Vec<Encoded> = case["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|i| {
            match (i.as_str(), i.get(0).and_then(|a| a.as_str()), i.get(1).and_then(|b| b.as_str()))
            {
                (Some(text), _, _) | (None, Some(text), None) => t.encode(text),
                (None, Some(a), Some(b)) => t.encode_pair(a, b),
                _ => panic!("{name}: an input that is neither a text nor a pair: {i}"),
            }
        })
        .collect::<Result<_, _>>()
        .expect("tokens");
    let mut buf = BatchBuf::new();
    for e in &encoded {
        let markers: Vec<u32> = if kind == "tokens" {
            e.word_starts().iter().map(|&(p, _)| p).collect()
        } else {
            Vec::new()
        };
        buf.push(&e.ids, Some(&e.types), &markers).expect("a batch");
    }
    let graded = Graded::<B>::of_model(device.clone(), caps, &model).expect("graded");
    let pass = graded.forward(&buf.batch(), false, Vec::new()).expect("a forward pass");
    let out = pass.outputs[0].clone().expect("output rows");
    let [rows, cols] = switchyard_burn::generic::dims::<Ad<B>>(&out);
    let r: Vec<f32> = (0..rows)
        .flat_map(|i| (0..cols).map(move |j| (0.7 * i as f64 + 1.3 * j as f64 + 0.1).sin() as f32))
        .collect();
    let r = switchyard_burn::floats::<Ad<B>>(r, &[rows, cols], &device);
    let loss = Ad::<B>::float_sum(Ad::<B>::float_mul(out, r));
    let value = f64::from(crate::loss::scalar::<Ad<B>>(loss.clone()).expect("a loss"));
    let want_loss = case["loss"].as_f64().expect("a loss");
    let grads = pass.backward(loss).params;
    let want = torch_tensors("gradients.safetensors", name);
    let info = graded.param_info();
    assert_eq!(want.len(), info.len(), "{name}: every parameter has a gradient in both");
    let rms = |v: &[f32]| {
        (v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / v.len().max(1) as f64).sqrt()
    };
    let all: Vec<f32> = want.iter().flat_map(|(_, _, v)| v.iter().copied()).collect();
    let model_rms = rms(&all);
    let mut check = GradientCheck {
        loss: (value - want_loss).abs() / (1.0 + want_loss.abs()),
        relative: 0.0,
        key_bias: 0.0,
    };
    for (w, g) in info.iter().zip(grads) {
        let (_, shape, values) = want.iter().find(|(n, _, _)| *n == w.name).expect("torch has it");
        assert_eq!(shape, &w.shape, "{name}: {}", w.name);
        let got = switchyard_burn::read_f32::<B>(g.expect("a gradient")).expect("read back");
        let scale = rms(values);
        for (a, b) in got.iter().zip(values) {
            let d = f64::from((a - b).abs());
            if key_bias(&w.name) {
                check.key_bias = check.key_bias.max(d / model_rms);
            } else {
                check.relative = check.relative.max(d / (f64::from(b.abs()) + scale + 1e-30));
            }
        }
    }
    check
}

/// The training runs with PyTorch results.
pub fn parity_cases() -> Vec<String> {
    json("parity.json")["cases"].as_object().expect("cases").keys().cloned().collect()
}

/// How a backend's training run compares with PyTorch's.
#[derive(Clone, Debug)]
pub struct ParityCheck {
    /// This run's losses and torch's.
    pub losses: (Vec<f32>, Vec<f32>),
    /// The largest `|w - w_torch|` over every weight but the key biases, after the run.
    pub weights: f64,
    /// The same over the key biases, as a share of what AdamW can move a weight in the run
    /// (its rate, each step).
    pub key_bias: f64,
}

/// Runs the training fixture `case` on `B` through [`Trainer::fit`], exporting to a scratch
/// folder that it removes.
pub fn check_parity<B: BurnBackend>(device: B::Device, caps: Caps, case: &str) -> ParityCheck {
    let fixture = json("parity.json");
    let (c, s) = (&fixture["cases"][case], &fixture["settings"]);
    let task = match case {
        "mnrl" | "cosent" => Task::Embed,
        "words" => Task::Tokens,
        _ => Task::Classify,
    };
    let mut settings = Settings {
        epochs: c["epochs"].as_u64().expect("epochs") as usize,
        lr: s["lr"].as_f64().expect("lr"),
        warmup_ratio: s["warmup_ratio"].as_f64().expect("warmup"),
        max_grad_norm: s["max_grad_norm"].as_f64().expect("clip"),
        batch_tokens: 1 << 20,
        batch_size: c["batch_size"].as_u64().expect("batch size") as usize,
        shuffle: false,
        dropout: false,
        ..Settings::default()
    };
    settings.adamw.weight_decay = s["weight_decay"].as_f64().expect("decay");
    settings.adamw.eps = s["eps"].as_f64().expect("eps");
    let out = std::env::temp_dir().join(format!(
        "switchyard-parity-{}-{case}-{}",
        std::process::id(),
        B::name(&device)
    ));
    let _ = std::fs::remove_dir_all(&out);
    let job = Job {
        model: tiny(c["model"].as_str().expect("a model")),
        task,
        data: fixtures().join(c["data"].as_str().expect("data")),
        eval: None,
        out: out.clone(),
        labels: None,
        max_len: None,
        resume: false,
        settings: settings.clone(),
    };
    let report = Trainer::<B>::fit(device, caps, &job, &mut |_| {}).expect("a training run");
    let torch_losses: Vec<f32> = serde_json::from_value(c["losses"].clone()).expect("losses");
    let trained = Model::load(&out).expect("the export loads");
    let reach = settings.lr * torch_losses.len() as f64;
    let mut check =
        ParityCheck { losses: (report.losses, torch_losses), weights: 0.0, key_bias: 0.0 };
    for (name, shape, values) in torch_tensors("parity.safetensors", case) {
        let t = trained.checkpoint().tensor(&name).expect("every tensor torch has");
        assert_eq!(t.shape, shape.as_slice(), "{case}: {name}");
        let mut got = Vec::new();
        t.extend_f32(&mut got);
        let d = got.iter().zip(&values).map(|(a, b)| f64::from((a - b).abs())).fold(0.0, f64::max);
        if key_bias(&name) {
            check.key_bias = check.key_bias.max(d / reach);
        } else {
            check.weights = check.weights.max(d);
        }
    }
    std::fs::remove_dir_all(&out).expect("the scratch folder");
    check
}
