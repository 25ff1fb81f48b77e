//! A received message as the engine holds it: a [`Delivery`], made once per receive and shared
//! by every part of the engine that handles, settles or logs the message.
//!
//! A queue subscribed to an SNS topic with raw message delivery off receives SNS's JSON
//! notification envelopes; a delivery unwraps them as it is made, so the codec, the headers and
//! the trace context all read the published message, and keeps the envelope as the
//! [`SnsNotification`]. A handler reads a delivery through its [`Context`](super::context::Context).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::codec::{Codec, DecodeError};
use crate::model::envelope::{Envelope, EnvelopeError};
use crate::model::headers::PARTITION_KEY_HEADER;
use crate::model::large_payload::Large;
use crate::model::topic::TopicArn;
use crate::model::wire::{MessageAttributes, ReceivedMessage, SystemAttribute};

/// One received message as the engine holds it.
#[derive(Debug)]
pub(crate) struct Delivery {
    pub(crate) message_id: String,
    /// The SQS message's body as received: an SNS envelope's JSON when it is one (the message
    /// the handler reads is [`payload`](Self::payload)).
    pub(crate) body: String,
    pub(crate) queue: Arc<str>,
    pub(crate) group_id: Option<String>,
    pub(crate) dedup_id: Option<String>,
    pub(crate) sequence_number: Option<String>,
    pub(crate) receive_count: u32,
    pub(crate) sent_at: Option<SystemTime>,
    /// The text attributes (`String`, `Number`, `String.Array`) of the message the handler reads
    /// (see [`message_attributes`](Self::message_attributes)); its group is a header too, read
    /// through [`header`](Self::header) and [`headers`](Self::headers).
    headers: BTreeMap<String, String>,
    /// `headers` and the group, made the first time all of them are asked for: a message of a
    /// group would otherwise allocate a map and two strings for a header few handlers read.
    headers_and_group: OnceLock<BTreeMap<String, String>>,
    /// The SQS message's own attributes as received (an envelope's are in its notification).
    pub(crate) attributes: MessageAttributes,
    /// The SNS envelope the body is, when the subscription reads envelopes.
    pub(crate) sns: Sns,
    /// The payload kept in S3, when the message is a pointer to one: boxed, as few messages are.
    pub(crate) large: Option<Box<Large>>,
    /// The `AWSTraceHeader` system attribute: an X-Ray trace header, when the sender set one.
    pub(crate) aws_trace_header: Option<String>,
}

/// What SNS wrapped a delivery's body in.
#[derive(Debug)]
pub(crate) enum Sns {
    /// Nothing: the body is the message (a raw delivery, a message sent to the queue directly,
    /// or any body of a queue subscribed to no topic with enveloped delivery).
    Unwrapped,
    /// An SNS notification, whose `Message` is the message.
    Notification(Box<SnsNotification>),
    /// An SNS notification that cannot be read (its `Message` missing, an attribute SNS would
    /// not write): the body does not decode.
    Broken(Box<EnvelopeError>),
}

impl Delivery {
    /// The delivery of a received message from `queue`. The system attributes it keeps are moved
    /// out of the message, not copied. With `reads_envelopes` (the queue has an enveloped topic
    /// subscription), a body that is an SNS notification envelope is unwrapped.
    pub(crate) fn new(
        queue: &Arc<str>,
        mut message: ReceivedMessage,
        reads_envelopes: bool,
    ) -> Self {
        let sns = if reads_envelopes {
            match Envelope::parse(&message.body) {
                Ok(envelope) => Sns::Notification(Box::new(SnsNotification(envelope))),
                Err(EnvelopeError::NotAnEnvelope) => Sns::Unwrapped,
                Err(error) => Sns::Broken(Box::new(error)),
            }
        } else {
            Sns::Unwrapped
        };
        let read_attributes = match &sns {
            Sns::Notification(notification) => &notification.0.message_attributes,
            Sns::Unwrapped | Sns::Broken(_) => &message.message_attributes,
        };
        let read_body = match &sns {
            Sns::Notification(notification) => &notification.0.message,
            Sns::Unwrapped | Sns::Broken(_) => &message.body,
        };
        let large = Large::of(read_body, read_attributes);
        let headers: BTreeMap<String, String> = read_attributes
            .iter()
            .filter_map(|(name, value)| Some((name.clone(), value.string_value.clone()?)))
            .collect();
        let group_id = message.attributes.take(SystemAttribute::MessageGroupId);
        Self {
            receive_count: message.receive_count().unwrap_or(1),
            sent_at: message
                .attributes
                .number(SystemAttribute::SentTimestamp)
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            sequence_number: message.attributes.take(SystemAttribute::SequenceNumber),
            dedup_id: message
                .attributes
                .take(SystemAttribute::MessageDeduplicationId),
            aws_trace_header: message.attributes.take(SystemAttribute::AwsTraceHeader),
            group_id,
            headers,
            headers_and_group: OnceLock::new(),
            message_id: message.message_id,
            body: message.body,
            queue: queue.clone(),
            attributes: message.message_attributes,
            sns,
            large,
        }
    }

