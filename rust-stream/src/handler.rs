//! Handlers: the [`Handle`] trait, and [`subscriber`], which mounts a handler on a queue.
//!
//! ```
//! use std::future::{ready, Future};
//! use rust_stream::{subscriber, Context, Handle, HandlerOutcome, SqsQueue};
//! # #[derive(serde::Deserialize)] struct Order { id: u64 }
//!
//! struct Fulfil;
//!
//! impl Handle<Order> for Fulfil {
//!     fn handle(&self, order: &Order, _outs: &(), _ctx: &mut Context<'_>) -> impl Future<Output = Result<(), HandlerOutcome>> {
//!         ready(if order.id > 0 { Ok(()) } else { Err(HandlerOutcome::dead_letter("no id")) })
//!     }
//! }
//!
//! let fulfil = subscriber(SqsQueue::new("orders.fifo").concurrency(32), Fulfil).build();
//! # let _ = fulfil;
//! ```
//!
//! The `#[subscriber]` macro writes the same `Handle` impl from an `async fn`.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::batch::{BatchLimits, ErasedBatchHandler, HandleBatch, TypedBatch};
use crate::broker::{Broker, Include};
use crate::codec::{Codec, DecodeError, Json};
use crate::context::{Context, Message};
use crate::describe::Payload;
use crate::middleware::{Call, Endpoint, Layers, Middleware, Next, Outcomes};
use crate::model::SqsQueue;
use crate::outcome::{HandlerOutcome, IntoOutcome};
use crate::publish::{Outgoing, Outputs, Publisher};
use crate::state::{Requirement, States};
use crate::transport::BoxFuture;

/// Handles messages of type `T`, publishing to outputs `O` (`()` when it declares none).
///
/// `Ok(())` acknowledges the message; `Err(outcome)` settles it as the [`HandlerOutcome`] says.
/// A panic is caught: the message is retried and the service goes on.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not handle `{T}` messages with outputs `{O}`",
    note = "implement `Handle<{T}, {O}>` for `{Self}`, or write the handler as an `async fn` with `#[subscriber]`"
)]
pub trait Handle<T, O = ()>: Send + Sync + 'static {
    /// Handles one message.
    fn handle(
        &self,
        msg: &T,
        outs: &O,
        ctx: &mut Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> + Send;
}

impl<T, O, H: Handle<T, O>> Handle<T, O> for Arc<H> {
    fn handle(
        &self,
        msg: &T,
        outs: &O,
        ctx: &mut Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> + Send {
        (**self).handle(msg, outs, ctx)
    }
}

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
    /// (see [`batch`](crate::batch)). `concurrency` then counts the batch calls that run at once.
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
    /// ones, so the first added runs first (see [`middleware`](crate::middleware)).
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// use rust_stream::middleware::{from_fn, Call, Next, Outcomes};
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
            Handler::One(Arc::new(Typed {
                handler,
                outputs,
                codec,
                _message: PhantomData,
            }))
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

/// A subscription's handler, erased: one that takes a message a call, or a batch.
#[derive(Clone)]
pub(crate) enum Handler {
    One(Arc<dyn ErasedHandler>),
    Batch(Arc<dyn ErasedBatchHandler>, BatchLimits),
}

impl Handler {
    /// The handler inside `outer` and the layers it has.
    fn layered(self, outer: &Layers) -> Self {
        match self {
            Self::One(handler) => Self::One(handler.layered(outer)),
            Self::Batch(handler, limits) => Self::Batch(handler.layered(outer), limits),
        }
    }

