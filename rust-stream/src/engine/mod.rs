//! The consumer engine: one engine over a [`Transport`](crate::transport::Transport), whichever backend
//! is underneath.
//!
//! Each subscription runs as one consumer (the subscriptions of a queue routed by type together, as
//! one: [`crate::routing`]), made of parts that each own their state, a type to a file, and hand a
//! message on as small values: the intake (`poll.rs`) receives, the dispatcher (`dispatch.rs`) runs
//! the handler, on FIFO in a group's lane (`lane.rs`: the lane's task, its run of deletes, its rest
//! and what holds the group back; the table of lanes in `lanes.rs`), the settler (`settle/`)
//! deletes, retries or dead-letters, and the heartbeat (`extend.rs`) keeps what is held from timing
//! out. Calls only go one way, intake → dispatcher → settler and heartbeat → settler; `mod.rs`
//! builds and wires the parts and keeps the lifecycle, and no part calls back into it.
//!
//! # A message's path
//!
//! 1. **Receive** (`poll::Intake`): one poller receives, more while receives come back full (up
//!    to the subscription's `pollers`), fewer once they come back empty; each takes room for one
//!    batch from the dispatcher (the subscription's *capacity*: one batch per poller beyond what
//!    the handlers work through: a message per handler slot, on FIFO a batch per slot, as a slot
//!    there works through a group's run), and on FIFO waits until fewer groups run than the concurrency; then it
//!    asks the subscription's flow ([`crate::flow`]: none while its backpressure is tripped, no
//!    more messages than its rate limit has tokens), long-polls for that many, opens a lease per
//!    message, and hands each on as a `held::Held`: its delivery, its lease, its room. Under a
//!    per-key in-flight limit (`keys.rs`) a message whose key is full waits for it, held, up to
//!    a bound, and beyond it is given back at once.
//! 2. **Dispatch** (`dispatch::Dispatcher`): on a standard queue each message waits for a handler
//!    slot in its receive's task (spread over the runtime's worker threads while recent handlers
//!    held their thread long), beside the receive's other messages, each attempted and settled by itself; on a FIFO queue it joins its group's *lane* (`lanes::Lanes`),
//!    whose task (`lane.rs`) runs one message at a time in sequence order, while lanes of different
//!    groups run in parallel. Decoding and the handler run in that task behind a panic
//!    catch; a handler timeout cancels it, and so does the shutdown timeout (`attempt.rs` holds
//!    what every call shares). The attempt ends in a `settle::Verdict`. A batch handler's
//!    subscription hands its messages to `batches::Batches` instead: a standard message alone, a
//!    FIFO lane its next messages in order (a *run*); runs gather into one call (up to the batch's
//!    `max`, within its `window`), which answers a verdict per message, and the lane settles them
//!    in order until one does not go forward, putting the later ones of its group back to run again
//!    after it.
//! 3. **Settle** (`settle::Settler`): ack sends the handler's staged outputs, then deletes;
//!    dead-letter sends a copy to the dead-letter queue, then deletes. Every failure goes to the
//!    one [retry decision](crate::retry): retry after a backoff delay (on FIFO in place, holding
//!    the group; on a standard queue by a visibility change), or dead-letter once the message has
//!    had its attempts. The settler tells the lane what comes `settle::Next`: go on, run the
//!    message again after a delay, give it back (with the rest of its group, on FIFO), or, on FIFO,
//!    add its delete to the lane's run (`lane::Run`), which the lane deletes in one call and waits
//!    for before the group goes anywhere else. Deletes, visibility changes and sends all go through
//!    the one batcher; a standard queue's deletes are not awaited (the message keeps its room until
//!    answered), a FIFO subscription's runs go through a deleter of its own that keeps lanes
//!    answered together sharing their next call.
//! 4. **Extend** (`extend::Heartbeat`): from the receive until the message is settled, a
//!    heartbeat keeps its lease from timing out, and has the settler release the messages of an
//!    engine task that ended without settling them.
//!
//! # The lifecycle
//!
//! `mod.rs` checks the subscriptions (and the routes of queues several of them read), resolves
//! their queues, then the topics they are subscribed to and their subscriptions (`topics`: found
//! and compared, or made), makes each routed queue's subscriptions one (`routing::merge`), decides
//! where each one's failed messages go (the checks and these decisions are in `plan.rs`), and
//! builds its consumer: what the parts share (`shared::Shared`: the queue's name,
//! FIFO or not, the visibility, the leases, the metrics; `shared::Tasks`: the engine tasks and the
//! stop's signals to them), then the settler, the dispatcher over it, the intake over both, and
//! the heartbeat. Shutdown stops new receives, lets a receive in flight finish while messages
//! are held (what it got is handled like the rest) and gives it up once nothing is, or when
//! handlers are cancelled (a receive asks for a short visibility, so what one given up takes is
//! hidden briefly), starts held messages for the first half of the budget and parks the rest,
//! lets running handlers finish within the app's timeout and then cancels them, releases what the
//! dispatcher parked and every message held but not settled (visibility 0), and returns once no
//! task of the consumer is left, within the budget.
//!
//! While the consumers run, `backlog.rs` samples what their queues and dead-letter queues hold,
//! one `GetQueueAttributes` call a queue an interval, into the backlog gauges.
//!
//! The settler and the dispatcher over it are built by `parts.rs`, alike for the Lambda host
//! (`crate::lambda`, feature `lambda`), which hands them each event's records (`event.rs`)
//! where the server has its intake and heartbeat.
//!
//! On the path of step 1, a receive asks for the subscription's visibility timeout, at most
//! [`RECEIVE_VISIBILITY_TIMEOUT`](crate::RECEIVE_VISIBILITY_TIMEOUT); the heartbeat (step 4)
//! extends what is still held after half of that to the subscription's.
//!
//! # Tracing
//!
//! Span and field names follow the OpenTelemetry messaging conventions (semconv 1.26):
//!
//! | span | fields |
//! | --- | --- |
//! | `receive` | `messaging.system`, `messaging.destination.name`, `messaging.operation.type`, `messaging.batch.message_count` |
//! | `process` | `messaging.system`, `messaging.destination.name`, `messaging.operation.type`, `messaging.message.id`, `sqs.group_id`, `sqs.receive_count`, `rust_stream.handler`, `rust_stream.attempt`, `rust_stream.outcome` (recorded once the attempt is settled), `traceparent` (the incoming one) |
//! | `process` (a batch handler's call) | `messaging.system`, `messaging.destination.name`, `messaging.operation.type`, `messaging.batch.message_count`, `rust_stream.handler`; each message of the call keeps its own `process` span above, for its settling |
//!
//! A `process` span lasts from the start of an attempt until the attempt is settled (deleted,
//! retried, dead-lettered or released), so every event the engine logs about the message (a
//! retry and its reason, the dead-letter move, a release, a failed delete) is inside it. With the
//! `opentelemetry` feature it continues the trace the message carries ([`crate::propagation`]).

