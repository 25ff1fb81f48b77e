//! Micro-benchmarks of the per-message costs the end-to-end benchmark (`examples/bench`) adds up,
//! each reachable through the public API and each beside what it costs at the least:
//!
//! - `codec/decode_order`: the default codec (`Json`) decoding one 100-byte order, the floor of
//!   what a subscriber does per message (the channel limit of the end-to-end benchmark does it
//!   too).
//! - `publish/send_batch_10/*`: `Publisher::send_batch` of 10 orders to the in-process account,
//!   standard and FIFO over 100 groups: encoding, the rule checks and the queue's batcher (the
//!   same batcher type deletes go through) on top of the account's own `SendMessageBatch`, which
//!   `account`'s `send_batch/*` times alone.
//! - `standard_drain/*`: a backlog of 10,000 orders on a standard queue drained through the
//!   consumer engine (`engine`: pollers, a task per message, settle, the delete batcher, the
//!   account's lock) and through a plain loop over the same account that receives 10 and deletes
//!   them in one batch (`plain_loop`, the limit); `engine_fifo` does the same on FIFO.
//!
//! ```sh
//! cargo bench --bench hot_path
//! cargo bench --bench hot_path -- standard_drain
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::{DeleteEntry, ReceiveMessage};
use rust_stream::{Codec, Json, Publisher};

/// Orders in the drained backlog.
const BACKLOG: usize = 10_000;

/// `publish/send_batch_10/*` starts over on a fresh queue once it holds this many messages.
const REPLACE_AT: usize = 100_000;

/// An order like the end-to-end benchmark's: 100 bytes of JSON.
#[derive(serde::Serialize, serde::Deserialize)]
struct Order {
    id: u64,
    customer: String,
    cents: u64,
    currency: String,
    sent_us: u64,
    note: String,
}

impl Order {
    fn new(id: u64, customers: u64) -> Self {
        Self {
            id,
            customer: format!("cust-{:05}", id % customers),
            cents: id.wrapping_mul(7919) % 1_000_000,
            currency: "EUR".to_owned(),
            sent_us: 0,
            note: "x".repeat(14),
        }
    }
}

fn decode(c: &mut Criterion) {
    let body = serde_json::to_string(&Order::new(123_456, 100)).unwrap();
    let mut group = c.benchmark_group("codec");
    group.throughput(Throughput::Elements(1));
    group.bench_function("decode_order", |b| {
        b.iter(|| {
            let order: Order = Json.decode(black_box(&body)).unwrap();
            black_box(order)
        });
    });
    group.finish();
}

fn publish(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group("publish/send_batch_10");
    group
        .throughput(Throughput::Elements(10))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, queue, groups) in [
        ("standard", "orders", None),
        ("fifo_100_groups", "orders.fifo", Some(100)),
    ] {
        let mut next = 0u64;
        let batch = |publisher: &Publisher, next: &mut u64| {
            (0..10)
                .map(|_| {
                    *next += 1;
                    let order = Order::new(*next, groups.unwrap_or(100));
                    let message = publisher.message(&order);
                    match groups {
                        Some(_) => message.group_id(order.customer),
                        None => message,
                    }
                })
                .collect::<Vec<_>>()
        };
        // A publisher to a fresh account's queue, resolved and its batcher started by a first
        // batch before anything is timed. (SQS allows a purge a minute, so a full queue is
        // replaced rather than purged.)
        let fresh = |next: &mut u64| {
            let broker = SqsBroker::in_process();
            let publisher = broker.publisher(SqsQueue::new(queue).create_if_missing());
            let sent = runtime.block_on(publisher.send_batch(batch(&publisher, next)));
            assert!(sent.iter().all(Result::is_ok));
            publisher
        };
        let mut publisher = fresh(&mut next);
        let mut stored = 10;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    if stored >= REPLACE_AT {
                        publisher = fresh(&mut next);
                        stored = 10;
                    }
                    let messages = batch(&publisher, &mut next);
                    let (took, sent) = runtime.block_on(async {
                        let start = Instant::now();
                        let sent = publisher.send_batch(messages).await;
                        (start.elapsed(), sent)
                    });
                    assert!(sent.iter().all(Result::is_ok));
                    stored += 10;
                    timed += took;
                }
                timed
            });
        });
    }
    group.finish();
}

/// A standard queue of a fresh account holding [`BACKLOG`] orders.
async fn backlog() -> (Account, SqsBroker) {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let publisher = broker.publisher(SqsQueue::new("orders").create_if_missing());
    let orders = (0..BACKLOG as u64).map(|id| publisher.message(&Order::new(id, 100)));
    assert!(publisher.send_batch(orders).await.iter().all(Result::is_ok));
    (account, broker)
}

struct Take(Arc<AtomicUsize>);

impl Handle<Order> for Take {
    async fn handle(
        &self,
        order: &Order,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        black_box(order);
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Drains the backlog through the engine (default settings); the time from its start until the
/// queue is empty.
async fn engine() -> Duration {
    let (account, broker) = backlog().await;
    let url = account.get_queue_url("orders").await.unwrap();
    let taken = Arc::new(AtomicUsize::new(0));
    let app = RustStream::new(AppInfo::new("bench", "0")).with_broker(broker, |b| {
        b.include(subscriber(SqsQueue::new("orders"), Take(taken.clone())).build());
    });
    let started = Instant::now();
    let running = TestApp::spawn(app).await.expect("the app starts");
    loop {
        let counts = account.counts(&url).await.unwrap();
        if counts.visible + counts.in_flight == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let took = started.elapsed();
    running.stop().await.unwrap();
    assert_eq!(taken.load(Ordering::Relaxed), BACKLOG);
    took
}

/// Drains the backlog with a plain receive / decode / delete-batch loop: the limit.
async fn plain_loop() -> Duration {
    let (account, _broker) = backlog().await;
    let url = account.get_queue_url("orders").await.unwrap();
    let started = Instant::now();
    let mut left = BACKLOG;
    while left > 0 {
        let received = account
            .receive_message(&url, ReceiveMessage::new(10))
            .await
            .unwrap();
        let entries: Vec<DeleteEntry> = received
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                let order: Order = Json.decode(&m.body).unwrap();
                black_box(order);
                DeleteEntry {
                    id: i.to_string().into(),
                    receipt_handle: m.receipt_handle,
                }
            })
            .collect();
        left -= entries.len();
        if !entries.is_empty() {
            account.delete_message_batch(&url, entries).await.unwrap();
        }
    }
    started.elapsed()
}

fn drain(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group("standard_drain");
    group.sample_size(10);
    group.throughput(Throughput::Elements(BACKLOG as u64));
    group.bench_function(BenchmarkId::from_parameter("engine"), |b| {
        b.iter_custom(|iterations| (0..iterations).map(|_| runtime.block_on(engine())).sum());
    });
    group.bench_function(BenchmarkId::from_parameter("plain_loop"), |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| runtime.block_on(plain_loop()))
                .sum()
        });
    });
    group.finish();
}

criterion_group!(benches, decode, publish, drain);
criterion_main!(benches);
