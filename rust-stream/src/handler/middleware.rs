//! Middleware: layers around a subscription's handler that see each call's messages and its
//! outcome, written as an `async fn` ([`from_fn`], as axum's) or as a type ([`Middleware`]).
//!
//! ```
//! use rust_stream::prelude::*;
//! use rust_stream::handler::middleware::{from_fn, Call, Next, Outcomes};
//!
//! /// Who sent the message, read once by the layer and handed to the handler.
//! struct Tenant(String);
//!
//! async fn tenant(mut call: Call, next: Next) -> Outcomes {
//!     let Some(tenant) = call.messages()[0].header("tenant").map(str::to_owned) else {
//!         // Short-circuits: the handler is not called.
//!         return Outcomes::all(HandlerOutcome::dead_letter("no tenant header"));
//!     };
//!     call.insert(Tenant(tenant));
//!     next.run(call).await
//! }
//!
//! #[subscriber("orders")]
//! async fn fulfil(_order: &serde_json::Value, ctx: &mut Context<'_>) -> HandlerOutcome {
//!     let Tenant(tenant) = ctx.extension::<Tenant>().expect("the layer puts it in");
//!     tracing::info!(tenant, "fulfilled");
//!     HandlerOutcome::ack()
//! }
//!
//! let app = RustStream::new(AppInfo::new("fulfillment", "0.1.0")).with_broker(SqsBroker::in_process(), |b| {
//!     b.layer(from_fn(tenant)); // around every subscriber of the app
//!     b.include(fulfil);
//! });
//! # let _ = app;
//! ```
//!
//! # How the parts fit
//!
//! The engine decodes each message first: one whose body does not decode never reaches
//! middleware, and follows the undecodable rules. The rest make a [`Call`] (one message for a
//! [`Handle`](crate::Handle) handler, the decoded messages of a batch for a
//! [`HandleBatch`](crate::handler::batch::HandleBatch) one), which the first layer gets with a [`Next`];
//! `next.run(call)` runs the next layer, and the last one's runs the handler. What comes back is
//! [`Outcomes`], one [`HandlerOutcome`] per message of the call, which a layer reads, changes, or
//! makes itself without calling `next` (a short-circuit). Values a layer puts in the call with
//! [`Call::insert`] are the handler's through [`Context::extension`](crate::Context::extension)
//! (and [`BatchContext::extension`](crate::handler::batch::BatchContext::extension)).
//!
//! Layers are installed at two scopes: the app's, with `b.layer(..)` beside `b.include(..)`
//! (every subscriber the app includes, whether included before or after), and a subscription's,
//! with [`SubscriberBuilder::layer`](crate::SubscriberBuilder::layer) or `#[subscriber(..,
//! layers(a, b))]`. A call runs through the app's layers first, in the order added, then the
//! subscription's, in the order added, then the handler; outcomes come back the other way.
//!
//! The engine keeps what is not the handler's: the retry decision and backoff, dead-lettering,
//! metrics and the `process` span (layers run inside it) stay around the whole call, so a layer
//! that turns an outcome into `retry()` gets the subscription's backoff, and one that returns
//! `dead_letter(..)` moves the message as a handler would. A panic in a layer is the handler's
//! panic, and the handler timeout covers the layers with the handler. A subscription without
//! layers runs its handler exactly as before: nothing of this module is on its path.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use futures_util::future::Either;
use smallvec::SmallVec;

use super::context::Extensions;
use super::outgoing::Outgoing;
use crate::outcome::HandlerOutcome;
use crate::task::BoxFuture;

/// One message of a [`Call`]: what a handler's [`Context`](crate::Context) shows of it (the
/// context's accessors read it).
#[doc(inline)]
pub use crate::handler::context::Message;

