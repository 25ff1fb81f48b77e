use rust_stream::handler::batch::BatchContext;
use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

#[subscriber("postings")]
async fn post(posting: &Posting, ctx: &mut BatchContext<'_>) {
    let _ = (posting.cents, ctx.len());
}

fn main() {}
