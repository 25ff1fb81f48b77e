//! The batched SQS and SNS actions ([`Action`]): what an entry is, how a call of entries is made, and
//! what the batcher may do with an entry (repeat it unanswered, withhold it, give up on it when
//! its lease is about to lapse).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::lease::Lease;
use crate::model::rules::{self, ErrorKind};
use crate::model::topic::{self, DEFAULT_MAX_MESSAGE_SIZE};
use crate::transport::{
    BatchResult, BoxFuture, ChangeVisibilityEntry, DeleteEntry, EntryId, Publish,
    PublishBatchEntry, Published, SendBatchEntry, SendMessage, SentMessage, SharedTransport,
    TransportError,
};

/// The longest one try of a call may take before the engine gives it up and tries again. A
/// transport may bound its own attempts more loosely (the SDK's are 30 s, repeated up to 4 times)
/// or not at all, and a stalled connection must not hold a delete, an extension or a send for
/// minutes: SQS answers a batch call in milliseconds.
pub(crate) const CALL_DEADLINE: Duration = Duration::from_secs(10);
/// The shortest deadline a try is given, however little visibility its entries have left.
pub(super) const SHORTEST_CALL_DEADLINE: Duration = Duration::from_millis(200);
/// One batched SQS action.
pub(crate) trait Action: Send + Sync + 'static {
    type Entry: Clone + Send + Sync + 'static;
    type Output: Send + 'static;
    /// The most payload (as [`size`](Self::size) counts it) one call may carry: SQS's 1 MiB per
    /// `SendMessageBatch` unless the action says otherwise.
    const MAX_PAYLOAD: usize = rules::MAX_BATCH_PAYLOAD_SIZE;
    /// The entry's share of a call's payload, counted against SQS's 1 MiB per `SendMessageBatch`;
    /// deletes and visibility changes have no such limit.
    fn size(_entry: &Self::Entry) -> usize {
        0
    }
    fn call<'a>(
        transport: &'a SharedTransport,
        queue_url: &'a str,
        entries: Vec<(EntryId, Self::Entry)>,
    ) -> BoxFuture<'a, Result<BatchResult<Self::Output>, TransportError>>;
    /// Whether the entry may be sent again after a try that got no answer (the connection failed
    /// or timed out), when SQS may have acted on it.
    fn may_repeat_unanswered(_entry: &Self::Entry) -> bool {
        true
    }
    /// Why the entry must not be sent (any more), if it must not: checked before every try.
    fn withheld(_entry: &Self::Entry) -> Option<TransportError> {
        None
    }
    /// When a try carrying the entry stops being of use (its message's visibility ends), if it
    /// does: a try is given up well before, so another has time to reach SQS.
    fn useful_until(_entry: &Self::Entry) -> Option<Instant> {
        None
    }
}

/// How long a try of a call whose entries are useful until `useful_until` may take: half the
/// time left, so a second try still fits, within [`SHORTEST_CALL_DEADLINE`] and
/// [`CALL_DEADLINE`].
pub(super) fn try_deadline(useful_until: Option<Instant>) -> Duration {
    let Some(until) = useful_until else {
        return CALL_DEADLINE;
    };
    (until.saturating_duration_since(Instant::now()) / 2)
        .clamp(SHORTEST_CALL_DEADLINE, CALL_DEADLINE)
}

/// `SendMessageBatch`.
#[derive(Debug)]
pub(crate) struct SendBatch;

impl Action for SendBatch {
    type Entry = SendMessage;
    type Output = SentMessage;
    fn size(message: &SendMessage) -> usize {
        rules::message_size(message)
    }
    fn call<'a>(
        transport: &'a SharedTransport,
        queue_url: &'a str,
        entries: Vec<(EntryId, SendMessage)>,
    ) -> BoxFuture<'a, Result<BatchResult<SentMessage>, TransportError>> {
        let entries = entries
            .into_iter()
            .map(|(id, message)| SendBatchEntry { id, message })
            .collect();
        transport.send_message_batch(queue_url, entries)
    }
}

