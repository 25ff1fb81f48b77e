//! One test body on both backends: [`on_each_backend`] runs it on the in-process account and on a
//! live LocalStack, each leg with a fresh [`Backend`]; [`QueueNames`] keeps the queues of each run
//! apart on a shared server; [`live_endpoint`] is how a live test gets its server (named by an
//! environment variable, or a [`LocalStack`] started for the process) or says
//! why it is skipped, and `live_postgres_url` (feature `postgres`) how a live test of the
//! PostgreSQL store gets its server, the same way.

use std::io::Write as _;
use std::panic::AssertUnwindSafe;

#[cfg(feature = "aws")]
use super::localstack::live_broker;
use super::localstack::{install_dir, named_endpoint, LocalStack, LIVE_ENDPOINT_VAR};
use crate::account::Account;

/// The environment variable that, set to `1`, skips live tests and legs instead of starting a
/// LocalStack for them (under `CI` they fail instead: a live test is never skipped there).
pub const SKIP_LIVE_VAR: &str = "RUST_STREAM_SKIP_LIVE";

/// Where [`on_each_backend`] runs a test body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// The in-process account, on a paused clock.
    InProcess,
    /// A live SQS-compatible server (LocalStack), in real time.
    Live,
}

impl BackendKind {
    /// The leg's name in reports: `in-process` or `live`.
    pub fn name(self) -> &'static str {
        match self {
            Self::InProcess => "in-process",
            Self::Live => "live",
        }
    }
}

/// Queue names unique to one test run, so that tests running at once, or runs before this one,
/// on a shared server never read each other's queues. One value gives one name per base: ask it
/// again for the same queue.
///
/// ```
/// use rust_stream::testing::QueueNames;
///
/// let names = QueueNames::new();
/// let orders = names.queue_name("orders.fifo");
/// assert!(orders.starts_with("orders-") && orders.ends_with(".fifo"));
/// assert_eq!(names.queue_name("orders.fifo"), orders);
/// assert_ne!(QueueNames::new().queue_name("orders.fifo"), orders);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueNames {
    run: String,
}

impl QueueNames {
    /// Names for a new run: a random 12-digit hex id.
    pub fn new() -> Self {
        Self {
            run: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
        }
    }

    /// The run's id, as the names carry it.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// `base` with the run's id before any `.fifo`: `orders` → `orders-1a2b3c4d5e6f`. A base too
    /// long for SQS's 80 characters is cut short before the id, which is always kept.
    pub fn queue_name(&self, base: &str) -> String {
        const MAX: usize = 80;
        let (stem, suffix) = match base.strip_suffix(".fifo") {
            Some(stem) => (stem, ".fifo"),
            None => (base, ""),
        };
        let room = MAX - suffix.len() - self.run.len() - 1;
        let mut end = stem.len().min(room);
        while !stem.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}-{}{suffix}", &stem[..end], self.run)
    }
}

impl Default for QueueNames {
    fn default() -> Self {
        Self::new()
    }
}

/// One backend a test body runs on: a fresh broker, what is under it (the in-process account, or
/// the live server's endpoint), and names that keep this run's queues apart from other runs on a
/// shared server.
#[derive(Debug, Clone)]
pub struct Backend {
    broker: crate::SqsBroker,
    kind: BackendKind,
    account: Option<Account>,
    endpoint: Option<String>,
    names: QueueNames,
}

