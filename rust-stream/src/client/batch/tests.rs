//! The batcher's tests, over the in-process account behind a recording transport.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::flush::{RETRY_FOR, RETRY_LONGEST_DELAY};
use super::job::{Entries, Job, Reply};
use super::*;
use crate::account::Account;
use crate::client::lease::{Lease, Leases};
use crate::model::rules::{ErrorKind, MAX_BATCH_PAYLOAD_SIZE};
use crate::transport::{
    BatchFailure, BatchResult, ChangeVisibilityEntry, DeleteEntry, QueueAttributes, ReceiveMessage,
    ReceivedMessage, SendBatchEntry, SendMessage, SentMessage, SharedTransport, Transport,
    TransportError,
};

const KIB: usize = 1024;

/// A recorded visibility change: the receipt handle and the timeout.
type VisibilityChange = (String, i32);

/// The account, recording the bodies of each `SendMessageBatch` call.
#[derive(Clone, Default)]
pub(crate) struct Recorder {
    pub(crate) account: Account,
    sends: Arc<Mutex<Vec<Vec<String>>>>,
    /// How long each send call takes, as a network round trip would.
    pub(crate) round_trip: Duration,
    /// Until then every send call fails as the network would: stored, but its answer lost.
    lost_answers_until: Option<Instant>,
    /// The deduplication ids of each send call.
    dedup_ids: Arc<Mutex<Vec<Vec<Option<String>>>>>,
    /// Receipt handles whose deletes fail every time, as the service's fault.
    failing_deletes: Arc<Mutex<Vec<String>>>,
    /// The receipt handles of each delete call.
    deletes: Arc<Mutex<Vec<Vec<String>>>>,
    /// Every visibility change is applied, then its answer is lost.
    lose_visibility_answers: bool,
    /// The receipt handle and timeout of each visibility change, per call.
    visibility_changes: Arc<Mutex<Vec<Vec<VisibilityChange>>>>,
}

impl Recorder {
    /// The bodies of each `SendMessageBatch` call, in the order made.
    pub(crate) fn calls(&self) -> Vec<Vec<String>> {
        self.sends.lock().unwrap().clone()
    }
}

impl Transport for Recorder {
    async fn get_queue_url(&self, name: &str) -> Result<String, TransportError> {
        self.account.get_queue_url(name).await
    }
    async fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> Result<String, TransportError> {
        self.account.create_queue(name, attributes).await
    }
    async fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> Result<QueueAttributes, TransportError> {
        self.account.get_queue_attributes(queue_url, names).await
    }
    async fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> Result<BatchResult<SentMessage>, TransportError> {
        self.sends.lock().unwrap().push(
            entries
                .iter()
                .map(|entry| entry.message.body.clone())
                .collect(),
        );
        self.dedup_ids.lock().unwrap().push(
            entries
                .iter()
                .map(|entry| entry.message.dedup_id.clone())
                .collect(),
        );
        tokio::time::sleep(self.round_trip).await;
        let stored = self.account.send_message_batch(queue_url, entries).await;
        if self
            .lost_answers_until
            .is_some_and(|until| Instant::now() < until)
        {
            return Err(TransportError::Unavailable {
                message: "connection closed before the answer".into(),
            });
        }
        stored
    }
    async fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        self.account.receive_message(queue_url, request).await
    }
    async fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        self.deletes.lock().unwrap().push(
            entries
                .iter()
                .map(|entry| entry.receipt_handle.clone())
                .collect(),
        );
        let failing = self.failing_deletes.lock().unwrap().clone();
        let (fail, pass): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .partition(|entry| failing.contains(&entry.receipt_handle));
        let mut result = if pass.is_empty() {
            BatchResult::default()
        } else {
            self.account.delete_message_batch(queue_url, pass).await?
        };
        result
            .failed
            .extend(fail.into_iter().map(|entry| BatchFailure {
                id: entry.id,
                kind: ErrorKind::InternalError,
                sender_fault: false,
                message: "the service failed".into(),
            }));
        Ok(result)
    }
    async fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        self.visibility_changes.lock().unwrap().push(
            entries
                .iter()
                .map(|entry| (entry.receipt_handle.clone(), entry.visibility_timeout))
                .collect(),
        );
        let applied = self
            .account
            .change_message_visibility_batch(queue_url, entries)
            .await;
        if self.lose_visibility_answers {
            return Err(TransportError::Unavailable {
                message: "connection closed before the answer".into(),
            });
        }
        applied
    }
}

