//! The one batcher behind every batched call: `SendMessageBatch` for publishers,
//! `DeleteMessageBatch` and `ChangeMessageVisibilityBatch` for settling and extending, and SNS's
//! `PublishBatch` for topic publishers (its target address a topic ARN rather than a queue URL).
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

//!
//! - [`action`]: the batched actions and what each allows.
//! - `job`: what a caller submits and how it is answered.
//! - `gather`: jobs into calls.
//! - `flush`: a call, its retries and its answers.

pub(crate) mod action;
mod flush;
mod gather;
mod job;

use std::marker::PhantomData;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::transport::{SharedTransport, TransportError};

pub(crate) use action::{Action, DeleteBatch, PublishBatch, SendBatch, VisibilityBatch};
use flush::Flush;
use gather::{gather, gather_with_company};
pub(crate) use job::Answered;
use job::{chunks, stopped, Answers, Entries, Job, Reply};
pub(crate) use job::{unanswered_within, BatchSettings, Chain, Company};

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
    /// (lanes whose runs' deletes one call answered) share the next call too, and a stalled
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
        self.submit_with(entries, false, None).await
    }

    /// As [`submit`](Self::submit); when `eager`, a call that is not full does not wait the
    /// linger for company, but takes only what is queued already: for the part of a larger
    /// submission, whose company was the rest of it. With a `chain` (a FIFO target's), an entry
    /// that fails for good holds the chain's later entries of its group (see [`Chain`]).
    pub(crate) async fn submit_with(
        &self,
        entries: Vec<A::Entry>,
        eager: bool,
        chain: Option<Arc<Chain<A::Entry>>>,
    ) -> Answers<A> {
        let mut waiting = Vec::new();
        for (chunk, size) in chunks::<A>(entries) {
            let count = chunk.len();
            let (reply, answer) = oneshot::channel();
            let sent = self.jobs.send(Job {
                entries: Entries::Many(chunk),
                size,
                reply: Reply::Wait(reply),
                eager,
                chain: chain.clone(),
            });
            waiting.push((count, sent.is_ok().then_some(answer)));
        }
        // Only the jobs keep the chain from here: its last one answered (or a caller that stopped
        // waiting before) lets it go.
        drop(chain);
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

    /// Submits up to 10 entries (within the payload limit) that nobody waits for, as one job:
    /// they go out in one call, and `then` reads their answers, one an entry in order, once they
    /// are answered (errors, if the batcher stopped first). A caller that settles several
    /// messages at once (a standard receive's task) hands them over once, not once each.
    pub(crate) fn submit_then(
        &self,
        entries: Vec<A::Entry>,
        then: impl FnOnce(&mut Answered<'_, A>) + Send + 'static,
    ) {
        debug_assert!(entries.len() <= crate::model::rules::MAX_BATCH_ENTRIES);
        let job = Job {
            size: entries.iter().map(A::size).sum(),
            entries: Entries::Many(entries),
            reply: Reply::Then(Box::new(then)),
            eager: false,
            chain: None,
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
            chain: None,
        };
        if self.jobs.send(job).is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// Where one entry's answer goes when its call is made outside a batcher (see [`Call`]).
pub(crate) type AnswerTo<A> = oneshot::Sender<Result<<A as Action>::Output, TransportError>>;

/// One call made outside any batcher, by a sender that picks each call's entries itself (a FIFO
/// target's, which picks them by group: see `client::send`). It is made as a batcher's call is:
/// failed entries retried for up to 20 s, an entry held behind a failed one of its group in its
/// submission's [`Chain`], each entry answered on its own.
pub(crate) struct Call<A: Action> {
    jobs: Vec<Job<A>>,
}

impl<A: Action> Call<A> {
    /// A call with no entries yet.
    pub(crate) fn new() -> Self {
        Self {
            jobs: Vec::with_capacity(crate::model::rules::MAX_BATCH_ENTRIES),
        }
    }

    /// Adds `entry` of `chain`'s submission, answered to `reply`.
    pub(crate) fn push(
        &mut self,
        entry: A::Entry,
        chain: Arc<Chain<A::Entry>>,
        reply: AnswerTo<A>,
    ) {
        self.jobs.push(Job {
            size: A::size(&entry),
            entries: Entries::One(entry),
            reply: Reply::WaitOne(reply),
            eager: true,
            chain: Some(chain),
        });
    }

    /// Adds `entries` as one job (at most a call's, within the payload limit), whose answers
    /// `then` reads, one an entry in order, as [`Batcher::submit_then`]'s.
    pub(crate) fn push_then(
        &mut self,
        entries: Vec<A::Entry>,
        then: impl FnOnce(&mut Answered<'_, A>) + Send + 'static,
    ) {
        self.push_many(entries, Reply::Then(Box::new(then)));
    }

    /// Adds `entries` as one job of at most a call's, answered to `reply`.
    fn push_many(&mut self, entries: Vec<A::Entry>, reply: Reply<A>) {
        debug_assert!(entries.len() <= crate::model::rules::MAX_BATCH_ENTRIES);
        self.jobs.push(Job {
            size: entries.iter().map(A::size).sum(),
            entries: Entries::Many(entries),
            reply,
            eager: true,
            chain: None,
        });
    }

    /// Makes the call and answers each entry. `first_try_over` runs once the first try is over,
    /// whether it answered every entry or left some to retries.
    pub(crate) async fn run(
        self,
        transport: SharedTransport,
        queue_url: Arc<str>,
        first_try_over: impl FnOnce(),
    ) {
        let mut flush = Flush::new(transport, queue_url, self.jobs);
        let retry = flush.try_once().await;
        first_try_over();
        if let Some(delay) = retry {
            flush.retry_after(delay).await;
        }
        flush.answer();
    }

    /// Makes one call of `entries` (at most a call's, within the payload limit) as
    /// [`run`](Self::run) does and returns their answers, in order: for a caller that waits for
    /// its answers and needs no company (a FIFO lane's full run), without a batcher's task.
    pub(crate) async fn answers(
        entries: Vec<A::Entry>,
        transport: SharedTransport,
        queue_url: Arc<str>,
    ) -> Answers<A> {
        let count = entries.len();
        let (answered, answers) = oneshot::channel();
        let mut call = Self::new();
        call.push_many(entries, Reply::Wait(answered));
        call.run(transport, queue_url, || {}).await;
        // `run` answers every job before it returns.
        answers
            .await
            .unwrap_or_else(|_| (0..count).map(|_| Err(stopped())).collect())
    }
}

impl<A: Action> std::fmt::Debug for Call<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("entries", &self.jobs.len())
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests;