impl Backend {
    /// The broker to build the service and its publishers on. On the live leg it long-polls at
    /// most [`LIVE_POLL_SECONDS`](crate::testing::LIVE_POLL_SECONDS), so that a stop is quick.
    pub fn broker(&self) -> &crate::SqsBroker {
        &self.broker
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// The in-process leg's account, to look into or change its queues directly (`None` on the
    /// live leg).
    pub fn account(&self) -> Option<&Account> {
        self.account.as_ref()
    }

    /// The live leg's endpoint, for a client of your own (an AWS SDK client, a second broker;
    /// `None` on the in-process leg).
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// The leg's queue names ([`QueueNames`]).
    pub fn names(&self) -> &QueueNames {
        &self.names
    }

    /// A queue name unique to this run: `base` with the run's id before any `.fifo`
    /// ([`QueueNames::queue_name`]).
    pub fn queue_name(&self, base: &str) -> String {
        self.names.queue_name(base)
    }
}

/// The live endpoint a live test or leg (`what`) runs on, or `None` after saying on standard
/// error that it is skipped and what to do about it.
///
/// The endpoint is the one [`LIVE_ENDPOINT_VAR`] names, or else that of a
/// [`LocalStack`] started for this process ([`LocalStack::shared`]), unless
/// [`SKIP_LIVE_VAR`] is `1`. The note is written straight to the terminal, past libtest's capture
/// of `eprintln!`, so a skipped live test shows in the test output. Under `CI` the test panics
/// instead: a live test is never skipped there.
///
/// This blocks while a LocalStack starts (seconds; minutes for its first install).
///
/// # Panics
///
/// Under `CI` when there is no live endpoint.
pub fn live_endpoint(what: &str) -> Option<String> {
    if let Some(endpoint) = named_endpoint() {
        return Some(endpoint);
    }
    let skipped = std::env::var(SKIP_LIVE_VAR).is_ok_and(|value| value == "1");
    let why = if skipped {
        format!("{SKIP_LIVE_VAR}=1")
    } else {
        match LocalStack::shared() {
            Ok(localstack) => return Some(localstack.endpoint().to_owned()),
            Err(error) => format!("no LocalStack could be started: {error}"),
        }
    };
    let what_to_do = format!(
        "set {LIVE_ENDPOINT_VAR} to a running LocalStack, or let rust_stream::testing install and \
         start one under {} (it needs Linux, bash, curl, flock and python3 with venv or pip)",
        install_dir().display()
    );
    not_live(what, &why, &what_to_do, skipped)
}

/// The environment variable naming the PostgreSQL server live tests of the PostgreSQL store run
/// on, as a URL: `postgres://postgres@127.0.0.1:5432/postgres`.
#[cfg(feature = "postgres")]
pub const POSTGRES_URL_VAR: &str = "RUST_STREAM_POSTGRES_URL";

/// The PostgreSQL server a live test (`what`) runs on, as a URL, or `None` after saying on
/// standard error that it is skipped and what to do about it; under `CI` the test panics instead,
/// as with [`live_endpoint`].
///
/// The URL is the one [`POSTGRES_URL_VAR`] names. Unlike a LocalStack, no server is started for
/// the test (in a checkout of rust-stream, `scripts/postgres.sh start` starts one, with no Docker,
/// and prints its URL; `scripts/test.sh` does so around the tests). Tests running at once share
/// the server, so each keeps to tables of its own: a schema of its own, say.
///
/// # Panics
///
/// Under `CI` when [`POSTGRES_URL_VAR`] is not set.
#[cfg(feature = "postgres")]
pub fn live_postgres_url(what: &str) -> Option<String> {
    if let Some(url) = std::env::var(POSTGRES_URL_VAR)
        .ok()
        .filter(|url| !url.is_empty())
    {
        return Some(url);
    }
    // [`SKIP_LIVE_VAR`] plays no part: there is nothing to start, so nothing to skip starting.
    let why = format!("{POSTGRES_URL_VAR} is not set");
    let what_to_do = "set it to a PostgreSQL server the test may make a schema in \
         (postgres://USER@HOST:PORT/DATABASE; in a checkout of rust-stream, scripts/postgres.sh \
         start prints one)";
    not_live(what, &why, what_to_do, false)
}

/// `None` for a live test or leg (`what`) without its server, after a note on standard error that
/// says it is skipped, `why`, and `what_to_do` (when [`SKIP_LIVE_VAR`] `skipped` it, unsetting
/// that first). Written straight to the terminal, past libtest's capture of `eprintln!`, so that
/// the skip shows in the test output. Under `CI` a panic instead: a live test is never skipped
/// there.
fn not_live(what: &str, why: &str, what_to_do: &str, skipped: bool) -> Option<String> {
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} cannot run under CI: {why}; {what_to_do}"
    );
    let what_to_do = if skipped {
        format!("unset {SKIP_LIVE_VAR} to run it, or {what_to_do}")
    } else {
        what_to_do.to_owned()
    };
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {what}: {why}; {what_to_do}"
    );
    None
}

