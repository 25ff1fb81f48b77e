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

/// What a receive copied out of its queue under the lock. Its lists are the thread's
/// [`Scratch`], taken as it is made and given back as it is dropped: a receive copies its messages
/// under the queue's lock into memory it already has, and allocates their strings only once the
/// lock is released ([`into_messages`](Self::into_messages)), so other callers of the queue wait
/// for its work, not for the allocator's.
#[derive(Debug)]
pub(super) struct Received {
    pub(super) incarnation: u64,
    pub(super) fifo: bool,
    messages: Vec<Copied>,
    /// The messages' bodies, one after another: each [`Copied::body`] is its range.
    bodies: String,
}

/// A thread's lists for the next receive it copies out ([`Received`]).
#[derive(Debug, Default)]
struct Scratch {
    messages: Vec<Copied>,
    bodies: String,
}

/// The most a thread keeps for its next receive: a receive of ten messages of a few kilobytes;
/// one of larger messages gives its memory back.
const SCRATCH_MESSAGES: usize = 16;
const SCRATCH_BODY_BYTES: usize = 64 * 1024;

thread_local! {
    static SCRATCH: std::cell::Cell<Scratch> = const {
        std::cell::Cell::new(Scratch {
            messages: Vec::new(),
            bodies: String::new(),
        })
    };
}

/// One received message as copied out of the queue.
#[derive(Debug)]
pub(super) struct Copied {
    pub(super) key: Key,
    pub(super) message_id: MessageId,
    pub(super) receive_count: u32,
    pub(super) first_received: Option<Milliseconds>,
    pub(super) sent: Milliseconds,
    /// Where its body is in [`Received`]'s bodies (set by [`Received::push`]).
    pub(super) body: std::ops::Range<usize>,
    pub(super) group_id: Option<GroupName>,
    pub(super) dedup: Option<Arc<Dedup>>,
    pub(super) dead_letter_source_arn: Option<Arc<str>>,
    /// Already filtered to the requested ones.
    pub(super) message_attributes: MessageAttributes,
    /// The sender's `AWSTraceHeader`, when it was requested.
    pub(super) aws_trace_header: Option<String>,
}

impl Received {
    /// An empty receive of a queue, on the thread's scratch lists.
    pub(super) fn new(incarnation: u64, fifo: bool) -> Self {
        let Scratch {
            mut messages,
            mut bodies,
        } = SCRATCH.try_with(std::cell::Cell::take).unwrap_or_default();
        messages.clear();
        bodies.clear();
        Self {
            incarnation,
            fifo,
            messages,
            bodies,
        }
    }

    /// Adds a message copied out with its `body`; `copied.body` is set here.
    pub(super) fn push(&mut self, mut copied: Copied, body: &str) {
        let start = self.bodies.len();
        self.bodies.push_str(body);
        copied.body = start..self.bodies.len();
        self.messages.push(copied);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The messages as a receive returns them, with the requested attributes only; timestamps
    /// are the account's milliseconds after `start_epoch_ms`.
    pub(super) fn into_messages(
        mut self,
        wanted: &Wanted<'_>,
        start_epoch_ms: u64,
    ) -> Vec<ReceivedMessage> {
        let (incarnation, fifo) = (self.incarnation, self.fifo);
        let bodies = &self.bodies;
        let mut list = ReceivedMessage::list(self.messages.len());
        list.extend(self.messages.drain(..).map(|message| {
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
                body: bodies[message.body].to_owned(),
                attributes,
                message_attributes: message.message_attributes,
            }
        }));
        list
    }
}

impl Drop for Received {
    /// Gives the lists back to the thread for its next receive, unless they grew large.
    fn drop(&mut self) {
        if self.messages.capacity() <= SCRATCH_MESSAGES
            && self.bodies.capacity() <= SCRATCH_BODY_BYTES
        {
            self.messages.clear();
            let scratch = Scratch {
                messages: std::mem::take(&mut self.messages),
                bodies: std::mem::take(&mut self.bodies),
            };
            // A thread that is ending keeps nothing.
            let _ = SCRATCH.try_with(|kept| kept.set(scratch));
        }
    }
}
