//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use rust_stream::account::Account;
use rust_stream::transport::{
    QueueAttributes, ReceiveMessage, ReceivedMessage, SendMessage, Transport, TransportError,
};

/// Runs each named scenario (an `async fn(Backend<T>)` of the test file) on both backends: the
/// in-process account on a paused clock, and LocalStack in real time (failing under CI when no
/// LocalStack was started).
#[macro_export]
macro_rules! both_backends {
    ($($scenario:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test(start_paused = true)]
                async fn $scenario() {
                    super::$scenario(super::Backend::in_process()).await;
                }
            )*
        }
        mod live {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    if let Some(backend) = super::Backend::live().await {
                        super::$scenario(backend).await;
                    }
                }
            )*
        }
    };
}

/// Visible, in flight and delayed messages, as the queue reports them
/// (`ApproximateNumberOfMessages`, `...NotVisible`, `...Delayed`): `(0, 0, 0)` is a queue whose
/// every message was deleted, which no receive can tell from one whose messages are in flight.
pub async fn left<T: Transport>(transport: &T, url: &str) -> (u64, u64, u64) {
    let attributes = transport
        .get_queue_attributes(
            url,
            &[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )
        .await
        .unwrap();
    let count = |name: &str| -> u64 {
        attributes
            .get(name)
            .unwrap_or_else(|| panic!("the queue reports no {name}: {attributes:?}"))
            .parse()
            .expect("a count")
    };
    (
        count("ApproximateNumberOfMessages"),
        count("ApproximateNumberOfMessagesNotVisible"),
        count("ApproximateNumberOfMessagesDelayed"),
    )
}

/// Log lines written to memory (a `tracing_subscriber` writer: `.with_writer(move || log.clone())`),
/// for a test to read what was logged.
#[derive(Clone, Default)]
pub struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLog {
    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `body` logs (every `tracing` event, as text), run to its end on a current-thread runtime
/// with tokio's paused test clock: for tests of the warnings a setting or a failure logs.
pub fn logged_while<F: std::future::Future<Output = ()>>(body: impl FnOnce() -> F) -> String {
    let captured = CapturedLog::default();
    let writer = captured.clone();
    let logging = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(logging);
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(body());
    captured.text()
}

/// Writes a test's figures (a seed, counts of faults, re-deliveries) straight to the terminal,
/// past libtest's capture of `println!`, so that every run shows them, not only a failing one.
pub fn report(figures: impl std::fmt::Display) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{figures}");
}

/// Queue attributes from `(name, value)` pairs.
pub fn attributes(pairs: &[(&str, &str)]) -> QueueAttributes {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The bodies of received messages, in the order received.
pub fn bodies(messages: &[ReceivedMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.body.as_str()).collect()
}

/// Creates a FIFO queue with these extra attributes.
pub async fn fifo_queue(account: &Account, name: &str, extra: &[(&str, &str)]) -> String {
    let mut attrs = attributes(extra);
    attrs.insert("FifoQueue".into(), "true".into());
    account
        .create_queue(name, attrs)
        .await
        .expect("create FIFO queue")
}

/// Sends `body` to a FIFO queue's `group`, deduplicated by the body (spaces made `_`).
pub async fn send_fifo(account: &Account, url: &str, group: &str, body: &str) -> String {
    let message = SendMessage::new(body)
        .group_id(group)
        .dedup_id(body.replace(' ', "_"));
    account
        .send_message(url, message)
        .await
        .expect("send")
        .message_id
}

/// One immediate receive of up to `max` messages.
pub async fn receive(account: &Account, url: &str, max: i32) -> Vec<ReceivedMessage> {
    account
        .receive_message(url, ReceiveMessage::new(max))
        .await
        .expect("receive")
}

/// Deletes every received message.
pub async fn delete_all(account: &Account, url: &str, messages: &[ReceivedMessage]) {
    for message in messages {
        account
            .delete_message(url, &message.receipt_handle)
            .await
            .expect("delete");
    }
}

/// Every message of the queue `name`, received and deleted, in the order received.
pub async fn drain(account: &Account, name: &str) -> Vec<ReceivedMessage> {
    let url = account.get_queue_url(name).await.expect("queue exists");
    let mut all = Vec::new();
    loop {
        let batch = receive(account, &url, 10).await;
        if batch.is_empty() {
            return all;
        }
        delete_all(account, &url, &batch).await;
        all.extend(batch);
    }
}

/// Releases a received message (visibility 0).
pub async fn release(
    account: &Account,
    url: &str,
    message: &ReceivedMessage,
) -> Result<(), TransportError> {
    account
        .change_message_visibility(url, &message.receipt_handle, 0)
        .await
}

/// The PostgreSQL server a live store test (`what`) runs on, as a URL: the one
/// `RUST_STREAM_POSTGRES_URL` names (`scripts/test.sh` starts a server and sets it;
/// `scripts/postgres.sh start` prints one), or `None` with a loud note when there is none. Under
/// CI a missing server fails the test. The kit's `live_postgres_url`, as [`backend::Backend::live`]
/// is its `live_endpoint` for LocalStack: the same note and the same failure under CI.
pub fn postgres_url(what: &str) -> Option<String> {
    rust_stream::testing::live_postgres_url(what)
}

pub mod kills;
pub mod proxy;
pub mod stores;

/// What the engine's property tests share (`engine_fifo.rs`, `batch_fifo.rs`): how many cases
/// they run, and how each case runs.
pub mod property {
    use std::future::Future;
    use std::time::Duration;

    use proptest::test_runner::TestCaseError;
    use tokio::time::Instant;

    /// `PROPTEST_CASES` from the environment, or `default`.
    pub fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    }

    /// The most tokio time a case may take. Sends take up to 2 minutes, each message at most a
    /// few retries of seconds, and each transport fault at most a visibility timeout or an
    /// outage: an hour means the engine hung.
    pub const CASE_BOUND: Duration = Duration::from_secs(3600);

    /// Runs a case on a paused clock, failing it if it does not finish within [`CASE_BOUND`] of
    /// tokio time (on a paused clock a hang costs no real time).
    pub fn run_case(
        case: impl Future<Output = Result<(), TestCaseError>>,
    ) -> Result<(), TestCaseError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let started = Instant::now();
            match tokio::time::timeout(CASE_BOUND, case).await {
                Ok(result) => result,
                Err(_) => Err(TestCaseError::fail(format!(
                    "the case did not finish within {:?} of tokio time",
                    started.elapsed()
                ))),
            }
        })
    }
}

