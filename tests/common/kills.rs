//! What the kill suites share: the seeded kill points, the payments a run with an inbox sends,
//! and the figures a run with an inbox or of an outbox reports, with the counts they are judged
//! by. The process kills
//! (`tests/fault_kills.rs`, SIGKILL on LocalStack) and the in-process ones
//! (`tests/fault_kills_in_process.rs`, a runtime shut down) read alike.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rust_stream::model::wire::{SendBatchEntry, SendMessage};
use rust_stream::publish::Publisher;
use rust_stream::transport::Transport;

/// A run's seed: `FAULT_SEED` when set (to replay a run's kill points), the clock's nanoseconds
/// otherwise; printed either way, as `what` names the run.
pub fn seed(what: &str) -> u64 {
    let seed = std::env::var("FAULT_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    super::report(format_args!(
        "{what}: seed {seed} (FAULT_SEED={seed} replays them)"
    ));
    seed
}

/// A small seeded generator (SplitMix64): the kill points of a run, replayable from its seed.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `kills` kill points, numbers of things done from `first` to `last`: one in the first half
    /// of each equal part of that range, in order, so each is at least half a part past the one
    /// before. Drawn anywhere, two could fall within what a run does while the kill before lands
    /// and its successor starts, and the later one was passed before its wait began (seen: 1775
    /// and 1814 of 2,000 payments, all posted before the fifth wait, which waited its whole
    /// patience for a posting that could not come).
    pub fn kill_points(&mut self, first: usize, last: usize, kills: usize) -> Vec<usize> {
        let part = (last - first) / kills;
        (0..kills)
            .map(|kill| first + kill * part + (self.next() % (part as u64 / 2).max(1)) as usize)
            .collect()
    }
}

/// What a kill run with an inbox measured.
#[derive(Debug)]
pub struct InboxFigures {
    /// How the consumer was killed: `process kills` (SIGKILL) or `in-process kills`.
    pub kills: &'static str,
    pub seed: u64,
    pub payments: usize,
    pub copies: usize,
    pub handler_runs: usize,
    pub redelivered: usize,
    pub missing: usize,
    pub posted_twice: usize,
    pub total: i64,
    pub expected_total: i64,
    /// `None` on a standard queue, which promises no order.
    pub order_violations: Option<usize>,
    pub elapsed: Duration,
}

impl InboxFigures {
    /// Every payment posted, none twice, and the ledger's total the expected one.
    pub fn assert_exactly_once(&self) {
        assert_eq!(self.missing, 0, "payments never posted");
        assert_eq!(self.posted_twice, 0, "payments posted twice");
        assert_eq!(self.total, self.expected_total, "the ledger's total");
    }

    /// Each group's postings in the order sent (FIFO).
    pub fn assert_in_order(&self) {
        assert_eq!(
            self.order_violations,
            Some(0),
            "postings out of their group's order"
        );
    }

    pub fn print(&self, kind: &str) {
        let order = match self.order_violations {
            Some(violations) => violations.to_string(),
            None => "not promised".to_owned(),
        };
        super::report(format_args!(
            "{} with an inbox ({kind}, seed {}): payments {}, extra \
             copies sent {}, handler runs {} (the rest acked by the inbox without running), \
             messages received again after a kill {}, payments missing {}, posted twice {}, \
             ledger total {} (expected {}), order violations {order}, in {:.1?}",
            self.kills,
            self.seed,
            self.payments,
            self.copies,
            self.handler_runs,
            self.redelivered,
            self.missing,
            self.posted_twice,
            self.total,
            self.expected_total,
            self.elapsed,
        ));
    }
}

/// In ledger postings `(group, seq)` in commit order, how many came after a later one of their
/// group (each reported).
pub fn postings_out_of_order(postings: impl IntoIterator<Item = (String, i32)>) -> usize {
    let mut last: HashMap<String, i32> = HashMap::new();
    let mut violations = 0;
    for (group, seq) in postings {
        if let Some(before) = last.get(&group).filter(|before| **before > seq) {
            super::report(format_args!(
                "group {group}: seq {seq} posted after seq {before}"
            ));
            violations += 1;
        }
        last.insert(group, seq);
    }
    violations
}

/// What an outbox kill run found in the queue, against the ledger.
#[derive(Debug)]
#[allow(dead_code)] // the figures are printed whole
pub struct OutboxFigures {
    pub seed: u64,
    pub committed: usize,
    pub delivered: usize,
    pub lost: usize,
    pub phantoms: usize,
    pub duplicates: usize,
    pub order_violations: usize,
    /// Faults injected between the producers and SQS (0 where none were).
    pub faults: u64,
    pub elapsed: Duration,
}

