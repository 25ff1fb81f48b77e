//! The operations API (`broker.operations()`), on the in-process account (paused clock) and on
//! LocalStack: redrive of dead-letter copies back to their sources (FIFO order, reruns that store
//! nothing twice, rate, dry run), peek on both backends (a table of filter, amount and offset
//! cases on the account; visibility, receive counts and the FIFO refusal on SQS), the queue list
//! with its dead-letter relations, and purge.

#[macro_use]
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::backend::{Backend, Kind};
use rust_stream::operations::{
    AuditRecord, MessageFilter, OperationError, Peek, PeekRisk, QueueSpec, Redrive, RedriveReport,
};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, on_each_backend, TestApp};
use rust_stream::transport::layer::{Hooked, Hooks};
use rust_stream::transport::{
    BatchResult, DeleteEntry, MessageAttributeValue, ReceiveMessage, SendBatchEntry, SendMessage,
    Transport, TransportError,
};
use rust_stream::{
    SqsBroker, ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, ORIGINAL_MESSAGE_ID_HEADER,
    SOURCE_QUEUE_HEADER,
};

both_backends!(
    redrive_returns_1000_copies_from_three_sources_each_group_in_order,
    a_redrive_killed_between_send_and_delete_and_run_again_stores_nothing_twice,
    a_redrive_holds_its_rate,
    a_dry_run_makes_no_changing_call,
    queues_are_listed_with_counts_and_dead_letter_relations,
    purge_needs_the_queue_name_again,
    push_pop_ping_ack_and_size,
    a_copy_without_a_source_stays_and_its_group_behind_it,
    a_filtered_redrive_moves_what_it_chooses_and_never_splits_a_fifo_group_out_of_order,
    a_delete_by_id_removes_only_the_named_dead_letters,
    a_send_to_fifo_without_a_dedup_id_gets_a_fresh_one_unless_the_queue_dedups_by_content,
);

/// A dead-letter copy as the engine writes it: the message, its source, original id, attempts
/// and reason.
fn copy(source: &str, group: &str, seq: u32) -> SendMessage {
    let original = format!("orig-{source}-{group}-{seq}");
    SendMessage::new(format!(
        r#"{{"source":"{source}","group":"{group}","seq":{seq}}}"#
    ))
    .attribute(SOURCE_QUEUE_HEADER, MessageAttributeValue::string(source))
    .attribute(
        ORIGINAL_MESSAGE_ID_HEADER,
        MessageAttributeValue::string(&original),
    )
    .attribute(ATTEMPTS_HEADER, MessageAttributeValue::number("5"))
    .attribute(
        DEAD_LETTER_REASON_HEADER,
        MessageAttributeValue::string("handler failed: ledger unavailable"),
    )
    .attribute("tenant", MessageAttributeValue::string("acme"))
    .group_id(group)
    .dedup_id(original)
}

/// Sends messages ten a call, straight through the transport (not the broker under test).
async fn send_all<T: Transport>(backend: &Backend<T>, url: &str, messages: Vec<SendMessage>) {
    for chunk in messages.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, message)| SendBatchEntry::new(i.to_string(), message.clone()))
            .collect();
        let result = backend
            .transport
            .send_message_batch(url, entries)
            .await
            .unwrap();
        assert!(result.failed.is_empty(), "{:?}", result.failed);
    }
}

/// The three sources and the dead-letter queue of a redrive test, created on `backend`.
struct Sources {
    fifo_a: String,
    fifo_b: String,
    standard: String,
    dlq: String,
    dlq_url: String,
    urls: HashMap<String, String>,
}

async fn sources<T: Transport>(backend: &Backend<T>) -> Sources {
    sources_tagged(backend, "").await
}

/// As [`sources`], the names tagged (a second set in one test).
async fn sources_tagged<T: Transport>(backend: &Backend<T>, tag: &str) -> Sources {
    let mut urls = HashMap::new();
    let mut named = Vec::new();
    for base in ["ops-src-a.fifo", "ops-src-b.fifo", "ops-src-c"] {
        let base = base.replacen("ops-", &format!("ops{tag}-"), 1);
        let base = base.as_str();
        let url = backend.queue(base, &[]).await;
        let name = backend.name(base);
        urls.insert(name.clone(), url);
        named.push(name);
    }
    let dlq = format!("ops{tag}-dlq.fifo");
    let dlq_url = backend.queue(&dlq, &[]).await;
    Sources {
        fifo_a: named[0].clone(),
        fifo_b: named[1].clone(),
        standard: named[2].clone(),
        dlq: backend.name(&dlq),
        dlq_url,
        urls,
    }
}

/// 1,000 copies in the dead-letter queue, interleaved as dead-lettering would leave them: 20
/// groups over the two FIFO sources (350 copies each) and 300 from the standard source (in 5
/// groups of the FIFO dead-letter queue). Returns the copies' (source, group, seq) in order.
async fn seed_thousand<T: Transport>(
    backend: &Backend<T>,
    s: &Sources,
) -> Vec<(String, String, u32)> {
    let mut plan = Vec::new();
    for seq in 0..35 {
        for group in 0..20 {
            let source = if group < 10 { &s.fifo_a } else { &s.fifo_b };
            plan.push((source.clone(), format!("g{group}"), seq));
        }
        if seq < 30 {
            for group in 0..10 {
                plan.push((s.standard.clone(), format!("s{group}"), seq));
            }
        }
    }
    assert_eq!(plan.len(), 1000);
    let messages = plan
        .iter()
        .map(|(src, group, seq)| copy(src, group, *seq))
        .collect();
    send_all(backend, &s.dlq_url, messages).await;
    plan
}

