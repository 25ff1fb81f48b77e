//! A message as a queue stores it ([`Stored`], kept small: a queue may hold millions), its state,
//! and the handles written for it: FIFO sequence numbers and receipt handles.

use std::sync::Arc;

use super::fifo::{Dedup, GroupName};
use super::ids::{Key, MessageId, MessageIds, Milliseconds, Moment};
use crate::transport::MessageAttributes;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Delayed { until: Moment },
    Visible,
    InFlight { until: Moment, received_at: Moment },
}

impl State {
    pub(super) fn timer(self) -> Option<Moment> {
        match self {
            Self::Delayed { until } | Self::InFlight { until, .. } => Some(until),
            Self::Visible => None,
        }
    }
}

/// A stored message, kept small: a queue may hold millions. Its message id is derived from its
/// key ([`MessageIds`](super::ids::MessageIds)), and its sent timestamp from `stored_at`, unless
/// `extra` says otherwise (a message moved to a dead-letter queue).
#[derive(Debug)]
pub(super) struct Stored {
    pub(super) body: Box<str>,
    /// FIFO: the message's group and the deduplication entry it was stored under, shared with
    /// the queue's deduplication window.
    pub(super) fifo: Option<Arc<Dedup>>,
    /// What few messages have: message attributes, a dead-letter source, a standard message's
    /// group.
    pub(super) extra: Option<Box<Extra>>,
    /// The enqueue time, where the retention clock starts; set by the sender, or by the
    /// dead-letter queue a message is moved to.
    pub(super) stored_at: Moment,
    pub(super) receive_count: u32,
    /// Milliseconds from `stored_at` to the first receive, plus one; 0 until the first receive.
    /// A receive comes within the retention period (at most 14 days, 1.2e9 ms) of `stored_at`.
    first_receive: u32,
    pub(super) state: State,
}

impl Stored {
    /// A message stored now, visible, never received.
    pub(super) fn new(
        body: Box<str>,
        fifo: Option<Arc<Dedup>>,
        extra: Option<Box<Extra>>,
        stored_at: Moment,
    ) -> Self {
        Self {
            body,
            fifo,
            extra,
            stored_at,
            receive_count: 0,
            first_receive: 0,
            state: State::Visible,
        }
    }

    /// The message's group: its FIFO group, or the group a sender gave a standard message.
    pub(super) fn group(&self) -> Option<&GroupName> {
        match &self.fifo {
            Some(dedup) => Some(&dedup.group),
            None => self.extra.as_ref()?.group_id.as_ref(),
        }
    }

    /// Counts a receive at `now`, remembering the first.
    pub(super) fn count_receive(&mut self, now: Moment) {
        self.receive_count += 1;
        if self.first_receive == 0 {
            let after = now.millis().saturating_sub(self.stored_at.millis());
            self.first_receive = u32::try_from(after).unwrap_or(u32::MAX - 1) + 1;
        }
    }

    /// When the message was first received, `None` before its first receive.
    pub(super) fn first_received(&self) -> Option<Milliseconds> {
        (self.first_receive != 0)
            .then(|| self.stored_at.millis() + u64::from(self.first_receive - 1))
    }

    /// Forgets the receives, as a move to a dead-letter queue does.
    pub(super) fn forget_receives(&mut self) {
        self.receive_count = 0;
        self.first_receive = 0;
    }

    /// When the message was sent: when it was stored, unless it kept its original send through
    /// a move to a FIFO dead-letter queue.
    pub(super) fn sent(&self) -> Milliseconds {
        self.extra
            .as_ref()
            .and_then(|extra| extra.sent)
            .unwrap_or_else(|| self.stored_at.millis())
    }

    /// The message's id: the one it kept through a move to a dead-letter queue, or its queue's
    /// for its key.
    pub(super) fn message_id(&self, ids: MessageIds, key: Key) -> MessageId {
        self.extra
            .as_ref()
            .and_then(|extra| extra.message_id)
            .unwrap_or_else(|| ids.of(key))
    }
}

/// The rarer parts of a stored message.
#[derive(Debug, Default)]
pub(super) struct Extra {
    pub(super) message_attributes: MessageAttributes,
    pub(super) dead_letter_source_arn: Option<Arc<str>>,
    /// A standard message's group, kept only to return it.
    pub(super) group_id: Option<GroupName>,
    /// The id a message moved to a dead-letter queue kept.
    pub(super) message_id: Option<MessageId>,
    /// The original send of a message moved to a FIFO dead-letter queue (where `stored_at` is
    /// the move).
    pub(super) sent: Option<Milliseconds>,
    /// The `AWSTraceHeader` system attribute the sender set.
    pub(super) aws_trace_header: Option<Box<str>>,
}

pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

/// The digits of a FIFO sequence number.
pub(super) const SEQUENCE_NUMBER_DIGITS: usize = 20;

