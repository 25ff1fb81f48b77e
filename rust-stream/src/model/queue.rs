//! [`SqsQueue`]: a queue by name, how to create it when missing, its dead-letter queue, the topics
//! it is subscribed to, and the knobs of a subscription that reads it; and [`ConfigError`] (from
//! `config`), what is wrong with them.

use std::time::Duration;

pub use super::config::{ConfigError, ConfigErrors, MAX_BATCH_LINGER};
use super::error::TransportError;
use super::rules;
use super::sns_topic::TopicSubscription;
use super::wire::SendMessage;
use crate::retry::RetryPolicy;

/// A queue, named as in SQS: a name ending in `.fifo` is a FIFO queue.
///
/// ```
/// use std::time::Duration;
/// use rust_stream::SqsQueue;
///
/// let orders = SqsQueue::new("orders.fifo")
///     .create_if_missing()
///     .dead_letter("orders-dlq.fifo", 5)
///     .concurrency(32)
///     .visibility_timeout(Duration::from_secs(60));
/// assert!(orders.is_fifo());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct SqsQueue {
    pub(crate) name: String,
    pub(crate) create_if_missing: bool,
    pub(crate) content_based_dedup: bool,
    /// FIFO high throughput: `DeduplicationScope=messageGroup`, `FifoThroughputLimit=perMessageGroupId`.
    pub(crate) high_throughput: bool,
    pub(crate) dead_letter: Option<DeadLetter>,
    /// The topics SNS delivers to this queue, in the order declared, one per topic.
    pub(crate) subscriptions: Vec<TopicSubscription>,
    pub(crate) consumer: ConsumerSettings,
}

/// The longest visibility timeout a consumer's receive asks for: what a receive takes is hidden
/// for at most this long (or the subscription's visibility timeout, when shorter) unless the
/// consumer holds it on.
///
/// A server may go on with a long poll whose caller gave it up, and hand it messages nobody reads:
/// a stop gives up its receives in flight (so that it ends within its budget, whatever the long
/// poll), and a killed process leaves its own. What such a receive takes comes back after this
/// timeout. The consumer's heartbeat extends every message it still holds once half of this is
/// gone (5 s after the receive) to the subscription's visibility timeout, in batched
/// `ChangeMessageVisibilityBatch` calls: a message settled within 5 s costs no call more, one held
/// longer one extension more (shared by up to 10 messages), and an idle queue none.
///
/// That holds while SQS answers in well under 5 s. Once an extension has taken seconds, for the
/// next one to two minutes receives ask for enough to outlast an extension twice as slow (up to
/// the subscription's visibility timeout) and extensions are sent that much ahead: on a slow line
/// a held message does not time out again and again into other consumers' receives, each counted
/// against the queue's `maxReceiveCount`.
pub const RECEIVE_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(10);

/// The visibility timeout a receive asks for, for a subscription whose messages' is `visibility`,
/// when a held message's extension must be sent with `reserve` of its visibility left (nothing on
/// a line that answers quickly): see [`RECEIVE_VISIBILITY_TIMEOUT`]. Whole seconds, as SQS takes
/// it, rounded up.
pub(crate) fn receive_visibility(visibility: Duration, reserve: Duration) -> Duration {
    let asked = visibility.min(RECEIVE_VISIBILITY_TIMEOUT.max(reserve));
    let seconds = asked.as_secs() + u64::from(asked.subsec_nanos() > 0);
    Duration::from_secs(seconds.min(visibility.as_secs().max(1)))
}

/// The attributes of a high-throughput FIFO queue ([`SqsQueue::high_throughput`]), both needed
/// (SQS takes `perMessageGroupId` only with `messageGroup`): the throughput quota per message
/// group, deduplication within it.
pub(crate) const HIGH_THROUGHPUT_FIFO: [(&str, &str); 2] = [
    ("DeduplicationScope", "messageGroup"),
    ("FifoThroughputLimit", "perMessageGroupId"),
];

/// Most handlers one subscription runs at once.
pub(crate) const MAX_CONCURRENCY: usize = 100_000;
/// Most receive loops of one subscription.
pub(crate) const MAX_POLLERS: usize = 1_000;
/// Receives in flight a subscription may reach unless told otherwise: as many as 16 plain
/// receive-and-delete loops, which at 20 ms a call consume about 3,500 messages a second.
pub(crate) const DEFAULT_POLLERS: usize = 16;

