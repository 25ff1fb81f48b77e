//! A message as a queue stores it ([`Stored`], kept small: a queue may hold millions), its state,
//! and the handles written for it: FIFO sequence numbers and receipt handles.

use std::sync::Arc;

use super::fifo::{Dedup, GroupName};
use super::ids::{Key, MessageId, Moment};
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

/// A stored message, kept small: a queue may hold millions.
#[derive(Debug)]
pub(super) struct Stored {
    pub(super) message_id: MessageId,
    pub(super) body: Box<str>,
    /// The queue's interned name of the group (FIFO), shared by the group's messages.
    pub(super) group_id: Option<GroupName>,
    /// The deduplication entry the message was stored under (FIFO), shared with the queue's
    /// deduplication window.
    pub(super) dedup: Option<Arc<Dedup>>,
    /// What few messages have: message attributes, a dead-letter source.
    pub(super) extra: Option<Box<Extra>>,
    pub(super) sent_epoch_ms: u64,
    /// The enqueue time, where the retention clock starts; set by the sender, or by the
    /// dead-letter queue a message is moved to.
    pub(super) stored_at: Moment,
    /// 0 until the first receive.
    pub(super) first_receive_epoch_ms: u64,
    pub(super) receive_count: u32,
    pub(super) state: State,
}

/// The rarer parts of a stored message.
#[derive(Debug, Default)]
pub(super) struct Extra {
    pub(super) message_attributes: MessageAttributes,
    pub(super) dead_letter_source_arn: Option<Arc<str>>,
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
    let mut text = [0u8; 40];
    let mut put = |at: usize, width: usize, value: u64| {
        for i in 0..width {
            let nibble = (value >> (4 * (width - 1 - i))) & 0xf;
            text[at + i] = HEX[nibble as usize];
        }
    };
    put(0, 16, incarnation);
    put(16, 16, key);
    put(32, 8, receive_count.into());
    String::from_utf8(text.to_vec()).expect("ASCII digits")
}

/// The parts of a receipt handle [`receipt_handle`] wrote; `None` for anything else.
pub(super) fn parse_receipt_handle(handle: &str) -> Option<(u64, Key, u32)> {
    let bytes = handle.as_bytes();
    if bytes.len() != 40 {
        return None;
    }
    let hex = |range: std::ops::Range<usize>| {
        bytes[range].iter().try_fold(0u64, |value, &byte| {
            let nibble = match byte {
                b'0'..=b'9' => byte - b'0',
                b'a'..=b'f' => byte - b'a' + 10,
                b'A'..=b'F' => byte - b'A' + 10,
                _ => return None,
            };
            Some(value << 4 | u64::from(nibble))
        })
    };
    Some((hex(0..16)?, hex(16..32)?, u32::try_from(hex(32..40)?).ok()?))
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
        let id = MessageId::random();
        assert_eq!(id.text(), id.to_string());
        assert_eq!(id.to_uuid().get_version_num(), 4);
    }
}
