//! Redrive: a dead-letter queue's messages back to where they came from, or to a named queue
//! ([`Operations::redrive`]).
//!
//! Each message goes to the queue its copy names ([`SOURCE_QUEUE_HEADER`], written by the engine
//! when it dead-lettered it), else the queue SQS's own redrive moved it from
//! (`DeadLetterQueueSourceArn`), or to the queue [`Redrive::to`] names. What makes it safe:
//!
//! - **Send first, delete after.** A message is deleted from the dead-letter queue only once its
//!   send is confirmed; a send that fails leaves it there (in the report's [`Left`]).
//! - **FIFO-aware.** A FIFO target gets the copy's group id and a deduplication id derived from
//!   the original message id (`redrive-{original id}`), and a group's copies go in their order
//!   (the dead-letter queue hands them out in it, and the broker's sender keeps it). A redrive
//!   killed between a send and its delete and run again within SQS's 5-minute deduplication
//!   window stores nothing twice. A standard target has no deduplication (nor FIFO past its 5
//!   minutes): such a kill stores the copies of that one batch (at most 10) twice, each with the
//!   same [`IDEMPOTENCY_KEY_HEADER`] (the original message id, unless the message had one), so
//!   an [inbox](crate::inbox) handles them once.
//! - **Blocked groups stay blocked.** A message that cannot go (no source, a failed send) stays
//!   in the dead-letter queue, and on a FIFO dead-letter queue so do its group's later messages:
//!   those of its own receive batch too, which the broker's sender fails unsent once the target
//!   refuses it (over its `MaximumMessageSize`, say) or its send fails for good.
//! - **Rate-limited** ([`Redrive::rate`], messages a second), batched (a receive, a
//!   `SendMessageBatch` a target and a `DeleteMessageBatch` per ten messages).
//! - **A dry run** ([`Redrive::dry_run`]) sends and deletes nothing: on the account it peeks; on
//!   SQS it receives and makes what it received visible again (so on a FIFO dead-letter queue it
//!   sees each group's first messages only).
//! - **Audited.** Each message moved is an [`AuditRecord`] (what, from where, to where, when,
//!   its new id), returned in the report, handed to the caller as it happens
//!   ([`Operations::redrive_with`]), and logged at `info` with the same fields.
//!
//! What the redriven message carries: the copy's body and message attributes, without the
//! engine's dead-letter attributes (a later dead-letter copy gets fresh ones).
//!
//! [`SOURCE_QUEUE_HEADER`]: crate::model::headers::SOURCE_QUEUE_HEADER
//! [`IDEMPOTENCY_KEY_HEADER`]: crate::model::headers::IDEMPOTENCY_KEY_HEADER

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::peek::{text_of, Message, MessageFilter};
use super::queues::{at, count, OperationError, Operations};
use super::report::log;
pub use super::report::{AuditRecord, CameBack, Left, RedriveReport};
use crate::model::entry_id::entry_id;
use crate::model::headers::{DEAD_LETTER_REASON_HEADER, ORIGINAL_MESSAGE_ID_HEADER};
use crate::model::rules;
use crate::model::SqsQueue;
use crate::transport::{
    DeleteEntry, MessageState, PeekMessages, ReceiveMessage, ReceivedMessage, TransportError,
};
use plan::{epoch_ms, plan, Planned};
pub use settings::Redrive;

mod plan;
mod settings;

/// How long a run, having taken what was there at its start, goes on looking for copies that
/// came back: a receive that finds nothing ends it sooner.
const TAIL: Duration = Duration::from_secs(10);

/// Times a failed delete from the dead-letter queue is tried again.
const DELETE_TRIES: u32 = 3;

/// The state of one redrive run.
struct Run<'a, F> {
    from: String,
    url: String,
    redrive: &'a Redrive,
    to: Option<String>,
    on_moved: F,
    report: RedriveReport,
    /// Messages received and kept invisible until the end: those left, and a dry run's.
    held: HashMap<String, String>,
    /// FIFO groups of the dead-letter queue with a message left: their later ones stay too.
    blocked_groups: HashSet<String>,
    /// The ids this run sent its messages back as: a dead-letter copy naming one (as its
    /// original id, or as its own id when SQS's redrive moved it) came back during the run.
    sent_ids: HashSet<String>,
    /// Messages taken (moved, left or came back): at most the queue's count at the start.
    taken: usize,
    started: Instant,
    /// Messages the rate has let through.
    paced: usize,
}

