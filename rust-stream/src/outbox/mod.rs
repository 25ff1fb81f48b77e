//! Transactional publishing: an outbox that writes a message in the caller's own database
//! transaction, and a relay that sends what committed.
//!
//! A service that commits a ledger row must announce it ("payment posted") if and only if the
//! commit happened. Sending from inside the transaction announces rows that then roll back;
//! sending after the commit loses the announcement when the process dies in between. The outbox
//! writes the message as a row of the same database, in the same transaction
//! ([`OutboxMessage::send`]), so the row exists exactly when the commit does; the app's
//! [`Relay`] then sends the committed rows and deletes them.
//!
//! ```
//! # #![cfg_attr(not(feature = "testing"), allow(unused))]
//! use rust_stream::outbox::Outbox;
//! use rust_stream::prelude::*;
//! use rust_stream::store::memory::MemoryStore;
//! # #[cfg(feature = "testing")]
//! use rust_stream::testing::TestApp;
//!
//! #[derive(serde::Serialize)]
//! struct PaymentPosted { account: String, cents: i64 }
//!
//! # #[cfg(not(feature = "testing"))]
//! # fn main() {} // `TestApp` is the `testing` feature's
//! # #[cfg(feature = "testing")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let broker = SqsBroker::in_process();
//! let store = MemoryStore::new();
//! let posted = Outbox::new(
//!     store.clone(),
//!     broker.publisher(SqsQueue::new("payments-posted.fifo").create_if_missing()),
//! );
//! let app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(broker.clone(), |b| {
//!     b.worker(broker.relay(store.clone()));
//! });
//! let running = TestApp::spawn(app).await.unwrap();
//!
//! // Anywhere in the service (an HTTP endpoint, a handler): the ledger row and the event commit
//! // together. With PostgreSQL this is a `sqlx::Transaction` and `&mut *transaction`.
//! let mut transaction = store.begin();
//! let event = PaymentPosted { account: "acct-7".into(), cents: 1250 };
//! posted.message(&event).group_id("acct-7").send(&mut transaction).await.unwrap();
//! store.commit(transaction);
//!
//! while !store.outbox_rows().is_empty() {
//!     tokio::time::sleep(std::time::Duration::from_millis(10)).await;
//! }
//! running.stop().await.unwrap();
//! # }
//! ```
//!
//! # What the relay guarantees
//!
//! - **Nothing committed is lost, nothing rolled back is sent.** A row is deleted only once SQS
//!   (or SNS) has stored its message; a rolled-back transaction never made a row.
//! - **A group's rows go in commit order.** The store gives the rows of one group of one
//!   destination ids in the order their transactions committed (see
//!   [`OutboxStore::write`]); the relay reads rows by id and sends each group's in that order,
//!   through the publisher's in-order batchers. A row whose send fails holds its group: until
//!   it is sent, later rows of the group wait (other groups go on). That holds within a round
//!   too, whose rows of a group are one submission of calls of 10: once a row fails for good (an
//!   outage that outlasts its 20 s of retries, a refusal), the round's later rows of its group
//!   fail unsent, so no outage, however long, stores them ahead of it.
//! - **One relay at a time** per outbox: each round takes the store's lease (on PostgreSQL an
//!   advisory lock, so replicas of a service take turns, as the PostgreSQL store's docs say);
//!   the others stand by and are ready.
//! - **A resend is one message.** Each row's message carries a key made when it was written:
//!   its deduplication id on a FIFO destination (a relay that died after sending and before
//!   deleting, and whose rows are sent again within five minutes, is collapsed by SQS) and its
//!   [`IDEMPOTENCY_KEY_HEADER`] everywhere, which a consumer's [inbox](crate::inbox) takes as the
//!   message's key, so on a standard queue a resent copy is acked without running its handler.
//!
//! What it does not guarantee: a resend more than five minutes after the first send is stored
//! again on a FIFO queue (the inbox downstream still drops it); and should SQS store a group's
//! later message of one `SendMessageBatch` call and refuse an earlier one for good (a message
//! past a queue's own size limit), that later message has already gone ahead of it.
//!
//! # Scheduled messages
//!
//! A message may be due later, at any time: [`OutboxMessage::delay`] or
//! [`OutboxMessage::deliver_at`], with a [`schedule_key`](OutboxMessage::schedule_key) a later
//! transaction [cancels](Outbox::cancel) it by. The relay reads a row once it is due (on a
//! standard queue up to 900 s before, sent with `DelaySeconds` for the rest), and each group's
//! rows in due order, ties in commit order: a row written without a due time is due at its
//! commit. `docs/scheduling.md` states the guarantees and the cost.
//!
//! # Metrics and health
//!
//! Each round sets the gauges [`BACKLOG`](crate::metrics::OUTBOX_BACKLOG) (rows waiting) and
//! [`OLDEST_AGE`](crate::metrics::OUTBOX_OLDEST_AGE) (seconds the oldest has waited), and counts
//! [`RELAYED`](crate::metrics::OUTBOX_RELAYED) and [`FAILED`](crate::metrics::OUTBOX_FAILED)
//! sends. The relay is a [worker](crate::worker): the app is ready only while the relay reaches
//! its store and its oldest row is younger than [`Relay::unready_after`] (a minute by default).

