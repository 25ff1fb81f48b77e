use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("postings", batch(max = 10, window = 100ms))]
async fn post(posting: &Posting) {
    let _ = posting.cents;
}

#[subscriber("postings-kept", batch(max = 10, window = 100ms))]
async fn keep(postings: &Vec<Posting>) {
    let _ = postings.len();
}

fn main() {}
