use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("postings")]
async fn post(postings: &[Posting]) {
    let _ = postings.len();
}

fn main() {}
