//! One queue of the account: its messages, their visibility, receive counts, delays, retention,
//! and what a receive hands out.
//!
//! Each message is in one of three states (delayed, visible, in flight). Every timed state sits
//! in one `timers` index ordered by the instant it ends, so time passing costs O(log n) per message
//! whose timer ends, and nothing scans the queue. Visible messages of a standard queue are found
//! through its model of SQS fair queues ([`Fair`]: the oldest first, unless a message group is
//! noisy); those of a FIFO queue through its ready groups ([`Fifo`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::config::Config;
use super::fair::Fair;
use super::fifo::{Dedup, DedupId, Fifo, GroupName, Window};
use super::ids::{Key, MessageId, MessageIds, Moment, Now};
use super::message::{sequence_number, Extra, State, Stored, HEX};
use super::received::{Copied, Received, Wanted};
use super::store::Messages;
use crate::model::rules::{self, fail, DedupScope, ErrorKind};
use crate::transport::{
    MessageAttributes, MessageState, SendMessage, SentMessage, SystemAttribute, TransportError,
};

/// Where a queue's visible messages are found.
#[derive(Debug)]
enum Order {
    /// Visible messages, by storage order and by group, and the groups' in-flight counts.
    Standard(Fair),
    Fifo(Fifo),
}

/// A queue of the account.
#[derive(Debug)]
pub(super) struct Queue {
    pub(super) name: String,
    pub(super) arn: Arc<str>,
    /// Unique per queue created in the account, so a receipt handle never fits another queue.
    pub(super) incarnation: u64,
    /// How the queue's keys become message ids.
    pub(super) ids: MessageIds,
    pub(super) config: Config,
    pub(super) created_epoch_s: u64,
    pub(super) last_modified_epoch_s: u64,
    pub(super) messages: Messages<Stored>,
    next_key: Key,
    /// Every delayed or in-flight message, by the instant its state ends.
    timers: BTreeSet<(Moment, Key)>,
    /// The latest retention start among messages stored in key order: those whose start is not
    /// earlier than every such message's before them expire from the front of `messages`.
    latest_stored_at: Option<Moment>,
    /// The other messages (moved here from another queue with an older start, or stored a
    /// moment after a concurrent send that read the clock later) by retention start.
    stored_early: BTreeSet<(Moment, Key)>,
    order: Order,
    in_flight: usize,
    delayed: usize,
    last_purge: Option<Instant>,
    /// Receive request attempt ids of the last 5 minutes and what they returned.
    attempts: Window<String, Vec<(Key, u32)>>,
}

/// What a receive asks of one queue, after validation.
#[derive(Debug)]
pub(super) struct Take<'a> {
    pub(super) max: usize,
    pub(super) visibility: u32,
    /// Receive count at which a message moves to the dead-letter queue instead; `None` when the
    /// queue has no usable dead-letter queue.
    pub(super) redrive_at: Option<u32>,
    pub(super) wanted: &'a Wanted<'a>,
}

/// Counts of a queue's messages by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueCounts {
    /// `ApproximateNumberOfMessages`: stored, neither delayed nor in flight.
    pub visible: usize,
    /// `ApproximateNumberOfMessagesNotVisible`: received and not yet deleted or timed out.
    pub in_flight: usize,
    /// `ApproximateNumberOfMessagesDelayed`: waiting for their delay to end.
    pub delayed: usize,
}

impl Queue {
    pub(super) fn new(
        name: String,
        arn: String,
        incarnation: u64,
        config: Config,
        now: Now,
    ) -> Self {
        let order = if config.fifo {
            Order::Fifo(Fifo::default())
        } else {
            Order::Standard(Fair::default())
        };
        Self {
            name,
            arn: Arc::from(arn),
            incarnation,
            ids: MessageIds::random(),
            config,
            created_epoch_s: now.epoch_ms / 1000,
            last_modified_epoch_s: now.epoch_ms / 1000,
            messages: Messages::new(1),
            next_key: 1,
            timers: BTreeSet::new(),
            latest_stored_at: None,
            stored_early: BTreeSet::new(),
            order,
            in_flight: 0,
            delayed: 0,
            last_purge: None,
            attempts: Window::default(),
        }
    }

    pub(super) fn counts(&self) -> QueueCounts {
        QueueCounts {
            visible: self.messages.len() - self.in_flight - self.delayed,
            in_flight: self.in_flight,
            delayed: self.delayed,
        }
    }