    /// The batch limits of a batch handler.
    pub(crate) fn batch_limits(&self) -> Option<BatchLimits> {
        match self {
            Self::One(_) => None,
            Self::Batch(_, limits) => Some(*limits),
        }
    }
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

/// What running a handler on one delivery came to.
#[derive(Debug)]
pub(crate) enum Handled {
    /// The body is not a valid message.
    Undecodable(DecodeError),
    /// The handler returned.
    Done {
        outcome: HandlerOutcome,
        staged: Vec<Outgoing>,
    },
}

/// A handler with its message type, outputs and codec erased, so the engine holds any of them.
pub(crate) trait ErasedHandler: Send + Sync + 'static {
    /// Runs the handler on `message`.
    fn call(
        self: Arc<Self>,
        message: Message,
        states: Arc<States>,
        stopping: tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'static, Handled>;

    /// The same handler inside `outer` and the layers it has.
    fn layered(self: Arc<Self>, outer: &Layers) -> Arc<dyn ErasedHandler>;
}

struct Typed<H, T, O, C> {
    handler: H,
    outputs: O,
    codec: C,
    _message: PhantomData<fn() -> T>,
}

impl<H, T, O, C> Typed<H, T, O, C>
where
    H: Handle<T, O>,
    T: DeserializeOwned,
    C: Codec,
{
    /// The handler's message of type `T` in `message`: an SNS envelope is already unwrapped, so
    /// the codec reads the published message.
    fn decode(&self, message: &Message) -> Result<T, DecodeError> {
        message.delivery().decode(&self.codec)
    }

    /// Runs the handler on `message` with `ctx`: how it settles the message, and what it
    /// published. With middleware or without, the handler is called here.
    async fn handle(&self, message: &T, mut ctx: Context<'_>) -> (HandlerOutcome, Vec<Outgoing>) {
        let outcome = self
            .handler
            .handle(message, &self.outputs, &mut ctx)
            .await
            .into_outcome();
        (outcome, ctx.into_staged())
    }
}

impl<H, T, O, C> ErasedHandler for Typed<H, T, O, C>
where
    H: Handle<T, O>,
    T: DeserializeOwned + Send + Sync + 'static,
    O: Outputs,
    C: Codec,
{
    fn call(
        self: Arc<Self>,
        message: Message,
        states: Arc<States>,
        stopping: tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'static, Handled> {
        Box::pin(async move {
            let decoded = match self.decode(&message) {
                Ok(decoded) => decoded,
                Err(error) => return Handled::Undecodable(error),
            };
            let ctx = Context::new(&message, &states, stopping);
            let (outcome, staged) = self.handle(&decoded, ctx).await;
            Handled::Done { outcome, staged }
        })
    }

    fn layered(self: Arc<Self>, outer: &Layers) -> Arc<dyn ErasedHandler> {
        Arc::new(LayeredOne {
            typed: self,
            layers: outer.clone(),
        })
    }
}

/// A handler with middleware: [`Typed`]'s decoding, then the layers, then the handler. Only
/// subscriptions with layers have one, so those without run [`Typed`] as it is.
struct LayeredOne<H, T, O, C> {
    typed: Arc<Typed<H, T, O, C>>,
    layers: Layers,
}

impl<H, T, O, C> ErasedHandler for LayeredOne<H, T, O, C>
where
    H: Handle<T, O>,
    T: DeserializeOwned + Send + Sync + 'static,
    O: Outputs,
    C: Codec,
{
    fn call(
        self: Arc<Self>,
        message: Message,
        states: Arc<States>,
        stopping: tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'static, Handled> {
        Box::pin(async move {
            // A body that does not decode never reaches middleware: the engine settles it.
            let decoded = match self.typed.decode(&message) {
                Ok(decoded) => decoded,
                Err(error) => return Handled::Undecodable(error),
            };
            let layers = self.layers.clone();
            // The handler's end owns this call's reference to the handler: one count fewer on
            // the reference every call of the subscription shares.
            let handler = Endpoint::new(move |call: Call| async move {
                let (messages, extensions) = call.into_parts();
                let ctx =
                    Context::new(&messages[0], &states, stopping).with_extensions(&extensions);
                let (outcome, published) = self.typed.handle(&decoded, ctx).await;
                Outcomes::handled_one(outcome, published)
            });
            let call = Call::one(message);
            let ((outcome, staged), past_the_call) =
                Next::new(layers, handler).run(call).await.into_one();
            if !past_the_call.is_empty() {
                tracing::error!(
                    indexes = ?past_the_call,
                    "middleware set outcomes past the call's one message; those outcomes are ignored"
                );
            }
            Handled::Done { outcome, staged }
        })
    }

    fn layered(self: Arc<Self>, outer: &Layers) -> Arc<dyn ErasedHandler> {
        Arc::new(LayeredOne {
            typed: self.typed.clone(),
            layers: outer.around(&self.layers),
        })
    }
}

/// App-scope middleware: every subscriber the app includes, before or after, runs inside it.
impl<B: Broker<Subscriber = Subscriber>> Include<B> {
    /// Puts `layer` around the handler of every subscriber this app includes, whether included
    /// before this call or after: outside the subscribers' own layers, and inside the app's
    /// earlier ones, so the first added runs first (see [`middleware`](crate::middleware)).
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// use rust_stream::middleware::{from_fn, Call, Next, Outcomes};
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
