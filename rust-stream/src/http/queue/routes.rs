//! The routes' handlers: push, pop, pop many, ack, ping, peek, size, the health probe and the
//! fallback. Each checks its queue name against the server's [namespace](super::names) and its
//! parameters against the server's [limits](super::Limits) before any call.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::api::{send_all, QueueApi, DEFAULT_PEEK_AMOUNT, MAX_ATTEMPTS};
use super::error::ApiError;
use super::filter;
use super::handles::Known;
use super::params::DEFAULT_EXPIRES_IN;
use super::params::{expiry_date, missing, number, parameters, visibility};
use crate::model::rules;
use crate::operations::{Message, OperationError, Peek};
use crate::publish::history::{Held, Refused};
use crate::store::history::HistoryKey;
use crate::transport::{ReceivedMessage, SentMessage};

/// A request's body, or the refusal naming `MAX_BODY_BYTES` when it is over the bound.
fn read(api: &QueueApi, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::Limit {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                limit: "MAX_BODY_BYTES",
                reason: format!(
                    "the body is over {} bytes, this server's bound (MAX_BODY_BYTES): split the \
                     push",
                    api.inner.limits.body_bytes
                ),
            }
        } else {
            ApiError::BadRequest(format!("the body could not be read: {rejection}"))
        }
    })
}

/// The ids of an ack or ping body: `{"id": ["..", ..]}` (one id as a string is taken too).
fn ids_of(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let refused = |why: &str| {
        ApiError::BadRequest(format!(
            "{why}: send a JSON body {{\"id\": [\"<_id>\", ...]}} with the ids pops returned"
        ))
    };
    let value: Value = serde_json::from_slice(body).map_err(|_| refused("the body is not JSON"))?;
    let ids = match value.get("id") {
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| id.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| refused("`id` holds something other than strings"))?,
        Some(Value::String(id)) => vec![id.clone()],
        _ => return Err(refused("no `id` array")),
    };
    if ids.is_empty() {
        return Err(refused("`id` is empty"));
    }
    Ok(ids)
}

