//! The HTTP side: routes, the API key, metrics per request, and the path every computing
//! request takes (choose the model, tokenize off the async threads, queue, wait).

mod error;
mod openai;
mod tei;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use subtle::ConstantTimeEq;
use switchyard_models::{Encoded, Marked, Marking, Prompt, Read, Task, Truncation};

pub(crate) use error::{ApiError, ErrorBody, OpenAiError, OpenAiErrorBody};

use crate::Config;
use crate::metrics::{Metrics, RequestLabels, StageLabels};
use crate::pool::{Meta, Pool, Rows};

/// A served model: its name, what it is, and its pool of replicas.
pub(crate) struct Served {
    pub name: String,
    /// The devices of its replicas, comma-separated (`x-compute-type`).
    pub devices: String,
    pub meta: Meta,
    /// The text before each input of a request that names no prompt.
    pub default_prompt: String,
    pub pool: Pool,
}

/// What every handler shares.
pub(crate) struct App {
    pub config: Config,
    pub models: Vec<Served>,
    pub metrics: Arc<Metrics>,
    /// Requests being tokenized, queued or computed.
    in_flight: AtomicUsize,
}

impl App {
    pub fn new(config: Config, models: Vec<Served>, metrics: Arc<Metrics>) -> App {
        App { config, models, metrics, in_flight: AtomicUsize::new(0) }
    }

    /// The model named `name`, or the first one; 404 for a name no model has.
    fn model(&self, name: Option<&str>) -> Result<usize, ApiError> {
        match name {
            None => Ok(0),
            Some(n) => self.models.iter().position(|m| m.name == n).ok_or_else(|| {
                let names: Vec<&str> = self.models.iter().map(|m| m.name.as_str()).collect();
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("no model named {n:?}; this server has {}", names.join(", ")),
                )
            }),
        }
    }

    /// A place among the requests in flight, or 429 when they are all taken.
    fn admit(self: &Arc<Self>) -> Result<Admitted, ApiError> {
        let limit = self.config.max_concurrent_requests;
        let taken = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let admitted = Admitted(Arc::clone(self));
        if taken >= limit {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "Overloaded",
                format!("the server is at its limit of {limit} concurrent requests; retry later"),
            ));
        }
        Ok(admitted)
    }
}

/// A request's place among those in flight, given back when dropped.
struct Admitted(Arc<App>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The routes, with the API key, metrics and tracing around them.
pub(crate) fn router(app: Arc<App>) -> Router {
    let routes = Router::new()
        .route("/", post(tei::root))
        .route("/embed", post(tei::embed))
        .route("/similarity", post(tei::similarity))
        .route("/embed_sparse", post(tei::embed_sparse))
        .route("/embed_all", post(tei::embed_all))
        .route("/rerank", post(tei::rerank))
        .route("/predict", post(tei::predict))
        .route("/tokenize", post(tei::tokenize))
        .route("/decode", post(tei::decode))
        .route("/info", get(tei::info))
        .route("/health", get(tei::health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/v1/models", get(openai::models));
    let cors = cors(&app.config.cors_origins);
    let router = routes
        .layer(middleware::from_fn_with_state(Arc::clone(&app), authorize))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), count))
        .layer(axum::extract::DefaultBodyLimit::max(app.config.payload_limit))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .fallback(not_found)
        .with_state(app);
    match cors {
        Some(c) => router.layer(c),
        None => router,
    }
}

/// CORS for `origins` (`*` for any), or none.
fn cors(origins: &[String]) -> Option<tower_http::cors::CorsLayer> {
    use tower_http::cors::{AllowOrigin, Any, CorsLayer};
    if origins.is_empty() {
        return None;
    }
    let layer = CorsLayer::new().allow_methods(Any).allow_headers(Any);
    if origins.iter().any(|o| o == "*") {
        return Some(layer.allow_origin(Any));
    }
    let list = origins.iter().filter_map(|o| HeaderValue::from_str(o).ok());
    Some(layer.allow_origin(AllowOrigin::list(list)))
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NotFound", "no such route; GET /info lists the models")
}

/// The OpenAPI description of every route, made from the handlers' annotations and types.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Switchyard",
        description = "Transformer encoders over HTTP: text-embeddings-inference's routes and OpenAI's embeddings API"
    ),
    paths(
        tei::root,
        tei::embed,
        tei::similarity,
        tei::embed_sparse,
        tei::embed_all,
        tei::rerank,
        tei::predict,
        tei::tokenize,
        tei::decode,
        tei::info,
        tei::health,
        metrics,
        openapi,
        openai::embeddings,
        openai::models
    )
)]
pub(crate) struct Doc;

/// `GET /openapi.json`: the OpenAPI description of every route.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "This document")))]
async fn openapi() -> Response {
    axum::Json(<Doc as utoipa::OpenApi>::openapi()).into_response()
}

