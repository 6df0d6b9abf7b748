//! Tiny random BERT, RoBERTa, DistilBERT, MPNet, ELECTRA, ALBERT, ModernBERT, T5, DeBERTa,
//! NomicBERT, GTE and Jina v3 checkpoints against transformers.
//!
//! `fixtures/make_fixtures.py` made each checkpoint (fixed seeds, every weight random, LayerNorm
//! shifts and biases non-zero) and recorded transformers' token ids and mean-pooled last hidden
//! states (f32, computed without padding).

mod common;

use std::path::{Path, PathBuf};

use common::{expected as json, numbers, rows, strings, tiny, worst};
use switchyard_core::{
    Backend, Buckets, Disentangled, Gate, Graph, Op, PoolMode, PositionBias, Reference, Rows, Val,
};
use switchyard_models::{
    Arch, Marked, Model, Pooling, Prompt, Prompts, Read, RopeScaling, Runner, Task,
};

struct Expected {
    sentences: Vec<String>,
    ids: Vec<Vec<u32>>,
    mean: Vec<Vec<f64>>,
}

fn expected(arch: &str) -> Expected {
    let v = json(arch);
    Expected {
        sentences: strings(&v["sentences"]),
        ids: v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| numbers(r).into_iter().map(|x| x as u32).collect())
            .collect(),
        mean: rows(&v["mean_pooled"]),
    }
}

/// Every value within 1e-5 of transformers' (values of about 1; the worst seen is about 1e-6).
fn check<B: Backend>(arch: &str, backend: B) {
    for (s, worst) in differences(arch, &tiny(arch), backend) {
        assert!(worst <= 1e-5, "{arch}: {s:?}: max difference {worst}");
    }
}

/// Each of `arch`'s sentences with the largest difference between its mean-pooled row from the
/// checkpoint in `dir` and transformers' for `arch`; the token ids must be transformers'.
fn differences<B: Backend>(arch: &str, dir: &Path, backend: B) -> Vec<(String, f64)> {
    let e = expected(arch);
    let model = Model::load(dir).unwrap();
    for (s, want) in e.sentences.iter().zip(&e.ids) {
        assert_eq!(&model.tokenizer().encode(s).unwrap().ids, want, "{arch}: {s:?}");
    }
    let mut emb = Runner::new(model, backend, Buckets::default()).unwrap();
    let texts: Vec<&str> = e.sentences.iter().map(String::as_str).collect();
    let got = emb.embed(&texts, |_| {}).unwrap();
    e.sentences.iter().zip(&got).zip(&e.mean).map(|((s, a), b)| (s.clone(), worst(a, b))).collect()
}

#[test]
fn bert_matches_transformers() {
    check("bert", switchyard_flex::flex());
    check("bert", Reference);
}

#[test]
fn roberta_matches_transformers_with_positions_past_the_padding_index() {
    let m = Model::load(&tiny("roberta")).unwrap();
    assert_eq!((m.config().arch, m.config().position_offset), (Arch::Roberta, 1));
    check("roberta", switchyard_flex::flex());
    check("roberta", Reference);
}

#[test]
fn distilbert_matches_transformers() {
    assert_eq!(Model::load(&tiny("distilbert")).unwrap().config().arch, Arch::DistilBert);
    check("distilbert", switchyard_flex::flex());
    check("distilbert", Reference);
}

/// MPNet's relative position bias: its fixture's last sentence is 142 tokens long, so keys
/// reach every bucket on both sides of their queries, the shared farthest ones included.
#[test]
fn mpnet_matches_transformers_with_its_relative_position_bias() {
    let m = Model::load(&tiny("mpnet")).unwrap();
    assert_eq!((m.config().arch, m.config().position_offset), (Arch::MpNet, 2));
    let biased = |op: &Op| matches!(op, Op::Attention { position_bias: Some(_), .. });
    assert_eq!(m.graph().ops.iter().filter(|op| biased(op)).count(), 2, "one a layer");
    let tables = m.graph().weights.iter().filter(|w| w.name.contains("relative_attention_bias"));
    assert_eq!(tables.count(), 1, "one table for every layer");
    assert!(expected("mpnet").ids.iter().any(|ids| ids.len() > 128 + 1));
    check("mpnet", switchyard_flex::flex());
    check("mpnet", Reference);
}

/// DeBERTa's log buckets of relative position, against transformers' `make_log_bucket_position`
/// over -700..700 for v3's (256, 512) and the tiny fixtures' (8, 20).
#[test]
fn deberta_buckets_match_transformers() {
    let e = json("deberta");
    let mut checked = 0;
    for (key, want) in e["buckets"].as_object().unwrap() {
        let (buckets, max_distance) = key.split_once(',').unwrap();
        let d = Disentangled {
            keys: None,
            queries: None,
            span: 1,
            buckets: buckets.parse().unwrap(),
            max_distance: max_distance.parse().unwrap(),
        };
        for (rel, want) in (-700..=700).zip(numbers(want)) {
            assert_eq!(d.bucket(rel) as f64, want, "{key}: {rel}");
            checked += 1;
        }
    }
    assert_eq!(checked, 2 * 1401);
}

/// DeBERTa v3's shape (both position terms through each layer's own key and query weights, 8
/// log buckets up to 20, which the 142-token sentence passes, normalised relative embeddings,
/// no absolute positions) and v2's options (`pos_key_proj` / `pos_query_proj`, 16 exact
/// positions a side, clamped past them, absolute positions, token types, embeddings 24 wide
/// projected before their norm): each layer's attention reads its own two tables, derived at
/// load.
#[test]
fn deberta_matches_transformers_with_disentangled_attention() {
    for (name, span, buckets) in [("deberta", 8, 8), ("deberta-v2", 16, 0)] {
        let m = Model::load(&tiny(name)).unwrap();
        let db = m.config().deberta.unwrap();
        assert_eq!((m.config().arch, db.span, db.buckets), (Arch::DebertaV2, span, buckets));
        let tables: Vec<_> = m
            .graph()
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Attention {
                    position_bias: Some(PositionBias::Disentangled(d)), scale, ..
                } => Some((d.keys.zip(d.queries), *scale)),
                _ => None,
            })
            .collect();
        assert_eq!(tables.len(), 2, "{name}: one a layer");
        assert_ne!(tables[0].0, tables[1].0, "{name}: each layer its own tables");
        // Heads 8 wide, three terms: 1 / sqrt(24).
        assert!(tables.iter().all(|(t, s)| t.is_some() && *s == 1.0 / 24f32.sqrt()), "{name}");
        check(name, switchyard_flex::flex());
        check(name, Reference);
    }
    let e = |edit: &dyn Fn(&mut serde_json::Value)| {
        Model::load(&edited("deberta", "deberta-edited", edit).0).err().unwrap().to_string()
    };
    let err = e(&|c| c["conv_kernel_size"] = 3.into());
    assert!(err.contains("convolution layer (conv_kernel_size)"), "{err}");
    let err = e(&|c| c["pos_att_type"] = serde_json::json!(["c2p", "p2p"]));
    assert!(err.contains("pos_att_type `p2p`"), "{err}");
    // A hostile size is refused before any table is sized from it.
    let err = e(&|c| c["position_buckets"] = i64::MAX.into());
    assert!(err.contains("Switchyard takes at most 65536"), "{err}");
    let err = e(&|c| c["position_buckets"] = 64.into());
    assert!(err.contains("has shape [16, 32]; config.json implies [128, 32]"), "{err}");
}

