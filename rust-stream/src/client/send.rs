//! A queue's sender: the `SendMessageBatch` calls its sends go out in; and a topic's, the
//! `PublishBatch` calls of its publishes, by the same rules ([`Grouped`]: an action whose
//! entries name a message group).
//!
//! A standard queue has one batcher with several calls in flight: order is not promised there.
//! A FIFO queue must store each message group in the order of its sends. Its sender forms each
//! call itself from the messages waiting, by group, with up to [`FIFO_SEND_CALLS`] (16) calls in
//! flight and never two carrying one group:
//!
//! - **Waiting.** A submission's messages join their groups' lines, in order, under one lock, so
//!   each group's line is in the order its messages were given to the sender.
//! - **A call** takes groups whose line has messages and that no call carries, in the order they
//!   became ready, and from each the front of its line, as much as fits (10 entries, 1 MiB). A
//!   group taken is carried by that call until every entry of it is answered (stored, or failed
//!   for good after its 20 s of retries); its later messages wait in its line meanwhile, and go in
//!   the next call formed after that. So a group's messages are stored in the order given, one
//!   call at a time, while other groups' calls go out beside it.
//! - **When a call goes.** A call that is full goes at once. One that is not full goes at once
//!   only while fewer than a call's worth of messages (10) are in calls on their first try: at a
//!   light load (100 sends a second at 20 ms a call is 2 in flight) a send goes out at once, as
//!   it would alone. Under load the messages that cannot fill a call wait for the next call in
//!   flight to be answered, and go with what gathered meanwhile; at most [`FILL_PATIENCE`], so a
//!   call that hangs holds nobody up for long. Calls then fill whatever the latency: 64 tasks each
//!   sending one message and awaiting it keep about six full calls in flight, where a call per
//!   free slot at once would send 16 calls of four.
//!
//! Why calls formed at the last moment rather than groups placed on in-order batchers when they
//! are sent (the sender before had 16 such *shards*): a placement is decided before it is known
//! how much will follow. A burst of sends over 50 groups, every one started at once, wants its
//! groups spread over 16 calls in flight, as its later messages follow their groups; 64 tasks
//! sending one at a time over the same 50 groups want them packed into a few full calls. Both
//! start alike, and a group placed on a shard stays there while it has messages on their way,
//! which in both it always has. A shard spreading by load sent calls of two or three messages
//! from such tasks on a fast network (0.4 calls a message on LocalStack); one packing by load
//! held a burst's 50 groups on five shards. Forming calls from what waits, by group, does both.
//!
//! **What it costs.** A busy group goes one call at a time: 10 messages a round trip (500 a
//! second at 20 ms), as a plain loop keeping its order does. Sends cycling over a few groups share
//! calls (a call of 10 over five groups carries them all, and their next messages wait for it)
//! where separate in-order batchers would send five calls of two side by side; under load the
//! groups' lines grow and their calls fill. Each call is a task of its own, spawned when the call
//! is formed.
//!
//! **The rule every FIFO path keeps** (`send`, `send_batch`, a handler's outputs, the outbox
//! relay and a redrive all come here): a message of a group is never stored ahead of an earlier
//! message of that group given to the same sender, and once one is refused or fails for good,
//! the later messages of its group in that submission fail without a call
//! ([`TransportError::HeldBehind`]). This layer keeps it in three places:
//!
//! - a message refused before the network (a check of the queue's limits) holds its group's
//!   later messages of the submission here, in [`Sender::submit_checked`] (and
//!   `Publisher::send_batch` does the same for what it refuses before it hands a batch here: a
//!   message it cannot encode, one that breaks an SQS rule);
//! - a group's messages in several calls go one call after another, each formed once the one
//!   before was answered; the submission's messages share a `Chain`, and once an entry fails for
//!   good (refused by SQS, or its 20 s of retries over: an outage), its call answers the chain's
//!   later entries of its group without sending them. Without it, the next call went out with
//!   20 s of retries of its own, and an outage of 20 to 40 s stored it ahead of the first;
//! - within one call, entries of one group go in the order sent and SQS stores a batch in
//!   request order, entry by entry. Should SQS store a group's later entry of a call and fail an
//!   earlier one, the call cannot take the stored one back, and only one message of a group a
//!   call would prevent it, at ten times the calls. So the failed one is not retried behind it
//!   but answered with its error, and a retried entry behind one of its group that failed for
//!   good is held: what a group stores is in the order given, with a gap where one failed.
//!
//! A send whose caller stops waiting still goes out: its message waits in its group's line, and a
//! later one of the group must not pass it. The sender's state holds only groups with messages
//! on their way.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::client::batch::{
    Action, AnswerTo, BatchSettings, Batcher, Call, Chain, PublishBatch, SendBatch,
};
use crate::model::rules::MAX_BATCH_ENTRIES;
use crate::transport::{Publish, SendMessage, SharedTransport, TransportError};

