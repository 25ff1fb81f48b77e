//! Reminders due days ahead, through the outbox: one scheduled three days ahead and delivered
//! then, another scheduled and cancelled in a later transaction, never delivered.
//!
//! It runs on the in-process account and store with tokio's clock paused, so the three days
//! pass in about a second: the relay sleeps until the next due message, the clock jumps there.
//! The reminder is visible within the second after it is due (three days to the second).
//! On a service the store is SQLite or PostgreSQL and the days are real; the code is the same.
//!
//! ```text
//! cargo run --example reminders
//! ```

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::outbox::Outbox;
use rust_stream::prelude::*;
use rust_stream::store::memory::MemoryStore;
use rust_stream::store::Cancellation;
use rust_stream::testing::TestApp;
use rust_stream::State;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

const DAY: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Serialize, Deserialize)]
struct Reminder {
    invoice: String,
    text: String,
}

/// What the consumer saw: each reminder's invoice and when it came, after the start.
#[derive(Clone)]
struct Delivered {
    start: Instant,
    log: Arc<Mutex<Vec<(Duration, String)>>>,
}

/// Sends the reminder (here: logs it).
#[subscriber(SqsQueue::new("reminders").create_if_missing().dead_letter("reminders-dlq", 5))]
async fn remind(reminder: &Reminder, State(delivered): State<Delivered>) -> HandlerOutcome {
    let at = delivered.start.elapsed();
    tracing::info!(
        invoice = %reminder.invoice,
        day = format!("{:.3}", at.as_secs_f64() / DAY.as_secs_f64()),
        "reminder delivered: {}",
        reminder.text
    );
    delivered
        .log
        .lock()
        .unwrap()
        .push((at, reminder.invoice.clone()));
    HandlerOutcome::ack()
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(false)
        .init();
    // A paused clock: what the in-process account and store run on in tests.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("reminders: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let broker = SqsBroker::in_process();
    let store = MemoryStore::new();
    let queue = SqsQueue::new("reminders").create_if_missing();
    let reminders = Outbox::new(store.clone(), broker.publisher(queue));

    let delivered = Delivered {
        start,
        log: Arc::default(),
    };
    // Each reminder is written in the transaction that issues its invoice.
    for invoice in ["inv-1001", "inv-1002"] {
        let mut transaction = store.begin();
        reminders
            .message(&Reminder {
                invoice: invoice.to_owned(),
                text: format!("{invoice} is due for payment"),
            })
            .delay(3 * DAY)
            .schedule_key(invoice)
            .send(&mut transaction)
            .await?;
        store.commit(transaction);
        tracing::info!(invoice, "reminder scheduled three days ahead");
    }

    // A day later inv-1002 is paid: its reminder is cancelled in the payment's transaction.
    tokio::time::sleep(DAY).await;
    let mut transaction = store.begin();
    let cancelled = reminders.cancel(&mut transaction, "inv-1002").await?;
    store.commit(transaction);
    assert_eq!(cancelled, Cancellation::Cancelled);
    tracing::info!(invoice = "inv-1002", "paid: reminder cancelled");

    // The service (its relay and its consumer) starts on the last day here, to keep the example
    // at about a second: a consumer's long polls over three days of paused clock take seconds.
    // The reminders wait in the store meanwhile, as they would across a deploy.
    tokio::time::sleep(DAY + DAY / 2).await;
    let app = RustStream::new(AppInfo::new("billing", "0.1.0"))
        .with_state(delivered.clone())
        .with_broker(broker.clone(), |b| {
            b.worker(broker.relay(store.clone()));
            b.include(remind);
        });

    let running = TestApp::spawn(app).await?;
    tokio::time::sleep(DAY / 2 + Duration::from_secs(60)).await;
    running.stop().await?;

    let received = delivered.log.lock().unwrap();
    let invoices: Vec<&str> = received
        .iter()
        .map(|(_, invoice)| invoice.as_str())
        .collect();
    if invoices != ["inv-1001"] {
        return Err(format!("expected only inv-1001's reminder, got {invoices:?}").into());
    }
    let (at, _) = &received[0];
    if *at < 3 * DAY || *at > 3 * DAY + Duration::from_secs(1) {
        return Err(format!("inv-1001's reminder came at {at:?}, not three days after").into());
    }
    println!("one reminder delivered three days ahead, one cancelled: done");
    Ok(())
}
