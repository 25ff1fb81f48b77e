//! A message on its way: [`Outgoing`], made by a [`Publisher`] (`message`, `encoded`, `raw`), its
//! steps (group, deduplication id, delay, headers, `once`), the request it becomes with every rule
//! checked before the network, and its send; [`PublishedMessage`], what a middleware sees of it.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::error::PublishError;
use super::history::{Held, Once};
use super::publisher::{Publisher, DEFAULT_GROUP};
use crate::codec::{Codec, EncodeError, Json};
use crate::model::headers::{IDEMPOTENCY_KEY_HEADER, PARTITION_KEY_HEADER};
use crate::model::rules;
use crate::model::Destination;
use crate::transport::{MessageAttributeValue, MessageAttributes, SendMessage, SentMessage};

impl Publisher {
    /// A message whose body is `value` in JSON.
    pub fn message<T: Serialize + ?Sized>(&self, value: &T) -> Outgoing {
        self.encoded(&Json, value)
    }

    /// A message whose body is `value` encoded by `codec`.
    pub fn encoded<C: Codec, T: Serialize + ?Sized>(&self, codec: &C, value: &T) -> Outgoing {
        let mut outgoing = Outgoing::new(self.clone(), codec.encode(value));
        outgoing.type_name = Some(Cow::Borrowed(std::any::type_name::<T>()));
        outgoing
    }

    /// A message with this body as it is.
    pub fn raw(&self, body: impl Into<String>) -> Outgoing {
        Outgoing::new(self.clone(), Ok(body.into()))
    }

    /// The request `outgoing` becomes as a message of this publisher.
    pub(super) fn request_for(&self, outgoing: Outgoing) -> Result<SendMessage, PublishError> {
        if !outgoing.publisher.declared().is_same_place(self.declared()) {
            return Err(PublishError::OtherQueue {
                queue: self.destination().name().to_owned(),
                message_queue: outgoing.destination().name().to_owned(),
            });
        }
        // The batch is checked against this publisher's destination, so its FIFO defaults (group,
        // generated deduplication id) must come from the same descriptor, not from whichever
        // publisher made the message.
        let outgoing = Outgoing {
            publisher: self.clone(),
            ..outgoing
        };
        Ok(outgoing.into_request()?.1)
    }
}

/// A message on its way to a queue: add steps, then [`send`](Self::send) it, give it with others
/// to [`Publisher::send_batch`], or hand it to [`Context::publish`](crate::Context::publish) to
/// send it as part of handling a message.
#[derive(Debug)]
#[must_use = "a message is sent only by `.send().await`, `publisher.send_batch(..)` or `ctx.publish(..)`"]
pub struct Outgoing {
    pub(super) publisher: Publisher,
    pub(super) body: Result<String, EncodeError>,
    pub(super) group_id: Option<String>,
    pub(super) dedup_id: Option<String>,
    pub(super) delay: Option<Duration>,
    pub(super) headers: MessageAttributes,
    /// The Rust type of a typed message's value, for its type header.
    pub(super) type_name: Option<Cow<'static, str>>,
    /// Its command-history key and duration, when it is sent once.
    pub(super) once: Option<Once>,
}

impl Outgoing {
    pub(super) fn new(publisher: Publisher, body: Result<String, EncodeError>) -> Self {
        Self {
            publisher,
            body,
            group_id: None,
            dedup_id: None,
            delay: None,
            headers: MessageAttributes::new(),
            type_name: None,
            once: None,
        }
    }