/// The engine's gauges, read back from a Prometheus recorder installed once per test binary.
pub mod gauges {
    use std::sync::OnceLock;

    use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

    /// The binary's only recorder, installed on first use: call it before the engine starts, so
    /// the gauges it sets are recorded.
    pub fn prometheus() -> &'static PrometheusHandle {
        static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
        HANDLE.get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                .expect("the only recorder of this test binary")
        })
    }

    /// The gauge `name` (dotted, as the engine names it) of `queue`, if it was set.
    pub fn gauge(name: &str, queue: &str) -> Option<f64> {
        let text = prometheus().render();
        let metric = name.replace('.', "_");
        text.lines()
            .filter(|line| line.starts_with(&metric) && line.contains(&format!("\"{queue}\"")))
            .find_map(|line| line.rsplit(' ').next()?.parse().ok())
    }
}

pub mod engine {
    //! Helpers for tests of services: a job type, a scripted handler, and fault-injecting hooks
    //! over a real account.

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use rust_stream::account::Account;
    use rust_stream::model::rules::ErrorKind;
    use rust_stream::transport::layer::{Hooked, Hooks};
    use rust_stream::transport::{
        BatchFailure, BatchResult, ChangeVisibilityEntry, DeleteEntry, ReceiveMessage,
        ReceivedMessage, Transport, TransportError,
    };
    use rust_stream::{Context, Handle, HandlerOutcome};
    use serde::{Deserialize, Serialize};

    /// A handler of [`Job`]s that records when each was handled, taking `takes` each, and waits
    /// first at `gate` when there is one (closed: every call waits for a permit).
    #[derive(Clone, Default)]
    pub struct Handled {
        pub at: Arc<Mutex<Vec<tokio::time::Instant>>>,
        pub gate: Option<Arc<tokio::sync::Semaphore>>,
        pub takes: std::time::Duration,
    }

    impl Handled {
        /// How many jobs were handled.
        pub fn count(&self) -> usize {
            self.at.lock().unwrap().len()
        }
    }

    impl Handle<Job> for Handled {
        async fn handle(&self, _: &Job, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
            if let Some(gate) = &self.gate {
                gate.acquire().await.unwrap().forget();
            }
            tokio::time::sleep(self.takes).await;
            self.at.lock().unwrap().push(tokio::time::Instant::now());
            Ok(())
        }
    }

