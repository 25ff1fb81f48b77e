use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("minutes", batch(max = 10, window = 6m))]
async fn minutes(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("seconds", batch(max = 10, window = 301s))]
async fn seconds(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("duration", batch(max = 10, window = std::time::Duration::from_secs(600)))]
async fn duration(postings: &[Posting]) {
    let _ = postings.len();
}

fn main() {}
