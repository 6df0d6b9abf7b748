//! The sentence-transformers files: `modules.json`, `sentence_bert_config.json` and the pooling
//! module's `config.json` (a dense `Pooling`, or a sparse encoder's `SpladePooling`).

use std::path::Path;

use serde_json::Value;
use switchyard_core::PoolMode;

use crate::checkpoint::{is_file, read_json};
use crate::{Error, Result};

/// How sentence-transformers turns token rows into one embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pooling {
    /// The reduction over tokens.
    pub mode: PoolMode,
    /// Whether a Normalize module follows (L2).
    pub normalize: bool,
}

/// What a sentence-transformers model computes from the token rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentenceHead {
    /// A dense embedding: pooling, then normalisation if asked.
    Pooled(Pooling),
    /// A sparse encoder: SPLADE pooling (max over tokens of `log(1 + relu)`) of the
    /// masked-language-model logits.
    Splade,
}

/// What the sentence-transformers files say, if the directory has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentenceConfig {
    /// What the modules compute.
    pub head: SentenceHead,
    /// `max_seq_length`, if set.
    pub max_seq_length: Option<usize>,
}

/// Reads the sentence-transformers configuration of `dir`; `None` if it has no `modules.json`.
pub fn read(dir: &Path) -> Result<Option<SentenceConfig>> {
    let modules_path = dir.join("modules.json");
    if !is_file(&modules_path)? {
        return Ok(None);
    }
    let modules = read_json(&modules_path)?;
    let modules = modules.as_array().ok_or_else(|| {
        Error::format(format!("{}: expected a list of modules", modules_path.display()))
    })?;
    let kind = |m: &Value| m.get("type").and_then(Value::as_str).unwrap_or("").to_owned();
    let mut pooling = None;
    let mut splade = false;
    let mut normalize = false;
    for m in modules {
        let ty = kind(m);
        let path = |default: &str| {
            dir.join(m.get("path").and_then(Value::as_str).unwrap_or(default)).join("config.json")
        };
        match ty.rsplit('.').next().unwrap_or("") {
            "Transformer" | "MLMTransformer" => {}
            "Pooling" => pooling = Some(pooling_mode(&path("1_Pooling"))?),
            "SpladePooling" => {
                splade_pooling(&path("1_SpladePooling"))?;
                splade = true;
            }
            "Normalize" => normalize = true,
            other => {
                return Err(Error::unsupported(format!(
                    "sentence-transformers module `{other}` ({ty}); supported: Transformer, \
                     Pooling, Normalize, MLMTransformer, SpladePooling"
                )));
            }
        }
    }
    let head = match (pooling, splade) {
        (Some(mode), false) => SentenceHead::Pooled(Pooling { mode, normalize }),
        (None, true) if !normalize => SentenceHead::Splade,
        (None, false) => {
            return Err(Error::unsupported(
                "modules.json lists no Pooling or SpladePooling module; Switchyard needs one",
            ));
        }
        _ => {
            return Err(Error::unsupported(
                "modules.json combines SpladePooling with Pooling or Normalize",
            ));
        }
    };
    let sbert = dir.join("sentence_bert_config.json");
    let max_seq_length = if is_file(&sbert)? {
        match read_json(&sbert)?.get("max_seq_length") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
                _ => {
                    return Err(Error::format(format!(
                        "{}: max_seq_length {v} is not a positive whole number",
                        sbert.display()
                    )));
                }
            },
        }
    } else {
        None
    };
    Ok(Some(SentenceConfig { head, max_seq_length }))
}

/// Checks a `SpladePooling` configuration: max pooling with `relu` is what Switchyard computes.
fn splade_pooling(path: &Path) -> Result<()> {
    // The module's configuration file is optional; its defaults are max and relu.
    let c = if is_file(path)? { read_json(path)? } else { Value::Null };
    let strategy = c.get("pooling_strategy").and_then(Value::as_str).unwrap_or("max");
    let act = c.get("activation_function").and_then(Value::as_str).unwrap_or("relu");
    if strategy != "max" || act != "relu" {
        return Err(Error::unsupported(format!(
            "{}: SPLADE pooling `{strategy}` with activation `{act}`; supported: `max` with `relu`",
            path.display()
        )));
    }
    Ok(())
}

fn pooling_mode(path: &Path) -> Result<PoolMode> {
    let c = read_json(path)?;
    let on = |k: &str| c.get(k).and_then(Value::as_bool).unwrap_or(false);
    let modes: Vec<(&str, PoolMode)> = [
        ("pooling_mode_cls_token", PoolMode::Cls),
        ("pooling_mode_mean_tokens", PoolMode::Mean),
        ("pooling_mode_max_tokens", PoolMode::Max),
        ("pooling_mode_lasttoken", PoolMode::Last),
    ]
    .into_iter()
    .filter(|(k, _)| on(k))
    .collect();
    if on("pooling_mode_mean_sqrt_len_tokens") || on("pooling_mode_weightedmean_tokens") {
        return Err(Error::unsupported(format!(
            "{}: mean-sqrt-len and weighted-mean pooling are not supported; use cls, mean, max or \
             last token",
            path.display()
        )));
    }
    match modes.as_slice() {
        [(_, m)] => Ok(*m),
        [] => Err(Error::format(format!("{}: no pooling mode is on", path.display()))),
        _ => Err(Error::unsupported(format!(
            "{}: several pooling modes at once (concatenated) are not supported",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder with `modules.json` listing `modules` and each module's `config.json`.
    fn folder(tag: &str, modules: &[(&str, &str, Value)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("switchyard-st-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut list = Vec::new();
        for (i, (ty, path, config)) in modules.iter().enumerate() {
            list.push(
                serde_json::json!({"idx": i, "name": i.to_string(), "path": path, "type": ty}),
            );
            if !path.is_empty() {
                std::fs::create_dir_all(dir.join(path)).unwrap();
                std::fs::write(dir.join(path).join("config.json"), config.to_string()).unwrap();
            }
        }
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("modules.json"), Value::from(list).to_string()).unwrap();
        dir
    }

    const MLM: &str = "sentence_transformers.sparse_encoder.models.MLMTransformer";
    const SPLADE: &str = "sentence_transformers.sparse_encoder.models.SpladePooling";

    #[test]
    fn a_sparse_encoder_reads_as_splade() {
        let config = serde_json::json!({"pooling_strategy": "max", "activation_function": "relu"});
        let dir = folder("splade", &[(MLM, "", Value::Null), (SPLADE, "1_SpladePooling", config)]);
        let c = read(&dir).unwrap().unwrap();
        assert_eq!(c.head, SentenceHead::Splade);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn splade_variants_we_do_not_compute_are_errors() {
        for (tag, config) in [
            ("sum", serde_json::json!({"pooling_strategy": "sum", "activation_function": "relu"})),
            ("log1p", serde_json::json!({"activation_function": "log1p_relu"})),
        ] {
            let dir = folder(tag, &[(MLM, "", Value::Null), (SPLADE, "1_SpladePooling", config)]);
            let e = read(&dir).unwrap_err().to_string();
            assert!(e.contains("supported: `max` with `relu`"), "{tag}: {e}");
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}
