//! The consumer engine: one engine over a [`Transport`](transport::Transport), whichever backend
//! is underneath.
//!
//! # A message's path
//!
//! 1. **Receive** (`poll.rs`): each poller takes room for one batch from the subscription's
//!    *capacity* (concurrency plus one batch per poller, so the consumer never holds more),
//!    long-polls, and opens a lease per message.
//! 2. **Dispatch** (`dispatch.rs`): on a standard queue each message waits for a handler slot; on
//!    a FIFO queue it joins its group's *lane*, which runs one message at a time in sequence order,
//!    while lanes of different groups run in parallel. Decoding and the handler run in their own
//!    task, so a panic is caught and the message retried.
//! 3. **Settle** (`settle.rs`): ack sends the handler's staged outputs, then deletes; retry and
//!    `retry_after` change visibility; dead-letter sends to the dead-letter queue, then deletes.
//!    On FIFO a retried message takes the rest of its lane with it in one
//!    `ChangeMessageVisibilityBatch`, so the group comes back whole and in order. Deletes,
//!    visibility changes and sends all go through the one batcher (`batch.rs`).
//! 4. **Extend** (`extend.rs`): a heartbeat keeps every held lease from timing out.
//!
//! Shutdown stops the pollers, lets running handlers finish within the app's timeout, releases
//! every message held but not settled (visibility 0), and returns.
//!
//! # Tracing
//!
//! Span and field names follow the OpenTelemetry messaging conventions (semconv 1.26):
//!
//! | span | fields |
//! | --- | --- |
//! | `receive` | `messaging.system`, `messaging.destination.name`, `messaging.operation.type`, `messaging.batch.message_count` |
//! | `process` | `messaging.system`, `messaging.destination.name`, `messaging.operation.type`, `messaging.message.id`, `sqs.group_id`, `sqs.receive_count` |

pub(crate) mod batch;
pub(crate) mod dispatch;
pub(crate) mod extend;
pub mod meter;
pub(crate) mod poll;
pub(crate) mod settle;
pub mod transport;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify, Semaphore};

use crate::app::{AppContext, RunError};
use crate::handler::{ErasedHandler, Subscriber};
use crate::publish::Publisher;
use crate::sqs::queue::{ConfigError, ConfigErrors};
use crate::sqs::{BrokerCore, SqsQueue};
use crate::state::States;
use dispatch::Lane;
use extend::Leases;

/// Runs every subscription until shutdown, then stops them gracefully.
pub(crate) async fn run(
    core: Arc<BrokerCore>,
    subscribers: Vec<Subscriber>,
    app: AppContext,
) -> Result<(), RunError> {
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    for subscriber in &subscribers {
        subscriber.queue.problems(&mut problems);
        for requirement in &subscriber.requirements {
            if !app.states().contains(requirement.type_id) {
                problems.push(ConfigError::MissingState {
                    queue: subscriber.queue.name.clone(),
                    type_name: requirement.type_name,
                });
            }
        }
        if !seen.insert(subscriber.queue.name.clone()) {
            problems.push(ConfigError::DuplicateSubscription {
                queue: subscriber.queue.name.clone(),
            });
        }
    }
    if !problems.is_empty() {
        return Err(RunError::Config(ConfigErrors(problems)));
    }
    let mut consumers = Vec::new();
    for subscriber in subscribers {
        consumers.push(Consumer::start(&core, subscriber, app.states().clone()).await?);
    }
    tracing::info!(subscriptions = consumers.len(), "consuming");
    let shutdown = app.shutdown();
    shutdown.requested().await;
    tracing::info!("shutting down");
    let stops: Vec<_> = consumers
        .into_iter()
        .map(|consumer| tokio::spawn(consumer.stop(shutdown.timeout())))
        .collect();
    for stop in stops {
        let _ = stop.await;
    }
    Ok(())
}