/// A visibility batcher over `recorder`, for a new queue `name`, sending at once.
async fn visibility_batcher(recorder: &Recorder, name: &str) -> Batcher<VisibilityBatch> {
    let url = recorder
        .create_queue(name, QueueAttributes::default())
        .await
        .unwrap();
    let settings = BatchSettings {
        linger: Duration::ZERO,
        max_in_flight: 1,
    };
    Batcher::spawn(Arc::new(recorder.clone()), url, settings)
}

/// A lease on a message whose receipt handle (and id) is `handle`.
fn lease(leases: &Leases, handle: &str) -> Arc<Lease> {
    leases.open(
        handle.to_owned(),
        handle.to_owned(),
        None,
        Duration::from_secs(30),
    )
}

/// A body of `size` bytes that starts with its label, so a call's contents can be read back.
fn body(label: usize, size: usize) -> String {
    let mut body = format!("{label}:");
    body.extend(std::iter::repeat_n('x', size - body.len()));
    body
}

fn chunk_lengths<A: Action>(entries: Vec<A::Entry>) -> Vec<usize> {
    chunks::<A>(entries)
        .iter()
        .map(|(chunk, _)| chunk.len())
        .collect()
}

#[test]
fn submitted_entries_are_split_by_count_and_by_payload_size() {
    let sends = |sizes: &[usize]| -> Vec<SendMessage> {
        sizes
            .iter()
            .enumerate()
            .map(|(label, size)| SendMessage::new(body(label, *size)))
            .collect()
    };
    assert_eq!(
        chunk_lengths::<SendBatch>(sends(&[300 * KIB; 10])),
        [3, 3, 3, 1],
        "three 300 KiB messages fit in 1 MiB, a fourth does not"
    );
    assert_eq!(chunk_lengths::<SendBatch>(sends(&[KIB; 25])), [10, 10, 5]);
    assert_eq!(
        chunk_lengths::<SendBatch>(sends(&[MAX_BATCH_PAYLOAD_SIZE / 10; 10])),
        [10],
        "ten entries that fit the limit exactly stay one call"
    );
    assert_eq!(
        chunk_lengths::<SendBatch>(sends(&[MAX_BATCH_PAYLOAD_SIZE, 10, 10])),
        [1, 2],
        "a message of the whole limit goes alone"
    );
    let (chunks, total): (Vec<_>, Vec<_>) = chunks::<SendBatch>(sends(&[600 * KIB, 500 * KIB]))
        .into_iter()
        .map(|(chunk, size)| (chunk.len(), size))
        .unzip();
    assert_eq!((chunks, total), (vec![1, 1], vec![600 * KIB, 500 * KIB]));
    let leases = crate::client::lease::Leases::default();
    let deletes: Vec<Arc<Lease>> = (0..25)
        .map(|n| leases.open(n.to_string(), n.to_string(), None, Duration::from_secs(30)))
        .collect();
    assert_eq!(chunk_lengths::<DeleteBatch>(deletes), [10, 10, 5]);
}

#[tokio::test(start_paused = true)]
async fn a_send_rides_out_lost_answers_for_seconds_with_its_deduplication_id_then_fails() {
    let account = Account::new();
    let mut attributes = QueueAttributes::new();
    attributes.insert("FifoQueue".into(), "true".into());
    let url = account
        .create_queue("ledger.fifo", attributes)
        .await
        .unwrap();
    let settings = BatchSettings {
        linger: Duration::ZERO,
        max_in_flight: 1,
    };
    let send = |recorder: &Recorder, id: &str| {
        let batcher =
            Batcher::<SendBatch>::spawn(Arc::new(recorder.clone()), url.clone(), settings);
        let message = SendMessage::new(id).group_id("g").dedup_id(id);
        async move { batcher.submit_one(message).await }
    };

    let brief = Recorder {
        account: account.clone(),
        lost_answers_until: Some(Instant::now() + Duration::from_secs(10)),
        ..Recorder::default()
    };
    send(&brief, "brief")
        .await
        .expect("a 10 s outage is ridden out");
    let tries = brief.dedup_ids.lock().unwrap().clone();
    assert!(tries.len() > 2, "{tries:?}");
    assert!(
        tries.iter().all(|ids| ids == &[Some("brief".to_owned())]),
        "{tries:?}"
    );

    let started = Instant::now();
    let lasting = Recorder {
        account: account.clone(),
        lost_answers_until: Some(Instant::now() + Duration::from_secs(3600)),
        ..Recorder::default()
    };
    let error = send(&lasting, "lasting")
        .await
        .expect_err("an outage of an hour is not");
    assert!(
        matches!(error, TransportError::Unavailable { .. }),
        "{error}"
    );
    let gave_up_after = started.elapsed();
    assert!(
        gave_up_after <= RETRY_FOR && gave_up_after >= RETRY_FOR - RETRY_LONGEST_DELAY,
        "{gave_up_after:?}"
    );

    // Every try was stored once: SQS took the retries for the same message.
    let stored = account
        .receive_message(&url, ReceiveMessage::new(10))
        .await
        .unwrap();
    let bodies: Vec<&str> = stored.iter().map(|message| message.body.as_str()).collect();
    assert_eq!(bodies, ["brief", "lasting"]);
}

