//! What a receive hands out: the attributes it asked for ([`Wanted`]) and the messages copied out
//! of the queue under its lock ([`Received`]), written out as SQS answers once the lock is gone.

use std::sync::Arc;

use super::fifo::{Dedup, GroupName};
use super::ids::{Key, MessageId, Milliseconds, ACCOUNT_ID};
use super::message::{receipt_handle, SEQUENCE_NUMBER_DIGITS};
use crate::transport::{
    MessageAttributes, ReceiveMessage, ReceivedMessage, SystemAttribute, SystemAttributes,
};

/// What a receive asked to have returned, worked out once per request.
#[derive(Debug)]
pub(super) struct Wanted<'a> {
    pub(super) request: &'a ReceiveMessage,
    /// The system attributes asked for, as [`SystemAttribute`] bits.
    system: u16,
}

/// A system attribute's bit in [`Wanted::system`].
fn bit(attribute: SystemAttribute) -> u16 {
    1 << attribute as u16
}

impl<'a> Wanted<'a> {
    pub(super) fn new(request: &'a ReceiveMessage) -> Self {
        let system = SystemAttribute::ALL
            .iter()
            .filter(|attribute| {
                request
                    .system_attribute_names
                    .iter()
                    .any(|name| name == "All" || name == attribute.name())
            })
            .fold(0, |bits, &attribute| bits | bit(attribute));
        Self { request, system }
    }

    pub(super) fn system(&self, attribute: SystemAttribute) -> bool {
        self.system & bit(attribute) != 0
    }

    pub(super) fn message_attribute(&self, name: &str) -> bool {
        self.request.message_attribute_names.iter().any(|wanted| {
            wanted == "All"
                || wanted == ".*"
                || wanted == name
                || wanted.strip_suffix(".*").is_some_and(|prefix| {
                    name.strip_prefix(prefix)
                        .is_some_and(|rest| rest.starts_with('.'))
                })
        })
    }
}

/// What a receive copied out of its queue under the lock.
#[derive(Debug)]
pub(super) struct Received {
    pub(super) incarnation: u64,
    pub(super) fifo: bool,
    pub(super) messages: Vec<Copied>,
}

/// One received message as copied out of the queue.
#[derive(Debug)]
pub(super) struct Copied {
    pub(super) key: Key,
    pub(super) message_id: MessageId,
    pub(super) receive_count: u32,
    pub(super) first_received: Option<Milliseconds>,
    pub(super) sent: Milliseconds,
    pub(super) body: String,
    pub(super) group_id: Option<GroupName>,
    pub(super) dedup: Option<Arc<Dedup>>,
    pub(super) dead_letter_source_arn: Option<Arc<str>>,
    /// Already filtered to the requested ones.
    pub(super) message_attributes: MessageAttributes,
    /// The sender's `AWSTraceHeader`, when it was requested.
    pub(super) aws_trace_header: Option<String>,
}

impl Received {
    pub(super) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The messages as a receive returns them, with the requested attributes only; timestamps
    /// are the account's milliseconds after `start_epoch_ms`.
    pub(super) fn into_messages(
        self,
        wanted: &Wanted<'_>,
        start_epoch_ms: u64,
    ) -> Vec<ReceivedMessage> {
        let Self {
            incarnation,
            fifo,
            messages,
        } = self;
        messages
            .into_iter()
            .map(|message| {
                // Numbers are written in place: no map and no string per attribute.
                let mut attributes = SystemAttributes::new();
                let wants = |attribute| wanted.system(attribute);
                if wants(SystemAttribute::ApproximateReceiveCount) {
                    attributes.insert_number(
                        SystemAttribute::ApproximateReceiveCount,
                        message.receive_count.into(),
                        0,
                    );
                }
                if let (true, Some(first)) = (
                    wants(SystemAttribute::ApproximateFirstReceiveTimestamp),
                    message.first_received,
                ) {
                    attributes.insert_number(
                        SystemAttribute::ApproximateFirstReceiveTimestamp,
                        start_epoch_ms + first,
                        0,
                    );
                }
                if wants(SystemAttribute::SentTimestamp) {
                    attributes.insert_number(
                        SystemAttribute::SentTimestamp,
                        start_epoch_ms + message.sent,
                        0,
                    );
                }
                if wants(SystemAttribute::SenderId) {
                    attributes.insert(SystemAttribute::SenderId.name(), ACCOUNT_ID);
                }
                if let (true, Some(group)) = (
                    wants(SystemAttribute::MessageGroupId),
                    message.group_id.as_deref(),
                ) {
                    attributes.insert(SystemAttribute::MessageGroupId.name(), group);
                }
                if let (true, Some(dedup)) = (
                    wants(SystemAttribute::MessageDeduplicationId),
                    message.dedup.as_ref(),
                ) {
                    attributes.insert(
                        SystemAttribute::MessageDeduplicationId.name(),
                        dedup.id.text(),
                    );
                }
                if fifo && wants(SystemAttribute::SequenceNumber) {
                    attributes.insert_number(
                        SystemAttribute::SequenceNumber,
                        message.key,
                        SEQUENCE_NUMBER_DIGITS,
                    );
                }
                if let (true, Some(arn)) = (
                    wants(SystemAttribute::DeadLetterQueueSourceArn),
                    message.dead_letter_source_arn.as_deref(),
                ) {
                    attributes.insert(SystemAttribute::DeadLetterQueueSourceArn.name(), arn);
                }
                if let Some(header) = message.aws_trace_header {
                    attributes.insert(SystemAttribute::AwsTraceHeader.name(), header);
                }
                ReceivedMessage {
                    message_id: message.message_id.text(),
                    receipt_handle: receipt_handle(incarnation, message.key, message.receive_count),
                    body: message.body,
                    attributes,
                    message_attributes: message.message_attributes,
                }
            })
            .collect()
    }
}