/// Where a subscription's failed messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeadLetter {
    pub(crate) queue: String,
    pub(crate) max_receive_count: u32,
}

/// How a subscription reads its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConsumerSettings {
    pub(crate) concurrency: usize,
    pub(crate) batch_size: usize,
    pub(crate) wait: Duration,
    /// `None` takes the queue's own `VisibilityTimeout`.
    pub(crate) visibility_timeout: Option<Duration>,
    /// The most pollers receiving at once; one always does (see `engine::poll`).
    pub(crate) pollers: usize,
    /// How long a failed message waits before its next attempt.
    pub(crate) retry: RetryPolicy,
    /// How long one handler call may run before it is cancelled and its message retried.
    pub(crate) handler_timeout: Option<Duration>,
    /// FIFO: how many handled messages of a group its lane deletes in one call, at most.
    pub(crate) delete_run: usize,
    /// Whether the queue is subscribed to a topic with raw message delivery off, so that bodies
    /// may be SNS notification envelopes to unwrap (`context::Delivery`). Kept by
    /// [`SqsQueue::subscribed_to`], so that the consumer reads it with its other settings.
    pub(crate) reads_envelopes: bool,
    /// What the intake asks before each receive: the rate limit, the backpressure switch, the
    /// per-key limit. Boxed: most subscriptions have none, and every queue declaration carries it.
    pub(crate) flow: Box<super::flow::Flow>,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self {
            concurrency: 10,
            batch_size: 10,
            wait: Duration::from_secs(20),
            visibility_timeout: None,
            pollers: DEFAULT_POLLERS,
            retry: RetryPolicy::default(),
            handler_timeout: None,
            delete_run: rules::MAX_BATCH_ENTRIES,
            reads_envelopes: false,
            flow: Box::default(),
        }
    }
}

impl SqsQueue {
    /// Checks a message against every send rule for this queue, taking messages of up to
    /// `maximum_message_size` bytes, and deduplicates by content as `content_based_dedup` says
    /// when its own attribute could be read (the declaration decides otherwise: a
    /// publisher declared `.content_based_dedup()` for a queue without it would have every message
    /// refused by SQS; here each is refused before the call, saying so).
    pub(crate) fn check_message(
        &self,
        message: &SendMessage,
        maximum_message_size: usize,
        content_based_dedup: Option<bool>,
    ) -> Result<(), TransportError> {
        let target = rules::SendTarget {
            queue: &self.name,
            fifo: self.is_fifo(),
            content_based_dedup: content_based_dedup.unwrap_or(self.content_based_dedup),
            maximum_message_size,
        };
        rules::check_send(message, target).map(drop)
    }

    /// The queue of this name. Nothing is checked until the app runs, when every problem is
    /// reported at once, before any network call.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            create_if_missing: false,
            content_based_dedup: false,
            high_throughput: false,
            dead_letter: None,
            subscriptions: Vec::new(),
            consumer: ConsumerSettings::default(),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the queue is FIFO (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        rules::is_fifo_name(&self.name)
    }

    /// Create the queue when it does not exist: FIFO on a `.fifo` name, with the dead-letter
    /// queue (created likewise) as its redrive policy. Without this, a missing queue is an error
    /// when the app starts.
    pub fn create_if_missing(mut self) -> Self {
        self.create_if_missing = true;
        self
    }

    /// On a FIFO queue: deduplicate by the body's SHA-256 instead of generated ids, when created
    /// here, and when publishing without a `dedup_id`.
    pub fn content_based_dedup(mut self) -> Self {
        self.content_based_dedup = true;
        self
    }

    /// On a FIFO queue: high throughput, SQS's `DeduplicationScope=messageGroup` and
    /// `FifoThroughputLimit=perMessageGroupId`, set when the queue is created here. The queue's
    /// throughput quota then applies per message group instead of to the whole queue (see
    /// `docs/fifo.md`, "Throughput"), and a deduplication id counts within its message group
    /// only: the same id sent in another group within the five minutes is a new message.
    ///
    /// A dead-letter queue created here (`.dead_letter(..)` with `.create_if_missing()`) is made
    /// high throughput too, so that a burst of failures reaches it at this queue's rate. An
    /// existing queue without the two attributes is a startup warning naming each (the
    /// consumer works either way; the throughput and the deduplication differ). A standard queue
    /// has neither: declared on one, the app does not start (`ConfigError::HighThroughput`).
    pub fn high_throughput(mut self) -> Self {
        self.high_throughput = true;
        self
    }