/// A batched action whose entries go to a FIFO target by message group: a send to a queue, a
/// publish to a topic.
pub(crate) trait Grouped: Action {
    /// The entry's group as the sender knows it: an entry without one (which a FIFO target
    /// refuses) counts as the empty group.
    fn group(entry: &Self::Entry) -> &str;
}

impl Grouped for SendBatch {
    fn group(message: &SendMessage) -> &str {
        message.group_id.as_deref().unwrap_or("")
    }
}

impl Grouped for PublishBatch {
    fn group(publish: &Publish) -> &str {
        publish.group_id.as_deref().unwrap_or("")
    }
}

/// A FIFO target's calls in flight at most: as many as a standard queue's batcher has.
pub(crate) const FIFO_SEND_CALLS: usize = 16;

/// The longest a FIFO message that cannot fill a call waits for a call in flight to be answered
/// before it goes in a call that is not full: longer than an SQS round trip, short against what a
/// hung call's deadline is.
pub(crate) const FILL_PATIENCE: Duration = Duration::from_millis(100);

/// A queue's sender (or a topic's publisher). Cheap to clone.
#[derive(Debug)]
pub(crate) struct Sender<A: Grouped = SendBatch> {
    route: Route<A>,
}

/// How a sender's messages go out.
#[derive(Debug)]
enum Route<A: Grouped> {
    /// A standard target: one batcher, several calls in flight.
    Standard(Batcher<A>),
    /// A FIFO target: calls formed by group (see [the module](self)).
    Fifo(Arc<Mutex<Lines<A>>>),
}

/// A FIFO target's messages not yet answered, by group, and its calls in flight.
struct Lines<A: Grouped> {
    transport: SharedTransport,
    target: Arc<str>,
    /// Each group with messages not answered: those not yet in a call, in order, and whether a
    /// call in flight carries it.
    groups: HashMap<String, Line<A>>,
    /// The groups with messages waiting and no call, in the order they became ready.
    ready: VecDeque<String>,
    /// Calls in flight (until every entry is answered), and the most there may be.
    calls: usize,
    max_calls: usize,
    /// Entries in calls on their first try: what a call that is not full waits to be answered.
    first_tries: usize,
    /// The messages that joined within the last round trip, by submission: with `first_tries`,
    /// what says the load is light. Answers come in step when calls take alike, and right after
    /// they came nothing is on its way, though as much is about to be sent again.
    joined: VecDeque<(Instant, usize)>,
    joined_total: usize,
    /// The last first try's round trip.
    round_trip: Duration,
    /// Whether a wake-up is set for messages waiting to fill a call: one for once the tasks
    /// woken meanwhile have run, one for after [`FILL_PATIENCE`]. Each is set on its own, so one
    /// waiting out the patience never keeps the other from being set.
    wake_soon_set: bool,
    wake_patient_set: bool,
}

/// One group's messages not yet in a call.
struct Line<A: Grouped> {
    waiting: VecDeque<Waiting<A>>,
    in_call: bool,
}

/// A message waiting for its call.
struct Waiting<A: Grouped> {
    entry: A::Entry,
    size: usize,
    chain: Arc<Chain<A::Entry>>,
    reply: AnswerTo<A>,
}

impl<A: Grouped> std::fmt::Debug for Lines<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines")
            .field("target", &self.target)
            .field("groups", &self.groups.len())
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