    /// The message of engine tests: a group and a number within it.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Job {
        pub group: String,
        pub n: u32,
    }

    impl Job {
        pub fn new(group: &str, n: u32) -> Self {
            Self {
                group: group.to_owned(),
                n,
            }
        }
    }

    /// One handler call as the handler saw it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Seen {
        pub job: Job,
        pub receive_count: u32,
        pub message_id: String,
    }

    /// The calls a scripted handler has seen, shared with the test.
    pub type Log = Arc<Mutex<Vec<Seen>>>;

    /// A handler that records each call, then answers as its script says.
    pub struct Scripted<F> {
        pub log: Log,
        script: F,
    }

    impl<F> Scripted<F>
    where
        F: Fn(&Job, &Context<'_>) -> Result<(), HandlerOutcome> + Send + Sync + 'static,
    {
        pub fn new(script: F) -> (Self, Log) {
            let log = Log::default();
            (
                Self {
                    log: log.clone(),
                    script,
                },
                log,
            )
        }
    }

    impl<F> Handle<Job> for Scripted<F>
    where
        F: Fn(&Job, &Context<'_>) -> Result<(), HandlerOutcome> + Send + Sync + 'static,
    {
        async fn handle(
            &self,
            job: &Job,
            _outs: &(),
            ctx: &mut Context<'_>,
        ) -> Result<(), HandlerOutcome> {
            self.log.lock().unwrap().push(Seen {
                job: job.clone(),
                receive_count: ctx.sqs().receive_count(),
                message_id: ctx.message_id().to_owned(),
            });
            (self.script)(job, ctx)
        }
    }

    /// The jobs of a log, in the order handled.
    pub fn jobs(log: &Log) -> Vec<Job> {
        log.lock()
            .unwrap()
            .iter()
            .map(|seen| seen.job.clone())
            .collect()
    }

    /// One handler call of a FIFO group, as [`replay_breach`] reads them.
    #[derive(Debug, Clone)]
    pub struct Call {
        pub group: String,
        /// The message's place in the order sent (any increasing numbering within the group).
        pub n: u32,
        pub message_id: String,
        pub at: tokio::time::Instant,
    }

    /// Checks the FIFO replay contract of a consumer that deletes a group's runs together
    /// (`docs/fifo.md`, "Runs and replays") against its handler `calls`, in the order they
    /// started, and the deletes that failed for good (message id, when the failure was answered):
    /// a message whose delete failed is handled again, and between its call before the failure
    /// and that next call its group ran nothing but the rest of that call's run (calls that
    /// started by the time the failure was answered, at most `batch - 1` of them) and replays of
    /// earlier messages. So replays come in order, and never after a message of the group the
    /// lane had not reached when the delete failed. The first breach, if any.
    pub fn replay_breach(
        calls: &[Call],
        failed_for_good: &[(String, tokio::time::Instant)],
        batch: usize,
    ) -> Option<String> {
        for (message_id, failed_at) in failed_for_good {
            // The failed delete is of the message's last call that started by the failure.
            let Some(before) = calls
                .iter()
                .rposition(|call| &call.message_id == message_id && call.at <= *failed_at)
            else {
                continue;
            };
            let Call { group, n, .. } = &calls[before];
            let mut later_of_its_run = 0;
            let mut again = false;
            for call in calls[before + 1..]
                .iter()
                .filter(|call| &call.group == group)
            {
                if &call.message_id == message_id {
                    again = true;
                    break;
                }
                if call.n < *n {
                    continue;
                }
                if call.at > *failed_at {
                    return Some(format!(
                        "{group}/{} ran after the delete of {group}/{n} failed and before {group}/{n} ran again",
                        call.n
                    ));
                }
                later_of_its_run += 1;
            }
            if !again {
                return Some(format!(
                    "{group}/{n}'s delete failed, but it was never handled again"
                ));
            }
            if later_of_its_run >= batch {
                return Some(format!(
                    "{later_of_its_run} later messages of {group} ran between {group}/{n} and its replay: more than its run"
                ));
            }
        }
        None
    }

    /// Hooks that make a transport fail on demand (a real account behind them, as a rule): the
    /// next `n` entries of delete batches fail as a service-side error (`SenderFault: false`), or
    /// with a permanent one; the next `n` receives fail (the network is down), or receives or
    /// delete calls panic; receives can answer more than was asked.
    #[derive(Clone, Default)]
    pub struct Faulty {
        pub transient_delete_failures: Arc<AtomicUsize>,
        pub permanent_delete_failures: Arc<AtomicUsize>,
        pub receive_panics: Arc<AtomicUsize>,
        /// The next `n` receives fail as `Unavailable`, as when the network is down.
        pub receive_failures: Arc<AtomicUsize>,
        pub delete_panics: Arc<AtomicUsize>,
        /// Receives ask the account for 10, whatever the caller asked.
        pub greedy: Arc<std::sync::atomic::AtomicBool>,
        /// Every visibility change fails (a service-side error), so held messages time out.
        pub visibility_fails: Arc<std::sync::atomic::AtomicBool>,
        /// `GetQueueUrl` of this queue takes this long.
        pub slow_lookup: Arc<Mutex<Option<(String, std::time::Duration)>>>,
        /// The message id of each receipt handle received through these hooks.
        pub received: Arc<Mutex<std::collections::HashMap<String, String>>>,
        /// Each delete failed for good (an injected permanent failure): the message id, and when.
        pub failed_for_good: Arc<Mutex<Vec<(String, tokio::time::Instant)>>>,
        /// The next `n` receives, deletes and visibility changes are slow: each sleeps for
        /// `slow_by` before it reaches the account (a slow network or a loaded SQS).
        pub slow_calls: Arc<AtomicUsize>,
        pub slow_by: Arc<Mutex<std::time::Duration>>,
        /// How many calls were slowed: proof that the fault was met.
        pub slowed: Arc<AtomicUsize>,
    }

    impl Faulty {
        /// `account` behind these faults.
        pub fn over(&self, account: &Account) -> Hooked<Account, Faulty> {
            Hooked::new(account.clone(), self.clone())
        }

        /// The account, with `GetQueueUrl` of `queue` taking `delay`.
        pub fn with_slow_lookup(
            account: &Account,
            queue: &str,
            delay: std::time::Duration,
        ) -> Hooked<Account, Faulty> {
            let faulty = Self::default();
            *faulty.slow_lookup.lock().unwrap() = Some((queue.to_owned(), delay));
            faulty.over(account)
        }
    }

    fn take_one(counter: &AtomicUsize) -> bool {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    impl Faulty {
        /// Sleeps before the call when a slow call is due.
        async fn maybe_slow(&self) {
            if take_one(&self.slow_calls) {
                self.slowed.fetch_add(1, Ordering::AcqRel);
                let by = *self.slow_by.lock().unwrap();
                tokio::time::sleep(by).await;
            }
        }
    }

    // `async fn`s: an injected panic comes when the call is polled, inside the engine's guard,
    // as a panic inside a transport's call would.
    impl Hooks for Faulty {
        async fn get_queue_url(
            &self,
            inner: &impl Transport,
            name: &str,
        ) -> Result<String, TransportError> {
            let delay = self
                .slow_lookup
                .lock()
                .unwrap()
                .as_ref()
                .filter(|(queue, _)| queue == name)
                .map(|(_, delay)| *delay);
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            inner.get_queue_url(name).await
        }

        async fn receive_message(
            &self,
            inner: &impl Transport,
            url: &str,
            request: ReceiveMessage,
        ) -> Result<Vec<ReceivedMessage>, TransportError> {
            if take_one(&self.receive_panics) {
                panic!("injected panic in a receive");
            }
            if take_one(&self.receive_failures) {
                return Err(TransportError::Unavailable {
                    message: "injected receive failure".into(),
                });
            }
            self.maybe_slow().await;
            let mut request = request;
            if self.greedy.load(Ordering::Acquire) {
                request.max_number_of_messages = 10;
            }
            let received = inner.receive_message(url, request).await?;
            self.received.lock().unwrap().extend(
                received
                    .iter()
                    .map(|message| (message.receipt_handle.clone(), message.message_id.clone())),
            );
            Ok(received)
        }

        async fn delete_message_batch(
            &self,
            inner: &impl Transport,
            url: &str,
            entries: Vec<DeleteEntry>,
        ) -> Result<BatchResult<()>, TransportError> {
            if take_one(&self.delete_panics) {
                panic!("injected panic in a delete");
            }
            self.maybe_slow().await;
            let mut pass = Vec::new();
            let mut failed = Vec::new();
            for entry in entries {
                if take_one(&self.transient_delete_failures) {
                    failed.push(BatchFailure {
                        id: entry.id,
                        kind: ErrorKind::InternalError,
                        sender_fault: false,
                        message: "injected service-side failure".into(),
                    });
                } else if take_one(&self.permanent_delete_failures) {
                    let message_id = self
                        .received
                        .lock()
                        .unwrap()
                        .get(&entry.receipt_handle)
                        .cloned();
                    self.failed_for_good.lock().unwrap().push((
                        message_id.unwrap_or_else(|| entry.receipt_handle.clone()),
                        tokio::time::Instant::now(),
                    ));
                    failed.push(BatchFailure {
                        id: entry.id,
                        kind: ErrorKind::ReceiptHandleIsInvalid,
                        sender_fault: true,
                        message: "injected permanent failure".into(),
                    });
                } else {
                    pass.push(entry);
                }
            }
            let mut result = if pass.is_empty() {
                BatchResult::default()
            } else {
                inner.delete_message_batch(url, pass).await?
            };
            result.failed.extend(failed);
            Ok(result)
        }

        async fn change_message_visibility_batch(
            &self,
            inner: &impl Transport,
            url: &str,
            entries: Vec<ChangeVisibilityEntry>,
        ) -> Result<BatchResult<()>, TransportError> {
            self.maybe_slow().await;
            if self.visibility_fails.load(Ordering::Acquire) {
                let failed = entries
                    .into_iter()
                    .map(|entry| BatchFailure {
                        id: entry.id,
                        kind: ErrorKind::ReceiptHandleIsInvalid,
                        sender_fault: true,
                        message: "injected visibility failure".into(),
                    })
                    .collect();
                return Ok(BatchResult {
                    successful: Vec::new(),
                    failed,
                });
            }
            inner.change_message_visibility_batch(url, entries).await
        }
    }
}

pub mod recording {
    //! Hooks that record, in the order they happen, the receives, sends, deletes and visibility
    //! changes that go through them, over any transport (the in-process account or the aws-sdk
    //! one): what a test needs to prove an order ("deleted only after its outputs were sent") or
    //! a call ("extended while its handler ran") rather than an end state.

    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use rust_stream::transport::layer::{Hooked, Hooks};
    use rust_stream::transport::{
        BatchResult, ChangeVisibilityEntry, DeleteEntry, EntryId, ReceiveMessage, ReceivedMessage,
        SendBatchEntry, SentMessage, Transport, TransportError,
    };

    /// One call, as the recording saw it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Call {
        /// A receive answered these `(message id, receipt handle)`s.
        Received {
            queue_url: String,
            messages: Vec<(String, String)>,
        },
        /// A send batch was answered (recorded after the answer: the sends are confirmed): the
        /// entries that succeeded, `(dedup id, message id)`.
        Sent {
            queue_url: String,
            messages: Vec<(Option<String>, String)>,
        },
        /// A delete batch went out with these receipt handles (recorded before the call).
        Delete {
            queue_url: String,
            receipt_handles: Vec<String>,
        },
        /// A visibility change batch went out (recorded before the call, its outcome filled in
        /// after): `(receipt handle, seconds, succeeded)` of each entry.
        ChangeVisibility {
            queue_url: String,
            changes: Vec<(String, i32, bool)>,
        },
    }

    /// `T`, its calls recorded.
    pub type Recording<T> = Hooked<T, Recorder>;

    /// The calls recorded so far, shared by its clones.
    #[derive(Clone, Default)]
    pub struct Recorder {
        calls: Arc<Mutex<Vec<Call>>>,
    }

    impl Recorder {
        /// `inner`, its calls recorded by this recorder.
        pub fn over<T: Transport>(&self, inner: T) -> Recording<T> {
            Hooked::new(inner, self.clone())
        }

        /// Every call so far, in order.
        pub fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }

        fn record(&self, call: Call) -> usize {
            let mut calls = self.calls.lock().unwrap();
            calls.push(call);
            calls.len() - 1
        }

        /// The receipt handles each message id was received with, in receive order.
        pub fn receipts(&self) -> HashMap<String, Vec<String>> {
            let mut receipts: HashMap<String, Vec<String>> = HashMap::new();
            for call in self.calls.lock().unwrap().iter() {
                if let Call::Received { messages, .. } = call {
                    for (id, handle) in messages {
                        receipts.entry(id.clone()).or_default().push(handle.clone());
                    }
                }
            }
            receipts
        }

        /// Receive calls answered so far, on any queue.
        pub fn receive_calls(&self) -> usize {
            self.calls()
                .iter()
                .filter(|call| matches!(call, Call::Received { .. }))
                .count()
        }

        /// Messages received more than once: each a lease that ran out, where nothing fails.
        pub fn received_more_than_once(&self) -> usize {
            self.receipts()
                .values()
                .filter(|handles| handles.len() > 1)
                .count()
        }

        /// How many times `message_id` was received.
        pub fn receives_of(&self, message_id: &str) -> usize {
            self.receipts().get(message_id).map_or(0, Vec::len)
        }

        /// The positions (in [`Self::calls`]) of the delete calls naming any receipt of
        /// `message_id`.
        pub fn deletes_of(&self, message_id: &str) -> Vec<usize> {
            let handles = self.receipts().remove(message_id).unwrap_or_default();
            self.calls
                .lock()
                .unwrap()
                .iter()
                .enumerate()
                .filter(|(_, call)| {
                    matches!(call, Call::Delete { receipt_handles, .. }
                        if receipt_handles.iter().any(|h| handles.contains(h)))
                })
                .map(|(at, _)| at)
                .collect()
        }

        /// The positions of the confirmed sends of a message with this deduplication id.
        pub fn sends_with_dedup_id(&self, dedup_id: &str) -> Vec<usize> {
            self.calls
                .lock()
                .unwrap()
                .iter()
                .enumerate()
                .filter(|(_, call)| {
                    matches!(call, Call::Sent { messages, .. }
                        if messages.iter().any(|(dedup, _)| dedup.as_deref() == Some(dedup_id)))
                })
                .map(|(at, _)| at)
                .collect()
        }

        /// The visibility changes made for any receive of `message_id`: `(seconds, succeeded)`.
        pub fn visibility_changes_of(&self, message_id: &str) -> Vec<(i32, bool)> {
            let handles = self.receipts().remove(message_id).unwrap_or_default();
            self.visibility_changes()
                .into_iter()
                .filter(|(_, handle, _, _)| handles.contains(handle))
                .map(|(_, _, seconds, ok)| (seconds, ok))
                .collect()
        }

        pub fn failed_visibility_changes(&self) -> usize {
            self.visibility_changes()
                .iter()
                .filter(|(_, _, _, ok)| !ok)
                .count()
        }

        /// Visibility changes sent for a receipt handle after its delete was sent:
        /// `(position, receipt handle)`.
        pub fn visibility_changes_after_delete(&self) -> Vec<(usize, String)> {
            let changes = self.visibility_changes();
            let calls = self.calls.lock().unwrap();
            let deleted_at = |handle: &str| {
                calls.iter().position(|call| {
                    matches!(call, Call::Delete { receipt_handles, .. }
                        if receipt_handles.iter().any(|h| h == handle))
                })
            };
            changes
                .into_iter()
                .filter(|(at, handle, _, _)| deleted_at(handle).is_some_and(|d| d < *at))
                .map(|(at, handle, _, _)| (at, handle))
                .collect()
        }

        /// `(position, receipt handle, seconds, succeeded)` of every visibility change entry.
        fn visibility_changes(&self) -> Vec<(usize, String, i32, bool)> {
            let calls = self.calls.lock().unwrap();
            let mut changes = Vec::new();
            for (at, call) in calls.iter().enumerate() {
                if let Call::ChangeVisibility {
                    changes: entries, ..
                } = call
                {
                    for (handle, seconds, ok) in entries {
                        changes.push((at, handle.clone(), *seconds, *ok));
                    }
                }
            }
            changes
        }
    }

    impl Hooks for Recorder {
        async fn send_message_batch(
            &self,
            inner: &impl Transport,
            url: &str,
            entries: Vec<SendBatchEntry>,
        ) -> Result<BatchResult<SentMessage>, TransportError> {
            let dedup_ids: HashMap<EntryId, Option<String>> = entries
                .iter()
                .map(|entry| (entry.id.clone(), entry.message.dedup_id.clone()))
                .collect();
            let result = inner.send_message_batch(url, entries).await?;
            let messages = result
                .successful
                .iter()
                .map(|(id, sent)| (dedup_ids[id].clone(), sent.message_id.clone()))
                .collect();
            self.record(Call::Sent {
                queue_url: url.to_owned(),
                messages,
            });
            Ok(result)
        }

        async fn receive_message(
            &self,
            inner: &impl Transport,
            url: &str,
            request: ReceiveMessage,
        ) -> Result<Vec<ReceivedMessage>, TransportError> {
            let received = inner.receive_message(url, request).await?;
            self.record(Call::Received {
                queue_url: url.to_owned(),
                messages: received
                    .iter()
                    .map(|m| (m.message_id.clone(), m.receipt_handle.clone()))
                    .collect(),
            });
            Ok(received)
        }

        async fn delete_message_batch(
            &self,
            inner: &impl Transport,
            url: &str,
            entries: Vec<DeleteEntry>,
        ) -> Result<BatchResult<()>, TransportError> {
            self.record(Call::Delete {
                queue_url: url.to_owned(),
                receipt_handles: entries.iter().map(|e| e.receipt_handle.clone()).collect(),
            });
            inner.delete_message_batch(url, entries).await
        }

        async fn change_message_visibility_batch(
            &self,
            inner: &impl Transport,
            url: &str,
            entries: Vec<ChangeVisibilityEntry>,
        ) -> Result<BatchResult<()>, TransportError> {
            let at = self.record(Call::ChangeVisibility {
                queue_url: url.to_owned(),
                changes: entries
                    .iter()
                    .map(|e| (e.receipt_handle.clone(), e.visibility_timeout, false))
                    .collect(),
            });
            let result = inner
                .change_message_visibility_batch(url, entries.clone())
                .await?;
            if let Call::ChangeVisibility { changes, .. } = &mut self.calls.lock().unwrap()[at] {
                for (change, entry) in changes.iter_mut().zip(&entries) {
                    change.2 = result.successful.iter().any(|(id, ())| *id == entry.id);
                }
            }
            Ok(result)
        }
    }
}

