//! A checkpoint directory: `config.json` and memory-mapped safetensors (single or sharded).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use switchyard_core::{DType, HostTensor};

use crate::{Error, Result};

/// Where one tensor lives: which mapped file (or derived buffer), its dtype, shape and byte
/// range.
#[derive(Clone, Debug)]
struct Loc {
    file: Store,
    dtype: Option<DType>,
    raw_dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// Which bytes hold a tensor.
#[derive(Clone, Copy, Debug)]
enum Store {
    /// The mapped file at this index.
    Mapped(usize),
    /// The derived tensor at this index.
    Derived(usize),
}

/// A checkpoint directory with its weights memory-mapped.
#[derive(Debug)]
pub struct Checkpoint {
    dir: PathBuf,
    config: serde_json::Value,
    maps: Vec<Mmap>,
    /// Tensors computed from the files' at load (DeBERTa's relative embeddings through each
    /// layer's projections), little-endian f32.
    derived: Vec<Vec<u8>>,
    tensors: HashMap<String, Loc>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::io(path, source)
}

/// Whether `path` is a regular file, following links: `false` if nothing is there; an error
/// naming it if it cannot be looked at (no permission, a loop of links) or is something else
/// (a directory, a FIFO), rather than "missing".
pub(crate) fn is_file(path: &Path) -> Result<bool> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(_) => Err(Error::format(format!("{} is not a regular file", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Reads and parses a JSON file.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::format(format!("{}: not valid JSON: {e}", path.display())))
}

/// The shard file that `index` maps `tensor` to: a file name or a relative path inside `dir`
/// (no `..`, no root), so that an index cannot make us open files elsewhere.
fn shard_path(dir: &Path, index: &Path, tensor: &str, file: &serde_json::Value) -> Result<PathBuf> {
    let bad = |why: &str| {
        Error::format(format!("{}: tensor `{tensor}` is mapped to {file}, {why}", index.display()))
    };
    let name = file.as_str().ok_or_else(|| bad("not a file name"))?;
    let rel = Path::new(name);
    let inside =
        !name.is_empty() && rel.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !inside {
        return Err(bad("which is not a file inside the checkpoint directory"));
    }
    Ok(dir.join(rel))
}

impl Checkpoint {
    /// Opens `dir`: reads `config.json` and maps `model.safetensors` (or the shards listed in
    /// `model.safetensors.index.json`).
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        let _span = tracing::info_span!("load", dir = %dir.display()).entered();
        let is_dir = match std::fs::metadata(dir) {
            Ok(m) => m.is_dir(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io(dir, e)),
        };
        if !is_dir {
            return Err(Error::format(format!(
                "{} is not a directory; expected a Hugging Face checkpoint directory with \
                 config.json, model.safetensors and tokenizer.json",
                dir.display()
            )));
        }
        let config_path = dir.join("config.json");
        if !is_file(&config_path)? {
            return Err(Error::format(format!("{} has no config.json", dir.display())));
        }
        let config = read_json(&config_path)?;
        let files = Self::weight_files(dir)?;
        let mut ck = Checkpoint {
            dir: dir.to_owned(),
            config,
            maps: Vec::new(),
            derived: Vec::new(),
            tensors: HashMap::new(),
        };
        for path in files {
            ck.map(&path, "")?;
        }
        Ok(ck)
    }

    /// Maps the weights of the sentence-transformers module in `folder` (`2_Dense/`'s
    /// `model.safetensors`), each tensor named `FOLDER.NAME` (see [`crate::st::module_tensor`]).
    pub fn map_module(&mut self, folder: &str) -> Result<()> {
        let dir = self.dir.join(folder);
        let path = dir.join("model.safetensors");
        if !is_file(&path)? {
            let why = if dir.join("pytorch_model.bin").exists() {
                "only pytorch_model.bin; Switchyard reads safetensors only — save the model again \
                 with a recent sentence-transformers, which writes safetensors"
            } else {
                "no model.safetensors"
            };
            return Err(Error::format(format!("the module folder {} has {why}", dir.display())));
        }
        self.map(&path, &format!("{folder}."))
    }

    fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
        let single = dir.join("model.safetensors");
        if is_file(&single)? {
            return Ok(vec![single]);
        }
        let index = dir.join("model.safetensors.index.json");
        if is_file(&index)? {
            let v = read_json(&index)?;
            let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| {
                Error::format(format!("{}: no `weight_map` object", index.display()))
            })?;
            let mut shards = Vec::with_capacity(map.len());
            for (tensor, file) in map {
                shards.push(shard_path(dir, &index, tensor, file)?);
            }
            shards.sort();
            shards.dedup();
            return Ok(shards);
        }
        let others: Vec<&str> =
            ["pytorch_model.bin", "model.onnx", "tf_model.h5", "flax_model.msgpack"]
                .into_iter()
                .filter(|f| dir.join(f).exists())
                .collect();
        Err(Error::format(if others.is_empty() {
            format!(
                "{} has no model.safetensors (nor model.safetensors.index.json); Switchyard reads \
                 safetensors checkpoints",
                dir.display()
            )
        } else {
            format!(
                "{} has {} but no model.safetensors; Switchyard reads safetensors only — convert \
                 the checkpoint (e.g. save it again with transformers' save_pretrained, which \
                 writes safetensors)",
                dir.display(),
                others.join(", ")
            )
        }))
    }

    /// Maps the safetensors file `path`, its tensors named with `prefix` before their names.
    fn map(&mut self, path: &Path, prefix: &str) -> Result<()> {
        let file = File::open(path).map_err(io(path))?;
        // SAFETY: the map is read-only and private to this process. A checkpoint changed on
        // disk while mapped would change what we read, as with any reader of the file.
        let map = unsafe { Mmap::map(&file) }.map_err(io(path))?;
        let (header, meta) = SafeTensors::read_metadata(&map).map_err(|e| {
            Error::format(format!("{}: not a valid safetensors file: {e:?}", path.display()))
        })?;
        let base = 8 + header;
        let file_idx = self.maps.len();
        for (name, info) in meta.tensors() {
            let dtype = match info.dtype {
                Dtype::F32 => Some(DType::F32),
                Dtype::F16 => Some(DType::F16),
                Dtype::BF16 => Some(DType::Bf16),
                _ => None,
            };
            let (start, end) = (base + info.data_offsets.0, base + info.data_offsets.1);
            if end > map.len() {
                return Err(Error::format(format!(
                    "{}: tensor `{name}` ends at byte {end}, past the file's {} bytes",
                    path.display(),
                    map.len()
                )));
            }
            let loc = Loc {
                file: Store::Mapped(file_idx),
                dtype,
                raw_dtype: info.dtype,
                shape: info.shape.clone(),
                start,
                end,
            };
            self.tensors.insert(format!("{prefix}{name}"), loc);
        }
        self.maps.push(map);
        Ok(())
    }

    /// Lets the OS take back this process's pages of the mapped weights, once a backend holds
    /// its own copy: they stay readable, read from the file again if asked for. Without this, a
    /// runner's process keeps the whole checkpoint resident beside the backend's weights.
    pub fn release_pages(&mut self) {
        #[cfg(unix)]
        for map in &self.maps {
            // SAFETY: `&mut self`, so nothing borrows the map. It is a shared, read-only mapping
            // of a file: MADV_DONTNEED drops its pages from this process, and a later read
            // faults them in again with the file's contents, as the first read did.
            if let Err(e) = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) } {
                tracing::debug!("the checkpoint's pages stay mapped: {e}");
            }
        }
    }

    /// Bytes of the mapped weights resident in this process, from `/proc/self/smaps`.
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn resident_bytes(&self) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let (mut total, mut ours) = (0, false);
        for line in smaps.lines() {
            // A mapping's line starts with its address range; the lines after it, its figures.
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, _)) = first.split_once('-')
                && let Ok(start) = usize::from_str_radix(a, 16)
            {
                ours = self.maps.iter().any(|m| m.as_ptr() as usize == start);
            } else if ours && let Some(kb) = line.strip_prefix("Rss:") {
                total += kb.trim().trim_end_matches(" kB").parse::<usize>().unwrap() * 1024;
            }
        }
        total
    }

    /// Adds the f32 tensor `name` of `shape`, computed from the checkpoint's own, which
    /// [`Checkpoint::tensor`] then gives as it gives theirs; an error if the name is taken or
    /// the values do not fill the shape.
    pub(crate) fn derive(&mut self, name: String, shape: Vec<usize>, values: &[f32]) -> Result<()> {
        if self.tensors.contains_key(&name) {
            return Err(Error::format(format!("the checkpoint already has a tensor `{name}`")));
        }
        if shape.iter().product::<usize>() != values.len() {
            return Err(Error::format(format!(
                "tensor `{name}`: {} values for shape {shape:?}",
                values.len()
            )));
        }
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let end = bytes.len();
        let file = Store::Derived(self.derived.len());
        self.derived.push(bytes);
        let loc =
            Loc { file, dtype: Some(DType::F32), raw_dtype: Dtype::F32, shape, start: 0, end };
        self.tensors.insert(name, loc);
        Ok(())
    }

    /// The bytes of the tensor at `loc`.
    fn bytes(&self, loc: &Loc) -> &[u8] {
        match loc.file {
            Store::Mapped(i) => &self.maps[i][loc.start..loc.end],
            Store::Derived(i) => &self.derived[i][loc.start..loc.end],
        }
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The parsed `config.json`.
    pub fn config(&self) -> &serde_json::Value {
        &self.config
    }

    /// Whether a tensor of this name exists.
    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The shape of a tensor, if it exists.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|l| l.shape.as_slice())
    }

    /// A floating-point tensor by name, borrowed from the mapped file.
    pub fn tensor(&self, name: &str) -> Result<HostTensor<'_>> {
        let loc = self
            .tensors
            .get(name)
            .ok_or_else(|| Error::format(format!("the checkpoint has no tensor `{name}`")))?;
        let dtype = loc.dtype.ok_or_else(|| {
            Error::format(format!(
                "tensor `{name}` is {:?}; weights must be F32, F16 or BF16",
                loc.raw_dtype
            ))
        })?;
        let t = HostTensor { dtype, shape: &loc.shape, bytes: self.bytes(loc) };
        t.check().map_err(|e| Error::format(format!("tensor `{name}`: {e}")))?;
        Ok(t)
    }

    /// Whether the tensor `name` was computed when the model loaded rather than read from a
    /// file (see [`crate::Derived`]).
    pub fn is_derived(&self, name: &str) -> bool {
        self.tensors.get(name).is_some_and(|l| matches!(l.file, Store::Derived(_)))
    }

    /// The name of every tensor, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.tensors.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// A tensor of any dtype as the file stores it: its dtype, shape and bytes (what a writer
    /// copies unchanged).
    pub fn raw(&self, name: &str) -> Option<(Dtype, &[usize], &[u8])> {
        let loc = self.tensors.get(name)?;
        Some((loc.raw_dtype, &loc.shape, self.bytes(loc)))
    }

    /// The first of `names` that exists.
    pub fn first_of<'n>(&self, names: &[&'n str]) -> Option<&'n str> {
        names.iter().copied().find(|n| self.has(n))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn released_pages_leave_the_process_and_read_back_the_same() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny/bert");
        let mut ck = Checkpoint::open(&dir).unwrap();
        let read = |ck: &Checkpoint| -> Vec<Vec<u8>> {
            ck.names().iter().map(|n| ck.raw(n).unwrap().2.to_vec()).collect()
        };
        let before = read(&ck);
        assert!(ck.resident_bytes() > 0, "reading the weights maps their pages in");
        ck.release_pages();
        assert_eq!(ck.resident_bytes(), 0);
        assert_eq!(read(&ck), before);
        assert!(ck.resident_bytes() > 0);
    }
}
