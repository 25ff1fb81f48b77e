//! The one batcher behind every batched SQS call: `SendMessageBatch` for publishers,
//! `DeleteMessageBatch` and `ChangeMessageVisibilityBatch` for settling and extending.
//!
//! Callers submit *jobs* of entries and await each entry's answer. A batcher per queue and action
//! gathers jobs into calls of at most 10 entries and, for sends, at most 1 MiB of bodies and
//! attributes (SQS refuses a larger `SendMessageBatch` whole), flushing when a call is full or when
//! the first entry has waited the linger. A job of up to 10 entries that fits in 1 MiB always goes
//! out in one call (a FIFO group's release must be one `ChangeMessageVisibilityBatch`), and jobs go
//! out in submission order. Per-entry failures are read: a service-side failure
//! (`SenderFault: false`) or a failed call that may be retried is retried with jittered backoff
//! for up to 20 s, with the same entries (a FIFO send keeps its deduplication id, so SQS stores
//! it once however many of its answers were lost), except an entry the action says may not be
//! repeated without an answer (a release); anything else is answered as an error for the caller to
//! log or act on. Retries never hold up other callers: a caller's retries go on in a task of their
//! own, outside the call's place.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::client::lease::Lease;
use crate::model::rules::{self, ErrorKind, MAX_BATCH_ENTRIES, MAX_BATCH_PAYLOAD_SIZE};
use crate::transport::{
    BatchResult, BoxFuture, ChangeVisibilityEntry, DeleteEntry, SendBatchEntry, SendMessage,
    SentMessage, SharedTransport, TransportError,
};

/// How long a failure that may pass (throttling, a service-side failure, a network fault) is
/// retried before its error is answered. The SDK's own retries stop once its retry quota is spent,
/// which an outage of a few seconds does; this is what lets a send, a delete or a release ride one
/// out, each entry keeping its content (a FIFO send its deduplication id), while a caller still
/// hears of a lasting outage. A try that starts within it runs to its end.
const RETRY_FOR: Duration = Duration::from_secs(20);
/// The backoff between tries: jittered, doubling from the first to the longest.
const RETRY_FIRST_DELAY: Duration = Duration::from_millis(50);
const RETRY_LONGEST_DELAY: Duration = Duration::from_secs(2);
/// The longest one try of a call may take before the engine gives it up and tries again. A
/// transport may bound its own attempts more loosely (the SDK's are 30 s, repeated up to 4 times)
/// or not at all, and a stalled connection must not hold a delete, an extension or a send for
/// minutes: SQS answers a batch call in milliseconds.
pub(crate) const CALL_DEADLINE: Duration = Duration::from_secs(10);
/// The shortest deadline a try is given, however little visibility its entries have left.
const SHORTEST_CALL_DEADLINE: Duration = Duration::from_millis(200);
/// How long a FIFO delete call that is not full waits for the calls in flight to be answered (so
/// that their lanes' next deletes share it) before it goes beside them: longer than an SQS round
/// trip, short against a visibility timeout, so a stalled call holds up no other group's delete.
const IN_FLIGHT_PATIENCE: Duration = Duration::from_millis(100);

/// One batched SQS action.
pub(crate) trait Action: Send + Sync + 'static {
    type Entry: Clone + Send + Sync + 'static;
    type Output: Send + 'static;
    /// The entry's share of a call's payload, counted against SQS's 1 MiB per `SendMessageBatch`;
    /// deletes and visibility changes have no such limit.
    fn size(_entry: &Self::Entry) -> usize {
        0
    }
    fn call<'a>(
        transport: &'a SharedTransport,
        queue_url: &'a str,
        entries: Vec<(String, Self::Entry)>,
    ) -> BoxFuture<'a, Result<BatchResult<Self::Output>, TransportError>>;
    /// Whether the entry may be sent again after a try that got no answer (the connection failed
    /// or timed out), when SQS may have acted on it.
    fn may_repeat_unanswered(_entry: &Self::Entry) -> bool {
        true
    }
    /// Why the entry must not be sent (any more), if it must not: checked before every try.
    fn withheld(_entry: &Self::Entry) -> Option<TransportError> {
        None
    }
    /// When a try carrying the entry stops being of use (its message's visibility ends), if it
    /// does: a try is given up well before, so another has time to reach SQS.
    fn useful_until(_entry: &Self::Entry) -> Option<Instant> {
        None
    }
}

