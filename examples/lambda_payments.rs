//! A payments service served on AWS Lambda: the same app definition as a server's, handed to
//! `rust_stream::lambda::serve` instead of `App::run`. Each SQS event's payments are booked in
//! order per account (a FIFO queue, the account as the group), each booking published to the
//! `booked` queue before its payment counts as handled; a negative amount is dead-lettered, and a
//! payment marked `flaky` fails its first attempt (the bank was down), which fails the later
//! payments of its account in the event too, as Lambda's FIFO partial batch responses require.
//!
//! Built as a Lambda `bootstrap` (see docs/lambda.md):
//!
//! ```text
//! cargo build --release --example lambda_payments --target x86_64-unknown-linux-musl
//! cp target/x86_64-unknown-linux-musl/release/examples/lambda_payments bootstrap
//! ```
//!
//! or with `cargo lambda build --release --example lambda_payments`. Run by the Lambda Runtime
//! API only: started without `AWS_LAMBDA_RUNTIME_API` it has nothing to serve. The tests run it
//! under the event source mapping's simulator (`tests/lambda.rs`), on LocalStack.
//!
//! Environment: `PAYMENTS_QUEUE` (default `payments.fifo`) and `BOOKED_QUEUE` (default
//! `payments-booked.fifo`), and the AWS SDK's own (`AWS_REGION`, `AWS_ENDPOINT_URL`, ...).

use rust_stream::prelude::*;
use rust_stream::Output;
use serde::{Deserialize, Serialize};

/// A payment to book.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    account: String,
    amount_cents: i64,
    /// Fails its first attempt, as a bank that is down would.
    #[serde(default)]
    flaky: bool,
}

/// Books each payment and publishes it to the `booked` queue.
struct Book;

impl Handle<Payment, Output<Payment>> for Book {
    async fn handle(
        &self,
        payment: &Payment,
        booked: &Output<Payment>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if payment.amount_cents < 0 {
            return Err(HandlerOutcome::dead_letter("a negative amount"));
        }
        if payment.flaky && ctx.attempt() == 1 {
            return Err(HandlerOutcome::failed("the bank is down"));
        }
        ctx.publish(booked.message(payment).group_id(&payment.account));
        tracing::info!(payment.id = payment.id, payment.account = %payment.account, "payment booked");
        Ok(())
    }
}

fn queue_from_env(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Lambda sends stdout and stderr to CloudWatch Logs: no colours, no target.
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();
    let payments = queue_from_env("PAYMENTS_QUEUE", "payments.fifo");
    let booked = queue_from_env("BOOKED_QUEUE", "payments-booked.fifo");
    let app = RustStream::new(AppInfo::new("lambda-payments", "0.1.0")).with_broker(
        SqsBroker::from_env().await?,
        |b| {
            b.include(
                subscriber(
                    SqsQueue::new(&payments).create_if_missing().dead_letter(
                        format!("{}-dlq.fifo", payments.trim_end_matches(".fifo")),
                        5,
                    ),
                    Book,
                )
                .outputs(Output::<Payment>::new(
                    SqsQueue::new(&booked).create_if_missing(),
                ))
                .build(),
            );
        },
    );
    rust_stream::lambda::serve(app).await?;
    Ok(())
}