/// A layer around handlers: sees a [`Call`], runs the rest with [`Next::run`] or answers without
/// it, and returns the call's [`Outcomes`].
///
/// [`from_fn`] makes one from an `async fn`; a type with settings or state of its own implements
/// it:
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use rust_stream::HandlerOutcome;
/// use rust_stream::handler::middleware::{Call, Middleware, Next, Outcomes};
///
/// /// Counts the messages handlers acked.
/// #[derive(Clone, Default)]
/// struct CountAcks(Arc<AtomicU64>);
///
/// impl Middleware for CountAcks {
///     async fn call(&self, call: Call, next: Next) -> Outcomes {
///         let outcomes = next.run(call).await;
///         let acked = outcomes.iter().filter(|outcome| **outcome == HandlerOutcome::ack()).count();
///         self.0.fetch_add(acked as u64, Ordering::Relaxed);
///         outcomes
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not middleware",
    label = "not a layer",
    note = "a layer is an `async fn(Call, Next) -> Outcomes` wrapped in `rust_stream::handler::middleware::from_fn(..)`, or a type that implements `Middleware`"
)]
pub trait Middleware: Send + Sync + 'static {
    /// Handles `call`: usually does something, runs `next.run(call).await`, and returns (perhaps
    /// changed) what it returns.
    fn call(&self, call: Call, next: Next) -> impl Future<Output = Outcomes> + Send;
}

impl<M: Middleware> Middleware for Arc<M> {
    fn call(&self, call: Call, next: Next) -> impl Future<Output = Outcomes> + Send {
        (**self).call(call, next)
    }
}

/// Middleware made of a function, by [`from_fn`].
#[derive(Clone, Copy)]
pub struct FromFn<F>(F);

impl<F> fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FromFn")
            .field(&std::any::type_name::<F>())
            .finish()
    }
}

/// Middleware of an `async fn(Call, Next) -> Outcomes`, or of a closure that returns such a
/// future (to capture values: `from_fn(move |call, next| { let seen = seen.clone(); async move
/// { .. } })`).
pub fn from_fn<F, Fut>(f: F) -> FromFn<F>
where
    F: Fn(Call, Next) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcomes> + Send + 'static,
{
    FromFn(f)
}

impl<F, Fut> Middleware for FromFn<F>
where
    F: Fn(Call, Next) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcomes> + Send + 'static,
{
    fn call(&self, call: Call, next: Next) -> impl Future<Output = Outcomes> + Send {
        (self.0)(call, next)
    }
}

/// One handler call as middleware sees it: its messages, in order, and the values the layers put
/// in for the handler.
pub struct Call {
    /// Inline for a single handler's one message, so its call allocates nothing for it.
    messages: SmallVec<[Message; 1]>,
    batch: bool,
    extensions: Extensions,
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("messages", &self.messages)
            .field("batch", &self.batch)
            .field("extensions", &self.extensions)
            .finish()
    }
}

impl Call {
    /// A single handler's call, over its one message.
    #[inline]
    pub(crate) fn one(message: Message) -> Self {
        Self {
            // In place: collecting one message into the vector is a loop that reserves first.
            messages: SmallVec::from_buf([message]),
            batch: false,
            extensions: Extensions::default(),
        }
    }

    /// A batch handler's call, over `messages`.
    pub(crate) fn batch(messages: Vec<Message>) -> Self {
        Self {
            messages: SmallVec::from_vec(messages),
            batch: true,
            extensions: Extensions::default(),
        }
    }

    /// The call's messages, in the order the handler gets them: one for a
    /// [`Handle`](crate::Handle) handler, those of the batch that decoded for a
    /// [`HandleBatch`](crate::handler::batch::HandleBatch) one.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// How many messages the call holds (at least one).
    #[inline]
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the call holds no message (never, for a call the engine makes).
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Whether the handler is a batch handler (whose call may hold a single message).
    pub fn is_batch(&self) -> bool {
        self.batch
    }

