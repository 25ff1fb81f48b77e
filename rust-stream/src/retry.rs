//! Retries: [`RetryPolicy`], how long a failed message waits before its next attempt, and the one
//! place where the engine decides between retrying a message and dead-lettering it.
//!
//! ```
//! use std::time::Duration;
//! use rust_stream::{RetryPolicy, SqsQueue};
//!
//! // 2 s, 4 s, 8 s, ... up to a minute, each with jitter.
//! let policy = RetryPolicy::exponential(Duration::from_secs(2), Duration::from_secs(60));
//! let orders = SqsQueue::new("orders.fifo").retry(policy).dead_letter("orders-dlq.fifo", 5);
//! # let _ = orders;
//! ```
//!
//! Every failure takes the same path: a handler's `Err`, [`HandlerOutcome::retry`], a panic, a
//! handler timeout, an output or dead-letter copy that cannot be sent, and an undecodable body
//! without a dead-letter queue. The message's *attempts* are its earlier receives plus the
//! attempts this consumer made since it received it. Once they reach the subscription's
//! `max_receive_count` (from [`SqsQueue::dead_letter`](crate::SqsQueue::dead_letter), or else from
//! the queue's own `RedrivePolicy`), the message is dead-lettered; until then it is retried after
//! the policy's delay, or after the delay [`HandlerOutcome::retry_after`] asked for.
//!
//! On a standard queue a retry is a visibility change to the delay. On a FIFO queue the consumer
//! keeps the group (its later messages stay held, and the heartbeat extends them) and runs the
//! message again in place after the delay, so nothing later in the group runs first and no other
//! message of the group collects receives.
//!
//! [`HandlerOutcome::retry`]: crate::HandlerOutcome::retry
//! [`HandlerOutcome::retry_after`]: crate::HandlerOutcome::retry_after

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How long a failed message waits before its next attempt: exponential backoff with jitter.
///
/// The delay after the `n`th failed attempt is drawn between half and all of
/// `initial × 2^(n-1)`, capped at `max`, so retries of many messages spread out instead of
/// marching in step, and until the cap each delay is at least as long as the one before. The
/// default is 1 s doubling to 5 minutes.
///
/// ```
/// use std::time::Duration;
/// use rust_stream::RetryPolicy;
///
/// let policy = RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(300)).seeded(7);
/// let first = policy.delay(1);
/// assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
/// assert!(policy.delay(20) <= Duration::from_secs(300));
/// ```
#[derive(Clone)]
#[must_use]
pub struct RetryPolicy {
    initial: Duration,
    max: Duration,
    jitter: bool,
    /// Shared by clones, so a seeded policy yields one reproducible sequence.
    random: Arc<Mutex<fastrand::Rng>>,
}

impl RetryPolicy {
    /// The first retry after `initial`, doubling up to `max`.
    pub fn exponential(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            jitter: true,
            random: Arc::new(Mutex::new(fastrand::Rng::new())),
        }
    }

    /// Every retry after the same `delay` (with jitter down to half of it unless turned off).
    pub fn fixed(delay: Duration) -> Self {
        Self::exponential(delay, delay)
    }

    /// Without jitter: each delay is exactly `initial × 2^(n-1)`, capped.
    pub fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self
    }

    /// Jitter from a generator seeded with `seed`, so a test sees the same delays every run.
    pub fn seeded(self, seed: u64) -> Self {
        *self.random.lock().unwrap_or_else(PoisonError::into_inner) =
            fastrand::Rng::with_seed(seed);
        self
    }

    /// The first delay.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The longest delay.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The delay after the `attempt`th failed attempt (1 for the first failure).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        let ceiling = self
            .initial
            .saturating_mul(1u32 << doublings)
            .min(self.max)
            .max(self.initial.min(self.max));
        if !self.jitter {
            return ceiling;
        }
        let half = ceiling / 2;
        let nanos = u64::try_from((ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        let drawn = self
            .random
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .u64(0..=nanos);
        half + Duration::from_nanos(drawn)
    }

    /// What is wrong with the policy, for the startup check; `cap` is the longest delay the
    /// queue service can hold a message back for.
    pub(crate) fn problem(&self, cap: Duration) -> Option<String> {
        if self.initial.is_zero() {
            Some("the first delay is 0, which would retry at once; give it at least 1 ms".into())
        } else if self.max < self.initial {
            Some(format!(
                "the longest delay {:?} is shorter than the first {:?}; make the longest at least the first",
                self.max, self.initial
            ))
        } else if self.max > cap {
            Some(format!(
                "the longest delay {:?} is over SQS's 12-hour visibility cap; keep it within 12 h",
                self.max
            ))
        } else {
            None
        }
    }
}

