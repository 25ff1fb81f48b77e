//! At real network latency: every SQS call takes a set round trip (a [`RoundTrip`] hook that
//! sleeps around each call of the in-process account), and the engine at its default settings is
//! set beside the best plain loop over the same delayed transport.
//!
//! The delay is real time (tokio sleeps, about a millisecond coarse, on the multi-thread runtime),
//! half before the account sees the call and half after it answered, as a request and its answer
//! each cross the network. The account itself answers in microseconds, so what a row measures is
//! how many calls the engine keeps in flight and how full it packs them: what a service feels at
//! 10–30 ms a call to SQS, and what loopback figures hide.
//!
//! - **Consume** (standard; FIFO over 50 groups; FIFO over 1 hot group): the queue is filled
//!   (without delay), then one `#[subscriber]` at default settings consumes it until the last
//!   message is deleted. Limit: N plain loops (ReceiveMessage of 10, decode, DeleteMessageBatch)
//!   for N in [`LOOPS`]; the best of them, and at which N.
//! - **Publish** (standard; FIFO over 50 groups, one hot group (a tenth as many) and 1,000
//!   groups): every message through one `send_batch`, or
//!   each through its own `send()`, all started at once (as a service answering many requests
//!   publishes). Limit: N plain loops of SendMessageBatch of 10 (on FIFO each group in one loop),
//!   the best N.
//!
//! A plain loop's run is as long as the engine's: it gets `messages × N / 16` messages (the
//! loops then take about the same time whatever N), and the hot group's run its own smaller count,
//! as one group goes no faster with more loops.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::layer::{Action, Hooked, Hooks};
use rust_stream::transport::{
    DeleteEntry, ReceiveMessage, SendBatchEntry, SendMessage, Transport, TransportError,
};
use rust_stream::ApiCalls;

use crate::deletes::{CountingDeletes, Deleted};
use crate::options::Options;
use crate::orders::{publish_orders, service, Order, Workload, PROBE};
use crate::report::{thousands, CallsPerMessage, RealLatencyReport, RealLatencyRow, SweepPoint};
use crate::Fallible;

/// Plain loops at once, for the limit: its best.
pub const LOOPS: [u64; 5] = [1, 2, 4, 8, 16];

/// The consume workloads: one hot FIFO group last, as it is the slow one.
const CONSUME: [Workload; 3] = [
    Workload::Standard,
    Workload::Fifo { groups: 50 },
    Workload::Fifo { groups: 1 },
];

/// The publish workloads: FIFO over one hot group (a tenth as many messages, as it goes one
/// call at a time) and over 1,000 groups beside 50.
const PUBLISH: [Workload; 4] = [
    Workload::Standard,
    Workload::Fifo { groups: 50 },
    Workload::Fifo { groups: 1 },
    Workload::Fifo { groups: 1_000 },
];

/// How a publish row's messages are handed to the publisher.
#[derive(Debug, Clone, Copy)]
enum PublishWith {
    /// One `send_batch` of every message.
    SendBatch,
    /// One `send()` each, every one started at once in a task of its own.
    SingleSends,
}

impl PublishWith {
    fn label(self) -> &'static str {
        match self {
            Self::SendBatch => "one send_batch",
            Self::SingleSends => "a send() each, all at once",
        }
    }
}

/// Long-poll wait of the plain consume loops: once the queue is empty their receives wait this
/// long, which only the last ones do, after the run's end was seen.
const PLAIN_WAIT_SECONDS: i32 = 1;

/// Messages per `send_batch` while filling a queue (without delay).
const FILL_CHUNK: u64 = 10_000;

/// How long one run may take.
const PATIENCE: Duration = Duration::from_secs(600);

/// Hooks that make every call take `round_trip`: half before the inner call, half after it.
#[derive(Debug, Clone, Copy)]
pub struct RoundTrip(pub Duration);

impl Hooks for RoundTrip {
    fn around<R: Send>(
        &self,
        _action: Action,
        _queue: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        let there = self.0 / 2;
        let back = self.0 - there;
        async move {
            tokio::time::sleep(there).await;
            let answer = call.await;
            tokio::time::sleep(back).await;
            answer
        }
    }
}