mod attempt;
mod backlog;
mod batches;
pub(crate) mod dispatch;
#[cfg(feature = "lambda")]
pub(crate) mod event;
pub(crate) mod extend;
pub(crate) mod held;
mod keys;
mod lane;
pub(crate) mod lanes;
mod parts;
mod payload;
mod plan;
pub(crate) mod poll;
pub(crate) mod settle;
pub(crate) mod shared;
pub(crate) mod start;
mod topics;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::app::{AppContext, RunError};
use crate::client::lease::Leases;
use crate::client::Client;
use crate::health::{Inspect, QueueLoad, SubscriptionProbe};
use crate::metrics::SubscriptionMetrics;
use crate::model::queue::ConfigErrors;
use crate::model::SqsQueue;
use crate::state::States;
use crate::subscriber::Subscriber;
use crate::task::BoxFuture;
use dispatch::Dispatcher;
use extend::Heartbeat;
use parts::Parts;
use poll::Intake;
use settle::Deletes;
use settle::Settler;
use shared::Tasks;
use start::StartError;

/// Runs every subscription until shutdown, then stops them gracefully.
pub(crate) async fn run(
    client: Arc<Client>,
    subscribers: Vec<Subscriber>,
    app: AppContext,
) -> Result<(), RunError> {
    let subscribers = prepare(&client, subscribers, &app).await?;
    let shutdown = app.shutdown();
    plan::warn_about_settings(&subscribers);
    // Whatever ends this future, its consumers stop: a future dropped before its end (a timeout
    // around `run`) stops them in the background, as a signal would.
    let mut running = StopOnDrop {
        consumers: Vec::new(),
        budget: shutdown.timeout(),
    };
    for subscriber in subscribers {
        let probe = app.subscription_probe(&subscriber.queue.name);
        match Consumer::start(&client, subscriber, app.states().clone(), probe).await {
            Ok(consumer) => running.consumers.push(consumer),
            Err(error) => {
                // Nothing the app started may outlive its failed start.
                stop_all(running.take(), shutdown.timeout()).await;
                return Err(error);
            }
        }
    }
    let sampler = client.backlog_interval().map(|interval| {
        let subscribed = running
            .consumers
            .iter()
            .map(|consumer| backlog::Subscribed {
                queue: consumer.queue.name.clone(),
                url: consumer.url.clone(),
                metrics: consumer.metrics.clone(),
                dead_letter: consumer.dead_letter_queue.clone(),
            })
            .collect();
        backlog::start(client.clone(), interval, subscribed)
    });
    tracing::info!(subscriptions = running.consumers.len(), "consuming");
    app.consuming(Arc::new(AppQueues {
        client: client.clone(),
        consumed: running
            .consumers
            .iter()
            .map(|consumer| consumer.queue.name.clone())
            .collect(),
    }));
    shutdown.requested().await;
    // A draining app samples no more; its gauges keep their last figures.
    drop(sampler);
    tracing::info!("shutting down");
    app.draining();
    stop_all(running.take(), shutdown.timeout()).await;
    Ok(())
}

