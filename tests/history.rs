//! The command history (issue 23, item 4) end to end, on both backends: the in-process account on
//! a paused clock, then LocalStack. A publisher with a history sends a key once within its
//! duration, whatever the queue:
//!
//! - the same key twice within its duration is stored once, the second send answered with the
//!   original's message id; after the duration it is stored again; on a FIFO queue it holds
//!   beyond SQS's five-minute deduplication window (in process, whose clock passes it at once);
//! - a failed send (to a queue that does not exist) leaves its key free: the retry is sent;
//! - a key a dead sender reserved makes a send wait, then answer `InFlight` having sent nothing;
//!   once the lease passes, the key goes out (and once only);
//! - in process, keys past their duration are swept in the background;
//! - a topic's publisher honours it too;
//! - `send_batch` honours it: a key sent before, and a key given twice in the batch, go out once;
//! - two publishers on two brokers (two replicas), each with its own pool on one PostgreSQL,
//!   racing the same keys: each key is sent once (real time on both backends, as a database's
//!   round trips are).
//!
//! The stores keep one contract (`tests/history_store.rs`).

mod common;

use std::time::Duration;

use common::backend::Backend as TestBackend;
use common::stores::{postgres_pool, postgres_schema};
use rust_stream::model::rules::ErrorKind;
use rust_stream::prelude::*;
use rust_stream::publish::History;
use rust_stream::store::history::{HistoryKey, HistoryStore, Reservation};
use rust_stream::store::memory::MemoryStore;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::testing::{on_each_backend, Backend, BackendKind};
use rust_stream::transport::Transport;
use rust_stream::{PublishError, Publisher};

/// The bodies a queue holds now, sorted.
async fn bodies(backend: &Backend, queue: &str) -> Vec<String> {
    let mut bodies: Vec<String> = common::held_by(backend, queue)
        .await
        .into_iter()
        .map(|message| message.body)
        .collect();
    bodies.sort();
    bodies
}

fn scrapes(backend: &Backend, queue: &str, history: &History) -> Publisher {
    backend
        .broker()
        .publisher(SqsQueue::new(queue).create_if_missing())
        .with_history(history.clone())
}

#[test]
fn the_same_key_twice_within_its_duration_is_stored_once_and_again_after_it() {
    on_each_backend(async |backend| {
        common::gauges::prometheus();
        let name = backend.queue_name("history-scrapes");
        let history = History::new(MemoryStore::new());
        let publisher = scrapes(&backend, &name, &history);
        let duration = Duration::from_secs(3);
        let send = |player: &'static str| publisher.raw(player).once(player, duration).send();

        let first = send("zezima").await.unwrap();
        let second = send("zezima").await.unwrap();
        let other = send("lynx").await.unwrap();
        assert!(!first.duplicate && !other.duplicate);
        assert!(second.duplicate, "skipped within its duration");
        assert_eq!(second.message_id, first.message_id, "the original's id");
        assert_eq!(backend.broker().api_calls().send_message_batch, 2);
        assert_eq!(
            common::gauges::gauge("rust_stream.history.skipped", &name),
            Some(1.0),
            "the skipped send is counted"
        );

        tokio::time::sleep(duration + Duration::from_millis(500)).await;
        let again = send("zezima").await.unwrap();
        assert!(!again.duplicate, "sent again once its duration passed");
        assert_ne!(again.message_id, first.message_id);
        assert_eq!(bodies(&backend, &name).await, ["lynx", "zezima", "zezima"]);
    });
}

#[test]
fn on_a_fifo_queue_the_history_holds_beyond_the_deduplication_window() {
    on_each_backend(async |backend| {
        let name = backend.queue_name("history-payouts.fifo");
        let history = History::new(MemoryStore::new());
        let publisher = scrapes(&backend, &name, &history);
        let duration = Duration::from_secs(15 * 60);
        // No deduplication id given: each send gets a new one, so SQS alone would store both.
        let send = || {
            publisher
                .raw("payout-7")
                .group_id("account-7")
                .once("payout-7", duration)
                .send()
        };
        let first = send().await.unwrap();
        if backend.kind() == BackendKind::InProcess {
            // Past SQS's five minutes; LocalStack's clock cannot be hurried.
            tokio::time::sleep(Duration::from_secs(6 * 60)).await;
        }
        let second = send().await.unwrap();
        assert!(second.duplicate);
        assert_eq!(
            (second.message_id, second.sequence_number),
            (first.message_id, first.sequence_number)
        );
        assert_eq!(bodies(&backend, &name).await, ["payout-7"]);
    });
}

