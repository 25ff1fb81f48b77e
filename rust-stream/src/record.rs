//! What the engine did with each message, told to a recorder when a test asked for one
//! (`Recorder`, feature `testing`); without one, nothing is kept.

#[cfg(feature = "testing")]
use std::collections::BTreeSet;
#[cfg(feature = "testing")]
use std::sync::{Arc, Mutex, PoisonError};

/// How a subscription settled one attempt at a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settled {
    /// Handled: its outputs were sent and it was deleted.
    Acked,
    /// Failed; it will be attempted again.
    Retried,
    /// Moved to the dead-letter queue.
    DeadLettered,
}

/// One thing the engine did.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// An attempt at a message ended.
    Settled {
        queue: String,
        message_id: String,
        body: String,
        settled: Settled,
    },
    /// A handler's output was sent.
    Published { queue: String, body: String },
    /// A message was moved to its dead-letter queue.
    DeadLettered {
        queue: String,
        message_id: String,
        reason: String,
    },
    /// A batch handler was called on these messages, in the order it got them.
    Batch {
        queue: String,
        message_ids: Vec<String>,
    },
}

/// Where events go.
pub(crate) trait Record: Send + Sync + 'static {
    fn record(&self, event: Event);
    /// A queue the broker resolved (one an app reads, sends to or dead-letters to, or a
    /// publisher's): a test asking about any other name has mistyped it.
    fn named(&self, queue: &str);
    /// The recorder itself, so the broker hands the same one to every caller.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// What a broker's subscriptions did with each message: every attempt and how it was settled,
/// every output sent, every move to a dead-letter queue. Get it with
/// [`SqsBroker::recorder`](crate::SqsBroker::recorder) before the app runs. Cheap to clone.
///
/// It knows the queues the broker resolved (every queue an app names is, before it consumes; a
/// publisher's, on its first send), and asking about any other name panics, listing the names it
/// knows: a mistyped name (`ledger` for `ledger.fifo`) is not an empty list that reads as "nothing
/// happened". [`queues`](Self::queues) lists them.
///
/// ```
/// use rust_stream::prelude::*;
/// use rust_stream::testing::{Settled, TestApp};
/// # #[derive(serde::Deserialize)] struct Order { id: u64 }
/// # struct Refuse;
/// # impl Handle<Order> for Refuse {
/// #     async fn handle(&self, order: &Order, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
/// #         Err(HandlerOutcome::dead_letter(format!("order {} is not ours", order.id)))
/// #     }
/// # }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let broker = SqsBroker::in_process();
/// let recorder = broker.recorder();
/// let orders = SqsQueue::new("orders").create_if_missing().dead_letter("orders-dlq", 3);
/// let app = RustStream::new(AppInfo::new("orders", "0.1.0")).with_broker(broker.clone(), |b| {
///     b.include(subscriber(orders, Refuse).build());
/// });
/// let running = TestApp::spawn(app).await.unwrap();
/// broker.publisher("orders").raw(r#"{"id": 7}"#).send().await.unwrap();
/// running.drain().await;
/// assert_eq!(recorder.handled("orders")[0].settled, Settled::DeadLettered);
/// assert_eq!(recorder.dead_lettered("orders")[0].reason, "order 7 is not ours");
/// running.stop().await.unwrap();
/// # }
/// ```
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
    queues: Arc<Mutex<BTreeSet<String>>>,
}

/// One attempt at a message, as a [`Recorder`] saw it.
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Handled {
    /// The message id.
    pub message_id: String,
    /// The body as received: for a message SNS delivered in its envelope, the envelope's JSON
    /// (the handler read its `Message`).
    pub body: String,
    /// How the attempt was settled.
    pub settled: Settled,
}

/// One call of a batch handler, as a [`Recorder`] saw it: the messages it got, in order (each
/// one's outcome is in [`Recorder::handled`]).
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Batch {
    /// The ids of the messages the call got, in the order the handler saw them.
    pub message_ids: Vec<String>,
}

#[cfg(feature = "testing")]
impl Batch {
    /// How many messages the call got.
    pub fn len(&self) -> usize {
        self.message_ids.len()
    }