/// Every message a queue holds, received and deleted: (group, seq) from the bodies. Each is
/// checked for what a redrive sends: the user's attributes kept, the dead-letter ones gone, and
/// on FIFO the deduplication id from the original id, and the idempotency key on both.
async fn stored<T: Transport>(backend: &Backend<T>, url: &str, want: usize) -> Vec<(String, u32)> {
    let fifo = url.ends_with(".fifo");
    backend
        .take_all(url, want)
        .await
        .iter()
        .map(|message| {
            let body: serde_json::Value = serde_json::from_str(&message.body).unwrap();
            let (source, group) = (
                body["source"].as_str().unwrap(),
                body["group"].as_str().unwrap(),
            );
            let seq = u32::try_from(body["seq"].as_u64().unwrap()).unwrap();
            let original = format!("orig-{source}-{group}-{seq}");
            let attributes = &message.message_attributes;
            assert_eq!(attributes["tenant"].string_value.as_deref(), Some("acme"));
            for dead_letter in [
                SOURCE_QUEUE_HEADER,
                ORIGINAL_MESSAGE_ID_HEADER,
                ATTEMPTS_HEADER,
                DEAD_LETTER_REASON_HEADER,
            ] {
                assert!(
                    !attributes.contains_key(dead_letter),
                    "{dead_letter} left on {original}"
                );
            }
            if fifo {
                assert_eq!(message.group_id(), Some(group));
                assert_eq!(
                    message.dedup_id(),
                    Some(format!("redrive-{original}").as_str())
                );
            }
            let key = &attributes[rust_stream::IDEMPOTENCY_KEY_HEADER];
            assert_eq!(key.string_value.as_deref(), Some(original.as_str()));
            (group.to_owned(), seq)
        })
        .collect()
}

/// Checks that each source holds its copies once each and, on FIFO, each group in order.
async fn assert_returned<T: Transport>(
    backend: &Backend<T>,
    s: &Sources,
    plan: &[(String, String, u32)],
) {
    for source in [&s.fifo_a, &s.fifo_b, &s.standard] {
        let expected: Vec<(String, u32)> = plan
            .iter()
            .filter(|(src, _, _)| src == source)
            .map(|(_, group, seq)| (group.clone(), *seq))
            .collect();
        let got = stored(backend, &s.urls[source], expected.len()).await;
        let distinct: HashSet<&(String, u32)> = got.iter().collect();
        assert_eq!(
            (got.len(), distinct.len()),
            (expected.len(), expected.len()),
            "{source}: every copy once, no duplicate"
        );
        if source.ends_with(".fifo") {
            let mut by_group: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
            for (group, seq) in &got {
                by_group.entry(group).or_default().push(*seq);
            }
            assert_eq!(by_group.len(), 10, "{source}: ten groups");
            for (group, seqs) in by_group {
                assert_eq!(
                    seqs,
                    (0..35).collect::<Vec<_>>(),
                    "{source} {group} in order"
                );
            }
        }
    }
}

async fn redrive_returns_1000_copies_from_three_sources_each_group_in_order<T: Transport>(
    backend: Backend<T>,
) {
    let s = sources(&backend).await;
    let plan = seed_thousand(&backend, &s).await;
    let before = backend.broker.api_calls();
    let report = backend
        .broker
        .operations()
        .redrive(&Redrive::from(&s.dlq))
        .await
        .unwrap();
    assert_eq!(report.moved.len(), 1000, "left: {:?}", report.left.first());
    assert!(report.left.is_empty());
    assert_eq!(report.remaining, 0);
    let record = &report.moved[0];
    assert_eq!(record.from, s.dlq);
    assert!(record.new_message_id.is_some() && !record.dry_run && record.at_ms > 0);
    let fifo_record = report.moved.iter().find(|r| r.to == s.fifo_a).unwrap();
    let original = fifo_record.original_message_id.clone().unwrap();
    assert_eq!(
        fifo_record.dedup_id.as_deref(),
        Some(format!("redrive-{original}").as_str())
    );
    // Batched: 100 receives of ten, a send call per source in each, 100 deletes.
    let calls = backend.broker.api_calls() - before;
    assert_eq!(calls.delete_message_batch, 100, "{calls:?}");
    assert!(calls.send_message_batch <= 300, "{calls:?}");
    assert_returned(&backend, &s, &plan).await;
    assert_eq!(backend.left(&s.dlq_url).await, (0, 0, 0));
}

/// Holds every `DeleteMessageBatch` after the first `pass` for ever: a redrive whose process
/// dies between its sends and their deletes.
struct HangDeletesAfter {
    pass: usize,
    seen: Mutex<usize>,
}

impl Hooks for HangDeletesAfter {
    async fn delete_message_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        let hang = {
            let mut seen = self.seen.lock().unwrap();
            *seen += 1;
            *seen > self.pass
        };
        if hang {
            std::future::pending::<()>().await;
        }
        inner.delete_message_batch(queue_url, entries).await
    }
}

async fn a_redrive_killed_between_send_and_delete_and_run_again_stores_nothing_twice<
    T: Transport + Clone,
>(
    backend: Backend<T>,
) {
    let s = sources(&backend).await;
    // FIFO sources only: a standard target cannot drop a second send (see the next part).
    let plan: Vec<(String, String, u32)> = (0..35)
        .flat_map(|seq| {
            let s = &s;
            (0..20).map(move |group| {
                let source = if group < 10 { &s.fifo_a } else { &s.fifo_b };
                (source.clone(), format!("g{group}"), seq)
            })
        })
        .collect();
    send_all(
        &backend,
        &s.dlq_url,
        plan.iter()
            .map(|(src, g, seq)| copy(src, g, *seq))
            .collect(),
    )
    .await;
    let hold = Duration::from_secs(3);
    // The first run: 30 batches moved, then every send of the next batch lands and its delete
    // never comes; the run is killed (its future dropped) a while later.
    let dying = SqsBroker::with_transport(Hooked::new(
        backend.transport.clone(),
        HangDeletesAfter {
            pass: 30,
            seen: Mutex::new(0),
        },
    ));
    let moved = Arc::new(Mutex::new(0usize));
    let counted = moved.clone();
    let redrive = Redrive::from(&s.dlq).visibility_timeout(hold);
    let dying_operations = dying.operations();
    let first = dying_operations.redrive_with(&redrive, move |_| *counted.lock().unwrap() += 1);
    let killed = tokio::time::timeout(Duration::from_secs(5), first).await;
    assert!(killed.is_err(), "the first run hangs on its 31st delete");
    assert_eq!(*moved.lock().unwrap(), 300, "30 batches of ten moved");
    // The rerun, with a broker of its own, as a new process would be: it waits out the hold of
    // the batch the first run sent, sends it again (SQS drops it: same deduplication ids, within
    // 5 minutes), deletes it, and moves the rest.
    let rerun = SqsBroker::with_transport(backend.transport.clone());
    let report = rerun.operations().redrive(&redrive).await.unwrap();
    assert_eq!(report.moved.len(), 400, "left: {:?}", report.left.first());
    assert_eq!(report.remaining, 0);
    for source in [&s.fifo_a, &s.fifo_b] {
        let got = stored(&backend, &s.urls[source], 350).await;
        let distinct: HashSet<&(String, u32)> = got.iter().collect();
        assert_eq!(
            (got.len(), distinct.len()),
            (350, 350),
            "{source}: 0 duplicates stored"
        );
        let mut by_group: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (group, seq) in &got {
            by_group.entry(group).or_default().push(*seq);
        }
        for (group, seqs) in by_group {
            assert_eq!(
                seqs,
                (0..35).collect::<Vec<_>>(),
                "{source} {group} in order"
            );
        }
    }

    // All three sources (the standard one too), stopped after 500 moved and run again: every
    // copy once.
    let s = sources_tagged(&backend, "2").await;
    let plan = seed_thousand(&backend, &s).await;
    let first = backend
        .broker
        .operations()
        .redrive(&Redrive::from(&s.dlq).limit(500))
        .await
        .unwrap();
    assert_eq!((first.moved.len(), first.remaining), (500, 500));
    let second = backend
        .broker
        .operations()
        .redrive(&Redrive::from(&s.dlq))
        .await
        .unwrap();
    assert_eq!((second.moved.len(), second.remaining), (500, 0));
    assert_returned(&backend, &s, &plan).await;
}

