//! Stops within their budget (issue 41, item 3), on the in-process account made to answer as SQS
//! does over a network: a receive in flight at a stop is not dropped by the engine at once (an
//! abandoned long poll may still take messages), and one that is abandoned takes what arrives
//! for it, which stays hidden for its visibility timeout. An idle service stops within 3 s by
//! default whatever its long poll; long polls and a running handler end within the budget; a
//! message an abandoned receive took is visible again within its visibility timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::layer::{Hooked, Hooks};
use rust_stream::transport::{ReceiveMessage, ReceivedMessage, Transport, TransportError};
use tokio::time::Instant;

/// SQS's receive over a network: the call goes on at the server when its caller gives it up, and
/// hides what it takes for its visibility timeout.
#[derive(Clone)]
struct OverNetwork(Account);

impl Hooks for OverNetwork {
    async fn receive_message(
        &self,
        _inner: &impl Transport,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let account = self.0.clone();
        let url = queue_url.to_owned();
        tokio::spawn(async move { account.receive_message(&url, request).await })
            .await
            .expect("the receive ran")
    }

    fn abandoned_receive_takes_nothing(&self, _inner: &impl Transport) -> bool {
        false
    }
}

/// Payments whose handler takes `slow` for the body `slow`.
#[derive(Clone)]
struct Slow {
    slow: Duration,
    handled: Arc<Mutex<Vec<String>>>,
}

impl Handle<String> for Slow {
    async fn handle(
        &self,
        body: &String,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if body == "slow" {
            tokio::time::sleep(self.slow).await;
        }
        self.handled.lock().unwrap().push(body.clone());
        Ok(())
    }
}

/// An app on `account` (over the network hooks) consuming `payments` with a 20 s long poll,
/// `pollers` receives out at once, and `budget` as its stop budget (the default when `None`).
async fn running(account: &Account, budget: Option<Duration>, slow: &Slow) -> (TestApp, SqsBroker) {
    let broker =
        SqsBroker::with_transport(Hooked::new(account.clone(), OverNetwork(account.clone())));
    let payments = SqsQueue::new("payments")
        .create_if_missing()
        .wait(Duration::from_secs(20))
        .visibility_timeout(Duration::from_secs(30));
    let mut app = RustStream::new(AppInfo::new("payments", "0"));
    if let Some(budget) = budget {
        app = app.shutdown_timeout(budget);
    }
    let app = app.with_broker(broker.clone(), |b| {
        b.include(subscriber(payments, slow.clone()).build());
    });
    (TestApp::spawn(app).await.expect("the app starts"), broker)
}

fn slow(slow: Duration) -> Slow {
    Slow {
        slow,
        handled: Arc::default(),
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_service_stops_within_3_s_by_default_whatever_its_long_poll() {
    let account = Account::new();
    let (app, _broker) = running(&account, None, &slow(Duration::ZERO)).await;
    // Well into a 20 s long poll.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let started = Instant::now();
    app.stop().await.unwrap();
    let took = started.elapsed();
    assert!(took <= Duration::from_secs(3), "an idle stop took {took:?}");
}

#[tokio::test(start_paused = true)]
async fn long_polls_in_flight_and_a_running_handler_end_within_the_budget_and_nothing_stays_hidden_past_its_visibility_timeout(
) {
    let account = Account::new();
    let handler = slow(Duration::from_secs(10));
    let budget = Duration::from_secs(15);
    let (app, broker) = running(&account, Some(budget), &handler).await;
    let ops = broker.operations();
    ops.send(
        "payments",
        rust_stream::transport::SendMessage::new("\"slow\""),
    )
    .await
    .unwrap();
    // The slow payment runs; the pollers' next long polls are out.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let stop = tokio::spawn(app.stop());
    // A payment arrives after the stop abandoned the long polls: one of them, still going at the
    // server, takes it and hides it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    ops.send(
        "payments",
        rust_stream::transport::SendMessage::new("\"late\""),
    )
    .await
    .unwrap();
    stop.await.unwrap().unwrap();
    let took = started.elapsed();
    let visible = async || {
        let q = ops.queue("payments").await.unwrap();
        (q.visible, q.in_flight)
    };
    assert!(
        took <= budget,
        "the stop took {took:?}, past its budget of {budget:?}"
    );
    assert_eq!(
        *handler.handled.lock().unwrap(),
        ["slow"],
        "the running handler finished"
    );
    assert_eq!(
        visible().await,
        (0, 1),
        "the late payment was taken by an abandoned receive, and is hidden"
    );
    // The late payment is hidden at most for the receive's visibility timeout (30 s) from when
    // the abandoned receive took it.
    let bound = Duration::from_secs(30);
    let taken_at = started + Duration::from_secs(3);
    eventually("the late payment visible again", async || {
        let (visible, in_flight) = visible().await;
        assert!(
            taken_at.elapsed() <= bound + Duration::from_secs(1) || visible == 1,
            "hidden past the bound: visible {visible}, in flight {in_flight}"
        );
        visible == 1
    })
    .await;
    assert!(taken_at.elapsed() <= bound + Duration::from_secs(1));
}
