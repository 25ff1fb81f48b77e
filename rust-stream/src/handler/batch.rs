//! Batch handlers: [`HandleBatch`] takes a slice of messages and gives each its own outcome
//! ([`BatchOutcome`]), so a ledger writes ten postings in one `INSERT` and still retries only the
//! one that failed.
//!
//! Written as an `async fn` over `&[T]` with
//! [`#[subscriber(.., batch(..))]`](macro@crate::subscriber), whose context is a
//! [`BatchContext`]:
//!
//! ```
//! use rust_stream::prelude::*;
//! use rust_stream::handler::batch::BatchOutcome;
//! # #[derive(serde::Deserialize)] struct Posting { account: String, cents: i64 }
//!
//! /// Up to 50 postings a call, gathered for at most 100 ms; an empty account is refused alone.
//! #[subscriber(SqsQueue::new("postings.fifo"), batch(max = 50, window = 100ms))]
//! async fn post(postings: &[Posting]) -> BatchOutcome {
//!     // One round trip for the whole batch; an outcome per message, in order.
//!     postings
//!         .iter()
//!         .map(|posting| match posting.account.is_empty() {
//!             true => HandlerOutcome::dead_letter("no account"),
//!             false => HandlerOutcome::ack(),
//!         })
//!         .collect()
//! }
//! # let _ = rust_stream::Subscriber::from(post);
//! ```
//!
//! By hand, the same handler implements [`HandleBatch`] and is mounted with
//! [`SubscriberBuilder::batch`](crate::SubscriberBuilder::batch):
//!
//! ```
//! use std::time::Duration;
//! use rust_stream::prelude::*;
//! use rust_stream::handler::batch::{BatchContext, BatchOutcome, HandleBatch};
//! # #[derive(serde::Deserialize)] struct Posting { account: String, cents: i64 }
//!
//! struct Post;
//!
//! impl HandleBatch<Posting> for Post {
//!     async fn handle(&self, postings: &[Posting], _outs: &(), _ctx: &mut BatchContext<'_>) -> BatchOutcome {
//!         // One round trip for the whole batch; an empty account is refused on its own.
//!         postings
//!             .iter()
//!             .map(|posting| match posting.account.is_empty() {
//!                 true => HandlerOutcome::dead_letter("no account"),
//!                 false => HandlerOutcome::ack(),
//!             })
//!             .collect()
//!     }
//! }
//!
//! let post = subscriber(SqsQueue::new("postings.fifo"), Post)
//!     .batch(50, Duration::from_millis(100)) // up to 50 messages, gathered for at most 100 ms
//!     .build();
//! # let _ = post;
//! ```
//!
//! # What the engine does with a batch
//!
//! The consumer gathers received messages into one handler call until it holds the batch's
//! `max` messages or the `window` has passed since the first one joined, whichever comes first;
//! a call may so hold messages of several receives. Each message is then settled by its own
//! outcome, exactly as a single handler's: an ack sends what the handler published for that
//! message ([`BatchContext::message_mut`]) and deletes it (the batch's deletes go out together),
//! a failure is retried by the subscription's [`RetryPolicy`](crate::RetryPolicy), counting
//! attempts per message, and dead-lettered once out of attempts. `Ok(())` acks every message;
//! `Err(e)` and a panic fail every message; the handler timeout covers the call, and the
//! heartbeat keeps every message of it from timing out.
//!
//! Messages whose body does not decode never reach the handler: they follow the undecodable
//! rules (dead-lettered at once, or retried when the subscription has no dead-letter queue).
//!
//! On a FIFO queue a batch holds runs of groups, each run in its group's order. When a message
//! of group G fails, the later messages of G in the batch are not counted as handled, whatever
//! their outcomes said: they stay held, and run again after the failed one, in order, when it
//! is retried in place; other groups' messages are settled by their outcomes. So nothing later
//! of G is deleted (or has its outputs sent) before the failed message succeeds or is
//! dead-lettered, and a message run again this way does not count it as an attempt. A handler
//! that must not repeat the work of those later messages skips a group once one of its
//! messages failed:
//!
//! ```
//! # use std::collections::HashSet;
//! # use rust_stream::prelude::*;
//! # use rust_stream::handler::batch::{BatchContext, BatchOutcome};
//! # #[derive(serde::Deserialize)] struct Posting { cents: i64 }
//! # fn post(_posting: &Posting) -> Result<(), String> { Ok(()) }
//! async fn post_all(postings: &[Posting], ctx: &mut BatchContext<'_>) -> BatchOutcome {
//!     let mut failed_groups = HashSet::new();
//!     let mut outcome = BatchOutcome::ack();
//!     for (index, posting) in postings.iter().enumerate() {
//!         let group = ctx[index].sqs().group_id().map(str::to_owned);
//!         if failed_groups.contains(&group) {
//!             continue; // runs again after the failed one, whatever its outcome says
//!         }
//!         if let Err(error) = post(posting) {
//!             outcome.set(index, HandlerOutcome::failed(error));
//!             failed_groups.insert(group);
//!         }
//!     }
//!     outcome
//! }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::context::{Context, Extensions, Message};
use super::middleware::{Call, Endpoint, Layers, Next, Outcomes};
use super::outgoing::Outgoing;
use crate::codec::{Codec, DecodeError};
use crate::outcome::HandlerOutcome;
use crate::state::{State, States};
use crate::task::BoxFuture;

