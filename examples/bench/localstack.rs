//! On LocalStack: consuming pre-filled queues and publishing, through rust-stream and through a
//! plain aws-sdk-sqs loop (the limit) in the same run, with the SQS API calls each made.
//!
//! Every run gets fresh queues, named after this process so that runs never share one, and
//! deletes them afterwards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, QueueAttributeName, SendMessageBatchRequestEntry,
};
use rust_stream::aws::AwsTransport;
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::layer::Hooked;
use rust_stream::ApiCalls;

use crate::deletes::{CountingDeletes, Deleted};
use crate::options::Options;
use crate::orders::{service, Order, Workload, PROBE};
use crate::report::{
    thousands, CallsPerMessage, ConsumeRow, LocalStackReport, PacedRow, PublishRow,
};
use crate::Fallible;

const WORKLOADS: [Workload; 2] = [Workload::Standard, Workload::Fifo { groups: 50 }];

/// The publish rows: each workload through one `send_batch`, and a `send()` each from
/// [`SENDING_TASKS`] tasks over one hot group, 50 and 1,000 groups (and standard beside them).
const PUBLISH: [(Workload, PublishWith); 6] = [
    (Workload::Standard, PublishWith::SendBatch),
    (Workload::Fifo { groups: 50 }, PublishWith::SendBatch),
    (Workload::Standard, PublishWith::SingleSends),
    (Workload::Fifo { groups: 1 }, PublishWith::SingleSends),
    (Workload::Fifo { groups: 50 }, PublishWith::SingleSends),
    (Workload::Fifo { groups: 1_000 }, PublishWith::SingleSends),
];

/// Tasks publishing at once in the single-send rows, each awaiting its `send()` before its next:
/// a service answering many requests, each publishing one message.
pub const SENDING_TASKS: usize = 64;

/// How a publish row's messages are handed to the publisher.
#[derive(Debug, Clone, Copy)]
enum PublishWith {
    /// One `send_batch` of every message.
    SendBatch,
    /// A `send()` each, from [`SENDING_TASKS`] tasks taking the next order in turn.
    SingleSends,
}

impl PublishWith {
    fn label(self) -> String {
        match self {
            Self::SendBatch => "one send_batch".to_owned(),
            Self::SingleSends => format!("a send() each, {SENDING_TASKS} tasks"),
        }
    }
}

/// Pollers of the consume rows; the plain loop runs as many loops.
const POLLERS: [usize; 2] = [1, 4];

/// The subscription's handlers: enough that every FIFO group can be busy at once.
const CONCURRENCY: usize = 50;

/// Long-poll wait of the subscription and of the plain loop. Receives return as soon as messages
/// are there, so the wait shows only once the queue is empty: short, so that stopping after a
/// run does not wait out a 20 s poll.
const WAIT: Duration = Duration::from_secs(1);

/// Loops of the plain publisher (and of the pre-fills): as many calls in flight as the broker's
/// batcher has on a standard queue.
const PUBLISH_LOOPS: u64 = 4;

/// How long one run may take.
const PATIENCE: Duration = Duration::from_secs(300);

