//! `rust-stream serve`: the seed's HTTP queue API ([`rust_stream::http::queue`]) on `PORT` and
//! the process's metrics on `PORT_METRICS`, over the broker the environment names, with pushes'
//! `hashCode`s in the PostgreSQL `HISTORY_POSTGRES_URL` names (shared by the replicas), or in
//! memory when it is unset.

use std::net::{Ipv4Addr, SocketAddr};

use rust_stream::http::metrics_router;
use rust_stream::http::queue::{QueueApi, HISTORY_LEASE};
use rust_stream::publish::History;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::SqsBroker;

use super::Failure;

/// The API's port when `PORT` is unset, as the seed.
const DEFAULT_PORT: u16 = 8080;

/// The metrics' port when `PORT_METRICS` is unset, as the seed.
const DEFAULT_METRICS_PORT: u16 = 8088;

/// A port from the variable `name`, or `default` when it is unset or empty.
fn port(env: &impl Fn(&str) -> Option<String>, name: &str, default: u16) -> Result<u16, Failure> {
    match env(name).filter(|value| !value.trim().is_empty()) {
        None => Ok(default),
        Some(value) => value.trim().parse().map_err(|_| {
            Failure::Serve(format!(
                "{name} is `{value}`: set it to a port number from 0 to 65535, or unset it for \
                 {default}"
            ))
        }),
    }
}

/// The variable naming the PostgreSQL the command history is kept in.
const HISTORY_POSTGRES_URL: &str = "HISTORY_POSTGRES_URL";

/// The command history in the PostgreSQL `HISTORY_POSTGRES_URL` names (its table created or
/// migrated), or `None` (the API's own, in memory) when it is unset or empty.
async fn history(env: &impl Fn(&str) -> Option<String>) -> Result<Option<History>, Failure> {
    let Some(url) = env(HISTORY_POSTGRES_URL).filter(|url| !url.trim().is_empty()) else {
        return Ok(None);
    };
    let store = PostgresStore::connect(url.trim()).await.map_err(|error| {
        Failure::Serve(format!(
            "cannot open the command history in the PostgreSQL {HISTORY_POSTGRES_URL} names: \
             {error}; set it to postgres://USER:PASSWORD@HOST:PORT/DATABASE, or unset it to keep \
             the history in this process's memory"
        ))
    })?;
    Ok(Some(History::new(store).lease(HISTORY_LEASE)))
}

/// Binds both ports, then serves until interrupted (Ctrl-C or SIGTERM).
pub(super) async fn run(env: impl Fn(&str) -> Option<String>) -> Result<String, Failure> {
    let api_port = port(&env, "PORT", DEFAULT_PORT)?;
    let metrics_port = port(&env, "PORT_METRICS", DEFAULT_METRICS_PORT)?;
    let origins = env("ALLOWED_ORIGINS").unwrap_or_default();
    let peek_on_sqs = match env("PEEK_ON_SQS").as_deref().map(str::trim) {
        None | Some("" | "false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => {
            return Err(Failure::Serve(format!(
                "PEEK_ON_SQS is `{other}`: set it to true or false"
            )))
        }
    };
    // Before the broker, so every metric it records reaches the exporter.
    let metrics = rust_stream::http::prometheus_builder()
        .install_recorder()
        .map_err(|error| Failure::Serve(format!("cannot install the metrics recorder: {error}")))?;
    rust_stream::metrics::describe();
    let broker = SqsBroker::from_env_or_in_process()
        .await
        .map_err(Failure::Connect)?;
    let history = history(&env).await?;
    let history_in = if history.is_some() {
        "postgres"
    } else {
        "memory"
    };
    let mut api = QueueApi::new(&broker)
        .allowed_origins(origins.split(','))
        .peek_on_sqs(peek_on_sqs);
    if let Some(history) = history {
        api = api.history(history);
    }
    let api_listener = bind(api_port, "PORT").await?;
    let metrics_listener = bind(metrics_port, "PORT_METRICS").await?;
    tracing::info!(
        http.address = %local(&api_listener),
        metrics.address = %local(&metrics_listener),
        allowed_origins = %origins,
        peek_on_sqs,
        history = history_in,
        "serving the queue API"
    );
    let metrics_server =
        tokio::spawn(async move { axum::serve(metrics_listener, metrics_router(metrics)).await });
    let served = axum::serve(api_listener, api.router())
        .with_graceful_shutdown(interrupted())
        .await;
    metrics_server.abort();
    served.map_err(|error| Failure::Serve(format!("the queue API stopped: {error}")))?;
    tracing::info!("queue API stopped");
    Ok(String::new())
}

async fn bind(port: u16, variable: &str) -> Result<tokio::net::TcpListener, Failure> {
    let address = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| {
            Failure::Serve(format!(
                "cannot listen on port {port} ({variable}): {error}; set {variable} to a free port"
            ))
        })
}

fn local(listener: &tokio::net::TcpListener) -> String {
    listener
        .local_addr()
        .map_or_else(|error| error.to_string(), |address| address.to_string())
}

/// Ctrl-C, or SIGTERM on Unix (what an orchestrator sends).
async fn interrupted() {
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
