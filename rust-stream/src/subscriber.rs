//! Subscribers: [`subscriber`] mounts a handler on a queue, and its [`SubscriberBuilder`] sets the
//! subscription (the queue's settings, outputs, codec, middleware, batches) up to the
//! [`Subscriber`] an app includes (`b.include(..)`).
//!
//! ```
//! use rust_stream::{subscriber, Context, Handle, HandlerOutcome, SqsQueue};
//! # #[derive(serde::Deserialize)] struct Order;
//! # struct Fulfil;
//! # impl Handle<Order> for Fulfil {
//! #     async fn handle(&self, _: &Order, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> { Ok(()) }
//! # }
//! let fulfil = subscriber(SqsQueue::new("orders.fifo").concurrency(32), Fulfil)
//!     .dead_letter("orders-dlq.fifo", 5)
//!     .build();
//! assert_eq!(fulfil.queue().name(), "orders.fifo");
//! ```

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::broker::{Broker, Include};
use crate::codec::{Codec, Json};
use crate::describe::Payload;
use crate::handler::batch::{BatchLimits, HandleBatch, TypedBatch};
use crate::handler::context::Context;
use crate::handler::middleware::{Layers, Middleware};
use crate::handler::{Handle, Handler, Typed};
use crate::model::SqsQueue;
use crate::publish::{Outputs, Publisher};
use crate::state::Requirement;

/// Mounts `handler` on `source` (a queue name or an [`SqsQueue`]); finish with
/// [`build`](SubscriberBuilder::build).
pub fn subscriber<H>(source: impl Into<SqsQueue>, handler: H) -> SubscriberBuilder<H> {
    SubscriberBuilder {
        queue: source.into(),
        handler,
        outputs: (),
        codec: Json,
        description: None,
        payload: None,
        requirements: Vec::new(),
        layers: Layers::default(),
        calls: OneAtATime,
        filter: None,
        innermost: None,
    }
}

/// A [`SubscriberBuilder`] whose handler takes one message a call: a [`Handle`].
#[derive(Debug, Clone, Copy)]
pub struct OneAtATime;

/// A [`SubscriberBuilder`] whose handler takes a batch a call: a
/// [`HandleBatch`], made by [`SubscriberBuilder::batch`].
#[derive(Debug, Clone, Copy)]
pub struct Batched(BatchLimits);

/// Settings of one subscription, made by [`subscriber`].
#[derive(Debug)]
#[must_use = "call `.build()` and include the subscriber"]
pub struct SubscriberBuilder<H, O = (), C = Json, K = OneAtATime> {
    queue: SqsQueue,
    handler: H,
    outputs: O,
    codec: C,
    description: Option<String>,
    payload: Option<Payload>,
    requirements: Vec<Requirement>,
    /// The subscription's own middleware, outermost first.
    layers: Layers,
    /// How the handler takes messages: [`OneAtATime`] or [`Batched`].
    calls: K,
    filter: Option<Filter>,
    /// The layer that runs inside every other, next to the handler: the inbox's, made from the
    /// subscription's queue and outputs once they are known.
    innermost: Option<Innermost>,
}

/// Makes a subscription's innermost layer from its queue and outputs (see
/// [`SubscriberBuilder::innermost`]).
pub(crate) struct Innermost(Box<MakeLayers>);

/// What makes a layer from a subscription's queue and outputs.
type MakeLayers = dyn FnOnce(&SqsQueue, &[Publisher]) -> Layers + Send;

impl std::fmt::Debug for Innermost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Innermost(..)")
    }
}

/// A routed subscriber's predicate: whether it takes a message (see
/// [`SubscriberBuilder::filter`]).
#[derive(Clone)]
pub(crate) struct Filter(pub(crate) Arc<dyn Fn(&Context<'_>) -> bool + Send + Sync>);

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Filter(..)")
    }
}

