//! Batch calls: [`Batches`] gathers the attempts of a batch subscription into handler calls and
//! answers each message's verdict, for the dispatcher to settle as it settles a single handler's.
//!
//! The dispatcher hands over *runs*: on a standard queue one message, on a FIFO queue a lane's
//! next messages, in its group's order. A run joins the open gathering whole (a run is never
//! split across calls, so a group's messages in a call keep their order); the gathering closes
//! when it holds the batch's `max` messages, or its `window` has passed since its first run
//! joined and a handler slot is free (runs go on joining while it waits for the slot). Then one
//! task decodes its messages (those that do not decode never reach the handler), runs the handler
//! once behind the panic catch, the handler timeout and the shutdown's cancellation, and answers
//! each run with one verdict per message, in order. Once a stop no longer starts attempts, a run
//! is answered `None` (not started), and the dispatcher parks it for the stop's release.
//!
//! A call that fails as a whole (a panic, the handler timeout) fails every message in it, each
//! counted as an attempt, though one of them alone may be why (a poison message). So each of
//! its messages becomes a *suspect*, run next in a call of its own: the innocent ones succeed
//! there, and the poison one uses up only its own attempts, not its neighbours'.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{oneshot, Notify, Semaphore};
use tracing::Instrument;

use super::attempt::{self, Dropped, InFlight};
use super::payload;
use super::settle::Verdict;
use super::shared::{Shared, Tasks};
use crate::client::Client;
use crate::handler::batch::{BatchCall, BatchLimits, ErasedBatchHandler};
use crate::handler::context::{Delivery, Message};
use crate::metrics::SubscriptionMetrics;
use crate::record::Event;
use crate::retry::MessageTally;
use crate::state::States;
use crate::task::{poll_once, CatchUnwind};

/// One message of a run: its delivery, its attempt number (as the retry policy counts them) and
/// the `process` span of its attempt.
pub(crate) struct Item {
    pub(crate) delivery: Arc<Delivery>,
    pub(crate) attempts: u32,
    pub(crate) span: tracing::Span,
}

/// A run waiting in a gathering, and where its verdicts go.
struct Submitted {
    items: Vec<Item>,
    answer: oneshot::Sender<Vec<Verdict>>,
}

/// The runs gathered for one call.
#[derive(Default)]
struct Gathering {
    state: Mutex<Gathered>,
    /// Told when the gathering is sealed full: its call need not wait out the window.
    full: Notify,
}

#[derive(Default)]
struct Gathered {
    runs: Vec<Submitted>,
    messages: usize,
    /// No run joins any more: the call has taken them, or they fill it.
    sealed: bool,
}

/// Gathers a batch subscription's runs into handler calls.
pub(crate) struct Batches {
    handler: Arc<dyn ErasedBatchHandler>,
    limits: BatchLimits,
    queue: Arc<str>,
    /// The handler's name, as the `process` span of each call records it.
    handler_name: String,
    states: Arc<States>,
    handler_timeout: Option<Duration>,
    /// The dispatcher's handler slots: a call takes one.
    slots: Arc<Semaphore>,
    client: Arc<Client>,
    metrics: Arc<SubscriptionMetrics>,
    tasks: Tasks,
    /// The gathering runs join now; a new one opens when it is sealed.
    open: Mutex<Option<Arc<Gathering>>>,
    /// Messages of calls that failed as a whole, each to run next in a call of its own.
    suspects: MessageTally,
}

impl Batches {
    /// A gatherer for `handler`'s calls within `limits`, whose calls take the `slots` of the
    /// dispatcher.
    pub(crate) fn new(
        shared: &Shared,
        client: Arc<Client>,
        (handler, limits): (Arc<dyn ErasedBatchHandler>, BatchLimits),
        handler_name: String,
        states: Arc<States>,
        handler_timeout: Option<Duration>,
        slots: Arc<Semaphore>,
    ) -> Self {
        Self {
            handler,
            limits,
            queue: shared.queue.clone(),
            handler_name,
            states,
            handler_timeout,
            slots,
            client,
            metrics: shared.metrics.clone(),
            tasks: shared.tasks.clone(),
            open: Mutex::new(None),
            suspects: MessageTally::default(),
        }
    }

    /// Whether `delivery` was in a call that failed as a whole, and runs next in a call of its
    /// own: the dispatcher then hands it over alone.
    pub(crate) fn runs_alone(&self, delivery: &Delivery) -> bool {
        self.suspects.count(&delivery.message_id) > 0
    }

    /// The most messages a call takes.
    pub(crate) fn max(&self) -> usize {
        self.limits.max
    }

