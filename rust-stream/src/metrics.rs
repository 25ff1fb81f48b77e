//! The metrics rust-stream records, through the [`metrics`](https://docs.rs/metrics) facade: no exporter is
//! built in; install the recorder of your choice (Prometheus, StatsD, OpenTelemetry) before the
//! app starts, and every figure below reaches it.
//!
//! ```
//! use rust_stream::metrics::{MESSAGES_CONSUMED, DESTINATION, SYSTEM};
//!
//! // Names follow OpenTelemetry's messaging conventions where they have one.
//! assert_eq!(MESSAGES_CONSUMED, "messaging.client.consumed.messages");
//! assert_eq!((SYSTEM, DESTINATION), ("messaging.system", "messaging.destination.name"));
//! ```
//!
//! Every metric carries `messaging.system = "aws_sqs"` and the queue as
//! `messaging.destination.name` (an app has one subscription per queue, so the queue names the
//! subscription too), except those of SNS: an SNS call and a publish to a topic carry
//! `messaging.system = "aws_sns"` and the topic's name; durations are in seconds.
//!
//! | Metric | Kind | Labels besides the two | What |
//! | --- | --- | --- | --- |
//! | `messaging.client.consumed.messages` | counter | | messages received, each receive |
//! | `messaging.process.duration` | histogram | `error.type` unless it succeeded: `failed` (an error, a retry, a panic, a timeout), `dead_letter`, `cancelled` (at shutdown) | one attempt: decoding and the handler |
//! | `rust_stream.messages.settled` | counter | `rust_stream.outcome`: `acked`, `retried`, `dead_lettered` | attempts settled, by how; `acked` and `dead_lettered` once the message's delete succeeded |
//! | `rust_stream.messages.undecodable` | counter | | bodies that did not decode (then dead-lettered, or retried without a dead-letter queue) |
//! | `rust_stream.messages.in_flight` | gauge | | messages in handlers now (a batch handler's call counts each of its messages) |
//! | `rust_stream.messages.held` | gauge | | messages received and not yet settled or released (running, waiting for a slot, or behind their group) |
//! | `rust_stream.groups.resting` | gauge | | FIFO groups waiting out a retry delay, held by this consumer |
//! | `rust_stream.pollers.active` | gauge | | pollers that may receive now: from 1 up to the subscription's `pollers`, one more after each full receive, one fewer after each empty or failed one |
//! | `rust_stream.receives.in_flight` | gauge | | receives in flight (at most `rust_stream.pollers.active`) |
//! | `rust_stream.message.age` | histogram | | at receive, now − `SentTimestamp` |
//! | `rust_stream.receive.batch_size` | histogram | | messages each receive brought, empty ones included |
//! | `messaging.client.operation.duration` | histogram | `messaging.operation.name`, `error.type` on failure | each SQS API call (its count is the calls), by action: `ReceiveMessage`, `SendMessageBatch`, `DeleteMessageBatch`, `ChangeMessageVisibilityBatch`, `GetQueueUrl`, `GetQueueAttributes`, `SetQueueAttributes`, `CreateQueue`; SNS's (`aws_sns`): `PublishBatch`, `CreateTopic`, `GetTopicAttributes`, `Subscribe`, `GetSubscriptionAttributes`, `ListSubscriptionsByTopic` |
//! | `messaging.client.sent.messages` | counter | `error.type` on failure | messages published (handlers' outputs and dead-letter copies included), each answered; to a topic with `aws_sns` |
//! | `rust_stream.inbox.duplicates` | counter | | messages an [inbox](crate::inbox) found handled before, acked without running their handler |
//! | `rust_stream.history.skipped` | counter | | sends a publisher's [command history](crate::publish::history) skipped, their key sent within its duration; to a topic with `aws_sns` |
//! | `rust_stream.http.requests` | counter | `http.route` (the route's template, `unmatched` for none), `http.response.status_code`; no queue label | requests the HTTP queue API (`rust_stream::http::queue`, feature `http`) answered |
//! | `rust_stream.http.refused` | counter | `rust_stream.reason`: `origin`, `token`, `content_type`, `queue`, `body_size`, `push_items`, `pop_amount`, `busy`, `deadline` | requests the HTTP queue API refused before any SQS call, by the rule that refused them |
//!
//! The backlog gauges (`SqsBroker::backlog_interval`, every 60 s unless set): what SQS says a
//! subscribed queue holds, one `GetQueueAttributes` call a queue an interval, set as each sample
//! answers:
//!
//! | Metric | Kind | Labels besides the two | What |
//! | --- | --- | --- | --- |
//! | `rust_stream.queue.visible` | gauge | | `ApproximateNumberOfMessages`: messages waiting to be received |
//! | `rust_stream.queue.in_flight` | gauge | | `ApproximateNumberOfMessagesNotVisible`: received by any consumer, not yet deleted |
//! | `rust_stream.queue.delayed` | gauge | | `ApproximateNumberOfMessagesDelayed`: not yet visible |
//! | `rust_stream.queue.oldest_age` | gauge | | seconds: the oldest message this consumer received in the interval, by its `SentTimestamp`, or, when it received none while messages were visible, the last value plus the interval; 0 when none is visible (SQS has no such attribute: CloudWatch's `ApproximateAgeOfOldestMessage` is the queue's own) |
//! | `rust_stream.queue.dead_letter` | gauge | `rust_stream.dead_letter_queue` (its name) | messages in the subscription's dead-letter queue (visible, in flight and delayed) |
//!
//! An [outbox](crate::outbox)'s relay labels its metrics with `rust_stream.outbox` (the relay's
//! name) only:
//!
//! | Metric | Kind | What |
//! | --- | --- | --- |
//! | `rust_stream.outbox.backlog` | gauge | committed rows waiting, at the start of each round |
//! | `rust_stream.outbox.oldest_age` | gauge | seconds the oldest of them has waited (0 when none) |
//! | `rust_stream.outbox.relayed` | counter | rows sent and deleted |
//! | `rust_stream.outbox.failed` | counter | rows whose send failed in a round (they stay, and are sent again) |
//! | `rust_stream.outbox.scheduled_waiting` | gauge | rows scheduled for later, not yet due, at the start of each round |
//! | `rust_stream.outbox.lateness` | histogram | seconds from a scheduled row's due time to its send (a row sent early with `DelaySeconds`: to when SQS makes it visible) |
//!
//! The outbox itself counts, labelled `messaging.destination.name` (the destination as declared):
//!
//! | Metric | Kind | What |
//! | --- | --- | --- |
//! | `rust_stream.outbox.scheduled` | counter | messages written with a due time (counted at the write; a rolled-back one too) |
//! | `rust_stream.outbox.cancelled` | counter | scheduled messages a cancel found waiting (counted at the cancel; a rolled-back one too) |
//!
//! `error.type` is the [`ErrorKind`](crate::model::rules::ErrorKind) SQS answered (its `Debug`
//! name, e.g. `Throttled`), the code of an error it does not know (e.g. `InvalidClientTokenId`), or
//! `unavailable` when no answer came.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::metrics::{Counter, Gauge, Histogram, Label};