pub async fn run(endpoint: &str, options: &Options) -> Fallible<LocalStackReport> {
    let messages = options.localstack_messages;
    let client = plain_client(endpoint).await;
    let transport = SqsBroker::aws()
        .endpoint(endpoint)
        .region("us-east-1")
        .test_credentials()
        .transport()
        .await?;
    let mut queues = Queues::new(client.clone(), endpoint, "bench")?;

    let repeats = options.localstack_repeats;
    let mut consume = Vec::new();
    for workload in WORKLOADS {
        for pollers in POLLERS {
            let pair = median_pair(repeats, async |side| {
                let (name, url) = queues.filled(workload, messages).await?;
                let figures = match side {
                    Side::Limit => plain_consume(&client, &url, pollers, messages).await,
                    Side::Engine => engine_consume(&transport, &name, pollers, messages).await,
                };
                queues.delete(&url).await?;
                figures
            })
            .await?;
            let row = ConsumeRow {
                workload: workload.label(),
                pollers,
                concurrency: CONCURRENCY,
                messages,
                msgs_per_sec: pair.engine.msgs_per_sec,
                limit_msgs_per_sec: pair.limit.msgs_per_sec,
                ratio: pair.engine.msgs_per_sec / pair.limit.msgs_per_sec,
                calls_per_message: pair.engine.calls,
                limit_calls_per_message: pair.limit.calls,
                runs_msgs_per_sec: pair.engine_runs,
                limit_runs_msgs_per_sec: pair.limit_runs,
            };
            eprintln!(
                "localstack consume {}, {pollers} poller(s): {} msg/s, limit {} msg/s ({:.2}x); {:.3} calls a message, limit {:.3}",
                row.workload,
                thousands(row.msgs_per_sec as u64),
                thousands(row.limit_msgs_per_sec as u64),
                row.ratio,
                row.calls_per_message.total,
                row.limit_calls_per_message.total
            );
            consume.push(row);
        }
    }

    let mut publish = Vec::new();
    for (workload, with) in PUBLISH {
        let pair = median_pair(repeats, async |side| {
            let (name, url) = queues.empty(workload).await?;
            let figures = match side {
                Side::Limit => plain_publish(&client, &url, workload, messages).await,
                Side::Engine => engine_publish(&transport, &name, workload, with, messages).await,
            };
            queues.delete(&url).await?;
            figures
        })
        .await?;
        let row = PublishRow {
            workload: workload.label(),
            how: with.label(),
            messages,
            msgs_per_sec: pair.engine.msgs_per_sec,
            limit_msgs_per_sec: pair.limit.msgs_per_sec,
            ratio: pair.engine.msgs_per_sec / pair.limit.msgs_per_sec,
            calls_per_message: pair.engine.calls,
            limit_calls_per_message: pair.limit.calls,
            runs_msgs_per_sec: pair.engine_runs,
            limit_runs_msgs_per_sec: pair.limit_runs,
        };
        eprintln!(
            "localstack publish {}, {}: {} msg/s, limit {} msg/s ({:.2}x); {:.3} calls a message, limit {:.3}",
            row.workload,
            row.how,
            thousands(row.msgs_per_sec as u64),
            thousands(row.limit_msgs_per_sec as u64),
            row.ratio,
            row.calls_per_message.total,
            row.limit_calls_per_message.total
        );
        publish.push(row);
    }

    let paced = vec![paced_row(&client, &transport, &mut queues, PACED).await?];

    Ok(LocalStackReport {
        endpoint: endpoint.to_owned(),
        consume,
        publish,
        paced,
    })
}

/// The paced row's queue: FIFO over 50 groups.
pub const PACED: Workload = Workload::Fifo { groups: 50 };

/// Sends of the paced row, and their pace: a service publishing at a light, steady load.
const PACED_SENDS: u64 = 2_000;
const PACED_PER_SEC: u64 = 100;

/// Single sends at [`PACED_PER_SEC`], each from its own task as a request's would be, timed from
/// the call to its answer: through the publisher, and as a plain `SendMessage` each (the limit),
/// each side on a fresh queue.
pub async fn paced_row(
    client: &aws_sdk_sqs::Client,
    transport: &AwsTransport,
    queues: &mut Queues,
    workload: Workload,
) -> Fallible<PacedRow> {
    let (_, url) = queues.empty(workload).await?;
    let limit = {
        let (client, url) = (client.clone(), url.clone());
        paced(move |order: Order| {
            let request = client
                .send_message()
                .queue_url(&url)
                .message_body(order.body());
            let request = if workload.is_fifo() {
                request
                    .message_group_id(&order.customer)
                    .message_deduplication_id(order.id.to_string())
            } else {
                request
            };
            async move {
                request.send().await?;
                Fallible::Ok(())
            }
        })
        .await?
    };
    queues.delete(&url).await?;

    let (name, url) = queues.empty(workload).await?;
    let broker = SqsBroker::with_transport(transport.clone());
    let publisher = broker.publisher(SqsQueue::new(&name));
    let engine = paced(move |order: Order| {
        let sent = workload.outgoing(&publisher, &order).send();
        async move {
            sent.await?;
            Fallible::Ok(())
        }
    })
    .await?;
    let calls = CallsPerMessage::of(broker.api_calls(), PACED_SENDS);
    queues.delete(&url).await?;

    let row = PacedRow {
        workload: workload.label(),
        sends: PACED_SENDS,
        per_sec: PACED_PER_SEC,
        p50_ms: engine.at(0.5),
        p99_ms: engine.at(0.99),
        max_ms: engine.at(1.0),
        limit_p50_ms: limit.at(0.5),
        limit_p99_ms: limit.at(0.99),
        limit_max_ms: limit.at(1.0),
        calls_per_message: calls,
    };
    eprintln!(
        "localstack paced {}, {} sends at {}/s: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; limit p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {:.3} calls a message",
        row.workload,
        row.sends,
        row.per_sec,
        row.p50_ms,
        row.p99_ms,
        row.max_ms,
        row.limit_p50_ms,
        row.limit_p99_ms,
        row.limit_max_ms,
        row.calls_per_message.total
    );
    Ok(row)
}

