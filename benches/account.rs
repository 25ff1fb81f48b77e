//! Benchmarks of the in-process SQS account: batch sends, receive + delete, and whether a large
//! backlog slows a receive down.
//!
//! The scaling requirement: a backlog of 1,000,000 messages across 10,000 groups must not make a
//! receive slower than on an empty queue by more than a small constant. `receive_delete/*_backlog`
//! compares a small backlog with a 1M one; each iteration receives 10, deletes them and sends 10
//! new ones, so the backlog stays constant.
//!
//! Every benchmark runs on a current-thread runtime with a paused tokio clock that the harness
//! advances by [`STEP`] per iteration, outside the timed region. The account's clock is tokio's,
//! so this models a steady send rate: FIFO deduplication ids then expire after their 5 minutes
//! (a window of about 100,000 ids) instead of piling up for the whole run. Only the account calls
//! are timed (`iter_custom`); building the entries to send and topping up queues are not.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rust_stream::account::Account;
use rust_stream::transport::{DeleteEntry, ReceiveMessage, SendBatchEntry, SendMessage};
use tokio::runtime::Runtime;

/// Messages per batch: SQS's maximum.
const BATCH: usize = 10;
/// Tokio clock time that passes per iteration (and per batch of a prefill): 10 messages every
/// 30 ms, so the 5-minute deduplication window holds about 100,000 ids.
const STEP: Duration = Duration::from_millis(30);
/// `send_batch` starts over on a fresh queue once the queue holds this many messages.
const SEND_RESET_AT: usize = 100_000;
/// `receive_delete/{standard,fifo_100_groups}` top the queue up (untimed) to this many messages
/// whenever it runs empty.
const REFILL: usize = 10_000;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// Makes the messages a benchmark sends: small JSON bodies (~100 bytes), on FIFO queues spread
/// round-robin over `groups` groups with unique deduplication ids.
struct Feed {
    groups: Option<u64>,
    next: u64,
}

impl Feed {
    fn standard() -> Self {
        Self {
            groups: None,
            next: 0,
        }
    }

    fn fifo(groups: u64) -> Self {
        Self {
            groups: Some(groups),
            next: 0,
        }
    }

    fn batch(&mut self) -> Vec<SendBatchEntry> {
        (0..BATCH)
            .map(|i| {
                let n = self.next;
                self.next += 1;
                let body = format!(
                    r#"{{"order":"ord-{n:010}","customer":"cust-{:05}","amount_cents":{:7},"currency":"EUR","status":"new"}}"#,
                    n % 50_000,
                    n * 7919 % 1_000_000,
                );
                let mut message = SendMessage::new(body);
                if let Some(groups) = self.groups {
                    message = message
                        .group_id(format!("group-{:05}", n % groups))
                        .dedup_id(format!("dedup-{n}"));
                }
                SendBatchEntry::new(format!("e{i}"), message)
            })
            .collect()
    }
}

/// A fresh queue with a unique name.
async fn create(account: &Account, fifo: bool, serial: &mut u32) -> String {
    *serial += 1;
    let result = if fifo {
        account
            .create_fifo_queue(&format!("bench-{serial}.fifo"))
            .await
    } else {
        account
            .create_standard_queue(&format!("bench-{serial}"))
            .await
    };
    result.expect("queue created")
}

/// Sends `messages` messages in batches, advancing the clock by [`STEP`] per batch.
async fn fill(account: &Account, url: &str, feed: &mut Feed, messages: usize) {
    for _ in 0..messages / BATCH {
        tokio::time::advance(STEP).await;
        let sent = account
            .send_message_batch(url, feed.batch())
            .await
            .expect("batch accepted");
        assert!(sent.failed.is_empty(), "prefill failed: {:?}", sent.failed);
    }
}

/// One receive of up to 10 (no wait) and one batch delete of what it returned; returns how many
/// messages it received.
async fn receive_delete(account: &Account, url: &str) -> usize {
    let received = account
        .receive_message(url, ReceiveMessage::new(BATCH as i32).wait_time_seconds(0))
        .await
        .expect("receive");
    let count = received.len();
    if count > 0 {
        let entries = received
            .into_iter()
            .enumerate()
            .map(|(i, m)| DeleteEntry {
                id: format!("d{i}").into(),
                receipt_handle: m.receipt_handle,
            })
            .collect();
        let deleted = account
            .delete_message_batch(url, entries)
            .await
            .expect("delete batch");
        assert!(
            deleted.failed.is_empty(),
            "delete failed: {:?}",
            deleted.failed
        );
    }
    count
}