use crate::model::{
    wire::{ReceivedMessage, SystemAttribute},
    TransportError,
};
use crate::record::Settled;

/// `messaging.system`: `aws_sqs`, or `aws_sns` for SNS calls and publishes to topics.
pub const SYSTEM: &str = "messaging.system";
/// `messaging.destination.name`: the queue, or the topic.
pub const DESTINATION: &str = "messaging.destination.name";
/// `messaging.operation.name`: the SQS action of a call.
pub const OPERATION: &str = "messaging.operation.name";
/// `error.type`: why a call or a send failed.
pub const ERROR_TYPE: &str = "error.type";
/// `rust_stream.outcome`: how a message was settled.
pub const OUTCOME: &str = "rust_stream.outcome";

/// Messages received.
pub const MESSAGES_CONSUMED: &str = "messaging.client.consumed.messages";
/// Handler call durations.
pub const PROCESS_DURATION: &str = "messaging.process.duration";
/// Messages settled, by outcome.
pub const MESSAGES_SETTLED: &str = "rust_stream.messages.settled";
/// Bodies that did not decode.
pub const MESSAGES_UNDECODABLE: &str = "rust_stream.messages.undecodable";
/// FIFO groups resting between retries.
pub const GROUPS_RESTING: &str = "rust_stream.groups.resting";
/// Handlers running.
pub const MESSAGES_IN_FLIGHT: &str = "rust_stream.messages.in_flight";
/// Messages held.
pub const MESSAGES_HELD: &str = "rust_stream.messages.held";
/// Pollers that may receive now.
pub const POLLERS_ACTIVE: &str = "rust_stream.pollers.active";
/// Receives in flight.
pub const RECEIVES_IN_FLIGHT: &str = "rust_stream.receives.in_flight";
/// Message age at receive.
pub const MESSAGE_AGE: &str = "rust_stream.message.age";
/// Messages per receive.
pub const RECEIVE_BATCH_SIZE: &str = "rust_stream.receive.batch_size";
/// SQS API call durations (and counts).
pub const OPERATION_DURATION: &str = "messaging.client.operation.duration";
/// Messages published.
pub const MESSAGES_SENT: &str = "messaging.client.sent.messages";