/// What every host of an app does before its first message, the server's run and the Lambda host
/// alike: checks the subscriptions, resolves (or creates) every queue the app names, wires its
/// topics, and makes the subscribers of each routed queue one, which routes by type.
pub(crate) async fn prepare(
    client: &Arc<Client>,
    subscribers: Vec<Subscriber>,
    app: &AppContext,
) -> Result<Vec<Subscriber>, RunError> {
    let type_header = client.type_header();
    let problems = plan::problems(&subscribers, client, app, &type_header);
    if !problems.is_empty() {
        return Err(RunError::Config(ConfigErrors(problems)));
    }
    // Every queue the app names is resolved (or created) before any consumer starts, dead-letter
    // queues first, so no declaration depends on the order of `include`.
    for queue in client.declared_queues(crate::subscriber::declarations(&subscribers)) {
        client
            .resolve(&queue)
            .await
            .map_err(|error| StartError::from_transport(queue.name.clone(), error))?;
    }
    // Then the topics the app declares, and its queues' subscriptions to them.
    topics::wire(client, crate::subscriber::declarations(&subscribers)).await?;
    // Several subscribers of one queue become one consumer that routes by type.
    Ok(crate::routing::merge(subscribers, type_header))
}

/// The consumers of a run, stopped in the background if the run's future is dropped first.
struct StopOnDrop {
    consumers: Vec<Arc<Consumer>>,
    budget: Duration,
}

impl StopOnDrop {
    fn take(&mut self) -> Vec<Arc<Consumer>> {
        std::mem::take(&mut self.consumers)
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let consumers = self.take();
        if consumers.is_empty() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::warn!(
                    subscriptions = consumers.len(),
                    "the app's run was dropped before it stopped; its consumers stop now"
                );
                runtime.spawn(stop_all(consumers, self.budget));
            }
            Err(_) => tracing::error!(
                "the app's run was dropped outside a runtime; its held messages come back after their visibility timeout"
            ),
        }
    }
}

/// Stops consumers side by side and returns when all have stopped.
async fn stop_all(consumers: Vec<Arc<Consumer>>, timeout: Duration) {
    let stops: Vec<_> = consumers
        .into_iter()
        .map(|consumer| tokio::spawn(consumer.stop(timeout)))
        .collect();
    for stop in stops {
        if let Err(error) = stop.await {
            tracing::error!(error = %error, "a consumer's stop failed");
        }
    }
}

