//! Middleware around handlers (issue 22, item 2), in process on a paused clock, each for a single
//! handler and a batch handler:
//!
//! - the order of layers: the app's (`b.layer`, added before and after `b.include`) outside the
//!   subscription's (`.layer`), each scope in the order added, the handler innermost; and the
//!   same through `#[subscriber(.., layers(..))]`;
//! - a short-circuit: the handler is not called and the message is dead-lettered with the
//!   layer's reason;
//! - a value a layer puts in the call, read by the handler from its context;
//! - a layer that sees the outcomes (counts acks) and one that changes them (an ack turned into a
//!   dead letter sends none of the handler's outputs);
//! - a message that does not decode never reaches middleware;
//! - a panic in a layer is the handler's panic: the message is retried.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::handler::batch::{BatchContext, BatchOutcome, HandleBatch};
use rust_stream::handler::middleware::{from_fn, Call, Middleware, Next, Outcomes};
use rust_stream::prelude::*;
use rust_stream::testing::{Settled, TestApp};
use rust_stream::{Include, Output, Subscriber};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Order {
    id: u32,
}

/// What happened, in order: layers going in (`a>`), the handler, layers coming out (`<a`).
type Log = Arc<Mutex<Vec<String>>>;

/// A layer that writes its name to the log on the way in and on the way out.
struct Mark {
    name: &'static str,
    log: Log,
}

impl Middleware for Mark {
    async fn call(&self, call: Call, next: Next) -> Outcomes {
        self.log.lock().unwrap().push(format!("{}>", self.name));
        let outcomes = next.run(call).await;
        self.log.lock().unwrap().push(format!("<{}", self.name));
        outcomes
    }
}

fn mark(name: &'static str, log: &Log) -> Mark {
    Mark {
        name,
        log: log.clone(),
    }
}

/// Who sent a message, as a layer reads it from the `tenant` header for the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tenant(String);

/// Acks each order, writing to the log what it saw: the tenant a layer put in, if any.
struct Fulfil {
    log: Log,
    calls: Arc<AtomicUsize>,
}

impl Handle<Order> for Fulfil {
    async fn handle(
        &self,
        order: &Order,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let tenant = ctx.extension::<Tenant>().map(|tenant| tenant.0.clone());
        self.log
            .lock()
            .unwrap()
            .push(format!("handler {} {tenant:?}", order.id));
        Ok(())
    }
}

/// The batch twin of [`Fulfil`]: one log line per call, with each message's id and tenant as the
/// batch context and each message's context read it.
struct FulfilAll {
    log: Log,
    calls: Arc<AtomicUsize>,
}

impl HandleBatch<Order> for FulfilAll {
    async fn handle(
        &self,
        orders: &[Order],
        _outs: &(),
        ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let call_tenant = ctx.extension::<Tenant>().map(|tenant| tenant.0.clone());
        for (index, order) in orders.iter().enumerate() {
            let tenant = ctx[index]
                .extension::<Tenant>()
                .map(|tenant| tenant.0.clone());
            assert_eq!(
                tenant, call_tenant,
                "each message's context reads the call's"
            );
            self.log
                .lock()
                .unwrap()
                .push(format!("handler {} {tenant:?}", order.id));
        }
        BatchOutcome::ack()
    }
}

/// Which handler a test mounts.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Single,
    Batch,
}

const KINDS: [Kind; 2] = [Kind::Single, Kind::Batch];

/// The layers the tests mount on a subscription, in one type so a test lists several.
enum Layer {
    Mark(Mark),
    Tenant,
    CountAcks(CountAcks),
    PanicFirst,
}

impl Middleware for Layer {
    async fn call(&self, call: Call, next: Next) -> Outcomes {
        match self {
            Self::Mark(mark) => mark.call(call, next).await,
            Self::Tenant => tenant(call, next).await,
            Self::CountAcks(count) => count.call(call, next).await,
            Self::PanicFirst => panic_first(call, next).await,
        }
    }
}

/// The subscription of `kind` on `queue`, with `layers` as its own, and the count of its
/// handler's calls.
fn mounted(
    kind: Kind,
    queue: SqsQueue,
    log: &Log,
    layers: Vec<Layer>,
) -> (Subscriber, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let subscriber = match kind {
        Kind::Single => {
            let handler = Fulfil {
                log: log.clone(),
                calls: calls.clone(),
            };
            layers
                .into_iter()
                .fold(subscriber(queue, handler), |built, layer| {
                    built.layer(layer)
                })
                .build()
        }
        Kind::Batch => {
            let handler = FulfilAll {
                log: log.clone(),
                calls: calls.clone(),
            };
            layers
                .into_iter()
                .fold(
                    subscriber(queue, handler).batch(10, Duration::from_millis(100)),
                    |built, layer| built.layer(layer),
                )
                .build()
        }
    };
    (subscriber, calls)
}