    /// The dead-letter queue, and how many attempts a message gets before it goes there.
    ///
    /// The consumer moves a message there itself once it has had `max_receive_count` attempts
    /// (its earlier receives plus the retries in place of this consumer), when its handler asks
    /// with `HandlerOutcome::dead_letter`, and when its body does not decode. This works on a
    /// queue that already exists; when the queue is created here, its `RedrivePolicy` gets the
    /// same queue and a `maxReceiveCount` of `max_receive_count` +
    /// [`REDRIVE_MARGIN`](crate::retry::REDRIVE_MARGIN), as a backstop for consumers that crash:
    /// receives that were no attempt (a graceful stop giving back what it could not start) never
    /// move a message there. An existing queue whose `maxReceiveCount` is lower is a startup
    /// warning with the number to set. Must be FIFO for a FIFO queue.
    ///
    /// Without it, the queue's own `RedrivePolicy` (read at startup) decides both.
    pub fn dead_letter(mut self, queue: impl Into<String>, max_receive_count: u32) -> Self {
        self.dead_letter = Some(DeadLetter {
            queue: queue.into(),
            max_receive_count,
        });
        self
    }

    /// Subscribe the queue to a topic: SNS delivers the topic's messages (those its filter policy
    /// accepts) to this queue. A queue may be subscribed to several topics, each once; the
    /// topic is declared with the subscription. A FIFO queue takes FIFO topics only. See
    /// [`TopicSubscription`] for raw delivery and filter policies; a bare [`SnsTopic`] is a
    /// subscription with SNS's defaults.
    ///
    /// A subscriber of a queue with at least one subscription whose raw message delivery is off
    /// reads each body that is an SNS notification envelope as the message inside it, with the
    /// publish's attributes as headers and the notification in [`Context::sns`]; any other body
    /// (a raw delivery, a message sent to the queue directly) is read as it is.
    ///
    /// [`SnsTopic`]: super::SnsTopic
    /// [`Context::sns`]: crate::Context::sns
    pub fn subscribed_to(mut self, subscription: impl Into<TopicSubscription>) -> Self {
        let subscription = subscription.into();
        self.consumer.reads_envelopes |= !subscription.raw_message_delivery;
        // The same subscription declared twice is one; a different one is reported at start.
        if !self.subscriptions.contains(&subscription) {
            self.subscriptions.push(subscription);
        }
        self
    }

    /// The topics this queue is subscribed to, in the order declared.
    pub fn subscriptions(&self) -> &[TopicSubscription] {
        &self.subscriptions
    }

