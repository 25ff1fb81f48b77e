//! What the parts of one consumer share: its engine tasks with the stop's signals to them
//! ([`Tasks`]), what every part is built with ([`Shared`]), and how slowly SQS has lately
//! answered the consumer's own calls ([`CallLatency`]), which sets how long a receive hides what it
//! takes and when the heartbeat extends it.
//!
//! `mod.rs` makes one of each when a subscription starts and hands them to the parts it builds;
//! each part copies what it uses into fields of its own, so at run time no part reads another's
//! state. The stop itself (its steps and when it takes them) stays in `mod.rs`: the parts only see
//! its signals, and count in [`Tasks`] so the stop knows when nothing of the consumer is left.

use std::future::Future;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::{TaskTrackerToken, TaskTrackerWaitFuture};
use tokio_util::task::TaskTracker;

use tokio::time::Instant;

use crate::client::lease::Leases;
use crate::metrics::SubscriptionMetrics;

/// A consumer's engine tasks (its pollers, a task or a few per standard receive, a task per
/// FIFO lane, and deletes nobody awaits), and the stop's signals to them.
/// Cheap to clone: every clone is the same tasks and the same signals.
#[derive(Clone, Default)]
pub(crate) struct Tasks {
    tracker: TaskTracker,
    stopping: CancellationToken,
    give_up_receives: CancellationToken,
    no_new_attempts: CancellationToken,
    cancel_handlers: CancellationToken,
}

impl Tasks {
    /// Spawns an engine task that the stop waits for; a panic in it is logged, and the messages
    /// it held are released by the heartbeat.
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.tracker.spawn(guarded(task));
    }

    /// Runs an engine task in the calling task as far as its first poll takes it, and spawns
    /// what is left of it as [`spawn`](Self::spawn) does: work done at once costs no task of its
    /// own, and work that waits goes on in its own task while the caller goes on. (The futures
    /// it waits on take the new task's waker at that task's first poll, as every future's next
    /// poll hands it the waker to use.)
    pub(crate) async fn start_here(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut task = guarded(task);
        if crate::task::poll_once(&mut task).await.is_none() {
            self.tracker.spawn(task);
        }
    }

    /// Counts as an engine task until dropped: the stop waits for work that runs outside a task
    /// (a delete nobody awaits) as it waits for the tasks.
    pub(crate) fn token(&self) -> TaskTrackerToken {
        self.tracker.token()
    }

    /// Shutdown has begun: no new receive; held messages still start until
    /// [`no_new_attempts`](Self::no_new_attempts). Handlers see it as their shutdown signal.
    pub(crate) fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    /// Receives in flight are given up (over a network: a backend whose abandoned receive takes
    /// nothing gives them up at [`stopping`](Self::stopping)).
    pub(crate) fn give_up_receives(&self) -> &CancellationToken {
        &self.give_up_receives
    }

    /// The stop's time for starting held messages is over: no new attempt, what is held and not
    /// running goes back.
    pub(crate) fn no_new_attempts(&self) -> &CancellationToken {
        &self.no_new_attempts
    }

    /// The shutdown timeout has passed: running handlers are cancelled.
    pub(crate) fn cancel_handlers(&self) -> &CancellationToken {
        &self.cancel_handlers
    }

    /// No task is spawned after this but the ones already running and those they spawn; the
    /// stop calls it once, so that [`wait`](Self::wait) can end.
    pub(crate) fn close(&self) {
        self.tracker.close();
    }

    /// How many tasks (and tokens) are left.
    pub(crate) fn len(&self) -> usize {
        self.tracker.len()
    }

    /// Ends once the tasks are closed and none is left.
    pub(crate) fn wait(&self) -> TaskTrackerWaitFuture<'_> {
        self.tracker.wait()
    }
}

/// What every part of one consumer is built with: facts of the subscription and handles all of
/// them use. Read only while the parts are built (each copies what it needs).
#[derive(Clone)]
pub(crate) struct Shared {
    /// The queue's name, shared by every delivery.
    pub(crate) queue: Arc<str>,
    /// The queue's URL: where a standard receive's task sends a delete call it fills itself.
    pub(crate) url: Arc<str>,
    pub(crate) fifo: bool,
    /// The visibility timeout of received messages: configured, or the queue's own.
    pub(crate) visibility: Duration,
    /// The leases of the messages the consumer holds: the intake opens them, the heartbeat
    /// extends them, the settler ends them.
    pub(crate) leases: Arc<Leases>,
    /// The subscription's metrics.
    pub(crate) metrics: Arc<SubscriptionMetrics>,
    pub(crate) tasks: Tasks,
    /// How slowly the heartbeat's extensions have lately been answered: the intake reads it for
    /// each receive's visibility, the heartbeat for when an extension is due.
    pub(crate) latency: Arc<CallLatency>,
}