impl Operations {
    /// Redrives as `redrive` says: see [the module](crate::operations::redrive).
    ///
    /// # Errors
    ///
    /// [`OperationError::InvalidRate`] for a rate that is not positive; [`OperationError::Queue`]
    /// when the dead-letter queue does not exist, or a receive from it fails (what was moved so
    /// far stays moved; a rerun takes the rest). A message that cannot go is no error: it is in
    /// the report's [`left`](RedriveReport::left).
    pub async fn redrive(&self, redrive: &Redrive) -> Result<RedriveReport, OperationError> {
        self.redrive_with(redrive, |_| {}).await
    }

    /// [`redrive`](Self::redrive), handing each [`AuditRecord`] to `on_moved` as soon as its
    /// message is moved (its delete from the dead-letter queue confirmed): for progress, and for
    /// an audit log of a run that may be stopped part way.
    ///
    /// # Errors
    ///
    /// As [`redrive`](Self::redrive).
    pub async fn redrive_with(
        &self,
        redrive: &Redrive,
        on_moved: impl FnMut(&AuditRecord) + Send,
    ) -> Result<RedriveReport, OperationError> {
        let from = self.named(&redrive.from)?;
        if let Some(rate) = redrive
            .rate
            .filter(|rate| !(rate.is_finite() && *rate > 0.0))
        {
            return Err(OperationError::InvalidRate { queue: from, rate });
        }
        let to = redrive.to.as_deref().map(|to| self.named(to)).transpose()?;
        let url = self.url_of(&from).await?;
        let (visible, in_flight, delayed) = self.counts(&from, &url).await?;
        let mut run = Run {
            report: RedriveReport {
                from: from.clone(),
                dry_run: redrive.dry_run,
                deleted: redrive.delete,
                unmatched: 0,
                moved: Vec::new(),
                left: Vec::new(),
                came_back: Vec::new(),
                at_start: 0,
                remaining: 0,
            },
            from,
            url,
            redrive,
            to,
            on_moved,
            held: HashMap::new(),
            blocked_groups: HashSet::new(),
            sent_ids: HashSet::new(),
            taken: 0,
            started: Instant::now(),
            paced: 0,
        };
        run.report.at_start = visible + in_flight + delayed;
        let outcome = if redrive.dry_run && self.client.transport().peeks() {
            self.dry_run_in_place(&mut run).await
        } else {
            self.receive_and_move(&mut run).await
        };
        // A peek's messages have no handle: nothing holds them.
        let held: Vec<String> = run
            .held
            .drain()
            .map(|(_, handle)| handle)
            .filter(|handle| !handle.is_empty())
            .collect();
        if let Err(error) = self.release(&run.url, held).await {
            tracing::warn!(
                messaging.destination.name = %run.from,
                error = %error,
                "messages left in the dead-letter queue stay invisible until their hold ends"
            );
        }
        outcome?;
        let (visible, in_flight, delayed) = self.counts(&run.from, &run.url).await?;
        run.report.remaining = visible + in_flight + delayed;
        Ok(run.report)
    }

