//! Between the SDK's types and the model's: errors (SQS's and SNS's codes), message attributes,
//! batch failures, and the rule checks of batch entries before they go out. SNS's own conversions
//! are in `sns.rs`.

use std::collections::HashMap;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue as SdkAttribute;

use crate::model::entry_id::answered_entry_id;
use crate::model::rules::ErrorKind;
use crate::transport::{
    BatchFailure, BatchResult, EntryId, MessageAttributeValue, MessageAttributes, TransportError,
};

/// An SDK error as a [`TransportError`]: service errors by their SQS or SNS kind, the rest
/// retryable. The SDKs share their error types, so one function reads both.
pub(super) fn error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    error: SdkError<E, R>,
) -> TransportError {
    match &error {
        SdkError::ServiceError(_) => {
            let code = error.code().unwrap_or("Unknown").to_owned();
            let message = error.message().unwrap_or("").to_owned();
            match error_kind(&code) {
                Some(kind) => TransportError::service(kind, message),
                None => TransportError::Other { code, message },
            }
        }
        SdkError::ConstructionFailure(_) => TransportError::Other {
            code: "ConstructionFailure".to_owned(),
            message: describe(&error),
        },
        _ => TransportError::Unavailable {
            message: describe(&error),
        },
    }
}

/// The kind an SQS or SNS error code names: [`ErrorKind::from_code`], and the codes SNS alone
/// uses for kinds SQS names otherwise (`ParameterValueInvalid` is SNS's
/// `InvalidParameterValueException`, `Throttled` its `ThrottledException`). SNS's codes without a
/// kind of their own (`TopicLimitExceeded`, `SubscriptionLimitExceeded`,
/// `FilterPolicyLimitExceeded`, the KMS ones...) are none: they reach the caller as
/// [`TransportError::Other`] with their code.
/// (SNS's errors: <https://docs.aws.amazon.com/sns/latest/api/CommonErrors.html> and each action's
/// page, e.g. <https://docs.aws.amazon.com/sns/latest/api/API_Publish.html#API_Publish_Errors>)
pub(super) fn error_kind(code: &str) -> Option<ErrorKind> {
    ErrorKind::from_code(code).or(match code {
        "ParameterValueInvalid" => Some(ErrorKind::InvalidParameterValue),
        "Throttled" | "ThrottledException" => Some(ErrorKind::RequestThrottled),
        _ => None,
    })
}

/// The error and its causes on one line (the SDK's top-level message alone says little).
pub(super) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An SDK request that could not be built: a required field the rules let through.
pub(super) fn unbuildable(error: aws_sdk_sqs::error::BuildError) -> TransportError {
    TransportError::service(ErrorKind::InvalidParameterValue, error.to_string())
}

pub(super) fn missing(what: &str) -> TransportError {
    TransportError::Unavailable {
        message: format!("SQS answered without {what}"),
    }
}

pub(super) fn to_sdk_attribute(
    value: &MessageAttributeValue,
) -> Result<SdkAttribute, TransportError> {
    SdkAttribute::builder()
        .data_type(&value.data_type)
        .set_string_value(value.string_value.clone())
        .set_binary_value(value.binary_value.clone().map(Blob::new))
        .build()
        .map_err(unbuildable)
}

pub(super) fn from_sdk_attributes(
    attributes: Option<HashMap<String, SdkAttribute>>,
) -> MessageAttributes {
    attributes
        .into_iter()
        .flatten()
        .map(|(name, value)| {
            let value = MessageAttributeValue {
                data_type: value.data_type,
                string_value: value.string_value,
                binary_value: value.binary_value.map(Blob::into_inner),
            };
            (name, value)
        })
        .collect()
}

pub(super) fn failures(failed: &[aws_sdk_sqs::types::BatchResultErrorEntry]) -> Vec<BatchFailure> {
    failed
        .iter()
        .map(|entry| {
            batch_failure(
                entry.id(),
                entry.code(),
                entry.message(),
                entry.sender_fault(),
            )
        })
        .collect()
}

/// A failed entry of an SQS or SNS batch, read by its code.
pub(super) fn batch_failure(
    id: &str,
    code: &str,
    message: Option<&str>,
    flagged_sender_fault: bool,
) -> BatchFailure {
    let known = error_kind(code);
    BatchFailure {
        id: answered_entry_id(id),
        kind: known.unwrap_or(ErrorKind::InternalError),
        // A code that names the request's fault is never retried, whatever the entry's flag
        // says: LocalStack flags an expired receipt handle as the service's fault, and retrying
        // that delete for seconds would hold its FIFO group for nothing.
        sender_fault: flagged_sender_fault || known.is_some_and(ErrorKind::sender_fault),
        message: format!("{code}: {}", message.unwrap_or_default()),
    }
}

/// Checks and converts each batch entry: those that break a rule are answered as failed entries
/// (as SQS would answer them) and only the rest go to the network.
pub(super) fn split_checked<E, S, T>(
    entries: Vec<E>,
    id: impl Fn(&E) -> &EntryId,
    convert: impl Fn(&E) -> Result<S, TransportError>,
) -> (Vec<S>, BatchResult<T>) {
    let mut result = BatchResult::default();
    let mut request = Vec::new();
    for entry in &entries {
        match convert(entry) {
            Ok(converted) => request.push(converted),
            Err(error) => result
                .failed
                .push(error.into_batch_failure(id(entry).clone())),
        }
    }
    (request, result)
}

pub(super) fn is_fifo_url(url: &str) -> bool {
    url.ends_with(".fifo")
}
