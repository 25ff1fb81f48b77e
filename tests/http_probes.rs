//! `rust_stream::http::Probes` (feature `http`) answering real HTTP requests through a service's
//! life on the in-process broker: starting, consuming, draining while a handler still runs, and
//! stopped; `/metrics` in Prometheus's text format with what the service did.

use std::sync::Arc;
use std::time::Duration;

use rust_stream::health::AppState;
use rust_stream::http::prometheus::PrometheusBuilder;
use rust_stream::http::Probes;
use rust_stream::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

/// A handler that says when it starts and waits to be let go.
struct Gated {
    started: Arc<Notify>,
    gate: Arc<Semaphore>,
}

impl Handle<String> for Gated {
    async fn handle(&self, _: &String, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        self.started.notify_one();
        let _pass = self.gate.acquire().await.expect("the gate stays open");
        Ok(())
    }
}

/// One request's answer: its status code and body.
async fn get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).await.expect("connects");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: probes\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("sends");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("reads");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {answer}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Waits, within a bound, for `health` to reach `state`.
async fn reach(health: &rust_stream::health::Health, state: AppState) {
    tokio::time::timeout(Duration::from_secs(30), health.wait_for(state))
        .await
        .unwrap_or_else(|_| panic!("the service reached {state} within 30 s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_over_http_while_a_service_starts_consumes_drains_and_stops() {
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let broker = SqsBroker::in_process();
    let started = Arc::new(Notify::new());
    let gate = Arc::new(Semaphore::new(0));
    let handler = Gated {
        started: started.clone(),
        gate: gate.clone(),
    };
    let app = RustStream::new(AppInfo::new("probes", "0")).with_broker(broker.clone(), |b| {
        b.include(subscriber(SqsQueue::new("probed").create_if_missing(), handler).build());
    });
    let health = app.health();
    let shutdown = app.shutdown_handle();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let address = listener.local_addr().expect("an address");
    let server = tokio::spawn(
        Probes::new(health.clone())
            .prometheus(metrics)
            .serve(listener),
    );

    // Made, not yet run: alive, not ready.
    let (status, body) = get(address, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(r#""state":"starting""#), "{body}");
    assert_eq!(get(address, "/healthz").await.0, 200);

    let running = tokio::spawn(app.run_until(std::future::pending()));
    reach(&health, AppState::Running).await;
    broker
        .publisher("probed")
        .message(&"ping".to_owned())
        .send()
        .await
        .expect("sent");
    tokio::time::timeout(Duration::from_secs(30), started.notified())
        .await
        .expect("the handler started");
    let (status, body) = get(address, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(report["state"], "running", "{body}");
    assert_eq!(report["subscriptions"][0]["queue"], "probed", "{body}");
    assert_eq!(report["subscriptions"][0]["consuming"], true, "{body}");
    assert!(
        report["subscriptions"][0]["last_message_ms"]
            .as_u64()
            .is_some(),
        "{body}"
    );

    // A stop while the handler runs: draining, alive, not ready.
    shutdown.shutdown();
    reach(&health, AppState::Draining).await;
    let (status, body) = get(address, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(r#""state":"draining""#), "{body}");
    assert_eq!(get(address, "/healthz").await.0, 200);

    gate.add_permits(1);
    running
        .await
        .expect("the run ends")
        .expect("the service stops cleanly");
    let (status, body) = get(address, "/healthz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(r#""state":"stopped""#), "{body}");

    let (status, page) = get(address, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        page.lines()
            .any(|line| line.starts_with("rust_stream_messages_settled{")
                && line.contains(r#"messaging_destination_name="probed""#)
                && line.contains(r#"rust_stream_outcome="acked""#)
                && line.ends_with(" 1")),
        "{page}"
    );
    let (status, body) = get(address, "/nothing").await;
    assert_eq!(status, 404);
    assert!(body.contains("try /healthz, /readyz or /metrics"), "{body}");
    server.abort();
}

#[tokio::test]
async fn without_a_prometheus_handle_metrics_says_what_to_give() {
    let app =
        RustStream::new(AppInfo::new("probes", "0")).with_broker(SqsBroker::in_process(), |_| {});
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let address = listener.local_addr().expect("an address");
    let server = tokio::spawn(Probes::new(app.health()).serve(listener));
    let (status, body) = get(address, "/metrics").await;
    assert_eq!(status, 404);
    assert!(body.contains("Probes::prometheus"), "{body}");
    server.abort();
}
