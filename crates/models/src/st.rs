//! The sentence-transformers files: `modules.json`, `sentence_bert_config.json`,
//! `config_sentence_transformers.json` (the prompts) and the pooling module's `config.json` (a
//! dense `Pooling`, or a sparse encoder's `SpladePooling`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use switchyard_core::{Act, PoolMode};

use crate::checkpoint::{is_file, read_json};
use crate::scores::Similarity;
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
    /// A sparse encoder: SPLADE pooling of the masked-language-model logits.
    Splade(Splade),
}

/// A `SpladePooling` module: each logit's activation, then a pooling over the tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Splade {
    /// `activation_function`.
    pub act: SpladeAct,
    /// `pooling_strategy`: [`PoolMode::Max`] (`max`, the default) or [`PoolMode::Sum`] (`sum`).
    pub pool: PoolMode,
}

impl Default for Splade {
    /// SPLADE v2's and later models': `relu`, max-pooled.
    fn default() -> Splade {
        Splade { act: SpladeAct::Relu, pool: PoolMode::Max }
    }
}

/// A `SpladePooling` module's `activation_function`: what each logit becomes before pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpladeAct {
    /// `relu`: `log(1 + relu(x))`, every SPLADE model's.
    Relu,
    /// `log1p_relu`: `log(1 + log(1 + relu(x)))`, OpenSearch's sparse encoders'.
    Log1pRelu,
}

/// A sentence-transformers `Dense` module: `act(x . W^T + b)` on the pooled embedding, plus `x`
/// (or a projection of it) where it has a residual connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dense {
    /// Its folder (`2_Dense`), which also prefixes its tensors' names in the [`Checkpoint`]
    /// (`2_Dense.linear.weight`).
    ///
    /// [`Checkpoint`]: crate::Checkpoint
    pub folder: String,
    /// The width it takes.
    pub in_features: usize,
    /// The width it gives.
    pub out_features: usize,
    /// Whether its linear layer has a bias.
    pub bias: bool,
    /// The activation after the linear layer.
    pub act: Act,
    /// Whether the input is added to the output (through `residual.weight` where the widths
    /// differ).
    pub residual: bool,
}

/// What the sentence-transformers files say, if the directory has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentenceConfig {
    /// What the modules compute after the Transformer; `None` where it is the Transformer alone
    /// (a CrossEncoder as sentence-transformers 6 saves one), whose head `config.json`'s
    /// `architectures` names.
    pub head: Option<SentenceHead>,
    /// The Dense modules after pooling, in order (before any Normalize).
    pub dense: Vec<Dense>,
    /// `max_seq_length`, if set.
    pub max_seq_length: Option<usize>,
    /// The prompts the model names.
    pub prompts: Prompts,
    /// How its embeddings are compared (`similarity_fn_name`).
    pub similarity: Similarity,
    /// A cross-encoder's `activation_fn`, as the class path written (ST 6 and later).
    pub activation_fn: Option<String>,
}

/// The prompts of a sentence-transformers model (`config_sentence_transformers.json`): texts put
/// before each input, by name, such as E5's `"query": "query: "`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompts {
    /// Each prompt's text, by name.
    pub named: BTreeMap<String, String>,
    /// The name of the prompt used where a call names none (`default_prompt_name`).
    pub default: Option<String>,
    /// Whether pooling covers the prompt's tokens (the Pooling module's `include_prompt`; false
    /// for models such as INSTRUCTOR, which pool the text's tokens alone).
    pub pooled: bool,
}

impl Default for Prompts {
    fn default() -> Self {
        Prompts { named: BTreeMap::new(), default: None, pooled: true }
    }
}

/// Which prompt goes before each input, as sentence-transformers' `encode(prompt_name=...,
/// prompt=...)` chooses it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Prompt<'a> {
    /// The model's default prompt (`default_prompt_name`), or none if it has none.
    #[default]
    Default,
    /// The prompt the model names so.
    Named(&'a str),
    /// This text (empty for none, even where the model has a default).
    Text(&'a str),
}

impl<'a> Prompt<'a> {
    /// The prompt sentence-transformers' `encode(prompt_name=name, prompt=text)` uses: `text`
    /// where given, else the prompt called `name`, else the default.
    pub fn choose(name: Option<&'a str>, text: Option<&'a str>) -> Prompt<'a> {
        match (text, name) {
            (Some(text), _) => Prompt::Text(text),
            (None, Some(name)) => Prompt::Named(name),
            (None, None) => Prompt::Default,
        }
    }
}