fn orders_queue(name: &str) -> SqsQueue {
    SqsQueue::new(name)
        .create_if_missing()
        .dead_letter(format!("{name}-dlq"), 3)
        .retry(rust_stream::RetryPolicy::exponential(
            Duration::from_millis(100),
            Duration::from_secs(1),
        ))
}

async fn start(broker: &SqsBroker, include: impl FnOnce(&mut Include<SqsBroker>)) -> TestApp {
    let app = RustStream::new(AppInfo::new("middleware", "0")).with_broker(broker.clone(), include);
    TestApp::spawn(app).await.expect("the app starts")
}

async fn send(broker: &SqsBroker, queue: &str, orders: &[(u32, Option<&str>)]) -> Vec<String> {
    let publisher = broker.publisher(queue);
    let mut ids = Vec::new();
    for (id, tenant) in orders {
        let mut message = publisher.message(&Order { id: *id });
        if let Some(tenant) = tenant {
            message = message.header("tenant", *tenant);
        }
        ids.push(message.send().await.unwrap().message_id);
    }
    ids
}

#[tokio::test(start_paused = true)]
async fn app_layers_run_outside_the_subscriptions_each_in_the_order_added() {
    for kind in KINDS {
        let broker = SqsBroker::in_process();
        let log = Log::default();
        let (subscriber, _calls) = mounted(
            kind,
            orders_queue("orders"),
            &log,
            vec![Layer::Mark(mark("s1", &log)), Layer::Mark(mark("s2", &log))],
        );
        let running = start(&broker, |b| {
            b.layer(mark("a1", &log));
            b.include(subscriber);
            // Added after the include, still around it, and inside `a1`.
            b.layer(mark("a2", &log));
        })
        .await;
        send(&broker, "orders", &[(1, None)]).await;
        running.drain().await;
        running.stop().await.unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            [
                "a1>",
                "a2>",
                "s1>",
                "s2>",
                "handler 1 None",
                "<s2",
                "<s1",
                "<a2",
                "<a1"
            ],
            "{kind:?}"
        );
    }
}

/// Dead-letters a call whose first message names no tenant, without calling the handler; else
/// puts the tenant in for the handler.
async fn tenant(mut call: Call, next: Next) -> Outcomes {
    let Some(tenant) = call.messages()[0].header("tenant").map(str::to_owned) else {
        return Outcomes::all(HandlerOutcome::dead_letter("unknown sender"));
    };
    call.insert(Tenant(tenant));
    next.run(call).await
}

#[tokio::test(start_paused = true)]
async fn a_layer_short_circuits_without_the_handler_and_the_engine_dead_letters() {
    for kind in KINDS {
        let broker = SqsBroker::in_process();
        let recorder = broker.recorder();
        let log = Log::default();
        let (subscriber, calls) = mounted(kind, orders_queue("orders"), &log, vec![Layer::Tenant]);
        let running = start(&broker, |b| {
            b.include(subscriber);
        })
        .await;
        let ids = send(&broker, "orders", &[(1, None)]).await;
        running.drain().await;
        running.stop().await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 0, "{kind:?}: not called");
        let dead = recorder.dead_lettered("orders");
        assert_eq!(dead.len(), 1, "{kind:?}");
        assert_eq!(dead[0].message_id, ids[0]);
        assert_eq!(dead[0].reason, "unknown sender");
        assert_eq!(recorder.handled("orders")[0].settled, Settled::DeadLettered);
    }
}