/// Each send's time from call to answer, sorted.
struct Latencies(Vec<Duration>);

impl Latencies {
    /// The `quantile`'s latency in milliseconds.
    fn at(&self, quantile: f64) -> f64 {
        let at = ((self.0.len() - 1) as f64 * quantile).round() as usize;
        self.0[at].as_secs_f64() * 1_000.0
    }
}

/// Starts [`PACED_SENDS`] sends of the [`PACED`] orders, one every `1 / PACED_PER_SEC` s, each
/// in its own task and timed on its own, whatever the ones before are doing.
async fn paced<F>(send: impl Fn(Order) -> F) -> Fallible<Latencies>
where
    F: Future<Output = Fallible<()>> + Send + 'static,
{
    let mut tick = tokio::time::interval(Duration::from_secs(1) / PACED_PER_SEC as u32);
    let mut sends = tokio::task::JoinSet::new();
    for id in 0..PACED_SENDS {
        tick.tick().await;
        let sent = send(Order::new(id, PACED.customers(), 0));
        sends.spawn(async move {
            let started = Instant::now();
            sent.await.map(|()| started.elapsed())
        });
    }
    let mut latencies = Vec::with_capacity(PACED_SENDS as usize);
    while let Some(took) = sends.join_next().await {
        latencies.push(took??);
    }
    latencies.sort();
    Ok(Latencies(latencies))
}

/// An SDK client as a plain program makes one for a local stack: its endpoint, a region, dummy
/// credentials, the SDK's defaults otherwise.
pub async fn plain_client(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "bench",
        ))
        .load()
        .await;
    aws_sdk_sqs::Client::new(&config)
}

/// The queues of this run.
pub struct Queues {
    client: aws_sdk_sqs::Client,
    endpoint: String,
    prefix: String,
    made: u32,
}

impl Queues {
    /// Queues on `endpoint` named `{base}-{pid}-{ms}-{n}`: never shared with another run.
    pub fn new(client: aws_sdk_sqs::Client, endpoint: &str, base: &str) -> Fallible<Self> {
        Ok(Self {
            client,
            endpoint: endpoint.to_owned(),
            prefix: format!(
                "{base}-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_millis()
            ),
            made: 0,
        })
    }

    /// A fresh empty queue of this kind: its name and URL.
    pub async fn empty(&mut self, workload: Workload) -> Fallible<(String, String)> {
        self.made += 1;
        let suffix = if workload.is_fifo() { ".fifo" } else { "" };
        let name = format!("{}-{}{suffix}", self.prefix, self.made);
        let mut request = self.client.create_queue().queue_name(&name);
        if workload.is_fifo() {
            request = request.attributes(QueueAttributeName::FifoQueue, "true");
        }
        let url = request
            .send()
            .await?
            .queue_url()
            .ok_or("CreateQueue answered no URL")?
            .to_owned();
        Ok((name, rebase(&url, &self.endpoint)))
    }

    /// A fresh queue holding `messages` orders, filled by the plain publisher.
    pub async fn filled(
        &mut self,
        workload: Workload,
        messages: u64,
    ) -> Fallible<(String, String)> {
        let (name, url) = self.empty(workload).await?;
        plain_publish(&self.client, &url, workload, messages).await?;
        Ok((name, url))
    }

