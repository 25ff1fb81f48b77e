//! Many messages at once ([`Publisher::send_batch`]): each checked, its `once` key reserved,
//! sent in calls of 10 in order, a FIFO group's later messages held back behind one refused.

use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::error::PublishError;
use super::history::{Held, History, Refused};
use super::publisher::Publisher;
use crate::handler::outgoing::Once;
use crate::handler::outgoing::Outgoing;
use crate::store::history::{HistoryKey, Ticket};
use crate::transport::{SendMessage, SentMessage, TransportError};

/// What became, so far, of one message of a [`Publisher::send_batch`].
pub(super) enum Slot {
    /// Checked, its key (if any) reserved under the ticket: to be sent.
    Send(SendMessage, Option<(HistoryKey, Ticket, Duration)>),
    /// Checked, with a key to reserve first.
    Reserve(SendMessage, Once),
    /// In the batch's call; its answer comes in order.
    Sending,
    /// Answered without a call: refused, or skipped as sent before.
    Answered(Result<SentMessage, PublishError>),
    /// Its key is that of the message at this index, earlier in the batch.
    SameAs(usize),
}

impl Publisher {
    /// Sends many messages to this publisher's queue in as few `SendMessageBatch` calls as SQS
    /// allows (10 messages and 1 MiB a call), and answers each message in the order given:
    /// `results[i]` is what became of the `i`-th message.
    ///
    /// Each message is checked before the network, as [`Outgoing::send`] checks it; one that
    /// fails gets its own error and the others still go. On a FIFO queue every group keeps the
    /// order of the batch: a group's messages go out one call at a time, in that order, while
    /// other groups' calls go out beside them. An empty batch, or one whose every message fails
    /// its check, makes no call.
    ///
    /// Every message must be for this publisher's queue: make them with this publisher (or any
    /// publisher for a queue of the same name). A message for another queue is refused with
    /// [`PublishError::OtherQueue`] rather than sent where it was not meant to go. Each message
    /// goes out as this publisher's, through its broker and with its queue's settings (FIFO,
    /// content-based deduplication).
    ///
    /// Messages sent [`once`](crate::Outgoing::once) are checked against the publisher's
    /// [command history] first, their keys reserved all at once: a key sent within its
    /// duration answers the original's message id with `duplicate` set and is not sent again, and
    /// a key given to two messages of the batch is sent with the first, the second answering as
    /// it did.
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// # #[derive(serde::Serialize)] struct Payment { id: u32, account: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let broker = SqsBroker::in_process();
    /// let payments = broker.publisher(SqsQueue::new("payments.fifo").create_if_missing());
    /// let batch = (0..100).map(|id| {
    ///     let account = format!("account-{}", id % 5);
    ///     payments.message(&Payment { id, account: account.clone() }).group_id(account)
    /// });
    ///
    /// let results = payments.send_batch(batch).await;
    /// assert_eq!(results.len(), 100);
    /// assert!(results.iter().all(Result::is_ok));
    /// assert_eq!(broker.api_calls().send_message_batch, 10);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Each message's own [`PublishError`]: it is for another queue, breaks an SQS rule (found
    /// before the network), cannot be encoded, this publisher is not bound to a broker, or SQS
    /// refuses it.
    ///
    /// [command history]: crate::publish::history
    #[must_use = "each message has its own result: a failed one was not sent"]
    pub async fn send_batch(
        &self,
        messages: impl IntoIterator<Item = Outgoing>,
    ) -> Vec<Result<SentMessage, PublishError>> {
        // Each message's group as given, for the FIFO rule below.
        let mut groups: Vec<Option<String>> = Vec::new();
        let mut slots: Vec<Slot> = messages
            .into_iter()
            .map(|mut outgoing| {
                groups.push(outgoing.group_id.clone());
                let once = outgoing.once.take();
                match (self.request_for(outgoing), once) {
                    (Err(error), _) => Slot::Answered(Err(error)),
                    (Ok(request), None) => Slot::Send(request, None),
                    (Ok(_), Some(_)) if self.history().is_none() => {
                        Slot::Answered(Err(PublishError::NoHistory {
                            queue: self.destination().name().to_owned(),
                        }))
                    }
                    (Ok(request), Some(once)) => Slot::Reserve(request, once),
                }
            })
            .collect();
        if let Some(history) = self.history() {
            self.reserve_keys(history, &mut slots).await;
        }
        if self.destination().is_fifo() {
            self.hold_behind_refused(&mut slots, &groups);
        }
        let mut requests = Vec::new();
        let mut tickets = Vec::new();
        for slot in &mut slots {
            if matches!(slot, Slot::Send(..)) {
                let Slot::Send(request, ticket) = std::mem::replace(slot, Slot::Sending) else {
                    unreachable!("matched above");
                };
                requests.push(request);
                tickets.push(ticket);
            }
        }
        let answers = self.send_requests(requests).await;
        if let Some(history) = self.history() {
            // Each key confirmed or cancelled as its send went, all at once.
            futures_util::future::join_all(answers.iter().zip(&tickets).filter_map(
                |(answer, ticket)| {
                    let (key, ticket, duration) = ticket.as_ref()?;
                    Some(history.settle(key, ticket, answer.as_ref().ok(), *duration))
                },
            ))
            .await;
        }
        let mut settled = answers.into_iter();
        let mut results: Vec<Result<SentMessage, PublishError>> = Vec::with_capacity(slots.len());
        for slot in slots {
            let result = match slot {
                Slot::Sending => settled.next().expect("one answer per request"),
                Slot::Answered(result) => result,
                // A key given twice in one batch: the later copy answers as the first did.
                Slot::SameAs(first) => match &results[first] {
                    Ok(sent) => Ok(SentMessage {
                        duplicate: true,
                        ..sent.clone()
                    }),
                    Err(error) => Err(error.clone()),
                },
                Slot::Send(..) | Slot::Reserve(..) => {
                    unreachable!("every slot was sent or answered")
                }
            };
            results.push(result);
        }
        results
    }