    /// When the next delay or visibility timeout ends.
    pub(super) fn next_timer(&self) -> Option<Moment> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// Brings the queue up to `now`: ends delays and visibility timeouts that are due, and drops
    /// messages past their retention period.
    pub(super) fn advance(&mut self, now: Moment) {
        while let Some(&(at, key)) = self.timers.first() {
            if at > now {
                break;
            }
            // A timed-out receive is a failed receive: its count stays, and the message (on FIFO,
            // its whole group, unacknowledged messages first) is available again.
            self.set_state(key, State::Visible);
        }
        let retention = Duration::from_secs(self.config.retention_seconds.into());
        // Messages stored in key order expire in key order; see `latest_stored_at`.
        while let Some(key) = self.messages.first() {
            if self.messages.get(key).expect("first exists").stored_at + retention > now {
                break;
            }
            self.remove(key);
        }
        while let Some(&(stored_at, key)) = self.stored_early.first() {
            if stored_at + retention > now {
                break;
            }
            self.stored_early.pop_first();
            self.remove(key);
        }
    }

    /// Moves a message to a new state, keeping every index and count in step.
    pub(super) fn set_state(&mut self, key: Key, new: State) {
        let Some(message) = self.messages.get_mut(key) else {
            return;
        };
        let old = std::mem::replace(&mut message.state, new);
        let group = message.group().cloned();
        self.leave(key, group.as_ref(), old);
        self.enter(key, group.as_ref(), new);
        self.refresh(group.as_ref());
    }

    /// Takes a message out of the indexes and counts of the state it is leaving.
    fn leave(&mut self, key: Key, group: Option<&GroupName>, old: State) {
        if let Some(at) = old.timer() {
            self.timers.remove(&(at, key));
        }
        match old {
            State::InFlight { .. } => {
                self.in_flight -= 1;
                self.group_in_flight(group, false);
            }
            State::Delayed { .. } => self.delayed -= 1,
            State::Visible => {
                if let Order::Standard(fair) = &mut self.order {
                    fair.remove(key, group);
                }
            }
        }
    }

    /// Puts a message into the indexes and counts of the state it enters.
    fn enter(&mut self, key: Key, group: Option<&GroupName>, new: State) {
        if let Some(at) = new.timer() {
            self.timers.insert((at, key));
        }
        match new {
            State::InFlight { .. } => {
                self.in_flight += 1;
                self.group_in_flight(group, true);
            }
            State::Delayed { .. } => self.delayed += 1,
            State::Visible => {
                if let Order::Standard(fair) = &mut self.order {
                    fair.insert(key, group);
                }
            }
        }
    }

    /// Counts a message of `group` into (`entered`) or out of the in-flight state: a FIFO group
    /// is held while it has any; a standard queue's groups are its tenants, and their counts
    /// decide which are noisy.
    fn group_in_flight(&mut self, group: Option<&GroupName>, entered: bool) {
        match &mut self.order {
            Order::Fifo(fifo) => {
                if let Some(entry) = group.and_then(|group| fifo.groups.get_mut(group)) {
                    entry.in_flight = if entered {
                        entry.in_flight + 1
                    } else {
                        entry.in_flight - 1
                    };
                }
            }
            Order::Standard(fair) => fair.in_flight(group, entered),
        }
    }

    /// Re-files a FIFO message's group in the ready index after a change to it.
    fn refresh(&mut self, group: Option<&GroupName>) {
        if let (Order::Fifo(fifo), Some(group)) = (&mut self.order, group) {
            let messages = &self.messages;
            fifo.refresh(group, |k| {
                messages.get(k).is_some_and(|m| m.state == State::Visible)
            });
        }
    }

    /// Removes a message from every index and returns it.
    pub(super) fn remove(&mut self, key: Key) -> Option<Stored> {
        let message = self.messages.remove(key)?;
        let group = message.group().cloned();
        self.leave(key, group.as_ref(), message.state);
        if let (Order::Fifo(fifo), Some(group)) = (&mut self.order, &group) {
            if let Some(entry) = fifo.groups.get_mut(group) {
                entry.remove(key);
            }
        }
        self.refresh(group.as_ref());
        Some(message)
    }

