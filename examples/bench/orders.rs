//! The service under test and what it is fed: 100-byte JSON orders, the queues they go to, and
//! the one `#[subscriber]` that takes them (decodes with serde, counts, acks).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use rust_stream::handler::middleware::{from_fn, Call, Next, Outcomes};
use rust_stream::prelude::*;
use rust_stream::{Outgoing, Publisher};
use serde::{Deserialize, Serialize};

use crate::Fallible;

/// The size of every body the benchmark sends.
pub const BODY_BYTES: usize = 100;

/// An order as a service receives it: a small JSON document, padded to [`BODY_BYTES`].
#[derive(Debug, Serialize, Deserialize)]
pub struct Order {
    pub id: u64,
    /// Also the order's FIFO message group: a customer's orders are handled in order.
    pub customer: String,
    pub cents: u64,
    pub currency: String,
    /// When it was published, in microseconds after [`epoch`]; 0 where latency is not measured.
    pub sent_us: u64,
    pub note: String,
}

impl Order {
    /// Order `id`, of customer `id % customers`, that encodes to exactly [`BODY_BYTES`].
    pub fn new(id: u64, customers: u64, sent_us: u64) -> Self {
        let mut order = Self {
            id,
            customer: format!("cust-{:05}", id % customers),
            cents: id.wrapping_mul(7919) % 1_000_000,
            currency: "EUR".to_owned(),
            sent_us,
            note: String::new(),
        };
        let unpadded = order.body().len();
        assert!(unpadded <= BODY_BYTES, "an order of {unpadded} bytes");
        order.note = "x".repeat(BODY_BYTES - unpadded);
        order
    }

    /// Order `id`, stamped now.
    pub fn stamped(id: u64, customers: u64) -> Self {
        Self::new(id, customers, since_epoch_us())
    }

    /// The order as JSON, as the subscriber's codec (serde_json) writes it.
    pub fn body(&self) -> String {
        serde_json::to_string(self).expect("an order encodes")
    }
}

/// A queue the benchmark consumes or fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Standard,
    /// A FIFO queue whose orders are spread round-robin over this many groups (customers).
    Fifo {
        groups: u64,
    },
}

impl Workload {
    /// The throughput section's workloads, in the order of its table.
    pub const THROUGHPUT: [Self; 3] = [
        Self::Standard,
        Self::Fifo { groups: 100 },
        Self::Fifo { groups: 10_000 },
    ];

    /// A throughput workload by its command-line name: `standard`, `fifo-100`, `fifo-10000`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "standard" => Some(Self::Standard),
            "fifo-100" => Some(Self::Fifo { groups: 100 }),
            "fifo-10000" => Some(Self::Fifo { groups: 10_000 }),
            _ => None,
        }
    }

    /// How the tables name it.
    /// The name `parse` reads back.
    pub fn name(self) -> String {
        match self {
            Self::Standard => "standard".to_owned(),
            Self::Fifo { groups } => format!("fifo-{groups}"),
        }
    }

    pub fn label(self) -> String {
        match self {
            Self::Standard => "standard".to_owned(),
            Self::Fifo { groups: 1 } => "FIFO, 1 hot group".to_owned(),
            Self::Fifo { groups } => format!("FIFO, {} groups", crate::report::thousands(groups)),
        }
    }

    pub fn is_fifo(self) -> bool {
        matches!(self, Self::Fifo { .. })
    }

    /// Customers the orders are spread over: the groups on FIFO; on a standard queue they only
    /// vary the bodies.
    pub fn customers(self) -> u64 {
        match self {
            Self::Standard => 100,
            Self::Fifo { groups } => groups,
        }
    }

    /// The in-process queue of this kind, created on first use.
    pub fn queue(self) -> SqsQueue {
        let name = if self.is_fifo() {
            "orders.fifo"
        } else {
            "orders"
        };
        SqsQueue::new(name).create_if_missing()
    }

    /// `order` as a message of `publisher`, in its customer's group on FIFO (with the
    /// deduplication id the publisher generates).
    pub fn outgoing(self, publisher: &Publisher, order: &Order) -> Outgoing {
        let message = publisher.message(order);
        if self.is_fifo() {
            message.group_id(order.customer.clone())
        } else {
            message
        }
    }
}