#[tokio::test(start_paused = true)]
async fn waiting_jobs_are_packed_in_order_into_calls_within_the_payload_limit() {
    let recorder = Recorder::default();
    let url = recorder
        .account
        .create_queue("packed", QueueAttributes::new())
        .await
        .unwrap();
    let batcher = Batcher::<SendBatch>::spawn(
        Arc::new(recorder.clone()),
        url,
        BatchSettings {
            linger: Duration::from_millis(5),
            max_in_flight: 1,
        },
    );
    // Jobs in submission order: one 600 KiB message, then a job of two 300 KiB messages (which
    // must not be split, so it starts the next call), then eight of 100 KiB each.
    let mut jobs = vec![vec![600 * KIB], vec![300 * KIB, 300 * KIB]];
    jobs.extend(std::iter::repeat_n(vec![100 * KIB], 8));
    let mut label = 0;
    let mut answers = Vec::new();
    for sizes in jobs {
        let entries: Vec<SendMessage> = sizes
            .iter()
            .map(|size| {
                label += 1;
                SendMessage::new(body(label, *size))
            })
            .collect();
        let (reply, answer) = oneshot::channel();
        batcher
            .jobs
            .send(Job {
                size: entries.iter().map(SendBatch::size).sum(),
                entries: Entries::Many(entries),
                reply: Reply::Wait(reply),
                eager: false,
                chain: None,
            })
            .unwrap();
        answers.push(answer);
    }
    for answer in answers {
        for sent in answer.await.unwrap() {
            sent.expect("no call goes over the limit, so every entry is stored");
        }
    }
    let calls = recorder.calls();
    let labels: Vec<Vec<usize>> = calls
        .iter()
        .map(|call| {
            call.iter()
                .map(|body| body.split(':').next().unwrap().parse().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(
        labels,
        [vec![1], vec![2, 3, 4, 5, 6, 7], vec![8, 9, 10, 11]],
        "each call as full as the limit allows, in submission order"
    );
    for call in &calls {
        let total: usize = call.iter().map(String::len).sum();
        assert!(total <= MAX_BATCH_PAYLOAD_SIZE, "{total} bytes in one call");
    }
}

#[tokio::test(start_paused = true)]
async fn one_large_submission_goes_out_in_calls_within_the_payload_limit() {
    let recorder = Recorder::default();
    let url = recorder
        .account
        .create_queue("large", QueueAttributes::new())
        .await
        .unwrap();
    let batcher = Batcher::<SendBatch>::spawn(
        Arc::new(recorder.clone()),
        url,
        BatchSettings {
            linger: Duration::from_millis(5),
            max_in_flight: 1,
        },
    );
    let entries: Vec<SendMessage> = (0..10)
        .map(|label| SendMessage::new(body(label, 300 * KIB)))
        .collect();
    for sent in batcher.submit(entries).await {
        sent.expect("stored");
    }
    let lengths: Vec<usize> = recorder.calls().iter().map(Vec::len).collect();
    assert_eq!(lengths, [3, 3, 3, 1]);
}

#[tokio::test(start_paused = true)]
async fn without_a_linger_the_first_entry_goes_at_once_and_the_rest_gather_while_it_is_in_flight() {
    let recorder = Recorder {
        round_trip: Duration::from_millis(20),
        ..Recorder::default()
    };
    let url = recorder
        .account
        .create_queue("eager", QueueAttributes::new())
        .await
        .unwrap();
    let batcher = Batcher::<SendBatch>::spawn(
        Arc::new(recorder.clone()),
        url,
        BatchSettings {
            linger: Duration::ZERO,
            max_in_flight: 1,
        },
    );
    let started = Instant::now();
    let first = {
        let batcher = batcher.clone();
        tokio::spawn(async move { batcher.submit_one(SendMessage::new("a")).await })
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    let rest: Vec<_> = ["b", "c", "d"]
        .into_iter()
        .map(|body| {
            let batcher = batcher.clone();
            tokio::spawn(async move { batcher.submit_one(SendMessage::new(body)).await })
        })
        .collect();
    first.await.unwrap().unwrap();
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(20),
        "the first entry waited for no company, only its round trip"
    );
    for sent in rest {
        sent.await.unwrap().unwrap();
    }
    assert_eq!(
        recorder.calls(),
        [vec!["a"], vec!["b", "c", "d"]],
        "what arrived during the first call went out together in the next"
    );
}

/// Callers that submit their next entry the moment their last one is answered (FIFO lanes
/// whose handlers finish at once) share every call: the answered entries stop counting as in a
/// call before their callers wake, or the first caller back finds its own answered entry
/// counted as company already on its way, and goes out alone (with the decrement after the
/// answers, half of this test's runs took 335–460 calls; the benchmark's FIFO deletes carried
/// two entries a call instead of ten).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_answered_together_share_their_next_call() {
    const CALLERS: usize = 10;
    const ROUNDS: usize = 100;
    let recorder = Recorder::default();
    let url = recorder
        .create_queue("in-step", QueueAttributes::default())
        .await
        .unwrap();
    // Callers leave as FIFO lanes do: counted out, with a word to the batcher.
    let running = Arc::new(AtomicUsize::new(CALLERS));
    let left = Arc::new(tokio::sync::Notify::new());
    let company = Company {
        callers: {
            let running = running.clone();
            Arc::new(move || running.load(Ordering::Acquire))
        },
        left: left.clone(),
        wait: Duration::from_secs(1),
    };
    let deleter =
        Batcher::<DeleteBatch>::spawn_with_company(Arc::new(recorder.clone()), url, 4, company);
    let leases = Arc::new(Leases::default());
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let deleter = deleter.clone();
            let leases = leases.clone();
            let (running, left) = (running.clone(), left.clone());
            tokio::spawn(async move {
                for round in 0..ROUNDS {
                    let handle = format!("{caller}-{round}");
                    // An unknown receipt handle is answered at once, with its error.
                    let _ = deleter.submit_one(lease(&leases, &handle)).await;
                }
                running.fetch_sub(1, Ordering::AcqRel);
                left.notify_waiters();
            })
        })
        .collect();
    for caller in callers {
        caller.await.unwrap();
    }
    let calls = recorder.deletes.lock().unwrap().len();
    assert_eq!(
        calls,
        ROUNDS,
        "{} deletes went out in {calls} calls, not one per round",
        CALLERS * ROUNDS
    );
}