    /// Runs `run` (at most [`max`](Self::max) messages) in a call with whatever else gathers, or,
    /// when it is one message that [`runs_alone`](Self::runs_alone), in a call of its own: one
    /// verdict per message, in order; `None` when it was not started (the stop no longer starts
    /// attempts).
    pub(crate) async fn attempt(self: &Arc<Self>, run: Vec<Item>) -> Option<Vec<Verdict>> {
        if self.tasks.no_new_attempts().is_cancelled() {
            return None;
        }
        let (answer, verdicts) = oneshot::channel();
        if let [alone] = run.as_slice() {
            if self.runs_alone(&alone.delivery) {
                let gathering = Arc::new(Gathering::default());
                {
                    let mut gathered = gathering
                        .state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    gathered.messages = 1;
                    gathered.sealed = true;
                    gathered.runs.push(Submitted { items: run, answer });
                }
                gathering.full.notify_one();
                let batches = self.clone();
                self.tasks
                    .spawn(async move { batches.gather(gathering).await });
                return verdicts.await.ok();
            }
        }
        let mut submitted = Some(Submitted { items: run, answer });
        let size = submitted.as_ref().map_or(0, |run| run.items.len());
        while let Some(run) = submitted.take() {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let gathering = match &*open {
                Some(gathering) => gathering.clone(),
                None => {
                    let gathering = Arc::new(Gathering::default());
                    *open = Some(gathering.clone());
                    let batches = self.clone();
                    let call = gathering.clone();
                    self.tasks.spawn(async move { batches.gather(call).await });
                    gathering
                }
            };
            let mut gathered = gathering
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let fits = gathered.messages == 0 || gathered.messages + size <= self.limits.max;
            if gathered.sealed || !fits {
                // The call has its runs, or this one would overfill it: it goes without this
                // run, which opens the next gathering.
                if !gathered.sealed {
                    gathered.sealed = true;
                    gathering.full.notify_one();
                }
                *open = None;
                submitted = Some(run);
                continue;
            }
            gathered.messages += size;
            gathered.runs.push(run);
            if gathered.messages >= self.limits.max {
                gathered.sealed = true;
                gathering.full.notify_one();
                *open = None;
            }
        }
        // A sender dropped unanswered (the stop took the gathering before its call) is a run not
        // started.
        verdicts.await.ok()
    }

    /// Waits until `gathering` is full, or its window has passed and a handler slot is free, then
    /// makes its call; or, once the stop no longer starts attempts, answers its runs not started.
    async fn gather(self: Arc<Self>, gathering: Arc<Gathering>) {
        let stop = self.tasks.no_new_attempts();
        tokio::select! {
            biased;
            () = stop.cancelled() => {}
            () = gathering.full.notified() => {}
            () = tokio::time::sleep(self.limits.window) => {}
        }
        let slot = tokio::select! {
            biased;
            () = stop.cancelled() => None,
            slot = self.slots.clone().acquire_owned() => slot.ok(),
        };
        let runs = {
            let mut gathered = gathering
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            gathered.sealed = true;
            std::mem::take(&mut gathered.runs)
        };
        // Dropping a run's sender answers it not started.
        let Some(slot) = slot else { return };
        if stop.is_cancelled() {
            return;
        }
        let items: Vec<&Item> = runs.iter().flat_map(|run| &run.items).collect();
        let mut verdicts = self.call(&items).await;
        drop(slot);
        for run in runs.into_iter().rev() {
            let from = verdicts.len() - run.items.len();
            let _ = run.answer.send(verdicts.split_off(from));
        }
    }

    /// Notes the messages at `indexes` of a call that failed as a whole as suspects, unless the
    /// call was theirs alone.
    fn suspect(&self, items: &[&Item], indexes: &[usize]) {
        if items.len() > 1 {
            self.suspects.note_all(
                indexes
                    .iter()
                    .map(|index| items[*index].delivery.message_id.as_str()),
            );
        }
    }