/// One running subscription.
pub(crate) struct Consumer {
    pub(crate) core: Arc<BrokerCore>,
    pub(crate) queue: SqsQueue,
    pub(crate) url: String,
    pub(crate) fifo: bool,
    /// The visibility timeout of received messages: configured, or the queue's own.
    pub(crate) visibility: Duration,
    pub(crate) dead_letter: Option<Publisher>,
    pub(crate) handler: Arc<dyn ErasedHandler>,
    pub(crate) states: Arc<States>,
    pub(crate) deleter: batch::Batcher<batch::DeleteBatch>,
    pub(crate) visibility_batcher: batch::Batcher<batch::VisibilityBatch>,
    pub(crate) leases: Leases,
    /// Room for held messages: concurrency plus one batch per poller.
    pub(crate) capacity: Arc<Semaphore>,
    /// Handler slots.
    pub(crate) running: Arc<Semaphore>,
    pub(crate) lanes: Mutex<HashMap<String, Lane>>,
    stopping: watch::Sender<bool>,
    tasks: Tasks,
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
    /// Resolves the queue (creating it when asked), binds the outputs, and starts the pollers
    /// and the heartbeat.
    async fn start(
        core: &Arc<BrokerCore>,
        subscriber: Subscriber,
        states: Arc<States>,
    ) -> Result<Arc<Self>, RunError> {
        let queue = subscriber.queue;
        let failed = |queue: &SqsQueue| {
            let name = queue.name.clone();
            move |error| RunError::from_transport(name, error)
        };
        let url = core.resolve(&queue).await.map_err(failed(&queue))?;
        let attributes = core
            .transport
            .get_queue_attributes(&url, &["VisibilityTimeout", "RedrivePolicy"])
            .await
            .map_err(failed(&queue))?;
        let visibility = queue.consumer.visibility_timeout.unwrap_or_else(|| {
            let seconds = attributes
                .get("VisibilityTimeout")
                .and_then(|v| v.parse().ok())
                .unwrap_or(30);
            Duration::from_secs(seconds).max(Duration::from_secs(1))
        });
        if queue.dead_letter.is_none() && !attributes.contains_key("RedrivePolicy") {
            // Nothing would ever stop a message that always fails; on FIFO it blocks its group.
            tracing::warn!(
                messaging.destination.name = %queue.name,
                "queue has no dead-letter queue and no redrive policy: a message that keeps failing is retried forever; \
                 declare `.dead_letter(queue, max_receive_count)`"
            );
        }
        let dead_letter = match queue.dead_letter_queue() {
            Some(dead_letter) => {
                core.resolve(&dead_letter)
                    .await
                    .map_err(failed(&dead_letter))?;
                Some(Publisher::bound(dead_letter, core.clone()))
            }
            None => None,
        };
        for output in &subscriber.outputs {
            output.bind(core);
            core.resolve(output.queue())
                .await
                .map_err(failed(output.queue()))?;
        }
        let settings = &queue.consumer;
        let consumer = Arc::new(Self {
            core: core.clone(),
            fifo: queue.is_fifo(),
            visibility,
            dead_letter,
            handler: subscriber.handler,
            states,
            deleter: core.deleter(&url),
            visibility_batcher: core.visibility_batcher(&url),
            leases: Leases::default(),
            capacity: Arc::new(Semaphore::new(
                settings.concurrency + settings.pollers * settings.batch_size,
            )),
            running: Arc::new(Semaphore::new(settings.concurrency)),
            lanes: Mutex::new(HashMap::new()),
            stopping: watch::Sender::new(false),
            tasks: Tasks::default(),
            url,
            queue,
        });
        for _ in 0..consumer.queue.consumer.pollers {
            consumer.spawn(consumer.clone().poll());
        }
        tokio::spawn(consumer.clone().heartbeat());
        tracing::info!(
            messaging.destination.name = %consumer.queue.name,
            fifo = consumer.fifo,
            visibility_timeout_s = consumer.visibility.as_secs(),
            "subscribed"
        );
        Ok(consumer)
    }

    /// Stops receiving, lets running handlers finish within `timeout`, and releases every
    /// message still held.
    async fn stop(self: Arc<Self>, timeout: Duration) {
        self.stopping.send_replace(true);
        if tokio::time::timeout(timeout, self.tasks.idle())
            .await
            .is_err()
        {
            tracing::warn!(
                messaging.destination.name = %self.queue.name,
                timeout_s = timeout.as_secs(),
                "handlers still running at the shutdown timeout; their messages are released"
            );
        }
        let held = self.leases.all();
        if !held.is_empty() {
            self.release(held, 0).await;
        }
        self.tasks.stopped.notify_waiters();
    }

    /// Resolves once shutdown has begun.
    pub(crate) async fn stopping(&self) {
        let mut stopping = self.stopping.subscribe();
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }

    pub(crate) fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once the consumer has stopped and holds no message.
    async fn released_all(&self) {
        loop {
            // Registered before looking, so a notification between the look and the wait counts.
            let stopped = self.tasks.stopped.notified();
            tokio::pin!(stopped);
            stopped.as_mut().enable();
            if self.is_stopping()
                && self.tasks.count.load(Ordering::Acquire) == 0
                && self.leases.len() == 0
            {
                return;
            }
            stopped.await;
        }
    }

    /// Spawns a task the shutdown waits for.
    pub(crate) fn spawn(
        self: &Arc<Self>,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.tasks.count.fetch_add(1, Ordering::AcqRel);
        let consumer = self.clone();
        tokio::spawn(async move {
            task.await;
            if consumer.tasks.count.fetch_sub(1, Ordering::AcqRel) == 1 {
                consumer.tasks.idle.notify_waiters();
            }
        });
    }
}

/// Counts a consumer's tasks, so shutdown knows when they are done.
#[derive(Debug, Default)]
struct Tasks {
    count: AtomicUsize,
    idle: Notify,
    /// Told when the consumer has stopped.
    stopped: Notify,
}

impl Tasks {
    async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}
