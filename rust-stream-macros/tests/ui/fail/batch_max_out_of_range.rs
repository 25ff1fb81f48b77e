use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("none", batch(max = 0, window = 100ms))]
async fn none(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("too-many", batch(max = 1001, window = 100ms))]
async fn too_many(postings: &[Posting]) {
    let _ = postings.len();
}

#[subscriber("with-unit", batch(max = 10ms, window = 100ms))]
async fn with_unit(postings: &[Posting]) {
    let _ = postings.len();
}

fn main() {}