use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::model::headers::IDEMPOTENCY_KEY_HEADER;
use crate::publish::{recorded, Outgoing, PublishError, PublishedMessage, Publisher};
use crate::store::{Cancellation, NewOutboxRow, OutboxStore, StoreError};

mod relay;

pub use relay::{
    Relay, DEFAULT_BATCH_SIZE, DEFAULT_LEASE_TIMEOUT, DEFAULT_POLL_INTERVAL, DEFAULT_UNREADY_AFTER,
};

pub use crate::model::rules::{MAX_SCHEDULE, PAST_DUE_TOLERANCE};

/// How long before its due time a message for a standard queue may be sent, riding SQS's
/// per-message `DelaySeconds` for the rest: its 900 s.
const SEND_EARLY: Duration = Duration::from_secs(crate::model::rules::MAX_DELAY_SECONDS as u64);

/// Messages to one queue or topic, written in the caller's transaction: see the
/// [module docs](self). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Outbox<S> {
    store: S,
    publisher: Publisher,
}

impl<S: OutboxStore> Outbox<S> {
    /// An outbox in `store` for the messages of `publisher`'s queue or topic. A publisher made by
    /// the broker ([`SqsBroker::publisher`](crate::SqsBroker::publisher), or
    /// [`topic`](crate::SqsBroker::topic)) also declares its destination to the broker, so the
    /// relay creates it when it is declared `create_if_missing`; an unbound one
    /// ([`Publisher::new`]) serves code that writes rows without a broker at hand.
    pub fn new(store: S, publisher: Publisher) -> Self {
        // The broker's AsyncAPI document notes that the destination's messages may be scheduled.
        if let Some(core) = publisher.core() {
            core.declarations().outbox(publisher.destination());
        }
        Self { store, publisher }
    }

    /// A message whose body is `value` in JSON.
    pub fn message<T: Serialize + ?Sized>(&self, value: &T) -> OutboxMessage<'_, S> {
        OutboxMessage {
            outbox: self,
            outgoing: self.publisher.message(value),
            schedule_key: None,
        }
    }

    /// A message with this body as it is.
    pub fn raw(&self, body: impl Into<String>) -> OutboxMessage<'_, S> {
        OutboxMessage {
            outbox: self,
            outgoing: self.publisher.raw(body),
            schedule_key: None,
        }
    }

    /// The store the rows are written in.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Cancels the message this outbox scheduled under `key`
    /// ([`schedule_key`](OutboxMessage::schedule_key)), through `connection`, in its
    /// transaction: once the transaction commits the message is never sent (rolled back, it
    /// stays scheduled). The answer says what the cancel found: a message sent already, or
    /// being sent by the relay's round under way, is [`Cancellation::AlreadySent`].
    ///
    /// To reschedule, cancel and write the message again under the same key, in one
    /// transaction.
    ///
    /// # Errors
    ///
    /// [`OutboxError::Store`] when the store could not be reached.
    pub async fn cancel(
        &self,
        connection: &mut S::Connection,
        key: &str,
    ) -> Result<Cancellation, OutboxError> {
        let destination = self.publisher.declared().name().to_owned();
        let answer = self.store.cancel(connection, &destination, key).await?;
        if answer == Cancellation::Cancelled {
            crate::metrics::outbox_cancelled(&destination);
        }
        Ok(answer)
    }
}

/// A message on its way into an outbox: the [`Outgoing`] steps, then
/// [`send`](Self::send) in a transaction.
#[derive(Debug)]
#[must_use = "a message is written only by `.send(&mut transaction).await`"]
pub struct OutboxMessage<'a, S> {
    outbox: &'a Outbox<S>,
    outgoing: Outgoing,
    schedule_key: Option<String>,
}