pub mod backend {
    //! One test body, two backends: the in-process account (on a paused clock) and a live
    //! LocalStack (real time), reached through the same `Transport`.

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use rust_stream::account::Account;
    use rust_stream::aws::AwsTransport;
    use rust_stream::testing::QueueNames;
    use rust_stream::transport::layer::{Hooked, Hooks};
    use rust_stream::transport::{
        QueueAttributes, ReceiveMessage, ReceivedMessage, Transport, TransportError,
    };
    use rust_stream::SqsBroker;

    use tokio::time::Instant;

    use super::recording::{Recorder, Recording};

    /// Which backend a test body runs on, for the places where LocalStack deviates from SQS.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        InProcess,
        LocalStack,
    }

    /// A backend: a transport, a broker over the same backend, and the kit's per-run names that
    /// keep queues of concurrent tests and earlier runs apart.
    pub struct Backend<T> {
        pub transport: T,
        pub broker: SqsBroker,
        pub kind: Kind,
        names: QueueNames,
    }

    impl Backend<Account> {
        pub fn in_process() -> Self {
            let account = Account::new();
            Self {
                broker: SqsBroker::with_account(&account),
                transport: account,
                kind: Kind::InProcess,
                names: QueueNames::new(),
            }
        }
    }

    impl Backend<AwsTransport> {
        /// The live backend, or `None` (with a loud note) when no LocalStack was started. Under CI
        /// a missing endpoint fails the test: a live test is never skipped silently there.
        pub async fn live() -> Option<Self> {
            let endpoint = rust_stream::testing::live_endpoint("live test")?;
            // Nothing to load for a local stand-in: every live test goes through this constructor.
            let transport = AwsTransport::local(&endpoint, "us-east-1");
            let broker = SqsBroker::with_transport(transport.clone());
            Some(Self {
                transport,
                broker,
                kind: Kind::LocalStack,
                names: QueueNames::new(),
            })
        }
    }

    /// Receives as over a network, counted: each receive in flight (as its caller sees it) is
    /// counted in `receiving`; with `server` set (the account), a receive whose caller gives it
    /// up goes on at the server, as SQS's and LocalStack's long polls do, taking what arrives
    /// for nobody, hidden for the visibility it asked for.
    #[derive(Clone, Default)]
    pub struct Network {
        server: Option<Account>,
        receiving: Arc<AtomicUsize>,
    }

    impl Network {
        /// Receives in flight now, as their callers see them.
        pub fn receiving(&self) -> usize {
            self.receiving.load(Ordering::SeqCst)
        }
    }

    /// Counts a receive in flight until its caller has its answer or gives it up.
    struct InFlight(Arc<AtomicUsize>);

    impl Drop for InFlight {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl Hooks for Network {
        async fn receive_message(
            &self,
            inner: &impl Transport,
            queue_url: &str,
            request: ReceiveMessage,
        ) -> Result<Vec<ReceivedMessage>, TransportError> {
            self.receiving.fetch_add(1, Ordering::SeqCst);
            let _in_flight = InFlight(self.receiving.clone());
            match &self.server {
                Some(account) => {
                    let (account, url) = (account.clone(), queue_url.to_owned());
                    tokio::spawn(async move { account.receive_message(&url, request).await })
                        .await
                        .expect("the server's receive ran")
                }
                None => inner.receive_message(queue_url, request).await,
            }
        }

        fn abandoned_receive_takes_nothing(&self, inner: &impl Transport) -> bool {
            self.server.is_none() && inner.abandoned_receive_takes_nothing()
        }
    }

    impl Backend<Hooked<Account, Network>> {
        /// The in-process account answering receives as SQS does over a network (see
        /// [`Network`]), on a paused clock as the account always is.
        pub fn in_process_over_network() -> Self {
            let backend = Backend::in_process();
            let network = Network {
                server: Some(backend.transport.clone()),
                receiving: Arc::default(),
            };
            backend.hooked(network)
        }
    }

    impl<T: Transport + Clone> Backend<T> {
        /// The same backend behind `hooks`, with a broker over it.
        pub fn hooked<H: Hooks + Clone>(self, hooks: H) -> Backend<Hooked<T, H>> {
            let transport = Hooked::new(self.transport, hooks);
            Backend {
                broker: SqsBroker::with_transport(transport.clone()),
                transport,
                kind: self.kind,
                names: self.names,
            }
        }

        /// The same backend behind a [`Recording`] transport, with a broker over it: what the
        /// services of the test do is recorded call by call.
        pub fn recorded(self) -> Backend<Recording<T>> {
            let transport = Recorder::default().over(self.transport);
            Backend {
                broker: SqsBroker::with_transport(transport.clone()),
                transport,
                kind: self.kind,
                names: self.names,
            }
        }
    }

    impl<T: Transport> Backend<T> {
        /// A unique queue name for this run: `{base}-{run}`, with `.fifo` kept at the end (the
        /// kit's `QueueNames`, the one way tests name queues per run).
        pub fn name(&self, base: &str) -> String {
            self.names.queue_name(base)
        }

        /// Creates a queue (FIFO when `base` ends in `.fifo`) with these attributes.
        pub async fn queue(&self, base: &str, extra: &[(&str, &str)]) -> String {
            let name = self.name(base);
            let mut attributes: QueueAttributes = extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            if name.ends_with(".fifo") {
                attributes.insert("FifoQueue".into(), "true".into());
            }
            self.transport
                .create_queue(&name, attributes)
                .await
                .expect("create queue")
        }

        /// The queue's ARN.
        pub async fn arn(&self, url: &str) -> String {
            let attributes = self
                .transport
                .get_queue_attributes(url, &["QueueArn"])
                .await
                .unwrap();
            attributes["QueueArn"].clone()
        }

        /// Receives what is visible on a queue, up to `want` messages or about 10 s (long polls
        /// of 1 s), deleting nothing: a test's look at what a service left behind.
        pub async fn drain(&self, url: &str, want: usize) -> Vec<ReceivedMessage> {
            let mut got = Vec::new();
            for _ in 0..10 {
                let request = ReceiveMessage::new(10)
                    .wait_time_seconds(1)
                    .visibility_timeout(60);
                got.extend(self.transport.receive_message(url, request).await.unwrap());
                if got.len() >= want {
                    break;
                }
            }
            got
        }

        /// Receives and deletes what a queue holds, each message with all its attributes (its
        /// `SentTimestamp` and `MessageGroupId` among them): until a long poll of 1 s finds
        /// nothing once `want` messages came, or three find nothing before (the caller then sees
        /// fewer).
        pub async fn take_all(&self, url: &str, want: usize) -> Vec<ReceivedMessage> {
            let mut got = Vec::new();
            let mut empty_looks = 0;
            while empty_looks < 3 {
                let request = ReceiveMessage::new(10)
                    .wait_time_seconds(1)
                    .visibility_timeout(30);
                let batch = self.transport.receive_message(url, request).await.unwrap();
                if batch.is_empty() {
                    if got.len() >= want {
                        break;
                    }
                    empty_looks += 1;
                    continue;
                }
                let entries = batch
                    .iter()
                    .enumerate()
                    .map(|(i, message)| rust_stream::transport::DeleteEntry {
                        id: i.to_string().into(),
                        receipt_handle: message.receipt_handle.clone(),
                    })
                    .collect();
                let deleted = self
                    .transport
                    .delete_message_batch(url, entries)
                    .await
                    .unwrap();
                assert!(deleted.failed.is_empty(), "{:?}", deleted.failed);
                got.extend(batch);
            }
            got
        }

        /// Visible, in flight and delayed messages of a queue: see [`super::left`].
        pub async fn left(&self, url: &str) -> (u64, u64, u64) {
            super::left(&self.transport, url).await
        }

        /// Waits until the queue reads empty twice in a row, 200 ms apart, or `within` passes;
        /// whether it did. One empty read is not enough while a consumer receives: LocalStack
        /// counts a FIFO message its receive is moving from the group to in flight as neither.
        pub async fn until_empty(&self, url: &str, within: Duration) -> bool {
            let deadline = Instant::now() + within;
            let mut empty_reads = 0;
            while Instant::now() < deadline {
                empty_reads = if self.left(url).await == (0, 0, 0) {
                    empty_reads + 1
                } else {
                    0
                };
                if empty_reads == 2 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            false
        }

        /// A visibility timeout long enough for LocalStack's ~1 s timer resolution.
        pub fn short(&self) -> Duration {
            Duration::from_secs(2)
        }
    }
}

pub mod process {
    //! Child processes of tests, bounded in time.

    use std::io::Read;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output, Stdio};
    use std::time::{Duration, Instant};

    /// Points a child service at LocalStack's `endpoint` (with a region and test credentials),
    /// or at the in-process account when `None`, whatever the developer's shell names: every
    /// variable by which `SqsBroker::from_env_or_in_process` or the SDK would choose another SQS
    /// or account is removed first.
    pub fn sqs_at(command: &mut Command, endpoint: Option<&str>) {
        for name in [
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_SQS",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_PROFILE",
            "AWS_ACCESS_KEY_ID",
            "AWS_SESSION_TOKEN",
        ] {
            command.env_remove(name);
        }
        if let Some(endpoint) = endpoint {
            command
                .env("AWS_ENDPOINT_URL", endpoint)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "test")
                .env("AWS_SECRET_ACCESS_KEY", "test");
        }
    }

    /// How long the nested `cargo build` of an example may take (a no-op after `cargo test`
    /// built the examples, but it may wait for the build lock or rebuild on a loaded machine).
    const BUILD_TIMEOUT: Duration = Duration::from_secs(300);

    /// The binary of example `name`, built if need be: `cargo test` builds the examples, but not
    /// when only one test target is asked for.
    ///
    /// # Panics
    ///
    /// When the build fails or runs past five minutes.
    pub fn example_binary(name: &str) -> PathBuf {
        // target/<profile>/deps/<this test> -> target/<profile>/examples/<example>
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lies in target/<profile>/deps");
        let mut command = Command::new(env!("CARGO"));
        command.current_dir(env!("CARGO_MANIFEST_DIR")).args([
            "build",
            "--quiet",
            "--offline",
            "--example",
            name,
        ]);
        if profile_dir.ends_with("release") {
            command.arg("--release");
        }
        let built = output_within(&mut command, BUILD_TIMEOUT);
        assert!(
            built.status.success(),
            "cargo build --example {name}: {}\n{}",
            built.status,
            String::from_utf8_lossy(&built.stderr)
        );
        let binary = profile_dir.join("examples").join(name);
        assert!(binary.exists(), "{} was not built", binary.display());
        binary
    }

    /// Runs `command` to its end as [`Command::output`] does, but kills it and fails the test,
    /// showing what it printed so far, when it runs past `limit`: a hung child must not hang the
    /// test run.
    ///
    /// # Panics
    ///
    /// When the command cannot start, or runs past `limit`.
    pub fn output_within(command: &mut Command, limit: Duration) -> Output {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}"));
        // Read both pipes meanwhile, so a child that prints much never blocks on a full pipe.
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                bytes
            })
        };
        let stdout = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let stderr = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let deadline = Instant::now() + limit;
        let status = loop {
            match child.try_wait().expect("wait for the child") {
                Some(status) => break status,
                None if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let stdout = stdout.join().unwrap_or_default();
                    let stderr = stderr.join().unwrap_or_default();
                    panic!(
                        "{command:?} still running after {limit:?}, killed; it printed:\n{}\n{}",
                        String::from_utf8_lossy(&stdout),
                        String::from_utf8_lossy(&stderr)
                    );
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        Output {
            status,
            stdout: stdout.join().expect("stdout reader"),
            stderr: stderr.join().expect("stderr reader"),
        }
    }
}