/// Publishes orders `ids` with `send_batch`, `chunk` at a time; fails on the first refused one.
pub async fn publish_orders(
    publisher: &Publisher,
    workload: Workload,
    ids: Range<u64>,
    chunk: u64,
) -> Fallible<()> {
    let mut start = ids.start;
    while start < ids.end {
        let end = (start + chunk).min(ids.end);
        let batch = (start..end)
            .map(|id| workload.outgoing(publisher, &Order::new(id, workload.customers(), 0)));
        for result in publisher.send_batch(batch).await {
            result?;
        }
        start = end;
    }
    Ok(())
}

/// The instant latencies are stamped against: the first use in the process.
pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Microseconds since [`epoch`].
pub fn since_epoch_us() -> u64 {
    epoch().elapsed().as_micros() as u64
}

/// What the subscriber saw. A static rather than app state, so that the handler costs no more
/// than the channel's consumer does (a state lookup per message would be charged to the engine).
#[derive(Debug)]
pub struct Probe {
    handled: AtomicU64,
    recording: AtomicBool,
    /// `(order id, microseconds from publish to handled)`, while recording.
    latencies: Mutex<Vec<(u64, u64)>>,
}

pub static PROBE: Probe = Probe {
    handled: AtomicU64::new(0),
    recording: AtomicBool::new(false),
    latencies: Mutex::new(Vec::new()),
};

impl Probe {
    /// Forgets the last run; records latencies from now on when `record_latency`.
    pub fn reset(&self, record_latency: bool) {
        self.handled.store(0, Ordering::SeqCst);
        self.latencies_now().clear();
        self.recording.store(record_latency, Ordering::SeqCst);
    }

    pub fn handled(&self) -> u64 {
        self.handled.load(Ordering::SeqCst)
    }

    /// The latencies recorded since [`reset`](Self::reset).
    pub fn take_latencies(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.latencies_now())
    }

    /// Waits until `count` orders were handled; fails after `patience`.
    pub async fn wait_handled(&self, count: u64, patience: Duration) -> Fallible<()> {
        let deadline = Instant::now() + patience;
        while self.handled() < count {
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} of {count} orders handled after {patience:?}",
                    self.handled()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    fn took(&self, order: &Order) {
        if self.recording.load(Ordering::Relaxed) {
            let latency = since_epoch_us().saturating_sub(order.sent_us);
            self.latencies_now().push((order.id, latency));
        }
        self.handled.fetch_add(1, Ordering::Relaxed);
    }

    fn latencies_now(&self) -> std::sync::MutexGuard<'_, Vec<(u64, u64)>> {
        self.latencies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Takes one order: decoded by the subscriber (serde_json), counted, acknowledged. The
/// benchmark mounts it on each queue with that run's settings (`subscriber(queue, take_order)`);
/// the queue named here is not used.
#[subscriber("orders")]
pub async fn take_order(order: &Order) {
    PROBE.took(std::hint::black_box(order));
}

/// A service of one subscription: [`take_order`] on `queue`.
pub fn service(broker: SqsBroker, queue: SqsQueue) -> impl App {
    RustStream::new(AppInfo::new("bench", "0.1.0")).with_broker(broker, |b| {
        b.include(subscriber(queue, take_order).build());
    })
}

/// A middleware layer that only passes each call on: what a layer costs, with nothing of its own.
async fn pass_on(call: Call, next: Next) -> Outcomes {
    next.run(call).await
}

/// [`service`] with one app layer, [`pass_on`], around [`take_order`].
pub fn layered_service(broker: SqsBroker, queue: SqsQueue) -> impl App {
    RustStream::new(AppInfo::new("bench", "0.1.0")).with_broker(broker, |b| {
        b.layer(from_fn(pass_on));
        b.include(subscriber(queue, take_order).build());
    })
}
