//! A request's query parameters: whole numbers with their bounds, `expiresIn` as a visibility
//! timeout, and the seed's `expiryDate`.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::Uri;

use super::error::ApiError;
use crate::model::envelope::format_timestamp;
use crate::model::rules::{self, ErrorKind};
use crate::operations::OperationError;

/// `expiresIn` when a request gives none: 300 s, as the seed.
pub const DEFAULT_EXPIRES_IN: Duration = Duration::from_secs(300);

/// The query's parameters, by name (the last of a repeated one).
pub(super) fn parameters(uri: &Uri) -> HashMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// A whole number parameter, or `default` when absent.
pub(super) fn number(
    parameters: &HashMap<String, String>,
    name: &str,
    default: u64,
    max: u64,
) -> Result<u64, ApiError> {
    let Some(text) = parameters.get(name) else {
        return Ok(default);
    };
    match text.trim().parse::<u64>() {
        Ok(value) if value <= max => Ok(value),
        _ => Err(ApiError::BadRequest(format!(
            "`{name}` is `{text}`: pass a whole number from 0 to {max}"
        ))),
    }
}

/// `expiresIn` as a visibility timeout: 0 to 12 h, 300 s when absent.
pub(super) fn visibility(parameters: &HashMap<String, String>) -> Result<Duration, ApiError> {
    number(
        parameters,
        "expiresIn",
        DEFAULT_EXPIRES_IN.as_secs(),
        rules::MAX_VISIBILITY_TIMEOUT_SECONDS.unsigned_abs().into(),
    )
    .map(Duration::from_secs)
}

/// Milliseconds since the epoch, `after` from now, as the seed's `expiryDate`.
pub(super) fn expiry_date(after: Duration) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_timestamp(u64::try_from((now + after).as_millis()).unwrap_or(u64::MAX))
}

/// Whether an operation failed because the queue does not exist (yet).
pub(super) fn missing(error: &OperationError) -> bool {
    matches!(error, OperationError::Queue { source, .. }
        if source.kind() == Some(ErrorKind::QueueDoesNotExist))
}