    /// Puts `value` in for the handler, in place of any value of its type: it reads it with
    /// [`Context::extension`](crate::Context::extension), and later layers with
    /// [`extension`](Self::extension).
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.extensions.insert(value);
    }

    /// The value of type `T` an earlier layer put in.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.extensions.get::<T>()
    }

    /// The messages and extensions, for the handler's context.
    pub(crate) fn into_parts(self) -> (SmallVec<[Message; 1]>, Extensions) {
        (self.messages, self.extensions)
    }
}

/// How each message of a [`Call`] is settled: one [`HandlerOutcome`] per message, in the call's
/// order, with what the handler published for it.
///
/// What [`Next::run`] returns has one outcome per message of the call. A layer may change them:
/// an outcome changed from ack to anything else drops what the handler published for that
/// message (nothing is sent), and one changed to ack from anything else sends nothing, as the
/// handler's outputs went with its failure. A layer that answers without calling `next` returns
/// [`all`](Self::all) (or `.into()` of one outcome), with [`set`](Self::set) for single messages.
///
/// ```
/// use rust_stream::HandlerOutcome;
/// use rust_stream::handler::middleware::Outcomes;
///
/// // The second message of the call waits; every other one is dead-lettered.
/// let outcomes = Outcomes::all(HandlerOutcome::dead_letter("paused")).with(1, HandlerOutcome::retry());
/// assert_eq!(outcomes.outcome_of(1), &HandlerOutcome::retry());
/// assert_eq!(outcomes.outcome_of(7), &HandlerOutcome::dead_letter("paused"));
/// ```
#[must_use = "outcomes settle the messages only when returned"]
pub struct Outcomes {
    /// The outcome of each message by its index, with what the handler published for it: one
    /// per message once the outcomes come back from a layer or the handler (inline for one).
    each: Each,
    /// The outcome of each message neither in `each` nor named.
    rest: HandlerOutcome,
    /// What few calls' outcomes have, apart: every call's outcomes are moved through each layer's
    /// future, and without these they are small enough to move without a call to `memcpy`.
    beyond: Option<Box<Beyond>>,
}

/// The outcomes a layer named past [`Outcomes::each`], and the indexes named past the call.
#[derive(Default)]
struct Beyond {
    /// Outcomes [`set`](Outcomes::set) past `each`, sorted by index, each index once: a layer's
    /// own outcomes, which do not know how many messages the call holds until they are fitted
    /// to it.
    named: Vec<(usize, HandlerOutcome)>,
    /// The indexes a batch handler's outcome, or a layer, named past the call.
    past_the_call: Vec<usize>,
}

/// Each message's outcome and what the handler published for it, by index.
pub(crate) type Each = SmallVec<[(HandlerOutcome, Vec<Outgoing>); 1]>;

impl fmt::Debug for Outcomes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outcomes")
            .field("each", &self.iter().collect::<Vec<_>>())
            .field("named", &Named(self.named()))
            .field("rest", &self.rest)
            .finish_non_exhaustive()
    }
}

/// [`Beyond::named`] as the map it stands for.
struct Named<'a>(&'a [(usize, HandlerOutcome)]);

impl fmt::Debug for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(index, outcome)| (index, outcome)))
            .finish()
    }
}

impl From<HandlerOutcome> for Outcomes {
    fn from(outcome: HandlerOutcome) -> Self {
        Self::all(outcome)
    }
}

impl Outcomes {
    /// Every message of the call settled as `outcome` (unless [`set`](Self::set) says otherwise).
    pub fn all(outcome: HandlerOutcome) -> Self {
        Self {
            each: Each::new(),
            rest: outcome,
            beyond: None,
        }
    }

    /// What a single handler answered: its message's outcome and what it published for it.
    #[inline]
    pub(crate) fn handled_one(outcome: HandlerOutcome, published: Vec<Outgoing>) -> Self {
        Self {
            each: Each::from_buf([(outcome, published)]),
            rest: HandlerOutcome::Ack,
            beyond: None,
        }
    }