/// Every consume and publish row, each beside its limit's sweep.
pub async fn run(options: &Options) -> Fallible<RealLatencyReport> {
    let round_trip = Duration::from_millis(options.round_trip_ms);
    let messages = options.round_trip_messages;
    let mut consume = Vec::new();
    for workload in CONSUME {
        // One group goes no faster with more loops (nor with the engine's pollers): a tenth.
        let count = if workload == (Workload::Fifo { groups: 1 }) {
            (messages / 10).max(100)
        } else {
            messages
        };
        let mut sweep = Vec::new();
        for loops in LOOPS {
            let share = if workload == (Workload::Fifo { groups: 1 }) {
                count
            } else {
                sweep_count(count, loops)
            };
            let (account, url) = filled(workload, share).await?;
            let figures = plain_consume(&account, &url, round_trip, loops, share).await?;
            sweep.push(SweepPoint::of(loops, share, &figures));
        }
        let (account, _) = filled(workload, count).await?;
        let engine = engine_consume(&account, workload, round_trip, count).await?;
        consume.push(row(
            workload.label(),
            "default".to_owned(),
            count,
            engine,
            sweep,
        ));
    }

    let mut publish = Vec::new();
    for workload in PUBLISH {
        let hot = workload == (Workload::Fifo { groups: 1 });
        let count = if hot {
            (messages / 10).max(100)
        } else {
            messages
        };
        let mut sweep = Vec::new();
        for loops in LOOPS {
            // One group is one loop's however many run: the run is as long with the count alone.
            let share = if hot {
                count
            } else {
                sweep_count(count, loops)
            };
            let figures = plain_publish(workload, round_trip, loops, share).await?;
            sweep.push(SweepPoint::of(loops, share, &figures));
        }
        for with in [PublishWith::SendBatch, PublishWith::SingleSends] {
            let engine = engine_publish(workload, round_trip, with, count).await?;
            publish.push(row(
                workload.label(),
                with.label().to_owned(),
                count,
                engine,
                sweep.clone(),
            ));
        }
    }
    Ok(RealLatencyReport {
        round_trip_ms: options.round_trip_ms,
        consume,
        publish,
    })
}

/// Messages a limit run of `loops` loops gets: as long a run as the engine's, whatever `loops`.
fn sweep_count(messages: u64, loops: u64) -> u64 {
    (messages * loops / LOOPS[LOOPS.len() - 1]).max(200)
}

/// A row: the engine's figures beside the best of the sweep; printed as it is made.
fn row(
    workload: String,
    how: String,
    messages: u64,
    engine: Figures,
    sweep: Vec<SweepPoint>,
) -> RealLatencyRow {
    let best = sweep
        .iter()
        .max_by(|a, b| a.msgs_per_sec.total_cmp(&b.msgs_per_sec))
        .expect("a sweep has points")
        .clone();
    let row = RealLatencyRow {
        workload,
        how,
        messages,
        msgs_per_sec: engine.msgs_per_sec,
        limit_msgs_per_sec: best.msgs_per_sec,
        limit_loops: best.loops,
        ratio: engine.msgs_per_sec / best.msgs_per_sec,
        calls_per_message: engine.calls,
        limit_calls_per_message: best.calls_per_message,
        sweep,
    };
    eprintln!(
        "real latency {}, {}: {} msg/s, best plain loop {} msg/s ({} loops; {:.2}x); {:.3} calls a message, limit {:.3}",
        row.workload,
        row.how,
        thousands(row.msgs_per_sec as u64),
        thousands(row.limit_msgs_per_sec as u64),
        row.limit_loops,
        row.ratio,
        row.calls_per_message.total,
        row.limit_calls_per_message.total
    );
    row
}

/// A run's speed and what it cost.
pub struct Figures {
    pub msgs_per_sec: f64,
    pub calls: CallsPerMessage,
}

