//! `switchyard._switchyard`: the native half of the `switchyard` Python package.
//!
//! One Python class per front-door type of the `switchyard` crate, each holding its model behind
//! a lock (so Python threads may share one) and releasing the GIL while a batch runs. Results
//! cross as plain Python values (embeddings as one `bytes` of native-endian f32 with their
//! shape), which the package's Python half turns into numpy arrays and sentence-transformers'
//! shapes. Every error, a panic included, reaches Python as `SwitchyardError` with the Rust
//! error's message.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use switchyard::{DTypeChoice, Device, Options, Prompt};

create_exception!(
    _switchyard,
    SwitchyardError,
    PyException,
    "An error from Switchyard: a model that cannot be opened or run, or inputs it cannot take."
);

/// Runs `f`, turning its error, or a panic (a bug), into `SwitchyardError`.
fn guarded<T>(f: impl FnOnce() -> switchyard::Result<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(SwitchyardError::new_err(e.to_string())),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned());
            Err(SwitchyardError::new_err(format!("internal error (a bug in Switchyard): {what}")))
        }
    }
}

/// The options a model opens with: `device` (else `SWITCHYARD_DEVICE`, else flex), `dtype`,
/// flex's `threads` and where inputs are truncated.
fn options(
    device: Option<&str>,
    dtype: Option<&str>,
    threads: Option<usize>,
    max_len: Option<usize>,
) -> PyResult<Options> {
    let device = match device {
        Some(d) => d.parse::<Device>(),
        None => Device::from_env(),
    }
    .map_err(|e| SwitchyardError::new_err(e.to_string()))?;
    let mut options = Options { device, ..Options::default() };
    if let Some(d) = dtype {
        let d: DTypeChoice =
            d.parse().map_err(|e: switchyard::core::Error| PyValueError::new_err(e.to_string()))?;
        options = options.dtype(d);
    }
    if let Some(n) = threads {
        let n = NonZeroUsize::new(n)
            .ok_or_else(|| PyValueError::new_err("threads must be at least 1"))?;
        options = options.threads(n);
    }
    if let Some(n) = max_len {
        options = options.max_len(n);
    }
    Ok(options)
}

/// Opens a model with `open` and the options every class's constructor takes, with the GIL
/// released; the model and the options it opened with.
fn open<T: Send>(
    py: Python<'_>,
    model: &str,
    (device, dtype, threads, max_len): (Option<&str>, Option<&str>, Option<usize>, Option<usize>),
    open: impl FnOnce(&str, &Options) -> switchyard::Result<T> + Send,
) -> PyResult<(T, Options)> {
    let options = options(device, dtype, threads, max_len)?;
    let opened = py.detach(|| guarded(|| open(model, &options)))?;
    Ok((opened, options))
}

/// A labelled word as Python gets it: `(start, end, word, label, score)`, byte offsets.
type Word = (usize, usize, String, String, f32);

/// A sparse term as Python gets it: `(id, token or None, weight)`.
type Term = (u32, Option<String>, f32);

/// A model's prompts by name, and the name of its default prompt, if any.
fn prompts_of(model: &switchyard::Model) -> (BTreeMap<String, String>, Option<String>) {
    let prompts = model.prompts();
    (prompts.named.clone(), prompts.default.clone())
}

/// Locks a model for one call; a lock poisoned by a panic is still usable, since every call
/// starts from the model's own state.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A sentence embedder.
#[pyclass(module = "switchyard._switchyard", frozen)]
struct Embedder {
    inner: Mutex<switchyard::Embedder>,
    /// The model's prompts by name.
    #[pyo3(get)]
    prompts: BTreeMap<String, String>,
    /// The prompt used where a call names none, if any.
    #[pyo3(get)]
    default_prompt_name: Option<String>,
    /// How its embeddings are compared: `cosine`, `dot`, `euclidean` or `manhattan`.
    #[pyo3(get)]
    similarity_fn_name: &'static str,
    /// The width of an embedding.
    #[pyo3(get)]
    dim: usize,
    /// Where inputs are truncated, in tokens.
    #[pyo3(get)]
    max_seq_length: usize,
    /// The device it runs on.
    #[pyo3(get)]
    device: String,
}

