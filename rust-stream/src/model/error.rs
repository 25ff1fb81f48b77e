//! What a queue, topic or object service answers when it refuses: the SQS, SNS and S3 error kinds, a failed
//! request ([`TransportError`]) and a failed batch entry ([`BatchFailure`]). Every backend answers
//! in these words, so a caller matches on one enum whatever is underneath.

use std::fmt;

/// The SQS, SNS and S3 error kinds, named as the services name them.
///
/// Both the in-process account and the network transport report these, so a caller matches on
/// one enum whatever the backend. The kinds SNS shares with SQS (`InvalidParameterValue`, the batch
/// errors, throttling) are the same variants; [`InvalidParameter`](Self::InvalidParameter) and
/// [`NotFound`](Self::NotFound) are SNS's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The queue named by a URL or name does not exist.
    QueueDoesNotExist,
    /// A queue of this name exists with other attributes.
    QueueNameExists,
    /// A queue of this name was deleted less than 60 seconds ago.
    QueueDeletedRecently,
    /// An attribute name is unknown, read-only, or not valid for this queue type.
    InvalidAttributeName,
    /// An attribute's value is outside its range or malformed.
    InvalidAttributeValue,
    /// A parameter's value is outside its range or malformed.
    InvalidParameterValue,
    /// A required parameter is missing.
    MissingParameter,
    /// A message body contains characters SQS does not accept.
    InvalidMessageContents,
    /// A visibility change names a message that is not in flight.
    MessageNotInflight,
    /// A receipt handle is malformed, belongs to another queue, or was superseded by a later receive.
    ReceiptHandleIsInvalid,
    /// The queue was purged less than 60 seconds ago.
    PurgeQueueInProgress,
    /// A batch request has no entries.
    EmptyBatchRequest,
    /// A batch request has more than 10 entries.
    TooManyEntriesInBatchRequest,
    /// A batch entry id is not 1–80 characters of `[A-Za-z0-9_-]`.
    InvalidBatchEntryId,
    /// Two entries of one batch share an id.
    BatchEntryIdsNotDistinct,
    /// A send batch's messages add up to more than 1 MiB.
    BatchRequestTooLong,
    /// The operation is not supported: on this queue, or by this transport (a transport without
    /// SNS answers it to an SNS call).
    UnsupportedOperation,
    /// The request was throttled.
    RequestThrottled,
    /// The service failed; the request may be retried.
    InternalError,
    /// SNS: a request parameter breaks its constraints (a topic name, a publish's size, subject,
    /// group or deduplication id); SNS's `InvalidParameter`, distinct from `InvalidParameterValue`,
    /// which SNS answers for a bad message attribute.
    InvalidParameter,
    /// SNS: the topic or subscription named does not exist.
    NotFound,
    /// S3: the bucket named does not exist.
    NoSuchBucket,
    /// S3: the bucket has no object of the key named.
    NoSuchKey,
    /// The caller's credentials are not allowed the action on the resource: by its IAM policy, a
    /// queue, topic or bucket policy, or the policy of the KMS key that encrypts a queue. SQS's
    /// `AccessDenied` (its JSON protocol's `AccessDeniedException`, its KMS `KmsAccessDenied`),
    /// SNS's `AuthorizationError`, S3's `AccessDenied`. Retrying does not help; granting does
    /// (`docs/aws.md` lists what each feature needs).
    AccessDenied,
}

