//! text-embeddings-inference's routes, with its request and response shapes.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchyard_core::{DType, PoolMode};
use switchyard_models::{Marking, Read, Task, Truncation, scores};
use utoipa::ToSchema;

use super::{
    ApiError, App, Encoding, ErrorBody, Served, Text, blocking, check_count, check_dimensions,
    compute, prompt, prompted,
};

/// `?model=NAME`: which model a route uses (default: the first).
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ModelQuery {
    /// The model to use (default: the server's first).
    model: Option<String>,
}

/// One text or a list of texts.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum Inputs {
    One(String),
    Many(Vec<String>),
}

impl Inputs {
    fn texts(self) -> Vec<String> {
        match self {
            Inputs::One(t) => vec![t],
            Inputs::Many(v) => v,
        }
    }
}

/// Which end of an over-long input truncation keeps.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, ToSchema)]
pub(crate) enum Direction {
    #[default]
    #[serde(alias = "right")]
    Right,
    #[serde(alias = "left")]
    Left,
}

fn yes() -> bool {
    true
}

/// What a request says of over-long inputs: truncate them (else 413, unless the server
/// truncates by default), and from which end.
#[derive(Deserialize, ToSchema)]
pub(crate) struct Truncate {
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    truncation_direction: Direction,
}

impl Truncate {
    /// The encoding this asks for, on the model's head.
    fn encoding(&self) -> Encoding {
        Encoding {
            truncate: self.truncate.unwrap_or(false),
            left: self.truncation_direction == Direction::Left,
            ..Encoding::default()
        }
    }
}

/// The body of `/embed`, `/embed_sparse` and `/embed_all`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct EmbedRequest {
    inputs: Inputs,
    #[serde(flatten)]
    truncation: Truncate,
    #[serde(default = "yes")]
    normalize: bool,
    /// The model's prompt to put before each input (default: the model's default prompt).
    #[serde(default)]
    prompt_name: Option<String>,
    /// `/embed` only: keep each embedding's first this many dimensions (a Matryoshka model's
    /// shorter embedding), normalised after the cut unless `normalize` is false.
    #[serde(default)]
    dimensions: Option<usize>,
}

impl EmbedRequest {
    /// 422 for `dimensions` on a route other than `/embed`, which would leave it unused.
    fn no_dimensions(&self, route: &str) -> Result<(), ApiError> {
        match self.dimensions {
            Some(_) => Err(ApiError::invalid(format!(
                "`dimensions` cuts /embed's dense embeddings; {route} has none to cut"
            ))),
            None => Ok(()),
        }
    }

    /// The inputs with model `m`'s prompt before each, and the encoding asked for.
    fn inputs(self, app: &App, m: usize) -> Result<(Vec<Text>, Encoding), ApiError> {
        let p = prompt(app, m, self.prompt_name.as_deref())?;
        let texts = self.inputs.texts().into_iter().map(|t| Text::One(prompted(p, t))).collect();
        Ok((texts, self.truncation.encoding()))
    }
}

/// The model a request names (or the first) after checking it does what the route does.
fn pick(
    app: &App,
    query: Result<Query<ModelQuery>, QueryRejection>,
    fits: impl Fn(&Task) -> bool,
    route: &str,
    wanted: &str,
) -> Result<usize, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let m = app.model(q.model.as_deref())?;
    let served = &app.models[m];
    if fits(&served.meta.task) {
        return Ok(m);
    }
    Err(ApiError::wrong_model(format!(
        "{route} needs {wanted}, and {} is {}",
        served.name,
        served.meta.task.describe()
    )))
}

/// `v` scaled to unit length (left alone if zero).
pub(crate) fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// Whether model `m`'s graph normalises its embeddings itself.
pub(crate) fn normalizes(app: &App, m: usize) -> bool {
    matches!(&app.models[m].meta.task, Task::Embed(p) if p.normalize)
}

