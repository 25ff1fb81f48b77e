use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("postings", batch(max = 10, window = 100ms))]
async fn post(postings: &[Posting]) -> HandlerOutcome {
    let _ = postings.len();
    HandlerOutcome::ack()
}

fn main() {}