#[pymethods]
impl Embedder {
    /// Opens the embedding model `model` (a directory or a Hugging Face repository id).
    #[new]
    #[pyo3(signature = (model, device=None, dtype=None, threads=None, max_seq_length=None))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: Option<&str>,
        dtype: Option<&str>,
        threads: Option<usize>,
        max_seq_length: Option<usize>,
    ) -> PyResult<Self> {
        let args = (device, dtype, threads, max_seq_length);
        let (inner, options) = open(py, model, args, switchyard::Embedder::open_with)?;
        let (prompts, default_prompt_name) = prompts_of(inner.model());
        Ok(Embedder {
            prompts,
            default_prompt_name,
            similarity_fn_name: inner.model().similarity().name(),
            dim: inner.dim(),
            max_seq_length: inner.model().tokenizer().max_len(),
            device: options.device.to_string(),
            inner: inner.into(),
        })
    }

    /// The embeddings of `texts` with the prompt chosen before each (`prompt`, else the prompt
    /// named `prompt_name`, else the model's default), as native-endian f32 bytes,
    /// `len(texts)` rows of `dim`.
    #[pyo3(signature = (texts, prompt_name=None, prompt=None))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        prompt_name: Option<&str>,
        prompt: Option<&str>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let choice = Prompt::choose(prompt_name, prompt);
        let rows = py.detach(|| guarded(|| lock(&self.inner).embed_with_prompt(&texts, choice)))?;
        let floats = rows.len() * self.dim;
        PyBytes::new_with(py, floats * 4, |buf| {
            for (chunk, x) in buf.chunks_exact_mut(4).zip(rows.iter().flatten()) {
                chunk.copy_from_slice(&x.to_ne_bytes());
            }
            Ok(())
        })
    }
}

/// A cross-encoder reranker.
#[pyclass(module = "switchyard._switchyard", frozen)]
struct Reranker {
    inner: Mutex<switchyard::Reranker>,
    /// The model's prompts by name.
    #[pyo3(get)]
    prompts: BTreeMap<String, String>,
    /// The prompt put before the query where a call names none, if any.
    #[pyo3(get)]
    default_prompt_name: Option<String>,
    /// The device it runs on.
    #[pyo3(get)]
    device: String,
}

#[pymethods]
impl Reranker {
    /// Opens the cross-encoder `model`.
    #[new]
    #[pyo3(signature = (model, device=None, dtype=None, threads=None, max_seq_length=None))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: Option<&str>,
        dtype: Option<&str>,
        threads: Option<usize>,
        max_seq_length: Option<usize>,
    ) -> PyResult<Self> {
        let args = (device, dtype, threads, max_seq_length);
        let (inner, options) = open(py, model, args, switchyard::Reranker::open_with)?;
        let (prompts, default_prompt_name) = prompts_of(inner.model());
        Ok(Reranker {
            prompts,
            default_prompt_name,
            device: options.device.to_string(),
            inner: inner.into(),
        })
    }

    /// `docs` ranked against `query` with the prompt chosen before it (as [`Embedder::embed`]
    /// chooses it), most relevant first: `(index, score, logit)` each, the score being the
    /// model's `activation_fn` of the logit (the sigmoid unless it names another).
    #[pyo3(signature = (query, docs, prompt_name=None, prompt=None))]
    fn rank(
        &self,
        py: Python<'_>,
        query: String,
        docs: Vec<String>,
        prompt_name: Option<&str>,
        prompt: Option<&str>,
    ) -> PyResult<Vec<(usize, f32, f32)>> {
        let choice = Prompt::choose(prompt_name, prompt);
        let ranked =
            py.detach(|| guarded(|| lock(&self.inner).rank_with_prompt(&query, &docs, choice)))?;
        Ok(ranked.into_iter().map(|r| (r.index, r.score, r.logit)).collect())
    }
}

/// A sequence or token classifier.
#[pyclass(module = "switchyard._switchyard", frozen)]
struct Classifier {
    inner: Mutex<switchyard::Classifier>,
    /// The labels, in the order of the model's logits.
    #[pyo3(get)]
    labels: Vec<String>,
    /// Whether it labels each word (a token classifier) rather than each text.
    #[pyo3(get)]
    tokens: bool,
    /// The model's prompts by name.
    #[pyo3(get)]
    prompts: BTreeMap<String, String>,
    /// The prompt put before texts where a call names none, if any.
    #[pyo3(get)]
    default_prompt_name: Option<String>,
    /// The device it runs on.
    #[pyo3(get)]
    device: String,
}