/// One running subscription: the parts it was built from, and what its stop needs.
struct Consumer {
    client: Arc<Client>,
    queue: SqsQueue,
    url: String,
    /// Every message the consumer holds, released by the stop's last step.
    leases: Arc<Leases>,
    tasks: Tasks,
    intake: Arc<Intake>,
    dispatcher: Arc<Dispatcher>,
    settler: Arc<Settler>,
    /// What the subscription tells the app's health.
    probe: Arc<SubscriptionProbe>,
    /// Its metrics, which the backlog's sampler reads the ages of received messages from.
    metrics: Arc<SubscriptionMetrics>,
    /// Its dead-letter queue's name, for the backlog's sampler.
    dead_letter_queue: Option<String>,
    heartbeat: Mutex<Option<Heartbeat>>,
}

/// When a stop, from its start, moves to its next step: see [`Consumer::stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StopPlan {
    /// Until then held messages still start.
    start_until: Duration,
    /// Then running handlers are cancelled, leaving the rest of the budget for them to unwind and
    /// for the final release.
    cancel_at: Duration,
}

impl StopPlan {
    fn new(budget: Duration) -> Self {
        let reserve = (budget / 5).min(Duration::from_secs(3));
        Self {
            start_until: budget / 2,
            cancel_at: budget.saturating_sub(reserve),
        }
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &self.queue.name)
            .field("url", &self.url)
            .finish()
    }
}

impl Consumer {
    /// Resolves the queue (creating it when asked), decides where failed messages go, binds the
    /// outputs, builds the parts and starts the pollers and the heartbeat.
    async fn start(
        client: &Arc<Client>,
        subscriber: Subscriber,
        states: Arc<States>,
        probe: Arc<SubscriptionProbe>,
    ) -> Result<Arc<Self>, RunError> {
        let Parts {
            queue,
            url,
            shared,
            settler,
            dispatcher,
            visibility_batcher,
            max_attempts,
            dead_letter_queue,
        } = Parts::build(client, subscriber, states, Deletes::Own).await?;
        let settings = &queue.consumer;
        let (fifo, visibility) = (shared.fifo, shared.visibility);
        let intake = Arc::new(Intake::new(
            &shared,
            client.clone(),
            settings,
            probe.clone(),
            dispatcher.clone(),
            settler.clone(),
        ));
        intake.start().await;
        probe.started();
        let heartbeat = Heartbeat::start(&shared, visibility_batcher, settler.clone());
        tracing::info!(
            messaging.destination.name = %queue.name,
            fifo,
            visibility_timeout_s = visibility.as_secs(),
            max_attempts,
            "subscribed"
        );
        Ok(Arc::new(Self {
            client: client.clone(),
            metrics: shared.metrics,
            dead_letter_queue,
            url,
            leases: shared.leases,
            tasks: shared.tasks,
            intake,
            dispatcher,
            settler,
            probe,
            heartbeat: Mutex::new(Some(heartbeat)),
            queue,
        }))
    }

