//! Every return type a subscriber may have, with `?` and early `return` in the body.
use std::fmt;

use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
    note: String,
}

#[derive(Debug)]
struct Declined(u64);

impl fmt::Display for Declined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "order {} declined", self.0)
    }
}

fn approve(order: &Order) -> Result<&str, Declined> {
    if order.id == 0 {
        Err(Declined(order.id))
    } else {
        Ok(&order.note)
    }
}

#[subscriber("outcome")]
async fn outcome(order: &Order) -> HandlerOutcome {
    if order.id == 0 {
        return HandlerOutcome::retry();
    }
    HandlerOutcome::ack()
}

#[subscriber("unit")]
async fn unit(order: &Order) {
    if order.id == 0 {
        return;
    }
    let _ = order.id;
}

#[subscriber("unit-written")]
async fn unit_written(_order: &Order) -> () {}

#[subscriber("fallible")]
async fn fallible(order: &Order) -> Result<(), Declined> {
    // The borrow of the message lives across the await, as in any async fn.
    let note = approve(order)?;
    std::future::ready(()).await;
    let _ = note.len();
    Ok(())
}

#[subscriber("boxed-error")]
async fn boxed_error(order: &Order) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let _: u64 = order.note.parse()?;
    Ok(())
}

#[subscriber("settled")]
async fn settled(order: &Order) -> Result<(), HandlerOutcome> {
    let note = approve(order).map_err(|declined| HandlerOutcome::dead_letter(declined.to_string()))?;
    if note.is_empty() {
        return Err(HandlerOutcome::retry_after(std::time::Duration::from_secs(5)));
    }
    Ok(())
}

fn main() {
    let app = RustStream::new(AppInfo::new("every-return", "0.1.0")).with_broker(
        SqsBroker::in_process(),
        |b| {
            b.include(outcome)
                .include(unit)
                .include(unit_written)
                .include(fallible)
                .include(boxed_error)
                .include(settled);
        },
    );
    let _ = app;
    // No doc comment, no description.
    assert_eq!(rust_stream::Subscriber::from(unit).description(), None);
}