/// `POST /embed`: one vector per input.
#[utoipa::path(post, path = "/embed", params(ModelQuery), request_body = EmbedRequest,
    responses(
        (status = 200, description = "One vector per input, in order", body = Vec<Vec<f32>>),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn embed(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<EmbedRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let m = pick(&app, query, |t| matches!(t, Task::Embed(_)), "/embed", "an embedding model")?;
    let Json(req) = body?;
    embed_with(&app, m, req).await
}

/// `/embed` on model `m`.
async fn embed_with(app: &Arc<App>, m: usize, req: EmbedRequest) -> Result<Response, ApiError> {
    let cut = req.dimensions;
    check_dimensions(app, m, cut)?;
    // A cut embedding is normalised again, even where the graph normalised the whole one.
    let normalize = req.normalize && (cut.is_some() || !normalizes(app, m));
    let (texts, encoding) = req.inputs(app, m)?;
    let c = compute(app, m, texts, encoding).await?;
    let vectors: Vec<Vec<f32>> = c
        .rows
        .iter()
        .map(|r| {
            let mut v = r.first().cloned().unwrap_or_default();
            if let Some(d) = cut {
                v.truncate(d);
            }
            if normalize { normalized(v) } else { v }
        })
        .collect();
    Ok((c.headers(), Json(vectors)).into_response())
}

/// One SPLADE term.
#[derive(Serialize, ToSchema)]
struct SparseValue {
    index: u32,
    value: f32,
}

/// `POST /embed_sparse`: each input's non-zero SPLADE terms, heaviest first.
#[utoipa::path(post, path = "/embed_sparse", params(ModelQuery), request_body = EmbedRequest,
    responses(
        (status = 200, description = "Each input's non-zero SPLADE terms, heaviest first", body = Vec<Vec<SparseValue>>),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn embed_sparse(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<EmbedRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let m = pick(&app, query, |t| matches!(t, Task::Sparse), "/embed_sparse", "a SPLADE model")?;
    let Json(req) = body?;
    embed_sparse_with(&app, m, req).await
}

/// `/embed_sparse` on model `m`.
async fn embed_sparse_with(
    app: &Arc<App>,
    m: usize,
    req: EmbedRequest,
) -> Result<Response, ApiError> {
    req.no_dimensions("/embed_sparse")?;
    let (texts, encoding) = req.inputs(app, m)?;
    let c = compute(app, m, texts, encoding).await?;
    let terms: Vec<Vec<SparseValue>> = c
        .rows
        .iter()
        .map(|r| {
            let row = r.first().map_or(&[][..], Vec::as_slice);
            let terms = scores::sparse_terms(row).into_iter();
            terms.map(|(index, value)| SparseValue { index, value }).collect()
        })
        .collect();
    Ok((c.headers(), Json(terms)).into_response())
}

/// The body of `/similarity`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct SimilarityRequest {
    inputs: SimilarityInputs,
    #[serde(flatten)]
    truncation: Truncate,
    /// The model's prompt to put before each sentence (default: the model's default prompt).
    #[serde(default)]
    prompt_name: Option<String>,
}

/// A sentence and the sentences to compare it with.
#[derive(Deserialize, ToSchema)]
pub(crate) struct SimilarityInputs {
    source_sentence: String,
    sentences: Vec<String>,
}

/// `POST /similarity`: the similarity of the source sentence to each of the others (cosine,
/// unless the model names another function).
#[utoipa::path(post, path = "/similarity", params(ModelQuery), request_body = SimilarityRequest,
    responses(
        (status = 200, description = "The similarity of the source sentence to each sentence: cosine, unless the model's sentence-transformers configuration names dot, euclidean or manhattan", body = Vec<f32>),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn similarity(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<SimilarityRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let m =
        pick(&app, query, |t| matches!(t, Task::Embed(_)), "/similarity", "an embedding model")?;
    let Json(req) = body?;
    similarity_with(&app, m, req).await
}

/// `/similarity` on model `m`.
async fn similarity_with(
    app: &Arc<App>,
    m: usize,
    req: SimilarityRequest,
) -> Result<Response, ApiError> {
    let encoding = req.truncation.encoding();
    let SimilarityInputs { source_sentence, sentences } = req.inputs;
    let p = prompt(app, m, req.prompt_name.as_deref())?;
    let texts = std::iter::once(source_sentence).chain(sentences);
    let texts = texts.map(|t| Text::One(prompted(p, t))).collect();
    let c = compute(app, m, texts, encoding).await?;
    let vectors: Vec<&[f32]> =
        c.rows.iter().map(|r| r.first().map_or(&[][..], Vec::as_slice)).collect();
    let similarity = app.models[m].meta.similarity;
    let sims: Vec<f32> = vectors[1..].iter().map(|v| similarity.of(vectors[0], v)).collect();
    Ok((c.headers(), Json(sims)).into_response())
}

/// `POST /`: the model's own route, as text-embeddings-inference and Hugging Face's inference
/// clients use it: `/embed` (or `/similarity`, for a source sentence and sentences) for an
/// embedding model, `/embed_sparse` for SPLADE, `/predict` for a classifier.
#[utoipa::path(post, path = "/", params(ModelQuery),
    request_body(content = Object, description = "The body of the model's own route"),
    responses(
        (status = 200, description = "As the model's own route answers"),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn root(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<Value>, JsonRejection>,
) -> Result<Response, ApiError> {
    let m = pick(&app, query, |_| true, "/", "a model")?;
    let Json(body) = body?;
    let parse = |what| ApiError::invalid(format!("{what}"));
    match app.models[m].meta.task {
        Task::Embed(_) if body["inputs"].is_object() => {
            let req = serde_json::from_value(body).map_err(parse)?;
            similarity_with(&app, m, req).await
        }
        Task::Embed(_) => embed_with(&app, m, serde_json::from_value(body).map_err(parse)?).await,
        Task::Sparse => {
            embed_sparse_with(&app, m, serde_json::from_value(body).map_err(parse)?).await
        }
        Task::Classify { .. } | Task::ClassifyTokens { .. } => {
            predict_with(&app, m, serde_json::from_value(body).map_err(parse)?).await
        }
    }
}

/// `POST /embed_all`: every token's final vector before pooling, from an embedding model.
#[utoipa::path(post, path = "/embed_all", params(ModelQuery), request_body = EmbedRequest,
    responses(
        (status = 200, description = "Per input, every token's final vector before pooling (special tokens included)", body = Vec<Vec<Vec<f32>>>),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn embed_all(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<EmbedRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let m = pick(&app, query, |t| matches!(t, Task::Embed(_)), "/embed_all", "an embedding model")?;
    let Json(req) = body?;
    req.no_dimensions("/embed_all")?;
    let (texts, encoding) = req.inputs(&app, m)?;
    let encoding = Encoding { read: Read::Tokens, ..encoding };
    let c = compute(&app, m, texts, encoding).await?;
    Ok((c.headers(), Json(c.rows)).into_response())
}

/// The body of `/rerank`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct RerankRequest {
    query: String,
    texts: Vec<String>,
    #[serde(flatten)]
    truncation: Truncate,
    #[serde(default)]
    raw_scores: bool,
    #[serde(default)]
    return_text: bool,
    /// The model's prompt to put before the query (default: the model's default prompt).
    #[serde(default)]
    prompt_name: Option<String>,
}

/// One ranked text.
#[derive(Serialize, ToSchema)]
struct Rank {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    score: f32,
}

/// `POST /rerank`: the texts ranked against the query by a cross-encoder, best first.
#[utoipa::path(post, path = "/rerank", params(ModelQuery), request_body = RerankRequest,
    responses(
        (status = 200, description = "The texts, best first", body = Vec<Rank>),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn rerank(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<RerankRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let one_label = |t: &Task| matches!(t, Task::Classify { labels } if labels.len() == 1);
    let m = pick(&app, query, one_label, "/rerank", "a cross-encoder (one label)")?;
    let Json(req) = body?;
    if req.query.is_empty() {
        return Err(ApiError::invalid("`query` cannot be empty"));
    }
    let encoding = req.truncation.encoding();
    // The prompt goes before the query, as sentence-transformers' `CrossEncoder.predict` puts
    // it.
    let query = prompted(prompt(&app, m, req.prompt_name.as_deref())?, req.query.clone());
    let pairs = req.texts.iter().map(|t| Text::Pair(query.clone(), t.clone())).collect();
    let c = compute(&app, m, pairs, encoding).await?;
    let logits: Vec<f32> = c.rows.iter().map(|r| r.first().map_or(0.0, |l| l[0])).collect();
    let score = |l: f32| if req.raw_scores { l } else { scores::sigmoid(l) };
    let mut texts: Vec<Option<String>> = req.texts.into_iter().map(Some).collect();
    let ranked: Vec<Rank> = scores::ranking(&logits)
        .into_iter()
        .map(|index| Rank {
            index,
            text: if req.return_text { texts[index].take() } else { None },
            score: score(logits[index]),
        })
        .collect();
    Ok((c.headers(), Json(ranked)).into_response())
}

/// The body of `/predict`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct PredictRequest {
    /// A text, a pair `[a, b]`, or a batch `[[a], [a, b], ...]`.
    inputs: Value,
    #[serde(flatten)]
    truncation: Truncate,
    #[serde(default)]
    raw_scores: bool,
    /// A token classifier labels every token, not only each word's first.
    #[serde(default)]
    every_token: bool,
    /// A sequence classifier's prompt to put before each input's (first) text (default: the
    /// model's default prompt).
    #[serde(default)]
    prompt_name: Option<String>,
}

/// `/predict`'s inputs: a text, a pair `[a, b]`, or a batch `[[a], [a, b], ...]`; whether it
/// was a batch, and the inputs.
fn predict_inputs(v: Value) -> Result<(bool, Vec<Text>), ApiError> {
    let shape = "`inputs` is a string, a pair [string, string], or a batch of [string] and \
                 [string, string]";
    let sequence = |v: &[Value]| -> Result<Text, ApiError> {
        let s: Vec<&str> = v.iter().filter_map(Value::as_str).collect();
        match (v.len(), s.as_slice()) {
            (1, [a]) => Ok(Text::One((*a).to_owned())),
            (2, [a, b]) => Ok(Text::Pair((*a).to_owned(), (*b).to_owned())),
            _ => Err(ApiError::invalid(shape)),
        }
    };
    match v {
        Value::String(s) => Ok((false, vec![Text::One(s)])),
        Value::Array(items) if items.first().is_some_and(Value::is_array) => {
            let batch = items.iter().map(|i| match i {
                Value::Array(seq) => sequence(seq),
                _ => Err(ApiError::invalid(shape)),
            });
            Ok((true, batch.collect::<Result<_, _>>()?))
        }
        Value::Array(items) if !items.is_empty() => Ok((false, vec![sequence(&items)?])),
        Value::Array(_) => Err(ApiError::invalid("`inputs` cannot be empty")),
        _ => Err(ApiError::invalid(shape)),
    }
}

/// A label and its score.
#[derive(Serialize, ToSchema)]
struct Prediction {
    score: f32,
    label: String,
}

/// A word (or token) of a token classifier's input with its label.
#[derive(Serialize, ToSchema)]
struct WordPrediction {
    text: String,
    label: String,
    score: f32,
    start: usize,
    end: usize,
}

/// `POST /predict`: a sequence classifier's labels, best first, or a token classifier's label
/// per word with its byte span.
#[utoipa::path(post, path = "/predict", params(ModelQuery), request_body = PredictRequest,
    responses(
        (status = 200, description = "Per input, labels best first (or words with labels); a single input gives its list alone", body = Vec<Answer>),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn predict(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<PredictRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let classifier = |t: &Task| matches!(t, Task::Classify { .. } | Task::ClassifyTokens { .. });
    let m = pick(&app, query, classifier, "/predict", "a classifier")?;
    let Json(req) = body?;
    predict_with(&app, m, req).await
}

/// `/predict` on model `m`.
async fn predict_with(app: &Arc<App>, m: usize, req: PredictRequest) -> Result<Response, ApiError> {
    let (batch, inputs) = predict_inputs(req.inputs)?;
    let task = &app.models[m].meta.task;
    let tokens = matches!(task, Task::ClassifyTokens { .. });
    if tokens && inputs.iter().any(|t| matches!(t, Text::Pair(..))) {
        return Err(ApiError::invalid("a token classifier labels single texts, not pairs"));
    }
    // A sequence classifier's prompt goes before each input's (first) text, as
    // sentence-transformers' `CrossEncoder.predict` puts it; a token classifier's words are
    // the text's alone.
    if tokens && req.prompt_name.is_some() {
        return Err(ApiError::invalid(
            "a token classifier takes no prompt: its words are the text's",
        ));
    }
    let prompt = if tokens { "" } else { prompt(app, m, req.prompt_name.as_deref())? };
    let inputs: Vec<Text> = inputs
        .into_iter()
        .map(|t| match t {
            Text::One(a) => Text::One(prompted(prompt, a)),
            Text::Pair(a, b) => Text::Pair(prompted(prompt, a), b),
            ids @ Text::Ids(_) => ids,
        })
        .collect();
    let texts: Vec<String> = inputs
        .iter()
        .map(|t| match t {
            Text::One(s) => s.clone(),
            Text::Pair(..) | Text::Ids(_) => String::new(),
        })
        .collect();
    let marking = if req.every_token { Marking::EveryToken } else { Marking::FirstSubToken };
    let encoding = Encoding { marking, ..req.truncation.encoding() };
    let c = compute(app, m, inputs, encoding).await?;
    let labels = task.labels();
    let score = |logits: &[f32]| {
        if req.raw_scores { logits.to_vec() } else { scores::probabilities(logits) }
    };
    let answers: Vec<Answer> = if tokens {
        c.rows
            .iter()
            .zip(&c.marks)
            .zip(&texts)
            .map(|((rows, marks), text)| {
                let words = rows.iter().zip(marks).map(|(logits, &(_, (start, end)))| {
                    let (best, s) = scores::best(&score(logits));
                    WordPrediction {
                        text: text.get(start..end).unwrap_or_default().to_owned(),
                        label: labels[best].clone(),
                        score: s,
                        start,
                        end,
                    }
                });
                Answer::Words(words.collect())
            })
            .collect()
    } else {
        c.rows
            .iter()
            .map(|rows| {
                let s = score(rows.first().map_or(&[][..], Vec::as_slice));
                let ranked = scores::ranking(&s)
                    .into_iter()
                    .map(|i| Prediction { score: s[i], label: labels[i].clone() });
                Answer::Labels(ranked.collect())
            })
            .collect()
    };
    if batch {
        return Ok((c.headers(), Json(answers)).into_response());
    }
    let one = answers.into_iter().next();
    Ok((c.headers(), Json(one)).into_response())
}

/// One input's answer from `/predict`.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum Answer {
    Labels(Vec<Prediction>),
    Words(Vec<WordPrediction>),
}

/// The body of `/tokenize`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct TokenizeRequest {
    inputs: Inputs,
    #[serde(default = "yes")]
    add_special_tokens: bool,
    /// The model's prompt to put before each input (default: the model's default prompt).
    #[serde(default)]
    prompt_name: Option<String>,
}

/// One token of `/tokenize`'s answer.
#[derive(Serialize, ToSchema)]
struct Token {
    id: u32,
    text: String,
    special: bool,
    start: Option<usize>,
    stop: Option<usize>,
}

/// `POST /tokenize`: the tokens the model sees for each input (truncated as it would be).
#[utoipa::path(post, path = "/tokenize", params(ModelQuery), request_body = TokenizeRequest,
    responses(
        (status = 200, description = "Per input, its tokens", body = Vec<Vec<Token>>),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn tokenize(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<TokenizeRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let m = pick(&app, query, |_| true, "/tokenize", "a model")?;
    let Json(req) = body?;
    let p = prompt(&app, m, req.prompt_name.as_deref())?;
    let texts: Vec<String> = req.inputs.texts().into_iter().map(|t| prompted(p, t)).collect();
    check_count(&app, texts.len())?;
    let special = req.add_special_tokens;
    let worker = Arc::clone(&app);
    let tokens = blocking(move || {
        let tokenizer = &worker.models[m].meta.tokenizer;
        texts
            .iter()
            .map(|t| {
                let e = tokenizer.encode_with(t, None, Truncation::Right, special)?;
                let tokens = (0..e.ids.len()).map(|i| {
                    let (start, stop) = e.offsets[i];
                    let real = !e.special[i];
                    Token {
                        id: e.ids[i],
                        text: e.tokens[i].clone(),
                        special: e.special[i],
                        start: real.then_some(start),
                        stop: real.then_some(stop),
                    }
                });
                Ok(tokens.collect::<Vec<_>>())
            })
            .collect::<Result<Vec<_>, ApiError>>()
    })
    .await?;
    Ok(Json(tokens).into_response())
}

/// Token ids: one list or several.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum Ids {
    One(Vec<u32>),
    Many(Vec<Vec<u32>>),
}

/// The body of `/decode`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct DecodeRequest {
    ids: Ids,
    #[serde(default = "yes")]
    skip_special_tokens: bool,
}

/// `POST /decode`: the text of each list of token ids.
#[utoipa::path(post, path = "/decode", params(ModelQuery), request_body = DecodeRequest,
    responses(
        (status = 200, description = "The text of each list of ids", body = Vec<String>),
        (status = "4XX", description = "A refused request", body = ErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = ErrorBody)
    ))]