/// How often the heartbeat looks, for a subscription whose receives ask for `receive_visibility`
/// on a line that answers quickly: often enough to catch a lease well before half of it is gone.
pub(crate) fn tick(receive_visibility: Duration) -> Duration {
    (receive_visibility / 4).clamp(Duration::from_millis(100), Duration::from_secs(10))
}

/// How long a slow answer is remembered: one to two of these.
const LATENCY_WINDOW: Duration = Duration::from_secs(60);

/// The slowest answer the heartbeat's extensions got lately, and what a lease must so keep in hand.
///
/// A receive asks for a short visibility ([`RECEIVE_VISIBILITY_TIMEOUT`](crate::RECEIVE_VISIBILITY_TIMEOUT)),
/// so that what a receive given up takes comes back soon; the heartbeat extends a held message
/// once half of it is gone. That holds while SQS answers in well under half of it. When calls take
/// seconds (a congested network, a throttled or degraded endpoint), an extension sent at half time
/// arrives after the message became visible again: another receive takes it, counts a receive the
/// consumer never attempted, and a FIFO message waiting behind a long run could so reach the
/// queue's redrive without a single attempt. So the consumer measures its extensions: while one
/// has lately taken long, receives ask for a visibility that outlasts an extension twice as slow,
/// and extensions are sent that much ahead of the end (the [`reserve`](Self::reserve)).
#[derive(Debug)]
pub(crate) struct CallLatency {
    tick: Duration,
    windows: std::sync::Mutex<LatencyWindows>,
}

#[derive(Debug, Default)]
struct LatencyWindows {
    started: Option<Instant>,
    current: Duration,
    previous: Duration,
}

impl LatencyWindows {
    /// Moves the windows on to `now`: the current window becomes the previous one once it is a
    /// window old, and both are forgotten after two.
    fn roll(&mut self, now: Instant) {
        let Some(started) = self.started else {
            self.started = Some(now);
            return;
        };
        let age = now.saturating_duration_since(started);
        if age >= LATENCY_WINDOW * 2 {
            *self = Self {
                started: Some(now),
                ..Self::default()
            };
        } else if age >= LATENCY_WINDOW {
            self.previous = std::mem::take(&mut self.current);
            self.started = Some(started + LATENCY_WINDOW);
        }
    }
}

impl CallLatency {
    /// The latency of a subscription whose messages' visibility timeout is `visibility`; its
    /// heartbeat ticks as [`tick`] says for the receive's visibility on a quick line.
    pub(crate) fn for_visibility(visibility: Duration) -> Self {
        Self {
            tick: tick(crate::model::queue::receive_visibility(
                visibility,
                Duration::ZERO,
            )),
            windows: std::sync::Mutex::default(),
        }
    }

    /// The heartbeat's tick.
    pub(crate) fn tick(&self) -> Duration {
        self.tick
    }

    /// Notes that a call was answered after `took`.
    pub(crate) fn record(&self, took: Duration) {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        windows.roll(Instant::now());
        windows.current = windows.current.max(took);
    }

    /// The slowest answer of the last one to two minutes.
    pub(crate) fn slowest(&self) -> Duration {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        windows.roll(Instant::now());
        windows.current.max(windows.previous)
    }

    /// How much of its visibility a lease must have left when its extension is sent: twice the
    /// slowest recent answer (room for a line growing slower) and two ticks (the heartbeat looks
    /// once a tick); nothing while every answer came quickly.
    pub(crate) fn reserve(&self) -> Duration {
        let slowest = self.slowest();
        if slowest.is_zero() {
            return Duration::ZERO;
        }
        slowest * 2 + self.tick * 2
    }
}

/// An engine task whose panic is logged; the messages it held are released by the heartbeat.
///
/// `task` is boxed here, before the task is spawned, not at its first poll: the future spawned
/// is then a pointer and a little state, where it would otherwise hold `task` whole (a message's
/// task is kilobytes) and be copied whole into the task and again into its stage.
pub(crate) fn guarded(task: impl Future<Output = ()>) -> impl Future<Output = ()> {
    guarded_part(Box::pin(task))
}