/// How often a running app samples its queues' backlog gauges unless told otherwise
/// (`SqsBroker::backlog_interval`): a `GetQueueAttributes` call a queue a minute, CloudWatch's
/// own period for SQS's metrics.
pub const DEFAULT_BACKLOG_INTERVAL: Duration = Duration::from_secs(60);

/// A subscribed queue's messages waiting to be received (`ApproximateNumberOfMessages`).
pub const QUEUE_VISIBLE: &str = "rust_stream.queue.visible";
/// A subscribed queue's messages received and not yet deleted
/// (`ApproximateNumberOfMessagesNotVisible`).
pub const QUEUE_IN_FLIGHT: &str = "rust_stream.queue.in_flight";
/// A subscribed queue's delayed messages (`ApproximateNumberOfMessagesDelayed`).
pub const QUEUE_DELAYED: &str = "rust_stream.queue.delayed";
/// Seconds the oldest message of a subscribed queue has waited, as its consumer sees it.
pub const QUEUE_OLDEST_AGE: &str = "rust_stream.queue.oldest_age";
/// Messages in a subscription's dead-letter queue.
pub const QUEUE_DEAD_LETTER: &str = "rust_stream.queue.dead_letter";
/// The label naming the dead-letter queue of [`QUEUE_DEAD_LETTER`].
pub const DEAD_LETTER_QUEUE: &str = "rust_stream.dead_letter_queue";

/// Bucket bounds for [`PROCESS_DURATION`] and [`OPERATION_DURATION`], in seconds: a handler or an
/// SQS call from 5 ms to a 20 s long poll and on to a handler's 5 minutes.
pub const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 300.0,
];
/// Bucket bounds for [`MESSAGE_AGE`], in seconds: from a message received at once to one at the
/// end of SQS's longest retention (14 days), where an age alert's thresholds lie (a minute, 15
/// minutes, an hour, a day).
pub const AGE_BUCKETS: &[f64] = &[
    0.1,
    0.5,
    1.0,
    5.0,
    15.0,
    60.0,
    300.0,
    900.0,
    3_600.0,
    14_400.0,
    86_400.0,
    345_600.0,
    1_209_600.0,
];
/// Bucket bounds for [`RECEIVE_BATCH_SIZE`]: one a size, as a receive brings 0 to 10 messages.
pub const BATCH_SIZE_BUCKETS: &[f64] = &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];

/// Bucket bounds for [`OUTBOX_LATENESS`], in seconds: from the sub-second a scheduled message
/// is late by as a rule to the minutes and hours of a relay that was down.
pub const LATENESS_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3_600.0, 14_400.0,
];

/// Every histogram rust-stream records, with its bucket bounds: for an exporter that renders
/// histograms with buckets (Prometheus's does with
/// `rust_stream::http::prometheus_builder`, feature `http`), so that they
/// aggregate across processes.
pub const HISTOGRAMS: &[(&str, &[f64])] = &[
    (PROCESS_DURATION, DURATION_BUCKETS),
    (OPERATION_DURATION, DURATION_BUCKETS),
    (MESSAGE_AGE, AGE_BUCKETS),
    (RECEIVE_BATCH_SIZE, BATCH_SIZE_BUCKETS),
    (OUTBOX_LATENESS, LATENESS_BUCKETS),
];