    /// Stores a new message at the end of the queue (and of its group), its retention counted from
    /// its `stored_at`.
    pub(super) fn store(&mut self, mut message: Stored, delay: u32, now: Moment) -> Key {
        let key = self.next_key;
        self.next_key += 1;
        if let Order::Fifo(fifo) = &mut self.order {
            let name = message.group().expect("FIFO messages have a group").clone();
            fifo.join(name, key);
        }
        let state = if delay > 0 {
            State::Delayed {
                until: now + Duration::from_secs(delay.into()),
            }
        } else {
            State::Visible
        };
        message.state = state;
        let group = message.group().cloned();
        let stored_at = message.stored_at;
        self.messages.insert(key, message);
        // Sends come in time order, but a message redriven to a standard queue keeps its older
        // enqueue time, so it may expire before messages stored earlier.
        if self
            .latest_stored_at
            .is_some_and(|latest| stored_at < latest)
        {
            self.stored_early.insert((stored_at, key));
        } else {
            self.latest_stored_at = Some(stored_at);
        }
        self.enter(key, group.as_ref(), state);
        self.refresh(group.as_ref());
        key
    }

    /// `SendMessage` on this queue, after the request-level checks.
    pub(super) fn send(
        &mut self,
        request: SendMessage,
        now: Now,
    ) -> Result<SentMessage, TransportError> {
        let target = rules::SendTarget {
            queue: &self.name,
            fifo: self.config.fifo,
            content_based_dedup: self.config.content_based_dedup,
            maximum_message_size: self.config.maximum_message_size as usize,
        };
        let delay = rules::check_send(&request, target)?.unwrap_or(self.config.delay_seconds);
        let Order::Fifo(fifo) = &mut self.order else {
            // A standard queue keeps a sender's group only to return it.
            let group_id = request.group_id.as_deref().map(GroupName::from);
            let extra = (!request.message_attributes.is_empty()
                || group_id.is_some()
                || request.aws_trace_header.is_some())
            .then(|| {
                Box::new(Extra {
                    message_attributes: request.message_attributes,
                    group_id,
                    aws_trace_header: request.aws_trace_header.map(String::into_boxed_str),
                    ..Extra::default()
                })
            });
            let body = request.body.into_boxed_str();
            let key = self.store(
                Stored::new(body, None, extra, now.moment),
                delay,
                now.moment,
            );
            return Ok(SentMessage {
                message_id: self.ids.of(key).text(),
                sequence_number: None,
                duplicate: false,
            });
        };
        let extra = (!request.message_attributes.is_empty() || request.aws_trace_header.is_some())
            .then(|| {
                Box::new(Extra {
                    message_attributes: request.message_attributes,
                    aws_trace_header: request.aws_trace_header.map(String::into_boxed_str),
                    ..Extra::default()
                })
            });
        let group = request
            .group_id
            .as_deref()
            .expect("check_send requires a group on FIFO");
        let group = fifo
            .interned(group)
            .unwrap_or_else(|| GroupName::from(group));
        let dedup_id = match request.dedup_id {
            Some(id) => DedupId::new(id),
            None if self.config.content_based_dedup => {
                // Attributes do not count: only the body identifies a duplicate.
                let digest = Sha256::digest(request.body.as_bytes());
                let mut hex = String::with_capacity(2 * digest.len());
                for byte in digest {
                    hex.push(char::from(HEX[usize::from(byte >> 4)]));
                    hex.push(char::from(HEX[usize::from(byte & 0xf)]));
                }
                DedupId::new(hex)
            }
            None => {
                unreachable!("check_send requires a dedup id without content-based deduplication")
            }
        };
        let key = self.next_key;
        let dedup = Arc::new(Dedup {
            group,
            id: dedup_id,
            key,
            expires: now.moment + rules::DEDUP_WINDOW,
            per_group: self.config.dedup_scope == DedupScope::MessageGroup,
        });
        if let Some(original) = fifo.dedup.get(&dedup, now.moment) {
            let key = original.key;
            return Ok(SentMessage {
                message_id: self.ids.of(key).text(),
                sequence_number: Some(sequence_number(key)),
                duplicate: true,
            });
        }
        fifo.dedup.insert(dedup.clone(), now.moment);
        let body = request.body.into_boxed_str();
        let stored_key = self.store(
            Stored::new(body, Some(dedup), extra, now.moment),
            delay,
            now.moment,
        );
        debug_assert_eq!(stored_key, key);
        Ok(SentMessage {
            message_id: self.ids.of(key).text(),
            sequence_number: Some(sequence_number(key)),
            duplicate: false,
        })
    }