/// Runs one test body on each backend, each with a fresh [`Backend`]: the in-process account on
/// a paused clock, then a live LocalStack in real time ([`live_endpoint`]: the one
/// [`LIVE_ENDPOINT_VAR`] names, or one started for the test process; region `us-east-1`, test
/// credentials, long polls of at most [`LIVE_POLL_SECONDS`](crate::testing::LIVE_POLL_SECONDS)). Both legs run even when the first
/// fails; a failing leg is named in the panic. Call it from a plain `#[test]`, not from inside a
/// runtime.
///
/// ```
/// use rust_stream::prelude::*;
/// use rust_stream::testing::{on_each_backend, BackendKind};
///
/// #[derive(serde::Deserialize)]
/// struct Ping {}
///
/// struct Pong;
///
/// impl Handle<Ping> for Pong {
///     async fn handle(&self, _: &Ping, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
///         Ok(())
///     }
/// }
///
/// # fn main() {
/// # // The doc test runs the live leg only on a LocalStack it is given.
/// # if std::env::var_os("RUST_STREAM_LIVE_ENDPOINT").is_none() {
/// #     std::env::set_var("RUST_STREAM_SKIP_LIVE", "1");
/// # }
/// on_each_backend(async |backend| {
///     let pings = SqsQueue::new(backend.queue_name("pings")).create_if_missing();
///     let app = RustStream::new(AppInfo::new("pong", "0.1.0")).with_broker(backend.broker().clone(), |b| {
///         b.include(subscriber(pings.clone(), Pong).build());
///     });
///     let running = rust_stream::testing::TestApp::spawn(app).await.unwrap();
///     backend.broker().publisher(pings).raw("{}").send().await.unwrap();
///     running.drain().await;
///     running.stop().await.unwrap();
///     if backend.kind() == BackendKind::InProcess {
///         // The leg's account, to look into its queues directly.
///         assert!(backend.account().is_some());
///     }
/// });
/// # }
/// ```
///
/// # Panics
///
/// When the body panics on either leg, saying how each leg ended: passed, failed and why, or
/// skipped (each leg's own panic is printed as it happens, with its place); and under `CI` when no live endpoint can be had, so that a live leg is
/// never skipped silently there. Elsewhere a skipped live leg is said on standard error.
pub fn on_each_backend(body: impl AsyncFn(Backend)) {
    on_each_backend_with(true, body);
}

/// [`on_each_backend`], with the in-process leg's clock running in real time: for a body that
/// waits on real work tokio cannot see, other than the library's stores and calls wrapped in
/// [`hold_the_clock`](crate::testing::hold_the_clock) (which hold a paused clock still while a
/// database answers, so the inbox and outbox on SQLite or PostgreSQL run in [`on_each_backend`]
/// itself): a server of your own the service calls, say.
///
/// # Panics
///
/// As [`on_each_backend`].
pub fn on_each_backend_in_real_time(body: impl AsyncFn(Backend)) {
    on_each_backend_with(false, body);
}

fn on_each_backend_with(paused: bool, body: impl AsyncFn(Backend)) {
    let in_process = || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(paused)
            .build()
            .expect("a test runtime");
        let account = Account::new();
        runtime.block_on(body(Backend {
            broker: crate::SqsBroker::with_account(&account),
            kind: BackendKind::InProcess,
            account: Some(account.clone()),
            endpoint: None,
            names: QueueNames::new(),
        }));
        true
    };
    let live = || {
        // Asked here, after the in-process leg, so that a leg that cannot run under CI is a
        // failed leg like any other: the in-process leg's result is reported too.
        let Some(endpoint) = live_endpoint("live leg") else {
            return false;
        };
        live(&endpoint, &body);
        true
    };
    run_legs([
        (BackendKind::InProcess, &in_process as &dyn Fn() -> bool),
        (BackendKind::Live, &live),
    ]);
}

