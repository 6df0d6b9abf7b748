//! The sentence-transformers files: `modules.json`, `sentence_bert_config.json` and the pooling
//! module's `config.json`.

use std::path::Path;

use serde_json::Value;
use switchyard_core::PoolMode;

use crate::checkpoint::read_json;
use crate::{Error, Result};

/// How sentence-transformers turns token rows into one embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pooling {
    /// The reduction over tokens.
    pub mode: PoolMode,
    /// Whether a Normalize module follows (L2).
    pub normalize: bool,
}

/// What the sentence-transformers files say, if the directory has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentenceConfig {
    /// Pooling and normalisation.
    pub pooling: Pooling,
    /// `max_seq_length`, if set.
    pub max_seq_length: Option<usize>,
}

/// Reads the sentence-transformers configuration of `dir`; `None` if it has no `modules.json`.
pub fn read(dir: &Path) -> Result<Option<SentenceConfig>> {
    let modules_path = dir.join("modules.json");
    if !modules_path.is_file() {
        return Ok(None);
    }
    let modules = read_json(&modules_path)?;
    let modules = modules.as_array().ok_or_else(|| {
        Error::Format(format!("{}: expected a list of modules", modules_path.display()))
    })?;
    let kind = |m: &Value| m.get("type").and_then(Value::as_str).unwrap_or("").to_owned();
    let mut pooling = None;
    let mut normalize = false;
    for m in modules {
        let ty = kind(m);
        match ty.rsplit('.').next().unwrap_or("") {
            "Transformer" => {}
            "Pooling" => {
                let path = m.get("path").and_then(Value::as_str).unwrap_or("1_Pooling");
                pooling = Some(pooling_mode(&dir.join(path).join("config.json"))?);
            }
            "Normalize" => normalize = true,
            other => {
                return Err(Error::Unsupported(format!(
                    "sentence-transformers module `{other}` ({ty}); supported: Transformer, \
                     Pooling, Normalize"
                )));
            }
        }
    }
    let mode = pooling.ok_or_else(|| {
        Error::Unsupported(
            "modules.json lists no Pooling module; Switchyard needs one to embed".into(),
        )
    })?;
    let sbert = dir.join("sentence_bert_config.json");
    let max_seq_length = if sbert.is_file() {
        read_json(&sbert)?.get("max_seq_length").and_then(Value::as_u64).map(|v| v as usize)
    } else {
        None
    };
    Ok(Some(SentenceConfig { pooling: Pooling { mode, normalize }, max_seq_length }))
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
        return Err(Error::Unsupported(format!(
            "{}: mean-sqrt-len and weighted-mean pooling are not supported; use cls, mean, max or \
             last token",
            path.display()
        )));
    }
    match modes.as_slice() {
        [(_, m)] => Ok(*m),
        [] => Err(Error::Format(format!("{}: no pooling mode is on", path.display()))),
        _ => Err(Error::Unsupported(format!(
            "{}: several pooling modes at once (concatenated) are not supported",
            path.display()
        ))),
    }
}
