//! Stops within their budget (issue 41, item 3), on both backends: the in-process account made
//! to answer receives as SQS does over a network (a long poll its caller gave up goes on at the
//! server and takes what arrives), on a paused clock, and LocalStack in real time.
//!
//! - An idle service stops within 3 s by default, whatever its long poll; a message the long
//!   poll it gave up takes is hidden for the receive's visibility (`RECEIVE_VISIBILITY_TIMEOUT`,
//!   10 s), not the queue's 60 s.
//! - Two long polls in flight and a 10 s handler end within a 15 s budget, the handler finished
//!   and its message deleted.
//! - What the short receive visibility costs, counted by the broker's meter: an idle queue one
//!   receive per long poll and no other call; a batch settled within 5 s no visibility change; a
//!   batch held longer one `ChangeMessageVisibilityBatch` for its ten messages.

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::backend::{Backend, Kind, Network};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::layer::Hooked;
use rust_stream::transport::Transport;
use rust_stream::{ApiCalls, RECEIVE_VISIBILITY_TIMEOUT};
use tokio::time::Instant;

/// Each scenario on the account over a network (paused clock) and on LocalStack, both behind the
/// counting [`Network`] hooks.
macro_rules! over_a_network {
    ($($scenario:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $scenario() {
                    super::$scenario(super::Backend::in_process_over_network()).await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    if let Some(backend) = super::Backend::live().await {
                        super::$scenario(backend.hooked(super::Network::default())).await;
                    }
                }
            )*
        }
    };
}

over_a_network!(
    an_idle_service_stops_within_3_s_by_default_and_hides_what_its_long_poll_takes_10_s_at_most,
    two_long_polls_in_flight_and_a_10_s_handler_end_within_a_15_s_budget,
    a_batch_settled_within_half_the_receive_visibility_costs_no_visibility_change,
    a_batch_held_past_half_the_receive_visibility_costs_one_extension_call,
);

/// Handles each message in `work`, recording its body.
#[derive(Clone)]
struct Working {
    work: Duration,
    handled: Arc<Mutex<Vec<String>>>,
}

impl Working {
    fn new(work: Duration) -> Self {
        Self {
            work,
            handled: Arc::default(),
        }
    }

    fn handled(&self) -> Vec<String> {
        self.handled.lock().unwrap().clone()
    }
}

impl Handle<String> for Working {
    async fn handle(
        &self,
        body: &String,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        tokio::time::sleep(self.work).await;
        self.handled.lock().unwrap().push(body.clone());
        Ok(())
    }
}

/// A queue long-polled for 20 s, whose messages are hidden for 60 s once received: far longer
/// than the receive's 10 s, so a message hidden for the queue's timeout is told apart.
fn payments<T: Transport>(backend: &Backend<T>) -> SqsQueue {
    SqsQueue::new(backend.name("payments"))
        .create_if_missing()
        .wait(Duration::from_secs(20))
        .visibility_timeout(Duration::from_secs(60))
}

/// An app consuming `queue` with `handler`, stopped within `budget` (the default when `None`).
async fn running<T: Transport>(
    backend: &Backend<T>,
    queue: &SqsQueue,
    handler: &Working,
    budget: Option<Duration>,
) -> TestApp {
    let mut app = RustStream::new(AppInfo::new("payments", "0"));
    if let Some(budget) = budget {
        app = app.shutdown_timeout(budget);
    }
    let app = app.with_broker(backend.broker.clone(), |b| {
        b.include(subscriber(queue.clone(), handler.clone()).build());
    });
    TestApp::spawn(app).await.expect("the app starts")
}

async fn send<T: Transport>(backend: &Backend<T>, queue: &SqsQueue, body: &str) {
    backend
        .broker
        .publisher(queue.clone())
        .message(body)
        .send()
        .await
        .expect("sent");
}

async fn an_idle_service_stops_within_3_s_by_default_and_hides_what_its_long_poll_takes_10_s_at_most(
    backend: Backend<Hooked<impl Transport, Network>>,
) {
    let queue = payments(&backend);
    let handler = Working::new(Duration::ZERO);
    let app = running(&backend, &queue, &handler, None).await;
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    // Well into a 20 s long poll.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(backend.transport.hooks().receiving(), 1, "a long poll out");
    let stopping = Instant::now();
    app.stop().await.unwrap();
    let took = stopping.elapsed();
    assert!(
        took <= Duration::from_secs(3),
        "an idle stop took {took:?} (the long poll had about 15 s to go)"
    );
    // The long poll given up may still be open at the server: a payment sent now is taken by it
    // (always on the account over a network; on LocalStack as it goes on with the poll).
    send(&backend, &queue, "late").await;
    let sent = Instant::now();
    let (_, in_flight, _) = backend.left(&url).await;
    if backend.kind == Kind::InProcess {
        assert_eq!(in_flight, 1, "the poll given up took the late payment");
    }
    // Hidden for the receive's 10 s at most, not the queue's 60 s (room for a loaded machine).
    let bound = RECEIVE_VISIBILITY_TIMEOUT + Duration::from_secs(3);
    let mut back = Vec::new();
    while back.is_empty() && sent.elapsed() < bound {
        back = backend.drain(&url, 1).await;
    }
    assert_eq!(
        back.len(),
        1,
        "the late payment is visible again {:?} after it was sent",
        sent.elapsed()
    );
    if in_flight == 1 {
        // Taken by the poll given up, then by the drain.
        assert_eq!(back[0].receive_count(), Some(2));
        assert!(
            sent.elapsed() >= RECEIVE_VISIBILITY_TIMEOUT - Duration::from_secs(1),
            "hidden for the receive's visibility: {:?}",
            sent.elapsed()
        );
    }
    assert!(handler.handled().is_empty(), "{:?}", handler.handled());
}

