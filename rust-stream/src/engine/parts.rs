//! The parts of one subscription's consumer that handle and settle its messages, built alike for
//! every host of an app: the server's consumer (`mod.rs`) puts its intake and heartbeat around
//! them, the Lambda host (`crate::lambda`) hands them the records of each event instead.

use std::sync::Arc;
use std::time::Duration;

use super::dispatch::Dispatcher;
use super::lanes::Lanes;
use super::plan;
use super::settle::{Deletes, Settler};
use super::shared::{CallLatency, Shared, Tasks};
use super::start::StartError;
use crate::app::RunError;
use crate::client::batch::{Batcher, VisibilityBatch};
use crate::client::lease::Leases;
use crate::client::Client;
use crate::metrics::SubscriptionMetrics;
use crate::model::rules::{self, QueueAttribute};
use crate::model::SqsQueue;
use crate::retry::Retries;
use crate::state::States;
use crate::subscriber::Subscriber;

/// A subscription's handling and settling parts, over its resolved queue.
pub(crate) struct Parts {
    pub(crate) queue: SqsQueue,
    pub(crate) url: String,
    pub(crate) shared: Shared,
    pub(crate) settler: Arc<Settler>,
    pub(crate) dispatcher: Arc<Dispatcher>,
    pub(crate) visibility_batcher: Batcher<VisibilityBatch>,
    /// How many attempts a message has before it is dead-lettered, when it is.
    pub(crate) max_attempts: Option<u32>,
    /// The dead-letter queue's name: the declared one, else the queue's `RedrivePolicy`'s.
    pub(crate) dead_letter_queue: Option<String>,
}

impl Parts {
    /// Resolves the queue (creating it when asked), decides where failed messages go, binds the
    /// outputs and builds the settler and the dispatcher, which settles through it; `deletes`
    /// says who deletes what is settled.
    pub(crate) async fn build(
        client: &Arc<Client>,
        subscriber: Subscriber,
        states: Arc<States>,
        deletes: Deletes,
    ) -> Result<Self, RunError> {
        let queue = subscriber.queue;
        let failed = |queue: &SqsQueue| {
            let name = queue.name.clone();
            move |error| StartError::from_transport(name, error)
        };
        let url = client.resolve(&queue).await.map_err(failed(&queue))?;
        let attributes = client
            .transport()
            .get_queue_attributes(
                &url,
                &[
                    "VisibilityTimeout",
                    "RedrivePolicy",
                    "ContentBasedDeduplication",
                    "DeduplicationScope",
                    "FifoThroughputLimit",
                ],
            )
            .await
            .map_err(failed(&queue))?;
        plan::compare_with_declaration(&queue, &attributes)?;
        let visibility = queue.consumer.visibility_timeout.unwrap_or_else(|| {
            let seconds = attributes
                .get("VisibilityTimeout")
                .and_then(|v| v.parse().ok())
                .unwrap_or(30);
            Duration::from_secs(seconds).max(Duration::from_secs(1))
        });
        let redrive = attributes.get("RedrivePolicy").and_then(|value| {
            match rules::parse_queue_attribute("RedrivePolicy", value) {
                Ok(QueueAttribute::RedrivePolicy(policy)) => policy,
                _ => None,
            }
        });
        let dead_letter_queue = match (&queue.dead_letter, &redrive) {
            (Some(declared), _) => Some(declared.queue.clone()),
            (None, Some(policy)) => Some(policy.target_name().to_owned()),
            (None, None) => None,
        };
        let (dead_letter, max_attempts) =
            plan::dead_letter_decision(client, &queue, redrive.as_ref()).await?;
        for output in &subscriber.outputs {
            output.bind(client);
            // A topic is resolved with the app's other topics, before any subscription started.
            if let Some(queue) = output.destination().queue() {
                client.resolve(queue).await.map_err(failed(queue))?;
            }
        }
        let settings = &queue.consumer;
        let fifo = queue.is_fifo();
        let retries = Retries {
            policy: settings.retry.clone(),
            max_attempts,
            can_dead_letter: dead_letter.is_some(),
        };
        let metrics = Arc::new(SubscriptionMetrics::new(&queue.name));
        let shared = Shared {
            queue: Arc::from(queue.name.as_str()),
            url: Arc::from(url.as_str()),
            fifo,
            visibility,
            leases: Arc::new(Leases::counted_by(metrics.held.clone())),
            metrics,
            tasks: Tasks::default(),
            latency: Arc::new(CallLatency::for_visibility(visibility)),
        };
        // A FIFO subscription's deletes wait for each other by its lanes: those running, and
        // neither resting nor deleting a full run themselves, may each have a delete coming.
        let lanes = Lanes::default();
        let deleter = if fifo {
            let counts = lanes.counts().clone();
            let left = counts.left().clone();
            client.confirmed_deleter(&url, Arc::new(move || counts.deleting_soon()), left)
        } else {
            client.deleter(&url)
        };
        let visibility_batcher = client.visibility_batcher(&url);
        let settler = Arc::new(Settler::new(
            &shared,
            client.clone(),
            dead_letter,
            retries,
            deleter,
            visibility_batcher.clone(),
            deletes,
        ));
        let dispatcher = Arc::new(Dispatcher::new(
            &shared,
            settings,
            (subscriber.handler, client.clone()),
            subscriber
                .handler_name
                .unwrap_or_else(|| crate::describe::short_name(subscriber.handler_type)),
            states,
            lanes,
            settler.clone(),
        ));
        Ok(Self {
            queue,
            url,
            shared,
            settler,
            dispatcher,
            visibility_batcher,
            max_attempts,
            dead_letter_queue,
        })
    }
}
