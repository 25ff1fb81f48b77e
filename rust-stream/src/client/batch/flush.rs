//! One batch's calls: the first try, the retries of what may pass (with jittered backoff, for up
//! to 20 s), and each job's answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use crate::model::entry_id::entry_id;
use crate::model::rules::ErrorKind;
use crate::transport::{EntryId, SharedTransport, TransportError};

use super::action::{try_deadline, Action};
use super::job::{unanswered_within, what_holds, Chain, Job};

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
        let chains: Vec<Option<&Chain<A::Entry>>> = self
            .batch
            .iter()
            .flat_map(|job| std::iter::repeat_n(job.chain.as_deref(), job.entries.len()))
            .collect();
        let answers = &mut self.answers;
        // An entry behind a failed one of its group in its submission is held: checked before
        // every try, as that failure may be an earlier call's of the same group.
        let held = |i: usize| chains[i].and_then(|chain| chain.held(entries[i]));
        self.todo
            .retain(|&i| match A::withheld(entries[i]).or_else(|| held(i)) {
                Some(error) => {
                    answers[i] = Some(Err(error));
                    false
                }
                None => true,
            });
        if self.todo.is_empty() {
            return None;
        }
        let call: Vec<(EntryId, A::Entry)> = self
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
        keep_groups_in_order(&entries, &chains, answers, &mut again);
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
            let answered: Vec<_> = answers.by_ref().take(count).collect();
            // Recorded before anyone hears, and before the group's next call (formed once this
            // one is answered): the submission's later entries of a failed group are held. The chain is let
            // go of first, so a submission whose last job this is has let go of its groups when
            // its caller wakes.
            if let Some(chain) = job.chain {
                chain.record(job.entries.as_slice(), &answered);
            }
            let mut job_answers = answered.into_iter();
            // A caller's callback runs here (it logs, in its span, and lets go of what it held):
            // a panic in it must not take the batcher, which every later call of the queue needs.
            let replied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                job.reply.answer(&mut job_answers);
            }));
            if let Err(panic) = replied {
                tracing::error!(
                    panic = %crate::task::panic_message(panic.as_ref()),
                    "a batched call's answer panicked in its caller's callback"
                );
            }
        }
    }
}

/// On a FIFO target (entries with a [`Chain`]), takes out of `again` what may not be tried again
/// without a group's message being stored ahead of an earlier one of it, and answers it:
///
/// - an entry behind which SQS stored a later entry of its group in this batch (a partial
///   failure): a retry would land behind that one, so it is answered with its error;
/// - an entry behind one of its group that failed for good in this batch: it is held, as the
///   later jobs of a submission are.
///
/// What stays in `again` is retried in order, so a group's stored messages are always in the
/// order they were given, with gaps only where one failed.
fn keep_groups_in_order<E, O>(
    entries: &[&E],
    chains: &[Option<&Chain<E>>],
    answers: &mut [Option<Result<O, TransportError>>],
    again: &mut Vec<(usize, TransportError)>,
) {
    if again.is_empty() || chains.iter().all(Option::is_none) {
        return;
    }
    let group = |i: usize| chains[i].map(|chain| chain.group_of(entries[i]));
    // Each group's last stored entry in this batch.
    let mut last_stored: HashMap<&str, usize> = HashMap::new();
    for (i, answer) in answers.iter().enumerate() {
        if let (Some(Ok(_)), Some(group)) = (answer, group(i)) {
            last_stored.insert(group, i);
        }
    }
    again.sort_by_key(|(i, _)| *i);
    let mut retried = Vec::with_capacity(again.len());
    for (i, error) in again.drain(..) {
        match group(i) {
            Some(group) if last_stored.get(group).is_some_and(|&stored| stored > i) => {
                tracing::warn!(
                    messaging.message.group.id = group,
                    error = %error,
                    "a FIFO send failed while a later message of its group in the same call was \
                     stored; it is not retried, as it would be stored behind that one"
                );
                answers[i] = Some(Err(error));
            }
            _ => retried.push((i, error)),
        }
    }
    // Each group's first entry answered with an error (in this try or an earlier one), and why.
    let mut first_failed: HashMap<&str, (usize, String)> = HashMap::new();
    for (i, answer) in answers.iter().enumerate() {
        if let (Some(Err(error)), Some(group)) = (answer, group(i)) {
            first_failed
                .entry(group)
                .or_insert_with(|| (i, what_holds(error)));
        }
    }
    for (i, error) in retried {
        let failed = group(i).and_then(|group| first_failed.get(group));
        match failed.filter(|(failed, _)| *failed < i) {
            Some((_, why)) => {
                answers[i] = Some(Err(TransportError::HeldBehind {
                    message: why.clone(),
                }));
            }
            None => again.push((i, error)),
        }
    }
}