    /// What the handler answered: each message's outcome and what it published for it, and the
    /// indexes its outcome named past the call.
    pub(crate) fn handled(
        each: impl IntoIterator<Item = (HandlerOutcome, Vec<Outgoing>)>,
        past_the_call: Vec<usize>,
    ) -> Self {
        Self {
            each: each.into_iter().collect(),
            rest: HandlerOutcome::Ack,
            beyond: (!past_the_call.is_empty()).then(|| {
                Box::new(Beyond {
                    named: Vec::new(),
                    past_the_call,
                })
            }),
        }
    }

    /// How the message at `index` of the call is settled.
    pub fn outcome_of(&self, index: usize) -> &HandlerOutcome {
        match self.each.get(index) {
            Some((outcome, _)) => outcome,
            None => {
                let named = self.named();
                match named.binary_search_by_key(&index, |(named, _)| *named) {
                    Ok(at) => &named[at].1,
                    Err(_) => &self.rest,
                }
            }
        }
    }

    /// What the handler published for the message at `index`: nothing when it is not acked, or
    /// for outcomes a layer made itself.
    pub(crate) fn published(&self, index: usize) -> &[Outgoing] {
        self.each
            .get(index)
            .map_or(&[], |(_, published)| published.as_slice())
    }

    /// What the handler published for the message at `index`, to change: `None` when it
    /// published nothing there.
    pub(crate) fn published_mut(&mut self, index: usize) -> Option<&mut Vec<Outgoing>> {
        self.each.get_mut(index).map(|(_, published)| published)
    }

    /// Each message's outcome, in the call's order: one per message for what [`Next::run`]
    /// returned (for outcomes a layer made itself, none until they are returned).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &HandlerOutcome> + '_ {
        self.each.iter().map(|(outcome, _)| outcome)
    }

    /// Settles the message at `index` as `outcome` (see the type's doc for what becomes of what
    /// the handler published). An index past the call is logged as an error and ignored.
    pub fn set(&mut self, index: usize, outcome: HandlerOutcome) -> &mut Self {
        match self.each.get_mut(index) {
            Some((settled, published)) => {
                if !(*settled == HandlerOutcome::Ack && outcome == HandlerOutcome::Ack) {
                    published.clear();
                }
                *settled = outcome;
            }
            None => {
                let named = &mut self.beyond.get_or_insert_with(Box::default).named;
                match named.binary_search_by_key(&index, |(named, _)| *named) {
                    Ok(at) => named[at].1 = outcome,
                    Err(at) => named.insert(at, (index, outcome)),
                }
            }
        }
        self
    }

    /// [`set`](Self::set), by value.
    pub fn with(mut self, index: usize, outcome: HandlerOutcome) -> Self {
        self.set(index, outcome);
        self
    }

    /// Every message settled as `outcome` (see [`set`](Self::set)).
    pub fn set_all(&mut self, outcome: HandlerOutcome) -> &mut Self {
        for index in 0..self.each.len() {
            self.set(index, outcome.clone());
        }
        if let Some(beyond) = &mut self.beyond {
            beyond.named.clear();
        }
        self.rest = outcome;
        self
    }

    /// Exactly one entry per message of a call of `len`: those named past it are noted (the
    /// engine logs them), those not named take the outcome for all.
    #[inline]
    fn fit(mut self, len: usize) -> Self {
        // What a handler answers fits already (each message once, nothing named): inlined, that
        // costs a comparison, not a move of the outcomes in and out.
        if self.each.len() != len || !self.named().is_empty() {
            self.fill(len);
        }
        self
    }

    /// The outcomes named past `each`, by index.
    #[inline]
    fn named(&self) -> &[(usize, HandlerOutcome)] {
        self.beyond.as_ref().map_or(&[], |beyond| &beyond.named)
    }

    /// [`fit`](Self::fit), when there is something to do.
    fn fill(&mut self, len: usize) {
        let mut past_the_call = Vec::new();
        if self.each.len() > len {
            past_the_call.extend(len..self.each.len());
            self.each.truncate(len);
        }
        while self.each.len() < len {
            self.each.push((self.rest.clone(), Vec::new()));
        }
        let named = match &mut self.beyond {
            Some(beyond) => std::mem::take(&mut beyond.named),
            None => Vec::new(),
        };
        for (index, outcome) in named {
            if index < len {
                self.set(index, outcome);
            } else {
                past_the_call.push(index);
            }
        }
        if !past_the_call.is_empty() {
            self.beyond
                .get_or_insert_with(Box::default)
                .past_the_call
                .extend(past_the_call);
        }
    }

    /// Each message's outcome with what it published, in order, and the indexes named past the
    /// call.
    pub(crate) fn into_parts(self) -> (Each, Vec<usize>) {
        (self.each, Self::past_the_call(self.beyond))
    }

    /// The one message's outcome with what it published, of outcomes fitted to a single
    /// handler's call, and the indexes named past the call.
    #[inline]
    pub(crate) fn into_one(self) -> ((HandlerOutcome, Vec<Outgoing>), Vec<usize>) {
        // The outcome is taken out of the inline array whole: popping it would leave an empty
        // vector to drop.
        let one = match self.each.into_inner() {
            Ok([one]) => one,
            Err(mut each) => each.pop().expect("one outcome for the one message"),
        };
        (one, Self::past_the_call(self.beyond))
    }

    fn past_the_call(beyond: Option<Box<Beyond>>) -> Vec<usize> {
        beyond.map_or_else(Vec::new, |beyond| beyond.past_the_call)
    }
}