async fn two_long_polls_in_flight_and_a_10_s_handler_end_within_a_15_s_budget(
    backend: Backend<Hooked<impl Transport, Network>>,
) {
    // One message a receive: the first comes back full and a second poller joins, so two long
    // polls are out while the payment is handled.
    let queue = payments(&backend).batch_size(1).pollers(2);
    let handler = Working::new(Duration::from_secs(10));
    let budget = Duration::from_secs(15);
    let url = {
        let app = running(&backend, &queue, &handler, Some(budget)).await;
        let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
        send(&backend, &queue, "slow").await;
        eventually(
            "two long polls out while the payment is handled",
            async || backend.transport.hooks().receiving() == 2,
        )
        .await;
        let stopping = Instant::now();
        app.stop().await.unwrap();
        let took = stopping.elapsed();
        assert!(
            took <= budget,
            "the stop took {took:?}, past its budget of {budget:?}"
        );
        // It ended once the payment was deleted and nothing was held (about 10 s), not when the
        // handlers would have been cancelled (12 s) nor when the long polls end (20 s).
        assert!(
            took < budget - Duration::from_secs(3),
            "the stop took {took:?}: it waited past the handler"
        );
        assert_eq!(handler.handled(), ["slow"], "the running handler finished");
        url
    };
    assert_eq!(
        backend.left(&url).await,
        (0, 0, 0),
        "the payment deleted, nothing hidden"
    );
}

/// A standard queue of ten messages, handled in `work` each, all at once; the calls the service
/// made from its start until all ten are deleted.
async fn calls_for_a_batch<T: Transport>(backend: &Backend<T>, work: Duration) -> ApiCalls {
    let queue = SqsQueue::new(backend.name("batch"))
        .create_if_missing()
        .wait(Duration::from_secs(1))
        .visibility_timeout(Duration::from_secs(60));
    let url = backend
        .transport
        .create_queue(queue.name(), Default::default())
        .await
        .unwrap();
    for n in 0..10 {
        send(backend, &queue, &n.to_string()).await;
    }
    let handler = Working::new(work);
    let before = backend.broker.api_calls();
    let app = running(backend, &queue, &handler, None).await;
    eventually("all ten handled and deleted", async || {
        handler.handled().len() == 10 && backend.left(&url).await == (0, 0, 0)
    })
    .await;
    let calls = backend.broker.api_calls() - before;
    app.stop().await.unwrap();
    calls
}

async fn a_batch_settled_within_half_the_receive_visibility_costs_no_visibility_change<
    T: Transport,
>(
    backend: Backend<T>,
) {
    let calls = calls_for_a_batch(&backend, Duration::from_secs(3)).await;
    assert_eq!(calls.change_message_visibility_batch, 0, "{calls:?}");
    assert!(calls.delete_message_batch >= 1, "{calls:?}");
}

async fn a_batch_held_past_half_the_receive_visibility_costs_one_extension_call<T: Transport>(
    backend: Backend<T>,
) {
    // Past 5 s (half the receive's 10 s), before 30 s (half the queue's 60 s, when a second
    // extension would be due).
    let calls = calls_for_a_batch(&backend, Duration::from_secs(8)).await;
    assert_eq!(
        calls.change_message_visibility_batch, 1,
        "one call extends the ten: {calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_idle_subscription_costs_one_receive_per_long_poll_and_a_backlog_sample_a_minute() {
    let backend = Backend::in_process();
    let queue = payments(&backend);
    let handler = Working::new(Duration::ZERO);
    let app = running(&backend, &queue, &handler, None).await;
    let before = backend.broker.api_calls();
    // A minute of long polls of 20 s, each counted once answered.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let calls = backend.broker.api_calls() - before;
    app.stop().await.unwrap();
    let mut receives_and_sample = ApiCalls::default();
    receives_and_sample.receive_message = calls.receive_message;
    // The backlog gauges' sample, one a minute (the first was taken as the app began).
    receives_and_sample.get_queue_attributes = 1;
    assert_eq!(
        calls, receives_and_sample,
        "receives and the backlog sample only"
    );
    // One poller out when the queue is idle, whatever `pollers`: 3 in a minute.
    assert_eq!(calls.receive_message, 3, "{calls:?}");
}
