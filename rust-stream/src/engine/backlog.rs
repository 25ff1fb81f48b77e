//! The backlog gauges: while the app consumes, a task samples what each subscribed queue and
//! each dead-letter queue holds, at the broker's `backlog_interval`, with one `GetQueueAttributes`
//! call a queue an interval (a queue that is both subscribed and another's dead-letter queue, or
//! the dead-letter queue of several, is asked once), and sets the gauges of
//! [`metrics`](crate::metrics) that an autoscaler reads.
//!
//! SQS has no attribute for the age of a queue's oldest message (CloudWatch's
//! `ApproximateAgeOfOldestMessage` is a CloudWatch metric, not a queue attribute), so the age
//! gauge is the consumer's own observation: the age at receive of the oldest message it received
//! in the interval ([`OldestAge`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::client::Client;
use crate::metrics::{BacklogGauges, SubscriptionMetrics};
use crate::model::SqsQueue;

/// The attributes one sample asks for, in one call.
const COUNTS: [&str; 3] = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
];

/// One subscription whose queue is sampled.
pub(super) struct Subscribed {
    pub(super) queue: String,
    pub(super) url: String,
    /// Where its consumer records the ages of what it receives.
    pub(super) metrics: Arc<SubscriptionMetrics>,
    /// Its dead-letter queue's name: the declared one, else the queue's `RedrivePolicy`'s.
    pub(super) dead_letter: Option<String>,
}

/// The sampling task, stopped when this is dropped (the app's run ends, or is dropped).
pub(super) struct Sampler(tokio::task::JoinHandle<()>);

impl Drop for Sampler {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts sampling `subscribed` every `interval`, the first sample at once.
pub(super) fn start(
    client: Arc<Client>,
    interval: Duration,
    subscribed: Vec<Subscribed>,
) -> Sampler {
    Sampler(tokio::spawn(sample_every(client, interval, subscribed)))
}

/// One subscription's gauges and what its age gauge remembers.
struct Watched {
    subscribed: Subscribed,
    gauges: BacklogGauges,
    oldest: OldestAge,
}

/// The counts of one queue, as one call answered them.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    visible: u64,
    in_flight: u64,
    delayed: u64,
}

async fn sample_every(client: Arc<Client>, interval: Duration, subscribed: Vec<Subscribed>) {
    // Every queue asked, by name, once: the subscribed ones, then their dead-letter queues.
    let mut urls: BTreeMap<String, String> = subscribed
        .iter()
        .map(|s| (s.queue.clone(), s.url.clone()))
        .collect();
    let mut watched = Vec::with_capacity(subscribed.len());
    for subscribed in subscribed {
        let mut dead_letter = subscribed.dead_letter.clone();
        if let Some(name) = dead_letter.clone().filter(|name| !urls.contains_key(name)) {
            // Resolved once (the declared ones were, at the start); one that cannot be found has
            // no gauge, which the warning explains.
            match client.resolve(&SqsQueue::new(name.clone())).await {
                Ok(url) => {
                    urls.insert(name, url);
                }
                Err(error) => {
                    tracing::warn!(
                        messaging.destination.name = %subscribed.queue,
                        dead_letter_queue = %name,
                        error = %error,
                        "cannot find the dead-letter queue; its depth is not sampled"
                    );
                    dead_letter = None;
                }
            }
        }
        let gauges = BacklogGauges::new(&subscribed.queue, dead_letter.as_deref());
        watched.push(Watched {
            subscribed: Subscribed {
                dead_letter,
                ..subscribed
            },
            gauges,
            oldest: OldestAge::default(),
        });
    }
    let mut ticks = tokio::time::interval(interval);
    // A sample that took long is not made up for by samples in a burst.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        ticks.tick().await;
        let since_last = last.elapsed();
        last = Instant::now();
        let asked = futures_util::future::join_all(
            urls.iter()
                .map(|(name, url)| async { (name.clone(), counts(&client, name, url).await) }),
        )
        .await;
        let answered: BTreeMap<String, Counts> = asked
            .into_iter()
            .filter_map(|(name, counts)| Some((name, counts?)))
            .collect();
        for watched in &mut watched {
            let received = watched.subscribed.metrics.take_oldest_received();
            // A queue whose call failed keeps its last figures: a gauge dropping to zero would
            // scale the consumers in while SQS does not answer.
            if let Some(counts) = answered.get(&watched.subscribed.queue) {
                let gauges = &watched.gauges;
                gauges.visible.set(counts.visible as f64);
                gauges.in_flight.set(counts.in_flight as f64);
                gauges.delayed.set(counts.delayed as f64);
                let age = watched.oldest.next(received, counts.visible, since_last);
                gauges.oldest_age.set(age.as_secs_f64());
            }
            let dead_letter = watched.subscribed.dead_letter.as_ref();
            if let (Some(gauge), Some(counts)) = (
                &watched.gauges.dead_letter,
                dead_letter.and_then(|name| answered.get(name)),
            ) {
                gauge.set((counts.visible + counts.in_flight + counts.delayed) as f64);
            }
        }
    }
}