impl<H, O, C> SubscriberBuilder<H, O, C> {
    /// Takes the messages `filter` accepts, on a queue whose subscribers are routed
    /// ([`routing`](crate::routing)): a message whose type header names no route of the queue
    /// goes to the first subscriber, in the order included, whose filter accepts it, and is
    /// dead-lettered if none does. A subscriber with a filter is chosen by its filter only,
    /// never by its type. With `|_| true` it takes whatever no other route claims.
    ///
    /// ```
    /// use rust_stream::{subscriber, Context, HandlerOutcome};
    /// # use rust_stream::{Handle};
    /// # struct Audit;
    /// # impl Handle<serde_json::Value> for Audit {
    /// #     async fn handle(&self, _: &serde_json::Value, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> { Ok(()) }
    /// # }
    ///
    /// fn from_the_ledger(ctx: &Context<'_>) -> bool {
    ///     ctx.header("source") == Some("ledger")
    /// }
    ///
    /// let audit = subscriber("payments", Audit).filter(from_the_ledger).build();
    /// # let _ = audit;
    /// ```
    pub fn filter(mut self, filter: impl Fn(&Context<'_>) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Filter(Arc::new(filter)));
        self
    }

    /// Hands the handler batches of up to `max` messages (1–1,000) instead of one at a time,
    /// gathered for at most `window` (up to 5 minutes) from the first: the handler is then a
    /// [`HandleBatch`], and each message settled by its own outcome
    /// (see [`batch`](crate::handler::batch)). `concurrency` then counts the batch calls that run at once.
    pub fn batch(self, max: usize, window: Duration) -> SubscriberBuilder<H, O, C, Batched> {
        SubscriberBuilder {
            queue: self.queue,
            handler: self.handler,
            outputs: self.outputs,
            codec: self.codec,
            description: self.description,
            payload: self.payload,
            requirements: self.requirements,
            filter: self.filter,
            layers: self.layers,
            calls: Batched(BatchLimits { max, window }),
            innermost: self.innermost,
        }
    }
}

impl<H, O, C, K> SubscriberBuilder<H, O, C, K> {
    /// Declares that the handler reads state of type `T`: the app then refuses to start without it
    /// (`RustStream::with_state`), instead of the handler finding it missing at run time.
    pub fn requires_state<T: Clone + Send + Sync + 'static>(mut self) -> Self {
        self.requirements.push(Requirement::of::<T>());
        self
    }

    /// Puts `layer` around the handler: after the app's layers and this subscription's earlier
    /// ones, so the first added runs first (see [`middleware`](crate::handler::middleware)).
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// use rust_stream::handler::middleware::{from_fn, Call, Next, Outcomes};
    /// # #[derive(serde::Deserialize)] struct Order;
    /// # struct Fulfil;
    /// # impl Handle<Order> for Fulfil {
    /// #     async fn handle(&self, _: &Order, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> { Ok(()) }
    /// # }
    ///
    /// async fn timed(call: Call, next: Next) -> Outcomes {
    ///     let started = std::time::Instant::now();
    ///     let outcomes = next.run(call).await;
    ///     tracing::debug!(took_us = started.elapsed().as_micros(), "handled");
    ///     outcomes
    /// }
    ///
    /// let fulfil = subscriber("orders", Fulfil).layer(from_fn(timed)).build();
    /// # let _ = fulfil;
    /// ```
    pub fn layer(mut self, layer: impl Middleware) -> Self {
        self.layers = self.layers.around(&Layers::of(layer));
        self
    }

