//! The in-process SQS account: Amazon SQS semantics without a network, and SNS topics that
//! deliver into its queues.
//!
//! An [`Account`] holds named queues and answers the SQS operations a client uses, named and
//! shaped like SQS's own (`create_queue`, `send_message_batch`, `receive_message`,
//! `change_message_visibility_batch`, ...). It runs on tokio's clock, so a test on a paused runtime
//! can advance five minutes of visibility timeouts, delays and deduplication windows at once.
//!
//! ```
//! use rust_stream::account::Account;
//! use rust_stream::transport::{ReceiveMessage, SendMessage};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), rust_stream::transport::TransportError> {
//! let account = Account::new();
//! let url = account.create_fifo_queue("ledger.fifo").await?;
//! account.send_message(&url, SendMessage::new("opened").group_id("acct-9").dedup_id("acct-9-open")).await?;
//! account.send_message(&url, SendMessage::new("deposited 100").group_id("acct-9").dedup_id("acct-9-dep-1")).await?;
//!
//! let received = account.receive_message(&url, ReceiveMessage::new(10)).await?;
//! let bodies: Vec<_> = received.iter().map(|m| m.body.as_str()).collect();
//! assert_eq!(bodies, ["opened", "deposited 100"]);
//! # Ok(())
//! # }
//! ```
//!
//! # What it models
//!
//! - Standard and FIFO queues, their attributes and every limit of the SQS rules, with SQS's error
//!   kinds ([`ErrorKind`]) and messages that say what to fix.
//! - Visibility timeouts, receipt handles (a new one per receive; a superseded one deletes nothing),
//!   receive counts, queue and message delays, retention, purge (once a minute), long polling that
//!   returns as soon as a message becomes available, and `ApproximateNumberOf*` counts.
//! - `ListQueues`, and a peek SQS does not have ([`Account::peek_messages`]): a look at a queue's
//!   messages in storage order, with their states, that changes nothing.
//! - Redrive: a receive that would pass a message's `maxReceiveCount` moves it to the dead-letter
//!   queue instead (which must be of the same type), keeping its id; its FIFO group continues.
//!   Its retention counts from its original send on a standard queue, from the move on a FIFO one.
//! - Fair queues: on a standard queue, a message group with at least 30 messages in flight and
//!   more than a tenth of the queue's is noisy, and a receive takes other groups' messages (and
//!   messages without a group) first while any are visible. A model of SQS's, with what it keeps and
//!   what it does not in the flow control guide (`docs/flow-control.md`, "Fair queues").
//! - FIFO: storage order and sequence numbers, groups held while any of their messages is in
//!   flight, released messages served first once the group is free, deduplication for 5 minutes
//!   by id or body SHA-256 (per queue or per group), `ReceiveRequestAttemptId`.
//! - SNS topics (`create_topic`, `subscribe`, `publish_batch`, ...): standard and FIFO topics,
//!   subscriptions of the account's queues with raw delivery and filter policies, SNS's publish
//!   rules, a FIFO topic's 5-minute deduplication and sequence numbers, and each publish
//!   delivered to every matching subscription in one step through the queues' own send path.
//! - S3 buckets, enough for large payloads: `create_bucket`, `put_object`, `get_object`,
//!   `head_object`, `delete_object`, with S3's bucket-name rule and its `NoSuchBucket` and
//!   `NoSuchKey` answers ([`Account::object_keys`] lists what a bucket holds, for tests).
//!
//! # What it does not model
//!
//! Throttling and the per-queue API rate limits, IAM and queue policies (stored, not enforced; a
//! topic needs none to deliver), SNS protocols other than `sqs`, subscription dead-letter queues
//! and delivery retries (a delivery SNS would fail is dropped with a warning), topic deletion and
//! unsubscribing, message signatures (envelopes are marked unsigned),
//! encryption, tags, `RedriveAllowPolicy` and message move tasks, the eventual consistency of the
//! `Approximate*` counts (here they are exact), and the sampling of standard queues (here a
//! receive returns the oldest visible messages, but for a fair queue's noisy groups, and never
//! duplicates a message by itself).

mod config;
mod fair;
mod fifo;
mod ids;
mod message;
mod messaging;
mod objects;
mod queue;
mod received;
mod s3;
mod settle;
mod sns;
mod store;
mod topics;
mod transport;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use tokio::time::Instant;

use config::Config;
use ids::{Moment, Now};
use queue::Queue;
pub use queue::QueueCounts;
use topics::Topics;

