//! What a handler is written against: the [`Handle`] trait and its call with the message type,
//! outputs and codec erased (here), the message in hand ([`context`]: [`Context`]), layers around
//! handlers ([`middleware`]), handlers of a batch ([`batch`]: [`HandleBatch`](batch::HandleBatch)),
//! and what a handler sends ([`Outgoing`], staged by
//! [`Context::publish`] for its publisher to send once the handler returns).
//!
//! None of it knows SQS's client or transport: a handler is driven by the engine's poller here,
//! and could be by anything else that hands it messages. SQS's own facts come through
//! [`Context::sqs`], SNS's through [`Context::sns`]; a subscription's assembly on an SQS queue is
//! [`subscriber`](mod@crate::subscriber), above it.
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
//! The `#[subscriber]` macro writes the same `Handle` impl from an `async fn`; [`subscriber`](crate::subscriber())
//! mounts a handler on a queue (see [`subscriber`](mod@crate::subscriber)).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;

pub mod batch;
pub mod context;
mod delivery;
pub mod middleware;
pub(crate) mod outgoing;

use crate::codec::{Codec, DecodeError};
use crate::outcome::{HandlerOutcome, IntoOutcome};
use crate::state::States;
use crate::task::BoxFuture;
use batch::{BatchLimits, ErasedBatchHandler};
use context::{Context, Message};
use middleware::{Call, Endpoint, Layers, Next, Outcomes};
use outgoing::Outgoing;

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
/// A subscription's handler, erased: one that takes a message a call, or a batch.
#[derive(Clone)]
pub(crate) enum Handler {
    One(Arc<dyn ErasedHandler>),
    Batch(Arc<dyn ErasedBatchHandler>, BatchLimits),
}

impl Handler {
    /// The handler inside `outer` and the layers it has.
    pub(crate) fn layered(self, outer: &Layers) -> Self {
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

/// A handler with its message type `T`, outputs and codec: what [`ErasedHandler`] erases.
pub(crate) struct Typed<H, T, O, C> {
    handler: H,
    outputs: O,
    codec: C,
    _message: PhantomData<fn() -> T>,
}

impl<H, T, O, C> Typed<H, T, O, C> {
    /// `handler` of messages of type `T`, with its outputs and codec.
    pub(crate) fn new(handler: H, outputs: O, codec: C) -> Self {
        Self {
            handler,
            outputs,
            codec,
            _message: PhantomData,
        }
    }
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
    O: Send + Sync + 'static,
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
    O: Send + Sync + 'static,
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