    pub async fn delete(&self, url: &str) -> Fallible<()> {
        self.client.delete_queue().queue_url(url).send().await?;
        Ok(())
    }
}

/// `url` on `endpoint`: LocalStack may name itself by a host that does not resolve here.
fn rebase(url: &str, endpoint: &str) -> String {
    let path = url
        .find("://")
        .and_then(|scheme| {
            url[scheme + 3..]
                .find('/')
                .map(|at| &url[scheme + 3 + at..])
        })
        .unwrap_or("");
    format!("{}{path}", endpoint.trim_end_matches('/'))
}

/// A run's speed and what it cost.
struct Figures {
    msgs_per_sec: f64,
    calls: CallsPerMessage,
}

/// Which side of a row a run measures.
#[derive(Debug, Clone, Copy)]
enum Side {
    Limit,
    Engine,
}

/// The median run of each side, and every run's speed in the order run.
struct Pair {
    limit: Figures,
    engine: Figures,
    limit_runs: Vec<f64>,
    engine_runs: Vec<f64>,
}

/// Runs the limit and the engine in turn, `repeats` times each: a run takes seconds, and LocalStack
/// shares the machine's cores with whatever else runs, so one pair alone says less than the
/// median of a few.
async fn median_pair(
    repeats: usize,
    mut run: impl AsyncFnMut(Side) -> Fallible<Figures>,
) -> Fallible<Pair> {
    let (mut limits, mut engines) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        limits.push(run(Side::Limit).await?);
        engines.push(run(Side::Engine).await?);
    }
    let speeds = |runs: &[Figures]| runs.iter().map(|run| run.msgs_per_sec).collect::<Vec<_>>();
    let (limit_runs, engine_runs) = (speeds(&limits), speeds(&engines));
    let median = |mut runs: Vec<Figures>| {
        runs.sort_by(|a, b| a.msgs_per_sec.total_cmp(&b.msgs_per_sec));
        runs.swap_remove(runs.len() / 2)
    };
    Ok(Pair {
        limit: median(limits),
        engine: median(engines),
        limit_runs,
        engine_runs,
    })
}

/// Consumes the queue with the subscriber (`pollers`, [`CONCURRENCY`], [`WAIT`]) from its start
/// until the last message is deleted.
async fn engine_consume(
    transport: &AwsTransport,
    queue: &str,
    pollers: usize,
    messages: u64,
) -> Fallible<Figures> {
    let deleted = Arc::new(Deleted::default());
    let broker = SqsBroker::with_transport(Hooked::new(
        transport.clone(),
        CountingDeletes::new(deleted.clone()),
    ));
    let queue = SqsQueue::new(queue)
        .pollers(pollers)
        .concurrency(CONCURRENCY)
        .wait(WAIT);
    PROBE.reset(false);
    let started = Instant::now();
    let running = TestApp::spawn(service(broker.clone(), queue)).await?;
    let done = deleted.wait_for(messages, PATIENCE).await?;
    let calls = broker.api_calls();
    running.stop().await?;
    assert!(PROBE.handled() >= messages);
    Ok(Figures {
        msgs_per_sec: messages as f64 / (done - started).as_secs_f64(),
        calls: CallsPerMessage::of(calls, messages),
    })
}

