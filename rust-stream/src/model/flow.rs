//! Flow control that acts on receiving: a [`RateLimit`] (a subscription's own, or one named and
//! shared by several subscriptions and publishers), a per-key in-flight limit counted by an
//! [`InFlightKey`] (a tenant's messages at most `k` at once:
//! [`SqsQueue::max_in_flight_per`](crate::SqsQueue::max_in_flight_per)), and a [`Backpressure`]
//! switch the service trips (a downstream's circuit open).
//!
//! A throttle written as middleware runs inside the attempt: the message is received, its lease
//! runs while the throttle waits, and a long wait lets it time out into another consumer's hands.
//! These act one step earlier, in the subscription's intake, before each receive: a receive asks
//! SQS for no more messages than the rate limit has tokens for, and is not made at all while none
//! are, or while the backpressure is tripped. What the consumer already holds goes on as before
//! (run, settled, its visibility extended by the heartbeat); only new receives wait. See
//! `docs/flow-control.md` for what each does on SQS and how it measured.
//!
//! ```
//! use rust_stream::flow::{Backpressure, RateLimit};
//! use rust_stream::prelude::*;
//! # #[derive(serde::Deserialize)] struct Charge;
//! # struct Authorize;
//! # impl Handle<Charge> for Authorize {
//! #     async fn handle(&self, _: &Charge, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> { Ok(()) }
//! # }
//!
//! // 50 calls a second to the card network, across every subscription and publisher that uses it.
//! let card_network = RateLimit::new("card-network", 50);
//! let circuit = Backpressure::new();
//! let authorize = subscriber("charges", Authorize)
//!     .rate_limit(card_network.clone())
//!     .backpressure(&circuit)
//!     .build();
//! let broker = SqsBroker::in_process();
//! let refunds = broker.publisher("refunds").rate_limit(card_network);
//! circuit.trip(); // no receive is made until `circuit.release()`
//! # let _ = (authorize, refunds);
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::config::ConfigError;
use super::rules::MAX_BATCH_ENTRIES;
use super::wire::ReceivedMessage;

/// At most `messages` messages every `per` (a second unless set): received by the subscriptions
/// that use it, sent by the publishers that do. Cheap to clone; clones share one budget, so one
/// named limit (`RateLimit::new("card-network", 50)`) given to several subscriptions and
/// publishers holds them together to its rate.
///
/// It is a token bucket on tokio's clock, full at the start: a token a message, one back every
/// `per / messages`, at most [`burst`](Self::burst) kept (by default one receive's batch, 10, or
/// `messages` when fewer). A subscription's receive waits until the bucket holds a batch's tokens
/// (or the burst, when smaller), takes what is there up to its batch size, asks SQS for that many,
/// and gives back what the answer did not use; so under a backlog a limit of 50 a second makes a
/// receive of 10 every 200 ms. A publisher's send waits for its messages' tokens before the call.
/// Over any stretch of time `t`, the messages taken stay within `burst + t × rate`.
///
/// What counts is receives, so a message given back to the queue and received again (a retry on a
/// standard queue) takes a token again; a FIFO retry in place, which is no receive, does not.
///
/// Nothing is checked when it is made: an app's run refuses a limit of 0 messages, a period of
/// zero or a burst of 0 before any call ([`ConfigError::RateLimit`]), and a publisher's send
/// likewise.
///
/// ```
/// use std::time::Duration;
/// use rust_stream::flow::RateLimit;
///
/// let ses = RateLimit::new("ses", 14);
/// let slow_bank = RateLimit::new("bank", 30).per(Duration::from_secs(60)).burst(5);
/// assert_eq!(ses.name(), "ses");
/// # let _ = slow_bank;
/// ```
#[derive(Clone)]
#[must_use]
pub struct RateLimit {
    name: Arc<str>,
    messages: u32,
    per: Duration,
    burst: Option<u32>,
    bucket: Arc<Bucket>,
}

/// A rate limit's shared state.
#[derive(Default)]
struct Bucket {
    /// When the bucket is full again if nothing more is taken; `None` before the first take
    /// (full). Tokens held now: `burst` less the intervals until then.
    full_at: Mutex<Option<Instant>>,
    /// Those waiting for tokens, served in turn: tokio's mutex is fair, so a receive waiting for
    /// a batch is not passed by a stream of single sends.
    turns: tokio::sync::Mutex<()>,
}