/// Runs every leg (each says whether it ran or was skipped), each behind a panic catch, then
/// panics if any failed, saying how each leg ended.
fn run_legs<const N: usize>(legs: [(BackendKind, &dyn Fn() -> bool); N]) {
    let mut ends = Vec::new();
    let mut failed = false;
    for (kind, leg) in legs {
        let end = match std::panic::catch_unwind(AssertUnwindSafe(leg)) {
            Ok(true) => "passed".to_owned(),
            Ok(false) => "was skipped".to_owned(),
            Err(panic) => {
                failed = true;
                format!("failed: {}", panic_message(&*panic))
            }
        };
        ends.push(format!("the {} leg {end}", kind.name()));
    }
    if failed {
        panic!("on_each_backend: {}", ends.join("; "));
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(a panic without a message)")
}

#[cfg(feature = "aws")]
fn live(endpoint: &str, body: &impl AsyncFn(Backend)) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a test runtime");
    runtime.block_on(async {
        body(Backend {
            broker: live_broker(endpoint).await,
            kind: BackendKind::Live,
            account: None,
            endpoint: Some(endpoint.to_owned()),
            names: QueueNames::new(),
        })
        .await;
    });
}

#[cfg(not(feature = "aws"))]
fn live(_endpoint: &str, _body: &impl AsyncFn(Backend)) {
    panic!("a live endpoint was found, but rust-stream was built without its `aws` feature");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_legs_run_when_the_first_fails_and_the_panic_names_it() {
        let ran = std::cell::Cell::new(0);
        let first = || -> bool {
            ran.set(ran.get() + 1);
            panic!("the receipt never came");
        };
        let second = || {
            ran.set(ran.get() + 10);
            true
        };
        let panic = std::panic::catch_unwind(AssertUnwindSafe(|| {
            run_legs([
                (BackendKind::InProcess, &first as &dyn Fn() -> bool),
                (BackendKind::Live, &second),
            ]);
        }))
        .unwrap_err();
        assert_eq!(ran.get(), 11, "both legs ran");
        assert_eq!(
            panic_message(&*panic),
            "on_each_backend: the in-process leg failed: the receipt never came; the live leg passed"
        );
        // A skipped live leg is said so.
        let skipped = || false;
        let panic = std::panic::catch_unwind(AssertUnwindSafe(|| {
            run_legs([
                (BackendKind::InProcess, &first as &dyn Fn() -> bool),
                (BackendKind::Live, &skipped),
            ]);
        }))
        .unwrap_err();
        assert!(
            panic_message(&*panic).ends_with("; the live leg was skipped"),
            "{}",
            panic_message(&*panic)
        );
    }

    #[test]
    fn both_failures_are_reported() {
        let first = || -> bool { panic!("one") };
        let second = || -> bool { panic!("two {}", 2) };
        let panic = std::panic::catch_unwind(AssertUnwindSafe(|| {
            run_legs([
                (BackendKind::InProcess, &first as &dyn Fn() -> bool),
                (BackendKind::Live, &second),
            ]);
        }))
        .unwrap_err();
        assert_eq!(
            panic_message(&*panic),
            "on_each_backend: the in-process leg failed: one; the live leg failed: two 2"
        );
    }

    #[test]
    fn queue_names_keep_fifo_last_and_fit_sqs() {
        let names = QueueNames::new();
        let run = names.run().to_owned();
        assert_eq!(names.queue_name("orders"), format!("orders-{run}"));
        assert_eq!(
            names.queue_name("orders.fifo"),
            format!("orders-{run}.fifo")
        );
        let long = names.queue_name(&format!("{}.fifo", "a".repeat(90)));
        assert_eq!(long.len(), 80);
        assert!(long.ends_with(&format!("-{run}.fifo")), "{long}");
    }
}