/// What `queue` of `backend` holds, received without deleting (so on a FIFO queue at most one
/// receive of each group: see [`taken_from`]).
pub async fn held_by(
    backend: &rust_stream::testing::Backend,
    queue: &str,
) -> Vec<rust_stream::transport::ReceivedMessage> {
    messages_of(backend, queue, false).await
}

/// Every message `queue` of `backend` holds, received and deleted until it is empty, in the
/// order received: on a FIFO queue each group in the order stored (where [`held_by`], which
/// deletes nothing, sees at most one receive of each group).
pub async fn taken_from(
    backend: &rust_stream::testing::Backend,
    queue: &str,
) -> Vec<rust_stream::transport::ReceivedMessage> {
    messages_of(backend, queue, true).await
}

async fn messages_of(
    backend: &rust_stream::testing::Backend,
    queue: &str,
    delete: bool,
) -> Vec<rust_stream::transport::ReceivedMessage> {
    match (backend.account(), backend.endpoint()) {
        (Some(account), _) => receive_all_of(account, queue, delete).await,
        (None, Some(endpoint)) => {
            receive_all_of(
                &rust_stream::aws::AwsTransport::local(endpoint, "us-east-1"),
                queue,
                delete,
            )
            .await
        }
        (None, None) => unreachable!("a backend is in process or live"),
    }
}