    /// A header of the message the handler reads; a delivery carries its group where a publisher
    /// may have put it, in [`PARTITION_KEY_HEADER`] (unless the publisher set that header).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        match self.headers.get(name) {
            Some(value) => Some(value),
            None if name == PARTITION_KEY_HEADER => self.group_id.as_deref(),
            None => None,
        }
    }

    /// Every header, the group in [`PARTITION_KEY_HEADER`] as [`header`](Self::header) reads it.
    pub(crate) fn headers(&self) -> &BTreeMap<String, String> {
        match &self.group_id {
            Some(group) if !self.headers.contains_key(PARTITION_KEY_HEADER) => {
                self.headers_and_group.get_or_init(|| {
                    let mut headers = self.headers.clone();
                    headers.insert(PARTITION_KEY_HEADER.to_owned(), group.clone());
                    headers
                })
            }
            _ => &self.headers,
        }
    }

    /// The message the handler reads, for its codec: an SNS notification's `Message`, else the
    /// body; the envelope's error when the body is a notification that cannot be read.
    pub(crate) fn payload(&self) -> Result<&str, &EnvelopeError> {
        if let Some(fetched) = self.large.as_ref().and_then(|large| large.fetched.get()) {
            return Ok(fetched);
        }
        match &self.sns {
            Sns::Unwrapped => Ok(&self.body),
            Sns::Notification(notification) => Ok(&notification.0.message),
            Sns::Broken(error) => Err(error),
        }
    }

    /// The handler's message of type `T`, decoded by `codec` from the [`payload`](Self::payload):
    /// an SNS envelope is already unwrapped, and one that cannot be read does not decode.
    pub(crate) fn decode<T: serde::de::DeserializeOwned, C: Codec>(
        &self,
        codec: &C,
    ) -> Result<T, DecodeError> {
        if let Some(unread) = self.large.as_ref().and_then(|large| large.unread()) {
            // The engine fetches a payload before the handler runs, so this one points nowhere.
            let type_name = std::any::type_name::<T>();
            return Err(DecodeError {
                type_name,
                reason: unread,
            });
        }
        match self.payload() {
            Ok(payload) => codec.decode(payload),
            Err(broken) => Err(DecodeError {
                type_name: std::any::type_name::<T>(),
                reason: broken.to_string(),
            }),
        }
    }

    /// The attributes of the message the handler reads: an SNS notification's
    /// `MessageAttributes`, else the SQS message's. The trace context is read from these.
    pub(crate) fn message_attributes(&self) -> &MessageAttributes {
        match &self.sns {
            Sns::Notification(notification) => &notification.0.message_attributes,
            Sns::Unwrapped | Sns::Broken(_) => &self.attributes,
        }
    }
}

/// The SNS notification a message came in: what SNS says of the publish when it delivers it to a
/// queue in its JSON envelope (raw message delivery off). [`Context::sns`](crate::Context::sns) gives it.
///
/// The handler's message is the notification's `Message`, and its headers the notification's
/// `MessageAttributes`, so it reads the same from a raw delivery, which has no notification.
/// Here are the rest: the topic, SNS's own message id (the same in every subscribed queue's
/// copy, unlike the SQS message id), the subject and when SNS accepted the publish; the whole
/// envelope, signature fields included, is [`envelope`](Self::envelope).
///
/// ```
/// # use rust_stream::prelude::*;
/// # async fn example(ctx: &mut Context<'_>) -> HandlerOutcome {
/// if let Some(notification) = ctx.sns() {
///     tracing::info!(
///         topic = notification.topic_arn().name(),
///         sns.message_id = notification.message_id(),
///         subject = notification.subject(),
///         "published to a topic"
///     );
/// }
/// # HandlerOutcome::ack()
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnsNotification(Envelope);

impl SnsNotification {
    /// The topic the message was published to (`TopicArn`).
    pub fn topic_arn(&self) -> &TopicArn {
        &self.0.topic_arn
    }