    /// Adds the type header, when the message is typed and its publisher sends it (see
    /// [`Publisher::with_type_header`]); one set by hand is kept.
    pub(super) fn add_type_header(&mut self) -> Result<(), PublishError> {
        let Some(type_name) = self.type_name.as_deref() else {
            return Ok(());
        };
        let Some(header) = self.publisher.type_header() else {
            return Ok(());
        };
        if self.headers.contains_key(&*header) {
            return Ok(());
        }
        if self.headers.len() >= rules::MAX_MESSAGE_ATTRIBUTES {
            return Err(PublishError::NoRoomForType {
                queue: self.publisher.destination().name().to_owned(),
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

    /// The message group (FIFO): messages of one group are handled in order, one at a time.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }

    /// The deduplication id (FIFO): a send with an id seen in the last 5 minutes is not stored again.
    pub fn dedup_id(mut self, dedup_id: impl Into<String>) -> Self {
        self.dedup_id = Some(dedup_id.into());
        self
    }

    /// Sends the message only if `key` was not sent to its queue within the last `duration`, by
    /// this process or any replica sharing the publisher's [command history]: a send
    /// whose key is there is skipped, and answers the original's message id with
    /// [`duplicate`](SentMessage::duplicate) set. The key is recorded only once the send
    /// succeeded; a failed send leaves it free. Works on any queue or topic, FIFO or not; the
    /// publisher needs [`with_history`](Publisher::with_history) (else the send fails with
    /// [`PublishError::NoHistory`]), and a handler's output
    /// ([`Context::publish`](crate::Context::publish)) cannot take it
    /// ([`PublishError::OnceInOutput`]: give the subscription an inbox instead).
    ///
    /// `key` is the command's identity: a hash of the payload, or a business id
    /// (`format!("scrape-{player}")`).
    ///
    /// [command history]: crate::publish::history
    pub fn once(mut self, key: impl Into<String>, duration: Duration) -> Self {
        self.once = Some(Once {
            key: key.into(),
            duration,
        });
        self
    }

    /// Delays delivery (standard queues; up to 15 minutes, rounded up to whole seconds).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Adds a header (a `String` message attribute). For numbers and bytes see
    /// [`header_number`](Self::header_number) and [`header_binary`](Self::header_binary).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers
            .insert(name.into(), MessageAttributeValue::string(value));
        self
    }

    /// Adds a `Number` message attribute: an integer or a float (`3`, `-0.75`), or text holding
    /// one (`"12.50"`), written as its decimal text. SQS takes at most 38 digits; a value it
    /// would refuse (`"12abc"`, `f64::NAN`, `f64::MAX`) fails the send before the network with
    /// [`ErrorKind::InvalidParameterValue`](crate::transport::ErrorKind::InvalidParameterValue).
    /// A handler reads it as text through [`Context::header`](crate::Context::header).
    ///
    /// ```
    /// # let orders = rust_stream::Publisher::new("orders");
    /// let order = orders.raw("{}").header_number("amount", 12.5).header_number("lines", 3);
    /// # drop(order);
    /// ```
    pub fn header_number(mut self, name: impl Into<String>, value: impl fmt::Display) -> Self {
        self.headers.insert(
            name.into(),
            MessageAttributeValue::number(value.to_string()),
        );
        self
    }

    /// Adds a `Binary` message attribute. SQS needs at least one byte, so an empty value fails
    /// the send before the network. Headers are text, so a handler finds this one in
    /// [`Context::attributes`], not [`Context::header`].
    ///
    /// [`Context::attributes`]: crate::Context::attributes
    /// [`Context::header`]: crate::Context::header
    pub fn header_binary(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers
            .insert(name.into(), MessageAttributeValue::binary(value));
        self
    }

    /// The queue or topic this message goes to.
    pub fn destination(&self) -> &Destination {
        self.publisher.destination()
    }

    /// The name its queue or topic was declared with, before the broker's naming: what a
    /// recorded message is sent to again.
    pub(crate) fn declared_name(&self) -> &str {
        self.publisher.declared().name()
    }

    /// The group it names: its `group_id` step; failing that, on a FIFO queue, its
    /// [`PARTITION_KEY_HEADER`] header.
    pub(super) fn named_group(&self) -> Option<&str> {
        if !self.publisher.destination().is_fifo() {
            return self.group_id.as_deref();
        }
        let header = || {
            self.headers
                .get(PARTITION_KEY_HEADER)?
                .string_value
                .as_deref()
        };
        self.group_id.as_deref().or_else(header)
    }

    /// The group it is sent with: the one it names; failing that, on a FIFO queue (which needs
    /// one), `"default"`.
    pub(super) fn group(&self) -> Option<&str> {
        match self.named_group() {
            None if self.publisher.destination().is_fifo() => Some(DEFAULT_GROUP),
            named => named,
        }
    }

    /// Takes `group` (the group of the FIFO message being handled) when this is for a FIFO queue
    /// and names no group of its own: a handler's outputs follow their input's group.
    pub(crate) fn inherit_group(mut self, group: &str) -> Self {
        if self.publisher.destination().is_fifo() && self.named_group().is_none() {
            self.group_id = Some(group.to_owned());
        }
        self
    }

    /// Gives a handler's output the ids that make a resend of it one message: `derive` is given
    /// a digest of what the message carries (its group and body), so that an id never stands for
    /// other content. The deduplication id, when the message has none and its FIFO queue needs
    /// one, lets SQS store a resend within five minutes once; the [`IDEMPOTENCY_KEY_HEADER`]
    /// header, when it has none and room is left for it (SQS takes 10 attributes, the type
    /// header among them), lets an [inbox](crate::inbox) downstream handle a resend once
    /// whenever it comes.
    pub(crate) fn derive_ids(mut self, derive: impl FnOnce(&str) -> String) -> Self {
        use sha2::Digest;
        let mut digest = sha2::Sha256::new();
        digest.update(self.group().unwrap_or_default().as_bytes());
        digest.update([0]);
        digest.update(self.body.as_deref().unwrap_or_default().as_bytes());
        let digest = digest.finalize();
        let short: String = digest[..8]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let id = derive(&short);
        let destination = self.publisher.destination();
        if self.dedup_id.is_none()
            && destination.is_fifo()
            && !destination.deduplicates_by_content()
        {
            self.dedup_id = Some(id.clone());
        }
        let type_header = usize::from(self.needs_type_header());
        if !self.headers.contains_key(IDEMPOTENCY_KEY_HEADER)
            && self.headers.len() + type_header < rules::MAX_MESSAGE_ATTRIBUTES
        {
            self.headers.insert(
                IDEMPOTENCY_KEY_HEADER.to_owned(),
                MessageAttributeValue::string(id),
            );
        }
        self
    }

    /// Whether [`add_type_header`](Self::add_type_header) will add a header.
    pub(super) fn needs_type_header(&self) -> bool {
        self.type_name.is_some()
            && self
                .publisher
                .type_header()
                .is_some_and(|header| !self.headers.contains_key(&*header))
    }

    /// The message this becomes, checked against every rule of its destination as declared: SQS's
    /// for a queue, SNS's for a topic ([`Destination::check_message`]; what the queue or topic
    /// itself says, its `MaximumMessageSize` and attributes, is checked again once it is
    /// resolved). What a send and a handler's output send, with the publisher that sends it.
    pub(crate) fn into_request(mut self) -> Result<(Publisher, SendMessage), PublishError> {
        if let Some(problem) = self.publisher.naming_problem() {
            return Err(PublishError::Config(problem.clone()));
        }
        if self.once.is_some() {
            // `send` and `send_batch` take the step off first: what is left is a handler's
            // output, which the engine sends without the history.
            return Err(PublishError::OnceInOutput {
                queue: self.publisher.destination().name().to_owned(),
            });
        }
        self.add_type_header()?;
        let destination = self.publisher.destination();
        if destination.is_fifo()
            && self.named_group().is_none()
            && self.publisher.refuses_default_group()
        {
            return Err(PublishError::NoGroup {
                queue: destination.name().to_owned(),
            });
        }
        let group = self.group().map(str::to_owned);
        let body = self.body.map_err(PublishError::Encode)?;
        let mut message = SendMessage::new(body);
        message.message_attributes = self.headers;
        if let Some(delay) = self.delay {
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
        destination
            .check_message(&message)
            .map_err(PublishError::rejected(destination.name()))?;
        Ok((self.publisher, message))
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
        let history = self
            .publisher
            .history()
            .cloned()
            .ok_or_else(|| PublishError::NoHistory {
                queue: self.publisher.destination().name().to_owned(),
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
    core.send_to(destination, std::iter::once(message))
        .await
        .pop()
        .expect("one answer per message")
        .map_err(PublishError::rejected(destination.name()))
}

/// A message a handler gave to [`Context::publish`](crate::Context::publish), as a test reads it
/// from [`Context::published`](crate::Context::published): where it goes and what it carries,
/// before anything is sent.
#[derive(Debug, Clone, Copy)]
pub struct PublishedMessage<'a> {
    pub(super) outgoing: &'a Outgoing,
}

impl<'a> PublishedMessage<'a> {
    pub(crate) fn new(outgoing: &'a Outgoing) -> Self {
        Self { outgoing }
    }

    /// The queue or topic it goes to.
    pub fn destination(&self) -> &'a Destination {
        self.outgoing.destination()
    }

    /// The body, or why the value could not be encoded (the engine then retries the handled
    /// message instead of acknowledging it).
    ///
    /// # Errors
    ///
    /// The [`EncodeError`] of the value given to [`Output::message`] or [`Publisher::encoded`].
    ///
    /// [`Output::message`]: crate::Output::message
    pub fn body(&self) -> Result<&'a str, &'a EncodeError> {
        self.outgoing.body.as_deref()
    }

    /// The group it is sent with: its `group_id` step; failing that, on a FIFO queue (which
    /// needs one), its [`PARTITION_KEY_HEADER`] header, else the handled message's group when
    /// that came from a FIFO queue, else `"default"`.
    pub fn group_id(&self) -> Option<&'a str> {
        self.outgoing.group()
    }

    /// The deduplication id: its `dedup_id` step, else on a FIFO queue the one
    /// [`Context::publish`](crate::Context::publish) made of the handled message's id and this
    /// message's position.
    pub fn dedup_id(&self) -> Option<&'a str> {
        self.outgoing.dedup_id.as_deref()
    }

    /// Its `delay` step.
    pub fn delay(&self) -> Option<Duration> {
        self.outgoing.delay
    }

    /// A header given with its `header` step.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.outgoing.headers.get(name)?.string_value.as_deref()
    }
}
