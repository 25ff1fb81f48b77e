//! `#[subscriber]` functions running on the in-process broker: state, outputs and the context
//! reach the body; each return type settles as it says; the attribute's settings and the state a
//! subscriber reads take effect when the app starts.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::{ReceiveMessage, ReceivedMessage};
use rust_stream::{ConfigError, Output, RunError, State, Subscriber, DEAD_LETTER_REASON_HEADER};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u64,
    customer: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Receipt {
    order: u64,
    ledger: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Audit {
    order: u64,
    message_id: String,
}

/// Shared state: the ledger's name.
#[derive(Clone)]
struct Ledger(&'static str);

/// Shared state: how many times a handler ran.
#[derive(Clone, Default)]
struct Calls(Arc<AtomicU32>);

impl Calls {
    fn count(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

fn queue(name: &str) -> SqsQueue {
    SqsQueue::new(name).create_if_missing()
}

async fn place(broker: &SqsBroker, queue_name: &str, id: u64) {
    broker
        .publisher(queue(queue_name))
        .message(&Order {
            id,
            customer: "ada".into(),
        })
        .send()
        .await
        .expect("place an order");
}

/// Waits (in tokio time) until the queue `name` exists and holds nothing.
async fn emptied(account: &Account, name: &str) {
    for _ in 0..60_000 {
        if let Ok(url) = account.get_queue_url(name).await {
            let counts = account.counts(&url).await.expect("counts");
            if counts.visible + counts.in_flight + counts.delayed == 0 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("queue {name} never emptied");
}

async fn receive(account: &Account, name: &str) -> Vec<ReceivedMessage> {
    let url = account.get_queue_url(name).await.expect("queue exists");
    account
        .receive_message(&url, ReceiveMessage::new(10).wait_time_seconds(20))
        .await
        .expect("receive")
}

fn body<T: for<'de> Deserialize<'de>>(message: &ReceivedMessage) -> T {
    serde_json::from_str(&message.body).expect("a JSON body")
}

/// Books an order in the ledger: a receipt for the customer, an audit line for the books.
#[subscriber(
    queue("orders"),
    outputs(receipts = queue("receipts"), audit = queue("audit")),
)]
async fn book(
    order: &Order,
    audit: &Output<Audit>,
    State(ledger): State<Ledger>,
    ctx: &mut Context<'_>,
    receipts: &Output<Receipt>,
) {
    let message_id = ctx.message_id().to_owned();
    ctx.publish(receipts.message(&Receipt {
        order: order.id,
        ledger: ledger.0.to_owned(),
    }));
    ctx.publish(audit.message(&Audit {
        order: order.id,
        message_id,
    }));
}

#[tokio::test(start_paused = true)]
async fn state_outputs_and_the_context_reach_the_body_and_outputs_are_sent_before_the_ack() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let app = RustStream::new(AppInfo::new("books", "0.1.0"))
        .with_state(Ledger("main"))
        .with_broker(broker.clone(), |b| {
            b.include(book);
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    place(&broker, "orders", 7).await;
    emptied(&account, "orders").await;
    running.stop().await.expect("the app ran");

    let receipts = receive(&account, "receipts").await;
    assert_eq!(receipts.len(), 1);
    assert_eq!(
        body::<Receipt>(&receipts[0]),
        Receipt {
            order: 7,
            ledger: "main".into()
        }
    );
    let audit = receive(&account, "audit").await;
    assert_eq!(audit.len(), 1);
    let line: Audit = body(&audit[0]);
    assert_eq!(line.order, 7);
    assert!(!line.message_id.is_empty());
}

/// Fails its first two tries with its own error, then succeeds.
#[subscriber(queue("flaky"))]
async fn flaky(_order: &Order, ctx: &Context<'_>, calls: State<Calls>) -> Result<(), String> {
    calls.0 .0.fetch_add(1, Ordering::SeqCst);
    if ctx.sqs().receive_count() < 3 {
        return Err(format!("try {} failed", ctx.sqs().receive_count()));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_err_of_the_handlers_own_error_retries_the_message_until_it_succeeds() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let calls = Calls::default();
    let app = RustStream::new(AppInfo::new("flaky", "0.1.0"))
        .with_state(calls.clone())
        .with_broker(broker.clone(), |b| {
            b.include(flaky);
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    place(&broker, "flaky", 1).await;
    emptied(&account, "flaky").await;
    running.stop().await.expect("the app ran");
    assert_eq!(calls.count(), 3, "two failures, then the ack");
}

/// Refuses every payment.
#[subscriber(queue("payments"), dead_letter("payments-dlq", 5), batch_size = 1)]
async fn refuse(order: &Order) -> Result<(), HandlerOutcome> {
    Err(HandlerOutcome::dead_letter(format!(
        "order {} refused",
        order.id
    )))
}

#[tokio::test(start_paused = true)]
async fn the_attributes_dead_letter_queue_receives_what_the_handler_dead_letters() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(broker.clone(), |b| {
        b.include(refuse);
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    place(&broker, "payments", 9).await;
    emptied(&account, "payments").await;
    running.stop().await.expect("the app ran");

    let dead = receive(&account, "payments-dlq").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(body::<Order>(&dead[0]).id, 9);
    let reason = dead[0].message_attributes[DEAD_LETTER_REASON_HEADER]
        .string_value
        .clone();
    assert_eq!(reason.as_deref(), Some("order 9 refused"));
}

/// Acknowledges by returning `HandlerOutcome::ack()`, or retries once by returning `retry()`.
#[subscriber(queue("outcomes"))]
async fn once_more(
    _order: &Order,
    ctx: &Context<'_>,
    State(calls): State<Calls>,
) -> HandlerOutcome {
    calls.0.fetch_add(1, Ordering::SeqCst);
    if ctx.sqs().receive_count() == 1 {
        HandlerOutcome::retry()
    } else {
        HandlerOutcome::ack()
    }
}

#[tokio::test(start_paused = true)]
async fn a_returned_handler_outcome_settles_the_message_as_it_says() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let calls = Calls::default();
    let app = RustStream::new(AppInfo::new("outcomes", "0.1.0"))
        .with_state(calls.clone())
        .with_broker(broker.clone(), |b| {
            b.include(once_more);
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    place(&broker, "outcomes", 2).await;
    emptied(&account, "outcomes").await;
    running.stop().await.expect("the app ran");
    assert_eq!(calls.count(), 2, "a retry, then the ack");
}

#[tokio::test(start_paused = true)]
async fn an_app_without_the_state_a_subscriber_reads_refuses_to_start() {
    let app =
        RustStream::new(AppInfo::new("books", "0.1.0")).with_broker(SqsBroker::in_process(), |b| {
            b.include(book);
        });
    let error = app
        .run_until(std::future::pending())
        .await
        .expect_err("the ledger is missing");
    let RunError::Config(problems) = &error else {
        panic!("a setting problem, not {error}");
    };
    assert!(
        problems.0.iter().any(|problem| matches!(
            problem,
            ConfigError::MissingState { type_name, .. } if type_name.ends_with("Ledger")
        )),
        "{error}"
    );
}

#[test]
fn the_doc_comment_is_the_description_and_the_attribute_sets_the_queue() {
    let built = Subscriber::from(refuse);
    assert_eq!(built.description(), Some("Refuses every payment."));
    assert_eq!(built.queue().name(), "payments");
    assert!(built.message_type().ends_with("Order"));
}