pub(crate) async fn decode(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
    body: Result<Json<DecodeRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let m = pick(&app, query, |_| true, "/decode", "a model")?;
    let Json(req) = body?;
    let lists = match req.ids {
        Ids::One(ids) => vec![ids],
        Ids::Many(lists) => lists,
    };
    check_count(&app, lists.len())?;
    let (worker, skip) = (Arc::clone(&app), req.skip_special_tokens);
    let texts = blocking(move || {
        let tokenizer = &worker.models[m].meta.tokenizer;
        let texts = lists.iter().map(|ids| tokenizer.decode(ids, skip));
        Ok(texts.collect::<Result<Vec<_>, _>>()?)
    })
    .await?;
    Ok(Json(texts).into_response())
}

/// text-embeddings-inference's name for a dtype.
fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::Bf16 => "bfloat16",
        DType::I8 => "int8",
    }
}

/// The dtype a model computes in, for TEI's one `model_dtype`: its first replica's (where
/// `auto` resolved differently per device, each device's entry in `/info`'s `models` has its
/// own).
fn model_dtype(s: &Served) -> DType {
    s.pool.dtypes().first().copied().unwrap_or(DType::F32)
}

/// text-embeddings-inference's `model_type` for a task.
fn model_type(task: &Task) -> Value {
    let labels = |l: &[String]| {
        let id2label: serde_json::Map<String, Value> =
            l.iter().enumerate().map(|(i, n)| (i.to_string(), json!(n))).collect();
        let label2id: serde_json::Map<String, Value> =
            l.iter().enumerate().map(|(i, n)| (n.clone(), json!(i))).collect();
        json!({ "id2label": id2label, "label2id": label2id })
    };
    match task {
        Task::Embed(p) => {
            let pooling = match p.mode {
                PoolMode::Cls => "cls",
                PoolMode::Last => "last_token",
                PoolMode::Mean => "mean",
                PoolMode::Max => "max",
                PoolMode::Sum => "sum",
            };
            json!({ "embedding": { "pooling": pooling } })
        }
        Task::Sparse => json!({ "embedding": { "pooling": "splade" } }),
        Task::Classify { labels: l } if l.len() == 1 => json!({ "reranker": labels(l) }),
        Task::Classify { labels: l } | Task::ClassifyTokens { labels: l } => {
            json!({ "classifier": labels(l) })
        }
    }
}

