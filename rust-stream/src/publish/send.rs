//! A message's send: an [`Outgoing`] made by a [`Publisher`] (`message`, `encoded`, `raw`), the
//! request it becomes with every rule checked before the network, and its send, once or
//! through the command history. The message itself, with its steps, is
//! [`outgoing`](crate::handler::outgoing): beneath the client, where a handler stages it.

use std::borrow::Cow;

use serde::Serialize;

use super::error::PublishError;
use super::history::Held;
use super::publisher::Publisher;
use crate::codec::{Codec, Json};
use crate::handler::outgoing::Outgoing;
use crate::model::flow::RateLimit;
use crate::model::rules;
use crate::transport::{MessageAttributeValue, SendMessage, SentMessage};

impl Publisher {
    /// A message whose body is `value` in JSON.
    pub fn message<T: Serialize + ?Sized>(&self, value: &T) -> Outgoing {
        self.encoded(&Json, value)
    }

    /// A message whose body is `value` encoded by `codec`.
    pub fn encoded<C: Codec, T: Serialize + ?Sized>(&self, codec: &C, value: &T) -> Outgoing {
        let mut outgoing = Outgoing::new(self.sink(), codec.encode(value));
        outgoing.type_name = Some(Cow::Borrowed(std::any::type_name::<T>()));
        outgoing
    }

    /// A message with this body as it is.
    pub fn raw(&self, body: impl Into<String>) -> Outgoing {
        Outgoing::new(self.sink(), Ok(body.into()))
    }

    /// The request `outgoing` becomes as a message of this publisher.
    pub(super) fn request_for(&self, outgoing: Outgoing) -> Result<SendMessage, PublishError> {
        if !outgoing.sink.declared().is_same_place(self.declared()) {
            return Err(PublishError::OtherQueue {
                queue: self.destination().name().to_owned(),
                message_queue: outgoing.destination().name().to_owned(),
            });
        }
        // The batch is checked against this publisher's destination, so its FIFO defaults (group,
        // generated deduplication id) must come from the same descriptor, not from whichever
        // publisher made the message.
        let outgoing = Outgoing {
            sink: self.sink(),
            ..outgoing
        };
        Ok(outgoing.into_request()?.1)
    }
}

impl Outgoing {
    /// Adds the type header, when the message is typed and its publisher sends it (see
    /// [`Publisher::with_type_header`]); one set by hand is kept.
    pub(super) fn add_type_header(&mut self) -> Result<(), PublishError> {
        let Some(type_name) = self.type_name.as_deref() else {
            return Ok(());
        };
        let Some(header) = self.sink.type_header() else {
            return Ok(());
        };
        if self.headers.contains_key(&*header) {
            return Ok(());
        }
        if self.headers.len() >= rules::MAX_MESSAGE_ATTRIBUTES {
            return Err(PublishError::NoRoomForType {
                queue: self.sink.destination().name().to_owned(),
                header: header.to_string(),
                attributes: self.headers.len(),
            });
        }
        self.headers.insert(
            header.to_string(),
            MessageAttributeValue::string(crate::describe::short_name(type_name)),
        );
        Ok(())
    }