impl ErrorKind {
    /// The code SQS uses for this kind in its error responses.
    pub fn code(self) -> &'static str {
        match self {
            Self::QueueDoesNotExist => "QueueDoesNotExist",
            Self::QueueNameExists => "QueueNameExists",
            Self::QueueDeletedRecently => "QueueDeletedRecently",
            Self::InvalidAttributeName => "InvalidAttributeName",
            Self::InvalidAttributeValue => "InvalidAttributeValue",
            Self::InvalidParameterValue => "InvalidParameterValue",
            Self::MissingParameter => "MissingParameter",
            Self::InvalidMessageContents => "InvalidMessageContents",
            Self::MessageNotInflight => "MessageNotInflight",
            Self::ReceiptHandleIsInvalid => "ReceiptHandleIsInvalid",
            Self::PurgeQueueInProgress => "PurgeQueueInProgress",
            Self::EmptyBatchRequest => "EmptyBatchRequest",
            Self::TooManyEntriesInBatchRequest => "TooManyEntriesInBatchRequest",
            Self::InvalidBatchEntryId => "InvalidBatchEntryId",
            Self::BatchEntryIdsNotDistinct => "BatchEntryIdsNotDistinct",
            Self::BatchRequestTooLong => "BatchRequestTooLong",
            Self::UnsupportedOperation => "UnsupportedOperation",
            Self::RequestThrottled => "RequestThrottled",
            Self::InternalError => "InternalError",
            Self::InvalidParameter => "InvalidParameter",
            Self::NotFound => "NotFound",
            Self::NoSuchBucket => "NoSuchBucket",
            Self::NoSuchKey => "NoSuchKey",
            Self::AccessDenied => "AccessDenied",
        }
    }

    /// The kind an SQS or SNS error code names: the JSON protocol's short codes
    /// (`QueueDoesNotExist`), the query-compatible ones (`AWS.SimpleQueueService.NonExistentQueue`)
    /// and the SDKs' exception names (`NotFoundException`) alike.
    pub fn from_code(code: &str) -> Option<Self> {
        let short = code.strip_prefix("AWS.SimpleQueueService.").unwrap_or(code);
        let short = short.rsplit('#').next().unwrap_or(short);
        Some(match short {
            "QueueDoesNotExist" | "NonExistentQueue" => Self::QueueDoesNotExist,
            "QueueNameExists" | "QueueAlreadyExists" => Self::QueueNameExists,
            "QueueDeletedRecently" => Self::QueueDeletedRecently,
            "InvalidAttributeName" => Self::InvalidAttributeName,
            "InvalidAttributeValue" => Self::InvalidAttributeValue,
            "InvalidParameterValue" | "InvalidParameterValueException" | "ValidationError" => {
                Self::InvalidParameterValue
            }
            "MissingParameter" | "MissingRequiredParameterException" => Self::MissingParameter,
            "InvalidMessageContents" => Self::InvalidMessageContents,
            "MessageNotInflight" => Self::MessageNotInflight,
            "ReceiptHandleIsInvalid" => Self::ReceiptHandleIsInvalid,
            "PurgeQueueInProgress" => Self::PurgeQueueInProgress,
            "EmptyBatchRequest" => Self::EmptyBatchRequest,
            "TooManyEntriesInBatchRequest" => Self::TooManyEntriesInBatchRequest,
            "InvalidBatchEntryId" => Self::InvalidBatchEntryId,
            "BatchEntryIdsNotDistinct" => Self::BatchEntryIdsNotDistinct,
            "BatchRequestTooLong" => Self::BatchRequestTooLong,
            "UnsupportedOperation" => Self::UnsupportedOperation,
            "RequestThrottled" | "ThrottlingException" | "Throttling" | "KmsThrottled" => {
                Self::RequestThrottled
            }
            "InternalError" | "InternalFailure" | "ServiceUnavailable" => Self::InternalError,
            "InvalidParameter" | "InvalidParameterException" => Self::InvalidParameter,
            "NotFound" | "NotFoundException" => Self::NotFound,
            "NoSuchBucket" => Self::NoSuchBucket,
            "NoSuchKey" => Self::NoSuchKey,
            "AccessDenied"
            | "AccessDeniedException"
            | "AuthorizationError"
            | "KmsAccessDenied"
            | "KMS.AccessDeniedException" => Self::AccessDenied,
            _ => return None,
        })
    }

    /// Whether the caller's request was at fault (as opposed to the service).
    pub fn sender_fault(self) -> bool {
        !matches!(self, Self::RequestThrottled | Self::InternalError)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A failed batch entry, as SQS reports it in the `Failed` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchFailure {
    /// The entry's id.
    pub id: crate::model::entry_id::EntryId,
    /// Why it failed.
    pub kind: ErrorKind,
    /// Whether the request was at fault (retrying it unchanged will fail again).
    pub sender_fault: bool,
    /// What was wrong.
    pub message: String,
}

/// Why a request to a queue service failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The service answered with an SQS error.
    #[error("{kind}: {message}")]
    Service {
        /// The SQS error kind.
        kind: ErrorKind,
        /// What was wrong and how to fix it.
        message: String,
        /// Whether the backend refused the request by the rules it checks of a whole request
        /// before sending anything (a queue name SQS would refuse, a batch of 11), so that no
        /// service saw it and SQS billed nothing: see [`TransportError::is_unsent`].
        unsent: bool,
    },
    /// The service answered with an error code this crate does not know (credentials, access).
    #[error("{code}: {message}")]
    Other {
        /// The code the service sent.
        code: String,
        /// What it said.
        message: String,
    },
    /// The service could not be reached, timed out, or failed without a usable answer; the
    /// request may be retried.
    #[error("SQS unreachable: {message}")]
    Unavailable {
        /// What went wrong.
        message: String,
    },
    /// Not sent, to keep a FIFO group in order: an earlier message of its group, given to the
    /// same sender in the same submission, was refused or failed for good, and this one must not
    /// be stored ahead of it. Sending it again alone would pass that earlier message; send the
    /// group again from the earlier one.
    #[error("not sent, as an earlier message of its FIFO group failed: {message}")]
    HeldBehind {
        /// Which earlier message failed, and why.
        message: String,
    },
}