    /// The FIFO send rule for what this batch refuses before the broker's sender (which keeps
    /// it for what is refused or fails from there on): a message refused here holds its group's
    /// later messages of the batch, answered [`TransportError::HeldBehind`] unsent, so none is
    /// stored ahead of it. A message for another queue holds nothing here.
    pub(super) fn hold_behind_refused(&self, slots: &mut [Slot], groups: &[Option<String>]) {
        let mut refused: HashMap<&str, String> = HashMap::new();
        for (slot, group) in slots.iter_mut().zip(groups) {
            let Some(group) = group.as_deref() else {
                continue;
            };
            match (&*slot, refused.get(group)) {
                (Slot::Send(..), Some(why)) => {
                    *slot = Slot::Answered(Err(PublishError::Rejected {
                        queue: self.destination().name().to_owned(),
                        error: TransportError::HeldBehind {
                            message: why.clone(),
                        },
                    }));
                }
                // A message for another queue is no part of this queue's groups.
                (Slot::Answered(Err(PublishError::OtherQueue { .. })), _) => {}
                (Slot::Answered(Err(error)), None) => {
                    refused.insert(group, error.to_string());
                }
                _ => {}
            }
        }
    }

    /// Reserves the key of every slot that has one, all at once: a key held by a send of it
    /// answers that send's result; a key given twice in the batch is reserved once.
    pub(super) async fn reserve_keys(&self, history: &History, slots: &mut [Slot]) {
        let mut first_of_key: HashMap<String, usize> = HashMap::new();
        let mut reserving = Vec::new();
        for (index, slot) in slots.iter_mut().enumerate() {
            let Slot::Reserve(_, once) = slot else {
                continue;
            };
            match first_of_key.entry(once.key.clone()) {
                Entry::Occupied(first) => *slot = Slot::SameAs(*first.get()),
                Entry::Vacant(vacant) => {
                    vacant.insert(index);
                    reserving.push((index, self.history_key(&once.key)));
                }
            }
        }
        let held = futures_util::future::join_all(
            reserving.iter().map(|(_, key)| self.reserve(history, key)),
        )
        .await;
        for ((index, key), held) in reserving.into_iter().zip(held) {
            let Slot::Reserve(request, once) = std::mem::replace(&mut slots[index], Slot::Sending)
            else {
                unreachable!("a reserved slot held a key");
            };
            slots[index] = match held {
                Ok(Held::Reserved(ticket)) => {
                    Slot::Send(request, Some((key, ticket, once.duration)))
                }
                Ok(Held::Sent(sent)) => Slot::Answered(Ok(sent)),
                Err(error) => Slot::Answered(Err(error)),
            };
        }
    }

    /// Sends checked requests through this publisher's broker, one answer each, in order.
    pub(super) async fn send_requests(
        &self,
        requests: Vec<SendMessage>,
    ) -> Vec<Result<SentMessage, PublishError>> {
        let destination = self.destination();
        match (requests.is_empty(), self.core()) {
            (true, _) => Vec::new(),
            (false, Some(core)) => {
                if let Some(limit) = self.rate_limit_of() {
                    limit.wait_for(requests.len()).await;
                }
                core.send_to(destination, requests)
                    .await
                    .into_iter()
                    .map(|answer| answer.map_err(PublishError::rejected(destination.name())))
                    .collect()
            }
            (false, None) => requests
                .iter()
                .map(|_| {
                    Err(PublishError::Unbound {
                        queue: destination.name().to_owned(),
                    })
                })
                .collect(),
        }
    }

    /// Reserves `key` in `history` for a send of this publisher's.
    pub(super) async fn reserve(
        &self,
        history: &History,
        key: &HistoryKey,
    ) -> Result<Held, PublishError> {
        let destination = self.destination();
        history
            .reserve(key, destination.name(), destination.topic().is_some())
            .await
            .map_err(|refused| match refused {
                Refused::Store(error) => PublishError::History {
                    queue: destination.name().to_owned(),
                    error: Arc::new(error),
                },
                Refused::InFlight => PublishError::InFlight {
                    queue: destination.name().to_owned(),
                    key: key.key.clone(),
                },
            })
    }
}