/// How long a try of a call whose entries are useful until `useful_until` may take: half the
/// time left, so a second try still fits, within [`SHORTEST_CALL_DEADLINE`] and
/// [`CALL_DEADLINE`].
fn try_deadline(useful_until: Option<Instant>) -> Duration {
    let Some(until) = useful_until else {
        return CALL_DEADLINE;
    };
    (until.saturating_duration_since(Instant::now()) / 2)
        .clamp(SHORTEST_CALL_DEADLINE, CALL_DEADLINE)
}

/// `SendMessageBatch`.
#[derive(Debug)]
pub(crate) struct SendBatch;

impl Action for SendBatch {
    type Entry = SendMessage;
    type Output = SentMessage;
    fn size(message: &SendMessage) -> usize {
        rules::message_size(message)
    }
    fn call<'a>(
        transport: &'a SharedTransport,
        queue_url: &'a str,
        entries: Vec<(String, SendMessage)>,
    ) -> BoxFuture<'a, Result<BatchResult<SentMessage>, TransportError>> {
        let entries = entries
            .into_iter()
            .map(|(id, message)| SendBatchEntry { id, message })
            .collect();
        transport.send_message_batch(queue_url, entries)
    }
}

/// `DeleteMessageBatch`; the entry is the lease of the message to delete, whose receipt handle is
/// copied once per call.
#[derive(Debug)]
pub(crate) struct DeleteBatch;

impl Action for DeleteBatch {
    type Entry = Arc<Lease>;
    type Output = ();
    fn call<'a>(
        transport: &'a SharedTransport,
        queue_url: &'a str,
        entries: Vec<(String, Arc<Lease>)>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>> {
        let entries = entries
            .into_iter()
            .map(|(id, lease)| DeleteEntry {
                id,
                receipt_handle: lease.receipt_handle.clone(),
            })
            .collect();
        transport.delete_message_batch(queue_url, entries)
    }

    fn useful_until(lease: &Arc<Lease>) -> Option<Instant> {
        Some(lease.lapses_at())
    }
}

/// `ChangeMessageVisibilityBatch`; the entry is the message's lease and the new timeout in
/// seconds.
#[derive(Debug)]
pub(crate) struct VisibilityBatch;

impl Action for VisibilityBatch {
    type Entry = (Arc<Lease>, i32);
    type Output = ();
    fn call<'a>(
        transport: &'a SharedTransport,
        queue_url: &'a str,
        entries: Vec<(String, (Arc<Lease>, i32))>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>> {
        let entries = entries
            .into_iter()
            .map(|(id, (lease, visibility_timeout))| ChangeVisibilityEntry {
                id,
                receipt_handle: lease.receipt_handle.clone(),
                visibility_timeout,
            })
            .collect();
        transport.change_message_visibility_batch(queue_url, entries)
    }

    /// A release (visibility 0) is not repeated once its answer is lost: if SQS applied it, the
    /// message may already have been received again, and a repeat with the old receipt handle
    /// must not reach that newer receive (SQS ignores a stale receipt handle; LocalStack applies
    /// it, and so made a FIFO group receivable while one of its messages was in flight). A
    /// release that never arrived costs the message's visibility timeout, no more. An extension
    /// is repeated: lost, the message would come back while its handler still runs.
    fn may_repeat_unanswered((_, visibility_timeout): &Self::Entry) -> bool {
        *visibility_timeout != 0
    }

    /// A lease whose visibility has ended is not changed: see [`Lease::has_lapsed`].
    fn withheld((lease, _): &Self::Entry) -> Option<TransportError> {
        lease.has_lapsed().then(|| {
            TransportError::service(
                ErrorKind::MessageNotInflight,
                "its visibility timeout has ended, so it may have been received again: its old \
                 receipt handle is not used",
            )
        })
    }