/// `DeleteMessageBatch`; the entry is the lease of the message to delete, whose receipt handle is
/// copied once per call.
#[derive(Debug)]
pub(crate) struct DeleteBatch;

impl Action for DeleteBatch {
    type Entry = Arc<Lease>;
    type Output = ();
    fn call<'a>(
        transport: &'a SharedTransport,
        queue_url: &'a str,
        entries: Vec<(EntryId, Arc<Lease>)>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>> {
        let entries = entries
            .into_iter()
            .map(|(id, lease)| DeleteEntry {
                id,
                receipt_handle: lease.receipt_handle.clone(),
            })
            .collect();
        transport.delete_message_batch(queue_url, entries)
    }

    fn useful_until(lease: &Arc<Lease>) -> Option<Instant> {
        Some(lease.lapses_at())
    }
}

/// `ChangeMessageVisibilityBatch`; the entry is the message's lease and the new timeout in
/// seconds.
#[derive(Debug)]
pub(crate) struct VisibilityBatch;

impl Action for VisibilityBatch {
    type Entry = (Arc<Lease>, i32);
    type Output = ();
    fn call<'a>(
        transport: &'a SharedTransport,
        queue_url: &'a str,
        entries: Vec<(EntryId, (Arc<Lease>, i32))>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>> {
        let entries = entries
            .into_iter()
            .map(|(id, (lease, visibility_timeout))| ChangeVisibilityEntry {
                id,
                receipt_handle: lease.receipt_handle.clone(),
                visibility_timeout,
            })
            .collect();
        transport.change_message_visibility_batch(queue_url, entries)
    }

    /// A release (visibility 0) is not repeated once its answer is lost: if SQS applied it, the
    /// message may already have been received again, and a repeat with the old receipt handle
    /// must not reach that newer receive (SQS ignores a stale receipt handle; LocalStack applies
    /// it, and so made a FIFO group receivable while one of its messages was in flight). A
    /// release that never arrived costs the message's visibility timeout, no more. An extension
    /// is repeated: lost, the message would come back while its handler still runs.
    fn may_repeat_unanswered((_, visibility_timeout): &Self::Entry) -> bool {
        *visibility_timeout != 0
    }

    /// A lease whose visibility has ended is not changed: see [`Lease::has_lapsed`].
    fn withheld((lease, _): &Self::Entry) -> Option<TransportError> {
        lease.has_lapsed().then(|| {
            TransportError::service(
                ErrorKind::MessageNotInflight,
                "its visibility timeout has ended, so it may have been received again: its old \
                 receipt handle is not used",
            )
        })
    }

    fn useful_until((lease, _): &Self::Entry) -> Option<Instant> {
        Some(lease.lapses_at())
    }
}

/// SNS `PublishBatch`: the batcher's target address is the topic's ARN. A call carries at most 10
/// publishes and 256 KiB of messages and attributes together, SNS's default `MaximumMessageSize`,
/// which bounds a whole batch (a topic that takes more still gets calls within the default).
#[derive(Debug)]
pub(crate) struct PublishBatch;

impl Action for PublishBatch {
    type Entry = Publish;
    type Output = Published;
    const MAX_PAYLOAD: usize = DEFAULT_MAX_MESSAGE_SIZE;
    fn size(publish: &Publish) -> usize {
        topic::publish_size(publish)
    }
    fn call<'a>(
        transport: &'a SharedTransport,
        topic_arn: &'a str,
        entries: Vec<(EntryId, Publish)>,
    ) -> BoxFuture<'a, Result<BatchResult<Published>, TransportError>> {
        let entries = entries
            .into_iter()
            .map(|(id, publish)| PublishBatchEntry { id, publish })
            .collect();
        transport.publish_batch(topic_arn, entries)
    }
}