    /// A queue's visible, in-flight and delayed counts.
    async fn counts(&self, name: &str, url: &str) -> Result<(u64, u64, u64), OperationError> {
        let attributes = self
            .client
            .transport()
            .get_queue_attributes(
                url,
                &[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )
            .await
            .map_err(|source| at(name, source))?;
        Ok((
            count(&attributes, "ApproximateNumberOfMessages"),
            count(&attributes, "ApproximateNumberOfMessagesNotVisible"),
            count(&attributes, "ApproximateNumberOfMessagesDelayed"),
        ))
    }

    /// A dry run on a backend that peeks: every message, in storage order, changing nothing.
    async fn dry_run_in_place<F: FnMut(&AuditRecord) + Send>(
        &self,
        run: &mut Run<'_, F>,
    ) -> Result<(), OperationError> {
        let mut position = 0;
        loop {
            let page = self
                .client
                .transport()
                .peek_messages(
                    &run.url,
                    PeekMessages {
                        offset: position,
                        max: 1_000,
                    },
                )
                .await
                .map_err(|source| at(&run.from, source))?;
            position += page.len();
            if page.is_empty() {
                return Ok(());
            }
            for peeked in page {
                if run
                    .redrive
                    .limit
                    .is_some_and(|limit| run.report.moved.len() >= limit)
                {
                    return Ok(());
                }
                run.take(&peeked.message);
            }
        }
    }

    /// Receives from the dead-letter queue, ten at a time, and moves (or, in a dry run, looks at
    /// and holds) each, until it is empty but for what this run holds.
    async fn receive_and_move<F: FnMut(&AuditRecord) + Send>(
        &self,
        run: &mut Run<'_, F>,
    ) -> Result<(), OperationError> {
        let hold = run.redrive.hold();
        let hold_seconds = i32::try_from(hold.as_secs().clamp(1, 43_200)).unwrap_or(43_200);
        let mut quiet_since: Option<Instant> = None;
        let mut tail_since: Option<Instant> = None;
        loop {
            let moved = run.report.moved.len();
            let room = match run.redrive.limit {
                Some(limit) if moved >= limit => return Ok(()),
                Some(limit) => (limit - moved).min(rules::MAX_BATCH_ENTRIES),
                None => rules::MAX_BATCH_ENTRIES,
            };
            // Once it has taken as many as were there at its start, a run only looks for what
            // came back (until a receive finds nothing, or for `TAIL` at most) and leaves all it
            // finds: it always ends, however fast its consumers dead-letter again.
            if run.past_start() {
                let since = *tail_since.get_or_insert_with(Instant::now);
                if since.elapsed() > TAIL {
                    return Ok(());
                }
            }
            let request = ReceiveMessage::new(i32::try_from(room).unwrap_or(10))
                .wait_time_seconds(1)
                .visibility_timeout(hold_seconds);
            let received = self
                .client
                .transport()
                .receive_message(&run.url, request)
                .await
                .map_err(|source| at(&run.from, source))?;
            if received.is_empty() && run.past_start() {
                return Ok(());
            }
            if received.is_empty() {
                // Done once nothing is left but what this run holds, and on FIFO what waits behind
                // a group it holds (counted visible, but no receive hands it out); messages
                // someone else holds (or a run killed before this one) are waited for as long as
                // a hold lasts.
                let (visible, in_flight, delayed) = self.counts(&run.from, &run.url).await?;
                let held = run.held.len() as u64;
                let behind_held_groups =
                    rules::is_fifo_name(&run.from) && !run.blocked_groups.is_empty();
                let quiet = *quiet_since.get_or_insert_with(Instant::now);
                if ((visible == 0 || behind_held_groups) && delayed == 0 && in_flight <= held)
                    || quiet.elapsed() > hold + Duration::from_secs(5)
                {
                    if in_flight > held {
                        tracing::warn!(
                            messaging.destination.name = %run.from,
                            in_flight = in_flight - held,
                            "redrive ends with messages of the dead-letter queue in flight \
                             elsewhere; run it again once they are visible"
                        );
                    }
                    return Ok(());
                }
                continue;
            }
            quiet_since = None;
            let batch: Vec<Planned> = received
                .iter()
                .filter_map(|message| run.plan_or_hold(message))
                .collect();
            if batch.is_empty() {
                continue;
            }
            if let Some(rate) = run.redrive.rate {
                // The last message of this batch is due when the rate has let all before it go.
                let due = run.started
                    + Duration::from_secs_f64((run.paced + batch.len() - 1) as f64 / rate);
                tokio::time::sleep_until(due).await;
            }
            run.paced += batch.len();
            if run.redrive.dry_run {
                for planned in batch {
                    run.held
                        .insert(planned.record.message_id.clone(), planned.receipt_handle);
                    run.record(planned.record, None);
                }
                continue;
            }
            if run.redrive.delete {
                self.delete_batch(run, batch).await;
            } else {
                self.move_batch(run, batch).await;
            }
        }
    }

    /// Deletes a dead-letter queue's messages that `filter` chooses, each an [`AuditRecord`]
    /// (its `to` empty) logged at `info` and handed to `on_deleted` once its delete is
    /// confirmed: the poison message an operator keeps no longer, without purging the others.
    /// It takes what the queue held at its start, as a redrive does; `dry_run` says what would
    /// go and deletes nothing. On a FIFO queue a receive hands out a group's messages in order
    /// and holds the group, so a chosen message behind one the filter does not choose is
    /// reached only within the same receive (ten messages).
    ///
    /// # Errors
    ///
    /// [`OperationError::NothingChosen`] for a filter that sets no condition (a purge deletes
    /// everything); otherwise as [`redrive`](Self::redrive).
    pub async fn delete_matching(
        &self,
        queue: &str,
        filter: MessageFilter,
        dry_run: bool,
        on_deleted: impl FnMut(&AuditRecord) + Send,
    ) -> Result<RedriveReport, OperationError> {
        if filter.is_empty() {
            return Err(OperationError::NothingChosen {
                queue: self.named(queue)?,
            });
        }
        let mut delete = Redrive::from(queue).filter(filter);
        delete.delete = true;
        delete.dry_run = dry_run;
        self.redrive_with(&delete, on_deleted).await
    }

    /// Deletes a batch chosen for deletion from the dead-letter queue, a try more for what
    /// fails; records what went.
    async fn delete_batch<F: FnMut(&AuditRecord) + Send>(
        &self,
        run: &mut Run<'_, F>,
        batch: Vec<Planned>,
    ) {
        let mut pending = batch;
        let mut last_error = String::new();
        for attempt in 0..DELETE_TRIES {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
            let entries = pending
                .iter()
                .enumerate()
                .map(|(index, planned)| DeleteEntry {
                    id: entry_id(index),
                    receipt_handle: planned.receipt_handle.clone(),
                })
                .collect();
            let failed: HashSet<usize> = match self
                .client
                .transport()
                .delete_message_batch(&run.url, entries)
                .await
            {
                Ok(result) => {
                    last_error = result
                        .failed
                        .first()
                        .map(|failure| failure.message.clone())
                        .unwrap_or_default();
                    result
                        .failed
                        .iter()
                        .map(|failure| failure.id.parse().expect("the ids are the indexes sent"))
                        .collect()
                }
                Err(error) => {
                    last_error = error.to_string();
                    (0..pending.len()).collect()
                }
            };
            let (stay, gone): (Vec<_>, Vec<_>) = pending
                .into_iter()
                .enumerate()
                .partition(|(index, _)| failed.contains(index));
            for (_, planned) in gone {
                run.record(planned.record, None);
            }
            pending = stay.into_iter().map(|(_, planned)| planned).collect();
            if pending.is_empty() {
                return;
            }
        }
        for planned in pending {
            run.leave_with(
                &planned,
                format!("its delete failed ({last_error}); it stays here"),
                false,
            );
        }
    }

    /// Sends a batch to its targets (each target's part in one submission to the broker's
    /// sender, in order), then deletes from the dead-letter queue what was sent.
    async fn move_batch<F: FnMut(&AuditRecord) + Send>(
        &self,
        run: &mut Run<'_, F>,
        batch: Vec<Planned>,
    ) {
        let mut targets: Vec<(String, Vec<Planned>)> = Vec::new();
        for planned in batch {
            match targets
                .iter_mut()
                .find(|(target, _)| *target == planned.target)
            {
                Some((_, part)) => part.push(planned),
                None => targets.push((planned.target.clone(), vec![planned])),
            }
        }
        let mut sent = Vec::new();
        for (target, part) in targets {
            let messages = part.iter().map(|planned| planned.send.clone()).collect();
            let answers = self
                .client
                .send_copies(&SqsQueue::new(&target), messages)
                .await;
            for (planned, answer) in part.into_iter().zip(answers) {
                match answer {
                    Ok(answer) => sent.push((planned, answer.message_id)),
                    Err(error) => {
                        // Held behind an earlier copy of its group that was refused: not refused
                        // itself, and it goes with that one on a later run.
                        let refused = !matches!(error, TransportError::HeldBehind { .. });
                        run.leave_with(
                            &planned,
                            format!("its send to `{target}` failed: {error}; it stays here"),
                            refused,
                        );
                    }
                }
            }
        }
        run.sent_ids
            .extend(sent.iter().map(|(_, new_id)| new_id.clone()));
        if sent.is_empty() {
            return;
        }
        let mut pending: Vec<usize> = (0..sent.len()).collect();
        let mut last_error = String::new();
        for attempt in 0..DELETE_TRIES {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
            let entries = pending
                .iter()
                .map(|&index| DeleteEntry {
                    id: entry_id(index),
                    receipt_handle: sent[index].0.receipt_handle.clone(),
                })
                .collect();
            match self
                .client
                .transport()
                .delete_message_batch(&run.url, entries)
                .await
            {
                Ok(result) => {
                    for (id, ()) in &result.successful {
                        let index: usize = id.parse().expect("the ids are the indexes sent");
                        let (planned, new_id) = &sent[index];
                        run.record(planned.record.clone(), Some(new_id.clone()));
                    }
                    pending = result
                        .failed
                        .iter()
                        .map(|failure| failure.id.parse().expect("the ids are the indexes sent"))
                        .collect();
                    last_error = result
                        .failed
                        .first()
                        .map(|failure| failure.message.clone())
                        .unwrap_or_default();
                }
                Err(error) => last_error = error.to_string(),
            }
            if pending.is_empty() {
                return;
            }
        }
        for index in pending {
            let (planned, new_id) = &sent[index];
            run.leave_with(
                planned,
                format!(
                    "sent to `{}` as `{new_id}`, but its delete from the dead-letter queue failed \
                     ({last_error}); a rerun sends it again (on a FIFO target SQS drops that \
                     copy within 5 minutes of the first)",
                    planned.target
                ),
                false,
            );
        }
    }
}

impl<F: FnMut(&AuditRecord) + Send> Run<'_, F> {
    /// A received message's plan, or `None` when it stays (held until the run ends).
    fn plan_or_hold(&mut self, message: &ReceivedMessage) -> Option<Planned> {
        if let Some(handle) = self.held.get_mut(&message.message_id) {
            // Seen before and held; its hold ran out and it came back.
            handle.clone_from(&message.receipt_handle);
            return None;
        }
        let group = message
            .group_id()
            .filter(|_| rules::is_fifo_name(&self.from));
        if let Some(sent_as) = self.came_back_as(message) {
            // Moved by this run and dead-lettered again: moving it again would loop for as long
            // as its consumer fails it. Held to the end; on FIFO, its group's later messages in
            // the dead-letter queue came after it, and stay too.
            self.held
                .insert(message.message_id.clone(), message.receipt_handle.clone());
            if let Some(group) = group {
                self.blocked_groups.insert(group.to_owned());
            }
            let reason = message
                .message_attributes
                .get(DEAD_LETTER_REASON_HEADER)
                .and_then(text_of)
                .map(str::to_owned);
            tracing::warn!(
                operation = "redrive",
                messaging.message.id = %message.message_id,
                sent_as = %sent_as,
                from = %self.from,
                reason = reason.as_deref().unwrap_or(""),
                "a message this redrive moved came back to the dead-letter queue; it stays for \
                 the next run"
            );
            self.report.came_back.push(CameBack {
                message_id: message.message_id.clone(),
                sent_as,
                reason,
            });
            return None;
        }
        if self.past_start() {
            // Dead-lettered after the run started (or missed by the count): the next run's.
            self.held
                .insert(message.message_id.clone(), message.receipt_handle.clone());
            if let Some(group) = group {
                self.blocked_groups.insert(group.to_owned());
            }
            self.report.left.push(Left {
                message_id: message.message_id.clone(),
                reason: "it arrived after this run started (the run moves only what was there \
                         when it started): the next run takes it"
                    .to_owned(),
                refused: false,
            });
            return None;
        }
        self.taken += 1;
        if let Some(filter) = &self.redrive.filter {
            if !filter.matches(&Message::of(message, MessageState::Visible)) {
                // Not chosen: it stays, held to the end so that no receive hands it out again;
                // on FIFO its group's later messages stay behind it (a group moves in order).
                self.held
                    .insert(message.message_id.clone(), message.receipt_handle.clone());
                if let Some(group) = group.filter(|_| !self.redrive.delete) {
                    self.blocked_groups.insert(group.to_owned());
                }
                self.report.unmatched += 1;
                return None;
            }
        }
        let blocked = group.is_some_and(|group| self.blocked_groups.contains(group));
        let planned = if blocked {
            Err(
                "an earlier message of its group stays in the dead-letter queue, and a group \
                 moves in its order"
                    .to_owned(),
            )
        } else if self.redrive.delete {
            // Going nowhere: planned as a move to its own queue, then told so.
            plan(&self.from, message, Some(&self.from)).map(|mut planned| {
                planned.target = String::new();
                planned.record.to = String::new();
                planned.record.group_id = message.group_id().map(str::to_owned);
                planned.record.dedup_id = None;
                planned
            })
        } else {
            plan(&self.from, message, self.to.as_deref())
        };
        match planned {
            Ok(planned) => Some(planned),
            Err(reason) => {
                self.held
                    .insert(message.message_id.clone(), message.receipt_handle.clone());
                if let Some(group) = group {
                    self.blocked_groups.insert(group.to_owned());
                }
                tracing::warn!(
                    operation = "redrive",
                    messaging.message.id = %message.message_id,
                    from = %self.from,
                    reason = %reason,
                    "dead-letter message left where it is"
                );
                self.report.left.push(Left {
                    message_id: message.message_id.clone(),
                    reason,
                    refused: false,
                });
                None
            }
        }
    }