impl<S: OutboxStore> OutboxMessage<'_, S> {
    /// The message group (FIFO), as [`Outgoing::group_id`]: a group's messages are sent in the
    /// order their transactions commit.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.outgoing = self.outgoing.group_id(group_id);
        self
    }

    /// The deduplication id (FIFO), as [`Outgoing::dedup_id`]; by default the key the outbox
    /// makes for the row.
    pub fn dedup_id(mut self, dedup_id: impl Into<String>) -> Self {
        self.outgoing = self.outgoing.dedup_id(dedup_id);
        self
    }

    /// Schedules the message `delay` after it is written, any delay up to [`MAX_SCHEDULE`],
    /// on any queue or topic (FIFO too): the relay sends it when it is due, never before it is
    /// visible. On a standard queue it goes up to 900 s early with SQS's `DelaySeconds` for the
    /// rest, so it is visible within the second after it is due; elsewhere it is sent once due.
    /// A group's messages go in due order, see `docs/scheduling.md`.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.outgoing = self.outgoing.delay(delay);
        self
    }

    /// Schedules the message for `time`, as [`delay`](Self::delay) does for the time from the
    /// write until then (by this process's clock). A time at most [`PAST_DUE_TOLERANCE`] ago
    /// is sent at once; further back, the write is refused.
    pub fn deliver_at(mut self, time: SystemTime) -> Self {
        self.outgoing = self.outgoing.deliver_at(time);
        self
    }

    /// A key to cancel the message by ([`Outbox::cancel`]), unique among this destination's
    /// messages waiting to be sent: a second message under a key whose first still waits is
    /// refused ([`OutboxError::ScheduleKeyInUse`]).
    pub fn schedule_key(mut self, key: impl Into<String>) -> Self {
        self.schedule_key = Some(key.into());
        self
    }

    /// A `String` header, as [`Outgoing::header`].
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.outgoing = self.outgoing.header(name, value);
        self
    }

    /// A `Number` header, as [`Outgoing::header_number`].
    pub fn header_number(mut self, name: impl Into<String>, value: impl std::fmt::Display) -> Self {
        self.outgoing = self.outgoing.header_number(name, value);
        self
    }

    /// Writes the message through `connection`, in its transaction: the relay sends it once the
    /// transaction commits, never if it rolls back. Give it the transaction the service's own
    /// rows are written in (`&mut *transaction` for a `sqlx::Transaction`, or for the inbox's
    /// from [`Context::transaction`](crate::Context::transaction)).
    ///
    /// # Errors
    ///
    /// [`OutboxError::Publish`] when the message breaks a rule of its destination (checked here,
    /// before anything is written, as a send checks it: its body encodes, its size, its headers,
    /// its group); [`OutboxError::DueInThePast`] or [`OutboxError::DueTooFar`] for a schedule
    /// out of range; [`OutboxError::ScheduleKeyInUse`] for a key another waiting message holds;
    /// [`OutboxError::Store`] when the row could not be written (the transaction is then best
    /// rolled back).
    pub async fn send(self, connection: &mut S::Connection) -> Result<(), OutboxError> {
        let prepared = PreparedRow::new(self.outgoing)?;
        self.outbox
            .store
            .write(connection, prepared.row(self.schedule_key.as_deref()))
            .await
            .map_err(OutboxError::from_write)?;
        prepared.written();
        Ok(())
    }
}

/// A message made into an outbox row, not yet written: checked against every rule of its
/// destination, with its key and its due time. What [`OutboxMessage::send`] writes, and an
/// [inbox](crate::inbox) writes for a handler's output SQS cannot delay itself.
#[derive(Debug)]
pub(crate) struct PreparedRow {
    destination: String,
    group_id: Option<String>,
    message: String,
    due_in: Duration,
    send_early: Duration,
}

