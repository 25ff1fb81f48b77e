use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("bare", batch(max = 10, window = 100))]
async fn bare(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("hours", batch(max = 10, window = 1h))]
async fn hours(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("text", batch(max = 10, window = "100ms"))]
async fn text(postings: &[Posting]) {
    let _ = postings.len();
}

fn main() {}