/// The most messages one batch handler call may take.
pub const MAX_BATCH_MESSAGES: usize = 1_000;
/// The longest a batch may be gathered for, as Lambda's batching window.
pub const MAX_BATCH_WINDOW: Duration = Duration::from_secs(300);

/// Handles messages of type `T` a batch at a time, publishing to outputs `O` (`()` when it
/// declares none); mounted with [`SubscriberBuilder::batch`](crate::SubscriberBuilder::batch).
///
/// The outcome settles each message on its own (see the [module](self)); a panic fails every
/// message of the call.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not handle batches of `{T}` messages with outputs `{O}`",
    note = "implement `HandleBatch<{T}, {O}>` for `{Self}`, or write the handler as an `async fn` over `&[{T}]` with `#[subscriber(.., batch(..))]`"
)]
pub trait HandleBatch<T, O = ()>: Send + Sync + 'static {
    /// Handles the messages of one batch, in the order the engine holds them (on FIFO, each
    /// group's in its order).
    fn handle(
        &self,
        messages: &[T],
        outs: &O,
        ctx: &mut BatchContext<'_>,
    ) -> impl Future<Output = BatchOutcome> + Send;
}

impl<T, O, H: HandleBatch<T, O>> HandleBatch<T, O> for Arc<H> {
    fn handle(
        &self,
        messages: &[T],
        outs: &O,
        ctx: &mut BatchContext<'_>,
    ) -> impl Future<Output = BatchOutcome> + Send {
        (**self).handle(messages, outs, ctx)
    }
}

/// How a batch handler settles each message of its batch: every message acked unless the
/// outcome [`set`](Self::set)s another for it.
///
/// ```
/// use rust_stream::handler::batch::BatchOutcome;
/// use rust_stream::HandlerOutcome;
///
/// // The third message waits a minute; the others are handled.
/// let outcome = BatchOutcome::ack().with(2, HandlerOutcome::retry_after(std::time::Duration::from_secs(60)));
/// assert_eq!(outcome.outcome_of(0), &HandlerOutcome::ack());
///
/// // Or one outcome per message, in order.
/// let outcome: BatchOutcome = [HandlerOutcome::ack(), HandlerOutcome::dead_letter("bad")].into_iter().collect();
/// assert_eq!(outcome.outcome_of(1), &HandlerOutcome::dead_letter("bad"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a batch outcome settles the messages only when returned"]
pub struct BatchOutcome {
    /// The outcome of every message not named in `messages`.
    rest: HandlerOutcome,
    /// Outcomes by the message's index in the batch.
    messages: BTreeMap<usize, HandlerOutcome>,
}