fn send_batch(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("send_batch");
    group
        .throughput(Throughput::Elements(BATCH as u64))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    for (name, fifo, mut feed) in [
        ("standard", false, Feed::standard()),
        ("fifo_100_groups", true, Feed::fifo(100)),
    ] {
        let account = Account::new();
        let mut serial = 0;
        let mut url = rt.block_on(create(&account, fifo, &mut serial));
        let mut stored = 0;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    if stored >= SEND_RESET_AT {
                        rt.block_on(async {
                            account.delete_queue(&url).await.expect("queue deleted");
                            url = create(&account, fifo, &mut serial).await;
                        });
                        stored = 0;
                    }
                    let entries = feed.batch();
                    let (elapsed, sent) = rt.block_on(async {
                        tokio::time::advance(STEP).await;
                        let start = Instant::now();
                        let sent = account.send_message_batch(&url, entries).await;
                        (start.elapsed(), sent)
                    });
                    let sent = sent.expect("batch accepted");
                    assert_eq!(sent.successful.len(), BATCH, "{:?}", sent.failed);
                    black_box(sent);
                    stored += BATCH;
                    timed += elapsed;
                }
                timed
            });
        });
    }
    group.finish();
}

fn receive_delete_refilled(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("receive_delete");
    group
        .throughput(Throughput::Elements(BATCH as u64))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    for (name, fifo, mut feed) in [
        ("standard", false, Feed::standard()),
        ("fifo_100_groups", true, Feed::fifo(100)),
    ] {
        let account = Account::new();
        let mut serial = 0;
        let url = rt.block_on(create(&account, fifo, &mut serial));
        let mut left = 0;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    if left < BATCH {
                        rt.block_on(fill(&account, &url, &mut feed, REFILL));
                        left += REFILL;
                    }
                    let (elapsed, count) = rt.block_on(async {
                        tokio::time::advance(STEP).await;
                        let start = Instant::now();
                        let count = receive_delete(&account, &url).await;
                        (start.elapsed(), count)
                    });
                    assert_eq!(count, BATCH);
                    left -= count;
                    timed += elapsed;
                }
                timed
            });
        });
    }
    group.finish();
}

fn receive_delete_backlog(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("receive_delete");
    group
        .throughput(Throughput::Elements(BATCH as u64))
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(50);
    let cases = [
        ("fifo_backlog", "small", Feed::fifo(10), 1_000),
        (
            "fifo_backlog",
            "1M_10k_groups",
            Feed::fifo(10_000),
            1_000_000,
        ),
        ("standard_backlog", "small", Feed::standard(), 1_000),
        ("standard_backlog", "1M", Feed::standard(), 1_000_000),
    ];
    for (family, size, mut feed, backlog) in cases {
        let fifo = feed.groups.is_some();
        let account = Account::new();
        let mut serial = 0;
        let url = rt.block_on(create(&account, fifo, &mut serial));
        let start = Instant::now();
        rt.block_on(fill(&account, &url, &mut feed, backlog));
        eprintln!(
            "receive_delete/{family}/{size}: prefilled {backlog} messages in {:.2?}",
            start.elapsed()
        );
        group.bench_function(BenchmarkId::new(family, size), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let entries = feed.batch();
                    let (elapsed, count) = rt.block_on(async {
                        tokio::time::advance(STEP).await;
                        let start = Instant::now();
                        let count = receive_delete(&account, &url).await;
                        let sent = account.send_message_batch(&url, entries).await;
                        let elapsed = start.elapsed();
                        let sent = sent.expect("batch accepted");
                        assert_eq!(sent.successful.len(), BATCH, "{:?}", sent.failed);
                        (elapsed, count)
                    });
                    assert_eq!(count, BATCH, "the backlog stays constant");
                    timed += elapsed;
                }
                timed
            });
        });
        let counts = rt.block_on(account.counts(&url)).expect("counts");
        assert_eq!(
            (counts.visible, counts.in_flight, counts.delayed),
            (backlog, 0, 0)
        );
    }
    group.finish();
}

criterion_group!(
    benches,
    send_batch,
    receive_delete_refilled,
    receive_delete_backlog
);
criterion_main!(benches);
