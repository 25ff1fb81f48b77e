//! The inbox (issue 23, item 2) on both backends, with the in-process store: the in-process
//! account on a paused clock, then LocalStack. The database stores keep the same contract
//! (`tests/inbox_store.rs`); these tests produce the failures the inbox exists for:
//!
//! - a handler that fails after claiming is retried and then posts once (the failure mode of a
//!   deduplicator that marks a message before handling it: its retry would be acked unhandled);
//! - copies of one payment (three sends, one business key) post once, and each copy sends the
//!   recorded output again with its original deduplication id, so the FIFO output queue stores it
//!   once;
//! - a delete that fails after the commit (a consumer stopped between its commit and its delete):
//!   the redelivery is acked without running, its output re-sent and stored once;
//! - two consumers racing one key: one runs, the other waits for it and acks without running;
//! - in process only (its clock passes five minutes at once): a copy sent after SQS's
//!   deduplication window is still acked without running; one after the inbox's retention runs;
//! - a `#[subscriber(.., idempotent = ..)]` function: copies of one payment post once.
//!
//! A batch handler with an inbox is refused at start: `tests/bad_input.rs`, row 152.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rust_stream::aws::AwsTransport;
use rust_stream::inbox::{Inbox, Key, TransactionError};
use rust_stream::prelude::*;
use rust_stream::record::Recorder;
use rust_stream::store::memory::MemoryStore;
use rust_stream::testing::{eventually, on_each_backend, Backend, Settled, TestApp};
use rust_stream::transport::layer::{Hooked, Hooks};
use rust_stream::transport::{
    BatchResult, DeleteEntry, ReceiveMessage, ReceivedMessage, Transport, TransportError,
};
use rust_stream::{Output, RetryPolicy, State, Subscriber};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Payment {
    id: String,
    account: String,
    cents: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Posted {
    id: String,
    cents: i64,
}

fn payment(id: &str) -> Payment {
    Payment {
        id: id.to_owned(),
        account: "account-1".to_owned(),
        cents: 1250,
    }
}

/// The ledger the handler posts to, in the inbox's transaction: payment ids, in commit order.
type Ledger = Arc<Mutex<Vec<String>>>;

/// Posts each payment in the inbox's transaction and publishes `Posted`; fails its first attempt
/// after posting when `fail_first`, and holds the transaction for `hold` before returning.
#[derive(Clone)]
struct Post {
    ledger: Ledger,
    runs: Arc<AtomicU32>,
    fail_first: bool,
    hold: Duration,
}

impl Post {
    fn new() -> Self {
        Self {
            ledger: Ledger::default(),
            runs: Arc::default(),
            fail_first: false,
            hold: Duration::ZERO,
        }
    }

    fn posted(&self) -> Vec<String> {
        self.ledger.lock().unwrap().clone()
    }

    fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }
}

impl Handle<Payment, Output<Posted>> for Post {
    async fn handle(
        &self,
        payment: &Payment,
        posted: &Output<Posted>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let mut transaction = ctx
            .transaction::<MemoryStore>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        let (ledger, id) = (self.ledger.clone(), payment.id.clone());
        transaction.on_commit(move || ledger.lock().unwrap().push(id));
        if !self.hold.is_zero() {
            tokio::time::sleep(self.hold).await;
        }
        drop(transaction);
        ctx.publish(posted.message(&Posted {
            id: payment.id.clone(),
            cents: payment.cents,
        }));
        if self.fail_first && ctx.attempt() == 1 {
            return Err(HandlerOutcome::failed(
                "the bank timed out after the posting",
            ));
        }
        Ok(())
    }
}

/// The payments queue (FIFO or not) and the FIFO queue `Posted` goes to.
fn queues(backend: &Backend, fifo: bool) -> (SqsQueue, SqsQueue) {
    let name = if fifo { "payments.fifo" } else { "payments" };
    let payments = SqsQueue::new(backend.queue_name(name))
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(5))
        .retry(RetryPolicy::fixed(Duration::from_secs(1)))
        .timeout(Duration::from_secs(20))
        .dead_letter(
            backend.queue_name(if fifo {
                "payments-dlq.fifo"
            } else {
                "payments-dlq"
            }),
            5,
        );
    let posted = SqsQueue::new(backend.queue_name("posted.fifo")).create_if_missing();
    (payments, posted)
}