pub(super) async fn push(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let queue = api.inner.namespace.check(&queue)?;
    let body = read(&api, body)?;
    let parameters = parameters(&uri);
    let limits = &api.inner.limits;
    let duration = Duration::from_secs(number(
        &parameters,
        "expiresIn",
        DEFAULT_EXPIRES_IN.as_secs(),
        u64::MAX,
    )?);
    if duration > limits.hash_duration {
        return Err(ApiError::Limit {
            status: StatusCode::BAD_REQUEST,
            limit: "MAX_HASH_DURATION_SECONDS",
            reason: format!(
                "expiresIn {} s: this server keeps a hashCode at most {} s \
                 (MAX_HASH_DURATION_SECONDS)",
                duration.as_secs(),
                limits.hash_duration.as_secs()
            ),
        });
    }
    let hash_code = parameters.get("hashCode").filter(|hash| !hash.is_empty());
    if let Some(hash) = hash_code.filter(|hash| hash.len() > limits.hash_code_bytes) {
        return Err(ApiError::Limit {
            status: StatusCode::BAD_REQUEST,
            limit: "MAX_HASH_CODE_BYTES",
            reason: format!(
                "the hashCode is {} bytes: this server takes at most {} (MAX_HASH_CODE_BYTES); \
                 send a hash of the payload (a SHA-256 in hex is 64)",
                hash.len(),
                limits.hash_code_bytes
            ),
        });
    }
    let value: Value = serde_json::from_slice(&body).map_err(|error| {
        ApiError::BadRequest(format!(
            "the body is not JSON ({error}): push a JSON value (one message) or an array (one \
             message each)"
        ))
    })?;
    let payloads = match value {
        Value::Array(items) if items.is_empty() => {
            return Err(ApiError::BadRequest(
                "the body is an empty array: push at least one message".into(),
            ))
        }
        Value::Array(items) => items,
        one => vec![one],
    };
    let most = limits.push_items;
    if payloads.len() > most {
        return Err(ApiError::Limit {
            status: StatusCode::BAD_REQUEST,
            limit: "MAX_PUSH_ITEMS",
            reason: format!(
                "the push holds {} messages; this server takes at most {most} a push \
                 (MAX_PUSH_ITEMS): split it",
                payloads.len()
            ),
        });
    }
    let bodies: Vec<String> = payloads.iter().map(Value::to_string).collect();
    // Refused before anything is sent, so a push many is stored whole or not at all by size.
    if let Some((index, body)) = bodies
        .iter()
        .enumerate()
        .find(|(_, body)| body.len() > rules::MAX_MESSAGE_SIZE)
    {
        return Err(ApiError::BadRequest(format!(
            "message {index} is {} bytes as JSON; SQS takes at most {} a message",
            body.len(),
            rules::MAX_MESSAGE_SIZE
        )));
    }
    let hash = hash_code.map(|hash| HistoryKey::new(queue, hash.as_str()));
    let ticket = match &hash {
        None => None,
        // A hash another push holds is waited for (the history's wait), as a publisher's
        // `once` does: answering 204 at once would tell this client its messages were stored
        // when that push may yet fail and store nothing.
        Some(key) => match api.inner.history.reserve(key, queue, false).await {
            Ok(Held::Reserved(ticket)) => Some(ticket),
            Ok(Held::Sent(_)) => {
                tracing::debug!(messaging.destination.name = queue, hash_code = %key.key, "push ignored: its hashCode is in the command history");
                return Ok(StatusCode::NO_CONTENT.into_response());
            }
            Err(Refused::InFlight) => return Err(ApiError::HashPending(key.key.clone())),
            Err(Refused::Store(error)) => {
                return Err(ApiError::Backend(format!(
                    "the command history failed ({error}): nothing was pushed; retry"
                )))
            }
        },
    };
    let sent = send_all(&api, queue, bodies).await;
    if let (Some(key), Some(ticket)) = (&hash, &ticket) {
        // The first message's id stands for the push (the history keeps one); a failed push is
        // freed, so the client's retry is stored: anything sent before the failure may be stored
        // twice by it, never lost.
        let first = sent
            .as_ref()
            .ok()
            .and_then(|ids| ids.first())
            .map(|id| SentMessage {
                message_id: id.clone(),
                sequence_number: None,
                duplicate: false,
            });
        api.inner
            .history
            .settle(key, ticket, first.as_ref(), duration)
            .await;
    }
    let ids = sent?;
    Ok((StatusCode::CREATED, Json(json!({ "ids": ids }))).into_response())
}