    /// How many handlers run at once, 1–100,000 (default 10); FIFO groups still run one message
    /// at a time.
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.queue = self.queue.concurrency(handlers);
        self
    }

    /// Messages per receive, 1–10 (default 10).
    pub fn batch_size(mut self, messages: usize) -> Self {
        self.queue = self.queue.batch_size(messages);
        self
    }

    /// FIFO: how many handled messages of a group its lane deletes in one call, 1–10 (default
    /// 10); `1` confirms each delete before the group's next message. See
    /// [`SqsQueue::delete_run`](crate::SqsQueue::delete_run).
    pub fn delete_run(mut self, messages: usize) -> Self {
        self.queue = self.queue.delete_run(messages);
        self
    }

    /// Long-poll wait, up to 20 s (default 20 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.queue = self.queue.wait(wait);
        self
    }

    /// Visibility timeout of received messages (default: the queue's).
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.queue = self.queue.visibility_timeout(timeout);
        self
    }

    /// The most receives in flight, 1–1,000 (default 16); how many run follows the demand, from
    /// one up. See [`SqsQueue::pollers`].
    pub fn pollers(mut self, pollers: usize) -> Self {
        self.queue = self.queue.pollers(pollers);
        self
    }

    /// Receives at most `limit` messages: a number a second, or a shared
    /// [`RateLimit`](crate::model::flow::RateLimit). See [`SqsQueue::rate_limit`].
    pub fn rate_limit(mut self, limit: impl Into<crate::model::flow::RateLimit>) -> Self {
        self.queue = self.queue.rate_limit(limit);
        self
    }

    /// Holds at most `most` messages of each key for running at once. See
    /// [`SqsQueue::max_in_flight_per`].
    pub fn max_in_flight_per(mut self, key: crate::model::flow::InFlightKey, most: usize) -> Self {
        self.queue = self.queue.max_in_flight_per(key, most);
        self
    }

    /// Makes no receive while `switch` is tripped. See [`SqsQueue::backpressure`].
    pub fn backpressure(mut self, switch: &crate::model::flow::Backpressure) -> Self {
        self.queue = self.queue.backpressure(switch);
        self
    }

    /// How long a failed message waits before its next attempt (default: 1 s doubling to 5 minutes).
    pub fn retry(mut self, policy: crate::retry::RetryPolicy) -> Self {
        self.queue = self.queue.retry(policy);
        self
    }

    /// How long one handler call may run before it is cancelled and its message retried (default:
    /// no limit).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.queue = self.queue.timeout(timeout);
        self
    }

    /// The dead-letter queue and how many attempts a message gets before it goes there (see
    /// [`SqsQueue::dead_letter`]).
    pub fn dead_letter(mut self, queue: impl Into<String>, max_receive_count: u32) -> Self {
        self.queue = self.queue.dead_letter(queue, max_receive_count);
        self
    }

    /// What this subscriber does: the description of its operation in the app's
    /// [AsyncAPI document](crate::asyncapi) (CommonMark). A `#[subscriber]` function's doc
    /// comment becomes it.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// How the [AsyncAPI document](crate::asyncapi) describes the messages (default: by their
    /// type's name). With the `schemars` feature, `Payload::schema::<T>()` gives their JSON Schema.
    ///
    /// # Panics
    ///
    /// [`build`](Self::build) panics when the payload describes another type than the handler's
    /// messages.
    pub fn payload(mut self, payload: Payload) -> Self {
        self.payload = Some(payload);
        self
    }

    /// The outputs the handler publishes to, handed to it as its `outs` parameter.
    pub fn outputs<P: Outputs>(self, outputs: P) -> SubscriberBuilder<H, P, C, K> {
        SubscriberBuilder {
            queue: self.queue,
            handler: self.handler,
            outputs,
            codec: self.codec,
            description: self.description,
            payload: self.payload,
            requirements: self.requirements,
            layers: self.layers,
            calls: self.calls,
            filter: self.filter,
            innermost: self.innermost,
        }
    }

    /// The codec for message bodies (default [`Json`]).
    pub fn codec<D: Codec>(self, codec: D) -> SubscriberBuilder<H, O, D, K> {
        SubscriberBuilder {
            queue: self.queue,
            handler: self.handler,
            outputs: self.outputs,
            codec,
            description: self.description,
            payload: self.payload,
            requirements: self.requirements,
            layers: self.layers,
            calls: self.calls,
            filter: self.filter,
            innermost: self.innermost,
        }
    }

    /// The subscriber around `handler`, the erased handler built from this builder's own.
    fn into_subscriber<T: 'static>(self, handler: impl FnOnce(H, O, C) -> Handler) -> Subscriber
    where
        O: Outputs,
        C: Codec,
    {
        let publishers = self.outputs.publishers();
        let innermost = self
            .innermost
            .map(|Innermost(make)| make(&self.queue, &publishers));
        let payload = self.payload.unwrap_or_else(Payload::named::<T>);
        payload.check_describes::<T>();
        let content_type = self.codec.content_type();
        let output_payloads = self.outputs.payloads();
        let handler = handler(self.handler, self.outputs, self.codec);
        let mut subscriber = Subscriber {
            queue: self.queue,
            description: self.description,
            message_type: std::any::type_name::<T>(),
            handler_type: std::any::type_name::<H>(),
            payload,
            content_type,
            output_payloads,
            outputs: publishers,
            requirements: self.requirements,
            problems: Vec::new(),
            filter: self.filter,
            handler_name: None,
            handler,
        };
        if let Some(innermost) = innermost {
            subscriber.wrap(&innermost);
        }
        subscriber.wrap(&self.layers);
        subscriber
    }

    /// Puts the layer `make` makes inside every other, next to the handler (one only: a second
    /// call replaces the first).
    pub(crate) fn innermost(
        mut self,
        make: impl FnOnce(&SqsQueue, &[Publisher]) -> Layers + Send + 'static,
    ) -> Self {
        self.innermost = Some(Innermost(Box::new(make)));
        self
    }
}

