//! Publishing to a FIFO queue in parallel across message groups, on both backends: calls for
//! different groups are in flight at once, never two carrying the same group, and every group is
//! stored in the order it was sent; a group whose message fails and is retried waits behind it
//! (its later messages, already queued, are stored after it) while other groups go on.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::backend::Backend;
use rust_stream::model::rules::ErrorKind;
use rust_stream::prelude::*;
use rust_stream::testing::eventually;
use rust_stream::transport::layer::{Hooked, Hooks};
use rust_stream::transport::{
    BatchFailure, BatchResult, DeleteEntry, ReceiveMessage, SendBatchEntry, SentMessage, Transport,
    TransportError,
};
use rust_stream::{PublishError, Publisher};

both_backends!(
    many_groups_go_out_side_by_side_each_in_the_order_sent,
    a_group_waits_behind_its_failed_message_while_other_groups_go_on,
);

/// Hooks that watch the `SendMessageBatch` calls going through them: how many are in flight at
/// once and whether two in flight ever carry one group. Each call takes at least `round_trip`
/// before it reaches the backend, as a network round trip would (the in-process account answers
/// at once). It may fail the entry of one body, as SQS fails an entry on its side
/// (`SenderFault: false`, worth retrying), a number of times.
#[derive(Clone)]
struct Watched {
    round_trip: Duration,
    watch: Arc<Mutex<Watch>>,
}

#[derive(Default)]
struct Watch {
    /// Calls in flight carrying each group.
    groups_in_flight: HashMap<String, usize>,
    calls_in_flight: usize,
    most_calls_in_flight: usize,
    /// Groups that a call carried while another call carrying them was in flight.
    overlapping_groups: BTreeSet<String>,
    /// The body whose entry fails, and how many more of its tries fail.
    failing: Option<(String, usize)>,
    /// Tries of the failing entry that failed.
    failures: usize,
    /// Whether the failing entry has failed and is not stored yet.
    retrying: bool,
    /// Calls that went out while the failing entry waited for its next try.
    calls_while_retrying: usize,
}

impl Watched {
    fn new() -> Self {
        Self {
            round_trip: Duration::from_millis(5),
            watch: Arc::default(),
        }
    }

    /// Fails the entry with this body on its first `tries` tries.
    fn failing(self, body: &str, tries: usize) -> Self {
        self.watch.lock().unwrap().failing = Some((body.to_owned(), tries));
        self
    }

    fn watch(&self) -> std::sync::MutexGuard<'_, Watch> {
        self.watch.lock().unwrap()
    }
}

fn group_of(entry: &SendBatchEntry) -> String {
    entry.message.group_id.clone().unwrap_or_default()
}

impl Hooks for Watched {
    async fn send_message_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> Result<BatchResult<SentMessage>, TransportError> {
        let mut groups: Vec<String> = entries.iter().map(group_of).collect();
        groups.sort();
        groups.dedup();
        let failed_id = {
            let mut watch = self.watch();
            watch.calls_in_flight += 1;
            watch.most_calls_in_flight = watch.most_calls_in_flight.max(watch.calls_in_flight);
            for group in &groups {
                let carried = watch.groups_in_flight.entry(group.clone()).or_default();
                *carried += 1;
                if *carried > 1 {
                    watch.overlapping_groups.insert(group.clone());
                }
            }
            let failing = watch.failing.clone();
            let failed_id = failing.and_then(|(body, left)| {
                let entry = entries.iter().find(|entry| entry.message.body == body)?;
                if left == 0 {
                    watch.retrying = false;
                    return None;
                }
                watch.failing = Some((body, left - 1));
                Some(entry.id.clone())
            });
            if failed_id.is_none() && watch.retrying {
                watch.calls_while_retrying += 1;
            }
            failed_id
        };
        tokio::time::sleep(self.round_trip).await;
        let forwarded: Vec<SendBatchEntry> = entries
            .into_iter()
            .filter(|entry| Some(&entry.id) != failed_id.as_ref())
            .collect();
        let mut answer = if forwarded.is_empty() {
            Ok(BatchResult::default())
        } else {
            inner.send_message_batch(queue_url, forwarded).await
        };
        let mut watch = self.watch();
        if let (Some(id), Ok(result)) = (failed_id, answer.as_mut()) {
            result.failed.push(BatchFailure {
                id,
                kind: ErrorKind::InternalError,
                sender_fault: false,
                message: "failed on the service's side".into(),
            });
            watch.failures += 1;
            watch.retrying = true;
        }
        watch.calls_in_flight -= 1;
        for group in &groups {
            *watch.groups_in_flight.get_mut(group).unwrap() -= 1;
        }
        answer
    }
}