impl Prompts {
    /// The text `choice` puts before each input (empty for none): an error for a name the model
    /// does not have, or for a prompt on a model whose pooling leaves the prompt's tokens out
    /// (which Switchyard does not compute).
    pub fn text<'a>(&'a self, choice: Prompt<'a>) -> Result<&'a str> {
        let text = match choice {
            Prompt::Text(t) => t,
            Prompt::Named(name) => self.named.get(name).ok_or_else(|| {
                let known: Vec<&str> = self.named.keys().map(String::as_str).collect();
                Error::UnknownPrompt { name: name.to_owned(), known: known.join(", ") }
            })?,
            Prompt::Default => {
                self.default.as_deref().and_then(|n| self.named.get(n)).map_or("", String::as_str)
            }
        };
        if !text.is_empty() && !self.pooled {
            return Err(Error::unsupported(
                "this model pools the text's tokens without the prompt's (include_prompt: false \
                 in its Pooling configuration), which Switchyard does not compute; embed \
                 without a prompt",
            ));
        }
        Ok(text)
    }
}

/// Each text with `prompt` before it.
pub fn prompted<T: AsRef<str>>(prompt: &str, texts: &[T]) -> Vec<String> {
    texts.iter().map(|t| [prompt, t.as_ref()].concat()).collect()
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
    let mut pooled_prompt = true;
    let mut splade = None;
    let mut normalize = false;
    let mut dense = Vec::new();
    for m in modules {
        let ty = kind(m);
        // A pooling module's `config.json`, in the folder it names (checked as a Dense
        // module's is), else in sentence-transformers' usual one.
        let path = |default: &str| -> Result<std::path::PathBuf> {
            let folder =
                if m.get("path").is_some() { module_folder(&modules_path, m)? } else { default };
            Ok(dir.join(folder).join("config.json"))
        };
        match ty.rsplit('.').next().unwrap_or("") {
            "Transformer" | "MLMTransformer" => {}
            "Pooling" => {
                let (mode, include_prompt) = pooling_mode(&path("1_Pooling")?)?;
                pooling = Some(mode);
                pooled_prompt = include_prompt;
            }
            "Dense" => {
                if pooling.is_none() || normalize {
                    return Err(Error::unsupported(
                        "modules.json puts a Dense module before Pooling or after Normalize; \
                         Switchyard computes Dense modules between the two",
                    ));
                }
                // Each module's `in_features` is checked against the width before it when the
                // head is built (heads::embedding).
                dense.push(dense_module(dir, module_folder(&modules_path, m)?)?);
            }
            "SpladePooling" => splade = Some(splade_pooling(&path("1_SpladePooling")?)?),
            "Normalize" => normalize = true,
            other => {
                return Err(Error::unsupported(format!(
                    "sentence-transformers module `{other}` ({ty}); supported: Transformer, \
                     Pooling, Dense, Normalize, MLMTransformer, SpladePooling"
                )));
            }
        }
    }
    let head = match (pooling, splade) {
        (Some(mode), None) => Some(SentenceHead::Pooled(Pooling { mode, normalize })),
        (None, Some(splade)) if !normalize => Some(SentenceHead::Splade(splade)),
        (None, None) if !normalize => None,
        (None, None) => {
            return Err(Error::unsupported(
                "modules.json lists Normalize without a Pooling module before it",
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
    let (prompts, similarity, activation_fn) = model_config(dir)?;
    let prompts = Prompts { pooled: pooled_prompt, ..prompts };
    Ok(Some(SentenceConfig { head, dense, max_seq_length, prompts, similarity, activation_fn }))
}

/// The folder a module of `modules.json` names (`path`): one plain name inside the checkpoint
/// directory, so that a file cannot make us read weights elsewhere.
fn module_folder<'m>(modules_path: &Path, m: &'m Value) -> Result<&'m str> {
    let folder = m.get("path").and_then(Value::as_str).unwrap_or("");
    let mut parts = Path::new(folder).components();
    match (parts.next(), parts.next()) {
        (Some(std::path::Component::Normal(_)), None) => Ok(folder),
        _ => Err(Error::format(format!(
            "{}: a module's path {folder:?} is not a folder of the checkpoint directory",
            modules_path.display()
        ))),
    }
}

/// A Dense module's configuration (`FOLDER/config.json`), with sentence-transformers' defaults:
/// a bias, Tanh, on the sentence embedding, no residual connection.
fn dense_module(dir: &Path, folder: &str) -> Result<Dense> {
    let path = dir.join(folder).join("config.json");
    let c = read_json(&path)?;
    let bad = |what: String| Error::format(format!("{}: {what}", path.display()));
    let width = |key: &str| match c.get(key).and_then(Value::as_u64) {
        Some(n) if n > 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(bad(format!("`{key}` is not a positive whole number"))),
    };
    let flag = |key: &str, default: bool| match c.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(bad(format!("`{key}` is {other}, not true or false"))),
    };
    let act = match c.get("activation_function").and_then(Value::as_str) {
        None => Act::Tanh,
        Some(name) => match name.rsplit('.').next().unwrap_or("") {
            "Tanh" => Act::Tanh,
            "Identity" => Act::Identity,
            "ReLU" => Act::Relu,
            "GELU" => Act::Gelu,
            "Sigmoid" => Act::Sigmoid,
            "SiLU" => Act::Silu,
            _ => {
                return Err(Error::unsupported(format!(
                    "{}: activation `{name}`; supported: torch.nn's Tanh, Identity, ReLU, GELU, \
                     Sigmoid, SiLU",
                    path.display()
                )));
            }
        },
    };
    let input = c.get("module_input_name").and_then(Value::as_str).unwrap_or("sentence_embedding");
    let output = c.get("module_output_name").and_then(Value::as_str).unwrap_or(input);
    if input != "sentence_embedding" || output != "sentence_embedding" {
        return Err(Error::unsupported(format!(
            "{}: a Dense module from `{input}` to `{output}`; Switchyard computes Dense modules \
             on the sentence embedding",
            path.display()
        )));
    }
    Ok(Dense {
        folder: folder.to_owned(),
        in_features: width("in_features")?,
        out_features: width("out_features")?,
        bias: flag("bias", true)?,
        act,
        residual: flag("use_residual", false)?,
    })
}

/// For a tensor a sentence-transformers module's folder holds (named `FOLDER.NAME` in a
/// [`crate::Checkpoint`], such as `2_Dense.linear.weight`), its folder and its name there.
pub fn module_tensor(name: &str) -> Option<(&str, &str)> {
    let (folder, rest) = name.split_once('.')?;
    let (index, module) = folder.split_once('_')?;
    let ok = !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) && !module.is_empty();
    ok.then_some((folder, rest))
}

