//! Health probes over HTTP: a service that serves `/healthz` (liveness) and `/readyz`
//! (readiness) from [`App::health`], as an orchestrator (Kubernetes, ECS) polls them.
//!
//! ```sh
//! HEALTH_ADDR=127.0.0.1:8080 cargo run --example health
//! curl -i http://127.0.0.1:8080/readyz
//! ```
//!
//! - `GET /healthz`: `200` while the service is starting, running or draining, `503` once it has
//!   stopped: restart the process only then.
//! - `GET /readyz`: `200` while it runs and every subscription consumes, `503` while it starts,
//!   drains, or a subscription's receives fail (SQS unreachable, access denied).
//!
//! Both answer the health report as JSON: the state, and per subscription whether it consumes,
//! when it last received, and how many receives failed in a row. The service runs until SIGTERM
//! or Ctrl-C, on SQS when the environment names one and on the in-process account otherwise
//! (as `SqsBroker::from_env_or_in_process` chooses). `HEALTH_ADDR` defaults to
//! `127.0.0.1:8080`. With `--asyncapi` it prints its AsyncAPI document instead, and exits.

#[path = "common/asyncapi.rs"]
mod asyncapi;

use std::process::ExitCode;
use std::time::UNIX_EPOCH;

use rust_stream::health::{Health, HealthReport};
use rust_stream::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A ping someone sent.
#[derive(serde::Deserialize, schemars::JsonSchema)]
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
    let address = std::env::var("HEALTH_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let listener = TcpListener::bind(&address).await?;
    tracing::info!(address = %listener.local_addr()?, "health probes listening");

    let broker = SqsBroker::from_env_or_in_process().await?;
    let app = service(broker);
    let health = app.health();
    // The probes answer for as long as the process lives, so they show the drain too.
    tokio::spawn(probes(listener, health));
    app.run().await?;
    Ok(())
}

/// Answers each connection's one request from `health`.
async fn probes(listener: TcpListener, health: Health) {
    loop {
        let Ok((mut connection, _)) = listener.accept().await else {
            continue;
        };
        let health = health.clone();
        tokio::spawn(async move {
            let mut request = [0; 1024];
            let Ok(read) = connection.read(&mut request).await else {
                return;
            };
            let request = String::from_utf8_lossy(&request[..read]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (ok, body) = match path {
                "/healthz" => (health.is_live(), report_json(&health.report())),
                "/readyz" => (health.is_ready(), report_json(&health.report())),
                _ => (
                    false,
                    "{\"error\":\"not found: try /healthz or /readyz\"}".to_owned(),
                ),
            };
            let status = match (path, ok) {
                ("/healthz" | "/readyz", true) => "200 OK",
                ("/healthz" | "/readyz", false) => "503 Service Unavailable",
                _ => "404 Not Found",
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = connection.write_all(response.as_bytes()).await;
        });
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