/// NomicBERT (SwiGLU, no biases, token types), GTE (GeGLU from one up-and-gate matrix,
/// biases, no token types, as gte-base-en-v1.5) and Jina v3 (a plain GELU feed-forward, biases,
/// token types): rotary queries and keys on every layer, no position table, with their rotary
/// bases (1000, 500000, 20000) from `rope_parameters`; the 142-token sentence reaches positions
/// far past the short ones.
#[test]
fn nomic_bert_gte_and_jina_v3_match_transformers_with_rotary_positions() {
    for (name, arch, theta, biases, types) in [
        ("nomic", Arch::NomicBert, 1000.0, false, true),
        ("gte", Arch::Gte, 500_000.0, true, false),
        ("jina", Arch::JinaV3, 20_000.0, true, true),
    ] {
        let m = Model::load(&tiny(name)).unwrap();
        let rotary = m.config().rotary.unwrap();
        assert_eq!((m.config().arch, rotary.theta), (arch, theta), "{name}");
        let g = m.graph();
        let ropes =
            g.ops.iter().filter(|op| matches!(op, Op::Rope { theta: t, .. } if *t == theta));
        assert_eq!(ropes.count(), 4, "{name}: queries and keys of two layers");
        let has = |what: &str| g.weights.iter().any(|w| w.name.contains(what));
        assert!(!has("position_embeddings"), "{name}");
        assert_eq!(has("token_type_embeddings"), types, "{name}");
        assert_eq!(has("qkv_proj.bias") || has("Wqkv.bias"), biases, "{name}");
        let gates = g.ops.iter().filter(|op| matches!(op, Op::Mul { .. } | Op::Glu { .. }));
        assert_eq!(gates.count(), if arch == Arch::JinaV3 { 0 } else { 2 }, "{name}: gated layers");
        // GTE's one up-then-gate matrix feeds one gated unit whose gate is its second half.
        let second = g.ops.iter().filter(|op| matches!(op, Op::Glu { gate: Gate::Second, .. }));
        assert_eq!(second.count(), if arch == Arch::Gte { 2 } else { 0 }, "{name}");
        check(name, switchyard_flex::flex());
        check(name, Reference);
    }
}

/// GTE with gte-base-en-v1.5's rotary settings, in the config.json keys of GTE's own code:
/// base 500000 and NTK scaling by 2, which runs as base 1e6 with positions scaled by
/// `2^(-2 / 8)` for heads 8 wide. The expected rows are transformers' GteModel with the same
/// frequencies stated its way (`linear` by `2^(2 / 8)` of base 1e6; it refuses `ntk`), which
/// the same weights read too.
#[test]
fn gte_matches_its_own_code_with_ntk_scaled_positions() {
    let m = Model::load(&tiny("gte-ntk")).unwrap();
    let rotary = m.config().rotary.unwrap();
    assert_eq!((m.config().arch, rotary.theta), (Arch::Gte, 500_000.0));
    assert_eq!(rotary.scaling, RopeScaling::Ntk(2.0));
    let scale = 2f32.powf(-0.25);
    let scaled = |op: &&Op| {
        matches!(op, Op::Rope { theta, position_scale, .. }
            if *theta == 1e6 && (position_scale - scale).abs() < 1e-7)
    };
    assert_eq!(m.graph().ops.iter().filter(scaled).count(), 4, "queries and keys of two layers");
    check("gte-ntk", switchyard_flex::flex());
    check("gte-ntk", Reference);
    let converted = edited("gte-ntk", "linear", &|c| {
        c["model_type"] = "gte".into();
        c["rope_scaling"] = serde_json::Value::Null;
        c["rope_parameters"] = serde_json::json!({"rope_type": "linear", "rope_theta": 1e6, "factor": 2f64.powf(0.25)});
    });
    for (s, worst) in differences("gte-ntk", &converted.0, Reference) {
        assert!(worst <= 1e-5, "transformers' form: {s:?}: max difference {worst}");
    }
    // The scaling matters at these lengths: the same weights unscaled are far from the rows.
    let plain = edited("gte-ntk", "unscaled", &|c| c["rope_scaling"] = serde_json::Value::Null);
    let far = differences("gte-ntk", &plain.0, Reference);
    let moved = far.iter().filter(|(_, worst)| *worst > 1e-2).count();
    assert!(moved >= far.len() - 1, "only the one-token sentence may stay: {far:?}");
}

/// Settings NomicBERT's and GTE's published configs may carry that change the computation are
/// errors that name them; the checkpoint's names must be one of the two families'.
#[test]
fn nomic_bert_and_gte_settings_not_built_are_refused() {
    let refused = |base: &str, edit: &dyn Fn(&mut serde_json::Value), want: &str| {
        let dir = edited(base, &format!("{base}-edited"), edit);
        let err = Model::load(&dir.0).err().unwrap().to_string();
        assert!(err.contains(want), "{base}: {err}");
    };
    refused("nomic", &|c| c["rotary_scaling_factor"] = 2.into(), "rotary_scaling_factor 2");
    refused("nomic", &|c| c["prenorm"] = true.into(), "`prenorm: true` (NomicBERT)");
    refused("nomic", &|c| c["num_experts"] = 8.into(), "mixture-of-experts");
    refused("nomic", &|c| c["rotary_emb_scale_base"] = 512.into(), "rotary_emb_scale_base 512");
    let mixed = serde_json::json!({"type": "ntk", "factor": 2.0, "mixed_b": 0.7});
    refused("gte", &|c| c["rope_scaling"] = mixed.clone(), "rope_scaling's mixed_b 0.7");
    let logn = "`logn_attention_scale: true` (GTE)";
    refused("gte", &|c| c["logn_attention_scale"] = true.into(), logn);
    let clip = "`logn_attention_clip1: true` (GTE)";
    refused("gte", &|c| c["logn_attention_clip1"] = true.into(), clip);
    let names = "no `encoder.layers.0.attn.out_proj.weight` (NomicBERT's";
    refused("gte", &|c| c["model_type"] = "nomic_bert".into(), names);
}

/// ELECTRA's embeddings, 24 wide, projected to its layers' 32.
#[test]
fn electra_matches_transformers_with_its_embeddings_projected() {
    let m = Model::load(&tiny("electra")).unwrap();
    assert_eq!((m.config().arch, m.config().embedding, m.config().hidden), (Arch::Electra, 24, 32));
    check("electra", switchyard_flex::flex());
    check("electra", Reference);
}

/// ALBERT: 24-wide embeddings projected to 32, and three layers that run two groups of two
/// shared layers (0 and 1 run group 0, 2 runs group 1): six layers over eight layers' weights,
/// each declared once.
#[test]
fn albert_matches_transformers_with_its_layers_shared() {
    let m = Model::load(&tiny("albert")).unwrap();
    assert_eq!((m.config().arch, m.config().groups), (Arch::Albert, (2, 2)));
    let g = m.graph();
    let attention = g.ops.iter().filter(|op| matches!(op, Op::Attention { .. })).count();
    assert_eq!(attention, 6, "three layers of two");
    let queries = g.weights.iter().filter(|w| w.name.ends_with("attention.query.weight"));
    assert_eq!(queries.count(), 4, "two groups of two, each weight declared once");
    check("albert", switchyard_flex::flex());
    check("albert", Reference);
}

/// T5's encoder: RMS pre-norms, unscaled scores with the first layer's position bias on every
/// layer (8 buckets up to 20, which the 142-token sentence passes), heads of 4 x 6 columns in a
/// model 32 wide, and a ReLU or a gated-GELU feed-forward.
#[test]
fn t5_encoders_match_transformers_plain_and_gated() {
    for (name, gated) in [("t5", false), ("t5-gated", true)] {
        let m = Model::load(&tiny(name)).unwrap();
        let t5 = m.config().t5.unwrap();
        assert_eq!((m.config().arch, t5.head_dim, t5.gated), (Arch::T5, 6, gated), "{name}");
        let products = m.graph().ops.iter().filter(|op| matches!(op, Op::Mul { .. })).count();
        assert_eq!(products, if gated { 2 } else { 0 }, "{name}: a product a gated layer");
        check(name, switchyard_flex::flex());
        check(name, Reference);
    }
    let e = Model::load(
        &edited("t5", "t5-classifier", &|c| {
            c["architectures"] = serde_json::json!(["T5ForSequenceClassification"]);
        })
        .0,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("T5 as a sequence classifier"), "{e}");
}

