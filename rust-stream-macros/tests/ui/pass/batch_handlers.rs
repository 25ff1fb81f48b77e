//! Batch subscribers: `&[T]` with `batch(max = .., window = ..)`, every return type a batch
//! handler may have, every kind of parameter after the messages, windows as literals with a unit
//! and as `Duration` expressions, `max` as an expression, and `call` from a test.
use std::fmt;
use std::time::Duration;

use rust_stream::handler::batch::{BatchContext, BatchOutcome};
use rust_stream::prelude::*;
use rust_stream::testing::{TestBatch, TestContext};
use rust_stream::{Output, RetryPolicy, State};

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[derive(serde::Serialize)]
struct Receipt {
    cents: i64,
}

#[derive(Clone)]
struct Ledger {
    name: &'static str,
}

#[derive(Debug)]
struct Refused;

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the ledger refused the batch")
    }
}

const MAX: usize = 50;

/// Every kind of parameter; an outcome per message.
#[subscriber(
    "postings",
    batch(max = 10, window = 100ms),
    concurrency = 2,
    outputs(receipts = "receipts"),
)]
async fn post(
    postings: &[Posting],
    State(ledger): State<Ledger>,
    receipts: &Output<Receipt>,
    ctx: &mut BatchContext<'_>,
) -> BatchOutcome {
    let mut outcome = BatchOutcome::ack();
    for (index, posting) in postings.iter().enumerate() {
        if posting.cents == 0 {
            outcome.set(index, HandlerOutcome::dead_letter(ledger.name));
        } else {
            ctx[index].publish(receipts.message(&Receipt { cents: posting.cents }));
        }
    }
    outcome
}

/// `()` acks every message; the context only read; a window in seconds, `max` a constant.
#[subscriber("unit", batch(window = 2s, max = MAX))]
async fn unit(postings: &[Posting], ctx: &BatchContext<'_>) {
    let _ = (postings.len(), ctx.len(), ctx.is_stopping());
}

/// `Result<(), E>`: `Err` fails every message; a fractional window.
#[subscriber("fallible", batch(max = 1000, window = 0.5s))]
async fn fallible(postings: &[Posting]) -> Result<(), Refused> {
    if postings.iter().any(|posting| posting.cents < 0) {
        return Err(Refused);
    }
    std::future::ready(()).await;
    Ok(())
}

/// `Result<BatchOutcome, E>`, `?` in the body, a window in minutes and state by value.
#[subscriber("settled", batch(max = 1, window = 5m), retry = RetryPolicy::fixed(Duration::from_secs(1)))]
async fn settled(postings: &[Posting], ledger: State<Ledger>) -> Result<BatchOutcome, String> {
    let first = postings.first().ok_or_else(|| ledger.0.name.to_owned())?;
    Ok(BatchOutcome::all(HandlerOutcome::ack()).with(0, match first.cents {
        0 => HandlerOutcome::retry(),
        _ => HandlerOutcome::ack(),
    }))
}

/// A `Duration` expression as the window, and a FIFO source.
#[subscriber(SqsQueue::new("postings.fifo"), batch(max = MAX / 5, window = Duration::from_millis(250)))]
async fn by_duration(_postings: &[Posting]) -> BatchOutcome {
    BatchOutcome::ack()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let app = RustStream::new(AppInfo::new("batch-handlers", "0.1.0"))
        .with_state(Ledger { name: "main" })
        .with_broker(SqsBroker::in_process(), |b| {
            b.include(post)
                .include(unit)
                .include(fallible)
                .include(settled)
                .include(by_duration.on(SqsQueue::new("postings-eu.fifo")));
        });
    let _ = app;

    let postings = [Posting { cents: 5 }, Posting { cents: -1 }];
    assert_eq!(fallible::call(&postings).await.unwrap_err().to_string(), "the ledger refused the batch");
    let outcome = settled::call(&postings[..1], State(Ledger { name: "main" })).await;
    assert_eq!(outcome.unwrap().outcome_of(0), &HandlerOutcome::ack());

    // A batch context made for the test: what the body published, message by message.
    let batch = TestBatch::new([TestContext::new(), TestContext::new()]);
    let mut ctx = batch.build();
    let postings = [Posting { cents: 5 }, Posting { cents: 0 }];
    let receipts = Output::new("receipts");
    let outcome = post::call(&postings, State(Ledger { name: "main" }), &receipts, &mut ctx).await;
    assert_eq!(outcome.outcome_of(1), &HandlerOutcome::dead_letter("main"));
    assert_eq!((ctx[0].published().len(), ctx[1].published().len()), (1, 0));
    unit::call(&postings, &batch.build()).await;
}