impl Default for RetryPolicy {
    /// 1 s doubling to 5 minutes, with jitter.
    fn default() -> Self {
        Self::exponential(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("initial", &self.initial)
            .field("max", &self.max)
            .field("jitter", &self.jitter)
            .finish()
    }
}

impl PartialEq for RetryPolicy {
    fn eq(&self, other: &Self) -> bool {
        (self.initial, self.max, self.jitter) == (other.initial, other.max, other.jitter)
    }
}

impl Eq for RetryPolicy {}

/// What becomes of a message after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Attempt it again after this delay.
    RetryAfter(Duration),
    /// It has had its attempts: move it to the dead-letter queue.
    DeadLetter,
    /// It has had its attempts but the consumer has no dead-letter queue to move it to: hand it
    /// back to the queue, whose redrive policy moves it on its next receive.
    LeaveToRedrive(Duration),
}

/// The one retry decision of a subscription: its policy and how many attempts a message gets.
#[derive(Debug, Clone)]
pub(crate) struct Retries {
    pub(crate) policy: RetryPolicy,
    /// Attempts before a message is dead-lettered; `None` retries for ever.
    pub(crate) max_attempts: Option<u32>,
    /// Whether the consumer can move a message to a dead-letter queue itself.
    pub(crate) can_dead_letter: bool,
}

impl Retries {
    /// Decides after a failed attempt. `attempts` counts this one; `asked` is the delay a
    /// handler's `retry_after` asked for, which overrides the policy's.
    pub(crate) fn after_failure(&self, attempts: u32, asked: Option<Duration>) -> AfterFailure {
        let delay = asked.unwrap_or_else(|| self.policy.delay(attempts));
        match self.max_attempts {
            Some(max) if attempts >= max && self.can_dead_letter => AfterFailure::DeadLetter,
            Some(max) if attempts >= max => AfterFailure::LeaveToRedrive(delay),
            _ => AfterFailure::RetryAfter(delay),
        }
    }
}

/// The wait before the `attempt`th retry of an SQS call the engine makes itself (a receive, a
/// batch call): the same backoff as a message's, from `base` doubling to `cap`, with jitter.
pub(crate) fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    RetryPolicy::exponential(base, cap).delay(attempt)
}

/// A message's attempts so far: its earlier receives plus this consumer's attempts since it was
/// received (`local`, 1 for the first).
pub(crate) fn attempts(receive_count: u32, local: u32) -> u32 {
    receive_count.max(1).saturating_sub(1).saturating_add(local)
}

/// How many receives above a subscription's attempts a queue's `RedrivePolicy` leaves: receives
/// that are no attempt (a graceful stop gives back what it could not start, a consumer crash, a
/// receive whose answer was lost) must not move a message the consumer has not given up on. It is
/// also the end of a crash loop: the consumer counts only the attempts it knows of (on FIFO, its
/// own process's), so a message that crashes every consumer is moved by SQS after `n + 10`
/// receives.
pub const REDRIVE_MARGIN: u32 = 10;

/// The `maxReceiveCount` a queue's redrive needs to be a backstop for a subscription that makes
/// `max_attempts` attempts: [`REDRIVE_MARGIN`] more receives, within SQS's 1,000.
pub fn redrive_backstop(max_attempts: u32) -> u32 {
    max_attempts.saturating_add(REDRIVE_MARGIN).min(1000)
}

/// How many message ids a [`MessageTally`] remembers.
const REMEMBERED_IDS: usize = 10_000;

/// A bounded tally of message ids, for what a consumer must remember of a message between its
/// receives: on a standard queue the receives it gave back without attempting the message (SQS
/// counts each, and the consumer's count of attempts takes them off again), on FIFO the attempts
/// it made in receives it gave back (its count of attempts starts from them). The oldest ids are
/// forgotten first.
#[derive(Debug, Default)]
pub(crate) struct MessageTally {
    remembered: std::sync::Mutex<Tally>,
    /// Nothing was ever noted: the common case reads no lock.
    any: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Tally {
    counts: std::collections::HashMap<String, u32>,
    order: std::collections::VecDeque<String>,
}

impl MessageTally {
    /// Counts the message once more.
    pub(crate) fn note(&self, message_id: &str) {
        self.note_all(std::iter::once(message_id));
    }

    /// As [`note`](Self::note), for each of `message_ids`.
    pub(crate) fn note_all<'a>(&self, message_ids: impl IntoIterator<Item = &'a str>) {
        for id in message_ids {
            self.add(id, 1);
        }
    }

    /// Counts the message `times` more.
    pub(crate) fn add(&self, message_id: &str, times: u32) {
        if times == 0 {
            return;
        }
        let mut remembered = self
            .remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.any.store(true, std::sync::atomic::Ordering::Release);
        match remembered.counts.get_mut(message_id) {
            Some(count) => *count = count.saturating_add(times),
            None => {
                if remembered.order.len() >= REMEMBERED_IDS {
                    if let Some(oldest) = remembered.order.pop_front() {
                        remembered.counts.remove(&oldest);
                    }
                }
                remembered.counts.insert(message_id.to_owned(), times);
                remembered.order.push_back(message_id.to_owned());
            }
        }
    }

    /// Forgets the message: its count is 0 again.
    pub(crate) fn forget(&self, message_id: &str) {
        if !self.any.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let mut remembered = self
            .remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if remembered.counts.remove(message_id).is_some() {
            remembered.order.retain(|id| id != message_id);
        }
    }