impl PreparedRow {
    /// `outgoing` as a row, due as its `delay` or `deliver_at` step says (at once without one).
    ///
    /// # Errors
    ///
    /// [`OutboxError::Publish`] when the message breaks a rule of its destination;
    /// [`OutboxError::DueInThePast`] or [`OutboxError::DueTooFar`] for a schedule out of range.
    pub(crate) fn new(mut outgoing: Outgoing) -> Result<Self, OutboxError> {
        let due_in = match outgoing.due_in() {
            None => Duration::ZERO,
            Some(Ok(due_in)) => due_in,
            Some(Err(by)) => return Err(OutboxError::DueInThePast { by }),
        };
        if due_in > MAX_SCHEDULE {
            return Err(OutboxError::DueTooFar { due_in });
        }
        // The due time is the row's, kept by the relay: the message itself carries no delay.
        outgoing.delay = None;
        outgoing.deliver_at = None;
        let key = uuid::Uuid::new_v4().to_string();
        let (fifo, has_dedup, has_key) = {
            let shown = PublishedMessage::new(&outgoing);
            (
                shown.destination().is_fifo(),
                shown.dedup_id().is_some(),
                shown.header(IDEMPOTENCY_KEY_HEADER).is_some(),
            )
        };
        // The key goes with every resend of the row: FIFO collapses a resend within five minutes
        // by it, an inbox downstream by the header.
        if fifo && !has_dedup {
            outgoing = outgoing.dedup_id(key.clone());
        }
        if !has_key {
            outgoing = outgoing.header(IDEMPOTENCY_KEY_HEADER, key);
        }
        let group_id = fifo.then(|| {
            PublishedMessage::new(&outgoing)
                .group_id()
                .unwrap_or_default()
                .to_owned()
        });
        let message = recorded::record(std::slice::from_ref(&outgoing));
        let destination = outgoing.declared_name().to_owned();
        // SQS delays a message on a standard queue only; SNS delays none.
        let delayable = !fifo && outgoing.destination().queue().is_some();
        // Every rule a send would check, checked now: a row the relay could never send would
        // hold its group for good.
        let _checked = outgoing.into_request()?;
        Ok(Self {
            destination,
            group_id,
            message: message.expect("a message whose body encoded is recorded"),
            due_in,
            send_early: if delayable {
                SEND_EARLY
            } else {
                Duration::ZERO
            },
        })
    }

    /// The row to write, under `schedule_key` when there is one.
    pub(crate) fn row<'a>(&'a self, schedule_key: Option<&'a str>) -> NewOutboxRow<'a> {
        NewOutboxRow {
            destination: &self.destination,
            group_id: self.group_id.as_deref(),
            message: &self.message,
            due_in: self.due_in,
            send_early: self.send_early,
            schedule_key,
        }
    }

    /// Counts the row, once written, among the scheduled when it has a due time.
    pub(crate) fn written(&self) {
        if !self.due_in.is_zero() {
            crate::metrics::outbox_scheduled(&self.destination);
        }
    }
}

/// Why a message could not be written to an outbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// The message breaks a rule of its destination: nothing was written.
    #[error("the outbox refused the message: {0}")]
    Publish(#[from] PublishError),
    /// The store could not write the row.
    #[error("the outbox could not write the message: {0}")]
    Store(#[from] StoreError),
    /// [`deliver_at`](OutboxMessage::deliver_at) named a time further in the past than
    /// [`PAST_DUE_TOLERANCE`]: nothing was written.
    #[error(
        "the message is due {by:?} in the past, more than the {tolerance:?} a time computed as \
         \"now\" may lag: check the time's clock and zone, or send it without a due time",
        tolerance = PAST_DUE_TOLERANCE
    )]
    DueInThePast {
        /// How far in the past.
        by: Duration,
    },
    /// The message is due further ahead than [`MAX_SCHEDULE`]: nothing was written.
    #[error(
        "the message is due in {due_in:?}, beyond the {max:?} an outbox schedules ahead",
        max = MAX_SCHEDULE
    )]
    DueTooFar {
        /// How far ahead it was asked for.
        due_in: Duration,
    },
    /// Another message of the destination waiting to be sent holds the schedule key: nothing
    /// was written. Cancel it first (in the same transaction, to reschedule).
    #[error(
        "the schedule key `{key}` of `{destination}` is taken by a message waiting to be sent: \
         cancel it first (in the same transaction, to reschedule it) or choose another key"
    )]
    ScheduleKeyInUse {
        /// The destination, as declared.
        destination: String,
        /// The key.
        key: String,
    },
}

impl OutboxError {
    /// Why a row could not be written, from the store's error.
    pub(crate) fn from_write(error: StoreError) -> Self {
        match error {
            StoreError::ScheduleKeyInUse { destination, key } => {
                Self::ScheduleKeyInUse { destination, key }
            }
            error => Self::Store(error),
        }
    }
}