/// Locks a FIFO target's lines (a panic elsewhere leaves them as consistent as any step does).
fn lock<A: Grouped>(lines: &Mutex<Lines<A>>) -> std::sync::MutexGuard<'_, Lines<A>> {
    lines.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<A: Grouped> Lines<A> {
    /// Adds a submission's messages to their groups' lines, in order.
    fn join(
        &mut self,
        messages: Vec<A::Entry>,
        chain: &Arc<Chain<A::Entry>>,
    ) -> Vec<oneshot::Receiver<Result<A::Output, TransportError>>> {
        self.joined.push_back((Instant::now(), messages.len()));
        self.joined_total += messages.len();
        let mut answers = Vec::with_capacity(messages.len());
        for entry in messages {
            let (reply, answer) = oneshot::channel();
            answers.push(answer);
            let group = A::group(&entry);
            let line = match self.groups.get_mut(group) {
                Some(line) => line,
                None => self.groups.entry(group.to_owned()).or_insert_with(|| Line {
                    waiting: VecDeque::new(),
                    in_call: false,
                }),
            };
            if !line.in_call && line.waiting.is_empty() {
                self.ready.push_back(group.to_owned());
            }
            line.waiting.push_back(Waiting {
                size: A::size(&entry),
                entry,
                chain: Arc::clone(chain),
                reply,
            });
        }
        answers
    }

    /// Whether the ready groups' waiting messages fill a call.
    fn fill_a_call(&self) -> bool {
        let (mut count, mut size) = (0, 0);
        for group in &self.ready {
            for waiting in &self.groups[group].waiting {
                count += 1;
                size += waiting.size;
                if count >= MAX_BATCH_ENTRIES || size >= A::MAX_PAYLOAD {
                    return true;
                }
            }
        }
        false
    }

    /// Whether the load is light: fewer than a call's worth of messages on their first try, and
    /// as few joined within the last round trip. A call that is not full then goes at once.
    fn light(&mut self) -> bool {
        let since = Instant::now().checked_sub(self.round_trip);
        while let Some(&(at, count)) = self.joined.front() {
            if since.is_some_and(|since| at >= since) {
                break;
            }
            self.joined.pop_front();
            self.joined_total -= count;
        }
        self.first_tries < MAX_BATCH_ENTRIES && self.joined_total <= MAX_BATCH_ENTRIES
    }

    /// Forms the calls that may go now (see [the module](self)); with `wait_over`, those that are
    /// not full too. What it starts is spawned by the caller once the lock is let go.
    fn pump(&mut self, this: &Arc<Mutex<Self>>, wait_over: bool) -> Starts<A> {
        let mut starts = Starts(Vec::new());
        // A call ended as its runtime shut down: no call can start, and what waits is answered
        // as stopped once the lines are dropped.
        if tokio::runtime::Handle::try_current().is_err() {
            return starts;
        }
        while self.calls < self.max_calls && !self.ready.is_empty() {
            if !wait_over && !self.fill_a_call() && !self.light() {
                starts.0.extend(self.wait_for_company(this));
                return starts;
            }
            starts.0.push(self.start_call(this));
        }
        starts
    }

    /// A wake-up for the lines to send what waits in a call that is not full, unless that
    /// wake-up is set already: once the tasks woken meanwhile have run, when no call is on its
    /// first try (the answers that came just now are about to be sent again, by those they
    /// woke), or after [`FILL_PATIENCE`] otherwise (a call on its way answers before). A patience
    /// set while calls were out does not hold what waits once they are answered: nothing else is
    /// on its way to join it then, and the wake-up soon is set beside it.
    fn wait_for_company(&mut self, this: &Arc<Mutex<Self>>) -> Option<Start<A>> {
        let soon = self.first_tries == 0;
        let set = if soon {
            &mut self.wake_soon_set
        } else {
            &mut self.wake_patient_set
        };
        if *set {
            return None;
        }
        *set = true;
        Some(Start::Wake {
            lines: Arc::clone(this),
            soon,
        })
    }

    /// Forms a call from the front of the ready groups' lines, to start.
    fn start_call(&mut self, this: &Arc<Mutex<Self>>) -> Start<A> {
        let mut call = Call::<A>::new();
        let (mut count, mut size) = (0, 0);
        let mut carried = Vec::new();
        while let Some(group) = self.ready.front() {
            let line = self
                .groups
                .get_mut(group)
                .expect("a ready group has a line");
            let mut took = false;
            while let Some(next) = line.waiting.front() {
                let fits =
                    count == 0 || (count < MAX_BATCH_ENTRIES && size + next.size <= A::MAX_PAYLOAD);
                if !fits {
                    break;
                }
                let waiting = line.waiting.pop_front().expect("a front");
                count += 1;
                size += waiting.size;
                call.push(waiting.entry, waiting.chain, waiting.reply);
                took = true;
            }
            if !took {
                break;
            }
            line.in_call = true;
            carried.push(self.ready.pop_front().expect("a front"));
            if count >= MAX_BATCH_ENTRIES || size >= A::MAX_PAYLOAD {
                break;
            }
        }
        self.calls += 1;
        self.first_tries += count;
        Start::Call {
            call,
            answered: Answered {
                lines: Arc::clone(this),
                groups: carried,
                first_try: Some(count),
                started: Instant::now(),
                ran: false,
            },
            transport: self.transport.clone(),
            target: Arc::clone(&self.target),
        }
    }
}

