//! The testing kit's LocalStack: started for a test (installed the way `scripts/localstack.sh`
//! does it), used, and stopped when its handle goes or its process ends, however it ends; and a
//! `TestApp` on a kit's live broker stops without waiting out a 20 s long poll.
//!
//! The starts here are the kit's own (each on a free port, besides any `RUST_STREAM_LIVE_ENDPOINT`);
//! `RUST_STREAM_SKIP_LIVE=1` skips them, except under CI, where they always run.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use rust_stream::prelude::*;
use rust_stream::testing::{live_endpoint, on_each_backend, BackendKind, LocalStack, TestApp};

/// Whether the kit may start LocalStacks here; says so when it may not.
fn may_start() -> bool {
    let skipped =
        std::env::var(rust_stream::testing::SKIP_LIVE_VAR).is_ok_and(|value| value == "1");
    assert!(
        !(skipped && std::env::var_os("CI").is_some()),
        "the kit's LocalStack tests run under CI"
    );
    if skipped {
        eprintln!("SKIPPED: RUST_STREAM_SKIP_LIVE=1");
    }
    !skipped
}

/// Whether something listens at `endpoint` (`http://host:port`).
fn listening(endpoint: &str) -> bool {
    let address = endpoint.trim_start_matches("http://");
    TcpStream::connect_timeout(&address.parse().unwrap(), Duration::from_secs(1)).is_ok()
}

/// Waits up to `patience` for nothing to listen at `endpoint`.
fn closes_within(endpoint: &str, patience: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < patience {
        if !listening(endpoint) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

#[derive(serde::Deserialize)]
struct Ping {}

struct Count(std::sync::Arc<std::sync::atomic::AtomicU32>);

impl Handle<Ping> for Count {
    async fn handle(&self, _: &Ping, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn a_started_localstack_serves_sqs_and_stops_with_its_last_handle() {
    if !may_start() {
        return;
    }
    let started = Instant::now();
    let localstack = LocalStack::start().expect("a LocalStack");
    eprintln!("started in {:?}", started.elapsed());
    assert!(localstack.is_started_here());
    let endpoint = localstack.endpoint().to_owned();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{endpoint}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let broker = localstack.broker().await;
        let pings = SqsQueue::new("pings").create_if_missing();
        let handled = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let app = RustStream::new(AppInfo::new("pong", "0")).with_broker(broker.clone(), |b| {
            b.include(subscriber(pings.clone(), Count(handled.clone())).build());
        });
        let running = TestApp::spawn(app).await.expect("the app starts");
        broker.publisher(pings).raw("{}").send().await.unwrap();
        rust_stream::testing::eventually("the ping handled", async || {
            handled.load(std::sync::atomic::Ordering::SeqCst) == 1
        })
        .await;
        running.stop().await.unwrap();
    });
    let copy = localstack.clone();
    drop(localstack);
    assert!(listening(&endpoint), "a clone still holds it");
    let stopping = Instant::now();
    drop(copy);
    assert!(
        !listening(&endpoint),
        "the last handle's drop returns once the server is stopped"
    );
    eprintln!("stopped in {:?}", stopping.elapsed());
}

/// In a child process: start the shared LocalStack, print its endpoint, and end without dropping
/// anything (the shared one lives in a static, as in every test binary).
#[test]
fn child_starts_the_shared_localstack_and_exits() {
    if std::env::var_os("RUST_STREAM_KIT_CHILD").is_none() {
        return;
    }
    std::env::remove_var(rust_stream::testing::LIVE_ENDPOINT_VAR);
    let localstack = LocalStack::shared().expect("a LocalStack");
    println!("ENDPOINT={}", localstack.endpoint());
    // Like a test binary's end: no destructor of a static runs.
    std::process::exit(0);
}

#[test]
fn the_shared_localstack_stops_when_its_process_ends() {
    if !may_start() {
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_starts_the_shared_localstack_and_exits",
            "--nocapture",
        ])
        .env("RUST_STREAM_KIT_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let endpoint = stdout
        .lines()
        .find_map(|line| line.strip_prefix("ENDPOINT="))
        .unwrap_or_else(|| {
            panic!(
                "the child printed no endpoint:\n{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    assert!(
        closes_within(endpoint, Duration::from_secs(20)),
        "the LocalStack at {endpoint} outlived the process that started it"
    );
}

/// Stopping a `TestApp` waits for the receive in flight; the kit's live brokers long-poll at most
/// a second, so a stop takes about that, not the 20 s of the subscription's default long poll.
#[test]
fn a_test_app_on_the_kits_live_broker_stops_in_about_a_second() {
    let stops = std::sync::Mutex::new(Vec::new());
    on_each_backend(async |backend| {
        let pings = SqsQueue::new(backend.queue_name("pings")).create_if_missing();
        let handled = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let app =
            RustStream::new(AppInfo::new("pong", "0")).with_broker(backend.broker().clone(), |b| {
                b.include(subscriber(pings.clone(), Count(handled.clone())).build());
            });
        let running = TestApp::spawn(app).await.expect("the app starts");
        backend
            .broker()
            .publisher(pings)
            .raw("{}")
            .send()
            .await
            .unwrap();
        running.drain().await;
        // Idle now: every poller is in a long poll.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let stopping = std::time::Instant::now();
        running.stop().await.unwrap();
        stops
            .lock()
            .unwrap()
            .push((backend.kind(), stopping.elapsed()));
    });
    for (kind, took) in stops.into_inner().unwrap() {
        eprintln!("{} stop took {took:?}", kind.name());
        if kind == BackendKind::Live {
            assert!(took < Duration::from_secs(5), "{took:?}");
        }
    }
    // The same endpoint the leg used is what a live test gets.
    if let Some(endpoint) = std::env::var_os(rust_stream::testing::LIVE_ENDPOINT_VAR) {
        assert_eq!(
            live_endpoint("a check").as_deref(),
            endpoint.to_str(),
            "the named endpoint is reused"
        );
    }
}