/// The rest of a call's way: the layers after this one, then the handler.
pub struct Next {
    layers: Layers,
    /// The index in `layers` of the layer `run` runs.
    at: usize,
    handler: Endpoint,
}

impl fmt::Debug for Next {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Next")
            .field("layers_left", &(self.layers.0.len() - self.at))
            .finish_non_exhaustive()
    }
}

/// The handler at the end of a call's layers: made before the call with what the handler needs,
/// started once with the call the last layer passes on. One allocation holds both what it
/// captured and, once started, the handler's future.
pub(crate) struct Endpoint(Pin<Box<dyn StartOnce>>);

impl Endpoint {
    /// The handler that `start` runs on the call.
    pub(crate) fn new<S, F>(start: S) -> Self
    where
        S: FnOnce(Call) -> F + Send + 'static,
        F: Future<Output = Outcomes> + Send + 'static,
    {
        Self(Box::pin(HandlerCall::Waiting { start: Some(start) }))
    }

    /// Starts the handler on `call`; the returned future is the handler's.
    fn start(self, call: Call) -> Pin<Box<dyn StartOnce>> {
        let mut handler = self.0;
        handler.as_mut().start(call);
        handler
    }
}

/// A handler's future that waits for its call before it can be polled.
trait StartOnce: Future<Output = Outcomes> + Send {
    fn start(self: Pin<&mut Self>, call: Call);
}