/// Gemma 3 with bidirectional attention (EmbeddingGemma's shape): embeddings scaled by
/// `sqrt(32)`, RMS norms scaled by `1 + weight` before and after attention and feed-forward,
/// four query heads 12 wide sharing two key and value heads, queries and keys normalised per
/// head and rotated with bases 100 (local) and 10000 (global), two local layers seeing 3 tokens
/// each side and a global one.
#[test]
fn gemma_matches_transformers_with_shared_heads_and_local_layers() {
    let m = Model::load(&tiny("gemma")).unwrap();
    let gm = m.config().lm.clone().unwrap();
    assert_eq!((m.config().arch, gm.head_dim, gm.kv_heads, gm.window), (Arch::Gemma, 12, 2, 3));
    assert_eq!((gm.local, gm.local_theta, gm.global_theta), (vec![true, true, false], 100.0, 1e4));
    let g = m.graph();
    let scaled =
        g.ops.iter().any(|op| matches!(op, Op::Embed { scale, .. } if *scale == 32f32.sqrt()));
    assert!(scaled, "embeddings scaled by sqrt(32)");
    let per_head = g.ops.iter().filter(|op| matches!(op, Op::RmsNorm { group: Some(12), .. }));
    assert_eq!(per_head.count(), 6, "queries and keys of three layers");
    let shared = g.ops.iter().filter(|op| matches!(op, Op::Attention { kv_heads: 2, .. }));
    assert_eq!(shared.count(), 3, "two key-value heads read as they are in each layer");
    check("gemma", switchyard_flex::flex());
    check("gemma", Reference);

    // EmbeddingGemma's published config.json names the bases and the window pattern with the
    // older keys; the same weights read from them give the same rows.
    let older = edited("gemma", "older-keys", &|c| {
        let c = c.as_object_mut().unwrap();
        for key in ["rope_parameters", "layer_types", "_sliding_window_pattern"] {
            c.remove(key);
        }
        c.insert("rope_theta".into(), 10000.0.into());
        c.insert("rope_local_base_freq".into(), 100.0.into());
        c.insert("sliding_window_pattern".into(), 3.into());
    });
    for (s, worst) in differences("gemma", &older.0, Reference) {
        assert!(worst <= 1e-5, "older keys: {s:?}: max difference {worst}");
    }
    // The window matters at these lengths: a wider one moves the rows.
    let wider = edited("gemma", "wider", &|c| c["sliding_window"] = 8.into());
    let far = differences("gemma", &wider.0, Reference);
    assert!(far.iter().any(|(_, worst)| *worst > 1e-3), "{far:?}");

    let refused = |edit: &dyn Fn(&mut serde_json::Value), want: &str| {
        let dir = edited("gemma", "refused", edit);
        let err = Model::load(&dir.0).err().unwrap().to_string();
        assert!(err.contains(want), "{err}");
    };
    refused(&|c| c["use_bidirectional_attention"] = false.into(), "is a decoder");
    refused(&|c| c["attn_logit_softcapping"] = 50.0.into(), "attn_logit_softcapping 50");
    refused(&|c| c["num_key_value_heads"] = 3.into(), "3 key and value heads do not divide 4");
    refused(
        &|c| c["architectures"] = serde_json::json!(["Gemma3ForSequenceClassification"]),
        "Gemma as a sequence classifier",
    );
}

/// Qwen3's decoder (Qwen3-Embedding's shape) with its causal mask: RMS pre-norms, four query
/// heads 12 wide sharing two key and value heads, queries and keys normalised per head and
/// rotated, SwiGLU. Every token's row is compared, so a token that saw a key after it would
/// show.
#[test]
fn qwen3_matches_transformers_with_its_causal_mask() {
    let m = Model::load(&tiny("qwen3")).unwrap();
    let lm = m.config().lm.clone().unwrap();
    assert_eq!((m.config().arch, lm.head_dim, lm.kv_heads, lm.causal), (Arch::Qwen3, 12, 2, true));
    let g = m.graph();
    // Causal, and the two key-value heads read as they are (not repeated per query head).
    let causal = g
        .ops
        .iter()
        .filter(|op| matches!(op, Op::Attention { causal: true, heads: 4, kv_heads: 2, .. }));
    assert_eq!(causal.count(), 2);
    check("qwen3", switchyard_flex::flex());
    check("qwen3", Reference);
    let refused = |edit: &dyn Fn(&mut serde_json::Value), want: &str| {
        let dir = edited("qwen3", "refused", edit);
        let err = Model::load(&dir.0).err().unwrap().to_string();
        assert!(err.contains(want), "{err}");
    };
    refused(&|c| c["use_sliding_window"] = true.into(), "`use_sliding_window: true` (Qwen3)");
    refused(
        &|c| c["rope_parameters"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0}),
        "rope_type `yarn` (Qwen3)",
    );
    refused(
        &|c| c["architectures"] = serde_json::json!(["Qwen3ForSequenceClassification"]),
        "Qwen3 as a sequence classifier",
    );
}

/// ELECTRA's and ALBERT's masked-language heads narrow to the embedding width: not SPLADE; nor
/// is DeBERTa's read as one.
#[test]
fn masked_language_models_that_narrow_are_refused_as_splade() {
    for (arch, class, want) in [
        ("electra", "ElectraForMaskedLM", "ELECTRA's masked-language model"),
        ("albert", "AlbertForMaskedLM", "ALBERT's masked-language model"),
        ("deberta", "DebertaV2ForMaskedLM", "DeBERTa's masked-language model"),
    ] {
        let s = edited(arch, &format!("{arch}-mlm"), &|c| {
            c["architectures"] = serde_json::json!([class]);
        });
        let e = Model::load(&s.0).err().unwrap().to_string();
        assert!(e.contains(want), "{arch}: {e}");
    }
}

/// CamemBERT is RoBERTa under another name (transformers' class is a copy of RoBERTa's).
#[test]
fn camembert_reads_as_roberta() {
    let s = edited("roberta", "camembert", &|c| c["model_type"] = "camembert".into());
    let m = Model::load(&s.0).unwrap();
    assert_eq!((m.config().arch, m.config().position_offset), (Arch::Roberta, 1));
    let e = expected("roberta");
    let mut run = Runner::new(m, switchyard_flex::flex(), Buckets::default()).unwrap();
    let texts: Vec<&str> = e.sentences.iter().map(String::as_str).collect();
    for (a, b) in run.embed(&texts, |_| {}).unwrap().iter().zip(&e.mean) {
        assert!(worst(a, b) <= 1e-5, "{}", worst(a, b));
    }
}

/// Rotary positions with two bases, GeGLU, no biases, and a sliding window (two tokens each
/// side) shorter than most test sentences on two of the three layers.
#[test]
fn modernbert_matches_transformers_with_local_and_global_layers() {
    let m = Model::load(&tiny("modernbert")).unwrap();
    let modern = m.config().modern.clone().unwrap();
    assert_eq!((modern.local.as_slice(), modern.window), ([false, true, true].as_slice(), 2));
    check("modernbert", switchyard_flex::flex());
    check("modernbert", Reference);
}

/// A scratch copy of a tiny checkpoint, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn of(arch: &str, tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("switchyard-models-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["config.json", "model.safetensors", "tokenizer.json"] {
            std::fs::copy(tiny(arch).join(f), dir.join(f)).unwrap();
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A copy of the fixture `arch` with its `config.json` changed by `f`.
fn edited(arch: &str, tag: &str, f: &dyn Fn(&mut serde_json::Value)) -> Scratch {
    let s = Scratch::of(arch, tag);
    let path = s.0.join("config.json");
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f(&mut c);
    std::fs::write(&path, c.to_string()).unwrap();
    s
}