/// `GET /info`: the model (the one `?model=` names, else the first), the limits, and every
/// model this server has with its devices.
#[utoipa::path(get, path = "/info", params(ModelQuery),
    responses((status = 200, description = "The model, the limits, and every model with its devices")))]
pub(crate) async fn info(
    State(app): State<Arc<App>>,
    query: Result<Query<ModelQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let m = pick(&app, query, |_| true, "/info", "a model")?;
    let served = &app.models[m];
    let models: Vec<Value> = app
        .models
        .iter()
        .map(|s| {
            let devices: Vec<Value> = s
                .pool
                .health()
                .into_iter()
                .zip(s.pool.dtypes())
                .map(|((device, healthy), dtype)| {
                    json!({ "device": device, "dtype": dtype_name(dtype), "healthy": healthy })
                })
                .collect();
            json!({
                "name": s.name,
                "task": s.meta.task.describe(),
                "max_input_length": s.meta.tokenizer.max_len(),
                "dtype": dtype_name(model_dtype(s)),
                "devices": devices,
                "prompts": s.meta.prompts.named,
                "default_prompt": s.default_prompt,
                "similarity_fn_name": s.meta.similarity.name(),
            })
        })
        .collect();
    let c = &app.config;
    Ok(Json(json!({
        "model_id": served.name,
        "model_sha": null,
        "model_dtype": dtype_name(model_dtype(served)),
        "model_type": model_type(&served.meta.task),
        "max_concurrent_requests": c.max_concurrent_requests,
        "max_input_length": served.meta.tokenizer.max_len(),
        "max_batch_tokens": served.pool.budget().tokens,
        "max_batch_requests": served.pool.budget().seqs,
        "max_client_batch_size": c.max_client_batch_size,
        "auto_truncate": c.auto_truncate,
        "tokenization_workers": null,
        "version": env!("CARGO_PKG_VERSION"),
        "models": models,
    }))
    .into_response())
}