impl BatchOutcome {
    /// Every message handled.
    pub fn ack() -> Self {
        Self::all(HandlerOutcome::Ack)
    }

    /// Every message settled as `outcome` (unless [`set`](Self::set) says otherwise).
    pub fn all(outcome: HandlerOutcome) -> Self {
        Self {
            rest: outcome,
            messages: BTreeMap::new(),
        }
    }

    /// Settles the message at `index` of the batch as `outcome`. An index past the batch is
    /// logged as an error and ignored.
    pub fn set(&mut self, index: usize, outcome: HandlerOutcome) -> &mut Self {
        self.messages.insert(index, outcome);
        self
    }

    /// [`set`](Self::set), by value.
    pub fn with(mut self, index: usize, outcome: HandlerOutcome) -> Self {
        self.set(index, outcome);
        self
    }

    /// How the message at `index` is settled.
    pub fn outcome_of(&self, index: usize) -> &HandlerOutcome {
        self.messages.get(&index).unwrap_or(&self.rest)
    }

    /// The outcomes of a batch of `len` messages, in order, and the indexes named past it.
    pub(crate) fn into_outcomes(mut self, len: usize) -> (Vec<HandlerOutcome>, Vec<usize>) {
        let outcomes = (0..len)
            .map(|index| {
                self.messages
                    .remove(&index)
                    .unwrap_or_else(|| self.rest.clone())
            })
            .collect();
        (outcomes, self.messages.into_keys().collect())
    }
}

/// One outcome per message, in the batch's order; messages past the last are acked.
impl FromIterator<HandlerOutcome> for BatchOutcome {
    fn from_iter<I: IntoIterator<Item = HandlerOutcome>>(outcomes: I) -> Self {
        Self {
            rest: HandlerOutcome::Ack,
            messages: outcomes.into_iter().enumerate().collect(),
        }
    }
}

/// What a batch handler may return: anything that says how to settle its messages.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot settle a batch of messages",
    label = "a batch handler must return how to settle its messages",
    note = "return `BatchOutcome`, `()`, `Result<(), E: Display>` or `Result<BatchOutcome, E: Display>`"
)]
pub trait IntoBatchOutcome {
    /// The outcome this value stands for.
    fn into_batch_outcome(self) -> BatchOutcome;
}

impl IntoBatchOutcome for BatchOutcome {
    fn into_batch_outcome(self) -> BatchOutcome {
        self
    }
}

/// `()` acks every message.
impl IntoBatchOutcome for () {
    fn into_batch_outcome(self) -> BatchOutcome {
        BatchOutcome::ack()
    }
}

/// `Ok(())` acks every message; `Err(e)` fails every one with `e` as the reason.
impl<E: fmt::Display> IntoBatchOutcome for Result<(), E> {
    fn into_batch_outcome(self) -> BatchOutcome {
        match self {
            Ok(()) => BatchOutcome::ack(),
            Err(error) => BatchOutcome::all(HandlerOutcome::failed(error)),
        }
    }
}

/// `Ok(outcome)` settles as the outcome says; `Err(e)` fails every message with `e` as the reason.
impl<E: fmt::Display> IntoBatchOutcome for Result<BatchOutcome, E> {
    fn into_batch_outcome(self) -> BatchOutcome {
        self.unwrap_or_else(|error| BatchOutcome::all(HandlerOutcome::failed(error)))
    }
}

/// The messages of a batch in hand: a [`Context`] for each (ids, group, headers, attempt, and
/// what the handler publishes for it), by its index in the batch, and what the call shares (the
/// app's state, its stop).
///
/// What a handler publishes for a message (`ctx[i].publish(..)`) is sent once the call returns,
/// before that message is deleted, and only if its outcome acks it.
///
/// A unit test builds one with `rust_stream::testing::TestBatch` (feature `testing`), of a
/// `TestContext` for each message:
///
/// ```
/// # #[cfg(feature = "testing")] {
/// use rust_stream::testing::{TestBatch, TestContext};
///
/// let batch = TestBatch::new(["p-1", "p-2"].map(|id| TestContext::new().message_id(id)));
/// let ctx = batch.build();
/// assert_eq!(ctx.len(), 2);
/// assert_eq!(ctx[1].message_id(), "p-2");
/// # }
/// ```
#[derive(Debug)]
pub struct BatchContext<'a> {
    messages: Vec<Context<'a>>,
    /// Cancelled once the app begins to stop: the messages' own.
    stopping: CancellationToken,
    /// What the call's middleware put in for the handler, when it has middleware.
    extensions: Option<&'a Extensions>,
}

