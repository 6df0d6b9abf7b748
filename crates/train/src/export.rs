//! Writing a trained model as an ordinary Hugging Face directory: `config.json`,
//! `model.safetensors` under the transformers weight names, the tokenizer files and the
//! sentence-transformers module files, so that transformers, sentence-transformers and
//! Switchyard all load it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use switchyard_models::Checkpoint;

use crate::{Error, Result};

/// A tensor to write: its name, shape and values.
pub struct Tensor<'a> {
    /// The name transformers knows it by.
    pub name: String,
    /// Its dimensions.
    pub shape: Vec<usize>,
    /// Its bytes, little-endian, of `dtype`.
    pub bytes: std::borrow::Cow<'a, [u8]>,
    /// The dtype of `bytes`.
    pub dtype: Dtype,
}

impl Tensor<'_> {
    /// An f32 tensor.
    pub fn f32(name: impl Into<String>, shape: Vec<usize>, values: &[f32]) -> Tensor<'static> {
        let bytes = values.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        Tensor { name: name.into(), shape, bytes: bytes.into(), dtype: Dtype::F32 }
    }
}

/// Writes `tensors` to `path` as safetensors (with transformers' `format: pt` metadata), through
/// a temporary file renamed into place, so a reader never sees half a file.
pub fn write_safetensors(path: &Path, tensors: &[Tensor<'_>]) -> Result<()> {
    let mut views = Vec::with_capacity(tensors.len());
    for t in tensors {
        let view = TensorView::new(t.dtype, t.shape.clone(), &t.bytes)
            .map_err(|e| Error::Config(format!("tensor `{}` cannot be written: {e}", t.name)))?;
        views.push((t.name.clone(), view));
    }
    let meta = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    let tmp = temp(path);
    safetensors::serialize_to_file(views, Some(meta), &tmp)
        .map_err(|e| Error::Config(format!("{}: cannot be written: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// Writes a model's tensors into `dir`: those a sentence-transformers module's folder holds
/// (named `FOLDER.NAME`, as a [`Checkpoint`] maps them: a Dense module's) to
/// `FOLDER/model.safetensors` as `NAME`, the rest to `model.safetensors`.
pub fn write_model(dir: &Path, tensors: Vec<Tensor<'_>>) -> Result<()> {
    let mut files: Vec<(PathBuf, Vec<Tensor<'_>>)> = vec![(dir.join("model.safetensors"), vec![])];
    for mut t in tensors {
        let path = match switchyard_models::st::module_tensor(&t.name) {
            Some((folder, name)) => {
                let path = dir.join(folder).join("model.safetensors");
                t.name = name.to_owned();
                path
            }
            None => dir.join("model.safetensors"),
        };
        match files.iter_mut().find(|(p, _)| *p == path) {
            Some((_, list)) => list.push(t),
            None => files.push((path, vec![t])),
        }
    }
    for (path, tensors) in &files {
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).map_err(|e| Error::io(folder, e))?;
        }
        write_safetensors(path, tensors)?;
    }
    Ok(())
}

/// `path` with `.tmp` appended to its name.
pub(crate) fn temp(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Whether a file of a checkpoint directory is one of its weight files (which an export
/// replaces, and must not copy stale).
fn is_weights(name: &str) -> bool {
    name.ends_with(".safetensors")
        || name.ends_with(".bin")
        || name.ends_with(".h5")
        || name.ends_with(".msgpack")
        || name.ends_with(".onnx")
        || name.ends_with(".pt")
        || name.ends_with(".ckpt")
        || name == "model.safetensors.index.json"
        || name == "pytorch_model.bin.index.json"
}

/// Whether a file is training's own: a checkpoint's state, a run's report, a half-written file.
fn is_training_state(name: &str) -> bool {
    name == "trainer_state.json" || name == "training.json" || name.ends_with(".tmp")
}

/// The files sentence-transformers reads beside the weights, at a directory's top level.
const SENTENCE_FILES: [&str; 4] =
    ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "README.md"];

/// Copies every file of `from` that describes the model rather than weighing it into `to`:
/// `config.json` (unless `config` gives a new one), the tokenizer files, and (unless
/// `sentence` is off) the sentence-transformers module files and their `N_Name/` folders.
/// Weight files are never copied.
pub fn copy_files(
    from: &Path,
    to: &Path,
    config: Option<&serde_json::Value>,
    sentence: bool,
) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| Error::io(to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| Error::io(from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        let module = name.split_once('_').is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        if kind.is_dir() && module && sentence {
            copy_module(&path, &to.join(&name))?;
        } else if kind.is_file() && !is_weights(&name) && !is_training_state(&name) {
            if (!sentence && SENTENCE_FILES.contains(&name.as_str()))
                || (name == "config.json" && config.is_some())
            {
                continue;
            }
            std::fs::copy(&path, to.join(&name)).map_err(|e| Error::io(&path, e))?;
        }
    }
    if let Some(c) = config {
        let text = serde_json::to_string_pretty(c).expect("a JSON value serialises");
        let path = to.join("config.json");
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// Copies a sentence-transformers module folder (`1_Pooling/`, ...): its files, no weights.
fn copy_module(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| Error::io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| Error::io(from, e))? {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().is_ok_and(|t| t.is_file()) && !is_weights(&name) {
            std::fs::copy(entry.path(), to.join(&name)).map_err(|e| Error::io(&entry.path(), e))?;
        }
    }
    Ok(())
}

/// Every tensor of `ck` as it is stored, renamed by `rename`, except those `skip` names and
/// those computed at load (which the model computes again when it loads the export): what an
/// export keeps of a checkpoint besides what training changed.
pub fn kept<'a>(
    ck: &'a Checkpoint,
    skip: &dyn Fn(&str) -> bool,
    rename: &dyn Fn(&str) -> String,
) -> Vec<Tensor<'a>> {
    ck.names()
        .into_iter()
        .filter(|n| !skip(n) && !ck.is_derived(n))
        .filter_map(|n| {
            let (dtype, shape, bytes) = ck.raw(n)?;
            Some(Tensor { name: rename(n), shape: shape.to_vec(), bytes: bytes.into(), dtype })
        })
        .collect()
}
