//! A queue's sender: the `SendMessageBatch` batchers its sends go through.
//!
//! A standard queue has one batcher with several calls in flight: order is not promised there.
//! A FIFO queue must store each message group in the order of its sends, and it has several
//! in-order batchers, *shards*, each with one call in flight; a stable hash of the group id picks
//! a message's shard. A group always maps to the same shard, so its messages go out in order
//! one call at a time, while other groups' calls go out beside it on the other shards.
//!
//! Why shards rather than one batcher that keeps several calls in flight but never two carrying
//! one group:
//!
//! - **A failed entry.** A shard is the in-order batcher as it always was: it retries a failed
//!   call, or a failed entry, for up to 20 s before its next call goes out, so a group's later
//!   messages already queued never pass an earlier one still being retried, and go on once it is
//!   answered (stored, or failed for good and answered as an error), as before. A group-aware
//!   batcher would have to hold each group of a retried call out of every other call for as long,
//!   and track which later entries share a group with which failure: the same rule, more state.
//! - **Few busy groups.** A shard's calls carry only its own groups, in the order sent, so sends
//!   that cycle over a handful of groups (every call of 10 then holds every group) still spread
//!   over the shards. A batcher that never lets two calls in flight share a group would send
//!   those one at a time.
//! - **What it costs.** Each shard gathers alone, so messages of several groups that one call
//!   would have carried may take a call per shard: a `send_batch` of 10 over 10 groups makes up
//!   to 4 calls where it made 1, and sends arriving one by one share calls less. A large
//!   `send_batch` still fills its calls (it is split by shard before it is packed: at most one
//!   partial call per shard), and groups spread over the shards only as evenly as their hashes
//!   do. A submission that fills a call goes out at once, as it did in one batcher: its parts do
//!   not wait the linger for company.
//!
//! **Latency.** A shard never lingers: when its call is free a send goes out at once, and sends
//! that arrive while the call is out gather for the next one. With one call in flight, a linger
//! would only add to the wait: a lone send would wait it out on its shard (four shards share
//! 10,000 sends a second so thinly that each waited most of the 5 ms), and the entries arriving
//! during a call would wait for the call after the linger's. Under load the calls still fill,
//! with what queued during the call before.
//!
//! Within one call, entries of one group go in the order sent and SQS stores a batch in request
//! order. Should SQS store a group's later entry of a call and fail an earlier one in a way worth
//! retrying, the retry lands behind it: the batcher cannot take back a stored message, and only
//! one message of a group a call would prevent it, at ten times the calls.

use std::time::Duration;

use crate::client::batch::{BatchSettings, Batcher, SendBatch};
use crate::model::rules::MAX_BATCH_ENTRIES;
use crate::transport::{SendMessage, SentMessage, SharedTransport, TransportError};

/// The in-order batchers of a FIFO queue's sends: as many calls in flight as a standard queue's
/// batcher has.
pub(crate) const FIFO_SEND_SHARDS: usize = 4;

/// A queue's send batchers. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Sender {
    /// One batcher for a standard queue; [`FIFO_SEND_SHARDS`] in-order ones for a FIFO queue.
    shards: Vec<Batcher<SendBatch>>,
}

impl Sender {
    /// A standard queue's sender: one batcher, with the calls in flight `settings` allow.
    pub(crate) fn standard(transport: SharedTransport, url: &str, settings: BatchSettings) -> Self {
        Self {
            shards: vec![Batcher::spawn(transport, url.to_owned(), settings)],
        }
    }

    /// A FIFO queue's sender: `shards` batchers of one call in flight each, which never linger
    /// (see the module's doc on latency).
    pub(crate) fn fifo(transport: SharedTransport, url: &str, shards: usize) -> Self {
        let in_order = BatchSettings {
            linger: Duration::ZERO,
            max_in_flight: 1,
        };
        Self {
            shards: (0..shards.max(1))
                .map(|_| Batcher::spawn(transport.clone(), url.to_owned(), in_order))
                .collect(),
        }
    }

    /// Sends messages and answers each, in the order given. Each group's messages go out in that
    /// order through its shard; the shards' calls go out at once.
    pub(crate) async fn submit(
        &self,
        messages: Vec<SendMessage>,
    ) -> Vec<Result<SentMessage, TransportError>> {
        let count = self.shards.len();
        let shard_of = |message: &SendMessage| shard(message.group_id.as_deref(), count);
        let first = messages.first().map(shard_of).unwrap_or(0);
        if messages.iter().all(|message| shard_of(message) == first) {
            return self.shards[first].submit(messages).await;
        }
        // Split by shard, each keeping the order given, and remember where each answer goes.
        let mut split: Vec<(Vec<SendMessage>, Vec<usize>)> = vec![Default::default(); count];
        for (position, message) in messages.into_iter().enumerate() {
            let (messages, positions) = &mut split[shard_of(&message)];
            messages.push(message);
            positions.push(position);
        }
        let total = split.iter().map(|(_, positions)| positions.len()).sum();
        let mut waiting = Vec::new();
        let mut positions = Vec::new();
        // A submission that fills a call would have gone out at once in one batcher; its parts do
        // too, rather than each waiting the linger for company it already had.
        let eager = total >= MAX_BATCH_ENTRIES;
        for (batcher, (messages, at)) in self.shards.iter().zip(split) {
            if !messages.is_empty() {
                waiting.push(batcher.submit_with(messages, eager));
                positions.push(at);
            }
        }
        let mut answers: Vec<Option<Result<SentMessage, TransportError>>> =
            (0..total).map(|_| None).collect();
        for (answered, at) in futures_util::future::join_all(waiting)
            .await
            .into_iter()
            .zip(positions)
        {
            for (answer, position) in answered.into_iter().zip(at) {
                answers[position] = Some(answer);
            }
        }
        answers
            .into_iter()
            .map(|answer| answer.expect("every shard answers each of its messages"))
            .collect()
    }
}

