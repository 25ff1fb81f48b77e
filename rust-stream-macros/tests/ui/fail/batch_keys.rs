use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("postings", batch(max = 10, window = 100ms, size = 5, flush = 1s))]
async fn post(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("twice", batch(max = 10, window = 100ms, max = 20))]
async fn twice(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("missing", batch(max = 10))]
async fn missing(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("positional", batch(10, 100ms))]
async fn positional(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("assigned", batch = 10)]
async fn assigned(postings: &[Posting]) {
    let _ = postings.len();
}

fn main() {}