#[test]
fn a_topic_publish_with_a_key_goes_out_once_too() {
    on_each_backend(async |backend| {
        let topic = SnsTopic::new(backend.queue_name("history-posted")).create_if_missing();
        let posted = backend
            .broker()
            .topic(topic)
            .with_history(History::new(MemoryStore::new()));
        let publish = || {
            posted
                .raw("payment 7 posted")
                .once("payment-7", Duration::from_secs(300))
                .send()
        };
        let first = publish().await.unwrap();
        let second = publish().await.unwrap();
        assert!(!first.duplicate && second.duplicate);
        assert_eq!(second.message_id, first.message_id);
        assert_eq!(backend.broker().api_calls().publish_batch, 1);
    });
}

#[test]
fn a_failed_send_leaves_its_key_free() {
    on_each_backend(async |backend| {
        let name = backend.queue_name("history-missing");
        let history = History::new(MemoryStore::new());
        // Not created: the send fails, as one to a deleted queue or a refused one would.
        let missing = backend
            .broker()
            .publisher(name.as_str())
            .with_history(history.clone());
        let failed = missing
            .raw("zezima")
            .once("zezima", Duration::from_secs(300))
            .send()
            .await
            .unwrap_err();
        assert_eq!(
            failed.kind(),
            Some(ErrorKind::QueueDoesNotExist),
            "{failed}"
        );

        let retry = scrapes(&backend, &name, &history)
            .raw("zezima")
            .once("zezima", Duration::from_secs(300))
            .send()
            .await
            .unwrap();
        assert!(!retry.duplicate, "the failed send left the key free");
        assert_eq!(bodies(&backend, &name).await, ["zezima"]);
    });
}

#[test]
fn a_key_held_by_a_dead_sender_waits_then_goes_out_once_its_lease_passes() {
    on_each_backend(async |backend| {
        let name = backend.queue_name("history-dead-sender");
        let store = MemoryStore::new();
        let lease = Duration::from_secs(2);
        let history = History::new(store.clone())
            .lease(lease)
            .wait(Duration::from_millis(500));
        let publisher = scrapes(&backend, &name, &history);
        // A replica reserved the key and was killed before it sent.
        let dead = store
            .reserve(&HistoryKey::new(name.as_str(), "zezima"), lease)
            .await
            .unwrap();
        assert!(matches!(dead, Reservation::Reserved(_)));
        let send = || {
            publisher
                .raw("zezima")
                .once("zezima", Duration::from_secs(300))
                .send()
        };

        let started = tokio::time::Instant::now();
        let refused = send().await.unwrap_err();
        assert!(
            matches!(&refused, PublishError::InFlight { key, .. } if key == "zezima"),
            "{refused}"
        );
        assert!(started.elapsed() >= Duration::from_millis(500));
        assert!(
            refused.to_string().contains("nothing was sent"),
            "{refused}"
        );
        assert_eq!(backend.broker().api_calls().send_message_batch, 0);

        tokio::time::sleep(lease).await;
        let sent = send().await.unwrap();
        assert!(
            !sent.duplicate,
            "the dead sender's lease passed: the key is free"
        );
        assert!(send().await.unwrap().duplicate);
        assert_eq!(bodies(&backend, &name).await, ["zezima"]);
    });
}