    fn useful_until((lease, _): &Self::Entry) -> Option<Instant> {
        Some(lease.lapses_at())
    }
}

/// What a batcher for callers that each wait for their answer (a FIFO lane for its delete) is
/// told, so that their entries share calls: how many callers there are (lanes that run), and how
/// long a call may wait for those whose entry is not in yet.
#[derive(Clone)]
pub(crate) struct Company {
    pub(crate) callers: Arc<dyn Fn() -> usize + Send + Sync>,
    /// Notified when callers leave, so a call stops waiting for them.
    pub(crate) left: Arc<tokio::sync::Notify>,
    /// The longest a call that is not full waits for entries on their way.
    pub(crate) wait: Duration,
}

/// How a batcher gathers and flushes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchSettings {
    /// How long the first entry of a call waits for company.
    pub(crate) linger: Duration,
    /// Calls in flight at once; 1 keeps calls (and so a FIFO queue's sends) in order.
    pub(crate) max_in_flight: usize,
}

type Answers<A> = Vec<Result<<A as Action>::Output, TransportError>>;

struct Job<A: Action> {
    entries: Entries<A::Entry>,
    /// The entries' payload, as [`Action::size`] counts it.
    size: usize,
    reply: Reply<A>,
    /// The submitter has nothing to add: a call it starts goes without waiting the linger.
    eager: bool,
}

/// A job's entries. Most jobs carry one (a settled message's delete), which needs no `Vec`.
enum Entries<E> {
    One(E),
    Many(Vec<E>),
}

impl<E> Entries<E> {
    fn as_slice(&self) -> &[E] {
        match self {
            Self::One(entry) => std::slice::from_ref(entry),
            Self::Many(entries) => entries,
        }
    }

    fn len(&self) -> usize {
        self.as_slice().len()
    }
}

type Answer<A> = Result<<A as Action>::Output, TransportError>;

/// Where a job's answers go.
enum Reply<A: Action> {
    /// To a caller awaiting them.
    Wait(oneshot::Sender<Answers<A>>),
    /// To a caller awaiting the answer of its job's one entry.
    WaitOne(oneshot::Sender<Answer<A>>),
    /// To a callback run by the batcher once the job's one entry is answered, for a caller that
    /// does not wait (a standard queue's delete); it must be quick, as it runs where the call's
    /// answer is read.
    Then(Box<dyn FnOnce(Answer<A>) + Send>),
}

impl<A: Action> Reply<A> {
    /// Answers the job with its entries' answers, in order.
    fn answer(self, mut answers: impl Iterator<Item = Answer<A>>) {
        let one = |answers: &mut dyn Iterator<Item = Answer<A>>| {
            answers.next().unwrap_or_else(|| Err(stopped()))
        };
        match self {
            // A caller that stopped waiting has nothing to learn.
            Self::Wait(reply) => drop(reply.send(answers.collect())),
            Self::WaitOne(reply) => drop(reply.send(one(&mut answers))),
            Self::Then(then) => then(one(&mut answers)),
        }
    }
}

/// A handle to one queue's batcher for one action. Cheap to clone; the batcher stops when the
/// last handle is dropped, after flushing what it holds.
pub(crate) struct Batcher<A: Action> {
    jobs: mpsc::UnboundedSender<Job<A>>,
    _action: PhantomData<A>,
}

impl<A: Action> Clone for Batcher<A> {
    fn clone(&self) -> Self {
        Self {
            jobs: self.jobs.clone(),
            _action: PhantomData,
        }
    }
}

impl<A: Action> std::fmt::Debug for Batcher<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("action", &std::any::type_name::<A>())
            .finish()
    }
}

impl<A: Action> Batcher<A> {
    /// Whether the batcher's task is gone (it panicked, or its runtime ended): a new one is
    /// needed.
    pub(crate) fn is_closed(&self) -> bool {
        self.jobs.is_closed()
    }