use crate::model::rules::{self, fail, ErrorKind};
use crate::transport::{QueueAttributes, TransportError};
use ids::ACCOUNT_ID;

/// The region the account's ARNs and URLs name.
const REGION: &str = "us-east-1";

/// An in-process SQS account: a set of named queues with SQS's semantics.
///
/// Cloning is cheap and shares the queues, so a test and the service under test can hold the
/// same account.
#[derive(Clone, Default)]
pub struct Account {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        let mut names: Vec<_> = state.queues.keys().collect();
        names.sort();
        f.debug_struct("Account").field("queues", &names).finish()
    }
}

// Locking: the account's map of queues and each queue have a lock of their own, so operations on
// different queues do not wait for each other. The map's lock is only ever held alone (never
// while waiting for a queue's), and a receive that may move messages to a dead-letter queue
// holds both queues' locks, taking the newer queue's first: no two calls wait for each other.

struct Inner {
    state: Mutex<State>,
    /// The SNS topics; a publish holds this lock while it delivers (see `sns.rs`).
    topics: Mutex<Topics>,
    /// The account's S3 buckets, for large payloads.
    objects: Mutex<objects::Buckets>,
    /// Maps tokio's clock to wall-clock time, so timestamps advance with a paused clock.
    epoch_ms_at_start: u64,
    started: Instant,
}

impl Default for Inner {
    fn default() -> Self {
        let epoch_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        Self {
            state: Mutex::default(),
            topics: Mutex::default(),
            objects: Mutex::default(),
            epoch_ms_at_start: epoch_ms,
            started: Instant::now(),
        }
    }
}

#[derive(Default)]
struct State {
    queues: HashMap<String, Arc<Slot>>,
    /// When each recently deleted queue name was deleted.
    deleted: HashMap<String, Instant>,
    next_incarnation: u64,
}

/// A queue and what is known of it without its lock.
struct Slot {
    url: String,
    fifo: bool,
    /// The queue's incarnation: the newer of two queues is locked first.
    incarnation: u64,
    /// Wakes long polls on the queue: a message arrived or became available, or the queue went.
    notify: Notify,
    queue: Mutex<Queue>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic elsewhere while holding the lock leaves consistent state: every operation
        // validates before it mutates.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue, brought up to `now`.
    fn lock_at(&self, now: Moment) -> MutexGuard<'_, Queue> {
        let mut queue = self.lock();
        queue.advance(now);
        queue
    }
}

impl State {
    fn slot(&self, url: &str) -> Result<Arc<Slot>, TransportError> {
        let name = url.rsplit('/').next().unwrap_or_default();
        match self.queues.get(name) {
            Some(slot) if slot.url == url => Ok(slot.clone()),
            _ => fail(
                ErrorKind::QueueDoesNotExist,
                format!("no queue has URL `{url}`; create it first or check the name"),
            ),
        }
    }

    /// Checks a redrive policy against the account: the target exists and is of the same type.
    fn check_redrive(&self, config: &Config, queue_name: &str) -> Result<(), TransportError> {
        let Some(policy) = &config.redrive else {
            return Ok(());
        };
        let target = policy.target_name();
        match self.queues.get(target) {
            None => fail(
                ErrorKind::InvalidParameterValue,
                format!("RedrivePolicy of `{queue_name}` names dead-letter queue `{target}`, which does not exist; create it first"),
            ),
            Some(dlq) if dlq.fifo != config.fifo => fail(
                ErrorKind::InvalidParameterValue,
                format!(
                    "RedrivePolicy of `{queue_name}` names `{target}`, but the dead-letter queue of a {} queue must be {} too",
                    if config.fifo { "FIFO" } else { "standard" },
                    if config.fifo { "FIFO" } else { "standard" },
                ),
            ),
            Some(_) => Ok(()),
        }
    }
}

impl Account {
    /// A new, empty account.
    pub fn new() -> Self {
        Self::default()
    }

    fn objects(&self) -> MutexGuard<'_, objects::Buckets> {
        // Each call changes the buckets in one step: they are consistent whenever unlocked.
        self.inner
            .objects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // As for a queue's lock: the map is consistent whenever it is unlocked.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue at `url`, for locking.
    fn slot(&self, url: &str) -> Result<Arc<Slot>, TransportError> {
        self.state().slot(url)
    }

    fn now(&self) -> Now {
        let instant = Instant::now();
        let since = instant
            .saturating_duration_since(self.inner.started)
            .as_millis() as u64;
        Now {
            instant,
            moment: Moment::since(self.inner.started, instant),
            epoch_ms: self.inner.epoch_ms_at_start + since,
        }
    }

