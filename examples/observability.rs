//! A service's probes and metrics over HTTP, served by `rust_stream::http::Probes` (feature
//! `http`): `/healthz` (liveness) and `/readyz` (readiness) from [`App::health`], as an
//! orchestrator (Kubernetes, ECS) polls them, and `/metrics`, every metric rust-stream records
//! (see `rust_stream::metrics`) in Prometheus's text format, through `metrics-exporter-prometheus`.
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

use rust_stream::health::AppState;
use rust_stream::http::Probes;
use rust_stream::prelude::*;
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
    let metrics = rust_stream::http::prometheus_builder().install_recorder()?;
    let address = std::env::var("HEALTH_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".to_owned());
    let listener = TcpListener::bind(&address).await?;
    tracing::info!(address = %listener.local_addr()?, "probes and metrics listening");
    let pings: u64 = std::env::var("PINGS").map_or(Ok(0), |pings| pings.parse())?;

    let broker = SqsBroker::from_env_or_in_process().await?;
    let publisher = broker.publisher(SqsQueue::new("pings").create_if_missing());
    let app = service(broker);
    let health = app.health();
    // The probes answer for as long as the process lives, so they show the drain too.
    tokio::spawn(
        Probes::new(health.clone())
            .prometheus(metrics)
            .serve(listener),
    );
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
