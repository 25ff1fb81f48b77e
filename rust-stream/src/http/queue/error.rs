//! Why a request was not served: [`ApiError`], each kind answering with its status and
//! `{"error": "what was wrong and what to do"}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::model::rules::ErrorKind;
use crate::operations::OperationError;

/// Why a request was not served; each answers with its status and `{"error": ...}`.
#[derive(Debug, thiserror::Error)]
pub(super) enum ApiError {
    /// The request is at fault: `400`.
    #[error("{0}")]
    BadRequest(String),
    /// A queue outside the names this server serves (`QUEUE_PREFIX`, `QUEUES`): `404`, answered
    /// as for a route that does not exist, before any call.
    #[error(
        "queue `{0}` is not served here: this server serves only the queues its QUEUE_PREFIX \
         and QUEUES name"
    )]
    OutsideNamespace(String),
    /// Ids this server cannot act on: `404`.
    #[error(
        "{} of the ids were not popped from queue `{queue}` by this server (or a replica \
         sharing its ID_KEY), or were acked already: ack and ping the ids a pop returned",
        .ids.len()
    )]
    UnknownIds { queue: String, ids: Vec<String> },
    /// A peek on SQS without [`QueueApi::peek_on_sqs`](super::QueueApi::peek_on_sqs): `409`.
    #[error("{0}")]
    PeekRefused(String),
    /// A request over one of the server's bounds, named in `limit`: `413` for a body, `400`
    /// for the rest.
    #[error("{reason}")]
    Limit {
        status: StatusCode,
        limit: &'static str,
        reason: String,
    },
    /// Another push of the same `hashCode` is still under way after the history's wait: `503`,
    /// nothing was pushed by this request.
    #[error(
        "another push of hashCode `{0}` is still under way: nothing was pushed by this request; \
         retry it (it is answered 204 if that push was stored, and stored otherwise)"
    )]
    HashPending(String),
    /// The backend failed: `500`. No message is lost: what was taken is visible again.
    #[error("{0}")]
    Backend(String),
    /// Some entries of an ack or ping failed at the backend: `500`.
    #[error("queue `{queue}`: {} of the ids failed; retry them", .failed.len())]
    Failed {
        queue: String,
        failed: Vec<(String, String)>,
    },
}

impl From<OperationError> for ApiError {
    fn from(error: OperationError) -> Self {
        match &error {
            OperationError::Naming { .. } => Self::BadRequest(error.to_string()),
            OperationError::SendRefused { source, .. }
                if !source.is_retryable() && is_sender(source) =>
            {
                Self::BadRequest(error.to_string())
            }
            _ => Self::Backend(error.to_string()),
        }
    }
}

/// Whether the API's caller sent what SQS refused. A refusal of the service's own credentials
/// (`AccessDenied`) is SQS's sender fault but not the caller's: the service is misconfigured.
fn is_sender(error: &crate::transport::TransportError) -> bool {
    error
        .kind()
        .is_some_and(|kind| kind.sender_fault() && kind != ErrorKind::AccessDenied)
}

/// A refusal's answer: `status` with `{"error": reason}` and, when a bound refused it,
/// `{"limit": name}`.
pub(super) fn refusal(status: StatusCode, limit: Option<&str>, reason: &str) -> Response {
    let mut body = json!({ "error": reason });
    if let (Some(limit), Some(fields)) = (limit, body.as_object_mut()) {
        fields.insert("limit".into(), Value::String(limit.to_owned()));
    }
    (status, Json(body)).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let reason = self.to_string();
        match self {
            Self::BadRequest(_) => refusal(StatusCode::BAD_REQUEST, None, &reason),
            Self::OutsideNamespace(_) => {
                crate::metrics::http_refused("queue");
                refusal(StatusCode::NOT_FOUND, None, &reason)
            }
            Self::UnknownIds { ids, .. } => (
                StatusCode::NOT_FOUND,
                Json(json!({ "error": reason, "unknown": ids })),
            )
                .into_response(),
            Self::PeekRefused(_) => refusal(StatusCode::CONFLICT, None, &reason),
            Self::Limit { status, limit, .. } => {
                crate::metrics::http_refused(reason_label(limit));
                refusal(status, Some(limit), &reason)
            }
            Self::HashPending(_) => {
                let mut response = refusal(StatusCode::SERVICE_UNAVAILABLE, None, &reason);
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                response
            }
            Self::Backend(_) => {
                tracing::warn!(error = %reason, "queue API request failed at the backend");
                refusal(StatusCode::INTERNAL_SERVER_ERROR, None, &reason)
            }
            Self::Failed { failed, .. } => {
                let failed: Vec<Value> = failed
                    .into_iter()
                    .map(|(id, why)| json!({ "id": id, "error": why }))
                    .collect();
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Json(json!({ "error": reason, "failed": failed })),
                )
                    .into_response()
            }
        }
    }
}

/// The metric's reason for a bound's setting name.
fn reason_label(limit: &str) -> &'static str {
    match limit {
        "MAX_BODY_BYTES" => "body_size",
        "MAX_PUSH_ITEMS" => "push_items",
        "MAX_POP_AMOUNT" => "pop_amount",
        "MAX_HASH_CODE_BYTES" => "hash_code",
        "MAX_HASH_DURATION_SECONDS" => "hash_duration",
        _ => "limit",
    }
}
