//! What the parts of one consumer share: its engine tasks with the stop's signals to them
//! ([`Tasks`]), and what every part is built with ([`Shared`]).
//!
//! `mod.rs` makes one of each when a subscription starts and hands them to the parts it builds;
//! each part copies what it uses into fields of its own, so at run time no part reads another's
//! state. The stop itself (its steps and when it takes them) stays in `mod.rs`: the parts only see
//! its signals, and count in [`Tasks`] so the stop knows when nothing of the consumer is left.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::task_tracker::{TaskTrackerToken, TaskTrackerWaitFuture};
use tokio_util::task::TaskTracker;

use crate::client::lease::Leases;
use crate::metrics::SubscriptionMetrics;

/// A consumer's engine tasks (its pollers, a task per standard message, a task per FIFO lane, and
/// deletes nobody awaits), and the stop's signals to them.
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
    pub(crate) fifo: bool,
    /// The visibility timeout of received messages: configured, or the queue's own.
    pub(crate) visibility: Duration,
    /// The leases of the messages the consumer holds: the intake opens them, the heartbeat
    /// extends them, the settler ends them.
    pub(crate) leases: Arc<Leases>,
    /// The subscription's metrics.
    pub(crate) metrics: Arc<SubscriptionMetrics>,
    pub(crate) tasks: Tasks,
}

impl Shared {
    /// The visibility timeout a receive asks for: the subscription's, at most
    /// [`RECEIVE_VISIBILITY_TIMEOUT`](crate::RECEIVE_VISIBILITY_TIMEOUT); the heartbeat extends
    /// what is held longer.
    pub(crate) fn receive_visibility(&self) -> Duration {
        crate::model::queue::receive_visibility(self.visibility)
    }
}

/// An engine task whose panic is logged; the messages it held are released by the heartbeat.
pub(crate) async fn guarded(task: impl Future<Output = ()>) {
    if let Err(panic) = crate::task::CatchUnwind::new(Box::pin(task)).await {
        tracing::error!(panic = %panic, "an engine task panicked; the messages it held are released");
    }
}