/// The prompts, the similarity function and a cross-encoder's activation function
/// `config_sentence_transformers.json` names, if the file is there.
fn model_config(dir: &Path) -> Result<(Prompts, Similarity, Option<String>)> {
    let path = dir.join("config_sentence_transformers.json");
    if !is_file(&path)? {
        return Ok((Prompts::default(), Similarity::default(), None));
    }
    let c = read_json(&path)?;
    let bad = |what: String| Error::format(format!("{}: {what}", path.display()));
    let mut named = BTreeMap::new();
    match c.get("prompts") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (name, text) in map {
                // sentence-transformers reads a null prompt as an empty one.
                let text = match text {
                    Value::Null => "",
                    Value::String(t) => t,
                    other => {
                        return Err(bad(format!("the prompt {name:?} is {other}, not a text")));
                    }
                };
                named.insert(name.clone(), text.to_owned());
            }
        }
        Some(other) => {
            return Err(bad(format!("`prompts` is {other}, not a map of names to texts")));
        }
    }
    let default = match c.get("default_prompt_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if named.contains_key(name) => Some(name.clone()),
        Some(other) => {
            let known: Vec<&str> = named.keys().map(String::as_str).collect();
            return Err(bad(format!(
                "default_prompt_name {other} is not one of the prompts ({})",
                known.join(", ")
            )));
        }
    };
    let similarity = match c.get("similarity_fn_name") {
        None | Some(Value::Null) => Similarity::default(),
        Some(Value::String(name)) => Similarity::named(name).ok_or_else(|| {
            Error::unsupported(format!(
                "{}: similarity_fn_name {name:?}; supported: {}",
                path.display(),
                Similarity::ALL.map(Similarity::name).join(", ")
            ))
        })?,
        Some(other) => return Err(bad(format!("similarity_fn_name {other} is not a name"))),
    };
    let activation_fn = c.get("activation_fn").and_then(Value::as_str).map(str::to_owned);
    Ok((Prompts { named, default, pooled: true }, similarity, activation_fn))
}