impl RateLimit {
    /// At most `messages` messages a second, under `name` (which errors and logs show).
    pub fn new(name: impl Into<String>, messages: u32) -> Self {
        Self {
            name: Arc::from(name.into()),
            messages,
            per: Duration::from_secs(1),
            burst: None,
            bucket: Arc::default(),
        }
    }

    /// `messages` every `per` instead of every second. Set it before cloning: clones made before
    /// share the old budget, not this one.
    pub fn per(self, per: Duration) -> Self {
        Self {
            per,
            bucket: Arc::default(),
            ..self
        }
    }

    /// How many tokens the bucket keeps at most (default: 10, a receive's batch, or `messages`
    /// when fewer): how far past the rate a moment may go after a quiet spell. Set it before
    /// cloning, as [`per`](Self::per).
    pub fn burst(self, burst: u32) -> Self {
        Self {
            burst: Some(burst),
            bucket: Arc::default(),
            ..self
        }
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tokens the bucket keeps at most.
    fn most(&self) -> u32 {
        self.burst
            .unwrap_or_else(|| self.messages.min(MAX_BATCH_ENTRIES as u32))
    }

    /// The time a token takes to come back; `None` for a limit that cannot work.
    fn interval(&self) -> Option<Duration> {
        let nanos = self.per.as_nanos() / u128::from(self.messages.max(1));
        (self.problem().is_none() && nanos > 0).then(|| Duration::from_nanos(nanos as u64))
    }

    /// What keeps this limit from working, before any call.
    pub(crate) fn problem(&self) -> Option<ConfigError> {
        let reason = if self.messages == 0 {
            "0 messages would never let one through; give at least 1".to_owned()
        } else if self.per.is_zero() {
            "a period of zero is no rate; give `.per(..)` a duration over zero".to_owned()
        } else if self.burst == Some(0) {
            "a burst of 0 would never let one through; give `.burst(..)` at least 1".to_owned()
        } else if self.per.as_nanos() < u128::from(self.messages) {
            format!(
                "{} messages per {:?} is more than one a nanosecond; give a longer `.per(..)`",
                self.messages, self.per
            )
        } else {
            return None;
        };
        Some(ConfigError::RateLimit {
            limit: self.name.to_string(),
            reason,
        })
    }

    /// This limit named `name` when it has no name of its own (made from a number).
    pub(crate) fn named_if_unnamed(mut self, name: &str) -> Self {
        if self.name.is_empty() {
            self.name = Arc::from(name);
        }
        self
    }

    fn full_at(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.bucket
            .full_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the bucket holds `want` tokens or its burst, whichever is fewer, and takes up
    /// to `want` of what it holds then: how many were taken.
    pub(crate) async fn take(&self, want: u32) -> u32 {
        let Some(interval) = self.interval() else {
            return want;
        };
        let most = self.most();
        let at_least = want.min(most).max(1);
        let _turn = self.bucket.turns.lock().await;
        loop {
            let now = Instant::now();
            let ready_at = {
                let mut full_at = self.full_at();
                let owed = full_at.map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
                let owed_tokens = owed.as_nanos().div_ceil(interval.as_nanos());
                let held = u128::from(most).saturating_sub(owed_tokens) as u32;
                if held >= at_least {
                    let taken = held.min(want);
                    let from = full_at.map_or(now, |at| at.max(now));
                    *full_at = Some(from + interval * taken);
                    return taken;
                }
                // When `at_least` are held: the debt down to the rest of the burst.
                full_at.map_or(now, |at| {
                    at.checked_sub(interval * (most - at_least)).unwrap_or(now)
                })
            };
            tokio::time::sleep_until(ready_at).await;
        }
    }

    /// Waits for `messages` tokens, a burst at a time, and takes them: a publisher's send.
    pub(crate) async fn wait_for(&self, messages: usize) {
        let mut left = u32::try_from(messages).unwrap_or(u32::MAX);
        while left > 0 {
            let chunk = left.min(self.most().max(1));
            let mut taken = 0;
            while taken < chunk {
                taken += self.take(chunk - taken).await;
            }
            left -= chunk;
        }
    }

    /// Gives back `tokens` taken but not used (a receive that brought fewer messages than it
    /// asked for), up to a full bucket.
    pub(crate) fn give_back(&self, tokens: u32) {
        let Some(interval) = self.interval() else {
            return;
        };
        if tokens == 0 {
            return;
        }
        let now = Instant::now();
        let mut full_at = self.full_at();
        if let Some(at) = *full_at {
            *full_at = Some(at.checked_sub(interval * tokens).unwrap_or(now).max(now));
        }
    }
}

/// A number of messages a second: a subscription's own limit, named after its queue.
impl From<u32> for RateLimit {
    fn from(messages: u32) -> Self {
        Self::new(String::new(), messages)
    }
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("name", &self.name)
            .field("messages", &self.messages)
            .field("per", &self.per)
            .field("burst", &self.most())
            .finish()
    }
}

/// The same limit: one budget, shared.
impl PartialEq for RateLimit {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.bucket, &other.bucket)
    }
}