#[tokio::test(start_paused = true)]
async fn a_delete_that_keeps_failing_does_not_hold_up_the_deletes_of_other_callers() {
    let recorder = Recorder::default();
    let url = recorder
        .create_queue("deletes", QueueAttributes::default())
        .await
        .unwrap();
    recorder
        .failing_deletes
        .lock()
        .unwrap()
        .push("stuck".to_owned());
    let shared: SharedTransport = Arc::new(recorder.clone());
    let callers = Arc::new(AtomicUsize::new(2));
    let company = Company {
        callers: {
            let callers = callers.clone();
            Arc::new(move || callers.load(Ordering::Acquire))
        },
        left: Arc::default(),
        wait: Duration::from_millis(5),
    };
    let deleter = Batcher::<DeleteBatch>::spawn_with_company(shared, url, 4, company);
    let leases = Leases::default();
    let lease = |handle: &str| lease(&leases, handle);

    let stuck = tokio::spawn({
        let deleter = deleter.clone();
        let lease = lease("stuck");
        async move { deleter.submit_one(lease).await }
    });
    // The stuck delete's first try has failed and its retries are under way.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Instant::now();
    // An unknown receipt handle: the account answers it at once.
    let answer = deleter.submit_one(lease("another group's")).await;
    assert!(answer.is_err(), "the account knows no such receipt handle");
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "another caller's delete waited {:?} behind a call that keeps failing",
        started.elapsed()
    );
    assert!(
        !stuck.is_finished(),
        "the failing delete is still being retried"
    );
    let stuck_answer = stuck.await.unwrap();
    assert!(
        matches!(&stuck_answer, Err(error) if error.kind() == Some(ErrorKind::InternalError)),
        "a delete that fails every time is answered with its error at last: {stuck_answer:?}"
    );
    let calls = recorder.deletes.lock().unwrap().clone();
    assert!(
        calls
            .iter()
            .filter(|call| call.contains(&"stuck".to_owned()))
            .count()
            > 3,
        "the failing delete was retried: {calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_release_whose_answer_is_lost_is_not_repeated_but_an_extension_is() {
    let recorder = Recorder {
        lose_visibility_answers: true,
        ..Recorder::default()
    };
    let visibility = visibility_batcher(&recorder, "releases").await;
    let leases = Leases::default();
    let lease = |handle: &str| lease(&leases, handle);

    let released = visibility.submit_one((lease("released"), 0)).await;
    assert!(
        matches!(released, Err(TransportError::Unavailable { .. })),
        "an unanswered release is answered with its error: {released:?}"
    );
    let extended = visibility.submit_one((lease("extended"), 30)).await;
    assert!(extended.is_err(), "every answer is lost: {extended:?}");

    let calls = recorder.visibility_changes.lock().unwrap().clone();
    let tries = |handle: &str| {
        calls
            .iter()
            .filter(|call| call.iter().any(|(sent, _)| sent == handle))
            .count()
    };
    assert_eq!(tries("released"), 1, "the release went once: {calls:?}");
    assert!(
        tries("extended") > 3,
        "the extension was repeated until the retries gave up: {calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_visibility_ended_is_never_changed_again() {
    let recorder = Recorder::default();
    let visibility = visibility_batcher(&recorder, "lapsed").await;
    let leases = Leases::default();
    let lapsing = leases.open(
        "lapsing".into(),
        "lapsing".into(),
        None,
        Duration::from_secs(5),
    );
    let fresh = leases.open(
        "fresh".into(),
        "fresh".into(),
        None,
        Duration::from_secs(30),
    );
    // Within the last half second of its visibility: SQS may have handed it out again.
    tokio::time::advance(Duration::from_millis(4_600)).await;

    let answers = visibility
        .submit(vec![(lapsing.clone(), 5), (lapsing, 0), (fresh, 5)])
        .await;
    for answer in &answers[..2] {
        assert!(
            matches!(answer, Err(error) if error.kind() == Some(ErrorKind::MessageNotInflight)),
            "a lapsed lease is answered without a call: {answer:?}"
        );
    }
    let calls = recorder.visibility_changes.lock().unwrap().clone();
    assert_eq!(
        calls,
        [vec![("fresh".to_owned(), 5)]],
        "only the lease still visible to this consumer went out"
    );
}

#[tokio::test(start_paused = true)]
async fn entries_submitted_together_go_in_one_call_and_are_answered_each_in_order() {
    let recorder = Recorder::default();
    let url = recorder
        .create_queue("settled", QueueAttributes::default())
        .await
        .unwrap();
    let sent = recorder
        .send_message_batch(
            &url,
            (0..2)
                .map(|i| SendBatchEntry::new(i.to_string(), SendMessage::new(format!("m{i}"))))
                .collect(),
        )
        .await
        .unwrap();
    assert_eq!(sent.successful.len(), 2);
    let received = recorder
        .receive_message(&url, ReceiveMessage::new(10))
        .await
        .unwrap();
    assert_eq!(received.len(), 2);
    let leases = Leases::default();
    // Two received messages, with an unknown receipt handle between them.
    let entries = vec![
        lease(&leases, &received[0].receipt_handle),
        lease(&leases, "not a receipt handle"),
        lease(&leases, &received[1].receipt_handle),
    ];
    let settings = BatchSettings {
        linger: Duration::from_millis(10),
        max_in_flight: 1,
    };
    let deleter = Batcher::<DeleteBatch>::spawn(Arc::new(recorder.clone()), url.clone(), settings);
    let (answered, answers) = tokio::sync::oneshot::channel();
    deleter.submit_then(entries, move |answers| {
        let read: Vec<bool> = answers.take(4).map(|answer| answer.is_ok()).collect();
        answered.send(read).unwrap();
    });
    let read = answers.await.unwrap();
    assert_eq!(
        read,
        [true, false, true, false],
        "each entry's answer in order, then what a reader past them reads: an error"
    );
    assert_eq!(
        recorder.deletes.lock().unwrap().len(),
        1,
        "the three went out in one call"
    );

    // A batcher that is gone answers every entry with an error, at once.
    let (runtime_gone, gone) = std::sync::mpsc::channel();
    let closed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let deleter = runtime.block_on(async move {
            Batcher::<DeleteBatch>::spawn(Arc::new(recorder), url, settings)
        });
        drop(runtime);
        runtime_gone.send(()).unwrap();
        deleter
    });
    gone.recv().unwrap();
    let deleter = closed.join().unwrap();
    assert!(deleter.is_closed());
    let read = Arc::new(Mutex::new(Vec::new()));
    deleter.submit_then(vec![lease(&leases, "a"), lease(&leases, "b")], {
        let read = read.clone();
        move |answers| {
            read.lock()
                .unwrap()
                .extend(answers.take(2).map(|answer| answer.is_err()));
        }
    });
    assert_eq!(*read.lock().unwrap(), [true, true]);
}