/// Gives the installed recorder each metric's unit and description (Prometheus renders them as
/// `# HELP` lines). The app calls it as each subscription starts; call it yourself after
/// installing a recorder in a process with no app (`rust-stream serve` does). Cheap and
/// idempotent.
pub fn describe() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        MESSAGES_CONSUMED,
        Unit::Count,
        "Messages received, each receive."
    );
    describe_histogram!(
        PROCESS_DURATION,
        Unit::Seconds,
        "One attempt at a message: decoding and the handler (error.type unless it succeeded)."
    );
    describe_counter!(
        MESSAGES_SETTLED,
        Unit::Count,
        "Attempts settled, by rust_stream.outcome: acked, retried, dead_lettered."
    );
    describe_counter!(
        MESSAGES_UNDECODABLE,
        Unit::Count,
        "Bodies that did not decode."
    );
    describe_gauge!(MESSAGES_IN_FLIGHT, Unit::Count, "Messages in handlers now.");
    describe_gauge!(
        MESSAGES_HELD,
        Unit::Count,
        "Messages received and not yet settled or released."
    );
    describe_gauge!(
        GROUPS_RESTING,
        Unit::Count,
        "FIFO groups waiting out a retry delay, held by this consumer."
    );
    describe_gauge!(POLLERS_ACTIVE, Unit::Count, "Pollers that may receive now.");
    describe_gauge!(RECEIVES_IN_FLIGHT, Unit::Count, "Receives in flight.");
    describe_histogram!(
        MESSAGE_AGE,
        Unit::Seconds,
        "A message's age at receive: now less its SentTimestamp."
    );
    describe_histogram!(
        RECEIVE_BATCH_SIZE,
        Unit::Count,
        "Messages each receive brought, empty ones included."
    );
    describe_histogram!(
        OPERATION_DURATION,
        Unit::Seconds,
        "Each SQS or SNS API call, by messaging.operation.name (its count is the calls)."
    );
    describe_gauge!(
        QUEUE_VISIBLE,
        Unit::Count,
        "Messages waiting to be received (ApproximateNumberOfMessages), sampled each interval."
    );
    describe_gauge!(
        QUEUE_IN_FLIGHT,
        Unit::Count,
        "Messages received and not yet deleted (ApproximateNumberOfMessagesNotVisible), sampled each interval."
    );
    describe_gauge!(
        QUEUE_DELAYED,
        Unit::Count,
        "Delayed messages (ApproximateNumberOfMessagesDelayed), sampled each interval."
    );
    describe_gauge!(
        QUEUE_OLDEST_AGE,
        Unit::Seconds,
        "Seconds the oldest message has waited, as the consumer saw it in the interval (0 when none is visible)."
    );
    describe_gauge!(
        QUEUE_DEAD_LETTER,
        Unit::Count,
        "Messages in the subscription's dead-letter queue (rust_stream.dead_letter_queue), sampled each interval."
    );
    describe_counter!(
        MESSAGES_SENT,
        Unit::Count,
        "Messages published, each answered (error.type on failure)."
    );
    describe_counter!(
        INBOX_DUPLICATES,
        Unit::Count,
        "Copies of handled messages an inbox acked without running their handler."
    );
    describe_counter!(
        HISTORY_SKIPPED,
        Unit::Count,
        "Sends a command history skipped, their key sent within its duration."
    );
    describe_counter!(
        HTTP_REQUESTS,
        Unit::Count,
        "Requests the HTTP queue API answered, by http.route and http.response.status_code."
    );
    describe_counter!(
        HTTP_REFUSED,
        Unit::Count,
        "Requests the HTTP queue API refused before any SQS call, by rust_stream.reason."
    );
    describe_gauge!(
        OUTBOX_BACKLOG,
        Unit::Count,
        "Committed outbox rows waiting, at the start of each relay round."
    );
    describe_gauge!(
        OUTBOX_OLDEST_AGE,
        Unit::Seconds,
        "Seconds the oldest waiting outbox row has waited (0 when none)."
    );
    describe_counter!(OUTBOX_RELAYED, Unit::Count, "Outbox rows sent and deleted.");
    describe_gauge!(
        OUTBOX_SCHEDULED_WAITING,
        Unit::Count,
        "Outbox rows scheduled for later, not yet due, at the start of each relay round."
    );
    describe_histogram!(
        OUTBOX_LATENESS,
        Unit::Seconds,
        "Seconds from a scheduled outbox row's due time to its send."
    );
    describe_counter!(
        OUTBOX_SCHEDULED,
        Unit::Count,
        "Messages written to an outbox with a due time."
    );
    describe_counter!(
        OUTBOX_CANCELLED,
        Unit::Count,
        "Scheduled outbox messages a cancel found waiting."
    );
    describe_counter!(
        OUTBOX_FAILED,
        Unit::Count,
        "Outbox rows whose send failed in a round; they stay and are sent again."
    );
}

