//! `rust_stream::http::Probes` (feature `http`) answering real HTTP requests through a service's
//! life on the in-process broker: starting, consuming, draining while a handler still runs, and
//! stopped; `/metrics` in Prometheus's text format with what the service did.

use std::sync::Arc;
use std::time::Duration;

use rust_stream::health::AppState;
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
    let metrics = rust_stream::http::prometheus_builder()
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
    // Every histogram of the library reaches Prometheus as a histogram, with the buckets chosen
    // for it (summaries cannot be aggregated across pods), and every metric has its `# HELP`.
    // The outbox's lateness is recorded by a relay, which this service has not
    // (`tests/scheduling.rs` measures it).
    for (name, buckets) in rust_stream::metrics::HISTOGRAMS
        .iter()
        .filter(|(name, _)| *name != rust_stream::metrics::OUTBOX_LATENESS)
    {
        let metric = name.replace('.', "_");
        assert!(
            page.contains(&format!("# TYPE {metric} histogram")),
            "{metric} as a histogram: {page}"
        );
        assert!(
            page.contains(&format!("# HELP {metric} ")),
            "{metric}'s help: {page}"
        );
        let bounds: Vec<f64> = page
            .lines()
            .filter(|line| line.starts_with(&format!("{metric}_bucket{{")))
            .filter(|line| line.contains(r#"messaging_destination_name="probed""#))
            .filter(|line| {
                !line.contains(r#"error_type="#) && !line.contains("messaging_operation_name")
            })
            .filter_map(|line| {
                let le = line.split("le=\"").nth(1)?.split('"').next()?;
                le.parse().ok().filter(|bound: &f64| bound.is_finite())
            })
            .collect();
        if *name != rust_stream::metrics::OPERATION_DURATION {
            assert_eq!(bounds, buckets.to_vec(), "{metric}'s buckets: {page}");
        }
    }
    assert!(
        page.lines().any(
            |line| line.starts_with("messaging_process_duration_bucket{")
                && line.contains(r#"le="0.005""#)
        ),
        "{page}"
    );
    assert!(
        page.contains("# HELP rust_stream_messages_settled "),
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

/// The Grafana dashboard and the alert rules under `docs/monitoring/` name only metrics the
/// library records (as Prometheus renders their names) or SQS's own CloudWatch metrics: a renamed
/// metric breaks this test, not an operator's dashboard at 3 a.m.
#[test]
fn the_dashboard_and_the_alerts_name_only_metrics_the_library_records() {
    use rust_stream::metrics::*;
    let recorded: Vec<String> = [
        MESSAGES_CONSUMED,
        PROCESS_DURATION,
        MESSAGES_SETTLED,
        MESSAGES_UNDECODABLE,
        GROUPS_RESTING,
        MESSAGES_IN_FLIGHT,
        MESSAGES_HELD,
        POLLERS_ACTIVE,
        RECEIVES_IN_FLIGHT,
        MESSAGE_AGE,
        RECEIVE_BATCH_SIZE,
        OPERATION_DURATION,
        MESSAGES_SENT,
        INBOX_DUPLICATES,
        HISTORY_SKIPPED,
        HTTP_REQUESTS,
        OUTBOX_BACKLOG,
        OUTBOX_OLDEST_AGE,
        OUTBOX_RELAYED,
        OUTBOX_FAILED,
    ]
    .iter()
    .map(|name| name.replace('.', "_"))
    .collect();
    let histograms: Vec<String> = HISTOGRAMS
        .iter()
        .map(|(name, _)| name.replace('.', "_"))
        .collect();
    let known = |metric: &str| {
        recorded.iter().any(|name| name == metric)
            || histograms.iter().any(|name| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| metric == format!("{name}{suffix}"))
            })
            // SQS's own, through a CloudWatch exporter (named in the files).
            || metric.starts_with("aws_sqs_approximate_")
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/monitoring");
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("grafana-dashboard.json")).expect("the dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut queries: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .map(|target| target["expr"].as_str().expect("an expr").to_owned())
        .collect();
    assert!(queries.len() >= 10, "{queries:?}");
    let rules = std::fs::read_to_string(root.join("alerts.yml")).expect("the alert rules");
    let alerts = rules.matches("- alert: ").count();
    assert!(alerts >= 5, "{rules}");
    // The rules' expressions and annotations; comments name metrics in prose.
    queries.push(
        rules
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let mut named = 0;
    for query in &queries {
        // A metric is a name that starts with one of the prefixes the library and SQS use.
        let mut rest = query.as_str();
        while let Some(at) = ["rust_stream_", "messaging_", "aws_sqs_"]
            .iter()
            .filter_map(|prefix| rest.find(prefix))
            .min()
        {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            // Label names share the prefixes.
            let labels = [SYSTEM, DESTINATION, OPERATION, OUTCOME, OUTBOX]
                .map(|label| label.replace('.', "_"));
            if labels.contains(&name) {
                continue;
            }
            named += 1;
            assert!(
                known(&name),
                "`{name}` is no metric the library records, in: {query}"
            );
        }
    }
    assert!(named >= 20, "{named} metrics named");
}