impl<H, O, C> SubscriberBuilder<H, O, C, OneAtATime> {
    /// The subscriber, ready for `b.include(..)`.
    ///
    /// # Panics
    ///
    /// When a [`payload`](Self::payload) was given that describes another type than `T`.
    pub fn build<T>(self) -> Subscriber
    where
        H: Handle<T, O>,
        T: DeserializeOwned + Send + Sync + 'static,
        O: Outputs,
        C: Codec,
    {
        self.into_subscriber::<T>(|handler, outputs, codec| {
            Handler::One(Arc::new(Typed::<H, T, O, C>::new(handler, outputs, codec)))
        })
    }
}

impl<H, O, C> SubscriberBuilder<H, O, C, Batched> {
    /// The subscriber, ready for `b.include(..)`; its batch's `max` and `window` are checked when
    /// the app starts.
    ///
    /// # Panics
    ///
    /// When a [`payload`](Self::payload) was given that describes another type than `T`.
    pub fn build<T>(mut self) -> Subscriber
    where
        H: HandleBatch<T, O>,
        T: DeserializeOwned + Send + Sync + 'static,
        O: Outputs,
        C: Codec,
    {
        let Batched(limits) = self.calls;
        // `idempotent(..)` exists for single handlers only, but it may come before `batch(..)`.
        let idempotent = self.innermost.take().is_some();
        let mut subscriber = self.into_subscriber::<T>(|handler, outputs, codec| {
            Handler::Batch(
                Arc::new(TypedBatch {
                    handler,
                    outputs,
                    codec,
                    _message: PhantomData,
                }),
                limits,
            )
        });
        if idempotent {
            subscriber
                .problems
                .push(crate::model::ConfigError::IdempotentBatch {
                    queue: subscriber.queue.name.clone(),
                    handler: crate::describe::short_name(subscriber.handler_type),
                });
        }
        subscriber
    }
}