pin_project_lite::pin_project! {
    #[project = HandlerCallProjection]
    enum HandlerCall<S, F> {
        Waiting { start: Option<S> },
        // `len` is the call's, which the handler's outcomes are fitted to.
        Running { #[pin] future: F, len: usize },
    }
}

impl<S, F> StartOnce for HandlerCall<S, F>
where
    S: FnOnce(Call) -> F + Send,
    F: Future<Output = Outcomes> + Send,
{
    fn start(mut self: Pin<&mut Self>, call: Call) {
        if let HandlerCallProjection::Waiting { start } = self.as_mut().project() {
            let start = start.take().expect("an endpoint starts once");
            let len = call.len();
            self.set(HandlerCall::Running {
                future: start(call),
                len,
            });
        }
    }
}

impl<S, F> Future for HandlerCall<S, F>
where
    F: Future<Output = Outcomes>,
{
    type Output = Outcomes;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Outcomes> {
        match self.project() {
            HandlerCallProjection::Running { future, len } => {
                future.poll(cx).map(|outcomes| outcomes.fit(*len))
            }
            HandlerCallProjection::Waiting { .. } => {
                unreachable!("`Next::run` starts the handler before it polls it")
            }
        }
    }
}

impl Next {
    /// The way through `layers`, then to `handler`.
    pub(crate) fn new(layers: Layers, handler: Endpoint) -> Self {
        Self {
            layers,
            at: 0,
            handler,
        }
    }

    /// Runs the next layer, or the handler after the last one, on `call`; resolves to one
    /// outcome per message of the call. A layer runs it at most once: a call that should be
    /// handled again is retried by the engine (return `retry()`).
    pub fn run(self, call: Call) -> impl Future<Output = Outcomes> + Send + 'static {
        // Both futures are boxed already and fit their outcomes to the call, so nothing wraps
        // them here: a wrapper would move every call's outcomes through one more future.
        match self.layers.0.get(self.at).cloned() {
            Some(layer) => Either::Left(layer.call(
                call,
                Next {
                    at: self.at + 1,
                    ..self
                },
            )),
            None => Either::Right(self.handler.start(call)),
        }
    }
}

/// [`Middleware`] behind a pointer, so a subscription holds layers of any type.
trait ErasedMiddleware: Send + Sync + 'static {
    fn call(self: Arc<Self>, call: Call, next: Next) -> BoxFuture<'static, Outcomes>;
}

impl<M: Middleware> ErasedMiddleware for M {
    fn call(self: Arc<Self>, call: Call, next: Next) -> BoxFuture<'static, Outcomes> {
        // The layer's own code, even what it does before its first `.await`, runs when the
        // future is polled: inside the engine's panic catch, timeout and `process` span. What it
        // answers is fitted here (it may name more or fewer messages than the call has), so the
        // layer outside it gets one outcome a message.
        let len = call.len();
        Box::pin(async move { Middleware::call(&*self, call, next).await.fit(len) })
    }
}

/// A subscription's layers, outermost first: the app's, then its own.
#[derive(Clone, Default)]
pub(crate) struct Layers(Arc<[Arc<dyn ErasedMiddleware>]>);

impl fmt::Debug for Layers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} layers", self.0.len())
    }
}

impl Layers {
    /// One layer.
    pub(crate) fn of(layer: impl Middleware) -> Self {
        Self(Arc::from([Arc::new(layer) as Arc<dyn ErasedMiddleware>]))
    }

    /// Whether there is none.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `self`'s layers, then `inner`'s.
    pub(crate) fn around(&self, inner: &Layers) -> Self {
        Self(self.0.iter().chain(inner.0.iter()).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_fit_the_call_and_note_what_is_past_it() {
        let outcomes = Outcomes::all(HandlerOutcome::retry())
            .with(1, HandlerOutcome::ack())
            .with(3, HandlerOutcome::dead_letter("x"))
            .fit(2);
        assert_eq!(
            outcomes.iter().collect::<Vec<_>>(),
            [&HandlerOutcome::retry(), &HandlerOutcome::ack()]
        );
        assert_eq!(
            Outcomes::past_the_call(outcomes.beyond),
            [3],
            "only what was named past the call"
        );
        let short = Outcomes::all(HandlerOutcome::ack()).fit(3);
        assert_eq!(short.iter().len(), 3);
    }

    #[test]
    fn set_all_reaches_every_message_and_those_past_the_ones_named() {
        let mut outcomes = Outcomes::handled(
            vec![
                (HandlerOutcome::ack(), Vec::new()),
                (HandlerOutcome::retry(), Vec::new()),
            ],
            Vec::new(),
        );
        outcomes.set_all(HandlerOutcome::dead_letter("stop"));
        let outcomes = outcomes.fit(3);
        assert!(outcomes
            .iter()
            .all(|outcome| *outcome == HandlerOutcome::dead_letter("stop")));
    }
}