pub(super) async fn pop_one(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let queue = api.inner.namespace.check(&queue)?;
    let expires = visibility(&parameters(&uri))?;
    Ok(match pop(&api, queue, 1, expires).await?.pop() {
        Some(message) => Json(message).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

pub(super) async fn pop_many(
    State(api): State<QueueApi>,
    Path((queue, amount)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let queue = api.inner.namespace.check(&queue)?;
    let most = api.inner.limits.pop_amount;
    let amount = match amount.parse::<usize>() {
        Ok(amount) if amount > most => {
            return Err(ApiError::Limit {
                status: StatusCode::BAD_REQUEST,
                limit: "MAX_POP_AMOUNT",
                reason: format!(
                    "amount {amount}: this server pops at most {most} messages a request \
                     (MAX_POP_AMOUNT)"
                ),
            })
        }
        Ok(amount) if amount > 0 => amount,
        _ => {
            return Err(ApiError::BadRequest(format!(
                "amount `{amount}`: pass a whole number of messages, 1 or more"
            )))
        }
    };
    let expires = visibility(&parameters(&uri))?;
    let messages = pop(&api, queue, amount, expires).await?;
    Ok(if messages.is_empty() {
        StatusCode::NO_CONTENT.into_response()
    } else {
        Json(messages).into_response()
    })
}

/// Takes up to `amount` messages for `expires`, keeping their receipt handles; on a failure
/// midway, what was taken is made visible again before the error answers.
async fn pop(
    api: &QueueApi,
    queue: &str,
    amount: usize,
    expires: Duration,
) -> Result<Vec<Value>, ApiError> {
    let operations = &api.inner.operations;
    let mut taken: Vec<ReceivedMessage> = Vec::new();
    let mut wait = api.inner.pop_wait;
    while taken.len() < amount {
        let want = (amount - taken.len()).min(rules::MAX_BATCH_ENTRIES);
        match operations.receive(queue, want, expires, wait).await {
            Ok(received) if received.is_empty() => break,
            Ok(received) => taken.extend(received),
            Err(error) if missing(&error) && taken.is_empty() => return Ok(Vec::new()),
            Err(error) => {
                let handles: Vec<String> = taken.iter().map(|m| m.receipt_handle.clone()).collect();
                if let Err(release) = operations.extend(queue, &handles, Duration::ZERO).await {
                    tracing::warn!(
                        messaging.destination.name = queue,
                        error = %release,
                        "popped messages not made visible again; they are once their expiry passes"
                    );
                }
                return Err(error.into());
            }
        }
        // Later receives take what is there now.
        wait = Duration::ZERO;
    }
    let expiry = expiry_date(expires);
    let signed = api.inner.handles.is_signed();
    let ids = api.inner.handles.hand_out(
        queue,
        taken
            .iter()
            .map(|message| (message.message_id.clone(), message.receipt_handle.clone()))
            .collect(),
        expires,
        api.inner.limits.receipt_handles,
    );
    Ok(taken
        .iter()
        .zip(ids)
        .map(|(message, id)| {
            let attempts = message.receive_count().unwrap_or(1);
            if attempts >= MAX_ATTEMPTS {
                tracing::warn!(
                    messaging.destination.name = queue,
                    messaging.message.id = %message.message_id,
                    attempts,
                    "popped for its last attempt: unless acked, the receive after its expiry \
                     moves it to the dead queue"
                );
            }
            let mut shown = json!({
                "_id": id,
                "payload": filter::payload(&message.body),
                "attempts": attempts,
                "expiryDate": expiry,
            });
            if let (true, Some(fields)) = (signed, shown.as_object_mut()) {
                fields.insert(
                    "messageId".into(),
                    Value::String(message.message_id.clone()),
                );
            }
            shown
        })
        .collect())
}

pub(super) async fn ack(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let queue = api.inner.namespace.check(&queue)?;
    let body = read(&api, body)?;
    let ids = ids_of(&body)?;
    let (known, unknown) = api.inner.handles.of(queue, &ids);
    let handles: Vec<String> = known.iter().map(|k| k.receipt_handle.clone()).collect();
    let failed = if handles.is_empty() {
        Vec::new()
    } else {
        api.inner.operations.delete(queue, &handles).await?
    };
    let deleted: Vec<&Known> = known
        .iter()
        .filter(|k| !failed.iter().any(|(failed, _)| *failed == k.receipt_handle))
        .collect();
    for acked in &deleted {
        tracing::info!(
            messaging.destination.name = queue,
            messaging.message.id = %acked.message_id,
            "acked: deleted"
        );
    }
    api.inner.handles.forget(queue, deleted);
    answer(queue, &known, failed, unknown)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The error for an ack's or ping's ids that failed or were unknown, if any.
fn answer(
    queue: &str,
    known: &[Known],
    failed: Vec<(String, crate::transport::BatchFailure)>,
    unknown: Vec<String>,
) -> Result<(), ApiError> {
    if !failed.is_empty() {
        let failed = failed
            .into_iter()
            .filter_map(|(handle, failure)| {
                let known = known.iter().find(|k| k.receipt_handle == handle)?;
                Some((known.id.clone(), failure.message))
            })
            .collect();
        return Err(ApiError::Failed {
            queue: queue.to_owned(),
            failed,
        });
    }
    if !unknown.is_empty() {
        return Err(ApiError::UnknownIds {
            queue: queue.to_owned(),
            ids: unknown,
        });
    }
    Ok(())
}

pub(super) async fn ping(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let queue = api.inner.namespace.check(&queue)?;
    let body = read(&api, body)?;
    let expires = visibility(&parameters(&uri))?;
    let ids = ids_of(&body)?;
    let (known, unknown) = api.inner.handles.of(queue, &ids);
    let handles: Vec<String> = known.iter().map(|k| k.receipt_handle.clone()).collect();
    let failed = if handles.is_empty() {
        Vec::new()
    } else {
        api.inner
            .operations
            .extend(queue, &handles, expires)
            .await?
    };
    api.inner.handles.extended(queue, &known, expires);
    answer(queue, &known, failed, unknown)?;
    Ok(Json(json!({ "expiryDate": expiry_date(expires) })).into_response())
}

pub(super) async fn peek(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let queue = api.inner.namespace.check(&queue)?;
    let parameters = parameters(&uri);
    let amount = number(&parameters, "amount", DEFAULT_PEEK_AMOUNT as u64, 10_000)?;
    let offset = number(&parameters, "offset", 0, u64::from(u32::MAX))?;
    let mut request = Peek::new()
        .amount(usize::try_from(amount).unwrap_or(usize::MAX))
        .offset(usize::try_from(offset).unwrap_or(usize::MAX));
    if let Some(text) = parameters.get("filter").filter(|text| !text.is_empty()) {
        request =
            request.filter(filter::parse(text).map_err(|e| ApiError::BadRequest(e.to_string()))?);
    }
    if api.inner.peek_on_sqs {
        request = request.force();
    }
    let messages = match api.inner.operations.peek(queue, &request).await {
        Ok(messages) => messages,
        Err(error) if missing(&error) => Vec::new(),
        Err(error @ OperationError::PeekRefused { .. }) => {
            return Err(ApiError::PeekRefused(format!(
                "{error}; here, start the server with PEEK_ON_SQS=true (QueueApi::peek_on_sqs) \
                 to peek on SQS, where each peek counts as one of a message's \
                 {MAX_ATTEMPTS} attempts"
            )))
        }
        Err(error) => return Err(error.into()),
    };
    if messages.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(Json(messages.iter().map(shown).collect::<Vec<_>>()).into_response())
}

/// A peeked message as the seed shows it: `attempts` once popped, `expiryDate` while in flight.
fn shown(message: &Message) -> Value {
    let mut shown = filter::document(message);
    if shown.get("attempts").and_then(Value::as_u64) == Some(0) {
        if let Some(fields) = shown.as_object_mut() {
            fields.remove("attempts");
        }
    }
    if let (Some(ms), Some(fields)) = (
        message
            .visible_in_ms
            .filter(|_| message.state == "in flight"),
        shown.as_object_mut(),
    ) {
        fields.insert(
            "expiryDate".into(),
            Value::String(expiry_date(Duration::from_millis(ms))),
        );
    }
    shown
}

pub(super) async fn size(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
) -> Result<Response, ApiError> {
    let queue = api.inner.namespace.check(&queue)?;
    let size = match api.inner.operations.queue(queue).await {
        Ok(info) => info.visible + info.in_flight + info.delayed,
        Err(error) if missing(&error) => 0,
        Err(error) => return Err(error.into()),
    };
    Ok(Json(json!({ "size": size })).into_response())
}

/// The health probe: `200` while the server answers (open, without a token).
pub(super) async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

pub(super) async fn not_found(uri: Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({
            "error": format!(
                "no route `{}`: the API's routes start with /queue/<name>/ (push, pop, pop/<amount>, \
                 ack, ping, peek, size)",
                uri.path()
            )
        })),
    )
        .into_response()
}