/// Keys past their duration are deleted in the background, at most once a minute: the store
/// does not keep every key ever sent.
#[tokio::test(start_paused = true)]
async fn in_process_expired_keys_are_swept_in_the_background() {
    let broker = SqsBroker::in_process();
    let store = MemoryStore::new();
    let publisher = broker
        .publisher(SqsQueue::new("history-swept").create_if_missing())
        .with_history(History::new(store.clone()));
    for player in ["a", "b", "c"] {
        publisher
            .raw(player)
            .once(player, Duration::from_secs(1))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(store.history_len(), 3);
    tokio::time::sleep(Duration::from_secs(61)).await;
    publisher
        .raw("d")
        .once("d", Duration::from_secs(300))
        .send()
        .await
        .unwrap();
    // The sweep runs in a task of its own.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(store.history_len(), 1, "only `d` is left");
}

#[test]
fn send_batch_sends_each_key_once() {
    on_each_backend(async |backend| {
        let name = backend.queue_name("history-batch");
        let history = History::new(MemoryStore::new());
        let publisher = scrapes(&backend, &name, &history);
        let duration = Duration::from_secs(300);
        let before = publisher.raw("b").once("b", duration).send().await.unwrap();

        let results = publisher
            .send_batch([
                publisher.raw("a").once("a", duration),
                publisher.raw("b").once("b", duration),
                publisher.raw("a").once("a", duration),
                publisher.raw("c").once("c", duration),
                publisher.raw("no key"),
            ])
            .await;
        let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();
        let duplicates: Vec<bool> = results.iter().map(|sent| sent.duplicate).collect();
        assert_eq!(duplicates, [false, true, true, false, false]);
        assert_eq!(results[1].message_id, before.message_id);
        assert_eq!(results[2].message_id, results[0].message_id);
        // One call for `b` before, one for the batch's three sends.
        assert_eq!(backend.broker().api_calls().send_message_batch, 2);
        assert_eq!(bodies(&backend, &name).await, ["a", "b", "c", "no key"]);
    });
}

#[test]
fn once_without_a_history_is_refused_before_any_call() {
    on_each_backend(async |backend| {
        let name = backend.queue_name("history-none");
        let publisher = backend
            .broker()
            .publisher(SqsQueue::new(name.as_str()).create_if_missing());
        let refused = publisher
            .raw("x")
            .once("x", Duration::from_secs(1))
            .send()
            .await
            .unwrap_err();
        assert!(
            matches!(refused, PublishError::NoHistory { .. }),
            "{refused}"
        );
        assert!(refused.to_string().contains(".with_history("), "{refused}");
        let refused = publisher
            .send_batch([publisher.raw("x").once("x", Duration::from_secs(1))])
            .await;
        assert!(matches!(
            &refused[..],
            [Err(PublishError::NoHistory { .. })]
        ));
        assert_eq!(backend.broker().api_calls().send_message_batch, 0);
    });
}

/// Two brokers, each with a publisher on its own PostgreSQL pool (two replicas of a service),
/// send the same 25 keys at once, each key from both: every key is stored once, and each pair's
/// other send answers the stored one's message id.
async fn racing_publishers_on_postgres_send_each_key_once<T: Transport>(
    backend: TestBackend<T>,
    second_broker: SqsBroker,
) {
    const KEYS: u32 = 25;
    let Some((options, schema)) = postgres_schema("history", "race").await else {
        return;
    };
    let url = backend.queue("history-race", &[]).await;
    let name = backend.name("history-race");
    let mut publishers = Vec::new();
    for broker in [&backend.broker, &second_broker] {
        let store = PostgresStore::new(postgres_pool(&options).await)
            .await
            .unwrap();
        publishers.push(
            broker
                .publisher(name.as_str())
                .with_history(History::new(store)),
        );
    }
    let mut sends = Vec::new();
    for n in 0..KEYS {
        for publisher in &publishers {
            let publisher = publisher.clone();
            sends.push(tokio::spawn(async move {
                publisher
                    .raw(format!("scrape {n}"))
                    .once(format!("scrape-{n}"), Duration::from_secs(300))
                    .send()
                    .await
                    .unwrap()
            }));
        }
    }
    let mut answers = Vec::new();
    for send in sends {
        answers.push(send.await.unwrap());
    }
    for pair in answers.chunks(2) {
        assert_eq!(
            pair.iter().filter(|sent| sent.duplicate).count(),
            1,
            "{pair:?}"
        );
        assert_eq!(pair[0].message_id, pair[1].message_id);
    }
    let stored = backend.take_all(&url, KEYS as usize).await;
    let mut stored: Vec<String> = stored.into_iter().map(|message| message.body).collect();
    stored.sort();
    let mut expected: Vec<String> = (0..KEYS).map(|n| format!("scrape {n}")).collect();
    expected.sort();
    assert_eq!(stored, expected);
    schema.drop_it().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_two_publishers_racing_one_key_on_postgres_send_it_once() {
    let backend = TestBackend::in_process();
    let second = SqsBroker::with_account(&backend.transport);
    racing_publishers_on_postgres_send_each_key_once(backend, second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_two_publishers_racing_one_key_on_postgres_send_it_once() {
    let Some(backend) = TestBackend::live().await else {
        return;
    };
    let second = SqsBroker::with_transport(backend.transport.clone());
    racing_publishers_on_postgres_send_each_key_once(backend, second).await;
}
