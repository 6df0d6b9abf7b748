//! Opening a model on a device: what every task type of the front door starts with.

use std::num::NonZeroUsize;

use switchyard_core::{Buckets, DType};
use switchyard_dispatch::{Device, Dispatch};
use switchyard_models::{Model, Runner, Task};

use crate::{Error, Result};

/// Where and how a model runs: the device, the dtype it computes in, the bucket table its
/// batches are sized by, and flex's thread count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The device (default: flex).
    pub device: Device,
    /// The dtype weights are stored and activations computed in (default: f32).
    pub dtype: DType,
    /// The bucket table (default: the compiled-in one).
    pub buckets: Buckets,
    /// flex's thread count (default: `SWITCHYARD_THREADS`, else every core); set for another
    /// device, an error when opening.
    pub threads: Option<NonZeroUsize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            device: Device::flex(),
            dtype: DType::F32,
            buckets: Buckets::default(),
            threads: None,
        }
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

    /// These options on `threads` threads (flex only).
    pub fn threads(self, threads: NonZeroUsize) -> Options {
        Options { threads: Some(threads), ..self }
    }
}

/// The backend on the device of `options`, on its thread count where one is set; an error for
/// a device that computes nothing, whose outputs would be made up.
fn backend(options: &Options) -> Result<Dispatch> {
    if options.device.family().backend == "capture" {
        return Err(switchyard_core::Error::Unsupported(
            "the capture device records plans and computes nothing, so it has no results to \
             give; `switchyard inspect --model MODEL` shows the plan"
                .into(),
        )
        .into());
    }
    match options.threads {
        None => Ok(Dispatch::new(&options.device)?),
        #[cfg(feature = "flex")]
        Some(n) if options.device == Device::flex() => {
            let backend = switchyard_dispatch::flex::with_threads(Some(n.get()))?;
            Ok(Dispatch::Flex { device: options.device.clone(), backend })
        }
        Some(_) => Err(switchyard_core::Error::Unsupported(format!(
            "a thread count can be set for flex only; {} uses its own threads",
            options.device
        ))
        .into()),
    }
}

/// Loads `model` (a checkpoint directory, or a Hugging Face repository id fetched into the
/// Hugging Face cache) and uploads it to the device of `options`: a [`Runner`] for any task.
pub fn open_runner(model: &str, options: &Options) -> Result<Runner<Dispatch>> {
    let dir = crate::resolve(model)?;
    let loaded = Model::load(&dir)?;
    let backend = switchyard_core::Backend::with_dtype(backend(options)?, options.dtype)?;
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

#[cfg(test)]
mod tests {
    use switchyard_core::Backend;

    use super::*;

    #[test]
    fn a_thread_count_sizes_flex_and_is_refused_elsewhere() {
        let three = NonZeroUsize::new(3).unwrap();
        let flex = backend(&Options::default().threads(three)).unwrap();
        assert_eq!(flex.caps().threads, 3);
        let e = backend(&Options::on("ndarray").unwrap().threads(three)).unwrap_err();
        assert!(e.to_string().contains("flex only"), "{e}");
    }

    #[cfg(feature = "capture")]
    #[test]
    fn the_capture_device_gives_no_made_up_results() {
        let e = backend(&Options::on("capture").unwrap()).unwrap_err().to_string();
        assert!(e.contains("computes nothing") && e.contains("switchyard inspect"), "{e}");
    }
}
