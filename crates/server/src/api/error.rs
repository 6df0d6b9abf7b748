//! The errors a client sees: a status code and a body, in text-embeddings-inference's shape
//! (`{"error", "error_type"}`) or, on the OpenAI routes, in OpenAI's
//! (`{"error": {"message", "type", "param", "code"}}`).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::pool::Failure;

/// An error answer.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    /// text-embeddings-inference's `error_type`.
    pub kind: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, kind, message: message.into() }
    }

    /// A well-formed request the server will not take: 422.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "Validation", message)
    }

    /// A request over a size limit: 413.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "Validation", message)
    }

    /// A request for a model that does not do what the route does: 400.
    pub fn wrong_model(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "Validation", message)
    }

    /// The body as text-embeddings-inference writes it.
    fn tei_body(&self) -> ErrorBody {
        ErrorBody { error: self.message.clone(), error_type: self.kind.to_owned() }
    }

    /// The body as OpenAI writes it.
    fn openai_body(&self) -> OpenAiErrorBody {
        let kind = match self.status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            s if s >= 500 || s == 424 => "server_error",
            _ => "invalid_request_error",
        };
        let error = OpenAiErrorDetail {
            message: self.message.clone(),
            kind: kind.to_owned(),
            param: None,
            code: None,
        };
        OpenAiErrorBody { error }
    }

    /// This error in OpenAI's shape.
    pub fn openai(self) -> OpenAiError {
        OpenAiError(self)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.tei_body())).into_response()
    }
}

/// An error answer on text-embeddings-inference's routes.
#[derive(Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// What went wrong, and what to do about it.
    error: String,
    /// `Validation`, `Tokenizer`, `Overloaded`, `Backend`, `Unhealthy`, `Unauthorized`,
    /// `NotFound` or `Timeout`.
    error_type: String,
}

/// An error answer on OpenAI's routes.
#[derive(Serialize, ToSchema)]
pub(crate) struct OpenAiErrorBody {
    error: OpenAiErrorDetail,
}

/// What OpenAI's error shape holds.
#[derive(Serialize, ToSchema)]
pub(crate) struct OpenAiErrorDetail {
    message: String,
    #[serde(rename = "type")]
    kind: String,
    param: Option<String>,
    code: Option<String>,
}

/// An [`ApiError`] answered in OpenAI's shape.
#[derive(Debug)]
pub(crate) struct OpenAiError(pub ApiError);

impl From<ApiError> for OpenAiError {
    fn from(e: ApiError) -> Self {
        OpenAiError(e)
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        (self.0.status, Json(self.0.openai_body())).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        // A body past the payload limit keeps its 413; every other malformed body is a 422.
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::too_large(r.body_text());
        }
        ApiError::invalid(r.body_text())
    }
}

impl From<Failure> for ApiError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Device(m) => ApiError::new(StatusCode::FAILED_DEPENDENCY, "Backend", m),
            Failure::Unavailable(m) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "Unhealthy", m)
            }
            Failure::Internal(m) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Backend", m),
        }
    }
}

impl From<switchyard_models::Error> for ApiError {
    fn from(e: switchyard_models::Error) -> Self {
        match e {
            switchyard_models::Error::TooLong { tokens, max } => ApiError::too_large(format!(
                "an input has at least {tokens} tokens, and the model takes at most {max}; shorten it or \
                 set `truncate`"
            )),
            switchyard_models::Error::Tokenizer(m) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "Tokenizer", m)
            }
            other => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "Backend", other.to_string()),
        }
    }
}