/// A batch of these messages' contexts, in order (what `rust_stream::testing::TestBatch`
/// builds). The batch reads the app's state and its stop from its first message's context.
impl<'a> FromIterator<Context<'a>> for BatchContext<'a> {
    fn from_iter<I: IntoIterator<Item = Context<'a>>>(messages: I) -> Self {
        let messages: Vec<Context<'a>> = messages.into_iter().collect();
        let stopping = messages
            .first()
            .map(|first| first.stopping_token().clone())
            .unwrap_or_default();
        Self {
            messages,
            stopping,
            extensions: None,
        }
    }
}

impl<'a> BatchContext<'a> {
    /// The context of a call over `messages`, with what the call's middleware put in for the
    /// handler when it has middleware (each message's context has it too).
    fn of(
        messages: &'a [Message],
        states: &'a States,
        stopping: &CancellationToken,
        extensions: Option<&'a Extensions>,
    ) -> Self {
        let messages = messages
            .iter()
            .map(|message| {
                let ctx = Context::new(message, states, stopping.clone());
                match extensions {
                    Some(extensions) => ctx.with_extensions(extensions),
                    None => ctx,
                }
            })
            .collect();
        Self {
            messages,
            stopping: stopping.clone(),
            extensions,
        }
    }

    /// How many messages the batch holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the batch is empty (never, for a batch the engine hands a handler).
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The context of the message at `index`: its ids, group, headers and attempt.
    pub fn message(&self, index: usize) -> Option<&Context<'a>> {
        self.messages.get(index)
    }

    /// The context of the message at `index`, to publish as part of handling it.
    pub fn message_mut(&mut self, index: usize) -> Option<&mut Context<'a>> {
        self.messages.get_mut(index)
    }

    /// Every message's context, in the batch's order.
    pub fn iter(&self) -> std::slice::Iter<'_, Context<'a>> {
        self.messages.iter()
    }

    /// Every message's context, in the batch's order, to publish.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Context<'a>> {
        self.messages.iter_mut()
    }

    /// The app's shared state of type `T`, registered with
    /// [`RustStream::with_state`](crate::RustStream::with_state).
    pub fn state<T: Clone + Send + Sync + 'static>(&self) -> Option<State<T>> {
        self.messages.first()?.state::<T>()
    }

    /// The value of type `T` that a [middleware](crate::handler::middleware) layer put in for this call
    /// (see [`Context::extension`]; each message's context reads the same).
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.extensions?.get::<T>()
    }

    /// Whether the app has begun to stop (see [`Context::is_stopping`]).
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// Resolves once the app begins to stop (see [`Context::stopping`]).
    pub fn stopping(&self) -> impl Future<Output = ()> + Send + 'static {
        self.stopping.clone().cancelled_owned()
    }

    pub(crate) fn into_staged(self) -> Vec<Vec<Outgoing>> {
        self.messages
            .into_iter()
            .map(Context::into_staged)
            .collect()
    }
}

/// The context of the message at `index`.
///
/// # Panics
///
/// When `index` is past the batch.
impl<'a> Index<usize> for BatchContext<'a> {
    type Output = Context<'a>;

    fn index(&self, index: usize) -> &Context<'a> {
        &self.messages[index]
    }
}

/// The context of the message at `index`, to publish.
///
/// # Panics
///
/// When `index` is past the batch.
impl<'a> IndexMut<usize> for BatchContext<'a> {
    fn index_mut(&mut self, index: usize) -> &mut Context<'a> {
        &mut self.messages[index]
    }
}