/// A handler mounted on a queue, ready for `b.include(..)`.
pub struct Subscriber {
    pub(crate) queue: SqsQueue,
    pub(crate) description: Option<String>,
    pub(crate) message_type: &'static str,
    /// The handler's Rust type: a `#[subscriber]` function's name.
    pub(crate) handler_type: &'static str,
    pub(crate) payload: Payload,
    pub(crate) content_type: Option<&'static str>,
    /// How each output's messages are described, in the order of `outputs`.
    pub(crate) output_payloads: Vec<Payload>,
    pub(crate) outputs: Vec<Publisher>,
    pub(crate) requirements: Vec<Requirement>,
    /// What the broker found wrong when it took the subscriber in (a queue-name prefix that
    /// makes a name SQS refuses), for the app's start to refuse with.
    pub(crate) problems: Vec<crate::model::ConfigError>,
    /// On a routed queue, the predicate that chooses this subscriber instead of its type.
    pub(crate) filter: Option<Filter>,
    /// The handler's name in the engine's spans, when not its type's: a routed queue's consumer
    /// names its routes.
    pub(crate) handler_name: Option<String>,
    pub(crate) handler: Handler,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("queue", &self.queue.name)
            .field("message_type", &self.message_type)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl Subscriber {
    /// Puts `outer` around the handler and the layers it has; without layers, nothing changes,
    /// and the handler stays the one the engine calls without middleware.
    pub(crate) fn wrap(&mut self, outer: &Layers) {
        if !outer.is_empty() {
            self.handler = self.handler.clone().layered(outer);
        }
    }

    /// The queue this subscriber reads: once an app has included it, as its broker names it
    /// (with the broker's [queue-name prefix](crate::SqsBroker::queue_name_prefix)).
    pub fn queue(&self) -> &SqsQueue {
        &self.queue
    }

    /// What the subscriber does, if it says.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The Rust type of its messages.
    pub fn message_type(&self) -> &'static str {
        self.message_type
    }
}

/// App-scope middleware: every subscriber the app includes, before or after, runs inside it.
impl<B: Broker<Subscriber = Subscriber>> Include<B> {
    /// Puts `layer` around the handler of every subscriber this app includes, whether included
    /// before this call or after: outside the subscribers' own layers, and inside the app's
    /// earlier ones, so the first added runs first (see [`middleware`](crate::handler::middleware)).
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// use rust_stream::handler::middleware::{from_fn, Call, Next, Outcomes};
    /// # #[subscriber("orders")]
    /// # async fn fulfil(_order: &serde_json::Value) {}
    ///
    /// async fn audit(call: Call, next: Next) -> Outcomes {
    ///     let ids: Vec<String> = call.messages().iter().map(|m| m.message_id().to_owned()).collect();
    ///     let outcomes = next.run(call).await;
    ///     tracing::info!(?ids, outcomes = ?outcomes.iter().collect::<Vec<_>>(), "audited");
    ///     outcomes
    /// }
    ///
    /// let app = RustStream::new(AppInfo::new("fulfillment", "0.1.0")).with_broker(SqsBroker::in_process(), |b| {
    ///     b.layer(from_fn(audit));
    ///     b.include(fulfil);
    /// });
    /// # let _ = app;
    /// ```
    pub fn layer(&mut self, layer: impl Middleware) -> &mut Self {
        let layers = Layers::of(layer);
        self.wrap_each(Box::new(move |subscriber: &mut Subscriber| {
            subscriber.wrap(&layers);
        }));
        self
    }
}

/// What an app with these subscribers declares: each subscription's queue, its dead-letter queue
/// and its outputs.
pub(crate) fn declarations(subscribers: &[Subscriber]) -> crate::model::declare::Declarations {
    crate::model::declare::Declarations::of_app(subscribers.iter().map(|subscriber| {
        let outputs = subscriber
            .outputs
            .iter()
            .map(|output| match output.destination() {
                crate::model::Destination::Topic(topic) => {
                    crate::model::declare::Target::Topic(topic)
                }
                crate::model::Destination::Queue(queue) => {
                    crate::model::declare::Target::Queue(queue)
                }
            })
            .collect();
        (&subscriber.queue, outputs)
    }))
}
