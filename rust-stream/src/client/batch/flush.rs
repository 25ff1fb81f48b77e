//! One batch's calls: the first try, the retries of what may pass (with jittered backoff, for up
//! to 20 s), and each job's answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::model::rules::ErrorKind;
use crate::transport::{SharedTransport, TransportError};

use super::action::{try_deadline, Action};
use super::job::{entry_id, unanswered_within, Job};

/// How long a failure that may pass (throttling, a service-side failure, a network fault) is
/// retried before its error is answered. The SDK's own retries stop once its retry quota is spent,
/// which an outage of a few seconds does; this is what lets a send, a delete or a release ride one
/// out, each entry keeping its content (a FIFO send its deduplication id), while a caller still
/// hears of a lasting outage. A try that starts within it runs to its end.
pub(super) const RETRY_FOR: Duration = Duration::from_secs(20);
/// The backoff between tries: jittered, doubling from the first to the longest.
pub(super) const RETRY_FIRST_DELAY: Duration = Duration::from_millis(50);
pub(super) const RETRY_LONGEST_DELAY: Duration = Duration::from_secs(2);
/// Makes one call for a batch of jobs (retrying what may be retried) and answers each job.
pub(super) async fn flush<A: Action>(
    transport: SharedTransport,
    queue_url: Arc<str>,
    batch: Vec<Job<A>>,
) {
    Flush::new(transport, queue_url, batch).run().await;
}

/// One batch's calls: its first try, then the retries of what may pass, then its answers.
///
/// Split in steps so that a batcher can make the first try itself and leave only the retries, which
/// may take seconds, to a task of their own: a call that keeps failing must not hold up the calls of
/// other callers behind it.
pub(super) struct Flush<A: Action> {
    pub(super) transport: SharedTransport,
    pub(super) queue_url: Arc<str>,
    pub(super) batch: Vec<Job<A>>,
    /// Per entry, in the order the jobs hold them: its answer once it has one.
    pub(super) answers: Vec<Option<Result<A::Output, TransportError>>>,
    /// The entries the next try sends.
    pub(super) todo: Vec<usize>,
    pub(super) attempt: u32,
    pub(super) started: Instant,
}

impl<A: Action> Flush<A> {
    pub(super) fn new(transport: SharedTransport, queue_url: Arc<str>, batch: Vec<Job<A>>) -> Self {
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
    pub(super) async fn run(mut self) {
        if let Some(delay) = self.try_once().await {
            self.retry_after(delay).await;
        }
        self.answer();
    }

    /// Waits `delay`, then tries again until every entry has its answer.
    pub(super) async fn retry_after(&mut self, mut delay: Duration) {
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
    /// (other FIFO groups' deletes) behind it. `in_flight` counts the batch's `jobs` until they
    /// are answered: their callers wait and are not about to submit.
    pub(super) async fn try_first(
        mut self,
        permit: OwnedSemaphorePermit,
        in_flight: Arc<AtomicUsize>,
        jobs: usize,
    ) {
        let retry = self.try_once().await;
        drop(permit);
        // The jobs stop counting as in flight before their answers wake the callers: a caller
        // that submits its next job at once must not find its own answered one still counted,
        // or the batcher takes that job for company already in a call and sends it alone.
        match retry {
            None => {
                in_flight.fetch_sub(jobs, Ordering::AcqRel);
                self.answer();
            }
            Some(delay) => {
                tokio::spawn(async move {
                    self.retry_after(delay).await;
                    in_flight.fetch_sub(jobs, Ordering::AcqRel);
                    self.answer();
                });
            }
        }
    }

    /// Makes one call with the entries not answered yet. Returns how long to wait before the next
    /// try, or `None` once every entry has its answer (given up ones answered with their error).
    pub(super) async fn try_once(&mut self) -> Option<Duration> {
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
    pub(super) fn answer(self) {
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