#[pymethods]
impl Classifier {
    /// Opens the classifier `model`.
    #[new]
    #[pyo3(signature = (model, device=None, dtype=None, threads=None, max_seq_length=None))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: Option<&str>,
        dtype: Option<&str>,
        threads: Option<usize>,
        max_seq_length: Option<usize>,
    ) -> PyResult<Self> {
        let args = (device, dtype, threads, max_seq_length);
        let (inner, options) = open(py, model, args, switchyard::Classifier::open_with)?;
        let tokens = matches!(inner.model().task(), switchyard::Task::ClassifyTokens { .. });
        let (prompts, default_prompt_name) = prompts_of(inner.model());
        Ok(Classifier {
            labels: inner.labels().to_vec(),
            tokens,
            prompts,
            default_prompt_name,
            device: options.device.to_string(),
            inner: inner.into(),
        })
    }

    /// Each text's most likely label with the prompt chosen before it (as [`Embedder::embed`]
    /// chooses it): `(label, score, logits)` (a sequence classifier).
    #[pyo3(signature = (texts, prompt_name=None, prompt=None))]
    fn predict(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        prompt_name: Option<&str>,
        prompt: Option<&str>,
    ) -> PyResult<Vec<(String, f32, Vec<f32>)>> {
        let choice = Prompt::choose(prompt_name, prompt);
        let got =
            py.detach(|| guarded(|| lock(&self.inner).predict_with_prompt(&texts, choice)))?;
        Ok(got.into_iter().map(|p| (p.label, p.score, p.logits)).collect())
    }

    /// Each text's words with their labels: `(start, end, word, label, score)` each, with
    /// byte offsets into the UTF-8 text (a token classifier).
    fn label_words(&self, py: Python<'_>, texts: Vec<String>) -> PyResult<Vec<Vec<Word>>> {
        let got = py.detach(|| guarded(|| lock(&self.inner).label_words(&texts)))?;
        Ok(got
            .into_iter()
            .map(|words| {
                words.into_iter().map(|w| (w.span.0, w.span.1, w.text, w.label, w.score)).collect()
            })
            .collect())
    }
}

/// A SPLADE sparse encoder.
#[pyclass(module = "switchyard._switchyard", frozen)]
struct SparseEncoder {
    inner: Mutex<switchyard::SparseEncoder>,
    /// The model's prompts by name.
    #[pyo3(get)]
    prompts: BTreeMap<String, String>,
    /// The prompt put before texts where a call names none, if any.
    #[pyo3(get)]
    default_prompt_name: Option<String>,
    /// The device it runs on.
    #[pyo3(get)]
    device: String,
}

#[pymethods]
impl SparseEncoder {
    /// Opens the SPLADE model `model`.
    #[new]
    #[pyo3(signature = (model, device=None, dtype=None, threads=None, max_seq_length=None))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: Option<&str>,
        dtype: Option<&str>,
        threads: Option<usize>,
        max_seq_length: Option<usize>,
    ) -> PyResult<Self> {
        let args = (device, dtype, threads, max_seq_length);
        let (inner, options) = open(py, model, args, switchyard::SparseEncoder::open_with)?;
        let (prompts, default_prompt_name) = prompts_of(inner.model());
        Ok(SparseEncoder {
            prompts,
            default_prompt_name,
            device: options.device.to_string(),
            inner: inner.into(),
        })
    }

    /// Each text's terms with the prompt chosen before it (as [`Embedder::embed`] chooses it),
    /// heaviest first: `(id, token or None, weight)` each.
    #[pyo3(signature = (texts, prompt_name=None, prompt=None))]
    fn encode(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        prompt_name: Option<&str>,
        prompt: Option<&str>,
    ) -> PyResult<Vec<Vec<Term>>> {
        let choice = Prompt::choose(prompt_name, prompt);
        let got = py.detach(|| guarded(|| lock(&self.inner).encode_with_prompt(&texts, choice)))?;
        Ok(got
            .into_iter()
            .map(|terms| terms.into_iter().map(|t| (t.id, t.token, t.weight)).collect())
            .collect())
    }
}

/// Every device family of this build: `(name, available, status)` each.
#[pyfunction]
fn devices(py: Python<'_>) -> Vec<(String, bool, String)> {
    py.detach(switchyard::devices).into_iter().map(|d| (d.name, d.available, d.status)).collect()
}

/// The native module.
#[pymodule]
fn _switchyard(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SwitchyardError", m.py().get_type::<SwitchyardError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_INPUT_BYTES", switchyard::input::MAX_INPUT_BYTES)?;
    m.add_class::<Embedder>()?;
    m.add_class::<Reranker>()?;
    m.add_class::<Classifier>()?;
    m.add_class::<SparseEncoder>()?;
    m.add_function(wrap_pyfunction!(devices, m)?)?;
    Ok(())
}