async fn a_redrive_holds_its_rate<T: Transport>(backend: Backend<T>) {
    let s = sources(&backend).await;
    let plan: Vec<SendMessage> = (0..200)
        .map(|seq| copy(&s.fifo_a, &format!("g{}", seq % 4), seq))
        .collect();
    send_all(&backend, &s.dlq_url, plan).await;
    let rate = 40.0;
    let started = tokio::time::Instant::now();
    let last = Arc::new(Mutex::new(started));
    let seen = last.clone();
    let report = backend
        .broker
        .operations()
        .redrive_with(&Redrive::from(&s.dlq).rate(rate), move |_| {
            *seen.lock().unwrap() = tokio::time::Instant::now();
        })
        .await
        .unwrap();
    assert_eq!(report.moved.len(), 200);
    let elapsed = last.lock().unwrap().duration_since(started).as_secs_f64();
    let measured = 200.0 / elapsed;
    // In process on tokio's paused clock the schedule is all there is; LocalStack adds its calls.
    let bound = if backend.kind == Kind::InProcess {
        0.10
    } else {
        0.25
    };
    assert!(
        (measured - rate).abs() <= rate * bound,
        "{measured:.1} messages a second against {rate} (±{:.0} %) over {elapsed:.2} s",
        bound * 100.0
    );
    common::report(format_args!(
        "redrive rate ({:?}): {measured:.1} messages a second asked {rate}",
        backend.kind
    ));
}

async fn a_dry_run_makes_no_changing_call<T: Transport>(backend: Backend<T>) {
    let dlq_url = backend.queue("ops-dry-dlq", &[]).await;
    let dlq = backend.name("ops-dry-dlq");
    let source = backend.name("ops-dry-src");
    let messages = (0..30)
        .map(|seq| {
            let mut message = copy(&source, "g", seq);
            message.group_id = None;
            message.dedup_id = None;
            message
        })
        .collect();
    send_all(&backend, &dlq_url, messages).await;
    let before = backend.broker.api_calls();
    let report: RedriveReport = backend
        .broker
        .operations()
        .redrive(&Redrive::from(&dlq).dry_run())
        .await
        .unwrap();
    let calls = backend.broker.api_calls() - before;
    assert_eq!(calls.changing(), 0, "{calls:?}");
    assert_eq!(
        (calls.send_message_batch, calls.delete_message_batch),
        (0, 0)
    );
    assert_eq!(report.moved.len(), 30);
    assert!(report
        .moved
        .iter()
        .all(|r| r.dry_run && r.new_message_id.is_none() && r.to == source));
    assert_eq!(report.remaining, 30);
    if backend.kind == Kind::InProcess {
        // A true peek: not even a receive.
        assert_eq!(calls.receive_message, 0, "{calls:?}");
        assert_eq!(backend.left(&dlq_url).await, (30, 0, 0));
    } else {
        // Received, then visible again at once.
        assert_eq!(
            backend.left(&dlq_url).await.0 + backend.left(&dlq_url).await.1,
            30
        );
        assert_eq!(backend.drain(&dlq_url, 30).await.len(), 30);
    }
}

async fn queues_are_listed_with_counts_and_dead_letter_relations<T: Transport>(
    backend: Backend<T>,
) {
    let ops = backend.broker.operations();
    let dlq = backend.name("ops-list-dlq");
    let source = backend.name("ops-list-src");
    ops.create_queue(&dlq, &QueueSpec::new()).await.unwrap();
    let source_url = ops
        .create_queue(&source, &QueueSpec::new().dead_letter(&dlq, 4))
        .await
        .unwrap();
    send_all(
        &backend,
        &source_url,
        (0..3).map(|n| SendMessage::new(format!("m{n}"))).collect(),
    )
    .await;
    let queues = ops.queues("ops-list-").await.unwrap();
    assert!(queues.iter().all(|q| q.name.starts_with("ops-list-")));
    let listed: Vec<_> = queues
        .iter()
        .filter(|q| q.name == dlq || q.name == source)
        .collect();
    assert_eq!(listed.len(), 2, "{queues:?}");
    let src = listed.iter().find(|q| q.name == source).unwrap();
    assert_eq!((src.visible, src.in_flight, src.delayed), (3, 0, 0));
    let target = src.dead_letter.as_ref().unwrap();
    assert_eq!(
        (target.queue.as_str(), target.max_receive_count),
        (dlq.as_str(), 4)
    );
    let dead = listed.iter().find(|q| q.name == dlq).unwrap();
    assert_eq!(dead.dead_letter_sources, std::slice::from_ref(&source));
    assert!(!dead.fifo && dead.dead_letter.is_none());
    // A peek of a queue with a redrive policy: refused on SQS, why said; a true peek in process.
    match ops.peek(&source, &Peek::new()).await {
        Err(OperationError::PeekRefused { queue, risk }) => {
            assert_eq!(backend.kind, Kind::LocalStack);
            assert_eq!(queue, source);
            assert!(matches!(
                risk,
                PeekRisk::RedrivePolicy {
                    max_receive_count: 4,
                    ..
                }
            ));
            let error = OperationError::PeekRefused { queue, risk }.to_string();
            assert!(
                error.contains("maxReceiveCount") || error.contains("toward 4"),
                "{error}"
            );
        }
        Ok(peeked) => {
            assert_eq!(backend.kind, Kind::InProcess);
            assert_eq!(peeked.len(), 3);
        }
        Err(other) => panic!("{other}"),
    }
}

