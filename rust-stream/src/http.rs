//! Probes and metrics over HTTP (feature `http`): what an orchestrator (Kubernetes, ECS) polls and
//! a Prometheus server scrapes, with no glue to write.
//!
//! ```no_run
//! use rust_stream::http::{prometheus_builder, Probes};
//! use rust_stream::prelude::*;
//!
//! # #[subscriber(SqsQueue::new("pings"))]
//! # async fn pong(_ping: &String) -> HandlerOutcome { HandlerOutcome::ack() }
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Installed before the app is made, so every metric it registers reaches it; the library's
//! // histograms are rendered as Prometheus histograms (buckets), which aggregate across pods.
//! let metrics = prometheus_builder().install_recorder()?;
//! let app = RustStream::new(AppInfo::new("pings", "0.1.0"))
//!     .with_broker(SqsBroker::from_env().await?, |b| {
//!         b.include(pong);
//!     });
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
//! // The probes answer for as long as the process lives, so they show the drain too.
//! tokio::spawn(Probes::new(app.health()).prometheus(metrics).serve(listener));
//! app.run().await?;
//! # Ok(())
//! # }
//! ```
//!
//! [`Probes`] answers three paths, each from the app's [`Health`] or the Prometheus recorder:
//!
//! - `GET /healthz` (liveness): `200` while the service starts, runs or drains, `503` once it has
//!   stopped; the body is the [`HealthReport`] as JSON.
//! - `GET /readyz` (readiness): `200` while it runs and every subscription consumes, `503` while it
//!   starts, drains, or a subscription's receives fail; the same body.
//! - `GET /metrics`: every metric the process records (see [`crate::metrics`]) in Prometheus's text
//!   format, from the handle given to [`Probes::prometheus`]; `404` without one.
//!
//! Any other path answers `404`. [`Probes::router`] gives the routes as an axum `Router`, to
//! serve beside a service's own; [`metrics_router`] serves `/metrics` alone (a process without an
//! app, such as `rust-stream serve`).
//!
//! [`queue`] is the seed's HTTP queue API over a broker's queues.

pub mod queue;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::health::{Health, HealthReport};

/// The Prometheus exporter the probes render `/metrics` with, at the version they are built on:
/// install its recorder with [`prometheus_builder`]`().install_recorder()`.
pub use metrics_exporter_prometheus as prometheus;

/// A Prometheus exporter's builder that renders each of the library's histograms
/// ([`metrics::HISTOGRAMS`](crate::metrics::HISTOGRAMS)) as a Prometheus histogram with the
/// buckets chosen for it, not as a summary: a summary's quantiles cannot be added up across
/// processes, a histogram's buckets can (`histogram_quantile(0.99, sum by (le) (rate(..)))`).
///
/// Change a histogram's buckets, or give your own histograms theirs, on the builder it returns:
///
/// ```
/// use rust_stream::http::prometheus::Matcher;
/// use rust_stream::metrics::PROCESS_DURATION;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Handlers that take minutes: buckets up to an hour.
/// let builder = rust_stream::http::prometheus_builder()
///     .set_buckets_for_metric(Matcher::Full(PROCESS_DURATION.into()), &[1.0, 60.0, 600.0, 3_600.0])?;
/// # let _ = builder;
/// # Ok(())
/// # }
/// ```
pub fn prometheus_builder() -> prometheus::PrometheusBuilder {
    crate::metrics::HISTOGRAMS.iter().fold(
        prometheus::PrometheusBuilder::new(),
        |builder, (name, buckets)| {
            builder
                .set_buckets_for_metric(prometheus::Matcher::Full((*name).to_owned()), buckets)
                // Refused only for an empty list, and none of the library's is empty.
                .unwrap_or_else(|error| unreachable!("buckets of `{name}`: {error}"))
        },
    )
}

/// A service's probes and metrics, to serve over HTTP. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Probes {
    health: Health,
    prometheus: Option<prometheus::PrometheusHandle>,
}

impl Probes {
    /// Probes answering from `health` ([`App::health`](crate::App::health)).
    pub fn new(health: Health) -> Self {
        Self {
            health,
            prometheus: None,
        }
    }

    /// Serves `/metrics` from this Prometheus recorder's handle.
    #[must_use]
    pub fn prometheus(mut self, handle: prometheus::PrometheusHandle) -> Self {
        self.prometheus = Some(handle);
        self
    }

    /// The routes (`/healthz`, `/readyz`, `/metrics`, and a `404` for any other path), to serve
    /// yourself or to merge into a service's own router.
    pub fn router(self) -> Router {
        Router::new()
            .route("/healthz", get(liveness))
            .route("/readyz", get(readiness))
            .route("/metrics", get(metrics))
            .fallback(not_found)
            .with_state(self)
    }

    /// Serves the routes on `listener` until the process ends (or the future is dropped).
    ///
    /// # Errors
    ///
    /// When accepting connections fails for good.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }
}

async fn liveness(State(probes): State<Probes>) -> Response {
    report(probes.health.is_live(), probes.health.report())
}

async fn readiness(State(probes): State<Probes>) -> Response {
    report(probes.health.is_ready(), probes.health.report())
}

/// `200` with the report when `ok`, else `503` with it.
fn report(ok: bool, report: HealthReport) -> Response {
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report)).into_response()
}

/// `GET /metrics` from this Prometheus recorder's handle, and `404` for any other path: the
/// metrics of a process that has no app to probe.
pub fn metrics_router(handle: prometheus::PrometheusHandle) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(handle): State<prometheus::PrometheusHandle>| async move {
                rendered(&handle)
            }),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                Json(serde_json::json!({ "error": "not found: try /metrics" })),
            )
        })
        .with_state(handle)
}

/// The recorder's metrics in Prometheus's text format.
fn rendered(handle: &prometheus::PrometheusHandle) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

async fn metrics(State(probes): State<Probes>) -> Response {
    match &probes.prometheus {
        Some(handle) => rendered(handle),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({
                "error": "no Prometheus recorder: give its handle to `Probes::prometheus(..)`"
            })),
        )
            .into_response(),
    }
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(serde_json::json!({ "error": "not found: try /healthz, /readyz or /metrics" })),
    )
        .into_response()
}
