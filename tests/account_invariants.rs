//! A property test of the in-process account: random interleavings of send, receive, delete,
//! release and time passing, checked against a model after every step.
//!
//! Invariants: no message is lost (everything sent is eventually received and deleted); none is
//! handed out while it is in flight, so a message repeats only by redelivery; each received body is
//! the body sent with that message id (a deduplicated resend keeps the original's); each receive
//! raises the message's `ApproximateReceiveCount` by exactly one; deduplicated sends answer the
//! original; and on FIFO queues a group is never handed out out of order nor to two receivers at
//! once.
//!
//! `PROPTEST_CASES` sets the number of cases of each property (default 256).

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use rust_stream::account::Account;
use rust_stream::model::rules::ErrorKind;
use rust_stream::transport::{QueueAttributes, ReceiveMessage, ReceivedMessage, SendMessage};
use tokio::time::Instant;

#[derive(Debug, Clone)]
enum Op {
    /// Send a new message to a group, or resend the dedup id of the `n`th earlier send.
    Send {
        group: u8,
        resend: Option<usize>,
        text: String,
    },
    Receive {
        max: i32,
        visibility: i32,
    },
    Delete {
        pick: usize,
    },
    Release {
        pick: usize,
    },
    Advance {
        seconds: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, proptest::option::weighted(0.2, 0usize..64), text()).prop_map(|(group, resend, text)| Op::Send { group, resend, text }),
        3 => (1i32..=10, prop_oneof![Just(0), 1i32..=20]).prop_map(|(max, visibility)| Op::Receive { max, visibility }),
        3 => any::<usize>().prop_map(|pick| Op::Delete { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Release { pick }),
        2 => prop_oneof![0u64..=5, 6u64..=40, Just(301)].prop_map(|seconds| Op::Advance { seconds }),
    ]
}

/// Text in any of the characters SQS allows in a body, across the Unicode planes.
fn text() -> impl Strategy<Value = String> {
    let allowed = prop_oneof![
        Just('\t'),
        Just('\n'),
        Just('\r'),
        proptest::char::range(' ', '~'),
        proptest::char::range('\u{a0}', '\u{d7ff}'),
        proptest::char::range('\u{e000}', '\u{fffd}'),
        proptest::char::range('\u{10000}', '\u{10ffff}'),
    ];
    proptest::collection::vec(allowed, 0..24).prop_map(|chars| chars.into_iter().collect())
}

/// What the test knows of one stored message.
#[derive(Debug)]
struct Known {
    group: u8,
    /// The body it was stored with.
    body: String,
    /// How many times it was handed out.
    receives: u32,
    /// Position in its group's storage order.
    position: usize,
    deleted: bool,
    /// The receipt handle of its latest receive and when that receive's visibility ends.
    latest: Option<(String, Instant)>,
}

#[derive(Default)]
struct Model {
    fifo: bool,
    messages: HashMap<String, Known>,
    /// Per group, message ids in storage order.
    groups: HashMap<u8, Vec<String>>,
    /// Dedup id → (message id, when first sent).
    dedup: HashMap<String, (String, Instant)>,
    /// Every send's dedup id, so a later op can resend one.
    sends: Vec<String>,
    /// Receipts the test holds, latest or not: (message id, handle).
    held: Vec<(String, String)>,
}

impl Model {
    fn in_flight(&self, id: &str, now: Instant) -> bool {
        let known = &self.messages[id];
        !known.deleted && known.latest.as_ref().is_some_and(|(_, until)| *until > now)
    }

    /// Checks one receive's messages against the model, then records them as in flight.
    fn received(
        &mut self,
        got: &[ReceivedMessage],
        visibility: i32,
        now: Instant,
    ) -> Result<(), TestCaseError> {
        let mut this_receive: Vec<&str> = Vec::new();
        for message in got {
            let id = message.message_id.as_str();
            let known = self
                .messages
                .get(id)
                .ok_or_else(|| TestCaseError::fail(format!("unknown message {id}")))?;
            prop_assert!(!known.deleted, "deleted message {} handed out again", id);
            prop_assert_eq!(&message.body, &known.body, "the body of message {}", id);
            prop_assert_eq!(
                message.receive_count(),
                Some(known.receives + 1),
                "the receive count of message {} after {} receives",
                id,
                known.receives
            );
            prop_assert!(
                !self.in_flight(id, now),
                "message {} handed out while in flight",
                id
            );
            if self.fifo {
                let group = &self.groups[&known.group];
                for (position, other) in group.iter().enumerate() {
                    if other == id {
                        continue;
                    }
                    prop_assert!(
                        !self.in_flight(other, now),
                        "group {} handed out while its message {} is in flight",
                        known.group,
                        other
                    );
                    if position < known.position {
                        prop_assert!(
                            self.messages[other].deleted || this_receive.contains(&other.as_str()),
                            "message {} of group {} handed out before earlier message {}",
                            id,
                            known.group,
                            other
                        );
                    }
                }
            }
            this_receive.push(id);
        }
        let until = now + Duration::from_secs(visibility as u64);
        for message in got {
            let known = self
                .messages
                .get_mut(&message.message_id)
                .expect("checked above");
            known.latest = Some((message.receipt_handle.clone(), until));
            known.receives += 1;
            self.held
                .push((message.message_id.clone(), message.receipt_handle.clone()));
        }
        Ok(())
    }

    fn is_latest(&self, id: &str, handle: &str) -> bool {
        self.messages[id]
            .latest
            .as_ref()
            .is_some_and(|(latest, _)| latest == handle)
    }
}