/// Message `n` of `group`, its body `"{group}:{n}"`.
fn numbered(publisher: &Publisher, group: &str, n: usize) -> rust_stream::Outgoing {
    publisher
        .raw(format!("{group}:{n}"))
        .group_id(group)
        .dedup_id(format!("{group}-{n}"))
}

/// A publisher to a fresh FIFO queue through a watched broker.
async fn watched_publisher<T: Transport + Clone>(
    backend: &Backend<T>,
    watched: &Watched,
) -> (Publisher, String) {
    let url = backend.queue("parallel.fifo", &[]).await;
    let broker = SqsBroker::with_transport(Hooked::new(backend.transport.clone(), watched.clone()));
    (
        broker.publisher(SqsQueue::new(backend.name("parallel.fifo"))),
        url,
    )
}

/// Receives and deletes until `want` messages came back (or nothing more comes), and answers the
/// numbers of each group in the order received: on FIFO, the order of storage.
async fn stored_order<T: Transport>(
    backend: &Backend<T>,
    url: &str,
    want: usize,
) -> BTreeMap<String, Vec<usize>> {
    let mut by_group: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let (mut got, mut empty) = (0, 0);
    while got < want && empty < 5 {
        let request = ReceiveMessage::new(10)
            .wait_time_seconds(1)
            .visibility_timeout(30);
        let received = backend
            .transport
            .receive_message(url, request)
            .await
            .unwrap();
        if received.is_empty() {
            empty += 1;
            continue;
        }
        got += received.len();
        let deletes = received
            .iter()
            .enumerate()
            .map(|(id, message)| DeleteEntry {
                id: id.to_string().into(),
                receipt_handle: message.receipt_handle.clone(),
            })
            .collect();
        let deleted = backend
            .transport
            .delete_message_batch(url, deletes)
            .await
            .unwrap();
        assert!(deleted.failed.is_empty(), "{:?}", deleted.failed);
        for message in received {
            let (group, n) = message.body.split_once(':').unwrap();
            by_group
                .entry(group.to_owned())
                .or_default()
                .push(n.parse().unwrap());
        }
    }
    by_group
}

/// Per group, the sequence numbers SQS gave its sends rise in the order sent.
fn assert_sequence_numbers_rise_per_group(sent: &[(String, Result<SentMessage, PublishError>)]) {
    let mut last: HashMap<&str, u128> = HashMap::new();
    for (group, result) in sent {
        let sent = result.as_ref().expect("every message is sent");
        let number: u128 = sent.sequence_number.as_deref().unwrap().parse().unwrap();
        if let Some(before) = last.insert(group, number) {
            assert!(before < number, "{group}: {before} then {number}");
        }
    }
}

const GROUPS: usize = 20;
const PER_GROUP: usize = 15;