    /// Makes one call over `items`: a verdict for each, in order. The payloads in S3 are fetched
    /// first ([`payload`](super::payload)); a message whose fetch failed has that verdict, and the
    /// call is made over the others.
    async fn call(&self, items: &[&Item]) -> Vec<Verdict> {
        if items.iter().any(|item| item.delivery.large.is_some()) {
            let mut fetched = Vec::with_capacity(items.len());
            for item in items {
                let verdict = payload::fetch(&self.client, &item.delivery, &self.metrics)
                    .instrument(item.span.clone())
                    .await;
                fetched.push(verdict);
            }
            if fetched.iter().any(Option::is_some) {
                let ready: Vec<&Item> = items
                    .iter()
                    .zip(&fetched)
                    .filter(|(_, failed)| failed.is_none())
                    .map(|(item, _)| *item)
                    .collect();
                let mut called = if ready.is_empty() {
                    Vec::new()
                } else {
                    // Boxed: a call over the fetched ones, which fetches nothing again.
                    Box::pin(self.call(&ready)).await
                }
                .into_iter();
                return fetched
                    .into_iter()
                    .map(|failed| failed.unwrap_or_else(|| called.next().expect("a verdict each")))
                    .collect();
            }
        }
        self.call_fetched(items).await
    }

    /// [`call`](Self::call) over messages whose payloads are all at hand.
    async fn call_fetched(&self, items: &[&Item]) -> Vec<Verdict> {
        let span = tracing::info_span!(
            "process",
            messaging.system = "aws_sqs",
            messaging.destination.name = %self.queue,
            messaging.operation.type = "process",
            messaging.batch.message_count = items.len(),
            rust_stream.handler = %self.handler_name,
        );
        // The call is its messages' consumer at once: it continues none of their traces, and
        // links to each (OpenTelemetry's messaging conventions for a batch).
        #[cfg(feature = "opentelemetry")]
        if !span.is_disabled() {
            crate::propagation::link_messages(
                &span,
                items.iter().map(|item| {
                    let delivery = &item.delivery;
                    (
                        delivery.message_id.as_str(),
                        delivery.message_attributes(),
                        delivery.aws_trace_header.as_deref(),
                    )
                }),
            );
        }
        if let [alone] = items {
            // Its own call: whatever it comes to, it no longer endangers others.
            self.suspects.forget(&alone.delivery.message_id);
        }
        let BatchCall { undecodable, call } = self.handler.clone().call(
            items
                .iter()
                .map(|item| Message::new(item.delivery.clone(), item.attempts))
                .collect(),
            self.states.clone(),
            self.tasks.stopping().clone(),
        );
        let mut verdicts: Vec<Option<Verdict>> = (0..items.len()).map(|_| None).collect();
        for (index, error) in &undecodable {
            let _entered = items[*index].span.enter();
            verdicts[*index] = Some(attempt::undecodable(error, &self.metrics));
        }
        if let Some(call) = call {
            let decoded: Vec<usize> = (0..items.len())
                .filter(|index| verdicts[*index].is_none())
                .collect();
            self.client.record(|| Event::Batch {
                queue: self.queue.to_string(),
                message_ids: decoded
                    .iter()
                    .map(|index| items[*index].delivery.message_id.clone())
                    .collect(),
            });
            let started = tokio::time::Instant::now();
            let running = InFlight::new(&self.metrics, decoded.len());
            let mut call = CatchUnwind::new(call.instrument(span.clone()));
            let answered = match poll_once(&mut call).await {
                Some(answered) => Ok(answered),
                None => {
                    attempt::wait_for_handler(call, self.handler_timeout, &self.tasks, &span).await
                }
            };
            drop(running);
            let took = started.elapsed();
            let mut decided = Vec::with_capacity(decoded.len());
            match answered {
                Ok(Ok(answered)) => {
                    if !answered.past_the_batch.is_empty() {
                        let _entered = span.enter();
                        tracing::error!(
                            batch = decoded.len(),
                            indexes = ?answered.past_the_batch,
                            "the batch outcome names messages past the batch; those outcomes are ignored"
                        );
                    }
                    decided.extend(
                        answered
                            .messages
                            .into_iter()
                            .map(|(outcome, staged)| attempt::verdict(outcome, staged)),
                    );
                }
                Ok(Err(panic)) => {
                    let _entered = span.enter();
                    tracing::error!(panic = %panic, batch = decoded.len(), "batch handler panicked; every message of the call is retried, each in a call of its own");
                    self.suspect(items, &decoded);
                    decided.extend(decoded.iter().map(|_| attempt::panicked(&panic)));
                }
                Err(dropped) => {
                    if let Dropped::TimedOut(_) = dropped {
                        self.suspect(items, &decoded);
                    }
                    decided.extend(decoded.iter().map(|_| dropped.verdict()));
                }
            }
            for (index, verdict) in decoded.into_iter().zip(decided) {
                self.metrics.processed(attempt::counted(&verdict), took);
                verdicts[index] = Some(verdict);
            }
        }
        verdicts
            .into_iter()
            .map(|verdict| verdict.expect("every message has its verdict"))
            .collect()
    }
}