/// Receives until a receive comes back empty (when deleting, two in a row: a live server may
/// answer one receive empty while messages are still there), deleting what came if asked.
pub async fn receive_all_of<T: rust_stream::transport::Transport>(
    transport: &T,
    queue: &str,
    delete: bool,
) -> Vec<rust_stream::transport::ReceivedMessage> {
    let url = transport
        .get_queue_url(queue)
        .await
        .expect("the queue exists");
    let mut all = Vec::new();
    let mut empty = 0;
    while empty < if delete { 2 } else { 1 } {
        let received = transport
            .receive_message(&url, rust_stream::transport::ReceiveMessage::new(10))
            .await
            .expect("receive");
        if received.is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        if delete {
            let entries = received
                .iter()
                .enumerate()
                .map(|(n, message)| rust_stream::transport::DeleteEntry {
                    id: n.to_string().into(),
                    receipt_handle: message.receipt_handle.clone(),
                })
                .collect();
            transport
                .delete_message_batch(&url, entries)
                .await
                .expect("delete");
        }
        all.extend(received);
    }
    all
}

pub mod fifo_sends {
    //! What the FIFO send rule's tests share (issue 34): hooks that make `SendMessageBatch` fail
    //! as SQS and the network do (an outage of a given length from the first send, a message
    //! refused for good, a service-side failure of one entry while the rest of its call is
    //! stored), a record of each call's entries, and the order a queue stores, read with a peek.