/// What [`Lines::pump`] started, to spawn once the lines' lock is let go: a task spawned as its
/// runtime shuts down is dropped at once on the spawning thread, and a dropped call's end takes
/// that lock, which the thread would then wait for forever (its runtime never stopping).
#[must_use = "what the lines started runs only once spawned"]
struct Starts<A: Grouped>(Vec<Start<A>>);

/// A task the lines start.
enum Start<A: Grouped> {
    /// A call, and what lets its groups go once it is over.
    Call {
        call: Call<A>,
        answered: Answered<A>,
        transport: SharedTransport,
        target: Arc<str>,
    },
    /// A wake-up to send what waits in a call that is not full (see
    /// [`Lines::wait_for_company`]).
    Wake {
        lines: Arc<Mutex<Lines<A>>>,
        soon: bool,
    },
}

impl<A: Grouped> Starts<A> {
    /// Spawns what was started. Called with the lines' lock let go.
    fn spawn(self) {
        for start in self.0 {
            match start {
                Start::Call {
                    call,
                    answered,
                    transport,
                    target,
                } => {
                    tokio::spawn(async move {
                        let mut answered = answered;
                        answered.ran = true;
                        call.run(transport, target, || answered.first_try_over())
                            .await;
                        // Dropped here (or where the task ends, should the call panic): the
                        // call's groups are let go of after its entries were answered and their
                        // chains told.
                        drop(answered);
                    });
                }
                Start::Wake { lines, soon } => {
                    tokio::spawn(async move {
                        if soon {
                            tokio::task::yield_now().await;
                        } else {
                            tokio::time::sleep(FILL_PATIENCE).await;
                        }
                        let starts = {
                            let mut locked = lock(&lines);
                            if soon {
                                locked.wake_soon_set = false;
                            } else {
                                locked.wake_patient_set = false;
                            }
                            // Woken soon, what waits goes as it is only while still nothing is
                            // on its way: the tasks the answers woke may have filled calls
                            // meanwhile, and the rest then waits for those.
                            let wait_over = !soon || locked.first_tries == 0;
                            locked.pump(&lines, wait_over)
                        };
                        starts.spawn();
                    });
                }
            }
        }
    }
}

/// Lets go of a call's groups once it is over: on drop, so a call that panics lets go too.
struct Answered<A: Grouped> {
    lines: Arc<Mutex<Lines<A>>>,
    groups: Vec<String>,
    /// The call's entries while on their first try.
    first_try: Option<usize>,
    started: Instant,
    /// Whether the call's task ran: one dropped unrun was spawned as its runtime shut down.
    ran: bool,
}

impl<A: Grouped> Answered<A> {
    /// The first try is over: its entries no longer count as on their way.
    fn first_try_over(&mut self) {
        if let Some(count) = self.first_try.take() {
            let starts = {
                let mut lines = lock(&self.lines);
                lines.first_tries -= count;
                lines.round_trip = self.started.elapsed();
                lines.pump(&self.lines, false)
            };
            starts.spawn();
        }
    }
}

impl<A: Grouped> Drop for Answered<A> {
    fn drop(&mut self) {
        // Unrun and unwinding: a panic while the lines were locked, forming the calls this one
        // was among. Taking the lock again would hang the panic instead of reporting it.
        if !self.ran && std::thread::panicking() {
            return;
        }
        let mut lines = lock(&self.lines);
        if let Some(count) = self.first_try.take() {
            lines.first_tries -= count;
        }
        lines.calls -= 1;
        for group in self.groups.drain(..) {
            let Some(line) = lines.groups.get_mut(&group) else {
                continue;
            };
            line.in_call = false;
            if line.waiting.is_empty() {
                lines.groups.remove(&group);
            } else {
                lines.ready.push_back(group);
            }
        }
        // A call dropped unrun was spawned as its runtime shut down: nothing can start now,
        // and what waits is answered as stopped once the lines are dropped. Starting more here
        // would only drop them in turn, a drop nested in this one for every call that waits.
        if !self.ran {
            return;
        }
        let starts = lines.pump(&self.lines, false);
        drop(lines);
        starts.spawn();
    }
}

impl<A: Grouped> Clone for Sender<A> {
    fn clone(&self) -> Self {
        Self {
            route: match &self.route {
                Route::Standard(batcher) => Route::Standard(batcher.clone()),
                Route::Fifo(lines) => Route::Fifo(Arc::clone(lines)),
            },
        }
    }
}

impl Sender<SendBatch> {
    /// A standard queue's sender: see [`standard_of`](Self::standard_of).
    pub(crate) fn standard(transport: SharedTransport, url: &str, settings: BatchSettings) -> Self {
        Self::standard_of(transport, url, settings)
    }

