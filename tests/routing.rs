//! Routing several message types on one queue (`rust_stream::routing`): three types to three
//! handlers, an unknown type and an untyped message dead-lettered with a reason (on both
//! backends); a filter taking what no type claims; the type header's name set at the broker; a
//! handler output routed on its own app's queue; FIFO order across the types of one group; the
//! type header counted in SQS's 10 attributes; and the settings refused at start, before any
//! call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::prelude::*;
use rust_stream::testing::{eventually, on_each_backend, TestApp};
use rust_stream::TYPE_HEADER;
use rust_stream::{
    ConfigError, Output, PublishError, RunError, State, Subscriber, DEAD_LETTER_REASON_HEADER,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct PaymentPosted {
    id: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct PaymentReversed {
    id: u64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct AccountClosed {
    account: String,
}

/// A type no subscriber of the queue takes.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct RefundIssued {
    id: u64,
}

/// What the handlers saw, in order: `"handler:what"`.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn push(&self, entry: String) {
        self.0.lock().unwrap().push(entry);
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    fn sorted(&self) -> Vec<String> {
        let mut all = self.all();
        all.sort();
        all
    }
}

#[subscriber("payments")]
async fn posted(payment: &PaymentPosted, State(seen): State<Seen>) {
    seen.push(format!("posted:{}", payment.id));
}

#[subscriber("payments")]
async fn reversed(payment: &PaymentReversed, State(seen): State<Seen>) {
    seen.push(format!("reversed:{}", payment.id));
}

#[subscriber("payments")]
async fn closed(account: &AccountClosed, State(seen): State<Seen>) {
    seen.push(format!("closed:{}", account.account));
}

/// Reads the dead-letter queue: the reason each message was moved with.
#[subscriber("payments-dlq")]
async fn dead_letters(_body: &serde_json::Value, ctx: &Context<'_>, State(seen): State<Seen>) {
    let reason = ctx.header(DEAD_LETTER_REASON_HEADER).unwrap_or("(none)");
    seen.push(format!("dead:{reason}"));
}

#[test]
fn three_types_on_one_queue_reach_three_handlers_and_what_none_takes_is_dead_lettered_with_a_reason(
) {
    on_each_backend(async |backend| {
        let broker = backend.broker().clone();
        let recorder = broker.recorder();
        let dead = SqsQueue::new(backend.queue_name("payments-dlq"))
            .create_if_missing()
            .wait(Duration::from_secs(1));
        let payments = SqsQueue::new(backend.queue_name("payments"))
            .create_if_missing()
            .wait(Duration::from_secs(1))
            .dead_letter(dead.name(), 3);
        let seen = Seen::default();
        let app = RustStream::new(AppInfo::new("ledger", "0"))
            .with_state(seen.clone())
            .with_broker(broker.clone(), |b| {
                b.include(posted.on(payments.clone()));
                b.include(reversed.on(payments.clone()));
                b.include(closed.on(payments.clone()));
                b.include(dead_letters.on(dead.clone()));
            });
        let running = TestApp::spawn(app).await.expect("the app starts");
        let publisher = broker.publisher(payments.clone());
        publisher
            .message(&PaymentPosted { id: 1 })
            .send()
            .await
            .unwrap();
        publisher
            .message(&PaymentReversed { id: 2 })
            .send()
            .await
            .unwrap();
        publisher
            .message(&AccountClosed {
                account: "ada".into(),
            })
            .send()
            .await
            .unwrap();
        publisher
            .message(&RefundIssued { id: 4 })
            .send()
            .await
            .unwrap();
        // Sent without a type: `raw` knows no Rust type.
        publisher.raw(r#"{"id":5}"#).send().await.unwrap();
        eventually("five messages handled or dead-lettered", async || {
            seen.all().len() == 5
        })
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        let unknown = format!(
            "no handler of queue `{}` takes this message: it carries type `RefundIssued` (its \
             `rust_stream.type` header), the queue routes `AccountClosed`, `PaymentPosted`, \
             `PaymentReversed`, and no subscriber's filter took it",
            payments.name()
        );
        let untyped = format!(
            "no handler of queue `{}` takes this message: it carries no `rust_stream.type` \
             header, the queue routes `AccountClosed`, `PaymentPosted`, `PaymentReversed`, and \
             no subscriber's filter took it",
            payments.name()
        );
        let mut expected = vec![
            "closed:ada".to_owned(),
            format!("dead:{unknown}"),
            format!("dead:{untyped}"),
            "posted:1".to_owned(),
            "reversed:2".to_owned(),
        ];
        expected.sort();
        assert_eq!(seen.sorted(), expected);
        let mut reasons: Vec<String> = recorder
            .dead_lettered(payments.name())
            .into_iter()
            .map(|dead| dead.reason)
            .collect();
        reasons.sort();
        let mut expected = vec![unknown, untyped];
        expected.sort();
        assert_eq!(reasons, expected, "dead-lettered at the first attempt");
    });
}

/// Takes messages that come from the ledger and name no routed type.
fn from_the_ledger(ctx: &Context<'_>) -> bool {
    ctx.header("source") == Some("ledger")
}

#[subscriber("payments", filter = from_the_ledger)]
async fn ledger_entries(entry: &serde_json::Value, State(seen): State<Seen>) {
    seen.push(format!("ledger:{entry}"));
}

#[subscriber("payments", filter = |_: &Context<'_>| true)]
async fn everything_else(entry: &serde_json::Value, State(seen): State<Seen>) {
    seen.push(format!("else:{entry}"));
}

#[tokio::test(start_paused = true)]
async fn filters_take_in_order_what_no_type_claims_and_a_type_goes_first() {
    let broker = SqsBroker::in_process();
    let seen = Seen::default();
    let payments = SqsQueue::new("payments").create_if_missing();
    let app = RustStream::new(AppInfo::new("ledger", "0"))
        .with_state(seen.clone())
        .with_broker(broker.clone(), |b| {
            b.include(posted.on(payments.clone()));
            b.include(ledger_entries.on(payments.clone()));
            b.include(everything_else.on(payments.clone()));
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let publisher = broker.publisher(payments.clone());
    // Typed and from the ledger: its type chooses.
    publisher
        .message(&PaymentPosted { id: 1 })
        .header("source", "ledger")
        .send()
        .await
        .unwrap();
    // Untyped, from the ledger: the first filter takes it.
    publisher
        .raw(r#"{"id":2}"#)
        .header("source", "ledger")
        .send()
        .await
        .unwrap();
    // A type no route has, from elsewhere: the catch-all takes it.
    publisher
        .message(&RefundIssued { id: 3 })
        .send()
        .await
        .unwrap();
    eventually("three handled", async || seen.all().len() == 3).await;
    running.drain().await;
    running.stop().await.unwrap();
    assert_eq!(
        seen.sorted(),
        [
            r#"else:{"id":3}"#.to_owned(),
            r#"ledger:{"id":2}"#.to_owned(),
            "posted:1".to_owned(),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_type_header_is_named_at_the_broker_for_publishers_and_routes_alike() {
    let account = rust_stream::account::Account::new();
    let broker = SqsBroker::with_account(&account).type_header("event_type");
    let seen = Seen::default();
    let payments = SqsQueue::new("payments").create_if_missing();
    let app = RustStream::new(AppInfo::new("ledger", "0"))
        .with_state(seen.clone())
        .with_broker(broker.clone(), |b| {
            b.include(posted.on(payments.clone()));
            b.include(reversed.on(payments.clone()));
        });
    // Another service's publisher, which knows the queue is routed but not by this app.
    let elsewhere = SqsBroker::with_account(&account).type_header("event_type");
    let sent = elsewhere
        .publisher(payments.clone())
        .with_type_header()
        .message(&PaymentReversed { id: 7 });
    let running = TestApp::spawn(app).await.expect("the app starts");
    sent.send().await.unwrap();
    broker
        .publisher(payments.clone())
        .message(&PaymentPosted { id: 8 })
        .send()
        .await
        .unwrap();
    // Set by hand, the header is kept: this one is read as a `PaymentReversed`.
    broker
        .publisher(payments.clone())
        .message(&PaymentPosted { id: 9 })
        .header("event_type", "PaymentReversed")
        .send()
        .await
        .unwrap();
    eventually("three handled", async || seen.all().len() == 3).await;
    running.drain().await;
    running.stop().await.unwrap();
    assert_eq!(seen.sorted(), ["posted:8", "reversed:7", "reversed:9"]);
}

#[subscriber("payments", outputs(reversals = "payments"))]
async fn reverse_large(
    payment: &PaymentPosted,
    reversals: &Output<PaymentReversed>,
    ctx: &mut Context<'_>,
    State(seen): State<Seen>,
) {
    seen.push(format!("posted:{}", payment.id));
    if payment.id > 100 {
        ctx.publish(reversals.message(&PaymentReversed { id: payment.id }));
    }
}

#[tokio::test(start_paused = true)]
async fn a_handlers_output_to_its_own_routed_queue_carries_its_type() {
    let broker = SqsBroker::in_process();
    let seen = Seen::default();
    let payments = SqsQueue::new("payments").create_if_missing();
    let app = RustStream::new(AppInfo::new("ledger", "0"))
        .with_state(seen.clone())
        .with_broker(broker.clone(), |b| {
            b.include(reverse_large.on(payments.clone()));
            b.include(reversed.on(payments.clone()));
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    broker
        .publisher(payments.clone())
        .message(&PaymentPosted { id: 500 })
        .send()
        .await
        .unwrap();
    eventually("posted and reversed", async || seen.all().len() == 2).await;
    running.drain().await;
    running.stop().await.unwrap();
    assert_eq!(seen.all(), ["posted:500", "reversed:500"]);
}

#[subscriber(SqsQueue::new("ledger.fifo").create_if_missing(), timeout = Duration::from_secs(5))]
async fn posted_in_order(payment: &PaymentPosted, State(seen): State<Seen>) {
    seen.push(format!("posted:{}", payment.id));
}

#[subscriber(SqsQueue::new("ledger.fifo").create_if_missing(), timeout = Duration::from_secs(5))]
async fn reversed_in_order(payment: &PaymentReversed, State(seen): State<Seen>) {
    seen.push(format!("reversed:{}", payment.id));
}

#[tokio::test(start_paused = true)]
async fn on_a_fifo_queue_a_groups_messages_of_several_types_keep_their_order() {
    let broker = SqsBroker::in_process();
    let seen = Seen::default();
    let app = RustStream::new(AppInfo::new("ledger", "0"))
        .with_state(seen.clone())
        .with_broker(broker.clone(), |b| {
            b.include(posted_in_order);
            b.include(reversed_in_order);
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let ledger = broker.publisher("ledger.fifo");
    let mut expected = Vec::new();
    let batch = (0..30).map(|id| {
        if id % 3 == 2 {
            expected.push(format!("reversed:{id}"));
            ledger
                .message(&PaymentReversed { id })
                .group_id("account-7")
        } else {
            expected.push(format!("posted:{id}"));
            ledger.message(&PaymentPosted { id }).group_id("account-7")
        }
    });
    let results = ledger.send_batch(batch).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    eventually("thirty handled", async || seen.all().len() == 30).await;
    running.drain().await;
    running.stop().await.unwrap();
    assert_eq!(seen.all(), expected);
}

#[tokio::test(start_paused = true)]
async fn the_type_header_counts_in_the_ten_attributes_and_is_refused_with_a_fix_when_it_has_no_room(
) {
    let account = rust_stream::account::Account::new();
    let broker = SqsBroker::with_account(&account);
    let payments = SqsQueue::new("payments").create_if_missing();
    let _app = RustStream::new(AppInfo::new("ledger", "0"))
        .with_state(Seen::default())
        .with_broker(broker.clone(), |b| {
            b.include(posted.on(payments.clone()));
            b.include(reversed.on(payments.clone()));
        });
    let publisher = broker.publisher(payments.clone());
    let with_headers = |count: usize| {
        (0..count).fold(publisher.message(&PaymentPosted { id: 1 }), |message, n| {
            message.header(format!("h{n}"), "x")
        })
    };
    let refused = with_headers(10).send().await.unwrap_err();
    assert!(
        matches!(&refused, PublishError::NoRoomForType { attributes: 10, header, .. } if header == TYPE_HEADER),
        "{refused:?}"
    );
    let text = refused.to_string();
    for expected in [
        "`payments`",
        "10 attributes",
        "`rust_stream.type`",
        "drop or merge one",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in: {text}");
    }
    assert_eq!(
        broker.api_calls(),
        Default::default(),
        "refused before any call"
    );
    with_headers(9).send().await.expect("9 and the type fit");
    with_headers(9)
        .header(TYPE_HEADER, "PaymentPosted")
        .send()
        .await
        .expect("10 with the type set by hand");
    // Raw messages, and queues nobody routes, are as before: no type header, 10 attributes.
    let raw = (0..10).fold(publisher.raw("{}"), |message, n| {
        message.header(format!("h{n}"), "x")
    });
    raw.send().await.expect("a raw message carries no type");
    let plain = broker.publisher(SqsQueue::new("plain").create_if_missing());
    let typed = (0..10).fold(plain.message(&PaymentPosted { id: 1 }), |message, n| {
        message.header(format!("h{n}"), "x")
    });
    typed
        .send()
        .await
        .expect("an unrouted queue takes no type header");
}

/// Starts an app of these subscribers and returns why it was refused.
async fn refused(broker: &SqsBroker, subscribers: Vec<Subscriber>) -> Vec<ConfigError> {
    let app = RustStream::new(AppInfo::new("ledger", "0"))
        .with_state(Seen::default())
        .with_broker(broker.clone(), |b| {
            for subscriber in subscribers {
                b.include(subscriber);
            }
        });
    let error = app.run_until(std::future::pending()).await.unwrap_err();
    let RunError::Config(problems) = error else {
        panic!("{error}")
    };
    assert_eq!(
        broker.api_calls(),
        Default::default(),
        "refused before any call"
    );
    problems.0
}

#[subscriber("payments")]
async fn posted_again(payment: &PaymentPosted) {
    let _ = payment;
}

#[subscriber("payments", outputs(reversals = "payments"))]
async fn reverse_as_refund(
    payment: &PaymentPosted,
    reversals: &Output<RefundIssued>,
    ctx: &mut Context<'_>,
) {
    ctx.publish(reversals.message(&RefundIssued { id: payment.id }));
}

#[tokio::test(start_paused = true)]
async fn routes_that_cannot_work_are_refused_at_start_naming_the_fix() {
    // Two handlers of one type: nothing chooses between them.
    let broker = SqsBroker::in_process();
    let problems = refused(&broker, vec![posted.into(), posted_again.into()]).await;
    assert!(
        matches!(&problems[..], [ConfigError::DuplicateSubscription { queue }] if queue == "payments"),
        "{problems:?}"
    );

    // One consumer reads a routed queue: its settings must agree.
    let broker = SqsBroker::in_process();
    let problems = refused(
        &broker,
        vec![
            posted.on(SqsQueue::new("payments").concurrency(4)),
            reversed.on(SqsQueue::new("payments").concurrency(8)),
        ],
    )
    .await;
    let [problem @ ConfigError::RouteSettings { setting, .. }] = &problems[..] else {
        panic!("{problems:?}")
    };
    assert_eq!(*setting, "concurrency");
    let text = problem.to_string();
    for expected in [
        "`payments`",
        "`posted`",
        "`reversed`",
        "concurrency",
        "the same settings",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in: {text}");
    }

    // An output whose type no route takes: each of its messages would be dead-lettered.
    let broker = SqsBroker::in_process();
    let problems = refused(&broker, vec![reverse_as_refund.into(), reversed.into()]).await;
    let [problem @ ConfigError::UnroutedOutput { type_name, .. }] = &problems[..] else {
        panic!("{problems:?}")
    };
    assert_eq!(type_name, "RefundIssued");
    let text = problem.to_string();
    for expected in [
        "`reverse_as_refund`",
        "`RefundIssued`",
        "`payments`",
        "`PaymentReversed`",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in: {text}");
    }

    // A type header SQS refuses as an attribute name.
    let broker = SqsBroker::in_process().type_header("AWS.type");
    let problems = refused(&broker, vec![posted.into(), reversed.into()]).await;
    let [problem @ ConfigError::TypeHeaderName { name, .. }] = &problems[..] else {
        panic!("{problems:?}")
    };
    assert_eq!(name, "AWS.type");
    assert!(problem.to_string().contains("reserves"), "{problem}");
}

/// A filter that panics on its first call.
fn panics_once(_: &Context<'_>) -> bool {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    if CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
        panic!("a filter's bug");
    }
    true
}

#[subscriber("payments", filter = panics_once)]
async fn after_a_panic(entry: &serde_json::Value, State(seen): State<Seen>) {
    seen.push(format!("taken:{entry}"));
}

#[tokio::test(start_paused = true)]
async fn a_filter_that_panics_is_a_handler_that_panics_and_its_message_is_retried() {
    let broker = SqsBroker::in_process();
    let seen = Seen::default();
    let payments = SqsQueue::new("payments")
        .create_if_missing()
        .retry(rust_stream::RetryPolicy::fixed(Duration::from_secs(1)));
    let app = RustStream::new(AppInfo::new("ledger", "0"))
        .with_state(seen.clone())
        .with_broker(broker.clone(), |b| {
            b.include(posted.on(payments.clone()));
            b.include(after_a_panic.on(payments.clone()));
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    broker
        .publisher(payments.clone())
        .raw(r#"{"id":1}"#)
        .send()
        .await
        .unwrap();
    eventually("taken at the second attempt", async || {
        seen.all().len() == 1
    })
    .await;
    running.drain().await;
    running.stop().await.unwrap();
    assert_eq!(seen.all(), [r#"taken:{"id":1}"#]);
}