    use std::collections::{HashMap, HashSet};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use rust_stream::account::Account;
    use rust_stream::model::rules::ErrorKind;
    use rust_stream::transport::layer::Hooks;
    use rust_stream::transport::{
        BatchFailure, BatchResult, PeekMessages, SendBatchEntry, SentMessage, Transport,
        TransportError,
    };
    use tokio::time::Instant;

    /// Faults of the sends to queues whose URL ends with `queue` (every queue when empty).
    #[derive(Clone, Default)]
    pub struct SendFaults {
        pub queue: String,
        /// Once armed, the outage starts with the next call and lasts its length: every call
        /// fails whole, as SQS unreachable does.
        pub armed: Arc<AtomicBool>,
        pub outage: Arc<Mutex<Option<Duration>>>,
        until: Arc<Mutex<Option<Instant>>>,
        /// Bodies SQS refuses for good, each time (`SenderFault: true`).
        pub refused: Arc<Mutex<HashSet<String>>>,
        /// Bodies that fail as a service-side error (`SenderFault: false`) the next n times they
        /// are sent, while the rest of their call goes through.
        pub transient: Arc<Mutex<HashMap<String, usize>>>,
        /// Each call that reached these hooks: its bodies in request order.
        pub calls: Arc<Mutex<Vec<Vec<String>>>>,
    }

