//! A message on its way, as a handler knows it: [`Outgoing`], with its steps (group,
//! deduplication id, delay, headers, `once`) and the [`Sink`] it goes to, and
//! [`PublishedMessage`], what a middleware or a test sees of it before anything is sent.
//!
//! A handler stages messages ([`Context::publish`](crate::Context::publish)) knowing where each
//! goes and nothing of how: the sink is the publisher that made it
//! ([`publish`](crate::publish)), which turns it into a request, checks it and sends it once the
//! handler returns. So the handler's vocabulary stands beneath the client and the transport.

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::codec::EncodeError;
use crate::model::headers::{IDEMPOTENCY_KEY_HEADER, PARTITION_KEY_HEADER};
use crate::model::large_payload::LargePayloads;
use crate::model::rules;
use crate::model::wire::{MessageAttributeValue, MessageAttributes};
use crate::model::{ConfigError, Destination};

/// The group of a FIFO message that names none, unless strict groups refuse it.
pub(crate) const DEFAULT_GROUP: &str = "default";

/// Where an [`Outgoing`] goes, as far as the message itself needs to know: its destination and
/// the rules its publisher adds. Only a [`Publisher`](crate::Publisher) is one; the send path
/// gets it back as one (`Publisher::from_sink`).
pub(crate) trait Sink: Any + Send + Sync + fmt::Debug {
    /// The queue or topic the message goes to: as the broker names it once the publisher is
    /// bound to one, else as declared.
    fn destination(&self) -> &Destination;

    /// The queue or topic as declared, before the broker's naming.
    fn declared(&self) -> &Destination;

    /// The name of the type header a typed message carries, when it carries one.
    fn type_header(&self) -> Option<Arc<str>>;

    /// Why the broker cannot name the destination, if it cannot.
    fn naming_problem(&self) -> Option<&ConfigError>;

    /// Whether a FIFO message naming no group is refused rather than sent to
    /// [`DEFAULT_GROUP`].
    fn refuses_default_group(&self) -> bool;

    /// Where and over what size bodies go to S3, when the broker sends them there: a message is
    /// checked as it will be sent.
    fn large_payloads(&self) -> Option<&LargePayloads>;
}

/// The `once` step of a message: its key and how long it is kept once sent.
#[derive(Debug, Clone)]
pub(crate) struct Once {
    pub(crate) key: String,
    pub(crate) duration: Duration,
}

/// A message on its way to a queue: add steps, then [`send`](Self::send) it, give it with others
/// to [`Publisher::send_batch`](crate::Publisher::send_batch), or hand it to [`Context::publish`](crate::Context::publish) to
/// send it as part of handling a message.
#[derive(Debug)]
#[must_use = "a message is sent only by `.send().await`, `publisher.send_batch(..)` or `ctx.publish(..)`"]
pub struct Outgoing {
    /// Where it goes: the publisher that made it.
    pub(crate) sink: Arc<dyn Sink>,
    pub(crate) body: Result<String, EncodeError>,
    pub(crate) group_id: Option<String>,
    pub(crate) dedup_id: Option<String>,
    pub(crate) delay: Option<Duration>,
    /// When it is due, by its `deliver_at` step (instead of a `delay`).
    pub(crate) deliver_at: Option<SystemTime>,
    pub(crate) headers: MessageAttributes,
    /// The Rust type of a typed message's value, for its type header.
    pub(crate) type_name: Option<Cow<'static, str>>,
    /// Its command-history key and duration, when it is sent once.
    pub(crate) once: Option<Once>,
}