async fn many_groups_go_out_side_by_side_each_in_the_order_sent<T: Transport + Clone>(
    backend: Backend<T>,
) {
    let watched = Watched::new();
    let (publisher, url) = watched_publisher(&backend, &watched).await;
    let group = |g: usize| format!("group-{g}");

    // Sixteen groups interleaved in one batch, and four more each sent one message at a time by
    // a task of its own, all at once.
    let batch_groups = GROUPS - 4;
    let batch: Vec<(String, usize)> = (0..PER_GROUP)
        .flat_map(|n| (0..batch_groups).map(move |g| (g, n)))
        .map(|(g, n)| (group(g), n))
        .collect();
    let batch_sends = {
        let publisher = publisher.clone();
        let batch = batch.clone();
        tokio::spawn(async move {
            let results = publisher
                .send_batch(
                    batch
                        .iter()
                        .map(|(group, n)| numbered(&publisher, group, *n)),
                )
                .await;
            batch
                .into_iter()
                .map(|(group, _)| group)
                .zip(results)
                .collect::<Vec<_>>()
        })
    };
    let one_by_one: Vec<_> = (batch_groups..GROUPS)
        .map(|g| {
            let (publisher, group) = (publisher.clone(), group(g));
            tokio::spawn(async move {
                let mut sent = Vec::new();
                for n in 0..PER_GROUP {
                    let result = numbered(&publisher, &group, n).send().await;
                    sent.push((group.clone(), result));
                }
                sent
            })
        })
        .collect();
    let mut sent = batch_sends.await.unwrap();
    for task in one_by_one {
        sent.extend(task.await.unwrap());
    }
    assert_sequence_numbers_rise_per_group(&sent);

    {
        let watch = watched.watch();
        assert!(
            watch.most_calls_in_flight >= 2,
            "calls for different groups go out at once; at most {} did",
            watch.most_calls_in_flight
        );
        assert!(
            watch.overlapping_groups.is_empty(),
            "two calls in flight carried the same group: {:?}",
            watch.overlapping_groups
        );
    }

    let stored = stored_order(&backend, &url, GROUPS * PER_GROUP).await;
    let in_order: Vec<usize> = (0..PER_GROUP).collect();
    assert_eq!(stored.len(), GROUPS, "{stored:?}");
    for (group, numbers) in &stored {
        assert_eq!(numbers, &in_order, "the order {group} was stored in");
    }
}

async fn a_group_waits_behind_its_failed_message_while_other_groups_go_on<T: Transport + Clone>(
    backend: Backend<T>,
) {
    const LATER: usize = 5;
    const OTHER_GROUPS: usize = 12;
    const FAILED_TRIES: usize = 3;
    let watched = Watched::new().failing("late:0", FAILED_TRIES);
    let (publisher, url) = watched_publisher(&backend, &watched).await;

    // The group's first message goes alone, and fails on the service's side; while the batcher
    // waits to try it again, the rest of its group and other groups' messages are sent.
    let first = tokio::spawn(numbered(&publisher, "late", 0).send());
    eventually("the first message's first try to fail", async || {
        watched.watch().failures >= 1
    })
    .await;
    let batch: Vec<(String, usize)> = (1..=LATER)
        .map(|n| ("late".to_owned(), n))
        .chain((0..OTHER_GROUPS).flat_map(|g| (0..3).map(move |n| (format!("other-{g}"), n))))
        .collect();
    let results = publisher
        .send_batch(
            batch
                .iter()
                .map(|(group, n)| numbered(&publisher, group, *n)),
        )
        .await;
    let first = first.await.unwrap();
    let mut sent = vec![("late".to_owned(), first)];
    sent.extend(batch.into_iter().map(|(group, _)| group).zip(results));
    assert_sequence_numbers_rise_per_group(&sent);

    {
        let watch = watched.watch();
        assert_eq!(
            watch.failures, FAILED_TRIES,
            "the first message was retried"
        );
        assert!(
            watch.calls_while_retrying >= 1,
            "other groups' calls went out while the failed message waited for its next try"
        );
        assert!(
            watch.overlapping_groups.is_empty(),
            "{:?}",
            watch.overlapping_groups
        );
    }

    let stored = stored_order(&backend, &url, 1 + LATER + OTHER_GROUPS * 3).await;
    assert_eq!(
        stored["late"],
        (0..=LATER).collect::<Vec<_>>(),
        "the group's later messages were stored after its failed one"
    );
    for g in 0..OTHER_GROUPS {
        assert_eq!(stored[&format!("other-{g}")], [0, 1, 2]);
    }
}