impl OutboxFigures {
    /// The figures of a run whose ledger holds the events `committed` and whose queue held
    /// `delivered` `(id, account)`, in the order received (each account's events are one FIFO
    /// group, its ids growing in commit order).
    pub fn count(
        seed: u64,
        committed: &[(i64, String)],
        delivered: &[(i64, String)],
        faults: u64,
        elapsed: Duration,
    ) -> Self {
        let committed: HashSet<i64> = committed.iter().map(|(id, _)| *id).collect();
        let distinct: HashSet<i64> = delivered.iter().map(|(id, _)| *id).collect();
        let mut last: HashMap<&str, i64> = HashMap::new();
        let mut order_violations = 0;
        for (id, account) in delivered {
            if last
                .get(account.as_str())
                .is_some_and(|before| before >= id)
            {
                order_violations += 1;
            }
            last.insert(account, *id);
        }
        Self {
            seed,
            committed: committed.len(),
            delivered: delivered.len(),
            lost: committed.difference(&distinct).count(),
            phantoms: distinct.difference(&committed).count(),
            duplicates: delivered.len() - distinct.len(),
            order_violations,
            faults,
            elapsed,
        }
    }
}

/// An event's due time (microseconds since the epoch) and id.
pub type DueId = (u64, i64);

/// Microseconds since the epoch: the clock an event's due time, a `SentTimestamp` (to the
/// millisecond) and a [`Stall`] are read in.
pub fn epoch_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_micros() as u64
}

/// How long a probe's call may take before it counts as the endpoint standing still: several
/// times what one takes on a loaded machine (under 50 ms), and well under the second a scheduled
/// run's lateness is judged by.
const STALL: Duration = Duration::from_millis(250);

/// A window, in microseconds since the epoch, in which a [`StallProbe`]'s call stood still.
#[derive(Debug, Clone, Copy)]
pub struct Stall {
    pub from_us: u64,
    pub to_us: u64,
}

/// A control beside a timing run: a one-message send to a queue of its own every 50 ms, straight
/// to the endpoint, each timed. LocalStack holding a suite's worth of messages (200,000 in other
/// queues, 1.3 GB) was seen to stand still for 2.2 s, every caller's call with it: a send that
/// takes over [`STALL`] marks such a window, so that what the endpoint made late is told apart
/// from what the service under test did.
pub struct StallProbe {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Stall>>,
}

impl StallProbe {
    /// Starts probing through `transport` with sends to `queue_url` (a standard queue).
    pub fn start<T: Transport + Clone>(transport: T, queue_url: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut stalls = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let from_us = epoch_micros();
                    let started = Instant::now();
                    let probe = vec![SendBatchEntry::new("probe", SendMessage::new("probe"))];
                    // A failed send is timed like any other: it is the endpoint's answer time
                    // that is measured.
                    let _ = transport.send_message_batch(&queue_url, probe).await;
                    if started.elapsed() > STALL {
                        stalls.push(Stall {
                            from_us,
                            to_us: epoch_micros(),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                stalls
            }
        });
        Self { stop, task }
    }

    /// Stops probing; answers the stalls seen.
    pub async fn stop(self) -> Vec<Stall> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("the stall probe")
    }
}