    /// SNS's id of the publish (`MessageId`): the same in every subscription's copy, and not the
    /// SQS message id of [`Context::message_id`](crate::Context::message_id).
    pub fn message_id(&self) -> &str {
        &self.0.message_id
    }

    /// The publish's subject (`Subject`), when it had one.
    pub fn subject(&self) -> Option<&str> {
        self.0.subject.as_deref()
    }

    /// When SNS accepted the publish (`Timestamp`, to the millisecond); `None` when the envelope's
    /// timestamp is not ISO 8601 in UTC, which SNS always writes ([`envelope`](Self::envelope)
    /// has the text).
    pub fn timestamp(&self) -> Option<SystemTime> {
        self.0
            .timestamp_millis()
            .map(|millis| UNIX_EPOCH + Duration::from_millis(millis))
    }

    /// The number SNS gave the publish on a FIFO topic (`SequenceNumber`).
    pub fn sequence_number(&self) -> Option<&str> {
        self.0.sequence_number.as_deref()
    }

    /// The whole envelope as received: its signature fields, to verify it, and the timestamp as
    /// written.
    pub fn envelope(&self) -> &Envelope {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::headers::PARTITION_KEY_HEADER;
    use crate::model::topic::Publish;
    use crate::model::wire::{MessageAttributeValue, ReceivedMessage, SystemAttributes};

    fn received(body: &str) -> ReceivedMessage {
        ReceivedMessage {
            message_id: "sqs-1".to_owned(),
            receipt_handle: String::new(),
            body: body.to_owned(),
            attributes: SystemAttributes::from_iter([("MessageGroupId", "customer-7")]),
            message_attributes: MessageAttributes::from([(
                "sqs-only".to_owned(),
                MessageAttributeValue::string("kept for the dead letter"),
            )]),
        }
    }

    fn envelope() -> Envelope {
        let topic = TopicArn::new("us-east-1", "000000000000", "payments").unwrap();
        let publish = Publish::new(r#"{"id":7}"#)
            .attribute("kind", MessageAttributeValue::string("card"))
            .attribute("digest", MessageAttributeValue::binary(vec![1, 2]));
        Envelope::unsigned(&publish, &topic, "sns-1", 1_000, "sub")
    }

    #[test]
    fn an_envelope_is_read_as_its_message_with_its_attributes_and_the_sqs_message_is_kept() {
        let body = envelope().to_json();
        let delivery = Delivery::new(&Arc::from("q"), received(&body), true);
        assert_eq!(delivery.payload(), Ok(r#"{"id":7}"#));
        assert_eq!(
            delivery.message_attributes(),
            &envelope().message_attributes
        );
        assert_eq!(delivery.header(PARTITION_KEY_HEADER), Some("customer-7"));
        let headers: Vec<_> = delivery.headers().iter().collect();
        assert_eq!(
            headers,
            [
                (&"kind".to_owned(), &"card".to_owned()),
                (&PARTITION_KEY_HEADER.to_owned(), &"customer-7".to_owned()),
            ],
            "the envelope's text attributes and the group; the binary one is no header"
        );
        assert_eq!(delivery.body, body, "the SQS body as received");
        assert!(delivery.attributes.contains_key("sqs-only"));
        assert!(matches!(&delivery.sns, Sns::Notification(n) if n.message_id() == "sns-1"));
    }

    #[test]
    fn other_bodies_are_read_as_they_are_and_a_broken_envelope_does_not_decode() {
        let direct = Delivery::new(&Arc::from("q"), received(r#"{"id":7}"#), true);
        assert_eq!(direct.payload(), Ok(r#"{"id":7}"#));
        assert!(direct.headers().contains_key("sqs-only"));

        let not_reading = Delivery::new(&Arc::from("q"), received(&envelope().to_json()), false);
        assert_eq!(not_reading.payload(), Ok(envelope().to_json().as_str()));
        assert!(matches!(not_reading.sns, Sns::Unwrapped));

        let broken = r#"{"Type":"Notification","TopicArn":"arn:aws:sns:us-east-1:000000000000:payments","MessageId":"m","Timestamp":"1970-01-01T00:00:01.000Z"}"#;
        let delivery = Delivery::new(&Arc::from("q"), received(broken), true);
        let error = delivery.payload().unwrap_err();
        assert!(error.to_string().contains("`Message`"), "{error}");
        assert_eq!(
            delivery.message_attributes(),
            &delivery.attributes,
            "a broken envelope's own attributes are not read"
        );
    }
}