/// The value of `messaging.system` for SQS.
const AWS_SQS: &str = "aws_sqs";
/// The value of `messaging.system` for SNS: its calls and the publishes to topics.
const AWS_SNS: &str = "aws_sns";

/// One subscription's instruments, registered once when it starts, so that recording a message
/// costs no label building.
pub(crate) struct SubscriptionMetrics {
    consumed: Counter,
    /// By [`Settled`], in its order.
    settled: [Counter; 3],
    undecodable: Counter,
    /// By [`Attempt`], in its order.
    process: [Histogram; 4],
    pub(crate) in_flight: Gauge,
    pub(crate) held: Gauge,
    /// FIFO groups resting between retries.
    pub(crate) resting: Gauge,
    /// Pollers that may receive now.
    pub(crate) pollers: Gauge,
    /// Receives in flight.
    pub(crate) receiving: Gauge,
    age: Histogram,
    batch_size: Histogram,
    /// The age at receive of the oldest message received since the backlog's last sample, in
    /// milliseconds plus one (0: none received).
    oldest_received: AtomicU64,
}

/// How one attempt ended, as `messaging.process.duration` labels it (`error.type`, absent on
/// success).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Succeeded,
    Failed,
    DeadLetter,
    Cancelled,
}

impl SubscriptionMetrics {
    pub(crate) fn new(queue: &str) -> Self {
        // Here, as every app registers its instruments here after the recorder was installed.
        describe();
        let base = [
            (SYSTEM, AWS_SQS.to_owned()),
            (DESTINATION, queue.to_owned()),
        ];
        let with = |name: &'static str, value: &str| {
            let mut labels = base.to_vec();
            labels.push((name, value.to_owned()));
            labels
        };
        let settled =
            |outcome: &str| ::metrics::counter!(MESSAGES_SETTLED, &with(OUTCOME, outcome));
        let process = |error: Option<&str>| match error {
            None => ::metrics::histogram!(PROCESS_DURATION, &base),
            Some(error) => ::metrics::histogram!(PROCESS_DURATION, &with(ERROR_TYPE, error)),
        };
        Self {
            consumed: ::metrics::counter!(MESSAGES_CONSUMED, &base),
            settled: [
                settled("acked"),
                settled("retried"),
                settled("dead_lettered"),
            ],
            undecodable: ::metrics::counter!(MESSAGES_UNDECODABLE, &base),
            process: [
                process(None),
                process(Some("failed")),
                process(Some("dead_letter")),
                process(Some("cancelled")),
            ],
            in_flight: ::metrics::gauge!(MESSAGES_IN_FLIGHT, &base),
            held: ::metrics::gauge!(MESSAGES_HELD, &base),
            resting: ::metrics::gauge!(GROUPS_RESTING, &base),
            pollers: ::metrics::gauge!(POLLERS_ACTIVE, &base),
            receiving: ::metrics::gauge!(RECEIVES_IN_FLIGHT, &base),
            age: ::metrics::histogram!(MESSAGE_AGE, &base),
            batch_size: ::metrics::histogram!(RECEIVE_BATCH_SIZE, &base),
            oldest_received: AtomicU64::new(0),
        }
    }

    /// A receive brought these messages.
    pub(crate) fn received(&self, messages: &[ReceivedMessage]) {
        self.consumed.increment(messages.len() as u64);
        self.batch_size.record(messages.len() as f64);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let mut oldest = 0;
        for message in messages {
            let sent = message.attributes.number(SystemAttribute::SentTimestamp);
            if let Some(sent) = sent.map(u128::from) {
                let age = now.saturating_sub(sent);
                self.age.record(age as f64 / 1000.0);
                oldest = oldest.max(age as u64 + 1);
            }
        }
        if oldest > 0 {
            self.oldest_received.fetch_max(oldest, Ordering::Relaxed);
        }
    }

    /// The age at receive of the oldest message received since the last call, if any was.
    pub(crate) fn take_oldest_received(&self) -> Option<Duration> {
        match self.oldest_received.swap(0, Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms - 1)),
        }
    }

    /// An attempt took `took` and ended as `attempt`.
    pub(crate) fn processed(&self, attempt: Attempt, took: Duration) {
        self.process[attempt as usize].record(took.as_secs_f64());
    }

    /// A body did not decode.
    pub(crate) fn undecodable(&self) {
        self.undecodable.increment(1);
    }

    /// An attempt at a message was settled.
    pub(crate) fn settled(&self, settled: Settled) {
        let index = match settled {
            Settled::Acked => 0,
            Settled::Retried => 1,
            Settled::DeadLettered => 2,
        };
        self.settled[index].increment(1);
    }
}

