//! A first end-to-end check of the engine on the in-process broker.

mod common;

use common::engine::{jobs, Job, Scripted};
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};

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