    /// Starts a batcher for `queue_url` on the current runtime.
    pub(crate) fn spawn(
        transport: SharedTransport,
        queue_url: String,
        settings: BatchSettings,
    ) -> Self {
        let (jobs, receiver) = mpsc::unbounded_channel();
        tokio::spawn(gather::<A>(transport, queue_url, receiver, settings));
        Self {
            jobs,
            _action: PhantomData,
        }
    }

    /// Starts a batcher whose callers each wait for their answer, and whose calls therefore carry
    /// as many of them as are ready: a full call goes out at once (up to `max_in_flight` calls at
    /// a time); one that is not full goes out when no call is in flight (or the calls in flight
    /// had [`IN_FLIGHT_PATIENCE`] to answer) and no entry is on its way (or it waited
    /// [`Company::wait`] for them), gathering what arrives meanwhile. So callers that run in step
    /// (lanes whose deletes were confirmed by one call) share the next call too, and a stalled
    /// call holds up no other caller for longer than the patience.
    pub(crate) fn spawn_with_company(
        transport: SharedTransport,
        queue_url: String,
        max_in_flight: usize,
        company: Company,
    ) -> Self {
        let (jobs, receiver) = mpsc::unbounded_channel();
        tokio::spawn(gather_with_company::<A>(
            transport,
            queue_url,
            receiver,
            max_in_flight,
            company,
        ));
        Self {
            jobs,
            _action: PhantomData,
        }
    }

    /// Submits entries and waits for each one's answer, in order. Up to 10 entries within the
    /// payload limit go out in one call; more are split into calls, in order.
    pub(crate) async fn submit(&self, entries: Vec<A::Entry>) -> Answers<A> {
        self.submit_with(entries, false).await
    }

    /// As [`submit`](Self::submit); when `eager`, a call that is not full does not wait the
    /// linger for company, but takes only what is queued already: for the part of a larger
    /// submission, whose company was the rest of it.
    pub(crate) async fn submit_with(&self, entries: Vec<A::Entry>, eager: bool) -> Answers<A> {
        let mut waiting = Vec::new();
        for (chunk, size) in chunks::<A>(entries) {
            let count = chunk.len();
            let (reply, answer) = oneshot::channel();
            let sent = self.jobs.send(Job {
                entries: Entries::Many(chunk),
                size,
                reply: Reply::Wait(reply),
                eager,
            });
            waiting.push((count, sent.is_ok().then_some(answer)));
        }
        let mut answers = Vec::new();
        for (count, answer) in waiting {
            match answer {
                Some(answer) => match answer.await {
                    Ok(chunk) => answers.extend(chunk),
                    Err(_) => answers.extend((0..count).map(|_| Err(stopped()))),
                },
                None => answers.extend((0..count).map(|_| Err(stopped()))),
            }
        }
        answers
    }

    /// Submits one entry that nobody waits for: `then` is called with its answer once it is
    /// answered (with an error if the batcher stopped first).
    pub(crate) fn submit_one_then(
        &self,
        entry: A::Entry,
        then: impl FnOnce(Answer<A>) + Send + 'static,
    ) {
        let job = Job {
            size: A::size(&entry),
            entries: Entries::One(entry),
            reply: Reply::Then(Box::new(then)),
            eager: false,
        };
        if let Err(mpsc::error::SendError(job)) = self.jobs.send(job) {
            job.reply.answer(std::iter::empty());
        }
    }

    /// Submits one entry and waits for its answer.
    pub(crate) async fn submit_one(&self, entry: A::Entry) -> Result<A::Output, TransportError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            size: A::size(&entry),
            entries: Entries::One(entry),
            reply: Reply::WaitOne(reply),
            eager: false,
        };
        if self.jobs.send(job).is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// Splits entries, in order, into jobs that each fit one call: at most 10 entries and at most the
/// payload limit. An entry alone is never over the limit (its message was checked against the
/// 1 MiB message size first), but if one were it would still go out alone, for SQS to refuse.
fn chunks<A: Action>(entries: Vec<A::Entry>) -> Vec<(Vec<A::Entry>, usize)> {
    let mut chunks: Vec<(Vec<A::Entry>, usize)> = Vec::new();
    for entry in entries {
        let size = A::size(&entry);
        match chunks.last_mut() {
            Some((chunk, total))
                if chunk.len() < MAX_BATCH_ENTRIES && *total + size <= MAX_BATCH_PAYLOAD_SIZE =>
            {
                chunk.push(entry);
                *total += size;
            }
            _ => chunks.push((vec![entry], size)),
        }
    }
    chunks
}

