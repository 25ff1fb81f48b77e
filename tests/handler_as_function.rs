//! Handlers tested as functions, without a broker or a queue: a `#[subscriber]` called through
//! its `call`, or through the `Handle` impl the engine uses, and a `Handle` written by hand, each
//! with a context from `TestContext`; what they publish is read back from the context.

use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use rust_stream::prelude::*;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::store::{Claim, ClaimSettings, InboxKey, InboxStore};
use rust_stream::testing::{hold_the_clock, take_transaction, TestContext};
use rust_stream::{Output, State, PARTITION_KEY_HEADER};
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
    attempt: u32,
}

/// Shared state: the ledger's name.
#[derive(Clone)]
struct Ledger(&'static str);

fn order(id: u64) -> Order {
    Order {
        id,
        customer: "ada".into(),
    }
}

fn decoded<T: for<'de> Deserialize<'de>>(body: Result<&str, &rust_stream::EncodeError>) -> T {
    serde_json::from_str(body.expect("an encoded body")).expect("a JSON body")
}

/// Books an order: a receipt to the customer's FIFO group, an audit line; gives up on the
/// fourth attempt.
#[subscriber(
    "orders",
    outputs(receipts = "receipts.fifo", audit = "audit"),
    dead_letter("orders-dlq", 5)
)]
async fn book(
    order: &Order,
    State(ledger): State<Ledger>,
    receipts: &Output<Receipt>,
    audit: &Output<Audit>,
    ctx: &mut Context<'_>,
) -> HandlerOutcome {
    if ctx.sqs().receive_count() > 3 {
        return HandlerOutcome::dead_letter(format!("order {} failed 3 times", order.id));
    }
    let receipt = Receipt {
        order: order.id,
        ledger: ledger.0.to_owned(),
    };
    ctx.publish(receipts.message(&receipt).group_id(order.customer.clone()));
    let attempt = ctx.sqs().receive_count();
    ctx.publish(audit.message(&Audit {
        order: order.id,
        attempt,
    }));
    HandlerOutcome::ack()
}

#[tokio::test]
async fn a_subscriber_called_as_a_function_returns_its_outcome_and_its_publishes_are_read_back() {
    let receipts = Output::new("receipts.fifo");
    let audit = Output::new("audit");
    let mut ctx = TestContext::new()
        .message_id("m-1")
        .receive_count(2)
        .build();

    let outcome = book::call(
        &order(7),
        State(Ledger("main")),
        &receipts,
        &audit,
        &mut ctx,
    )
    .await;

    assert_eq!(outcome, HandlerOutcome::ack());
    let published = ctx.published();
    assert_eq!(published.len(), 2);

    let receipt = published[0];
    assert_eq!(receipt.destination().name(), "receipts.fifo");
    assert_eq!(
        decoded::<Receipt>(receipt.body()),
        Receipt {
            order: 7,
            ledger: "main".into()
        }
    );
    assert_eq!(receipt.group_id(), Some("ada"));
    // The input's message id, the position and a digest of the content: a retried handler's
    // same publish is deduplicated, a different one is not taken for it.
    assert!(receipt.dedup_id().unwrap().starts_with("m-1-0-"));

    let line = published[1];
    assert_eq!(line.destination().name(), "audit");
    assert_eq!(
        decoded::<Audit>(line.body()),
        Audit {
            order: 7,
            attempt: 2
        }
    );
    assert_eq!(line.group_id(), None);
    assert_eq!(line.dedup_id(), None);
}

#[tokio::test]
async fn a_subscriber_called_as_a_function_returns_what_it_decides_and_publishes_nothing_then() {
    let receipts = Output::new("receipts.fifo");
    let audit = Output::new("audit");
    let mut ctx = TestContext::new().receive_count(4).build();

    let outcome = book::call(
        &order(8),
        State(Ledger("main")),
        &receipts,
        &audit,
        &mut ctx,
    )
    .await;

    assert_eq!(
        outcome,
        HandlerOutcome::dead_letter("order 8 failed 3 times")
    );
    assert!(ctx.published().is_empty());
}

