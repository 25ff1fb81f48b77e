//! What a caller hands a batcher and how it is answered: a [`Job`] of entries, its [`Reply`],
//! the settings a batcher runs by, and the ids and errors its calls use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::model::rules::{ErrorKind, MAX_BATCH_ENTRIES};
use crate::transport::TransportError;

use super::action::Action;

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

pub(crate) type Answers<A> = Vec<Result<<A as Action>::Output, TransportError>>;

pub(super) struct Job<A: Action> {
    pub(super) entries: Entries<A::Entry>,
    /// The entries' payload, as [`Action::size`] counts it.
    pub(super) size: usize,
    pub(super) reply: Reply<A>,
    /// The submitter has nothing to add: a call it starts goes without waiting the linger.
    pub(super) eager: bool,
    /// The submission the job is part of, when its entries go to a FIFO target by group.
    pub(super) chain: Option<Arc<Chain<A::Entry>>>,
}

/// One submission of entries to a FIFO target, shared by its jobs (a submission of more than 10
/// entries is several jobs or calls, one after another for a group): once an entry is refused
/// or fails for good, the submission's later entries of its group are answered
/// [`TransportError::HeldBehind`] without a call, so none is stored ahead of it. Dropped with
/// its last job once that is answered (or with the submission, if no job was made), when it runs
/// what the submitter left for then.
pub(crate) struct Chain<E> {
    group: fn(&E) -> &str,
    /// The groups that failed, each with what failed first.
    failed: Mutex<HashMap<String, String>>,
    done: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl<E> Chain<E> {
    /// A submission whose entries are grouped by `group`, which runs `done` once every job of it
    /// has been answered.
    pub(crate) fn new(group: fn(&E) -> &str, done: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self {
            group,
            failed: Mutex::new(HashMap::new()),
            done: Some(Box::new(done)),
        }
    }

    pub(super) fn group_of<'e>(&self, entry: &'e E) -> &'e str {
        (self.group)(entry)
    }

    /// Why `entry` must not be sent: an earlier entry of its group in the submission failed.
    pub(super) fn held(&self, entry: &E) -> Option<TransportError> {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed
            .get(self.group_of(entry))
            .map(|first| TransportError::HeldBehind {
                message: first.clone(),
            })
    }

    /// `entry` was answered with `error`: its group's later entries are held.
    pub(super) fn failed(&self, entry: &E, error: &TransportError) {
        let why = what_holds(error);
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(self.group_of(entry).to_owned())
            .or_insert(why);
    }

    /// A job's entries were answered: the groups of those answered with an error are held.
    pub(super) fn record<O>(&self, entries: &[E], answers: &[Result<O, TransportError>]) {
        for (entry, answer) in entries.iter().zip(answers) {
            if let Err(error) = answer {
                self.failed(entry, error);
            }
        }
    }
}

/// What a failed entry's group is held behind: its error, or, for an entry itself held, the
/// failure it was held behind.
pub(super) fn what_holds(error: &TransportError) -> String {
    match error {
        TransportError::HeldBehind { message } => message.clone(),
        error => error.to_string(),
    }
}

impl<E> Drop for Chain<E> {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done();
        }
    }
}

impl<E> std::fmt::Debug for Chain<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain").finish_non_exhaustive()
    }
}

/// A job's entries. Most jobs carry one (a settled message's delete), which needs no `Vec`.
pub(super) enum Entries<E> {
    One(E),
    Many(Vec<E>),
}

impl<E> Entries<E> {
    pub(super) fn as_slice(&self) -> &[E] {
        match self {
            Self::One(entry) => std::slice::from_ref(entry),
            Self::Many(entries) => entries,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.as_slice().len()
    }
}

pub(super) type Answer<A> = Result<<A as Action>::Output, TransportError>;

/// Where a job's answers go.
pub(super) enum Reply<A: Action> {
    /// To a caller awaiting them.
    Wait(oneshot::Sender<Answers<A>>),
    /// To a caller awaiting the answer of its job's one entry.
    WaitOne(oneshot::Sender<Answer<A>>),
    /// To a callback run by the batcher once the job's entries are answered, for a caller that
    /// does not wait (a standard queue's deletes); it must be quick, as it runs where the call's
    /// answer is read. It reads one answer an entry, in order; an answer the batcher could not
    /// give (it stopped first) reads as an error.
    Then(Then<A>),
}

/// The answers a [`Reply::Then`] callback reads, one an entry.
pub(crate) type Answered<'a, A> = dyn Iterator<Item = Answer<A>> + 'a;

/// A [`Reply::Then`] callback.
pub(super) type Then<A> = Box<dyn FnOnce(&mut Answered<'_, A>) + Send>;

impl<A: Action> Reply<A> {
    /// Answers the job with its entries' answers, in order.
    pub(super) fn answer(self, mut answers: impl Iterator<Item = Answer<A>>) {
        let one = |answers: &mut dyn Iterator<Item = Answer<A>>| {
            answers.next().unwrap_or_else(|| Err(stopped()))
        };
        match self {
            // A caller that stopped waiting has nothing to learn.
            Self::Wait(reply) => drop(reply.send(answers.collect())),
            Self::WaitOne(reply) => drop(reply.send(one(&mut answers))),
            Self::Then(then) => then(&mut answers.chain(std::iter::repeat_with(|| Err(stopped())))),
        }
    }
}

/// Splits entries, in order, into jobs that each fit one call: at most 10 entries and at most the
/// payload limit. An entry alone is never over the limit (its message was checked against the
/// 1 MiB message size first), but if one were it would still go out alone, for SQS to refuse.
pub(super) fn chunks<A: Action>(entries: Vec<A::Entry>) -> Vec<(Vec<A::Entry>, usize)> {
    let mut chunks: Vec<(Vec<A::Entry>, usize)> = Vec::new();
    for entry in entries {
        let size = A::size(&entry);
        match chunks.last_mut() {
            Some((chunk, total))
                if chunk.len() < MAX_BATCH_ENTRIES && *total + size <= A::MAX_PAYLOAD =>
            {
                chunk.push(entry);
                *total += size;
            }
            _ => {
                let mut chunk = Vec::with_capacity(MAX_BATCH_ENTRIES);
                chunk.push(entry);
                chunks.push((chunk, size));
            }
        }
    }
    chunks
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

pub(super) fn stopped() -> TransportError {
    TransportError::service(
        ErrorKind::InternalError,
        "the batcher stopped before answering; the runtime is shutting down",
    )
}