    impl SendFaults {
        /// Faults of the sends to `queue`, none set yet.
        pub fn of(queue: &str) -> Self {
            Self {
                queue: queue.to_owned(),
                ..Self::default()
            }
        }

        /// An outage of `length` from the next call.
        pub fn outage_from_next_call(&self, length: Duration) {
            *self.outage.lock().unwrap() = Some(length);
            *self.until.lock().unwrap() = None;
            self.armed.store(true, Ordering::Release);
        }

        /// The calls made so far, each as its bodies.
        pub fn calls(&self) -> Vec<Vec<String>> {
            self.calls.lock().unwrap().clone()
        }

        fn in_outage(&self) -> bool {
            if !self.armed.load(Ordering::Acquire) {
                return false;
            }
            let Some(length) = *self.outage.lock().unwrap() else {
                return false;
            };
            let until = *self
                .until
                .lock()
                .unwrap()
                .get_or_insert_with(|| Instant::now() + length);
            Instant::now() < until
        }
    }

    impl Hooks for SendFaults {
        async fn send_message_batch(
            &self,
            inner: &impl Transport,
            queue_url: &str,
            entries: Vec<SendBatchEntry>,
        ) -> Result<BatchResult<SentMessage>, TransportError> {
            if !queue_url.ends_with(&self.queue) {
                return inner.send_message_batch(queue_url, entries).await;
            }
            self.calls.lock().unwrap().push(
                entries
                    .iter()
                    .map(|entry| entry.message.body.clone())
                    .collect(),
            );
            if self.in_outage() {
                return Err(TransportError::Unavailable {
                    message: "service unavailable (the test's outage)".into(),
                });
            }
            let mut pass = Vec::new();
            let mut failed = Vec::new();
            for entry in entries {
                let body = &entry.message.body;
                let transient = {
                    let mut transient = self.transient.lock().unwrap();
                    match transient.get_mut(body) {
                        Some(left) if *left > 0 => {
                            *left -= 1;
                            true
                        }
                        _ => false,
                    }
                };
                if self.refused.lock().unwrap().contains(body) {
                    failed.push(BatchFailure {
                        id: entry.id,
                        kind: ErrorKind::InvalidParameterValue,
                        sender_fault: true,
                        message: "refused by the test".into(),
                    });
                } else if transient {
                    failed.push(BatchFailure {
                        id: entry.id,
                        kind: ErrorKind::InternalError,
                        sender_fault: false,
                        message: "a service-side failure of the test".into(),
                    });
                } else {
                    pass.push(entry);
                }
            }
            let mut result = if pass.is_empty() {
                BatchResult::default()
            } else {
                inner.send_message_batch(queue_url, pass).await?
            };
            result.failed.extend(failed);
            Ok(result)
        }
    }

    /// The bodies `queue` stores, in its order (a FIFO queue's sequence order), as a peek sees
    /// them: nothing received, nothing changed.
    pub async fn stored(account: &Account, queue: &str) -> Vec<String> {
        let url = account.get_queue_url(queue).await.unwrap();
        account
            .peek_messages(
                &url,
                PeekMessages {
                    offset: 0,
                    max: 10_000,
                },
            )
            .await
            .unwrap()
            .into_iter()
            .map(|peeked| peeked.message.body)
            .collect()
    }
}