    /// How often the message was noted (0 when never, or forgotten).
    pub(crate) fn count(&self, message_id: &str) -> u32 {
        if !self.any.load(std::sync::atomic::Ordering::Acquire) {
            return 0;
        }
        self.remembered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .counts
            .get(message_id)
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn delays_double_from_the_first_to_the_longest_without_jitter() {
        let policy = RetryPolicy::exponential(seconds(1), seconds(300)).without_jitter();
        let delays: Vec<u64> = (1..=11).map(|n| policy.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(policy.delay(u32::MAX), seconds(300));
        assert_eq!(policy.delay(0), seconds(1));
    }

    #[test]
    fn jittered_delays_stay_between_half_and_all_of_the_ceiling_and_never_shrink() {
        let policy = RetryPolicy::default().seeded(42);
        let mut last = Duration::ZERO;
        for attempt in 1..=40 {
            let ceiling = seconds(1)
                .saturating_mul(1 << (attempt - 1).min(31))
                .min(seconds(300));
            let delay = policy.delay(attempt);
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "{attempt}: {delay:?}"
            );
            if ceiling < seconds(300) {
                assert!(delay >= last, "{attempt}: {delay:?} after {last:?}");
            }
            last = delay;
        }
    }

    #[test]
    fn a_seeded_policy_repeats_its_sequence_and_jitter_spreads_it() {
        let sequence = |seed| {
            let policy = RetryPolicy::default().seeded(seed);
            (1..=8).map(|n| policy.delay(n)).collect::<Vec<_>>()
        };
        assert_eq!(sequence(1), sequence(1));
        assert_ne!(sequence(1), sequence(2));
        let first: std::collections::HashSet<_> = (0..20).map(|seed| sequence(seed)[0]).collect();
        assert!(
            first.len() > 10,
            "jitter should spread first delays: {first:?}"
        );
    }

    #[test]
    fn the_decision_retries_until_the_attempts_are_spent_then_dead_letters() {
        let retries = Retries {
            policy: RetryPolicy::default().without_jitter(),
            max_attempts: Some(3),
            can_dead_letter: true,
        };
        assert_eq!(
            retries.after_failure(1, None),
            AfterFailure::RetryAfter(seconds(1))
        );
        assert_eq!(
            retries.after_failure(2, None),
            AfterFailure::RetryAfter(seconds(2))
        );
        assert_eq!(retries.after_failure(3, None), AfterFailure::DeadLetter);
        assert_eq!(
            retries.after_failure(1, Some(seconds(60))),
            AfterFailure::RetryAfter(seconds(60))
        );
        let without_queue = Retries {
            can_dead_letter: false,
            ..retries.clone()
        };
        assert_eq!(
            without_queue.after_failure(3, None),
            AfterFailure::LeaveToRedrive(seconds(4))
        );
        let for_ever = Retries {
            max_attempts: None,
            ..retries
        };
        assert_eq!(
            for_ever.after_failure(1000, None),
            AfterFailure::RetryAfter(seconds(300))
        );
    }

    #[test]
    fn call_backoff_grows_to_its_cap_and_never_spins() {
        let base = Duration::from_millis(100);
        for attempt in 1..40 {
            let delay = backoff(attempt, base, seconds(5));
            let ceiling = base
                .saturating_mul(1 << (attempt - 1).min(31))
                .min(seconds(5));
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "{attempt}: {delay:?}"
            );
        }
    }

    #[test]
    fn attempts_count_earlier_receives_and_local_tries() {
        assert_eq!(attempts(1, 1), 1);
        assert_eq!(attempts(1, 3), 3);
        assert_eq!(attempts(3, 1), 3);
        assert_eq!(attempts(0, 1), 1);
        assert_eq!(attempts(u32::MAX, u32::MAX), u32::MAX);
    }

    #[test]
    fn a_tally_counts_ids_and_forgets_the_oldest_first() {
        let tally = MessageTally::default();
        assert_eq!(tally.count("m"), 0);
        tally.note("m");
        tally.note_all(["m", "n"]);
        assert_eq!(
            (tally.count("m"), tally.count("n"), tally.count("o")),
            (2, 1, 0)
        );
        for i in 0..REMEMBERED_IDS {
            tally.note(&i.to_string());
        }
        assert_eq!(tally.count("m"), 0, "the oldest ids are forgotten first");
        assert_eq!(tally.count(&(REMEMBERED_IDS - 1).to_string()), 1);
    }

    #[test]
    fn policies_that_would_spin_or_pass_the_cap_are_problems() {
        assert!(RetryPolicy::fixed(Duration::ZERO)
            .problem(seconds(43_200))
            .is_some());
        assert!(RetryPolicy::exponential(seconds(10), seconds(1))
            .problem(seconds(43_200))
            .is_some());
        assert!(RetryPolicy::exponential(seconds(1), seconds(50_000))
            .problem(seconds(43_200))
            .is_some());
        assert!(RetryPolicy::default().problem(seconds(43_200)).is_none());
    }
}
