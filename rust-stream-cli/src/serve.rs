//! `rust-stream serve`: the seed's HTTP queue API ([`rust_stream::http::queue`]) on `PORT` and
//! the process's metrics on `PORT_METRICS`, over the broker the environment names, with pushes'
//! `hashCode`s in the PostgreSQL `HISTORY_POSTGRES_URL` names (shared by the replicas), or in
//! memory when it is unset.
//!
//! Exposure: with bearer tokens (`API_TOKENS`, `API_TOKENS_FILE`) it listens on `BIND`
//! (`0.0.0.0` by default); without, on `127.0.0.1` only, and says so. Another address without a
//! token is refused unless `--insecure-no-auth` says the operator means it: the API turns the
//! process's AWS credentials into push, pop and delete on every queue they reach.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use rust_stream::http::metrics_router;
use rust_stream::http::queue::{Limits, QueueApi, HISTORY_LEASE};
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

/// The bearer tokens of `API_TOKENS` (comma separated) and of the file `API_TOKENS_FILE` names
/// (one a line, `#` for a comment), together: serve the old and the new while rotating.
fn tokens(env: &impl Fn(&str) -> Option<String>) -> Result<Vec<String>, Failure> {
    let mut tokens: Vec<String> = env("API_TOKENS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .map(str::to_owned)
        .collect();
    if let Some(path) = env("API_TOKENS_FILE").filter(|path| !path.trim().is_empty()) {
        let text = std::fs::read_to_string(path.trim()).map_err(|error| {
            Failure::Serve(format!(
                "cannot read API_TOKENS_FILE `{}`: {error}; name a readable file with one token \
                 a line",
                path.trim()
            ))
        })?;
        tokens.extend(
            text.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with('#'))
                .map(str::to_owned),
        );
    }
    Ok(tokens)
}

/// The address both ports listen on: `BIND`, else `0.0.0.0` with a token and `127.0.0.1`
/// without; another than loopback without a token only when `insecure` says so.
fn address(
    env: &impl Fn(&str) -> Option<String>,
    tokens: bool,
    insecure: bool,
) -> Result<IpAddr, Failure> {
    let bind = match env("BIND").filter(|bind| !bind.trim().is_empty()) {
        None if tokens => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Some(bind) => bind.trim().parse().map_err(|_| {
            Failure::Serve(format!(
                "BIND is `{bind}`: set it to an IP address (0.0.0.0 for every interface), or \
                 unset it"
            ))
        })?,
    };
    if !tokens && !bind.is_loopback() && !insecure {
        return Err(Failure::Serve(format!(
            "BIND is {bind} and no API_TOKENS (or API_TOKENS_FILE) is set: anyone reaching the \
             port could push, pop and delete every queue this process's AWS credentials reach; \
             set API_TOKENS, or pass --insecure-no-auth if that is what you mean"
        )));
    }
    Ok(bind)
}

/// A whole number setting from the variable `name`, or `default` when it is unset or empty.
fn setting(
    env: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: u64,
) -> Result<u64, Failure> {
    match env(name).filter(|value| !value.trim().is_empty()) {
        None => Ok(default),
        Some(value) => match value.trim().parse::<u64>() {
            Ok(number) if number > 0 => Ok(number),
            _ => Err(Failure::Serve(format!(
                "{name} is `{value}`: set it to a whole number, 1 or more, or unset it for \
                 {default}"
            ))),
        },
    }
}