async fn purge_needs_the_queue_name_again<T: Transport>(backend: Backend<T>) {
    let url = backend.queue("ops-purge", &[]).await;
    let name = backend.name("ops-purge");
    send_all(
        &backend,
        &url,
        (0..5).map(|n| SendMessage::new(format!("m{n}"))).collect(),
    )
    .await;
    let ops = backend.broker.operations();
    let before = backend.broker.api_calls();
    let refused = ops.purge(&name, "ops-purge").await.unwrap_err();
    assert!(matches!(&refused, OperationError::PurgeNotConfirmed { queue, .. } if *queue == name));
    assert!(
        refused
            .to_string()
            .contains(&format!("--yes-i-mean {name}")),
        "{refused}"
    );
    assert_eq!((backend.broker.api_calls() - before).changing(), 0);
    assert_eq!(backend.left(&url).await.0, 5);
    ops.purge(&name, &name).await.unwrap();
    assert_eq!(
        backend.broker.api_calls().purge_queue - before.purge_queue,
        1
    );
    eventually_empty(&backend, &url).await;
}

async fn a_copy_without_a_source_stays_and_its_group_behind_it<T: Transport>(backend: Backend<T>) {
    let s = sources_tagged(&backend, "3").await;
    // Group g1: a message that names no source first, then two copies; group g2: three copies.
    let mut stray = copy(&s.fifo_a, "g1", 0);
    stray.message_attributes.remove(SOURCE_QUEUE_HEADER);
    let messages = vec![
        stray,
        copy(&s.fifo_a, "g1", 1),
        copy(&s.fifo_a, "g2", 0),
        copy(&s.fifo_a, "g1", 2),
        copy(&s.fifo_a, "g2", 1),
        copy(&s.fifo_a, "g2", 2),
    ];
    send_all(&backend, &s.dlq_url, messages).await;
    let started = tokio::time::Instant::now();
    let report = backend
        .broker
        .operations()
        .redrive(&Redrive::from(&s.dlq))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "it ends without waiting out its hold"
    );
    assert_eq!(report.moved.len(), 3, "group g2");
    assert!(report
        .moved
        .iter()
        .all(|r| r.group_id.as_deref() == Some("g2")));
    // The stray, and the two behind it in its group (one receive hands out the three).
    assert_eq!(report.left.len(), 3, "{:?}", report.left);
    assert!(
        report.left[0].reason.contains("--to"),
        "{}",
        report.left[0].reason
    );
    assert!(report.left[1..]
        .iter()
        .all(|left| left.reason.contains("earlier message of its group")));
    assert_eq!(report.remaining, 3, "g1 stays whole, in order");
    assert_eq!(
        stored(&backend, &s.urls[&s.fifo_a], 3).await,
        [
            ("g2".to_owned(), 0),
            ("g2".to_owned(), 1),
            ("g2".to_owned(), 2)
        ]
    );
    // Named, they all go, g1 in its order.
    let report = backend
        .broker
        .operations()
        .redrive(&Redrive::from(&s.dlq).to(&s.fifo_b))
        .await
        .unwrap();
    assert_eq!(
        (report.moved.len(), report.left.len(), report.remaining),
        (3, 0, 0)
    );
    let moved = stored(&backend, &s.urls[&s.fifo_b], 3).await;
    assert_eq!(
        moved
            .iter()
            .map(|(g, seq)| (g.as_str(), *seq))
            .collect::<Vec<_>>(),
        [("g1", 0), ("g1", 1), ("g1", 2)]
    );
}