    /// A FIFO queue's sender: see [`fifo_of`](Self::fifo_of).
    pub(crate) fn fifo(transport: SharedTransport, url: &str, calls: usize) -> Self {
        Self::fifo_of(transport, url, calls)
    }
}

impl<A: Grouped> Sender<A> {
    /// A standard target's sender: one batcher, with the calls in flight `settings` allow.
    pub(crate) fn standard_of(
        transport: SharedTransport,
        url: &str,
        settings: BatchSettings,
    ) -> Self {
        Self {
            route: Route::Standard(Batcher::spawn(transport, url.to_owned(), settings)),
        }
    }

    /// A FIFO target's sender: calls formed by group, up to `calls` in flight (see
    /// [the module](self)).
    pub(crate) fn fifo_of(transport: SharedTransport, url: &str, calls: usize) -> Self {
        let lines = Lines {
            transport,
            target: Arc::from(url),
            groups: HashMap::new(),
            ready: VecDeque::new(),
            calls: 0,
            max_calls: calls.max(1),
            first_tries: 0,
            joined: VecDeque::new(),
            joined_total: 0,
            round_trip: Duration::ZERO,
            wake_soon_set: false,
            wake_patient_set: false,
        };
        Self {
            route: Route::Fifo(Arc::new(Mutex::new(lines))),
        }
    }

    /// Sends messages and answers each, in the order given. Each group's messages go out in that
    /// order.
    #[cfg(test)]
    pub(crate) async fn submit(
        &self,
        messages: Vec<A::Entry>,
    ) -> Vec<Result<A::Output, TransportError>> {
        let checks = messages.iter().map(|_| Ok(())).collect();
        self.submit_checked(messages, checks).await
    }

    /// Sends the messages whose check passed and answers each message, in the order given: one
    /// whose check failed with that error, unsent. On a FIFO target the group rule holds (see
    /// [the module](self)): a message refused here, or failing for good on its way, holds the
    /// submission's later messages of its group, which are answered
    /// [`TransportError::HeldBehind`] without a call.
    pub(crate) async fn submit_checked(
        &self,
        messages: Vec<A::Entry>,
        mut checks: Vec<Result<(), TransportError>>,
    ) -> Vec<Result<A::Output, TransportError>> {
        if matches!(self.route, Route::Fifo(_)) {
            hold_behind_refused::<A>(&messages, &mut checks);
        }
        let accepted: Vec<A::Entry> = messages
            .into_iter()
            .zip(&checks)
            .filter(|(_, check)| check.is_ok())
            .map(|(message, _)| message)
            .collect();
        let mut answers = if accepted.is_empty() {
            Vec::new()
        } else {
            self.submit_accepted(accepted).await
        }
        .into_iter();
        checks
            .into_iter()
            .map(|check| match check {
                Ok(()) => answers.next().expect("the sender answers every message"),
                Err(error) => Err(error),
            })
            .collect()
    }

    /// Sends messages that passed their checks; see [`submit_checked`](Self::submit_checked).
    async fn submit_accepted(
        &self,
        messages: Vec<A::Entry>,
    ) -> Vec<Result<A::Output, TransportError>> {
        let lines = match &self.route {
            Route::Standard(batcher) => return batcher.submit(messages).await,
            Route::Fifo(lines) => lines,
        };
        // The submission's messages share a chain, which holds a group's later ones behind one
        // that failed for good, whichever calls they go in.
        let chain = Arc::new(Chain::new(A::group, || {}));
        let answers = {
            let mut locked = lock(lines);
            let answers = locked.join(messages, &chain);
            (answers, locked.pump(lines, false))
        };
        let (answers, starts) = answers;
        starts.spawn();
        drop(chain);
        let mut answered = Vec::with_capacity(answers.len());
        for answer in answers {
            answered.push(answer.await.unwrap_or_else(|_| Err(stopped())));
        }
        answered
    }
}

/// The answer of a message whose call ended without answering it (the runtime shutting down, a
/// panic in the transport).
fn stopped() -> TransportError {
    TransportError::service(
        crate::model::rules::ErrorKind::InternalError,
        "the sender stopped before answering; the runtime is shutting down",
    )
}

