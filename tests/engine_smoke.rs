//! A first end-to-end check of the engine on the in-process broker.

mod common;

use std::future::Future;
use std::sync::{Arc, Mutex};

use common::engine::{jobs, Job, Scripted};
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::layer::{Hooked, Hooks};
use rust_stream::transport::{ReceiveMessage, ReceivedMessage, Transport, TransportError};

#[tokio::test(start_paused = true)]
async fn a_fifo_service_handles_each_group_in_order() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new("jobs.fifo").create_if_missing();
    let publisher = broker.publisher(queue.clone());
    for n in 0..20 {
        for group in ["a", "b", "c"] {
            publisher
                .message(&Job::new(group, n))
                .group_id(group)
                .send()
                .await
                .unwrap();
        }
    }
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("t", "0")).with_broker(broker.clone(), |b| {
        b.include(subscriber(queue, handler).build());
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    eventually("60 jobs handled", async || log.lock().unwrap().len() == 60).await;
    running.stop().await.unwrap();
    for group in ["a", "b", "c"] {
        let order: Vec<u32> = jobs(&log)
            .into_iter()
            .filter(|job| job.group == group)
            .map(|job| job.n)
            .collect();
        assert_eq!(order, (0..20).collect::<Vec<_>>(), "group {group}");
    }
    let url = account.get_queue_url("jobs.fifo").await.unwrap();
    let counts = account.counts(&url).await.unwrap();
    assert_eq!(
        counts.visible + counts.in_flight + counts.delayed,
        0,
        "all deleted"
    );
    // Each lane deletes its run (what it holds of a receive) in one call, and waits for the
    // answer before the group is received again: at most a call a run (a receive holds runs of
    // up to the three groups), never one a message.
    let calls = broker.api_calls();
    assert!(
        (6..=3 * calls.receive_message).contains(&calls.delete_message_batch),
        "a delete call a run at most, 10 deletes a call at most: {calls:?}"
    );
}

/// Records the system attributes each receive asks for.
#[derive(Clone, Default)]
struct AskedFor(Arc<Mutex<Vec<Vec<String>>>>);

impl Hooks for AskedFor {
    fn receive_message(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send {
        self.0.lock().unwrap().push(
            request
                .system_attribute_names
                .iter()
                .map(|name| name.to_string())
                .collect(),
        );
        inner.receive_message(queue_url, request)
    }
}

/// The group id, deduplication id and sequence number a handler saw.
type Ids = Arc<Mutex<Vec<(Option<String>, Option<String>, Option<String>)>>>;

/// Consumes `queue`'s three jobs (sent with group `g`) through a transport that records what each
/// receive asks for: the attributes asked for, and what the handler saw of them.
async fn asked_and_seen(queue: SqsQueue) -> (Vec<Vec<String>>, Ids) {
    let account = Account::new();
    let hooks = AskedFor::default();
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), hooks.clone()));
    let publisher = broker.publisher(queue.clone());
    for n in 0..3 {
        let message = publisher.message(&Job::new("g", n)).group_id("g");
        message.send().await.unwrap();
    }
    let ids = Ids::default();
    let seen = ids.clone();
    let (handler, log) = Scripted::new(move |_, ctx| {
        let sqs = ctx.sqs();
        seen.lock().unwrap().push((
            sqs.group_id().map(str::to_owned),
            sqs.dedup_id().map(str::to_owned),
            sqs.sequence_number().map(str::to_owned),
        ));
        Ok(())
    });
    let app = RustStream::new(AppInfo::new("t", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue, handler).build());
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    eventually("3 jobs handled", async || log.lock().unwrap().len() == 3).await;
    running.stop().await.unwrap();
    let asked = hooks.0.lock().unwrap().clone();
    (asked, ids)
}

#[tokio::test(start_paused = true)]
async fn a_receive_asks_only_for_the_system_attributes_its_queue_type_carries() {
    // A standard queue's messages carry no deduplication id and no sequence number; a group id
    // they may (a fair queue's), and the handler sees it. Both ask for the X-Ray trace header.
    let (asked, seen) = asked_and_seen(SqsQueue::new("fair").create_if_missing()).await;
    assert!(!asked.is_empty());
    for names in &asked {
        assert_eq!(
            names,
            &[
                "AWSTraceHeader",
                "ApproximateReceiveCount",
                "SentTimestamp",
                "MessageGroupId"
            ]
        );
    }
    for ids in seen.lock().unwrap().iter() {
        assert_eq!(ids, &(Some("g".to_owned()), None, None));
    }

    // A FIFO queue's carry all three, and the handler sees them.
    let (asked, seen) = asked_and_seen(SqsQueue::new("ordered.fifo").create_if_missing()).await;
    assert!(!asked.is_empty());
    for names in &asked {
        assert_eq!(
            names,
            &[
                "AWSTraceHeader",
                "ApproximateReceiveCount",
                "SentTimestamp",
                "MessageGroupId",
                "MessageDeduplicationId",
                "SequenceNumber",
            ]
        );
    }
    for (group, dedup, sequence) in seen.lock().unwrap().iter() {
        assert_eq!(group.as_deref(), Some("g"));
        assert!(dedup.is_some() && sequence.is_some());
    }
}
