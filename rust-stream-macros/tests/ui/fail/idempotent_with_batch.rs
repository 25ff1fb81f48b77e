use rust_stream::inbox::Inbox;
use rust_stream::prelude::*;
use rust_stream::store::memory::MemoryStore;

#[derive(serde::Deserialize)]
struct Posting {
    cents: i64,
}

fn postings_inbox() -> Inbox<MemoryStore> {
    Inbox::new(MemoryStore::new())
}

/// An inbox claims one message's key a call: a batch handler takes none.
#[subscriber("postings", batch(max = 10, window = 100ms), idempotent = postings_inbox())]
async fn post(postings: &[Posting]) {
    let _ = postings.len();
}

/// A slice without `batch(..)` is the one error: the inbox is not reported again.
#[subscriber("postings", idempotent = postings_inbox())]
async fn keep(postings: &[Posting]) {
    let _ = postings.iter().map(|posting| posting.cents).sum::<i64>();
}

fn main() {}