#[tokio::test(start_paused = true)]
async fn a_value_a_layer_puts_in_is_the_handlers() {
    for kind in KINDS {
        let broker = SqsBroker::in_process();
        let log = Log::default();
        let (subscriber, calls) = mounted(kind, orders_queue("orders"), &log, Vec::new());
        let running = start(&broker, |b| {
            b.layer(from_fn(tenant));
            b.include(subscriber);
        })
        .await;
        send(&broker, "orders", &[(7, Some("acme"))]).await;
        running.drain().await;
        running.stop().await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{kind:?}");
        assert_eq!(
            *log.lock().unwrap(),
            [r#"handler 7 Some("acme")"#],
            "{kind:?}"
        );
    }
}

/// Counts the acks among the outcomes it sees.
#[derive(Clone, Default)]
struct CountAcks(Arc<AtomicUsize>);

impl Middleware for CountAcks {
    async fn call(&self, call: Call, next: Next) -> Outcomes {
        let len = call.len();
        let outcomes = next.run(call).await;
        assert_eq!(outcomes.iter().len(), len, "one outcome per message");
        let acks = outcomes
            .iter()
            .filter(|outcome| **outcome == HandlerOutcome::ack())
            .count();
        self.0.fetch_add(acks, Ordering::SeqCst);
        outcomes
    }
}

#[tokio::test(start_paused = true)]
async fn a_layer_sees_each_messages_outcome() {
    for kind in KINDS {
        let broker = SqsBroker::in_process();
        let log = Log::default();
        let acks = CountAcks::default();
        let (subscriber, calls) = mounted(
            kind,
            orders_queue("orders"),
            &log,
            vec![Layer::CountAcks(acks.clone())],
        );
        let running = start(&broker, |b| {
            b.include(subscriber);
        })
        .await;
        send(&broker, "orders", &[(1, None), (2, None), (3, None)]).await;
        running.drain().await;
        running.stop().await.unwrap();
        assert!(calls.load(Ordering::SeqCst) >= 1);
        assert_eq!(acks.0.load(Ordering::SeqCst), 3, "{kind:?}");
    }
}

/// Publishes a receipt for each order and acks it.
#[rust_stream::subscriber(
    SqsQueue::new("orders").create_if_missing().dead_letter("orders-dlq", 3),
    outputs(receipts = SqsQueue::new("receipts").create_if_missing()),
    layers(from_fn(refuse_order_2), CountAcks::default())
)]
async fn receipt(order: &Order, receipts: &Output<Order>, ctx: &mut Context<'_>) {
    ctx.publish(receipts.message(order));
}

/// Turns the handler's ack of order 2 into a dead letter: its receipt is not sent.
async fn refuse_order_2(call: Call, next: Next) -> Outcomes {
    let is_2 = call.messages()[0].body().contains(r#""id":2"#);
    let mut outcomes = next.run(call).await;
    if is_2 {
        outcomes.set(0, HandlerOutcome::dead_letter("order 2 is refused"));
    }
    outcomes
}

#[tokio::test(start_paused = true)]
async fn an_ack_a_layer_changes_sends_none_of_the_handlers_outputs() {
    let broker = SqsBroker::in_process();
    let recorder = broker.recorder();
    let running = start(&broker, |b| {
        b.include(receipt);
    })
    .await;
    send(&broker, "orders", &[(1, None), (2, None), (3, None)]).await;
    running.drain().await;
    running.stop().await.unwrap();
    let mut sent: Vec<u32> = recorder
        .published_as::<Order>("receipts")
        .iter()
        .map(|order| order.id)
        .collect();
    sent.sort_unstable();
    assert_eq!(sent, [1, 3]);
    let dead = recorder.dead_lettered("orders");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "order 2 is refused");
}

#[tokio::test(start_paused = true)]
async fn a_message_that_does_not_decode_never_reaches_middleware() {
    for kind in KINDS {
        let broker = SqsBroker::in_process();
        let recorder = broker.recorder();
        let log = Log::default();
        let seen = Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        let count = from_fn(move |call: Call, next: Next| {
            counted.fetch_add(call.len(), Ordering::SeqCst);
            next.run(call)
        });
        let (subscriber, _calls) = mounted(kind, orders_queue("orders"), &log, Vec::new());
        let running = start(&broker, |b| {
            b.layer(count);
            b.include(subscriber);
        })
        .await;
        broker
            .publisher("orders")
            .raw("not an order")
            .send()
            .await
            .unwrap();
        send(&broker, "orders", &[(1, None)]).await;
        running.drain().await;
        running.stop().await.unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 1, "{kind:?}: only the order");
        assert_eq!(recorder.dead_lettered("orders").len(), 1, "{kind:?}");
    }
}

/// Panics on a message's first attempt.
async fn panic_first(call: Call, next: Next) -> Outcomes {
    if call.messages()[0].attempt() == 1 {
        panic!("the layer panics");
    }
    next.run(call).await
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_a_layer_retries_the_message_as_a_handlers_panic() {
    for kind in KINDS {
        let broker = SqsBroker::in_process();
        let recorder = broker.recorder();
        let log = Log::default();
        let (subscriber, calls) =
            mounted(kind, orders_queue("orders"), &log, vec![Layer::PanicFirst]);
        let running = start(&broker, |b| {
            b.include(subscriber);
        })
        .await;
        send(&broker, "orders", &[(1, None)]).await;
        running.drain().await;
        running.stop().await.unwrap();
        let settled: Vec<Settled> = recorder
            .handled("orders")
            .iter()
            .map(|handled| handled.settled)
            .collect();
        assert_eq!(settled, [Settled::Retried, Settled::Acked], "{kind:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{kind:?}");
    }
}