    /// Stops within `budget`, in steps. No new receive starts; held messages go on starting for
    /// the first half of the budget (so a rolling restart gives back as little as it can, each
    /// message given back costing it a receive at SQS); then what has not started is parked;
    /// handlers still running when a reserve for the final release is all that is left are
    /// cancelled; once no task of the consumer is left, every message still held is released
    /// (visibility 0) in one round. What a receive in flight brings is handled like the rest.
    ///
    /// Over a network a receive in flight is waited for at least `poll::STOP_RECEIVE_GRACE` (one
    /// answering is read) and while the consumer holds messages (the open long poll could take
    /// back what the final release gives back), then given up: once nothing is held, and at the
    /// latest when handlers are cancelled. A server may go on with a long poll given up and hand
    /// it messages, which stay hidden for the receive's visibility timeout: at most
    /// `RECEIVE_VISIBILITY_TIMEOUT`, as every receive asks.
    async fn stop(self: Arc<Self>, budget: Duration) {
        let started = tokio::time::Instant::now();
        let plan = StopPlan::new(budget);
        self.tasks.stopping().cancel();
        self.probe.stopped();
        self.tasks.close();
        let receiving = self.intake.receiving();
        let over_network = !self.client.transport().abandoned_receive_takes_nothing();
        // Gives the receives up once nothing is held: a long poll then has nothing to take back.
        let give_up_when_idle = over_network.then(|| {
            let (tasks, leases) = (self.tasks.clone(), self.leases.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until(started + poll::STOP_RECEIVE_GRACE).await;
                leases.emptied().await;
                tasks.give_up_receives().cancel();
            })
        });
        if receiving > 0 && over_network {
            tracing::info!(
                messaging.destination.name = %self.queue.name,
                receives = receiving,
                long_poll_s = self.queue.consumer.wait.as_secs(),
                grace_ms = poll::STOP_RECEIVE_GRACE.as_millis() as u64,
                hidden_at_most_s = self.intake.visibility().as_secs(),
                "stopping: waiting for the receive in flight to answer, for grace_ms and while messages are held, so what it \
                 brings is handled or released rather than hidden; then it is given up, and what it takes is hidden for \
                 hidden_at_most_s"
            );
        }
        let finished =
            |until: Duration| tokio::time::timeout_at(started + until, self.tasks.wait());
        if finished(plan.start_until).await.is_err() {
            let held = self.leases.all().len();
            tracing::info!(
                messaging.destination.name = %self.queue.name,
                held,
                "stopping: no more attempts start; held messages not started go back to the queue"
            );
            self.tasks.no_new_attempts().cancel();
            if finished(plan.cancel_at).await.is_err() {
                // The final release is near: a receive still in flight is given up now, or the
                // stop would wait for its long poll past the budget.
                self.tasks.give_up_receives().cancel();
                if self.tasks.len() > self.intake.receiving() {
                    tracing::warn!(
                        messaging.destination.name = %self.queue.name,
                        budget_ms = budget.as_millis() as u64,
                        "handlers still running near the end of the shutdown budget are cancelled; their messages are released"
                    );
                }
                self.tasks.cancel_handlers().cancel();
                if finished(budget).await.is_err() {
                    // Cancelled handlers unwind at their next await, and receives given up end
                    // at once: what is left blocks its thread, or is a call that has not come
                    // back. What is held is released now, so the stop keeps its budget.
                    tracing::error!(
                        messaging.destination.name = %self.queue.name,
                        tasks = self.tasks.len(),
                        budget_ms = budget.as_millis() as u64,
                        "engine tasks still running at the end of the shutdown budget (a handler may block its thread); \
                         what is held is released now"
                    );
                }
            }
        }
        if let Some(watch) = give_up_when_idle {
            watch.abort();
        }
        self.tasks.no_new_attempts().cancel();
        self.tasks.cancel_handlers().cancel();
        let parked = self.dispatcher.take_parked();
        if !parked.is_empty() {
            self.settler.release(parked, 0).await;
        }
        let held = self.leases.all();
        if !held.is_empty() {
            self.settler.release_leases(held, 0).await;
        }
        let heartbeat = self
            .heartbeat
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(heartbeat) = heartbeat {
            heartbeat.stop().await;
        }
    }
}

/// A running app's queues: every queue its broker resolved, and which of them it consumes.
struct AppQueues {
    client: Arc<Client>,
    consumed: Vec<String>,
}

impl Inspect for AppQueues {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueLoad>, String>> {
        Box::pin(async move {
            const COUNTS: [&str; 3] = [
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ];
            let mut loads = Vec::new();
            for (name, url) in self.client.resolved_queues() {
                let attributes = self
                    .client
                    .transport()
                    .get_queue_attributes(&url, &COUNTS)
                    .await
                    .map_err(|error| format!("queue `{name}`: {error}"))?;
                let count = |attribute: &str| {
                    attributes
                        .get(attribute)
                        .and_then(|value| value.parse().ok())
                        .unwrap_or(0)
                };
                let consumed = self.consumed.contains(&name);
                loads.push(QueueLoad::new(
                    name,
                    consumed,
                    count(COUNTS[0]),
                    count(COUNTS[1]),
                    count(COUNTS[2]),
                ));
            }
            Ok(loads)
        })
    }
}