/// `GET /metrics`: every metric in Prometheus' text format.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text", content_type = "application/openmetrics-text")))]
async fn metrics(State(app): State<Arc<App>>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], app.metrics.render()).into_response()
}

/// Requires `Authorization: Bearer KEY` on every route but `/health` when the server has a key.
async fn authorize(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let Some(key) = app.config.api_key.as_deref() else {
        return next.run(request).await;
    };
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or_default();
    if bool::from(given.ct_eq(key.as_bytes())) {
        return next.run(request).await;
    }
    let e = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "this server needs `Authorization: Bearer KEY` with its API key",
    );
    if request.uri().path().starts_with("/v1/") {
        e.openai().into_response()
    } else {
        e.into_response()
    }
}

/// Counts each request by route and status.
async fn count(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16();
    app.metrics.requests.get_or_create(&RequestLabels { route, status }).inc();
    response
}

/// One input of a request: a text, a pair of texts, or token ids.
pub(crate) enum Text {
    One(String),
    Pair(String, String),
    Ids(Vec<u32>),
}

impl Text {
    fn chars(&self) -> usize {
        match self {
            Text::One(t) => t.chars().count(),
            Text::Pair(a, b) => a.chars().count() + b.chars().count(),
            Text::Ids(_) => 0,
        }
    }
}

/// How a request wants its inputs tokenized.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Encoding {
    /// Truncation asked for (`truncate`); the server's `--auto-truncate` implies it.
    pub truncate: bool,
    /// Which end truncation keeps.
    pub left: bool,
    /// Which tokens a token classifier labels.
    pub marking: Marking,
    /// Which output to read.
    pub read: Read,
}

impl Default for Encoding {
    fn default() -> Self {
        Encoding { truncate: false, left: false, marking: Marking::FirstSubToken, read: Read::Head }
    }
}

/// A computed request: per input its output rows, token count and marked tokens, and timing.
pub(crate) struct Computed {
    pub rows: Vec<Rows>,
    pub tokens: Vec<usize>,
    pub marks: Vec<Vec<(u32, (usize, usize))>>,
    timing: Timing,
}

/// Where a request's time went, sent back as text-embeddings-inference's headers.
struct Timing {
    tokenize: Duration,
    queue: Duration,
    inference: Duration,
    total: Duration,
    characters: usize,
    tokens: usize,
    devices: String,
}

impl Computed {
    /// text-embeddings-inference's timing headers (milliseconds).
    pub fn headers(&self) -> HeaderMap {
        let t = &self.timing;
        let ms = |d: Duration| d.as_millis().to_string();
        let mut h = HeaderMap::new();
        let pairs = [
            ("x-compute-type", t.devices.clone()),
            ("x-compute-time", ms(t.total)),
            ("x-compute-characters", t.characters.to_string()),
            ("x-compute-tokens", t.tokens.to_string()),
            ("x-total-time", ms(t.total)),
            ("x-tokenization-time", ms(t.tokenize)),
            ("x-queue-time", ms(t.queue)),
            ("x-inference-time", ms(t.inference)),
        ];
        for (name, value) in pairs {
            if let Ok(v) = HeaderValue::from_str(&value) {
                h.insert(name, v);
            }
        }
        h
    }
}

/// Checks a request's input count: 422 for none, 413 past `--max-client-batch-size`.
pub(crate) fn check_count(app: &App, n: usize) -> Result<(), ApiError> {
    let max = app.config.max_client_batch_size;
    if n == 0 {
        return Err(ApiError::invalid("`inputs` cannot be empty"));
    }
    if n > max {
        return Err(ApiError::too_large(format!(
            "a request carries at most {max} inputs (--max-client-batch-size); this one has {n}"
        )));
    }
    Ok(())
}

/// Checks a request's `dimensions` against model `m`'s embedding width: 422 outside 1 to it.
pub(crate) fn check_dimensions(
    app: &App,
    m: usize,
    dimensions: Option<usize>,
) -> Result<(), ApiError> {
    let dim = app.models[m].meta.dim;
    match dimensions {
        Some(d) if d == 0 || d > dim => Err(ApiError::invalid(format!(
            "dimensions {d}: this model's embeddings have 1 to {dim}"
        ))),
        _ => Ok(()),
    }
}

/// The text model `m` puts before each input: the prompt `name` names, else the server's default
/// for it ([`Served::default_prompt`]); 422 for a name the model does not have.
pub(crate) fn prompt<'a>(
    app: &'a App,
    m: usize,
    name: Option<&'a str>,
) -> Result<&'a str, ApiError> {
    let served = &app.models[m];
    match name {
        Some(name) => served
            .meta
            .prompts
            .text(Prompt::Named(name))
            .map_err(|e| ApiError::invalid(e.to_string())),
        None => Ok(&served.default_prompt),
    }
}