impl Outgoing {
    /// A message with `body` for `sink`, no steps yet.
    pub(crate) fn new(sink: Arc<dyn Sink>, body: Result<String, EncodeError>) -> Self {
        Self {
            sink,
            body,
            group_id: None,
            dedup_id: None,
            delay: None,
            deliver_at: None,
            headers: MessageAttributes::new(),
            type_name: None,
            once: None,
        }
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
    /// [`duplicate`](crate::transport::SentMessage::duplicate) set. The key is recorded only once the send
    /// succeeded; a failed send leaves it free. Works on any queue or topic, FIFO or not; the
    /// publisher needs [`with_history`](crate::Publisher::with_history) (else the send fails with
    /// [`PublishError::NoHistory`](crate::PublishError::NoHistory)), and a handler's output
    /// ([`Context::publish`](crate::Context::publish)) cannot take it
    /// ([`PublishError::OnceInOutput`](crate::PublishError::OnceInOutput): give the subscription an inbox instead).
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

    /// Delays delivery by `delay`, rounded up to whole seconds.
    ///
    /// SQS keeps a message's own delay on a standard queue, up to 15 minutes. Longer, or on a
    /// FIFO queue or a topic (which take no per-message delay), the message must go through an
    /// [outbox](crate::outbox), which schedules it for any time up to a year: write it there
    /// ([`OutboxMessage::delay`](crate::outbox::OutboxMessage::delay)), or, for a handler's
    /// output ([`Context::publish`](crate::Context::publish)), give the subscription an
    /// [inbox](crate::inbox) whose store keeps an outbox, which then writes the output as an
    /// outbox row in the inbox's transaction. Anywhere else such a delay is refused before any
    /// call (`InvalidParameterValue`, pointing to the outbox). See `docs/scheduling.md`.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self.deliver_at = None;
        self
    }

    /// Delivers the message at `time`: a [`delay`](Self::delay) of the time from now (by this
    /// process's clock, read when the message is sent or written) until then, with the same
    /// rules. A time up to a minute in the past is "now"; further back it is refused.
    pub fn deliver_at(mut self, time: SystemTime) -> Self {
        self.deliver_at = Some(time);
        self.delay = None;
        self
    }

    /// How long until the message is due by its `delay` or `deliver_at` step, read now: `None`
    /// for neither, `Err(how far back)` for a time further in the past than
    /// [`rules::PAST_DUE_TOLERANCE`].
    pub(crate) fn due_in(&self) -> Option<Result<Duration, Duration>> {
        match (self.delay, self.deliver_at) {
            (Some(delay), _) => Some(Ok(delay)),
            (None, Some(at)) => Some(rules::due_in(at, SystemTime::now())),
            (None, None) => None,
        }
    }

    /// Whether its schedule is one SQS does not keep itself (see [`rules::sqs_keeps_delay`]),
    /// so that only an outbox can send it when due.
    pub(crate) fn needs_outbox(&self) -> bool {
        let standard_queue =
            self.sink.destination().queue().is_some() && !self.sink.destination().is_fifo();
        matches!(self.due_in(), Some(Ok(delay)) if !rules::sqs_keeps_delay(delay, standard_queue))
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
        self.sink.destination()
    }

    /// The name its queue or topic was declared with, before the broker's naming: what a
    /// recorded message is sent to again.
    pub(crate) fn declared_name(&self) -> &str {
        self.sink.declared().name()
    }

    /// The group it names: its `group_id` step; failing that, on a FIFO queue, its
    /// [`PARTITION_KEY_HEADER`] header.
    pub(crate) fn named_group(&self) -> Option<&str> {
        if !self.sink.destination().is_fifo() {
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
    pub(crate) fn group(&self) -> Option<&str> {
        match self.named_group() {
            None if self.sink.destination().is_fifo() => Some(DEFAULT_GROUP),
            named => named,
        }
    }

    /// Takes `group` (the group of the FIFO message being handled) when this is for a FIFO queue
    /// and names no group of its own: a handler's outputs follow their input's group.
    pub(crate) fn inherit_group(mut self, group: &str) -> Self {
        if self.sink.destination().is_fifo() && self.named_group().is_none() {
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
        let destination = self.sink.destination();
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

    /// Whether the type header will add a header.
    pub(crate) fn needs_type_header(&self) -> bool {
        self.type_name.is_some()
            && self
                .sink
                .type_header()
                .is_some_and(|header| !self.headers.contains_key(&*header))
    }
}

/// A message a handler gave to [`Context::publish`](crate::Context::publish), as a test reads it
/// from [`Context::published`](crate::Context::published): where it goes and what it carries,
/// before anything is sent.
#[derive(Debug, Clone, Copy)]
pub struct PublishedMessage<'a> {
    outgoing: &'a Outgoing,
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
    /// The [`EncodeError`] of the value given to [`Output::message`] or [`Publisher::encoded`](crate::Publisher::encoded).
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

    /// Its `deliver_at` step.
    pub fn deliver_at(&self) -> Option<SystemTime> {
        self.outgoing.deliver_at
    }

    /// A header given with its `header` step.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.outgoing.headers.get(name)?.string_value.as_deref()
    }
}