/// A fresh account whose queue of this kind holds `messages` orders (filled without delay), and
/// the queue's URL.
async fn filled(workload: Workload, messages: u64) -> Fallible<(Account, String)> {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let publisher = broker.publisher(workload.queue());
    publish_orders(&publisher, workload, 0..messages, FILL_CHUNK).await?;
    let url = account.get_queue_url(workload.queue().name()).await?;
    Ok((account, url))
}

/// The subscriber at default settings over the delayed account, from its start until the last
/// message is deleted.
async fn engine_consume(
    account: &Account,
    workload: Workload,
    round_trip: Duration,
    messages: u64,
) -> Fallible<Figures> {
    let deleted = Arc::new(Deleted::default());
    let broker = SqsBroker::with_transport(Hooked::new(
        Hooked::new(account.clone(), RoundTrip(round_trip)),
        CountingDeletes::new(deleted.clone()),
    ));
    PROBE.reset(false);
    let started = Instant::now();
    let running = TestApp::spawn(service(broker.clone(), workload.queue())).await?;
    let done = deleted.wait_for(messages, PATIENCE).await?;
    let calls = broker.api_calls();
    running.stop().await?;
    assert!(PROBE.handled() >= messages);
    Ok(Figures {
        msgs_per_sec: messages as f64 / (done - started).as_secs_f64(),
        calls: CallsPerMessage::of(calls, messages),
    })
}

/// The limit for consuming: `loops` loops at once over the delayed account, each receiving up to
/// 10, decoding each body as the subscriber does, and deleting them in one `DeleteMessageBatch`.
async fn plain_consume(
    account: &Account,
    url: &str,
    round_trip: Duration,
    loops: u64,
    messages: u64,
) -> Fallible<Figures> {
    let transport = Arc::new(Hooked::new(account.clone(), RoundTrip(round_trip)));
    let deleted = Arc::new(AtomicU64::new(0));
    let receives = Arc::new(AtomicU64::new(0));
    let deletes = Arc::new(AtomicU64::new(0));
    let done = Arc::new(OnceLock::<Instant>::new());
    let finished = Arc::new(tokio::sync::Notify::new());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..loops {
        let (transport, url) = (transport.clone(), url.to_owned());
        let (deleted, receives, deletes, done, finished) = (
            deleted.clone(),
            receives.clone(),
            deletes.clone(),
            done.clone(),
            finished.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while deleted.load(Ordering::SeqCst) < messages {
                let received = transport
                    .receive_message(
                        &url,
                        ReceiveMessage::new(10).wait_time_seconds(PLAIN_WAIT_SECONDS),
                    )
                    .await?;
                receives.fetch_add(1, Ordering::SeqCst);
                let mut entries = Vec::with_capacity(received.len());
                for (index, message) in received.into_iter().enumerate() {
                    let order: Order = serde_json::from_str(&message.body)?;
                    std::hint::black_box(&order);
                    entries.push(DeleteEntry {
                        id: index.to_string().into(),
                        receipt_handle: message.receipt_handle,
                    });
                }
                if entries.is_empty() {
                    continue;
                }
                let answer = transport.delete_message_batch(&url, entries).await?;
                deletes.fetch_add(1, Ordering::SeqCst);
                if let Some(failed) = answer.failed.first() {
                    return Err(format!("delete failed: {failed:?}").into());
                }
                let count = answer.successful.len() as u64;
                if deleted.fetch_add(count, Ordering::SeqCst) + count >= messages {
                    let _ = done.set(Instant::now());
                    finished.notify_one();
                }
            }
            Fallible::Ok(())
        }));
    }
    let waiting = finished.notified();
    if done.get().is_none() {
        tokio::time::timeout(PATIENCE, waiting).await?;
    }
    // The other loops may be in a long poll of the empty queue: the run is over.
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        match task.await {
            Ok(result) => result?,
            Err(error) if error.is_cancelled() => {}
            Err(error) => return Err(error.into()),
        }
    }
    let done = *done
        .get()
        .ok_or("the loops ended before every message was deleted")?;
    let mut calls = ApiCalls::default();
    calls.receive_message = receives.load(Ordering::SeqCst);
    calls.delete_message_batch = deletes.load(Ordering::SeqCst);
    Ok(Figures {
        msgs_per_sec: messages as f64 / (done - started).as_secs_f64(),
        calls: CallsPerMessage::of(calls, messages),
    })
}