/// What a queue served over HTTP needs: push with a group, pop with a visibility, ping, ack, size.
async fn push_pop_ping_ack_and_size<T: Transport>(backend: Backend<T>) {
    let name = backend.name("ops-pop.fifo");
    let ops = backend.broker.operations();
    ops.create_queue(&name, &QueueSpec::new().content_based_dedup())
        .await
        .unwrap();
    for n in 0..3 {
        let sent = ops
            .send(&name, SendMessage::new(format!("job {n}")).group_id("g"))
            .await
            .unwrap();
        assert!(sent.sequence_number.is_some());
    }
    let refused = ops
        .send(&name, SendMessage::new("no group"))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, OperationError::SendRefused { queue, .. } if *queue == name),
        "{refused}"
    );
    let size = ops.queue(&name).await.unwrap();
    assert_eq!((size.visible, size.in_flight, size.fifo), (3, 0, true));
    let popped = ops
        .receive(&name, 10, Duration::from_secs(30), Duration::from_secs(1))
        .await
        .unwrap();
    let bodies: Vec<&str> = popped.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, ["job 0", "job 1", "job 2"]);
    assert_eq!(ops.queue(&name).await.unwrap().in_flight, 3);
    let handles: Vec<String> = popped.iter().map(|m| m.receipt_handle.clone()).collect();
    let failed = ops
        .extend(&name, &handles, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let failed = ops.delete(&name, &handles[..2]).await.unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let size = ops.queue(&name).await.unwrap();
    assert_eq!((size.visible, size.in_flight), (0, 1));
    // Released at once: the last job is there to pop again, its receive counted twice.
    ops.extend(&name, &handles[2..], Duration::ZERO)
        .await
        .unwrap();
    let again = ops
        .receive(&name, 1, Duration::from_secs(30), Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(again[0].body, "job 2");
    assert_eq!(again[0].receive_count(), Some(2));
}

// ---- Peek on the account: a table of cases -------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_peek_on_the_account_takes_filter_amount_and_offset_and_changes_nothing() {
    let backend = Backend::in_process();
    let url = backend.queue("ops-peek.fifo", &[]).await;
    let name = backend.name("ops-peek.fifo");
    // 12 messages: groups a, b, c in turn; every third from `billing`; bodies say their number.
    let messages = (0..12)
        .map(|n| {
            let group = ["a", "b", "c"][n % 3];
            let mut message = SendMessage::new(format!("payment {n}"))
                .group_id(group)
                .dedup_id(format!("d{n}"));
            if n % 3 == 0 {
                message = message
                    .attribute(
                        SOURCE_QUEUE_HEADER,
                        MessageAttributeValue::string("billing"),
                    )
                    .attribute(
                        DEAD_LETTER_REASON_HEADER,
                        MessageAttributeValue::string("timeout"),
                    );
            }
            message
        })
        .collect();
    send_all(&backend, &url, messages).await;
    // One message in flight: a peek sees it, with its state.
    let taken = backend
        .transport
        .receive_message(&url, ReceiveMessage::new(1).visibility_timeout(30))
        .await
        .unwrap();
    assert_eq!(taken[0].body, "payment 0");
    let ops = backend.broker.operations();
    let numbers = |peeked: &[rust_stream::operations::Message]| -> Vec<u32> {
        peeked
            .iter()
            .map(|m| m.body.trim_start_matches("payment ").parse().unwrap())
            .collect()
    };
    let cases: Vec<(&str, MessageFilter, usize, usize, Vec<u32>)> = vec![
        (
            "all, default amount",
            MessageFilter::new(),
            10,
            0,
            (0..10).collect(),
        ),
        ("amount 3", MessageFilter::new(), 3, 0, vec![0, 1, 2]),
        (
            "offset 10 past the end",
            MessageFilter::new(),
            5,
            10,
            vec![10, 11],
        ),
        ("offset 12: none", MessageFilter::new(), 5, 12, vec![]),
        (
            "group b",
            MessageFilter::new().group_id("b"),
            10,
            0,
            vec![1, 4, 7, 10],
        ),
        (
            "group b, offset 1, amount 2",
            MessageFilter::new().group_id("b"),
            2,
            1,
            vec![4, 7],
        ),
        (
            "body contains",
            MessageFilter::new().body_contains("payment 1"),
            10,
            0,
            vec![1, 10, 11],
        ),
        (
            "source queue",
            MessageFilter::new().source_queue("billing"),
            10,
            0,
            vec![0, 3, 6, 9],
        ),
        (
            "reason and group",
            MessageFilter::new().reason_contains("time").group_id("a"),
            2,
            2,
            vec![6, 9],
        ),
        (
            "attribute",
            MessageFilter::new().attribute(SOURCE_QUEUE_HEADER, "billing"),
            1,
            3,
            vec![9],
        ),
        (
            "no match",
            MessageFilter::new().group_id("z"),
            10,
            0,
            vec![],
        ),
        (
            "predicate",
            MessageFilter::new().matching(|m| m.body.ends_with('5')),
            10,
            0,
            vec![5],
        ),
        ("amount 0", MessageFilter::new(), 0, 0, vec![]),
    ];
    let before = backend.broker.api_calls();
    for (case, filter, amount, offset, expected) in cases {
        let peeked = ops
            .peek(
                &name,
                &Peek::new().filter(filter).amount(amount).offset(offset),
            )
            .await
            .unwrap();
        assert_eq!(numbers(&peeked), expected, "{case}");
    }
    let calls = backend.broker.api_calls() - before;
    assert_eq!(
        (calls.receive_message, calls.changing()),
        (0, 0),
        "{calls:?}"
    );
    // The in-flight one is seen as such; nothing counted a receive.
    let all = ops.peek(&name, &Peek::new().amount(12)).await.unwrap();
    assert_eq!(all[0].state, "in flight");
    assert!(all[0].visible_in_ms.is_some_and(|ms| ms <= 30_000));
    assert_eq!(all[0].receive_count, Some(1));
    assert!(all[1..]
        .iter()
        .all(|m| m.state == "visible" && m.receive_count == Some(0)));
    let copy = &all[3];
    assert_eq!(copy.group_id.as_deref(), Some("a"));
    assert_eq!(
        copy.dead_letter.as_ref().unwrap().source_queue.as_deref(),
        Some("billing")
    );
    // `show` is a peek by id.
    let shown = ops.show(&name, &all[4].message_id, false).await.unwrap();
    assert_eq!(shown, all[4]);
    let missing = ops.show(&name, "no-such-id", false).await.unwrap_err();
    assert!(
        matches!(missing, OperationError::MessageNotFound { .. }),
        "{missing}"
    );
    assert!(missing.to_string().contains(&name), "{missing}");
    // Nothing changed: group b's messages are still first in line after a.
    assert_eq!(backend.left(&url).await, (11, 1, 0));
    let next = backend
        .transport
        .receive_message(&url, ReceiveMessage::new(10))
        .await
        .unwrap();
    assert_eq!(next[0].body, "payment 1");
    assert_eq!(next[0].receive_count(), Some(1));
}

// ---- Peek on SQS: a receive whose visibility is restored at once ----------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peek_on_sqs_leaves_the_messages_visible_with_one_more_receive_and_refuses_fifo() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let url = backend.queue("ops-peek-live", &[]).await;
    let name = backend.name("ops-peek-live");
    send_all(
        &backend,
        &url,
        (0..3).map(|n| SendMessage::new(format!("m{n}"))).collect(),
    )
    .await;
    let ops = backend.broker.operations();
    let before = backend.broker.api_calls();
    let peeked = ops.peek(&name, &Peek::new()).await.unwrap();
    let mut bodies: Vec<_> = peeked.iter().map(|m| m.body.clone()).collect();
    bodies.sort();
    assert_eq!(bodies, ["m0", "m1", "m2"]);
    assert!(peeked
        .iter()
        .all(|m| m.receive_count == Some(1) && m.state == "visible"));
    let calls = backend.broker.api_calls() - before;
    assert_eq!(calls.changing(), 0, "{calls:?}");
    assert!(calls.change_message_visibility_batch >= 1, "{calls:?}");
    // Visible again at once, each with the peek's receive counted.
    let again = backend
        .transport
        .receive_message(&url, ReceiveMessage::new(10).wait_time_seconds(1))
        .await
        .unwrap();
    assert_eq!(again.len(), 3, "visible right after the peek");
    assert!(
        again.iter().all(|m| m.receive_count() == Some(2)),
        "{again:?}"
    );

    // FIFO: refused before any receive, saying why; forced, it peeks.
    let fifo_url = backend.queue("ops-peek-live.fifo", &[]).await;
    let fifo = backend.name("ops-peek-live.fifo");
    send_all(
        &backend,
        &fifo_url,
        (0..2)
            .map(|n| {
                SendMessage::new(format!("f{n}"))
                    .group_id("g")
                    .dedup_id(format!("f{n}"))
            })
            .collect(),
    )
    .await;
    let before = backend.broker.api_calls();
    let refused = ops.peek(&fifo, &Peek::new()).await.unwrap_err();
    let text = refused.to_string();
    assert!(
        matches!(&refused, OperationError::PeekRefused { queue, risk: PeekRisk::Fifo } if *queue == fifo),
        "{text}"
    );
    assert!(
        text.contains(&fifo) && text.contains("holds") && text.contains("force"),
        "{text}"
    );
    assert_eq!((backend.broker.api_calls() - before).receive_message, 0);
    let forced = ops.peek(&fifo, &Peek::new().force()).await.unwrap();
    assert_eq!(
        forced.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        ["f0", "f1"]
    );
    let after = backend
        .transport
        .receive_message(&fifo_url, ReceiveMessage::new(10).wait_time_seconds(1))
        .await
        .unwrap();
    assert_eq!(after.len(), 2, "the group is free again");
    assert!(after.iter().all(|m| m.receive_count() == Some(2)));
}