    /// Takes up to `take.max` messages; returns them and the messages that reached the receive
    /// count of the redrive policy, removed here for the dead-letter queue.
    pub(super) fn receive(
        &mut self,
        take: &Take<'_>,
        now: Now,
    ) -> (Received, Vec<(MessageId, Stored)>) {
        let attempt = take
            .wanted
            .request
            .receive_request_attempt_id
            .clone()
            .filter(|_| self.config.fifo);
        if let Some(attempt) = &attempt {
            if let Some(again) = self.repeat_attempt(attempt, take, now) {
                return (again, Vec::new());
            }
        }
        let mut taken = Vec::with_capacity(take.max);
        let mut dead = Vec::new();
        if self.config.fifo {
            while taken.len() < take.max {
                let Order::Fifo(fifo) = &self.order else {
                    unreachable!("config.fifo matches the order")
                };
                let Some(group) = fifo.first_ready() else {
                    break;
                };
                let before = (taken.len(), dead.len());
                self.take_group(&group, take, now, &mut taken, &mut dead);
                if before == (taken.len(), dead.len()) {
                    break; // cannot happen while the ready index is right; never spin
                }
            }
        } else {
            while taken.len() < take.max {
                let Order::Standard(fair) = &self.order else {
                    unreachable!("config.fifo matches the order")
                };
                let Some(key) = fair.next(self.in_flight) else {
                    break;
                };
                self.take_one(key, take, now, &mut taken, &mut dead);
            }
        }
        // An attempt that got nothing has nothing to repeat: a retry (or the next turn of this
        // long poll) receives afresh.
        if let Some(attempt) = attempt.filter(|_| !taken.is_empty()) {
            let generations = taken
                .iter()
                .map(|&key| (key, self.stored(key).receive_count))
                .collect();
            self.attempts
                .insert(attempt, generations, now.instant + rules::DEDUP_WINDOW);
        }
        (self.copy_out(&taken, take.wanted), dead)
    }

    pub(super) fn stored(&self, key: Key) -> &Stored {
        self.messages.get(key).expect("indexed messages exist")
    }

    /// Copies out what the receive returns of these messages; the strings are written after the
    /// lock is released ([`Received::into_messages`]).
    fn copy_out(&self, keys: &[Key], wanted: &Wanted<'_>) -> Received {
        let mut received = Received::new(self.incarnation, self.config.fifo);
        for &key in keys {
            let message = self.stored(key);
            let (message_attributes, dead_letter_source_arn, aws_trace_header) =
                match &message.extra {
                    None => (MessageAttributes::new(), None, None),
                    Some(extra) => (
                        extra
                            .message_attributes
                            .iter()
                            .filter(|(name, _)| wanted.message_attribute(name))
                            .map(|(name, value)| (name.clone(), value.clone()))
                            .collect(),
                        extra.dead_letter_source_arn.clone(),
                        extra
                            .aws_trace_header
                            .as_deref()
                            .filter(|_| wanted.system(SystemAttribute::AwsTraceHeader))
                            .map(str::to_owned),
                    ),
                };
            let copied = Copied {
                key,
                message_id: message.message_id(self.ids, key),
                receive_count: message.receive_count,
                first_received: message.first_received(),
                sent: message.sent(),
                body: 0..0,
                group_id: message.group().cloned(),
                dedup: message.fifo.clone(),
                dead_letter_source_arn,
                message_attributes,
                aws_trace_header,
            };
            received.push(copied, &message.body);
        }
        received
    }

    /// Copies out up to `max` messages in storage order after skipping `offset`, with every
    /// attribute, changing nothing; each with its state at `now`.
    pub(super) fn peek(
        &self,
        offset: usize,
        max: usize,
        wanted: &Wanted<'_>,
        now: Moment,
    ) -> (Received, Vec<MessageState>) {
        let (keys, states): (Vec<Key>, Vec<MessageState>) = self
            .messages
            .iter()
            .skip(offset)
            .take(max)
            .map(|(key, message)| {
                let state = match message.state {
                    State::Visible => MessageState::Visible,
                    State::InFlight { until, .. } => MessageState::InFlight {
                        visible_in: until.saturating_since(now),
                    },
                    State::Delayed { until } => MessageState::Delayed {
                        visible_in: until.saturating_since(now),
                    },
                };
                (key, state)
            })
            .unzip();
        (self.copy_out(&keys, wanted), states)
    }