/// The backlog gauges of one subscribed queue, registered once when its sampling starts.
pub(crate) struct BacklogGauges {
    pub(crate) visible: Gauge,
    pub(crate) in_flight: Gauge,
    pub(crate) delayed: Gauge,
    pub(crate) oldest_age: Gauge,
    /// With the dead-letter queue's name, when the subscription has one.
    pub(crate) dead_letter: Option<Gauge>,
}

impl BacklogGauges {
    pub(crate) fn new(queue: &str, dead_letter: Option<&str>) -> Self {
        let base = [
            (SYSTEM, AWS_SQS.to_owned()),
            (DESTINATION, queue.to_owned()),
        ];
        Self {
            visible: ::metrics::gauge!(QUEUE_VISIBLE, &base),
            in_flight: ::metrics::gauge!(QUEUE_IN_FLIGHT, &base),
            delayed: ::metrics::gauge!(QUEUE_DELAYED, &base),
            oldest_age: ::metrics::gauge!(QUEUE_OLDEST_AGE, &base),
            dead_letter: dead_letter.map(|name| {
                let mut labels = base.to_vec();
                labels.push((DEAD_LETTER_QUEUE, name.to_owned()));
                ::metrics::gauge!(QUEUE_DEAD_LETTER, &labels)
            }),
        }
    }
}

/// Records one API call of `action` on `target`: for an SQS action the queue's URL (or its name),
/// for an SNS action (`sns`) the topic's ARN, a subscription's, or the topic's name.
pub(crate) fn call<T>(
    action: &'static str,
    sns: bool,
    target: &str,
    took: Duration,
    result: &Result<T, TransportError>,
) {
    // Labels handed over as they are: every call (one per 10 messages) builds them, and a label
    // list lent to the macro is copied a second time.
    let mut labels = Vec::with_capacity(4);
    let (system, destination) = if sns {
        (AWS_SNS, topic_name(target))
    } else {
        (AWS_SQS, queue_name(target))
    };
    labels.push(Label::from_static_parts(SYSTEM, system));
    labels.push(Label::from_static_parts(OPERATION, action));
    labels.push(Label::new(DESTINATION, destination.to_owned()));
    if let Err(error) = result {
        labels.push(Label::new(ERROR_TYPE, error_type(error)));
    }
    ::metrics::histogram!(OPERATION_DURATION, labels).record(took.as_secs_f64());
}

/// `rust_stream.inbox.duplicates`: copies of handled messages the inbox acked without a handler.
pub const INBOX_DUPLICATES: &str = "rust_stream.inbox.duplicates";

/// `rust_stream.http.requests`: requests the HTTP queue API answered.
pub const HTTP_REQUESTS: &str = "rust_stream.http.requests";
/// The label of an HTTP request's route template (OpenTelemetry's `http.route`).
pub const HTTP_ROUTE: &str = "http.route";
/// The label of an HTTP answer's status code (OpenTelemetry's `http.response.status_code`).
pub const HTTP_STATUS: &str = "http.response.status_code";