/// `text` with `prompt` before it; an empty text stays empty, to be refused as one.
pub(crate) fn prompted(prompt: &str, mut text: String) -> String {
    if !text.is_empty() {
        text.insert_str(0, prompt);
    }
    text
}

/// Tokenizes `texts` for model `m` off the async threads, runs them through its pool and
/// waits for the result.
pub(crate) async fn compute(
    app: &Arc<App>,
    m: usize,
    texts: Vec<Text>,
    encoding: Encoding,
) -> Result<Computed, ApiError> {
    let arrived = Instant::now();
    check_count(app, texts.len())?;
    let _admitted = app.admit()?;
    let characters = texts.iter().map(Text::chars).sum();
    let worker = Arc::clone(app);
    let inputs = blocking(move || tokenize(&worker, m, texts, encoding)).await?;
    let tokenized = Instant::now();
    let tokens: Vec<usize> = inputs.iter().map(|(e, _)| e.ids.len()).collect();
    let marks = inputs.iter().map(|(_, m)| m.clone()).collect();
    let served = &app.models[m];
    let reply = served.pool.submit(inputs, encoding.read)?;
    let waited =
        tokio::time::timeout(app.config.request_timeout.saturating_sub(arrived.elapsed()), reply);
    let done = match waited.await {
        Ok(Ok(done)) => done?,
        Ok(Err(_)) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unhealthy",
                "the server is shutting down",
            ));
        }
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "Timeout",
                format!("no answer within {:?}", app.config.request_timeout),
            ));
        }
    };
    let stage = |stage, d: Duration| {
        app.metrics.stage_seconds.get_or_create(&StageLabels { stage }).observe(d.as_secs_f64());
    };
    let tokenize = tokenized.duration_since(arrived);
    stage("tokenize", tokenize);
    stage("queue", done.queued);
    stage("compute", done.computed);
    let timing = Timing {
        tokenize,
        queue: done.queued,
        inference: done.computed,
        total: arrived.elapsed(),
        characters,
        tokens: tokens.iter().sum(),
        devices: served.devices.clone(),
    };
    Ok(Computed { rows: done.rows, tokens, marks, timing })
}

/// Runs `f` on tokio's blocking pool, so that tokenizing and decoding never hold up the async
/// threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let joined = tokio::task::spawn_blocking(f).await;
    joined
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Tokenizer", e.to_string()))?
}

/// Tokenizes a request's inputs as `encoding` says, marking a token classifier's tokens.
fn tokenize(
    app: &App,
    m: usize,
    texts: Vec<Text>,
    encoding: Encoding,
) -> Result<Vec<Marked>, ApiError> {
    let served = &app.models[m];
    let tokenizer = &served.meta.tokenizer;
    let truncation = match (encoding.truncate || app.config.auto_truncate, encoding.left) {
        (false, _) => Truncation::Refuse,
        (true, false) => Truncation::Right,
        (true, true) => Truncation::Left,
    };
    let marks = |e: &Encoded| match (&served.meta.task, encoding.marking) {
        (Task::ClassifyTokens { .. }, Marking::FirstSubToken) => e.word_starts(),
        (Task::ClassifyTokens { .. }, Marking::EveryToken) => e.text_tokens(),
        _ => Vec::new(),
    };
    texts
        .into_iter()
        .enumerate()
        .map(|(i, text)| {
            let e = match text {
                Text::One(t) if t.is_empty() => {
                    Err(ApiError::invalid(format!("input {i} is empty")))?
                }
                Text::One(t) => tokenizer.encode_with(&t, None, truncation, true)?,
                Text::Pair(a, b) => tokenizer.encode_with(&a, Some(&b), truncation, true)?,
                Text::Ids(ids) => from_ids(ids, served, truncation, i)?,
            };
            let m = marks(&e);
            Ok((e, m))
        })
        .collect()
}

/// An input given as token ids: checked against the vocabulary and the maximum length.
fn from_ids(
    mut ids: Vec<u32>,
    served: &Served,
    truncation: Truncation,
    i: usize,
) -> Result<Encoded, ApiError> {
    let (vocab, max) = (served.meta.vocab, served.meta.tokenizer.max_len());
    if ids.is_empty() {
        return Err(ApiError::invalid(format!("input {i} has no token ids")));
    }
    if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(ApiError::invalid(format!(
            "input {i} has token id {bad}, past the model's vocabulary of {vocab}"
        )));
    }
    if ids.len() > max {
        match truncation {
            Truncation::Refuse => {
                Err(switchyard_models::Error::TooLong { tokens: ids.len(), max })?
            }
            Truncation::Right => ids.truncate(max),
            Truncation::Left => {
                ids.drain(..ids.len() - max);
            }
        }
    }
    let n = ids.len();
    Ok(Encoded {
        ids,
        types: vec![0; n],
        tokens: Vec::new(),
        words: vec![None; n],
        offsets: vec![(0, 0); n],
        special: vec![false; n],
    })
}
