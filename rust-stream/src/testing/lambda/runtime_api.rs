//! The Lambda Runtime API on loopback, as Lambda serves it to a function instance: the compiled
//! function, started as a child process with `AWS_LAMBDA_RUNTIME_API` naming this server, asks
//! `GET /2018-06-01/runtime/invocation/next` for an event (the call waits until there is one),
//! and answers with `POST /2018-06-01/runtime/invocation/{id}/response` or `.../error`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::function::Function;
use crate::task::BoxFuture;

/// How long an invocation may take before the mapping gives it up as failed.
const INVOCATION_TIMEOUT: Duration = Duration::from_secs(60);

/// An invocation waiting for an instance to ask for it.
struct Pending {
    id: String,
    event: serde_json::Value,
    answer: oneshot::Sender<Result<serde_json::Value, String>>,
}

/// What the server's routes share.
struct Shared {
    next: tokio::sync::Mutex<mpsc::UnboundedReceiver<Pending>>,
    answers: Mutex<HashMap<String, oneshot::Sender<Result<serde_json::Value, String>>>>,
    /// When the first instance was started, asked for its first event, and answered one.
    started: Mutex<Option<Instant>>,
    first_next: Mutex<Option<Instant>>,
    first_answer: Mutex<Option<Instant>>,
    init_errors: Mutex<Vec<String>>,
}

/// The Lambda Runtime API served on loopback, and the function instances started against it;
/// a [`Function`] the mapping invokes. The instances are killed when it is dropped.
pub struct RuntimeApi {
    address: SocketAddr,
    shared: Arc<Shared>,
    invocations: mpsc::UnboundedSender<Pending>,
    server: tokio::task::JoinHandle<()>,
    instances: Mutex<Vec<tokio::process::Child>>,
}

impl std::fmt::Debug for RuntimeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeApi")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// How long a function took to start, as the Runtime API saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColdStart {
    /// From the process's start to its first `next` call: the runtime's and the app's init.
    pub init: Duration,
    /// From the process's start to its first answer: init and the first event handled.
    pub first_event: Duration,
}

impl RuntimeApi {
    /// Serves the API on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (invocations, next) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            next: tokio::sync::Mutex::new(next),
            answers: Mutex::default(),
            started: Mutex::default(),
            first_next: Mutex::default(),
            first_answer: Mutex::default(),
            init_errors: Mutex::default(),
        });
        let router = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(invocation_response),
            )
            .route(
                "/2018-06-01/runtime/invocation/{id}/error",
                post(invocation_error),
            )
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::error!(error = %error, "the Runtime API server stopped");
            }
        });
        Ok(Self {
            address,
            shared,
            invocations,
            server,
            instances: Mutex::default(),
        })
    }

    /// The address a function is given as `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Starts an instance of the compiled function `program` as Lambda starts one: with
    /// `AWS_LAMBDA_RUNTIME_API` and the function's `AWS_LAMBDA_*` variables, plus `env`.
    pub fn start_instance<K, V>(
        &self,
        program: &Path,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> std::io::Result<()>
    where
        K: AsRef<std::ffi::OsStr>,
        V: AsRef<std::ffi::OsStr>,
    {
        let mut command = tokio::process::Command::new(program);
        command
            .env("AWS_LAMBDA_RUNTIME_API", self.address.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "rust-stream-function")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "local")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                "/aws/lambda/rust-stream-function",
            )
            .envs(env)
            .kill_on_drop(true);
        self.shared
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(Instant::now);
        let child = command.spawn()?;
        self.instances
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(child);
        Ok(())
    }

    /// The first instance's cold start, once it answered its first event.
    pub fn cold_start(&self) -> Option<ColdStart> {
        let read = |at: &Mutex<Option<Instant>>| *at.lock().unwrap_or_else(PoisonError::into_inner);
        let started = read(&self.shared.started)?;
        Some(ColdStart {
            init: read(&self.shared.first_next)? - started,
            first_event: read(&self.shared.first_answer)? - started,
        })
    }

    /// What the instances reported to `/runtime/init/error`.
    pub fn init_errors(&self) -> Vec<String> {
        self.shared
            .init_errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
        for instance in self
            .instances
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
        {
            let _ = instance.start_kill();
        }
    }
}

impl Function for RuntimeApi {
    fn invoke(&self, event: serde_json::Value) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let (answer, answered) = oneshot::channel();
            let pending = Pending {
                id: uuid::Uuid::new_v4().to_string(),
                event,
                answer,
            };
            self.invocations
                .send(pending)
                .map_err(|_| "the Runtime API server stopped".to_owned())?;
            match tokio::time::timeout(INVOCATION_TIMEOUT, answered).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err("the invocation was dropped".to_owned()),
                Err(_) => Err(format!(
                    "the function timed out after {INVOCATION_TIMEOUT:?}"
                )),
            }
        })
    }
}

/// `GET /runtime/invocation/next`: waits for an invocation and hands it over.
async fn next_invocation(State(shared): State<Arc<Shared>>) -> Response {
    shared
        .first_next
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(Instant::now);
    let Some(pending) = shared.next.lock().await.recv().await else {
        return StatusCode::GONE.into_response();
    };
    shared
        .answers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(pending.id.clone(), pending.answer);
    let deadline = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(INVOCATION_TIMEOUT)
        .as_millis();
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    set("lambda-runtime-aws-request-id", pending.id);
    set("lambda-runtime-deadline-ms", deadline.to_string());
    set(
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:us-east-1:000000000000:function:rust-stream-function".to_owned(),
    );
    // Each invocation in a trace of its own, as Lambda starts one for an event source
    // mapping's invocation: `Root=1-{epoch seconds}-{96 random bits};Parent=..;Sampled=1`.
    let epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (root, parent) = (
        uuid::Uuid::new_v4().as_u128(),
        uuid::Uuid::new_v4().as_u128(),
    );
    set(
        "lambda-runtime-trace-id",
        format!(
            "Root=1-{:08x}-{:024x};Parent={:016x};Sampled=1",
            epoch as u32,
            root >> 32,
            parent as u64
        ),
    );
    set("content-type", "application/json".to_owned());
    (StatusCode::OK, headers, pending.event.to_string()).into_response()
}

/// `POST /runtime/invocation/{id}/response`.
async fn invocation_response(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> StatusCode {
    let answer = if body.is_empty() {
        Ok(serde_json::Value::Null)
    } else {
        serde_json::from_slice(&body).map_err(|error| format!("the response is not JSON: {error}"))
    };
    answer_invocation(&shared, &id, answer)
}

/// `POST /runtime/invocation/{id}/error`.
async fn invocation_error(
    State(shared): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> StatusCode {
    let error = String::from_utf8_lossy(&body).into_owned();
    answer_invocation(&shared, &id, Err(error))
}

/// `POST /runtime/init/error`: the instance could not start.
async fn init_error(State(shared): State<Arc<Shared>>, body: Bytes) -> StatusCode {
    let error = String::from_utf8_lossy(&body).into_owned();
    tracing::error!(error = %error, "a function instance failed to start");
    shared
        .init_errors
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(error);
    StatusCode::ACCEPTED
}

fn answer_invocation(
    shared: &Shared,
    id: &str,
    answer: Result<serde_json::Value, String>,
) -> StatusCode {
    shared
        .first_answer
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(Instant::now);
    let waiting = shared
        .answers
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(id);
    match waiting {
        Some(waiting) => {
            let _ = waiting.send(answer);
            StatusCode::ACCEPTED
        }
        None => StatusCode::NOT_FOUND,
    }
}
