//! OpenAI's embeddings routes, with its request, response and error shapes.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchyard_models::Task;
use utoipa::ToSchema;

use super::tei::{normalized, normalizes};
use super::{
    ApiError, App, Encoding, OpenAiError, OpenAiErrorBody, Text, check_dimensions, compute, prompt,
    prompted,
};

/// The body of `/v1/embeddings`.
#[derive(Deserialize, ToSchema)]
pub(crate) struct EmbeddingsRequest {
    /// A string, a list of strings, a list of token ids, or a list of lists of token ids.
    input: Value,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    dimensions: Option<usize>,
    /// Accepted and unused, as OpenAI's clients send it.
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
}

/// `input`: a string, a list of strings, a list of token ids, or a list of such lists.
fn inputs(v: Value) -> Result<Vec<Text>, ApiError> {
    let shape = "`input` is a string, a list of strings, a list of token ids, or a list of \
                 lists of token ids";
    let ids = |v: &[Value]| -> Result<Vec<u32>, ApiError> {
        v.iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| ApiError::invalid(shape))
            })
            .collect()
    };
    match v {
        Value::String(s) => Ok(vec![Text::One(s)]),
        Value::Array(items) => match items.first() {
            None => Err(ApiError::invalid("`input` cannot be empty")),
            Some(Value::String(_)) => items
                .into_iter()
                .map(|i| match i {
                    Value::String(s) => Ok(Text::One(s)),
                    _ => Err(ApiError::invalid(shape)),
                })
                .collect(),
            Some(Value::Number(_)) => Ok(vec![Text::Ids(ids(&items)?)]),
            Some(Value::Array(_)) => items
                .iter()
                .map(|i| match i {
                    Value::Array(list) => Ok(Text::Ids(ids(list)?)),
                    _ => Err(ApiError::invalid(shape)),
                })
                .collect(),
            Some(_) => Err(ApiError::invalid(shape)),
        },
        _ => Err(ApiError::invalid(shape)),
    }
}

/// `POST /v1/embeddings`: unit-length embeddings, as floats or base64 (little-endian f32),
/// optionally cut to `dimensions` and renormalised, with the tokens used.
#[utoipa::path(post, path = "/v1/embeddings", request_body = EmbeddingsRequest,
    responses(
        (status = 200, description = "Unit-length embeddings with the tokens used", body = Embeddings),
        (status = "4XX", description = "A refused request", body = OpenAiErrorBody),
        (status = "5XX", description = "A failed device or no healthy one", body = OpenAiErrorBody)
    ))]
pub(crate) async fn embeddings(
    State(app): State<Arc<App>>,
    body: Result<Json<EmbeddingsRequest>, JsonRejection>,
) -> Result<Response, OpenAiError> {
    let Json(req) = body.map_err(ApiError::from)?;
    let m = app.model(req.model.as_deref())?;
    let served = &app.models[m];
    if !matches!(served.meta.task, Task::Embed(_)) {
        return Err(ApiError::wrong_model(format!(
            "/v1/embeddings needs an embedding model, and {} is {}",
            served.name,
            served.meta.task.describe()
        ))
        .into());
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "encoding_format {other:?}: use \"float\" or \"base64\""
            ))
            .into());
        }
    };
    check_dimensions(&app, m, req.dimensions)?;
    // The model's default prompt goes before texts (this API names no prompt); ids are taken
    // as they are.
    let p = prompt(&app, m, None)?;
    let texts = inputs(req.input)?.into_iter().map(|t| match t {
        Text::One(t) => Text::One(prompted(p, t)),
        ids => ids,
    });
    let texts = texts.collect();
    let c = compute(&app, m, texts, Encoding::default()).await?;
    let in_graph = normalizes(&app, m);
    let mut data = Vec::with_capacity(c.rows.len());
    for (index, rows) in c.rows.iter().enumerate() {
        let mut v = rows.first().cloned().unwrap_or_default();
        if let Some(d) = req.dimensions {
            v.truncate(d);
            v = normalized(v);
        } else if !in_graph {
            v = normalized(v);
        }
        let embedding = if base64 {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
        } else {
            Vector::Floats(v)
        };
        data.push(Embedding { object: "embedding", embedding, index });
    }
    let tokens: usize = c.tokens.iter().sum();
    let body = Embeddings {
        object: "list",
        data,
        model: served.name.clone(),
        usage: Usage { prompt_tokens: tokens, total_tokens: tokens },
    };
    Ok((c.headers(), Json(body)).into_response())
}

/// `/v1/embeddings`' answer.
#[derive(Serialize, ToSchema)]
struct Embeddings {
    object: &'static str,
    data: Vec<Embedding>,
    model: String,
    usage: Usage,
}

/// One input's embedding.
#[derive(Serialize, ToSchema)]
struct Embedding {
    object: &'static str,
    embedding: Vector,
    index: usize,
}

/// An embedding as floats, or as base64 of its little-endian f32 bytes.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
enum Vector {
    Floats(Vec<f32>),
    Base64(String),
}

/// The tokens a request used.
#[derive(Serialize, ToSchema)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// `GET /v1/models`: the models this server has.
#[utoipa::path(get, path = "/v1/models",
    responses((status = 200, description = "The models this server has")))]
pub(crate) async fn models(State(app): State<Arc<App>>) -> Response {
    let data: Vec<Value> = app
        .models
        .iter()
        .map(|m| json!({ "id": m.name, "object": "model", "created": 0, "owned_by": "switchyard" }))
        .collect();
    Json(json!({ "object": "list", "data": data })).into_response()
}