    /// Whether the run has taken as many messages as the queue held at its start.
    fn past_start(&self) -> bool {
        self.taken as u64 >= self.report.at_start
    }

    /// The id this run sent `message` back as, when it is a copy of a message this run moved.
    fn came_back_as(&self, message: &ReceivedMessage) -> Option<String> {
        let original = message
            .message_attributes
            .get(ORIGINAL_MESSAGE_ID_HEADER)
            .and_then(text_of);
        // The engine's copy names the message it failed; SQS's own redrive keeps the id.
        [original, Some(message.message_id.as_str())]
            .into_iter()
            .flatten()
            .find(|id| self.sent_ids.contains(*id))
            .map(str::to_owned)
    }

    /// A dry run's look at one message: its record, or why it would stay.
    fn take(&mut self, message: &ReceivedMessage) {
        if let Some(planned) = self.plan_or_hold(message) {
            // A peek holds nothing: there is nothing to release for it.
            self.held.remove(&planned.record.message_id);
            self.record(planned.record, None);
        }
    }

    /// A message that stays after a failed send (`refused`) or delete: held to the end, its
    /// group blocked.
    fn leave_with(&mut self, planned: &Planned, reason: String, refused: bool) {
        self.held.insert(
            planned.record.message_id.clone(),
            planned.receipt_handle.clone(),
        );
        if let Some(group) = &planned.group {
            self.blocked_groups.insert(group.clone());
        }
        tracing::warn!(
            operation = "redrive",
            messaging.message.id = %planned.record.message_id,
            from = %self.from,
            to = %planned.target,
            reason = %reason,
            "dead-letter message left where it is"
        );
        self.report.left.push(Left {
            message_id: planned.record.message_id.clone(),
            reason,
            refused,
        });
    }

    /// Records a message moved (or, in a dry run, that would be).
    fn record(&mut self, mut record: AuditRecord, new_message_id: Option<String>) {
        record.new_message_id = new_message_id;
        record.at_ms = epoch_ms();
        record.dry_run = self.redrive.dry_run;
        log(&record);
        (self.on_moved)(&record);
        self.report.moved.push(record);
    }
}
