//! The errors of starting and running a server (the HTTP errors a client sees are in
//! `api::error`).

/// What can go wrong starting or running a server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model could not be opened on one of its devices.
    #[error("opening {model} on {device}: {source}")]
    Open {
        /// The model's name.
        model: String,
        /// The device it was opened on.
        device: String,
        /// Why it failed.
        #[source]
        source: switchyard_models::Error,
    },
    /// The models or the configuration make no server (no models, two with one name, a model
    /// without a device, a limit of zero).
    #[error("{0}")]
    Setup(String),
    /// The listening socket failed.
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

/// The result type of switchyard-server.
pub type Result<T, E = Error> = std::result::Result<T, E>;