    /// Whether the call got none (never: a batch handler is called on one message at least).
    pub fn is_empty(&self) -> bool {
        self.message_ids.is_empty()
    }
}

/// A message moved to its dead-letter queue, as a [`Recorder`] saw it.
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLettered {
    /// The original message id.
    pub message_id: String,
    /// Why it was moved.
    pub reason: String,
}

#[cfg(feature = "testing")]
impl Recorder {
    fn events(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The names of the queues the broker resolved since the recorder was made, in order.
    pub fn queues(&self) -> Vec<String> {
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// The events, once `queue` is known to be one the broker resolved.
    #[track_caller]
    fn events_of(&self, queue: &str) -> std::sync::MutexGuard<'_, Vec<Event>> {
        let known = self.queues();
        if !known.iter().any(|name| name == queue) {
            let known = if known.is_empty() {
                "none yet: ask once the app runs (TestApp::spawn returns when it does)".to_owned()
            } else {
                known
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            panic!("the recorder knows no queue `{queue}`; the broker's queues are: {known}");
        }
        self.events()
    }

    /// Every attempt at a message of `queue`'s subscription, in the order they ended.
    ///
    /// # Panics
    ///
    /// If the broker never resolved a queue of that name (listing those it did).
    #[track_caller]
    pub fn handled(&self, queue: &str) -> Vec<Handled> {
        self.events_of(queue)
            .iter()
            .filter_map(|event| match event {
                Event::Settled {
                    queue: of,
                    message_id,
                    body,
                    settled,
                } if of == queue => Some(Handled {
                    message_id: message_id.clone(),
                    body: body.clone(),
                    settled: *settled,
                }),
                _ => None,
            })
            .collect()
    }

    /// The bodies handlers sent to `queue` as their outputs, in the order sent.
    ///
    /// # Panics
    ///
    /// If the broker never resolved a queue of that name (listing those it did).
    #[track_caller]
    pub fn published(&self, queue: &str) -> Vec<String> {
        self.events_of(queue)
            .iter()
            .filter_map(|event| match event {
                Event::Published { queue: to, body } if to == queue => Some(body.clone()),
                _ => None,
            })
            .collect()
    }

    /// The outputs sent to `queue`, decoded as JSON.
    ///
    /// # Panics
    ///
    /// If a body is not a `T` in JSON, or the broker never resolved a queue of that name.
    #[track_caller]
    pub fn published_as<T: serde::de::DeserializeOwned>(&self, queue: &str) -> Vec<T> {
        self.published(queue)
            .iter()
            .map(|body| {
                serde_json::from_str(body).unwrap_or_else(|error| {
                    panic!("an output to `{queue}` is not the type asked for: {error}: {body}")
                })
            })
            .collect()
    }

    /// Each call of `queue`'s batch handler, in the order they began: the messages it got.
    /// Messages whose body did not decode never reach the handler, and are not in it.
    ///
    /// # Panics
    ///
    /// If the broker never resolved a queue of that name (listing those it did).
    #[track_caller]
    pub fn batches(&self, queue: &str) -> Vec<Batch> {
        self.events_of(queue)
            .iter()
            .filter_map(|event| match event {
                Event::Batch {
                    queue: of,
                    message_ids,
                } if of == queue => Some(Batch {
                    message_ids: message_ids.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The messages `queue`'s subscription moved to its dead-letter queue, in order.
    ///
    /// # Panics
    ///
    /// If the broker never resolved a queue of that name (listing those it did).
    #[track_caller]
    pub fn dead_lettered(&self, queue: &str) -> Vec<DeadLettered> {
        self.events_of(queue)
            .iter()
            .filter_map(|event| match event {
                Event::DeadLettered {
                    queue: of,
                    message_id,
                    reason,
                } if of == queue => Some(DeadLettered {
                    message_id: message_id.clone(),
                    reason: reason.clone(),
                }),
                _ => None,
            })
            .collect()
    }
}

#[cfg(feature = "testing")]
impl Record for Recorder {
    fn record(&self, event: Event) {
        self.events().push(event);
    }

    fn named(&self, queue: &str) {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if !queues.contains(queue) {
            queues.insert(queue.to_owned());
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
