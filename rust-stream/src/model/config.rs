//! [`ConfigError`]: what is wrong with a declaration (a queue, a topic, a subscription of a queue
//! to a topic, a broker setting), found before any network call; and [`ConfigErrors`], all of an
//! app's at once.
//!
//! The errors stand in a file of their own so that every declaration (`queue`, `sns_topic`)
//! reports in them without the declarations importing each other.

use std::fmt;
use std::time::Duration;

use super::filter_policy::FilterPolicyScope;

/// A setting that cannot work, found before any network call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The queue's name breaks SQS's naming rules.
    #[error("queue `{queue}`: {reason}")]
    QueueName {
        /// The queue.
        queue: String,
        /// What is wrong with the name.
        reason: String,
    },
    /// The receive batch size is outside 1..=10.
    #[error("queue `{queue}`: batch size {got} is outside 1..=10; change `.batch_size(..)`")]
    BatchSize {
        /// The queue.
        queue: String,
        /// The batch size given.
        got: usize,
    },
    /// A batch handler's batch is outside 1..=1,000 messages.
    #[error("queue `{queue}`: a batch handler's batch of {got} messages is outside 1..=1000; change `.batch({got}, ..)` (`batch(max = ..)`)")]
    BatchMax {
        /// The queue.
        queue: String,
        /// The most messages a call was given.
        got: usize,
    },
    /// A batch handler's window is longer than 5 minutes, the longest its messages wait to fill
    /// a call.
    #[error("queue `{queue}`: a batch handler's window of {got:?} is longer than {max:?}; shorten `.batch(.., window)` (`batch(window = ..)`)")]
    BatchWindow {
        /// The queue.
        queue: String,
        /// The window given.
        got: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// The FIFO delete run is outside 1..=10 (a `DeleteMessageBatch` takes up to 10).
    #[error("queue `{queue}`: delete run {got} is outside 1..=10 (a delete call takes up to 10 messages); change `.delete_run(..)`")]
    DeleteRun {
        /// The queue.
        queue: String,
        /// The run length given.
        got: usize,
    },
    /// The long-poll wait is over 20 s, or not a whole number of seconds.
    #[error("queue `{queue}`: wait {got:?} is not a whole number of seconds within SQS's 0..=20 s long poll; change `.wait(..)`")]
    Wait {
        /// The queue.
        queue: String,
        /// The wait given.
        got: Duration,
    },
    /// The long-poll wait is not shorter than the transport's bound on one call attempt, so every
    /// receive would be cut and retried.
    #[error("queue `{queue}`: wait {wait:?} is not shorter than the SQS client's attempt timeout {attempt_timeout:?}, so every long poll would be cut and retried; lower `.wait(..)` or raise `attempt_timeout(..)`")]
    WaitPastAttemptTimeout {
        /// The queue.
        queue: String,
        /// The wait given.
        wait: Duration,
        /// The transport's attempt timeout.
        attempt_timeout: Duration,
    },
    /// The visibility timeout is outside 1 s..=12 h, or not a whole number of seconds.
    #[error("queue `{queue}`: visibility timeout {got:?} is not a whole number of seconds within 1 s..=12 h; change `.visibility_timeout(..)`")]
    VisibilityTimeout {
        /// The queue.
        queue: String,
        /// The timeout given.
        got: Duration,
    },
    /// Concurrency is 0, which would never handle a message, or over 100,000.
    #[error("queue `{queue}`: concurrency {got} is outside 1..=100000; set `.concurrency(..)` within it")]
    Concurrency {
        /// The queue.
        queue: String,
        /// The concurrency given.
        got: usize,
    },
    /// Pollers are 0, which would never receive a message, or over 1,000.
    #[error("queue `{queue}`: {got} pollers is outside 1..=1000; set `.pollers(..)` within it")]
    Pollers {
        /// The queue.
        queue: String,
        /// The number of pollers given.
        got: usize,
    },
    /// A rate limit that cannot work: 0 messages, a period of zero, a burst of 0, or more than
    /// one message a nanosecond.
    #[error("rate limit `{limit}`: {reason}")]
    RateLimit {
        /// The limit's name (a subscription's own is named after its queue).
        limit: String,
        /// What is wrong, and what to give instead.
        reason: String,
    },
    /// A per-key in-flight limit that cannot work: 0 messages a key, or on a FIFO queue.
    #[error("queue `{queue}`: `.max_in_flight_per(..)`: {reason}")]
    InFlightPerKey {
        /// The queue.
        queue: String,
        /// What is wrong, and what to do.
        reason: &'static str,
    },
    /// The retry policy would retry at once or past SQS's limits.
    #[error("queue `{queue}`: retry policy: {reason}; change `.retry(..)`")]
    Retry {
        /// The queue.
        queue: String,
        /// What is wrong with the policy.
        reason: String,
    },
    /// A handler timeout of zero would cancel every call.
    #[error("queue `{queue}`: a handler timeout of 0 would cancel every call; give `.timeout(..)` a positive duration")]
    HandlerTimeout {
        /// The queue.
        queue: String,
    },
    /// maxReceiveCount is outside 1..=1000.
    #[error(
        "queue `{queue}`: max receive count {got} is outside 1..=1000; change `.dead_letter(..)`"
    )]
    MaxReceiveCount {
        /// The queue.
        queue: String,
        /// The count given.
        got: u32,
    },
    /// The dead-letter queue is the queue itself or of the other type.
    #[error(
        "queue `{queue}`: dead-letter queue `{dead_letter}` must be another queue of the same type \
         (a FIFO queue needs a `.fifo` dead-letter queue, a standard queue a standard one)"
    )]
    DeadLetterType {
        /// The queue.
        queue: String,
        /// The dead-letter queue given.
        dead_letter: String,
    },
    /// Content-based deduplication asked of a standard queue.
    #[error("queue `{queue}`: content-based deduplication needs a FIFO queue (a name ending in `.fifo`)")]
    ContentBasedDedup {
        /// The queue.
        queue: String,
    },
    /// A backlog interval under a second (`SqsBroker::backlog_interval`).
    #[error("backlog interval {got:?} is under a second: each interval costs a GetQueueAttributes call a queue; use at least 1 s, or `.no_backlog_gauges()`")]
    BacklogInterval {
        /// The interval given.
        got: std::time::Duration,
    },
    /// High-throughput FIFO asked of a standard queue.
    #[error("queue `{queue}`: high throughput is a FIFO queue's setting (a name ending in `.fifo`); a standard queue's throughput is not limited per queue, remove `.high_throughput()`")]
    HighThroughput {
        /// The queue.
        queue: String,
    },
    /// A subscriber reads state the app did not register.
    #[error("queue `{queue}`: the subscriber reads state `{type_name}`, which the app does not have; add `.with_state(..)` to the app")]
    MissingState {
        /// The queue.
        queue: String,
        /// The state's type.
        type_name: &'static str,
    },
    /// Two declarations give one queue different settings.
    #[error("queue `{queue}` is declared with two different {setting}s, by {first} and by {second}; declare it the same way in both places")]
    ConflictingDeclarations {
        /// The queue.
        queue: String,
        /// The setting they disagree on.
        setting: &'static str,
        /// Who declared it first.
        first: String,
        /// Who declared it otherwise.
        second: String,
    },
    /// A subscription names a queue another subscription of the app already reads, for messages
    /// of the same type (subscribers of different types on one queue are routed by type).
    #[error("queue `{queue}` has two subscriptions for one message type; give each queue one subscriber per message type")]
    DuplicateSubscription {
        /// The queue.
        queue: String,
    },
    /// The broker's queue-name prefix or suffix makes a name SQS refuses: a character SQS does
    /// not take, or a name over 80 characters.
    #[error("queue `{queue}` is named `{named}` on this broker (its queue-name prefix and suffix), which SQS refuses: {reason}")]
    QueueNaming {
        /// The queue, as declared.
        queue: String,
        /// The name the prefix and suffix make of it.
        named: String,
        /// What is wrong with it, and how to fix it.
        reason: String,
    },
    /// The topic's name breaks SNS's naming rules.
    #[error("topic `{topic}`: {reason}")]
    TopicName {
        /// The topic.
        topic: String,
        /// What is wrong with the name, and how to fix it.
        reason: String,
    },
    /// Content-based deduplication asked of a standard topic.
    #[error("topic `{topic}`: content-based deduplication needs a FIFO topic (a name ending in `.fifo`); remove `.content_based_deduplication(true)` or make the topic FIFO")]
    TopicContentBasedDedup {
        /// The topic.
        topic: String,
    },
    /// The broker's name prefix or suffix makes a topic name SNS refuses: a character SNS does
    /// not take, or a name over 256 characters.
    #[error("topic `{topic}` is named `{named}` on this broker (its name prefix and suffix), which SNS refuses: {reason}")]
    TopicNaming {
        /// The topic, as declared.
        topic: String,
        /// The name the prefix and suffix make of it.
        named: String,
        /// What is wrong with it, and how to fix it.
        reason: String,
    },
    /// A subscription's filter policy breaks SNS's rules or limits.
    #[error("queue `{queue}`, subscribed to topic `{topic}`: {reason}; change `{setter}`", setter = filter_policy_setter(*.scope))]
    FilterPolicy {
        /// The subscribed queue.
        queue: String,
        /// The topic.
        topic: String,
        /// What the policy was to match: attributes or the body.
        scope: FilterPolicyScope,
        /// What is wrong with the policy (a [`FilterPolicyError`](super::filter_policy::FilterPolicyError)'s
        /// message), and how to fix it.
        reason: String,
    },
    /// A FIFO queue subscribed to a standard topic, which SNS refuses.
    #[error("queue `{queue}` is FIFO and topic `{topic}` is standard, and SNS subscribes a FIFO queue to a FIFO topic only: subscribe it to a FIFO topic (a name ending in `.fifo`), or subscribe a standard queue")]
    FifoQueueOnStandardTopic {
        /// The queue.
        queue: String,
        /// The topic.
        topic: String,
    },
    /// One queue subscribed twice to a topic, with different settings: SNS keeps one subscription
    /// of a queue to a topic, and refuses a second with other attributes.
    #[error("queue `{queue}` is subscribed to topic `{topic}` twice, with different settings; SNS keeps one subscription of a queue to a topic: give `.subscribed_to(..)` the topic once")]
    SubscribedTwice {
        /// The queue.
        queue: String,
        /// The topic.
        topic: String,
    },
    /// Two declarations give one topic different settings.
    #[error("topic `{topic}` is declared with two different {setting}s, by {first} and by {second}; declare it the same way in both places")]
    ConflictingTopicDeclarations {
        /// The topic.
        topic: String,
        /// The setting they disagree on.
        setting: &'static str,
        /// Who declared it first.
        first: String,
        /// Who declared it otherwise.
        second: String,
    },
    /// Two declarations give one queue's subscription to a topic different settings: SNS keeps
    /// one subscription of a queue to a topic, and refuses a second with other attributes.
    #[error("queue `{queue}`'s subscription to topic `{topic}` is declared with two different {setting}s, by {first} and by {second}; SNS keeps one subscription of a queue to a topic: declare it the same way in both places")]
    ConflictingSubscriptions {
        /// The queue.
        queue: String,
        /// The topic.
        topic: String,
        /// The setting they disagree on.
        setting: &'static str,
        /// Who declared it first.
        first: String,
        /// Who declared it otherwise.
        second: String,
    },
    /// Subscribers routed by type on one queue set the queue up differently; one consumer reads
    /// it for all of them, with one set of settings.
    #[error("queue `{queue}` is read by `{first}` and `{second}`, routed by message type, which set its {setting} differently; one consumer reads a routed queue: give its subscribers the same settings")]
    RouteSettings {
        /// The queue.
        queue: String,
        /// The setting they disagree on.
        setting: &'static str,
        /// The first subscriber's handler.
        first: String,
        /// The handler that sets it otherwise.
        second: String,
    },
    /// A batch handler is among the subscribers of a routed queue, whose consumer hands each
    /// message to one route a call.
    #[error("queue `{queue}` is routed by message type and `{handler}` is a batch handler: a routed queue's subscribers take one message a call; read the queue with one batch handler alone, or make `{handler}` a single handler")]
    RoutedBatchHandler {
        /// The queue.
        queue: String,
        /// The batch handler.
        handler: String,
    },
    /// A batch handler was given an inbox: the inbox claims one message's key a call, in that
    /// message's own transaction.
    #[error("`{handler}` on queue `{queue}` is a batch handler with an inbox (`idempotent(..)`): the inbox claims one message's key a call, in its own transaction; make `{handler}` a single handler, or drop `idempotent(..)`")]
    IdempotentBatch {
        /// The queue.
        queue: String,
        /// The batch handler.
        handler: String,
    },
    /// A handler's output sends messages of a type to a queue of the same app that routes by
    /// type, and no route of that queue takes the type: every such message would be
    /// dead-lettered.
    #[error("`{handler}` sends `{type_name}` messages to queue `{queue}`, which routes by message type and has no route for `{type_name}` (its routes: {routes}); include a subscriber of `{type_name}` on `{queue}`, or send another type")]
    UnroutedOutput {
        /// The handler whose output it is.
        handler: String,
        /// The routed queue.
        queue: String,
        /// The short name of the output's message type, as its type header carries it.
        type_name: String,
        /// The types the queue routes, named as their type headers carry them.
        routes: String,
    },
    /// The broker's type header name is not a message attribute name SQS takes.
    #[error("type header `{name}`: {reason}; give `SqsBroker::type_header(..)` a name of letters, digits, `_`, `-` and `.`")]
    TypeHeaderName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The broker's batch linger is so long that a lone delete would wait near a visibility
    /// timeout (and be handled again), and a stop would wait it out.
    #[error("batch linger {got:?} is longer than {max:?}: a lone delete would wait that long for company; give `SqsBroker::batch_linger(..)` at most {max:?}")]
    BatchLinger {
        /// The linger given.
        got: Duration,
        /// The longest allowed.
        max: Duration,
    },
}

/// The longest batch linger a broker takes: company for a call is worth milliseconds, not a
/// share of a visibility timeout.
pub const MAX_BATCH_LINGER: Duration = Duration::from_secs(1);

/// The builder method that sets a filter policy of `scope`, for messages that say what to change.
fn filter_policy_setter(scope: FilterPolicyScope) -> &'static str {
    match scope {
        FilterPolicyScope::MessageAttributes => ".filter_policy(..)",
        FilterPolicyScope::MessageBody => ".filter_policy_on_body(..)",
    }
}

/// Every problem found, shown one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} setting problem(s):", self.0.len())?;
        for problem in &self.0 {
            write!(f, "\n  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