    /// The URL a queue of this name has in this account.
    pub fn queue_url_for(&self, name: &str) -> String {
        format!("http://sqs.{REGION}.in-process/{ACCOUNT_ID}/{name}")
    }

    /// The ARN a queue of this name has in this account (for `RedrivePolicy`).
    pub fn queue_arn_for(&self, name: &str) -> String {
        format!("arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}")
    }

    /// `CreateQueue`: creates a queue, or returns the URL of an identical one.
    ///
    /// # Errors
    ///
    /// `InvalidParameterValue` for a bad name (or a `.fifo` name without `FifoQueue=true`, and the
    /// reverse), `InvalidAttributeName`/`InvalidAttributeValue` for bad attributes,
    /// `QueueNameExists` when the name exists with other attributes, `QueueDeletedRecently` within
    /// 60 s of deleting the name.
    pub async fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> Result<String, TransportError> {
        rules::check_queue_name(name).map_err(TransportError::unsent)?;
        let fifo = attributes.get("FifoQueue").is_some_and(|v| v == "true");
        if rules::is_fifo_name(name) != fifo {
            return fail(
                ErrorKind::InvalidParameterValue,
                if fifo {
                    format!("queue `{name}` has FifoQueue=true, but a FIFO queue's name must end in `.fifo`")
                } else {
                    format!("queue `{name}` ends in `.fifo`: set the attribute FifoQueue=true, or drop the suffix")
                },
            );
        }
        let mut config = Config::new(fifo);
        for (attribute, value) in &attributes {
            let value =
                rules::parse_queue_attribute(attribute, value).map_err(TransportError::unsent)?;
            config.apply(attribute, value)?;
        }
        config.check()?;
        let now = self.now();
        let mut state = self.state();
        if let Some(existing) = state.queues.get(name).cloned() {
            drop(state);
            let current = existing.lock().config.attributes();
            let wanted = config.attributes();
            return match attributes.keys().find(|attribute| current.get(*attribute) != wanted.get(*attribute)) {
                Some(differs) => fail(
                    ErrorKind::QueueNameExists,
                    format!("queue `{name}` exists with another {differs}; use the existing attributes or another name"),
                ),
                None => Ok(existing.url.clone()),
            };
        }
        if let Some(deleted) = state.deleted.get(name) {
            if now.instant < *deleted + rules::QUEUE_DELETED_RECENTLY {
                return fail(
                    ErrorKind::QueueDeletedRecently,
                    format!("queue `{name}` was deleted less than 60 s ago; wait before creating it again"),
                );
            }
        }
        state.check_redrive(&config, name)?;
        state.next_incarnation += 1;
        let incarnation = state.next_incarnation;
        let url = self.queue_url_for(name);
        let queue = Queue::new(
            name.to_owned(),
            self.queue_arn_for(name),
            incarnation,
            config,
            now,
        );
        state.deleted.remove(name);
        let slot = Slot {
            url: url.clone(),
            fifo,
            incarnation,
            notify: Notify::new(),
            queue: Mutex::new(queue),
        };
        state.queues.insert(name.to_owned(), Arc::new(slot));
        tracing::debug!(messaging.destination.name = name, fifo, "queue created");
        Ok(url)
    }

    /// Creates a standard queue with default attributes.
    ///
    /// # Errors
    ///
    /// As [`create_queue`](Self::create_queue).
    pub async fn create_standard_queue(&self, name: &str) -> Result<String, TransportError> {
        self.create_queue(name, QueueAttributes::new()).await
    }

    /// Creates a FIFO queue (`FifoQueue=true`) with default attributes.
    ///
    /// # Errors
    ///
    /// As [`create_queue`](Self::create_queue).
    pub async fn create_fifo_queue(&self, name: &str) -> Result<String, TransportError> {
        let attributes = QueueAttributes::from([("FifoQueue".to_owned(), "true".to_owned())]);
        self.create_queue(name, attributes).await
    }

    /// `GetQueueUrl`.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`.
    pub async fn get_queue_url(&self, name: &str) -> Result<String, TransportError> {
        rules::check_queue_name(name).map_err(TransportError::unsent)?;
        match self.state().queues.get(name) {
            Some(slot) => Ok(slot.url.clone()),
            None => fail(
                ErrorKind::QueueDoesNotExist,
                format!("queue `{name}` does not exist; create it first"),
            ),
        }
    }