/// A FIFO sequence number as SQS writes it: 20 digits, increasing within the queue.
pub(super) fn sequence_number(key: Key) -> String {
    let mut digits = [b'0'; SEQUENCE_NUMBER_DIGITS];
    let mut rest = key;
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    String::from_utf8(digits.to_vec()).expect("ASCII digits")
}

/// A receipt handle: the queue's incarnation, the message's key and its receive count, in 40
/// hexadecimal digits. A new receive (a higher count) makes a new handle.
pub(super) fn receipt_handle(incarnation: u64, key: Key, receive_count: u32) -> String {
    let mut bytes = [0u8; 20];
    bytes[..8].copy_from_slice(&incarnation.to_be_bytes());
    bytes[8..16].copy_from_slice(&key.to_be_bytes());
    bytes[16..].copy_from_slice(&receive_count.to_be_bytes());
    // A byte (two digits) at a time: a handle for every message received.
    let mut text = [0u8; 40];
    for (digits, byte) in text.chunks_exact_mut(2).zip(bytes) {
        digits[0] = HEX[usize::from(byte >> 4)];
        digits[1] = HEX[usize::from(byte & 0xf)];
    }
    String::from_utf8(text.to_vec()).expect("ASCII digits")
}

/// Each byte's value as a hexadecimal digit, or [`NOT_HEX`].
const HEX_VALUE: [u8; 256] = {
    let mut values = [NOT_HEX; 256];
    let mut digit = 0;
    while digit < 16 {
        values[HEX[digit] as usize] = digit as u8;
        values[HEX[digit].to_ascii_uppercase() as usize] = digit as u8;
        digit += 1;
    }
    values
};
const NOT_HEX: u8 = 0xff;

/// The parts of a receipt handle [`receipt_handle`] wrote; `None` for anything else.
pub(super) fn parse_receipt_handle(handle: &str) -> Option<(u64, Key, u32)> {
    let bytes = handle.as_bytes();
    if bytes.len() != 40 {
        return None;
    }
    // A handle for every message deleted or released: a table, and one test a part.
    let hex = |digits: &[u8]| {
        let mut value = 0u64;
        let mut not_hex = 0u8;
        for &byte in digits {
            let digit = HEX_VALUE[usize::from(byte)];
            not_hex |= digit;
            value = value << 4 | u64::from(digit & 0xf);
        }
        (not_hex & 0xf0 == 0).then_some(value)
    };
    Some((
        hex(&bytes[..16])?,
        hex(&bytes[16..32])?,
        u32::try_from(hex(&bytes[32..])?).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{SystemAttribute, SystemAttributes};

    #[test]
    fn receipt_handles_read_back_what_they_were_written_from_and_nothing_else() {
        let handle = receipt_handle(7, u64::MAX - 1, 3);
        assert_eq!(handle.len(), 40);
        assert_eq!(parse_receipt_handle(&handle), Some((7, u64::MAX - 1, 3)));
        assert_eq!(
            parse_receipt_handle(&handle.to_uppercase()),
            Some((7, u64::MAX - 1, 3))
        );
        assert_eq!(parse_receipt_handle(&handle[1..]), None);
        assert_eq!(parse_receipt_handle(&format!("{}g", &handle[1..])), None);
        assert_eq!(parse_receipt_handle(&"é".repeat(20)), None);
    }

    #[test]
    fn numbers_are_written_as_sqs_writes_them() {
        assert_eq!(sequence_number(42), "00000000000000000042");
        assert_eq!(sequence_number(u64::MAX), u64::MAX.to_string());
        let mut attributes = SystemAttributes::new();
        attributes.insert_number(SystemAttribute::SequenceNumber, 42, SEQUENCE_NUMBER_DIGITS);
        assert_eq!(attributes["SequenceNumber"], sequence_number(42));
        for n in [0, 7, 10, 1_700_000_000_123, u64::MAX] {
            attributes.insert_number(SystemAttribute::SentTimestamp, n, 0);
            assert_eq!(attributes["SentTimestamp"], n.to_string());
            assert_eq!(attributes.number(SystemAttribute::SentTimestamp), Some(n));
        }
        let ids = MessageIds::random();
        let id = ids.of(42);
        assert_eq!(id.text(), id.to_string());
        assert_eq!(id.to_uuid().get_version_num(), 4);
        assert_eq!(id.to_uuid().get_variant(), uuid::Variant::RFC4122);
    }

    #[test]
    fn a_queue_derives_a_distinct_id_for_every_key_and_other_ids_than_another_queue() {
        let (ids, others) = (MessageIds::random(), MessageIds::random());
        let mut seen = std::collections::HashSet::new();
        for key in (1..=100_000).chain([u64::MAX >> 2, (u64::MAX >> 2) - 1]) {
            assert!(seen.insert(ids.of(key)), "key {key} repeats an id");
            assert_eq!(ids.of(key), ids.of(key));
        }
        assert!((1..=1_000).all(|key| !seen.contains(&others.of(key))));
    }
}