    /// How many handlers run at once, 1–100,000 (default 10). On a FIFO queue each group still
    /// runs one message at a time, so this is how many groups run at once; the consumer holds up to
    /// a receive batch of each (a receive hands out a run of one group's messages) and receives new
    /// groups while fewer than this many run.
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.consumer.concurrency = handlers;
        self
    }

    /// Messages per receive, 1–10 (default 10).
    pub fn batch_size(mut self, messages: usize) -> Self {
        self.consumer.batch_size = messages;
        self
    }

    /// How long a receive waits for messages (long poll): whole seconds, up to 20 s (default 20 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.consumer.wait = wait;
        self
    }

    /// The visibility timeout of received messages (default: the queue's own). Handlers that run
    /// longer than half of it get it extended.
    ///
    /// A receive asks for at most [`RECEIVE_VISIBILITY_TIMEOUT`] (10 s), and the consumer extends
    /// what it still holds 5 s after the receive to this timeout: a receive whose answer never
    /// reaches the consumer (given up at a stop, or in flight when the process was killed) hides
    /// what it took for no longer than that.
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.consumer.visibility_timeout = Some(timeout);
        self
    }

    /// The most receives in flight at once, 1–1,000 (default 16). How many run follows the
    /// demand: one long poll is always out (an idle queue costs one receive per `wait`); each
    /// receive that comes back full while a handler slot is free lets one more poller receive, up
    /// to this; each that comes back empty (or fails) stops one, down to the one. Under a backlog
    /// the receives so double each round trip: at 20 ms a call, 16 reach about what 16 plain
    /// receive-and-delete loops do. The `rust_stream.pollers.active` gauge shows how many may
    /// receive now.
    ///
    /// It is the most rather than the fewest because it bounds what the subscription holds: up
    /// to `concurrency` messages (on FIFO, a batch for each) plus a batch for each poller
    /// receiving, and the receives SQS sees at once; a bound is what a setting had to keep, and
    /// a fewest would cost an idle queue a long poll per poller. Set it lower to hold fewer
    /// messages (1: one receive at a time, as before the pollers scaled), higher for more calls
    /// in flight.
    pub fn pollers(mut self, pollers: usize) -> Self {
        self.consumer.pollers = pollers;
        self
    }

    /// How long a failed message waits before its next attempt (default: 1 s doubling to
    /// 5 minutes, with jitter). See [`RetryPolicy`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.consumer.retry = policy;
        self
    }

    /// How long one handler call may run (default: no limit). A call still running then is
    /// cancelled and its message retried as the [`RetryPolicy`] says.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.consumer.handler_timeout = Some(timeout);
        self
    }

    /// FIFO: how many handled messages of a group its lane deletes in one call, at most, 1–10
    /// (default 10). A lane deletes what it handled of its group together (its *run*), so a busy
    /// group costs a delete call a run rather than one a message; the price is that a consumer
    /// killed mid-run handles the run's messages again. `1` confirms each delete before the
    /// group's next message starts: a kill then repeats at most the message under way, and a busy
    /// group makes a delete call, a round trip, per message. See `docs/fifo.md`, "Runs and
    /// replays". No effect on a standard queue, whose deletes never hold up a handler.
    pub fn delete_run(mut self, messages: usize) -> Self {
        self.consumer.delete_run = messages;
        self
    }

    /// Receives at most `limit` messages (a number: that many a second, or a shared
    /// [`RateLimit`](crate::model::flow::RateLimit)): each receive asks SQS for no more messages than the
    /// limit has tokens for, and none is made while it has none, so no message waits for the
    /// limit with its lease running. A subscription's own limit is named after its queue. See
    /// [`flow`](crate::flow).
    ///
    /// ```
    /// use rust_stream::SqsQueue;
    ///
    /// let charges = SqsQueue::new("charges").rate_limit(50);
    /// # let _ = charges;
    /// ```
    pub fn rate_limit(mut self, limit: impl Into<super::flow::RateLimit>) -> Self {
        self.consumer.flow.rate_limit = Some(limit.into().named_if_unnamed(&self.name));
        self
    }

    /// Holds at most `most` messages of each key for running at once: by message group, a
    /// header or a function of the message ([`InFlightKey`](crate::model::flow::InFlightKey)), so that
    /// one tenant with most of the backlog cannot take every handler slot. Standard queues only
    /// (a FIFO queue already runs each group one message at a time).
    ///
    /// SQS cannot filter a receive by key. A received message whose key is at its limit waits
    /// for it, held (its visibility extended), while its key has fewer than `most` waiting and
    /// the subscription fewer than `concurrency` in all, in room of their own; beyond that it is
    /// given back at once, hidden for 1 s doubling with each receive of it up to 60 s. That is no
    /// attempt (the retry policy does not count it), but SQS counts the receive towards the
    /// queue's `maxReceiveCount`. See `docs/flow-control.md`.
    ///
    /// ```
    /// use rust_stream::flow::InFlightKey;
    /// use rust_stream::SqsQueue;
    ///
    /// let emails = SqsQueue::new("emails").max_in_flight_per(InFlightKey::header("tenant"), 2);
    /// # let _ = emails;
    /// ```
    pub fn max_in_flight_per(mut self, key: super::flow::InFlightKey, most: usize) -> Self {
        self.consumer.flow.per_key = Some(super::flow::PerKey { key, most });
        self
    }

    /// Makes no receive while `switch` is tripped; messages already held go on, their visibility
    /// extended. See [`Backpressure`](crate::model::flow::Backpressure).
    pub fn backpressure(mut self, switch: &super::flow::Backpressure) -> Self {
        self.consumer.flow.backpressure = Some(switch.clone());
        self
    }

    /// The queue as it is published to: a dead-letter queue, or a publisher's queue, shares the
    /// creation settings of this one: created if missing, and high throughput when this one is
    /// (a burst of failures at this queue's rate would otherwise meet a plain FIFO queue's quota
    /// on its way to the dead-letter queue).
    pub(crate) fn dead_letter_queue(&self) -> Option<SqsQueue> {
        let dead_letter = self.dead_letter.as_ref()?;
        let mut queue = SqsQueue::new(dead_letter.queue.clone());
        queue.create_if_missing = self.create_if_missing;
        queue.high_throughput = self.high_throughput && queue.is_fifo();
        Some(queue)
    }

    /// Every problem with this queue's settings, so `run` reports them all at once.
    pub(crate) fn problems(&self, problems: &mut Vec<ConfigError>) {
        let queue = || self.name.clone();
        if let Err(error) = rules::check_queue_name(&self.name) {
            problems.push(ConfigError::QueueName {
                queue: queue(),
                reason: error.to_string(),
            });
        }
        let consumer = &self.consumer;
        if !(1..=rules::MAX_BATCH_ENTRIES).contains(&consumer.batch_size) {
            problems.push(ConfigError::BatchSize {
                queue: queue(),
                got: consumer.batch_size,
            });
        }
        if !(1..=rules::MAX_BATCH_ENTRIES).contains(&consumer.delete_run) {
            problems.push(ConfigError::DeleteRun {
                queue: queue(),
                got: consumer.delete_run,
            });
        }
        // SQS takes whole seconds: a fraction would be cut off without a word, and a wait under a
        // second would become a short poll, a call per empty receive.
        if consumer.wait > Duration::from_secs(rules::MAX_WAIT_TIME_SECONDS as u64)
            || consumer.wait.subsec_nanos() != 0
        {
            problems.push(ConfigError::Wait {
                queue: queue(),
                got: consumer.wait,
            });
        }
        if let Some(timeout) = consumer.visibility_timeout {
            let max = Duration::from_secs(rules::MAX_VISIBILITY_TIMEOUT_SECONDS as u64);
            // SQS takes whole seconds; a fraction would be cut off without a word.
            if timeout < Duration::from_secs(1) || timeout > max || timeout.subsec_nanos() != 0 {
                problems.push(ConfigError::VisibilityTimeout {
                    queue: queue(),
                    got: timeout,
                });
            }
        }
        // Upper bounds keep the consumer's capacity (a message per handler, a batch per handler on
        // FIFO, plus a batch per poller) far from overflowing, and a typo such as `usize::MAX` from
        // spawning pollers until memory runs out.
        if !(1..=MAX_CONCURRENCY).contains(&consumer.concurrency) {
            problems.push(ConfigError::Concurrency {
                queue: queue(),
                got: consumer.concurrency,
            });
        }
        if !(1..=MAX_POLLERS).contains(&consumer.pollers) {
            problems.push(ConfigError::Pollers {
                queue: queue(),
                got: consumer.pollers,
            });
        }
        if let Some(reason) = consumer.retry.problem(Duration::from_secs(
            rules::MAX_VISIBILITY_TIMEOUT_SECONDS as u64,
        )) {
            problems.push(ConfigError::Retry {
                queue: queue(),
                reason,
            });
        }
        if consumer
            .handler_timeout
            .is_some_and(|timeout| timeout.is_zero())
        {
            problems.push(ConfigError::HandlerTimeout { queue: queue() });
        }
        if let Some(problem) = consumer
            .flow
            .rate_limit
            .as_ref()
            .and_then(super::flow::RateLimit::problem)
        {
            problems.push(problem);
        }
        if let Some(per_key) = &consumer.flow.per_key {
            if per_key.most == 0 || self.is_fifo() {
                problems.push(ConfigError::InFlightPerKey {
                    queue: queue(),
                    reason: if per_key.most == 0 {
                        "a limit of 0 messages a key would never run one; give at least 1"
                    } else {
                        "a FIFO queue already runs each group one message at a time, and a key \
                         across groups would hold messages out of their group's order; read a \
                         standard queue"
                    },
                });
            }
        }
        if let Some(dead_letter) = &self.dead_letter {
            if let Err(error) = rules::check_queue_name(&dead_letter.queue) {
                problems.push(ConfigError::QueueName {
                    queue: dead_letter.queue.clone(),
                    reason: error.to_string(),
                });
            }
            if !(1..=1000).contains(&dead_letter.max_receive_count) {
                problems.push(ConfigError::MaxReceiveCount {
                    queue: queue(),
                    got: dead_letter.max_receive_count,
                });
            }
            if rules::is_fifo_name(&dead_letter.queue) != self.is_fifo() {
                problems.push(ConfigError::DeadLetterType {
                    queue: queue(),
                    dead_letter: dead_letter.queue.clone(),
                });
            }
            if dead_letter.queue == self.name {
                problems.push(ConfigError::DeadLetterType {
                    queue: queue(),
                    dead_letter: dead_letter.queue.clone(),
                });
            }
        }
        if self.content_based_dedup && !self.is_fifo() {
            problems.push(ConfigError::ContentBasedDedup { queue: queue() });
        }
        if self.high_throughput && !self.is_fifo() {
            problems.push(ConfigError::HighThroughput { queue: queue() });
        }
        for (index, subscription) in self.subscriptions.iter().enumerate() {
            let topic = &subscription.topic.name;
            let earlier = &self.subscriptions[..index];
            match earlier
                .iter()
                .filter(|other| &other.topic.name == topic)
                .count()
            {
                0 => subscription.problems(&self.name, self.is_fifo(), problems),
                // One problem however often the topic comes back.
                1 => problems.push(ConfigError::SubscribedTwice {
                    queue: queue(),
                    topic: topic.clone(),
                }),
                _ => {}
            }
        }
    }
}