/// The id of a call's entry `i`: its index, which the answer's ids are read back as.
fn entry_id(i: usize) -> String {
    const IDS: [&str; MAX_BATCH_ENTRIES] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    IDS.get(i)
        .map_or_else(|| i.to_string(), |id| (*id).to_owned())
}

/// A try the engine gave up on at its deadline: SQS may or may not have acted on it.
pub(crate) fn unanswered_within(deadline: Duration) -> TransportError {
    TransportError::Unavailable {
        message: format!(
            "no answer within {} ms; the engine gave the call up",
            deadline.as_millis()
        ),
    }
}

fn stopped() -> TransportError {
    TransportError::service(
        ErrorKind::InternalError,
        "the batcher stopped before answering; the runtime is shutting down",
    )
}

/// The jobs gathered for one call, and what they take of its limits.
struct Gathering<A: Action> {
    jobs: Vec<Job<A>>,
    count: usize,
    size: usize,
}

impl<A: Action> Gathering<A> {
    fn new(first: Job<A>) -> Self {
        // Room for a full call of one-entry jobs, so gathering one does not grow the Vec.
        let mut jobs = Vec::with_capacity(MAX_BATCH_ENTRIES);
        let (count, size) = (first.entries.len(), first.size);
        jobs.push(first);
        Self { jobs, count, size }
    }

    /// Whether the call takes nothing more: 10 entries, or the payload limit.
    fn is_full(&self) -> bool {
        self.count >= MAX_BATCH_ENTRIES || self.size >= MAX_BATCH_PAYLOAD_SIZE
    }

    /// Adds `job` if it fits; a job is never split across calls, so one that does not fit is
    /// handed back to start the next.
    fn take(&mut self, job: Job<A>) -> Result<(), Job<A>> {
        if self.count + job.entries.len() > MAX_BATCH_ENTRIES
            || self.size + job.size > MAX_BATCH_PAYLOAD_SIZE
        {
            return Err(job);
        }
        self.count += job.entries.len();
        self.size += job.size;
        self.jobs.push(job);
        Ok(())
    }
}