/// One message's part of an engine task that runs a receive's messages together: a panic in it
/// is logged and ends this part only, so its batch-mates go on; the message it held is released by
/// the heartbeat, as an engine task's would be ([`guarded`]). Pinned in place, not boxed: the task
/// holds its parts side by side in one allocation. Not an `async fn`: one would hold `part` twice,
/// as its argument and as the local it pins (a message's part, over two kilobytes, twice).
pub(crate) fn guarded_part(part: impl Future<Output = ()>) -> impl Future<Output = ()> {
    futures_util::FutureExt::map(crate::task::CatchUnwind::new(part), |attempted| {
        if let Err(panic) = attempted {
            tracing::error!(panic = %panic, "an engine task panicked; the messages it held are released");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A part that panics ends alone: its batch-mates in the same task, before and after it, run
    /// to their end, polled in place (not boxed) after the panic as before it.
    #[tokio::test]
    async fn a_part_that_panics_ends_alone_and_its_batch_mates_finish() {
        let finished = Arc::new(AtomicUsize::new(0));
        let part = |n: usize| {
            let finished = finished.clone();
            guarded_part(async move {
                tokio::task::yield_now().await;
                assert_ne!(n, 1, "part 1 panics after its first poll");
                tokio::task::yield_now().await;
                finished.fetch_add(1, Ordering::SeqCst);
            })
        };
        futures_util::future::join_all((0..3).map(part)).await;
        assert_eq!(finished.load(Ordering::SeqCst), 2, "parts 0 and 2 finished");
    }

    /// Work started here runs in the caller's task up to its first wait and costs no task when
    /// it is done at once; what waits goes on in a task of its own, woken there (its futures take
    /// the new task's waker), and counts as one until it ends.
    #[tokio::test]
    async fn work_started_here_runs_here_until_it_waits_then_in_a_task_of_its_own() {
        let tasks = Tasks::default();
        let steps = Arc::new(AtomicUsize::new(0));
        let at_once = steps.clone();
        tasks
            .start_here(async move {
                at_once.fetch_add(1, Ordering::SeqCst);
            })
            .await;
        assert_eq!(steps.load(Ordering::SeqCst), 1, "done here, at once");
        assert_eq!(tasks.len(), 0, "work done at once is no task");

        let (go, gone) = tokio::sync::oneshot::channel::<()>();
        let waits = steps.clone();
        tasks
            .start_here(async move {
                waits.fetch_add(1, Ordering::SeqCst);
                gone.await.expect("told to go on");
                waits.fetch_add(1, Ordering::SeqCst);
            })
            .await;
        assert_eq!(steps.load(Ordering::SeqCst), 2, "ran here up to its wait");
        assert_eq!(tasks.len(), 1, "what waits is a task");
        go.send(()).expect("the task waits");
        tasks.close();
        tokio::time::timeout(Duration::from_secs(10), tasks.wait())
            .await
            .expect("the task was woken in its own task and ended");
        assert_eq!(steps.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_lengthens_receives_and_sends_extensions_ahead_for_two_minutes_at_most() {
        let subscription = Duration::from_secs(30);
        let latency = CallLatency::for_visibility(subscription);
        let tick = latency.tick();
        assert_eq!(tick, Duration::from_millis(2500));
        let receive = |latency: &CallLatency| {
            crate::model::queue::receive_visibility(subscription, latency.reserve())
        };
        assert_eq!(
            latency.reserve(),
            Duration::ZERO,
            "a quick line keeps nothing back"
        );
        assert_eq!(receive(&latency), Duration::from_secs(10));

        latency.record(Duration::from_millis(300));
        assert_eq!(
            receive(&latency),
            Duration::from_secs(10),
            "0.3 s fits in 10 s"
        );

        latency.record(Duration::from_secs(6));
        assert_eq!(latency.reserve(), Duration::from_secs(12) + tick * 2);
        assert_eq!(
            receive(&latency),
            Duration::from_secs(17),
            "rounded up to whole seconds"
        );

        latency.record(Duration::from_secs(15));
        assert_eq!(
            receive(&latency),
            subscription,
            "never past the subscription's own visibility"
        );

        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(
            latency.slowest(),
            Duration::from_secs(15),
            "remembered a while"
        );
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(
            latency.slowest(),
            Duration::ZERO,
            "forgotten after two windows"
        );
        assert_eq!(receive(&latency), Duration::from_secs(10));
    }
}