/// `GET /health`: 200 while every model has a healthy device (`"degraded"` when some device is
/// out of rotation), 503 when a model has none.
#[utoipa::path(get, path = "/health",
    responses(
        (status = 200, description = "Every model has a healthy device (`status` is `ok` or `degraded`)"),
        (status = 503, description = "A model has no healthy device")
    ))]
pub(crate) async fn health(State(app): State<Arc<App>>) -> Response {
    let mut degraded = false;
    let mut down = false;
    let models: Vec<Value> = app
        .models
        .iter()
        .map(|s| {
            let h = s.pool.health();
            let up: Vec<&str> = h.iter().filter(|(_, ok)| *ok).map(|(d, _)| d.as_str()).collect();
            let out: Vec<&str> = h.iter().filter(|(_, ok)| !ok).map(|(d, _)| d.as_str()).collect();
            degraded |= !out.is_empty();
            down |= up.is_empty();
            json!({ "name": s.name, "healthy": up, "failed": out })
        })
        .collect();
    let (status, word) = match (down, degraded) {
        (true, _) => (StatusCode::SERVICE_UNAVAILABLE, "unhealthy"),
        (false, true) => (StatusCode::OK, "degraded"),
        (false, false) => (StatusCode::OK, "ok"),
    };
    (status, Json(json!({ "status": word, "models": models }))).into_response()
}