/// The limit for consuming: `loops` loops at once, each receiving up to 10 (long poll [`WAIT`]),
/// decoding each body as the subscriber does, and deleting them in one `DeleteMessageBatch`.
async fn plain_consume(
    client: &aws_sdk_sqs::Client,
    url: &str,
    loops: usize,
    messages: u64,
) -> Fallible<Figures> {
    let deleted = Arc::new(AtomicU64::new(0));
    let receives = Arc::new(AtomicU64::new(0));
    let deletes = Arc::new(AtomicU64::new(0));
    let done = Arc::new(OnceLock::<Instant>::new());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..loops {
        let (client, url) = (client.clone(), url.to_owned());
        let (deleted, receives, deletes, done) = (
            deleted.clone(),
            receives.clone(),
            deletes.clone(),
            done.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while deleted.load(Ordering::SeqCst) < messages {
                let received = client
                    .receive_message()
                    .queue_url(&url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(WAIT.as_secs() as i32)
                    .send()
                    .await?;
                receives.fetch_add(1, Ordering::SeqCst);
                let mut entries = Vec::new();
                for (index, message) in received.messages().iter().enumerate() {
                    let order: Order = serde_json::from_str(message.body().unwrap_or_default())?;
                    std::hint::black_box(&order);
                    entries.push(
                        DeleteMessageBatchRequestEntry::builder()
                            .id(index.to_string())
                            .receipt_handle(message.receipt_handle().unwrap_or_default())
                            .build()?,
                    );
                }
                if entries.is_empty() {
                    continue;
                }
                let answer = client
                    .delete_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await?;
                deletes.fetch_add(1, Ordering::SeqCst);
                if let Some(failed) = answer.failed().first() {
                    return Err(format!("delete failed: {failed:?}").into());
                }
                let now = deleted.fetch_add(answer.successful().len() as u64, Ordering::SeqCst)
                    + answer.successful().len() as u64;
                if now >= messages {
                    let _ = done.set(Instant::now());
                }
            }
            Fallible::Ok(())
        }));
    }
    for task in tasks {
        tokio::time::timeout(PATIENCE, task).await???;
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

/// Publishes the orders through a fresh broker: with one `send_batch`, or with a `send()` each
/// from [`SENDING_TASKS`] tasks, each taking the next order once its last send was answered.
async fn engine_publish(
    transport: &AwsTransport,
    queue: &str,
    workload: Workload,
    with: PublishWith,
    messages: u64,
) -> Fallible<Figures> {
    let broker = SqsBroker::with_transport(transport.clone());
    let publisher = broker.publisher(SqsQueue::new(queue));
    let orders: Arc<Vec<Order>> = Arc::new(
        (0..messages)
            .map(|id| Order::new(id, workload.customers(), 0))
            .collect(),
    );
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
            let next = Arc::new(AtomicU64::new(0));
            let tasks: Vec<_> = (0..SENDING_TASKS)
                .map(|_| {
                    let (publisher, orders, next) =
                        (publisher.clone(), orders.clone(), next.clone());
                    tokio::spawn(async move {
                        loop {
                            let id = next.fetch_add(1, Ordering::Relaxed);
                            let Some(order) = orders.get(id as usize) else {
                                return Fallible::Ok(());
                            };
                            workload.outgoing(&publisher, order).send().await?;
                        }
                    })
                })
                .collect();
            for task in tasks {
                tokio::time::timeout(PATIENCE, task).await???;
            }
        }
    }
    let took = started.elapsed();
    Ok(Figures {
        msgs_per_sec: messages as f64 / took.as_secs_f64(),
        calls: CallsPerMessage::of(broker.api_calls(), messages),
    })
}

/// The limit for publishing (and the pre-fill): [`PUBLISH_LOOPS`] loops at once, each sending its
/// share in `SendMessageBatch` calls of 10. On FIFO a group's orders are all in one loop's share,
/// in order, so every group keeps its order.
async fn plain_publish(
    client: &aws_sdk_sqs::Client,
    url: &str,
    workload: Workload,
    messages: u64,
) -> Fallible<Figures> {
    let sends = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for share in 0..PUBLISH_LOOPS {
        let (client, url, sends) = (client.clone(), url.to_owned(), sends.clone());
        let orders: Vec<Order> = (0..messages)
            .filter(|id| (id % workload.customers()) % PUBLISH_LOOPS == share)
            .map(|id| Order::new(id, workload.customers(), 0))
            .collect();
        tasks.push(tokio::spawn(async move {
            for batch in orders.chunks(10) {
                let entries = batch
                    .iter()
                    .enumerate()
                    .map(|(index, order)| {
                        let entry = SendMessageBatchRequestEntry::builder()
                            .id(index.to_string())
                            .message_body(order.body());
                        let entry = if workload.is_fifo() {
                            entry
                                .message_group_id(&order.customer)
                                .message_deduplication_id(order.id.to_string())
                        } else {
                            entry
                        };
                        entry.build()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let answer = client
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await?;
                sends.fetch_add(1, Ordering::SeqCst);
                if let Some(failed) = answer.failed().first() {
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