#[tokio::test]
async fn a_subscriber_called_through_handle_reads_its_state_from_the_test_context() {
    let outputs = (Output::new("receipts.fifo"), Output::new("audit"));
    let mut ctx = TestContext::new().state(Ledger("side")).build();

    let settled = book.handle(&order(9), &outputs, &mut ctx).await;

    assert_eq!(settled, Ok(()), "ack is `Ok(())` to the engine");
    let published = ctx.published();
    assert_eq!(published.len(), 2);
    assert_eq!(
        decoded::<Receipt>(published[0].body()),
        Receipt {
            order: 9,
            ledger: "side".into()
        }
    );
}

#[tokio::test]
async fn a_subscriber_called_through_handle_without_its_state_is_retried_after_a_minute() {
    let outputs = (Output::new("receipts.fifo"), Output::new("audit"));
    let mut ctx = TestContext::new().build();

    let settled = book.handle(&order(10), &outputs, &mut ctx).await;

    assert_eq!(
        settled,
        Err(HandlerOutcome::retry_after(Duration::from_secs(60)))
    );
    assert!(ctx.published().is_empty());
}

/// The same kind of handler written by hand: reads the group, a header and the state from the
/// context, publishes to its one output.
struct Ship;

impl Handle<Order, Output<Receipt>> for Ship {
    async fn handle(
        &self,
        order: &Order,
        receipts: &Output<Receipt>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let Some(State(ledger)) = ctx.state::<Ledger>() else {
            return Err(HandlerOutcome::retry());
        };
        if ctx.header("paid") != Some("yes") {
            return Err(HandlerOutcome::retry_after(Duration::from_secs(30)));
        }
        let message = receipts
            .message(&Receipt {
                order: order.id,
                ledger: ledger.0.to_owned(),
            })
            .header(PARTITION_KEY_HEADER, ctx.sqs().group_id().unwrap_or("none"));
        ctx.publish(message);
        Ok(())
    }
}

#[tokio::test]
async fn a_handle_written_by_hand_is_called_with_a_test_context() {
    let receipts = Output::new("receipts.fifo");
    let mut ctx = TestContext::new()
        .message_id("m-2")
        .queue("orders.fifo")
        .group_id("customer-7")
        .header("paid", "yes")
        .state(Ledger("main"))
        .build();

    let settled = Ship.handle(&order(11), &receipts, &mut ctx).await;

    assert_eq!(settled, Ok(()));
    let published = ctx.published();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].destination().name(), "receipts.fifo");
    // No `group_id` step: a FIFO message takes its group from the partition-key header.
    assert_eq!(published[0].group_id(), Some("customer-7"));
    assert_eq!(
        published[0].header(PARTITION_KEY_HEADER),
        Some("customer-7")
    );
    assert!(published[0].dedup_id().unwrap().starts_with("m-2-0-"));

    let mut unpaid = TestContext::new().state(Ledger("main")).build();
    let settled = Ship.handle(&order(12), &receipts, &mut unpaid).await;
    assert_eq!(
        settled,
        Err(HandlerOutcome::retry_after(Duration::from_secs(30)))
    );
    assert!(unpaid.published().is_empty());
}

/// Instrumented: the span is the function's, whichever way it is called.
#[subscriber("pings")]
#[tracing::instrument(skip_all)]
async fn answer(_ping: &Order) {
    tracing::info!("answered");
}

/// Records the name of every span opened.
#[derive(Clone, Default)]
struct SpanNames(Arc<Mutex<Vec<&'static str>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanNames {
    fn on_new_span(
        &self,
        attributes: &tracing::span::Attributes<'_>,
        _id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut names = self.0.lock().expect("span names");
        names.push(attributes.metadata().name());
    }
}

#[tokio::test]
async fn an_instrumented_subscriber_names_its_span_after_the_function_not_after_call() {
    use tracing_subscriber::layer::SubscriberExt;

    let names = SpanNames::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(names.clone()));

    answer::call(&order(13)).await;
    let mut ctx = TestContext::new().build();
    answer.handle(&order(14), &(), &mut ctx).await.expect("ack");

    assert_eq!(*names.0.lock().expect("span names"), ["answer", "answer"]);
}