/// Gathers jobs into calls until every handle is gone.
async fn gather<A: Action>(
    transport: SharedTransport,
    queue_url: String,
    mut receiver: mpsc::UnboundedReceiver<Job<A>>,
    settings: BatchSettings,
) {
    let max_in_flight = settings.max_in_flight.max(1);
    let calls = Arc::new(Semaphore::new(max_in_flight));
    let queue_url: Arc<str> = Arc::from(queue_url);
    let mut left_over: Option<Job<A>> = None;
    loop {
        let first = match left_over.take() {
            Some(job) => job,
            None => match receiver.recv().await {
                Some(job) => job,
                None => break,
            },
        };
        // Without a linger, entries gather while every call is busy: wait for a free call first,
        // then take whatever queued meanwhile.
        let early_permit = if settings.linger.is_zero() {
            Some(calls.clone().acquire_owned().await.expect("never closed"))
        } else {
            None
        };
        // An eager job takes only what is queued already, as without a linger.
        let mut eager = first.eager;
        let mut call = Gathering::new(first);
        let deadline = Instant::now() + settings.linger;
        while !call.is_full() {
            let job = if early_permit.is_some() || eager {
                match receiver.try_recv() {
                    Ok(job) => Some(job),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            } else {
                tokio::select! {
                    biased;
                    job = receiver.recv() => job,
                    () = tokio::time::sleep_until(deadline) => break,
                }
            };
            match job {
                Some(job) => {
                    eager |= job.eager;
                    if let Err(job) = call.take(job) {
                        left_over = Some(job);
                        break;
                    }
                }
                None => break,
            }
        }
        let batch = call.jobs;
        let permit = match early_permit {
            Some(permit) => permit,
            None => calls
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed"),
        };
        let flush = flush::<A>(transport.clone(), queue_url.clone(), batch);
        if max_in_flight == 1 {
            flush.await;
            drop(permit);
        } else {
            let flush = async move {
                flush.await;
                drop(permit);
            };
            if !receiver.is_empty() {
                // The next call is waiting to be gathered: this one goes on beside it.
                tokio::spawn(flush);
                continue;
            }
            // Nothing else to gather: a call answered at once (the in-process account's) is made
            // and answered here, as a task per call would cost more than the call. One that
            // waits goes on in a task of its own.
            let mut flush = Box::pin(flush);
            if crate::task::poll_once(&mut flush).await.is_none() {
                tokio::spawn(flush);
            }
        }
    }
    // Wait for calls still in flight before the batcher counts as stopped.
    let _ = calls.acquire_many(max_in_flight as u32).await;
}

/// Gathers jobs into calls for callers that wait for their answers; see
/// [`Batcher::spawn_with_company`].
async fn gather_with_company<A: Action>(
    transport: SharedTransport,
    queue_url: String,
    mut receiver: mpsc::UnboundedReceiver<Job<A>>,
    max_in_flight: usize,
    company: Company,
) {
    let max_in_flight = max_in_flight.max(1);
    let calls = Arc::new(Semaphore::new(max_in_flight));
    let queue_url: Arc<str> = Arc::from(queue_url);
    let mut left_over: Option<Job<A>> = None;
    let mut open = true;
    // Entries in calls not answered yet: their callers are waiting, not about to submit.
    let in_flight = Arc::new(AtomicUsize::new(0));
    while open {
        let first = match left_over.take() {
            Some(job) => job,
            None => match receiver.recv().await {
                Some(job) => job,
                None => break,
            },
        };
        let mut call = Gathering::new(first);
        let mut waited = None;
        let mut wait_over = false;
        let mut patience = None;
        let mut patience_over = false;
        loop {
            if call.is_full() || !open {
                break;
            }
            let job = match receiver.try_recv() {
                Ok(job) => Some(job),
                Err(mpsc::error::TryRecvError::Disconnected) => None,
                Err(mpsc::error::TryRecvError::Empty) => {
                    // Made before the count is read, so a caller leaving after it still wakes us.
                    let left = company.left.notified();
                    tokio::pin!(left);
                    left.as_mut().enable();
                    // Calls in flight are waited for a while (their callers' next entries may
                    // share this call), but never for long: one stalled call must not hold every
                    // other caller's entry.
                    let idle = patience_over || calls.available_permits() == max_in_flight;
                    let coming = !wait_over
                        && (company.callers)() > in_flight.load(Ordering::Acquire) + call.count;
                    if idle && !coming {
                        break;
                    }
                    let wait =
                        waited.get_or_insert_with(|| Box::pin(tokio::time::sleep(company.wait)));
                    let patience = patience
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(IN_FLIGHT_PATIENCE)));
                    tokio::select! {
                        biased;
                        job = receiver.recv() => job,
                        // Every call in flight answered: this one may go, unless company is coming.
                        all = calls.clone().acquire_many_owned(max_in_flight as u32), if !idle => {
                            drop(all);
                            continue;
                        }
                        () = patience.as_mut(), if !idle => {
                            patience_over = true;
                            continue;
                        }
                        () = wait.as_mut(), if coming => {
                            wait_over = true;
                            continue;
                        }
                        () = left, if coming => continue,
                    }
                }
            };
            match job {
                Some(job) => {
                    if let Err(job) = call.take(job) {
                        left_over = Some(job);
                        break;
                    }
                }
                None => open = false,
            }
        }
        let Gathering {
            jobs: batch, count, ..
        } = call;
        let permit = calls
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        in_flight.fetch_add(count, Ordering::AcqRel);
        let flush = Flush::new(transport.clone(), queue_url.clone(), batch);
        // A call answered at once (the in-process account's) is made here, as a task per call
        // would cost more than the call; one that waits goes on in a task of its own, so this
        // batcher gathers the next call meanwhile and a stalled one holds up nobody.
        let mut first_try = Box::pin(flush.try_first(permit, in_flight.clone(), count));
        if crate::task::poll_once(&mut first_try).await.is_none() {
            tokio::spawn(first_try);
        }
    }
    // Wait for calls still in flight before the batcher counts as stopped.
    let _ = calls.acquire_many(max_in_flight as u32).await;
}