async fn run(fifo: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let account = Account::new();
    let name = if fifo { "prop.fifo" } else { "prop" };
    let mut attributes = QueueAttributes::new();
    if fifo {
        attributes.insert("FifoQueue".into(), "true".into());
    }
    let url = account.create_queue(name, attributes).await.unwrap();
    let mut model = Model {
        fifo,
        ..Model::default()
    };
    let mut fresh = 0usize;

    for op in ops {
        let now = Instant::now();
        match op {
            Op::Send {
                group,
                resend,
                text,
            } => {
                let dedup_id = match resend.filter(|_| fifo && !model.sends.is_empty()) {
                    Some(n) => model.sends[n % model.sends.len()].clone(),
                    None => {
                        fresh += 1;
                        format!("d{fresh}")
                    }
                };
                // Unique to this send, so a resend that was deduplicated shows if it replaced the
                // original's body.
                let body = format!("send {} of {dedup_id}: {text}", model.sends.len());
                let mut message = SendMessage::new(body.clone());
                if fifo {
                    message = message
                        .group_id(format!("g{group}"))
                        .dedup_id(dedup_id.clone());
                } else if group > 0 {
                    // A standard queue's groups are a fair queue's tenants, indexed by group: mixed
                    // with messages of no group, none may be lost in those indexes.
                    message = message.group_id(format!("g{group}"));
                }
                let sent = account.send_message(&url, message).await.unwrap();
                let window_open = model
                    .dedup
                    .get(&dedup_id)
                    .filter(|(_, at)| fifo && now < *at + Duration::from_secs(300))
                    .map(|(id, _)| id.clone());
                match window_open {
                    Some(original) => {
                        prop_assert!(sent.duplicate, "a resend within 5 minutes was stored again");
                        prop_assert_eq!(sent.message_id, original);
                    }
                    None => {
                        prop_assert!(!sent.duplicate);
                        let ids = model.groups.entry(group).or_default();
                        ids.push(sent.message_id.clone());
                        let known = Known {
                            group,
                            body,
                            receives: 0,
                            position: ids.len() - 1,
                            deleted: false,
                            latest: None,
                        };
                        model.messages.insert(sent.message_id.clone(), known);
                        model.dedup.insert(dedup_id.clone(), (sent.message_id, now));
                    }
                }
                model.sends.push(dedup_id);
            }
            Op::Receive { max, visibility } => {
                let request = ReceiveMessage::new(max).visibility_timeout(visibility);
                let got = account.receive_message(&url, request).await.unwrap();
                prop_assert!(got.len() <= max as usize);
                model.received(&got, visibility, now)?;
            }
            Op::Delete { pick } if !model.held.is_empty() => {
                let (id, handle) = model.held.swap_remove(pick % model.held.len());
                let result = account.delete_message(&url, &handle).await;
                // A superseded handle deletes nothing; the latest one deletes even after a timeout,
                // but on FIFO only while the message is in flight: there it expires once its
                // visibility ended (timed out or released).
                if !model.is_latest(&id, &handle) || model.messages[&id].deleted {
                    prop_assert!(result.is_ok(), "{:?}", result);
                } else if !fifo || model.in_flight(&id, now) {
                    prop_assert!(result.is_ok(), "{:?}", result);
                    model.messages.get_mut(&id).unwrap().deleted = true;
                } else {
                    prop_assert_eq!(
                        result.unwrap_err().kind(),
                        Some(ErrorKind::InvalidParameterValue),
                        "an expired FIFO receipt handle"
                    );
                }
            }
            Op::Release { pick } if !model.held.is_empty() => {
                let (id, handle) = model.held[pick % model.held.len()].clone();
                let result = account.change_message_visibility(&url, &handle, 0).await;
                if model.is_latest(&id, &handle) && model.in_flight(&id, now) {
                    prop_assert!(result.is_ok(), "{:?}", result);
                    model.messages.get_mut(&id).unwrap().latest = Some((handle, now));
                } else {
                    prop_assert_eq!(
                        result.unwrap_err().kind(),
                        Some(ErrorKind::MessageNotInflight)
                    );
                }
            }
            Op::Delete { .. } | Op::Release { .. } => {}
            Op::Advance { seconds } => tokio::time::advance(Duration::from_secs(seconds)).await,
        }
    }

    // Drain: once every visibility has ended, everything not deleted must come back, in order.
    tokio::time::advance(Duration::from_secs(60)).await;
    for _ in 0..10_000 {
        let now = Instant::now();
        let got = account
            .receive_message(&url, ReceiveMessage::new(10).visibility_timeout(30))
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        model.received(&got, 30, now)?;
        for message in got {
            account
                .delete_message(&url, &message.receipt_handle)
                .await
                .unwrap();
            model.messages.get_mut(&message.message_id).unwrap().deleted = true;
        }
    }
    let lost: Vec<&String> = model
        .messages
        .iter()
        .filter(|(_, k)| !k.deleted)
        .map(|(id, _)| id)
        .collect();
    prop_assert!(lost.is_empty(), "messages never received: {:?}", lost);
    let counts = account.counts(&url).await.unwrap();
    prop_assert_eq!(counts.visible + counts.in_flight + counts.delayed, 0);
    Ok(())
}

fn run_paused(fifo: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(run(fifo, ops))
}

/// `PROPTEST_CASES` from the environment, or `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn fifo_queues_lose_nothing_and_keep_each_group_in_order_and_exclusive(ops in proptest::collection::vec(op(), 1..120)) {
        run_paused(true, ops)?;
    }

    #[test]
    fn standard_queues_lose_nothing_and_never_hand_out_a_message_in_flight(ops in proptest::collection::vec(op(), 1..120)) {
        run_paused(false, ops)?;
    }
}
