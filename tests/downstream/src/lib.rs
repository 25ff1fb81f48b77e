//! A payments service: books each payment as an entry in the ledger.

use rust_stream::prelude::*;
use rust_stream::Output;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub struct Payment {
    pub id: u64,
    pub account: String,
    pub cents: i64,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub payment: u64,
    pub account: String,
    pub cents: i64,
}

/// The service's queue names, which differ per environment (and per test run).
pub struct Queues {
    pub payments: String,
    pub ledger: String,
}

/// Books a payment as a ledger entry; a payment that moves no money is dead-lettered.
struct Book;

impl Handle<Payment, Output<Entry>> for Book {
    async fn handle(
        &self,
        payment: &Payment,
        ledger: &Output<Entry>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if payment.cents == 0 {
            let reason = format!("payment {} moves no money", payment.id);
            return Err(HandlerOutcome::dead_letter(reason));
        }
        ctx.publish(ledger.message(&Entry {
            payment: payment.id,
            account: payment.account.clone(),
            cents: payment.cents,
        }));
        Ok(())
    }
}

pub fn service(broker: SqsBroker, queues: &Queues) -> impl App {
    let payments = SqsQueue::new(&queues.payments)
        .create_if_missing()
        .dead_letter(format!("{}-dlq", queues.payments), 3);
    let ledger = Output::<Entry>::new(SqsQueue::new(&queues.ledger).create_if_missing());
    RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(broker, |b| {
        b.include(subscriber(payments, Book).outputs(ledger).build());
    })
}