/// One `GetQueueAttributes` call for the queue's three counts; `None` (and a warning) when it
/// fails.
async fn counts(client: &Client, name: &str, url: &str) -> Option<Counts> {
    match client.transport().get_queue_attributes(url, &COUNTS).await {
        Ok(attributes) => {
            let count = |attribute: &str| {
                attributes
                    .get(attribute)
                    .and_then(|value| value.parse().ok())
                    .unwrap_or(0)
            };
            Some(Counts {
                visible: count(COUNTS[0]),
                in_flight: count(COUNTS[1]),
                delayed: count(COUNTS[2]),
            })
        }
        Err(error) => {
            tracing::warn!(
                messaging.destination.name = %name,
                error = %error,
                "could not sample the queue's backlog; its gauges keep their last figures"
            );
            None
        }
    }
}

/// The age of a queue's oldest waiting message, as its consumer can tell it: SQS gives no
/// such attribute, only each message's `SentTimestamp` when it is received.
///
/// Each sample takes the age at receive of the oldest message received in the interval; when
/// none was received while messages are visible (the consumer is stuck, or holds all it may),
/// the oldest of them has waited the whole interval more than the last figure; with none
/// visible, nothing waits: 0. It is a lower bound: a standard queue hands out roughly, not
/// strictly, the oldest first, and a message other consumers received is not seen here.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct OldestAge {
    last: Duration,
}

impl OldestAge {
    /// The figure for a sample: `received`, the oldest age at receive in the interval, if any;
    /// `visible`, the messages waiting now; `since_last`, the time since the last sample.
    pub(crate) fn next(
        &mut self,
        received: Option<Duration>,
        visible: u64,
        since_last: Duration,
    ) -> Duration {
        self.last = match (visible, received) {
            (0, _) => Duration::ZERO,
            (_, Some(age)) => age,
            (_, None) => self.last + since_last,
        };
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_age_is_what_was_received_grows_while_nothing_is_and_is_zero_when_nothing_waits() {
        let mut oldest = OldestAge::default();
        let minute = Duration::from_secs(60);
        let seconds = Duration::from_secs;
        assert_eq!(oldest.next(Some(seconds(5)), 100, minute), seconds(5));
        // Stuck: nothing received while 100 wait, so the oldest waited a minute more each time.
        assert_eq!(oldest.next(None, 100, minute), seconds(65));
        assert_eq!(oldest.next(None, 100, minute), seconds(125));
        // Receiving again: the oldest received is the figure.
        assert_eq!(oldest.next(Some(seconds(2)), 40, minute), seconds(2));
        // Nothing visible: nothing waits, whatever was received.
        assert_eq!(oldest.next(Some(seconds(9)), 0, minute), Duration::ZERO);
        assert_eq!(oldest.next(None, 0, minute), Duration::ZERO);
        assert_eq!(oldest.next(None, 3, minute), minute);
    }
}
