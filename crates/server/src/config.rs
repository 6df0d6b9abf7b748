//! [`Config`]: how the server limits, batches and guards its routes.

use std::time::Duration;

use switchyard_models::Prompt;

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
    /// The prompt before the texts of requests that name none, for the models that take
    /// prompts (embedding and sparse models).
    pub default_prompt: DefaultPrompt,
}

/// The prompt a request that names none gets (text-embeddings-inference's
/// `--default-prompt-name` and `--default-prompt`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DefaultPrompt {
    /// Each model's own default (`default_prompt_name`), or none where it names none: what
    /// sentence-transformers' `encode` does.
    #[default]
    Model,
    /// The prompt each model names so; every model that takes prompts must have it.
    Named(String),
    /// This text (empty: none, even where a model has a default).
    Text(String),
}

impl DefaultPrompt {
    /// The choice it makes, as the models crate takes it.
    pub fn choice(&self) -> Prompt<'_> {
        match self {
            DefaultPrompt::Model => Prompt::Default,
            DefaultPrompt::Named(name) => Prompt::Named(name),
            DefaultPrompt::Text(text) => Prompt::Text(text),
        }
    }
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
            default_prompt: DefaultPrompt::Model,
        }
    }
}
