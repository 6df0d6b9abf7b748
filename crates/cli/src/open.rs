//! Opening a model on a device: what every task type of the front door starts with.

use switchyard_core::{Buckets, DType};
use switchyard_dispatch::{Device, Dispatch};
use switchyard_models::{Model, Runner, Task};

use crate::{Error, Result};

/// Where and how a model runs: the device, the dtype it computes in, and the bucket table its
/// batches are sized by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The device (default: flex).
    pub device: Device,
    /// The dtype weights are stored and activations computed in (default: f32).
    pub dtype: DType,
    /// The bucket table (default: the compiled-in one).
    pub buckets: Buckets,
}

impl Default for Options {
    fn default() -> Self {
        Options { device: Device::flex(), dtype: DType::F32, buckets: Buckets::default() }
    }
}

impl Options {
    /// The defaults, on the device named `device` (`flex`, `cuda:0`, `remote:HOST:PORT`, ...).
    pub fn on(device: &str) -> Result<Options> {
        Ok(Options { device: device.parse()?, ..Options::default() })
    }

    /// These options computing in `dtype`.
    pub fn dtype(self, dtype: DType) -> Options {
        Options { dtype, ..self }
    }
}

/// Loads `model` (a checkpoint directory, or a Hugging Face repository id fetched into the
/// Hugging Face cache) and uploads it to the device of `options`: a [`Runner`] for any task.
pub fn open_runner(model: &str, options: &Options) -> Result<Runner<Dispatch>> {
    let dir = crate::resolve(model)?;
    let loaded = Model::load(&dir)?;
    let backend = Dispatch::new(&options.device)?;
    let backend = switchyard_core::Backend::with_dtype(backend, options.dtype)?;
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
        "{model} is {}, not {wanted}; open it as a {instead}",
        task.describe()
    )))
}

/// Texts as the runner takes them.
pub(crate) fn strs<T: AsRef<str>>(texts: &[T]) -> Vec<&str> {
    texts.iter().map(AsRef::as_ref).collect()
}