/// The API's bounds from the environment, each defaulting to [`Limits::default`]'s.
fn limits(env: &impl Fn(&str) -> Option<String>) -> Result<Limits, Failure> {
    let defaults = Limits::default();
    let size = |name: &str, default: usize| {
        setting(env, name, default as u64).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    };
    let mut limits = defaults;
    limits.body_bytes = size("MAX_BODY_BYTES", defaults.body_bytes)?;
    limits.push_items = size("MAX_PUSH_ITEMS", defaults.push_items)?;
    limits.pop_amount = size("MAX_POP_AMOUNT", defaults.pop_amount)?;
    limits.concurrent_requests = size("MAX_CONCURRENT_REQUESTS", defaults.concurrent_requests)?;
    limits.hash_codes = size("MAX_HASH_CODES", defaults.hash_codes)?;
    limits.hash_code_bytes = size("MAX_HASH_CODE_BYTES", defaults.hash_code_bytes)?;
    limits.ensured_queues = size("MAX_ENSURED_QUEUES", defaults.ensured_queues)?;
    limits.receipt_handles = size("MAX_RECEIPT_HANDLES", defaults.receipt_handles)?;
    limits.hash_duration = Duration::from_secs(setting(
        env,
        "MAX_HASH_DURATION_SECONDS",
        defaults.hash_duration.as_secs(),
    )?);
    limits.request_deadline = Duration::from_secs(setting(
        env,
        "REQUEST_DEADLINE_SECONDS",
        defaults.request_deadline.as_secs(),
    )?);
    Ok(limits)
}

/// The shortest `ID_KEY` taken: 32 bytes, SHA-256's block half, as RFC 2104 advises.
const MIN_ID_KEY: usize = 32;

/// `ID_KEY`, the HMAC key popped ids are signed with (the same on every replica), when set.
fn id_key(env: &impl Fn(&str) -> Option<String>) -> Result<Option<String>, Failure> {
    match env("ID_KEY").map(|key| key.trim().to_owned()) {
        None => Ok(None),
        Some(key) if key.is_empty() => Ok(None),
        Some(key) if key.len() < MIN_ID_KEY => Err(Failure::Serve(format!(
            "ID_KEY is {} bytes: use {MIN_ID_KEY} or more random bytes (e.g. `openssl rand \
             -hex 32`), the same on every replica",
            key.len()
        ))),
        Some(key) => Ok(Some(key)),
    }
}

/// Binds both ports, then serves until interrupted (Ctrl-C or SIGTERM).
pub(super) async fn run(
    env: impl Fn(&str) -> Option<String>,
    insecure_no_auth: bool,
) -> Result<String, Failure> {
    let api_port = port(&env, "PORT", DEFAULT_PORT)?;
    let metrics_port = port(&env, "PORT_METRICS", DEFAULT_METRICS_PORT)?;
    let tokens = tokens(&env)?;
    let ip = address(&env, !tokens.is_empty(), insecure_no_auth)?;
    let limits = limits(&env)?;
    let id_key = id_key(&env)?;
    let prefix = env("QUEUE_PREFIX").unwrap_or_default();
    let queues = env("QUEUES").unwrap_or_default();
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
        .tokens(&tokens)
        .queue_prefix(prefix.trim())
        .queues(queues.split(','))
        .limits(limits)
        .allowed_origins(origins.split(','))
        .peek_on_sqs(peek_on_sqs);
    if let Some(history) = history {
        api = api.history(history);
    }
    if let Some(key) = &id_key {
        api = api.id_key(key);
    }
    let api_listener = bind(ip, api_port, "PORT").await?;
    let metrics_listener = bind(ip, metrics_port, "PORT_METRICS").await?;
    if tokens.is_empty() {
        tracing::warn!(
            http.address = %local(&api_listener),
            "no API_TOKENS: the queue API requires no token, so it listens on {ip} only{}; set \
             API_TOKENS (or API_TOKENS_FILE) to serve it to other hosts",
            if ip.is_loopback() { "" } else { " (--insecure-no-auth)" }
        );
    }
    tracing::info!(
        http.address = %local(&api_listener),
        metrics.address = %local(&metrics_listener),
        tokens = tokens.len(),
        replica_safe_ids = id_key.is_some(),
        queue_prefix = %prefix.trim(),
        queues = %queues,
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

async fn bind(ip: IpAddr, port: u16, variable: &str) -> Result<tokio::net::TcpListener, Failure> {
    let address = SocketAddr::from((ip, port));
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