fn load_err(dir: &Path) -> String {
    Model::load(dir).expect_err("an error").to_string()
}

#[test]
fn broken_checkpoints_are_clear_errors() {
    assert!(load_err(Path::new("/nonexistent/dir")).contains("is not a directory"));

    let s = Scratch::of("bert", "noconfig");
    std::fs::remove_file(s.0.join("config.json")).unwrap();
    assert!(load_err(&s.0).contains("has no config.json"));

    let s = Scratch::of("bert", "bin");
    std::fs::rename(s.0.join("model.safetensors"), s.0.join("pytorch_model.bin")).unwrap();
    let e = load_err(&s.0);
    assert!(
        e.contains("has pytorch_model.bin but no model.safetensors") && e.contains("convert"),
        "{e}"
    );

    let s = Scratch::of("bert", "type");
    std::fs::write(s.0.join("config.json"), r#"{"model_type": "gpt2"}"#).unwrap();
    assert!(load_err(&s.0).contains("model type `gpt2`; supported model types: bert"));

    let s = Scratch::of("bert", "json");
    std::fs::write(s.0.join("config.json"), "{ not json").unwrap();
    assert!(load_err(&s.0).contains("not valid JSON"));

    let s = Scratch::of("bert", "shape");
    let cfg = std::fs::read_to_string(s.0.join("config.json"))
        .unwrap()
        .replace("\"intermediate_size\": 48", "\"intermediate_size\": 50");
    std::fs::write(s.0.join("config.json"), cfg).unwrap();
    let e = load_err(&s.0);
    assert!(e.contains("has shape [48, 32]; config.json implies [50, 32]"), "{e}");

    let s = Scratch::of("bert", "trunc");
    let bytes = std::fs::read(s.0.join("model.safetensors")).unwrap();
    std::fs::write(s.0.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    let e = load_err(&s.0);
    assert!(e.contains("model.safetensors"), "{e}");

    let s = Scratch::of("bert", "notok");
    std::fs::remove_file(s.0.join("tokenizer.json")).unwrap();
    assert!(load_err(&s.0).contains("has no tokenizer.json"));
}

/// Files that are there but cannot be read as files are named as such, never as missing.
#[cfg(unix)]
#[test]
fn unreadable_files_are_not_reported_missing() {
    let s = Scratch::of("bert", "fifo");
    std::fs::remove_file(s.0.join("config.json")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(s.0.join("config.json")).status();
    assert!(made.unwrap().success(), "mkfifo");
    let e = load_err(&s.0);
    assert!(e.contains("config.json is not a regular file"), "{e}");

    let s = Scratch::of("bert", "loop");
    std::fs::remove_file(s.0.join("model.safetensors")).unwrap();
    std::os::unix::fs::symlink(s.0.join("b"), s.0.join("a")).unwrap();
    std::os::unix::fs::symlink(s.0.join("a"), s.0.join("b")).unwrap();
    std::os::unix::fs::symlink(s.0.join("a"), s.0.join("model.safetensors")).unwrap();
    let e = load_err(&s.0);
    assert!(e.contains("model.safetensors: ") && !e.contains("has no model.safetensors"), "{e}");

    let s = Scratch::of("bert", "tokdir");
    std::fs::remove_file(s.0.join("tokenizer.json")).unwrap();
    std::fs::create_dir(s.0.join("tokenizer.json")).unwrap();
    assert!(load_err(&s.0).contains("tokenizer.json is not a regular file"));
}

#[test]
fn inconsistent_configs_are_errors() {
    let edit = edited;
    let s = edit("bert", "nolayers", &|c| c["num_hidden_layers"] = 0.into());
    assert!(load_err(&s.0).contains("config.json: the number of layers is 0"));
    let s = edit("distilbert", "novocab", &|c| c["vocab_size"] = 0.into());
    assert!(load_err(&s.0).contains("the vocabulary size is 0"));
    // A tokenizer that gives ids past the embedding rows is another model's: refused at load,
    // not at the first text that meets such a token.
    for arch in ["bert", "roberta", "distilbert", "mpnet", "electra", "albert", "modernbert", "t5"]
    {
        assert!(Model::load(&tiny(arch)).is_ok(), "{arch}: every fixture's ids fit");
        let s = Scratch::of(arch, "pastrows");
        let path = s.0.join("tokenizer.json");
        let mut t: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        t["model"]["vocab"]["##ing"] = 67.into();
        std::fs::write(&path, t.to_string()).unwrap();
        let e = load_err(&s.0);
        assert!(e.contains("`##ing` the id 67, past the model's 67 embedding rows"), "{arch}: {e}");
    }

    // The tiny classifier has three outputs: two labels, four, or ids off 0..3 are errors.
    let two = serde_json::json!({"0": "a", "1": "b"});
    let four = serde_json::json!({"0": "a", "1": "b", "2": "c", "3": "d"});
    let gap = serde_json::json!({"0": "a", "1": "b", "5": "c"});
    for (tag, labels) in [("two", two), ("four", four), ("gap", gap)] {
        let s = edit("bert-classifier", tag, &|c| c["id2label"] = labels.clone());
        let e = load_err(&s.0);
        assert!(e.contains("but the classifier has 3 outputs"), "{tag}: {e}");
    }

    // sentence-transformers' max_seq_length must be a positive whole number.
    let s = Scratch::of("bert", "maxlen");
    sentence_transformers(&s.0, MEAN);
    let sbert = s.0.join("sentence_bert_config.json");
    std::fs::write(&sbert, r#"{"max_seq_length": 8}"#).unwrap();
    assert_eq!(Model::load(&s.0).unwrap().tokenizer().max_len(), 8);
    for bad in ["0", "-1", "2.5", "\"long\""] {
        std::fs::write(&sbert, format!(r#"{{"max_seq_length": {bad}}}"#)).unwrap();
        let e = load_err(&s.0);
        assert!(e.contains(&format!("max_seq_length {bad} is not a positive whole")), "{e}");
    }
}

#[test]
fn prompts_are_read_from_the_sentence_transformers_config() {
    let s = Scratch::of("bert", "prompts");
    sentence_transformers(&s.0, MEAN);
    // Without the file, no prompts.
    let model = Model::load(&s.0).unwrap();
    assert_eq!(*model.prompts(), Prompts::default());

    let config = s.0.join("config_sentence_transformers.json");
    let write = |c: serde_json::Value| std::fs::write(&config, c.to_string()).unwrap();
    write(serde_json::json!({
        "prompts": {"query": "query: ", "passage": "passage: "},
        "default_prompt_name": "query",
        "similarity_fn_name": "cosine"
    }));
    let model = Model::load(&s.0).unwrap();
    let prompts = model.prompts();
    assert_eq!(prompts.named.len(), 2);
    assert_eq!(prompts.named["passage"], "passage: ");
    assert_eq!(prompts.default.as_deref(), Some("query"));
    assert_eq!(prompts.text(Prompt::Default).unwrap(), "query: ");

    // A null default and null prompts are none, as sentence-transformers writes them.
    write(serde_json::json!({"prompts": {}, "default_prompt_name": null}));
    assert_eq!(*Model::load(&s.0).unwrap().prompts(), Prompts::default());
    write(serde_json::json!({"prompts": null}));
    assert_eq!(*Model::load(&s.0).unwrap().prompts(), Prompts::default());
    write(serde_json::json!({"prompts": {"query": null}, "default_prompt_name": "query"}));
    assert_eq!(Model::load(&s.0).unwrap().prompts().text(Prompt::Default).unwrap(), "");

    // A default that names no prompt, and prompts that are not texts, are malformed.
    write(serde_json::json!({"prompts": {"query": "q: "}, "default_prompt_name": "doc"}));
    let e = load_err(&s.0);
    assert!(e.contains(r#"default_prompt_name "doc" is not one of the prompts (query)"#), "{e}");
    write(serde_json::json!({"prompts": {"query": 3}}));
    let e = load_err(&s.0);
    assert!(e.contains(r#"the prompt "query" is 3, not a text"#), "{e}");
    write(serde_json::json!({"prompts": ["query: "]}));
    let e = load_err(&s.0);
    assert!(e.contains("not a map of names to texts"), "{e}");

    // Pooling without the prompt's tokens loads; a prompt on it is refused.
    write(serde_json::json!({"prompts": {"query": "q: "}}));
    sentence_transformers(&s.0, r#"{"pooling_mode_mean_tokens": true, "include_prompt": false}"#);
    let model = Model::load(&s.0).unwrap();
    assert!(!model.prompts().pooled);
    assert!(model.prompts().text(Prompt::Named("query")).is_err());
}

#[test]
fn the_similarity_function_is_read_from_the_sentence_transformers_config() {
    use switchyard_models::scores::Similarity;
    let s = Scratch::of("bert", "similarity");
    sentence_transformers(&s.0, MEAN);
    assert_eq!(Model::load(&s.0).unwrap().similarity(), Similarity::Cosine, "no file");
    let config = s.0.join("config_sentence_transformers.json");
    let write = |c: serde_json::Value| std::fs::write(&config, c.to_string()).unwrap();
    for (name, want) in [
        (serde_json::Value::Null, Similarity::Cosine),
        ("cosine".into(), Similarity::Cosine),
        ("dot".into(), Similarity::Dot),
        ("euclidean".into(), Similarity::Euclidean),
        ("manhattan".into(), Similarity::Manhattan),
    ] {
        write(serde_json::json!({ "similarity_fn_name": name }));
        assert_eq!(Model::load(&s.0).unwrap().similarity(), want, "{name}");
    }
    // A multi-vector model's MaxSim is not a function of two embeddings.
    write(serde_json::json!({ "similarity_fn_name": "maxsim" }));
    let e = load_err(&s.0);
    assert!(
        e.contains(r#"similarity_fn_name "maxsim"; supported: cosine, dot, euclidean, manhattan"#),
        "{e}"
    );
    write(serde_json::json!({ "similarity_fn_name": 1 }));
    assert!(load_err(&s.0).contains("similarity_fn_name 1 is not a name"));
}

#[test]
fn sharded_checkpoints_load_from_their_index() {
    // One shard listed in an index is still the sharded path.
    let s = Scratch::of("bert", "shard");
    std::fs::rename(s.0.join("model.safetensors"), s.0.join("model-00001-of-00001.safetensors"))
        .unwrap();
    let names: Vec<String> = Model::load(&tiny("bert"))
        .unwrap()
        .graph()
        .weights
        .iter()
        .map(|w| w.name.clone())
        .collect();
    let map: serde_json::Map<String, serde_json::Value> =
        names.iter().map(|n| (n.clone(), "model-00001-of-00001.safetensors".into())).collect();
    std::fs::write(
        s.0.join("model.safetensors.index.json"),
        serde_json::json!({ "weight_map": map }).to_string(),
    )
    .unwrap();
    let m = Model::load(&s.0).unwrap();
    assert_eq!(m.tensors().unwrap().len(), names.len());

    // A shard in a subdirectory is inside the checkpoint; one outside it is refused unopened.
    let index = |first: serde_json::Value| {
        let mut map = map.clone();
        map.insert(names[0].clone(), first);
        let text = serde_json::json!({ "weight_map": map }).to_string();
        std::fs::write(s.0.join("model.safetensors.index.json"), text).unwrap();
    };
    std::fs::create_dir(s.0.join("sub")).unwrap();
    std::fs::copy(
        s.0.join("model-00001-of-00001.safetensors"),
        s.0.join("sub/model-00001-of-00001.safetensors"),
    )
    .unwrap();
    index("sub/model-00001-of-00001.safetensors".into());
    Model::load(&s.0).unwrap();
    for outside in ["../model-00001-of-00001.safetensors", "/etc/passwd", "sub/../../x", ""] {
        index(outside.into());
        let e = load_err(&s.0);
        assert!(e.contains("not a file inside the checkpoint directory"), "{outside}: {e}");
    }
    index(7.into());
    assert!(load_err(&s.0).contains("is mapped to 7, not a file name"));
}

struct Logits {
    inputs: Vec<(String, Option<String>)>,
    logits: Vec<Vec<f64>>,
}

fn logits(name: &str) -> Logits {
    let v = json(name);
    Logits {
        inputs: v["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_str().unwrap().to_owned(), p[1].as_str().map(str::to_owned)))
            .collect(),
        logits: rows(&v["logits"]),
    }
}

fn close_rows(name: &str, got: &[Vec<f32>], want: &[Vec<f64>]) {
    assert_eq!(got.len(), want.len(), "{name}");
    for (a, b) in got.iter().zip(want) {
        assert!(worst(a, b) <= 1e-5, "{name}: logits {a:?} vs {b:?}");
    }
}

/// BERT (pooler + classifier), RoBERTa and MPNet (classifier.dense + tanh + out_proj), ELECTRA
/// (classifier.dense + GELU + out_proj), ALBERT (pooler + classifier), DistilBERT
/// (pre_classifier + ReLU + classifier), ModernBERT (mean pooling, head.dense + GELU +
/// head.norm + classifier), DeBERTa (ContextPooler's dense + GELU, classifier), GTE (BERT's
/// pooler + classifier) and Jina v3 (RoBERTa's) heads: logits within 1e-5 of transformers',
/// labels from `id2label`.
#[test]
fn sequence_classifiers_match_transformers() {
    for name in [
        "bert-classifier",
        "roberta-classifier",
        "distilbert-classifier",
        "mpnet-classifier",
        "electra-classifier",
        "albert-classifier",
        "modernbert-classifier",
        "deberta-classifier",
        "gte-classifier",
        "jina-classifier",
    ] {
        let e = logits(name);
        let model = Model::load(&tiny(name)).unwrap();
        let Task::Classify { labels } = model.task() else { panic!("{name}: {:?}", model.task()) };
        assert_eq!(labels, &["negative", "neutral", "positive"], "{name}");
        let texts: Vec<&str> = e.inputs.iter().map(|(a, _)| a.as_str()).collect();
        let mut run = Runner::new(model, switchyard_flex::flex(), Buckets::default()).unwrap();
        close_rows(name, &run.classify(&texts, |_| {}).unwrap(), &e.logits);
        let err = run.embed(&texts, |_| {}).unwrap_err().to_string();
        assert!(err.contains("is a sequence classifier, not an embedding model"), "{err}");
    }
}

/// A one-label cross-encoder scores `(query, document)` pairs with token types 0 then 1.
#[test]
fn cross_encoders_score_pairs_like_transformers() {
    let e = logits("bert-cross-encoder");
    let model = Model::load(&tiny("bert-cross-encoder")).unwrap();
    let Task::Classify { labels } = model.task() else { panic!("{:?}", model.task()) };
    assert_eq!(labels.len(), 1);
    let mut run = Runner::new(model, Reference, Buckets::default()).unwrap();
    for ((q, d), want) in e.inputs.iter().zip(&e.logits) {
        let got = run.classify_pairs(q, &[d.as_deref().unwrap()], |_| {}).unwrap();
        close_rows("cross-encoder", &got, std::slice::from_ref(want));
    }
    let err = Runner::new(Model::load(&tiny("bert")).unwrap(), Reference, Buckets::default())
        .unwrap()
        .classify_pairs("q", &["d"], |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("is an embedding model, not a cross-encoder"), "{err}");
}

/// sentence-transformers 6 saves a CrossEncoder with a `modules.json` that lists its
/// Transformer alone: the head is then the one `architectures` names, with transformers' logits.
#[test]
fn a_cross_encoder_saved_by_sentence_transformers_6_scores_as_before() {
    let s = Scratch::of("bert-cross-encoder", "ce-st6");
    // The files sentence-transformers 6.3 writes beside the weights, as it writes them.
    let from = tiny("bert-cross-encoder");
    switchyard_models::cross_encoder_copy(&from, &s.0, serde_json::json!({}), None).unwrap();
    let model = Model::load(&s.0).unwrap();
    assert!(matches!(model.task(), Task::Classify { labels } if labels.len() == 1));
    let e = logits("bert-cross-encoder");
    let mut run = Runner::new(model, Reference, Buckets::default()).unwrap();
    for ((q, d), want) in e.inputs.iter().zip(&e.logits) {
        let got = run.classify_pairs(q, &[d.as_deref().unwrap()], |_| {}).unwrap();
        close_rows("cross-encoder", &got, std::slice::from_ref(want));
    }
    // Normalize with nothing to normalise is not a model.
    let modules = r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.models.Normalize"}]"#;
    std::fs::write(s.0.join("modules.json"), modules).unwrap();
    assert!(load_err(&s.0).contains("Normalize without a Pooling module"));
}

/// A cross-encoder's score is of its logit as sentence-transformers' `activation_fn` says,
/// found where each version of sentence-transformers saves it.
#[test]
fn a_cross_encoders_score_function_is_read_where_sentence_transformers_saves_it() {
    use switchyard_models::scores::ScoreFn;
    let s = Scratch::of("bert-cross-encoder", "score-fn");
    assert_eq!(Model::load(&s.0).unwrap().score_fn(), ScoreFn::Sigmoid, "none named");
    let config_path = s.0.join("config.json");
    let original: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    let with = |key: &str, value: serde_json::Value| {
        let mut c = original.clone();
        c[key] = value;
        std::fs::write(&config_path, c.to_string()).unwrap();
    };
    // Before sentence-transformers 4, as the ms-marco cross-encoders have it.
    with("sbert_ce_default_activation_function", "torch.nn.modules.linear.Identity".into());
    assert_eq!(Model::load(&s.0).unwrap().score_fn(), ScoreFn::Identity);
    // Sentence-transformers 4 and 5.
    with(
        "sentence_transformers",
        serde_json::json!({"activation_fn": "torch.nn.modules.activation.Tanh"}),
    );
    assert_eq!(Model::load(&s.0).unwrap().score_fn(), ScoreFn::Tanh);
    // A class outside torch is passed over, as sentence-transformers passes over an untrusted one.
    with("sbert_ce_default_activation_function", "my_package.Scaled".into());
    assert_eq!(Model::load(&s.0).unwrap().score_fn(), ScoreFn::Sigmoid);
    with("sbert_ce_default_activation_function", "torch.nn.Softmax".into());
    assert!(load_err(&s.0).contains("activation_fn `torch.nn.Softmax`; supported"));
    // Sentence-transformers 6 writes it beside the prompts, and that one wins.
    let from = tiny("bert-cross-encoder");
    switchyard_models::cross_encoder_copy(&from, &s.0, serde_json::json!({}), None).unwrap();
    with("sbert_ce_default_activation_function", "torch.nn.modules.linear.Identity".into());
    assert_eq!(Model::load(&s.0).unwrap().score_fn(), ScoreFn::Sigmoid, "ST 6's Sigmoid wins");
    // A classifier of several labels scores by softmax whatever it names.
    let c = Scratch::of("bert-classifier", "score-fn-labels");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(c.0.join("config.json")).unwrap()).unwrap();
    config["sbert_ce_default_activation_function"] = "torch.nn.Softmax".into();
    std::fs::write(c.0.join("config.json"), config.to_string()).unwrap();
    assert!(Model::load(&c.0).is_ok());
}

#[test]
fn the_maximum_length_can_be_lowered_within_the_positions() {
    let mut model = Model::load(&tiny("bert")).unwrap();
    let long = "a quick brown fox jumps over the lazy dog and over the lazy dog again";
    let full = model.tokenizer().encode(long).unwrap();
    assert!(full.ids.len() > 8);
    model.set_max_len(8).unwrap();
    let e = model.tokenizer().encode(long).unwrap();
    assert_eq!((e.ids.len(), model.tokenizer().max_len()), (8, 8));
    assert_eq!(e.ids.last(), full.ids.last(), "the truncated input still ends with [SEP]");
    let err = model.set_max_len(65).unwrap_err().to_string();
    assert!(err.contains("a maximum length of 65 tokens: the model's positions reach 64"), "{err}");
    // A pair of texts takes three special tokens ([CLS] a [SEP] b [SEP]).
    let err = model.set_max_len(3).unwrap_err().to_string();
    assert!(err.contains("a maximum length of 3 tokens leaves no room for text"), "{err}");
    assert_eq!(model.tokenizer().max_len(), 8, "a refused length changes nothing");
}

#[test]
fn texts_tokenized_on_several_threads_embed_as_they_do_one_at_a_time() {
    let backend = switchyard_flex::with_threads(Some(3)).unwrap();
    let mut run =
        Runner::new(Model::load(&tiny("bert")).unwrap(), backend, Buckets::default()).unwrap();
    assert_eq!(run.tokenize_threads(), 3);
    let texts: Vec<String> =
        (0..40).map(|i| format!("{}number {i}", "a lazy dog ".repeat(i % 7))).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let all = run.embed(&refs, |_| {}).unwrap();
    assert_eq!(all.len(), texts.len());
    for (t, a) in refs.iter().zip(&all) {
        // Every value of a row is computed in one order whatever batch the row is in, so the
        // same text embeds to the same bits alone.
        assert_eq!(a, &run.embed(&[t], |_| {}).unwrap()[0], "{t:?}");
    }
}

/// Attention ops with one query per sequence: a last layer computed for `[CLS]` alone.
fn first_row_layers(g: &Graph) -> usize {
    let per_seq = |q: &Val| g.shape(*q).rows == Rows::Seqs;
    g.ops.iter().filter(|op| matches!(op, Op::Attention { q, .. } if per_seq(q))).count()
}

/// A head that reads `[CLS]` alone gets a last layer computed for that row; heads that read
/// every token (mean pooling, token classifiers, SPLADE) keep it whole. The classifiers' logits
/// are checked against transformers by `sequence_classifiers_match_transformers`.
#[test]
fn only_heads_that_read_cls_alone_compute_the_last_layer_for_it() {
    for (name, want) in [
        ("bert-classifier", 1),
        ("roberta-classifier", 1),
        ("distilbert-classifier", 1),
        ("mpnet-classifier", 1),
        ("electra-classifier", 1),
        ("albert-classifier", 1),
        ("deberta-classifier", 1),
        ("gte-classifier", 1),
        ("jina-classifier", 1),
        ("bert-cross-encoder", 1),
        ("modernbert-classifier", 0),
        ("bert", 0),
        ("nomic", 0),
        ("bert-token-classifier", 0),
        ("nomic-token-classifier", 0),
        ("bert-splade", 0),
        ("modernbert-splade", 0),
    ] {
        let model = Model::load(&tiny(name)).unwrap();
        assert_eq!(first_row_layers(model.graph()), want, "{name}");
    }
}

/// A Pooling module's configuration: mean pooling.
const MEAN: &str = r#"{"pooling_mode_mean_tokens": true}"#;

/// `dir` as a sentence-transformers model: a Transformer, then a Pooling module configured by
/// `pooling` (JSON).
fn sentence_transformers(dir: &Path, pooling: &str) {
    let modules = r#"[
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
    ]"#;
    std::fs::write(dir.join("modules.json"), modules).unwrap();
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    std::fs::write(dir.join("1_Pooling/config.json"), pooling).unwrap();
}

/// `dir` as a sentence-transformers model that pools each text's `[CLS]` row, as BGE does.
fn pool_cls(dir: &Path) {
    sentence_transformers(
        dir,
        r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
    );
}

/// Each text's embedding against the first row of its token states, which the token graph
/// computes with the whole last layer: within 1e-5 (values of about 1 after the last norm; the
/// two graphs block their GEMMs differently, so f32 rounding may differ).
fn embeds_first_token_states<B: Backend>(model: Model, backend: B, texts: &[String]) {
    let encoded: Vec<Marked> =
        texts.iter().map(|t| (model.tokenizer().encode(t).unwrap(), Vec::new())).collect();
    let mut run = Runner::new(model, backend, Buckets::default()).unwrap();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embeddings = run.embed(&refs, |_| {}).unwrap();
    let states = run.run_encoded(&encoded, Read::Tokens).unwrap();
    for ((t, e), s) in texts.iter().zip(&embeddings).zip(&states) {
        let first: Vec<f64> = s[0].iter().map(|&v| f64::from(v)).collect();
        let worst = worst(e, &first);
        assert!(worst <= 1e-5, "{t:?}: max difference {worst}");
    }
}

/// A CLS-pooled embedder embeds each text as its first token's final row, its last layer
/// computed for that row alone; on ModernBERT that layer is local, so the row sees a window.
#[test]
fn cls_pooled_embeddings_are_the_first_token_states() {
    for arch in ["bert", "modernbert"] {
        let s = Scratch::of(arch, &format!("{arch}-cls"));
        pool_cls(&s.0);
        let model = || Model::load(&s.0).unwrap();
        assert_eq!(model().task(), &Task::Embed(Pooling { mode: PoolMode::Cls, normalize: false }));
        assert_eq!(first_row_layers(model().graph()), 1, "{arch}");
        assert_eq!(first_row_layers(model().token_graph().unwrap()), 0, "{arch}");
        let texts = expected(arch).sentences;
        embeds_first_token_states(model(), switchyard_flex::flex(), &texts);
        embeds_first_token_states(model(), Reference, &texts);
    }
}

/// The reference backend, saying it runs fastest on batches of at most `.1` tokens.
struct Preferring(Reference, usize);

impl Backend for Preferring {
    type Weights = <Reference as Backend>::Weights;
    type Plan = <Reference as Backend>::Plan;
    type State = <Reference as Backend>::State;

    fn caps(&self) -> switchyard_core::Caps {
        switchyard_core::Caps { batch_tokens: Some(self.1), ..self.0.caps() }
    }

    fn upload(
        &self,
        tensors: &[switchyard_core::HostTensor<'_>],
        graph: &Graph,
    ) -> switchyard_core::Result<Self::Weights> {
        self.0.upload(tensors, graph)
    }

    fn lower(
        &self,
        w: &Self::Weights,
        graph: &Graph,
        bucket: switchyard_core::Bucket,
    ) -> switchyard_core::Result<Self::Plan> {
        self.0.lower(w, graph, bucket)
    }

    fn state(&self, plan: &Self::Plan) -> switchyard_core::Result<Self::State> {
        self.0.state(plan)
    }

    fn run(
        &self,
        plan: &Self::Plan,
        state: &mut Self::State,
        batch: &switchyard_core::Batch<'_>,
        out: &mut switchyard_core::Outputs,
    ) -> switchyard_core::Result<()> {
        self.0.run(plan, state, batch, out)
    }
}

/// A runner keeps its batches to the size its backend asks for (`Caps::batch_tokens`), where
/// the bucket table has one that holds a full-length sequence; the embeddings are the same.
#[test]
fn batches_keep_to_the_size_the_backend_asks_for() {
    let model = || Model::load(&tiny("bert")).unwrap();
    let max_len = model().tokenizer().max_len();
    // More texts than the 1024-token bucket's 64 sequences: three batches there, one in the
    // largest bucket.
    let texts: Vec<String> = (0..150).map(|i| format!("sentence number {i} of many")).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut largest = Runner::new(model(), Reference, Buckets::default()).unwrap();
    assert_eq!(largest.batch_limit().tokens, 16384);
    let want = largest.embed(&texts, |_| {}).unwrap();
    let mut asked = Runner::new(model(), Preferring(Reference, 1024), Buckets::default()).unwrap();
    assert_eq!(asked.batch_limit().tokens, 1024);
    assert_eq!(asked.embed(&texts, |_| {}).unwrap(), want);
    // Below a full-length sequence: the smallest bucket that holds one.
    let tiny_ask = Runner::new(model(), Preferring(Reference, 8), Buckets::default()).unwrap();
    let smallest = Buckets::default()
        .stage(switchyard_core::DEFAULT_STAGE)
        .iter()
        .find(|b| b.tokens >= max_len)
        .map(|b| b.tokens);
    assert_eq!(Some(tiny_ask.batch_limit().tokens), smallest);
}

/// A Dense module to write: its folder, `config.json`, and tensors (name, shape, values).
struct DenseFiles {
    folder: &'static str,
    config: serde_json::Value,
    tensors: Vec<(&'static str, Vec<usize>)>,
}

/// `dir` as a sentence-transformers model: mean pooling, then `dense` in order, then Normalize
/// if `normalize`; each Dense module's tensors random (seeded by its place). Returns the tensors
/// written, by module, name to values.
fn with_dense(dir: &Path, dense: &[DenseFiles], normalize: bool) -> Vec<Vec<Vec<f32>>> {
    sentence_transformers(dir, MEAN);
    let mut modules = vec![
        serde_json::json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        serde_json::json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
    ];
    let mut written = Vec::new();
    for (i, d) in dense.iter().enumerate() {
        let ty = "sentence_transformers.models.Dense";
        modules.push(serde_json::json!({"idx": i + 2, "name": "d", "path": d.folder, "type": ty}));
        let folder = dir.join(d.folder);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("config.json"), d.config.to_string()).unwrap();
        let mut r = switchyard_core::testkit::Rng::new(7 + i as u64);
        let values: Vec<Vec<f32>> = d
            .tensors
            .iter()
            .map(|(_, shape)| (0..shape.iter().product()).map(|_| r.unit() * 0.5).collect())
            .collect();
        let bytes: Vec<Vec<u8>> =
            values.iter().map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = d
            .tensors
            .iter()
            .zip(&bytes)
            .map(|((name, shape), b)| {
                let view =
                    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b);
                ((*name).to_owned(), view.unwrap())
            })
            .collect();
        safetensors::serialize_to_file(views, None, &folder.join("model.safetensors")).unwrap();
        written.push(values);
    }
    if normalize {
        let ty = "sentence_transformers.models.Normalize";
        modules.push(serde_json::json!({"idx": 9, "name": "n", "path": "9_Normalize", "type": ty}));
    }
    std::fs::write(dir.join("modules.json"), serde_json::Value::from(modules).to_string()).unwrap();
    written
}

/// `act(W x)` for a row `x`, `W` `[out, in]` row-major, in f64.
fn affine(w: &[f32], x: &[f64], act: fn(f64) -> f64) -> Vec<f64> {
    w.chunks_exact(x.len())
        .map(|row| act(row.iter().zip(x).map(|(w, x)| f64::from(*w) * x).sum()))
        .collect()
}

/// What the sentence-transformers fixture below does not cover: a Dense module without a bias
/// whose residual connection is its input itself (equal widths), on flex and the reference
/// backend, with the token states (the server's `/embed_all`) still the encoder's. Checked
/// against `sigmoid(W x) + x` in f64 on the model's own mean-pooled rows: within 1e-5 (values of
/// about 1; f32 sums of 32 products).
#[test]
fn dense_modules_project_the_pooled_embedding() {
    let texts = ["the man is eating food", "a cat", "quick brown fox jumps over the lazy dog"];
    let embed = |dir: &Path, backend: &str| match backend {
        "flex" => {
            Runner::new(Model::load(dir).unwrap(), switchyard_flex::flex(), Buckets::default())
                .unwrap()
                .embed(&texts, |_| {})
                .unwrap()
        }
        _ => Runner::new(Model::load(dir).unwrap(), Reference, Buckets::default())
            .unwrap()
            .embed(&texts, |_| {})
            .unwrap(),
    };
    let s = Scratch::of("bert", "dense-residual");
    let w = with_dense(
        &s.0,
        &[DenseFiles {
            folder: "2_Dense",
            config: serde_json::json!({"in_features": 32, "out_features": 32, "bias": false,
                "activation_function": "torch.nn.modules.activation.Sigmoid", "use_residual": true}),
            tensors: vec![("linear.weight", vec![32, 32])],
        }],
        false,
    );
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    for backend in ["flex", "reference"] {
        let pooled = embed(&tiny("bert"), backend);
        for (g, x) in embed(&s.0, backend).iter().zip(&pooled) {
            let x: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
            let want: Vec<f64> =
                affine(&w[0][0], &x, sigmoid).iter().zip(&x).map(|(a, b)| a + b).collect();
            assert!(worst(g, &want) <= 1e-5, "{backend}: {g:?} vs {want:?}");
        }
    }
    let mut run =
        Runner::new(Model::load(&s.0).unwrap(), switchyard_flex::flex(), Buckets::default())
            .unwrap();
    let encoded: Vec<Marked> =
        texts.iter().map(|t| (run.model().tokenizer().encode(t).unwrap(), Vec::new())).collect();
    let states = run.run_encoded(&encoded, Read::Tokens).unwrap();
    assert_eq!(states[0][0].len(), 32);
}

/// A copy of `from`'s files and folders into `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The tiny BERT with two Dense modules (the second with SiLU and a residual projection) and
/// Normalize, as sentence-transformers 6 saves such a model (its new Pooling format included),
/// against its `encode`: within 1e-5 (unit vectors of 8 values; the worst seen is 3.3e-7).
#[test]
fn dense_modules_match_sentence_transformers() {
    let s = Scratch::of("bert", "dense-st");
    copy_tree(&tiny("bert-dense"), &s.0);
    let e = json("bert-dense");
    let texts = strings(&e["sentences"]);
    let want = rows(&e["embeddings"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let model = Model::load(&s.0).unwrap();
    assert_eq!(model.task(), &Task::Embed(Pooling { mode: PoolMode::Mean, normalize: true }));
    encodes_as(&s.0, &texts, &want);
}

/// The embeddings of `texts` from the model in `dir`, on flex and on the reference backend,
/// each within 1e-5 of `want`.
fn encodes_as(dir: &Path, texts: &[&str], want: &[Vec<f64>]) {
    let flex = Runner::new(Model::load(dir).unwrap(), switchyard_flex::flex(), Buckets::default())
        .unwrap()
        .embed(texts, |_| {})
        .unwrap();
    let reference = Runner::new(Model::load(dir).unwrap(), Reference, Buckets::default())
        .unwrap()
        .embed(texts, |_| {})
        .unwrap();
    for ((t, (g, r)), w) in texts.iter().zip(flex.iter().zip(&reference)).zip(want) {
        assert!(worst(g, w) <= 1e-5, "{t:?}: {g:?} vs {w:?}");
        assert!(worst(r, w) <= 1e-5, "reference: {t:?}: {r:?} vs {w:?}");
    }
}

/// tiny/gemma as EmbeddingGemma ships: mean pooling, two Dense modules without bias or
/// activation, Normalize, and prompts, against sentence-transformers' `encode` with the
/// `query` prompt (which puts its text before each sentence): within 1e-5 (unit vectors of 32
/// values).
#[test]
fn gemma_as_embeddinggemma_ships_matches_sentence_transformers() {
    let s = Scratch::of("gemma", "gemma-st");
    copy_tree(&tiny("gemma-st"), &s.0);
    let e = json("gemma-st");
    let model = Model::load(&s.0).unwrap();
    assert_eq!(model.task(), &Task::Embed(Pooling { mode: PoolMode::Mean, normalize: true }));
    let prompt = model.prompts().text(Prompt::Named(e["prompt"].as_str().unwrap())).unwrap();
    assert_eq!(prompt, "task: search result | query: ");
    let texts: Vec<String> =
        strings(&e["sentences"]).iter().map(|t| format!("{prompt}{t}")).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    encodes_as(&s.0, &texts, &rows(&e["embeddings"]));
}

/// Dense modules the files describe wrongly, or that Switchyard does not compute, are clear
/// errors at load.
#[test]
fn dense_modules_that_cannot_be_computed_are_refused() {
    let linear = || vec![("linear.weight", vec![16, 32]), ("linear.bias", vec![16])];
    let one =
        |config: serde_json::Value, tensors| DenseFiles { folder: "2_Dense", config, tensors };
    let base = serde_json::json!({"in_features": 32, "out_features": 16});
    let with = |key: &str, v: serde_json::Value| {
        let mut c = base.clone();
        c[key] = v;
        c
    };
    let cases = [
        (
            one(with("in_features", 31.into()), linear()),
            "in_features 31, but the embedding before it is 32 wide",
        ),
        (
            one(
                with("activation_function", "torch.nn.modules.activation.Softmax".into()),
                linear(),
            ),
            "activation `torch.nn.modules.activation.Softmax`",
        ),
        (
            one(with("module_input_name", "token_embeddings".into()), linear()),
            "from `token_embeddings`",
        ),
        (one(with("out_features", 8.into()), linear()), "has shape [16, 32]"),
        (one(base.clone(), vec![("linear.weight", vec![16, 32])]), "has no `linear.bias`"),
        (one(with("use_residual", true.into()), linear()), "no tensor `2_Dense.residual.weight`"),
        (one(with("bias", "yes".into()), linear()), "`bias` is \"yes\", not true or false"),
    ];
    for (i, (dense, want)) in cases.into_iter().enumerate() {
        let s = Scratch::of("bert", &format!("dense-bad-{i}"));
        with_dense(&s.0, &[dense], false);
        let e = load_err(&s.0);
        assert!(e.contains(want), "{want}: {e}");
    }

    // Weights only as PyTorch's pickle; a folder outside the checkpoint; the wrong place.
    let s = Scratch::of("bert", "dense-bin");
    with_dense(&s.0, &[one(base.clone(), linear())], false);
    std::fs::rename(s.0.join("2_Dense/model.safetensors"), s.0.join("2_Dense/pytorch_model.bin"))
        .unwrap();
    let e = load_err(&s.0);
    assert!(e.contains("has only pytorch_model.bin; Switchyard reads safetensors only"), "{e}");
    std::fs::remove_file(s.0.join("2_Dense/pytorch_model.bin")).unwrap();
    assert!(load_err(&s.0).contains("2_Dense has no model.safetensors"));
    let modules =
        |m: serde_json::Value| std::fs::write(s.0.join("modules.json"), m.to_string()).unwrap();
    let t = |idx: u32, path: &str, ty: &str| serde_json::json!({"idx": idx, "name": "m", "path": path, "type": format!("sentence_transformers.models.{ty}")});
    modules(serde_json::json!([
        t(0, "", "Transformer"),
        t(1, "1_Pooling", "Pooling"),
        t(2, "../2_Dense", "Dense")
    ]));
    assert!(load_err(&s.0).contains("\"../2_Dense\" is not a folder of the checkpoint directory"));
    modules(serde_json::json!([
        t(0, "", "Transformer"),
        t(1, "2_Dense", "Dense"),
        t(2, "1_Pooling", "Pooling")
    ]));
    assert!(load_err(&s.0).contains("a Dense module before Pooling or after Normalize"));
}
