//! Gathering jobs into calls: a call goes out when it is full, when its first entry has waited
//! the linger, or (for callers that each wait for their answer) when the callers it waits for
//! are all in or gone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;

use crate::model::rules::MAX_BATCH_ENTRIES;
use crate::transport::SharedTransport;

use super::action::Action;
use super::flush::{flush, Flush};
use super::job::{BatchSettings, Company, Job};

/// How long a FIFO delete call that is not full waits for the calls in flight to be answered (so
/// that their lanes' next deletes share it) before it goes beside them: longer than an SQS round
/// trip, short against a visibility timeout, so a stalled call holds up no other group's delete.
pub(super) const IN_FLIGHT_PATIENCE: Duration = Duration::from_millis(100);

/// The jobs gathered for one call, and what they take of its limits.
pub(super) struct Gathering<A: Action> {
    pub(super) jobs: Vec<Job<A>>,
    pub(super) count: usize,
    pub(super) size: usize,
}

impl<A: Action> Gathering<A> {
    pub(super) fn new(first: Job<A>) -> Self {
        // Room for a full call of one-entry jobs, so gathering one does not grow the Vec.
        let mut jobs = Vec::with_capacity(MAX_BATCH_ENTRIES);
        let (count, size) = (first.entries.len(), first.size);
        jobs.push(first);
        Self { jobs, count, size }
    }

    /// Whether the call takes nothing more: 10 entries, or the payload limit.
    pub(super) fn is_full(&self) -> bool {
        self.count >= MAX_BATCH_ENTRIES || self.size >= A::MAX_PAYLOAD
    }

    /// Adds `job` if it fits; a job is never split across calls, so one that does not fit is
    /// handed back to start the next.
    pub(super) fn take(&mut self, job: Job<A>) -> Result<(), Job<A>> {
        if self.count + job.entries.len() > MAX_BATCH_ENTRIES
            || self.size + job.size > A::MAX_PAYLOAD
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
pub(super) async fn gather<A: Action>(
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
pub(super) async fn gather_with_company<A: Action>(
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
    // Jobs in calls not answered yet: their callers (one job each at a time) are waiting, not
    // about to submit.
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
                        && (company.callers)()
                            > in_flight.load(Ordering::Acquire) + call.jobs.len();
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
        let batch = call.jobs;
        let jobs = batch.len();
        let permit = calls
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        in_flight.fetch_add(jobs, Ordering::AcqRel);
        let flush = Flush::new(transport.clone(), queue_url.clone(), batch);
        // A call answered at once (the in-process account's) is made here, as a task per call
        // would cost more than the call; one that waits goes on in a task of its own, so this
        // batcher gathers the next call meanwhile and a stalled one holds up nobody.
        let mut first_try = Box::pin(flush.try_first(permit, in_flight.clone(), jobs));
        if crate::task::poll_once(&mut first_try).await.is_none() {
            tokio::spawn(first_try);
        }
    }
    // Wait for calls still in flight before the batcher counts as stopped.
    let _ = calls.acquire_many(max_in_flight as u32).await;
}