/// Publishes `messages` orders through a fresh broker over a delayed account, `with` one
/// `send_batch` or a `send()` each; the queue is resolved (and created) by one warm-up send
/// before the clock starts, whose calls are not counted.
async fn engine_publish(
    workload: Workload,
    round_trip: Duration,
    with: PublishWith,
    messages: u64,
) -> Fallible<Figures> {
    let account = Account::new();
    let broker = SqsBroker::with_transport(Hooked::new(account, RoundTrip(round_trip)));
    let publisher = broker.publisher(workload.queue());
    let warm_up = Order::new(messages, workload.customers(), 0);
    workload.outgoing(&publisher, &warm_up).send().await?;
    let before = broker.api_calls();
    let orders: Vec<Order> = (0..messages)
        .map(|id| Order::new(id, workload.customers(), 0))
        .collect();
    let started = Instant::now();
    match with {
        PublishWith::SendBatch => {
            let batch = orders
                .iter()
                .map(|order| workload.outgoing(&publisher, order));
            for result in publisher.send_batch(batch).await {
                result?;
            }
        }
        PublishWith::SingleSends => {
            let sends: Vec<_> = orders
                .iter()
                .map(|order| tokio::spawn(workload.outgoing(&publisher, order).send()))
                .collect();
            for send in sends {
                send.await??;
            }
        }
    }
    let took = started.elapsed();
    Ok(Figures {
        msgs_per_sec: messages as f64 / took.as_secs_f64(),
        calls: CallsPerMessage::of(broker.api_calls() - before, messages),
    })
}

/// The limit for publishing: `loops` loops at once over a delayed account, each sending its share
/// in `SendMessageBatch` calls of 10. On FIFO a group's orders are all in one loop's share, in
/// order, so every group keeps its order.
async fn plain_publish(
    workload: Workload,
    round_trip: Duration,
    loops: u64,
    messages: u64,
) -> Fallible<Figures> {
    let account = Account::new();
    let name = workload.queue().name().to_owned();
    let url = if workload.is_fifo() {
        account.create_fifo_queue(&name).await?
    } else {
        account.create_standard_queue(&name).await?
    };
    let transport = Arc::new(Hooked::new(account, RoundTrip(round_trip)));
    let sends = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for share in 0..loops {
        let (transport, url, sends) = (transport.clone(), url.clone(), sends.clone());
        let orders: Vec<Order> = (0..messages)
            .filter(|id| (id % workload.customers()) % loops == share)
            .map(|id| Order::new(id, workload.customers(), 0))
            .collect();
        tasks.push(tokio::spawn(async move {
            for batch in orders.chunks(10) {
                let entries = batch
                    .iter()
                    .enumerate()
                    .map(|(index, order)| {
                        let message = SendMessage::new(order.body());
                        let message = if workload.is_fifo() {
                            message
                                .group_id(order.customer.clone())
                                .dedup_id(order.id.to_string())
                        } else {
                            message
                        };
                        SendBatchEntry::new(index.to_string(), message)
                    })
                    .collect();
                let answer = transport.send_message_batch(&url, entries).await?;
                sends.fetch_add(1, Ordering::SeqCst);
                if let Some(failed) = answer.failed.first() {
                    return Err(format!("send failed: {failed:?}").into());
                }
            }
            Fallible::Ok(())
        }));
    }
    for task in tasks {
        tokio::time::timeout(PATIENCE, task).await???;
    }
    let took = started.elapsed();
    let mut calls = ApiCalls::default();
    calls.send_message_batch = sends.load(Ordering::SeqCst);
    Ok(Figures {
        msgs_per_sec: messages as f64 / took.as_secs_f64(),
        calls: CallsPerMessage::of(calls, messages),
    })
}