fn mounted(payments: &SqsQueue, posted: &SqsQueue, post: &Post, store: &MemoryStore) -> Subscriber {
    subscriber(payments.clone(), post.clone())
        .outputs(Output::<Posted>::new(posted.clone()))
        .idempotent(Inbox::new(store.clone()).key(Key::json_pointer("/id")))
        .build()
}

async fn start(broker: SqsBroker, subscriber: Subscriber) -> TestApp {
    let app = RustStream::new(AppInfo::new("inbox", "0")).with_broker(broker, |b| {
        b.include(subscriber);
    });
    TestApp::spawn(app).await.expect("the app starts")
}

/// Sends `payment` `copies` times, each a distinct send (on FIFO, its own deduplication id).
async fn send_copies(broker: &SqsBroker, queue: &SqsQueue, payment: &Payment, copies: u32) {
    let publisher = broker.publisher(queue.clone());
    for copy in 0..copies {
        let mut message = publisher.message(payment);
        if queue.is_fifo() {
            message = message
                .group_id(&payment.account)
                .dedup_id(format!("{}-copy-{copy}", payment.id));
        }
        message.send().await.expect("send");
    }
}

fn settled(recorder: &Recorder, queue: &SqsQueue) -> Vec<Settled> {
    recorder
        .handled(queue.name())
        .iter()
        .map(|handled| handled.settled)
        .collect()
}

#[test]
fn a_handler_that_fails_after_claiming_is_retried_and_then_posts_once() {
    on_each_backend(async |backend| {
        let (payments, posted) = queues(&backend, true);
        let post = Post {
            fail_first: true,
            ..Post::new()
        };
        let recorder = backend.broker().recorder();
        let running = start(
            backend.broker().clone(),
            mounted(&payments, &posted, &post, &MemoryStore::new()),
        )
        .await;
        send_copies(backend.broker(), &payments, &payment("pay-1"), 1).await;
        running.drain().await;
        running.stop().await.unwrap();

        // The first attempt posted in its transaction and failed: rolled back, never marked, so
        // the retry ran the handler again and its posting is the only one.
        assert_eq!(post.runs(), 2);
        assert_eq!(post.posted(), ["pay-1"]);
        assert_eq!(
            settled(&recorder, &payments),
            [Settled::Retried, Settled::Acked]
        );
        assert_eq!(common::held_by(&backend, posted.name()).await.len(), 1);
    });
}

#[test]
fn copies_of_one_payment_post_once_and_send_the_recorded_output_again() {
    on_each_backend(async |backend| {
        let (payments, posted) = queues(&backend, true);
        let post = Post::new();
        let store = MemoryStore::new();
        let recorder = backend.broker().recorder();
        let running = start(
            backend.broker().clone(),
            mounted(&payments, &posted, &post, &store),
        )
        .await;
        send_copies(backend.broker(), &payments, &payment("pay-2"), 3).await;
        running.drain().await;
        running.stop().await.unwrap();

        assert_eq!(post.runs(), 1, "the handler ran for one copy only");
        assert_eq!(post.posted(), ["pay-2"]);
        assert_eq!(
            recorder
                .handled(payments.name())
                .iter()
                .filter(|handled| handled.settled == Settled::Acked)
                .count(),
            3,
            "every copy is acked"
        );
        // Each copy sent the recorded output again with its deduplication id: stored once.
        let outputs = common::held_by(&backend, posted.name()).await;
        assert_eq!(outputs.len(), 1, "{outputs:?}");
        assert_eq!(
            serde_json::from_str::<Posted>(&outputs[0].body).unwrap(),
            Posted {
                id: "pay-2".into(),
                cents: 1250
            }
        );
        assert_eq!(store.completed(), 1);
    });
}

/// Fails the first `DeleteMessageBatch` to the queue it is given: a consumer stopped after its
/// commit, before its delete.
#[derive(Clone, Default)]
struct FirstDeleteFails {
    failed: Arc<AtomicU32>,
    /// Messages received from the payments queue.
    received: Arc<AtomicU32>,
}

impl Hooks for FirstDeleteFails {
    async fn receive_message(
        &self,
        inner: &impl Transport,
        url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let received = inner.receive_message(url, request).await?;
        if url.contains("payments") {
            self.received
                .fetch_add(received.len() as u32, Ordering::SeqCst);
        }
        Ok(received)
    }