/// `rust_stream.http.refused`: requests the HTTP queue API refused, by [`REASON`].
pub const HTTP_REFUSED: &str = "rust_stream.http.refused";
/// The label of the rule an HTTP queue API request broke (`origin`, `token`, ...).
pub const REASON: &str = "rust_stream.reason";

/// Records a request the HTTP queue API refused for `reason` before any SQS call.
#[cfg(feature = "http")]
pub(crate) fn http_refused(reason: &'static str) {
    let labels = [Label::from_static_parts(REASON, reason)];
    ::metrics::counter!(HTTP_REFUSED, labels.iter()).increment(1);
}

/// Records one request the HTTP queue API answered on `route` with `status`.
#[cfg(feature = "http")]
pub(crate) fn http_request(route: String, status: u16) {
    let labels = [
        Label::new(HTTP_ROUTE, route),
        Label::new(HTTP_STATUS, status.to_string()),
    ];
    ::metrics::counter!(HTTP_REQUESTS, labels.iter()).increment(1);
}

/// Records a copy of a handled message that `queue`'s inbox acked without running its handler.
pub(crate) fn inbox_duplicate(queue: &str) {
    let labels = [
        Label::from_static_parts(SYSTEM, AWS_SQS),
        Label::new(DESTINATION, queue.to_owned()),
    ];
    ::metrics::counter!(INBOX_DUPLICATES, labels.iter()).increment(1);
}

/// Rows waiting in an outbox (gauge; label `rust_stream.outbox`, the relay's name).
pub const OUTBOX_BACKLOG: &str = "rust_stream.outbox.backlog";
/// Seconds the oldest row of an outbox has waited (gauge; 0 when none waits).
pub const OUTBOX_OLDEST_AGE: &str = "rust_stream.outbox.oldest_age";
/// Outbox rows sent and deleted (counter).
pub const OUTBOX_RELAYED: &str = "rust_stream.outbox.relayed";
/// Outbox rows whose send failed in a round; they stay and are sent again (counter).
pub const OUTBOX_FAILED: &str = "rust_stream.outbox.failed";
/// The label naming the relay of an outbox's metrics.
pub const OUTBOX: &str = "rust_stream.outbox";

/// Records what an outbox's relay found waiting at the start of a round.
pub(crate) fn outbox_backlog(outbox: &str, rows: u64, oldest_age: Option<Duration>) {
    let labels = [Label::new(OUTBOX, outbox.to_owned())];
    ::metrics::gauge!(OUTBOX_BACKLOG, labels.iter()).set(rows as f64);
    ::metrics::gauge!(OUTBOX_OLDEST_AGE, labels.iter())
        .set(oldest_age.unwrap_or_default().as_secs_f64());
}

/// Records a relay round's sends: `relayed` sent and deleted, `failed` left for the next.
pub(crate) fn outbox_relayed(outbox: &str, relayed: usize, failed: usize) {
    let labels = [Label::new(OUTBOX, outbox.to_owned())];
    if relayed > 0 {
        ::metrics::counter!(OUTBOX_RELAYED, labels.iter()).increment(relayed as u64);
    }
    if failed > 0 {
        ::metrics::counter!(OUTBOX_FAILED, labels.iter()).increment(failed as u64);
    }
}

/// Rows of an outbox scheduled for later, not yet due (gauge; label `rust_stream.outbox`).
pub const OUTBOX_SCHEDULED_WAITING: &str = "rust_stream.outbox.scheduled_waiting";
/// Seconds from a scheduled row's due time to its send (histogram; label `rust_stream.outbox`).
pub const OUTBOX_LATENESS: &str = "rust_stream.outbox.lateness";
/// Messages written to an outbox with a due time (counter; label `messaging.destination.name`).
pub const OUTBOX_SCHEDULED: &str = "rust_stream.outbox.scheduled";
/// Scheduled messages a cancel found waiting (counter; label `messaging.destination.name`).
pub const OUTBOX_CANCELLED: &str = "rust_stream.outbox.cancelled";

/// Records the scheduled rows an outbox's relay found not yet due at the start of a round.
pub(crate) fn outbox_waiting_scheduled(outbox: &str, rows: u64) {
    let labels = [Label::new(OUTBOX, outbox.to_owned())];
    ::metrics::gauge!(OUTBOX_SCHEDULED_WAITING, labels.iter()).set(rows as f64);
}

