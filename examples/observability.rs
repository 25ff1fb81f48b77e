//! A service's probes and metrics over HTTP: `/healthz` (liveness) and `/readyz` (readiness)
//! from [`App::health`], as an orchestrator (Kubernetes, ECS) polls them, and `/metrics`, every
//! metric rust-stream records (see `rust_stream::metrics`) in Prometheus's text format, through
//! `metrics-exporter-prometheus`.
//!
//! ```sh
//! HEALTH_ADDR=127.0.0.1:8080 PINGS=100 cargo run --example observability
//! curl -i http://127.0.0.1:8080/readyz
//! curl http://127.0.0.1:8080/metrics
//! ```
//!
//! - `GET /healthz`: `200` while the service is starting, running or draining, `503` once it has
//!   stopped: restart the process only then.
//! - `GET /readyz`: `200` while it runs and every subscription consumes, `503` while it starts,
//!   drains, or a subscription's receives fail (SQS unreachable, access denied).
//!
//! Both answer the health report as JSON: the state, and per subscription whether it consumes,
//! when it last received, and how many receives failed in a row. The service sends itself `PINGS`
//! pings (default 0) once it runs, so `/metrics` has something to show, and runs until SIGTERM
//! or Ctrl-C, on SQS when the environment names one and on the in-process account otherwise
//! (as `SqsBroker::from_env_or_in_process` chooses). `HEALTH_ADDR` defaults to
//! `127.0.0.1:8080`. With `--asyncapi` it prints its AsyncAPI document instead, and exits.

#[path = "common/asyncapi.rs"]
mod asyncapi;

use std::process::ExitCode;
use std::time::UNIX_EPOCH;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rust_stream::health::{AppState, Health, HealthReport};
use rust_stream::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A ping someone sent.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Ping {
    from: String,
}

/// Reads `pings`: each is logged and acknowledged.
#[subscriber(SqsQueue::new("pings").create_if_missing())]
async fn pong(ping: &Ping) -> HandlerOutcome {
    tracing::info!(ping.from, "pong");
    HandlerOutcome::ack()
}

fn service(broker: SqsBroker) -> impl App {
    RustStream::new(AppInfo::new("pings", "0.1.0")).with_broker(broker, |b| {
        b.include(pong);
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    if asyncapi::requested() {
        asyncapi::print(&service(SqsBroker::in_process()));
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt().with_target(false).init();
    match serve().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    // Installed before the app is made, so every metric it registers reaches it.
    let metrics = PrometheusBuilder::new().install_recorder()?;
    let address = std::env::var("HEALTH_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let listener = TcpListener::bind(&address).await?;
    tracing::info!(address = %listener.local_addr()?, "probes and metrics listening");
    let pings: u64 = std::env::var("PINGS").map_or(Ok(0), |pings| pings.parse())?;

    let broker = SqsBroker::from_env_or_in_process().await?;
    let publisher = broker.publisher(SqsQueue::new("pings").create_if_missing());
    let app = service(broker);
    let health = app.health();
    // The probes answer for as long as the process lives, so they show the drain too.
    tokio::spawn(probes(listener, health.clone(), metrics));
    tokio::spawn(async move {
        health.wait_for(AppState::Running).await;
        for n in 0..pings {
            let ping = Ping {
                from: format!("ping-{n}"),
            };
            if let Err(error) = publisher.message(&ping).send().await {
                tracing::error!(%error, "a ping could not be sent");
            }
        }
    });
    app.run().await?;
    Ok(())
}

/// Answers each connection's one request from `health` and `metrics`.
async fn probes(listener: TcpListener, health: Health, metrics: PrometheusHandle) {
    loop {
        let Ok((mut connection, _)) = listener.accept().await else {
            continue;
        };
        let health = health.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            // The whole head, however the client's packets split it: closing with part of a
            // request unread would reset the connection under the answer.
            let mut request = Vec::new();
            let mut chunk = [0; 1024];
            while !request.windows(4).any(|end| end == b"\r\n\r\n") && request.len() < 8192 {
                match connection.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(read) => request.extend_from_slice(&chunk[..read]),
                }
            }
            let request = String::from_utf8_lossy(&request);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let json = "application/json";
            let (status, content_type, body) = match path {
                "/healthz" => (
                    ok_or_503(health.is_live()),
                    json,
                    report_json(&health.report()),
                ),
                "/readyz" => (
                    ok_or_503(health.is_ready()),
                    json,
                    report_json(&health.report()),
                ),
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
                _ => (
                    "404 Not Found",
                    json,
                    r#"{"error":"not found: try /healthz, /readyz or /metrics"}"#.to_owned(),
                ),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            if connection.write_all(response.as_bytes()).await.is_ok() {
                let _ = connection.shutdown().await;
            }
        });
    }
}

fn ok_or_503(ok: bool) -> &'static str {
    if ok {
        "200 OK"
    } else {
        "503 Service Unavailable"
    }
}

/// The report as JSON, times as milliseconds since 1970.
fn report_json(report: &HealthReport) -> String {
    let millis = |time: Option<std::time::SystemTime>| {
        time.and_then(|time| time.duration_since(UNIX_EPOCH).ok())
            .map(|since| since.as_millis() as u64)
    };
    serde_json::json!({
        "state": report.state.as_str(),
        "subscriptions": report.subscriptions.iter().map(|subscription| serde_json::json!({
            "queue": subscription.queue,
            "consuming": subscription.consuming,
            "last_receive_ms": millis(subscription.last_receive),
            "last_message_ms": millis(subscription.last_message),
            "receive_failures": subscription.receive_failures,
        })).collect::<Vec<_>>(),
    })
    .to_string()
}