    async fn delete_message_batch(
        &self,
        inner: &impl Transport,
        url: &str,
        entries: Vec<DeleteEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        if url.contains("payments") && self.failed.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(TransportError::Other {
                code: "ServiceUnavailable".into(),
                message: "the consumer stopped before its delete".into(),
            });
        }
        inner.delete_message_batch(url, entries).await
    }
}

#[test]
fn a_delete_that_fails_after_the_commit_is_redelivered_and_acked_without_running() {
    on_each_backend(async |backend| {
        let (payments, posted) = queues(&backend, true);
        let post = Post::new();
        let hooks = FirstDeleteFails::default();
        let broker = match (backend.account(), backend.endpoint()) {
            (Some(account), _) => {
                SqsBroker::with_transport(Hooked::new(account.clone(), hooks.clone()))
            }
            (None, Some(endpoint)) => SqsBroker::with_transport(Hooked::new(
                AwsTransport::local(endpoint, "us-east-1"),
                hooks.clone(),
            )),
            (None, None) => unreachable!("a backend is in process or live"),
        };
        let recorder = broker.recorder();
        let running = start(
            broker.clone(),
            mounted(&payments, &posted, &post, &MemoryStore::new()),
        )
        .await;
        send_copies(&broker, &payments, &payment("pay-3"), 1).await;
        // The delete fails, so the message comes back after its visibility timeout; it counts as
        // acked once, when a delete succeeded.
        eventually("the message is received again and acked", async || {
            hooks.received.load(Ordering::SeqCst) >= 2 && !settled(&recorder, &payments).is_empty()
        })
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        assert!(
            hooks.failed.load(Ordering::SeqCst) >= 2,
            "the delete failed, then was made again"
        );
        assert_eq!(
            hooks.received.load(Ordering::SeqCst),
            2,
            "received again once"
        );
        assert_eq!(settled(&recorder, &payments), [Settled::Acked]);
        assert_eq!(post.runs(), 1, "the redelivery did not run the handler");
        assert_eq!(post.posted(), ["pay-3"]);
        assert_eq!(common::held_by(&backend, posted.name()).await.len(), 1);
    });
}

#[test]
fn two_consumers_racing_one_key_run_it_once() {
    on_each_backend(async |backend| {
        let (payments, posted) = queues(&backend, false);
        // The first to claim holds the key for 2 s; the other waits (up to 5 s) for its commit.
        let post = Post {
            hold: Duration::from_secs(2),
            ..Post::new()
        };
        let store = MemoryStore::new();
        let second_broker = match (backend.account(), backend.endpoint()) {
            (Some(account), _) => SqsBroker::with_account(account),
            (None, Some(endpoint)) => {
                SqsBroker::with_transport(AwsTransport::local(endpoint, "us-east-1"))
            }
            (None, None) => unreachable!("a backend is in process or live"),
        };
        let (first_recorder, second_recorder) =
            (backend.broker().recorder(), second_broker.recorder());
        let first = start(
            backend.broker().clone(),
            mounted(&payments, &posted, &post, &store),
        )
        .await;
        let second = start(
            second_broker.clone(),
            mounted(&payments, &posted, &post, &store),
        )
        .await;
        send_copies(backend.broker(), &payments, &payment("pay-4"), 2).await;
        eventually("both copies are settled", async || {
            first_recorder.handled(payments.name()).len()
                + second_recorder.handled(payments.name()).len()
                == 2
        })
        .await;
        first.drain().await;
        second.drain().await;
        first.stop().await.unwrap();
        second.stop().await.unwrap();

        assert_eq!(post.runs(), 1, "one copy ran, the other found it done");
        assert_eq!(post.posted(), ["pay-4"]);
        let acked = first_recorder
            .handled(payments.name())
            .into_iter()
            .chain(second_recorder.handled(payments.name()))
            .filter(|handled| handled.settled == Settled::Acked)
            .count();
        assert_eq!(acked, 2);
    });
}