/// Records how late a scheduled row of an outbox was sent.
pub(crate) fn outbox_lateness(outbox: &str, lateness: Duration) {
    let labels = [Label::new(OUTBOX, outbox.to_owned())];
    ::metrics::histogram!(OUTBOX_LATENESS, labels.iter()).record(lateness.as_secs_f64());
}

/// Records a message written to an outbox for `destination` with a due time.
pub(crate) fn outbox_scheduled(destination: &str) {
    let labels = [Label::new(DESTINATION, destination.to_owned())];
    ::metrics::counter!(OUTBOX_SCHEDULED, labels.iter()).increment(1);
}

/// Records a scheduled message for `destination` a cancel found waiting.
pub(crate) fn outbox_cancelled(destination: &str) {
    let labels = [Label::new(DESTINATION, destination.to_owned())];
    ::metrics::counter!(OUTBOX_CANCELLED, labels.iter()).increment(1);
}

/// Sends skipped by a command history.
pub const HISTORY_SKIPPED: &str = "rust_stream.history.skipped";

/// Records a send to `destination` (a topic when `topic`) that a command history skipped.
pub(crate) fn history_skipped(destination: &str, topic: bool) {
    let labels = [
        Label::from_static_parts(SYSTEM, if topic { AWS_SNS } else { AWS_SQS }),
        Label::new(DESTINATION, destination.to_owned()),
    ];
    ::metrics::counter!(HISTORY_SKIPPED, labels.iter()).increment(1);
}

/// Records `count` messages published to `queue`, failed with `error` if any.
pub(crate) fn sent(queue: &str, count: usize, error: Option<&TransportError>) {
    let mut labels = Vec::with_capacity(3);
    labels.push(Label::from_static_parts(SYSTEM, AWS_SQS));
    labels.push(Label::new(DESTINATION, queue.to_owned()));
    if let Some(error) = error {
        labels.push(Label::new(ERROR_TYPE, error_type(error)));
    }
    ::metrics::counter!(MESSAGES_SENT, labels).increment(count as u64);
}

/// Records `count` messages published to the SNS topic `topic`, failed with `error` if any.
pub(crate) fn published(topic: &str, count: usize, error: Option<&TransportError>) {
    let mut labels = Vec::with_capacity(3);
    labels.push(Label::from_static_parts(SYSTEM, AWS_SNS));
    labels.push(Label::new(DESTINATION, topic.to_owned()));
    if let Some(error) = error {
        labels.push(Label::new(ERROR_TYPE, error_type(error)));
    }
    ::metrics::counter!(MESSAGES_SENT, labels).increment(count as u64);
}

/// A topic's name from its ARN (`arn:PARTITION:sns:REGION:ACCOUNT:NAME`, and `:ID` for a
/// subscription's), or the name itself.
fn topic_name(target: &str) -> &str {
    if target.starts_with("arn:") {
        target.split(':').nth(5).unwrap_or(target)
    } else {
        target
    }
}

/// A queue's name from its URL (its last segment), or the name itself.
fn queue_name(queue_url: &str) -> &str {
    queue_url.rsplit('/').next().unwrap_or(queue_url)
}

fn error_type(error: &TransportError) -> String {
    match error {
        TransportError::Service { kind, .. } => format!("{kind:?}"),
        TransportError::Other { code, .. } => code.clone(),
        TransportError::Unavailable { .. } => "unavailable".to_owned(),
        TransportError::HeldBehind { .. } => "held_behind".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sns_call_is_labelled_by_its_topic_and_an_sqs_call_by_its_queue() {
        assert_eq!(
            topic_name("arn:aws:sns:eu-west-1:123:payments.fifo"),
            "payments.fifo"
        );
        assert_eq!(
            topic_name("arn:aws:sns:eu-west-1:123:payments:0f1e2d3c"),
            "payments",
            "a subscription's ARN names its topic"
        );
        assert_eq!(topic_name("payments"), "payments", "CreateTopic names it");
        assert_eq!(
            queue_name("https://sqs.eu-west-1.amazonaws.com/123/ledger"),
            "ledger"
        );
    }
}
