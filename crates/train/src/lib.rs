//! switchyard-train: fine-tuning and attributions for Switchyard's encoders.
//!
//! Gradients flow through the same [`Graph`](switchyard_core::Graph) and the same lowering
//! (switchyard-burn) that serve a model, on any Burn backend wrapped in burn-autodiff: every
//! device whose backend runs on Burn (flex, ndarray, the cube devices, tch) trains, with no
//! second model definition. Batches are ragged, as in inference: no padding, so no token is
//! paid for twice.
//!
//! - [`Graded`]: a graph whose weights are parameters; a forward pass with a tape, and its
//!   backward.
//! - [`loss`]: sentence-transformers' and transformers' losses (MultipleNegativesRanking,
//!   CoSENT, cross-entropy, binary cross-entropy).
//! - [`optim`]: AdamW, the linear warm-up and decay schedule, gradient clipping.
//! - [`data`]: JSON-lines training records per task, and batches packed by a token budget.
//! - [`Trainer`]: the loop: epochs, evaluation, checkpoints and resuming; the result an
//!   ordinary Hugging Face directory ([`export`]).
//! - [`explain`]: integrated gradients of a classifier's label, a cross-encoder's score or a
//!   similarity, per token and per word.

pub mod data;
pub mod explain;
pub mod export;
mod graded;
pub mod loss;
pub mod metrics;
pub mod optim;
#[cfg(feature = "testkit")]
pub mod testkit;
mod trainer;

use std::path::{Path, PathBuf};

pub use graded::{Graded, Grads, Param, Pass};
pub use trainer::{Eval, Job, Progress, Settings, Step, Task, TrainReport, Trainer};

/// A Burn backend with gradients: `B` wrapped in burn-autodiff.
pub type Ad<B> = burn_autodiff::Autodiff<B>;

/// Everything that can go wrong training or explaining.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading or running the model (a bad checkpoint, the tokenizer, the device).
    #[error(transparent)]
    Model(#[from] switchyard_models::Error),
    /// A training record that cannot be used, named by its file and line.
    #[error("{}:{line}: {msg}", path.display())]
    Data {
        /// The file.
        path: PathBuf,
        /// Its line, from 1.
        line: usize,
        /// What is wrong with it.
        msg: String,
    },
    /// Settings or inputs that do not fit together (a task the model cannot learn, labels that
    /// do not match its head, an empty data set).
    #[error("{0}")]
    Config(String),
    /// Training diverged: a loss or gradient that is not a finite number.
    #[error("training diverged: {0}")]
    Diverged(String),
    /// Reading or writing a file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl From<switchyard_core::Error> for Error {
    fn from(e: switchyard_core::Error) -> Self {
        Error::Model(switchyard_models::Error::Core(e))
    }
}

impl Error {
    /// Reading or writing `path` failed.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Error {
        Error::Io { path: path.to_owned(), source }
    }
}

/// The result type of switchyard-train.
pub type Result<T, E = Error> = std::result::Result<T, E>;
