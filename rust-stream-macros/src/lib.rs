//! The `#[subscriber]` attribute of [rust-stream](https://docs.rs/rust-stream): a handler written as
//! a plain `async fn`. Use it through `rust_stream::subscriber` (or the prelude), not from here.
//!
//! The macro reads in three steps, each its own module: `parse` turns the attribute and the
//! function into our AST (one problem per token, every problem kept), `check` applies the rules
//! that span several parts (each `&Output<U>` parameter has an `outputs(..)` entry, literal
//! settings are within SQS's limits), and `expand` writes the `Handle` impl (`HandleBatch` for
//! `batch(..)`) a person would have written by hand, keeping the function callable as
//! `name::call` for tests. When something is wrong, every error is reported at once, on the user's
//! token, and the function is still emitted beside a stub, so the only errors are the real ones.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

use proc_macro::TokenStream;

mod check;
mod expand;
mod parse;

/// Turns an `async fn` into a subscriber: a value named like the function that
/// `b.include(name)` mounts, and that implements `Handle<T, O>` (or, with `batch(..)`,
/// `HandleBatch<T, O>`: see [Batches](#batches)).
///
/// ```
/// use rust_stream::prelude::*;
/// # #[derive(serde::Deserialize)] struct Order { id: u64, customer: String }
///
/// /// Reads the FIFO queue `orders.fifo`: the orders of one customer arrive in order.
/// #[subscriber(SqsQueue::new("orders.fifo"))]
/// async fn fulfil(order: &Order) -> HandlerOutcome {
///     tracing::info!(order.id, order.customer, "order fulfilled");
///     HandlerOutcome::ack()
/// }
///
/// let app = RustStream::new(AppInfo::new("fulfillment", "0.1.0"))
///     .with_broker(SqsBroker::in_process(), |b| {
///         b.include(fulfil);
///     });
/// # let _ = app;
/// ```
///
/// # The attribute
///
/// `#[subscriber(SOURCE, key = value, ...)]`. `SOURCE` comes first: a queue name (`"orders"`)
/// or any expression that converts into an `SqsQueue` (`SqsQueue::new("orders.fifo").wait(..)`).
/// The settings after it are the methods of `SubscriberBuilder`, each set at most once:
///
/// | Setting | Type | Builder method |
/// | --- | --- | --- |
/// | `concurrency = 8` | `usize` | `.concurrency(8)` |
/// | `batch_size = 10` | `usize`, 1–10 | `.batch_size(10)` |
/// | `wait = Duration::from_secs(5)` | `Duration`, ≤ 20 s | `.wait(..)` |
/// | `visibility_timeout = Duration::from_secs(60)` | `Duration` | `.visibility_timeout(..)` |
/// | `pollers = 2` | `usize` | `.pollers(2)` |
/// | `retry = RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(300))` | `RetryPolicy` | `.retry(..)` |
/// | `timeout = Duration::from_secs(30)` | `Duration`: a handler call's limit | `.timeout(..)` |
/// | `dead_letter("orders-dlq.fifo", 5)` | queue name, attempts 1–1000 | `.dead_letter("orders-dlq.fifo", 5)` |
/// | `codec = MyCodec` | a `Codec` | `.codec(MyCodec)` |
/// | `filter = from_the_ledger` | `fn(&Context<'_>) -> bool`: on a routed queue, takes what it accepts instead of by type | `.filter(..)` |
/// | `idempotent = payments_inbox()` | an `Inbox<S>` (`rust_stream::inbox`): each message handled effectively once, its writes in `ctx.transaction::<S>()`; not with `batch(..)` | `.idempotent(..)` |
/// | `outputs(receipts = "receipts.fifo", ...)` | one source per `&Output<U>` parameter | `.outputs(..)` |
/// | `batch(max = 50, window = 100ms)` | `max`: `usize`, 1–1000; `window`: `100ms`, `2s`, `5m` or a `Duration`, ≤ 5 min | `.batch(50, Duration::from_millis(100))` |
///
/// The function's doc comment becomes the subscriber's description: its operation's in the app's
/// AsyncAPI document (`rust_stream::asyncapi`). There, the message and each output are described
/// by their JSON Schema when their type implements `schemars::JsonSchema` and rust-stream has its
/// `schemars` feature, and by their type's name otherwise.
///
/// # The function
///
/// `async fn name(msg: &T, ...) -> R`, not generic and not a method. The first parameter is the
/// message, borrowed; `T` must implement `serde::Deserialize` (or decode with the `codec`). After
/// it, in any order:
///
/// - `ctx: &mut Context<'_>`, or `&Context<'_>` to only read it: ids, group, headers, publishing.
/// - `name: &Output<U>`: an output, whose queue is the `outputs(name = SOURCE)` entry of the same
///   name.
/// - `State(x): State<S>` or `x: State<S>`: shared state registered on the app with
///   `RustStream::with_state`; the app refuses to start without it.
///
/// It returns `HandlerOutcome`, `()` (ack), `Result<(), E: Display>` (`Err` is logged and the
/// message retried) or `Result<(), HandlerOutcome>`. The body runs as written: `?`, early `return`
/// and borrows of the message work as in any `async fn`. A function that takes the messages of a
/// batch, `&[T]`, is described under [Batches](#batches).
///
/// ```
/// use std::time::Duration;
/// use rust_stream::prelude::*;
/// use rust_stream::{Output, State};
/// # #[derive(serde::Deserialize)] struct Order { id: u64 }
/// # #[derive(serde::Serialize)] struct Receipt { order: u64 }
/// # #[derive(Clone)] struct Ledger;
/// # impl Ledger { fn book(&self, _: u64) -> Result<(), String> { Ok(()) } }
///
/// /// Bills an order and publishes its receipt.
/// #[subscriber(
///     "orders",
///     concurrency = 32,
///     wait = Duration::from_secs(5),
///     dead_letter("orders-dlq", 5),
///     outputs(receipts = "receipts"),
/// )]
/// async fn bill(
///     order: &Order,
///     State(ledger): State<Ledger>,
///     receipts: &Output<Receipt>,
///     ctx: &mut Context<'_>,
/// ) -> Result<(), String> {
///     ledger.book(order.id)?;
///     ctx.publish(receipts.message(&Receipt { order: order.id }));
///     Ok(())
/// }
///
/// let app = RustStream::new(AppInfo::new("billing", "0.1.0"))
///     .with_state(Ledger)
///     .with_broker(SqsBroker::in_process(), |b| {
///         b.include(bill);
///     });
/// # let _ = app;
/// ```
///
/// # Batches
///
/// With `batch(max = .., window = ..)` the function takes a batch of messages a call, `&[T]`,
/// as the engine gathers them: up to `max` messages (1–1000), for at most `window` from the
/// first (up to 5 minutes). Both are required. `window` is a number with a unit, `ms`, `s` or
/// `m` (`100ms`, `0.5s`, `2s`, `5m`), or any `Duration` expression; `max` any `usize`
/// expression. Literals out of range are compile errors; values only known at run time are
/// checked when the app starts (`ConfigError::BatchMax`, `ConfigError::BatchWindow`).
///
/// The parameters after the messages are those of a single handler, except that the context
/// is `ctx: &mut BatchContext<'_>` (or `&BatchContext<'_>`, from `rust_stream::handler::batch`): a
/// `Context` per message, `ctx[i]`, to read its ids and attempt and to publish for it. What is
/// published for a message is sent only if its outcome acks it. The function returns
/// `BatchOutcome` (an outcome per message, acks by default), `()` (acks every message),
/// `Result<(), E: Display>` (`Err` fails every message) or `Result<BatchOutcome, E: Display>`.
/// How the engine settles each message, and keeps FIFO groups in order, is told in
/// `rust_stream::handler::batch`.
///
/// ```
/// use rust_stream::handler::batch::{BatchContext, BatchOutcome};
/// use rust_stream::prelude::*;
/// use rust_stream::Output;
/// # #[derive(serde::Deserialize)] struct Posting { account: String, cents: i64 }
/// # #[derive(serde::Serialize)] struct Receipt { account: String, cents: i64 }
///
/// /// Books up to 50 postings in one round trip; a posting without an account is refused alone.
/// #[subscriber(
///     "postings",
///     batch(max = 50, window = 100ms),
///     outputs(receipts = "receipts"),
/// )]
/// async fn post(
///     postings: &[Posting],
///     receipts: &Output<Receipt>,
///     ctx: &mut BatchContext<'_>,
/// ) -> BatchOutcome {
///     let mut outcome = BatchOutcome::ack();
///     for (index, posting) in postings.iter().enumerate() {
///         if posting.account.is_empty() {
///             outcome.set(index, HandlerOutcome::dead_letter("no account"));
///             continue;
///         }
///         let receipt = Receipt { account: posting.account.clone(), cents: posting.cents };
///         ctx[index].publish(receipts.message(&receipt));
///     }
///     outcome
/// }
///
/// let app = RustStream::new(AppInfo::new("ledger", "0.1.0"))
///     .with_broker(SqsBroker::in_process(), |b| {
///         b.include(post);
///     });
/// # let _ = app;
/// ```
///
/// # Mounting it on a queue named at run time
///
/// `name.on(queue)` mounts the handler on `queue` instead of `SOURCE`, with every setting after
/// `SOURCE` kept: for a queue name from configuration, or one unique to a test run.
/// `queue` replaces `SOURCE` whole: its name and what is set on the queue itself
/// (`.create_if_missing()`, `.content_based_dedup()`, and any setting written on the `SqsQueue`
/// expression, such as `.visibility_timeout(..)`). The keyed settings (`concurrency`, `retry`,
/// `dead_letter`, `outputs`, `codec`, `batch`, ...), the states and the description are applied
/// on top, so where both set one, the attribute's wins. For names per environment, a
/// broker-wide prefix (`SqsBroker::queue_name_prefix`) renames every queue, this one, its
/// dead-letter queue and outputs included, without `.on(..)`.
///
/// ```
/// use std::time::Duration;
/// use rust_stream::prelude::*;
/// # #[derive(serde::Deserialize)] struct Order { id: u64 }
///
/// #[subscriber("orders.fifo", concurrency = 8, dead_letter("orders-dlq.fifo", 5))]
/// async fn fulfil(order: &Order) -> HandlerOutcome {
///     HandlerOutcome::ack()
/// }
///
/// let queue = std::env::var("ORDERS_QUEUE").unwrap_or_else(|_| "orders-eu.fifo".to_owned());
/// let broker = SqsBroker::in_process().queue_name_prefix("staging-");
/// let app = RustStream::new(AppInfo::new("fulfillment", "0.1.0")).with_broker(broker, |b| {
///     b.include(fulfil.on(SqsQueue::new(queue).create_if_missing()));
/// });
/// // Reads `staging-orders-eu.fifo`, dead-letters to `staging-orders-dlq.fifo` after 5 attempts.
/// # let _ = app;
/// ```
///
/// # Calling it from a test
///
/// The function stays callable, as `name::call(..)`: an associated `async fn` of the struct with
/// the parameters as written (the message, then the context, `State<S>` values and outputs, in
/// the function's order) that returns what the function returns. Its `Handle` impl calls the
/// same `call`, so a unit test runs the body the broker runs, and asserts its return value, not
/// the `Result` the engine settles by. The name is `call` because the struct takes the
/// function's own, and `handle` is `Handle`'s method, which takes what the engine hands over
/// (the outputs as one value, states read from the context).
///
/// `rust_stream::testing::TestContext` (feature `testing`) builds the context without a broker,
/// and `ctx.published()` shows what the body published, before anything is sent (for a batch
/// subscriber, `TestBatch` builds its `BatchContext` of them, and `ctx[i].published()` shows
/// what it published for each message):
///
/// ```
/// use rust_stream::prelude::*;
/// use rust_stream::testing::TestContext;
/// use rust_stream::Output;
/// # #[derive(serde::Deserialize)] struct Order { id: u64 }
/// # #[derive(serde::Serialize)] struct Shipment { order: u64 }
///
/// /// Ships an order once it is paid for.
/// #[subscriber("orders", outputs(shipments = "shipments"))]
/// async fn ship(order: &Order, shipments: &Output<Shipment>, ctx: &mut Context<'_>) -> HandlerOutcome {
///     if ctx.header("paid") != Some("yes") {
///         return HandlerOutcome::retry();
///     }
///     ctx.publish(shipments.message(&Shipment { order: order.id }));
///     HandlerOutcome::ack()
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let shipments = Output::new("shipments");
///
/// let mut paid = TestContext::new().header("paid", "yes").build();
/// let outcome = ship::call(&Order { id: 7 }, &shipments, &mut paid).await;
/// assert_eq!(outcome, HandlerOutcome::ack());
/// assert_eq!(paid.published()[0].body().unwrap(), r#"{"order":7}"#);
///
/// let mut unpaid = TestContext::new().build();
/// let outcome = ship::call(&Order { id: 8 }, &shipments, &mut unpaid).await;
/// assert_eq!(outcome, HandlerOutcome::retry());
/// assert!(unpaid.published().is_empty());
/// # }
/// ```
///
/// # What it writes
///
/// A unit struct named like the function (same visibility, the function's docs); on it `call`
/// (same visibility), which holds the function as written, attributes and name included, so
/// `#[tracing::instrument]` still names its span after the function; the struct's
/// `Handle<T, O>` impl (`O` is `()`, the one `Output<U>`, or the tuple of them in parameter
/// order), which reads the states from the context and awaits `call` (with `batch(..)`, its
/// `HandleBatch<T, O>` impl over `&[T]`); `on(queue)` (same visibility), which is
/// `subscriber(queue, name)` with `.batch(max, window)`, the settings, `.outputs(..)`,
/// `.requires_state::<S>()` for each state, `.description(..)`, `.payload(..)` (the message's,
/// and each output's on its `Output::new(..)`) and `.build()`; and `From<name> for
/// Subscriber`, which is `name.on(SOURCE)`.
#[proc_macro_attribute]
pub fn subscriber(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::subscriber(args.into(), item.into()).into()
}