/// Makes one call for a batch of jobs (retrying what may be retried) and answers each job.
async fn flush<A: Action>(transport: SharedTransport, queue_url: Arc<str>, batch: Vec<Job<A>>) {
    Flush::new(transport, queue_url, batch).run().await;
}

/// One batch's calls: its first try, then the retries of what may pass, then its answers.
///
/// Split in steps so that a batcher can make the first try itself and leave only the retries, which
/// may take seconds, to a task of their own: a call that keeps failing must not hold up the calls of
/// other callers behind it.
struct Flush<A: Action> {
    transport: SharedTransport,
    queue_url: Arc<str>,
    batch: Vec<Job<A>>,
    /// Per entry, in the order the jobs hold them: its answer once it has one.
    answers: Vec<Option<Result<A::Output, TransportError>>>,
    /// The entries the next try sends.
    todo: Vec<usize>,
    attempt: u32,
    started: Instant,
}

impl<A: Action> Flush<A> {
    fn new(transport: SharedTransport, queue_url: Arc<str>, batch: Vec<Job<A>>) -> Self {
        let entries = batch.iter().map(|job| job.entries.len()).sum();
        Self {
            transport,
            queue_url,
            batch,
            answers: (0..entries).map(|_| None).collect(),
            todo: (0..entries).collect(),
            attempt: 0,
            started: Instant::now(),
        }
    }

    /// Tries until every entry has its answer, then answers each job.
    async fn run(mut self) {
        if let Some(delay) = self.try_once().await {
            self.retry_after(delay).await;
        }
        self.answer();
    }

    /// Waits `delay`, then tries again until every entry has its answer.
    async fn retry_after(&mut self, mut delay: Duration) {
        loop {
            tokio::time::sleep(delay).await;
            match self.try_once().await {
                Some(next) => delay = next,
                None => return,
            }
        }
    }

    /// Makes the first try in the call's place (`permit`), then gives the place up: retries, which
    /// may take seconds, go on in a task of their own, so a call that keeps failing (a delete
    /// whose receipt handle expired, an outage) does not hold up the other callers' entries
    /// (other FIFO groups' deletes) behind it. `in_flight` counts the batch's `entries` until
    /// they are answered: their callers wait and are not about to submit.
    async fn try_first(
        mut self,
        permit: OwnedSemaphorePermit,
        in_flight: Arc<AtomicUsize>,
        entries: usize,
    ) {
        let retry = self.try_once().await;
        drop(permit);
        // The entries stop counting as in flight before their answers wake the callers: a caller
        // that submits its next entry at once must not find its own answered one still counted,
        // or the batcher takes that entry for company already in a call and sends it alone.
        match retry {
            None => {
                in_flight.fetch_sub(entries, Ordering::AcqRel);
                self.answer();
            }
            Some(delay) => {
                tokio::spawn(async move {
                    self.retry_after(delay).await;
                    in_flight.fetch_sub(entries, Ordering::AcqRel);
                    self.answer();
                });
            }
        }
    }