#[tokio::test]
async fn derived_dedup_ids_change_with_what_is_published_and_repeat_with_it() {
    let receipts = Output::<serde_json::Value>::new("receipts.fifo");
    let id_of = |body: serde_json::Value| {
        let receipts = receipts.clone();
        async move {
            let mut ctx = TestContext::new().message_id("m-9").build();
            ctx.publish(receipts.message(&body).group_id("g"));
            ctx.published()[0].dedup_id().unwrap().to_owned()
        }
    };
    let first = id_of(serde_json::json!({"amount": 1})).await;
    assert_eq!(
        first,
        id_of(serde_json::json!({"amount": 1})).await,
        "same content, same id"
    );
    assert_ne!(
        first,
        id_of(serde_json::json!({"amount": 2})).await,
        "other content, other id"
    );
    assert!(first.starts_with("m-9-0-"), "{first}");
}

/// A payment posted to a SQLite `ledger` table in the inbox's transaction (issue 41, N13).
#[derive(Deserialize)]
struct Payment {
    id: String,
    cents: i64,
}

struct PostPayment;

impl Handle<Payment> for PostPayment {
    async fn handle(
        &self,
        payment: &Payment,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if payment.cents <= 0 {
            return Err(HandlerOutcome::dead_letter("nothing to post"));
        }
        let mut transaction = ctx
            .transaction::<SqliteStore>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        sqlx::query("INSERT INTO ledger (id, cents) VALUES ($1, $2)")
            .bind(&payment.id)
            .bind(payment.cents)
            .execute(&mut **transaction)
            .await
            .map_err(HandlerOutcome::failed)?;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn an_inbox_handler_is_called_as_a_function_with_a_transaction_of_its_store() {
    let file = common::stores::TempFile::new("handler_as_function", "inbox");
    let store = SqliteStore::open(&file.0).await.expect("the store opens");
    hold_the_clock(
        sqlx::query("CREATE TABLE ledger (id TEXT PRIMARY KEY, cents INTEGER NOT NULL)")
            .execute(store.pool()),
    )
    .await
    .unwrap();
    let key = InboxKey::new("payments", "pay-1");
    let settings = ClaimSettings {
        wait: Duration::from_secs(5),
        lease: Duration::from_secs(60),
        retention: Duration::from_secs(3600),
    };
    let count = async || -> i64 {
        hold_the_clock(sqlx::query_scalar("SELECT count(*) FROM ledger").fetch_one(store.pool()))
            .await
            .unwrap()
    };

    // The happy path: the write is in the transaction, and committed with the key.
    let Claim::Claimed(transaction) = store.claim(&key, settings).await.unwrap() else {
        panic!("a new key is claimed");
    };
    let mut ctx = TestContext::new()
        .transaction::<SqliteStore>(transaction)
        .build();
    let payment = Payment {
        id: "pay-1".to_owned(),
        cents: 120,
    };
    assert_eq!(PostPayment.handle(&payment, &(), &mut ctx).await, Ok(()));
    let mut transaction = take_transaction::<SqliteStore>(&ctx).expect("the transaction back");
    let written: (String, i64) = sqlx::query_as("SELECT id, cents FROM ledger")
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    assert_eq!(
        written,
        ("pay-1".to_owned(), 120),
        "read in the transaction"
    );
    assert!(
        take_transaction::<SqliteStore>(&ctx).is_none(),
        "taken once"
    );
    store.complete(transaction, &key, None).await.unwrap();
    assert_eq!(count().await, 1);
    assert!(matches!(
        store.claim(&key, settings).await.unwrap(),
        Claim::Completed(None)
    ));

    // A payment the handler refuses writes nothing; a context without a transaction says why.
    let key = InboxKey::new("payments", "pay-0");
    let Claim::Claimed(transaction) = store.claim(&key, settings).await.unwrap() else {
        panic!("a new key is claimed");
    };
    let mut ctx = TestContext::new()
        .transaction::<SqliteStore>(transaction)
        .build();
    let refused = Payment {
        id: "pay-0".to_owned(),
        cents: 0,
    };
    assert_eq!(
        PostPayment.handle(&refused, &(), &mut ctx).await,
        Err(HandlerOutcome::dead_letter("nothing to post"))
    );
    drop(take_transaction::<SqliteStore>(&ctx));
    assert_eq!(count().await, 1);
    let mut bare = TestContext::new().build();
    let error = PostPayment
        .handle(&payment, &(), &mut bare)
        .await
        .unwrap_err();
    assert!(
        format!("{error:?}").contains("has no inbox transaction"),
        "{error:?}"
    );
}
