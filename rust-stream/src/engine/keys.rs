//! Per-key in-flight limits ([`SqsQueue::max_in_flight_per`](crate::SqsQueue::max_in_flight_per)):
//! the intake hands each received message with a key to [`KeyLimits`], which dispatches it while
//! fewer than the limit of its key are held for running, lets a few more wait for their key
//! (held, their visibility extended by the heartbeat, in a line per key), and hands back the rest
//! for the intake to give back to the queue.
//!
//! SQS cannot filter a receive by key, so a receive brings whatever is visible; one tenant with
//! most of the backlog would otherwise fill every handler slot and the room of the pipeline. The
//! messages waiting for their key are few (at most the limit for each key, and the
//! subscription's concurrency in all), in room of their own added to the pipeline's, so a noisy
//! key never takes the room other keys' messages are received into. A message beyond that goes
//! back at once, hidden for a while that doubles with its receive count (1 s, 2 s, ... at most
//! [`MAX_KEY_FULL_DELAY`]): no attempt was made, and the engine does not count one, but SQS
//! counts the receive towards the queue's `maxReceiveCount`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::dispatch::Dispatcher;
use super::held::{Held, KeyCount, KeyHold};
use super::shared::Tasks;
use crate::model::flow::{InFlightKey, PerKey};
use crate::transport::ReceivedMessage;

/// The longest a message whose key is full is hidden when it is given back.
pub(crate) const MAX_KEY_FULL_DELAY: Duration = Duration::from_secs(60);

/// The first such delay, doubled by each receive of the message.
const FIRST_KEY_FULL_DELAY: Duration = Duration::from_secs(1);

/// A subscription's per-key limit and the messages waiting for their keys.
pub(crate) struct KeyLimits {
    key: InFlightKey,
    most: usize,
    /// Messages waiting for their keys, across keys, at most: the room added for them.
    waiting_most: usize,
    table: Mutex<Table>,
    dispatcher: Arc<Dispatcher>,
    tasks: Tasks,
}

#[derive(Default)]
struct Table {
    keys: HashMap<Arc<str>, Line>,
    waiting: usize,
}

/// One key's messages: how many are held for running, and those waiting in turn.
#[derive(Default)]
struct Line {
    running: usize,
    waiting: VecDeque<Held>,
}

impl KeyLimits {
    /// The limits of `per_key` over `dispatcher`, with room for `waiting_most` waiting messages
    /// added to the dispatcher's.
    pub(crate) fn new(
        per_key: &PerKey,
        waiting_most: usize,
        dispatcher: Arc<Dispatcher>,
        tasks: Tasks,
    ) -> Arc<Self> {
        dispatcher.capacity.add_permits(waiting_most);
        Arc::new(Self {
            key: per_key.key.clone(),
            most: per_key.most,
            waiting_most,
            table: Mutex::default(),
            dispatcher,
            tasks,
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The key of a received message, if it has one.
    pub(crate) fn key_of(&self, message: &ReceivedMessage) -> Option<Arc<str>> {
        self.key.of(message)
    }

    /// Dispatches `held` (whose key is `key`), or keeps it waiting for its key; hands it back
    /// when its key is full and cannot keep more waiting.
    pub(crate) fn admit(self: &Arc<Self>, mut held: Held, key: Option<Arc<str>>) -> Option<Held> {
        let Some(key) = key else {
            self.dispatcher.dispatch(vec![held]);
            return None;
        };
        let mut table = self.table();
        let waiting = table.waiting;
        let line = table.keys.entry(key.clone()).or_default();
        if line.running < self.most {
            line.running += 1;
            drop(table);
            held.key = Some(Box::new(KeyHold {
                count: self.clone(),
                key,
            }));
            self.dispatcher.dispatch(vec![held]);
            return None;
        }
        if line.waiting.len() < self.most && waiting < self.waiting_most {
            line.waiting.push_back(held);
            table.waiting += 1;
            return None;
        }
        Some(held)
    }
}

impl KeyCount for KeyLimits {
    /// The key's next waiting message runs in the place of the one let go.
    fn let_go(self: Arc<Self>, key: &Arc<str>) {
        let next = {
            let mut table = self.table();
            let Some(line) = table.keys.get_mut(key) else {
                return;
            };
            match line.waiting.pop_front() {
                Some(next) => {
                    table.waiting -= 1;
                    Some(next)
                }
                None => {
                    line.running -= 1;
                    if line.running == 0 {
                        table.keys.remove(key);
                    }
                    None
                }
            }
        };
        let Some(mut next) = next else {
            return;
        };
        next.key = Some(Box::new(KeyHold {
            count: self.clone(),
            key: key.clone(),
        }));
        if self.tasks.no_new_attempts().is_cancelled() {
            self.dispatcher.park_unstarted(vec![next]);
        } else {
            self.dispatcher.dispatch(vec![next]);
        }
    }
}

/// How long a message whose key is full is hidden when given back, by its receive count.
pub(crate) fn key_full_delay(receive_count: u32) -> Duration {
    let doublings = receive_count.saturating_sub(1).min(16);
    (FIRST_KEY_FULL_DELAY * 2u32.pow(doublings)).min(MAX_KEY_FULL_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_given_back_again_and_again_is_hidden_longer_each_time() {
        assert_eq!(key_full_delay(1), Duration::from_secs(1));
        assert_eq!(key_full_delay(2), Duration::from_secs(2));
        assert_eq!(key_full_delay(4), Duration::from_secs(8));
        assert_eq!(key_full_delay(7), MAX_KEY_FULL_DELAY);
        assert_eq!(key_full_delay(u32::MAX), MAX_KEY_FULL_DELAY);
    }
}