impl Eq for RateLimit {}

/// A switch that stops receiving: while it is [tripped](Self::trip), the subscriptions given it
/// make no receive; once [released](Self::release) they receive again. Cheap to clone; clones
/// are one switch, so one handle can stop several subscriptions (all that call a downstream
/// whose circuit just opened).
///
/// Tripping stops new receives only. A long poll already out when it trips still answers (within
/// the subscription's `wait`) and what it brings is handled; messages held are run and settled as
/// usual, their visibility extended by the heartbeat while they wait, so nothing held lapses
/// however long the switch stays tripped.
///
/// ```
/// use rust_stream::flow::Backpressure;
///
/// let circuit = Backpressure::new();
/// circuit.trip();
/// assert!(circuit.is_tripped());
/// circuit.release();
/// assert!(!circuit.is_tripped());
/// ```
#[derive(Clone)]
pub struct Backpressure {
    tripped: Arc<watch::Sender<bool>>,
}

impl Backpressure {
    /// A switch, released.
    pub fn new() -> Self {
        Self {
            tripped: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Stops the subscriptions given this switch from receiving, until [`release`](Self::release).
    pub fn trip(&self) {
        if !self.tripped.send_replace(true) {
            tracing::info!("backpressure tripped: no receives until it is released");
        }
    }

    /// Lets the subscriptions given this switch receive again.
    pub fn release(&self) {
        if self.tripped.send_replace(false) {
            tracing::info!("backpressure released: receiving again");
        }
    }

    /// Whether it is tripped now.
    pub fn is_tripped(&self) -> bool {
        *self.tripped.borrow()
    }

    /// Returns once the switch is released (at once when it is).
    async fn released(&self) {
        let mut watching = self.tripped.subscribe();
        // The sender lives as long as `self`: the wait ends only by a release.
        let _ = watching.wait_for(|tripped| !tripped).await;
    }
}

impl Default for Backpressure {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Backpressure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backpressure")
            .field("tripped", &self.is_tripped())
            .finish()
    }
}

/// The same switch.
impl PartialEq for Backpressure {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.tripped, &other.tripped)
    }
}

impl Eq for Backpressure {}

/// What a [per-key in-flight limit](crate::SqsQueue::max_in_flight_per) counts by: the message
/// group, a header, or a function of the message (a tenant), read off the message as SQS
/// delivered it, before it is decoded (an SNS notification's attributes are inside its body: on
/// a queue that reads envelopes, use raw delivery or a function of the body). Messages without a
/// key are not limited.
///
/// ```
/// use rust_stream::flow::InFlightKey;
///
/// let by_group = InFlightKey::group();
/// let by_tenant = InFlightKey::header("tenant");
/// let by_customer = InFlightKey::by(|message| {
///     let customer = message.message_attributes.get("customer")?.string_value.as_deref()?;
///     Some(customer.split(':').next().unwrap_or(customer).to_owned())
/// });
/// # let _ = (by_group, by_tenant, by_customer);
/// ```
#[derive(Clone)]
pub struct InFlightKey(KeyOf);

#[derive(Clone)]
enum KeyOf {
    Group,
    Header(Arc<str>),
    Function(Arc<KeyFunction>),
}

/// A key read off a message by the service's own function.
type KeyFunction = dyn Fn(&ReceivedMessage) -> Option<String> + Send + Sync;

impl InFlightKey {
    /// The message group id: on a standard queue, the one its sender set (a fair queue's tenant).
    pub fn group() -> Self {
        Self(KeyOf::Group)
    }