impl TransportError {
    /// An SQS error of this kind.
    pub fn service(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::Service {
            kind,
            message: message.into(),
            unsent: false,
        }
    }

    /// This error, marked as refused before anything was sent: what a backend answers when a
    /// request breaks the rules it checks of a whole request first (an SQS error stays the same
    /// error; the others are never a rule's). The broker's meter counts such a call as not made.
    pub fn unsent(self) -> Self {
        match self {
            Self::Service { kind, message, .. } => Self::Service {
                kind,
                message,
                unsent: true,
            },
            other => other,
        }
    }

    /// Whether the backend refused the request by its rules before sending anything (see
    /// [`unsent`](Self::unsent)): no service saw it.
    pub fn is_unsent(&self) -> bool {
        matches!(self, Self::Service { unsent: true, .. })
    }

    /// Whether the same request may succeed if tried again (throttling, a service-side failure).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
            || matches!(
                self.kind(),
                Some(ErrorKind::RequestThrottled | ErrorKind::InternalError)
            )
    }

    /// The SQS error kind, when the service answered with one.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Service { kind, .. } => Some(*kind),
            Self::Other { .. } | Self::Unavailable { .. } | Self::HeldBehind { .. } => None,
        }
    }

    /// This error as a failed batch entry.
    pub(crate) fn into_batch_failure(
        self,
        id: impl Into<crate::model::entry_id::EntryId>,
    ) -> BatchFailure {
        let id = id.into();
        match self {
            Self::Service { kind, message, .. } => BatchFailure {
                id,
                kind,
                sender_fault: kind.sender_fault(),
                message,
            },
            Self::Other { code, message } => BatchFailure {
                id,
                kind: ErrorKind::InternalError,
                sender_fault: true,
                message: format!("{code}: {message}"),
            },
            Self::Unavailable { message } => BatchFailure {
                id,
                kind: ErrorKind::InternalError,
                sender_fault: false,
                message,
            },
            Self::HeldBehind { message } => BatchFailure {
                id,
                kind: ErrorKind::InvalidParameterValue,
                sender_fault: true,
                message: format!("held behind an earlier message of its group: {message}"),
            },
        }
    }
}