/// In process only: its clock passes SQS's five-minute deduplication window, and the inbox's
/// retention, at once. `Key::DeduplicationId` is the explicit choice to merge sends with one
/// deduplication id for the whole retention.
#[tokio::test(start_paused = true)]
async fn keyed_by_the_dedup_id_a_send_past_the_window_is_acked_without_running_and_past_the_retention_it_runs(
) {
    let account = rust_stream::account::Account::new();
    let broker = SqsBroker::with_account(&account);
    let payments = SqsQueue::new("payments.fifo")
        .create_if_missing()
        .timeout(Duration::from_secs(20));
    let posted = SqsQueue::new("posted.fifo").create_if_missing();
    let post = Post::new();
    let store = MemoryStore::new();
    let recorder = broker.recorder();
    let running = start(
        broker.clone(),
        subscriber(payments.clone(), post.clone())
            .outputs(Output::<Posted>::new(posted.clone()))
            .idempotent(
                Inbox::new(store.clone())
                    .key(Key::DeduplicationId)
                    .retention(Duration::from_secs(3600)),
            )
            .build(),
    )
    .await;
    let send_with_one_dedup_id = || async {
        broker
            .publisher(payments.clone())
            .message(&payment("pay-5"))
            .group_id("account-1")
            .dedup_id("pay-5")
            .send()
            .await
            .expect("send")
    };
    send_with_one_dedup_id().await;
    running.drain().await;
    // Past SQS's window the same send is stored again; the inbox, keyed by the deduplication
    // id, still knows it.
    tokio::time::advance(Duration::from_secs(6 * 60)).await;
    send_with_one_dedup_id().await;
    running.drain().await;
    assert_eq!(post.runs(), 1);
    assert_eq!(post.posted(), ["pay-5"]);
    // Past the inbox's retention it is a new message to the inbox too.
    tokio::time::advance(Duration::from_secs(3600)).await;
    send_with_one_dedup_id().await;
    running.drain().await;
    running.stop().await.unwrap();
    assert_eq!(post.runs(), 2);
    assert_eq!(post.posted(), ["pay-5", "pay-5"]);
    assert_eq!(settled(&recorder, &payments), [Settled::Acked; 3]);
}

/// The macro's inbox is an expression in the function's scope, evaluated when the subscriber is
/// mounted: its store is this static, so the test can look into it. Both legs share it; the store
/// keeps keys by queue, and each leg's queues have names of their own.
fn payments_store() -> &'static MemoryStore {
    static STORE: OnceLock<MemoryStore> = OnceLock::new();
    STORE.get_or_init(MemoryStore::new)
}

fn payments_inbox() -> Inbox<MemoryStore> {
    Inbox::new(payments_store().clone()).key(Key::json_pointer("/id"))
}

/// `Post` as a `#[subscriber]` function, its inbox set in the attribute.
#[subscriber(SqsQueue::new("payments.fifo"), idempotent = payments_inbox())]
async fn post_once(
    payment: &Payment,
    State(ledger): State<Ledger>,
    ctx: &mut Context<'_>,
) -> Result<(), TransactionError> {
    let mut transaction = ctx.transaction::<MemoryStore>().await?;
    let id = payment.id.clone();
    transaction.on_commit(move || ledger.lock().unwrap().push(id));
    Ok(())
}

#[test]
fn a_subscriber_function_with_an_inbox_posts_copies_of_one_payment_once() {
    on_each_backend(async |backend| {
        let (payments, _) = queues(&backend, true);
        let ledger = Ledger::default();
        let completed_before = payments_store().completed();
        let recorder = backend.broker().recorder();
        let app = RustStream::new(AppInfo::new("inbox", "0"))
            .with_state(ledger.clone())
            .with_broker(backend.broker().clone(), |b| {
                // `on` keeps the attribute's settings, the inbox among them.
                b.include(post_once.on(payments.clone()));
            });
        let running = TestApp::spawn(app).await.expect("the app starts");
        send_copies(backend.broker(), &payments, &payment("pay-6"), 3).await;
        running.drain().await;
        running.stop().await.unwrap();

        assert_eq!(*ledger.lock().unwrap(), ["pay-6"], "one posting");
        assert_eq!(settled(&recorder, &payments), [Settled::Acked; 3]);
        assert_eq!(payments_store().completed() - completed_before, 1);
    });
}

/// Records each message it handles (its id and deduplication id) in the inbox's transaction, so
/// only a committed run counts: which messages the handler ran for.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<SeenMessage>>>);

/// A message's id and deduplication id, as its handler saw them.
type SeenMessage = (String, Option<String>);

impl Seen {
    fn ids(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn dedup_ids(&self) -> Vec<Option<String>> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, dedup)| dedup.clone())
            .collect()
    }
}