    /// The text of the header (a `String` or `Number` message attribute) `name`.
    pub fn header(name: impl Into<String>) -> Self {
        Self(KeyOf::Header(Arc::from(name.into())))
    }

    /// What `key` answers for the message as received, before it is decoded: its attributes,
    /// group, body.
    pub fn by(key: impl Fn(&ReceivedMessage) -> Option<String> + Send + Sync + 'static) -> Self {
        Self(KeyOf::Function(Arc::new(key)))
    }

    /// The key of a received message, if it has one.
    pub(crate) fn of(&self, message: &ReceivedMessage) -> Option<Arc<str>> {
        match &self.0 {
            KeyOf::Group => message.group_id().map(Arc::from),
            KeyOf::Header(name) => message
                .message_attributes
                .get(&**name)
                .and_then(|value| value.string_value.as_deref())
                .map(Arc::from),
            KeyOf::Function(key) => key(message).map(Arc::from),
        }
    }
}

impl std::fmt::Debug for InFlightKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            KeyOf::Group => f.write_str("InFlightKey::group()"),
            KeyOf::Header(name) => write!(f, "InFlightKey::header({name:?})"),
            KeyOf::Function(_) => f.write_str("InFlightKey::by(..)"),
        }
    }
}

/// The same key: the group, the same header, or the same function.
impl PartialEq for InFlightKey {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (KeyOf::Group, KeyOf::Group) => true,
            (KeyOf::Header(a), KeyOf::Header(b)) => a == b,
            (KeyOf::Function(a), KeyOf::Function(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for InFlightKey {}

/// A per-key in-flight limit: at most `most` messages of each key held for running at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PerKey {
    pub(crate) key: InFlightKey,
    pub(crate) most: usize,
}

/// What a subscription's intake asks before each receive: its rate limit and its backpressure
/// switch, either or both absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Flow {
    pub(crate) rate_limit: Option<RateLimit>,
    pub(crate) backpressure: Option<Backpressure>,
    pub(crate) per_key: Option<PerKey>,
}

impl Flow {
    /// Waits until a receive of up to `want` messages may be made, and says how many it may ask
    /// for: at least one. Give back what the receive did not use with [`unused`](Self::unused).
    pub(crate) async fn admit(&self, want: usize) -> usize {
        loop {
            if let Some(backpressure) = &self.backpressure {
                backpressure.released().await;
            }
            let Some(limit) = &self.rate_limit else {
                return want;
            };
            let taken = limit.take(want as u32).await;
            // Tripped while waiting for tokens: no receive, and the tokens go back.
            if self
                .backpressure
                .as_ref()
                .is_some_and(Backpressure::is_tripped)
            {
                limit.give_back(taken);
                continue;
            }
            return taken as usize;
        }
    }

    /// Gives back the tokens of `messages` a receive admitted but did not bring.
    pub(crate) fn unused(&self, messages: usize) {
        if let Some(limit) = &self.rate_limit {
            limit.give_back(messages as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_full_bucket_gives_its_burst_then_a_token_an_interval() {
        let limit = RateLimit::new("t", 50);
        let start = Instant::now();
        assert_eq!(limit.take(10).await, 10);
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(limit.take(10).await, 10);
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        limit.give_back(4);
        // Four back: six more to wait for, 120 ms.
        assert_eq!(limit.take(10).await, 10);
        assert_eq!(start.elapsed(), Duration::from_millis(320));
        tokio::time::sleep(Duration::from_secs(60)).await;
        // A quiet minute fills the bucket to its burst, no further.
        assert_eq!(limit.take(100).await, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn a_publisher_waits_for_every_token_of_a_batch() {
        let limit = RateLimit::new("t", 10);
        let start = Instant::now();
        limit.wait_for(35).await;
        // 10 at once, then 25 more at 100 ms each.
        assert_eq!(start.elapsed(), Duration::from_millis(2_500));
    }

    #[test]
    fn a_limit_that_cannot_work_says_why() {
        assert!(RateLimit::new("a", 0).problem().is_some());
        assert!(RateLimit::new("a", 1)
            .per(Duration::ZERO)
            .problem()
            .is_some());
        assert!(RateLimit::new("a", 1).burst(0).problem().is_some());
        assert!(RateLimit::new("a", u32::MAX)
            .per(Duration::from_nanos(1))
            .problem()
            .is_some());
        assert!(RateLimit::new("a", 1).problem().is_none());
    }
}