/// A `SpladePooling` module's configuration.
fn splade_pooling(path: &Path) -> Result<Splade> {
    // The module's configuration file is optional; its defaults are max and relu.
    let c = if is_file(path)? { read_json(path)? } else { Value::Null };
    let strategy = c.get("pooling_strategy").and_then(Value::as_str).unwrap_or("max");
    let act = c.get("activation_function").and_then(Value::as_str).unwrap_or("relu");
    let pool = match strategy {
        "max" => PoolMode::Max,
        "sum" => PoolMode::Sum,
        other => {
            return Err(Error::format(format!(
                "{}: unknown SPLADE pooling strategy `{other}` (sentence-transformers has `max` \
                 and `sum`)",
                path.display()
            )));
        }
    };
    let act = match act {
        "relu" => SpladeAct::Relu,
        "log1p_relu" => SpladeAct::Log1pRelu,
        other => {
            return Err(Error::format(format!(
                "{}: unknown SPLADE activation `{other}` (sentence-transformers has `relu` and \
                 `log1p_relu`)",
                path.display()
            )));
        }
    };
    Ok(Splade { act, pool })
}

/// The pooling mode of a Pooling module's `config.json`, and whether pooling covers a prompt's
/// tokens (`include_prompt`, default true). sentence-transformers 6 writes `pooling_mode` (a
/// name, or a list of them); earlier versions one `pooling_mode_*` flag per mode. As
/// sentence-transformers reads them, `pooling_mode` wins over the flags, and with neither (or
/// no flag on) the mode is mean.
fn pooling_mode(path: &Path) -> Result<(PoolMode, bool)> {
    let c = read_json(path)?;
    let include_prompt = c.get("include_prompt").and_then(Value::as_bool).unwrap_or(true);
    let legacy = [
        ("pooling_mode_cls_token", "cls"),
        ("pooling_mode_max_tokens", "max"),
        ("pooling_mode_mean_tokens", "mean"),
        ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
        ("pooling_mode_weightedmean_tokens", "weightedmean"),
        ("pooling_mode_lasttoken", "lasttoken"),
    ];
    let bad = |what: String| Error::format(format!("{}: {what}", path.display()));
    let modes: Vec<&str> = match c.get("pooling_mode") {
        Some(Value::String(m)) => vec![m.as_str()],
        Some(Value::Array(list)) => list
            .iter()
            .map(|m| m.as_str().ok_or_else(|| bad(format!("pooling mode {m} is not a name"))))
            .collect::<Result<_>>()?,
        Some(other) if !other.is_null() => {
            return Err(bad(format!("`pooling_mode` is {other}, not a name or a list of names")));
        }
        _ => legacy
            .iter()
            .filter(|(k, _)| c.get(*k).and_then(Value::as_bool).unwrap_or(false))
            .map(|(_, m)| *m)
            .collect(),
    };
    let mode = match modes.as_slice() {
        [] | ["mean"] => PoolMode::Mean,
        ["cls"] => PoolMode::Cls,
        ["max"] => PoolMode::Max,
        ["lasttoken"] => PoolMode::Last,
        ["mean_sqrt_len_tokens" | "weightedmean"] => {
            return Err(Error::unsupported(format!(
                "{}: mean-sqrt-len and weighted-mean pooling are not supported; use cls, mean, \
                 max or last token",
                path.display()
            )));
        }
        [other] => return Err(bad(format!("unknown pooling mode {other:?}"))),
        _ => {
            return Err(Error::unsupported(format!(
                "{}: several pooling modes at once (concatenated: {}) are not supported",
                path.display(),
                modes.join(", ")
            )));
        }
    };
    Ok((mode, include_prompt))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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

    const TRANSFORMER: &str = "sentence_transformers.models.Transformer";
    const POOLING: &str = "sentence_transformers.models.Pooling";
    const MLM: &str = "sentence_transformers.sparse_encoder.models.MLMTransformer";
    const SPLADE: &str = "sentence_transformers.sparse_encoder.models.SpladePooling";

    #[test]
    fn a_sparse_encoder_reads_as_splade_with_its_activation_and_pooling() {
        let (relu, log1p) = (SpladeAct::Relu, SpladeAct::Log1pRelu);
        for (tag, config, act, pool) in [
            ("default", Value::Null, relu, PoolMode::Max),
            (
                "relu",
                json!({"pooling_strategy": "max", "activation_function": "relu"}),
                relu,
                PoolMode::Max,
            ),
            ("log1p", json!({"activation_function": "log1p_relu"}), log1p, PoolMode::Max),
            ("sum", json!({"pooling_strategy": "sum"}), relu, PoolMode::Sum),
            (
                "sum-log1p",
                json!({"pooling_strategy": "sum", "activation_function": "log1p_relu"}),
                log1p,
                PoolMode::Sum,
            ),
        ] {
            let dir = folder(tag, &[(MLM, "", Value::Null), (SPLADE, "1_SpladePooling", config)]);
            let c = read(&dir).unwrap().unwrap();
            assert_eq!(c.head, Some(SentenceHead::Splade(Splade { act, pool })), "{tag}");
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    /// The pooling mode, as sentence-transformers 6 writes it (`pooling_mode`) and as earlier
    /// versions did (`pooling_mode_*` flags), read as sentence-transformers reads them.
    #[test]
    fn pooling_modes_are_read_in_both_formats() {
        let mode = |tag: &str, config: Value| {
            let dir =
                folder(tag, &[(TRANSFORMER, "", Value::Null), (POOLING, "1_Pooling", config)]);
            let got = read(&dir).map(|c| match c.unwrap().head {
                Some(SentenceHead::Pooled(p)) => p.mode,
                _ => unreachable!("a Pooling module"),
            });
            std::fs::remove_dir_all(dir).unwrap();
            got.map_err(|e| e.to_string())
        };
        for (tag, config, want) in [
            ("new-cls", json!({"embedding_dimension": 8, "pooling_mode": "cls"}), PoolMode::Cls),
            ("new-mean", json!({"pooling_mode": "mean", "include_prompt": true}), PoolMode::Mean),
            ("new-max", json!({"pooling_mode": ["max"]}), PoolMode::Max),
            ("new-last", json!({"pooling_mode": "lasttoken"}), PoolMode::Last),
            // `pooling_mode` wins over the flags.
            (
                "both",
                json!({"pooling_mode": "cls", "pooling_mode_mean_tokens": true}),
                PoolMode::Cls,
            ),
            (
                "old-cls",
                json!({"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}),
                PoolMode::Cls,
            ),
            ("old-last", json!({"pooling_mode_lasttoken": true}), PoolMode::Last),
            // No mode named: mean, as sentence-transformers defaults.
            ("none", json!({"word_embedding_dimension": 8}), PoolMode::Mean),
            ("off", json!({"pooling_mode_mean_tokens": false}), PoolMode::Mean),
        ] {
            assert_eq!(mode(tag, config), Ok(want), "{tag}");
        }
        for (tag, config, want) in [
            ("new-two", json!({"pooling_mode": ["cls", "mean"]}), "concatenated: cls, mean"),
            (
                "old-two",
                json!({"pooling_mode_cls_token": true, "pooling_mode_max_tokens": true}),
                "concatenated: cls, max",
            ),
            (
                "weighted",
                json!({"pooling_mode": "weightedmean"}),
                "weighted-mean pooling are not supported",
            ),
            ("sqrt", json!({"pooling_mode_mean_sqrt_len_tokens": true}), "mean-sqrt-len"),
            ("unknown", json!({"pooling_mode": "median"}), "unknown pooling mode \"median\""),
            ("number", json!({"pooling_mode": 3}), "`pooling_mode` is 3, not a name"),
        ] {
            let e = mode(tag, config).unwrap_err();
            assert!(e.contains(want), "{tag}: {e}");
        }
    }

    #[test]
    fn splade_settings_sentence_transformers_does_not_have_are_errors() {
        for (tag, config, want) in [
            ("mean", json!({"pooling_strategy": "mean"}), "unknown SPLADE pooling strategy `mean`"),
            ("gelu", json!({"activation_function": "gelu"}), "unknown SPLADE activation `gelu`"),
        ] {
            let dir = folder(tag, &[(MLM, "", Value::Null), (SPLADE, "1_SpladePooling", config)]);
            let e = read(&dir).unwrap_err().to_string();
            assert!(e.contains(want), "{tag}: {e}");
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn a_pooling_modules_folder_must_be_one_of_the_checkpoint() {
        let mean = serde_json::json!({"pooling_mode": "mean"});
        for (ty, tag) in [(POOLING, "pool"), (SPLADE, "splade")] {
            // The folder exists beside the checkpoint, where a path with `..` would find it.
            let dir = folder(&format!("{tag}-out"), &[(TRANSFORMER, "", Value::Null)]);
            let outside = dir.with_extension("pooling");
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(outside.join("config.json"), mean.to_string()).unwrap();
            let name = outside.file_name().unwrap().to_str().unwrap();
            for path in [format!("../{name}"), outside.display().to_string(), String::new()] {
                let modules = serde_json::json!([
                    {"idx": 0, "name": "0", "path": "", "type": TRANSFORMER},
                    {"idx": 1, "name": "1", "path": path, "type": ty},
                ]);
                std::fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
                let e = read(&dir).unwrap_err().to_string();
                assert!(e.contains("is not a folder of the checkpoint directory"), "{path}: {e}");
            }
            std::fs::remove_dir_all(outside).unwrap();
            std::fs::remove_dir_all(dir).unwrap();
        }
        // Without a path, sentence-transformers' usual folder.
        let dir =
            folder("pool-default", &[(TRANSFORMER, "", Value::Null), (POOLING, "1_Pooling", mean)]);
        let modules = serde_json::json!([
            {"idx": 0, "name": "0", "path": "", "type": TRANSFORMER},
            {"idx": 1, "name": "1", "type": POOLING},
        ]);
        std::fs::write(dir.join("modules.json"), modules.to_string()).unwrap();
        assert!(matches!(read(&dir).unwrap().unwrap().head, Some(SentenceHead::Pooled(_))));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_prompt_is_chosen_as_sentence_transformers_chooses_it() {
        let named: BTreeMap<String, String> = [("query", "query: "), ("passage", "passage: ")]
            .map(|(n, t)| (n.into(), t.into()))
            .into();
        let p = Prompts { named, default: Some("query".into()), pooled: true };
        assert_eq!(p.text(Prompt::Default).unwrap(), "query: ");
        assert_eq!(p.text(Prompt::Named("passage")).unwrap(), "passage: ");
        // A text, even an empty one, overrides the default.
        assert_eq!(p.text(Prompt::Text("")).unwrap(), "");
        assert_eq!(p.text(Prompt::Text("Represent: ")).unwrap(), "Represent: ");
        let e = p.text(Prompt::Named("doc")).unwrap_err().to_string();
        assert_eq!(e, r#"the model has no prompt named "doc"; its prompts: passage, query"#);
        let none = Prompts::default();
        assert_eq!(none.text(Prompt::Default).unwrap(), "");
        let e = none.text(Prompt::Named("query")).unwrap_err().to_string();
        assert!(e.ends_with("its prompts: none"), "{e}");

        // Pooling that leaves the prompt out is refused with a prompt, and fine without one.
        let unpooled = Prompts { pooled: false, ..p };
        let e = unpooled.text(Prompt::Default).unwrap_err().to_string();
        assert!(e.contains("include_prompt: false"), "{e}");
        assert_eq!(unpooled.text(Prompt::Text("")).unwrap(), "");

        assert_eq!(prompted("query: ", &["a", "b c"]), ["query: a", "query: b c"]);
        assert_eq!(Prompt::choose(Some("passage"), Some("q: ")), Prompt::Text("q: "));
        assert_eq!(Prompt::choose(Some("passage"), None), Prompt::Named("passage"));
        assert_eq!(Prompt::choose(None, None), Prompt::Default);
    }
}