    /// The message this becomes, checked against every rule of its destination as declared: SQS's
    /// for a queue, SNS's for a topic ([`Destination::check_message`]; what the queue or topic
    /// itself says, its `MaximumMessageSize` and attributes, is checked again once it is
    /// resolved). What a send and a handler's output send, with the publisher that sends it.
    pub(crate) fn into_request(mut self) -> Result<(Publisher, SendMessage), PublishError> {
        if let Some(problem) = self.sink.naming_problem() {
            return Err(PublishError::Config(problem.clone()));
        }
        if self.once.is_some() {
            // `send` and `send_batch` take the step off first: what is left is a handler's
            // output, which the engine sends without the history.
            return Err(PublishError::OnceInOutput {
                queue: self.sink.destination().name().to_owned(),
            });
        }
        self.add_type_header()?;
        let destination = self.sink.destination();
        if destination.is_fifo()
            && self.named_group().is_none()
            && self.sink.refuses_default_group()
        {
            return Err(PublishError::NoGroup {
                queue: destination.name().to_owned(),
            });
        }
        let group = self.group().map(str::to_owned);
        let delay = match self.due_in() {
            Some(Err(past)) => {
                return Err(PublishError::rejected(destination.name())(
                    rules::due_in_the_past(past),
                ))
            }
            due => due.map(Result::unwrap_or_default),
        };
        let body = self.body.map_err(PublishError::Encode)?;
        let mut message = SendMessage::new(body);
        message.message_attributes = self.headers;
        if let Some(delay) = delay {
            // Saturating: `Duration::MAX` must be refused by the delay rule, not overflow here.
            let seconds = delay
                .as_secs()
                .saturating_add(u64::from(delay.subsec_nanos() > 0));
            message.delay_seconds = Some(i32::try_from(seconds).unwrap_or(i32::MAX));
        }
        message.group_id = group;
        message.dedup_id = match self.dedup_id {
            None if destination.is_fifo() && !destination.deduplicates_by_content() => {
                Some(uuid::Uuid::new_v4().to_string())
            }
            dedup => dedup,
        };
        // A body that goes to S3 is checked as the pointer it is sent as.
        let as_sent = match self.sink.large_payloads() {
            Some(large) => large
                .as_sent(&message)
                .map_err(PublishError::rejected(destination.name()))?,
            None => None,
        };
        destination
            .check_message(as_sent.as_ref().unwrap_or(&message))
            .map_err(PublishError::rejected(destination.name()))?;
        let publisher = Publisher::from_sink(self.sink);
        if let Some(problem) = publisher.rate_limit_of().and_then(RateLimit::problem) {
            return Err(PublishError::Config(problem));
        }
        Ok((publisher, message))
    }

    /// Sends the message now (batched with other sends to its queue).
    ///
    /// # Errors
    ///
    /// [`PublishError`] when the message breaks an SQS rule (found before the network), cannot be
    /// encoded, its publisher is not bound to a broker, or SQS refuses it; with a
    /// [`once`](Self::once) step, also when its publisher keeps no history
    /// ([`PublishError::NoHistory`]), the history's store fails ([`PublishError::History`]), or
    /// another send holds its key for longer than the history's wait ([`PublishError::InFlight`]):
    /// nothing was sent then. A send skipped because its key was sent is not an error: it answers
    /// the original's [`SentMessage`] with `duplicate` set.
    pub async fn send(mut self) -> Result<SentMessage, PublishError> {
        let Some(once) = self.once.take() else {
            let (publisher, message) = self.into_request()?;
            return send_request(publisher, message).await;
        };
        let history = Publisher::from_sink(std::sync::Arc::clone(&self.sink))
            .history()
            .cloned()
            .ok_or_else(|| PublishError::NoHistory {
                queue: self.sink.destination().name().to_owned(),
            })?;
        // Checked before the key is reserved: a message SQS would refuse holds no key.
        let (publisher, message) = self.into_request()?;
        if publisher.core().is_none() {
            return Err(PublishError::Unbound {
                queue: publisher.destination().name().to_owned(),
            });
        }
        let key = publisher.history_key(&once.key);
        match publisher.reserve(&history, &key).await? {
            Held::Sent(sent) => Ok(sent),
            Held::Reserved(ticket) => {
                let answer = send_request(publisher, message).await;
                history
                    .settle(&key, &ticket, answer.as_ref().ok(), once.duration)
                    .await;
                answer
            }
        }
    }
}

/// Sends one checked message through its publisher's broker.
pub(super) async fn send_request(
    publisher: Publisher,
    message: SendMessage,
) -> Result<SentMessage, PublishError> {
    let destination = publisher.destination();
    let core = publisher.core().ok_or_else(|| PublishError::Unbound {
        queue: destination.name().to_owned(),
    })?;
    if let Some(limit) = publisher.rate_limit_of() {
        limit.wait_for(1).await;
    }
    core.send_to(destination, std::iter::once(message))
        .await
        .pop()
        .expect("one answer per message")
        .map_err(PublishError::rejected(destination.name()))
}