/// Waits (on the backend's clock) until the queue holds nothing: LocalStack purges in the
/// background.
async fn eventually_empty<T: Transport>(backend: &Backend<T>, url: &str) {
    assert!(
        backend.until_empty(url, Duration::from_secs(10)).await,
        "the queue still holds {:?} after a purge",
        backend.left(url).await
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 34 (review 2026-12-06, N5/R5): a FIFO redrive sends a receive batch of a group in one
// submission; a copy the target refuses before the call (over its MaximumMessageSize) used to be
// left while its group's later copy was sent and deleted, ahead of it.

#[tokio::test(start_paused = true)]
async fn a_fifo_redrive_leaves_a_groups_later_copy_behind_an_earlier_one_the_target_refuses() {
    use rust_stream::account::Account;
    use rust_stream::transport::QueueAttributes;

    let account = Account::new();
    let dlq = account.create_fifo_queue("orders-dlq.fifo").await.unwrap();
    account
        .create_queue(
            "orders-retry.fifo",
            QueueAttributes::from([
                ("FifoQueue".to_owned(), "true".to_owned()),
                ("MaximumMessageSize".to_owned(), "1024".to_owned()),
            ]),
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    for (n, pad) in [(1, "x".repeat(2_000)), (2, "small".to_owned())] {
        let mut message = SendMessage::new(format!(r#"{{"n":{n},"pad":"{pad}"}}"#));
        message.group_id = Some("order-7".into());
        message.dedup_id = Some(format!("d{n}"));
        ids.push(
            account
                .send_message(&dlq, message)
                .await
                .unwrap()
                .message_id,
        );
    }
    let broker = SqsBroker::with_account(&account);

    let report = broker
        .operations()
        .redrive(&Redrive::from("orders-dlq.fifo").to("orders-retry.fifo"))
        .await
        .unwrap();

    assert!(report.moved.is_empty(), "moved {:?}", report.moved);
    let left: Vec<(&str, &str)> = report
        .left
        .iter()
        .map(|left| (left.message_id.as_str(), left.reason.as_str()))
        .collect();
    assert_eq!(left.len(), 2, "both copies reported left: {left:?}");
    assert_eq!(left[0].0, ids[0]);
    assert!(
        left[0].1.contains("1024"),
        "m1's reason names the limit: {}",
        left[0].1
    );
    assert_eq!(left[1].0, ids[1]);
    assert!(
        left[1].1.contains("earlier message of its FIFO group"),
        "m2's reason names m1's refusal: {}",
        left[1].1
    );
    let target = account.get_queue_url("orders-retry.fifo").await.unwrap();
    assert_eq!(
        common::left(&account, &target).await,
        (0, 0, 0),
        "nothing moved ahead of m1"
    );
    assert_eq!(
        common::left(&account, &dlq).await,
        (2, 0, 0),
        "both stay, in their order"
    );
}

/// A payment the consumer beside a redrive posts.
#[derive(Debug, serde::Deserialize)]
struct Payment {
    id: u64,
}

/// Posts payments: records each id. A body that is no payment does not decode, and the engine
/// dead-letters it at once, every time it comes.
#[derive(Clone, Default)]
struct Posted(Arc<Mutex<Vec<u64>>>);

impl Handle<Payment> for Posted {
    async fn handle(
        &self,
        payment: &Payment,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.0.lock().unwrap().push(payment.id);
        Ok(())
    }
}

/// Issue 41, item 1: with the service running, a redrive of a dead-letter queue holding poison
/// used to loop (DLQ → source → DLQ) for ever. A run takes only what was there at its start: it
/// moves the fixable message and the two poison ones, sees the poison ones come back, leaves
/// them, and ends; the dead-letter queue then holds each poison message once.
#[test]
fn a_redrive_beside_a_consumer_that_dead_letters_again_ends_and_leaves_each_poison_message_once() {
    on_each_backend(async |backend| {
        let broker = backend.broker().clone();
        let dlq = SqsQueue::new(backend.queue_name("ops-again-dlq.fifo")).create_if_missing();
        let payments = SqsQueue::new(backend.queue_name("ops-again.fifo"))
            .content_based_dedup()
            .create_if_missing()
            .wait(Duration::from_secs(1))
            .dead_letter(dlq.name(), 3);
        let posted = Posted::default();
        let app = RustStream::new(AppInfo::new("payments", "0")).with_broker(broker.clone(), |b| {
            b.include(subscriber(payments.clone(), posted.clone()).build());
        });
        let running = TestApp::spawn(app).await.expect("the app starts");
        let ops = broker.operations();
        let poison = ["not json", r#"{"amount":-1}"#];
        for (group, body) in ["a", "b"].into_iter().zip(poison) {
            ops.send(payments.name(), SendMessage::new(body).group_id(group))
                .await
                .unwrap();
        }
        let held = async || {
            let q = ops.queue(dlq.name()).await.unwrap();
            q.visible + q.in_flight + q.delayed
        };
        eventually("both poison messages dead-lettered", async || {
            held().await == 2
        })
        .await;
        // A message dead-lettered before a fix, fixable now.
        ops.send(
            dlq.name(),
            SendMessage::new(r#"{"id":7}"#)
                .group_id("c")
                .dedup_id("fixable-7")
                .attribute(
                    SOURCE_QUEUE_HEADER,
                    MessageAttributeValue::string(payments.name()),
                ),
        )
        .await
        .unwrap();

        let report = tokio::time::timeout(
            Duration::from_secs(120),
            ops.redrive(&Redrive::from(dlq.name())),
        )
        .await
        .expect("the redrive ends beside a consumer that dead-letters again")
        .unwrap();

        assert_eq!(report.at_start, 3);
        assert_eq!(report.moved.len(), 3, "{report:?}");
        let sent: HashSet<&str> = report
            .moved
            .iter()
            .filter_map(|r| r.new_message_id.as_deref())
            .collect();
        assert_eq!(report.came_back.len(), 2, "{report:?}");
        assert!(
            report
                .came_back
                .iter()
                .all(|c| sent.contains(c.sent_as.as_str())
                    && c.reason
                        .as_deref()
                        .is_some_and(|r| r.contains("not a valid"))),
            "{report:?}"
        );
        assert!(report.left.is_empty(), "{report:?}");
        let summary = report.to_string();
        assert!(
            summary.contains("moved 3") && summary.contains("2 came back"),
            "{summary}"
        );
        eventually("the fixable payment posted", async || {
            *posted.0.lock().unwrap() == [7]
        })
        .await;
        // Nothing more comes back: each poison message is in the dead-letter queue once.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(held().await, 2);
        let mut bodies: Vec<String> = ops
            .peek(dlq.name(), &Peek::new().force())
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.body)
            .collect();
        bodies.sort();
        let mut want = poison.map(str::to_owned).to_vec();
        want.sort();
        assert_eq!(bodies, want);
        running.stop().await.unwrap();
    });
}

/// Seven dead letters of `source` in `dlq` (FIFO or standard): `(label, reason)` per message, the
/// label `g{group}/{seq}` also in the body (`{"group":"g1","seq":0,"currency":..}`). Returns each
/// label's message id in the dead-letter queue.
async fn seed_seven<T: Transport>(
    backend: &Backend<T>,
    dlq: &str,
    source: &str,
) -> BTreeMap<String, String> {
    let fifo = dlq.ends_with(".fifo");
    let ops = backend.broker.operations();
    let mut ids = BTreeMap::new();
    for (group, seq, currency, reason) in [
        ("g1", 0, "EUR", "ledger unavailable"),
        ("g1", 1, "USD", "ledger unavailable"),
        ("g2", 0, "JPY", "currency JPY unsupported"),
        ("g3", 0, "EUR", "ledger unavailable"),
        ("g3", 1, "EUR", "currency EUR refused"),
        ("g4", 0, "GBP", "currency GBP unsupported"),
        ("g4", 1, "GBP", "ledger unavailable"),
    ] {
        let label = format!("{group}/{seq}");
        let mut message = SendMessage::new(format!(
            r#"{{"group":"{group}","seq":{seq},"currency":"{currency}"}}"#
        ))
        .attribute(SOURCE_QUEUE_HEADER, MessageAttributeValue::string(source))
        .attribute(
            DEAD_LETTER_REASON_HEADER,
            MessageAttributeValue::string(reason),
        );
        if fifo {
            message = message.group_id(group).dedup_id(label.replace('/', "-"));
        }
        let sent = ops.send(dlq, message).await.unwrap();
        ids.insert(label, sent.message_id);
    }
    ids
}

/// The labels (`g1/0`, ...) of what a run took, by the ids `seed_seven` returned.
fn labels(records: &[AuditRecord], ids: &BTreeMap<String, String>) -> Vec<String> {
    let mut taken: Vec<String> = records
        .iter()
        .map(|record| {
            ids.iter()
                .find(|(_, id)| **id == record.message_id)
                .map(|(label, _)| label.clone())
                .expect("a seeded message")
        })
        .collect();
    taken.sort();
    taken
}

/// Issue 41, item 2: a redrive by filter (reason, JSON pointer, ids, source, sent time) moves
/// what the filter chooses and leaves the rest where it is; on a FIFO dead-letter queue a group
/// moves up to its first message the filter does not choose, and a chosen one behind it stays,
/// said so in `left` (on a standard one it goes).
async fn a_filtered_redrive_moves_what_it_chooses_and_never_splits_a_fifo_group_out_of_order<
    T: Transport,
>(
    backend: Backend<T>,
) {
    let target = backend.name("ops-flt-target.fifo");
    backend.queue("ops-flt-target.fifo", &[]).await;
    // (case, filter of the ids, moved on FIFO, moved on standard, left on FIFO)
    type Choose = fn(&BTreeMap<String, String>) -> MessageFilter;
    type Labels = &'static [&'static str];
    type Case = (&'static str, Choose, Labels, Labels, Labels);
    let cases: [Case; 7] = [
        (
            "reason",
            |_| MessageFilter::new().reason_contains("ledger"),
            &["g1/0", "g1/1", "g3/0"],
            &["g1/0", "g1/1", "g3/0", "g4/1"],
            &["g4/1"],
        ),
        (
            "json pointer",
            |_| MessageFilter::new().json_pointer("/currency", "EUR"),
            &["g1/0", "g3/0", "g3/1"],
            &["g1/0", "g3/0", "g3/1"],
            &[],
        ),
        (
            "first id of a group",
            |ids| MessageFilter::new().message_ids([ids["g1/0"].clone()]),
            &["g1/0"],
            &["g1/0"],
            &[],
        ),
        (
            "second id of a group",
            |ids| MessageFilter::new().message_ids([ids["g1/1"].clone(), ids["g2/0"].clone()]),
            &["g2/0"],
            &["g1/1", "g2/0"],
            &["g1/1"],
        ),
        (
            "other source",
            |_| MessageFilter::new().source_queue("elsewhere"),
            &[],
            &[],
            &[],
        ),
        (
            "sent after an hour from now",
            |_| {
                MessageFilter::new()
                    .sent_after(std::time::SystemTime::now() + Duration::from_secs(3600))
            },
            &[],
            &[],
            &[],
        ),
        (
            "sent before an hour from now, and a group",
            |_| {
                MessageFilter::new()
                    .sent_before(std::time::SystemTime::now() + Duration::from_secs(3600))
                    .group_id("g4")
            },
            &["g4/0", "g4/1"],
            &[],
            &[],
        ),
    ];
    let ops = backend.broker.operations();
    for (index, (case, choose, fifo_moved, standard_moved, fifo_left)) in
        cases.into_iter().enumerate()
    {
        for fifo in [true, false] {
            let base = format!("ops-flt{index}-dlq{}", if fifo { ".fifo" } else { "" });
            backend.queue(&base, &[]).await;
            let dlq = backend.name(&base);
            let source = backend.name("ops-flt-source.fifo");
            let ids = seed_seven(&backend, &dlq, &source).await;
            let report = ops
                .redrive(&Redrive::from(&dlq).to(&target).filter(choose(&ids)))
                .await
                .unwrap();
            let (want_moved, want_left): (&[&str], &[&str]) = if fifo {
                (fifo_moved, fifo_left)
            } else {
                // A standard queue has no groups: the group filter of the last case matches none.
                (standard_moved, &[])
            };
            let what = format!("{case} ({})", if fifo { "FIFO" } else { "standard" });
            assert_eq!(labels(&report.moved, &ids), want_moved, "{what}: moved");
            let left: Vec<AuditRecord> = report
                .left
                .iter()
                .map(|left| {
                    let mut record = report
                        .moved
                        .first()
                        .cloned()
                        .unwrap_or_else(|| panic!("{what}: left {left:?} with nothing moved"));
                    record.message_id = left.message_id.clone();
                    record
                })
                .collect();
            assert_eq!(labels(&left, &ids), want_left, "{what}: left");
            assert!(
                report
                    .left
                    .iter()
                    .all(|left| left.reason.contains("earlier message of its group")),
                "{what}: {:?}",
                report.left
            );
            assert_eq!(
                report.unmatched as usize + report.moved.len() + report.left.len(),
                7,
                "{what}: every message taken once: {report:?}"
            );
            assert_eq!(report.remaining, 7 - report.moved.len() as u64, "{what}");
        }
    }
}

/// Issue 41, item 2: a delete by id removes the named dead letters (an audit record each, logged)
/// and nothing else, on FIFO and standard; a dry run says what would go and deletes nothing; a
/// delete that chooses nothing is refused (a purge does that).
async fn a_delete_by_id_removes_only_the_named_dead_letters<T: Transport>(backend: Backend<T>) {
    let ops = backend.broker.operations();
    for base in ["ops-del-dlq.fifo", "ops-del-dlq"] {
        let url = backend.queue(base, &[]).await;
        let dlq = backend.name(base);
        let ids = seed_seven(&backend, &dlq, "payments").await;
        // The first of a FIFO group and a standard message, and one of another group's head.
        let named = [ids["g2/0"].clone(), ids["g3/0"].clone()];
        let dry = ops
            .delete_matching(
                &dlq,
                MessageFilter::new().message_ids(named.clone()),
                true,
                |_| {},
            )
            .await
            .unwrap();
        assert_eq!(
            labels(&dry.moved, &ids),
            ["g2/0", "g3/0"],
            "{base}: dry run"
        );
        assert!(dry.to_string().starts_with("would delete 2 from"), "{dry}");
        assert!(dry.to_string().ends_with("5 stay"), "{dry}");
        assert_eq!(
            backend.left(&url).await,
            (7, 0, 0),
            "{base}: a dry run deletes nothing"
        );
        let mut audited = Vec::new();
        let report = ops
            .delete_matching(
                &dlq,
                MessageFilter::new().message_ids(named),
                false,
                |record| {
                    audited.push(record.message_id.clone());
                },
            )
            .await
            .unwrap();
        assert_eq!(labels(&report.moved, &ids), ["g2/0", "g3/0"], "{base}");
        assert!(report
            .moved
            .iter()
            .all(|r| r.to.is_empty() && r.new_message_id.is_none()));
        audited.sort();
        let mut moved: Vec<String> = report.moved.iter().map(|r| r.message_id.clone()).collect();
        moved.sort();
        assert_eq!(audited, moved, "{base}: an audit record each");
        assert_eq!(
            (report.unmatched, report.remaining),
            (5, 5),
            "{base}: {report}"
        );
        assert_eq!(backend.left(&url).await.0, 5, "{base}");
        let remaining: Vec<String> = backend
            .take_all(&url, 5)
            .await
            .into_iter()
            .map(|m| m.message_id)
            .collect();
        assert!(
            !remaining.contains(&ids["g2/0"]) && !remaining.contains(&ids["g3/0"]),
            "{base}"
        );
        assert_eq!(remaining.len(), 5, "{base}");
        let refused = ops
            .delete_matching(&dlq, MessageFilter::new(), false, |_| {})
            .await
            .unwrap_err();
        assert!(
            matches!(refused, OperationError::NothingChosen { .. })
                && refused.to_string().contains("purge"),
            "{refused}"
        );
    }
}

/// Issue 41, item 6: `send` (and the command line's) on a FIFO queue without a deduplication id
/// gives each message a fresh one, as the publisher does, so two sends of one body are two
/// messages; a queue that deduplicates by content keeps doing so (no id is made up for it).
async fn a_send_to_fifo_without_a_dedup_id_gets_a_fresh_one_unless_the_queue_dedups_by_content<
    T: Transport,
>(
    backend: Backend<T>,
) {
    let ops = backend.broker.operations();
    let plain = backend.queue("ops-send.fifo", &[]).await;
    let by_content = backend
        .queue(
            "ops-send-content.fifo",
            &[("ContentBasedDeduplication", "true")],
        )
        .await;
    for (url, base, want) in [
        (plain, "ops-send.fifo", 2),
        (by_content, "ops-send-content.fifo", 1),
    ] {
        let name = backend.name(base);
        for _ in 0..2 {
            ops.send(&name, SendMessage::new("pay 7").group_id("acct-1"))
                .await
                .unwrap_or_else(|error| panic!("{base}: {error}"));
        }
        let got = backend.take_all(&url, want).await;
        assert_eq!(got.len(), want, "{base}");
        if want == 2 {
            assert_ne!(got[0].dedup_id(), got[1].dedup_id(), "{base}: fresh ids");
        }
    }
}