/// On a FIFO target, the checks of a submission's messages behind a refused one of their group
/// fail too: [`TransportError::HeldBehind`], so none is sent ahead of it.
fn hold_behind_refused<A: Grouped>(
    messages: &[A::Entry],
    checks: &mut [Result<(), TransportError>],
) {
    let mut refused: HashMap<&str, String> = HashMap::new();
    for (message, check) in messages.iter().zip(checks.iter_mut()) {
        let group = A::group(message);
        match (&*check, refused.get(group)) {
            (Ok(()), Some(why)) => {
                *check = Err(TransportError::HeldBehind {
                    message: why.clone(),
                });
            }
            (Err(error), None) => {
                refused.insert(group, error.to_string());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::account::Account;
    use crate::client::batch::tests::Recorder;
    use crate::transport::QueueAttributes;

    /// A FIFO queue on `transport`'s account, and its sender.
    async fn fifo_sender(transport: &Recorder) -> Sender {
        let mut attributes = QueueAttributes::new();
        attributes.insert("FifoQueue".into(), "true".into());
        let url = transport
            .account
            .create_queue("q.fifo", attributes)
            .await
            .unwrap();
        Sender::fifo(Arc::new(transport.clone()), &url, FIFO_SEND_CALLS)
    }

    fn message(body: String, group: String) -> SendMessage {
        SendMessage::new(body.clone())
            .group_id(group)
            .dedup_id(body)
    }

    /// What the sender still holds: groups with messages on their way, and calls in flight.
    fn held(sender: &Sender) -> (usize, usize) {
        let Route::Fifo(lines) = &sender.route else {
            panic!("a FIFO sender");
        };
        let lines = lock(lines);
        (lines.groups.len(), lines.calls)
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_send_goes_at_once_and_a_busy_groups_next_ones_go_together_after_it() {
        let round_trip = Duration::from_millis(20);
        let mut transport = Recorder::default();
        transport.round_trip = round_trip;
        let sender = fifo_sender(&transport).await;
        let send = |n: usize| {
            let sender = sender.clone();
            let message = message(format!("m{n}"), "g".to_owned());
            tokio::spawn(async move { sender.submit(vec![message]).await })
        };

        let started = Instant::now();
        assert!(send(0).await.unwrap()[0].is_ok());
        assert_eq!(
            started.elapsed(),
            round_trip,
            "a lone send waits for its call only, no linger"
        );

        // Sent one by one while the group's call is out: they wait for it, then go out together.
        let started = Instant::now();
        let mut sends = vec![send(1)];
        tokio::time::sleep(Duration::from_millis(1)).await;
        sends.extend((2..=5).map(send));
        for sent in sends {
            assert!(sent.await.unwrap()[0].is_ok());
        }
        assert_eq!(started.elapsed(), round_trip * 2);
        let body = |n: usize| format!("m{n}");
        assert_eq!(
            transport.calls(),
            vec![
                vec![body(0)],
                vec![body(1)],
                vec![body(2), body(3), body(4), body(5)]
            ],
            "one call at a time per group, in the order sent"
        );
        assert_eq!(held(&sender), (0, 0), "nothing held once answered");
    }

    /// A process ending with sends on their way: the runtime drops the calls in flight, each
    /// call's end lets its groups go and starts the calls that waited for one, and a task spawned
    /// as the runtime shuts down is dropped at once, on the spawning thread. Once, that thread
    /// held the lines' lock the dropped call's end takes, and the runtime never stopped (a relay's
    /// process killed in the outbox kill test hung there, holding the outbox's lease).
    #[test]
    fn a_runtime_shut_down_with_calls_out_and_groups_waiting_stops_at_once() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let mut transport = Recorder::default();
        // Calls that are never answered while the test runs.
        transport.round_trip = Duration::from_secs(3600);
        let sender = runtime.block_on(fifo_sender(&transport));
        // A group a message: calls of 10 groups, more than may be out at once.
        let messages: Vec<SendMessage> = (0..400)
            .map(|n| message(format!("m{n}"), format!("g{n}")))
            .collect();
        let submitting = runtime.spawn({
            let sender = sender.clone();
            async move { sender.submit(messages).await }
        });
        runtime.block_on(async {
            while held(&sender).1 < FIFO_SEND_CALLS {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        });
        let Route::Fifo(lines) = &sender.route else {
            panic!("a FIFO sender");
        };
        assert!(
            !lock(lines).ready.is_empty(),
            "groups wait for a call to end"
        );

        let started = std::time::Instant::now();
        runtime.shutdown_timeout(Duration::from_secs(10));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the runtime took {:?} to shut down: a worker hung on the sender's lock",
            started.elapsed()
        );
        drop(submitting);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_that_fills_a_call_goes_at_once() {
        let account = Account::new();
        let mut attributes = QueueAttributes::new();
        attributes.insert("FifoQueue".into(), "true".into());
        let url = account.create_queue("q.fifo", attributes).await.unwrap();
        let sender = Sender::fifo(Arc::new(account), &url, FIFO_SEND_CALLS);
        let full: Vec<SendMessage> = (0..10)
            .map(|n| message(format!("m{n}"), format!("g{n}")))
            .collect();
        let started = Instant::now();
        assert!(sender.submit(full).await.iter().all(Result::is_ok));
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "no call waited for company"
        );
        assert_eq!(held(&sender), (0, 0), "every group answered");
    }

    /// A large submission over many groups, as an outbox relay's round is: it costs the calls its
    /// messages fill, and every group keeps its order.
    #[tokio::test(start_paused = true)]
    async fn a_submission_over_many_groups_goes_out_in_the_calls_it_fills() {
        let mut transport = Recorder::default();
        transport.round_trip = Duration::from_millis(20);
        let sender = fifo_sender(&transport).await;
        // 250 messages, 5 for each of 50 groups, interleaved as rows read by id are.
        let messages = |round: usize, per_group: usize| -> Vec<SendMessage> {
            (0..per_group)
                .flat_map(|n| (0..50).map(move |group| (n, group)))
                .map(|(n, group)| message(format!("{round}/g{group}/{n}"), format!("g{group}")))
                .collect()
        };
        let answers = sender.submit(messages(0, 5)).await;
        assert!(answers.iter().all(Result::is_ok));
        let calls = transport.calls();
        assert_eq!(calls.len(), 25, "250 messages in full calls of 10");
        assert!(calls.iter().all(|call| call.len() == 10), "{calls:?}");
        let per_group = |calls: &[Vec<String>], group: &str| -> Vec<String> {
            calls
                .iter()
                .flatten()
                .filter(|body| body.split('/').nth(1) == Some(group))
                .cloned()
                .collect()
        };
        for group in 0..50 {
            let sent = per_group(&calls, &format!("g{group}"));
            let bodies: Vec<&str> = sent.iter().map(String::as_str).collect();
            let expected: Vec<String> = (0..5).map(|n| format!("0/g{group}/{n}")).collect();
            assert_eq!(bodies, expected, "g{group} in order");
        }

        // A small round, a message or two of each group: the calls it fills.
        let before = transport.calls().len();
        let small: Vec<SendMessage> = messages(1, 2).into_iter().take(75).collect();
        assert!(sender.submit(small).await.iter().all(Result::is_ok));
        assert_eq!(
            transport.calls().len() - before,
            8,
            "75 messages in 8 calls"
        );
    }

    /// Review 2026-12-06, N9: a send whose caller stops waiting (a timeout, an HTTP client gone)
    /// still goes out, and the sender lets go of its group once it is answered, so its state does
    /// not grow with every group ever sent to.
    #[tokio::test(start_paused = true)]
    async fn dropped_sends_leave_nothing_in_the_sender_once_answered() {
        use futures_util::FutureExt;

        let mut transport = Recorder::default();
        transport.round_trip = Duration::from_millis(20);
        let sender = fifo_sender(&transport).await;
        for n in 0..10_000 {
            let message = message(format!("m{n}"), format!("g{n}"));
            // Polled once, so in its group's line, then dropped unanswered.
            assert!(sender.submit(vec![message]).now_or_never().is_none());
        }
        assert!(held(&sender).0 > 0, "the sends are still on their way");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            transport.calls().iter().map(Vec::len).sum::<usize>(),
            10_000,
            "every dropped send still went out"
        );
        assert_eq!(held(&sender), (0, 0), "every group let go once answered");
    }

    /// What `tasks` tasks cost, each sending `per_task` single messages one after another (awaiting
    /// each) over `groups` groups, the next order from a shared counter as a service's requests
    /// come, at `round_trip` a call: SQS calls a message, and the most calls that carried one group
    /// at once (never more than one).
    async fn closed_loop(
        tasks: usize,
        per_task: usize,
        groups: usize,
        round_trip: Duration,
    ) -> f64 {
        let mut transport = Recorder::default();
        transport.round_trip = round_trip;
        let sender = fifo_sender(&transport).await;
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let total = tasks * per_task;
        let running: Vec<_> = (0..tasks)
            .map(|_| {
                let (sender, next) = (sender.clone(), Arc::clone(&next));
                tokio::spawn(async move {
                    loop {
                        let id = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if id >= total {
                            break;
                        }
                        let group = format!("g{}", id % groups);
                        let answer = sender
                            .submit(vec![message(format!("{group}/{id:06}"), group)])
                            .await;
                        assert!(answer[0].is_ok(), "{answer:?}");
                    }
                })
            })
            .collect();
        for task in running {
            task.await.unwrap();
        }
        let calls = transport.calls();
        assert_eq!(calls.iter().map(Vec::len).sum::<usize>(), total);
        // Each group's messages went out in the order sent: ids rise per group.
        let mut last: HashMap<String, String> = HashMap::new();
        for body in calls.iter().flatten() {
            let (group, id) = body.split_once('/').unwrap();
            if let Some(before) = last.insert(group.to_owned(), id.to_owned()) {
                assert!(before.as_str() < id, "{group}: {before} then {id}");
            }
        }
        assert_eq!(held(&sender), (0, 0));
        calls.len() as f64 / total as f64
    }

    /// Many tasks each sending one message and awaiting it once filled calls of two or three
    /// when groups were placed on the least busy of 16 shards (0.40 calls a message on
    /// LocalStack). Calls are formed from what waits, so they fill at a fast network's latency
    /// and at a slow one's, over one hot group, 50 and 1,000 groups.
    #[tokio::test(start_paused = true)]
    async fn single_sends_from_many_tasks_fill_their_calls_at_any_latency() {
        for round_trip in [Duration::from_millis(2), Duration::from_millis(20)] {
            for groups in [1, 50, 1_000] {
                let per_message = closed_loop(64, 40, groups, round_trip).await;
                assert!(
                    per_message <= 0.11,
                    "{per_message:.3} calls a message over {groups} groups at {round_trip:?}"
                );
            }
        }
    }

    /// Fifteen sends at once over fifteen groups at a light load: ten go alone, and the five that
    /// wait for company go once those ten are answered, as nothing else is on its way to join
    /// them, rather than when the [`FILL_PATIENCE`] set while calls were out runs out.
    #[tokio::test(start_paused = true)]
    async fn sends_waiting_for_company_go_once_no_call_is_on_its_first_try() {
        let round_trip = Duration::from_millis(20);
        let mut transport = Recorder::default();
        transport.round_trip = round_trip;
        let sender = fifo_sender(&transport).await;
        let sends: Vec<_> = (0..15)
            .map(|id| {
                let sender = sender.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let answer = sender
                        .submit(vec![message(format!("m{id}"), format!("g{id}"))])
                        .await;
                    assert!(answer[0].is_ok());
                    started.elapsed()
                })
            })
            .collect();
        let mut took = Vec::new();
        for sent in sends {
            took.push(sent.await.unwrap());
        }
        assert!(
            took.iter().all(|took| *took <= round_trip * 2),
            "each answered within two round trips: {took:?}"
        );
        assert_eq!(
            transport.calls().len(),
            11,
            "ten alone, then the five together"
        );
    }

    /// Every message started at once over 50 groups (a burst): the groups' calls go out side by
    /// side, 16 at a time, each full, not packed onto a few.
    #[tokio::test(start_paused = true)]
    async fn a_burst_over_many_groups_keeps_every_call_in_flight_and_full() {
        let round_trip = Duration::from_millis(20);
        let mut transport = Recorder::default();
        transport.round_trip = round_trip;
        let sender = fifo_sender(&transport).await;
        let started = Instant::now();
        let sends: Vec<_> = (0..5_000)
            .map(|id| {
                let sender = sender.clone();
                let group = format!("g{}", id % 50);
                tokio::spawn(async move {
                    sender
                        .submit(vec![message(format!("{group}/{id:06}"), group)])
                        .await
                })
            })
            .collect();
        for sent in sends {
            assert!(sent.await.unwrap()[0].is_ok());
        }
        let calls = transport.calls();
        // 5,000 messages are 500 full calls; 16 at a time is 32 round trips. The first messages
        // go alone (fewer than a call's worth on their way), and 50 groups of 100 do not divide
        // evenly among 16 calls: within 40 round trips.
        assert!(calls.len() <= 510, "{} calls", calls.len());
        assert!(
            started.elapsed() <= round_trip * 40,
            "{:?}: calls went out side by side",
            started.elapsed()
        );
    }

    /// At a light load a send goes out at once: 100 sends a second at 20 ms a call, each
    /// answered in one round trip, none waiting for company.
    #[tokio::test(start_paused = true)]
    async fn at_a_light_load_every_send_goes_at_once() {
        let round_trip = Duration::from_millis(20);
        let mut transport = Recorder::default();
        transport.round_trip = round_trip;
        let sender = fifo_sender(&transport).await;
        let mut sends = Vec::new();
        for id in 0..300 {
            let sender = sender.clone();
            let group = format!("g{}", id % 50);
            sends.push(tokio::spawn(async move {
                let started = Instant::now();
                let answer = sender
                    .submit(vec![message(format!("{group}/{id}"), group)])
                    .await;
                assert!(answer[0].is_ok());
                started.elapsed()
            }));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for sent in sends {
            assert_eq!(sent.await.unwrap(), round_trip);
        }
    }
}