    /// Takes consecutive visible messages of one ready group, in order.
    fn take_group(
        &mut self,
        group: &GroupName,
        take: &Take<'_>,
        now: Now,
        taken: &mut Vec<Key>,
        dead: &mut Vec<(MessageId, Stored)>,
    ) {
        // A ready group has nothing in flight: its messages are taken from its first one on, each
        // by its place (one taken moves the place on; one moved to the dead-letter queue leaves
        // the group, and the next comes to its place).
        let mut at = 0;
        while taken.len() < take.max {
            let Order::Fifo(fifo) = &self.order else {
                unreachable!()
            };
            let Some(entry) = fifo.groups.get(group) else {
                break;
            };
            let Some(key) = entry.key_at(at) else {
                break;
            };
            if self.stored(key).state != State::Visible {
                break;
            }
            if self.take_one(key, take, now, taken, dead) {
                at += 1;
            }
        }
    }

    /// Hands out one visible message, or removes it for the dead-letter queue when this receive
    /// would pass the redrive policy's maxReceiveCount. Returns whether it was handed out.
    fn take_one(
        &mut self,
        key: Key,
        take: &Take<'_>,
        now: Now,
        taken: &mut Vec<Key>,
        dead: &mut Vec<(MessageId, Stored)>,
    ) -> bool {
        let message = self.messages.get_mut(key).expect("indexed messages exist");
        if take
            .redrive_at
            .is_some_and(|max| message.receive_count >= max)
        {
            let id = message.message_id(self.ids, key);
            dead.extend(self.remove(key).map(|message| (id, message)));
            return false;
        }
        message.count_receive(now.moment);
        let until = now.moment + Duration::from_secs(take.visibility.into());
        self.set_state(
            key,
            State::InFlight {
                until,
                received_at: now.moment,
            },
        );
        taken.push(key);
        true
    }

    /// The messages of an earlier receive with this attempt id, if all are still in flight from it.
    /// SQS restarts their visibility timeout, as the retry stands for a receive whose answer was
    /// lost; it is no receive of its own, so counts, handles and the 12-hour cap stay.
    fn repeat_attempt(&mut self, attempt: &str, take: &Take<'_>, now: Now) -> Option<Received> {
        let generations = self.attempts.get(&attempt.to_owned(), now.instant)?.clone();
        let mut in_flight = Vec::with_capacity(generations.len());
        for &(key, count) in &generations {
            let message = self.messages.get(key)?;
            let State::InFlight { received_at, .. } = message.state else {
                return None;
            };
            if message.receive_count != count {
                return None;
            }
            in_flight.push((key, received_at));
        }
        let until = now.moment + Duration::from_secs(take.visibility.into());
        for (key, received_at) in in_flight {
            let until = until.min(visibility_cap(received_at));
            self.set_state(key, State::InFlight { until, received_at });
        }
        let keys: Vec<Key> = generations.iter().map(|&(key, _)| key).collect();
        Some(self.copy_out(&keys, take.wanted))
    }

    /// `PurgeQueue`: at most once a minute.
    pub(super) fn purge(&mut self, now: Instant) -> Result<(), TransportError> {
        if let Some(last) = self.last_purge {
            if now < last + rules::PURGE_INTERVAL {
                return fail(
                    ErrorKind::PurgeQueueInProgress,
                    format!(
                        "queue `{}` was purged {} s ago; SQS allows one purge every 60 s",
                        self.name,
                        now.saturating_duration_since(last).as_secs()
                    ),
                );
            }
        }
        self.last_purge = Some(now);
        self.messages.clear();
        self.timers.clear();
        self.latest_stored_at = None;
        self.stored_early.clear();
        self.in_flight = 0;
        self.delayed = 0;
        match &mut self.order {
            Order::Standard(fair) => fair.clear(),
            Order::Fifo(fifo) => fifo.clear_messages(),
        }
        Ok(())
    }
}

/// The latest a message received at `received_at` may stay invisible: SQS caps it at 12 hours.
pub(super) fn visibility_cap(received_at: Moment) -> Moment {
    received_at + Duration::from_secs(rules::MAX_VISIBILITY_TIMEOUT_SECONDS as u64)
}
