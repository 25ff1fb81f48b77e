//! The message attributes rust-stream itself writes and reads, in one place: every part that sets
//! or reads one (the publisher, the engine's dead-letter copies, the inbox, routing, trace
//! propagation, the operations on queues) names it from here, and the crate root re-exports them
//! all.
//!
//! | Attribute | Written by | Read by |
//! | --- | --- | --- |
//! | [`TYPE_HEADER`] `rust_stream.type` | publishers of typed messages | [routing](crate::routing) by type |
//! | [`IDEMPOTENCY_KEY_HEADER`] `rust_stream.idempotency_key` | the [outbox](crate::outbox), a redrive | the [inbox](crate::inbox)'s default key |
//! | [`PARTITION_KEY_HEADER`] `partition_key` | every delivery from a FIFO queue | a publisher given no group |
//! | [`DEAD_LETTER_REASON_HEADER`] `rust_stream.dead_letter_reason` | the engine's dead-letter copy | operators, [peek](crate::operations) |
//! | [`ORIGINAL_MESSAGE_ID_HEADER`] `rust_stream.original_message_id` | the engine's dead-letter copy | a redrive's deduplication ids |
//! | [`SOURCE_QUEUE_HEADER`] `rust_stream.source_queue` | the engine's dead-letter copy | a redrive to the source |
//! | [`ATTEMPTS_HEADER`] `rust_stream.attempts` | the engine's dead-letter copy | operators |
//! | [`TRACEPARENT_HEADER`], [`TRACESTATE_HEADER`] | every publish (feature `opentelemetry`) | each message's `process` span |
//! | [`EXTENDED_PAYLOAD_SIZE`] `ExtendedPayloadSize` | a send whose body went to S3 (and every AWS extended client) | [large payloads](crate::model::large_payload): marks a pointer |
//! | [`LEGACY_PAYLOAD_SIZE`] `SQSLargePayloadSize` | older Java extended clients | the same, read only |
//! | [`PAYLOAD_SHA256_HEADER`] `rust_stream.payload_sha256` | a send whose body went to S3 | the check of the payload fetched |
//!
//! A sender's own attribute of one of these names is never overwritten.

/// The message attribute that names a typed message's type, by default: the short name of its
/// Rust type (`PaymentPosted`), which subscribers routed by type on one queue read
/// ([`routing`](crate::routing)). A broker may name it otherwise
/// ([`SqsBroker::type_header`](crate::SqsBroker::type_header)).
pub const TYPE_HEADER: &str = "rust_stream.type";

/// The header an [inbox](crate::inbox)'s default key reads: what a producer sets to make copies
/// of one message (its retries, a relay's resends, a handler's outputs sent again) one key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "rust_stream.idempotency_key";

/// The header that carries a message's group: a publisher reads it when no `group_id` step is
/// given, and every delivery from a FIFO queue carries its group in it.
pub const PARTITION_KEY_HEADER: &str = "partition_key";

/// The attribute a dead-lettered message carries the reason in.
pub const DEAD_LETTER_REASON_HEADER: &str = "rust_stream.dead_letter_reason";

/// The attribute a dead-lettered message carries its original message id in.
pub const ORIGINAL_MESSAGE_ID_HEADER: &str = "rust_stream.original_message_id";

/// The attribute a dead-lettered message carries the queue it came from in.
pub const SOURCE_QUEUE_HEADER: &str = "rust_stream.source_queue";

/// The attribute a dead-lettered message carries its number of attempts in (a `Number`).
pub const ATTEMPTS_HEADER: &str = "rust_stream.attempts";

/// The message attribute carrying the W3C `traceparent` of the span a message was published in:
/// version, trace id, parent span id and flags (`00-<32 hex>-<16 hex>-01`).
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// The message attribute carrying the W3C `tracestate` (vendor-specific trace data) of the span a
/// message was published in; sent only when it is not empty.
pub const TRACESTATE_HEADER: &str = "tracestate";

/// The message attribute carrying a W3C `traceparent` that the message's `process` span links to
/// (an OpenTelemetry span link) rather than continues: a redrive moves the trace a dead-lettered
/// message failed in here, so its next attempt starts its own trace and still points at that one.
pub const LINKED_TRACEPARENT_HEADER: &str = "rust_stream.linked_traceparent";

/// The message attribute that marks a body as a pointer to an S3 object and carries the payload's
/// size in bytes (a `Number`): what every AWS extended client writes and reads
/// ([`large_payload`](crate::model::large_payload)).
pub const EXTENDED_PAYLOAD_SIZE: &str = "ExtendedPayloadSize";

/// The same attribute as older Java extended clients named it: read, never written.
pub const LEGACY_PAYLOAD_SIZE: &str = "SQSLargePayloadSize";

/// The message attribute carrying the SHA-256 of a payload kept in S3, in lowercase hex: written
/// beside the pointer, checked against the object before a handler sees it.
pub const PAYLOAD_SHA256_HEADER: &str = "rust_stream.payload_sha256";