    /// `ListQueues`: the URLs of the queues whose names start with `prefix`, sorted.
    pub async fn list_queues(&self, prefix: &str) -> Vec<String> {
        let state = self.state();
        let mut urls: Vec<String> = state
            .queues
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, slot)| slot.url.clone())
            .collect();
        urls.sort();
        urls
    }

    /// `GetQueueAttributes`: `names` may hold `All`.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`, `InvalidAttributeName` for an unknown name.
    pub async fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> Result<QueueAttributes, TransportError> {
        let now = self.now();
        let slot = self.slot(queue_url)?;
        let queue = slot.lock_at(now.moment);
        let mut all = queue.config.attributes();
        let counts = queue.counts();
        for (name, value) in [
            ("QueueArn", queue.arn.to_string()),
            ("ApproximateNumberOfMessages", counts.visible.to_string()),
            (
                "ApproximateNumberOfMessagesNotVisible",
                counts.in_flight.to_string(),
            ),
            (
                "ApproximateNumberOfMessagesDelayed",
                counts.delayed.to_string(),
            ),
            ("CreatedTimestamp", queue.created_epoch_s.to_string()),
            (
                "LastModifiedTimestamp",
                queue.last_modified_epoch_s.to_string(),
            ),
        ] {
            all.insert(name.to_owned(), value);
        }
        if names.contains(&"All") {
            return Ok(all);
        }
        let mut out = QueueAttributes::new();
        for name in names {
            match all.get(*name) {
                Some(value) => {
                    out.insert((*name).to_owned(), value.clone());
                }
                // Attributes the queue could have but does not (no RedrivePolicy yet) are omitted.
                None if rules::parse_queue_attribute(name, "")
                    .is_err_and(|e| e.kind() == Some(ErrorKind::InvalidAttributeName)) =>
                {
                    return fail(
                        ErrorKind::InvalidAttributeName,
                        format!("unknown queue attribute `{name}`"),
                    );
                }
                None => {}
            }
        }
        Ok(out)
    }

    /// The queue's message counts by state (`ApproximateNumberOf*`, exact here).
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`.
    pub async fn counts(&self, queue_url: &str) -> Result<QueueCounts, TransportError> {
        let now = self.now();
        Ok(self.slot(queue_url)?.lock_at(now.moment).counts())
    }

    /// `SetQueueAttributes`: all or nothing.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`; `InvalidAttributeName`/`InvalidAttributeValue`; `InvalidParameterValue`
    /// for a redrive policy whose target is missing or of the other type.
    pub async fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: QueueAttributes,
    ) -> Result<(), TransportError> {
        let now = self.now();
        let slot = self.slot(queue_url)?;
        let mut queue = slot.lock_at(now.moment);
        let mut config = queue.config.clone();
        for (attribute, value) in &attributes {
            if attribute == "FifoQueue" {
                return fail(
                    ErrorKind::InvalidAttributeName,
                    "FifoQueue is fixed when a queue is created; it cannot be set",
                );
            }
            let value =
                rules::parse_queue_attribute(attribute, value).map_err(TransportError::unsent)?;
            config.apply(attribute, value)?;
        }
        config.check()?;
        // Only a new policy is checked: a dead-letter queue deleted since must not block
        // unrelated changes.
        if attributes.contains_key("RedrivePolicy") {
            self.state().check_redrive(&config, &queue.name)?;
        }
        queue.config = config;
        queue.last_modified_epoch_s = now.epoch_ms / 1000;
        drop(queue);
        slot.notify.notify_waiters();
        Ok(())
    }

    /// `PurgeQueue`: deletes every message, in flight or not; once every 60 s.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`; `PurgeQueueInProgress`.
    pub async fn purge_queue(&self, queue_url: &str) -> Result<(), TransportError> {
        let now = self.now();
        let slot = self.slot(queue_url)?;
        slot.lock_at(now.moment).purge(now.instant)?;
        slot.notify.notify_waiters();
        Ok(())
    }

    /// `DeleteQueue`: the queue and its messages are gone; its name is reusable after 60 s.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`.
    pub async fn delete_queue(&self, queue_url: &str) -> Result<(), TransportError> {
        let now = self.now();
        let mut state = self.state();
        state.slot(queue_url)?;
        let name = queue_url.rsplit('/').next().unwrap_or_default().to_owned();
        let slot = state.queues.remove(&name).expect("found above");
        state.deleted.insert(name, now.instant);
        drop(state);
        // Long polls on the queue wake and report it gone.
        slot.notify.notify_waiters();
        Ok(())
    }
}

#[cfg(test)]
mod tests;
