use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("postings", batch(max = 10, window = 100ms))]
async fn post(postings: &[Posting], ctx: &mut Context<'_>) {
    let _ = (postings.len(), ctx.message_id());
}

fn main() {}