    /// Makes one call with the entries not answered yet. Returns how long to wait before the next
    /// try, or `None` once every entry has its answer (given up ones answered with their error).
    async fn try_once(&mut self) -> Option<Duration> {
        self.attempt += 1;
        let entries: Vec<&A::Entry> = self
            .batch
            .iter()
            .flat_map(|job| job.entries.as_slice())
            .collect();
        let answers = &mut self.answers;
        self.todo.retain(|&i| match A::withheld(entries[i]) {
            Some(error) => {
                answers[i] = Some(Err(error));
                false
            }
            None => true,
        });
        if self.todo.is_empty() {
            return None;
        }
        let call: Vec<(String, A::Entry)> = self
            .todo
            .iter()
            .map(|&i| (entry_id(i), A::Entry::clone(entries[i])))
            .collect();
        let deadline = try_deadline(
            self.todo
                .iter()
                .filter_map(|&i| A::useful_until(entries[i]))
                .min(),
        );
        // A transport that panics fails this call (retried as a service fault), not the batcher,
        // which every later delete, release and send of the queue waits on. A try that is not
        // answered by its deadline is given up as unanswered (repeated where that is safe).
        let answer = tokio::time::timeout(
            deadline,
            crate::task::CatchUnwind::new(A::call(&self.transport, &self.queue_url, call)),
        )
        .await
        .unwrap_or_else(|_| Ok(Err(unanswered_within(deadline))))
        .unwrap_or_else(|panic| {
            Err(TransportError::service(
                ErrorKind::InternalError,
                format!("the call panicked: {panic}"),
            ))
        });
        let answers = &mut self.answers;
        // The entries that failed in a way that may pass, with what to answer if no try is left.
        let mut again: Vec<(usize, TransportError)> = Vec::new();
        match answer {
            Ok(result) => {
                for (id, output) in result.successful {
                    if let Some(slot) = id.parse::<usize>().ok().and_then(|i| answers.get_mut(i)) {
                        *slot = Some(Ok(output));
                    }
                }
                for failure in result.failed {
                    let Some(i) = failure
                        .id
                        .parse::<usize>()
                        .ok()
                        .filter(|i| *i < answers.len())
                    else {
                        continue;
                    };
                    let error = TransportError::service(failure.kind, failure.message);
                    if failure.sender_fault {
                        answers[i] = Some(Err(error));
                    } else {
                        again.push((i, error));
                    }
                }
            }
            Err(error) if error.is_retryable() => {
                let unanswered = matches!(error, TransportError::Unavailable { .. });
                for &i in &self.todo {
                    if unanswered && !A::may_repeat_unanswered(entries[i]) {
                        answers[i] = Some(Err(error.clone()));
                    } else {
                        again.push((i, error.clone()));
                    }
                }
            }
            Err(error) => {
                for &i in &self.todo {
                    answers[i] = Some(Err(error.clone()));
                }
            }
        }
        let delay = crate::retry::backoff(self.attempt, RETRY_FIRST_DELAY, RETRY_LONGEST_DELAY);
        if again.is_empty() || self.started.elapsed() + delay > RETRY_FOR {
            for (i, error) in again {
                answers[i] = Some(Err(error));
            }
            self.todo.clear();
            return None;
        }
        tracing::debug!(
            attempt = self.attempt,
            entries = again.len(),
            error = %again[0].1,
            retry_in_ms = delay.as_millis() as u64,
            "batch call failed; retrying"
        );
        self.todo = again.into_iter().map(|(i, _)| i).collect();
        Some(delay)
    }

    /// Answers each job with its entries' answers.
    fn answer(self) {
        let mut answers = self.answers.into_iter().map(|answer| {
            answer.unwrap_or_else(|| {
                Err(TransportError::service(
                    ErrorKind::InternalError,
                    "SQS answered neither success nor failure for this entry",
                ))
            })
        });
        for job in self.batch {
            let count = job.entries.len();
            let mut job_answers = answers.by_ref().take(count);
            // A caller's callback runs here (it logs, in its span, and lets go of what it held):
            // a panic in it must not take the batcher, which every later call of the queue needs.
            let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                job.reply.answer(&mut job_answers);
            }));
            // What a callback that panicked left unread is not the next job's.
            job_answers.for_each(drop);
            if let Err(panic) = answered {
                tracing::error!(
                    panic = %crate::task::panic_message(panic.as_ref()),
                    "a batched call's answer panicked in its caller's callback"
                );
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::account::Account;
    use crate::client::lease::Leases;
    use crate::transport::{
        BatchFailure, QueueAttributes, ReceiveMessage, ReceivedMessage, Transport,
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
    async fn without_a_linger_the_first_entry_goes_at_once_and_the_rest_gather_while_it_is_in_flight(
    ) {
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
}
