//! The front door's one error type.

/// Everything that can go wrong opening or running a model through the front door.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading the checkpoint, tokenizing, or running on the device failed.
    #[error(transparent)]
    Model(#[from] switchyard_models::Error),
    /// A model argument names neither a directory nor a Hugging Face repository that could be
    /// fetched.
    #[error("{0}")]
    Hub(String),
    /// An input file or text that cannot be read as inputs; the message names the line.
    #[error("{0}")]
    Input(String),
    /// The model does not do what the type opening it does (an embedder opened as a reranker).
    #[error("{0}")]
    WrongTask(String),
    /// Training or explaining failed: bad records or settings, a diverged run, the files.
    #[cfg(feature = "train")]
    #[error(transparent)]
    Train(#[from] switchyard_train::Error),
}

impl From<switchyard_core::Error> for Error {
    fn from(e: switchyard_core::Error) -> Self {
        Error::Model(e.into())
    }
}

/// The result type of the front door.
pub type Result<T, E = Error> = std::result::Result<T, E>;