/// What a scheduled outbox kill run found: each event's lateness (its `SentTimestamp` less the
/// due time it carries) and the due order of each account's events.
#[derive(Debug)]
#[allow(dead_code)] // the figures are printed whole
pub struct ScheduleFigures {
    /// Events stored before their due time (to the millisecond `SentTimestamp` has).
    pub early: usize,
    /// Events due before a [`Stall`] of the endpoint ended and stored after it began: late by
    /// the endpoint, so left out of the percentiles (and counted, so that a run cannot pass on
    /// a few events).
    pub behind_stalls: usize,
    /// The stalls, in milliseconds, seen by the probe.
    pub stalls_ms: Vec<u64>,
    /// Events the percentiles are of.
    pub measured: usize,
    /// Events received after one of their account due more than 3 ms later.
    pub order_violations: usize,
    /// The first of them: the account, then `(due, id)` received before and after.
    pub first_violation: Option<(String, DueId, DueId)>,
    /// Events received after one of their account due up to 3 ms later: in order or not by the
    /// outbox's milliseconds (ties go in commit order), which the event's own due time, read just
    /// before from a clock of its own, may miss by up to 2 ms and the moment between the reads.
    pub near_ties: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl ScheduleFigures {
    /// The figures of `delivered` `(id, account, due, sent)` in the order received: `due` in
    /// microseconds since the epoch, `sent` SQS's `SentTimestamp` in milliseconds. Each account's
    /// events are one FIFO group, which goes in due order (to the millisecond the outbox keeps),
    /// ties in commit order (the ids grow in commit order).
    ///
    /// An event due before one of `stalls` ended and stored after it began counts in
    /// `behind_stalls`, not in the percentiles.
    pub fn count(delivered: &[(i64, String, u64, u64)], stalls: &[Stall]) -> Self {
        let mut last: HashMap<&str, DueId> = HashMap::new();
        let mut order_violations = 0;
        let mut lateness: Vec<u64> = Vec::with_capacity(delivered.len());
        let mut early = 0;
        let mut first_violation = None;
        let mut near_ties = 0;
        let mut behind_stalls = 0;
        for (id, account, due, sent) in delivered {
            if let Some(before) = last.get(account.as_str()) {
                if before.0 > due + 3_000 {
                    order_violations += 1;
                    first_violation.get_or_insert((account.clone(), *before, (*due, *id)));
                } else if *before >= (*due, *id) {
                    near_ties += 1;
                }
            }
            last.insert(account, (*due, *id));
            if *sent < due / 1_000 {
                early += 1;
            }
            let sent_us = sent * 1_000;
            if stalls
                .iter()
                .any(|stall| *due < stall.to_us && sent_us >= stall.from_us)
            {
                behind_stalls += 1;
                continue;
            }
            lateness.push(sent_us.saturating_sub(*due));
        }
        lateness.sort_unstable();
        let at = |quantile: f64| {
            let index = ((lateness.len() as f64 * quantile).ceil() as usize).saturating_sub(1);
            Duration::from_micros(lateness.get(index).copied().unwrap_or(0))
        };
        Self {
            early,
            behind_stalls,
            stalls_ms: stalls
                .iter()
                .map(|stall| (stall.to_us - stall.from_us) / 1_000)
                .collect(),
            measured: lateness.len(),
            order_violations,
            first_violation,
            near_ties,
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// What a run with an inbox sent: every payment once, then its extra copies.
pub struct SentPayments {
    /// Each payment's group and number in its group, in the order sent.
    pub payments: Vec<(String, u32)>,
    /// The ledger's total once every payment is posted exactly once.
    pub expected_total: i64,
    /// How many extra copies went out.
    pub copies: usize,
}

/// A payment's amount: unique per group and number, so the ledger's total shows a payment posted
/// twice or never.
pub fn amount(group: &str, seq: u32) -> i64 {
    i64::from(seq) * 100 + group[1..].parse::<i64>().unwrap()
}

/// Sends `per_group` payments to each of `groups` groups (`g00`, `g01`, ..) through `publisher`,
/// the groups interleaved, then 1–3 extra copies of each (drawn from `random`), in the same
/// order. On FIFO (`fifo`) odd copies reuse the original's deduplication id, dropped by SQS
/// within its five minutes, and even ones have their own, as a copy sent after the window would
/// be stored. A payment's body is `{"group", "seq", "id", "amount"}`, its id `{group}-{seq}`.
pub async fn send_payments_with_copies(
    publisher: &Publisher,
    fifo: bool,
    groups: u32,
    per_group: u32,
    random: &mut SplitMix,
) -> SentPayments {
    let payments: Vec<(String, u32)> = (0..per_group)
        .flat_map(|seq| (0..groups).map(move |group| (format!("g{group:02}"), seq)))
        .collect();
    let expected_total = payments
        .iter()
        .map(|(group, seq)| amount(group, *seq))
        .sum();
    let extra: Vec<u32> = payments
        .iter()
        .map(|_| 1 + (random.next() % 3) as u32)
        .collect();
    let message = |group: &str, seq: u32, copy: u32| {
        let id = format!("{group}-{seq}");
        let message = publisher.message(&serde_json::json!({
            "group": group, "seq": seq, "id": id, "amount": amount(group, seq),
        }));
        if !fifo {
            return message;
        }
        let dedup = if copy % 2 == 1 {
            id
        } else {
            format!("{id}-copy-{copy}")
        };
        message.group_id(group.to_owned()).dedup_id(dedup)
    };
    for sent in publisher
        .send_batch(payments.iter().map(|(group, seq)| message(group, *seq, 0)))
        .await
    {
        sent.expect("send a payment");
    }
    let copies: Vec<(String, u32, u32)> = payments
        .iter()
        .zip(&extra)
        .flat_map(|((group, seq), extra)| (1..=*extra).map(move |copy| (group.clone(), *seq, copy)))
        .collect();
    for sent in publisher
        .send_batch(
            copies
                .iter()
                .map(|(group, seq, copy)| message(group, *seq, *copy)),
        )
        .await
    {
        sent.expect("send a copy");
    }
    SentPayments {
        payments,
        expected_total,
        copies: copies.len(),
    }
}