impl Handle<serde_json::Value> for Seen {
    async fn handle(
        &self,
        _: &serde_json::Value,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let mut transaction = ctx
            .transaction::<MemoryStore>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        let seen = self.0.clone();
        let handled = (
            ctx.message_id().to_owned(),
            ctx.sqs().dedup_id().map(str::to_owned),
        );
        transaction.on_commit(move || seen.lock().unwrap().push(handled));
        Ok(())
    }
}

/// Issue 34, N1 (the review's probe R3): SQS forgets a content-based deduplication id after five
/// minutes, so the same body sent ten minutes later is a second message. The default key
/// (`Key::Delivered`) is the message id, never that id, so the handler runs for both.
#[tokio::test(start_paused = true)]
async fn equal_bodies_sent_ten_minutes_apart_to_a_content_deduplicated_queue_both_run() {
    let account = rust_stream::account::Account::new();
    let broker = SqsBroker::with_account(&account);
    let readings = SqsQueue::new("meter-readings.fifo")
        .create_if_missing()
        .content_based_dedup();
    let seen = Seen::default();
    let recorder = broker.recorder();
    let running = start(
        broker.clone(),
        subscriber(readings.clone(), seen.clone())
            .idempotent(Inbox::new(MemoryStore::new()))
            .build(),
    )
    .await;
    let send = || async {
        broker
            .publisher(readings.clone())
            .raw(r#"{"meter":"m-1","kwh":5}"#)
            .group_id("m-1")
            .send()
            .await
            .expect("send")
    };
    let first = send().await;
    running.drain().await;
    tokio::time::advance(Duration::from_secs(10 * 60)).await;
    let second = send().await;
    running.drain().await;
    running.stop().await.unwrap();

    assert!(!second.duplicate, "SQS stored the second send");
    assert_ne!(first.message_id, second.message_id);
    assert_eq!(seen.ids(), [first.message_id, second.message_id]);
    assert_eq!(settled(&recorder, &readings), [Settled::Acked; 2]);
}

/// N1 through SNS: a FIFO topic with content-based deduplication passes its deduplication id
/// (the body's digest) on to the subscribed FIFO queue; the same body published ten minutes
/// apart is two messages there, and both run.
#[tokio::test(start_paused = true)]
async fn equal_bodies_published_ten_minutes_apart_on_a_content_deduplicated_fifo_topic_both_run() {
    let account = rust_stream::account::Account::new();
    let broker = SqsBroker::with_account(&account);
    let topic = || {
        rust_stream::model::SnsTopic::new("meter-readings.fifo")
            .content_based_deduplication(true)
            .create_if_missing()
    };
    let readings = SqsQueue::new("meter-readings-billing.fifo")
        .create_if_missing()
        .subscribed_to(
            rust_stream::model::TopicSubscription::new(topic()).raw_message_delivery(true),
        );
    let seen = Seen::default();
    let recorder = broker.recorder();
    let running = start(
        broker.clone(),
        subscriber(readings.clone(), seen.clone())
            .idempotent(Inbox::new(MemoryStore::new()))
            .build(),
    )
    .await;
    let publish = || async {
        broker
            .topic(topic())
            .raw(r#"{"meter":"m-1","kwh":5}"#)
            .group_id("m-1")
            .send()
            .await
            .expect("publish")
    };
    let first = publish().await;
    running.drain().await;
    tokio::time::advance(Duration::from_secs(10 * 60)).await;
    let second = publish().await;
    running.drain().await;
    running.stop().await.unwrap();

    assert!(!second.duplicate, "SNS took the second publish as new");
    assert_ne!(first.message_id, second.message_id);
    assert_eq!(
        seen.ids().len(),
        2,
        "the handler ran for both: {:?}",
        seen.ids()
    );
    let dedup_ids = seen.dedup_ids();
    assert!(
        dedup_ids[0].is_some() && dedup_ids[0] == dedup_ids[1],
        "both carry the body's digest as their deduplication id: {dedup_ids:?}"
    );
    assert_eq!(settled(&recorder, &readings), [Settled::Acked; 2]);
}

/// The broker over the account, with `hooks` between them.
fn hooked(account: &rust_stream::account::Account, hooks: &FirstDeleteFails) -> SqsBroker {
    SqsBroker::with_transport(Hooked::new(account.clone(), hooks.clone()))
}

/// What the default key still collapses (N1): a resend of one body within SQS's five minutes,
/// which SQS stores once, and a redelivery of that one send after its delete failed, which the
/// inbox acks without running.
#[tokio::test(start_paused = true)]
async fn a_resend_within_five_minutes_and_a_redelivery_of_one_send_run_once() {
    let account = rust_stream::account::Account::new();
    let hooks = FirstDeleteFails::default();
    let broker = hooked(&account, &hooks);
    let readings = SqsQueue::new("payments-readings.fifo")
        .create_if_missing()
        .content_based_dedup()
        .visibility_timeout(Duration::from_secs(30));
    let seen = Seen::default();
    let recorder = broker.recorder();
    let running = start(
        broker.clone(),
        subscriber(readings.clone(), seen.clone())
            .idempotent(Inbox::new(MemoryStore::new()))
            .build(),
    )
    .await;
    let send = || async {
        broker
            .publisher(readings.clone())
            .raw(r#"{"meter":"m-1","kwh":5}"#)
            .group_id("m-1")
            .send()
            .await
            .expect("send")
    };
    let first = send().await;
    tokio::time::advance(Duration::from_secs(60)).await;
    let resend = send().await;
    // The first delete fails, so the message comes back after its visibility timeout; it is
    // counted acked once its second delete succeeded.
    eventually("the message is received again and acked", async || {
        hooks.received.load(Ordering::SeqCst) >= 2 && !settled(&recorder, &readings).is_empty()
    })
    .await;
    running.drain().await;
    running.stop().await.unwrap();

    assert!(resend.duplicate, "SQS stored the resend once");
    assert!(
        hooks.failed.load(Ordering::SeqCst) >= 2,
        "the delete failed, then was made again"
    );
    assert_eq!(
        hooks.received.load(Ordering::SeqCst),
        2,
        "received again once"
    );
    assert_eq!(settled(&recorder, &readings), [Settled::Acked]);
    assert_eq!(seen.ids(), [first.message_id], "the handler ran once");
}

/// A handler's FIFO output sent again past SQS's five minutes (its input redelivered after a
/// failed delete, and the inbox sending the recorded output again) is a second message on the
/// output queue; it carries the output's idempotency header, so an inbox downstream keying by
/// default handles it once.
#[tokio::test(start_paused = true)]
async fn a_fifo_output_sent_again_past_the_dedup_window_runs_once_downstream() {
    let account = rust_stream::account::Account::new();
    let hooks = FirstDeleteFails::default();
    let broker = hooked(&account, &hooks);
    let payments = SqsQueue::new("payments.fifo")
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(6 * 60));
    let posted = SqsQueue::new("posted.fifo").create_if_missing();
    let post = Post::new();
    let downstream = Seen::default();
    let store = MemoryStore::new();
    let recorder = broker.recorder();
    let app = RustStream::new(AppInfo::new("inbox", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(payments.clone(), post.clone())
                .outputs(Output::<Posted>::new(posted.clone()))
                .idempotent(Inbox::new(store.clone()))
                .build(),
        );
        b.include(
            subscriber(posted.clone(), downstream.clone())
                .idempotent(Inbox::new(store.clone()))
                .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    send_copies(&broker, &payments, &payment("pay-8"), 1).await;
    eventually("the payment is handled, its delete failing", async || {
        hooks.failed.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert!(
        settled(&recorder, &payments).is_empty(),
        "not acked before a delete succeeded"
    );
    // Past the payment's visibility timeout, and SQS's five minutes for its output.
    tokio::time::advance(Duration::from_secs(6 * 60)).await;
    eventually("the payment is received again and acked", async || {
        hooks.received.load(Ordering::SeqCst) >= 2 && settled(&recorder, &payments).len() == 1
    })
    .await;
    eventually("both outputs are handled", async || {
        settled(&recorder, &posted).len() == 2
    })
    .await;
    running.drain().await;
    running.stop().await.unwrap();

    assert_eq!(post.runs(), 1, "the redelivered payment did not run");
    assert_eq!(settled(&recorder, &posted), [Settled::Acked; 2]);
    let outputs: Vec<String> = recorder
        .handled(posted.name())
        .iter()
        .map(|handled| handled.message_id.clone())
        .collect();
    assert_ne!(
        outputs[0], outputs[1],
        "SQS stored the late resend as a new message"
    );
    assert_eq!(
        downstream.ids(),
        [outputs[0].clone()],
        "the downstream handler ran once"
    );
}