/// The shard of a group: a hash of its id (rustc's FxHash, fixed within a process, which is all
/// a group's order needs). A message without a group (which a FIFO queue refuses) goes to the
/// first.
fn shard(group: Option<&str>, shards: usize) -> usize {
    use std::hash::BuildHasher as _;
    if shards <= 1 {
        return 0;
    }
    let Some(group) = group else { return 0 };
    let hash = rustc_hash::FxBuildHasher.hash_one(group);
    (hash % shards as u64) as usize
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::account::Account;
    use crate::client::batch::tests::Recorder;
    use crate::transport::QueueAttributes;

    #[tokio::test(start_paused = true)]
    async fn a_shard_sends_at_once_when_its_call_is_free_and_gathers_while_it_is_out() {
        let round_trip = Duration::from_millis(20);
        let mut transport = Recorder::default();
        transport.round_trip = round_trip;
        let mut attributes = QueueAttributes::new();
        attributes.insert("FifoQueue".into(), "true".into());
        let url = transport
            .account
            .create_queue("q.fifo", attributes)
            .await
            .unwrap();
        let sender = Sender::fifo(Arc::new(transport.clone()), &url, FIFO_SEND_SHARDS);
        let send = |n: usize| {
            let sender = sender.clone();
            let message = SendMessage::new(format!("m{n}"))
                .group_id("g".to_owned())
                .dedup_id(format!("m{n}"));
            tokio::spawn(async move { sender.submit(vec![message]).await })
        };

        let started = Instant::now();
        assert!(send(0).await.unwrap()[0].is_ok());
        assert_eq!(
            started.elapsed(),
            round_trip,
            "a lone send waits for its call only, no linger"
        );

        // Sent one by one while a call is out: they wait for it, then go out together behind it.
        let started = Instant::now();
        let mut sends = vec![send(1)];
        tokio::time::sleep(Duration::from_millis(1)).await;
        sends.extend((2..=5).map(send));
        for sent in sends {
            assert!(sent.await.unwrap()[0].is_ok());
        }
        assert_eq!(started.elapsed(), round_trip * 2);
        let body = |n: usize| format!("m{n}");
        assert_eq!(
            transport.calls(),
            vec![
                vec![body(0)],
                vec![body(1)],
                vec![body(2), body(3), body(4), body(5)]
            ],
            "one call at a time per group, in the order sent"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_that_fills_a_call_goes_at_once_over_the_shards() {
        let account = Account::new();
        let mut attributes = QueueAttributes::new();
        attributes.insert("FifoQueue".into(), "true".into());
        let url = account.create_queue("q.fifo", attributes).await.unwrap();
        let sender = Sender::fifo(Arc::new(account), &url, FIFO_SEND_SHARDS);
        let full: Vec<SendMessage> = (0..10)
            .map(|n| {
                SendMessage::new(format!("m{n}"))
                    .group_id(format!("g{n}"))
                    .dedup_id(format!("m{n}"))
            })
            .collect();
        let mut shards: Vec<usize> = full
            .iter()
            .map(|message| shard(message.group_id.as_deref(), FIFO_SEND_SHARDS))
            .collect();
        shards.sort_unstable();
        shards.dedup();
        assert!(shards.len() > 1, "the ten groups spread over shards");
        let started = Instant::now();
        assert!(sender.submit(full).await.iter().all(Result::is_ok));
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "no shard waited for company"
        );
    }

    #[test]
    fn a_group_always_maps_to_the_same_shard_and_groups_spread_over_all_shards() {
        let groups: Vec<String> = (0..1000).map(|n| format!("customer-{n}")).collect();
        let mut per_shard = [0usize; FIFO_SEND_SHARDS];
        for group in &groups {
            let at = shard(Some(group), FIFO_SEND_SHARDS);
            assert_eq!(at, shard(Some(group), FIFO_SEND_SHARDS));
            per_shard[at] += 1;
        }
        for count in per_shard {
            assert!((200..300).contains(&count), "{per_shard:?}");
        }
        let letters: Vec<usize> = ["a", "e", "i", "m", "q", "u"]
            .into_iter()
            .map(|group| shard(Some(group), FIFO_SEND_SHARDS))
            .collect();
        assert!(
            letters.iter().any(|at| *at != letters[0]),
            "ids that differ only in their bytes' high bits spread too: {letters:?}"
        );
        assert_eq!(shard(None, FIFO_SEND_SHARDS), 0);
        assert_eq!(shard(Some("any"), 1), 0);
    }
}
