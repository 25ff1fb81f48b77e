//! The consumer engine on a FIFO queue of the in-process account, beside its limit: a plain loop
//! over the same account that receives 10, deletes them in one batch and goes on, with no
//! handlers, lanes or leases. Both drain the same backlog (2,000 messages over 2 or 20 groups) in
//! real time on a multi-thread runtime; the ratio engine / plain loop is the engine's cost.
//!
//! The engine confirms each delete before a group's next message starts (so a failed delete
//! cannot reorder a group). FIFO deletes go out without a linger and share calls across groups,
//! never within one, so with few groups each message waits for about one delete call of its own
//! where the plain loop deletes 10 a call. The 2-group case is where that costs the most, though
//! in process a call takes no time, so it shows little here. (The broker's linger, set to 1 ms
//! here, applies to the other batched calls.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::{
    DeleteEntry, QueueAttributes, ReceiveMessage, SendBatchEntry, SendMessage,
};
use tokio::runtime::Runtime;

const MESSAGES: usize = 2_000;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A fresh FIFO queue holding `MESSAGES` small messages spread round-robin over `groups`.
async fn backlog(groups: usize) -> (Account, String) {
    let account = Account::new();
    let mut attributes = QueueAttributes::new();
    attributes.insert("FifoQueue".into(), "true".into());
    let url = account
        .create_queue("bench.fifo", attributes)
        .await
        .unwrap();
    for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(10) {
        let entries = chunk
            .iter()
            .map(|&n| {
                let message = SendMessage::new(format!("{{\"n\":{n}}}"))
                    .group_id(format!("g{}", n % groups))
                    .dedup_id(n.to_string());
                SendBatchEntry::new(n.to_string(), message)
            })
            .collect();
        account.send_message_batch(&url, entries).await.unwrap();
    }
    (account, url)
}

#[derive(serde::Deserialize)]
struct Item {
    #[allow(dead_code)]
    n: usize,
}

struct Count(Arc<AtomicUsize>);

impl Handle<Item> for Count {
    async fn handle(&self, _: &Item, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Drains the backlog through the engine; returns the time from start to the last delete.
async fn engine(groups: usize) -> Duration {
    let (account, url) = backlog(groups).await;
    let broker = SqsBroker::with_account(&account).batch_linger(Duration::from_millis(1));
    let handled = Arc::new(AtomicUsize::new(0));
    let queue = SqsQueue::new("bench.fifo").concurrency(32).pollers(2);
    let app = RustStream::new(AppInfo::new("bench", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue, Count(handled.clone())).build());
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
    assert_eq!(handled.load(Ordering::Relaxed), MESSAGES);
    took
}

/// Drains the backlog with a plain receive / delete-batch loop: the limit.
async fn plain_loop(groups: usize) -> Duration {
    let (account, url) = backlog(groups).await;
    let started = Instant::now();
    let mut left = MESSAGES;
    while left > 0 {
        let received = account
            .receive_message(&url, ReceiveMessage::new(10))
            .await
            .unwrap();
        let entries = received
            .iter()
            .enumerate()
            .map(|(i, m)| DeleteEntry {
                id: i.to_string().into(),
                receipt_handle: m.receipt_handle.clone(),
            })
            .collect::<Vec<_>>();
        left -= entries.len();
        if !entries.is_empty() {
            account.delete_message_batch(&url, entries).await.unwrap();
        }
    }
    started.elapsed()
}

fn drain(c: &mut Criterion) {
    let runtime = runtime();
    let mut group = c.benchmark_group("fifo_drain");
    group.sample_size(10);
    group.throughput(Throughput::Elements(MESSAGES as u64));
    for groups in [2usize, 20] {
        group.bench_with_input(BenchmarkId::new("engine", groups), &groups, |b, &groups| {
            b.iter_custom(|iterations| {
                (0..iterations)
                    .map(|_| runtime.block_on(engine(groups)))
                    .sum()
            });
        });
        group.bench_with_input(
            BenchmarkId::new("plain_loop", groups),
            &groups,
            |b, &groups| {
                b.iter_custom(|iterations| {
                    (0..iterations)
                        .map(|_| runtime.block_on(plain_loop(groups)))
                        .sum()
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, drain);
criterion_main!(benches);