impl From<&str> for SqsQueue {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<String> for SqsQueue {
    fn from(name: String) -> Self {
        Self::new(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_of_a_queue_is_reported_at_once() {
        let queue = SqsQueue::new("orders.fifo")
            .batch_size(11)
            .wait(Duration::from_secs(21))
            .concurrency(0)
            .pollers(0)
            .visibility_timeout(Duration::ZERO)
            .dead_letter("dlq", 0);
        let mut problems = Vec::new();
        queue.problems(&mut problems);
        assert_eq!(problems.len(), 7, "{problems:#?}");
        let shown = ConfigErrors(problems).to_string();
        assert!(shown.contains("batch size 11 is outside 1..=10"), "{shown}");
        assert!(shown.contains("`.fifo` dead-letter queue"), "{shown}");
    }

    #[test]
    fn a_queue_subscribed_to_a_topic_twice_differently_is_one_problem() {
        let posted = || crate::model::TopicSubscription::new("posted");
        let queue = SqsQueue::new("ledger")
            .subscribed_to(posted())
            .subscribed_to(posted())
            .subscribed_to(posted().raw_message_delivery(true))
            .subscribed_to(posted().filter_policy(r#"{"kind": ["a"]}"#));
        assert_eq!(
            queue.subscriptions().len(),
            3,
            "the same twice is kept once"
        );
        let mut problems = Vec::new();
        queue.problems(&mut problems);
        let [problem @ ConfigError::SubscribedTwice { .. }] = problems.as_slice() else {
            panic!("{problems:#?}");
        };
        let shown = problem.to_string();
        assert!(
            shown.contains("`ledger`") && shown.contains("`posted` twice"),
            "{shown}"
        );
    }

    #[test]
    fn a_per_key_limit_of_0_or_on_a_fifo_queue_is_a_problem() {
        use crate::model::flow::InFlightKey;
        let problems = |queue: SqsQueue| {
            let mut problems = Vec::new();
            queue.problems(&mut problems);
            ConfigErrors(problems).to_string()
        };
        let zero = problems(SqsQueue::new("orders").max_in_flight_per(InFlightKey::group(), 0));
        assert!(
            zero.contains("queue `orders`: `.max_in_flight_per(..)`: a limit of 0"),
            "{zero}"
        );
        let fifo = problems(
            SqsQueue::new("orders.fifo").max_in_flight_per(InFlightKey::header("tenant"), 2),
        );
        assert!(fifo.contains("read a standard queue"), "{fifo}");
        let sound = problems(SqsQueue::new("orders").max_in_flight_per(InFlightKey::group(), 2));
        assert!(sound.starts_with("0 setting problem(s)"), "{sound}");
    }

    #[test]
    fn a_sound_queue_has_no_problems() {
        let mut problems = Vec::new();
        SqsQueue::new("orders.fifo")
            .dead_letter("orders-dlq.fifo", 3)
            .content_based_dedup()
            .subscribed_to(crate::model::SnsTopic::new("orders.fifo"))
            .problems(&mut problems);
        assert!(problems.is_empty(), "{problems:?}");
    }
}
