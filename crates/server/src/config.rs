//! [`Config`]: how the server limits, batches and guards its routes.

use std::time::Duration;

/// The server's limits and switches; [`Config::default`] has text-embeddings-inference's
/// defaults where it has the same setting.
#[derive(Clone, Debug)]
pub struct Config {
    /// The most inputs one request may carry (413 past it).
    pub max_client_batch_size: usize,
    /// The most requests queued or running at once (429 past it).
    pub max_concurrent_requests: usize,
    /// The most tokens one batch holds (default: the model's batch limit, which is also the
    /// most this may be).
    pub max_batch_tokens: Option<usize>,
    /// The most inputs one batch holds (default: the model's batch limit).
    pub max_batch_requests: Option<usize>,
    /// Truncates over-long inputs even when a request does not ask to.
    pub auto_truncate: bool,
    /// The bearer token every route but `/health` requires.
    pub api_key: Option<String>,
    /// The largest request body, in bytes (413 past it).
    pub payload_limit: usize,
    /// The longest a request may take from arrival to answer (408 past it).
    pub request_timeout: Duration,
    /// Origins a browser may call the server from (none: no CORS headers are sent).
    pub cors_origins: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_client_batch_size: 32,
            max_concurrent_requests: 512,
            max_batch_tokens: None,
            max_batch_requests: None,
            auto_truncate: false,
            api_key: None,
            payload_limit: 2_000_000,
            request_timeout: Duration::from_secs(300),
            cors_origins: Vec::new(),
        }
    }
}