/// How a batch subscription gathers its calls: at most `max` messages, gathered for at most
/// `window` from the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchLimits {
    pub(crate) max: usize,
    pub(crate) window: Duration,
}

/// A batch call, once the engine's messages were decoded: the ones that did not, and the call
/// over the rest (none when no message decoded).
pub(crate) struct BatchCall {
    /// The index (in the deliveries given) and error of each message that did not decode.
    pub(crate) undecodable: Vec<(usize, DecodeError)>,
    /// The handler's call over the messages that decoded, in order: each one's outcome and what
    /// it published, and the indexes the outcome named past the batch.
    pub(crate) call: Option<BoxFuture<'static, Answered>>,
}

/// What a batch handler's call answered: for each message it took, in order, its outcome and what
/// it published for it; and the indexes its outcome named past the batch.
pub(crate) struct Answered {
    pub(crate) messages: Vec<(HandlerOutcome, Vec<Outgoing>)>,
    pub(crate) past_the_batch: Vec<usize>,
}

/// A batch handler with its message type, outputs and codec erased, so the engine holds any of
/// them.
pub(crate) trait ErasedBatchHandler: Send + Sync + 'static {
    /// Decodes `messages` and makes the handler's call over those that decode.
    fn call(
        self: Arc<Self>,
        messages: Vec<Message>,
        states: Arc<States>,
        stopping: CancellationToken,
    ) -> BatchCall;

    /// The same handler inside `outer` and the layers it has.
    fn layered(self: Arc<Self>, outer: &Layers) -> Arc<dyn ErasedBatchHandler>;
}

/// A batch handler with its message type, outputs and codec: what the engine calls, through
/// [`ErasedBatchHandler`], and what [`LayeredBatch`] calls inside its layers.
pub(crate) struct TypedBatch<H, T, O, C> {
    pub(crate) handler: H,
    pub(crate) outputs: O,
    pub(crate) codec: C,
    pub(crate) _message: PhantomData<fn() -> T>,
}

impl<H, T, O, C> TypedBatch<H, T, O, C>
where
    H: HandleBatch<T, O>,
    T: DeserializeOwned,
    C: Codec,
{
    /// Decodes `messages` and, when any decodes, makes the handler's call with `call`, given the
    /// handler, the values that decoded and their messages, in order. Those that do not decode
    /// never reach the handler, nor middleware: the engine settles them.
    fn decode_then(
        self: Arc<Self>,
        messages: Vec<Message>,
        call: impl FnOnce(Arc<Self>, Vec<T>, Vec<Message>) -> BoxFuture<'static, Answered>,
    ) -> BatchCall {
        let mut undecodable = Vec::new();
        let mut values = Vec::with_capacity(messages.len());
        let mut decoded = Vec::with_capacity(messages.len());
        for (index, message) in messages.into_iter().enumerate() {
            match message.delivery().decode(&self.codec) {
                Ok(value) => {
                    values.push(value);
                    decoded.push(message);
                }
                Err(error) => undecodable.push((index, error)),
            }
        }
        BatchCall {
            undecodable,
            call: (!values.is_empty()).then(|| call(self, values, decoded)),
        }
    }

    /// Runs the handler on `messages` with `ctx`: each message's outcome and what the handler
    /// published for it, in order, and the indexes its outcome named past the batch. With
    /// middleware or without, the handler is called here.
    async fn handle(
        &self,
        messages: &[T],
        mut ctx: BatchContext<'_>,
    ) -> (
        impl Iterator<Item = (HandlerOutcome, Vec<Outgoing>)>,
        Vec<usize>,
    ) {
        let outcome = self.handler.handle(messages, &self.outputs, &mut ctx).await;
        let (outcomes, past_the_batch) = outcome.into_outcomes(messages.len());
        (outcomes.into_iter().zip(ctx.into_staged()), past_the_batch)
    }
}

