//! Opening a model on a device: what every task type of the front door starts with.

use std::num::NonZeroUsize;

use switchyard_core::{Buckets, DTypeChoice};
use switchyard_dispatch::{Device, Dispatch};
use switchyard_models::{Model, Runner, Task};

use crate::{Error, Result};

/// Where and how a model runs: the device, the dtype it computes in, the bucket table its
/// batches are sized by, and flex's thread count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The device (default: flex).
    pub device: Device,
    /// The dtype weights are stored and activations computed in (default: `auto`, the device's
    /// pick: f16 on a GPU with half-precision tensor cores, f32 elsewhere).
    pub dtype: DTypeChoice,
    /// The bucket table (default: the compiled-in one).
    pub buckets: Buckets,
    /// flex's thread count (default: `SWITCHYARD_THREADS`, else every core); set for another
    /// device, an error when opening.
    pub threads: Option<NonZeroUsize>,
    /// Where inputs are truncated, in tokens, special tokens included (default: the
    /// checkpoint's length, as sentence-transformers' `max_seq_length`).
    pub max_len: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            device: Device::flex(),
            dtype: DTypeChoice::Auto,
            buckets: Buckets::default(),
            threads: None,
            max_len: None,
        }
    }
}

impl Options {
    /// The defaults, on the device named `device` (`flex`, `cuda:0`, `remote:HOST:PORT`, ...).
    pub fn on(device: &str) -> Result<Options> {
        Ok(Options { device: device.parse()?, ..Options::default() })
    }

    /// These options computing in `dtype` (a [`DType`](switchyard_core::DType), or
    /// [`DTypeChoice::Auto`]).
    pub fn dtype(self, dtype: impl Into<DTypeChoice>) -> Options {
        Options { dtype: dtype.into(), ..self }
    }

    /// These options on `threads` threads (flex only).
    pub fn threads(self, threads: NonZeroUsize) -> Options {
        Options { threads: Some(threads), ..self }
    }

    /// These options truncating inputs at `max_len` tokens.
    pub fn max_len(self, max_len: usize) -> Options {
        Options { max_len: Some(max_len), ..self }
    }
}

/// The backend on `device`, flex on `threads` threads where given; an error for a device that
/// computes nothing, whose outputs would be made up.
pub(crate) fn backend(device: &Device, threads: Option<NonZeroUsize>) -> Result<Dispatch> {
    if device.family().backend == "capture" {
        return Err(switchyard_core::Error::Unsupported(
            "the capture device records plans and computes nothing, so it has no results to \
             give; `switchyard inspect --model MODEL` shows the plan"
                .into(),
        )
        .into());
    }
    match threads {
        None => Ok(Dispatch::new(device)?),
        #[cfg(feature = "flex")]
        Some(n) if *device == Device::flex() => {
            let backend = switchyard_dispatch::flex::with_threads(Some(n.get()))?;
            Ok(Dispatch::Flex { device: device.clone(), backend })
        }
        Some(_) => Err(switchyard_core::Error::Unsupported(format!(
            "a thread count can be set for flex only; {device} uses its own threads"
        ))
        .into()),
    }
}

/// Loads `model` (a checkpoint directory, or a Hugging Face repository id fetched into the
/// Hugging Face cache) and uploads it to the device of `options`: a [`Runner`] for any task.
pub fn open_runner(model: &str, options: &Options) -> Result<Runner<Dispatch>> {
    let dir = crate::resolve(model)?;
    let mut loaded = Model::load(&dir)?;
    if let Some(n) = options.max_len {
        loaded.set_max_len(n)?;
    }
    let backend = backend(&options.device, options.threads)?;
    let dtype = options.dtype.resolve(&switchyard_core::Backend::caps(&backend));
    let backend = switchyard_core::Backend::with_dtype(backend, dtype)?;
    Ok(Runner::new(loaded, backend, options.buckets.clone())?)
}

/// [`open_runner`] for a model whose task `fits`, else an error saying what it is and which
/// type to open it with.
pub(crate) fn open_for(
    model: &str,
    options: &Options,
    fits: impl Fn(&Task) -> bool,
    wanted: &str,
) -> Result<Runner<Dispatch>> {
    let runner = open_runner(model, options)?;
    let task = runner.model().task();
    if fits(task) {
        return Ok(runner);
    }
    let instead = match task {
        Task::Embed(_) => "Embedder",
        Task::Classify { labels } if labels.len() == 1 => "Reranker (or Classifier)",
        Task::Classify { .. } | Task::ClassifyTokens { .. } => "Classifier",
        Task::Sparse => "SparseEncoder",
    };
    Err(Error::WrongTask(format!(
        "{model} is {}, not {wanted}; open it with {instead}",
        task.describe()
    )))
}

/// Texts as the runner takes them; an error naming the first longer than
/// [`MAX_INPUT_BYTES`](crate::input::MAX_INPUT_BYTES), which the tokenizer would hold whole.
pub(crate) fn strs<T: AsRef<str>>(texts: &[T]) -> Result<Vec<&str>> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = t.as_ref();
            crate::input::too_long(t, &format!("text {i}"))?;
            Ok(t)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use switchyard_core::Backend;

    use super::*;

    #[test]
    fn a_thread_count_sizes_flex_and_is_refused_elsewhere() {
        let three = NonZeroUsize::new(3).unwrap();
        let flex = backend(&Device::flex(), Some(three)).unwrap();
        assert_eq!(flex.caps().threads, 3);
        let e = backend(&"ndarray".parse().unwrap(), Some(three)).unwrap_err();
        assert!(e.to_string().contains("flex only"), "{e}");
    }

    #[test]
    fn a_maximum_length_truncates_inputs_and_is_checked() {
        let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures/tiny/bert");
        let runner = open_runner(model, &Options::default().max_len(5)).unwrap();
        let ids = runner.model().tokenizer().encode("cats sat on mats and more cats").unwrap().ids;
        assert_eq!(ids.len(), 5, "{ids:?}");
        let e = open_runner(model, &Options::default().max_len(1)).err().unwrap().to_string();
        assert!(e.contains("a maximum length of 1 tokens"), "{e}");
    }

    #[test]
    fn a_text_over_the_input_limit_is_named_before_it_is_tokenized() {
        let limit = crate::input::MAX_INPUT_BYTES;
        let texts = ["short".to_owned(), "a".repeat(limit), "b".repeat(limit + 1)];
        let e = strs(&texts).unwrap_err().to_string();
        assert!(e.starts_with("text 2: an input of 1048577 bytes"), "{e}");
        assert_eq!(strs(&texts[..2]).unwrap().len(), 2);
    }

    #[cfg(feature = "capture")]
    #[test]
    fn the_capture_device_gives_no_made_up_results() {
        let e = backend(&"capture".parse().unwrap(), None).unwrap_err().to_string();
        assert!(e.contains("computes nothing") && e.contains("switchyard inspect"), "{e}");
    }
}