impl<H, T, O, C> ErasedBatchHandler for TypedBatch<H, T, O, C>
where
    H: HandleBatch<T, O>,
    T: DeserializeOwned + Send + Sync + 'static,
    O: Send + Sync + 'static,
    C: Codec,
{
    fn call(
        self: Arc<Self>,
        messages: Vec<Message>,
        states: Arc<States>,
        stopping: CancellationToken,
    ) -> BatchCall {
        self.decode_then(messages, |typed, values, decoded| {
            Box::pin(async move {
                let ctx = BatchContext::of(&decoded, &states, &stopping, None);
                let (answered, past_the_batch) = typed.handle(&values, ctx).await;
                Answered {
                    messages: answered.collect(),
                    past_the_batch,
                }
            })
        })
    }

    fn layered(self: Arc<Self>, outer: &Layers) -> Arc<dyn ErasedBatchHandler> {
        Arc::new(LayeredBatch {
            typed: self,
            layers: outer.clone(),
        })
    }
}

/// A batch handler with middleware: [`TypedBatch`]'s decoding, then the layers over the
/// messages that decoded, then the handler. Only subscriptions with layers have one.
struct LayeredBatch<H, T, O, C> {
    typed: Arc<TypedBatch<H, T, O, C>>,
    layers: Layers,
}

impl<H, T, O, C> ErasedBatchHandler for LayeredBatch<H, T, O, C>
where
    H: HandleBatch<T, O>,
    T: DeserializeOwned + Send + Sync + 'static,
    O: Send + Sync + 'static,
    C: Codec,
{
    fn call(
        self: Arc<Self>,
        messages: Vec<Message>,
        states: Arc<States>,
        stopping: CancellationToken,
    ) -> BatchCall {
        self.typed
            .clone()
            .decode_then(messages, |typed, values, decoded| {
                let handler = Endpoint::new(move |call: Call| async move {
                    let (held, extensions) = call.into_parts();
                    let ctx = BatchContext::of(&held, &states, &stopping, Some(&extensions));
                    let (answered, past_the_batch) = typed.handle(&values, ctx).await;
                    Outcomes::handled(answered, past_the_batch)
                });
                let call = Call::batch(decoded);
                let next = Next::new(self.layers.clone(), handler);
                Box::pin(async move {
                    let (messages, past_the_batch) = next.run(call).await.into_parts();
                    Answered {
                        messages: messages.into_vec(),
                        past_the_batch,
                    }
                })
            })
    }

    fn layered(self: Arc<Self>, outer: &Layers) -> Arc<dyn ErasedBatchHandler> {
        Arc::new(LayeredBatch {
            typed: self.typed.clone(),
            layers: outer.around(&self.layers),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_messages_take_the_outcome_for_all() {
        let outcome = BatchOutcome::all(HandlerOutcome::retry()).with(1, HandlerOutcome::ack());
        let (outcomes, past) = outcome.into_outcomes(3);
        assert_eq!(
            outcomes,
            [
                HandlerOutcome::retry(),
                HandlerOutcome::ack(),
                HandlerOutcome::retry()
            ]
        );
        assert!(past.is_empty());
    }

    #[test]
    fn outcomes_past_the_batch_are_reported_not_applied() {
        let outcome: BatchOutcome = [HandlerOutcome::ack(), HandlerOutcome::retry()]
            .into_iter()
            .chain([HandlerOutcome::dead_letter("x")])
            .collect();
        let (outcomes, past) = outcome.into_outcomes(2);
        assert_eq!(outcomes, [HandlerOutcome::ack(), HandlerOutcome::retry()]);
        assert_eq!(past, [2]);
    }

    #[test]
    fn every_return_shape_maps_to_its_outcome() {
        assert_eq!(().into_batch_outcome(), BatchOutcome::ack());
        assert_eq!(
            Err::<(), _>("down").into_batch_outcome(),
            BatchOutcome::all(HandlerOutcome::failed("down"))
        );
        assert_eq!(
            Ok::<_, String>(BatchOutcome::ack().with(0, HandlerOutcome::retry()))
                .into_batch_outcome()
                .outcome_of(0),
            &HandlerOutcome::retry()
        );
    }
}
