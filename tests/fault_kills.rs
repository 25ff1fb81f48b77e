//! The fault suite's process faults, on LocalStack: a real consumer process
//! (`examples/fault_consumer.rs`) killed with SIGKILL, and stopped with SIGTERM under load.
//!
//! - **Kills.** 2,000 messages over 20 FIFO groups; the consumer is killed with SIGKILL at five
//!   seeded random points and restarted each time. In the end every message was handled at least
//!   once, and in each group the first completions come in the order sent. The same on a
//!   standard queue: nothing lost. The handler writes its `done` line (synced) before the engine
//!   deletes, so a kill between the two shows as a re-delivery, which the test counts and prints.
//! - **Kills with an inbox** (issue 23): the same five kills over 2,000 payments in 20 FIFO groups,
//!   and 2,000 on a standard queue, each payment also sent 1–3 extra times (on FIFO, some copies
//!   with the original's deduplication id, dropped by SQS within its five minutes, and some with
//!   their own, as copies sent after the window are stored), the consumer posting each to a ledger
//!   table in PostgreSQL inside its inbox: every payment posted exactly once (the ledger's total is
//!   the expected total, no payment twice), and on FIFO each group's postings in the order sent.
//! - **Kills of an outbox** (issue 23): a producer (`examples/outbox_producer.rs`) writes 10,000
//!   events over 50 accounts, each in a transaction with its ledger row, one in ten rolled back
//!   on purpose, through the outbox on PostgreSQL; a second replica only relays. The producer is
//!   killed with SIGKILL at five seeded points and the replica once, while the network-fault
//!   proxy between both and LocalStack cuts requests and answers, refuses connections and answers
//!   500 in bursts. In the FIFO queue: every committed event once (0 lost, 0 duplicates stored),
//!   no rolled-back one (0 phantoms), each account's events in commit order. The same with the
//!   outbox on SQLite (5,000 events; one process, so no second replica). And scheduled (issue
//!   39): 2,000 events each due 0–20 s ahead, without the network faults, the writer killed once
//!   while it writes and four times while the events fall due (it only relays by then), the
//!   replica once between two of those: none lost, stored twice or before its due time, each
//!   account's in due order, p99 lateness ≤ 1 s (this test runs alone, the others two at a time:
//!   see `MACHINE`; events LocalStack itself held up, seen by a probe beside the run, are counted
//!   apart: see `StallProbe`).
//! - **Kills with an inbox on SQLite**: the inbox's kill runs again with the embedded store:
//!   every payment posted exactly once; on FIFO the order is printed, not asserted (LocalStack's
//!   release deviation, at the test).
//! - **Rolling restarts** (issue 34, N2): six consumer processes, one after another, each stopped
//!   with SIGTERM while the head of each FIFO group runs a long job and the rest of the group
//!   waits unstarted behind it (each stop gives back six receives SQS counts); then a process
//!   whose handler fails each job's first call, on a queue whose `RedrivePolicy` is the backstop
//!   the library sets (3 attempts + 10): nothing is dead-lettered, each job completes at its
//!   second call, each group in order.
//! - **Stop under load**, on FIFO and on a standard queue. SIGTERM while handlers run, messages
//!   wait unstarted behind them and (on FIFO, every group being held) long polls of 10 s are
//!   pending (the consumer's log shows the stop waiting for one, asserted on FIFO): the process
//!   exits within its 2 s stop budget; the running handlers finish and are deleted, their outputs
//!   are in the output queue; within a second of the exit every other message is visible or
//!   taken by a long poll the stop gave up (LocalStack goes on with one and hands it what the stop
//!   released), and within the receive's visibility (`RECEIVE_VISIBILITY_TIMEOUT`, 10 s) every
//!   one is visible (the queue's visibility timeout is 60 s, so a message held past 5 s and not
//!   released would stay hidden); a restarted consumer handles nothing that completed before the
//!   signal again, and sees each message received at most twice more (the release, and the poll
//!   given up). LocalStack applies a release (visibility 0) at once, not on its one-second timer
//!   (which only returns messages whose visibility ran out).
//!
//! The consumer is the example binary, run as a person runs it (`SqsBroker::from_env` with
//! `AWS_ENDPOINT_URL`), with its output in files beside its journal. `FAULT_SEED=N` replays a
//! run's kill points. Without LocalStack the tests say they were skipped; under `CI=true` they
//! fail.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::backend::Backend;
use common::kills::{self, InboxFigures, OutboxFigures, ScheduleFigures, SplitMix, StallProbe};
use common::process::{example_binary, sqs_at};
use rust_stream::aws::AwsTransport;
use rust_stream::model::large_payload::LargePayloads;
use rust_stream::operations::Redrive;
use rust_stream::sqs::{SqsBroker, SqsQueue};

/// The consumer process under test.
const EXAMPLE: &str = "fault_consumer";

/// How long any one phase of a run (a kill point reached, a queue drained, a process exited) may
/// take before the test fails, showing what it saw.
const PATIENCE: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

/// The machine, which each test shares with one other (the harness runs two at a time on two
/// cores), except the scheduled outbox's: its p99 lateness is the relay's when it runs alone (0.11 s
/// in a run) but whatever stalls the test beside it causes otherwise (0.3 s beside the 10,000-event
/// outbox run on an idle machine, 1.18 s in a CI run), so it takes the machine to itself. (What
/// LocalStack's own stalls hold up, which no lock prevents, its `StallProbe` tells apart.)
static MACHINE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_consumer_killed_five_times_loses_nothing_and_keeps_each_groups_order() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let figures = kill_run(&backend, "kills.fifo", 20, 100).await;
    figures.print("FIFO");
    assert_eq!(figures.lost, 0, "messages lost");
    assert_eq!(figures.order_violations, Some(0), "order violations");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_queue_consumer_killed_five_times_loses_nothing() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let figures = kill_run(&backend, "kills", 20, 100).await;
    figures.print("standard");
    assert_eq!(figures.lost, 0, "messages lost");
}

/// One job in ten carries a body of 300 KB, which goes through LocalStack's S3: a killed consumer
/// loses none of them (a pointer it could not resolve would not decode, and never be done) and
/// keeps each group's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_consumer_of_large_payloads_killed_five_times_loses_nothing_and_keeps_order() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let figures = kill_run_with(&backend, "large-kills.fifo", 20, 50, true, false).await;
    figures.print("FIFO, one job in ten through S3");
    assert_eq!(figures.lost, 0, "messages lost");
    assert_eq!(figures.order_violations, Some(0), "order violations");
}

/// One job in ten through S3 as above, on a standard queue, and one in twenty of those large a
/// poison job, which fails until it comes back as a redriven dead letter: dead-lettered (its
/// object written again), redriven while the kills go on (again), and handled at last. Nothing is
/// lost, the poison jobs included, counted by job rather than by message id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_of_large_payloads_killed_five_times_with_a_redrive_mid_run_loses_nothing() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let figures = kill_run_with(&backend, "large-redrive-kills", 20, 50, true, true).await;
    figures.print("standard, one job in ten through S3, redriven mid-run");
    assert_eq!(figures.lost, 0, "jobs lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_payments_with_copies_killed_five_times_post_exactly_once_in_order() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let Some(postgres) = rust_stream::testing::live_postgres_url("process kills with an inbox")
    else {
        return;
    };
    let figures = inbox_kill_run(
        &backend,
        Db::Postgres(&postgres),
        "inbox-kills.fifo",
        20,
        100,
    )
    .await;
    figures.print("FIFO on PostgreSQL");
    figures.assert_exactly_once();
    figures.assert_in_order();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_payments_with_copies_killed_five_times_post_exactly_once() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let Some(postgres) = rust_stream::testing::live_postgres_url("process kills with an inbox")
    else {
        return;
    };
    let figures = inbox_kill_run(&backend, Db::Postgres(&postgres), "inbox-kills", 20, 100).await;
    figures.print("standard on PostgreSQL");
    figures.assert_exactly_once();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_payments_with_copies_killed_five_times_post_exactly_once_on_sqlite() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let figures = inbox_kill_run(&backend, Db::Sqlite, "inbox-lite-kills.fifo", 20, 100).await;
    figures.print("FIFO on SQLite");
    figures.assert_exactly_once();
    // Named for what it asserts (issue 34, item 4): the order is printed, not asserted, since one
    // run of five showed 2 postings out of their group's order, most likely LocalStack's: SQLite's one writer at a time keeps messages held longer
    // than PostgreSQL does, so a kill leaves more of a group in flight, and LocalStack 4.13.1
    // hands out a message of a group that became visible again while an earlier one is still in
    // flight (`tests/conformance.rs`, releasing_one_message_while_others_of_its_group_are_in_flight),
    // which Amazon SQS and the in-process account never do. Which out-of-order postings that
    // deviation caused cannot be told from the journal, so none is filtered out; the order on a
    // conforming broker is asserted by `tests/fault_kills_in_process.rs` (in memory and on
    // PostgreSQL).
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_payments_with_copies_killed_five_times_post_exactly_once_on_sqlite() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let figures = inbox_kill_run(&backend, Db::Sqlite, "inbox-lite-kills", 20, 100).await;
    figures.print("standard on SQLite");
    figures.assert_exactly_once();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_events_killed_five_times_and_cut_from_sqs_arrive_once_in_commit_order() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let Some(postgres) = rust_stream::testing::live_postgres_url("process kills of an outbox")
    else {
        return;
    };
    let (figures, _) =
        outbox_kill_run(&backend, Db::Postgres(&postgres), 10_000, 50, None, true).await;
    common::report(format_args!("{figures:?}"));
    assert_eq!(figures.lost, 0, "committed events never delivered");
    assert_eq!(figures.phantoms, 0, "rolled-back events delivered");
    assert_eq!(figures.duplicates, 0, "events stored twice");
    assert_eq!(
        figures.order_violations, 0,
        "events out of their account's commit order"
    );
    assert!(figures.faults > 0, "the proxy cut nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_events_on_sqlite_killed_five_times_and_cut_from_sqs_arrive_once_in_commit_order() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    let (figures, _) = outbox_kill_run(&backend, Db::Sqlite, 5_000, 50, None, true).await;
    common::report(format_args!("on SQLite: {figures:?}"));
    assert_eq!(figures.lost, 0, "committed events never delivered");
    assert_eq!(figures.phantoms, 0, "rolled-back events delivered");
    assert_eq!(figures.duplicates, 0, "events stored twice");
    assert_eq!(
        figures.order_violations, 0,
        "events out of their account's commit order"
    );
    assert!(figures.faults > 0, "the proxy cut nothing");
}

/// The outbox's kill run with every event scheduled 0–20 s ahead (2,000 events, about 30 s), the
/// writer killed once while it writes and four times while the events fall due, the replica once
/// between those: besides the outbox's promises, none stored before it is due, each account's in
/// due order (not commit order, which `figures.order_violations` counts), and p99 lateness within
/// a second.
/// Without the network faults: the relay's retries through them make its lateness seconds (p99
/// 5.6 s in a run), which measures the faults, not the schedule. For the same reason an event
/// due while LocalStack itself stood still (a probe's send to another queue took over 250 ms:
/// seen for 2.2 s once it held 200,000 messages, as it may late in a CI run; the spread kills'
/// 0.78 s p99 in one CI run was likely that) is counted apart, not in the percentiles; at least
/// half the events must be measured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_outbox_events_killed_five_times_arrive_once_in_due_order_within_a_second() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    // Alone: its lateness measures the relay, not the test beside it (see `MACHINE`).
    let _machine = MACHINE.write().await;
    let Some(postgres) =
        rust_stream::testing::live_postgres_url("process kills of a scheduled outbox")
    else {
        return;
    };
    let delay_max = Duration::from_secs(20);
    let (figures, schedule) = outbox_kill_run(
        &backend,
        Db::Postgres(&postgres),
        2_000,
        50,
        Some(delay_max),
        false,
    )
    .await;
    let schedule = schedule.expect("a scheduled run's figures");
    common::report(format_args!("scheduled: {figures:?}\n{schedule:?}"));
    assert_eq!(figures.lost, 0, "committed events never delivered");
    assert_eq!(figures.phantoms, 0, "rolled-back events delivered");
    assert_eq!(figures.duplicates, 0, "events stored twice");
    assert_eq!(schedule.early, 0, "events stored before they were due");
    assert!(
        schedule.measured * 2 >= figures.delivered,
        "LocalStack stood still for too much of the run to measure its lateness: {schedule:?}"
    );
    assert_eq!(
        schedule.order_violations, 0,
        "events out of their account's due order"
    );
    assert!(
        schedule.p99 <= Duration::from_secs(1),
        "p99 lateness {:?} over a second",
        schedule.p99
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_on_fifo_finishes_handlers_releases_the_rest_repeats_nothing() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    stop_run(&backend, "stop.fifo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_on_standard_finishes_handlers_releases_the_rest_repeats_nothing() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    stop_run(&backend, "stop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_processes_restarted_six_times_during_long_heads_then_failing_each_once_dead_letter_nothing(
) {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let _machine = MACHINE.read().await;
    restart_run(&backend).await;
}

// ---------------------------------------------------------------------------------------------
// Rolling restarts of processes
// ---------------------------------------------------------------------------------------------

/// Six consumer processes one after another, each stopped (SIGTERM, a stop budget of 2 s) while
/// the head of each group runs a long job and the rest of the group waits behind it, received
/// and given back unstarted; then a seventh process whose handler fails each job's first call.
/// The subscription allows 3 attempts and the queue's `RedrivePolicy` is the backstop the
/// library sets (3 + 10 receives), so SQS moves nothing: the dead-letter queue stays empty only
/// if the consumer counts attempts made, not the receives earlier processes gave back.
async fn restart_run(backend: &Backend<AwsTransport>) {
    const RESTARTS: usize = 6;
    const ATTEMPTS: u32 = 3;
    let (groups, per_group) = (2, 5);
    let total = (groups * per_group) as usize;
    let endpoint =
        rust_stream::testing::live_endpoint("process restarts").expect("checked by live()");
    let example = example_binary(EXAMPLE);
    let dir = RunDir::new(&backend.name("restarts"));
    let dead_letter = backend.queue("restarts-dlq.fifo", &[]).await;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": backend.arn(&dead_letter).await,
        "maxReceiveCount": rust_stream::retry::redrive_backstop(ATTEMPTS).to_string(),
    })
    .to_string();
    let input = backend
        .queue(
            "restarts.fifo",
            &[("VisibilityTimeout", "30"), ("RedrivePolicy", &redrive)],
        )
        .await;
    backend.queue("restarts-done.fifo", &[]).await;
    let sent = send_jobs(backend, &backend.name("restarts.fifo"), groups, per_group).await;
    let journal = Journal(dir.path.join("journal"));
    let settings = |delay_ms: u64, fail_first: u32| {
        [
            ("FAULT_QUEUE", backend.name("restarts.fifo")),
            ("FAULT_OUTPUT_QUEUE", backend.name("restarts-done.fifo")),
            ("FAULT_DEAD_LETTER_QUEUE", backend.name("restarts-dlq.fifo")),
            ("FAULT_ATTEMPTS", ATTEMPTS.to_string()),
            ("FAULT_JOURNAL", journal.0.display().to_string()),
            ("FAULT_CONCURRENCY", groups.to_string()),
            ("FAULT_WAIT_SECONDS", "1".to_owned()),
            // Half of it starts what the stop holds (nothing can start behind a running head),
            // then the heads are cancelled and everything is given back.
            ("FAULT_SHUTDOWN_SECONDS", "2".to_owned()),
            ("FAULT_HANDLER_DELAY_MS", delay_ms.to_string()),
            ("FAULT_FAIL_FIRST_CALLS", fail_first.to_string()),
        ]
    };

    let heads = |records: &[Record]| {
        records
            .iter()
            .filter(|record| record.event == Event::Start && record.seq == 0)
            .count()
    };
    for restart in 0..RESTARTS {
        // An hour's job: it runs until the stop cancels it.
        let settings = settings(3_600_000, 0);
        let mut consumer = Consumer::start(&example, &endpoint, &settings, &dir, restart);
        wait_for(&mut consumer, "both heads running", || {
            (heads(&journal.read()) >= groups as usize * (restart + 1)).then_some(())
        })
        .await;
        let status = consumer.terminate().await;
        assert!(status.success(), "{status}:\n{}", consumer.log());
    }
    let restarted = journal.read();
    assert!(
        restarted
            .iter()
            .all(|record| record.event == Event::Start && record.seq == 0),
        "the restarted processes started only the heads, and finished none: {restarted:?}"
    );

    let mut deployed = Consumer::start(&example, &endpoint, &settings(0, 1), &dir, RESTARTS);
    // Until every job is done or dead-lettered (a job moved too early never completes).
    let deadline = Instant::now() + PATIENCE;
    loop {
        let done = done_ids(&journal.read()).len();
        let (dead, _, _) = backend.left(&dead_letter).await;
        if done + dead as usize >= total {
            break;
        }
        if let Some(status) = deployed.child().try_wait().expect("the consumer's status") {
            panic!("the consumer exited ({status}):\n{}", deployed.log());
        }
        assert!(
            Instant::now() < deadline,
            "not every job done or dead-lettered within {PATIENCE:?}:\n{}",
            deployed.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until_empty(backend, &input).await;
    let status = deployed.terminate().await;
    assert!(status.success(), "{status}:\n{}", deployed.log());

    let (visible, in_flight, delayed) = backend.left(&dead_letter).await;
    assert_eq!(
        (visible, in_flight, delayed),
        (0, 0, 0),
        "nothing dead-lettered: every job failed once of its {ATTEMPTS} attempts"
    );
    let after: Vec<Record> = journal.read()[restarted.len()..].to_vec();
    // Per job, the deploy's calls: (receive count, done) of each.
    let mut calls: BTreeMap<(String, u32), Vec<(u32, bool)>> = BTreeMap::new();
    let mut done_at: BTreeMap<(String, u32), u32> = BTreeMap::new();
    for record in &after {
        let job = (record.group.clone(), record.seq);
        match record.event {
            Event::Start => calls
                .entry(job)
                .or_default()
                .push((record.receive_count, false)),
            Event::Done => {
                *done_at.entry(job.clone()).or_default() += 1;
                if let Some(last) = calls.entry(job).or_default().last_mut() {
                    last.1 = true;
                }
            }
        }
    }
    for (_, job) in &sent {
        let made = &calls[job];
        assert_eq!(
            made.iter().map(|(_, done)| *done).collect::<Vec<_>>(),
            [false, true],
            "{job:?}: one failed call, then one that completed: {made:?}"
        );
        assert_eq!(done_at[job], 1, "{job:?} completed once");
    }
    // SQS counted the receives the stops gave back: more than the attempts, for the heads and
    // the jobs behind them alike, or the case proved nothing.
    let given_back: BTreeMap<&(String, u32), u32> = calls
        .iter()
        .map(|(job, made)| (job, made[0].0 - 1))
        .collect();
    let over = given_back
        .values()
        .filter(|receives| **receives >= ATTEMPTS)
        .count();
    assert!(
        given_back[&("g00".to_owned(), 0)] >= ATTEMPTS && over > groups as usize,
        "the restarts gave back more receives than the attempts allow, heads and jobs behind \
         them: {given_back:?}"
    );
    let violations = order_violations(&journal.read(), &sent);
    assert_eq!(violations, 0, "order violations");
    common::report(format_args!(
        "process restarts: {RESTARTS} processes stopped during long heads, then each of {total} \
         jobs failed once: nothing dead-lettered; receives given back before the deploy, by job: \
         {given_back:?}"
    ));
    dir.remove();
}

// ---------------------------------------------------------------------------------------------
// The outbox's kill run
// ---------------------------------------------------------------------------------------------

/// When an outbox run kills a process: once this many events are committed, or this long after
/// the writer first started.
#[derive(Debug)]
enum KillAt {
    Committed(usize),
    Elapsed(Duration),
}

/// Which process of an outbox run is killed: the writer (which relays too) or the replica (which
/// only relays).
#[derive(Debug)]
enum Victim {
    Writer,
    Replica,
}

async fn outbox_kill_run(
    backend: &Backend<AwsTransport>,
    db: Db<'_>,
    events: i64,
    accounts: i64,
    delay_max: Option<Duration>,
    faults: bool,
) -> (OutboxFigures, Option<ScheduleFigures>) {
    use common::proxy::{Fault, Proxy};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const KILLS: usize = 5;
    /// Writing 10,000 transactions through bursts of faults takes a while on a loaded machine.
    const WRITE_PATIENCE: Duration = Duration::from_secs(300);
    let started = Instant::now();
    let endpoint = rust_stream::testing::live_endpoint("process kills of an outbox")
        .expect("checked by live()");
    let example = example_binary("outbox_producer");
    let seed = kills::seed("process kills of an outbox");
    let mut random = SplitMix(seed);
    let dir = RunDir::new(&backend.name("outbox-kills"));
    let queue = backend.queue("outbox-kills.fifo", &[]).await;
    // A database of the run's own: a schema on PostgreSQL, a file with SQLite.
    let (pool, database, schema) = match db {
        Db::Postgres(postgres) => {
            let schema = backend.name("outbox_kills").replace('-', "_");
            let admin = sqlx::PgPool::connect(postgres)
                .await
                .expect("connect to the test's PostgreSQL");
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                .execute(&admin)
                .await
                .expect("create the run's schema");
            let separator = if postgres.contains('?') { '&' } else { '?' };
            let url = format!("{postgres}{separator}options[search_path]={schema}");
            let pool = sqlx::PgPool::connect(&url)
                .await
                .expect("connect in the run's schema");
            (
                LedgerPool::Postgres(pool),
                ("OUTBOX_POSTGRES_URL", url),
                Some((admin, schema)),
            )
        }
        Db::Sqlite => {
            let path = dir.path.join("outbox.db");
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
            let pool = sqlx::SqlitePool::connect_with(options)
                .await
                .expect("open the run's SQLite file");
            (
                LedgerPool::Sqlite(pool),
                ("OUTBOX_SQLITE_PATH", path.display().to_string()),
                None,
            )
        }
    };
    pool.execute(
        "CREATE TABLE outbox_ledger (id bigint PRIMARY KEY, account text NOT NULL)".into(),
    )
    .await;

    let proxy = Arc::new(Proxy::start(&endpoint).await);
    // A scheduled run's lateness is judged against what LocalStack itself held up.
    let probe = match delay_max {
        Some(_) => {
            let probe_queue = backend.queue("outbox-kills-probe", &[]).await;
            Some(StallProbe::start(backend.transport.clone(), probe_queue))
        }
        None => None,
    };
    let settings = |write: bool| {
        vec![
            (database.0, database.1.clone()),
            ("OUTBOX_QUEUE", backend.name("outbox-kills.fifo")),
            ("OUTBOX_EVENTS", events.to_string()),
            ("OUTBOX_ACCOUNTS", accounts.to_string()),
            ("OUTBOX_WRITE", if write { "1" } else { "0" }.to_owned()),
            (
                "OUTBOX_DELAY_MAX_MS",
                delay_max.map_or(0, |max| max.as_millis()).to_string(),
            ),
            ("OUTBOX_DELAY_SEED", (seed >> 1).to_string()),
        ]
    };
    // Bursts of faults between the producers and SQS, for as long as the run writes.
    let cutting = Arc::new(AtomicBool::new(faults));
    let faults = tokio::spawn({
        let (proxy, cutting) = (proxy.clone(), cutting.clone());
        let mut random = SplitMix(seed ^ 0x5eed);
        async move {
            let kinds = [
                Fault::CutResponse,
                Fault::CutRequest,
                Fault::Refuse,
                Fault::ServerError,
                Fault::Throttle,
            ];
            let mut burst = 0;
            while cutting.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(300 + random.next() % 700)).await;
                proxy.set(Some(kinds[burst % kinds.len()]));
                tokio::time::sleep(Duration::from_millis(100 + random.next() % 300)).await;
                proxy.set(None);
                burst += 1;
            }
        }
    });
    let committed_count = || async {
        let (rows, _) = pool
            .pair("SELECT count(*), CAST(0 AS BIGINT) FROM outbox_ledger".into())
            .await;
        rows as usize
    };
    let expected = (0..events).filter(|id| id % 10 != 7).count();
    // A second relaying replica, where the database is shared: SQLite's is one process's.
    let shared = matches!(db, Db::Postgres(_));
    let mut plan = Vec::new();
    match delay_max {
        // The writer killed while it writes, and the replica with it once.
        None => {
            let points = random.kill_points(200, expected - 800, KILLS);
            for (kill, point) in points.into_iter().enumerate() {
                plan.push((KillAt::Committed(point), Victim::Writer));
                if kill == 2 && shared {
                    plan.push((KillAt::Committed(point), Victim::Replica));
                }
            }
        }
        // Scheduled, the writer is killed once while it writes, then while the events fall due
        // (it only relays by then): the kills the lateness promise is about. The replica is
        // killed once, halfway between two of them, so one relay always runs, as in a rolling
        // restart.
        Some(max) => {
            let first = random.kill_points(200, expected / 2, 1)[0];
            plan.push((KillAt::Committed(first), Victim::Writer));
            let step = max / KILLS as u32;
            for kill in 1..KILLS {
                let jitter = random.next() % (step.as_millis() as u64 / 2).max(1);
                let at = step * kill as u32 + Duration::from_millis(jitter);
                plan.push((KillAt::Elapsed(at), Victim::Writer));
                if kill == 2 && shared {
                    plan.push((KillAt::Elapsed(at + step / 2), Victim::Replica));
                }
            }
        }
    }
    common::report(format_args!("process kills of an outbox: {plan:?}"));
    let writing = Instant::now();
    let mut writer = Consumer::start(&example, &proxy.url(), &settings(true), &dir, 0);
    let mut replica =
        shared.then(|| Consumer::start(&example, &proxy.url(), &settings(false), &dir, 100));
    let mut restarts = 0;
    for (when, victim) in plan {
        match when {
            KillAt::Committed(point) => {
                let deadline = Instant::now() + WRITE_PATIENCE;
                while committed_count().await < point {
                    assert!(
                        Instant::now() < deadline,
                        "not {point} events committed within {WRITE_PATIENCE:?}:\n{}",
                        writer.log()
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                tokio::time::sleep(Duration::from_millis(random.next() % 50)).await;
            }
            KillAt::Elapsed(at) => {
                tokio::time::sleep_until(tokio::time::Instant::from_std(writing + at)).await;
            }
        }
        restarts += 1;
        match victim {
            Victim::Writer => {
                writer.kill();
                writer = Consumer::start(&example, &proxy.url(), &settings(true), &dir, restarts);
            }
            Victim::Replica => {
                if let Some(relaying) = replica.take() {
                    relaying.kill();
                    let n = 100 + restarts;
                    replica = Some(Consumer::start(
                        &example,
                        &proxy.url(),
                        &settings(false),
                        &dir,
                        n,
                    ));
                }
            }
        }
    }
    // The writer exits once everything is written and the outbox is empty.
    let deadline = Instant::now() + WRITE_PATIENCE;
    let status = loop {
        if let Some(status) = writer.child().try_wait().expect("the writer's status") {
            writer.child = None;
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the writer did not finish within {WRITE_PATIENCE:?}:\n{}",
            writer.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stalls = match probe {
        Some(probe) => probe.stop().await,
        None => Vec::new(),
    };
    cutting.store(false, Ordering::SeqCst);
    faults.await.expect("the fault bursts");
    proxy.set(None);
    assert!(status.success(), "{status}:\n{}", writer.log());
    if let Some(mut relaying) = replica {
        let status = relaying.terminate().await;
        assert!(status.success(), "{status}:\n{}", relaying.log());
    }

    let ledger = pool
        .events("SELECT id, account FROM outbox_ledger ORDER BY id".into())
        .await;
    assert_eq!(
        ledger.len(),
        expected,
        "the ledger holds every committed event"
    );
    let received = backend.take_all(&queue, ledger.len()).await;
    let delivered: Vec<(i64, String)> = received
        .iter()
        .map(|message| {
            let event: serde_json::Value = serde_json::from_str(&message.body).expect("an event");
            (
                event["id"].as_i64().expect("an id"),
                event["account"].as_str().expect("an account").to_owned(),
            )
        })
        .collect();
    let schedule = delay_max.map(|_| {
        let delivered: Vec<(i64, String, u64, u64)> = received
            .iter()
            .zip(&delivered)
            .map(|(message, (id, account))| {
                let event: serde_json::Value =
                    serde_json::from_str(&message.body).expect("an event");
                let sent = message
                    .attributes
                    .number(rust_stream::model::wire::SystemAttribute::SentTimestamp)
                    .expect("a SentTimestamp");
                let due = event["due_us"].as_u64().expect("a due time");
                (*id, account.clone(), due, sent)
            })
            .collect();
        ScheduleFigures::count(&delivered, &stalls)
    });
    let faults = proxy.counts();
    let faults = Fault::ALL
        .iter()
        .map(|fault| faults.faults_of(*fault))
        .sum();
    let figures = OutboxFigures::count(seed, &ledger, &delivered, faults, started.elapsed());
    if let Some((admin, schema)) = schema {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
            .execute(&admin)
            .await
            .expect("drop the run's schema");
    }
    dir.remove();
    (figures, schedule)
}

// ---------------------------------------------------------------------------------------------
// The stop run
// ---------------------------------------------------------------------------------------------

/// Sends jobs, runs the consumer until some are done and several handlers run, sends SIGTERM and
/// checks what the exit left in the queues; then restarts it to the end and checks it repeated
/// nothing.
async fn stop_run(backend: &Backend<AwsTransport>, base: &str) {
    let endpoint =
        rust_stream::testing::live_endpoint("stop under load").expect("checked by live()");
    let example = example_binary(EXAMPLE);
    let fifo = base.ends_with(".fifo");
    let stem = base.trim_end_matches(".fifo");
    let output_base = if fifo {
        format!("{stem}-done.fifo")
    } else {
        format!("{stem}-done")
    };
    let dir = RunDir::new(&backend.name(stem));
    // A visibility timeout far longer than the receive's 10 s the promise allows: a held message
    // the consumer extended and did not release stays hidden well past it.
    let input = backend.queue(base, &[("VisibilityTimeout", "60")]).await;
    let output = backend.queue(&output_base, &[]).await;
    let (groups, per_group) = (3, 20);
    let sent = send_jobs(backend, &backend.name(base), groups, per_group).await;
    let total = sent.len();
    let journal = Journal(dir.path.join("journal"));

    // Held messages wait unstarted: on FIFO a receive's run of a group waits behind its first
    // message in the group's lane, and a poller long-polls since no group is free. On a standard
    // queue two handler slots run while up to twenty more messages wait.
    let concurrency = if fifo { "4" } else { "2" };
    let settings = [
        ("FAULT_QUEUE", backend.name(base)),
        ("FAULT_OUTPUT_QUEUE", backend.name(&output_base)),
        ("FAULT_JOURNAL", journal.0.display().to_string()),
        ("FAULT_HANDLER_DELAY_MS", "300".to_owned()),
        ("FAULT_CONCURRENCY", concurrency.to_owned()),
        ("FAULT_POLLERS", "2".to_owned()),
        ("FAULT_BATCH_SIZE", "10".to_owned()),
        ("FAULT_WAIT_SECONDS", "10".to_owned()),
        // A stop starts held messages for the first half of its budget (1 s, three or so 300 ms
        // handlers a slot) and cancels nothing that started in it (the rest of the budget is
        // longer than a handler); with up to ten messages held a group (a slot on a standard
        // queue holds a receive's worth), some are still held and unstarted then, and given back.
        ("FAULT_SHUTDOWN_SECONDS", "2".to_owned()),
    ];
    let mut first = Consumer::start(&example, &endpoint, &settings, &dir, 1);
    // Signalled once some work is done and several handlers are running (start lines without
    // done lines): a handler sleeps 300 ms, so those still run when the signal lands.
    let running_at_signal = wait_for(&mut first, "handlers running after some work done", || {
        let records = journal.read();
        let running = running(&records);
        (done_ids(&records).len() >= 10 && running.len() >= 2).then_some(running)
    })
    .await;
    let signalled = Instant::now();
    let status = first.terminate().await;
    let exited = Instant::now();
    assert!(
        status.success(),
        "the consumer exits 0 after SIGTERM ({status}):\n{}",
        first.log()
    );
    // The 2 s budget, and room for the process to start and exit on a loaded machine.
    assert!(
        exited - signalled <= Duration::from_secs(3),
        "the consumer exits within its stop budget, whatever its long polls: {:?}\n{}",
        exited - signalled,
        first.log()
    );
    // The process has exited: its journal is complete.
    let left = (total - done_ids(&journal.read()).len()) as u64;
    // Read until it holds, for a second (LocalStack counts a message it is handing out as
    // neither visible nor in flight for an instant).
    let at_once = {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let load = queue_load(backend, &input).await;
            if load.visible + load.in_flight == left || Instant::now() >= deadline {
                break load;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let hidden_bound = rust_stream::RECEIVE_VISIBILITY_TIMEOUT + Duration::from_secs(2);
    let (loads, settled_after) = settled_within(backend, &input, hidden_bound).await;
    // A receive in flight at the signal: the stop logs that it waits for one (an `info` line of
    // the engine's, "waiting for the receive in flight", with how many).
    let pending_polls: Vec<String> = first
        .full_log()
        .lines()
        .filter(|line| line.contains("waiting for the receive in flight"))
        .map(str::to_owned)
        .collect();
    if fifo {
        // Every group is held, so the pollers, which have room, long-poll for 10 s and get
        // nothing: a poll is pending at any moment, the signal's too.
        assert!(
            !pending_polls.is_empty(),
            "a long poll was pending at SIGTERM:\n{}",
            first.log()
        );
    }

    let before = journal.read();
    let completed_before: HashSet<String> = done_ids(&before);
    let unfinished = running(&before);
    assert!(
        unfinished.is_empty(),
        "handlers running at SIGTERM finish before the process exits; still running: {unfinished:?}"
    );
    for id in &running_at_signal {
        assert!(
            completed_before.contains(id),
            "{id} was running at SIGTERM and has no done line"
        );
    }
    assert_eq!(left, (total - completed_before.len()) as u64);
    assert_eq!(
        (at_once.visible + at_once.in_flight, at_once.delayed),
        (left, 0),
        "right after exit every completed message is deleted, every other one visible or taken \
         by a long poll the stop gave up: {at_once:?}"
    );
    assert_eq!(
        loads,
        QueueLoad {
            visible: left,
            in_flight: 0,
            delayed: 0
        },
        "within the receive's visibility of exit every message not completed is visible \
         (last reading {settled_after:?} after exit)"
    );
    let outputs: HashSet<String> = backend
        .take_all(&output, 0)
        .await
        .iter()
        .map(|message| {
            serde_json::from_str::<serde_json::Value>(&message.body).unwrap()["input"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        outputs, completed_before,
        "the output of every input completed before the exit is sent, and no other"
    );

    // The restart finishes the rest and repeats nothing that completed.
    let settings = settings.map(|(name, value)| match name {
        // Only what it handles matters now: no delay, and short long polls, since its final stop
        // has no work to wake one.
        "FAULT_HANDLER_DELAY_MS" => (name, "0".to_owned()),
        "FAULT_WAIT_SECONDS" => (name, "1".to_owned()),
        _ => (name, value),
    });
    let mut second = Consumer::start(&example, &endpoint, &settings, &dir, 2);
    wait_for(&mut second, "every job done", || {
        (done_ids(&journal.read()).len() == total).then_some(())
    })
    .await;
    wait_until_empty(backend, &input).await;
    let status = second.terminate().await;
    assert!(status.success(), "{status}:\n{}", second.log());
    let after: Vec<Record> = journal.read()[before.len()..].to_vec();
    let repeated: Vec<&Record> = after
        .iter()
        .filter(|record| completed_before.contains(&record.message_id))
        .collect();
    assert!(
        repeated.is_empty(),
        "nothing completed before SIGTERM is handled again: {repeated:?}"
    );
    // Messages the first consumer held but never started come back to the second one, received
    // once more: the first consumer had some, or the release above proved nothing.
    let held_unstarted: HashSet<&str> = after
        .iter()
        .filter(|record| record.event == Event::Start && record.receive_count > 1)
        .map(|record| record.message_id.as_str())
        .collect();
    assert!(
        !held_unstarted.is_empty(),
        "the first consumer held unstarted messages at SIGTERM"
    );
    // A stop adds at most two receives to a held message: its release, and a long poll the stop
    // gave up that took it at the server (never released again: it comes back after the
    // receive's visibility).
    let too_often: Vec<&Record> = after
        .iter()
        .filter(|record| record.event == Event::Start && record.receive_count > 3)
        .collect();
    assert!(
        too_often.is_empty(),
        "a message given back at the stop was received more than twice more: {too_often:?}"
    );
    let caught_by_long_poll = after
        .iter()
        .filter(|record| record.event == Event::Start && record.receive_count == 3)
        .count();
    let order = if fifo {
        let violations = order_violations(&journal.read(), &sent);
        assert_eq!(violations, 0, "order violations");
        format!("order violations {violations}")
    } else {
        "order not promised".to_owned()
    };
    common::report(format_args!(
        "stop under load ({base}): {total} messages over {groups} groups; at SIGTERM {} handlers \
         running, all finished and deleted; {} completed before exit, their {} outputs sent; \
         {} held but unstarted released ({} of them then taken by a long poll the stop gave up; \
         in flight {} right after exit, 0 {:?} after exit); long polls pending at the signal: \
         {pending_polls:?}; exit {:?} after the signal; after the restart 0 handled again; \
         {order}",
        running_at_signal.len(),
        completed_before.len(),
        outputs.len(),
        held_unstarted.len(),
        caught_by_long_poll,
        at_once.in_flight,
        settled_after,
        exited - signalled,
    ));
    dir.remove();
}

// ---------------------------------------------------------------------------------------------
// The kill run
// ---------------------------------------------------------------------------------------------

/// What a kill run measured.
#[derive(Debug)]
struct Figures {
    seed: u64,
    kills: usize,
    messages: usize,
    completions: usize,
    redelivered: usize,
    duplicates: usize,
    lost: usize,
    /// `None` on a standard queue, which promises no order.
    order_violations: Option<usize>,
    outputs: u64,
    elapsed: Duration,
}

impl Figures {
    fn print(&self, kind: &str) {
        let order = match self.order_violations {
            Some(violations) => violations.to_string(),
            None => "not promised".to_owned(),
        };
        common::report(format_args!(
            "process kills ({kind}, seed {}): kills survived {}, messages {}, completions {}, \
             re-deliveries (duplicate completions) {}, messages received again after a kill {}, \
             lost {}, order violations {order}, outputs stored {}, in {:.1?}",
            self.seed,
            self.kills,
            self.messages,
            self.completions,
            self.duplicates,
            self.redelivered,
            self.lost,
            self.outputs,
            self.elapsed,
        ));
    }
}

/// Sends `groups * per_group` jobs, starts the consumer, kills it with SIGKILL at five seeded
/// random points (restarting it each time), lets the last one finish, stops it with SIGTERM and
/// reads the journal.
async fn kill_run(
    backend: &Backend<AwsTransport>,
    base: &str,
    groups: u32,
    per_group: u32,
) -> Figures {
    kill_run_with(backend, base, groups, per_group, false, false).await
}

/// [`kill_run`], with one job in ten sent through S3 when `large`: the sender and the consumer
/// share a bucket of large payloads. With `redrive`, one in twenty jobs (all large) is poison:
/// the consumer dead-letters it, the dead-letter queue is redriven after the third kill and until
/// every job is done, and jobs are counted lost by their group and number.
async fn kill_run_with(
    backend: &Backend<AwsTransport>,
    base: &str,
    groups: u32,
    per_group: u32,
    large: bool,
    redrive: bool,
) -> Figures {
    const KILLS: usize = 5;
    let started = Instant::now();
    let endpoint = rust_stream::testing::live_endpoint("process kills").expect("checked by live()");
    let example = example_binary(EXAMPLE);
    let seed = kills::seed(&format!("process kills ({base})"));
    let mut random = SplitMix(seed);
    let dir = RunDir::new(&backend.name(base.trim_end_matches(".fifo")));
    let fifo = base.ends_with(".fifo");
    let output_base = if fifo {
        format!("{}-done.fifo", base.trim_end_matches(".fifo"))
    } else {
        format!("{base}-done")
    };
    // A short visibility timeout brings a killed consumer's messages back soon; the heartbeat of
    // a live one extends at half of it, which a loaded machine still makes in time.
    let input = backend.queue(base, &[("VisibilityTimeout", "5")]).await;
    let output = backend.queue(&output_base, &[]).await;
    let bucket = backend.name("kill-payloads");
    let sender = if large {
        let large = LargePayloads::new(&bucket).create_if_missing();
        backend.broker.clone().large_payloads(large)
    } else {
        backend.broker.clone()
    };
    let sent = send_jobs_with(
        &sender,
        &backend.name(base),
        groups,
        per_group,
        large,
        redrive,
    )
    .await;
    let dead_letters = format!("{base}-dlq");
    if redrive {
        backend.queue(&dead_letters, &[]).await;
    }
    // An operator redriving the dead-letter queue every second while the run goes on: what the
    // poison jobs (and any job the kills pushed past its attempts) come back by.
    let redriven = Arc::new(AtomicUsize::new(0));
    let operator = redrive.then(|| {
        let plan = Redrive::from(backend.name(&dead_letters)).to(backend.name(base));
        let (sender, redriven) = (sender.clone(), redriven.clone());
        tokio::spawn(async move {
            loop {
                let report = sender
                    .operations()
                    .redrive(&plan)
                    .await
                    .expect("the redrive runs");
                redriven.fetch_add(report.moved.len(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    });
    let offloaded = sender.api_calls().put_object;
    if large {
        assert_eq!(
            offloaded,
            u64::from(groups * per_group / 10),
            "one job in ten"
        );
    }
    let total = sent.len();
    let journal = Journal(dir.path.join("journal"));
    let mut settings = vec![
        ("FAULT_QUEUE", backend.name(base)),
        ("FAULT_OUTPUT_QUEUE", backend.name(&output_base)),
        ("FAULT_JOURNAL", journal.0.display().to_string()),
        ("FAULT_CONCURRENCY", groups.to_string()),
        // Short long polls, so the last stop does not wait on one.
        ("FAULT_WAIT_SECONDS", "1".to_owned()),
        // Handlers that take a little time, so a process always has messages in hand: with
        // instant handlers a kill could land between a batch's delete and the next receive in
        // most of its 50 ms, and kill nothing the evidence below can see.
        ("FAULT_HANDLER_DELAY_MS", "10".to_owned()),
    ];
    if large {
        settings.push(("FAULT_PAYLOAD_BUCKET", bucket.clone()));
    }
    if redrive {
        settings.push(("FAULT_DEAD_LETTER_QUEUE", backend.name(&dead_letters)));
        settings.push(("FAULT_ATTEMPTS", "3".to_owned()));
    }

    // Kill points: numbers of messages done, one drawn in each fifth of the run; with poison jobs,
    // across what is done before any of them is redriven (the poison jobs are one in twenty).
    let reachable = if redrive { total - total / 20 } else { total };
    let points = random.kill_points(50, reachable - 50, KILLS);
    common::report(format_args!(
        "process kills ({base}): killed after {points:?} messages done"
    ));
    let mut consumer = Consumer::start(&example, &endpoint, &settings, &dir, 0);
    // Where each process's journal lines begin and end: one process writes at a time.
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut began = 0;
    for (kill, point) in points.iter().enumerate() {
        // Each process does some work of its own before it is killed, so no kill lands on a
        // process that has not started consuming.
        let lines_before = journal.read().len();
        // Killed as soon as it has a handler running once the point is passed: a kill at a
        // random moment could land between a batch's delete and the next receive, holding nothing
        // started, and show nothing of what a kill cuts.
        wait_for(&mut consumer, &format!("{point} messages done"), || {
            let records = journal.read();
            (records.len() > lines_before
                && done_ids(&records).len() >= *point
                && !running(&records[lines_before..]).is_empty())
            .then_some(())
        })
        .await;
        consumer.kill();
        let ended = journal.read().len();
        spans.push((began, ended));
        began = ended;
        consumer = Consumer::start(&example, &endpoint, &settings, &dir, kill + 1);
    }
    wait_for(&mut consumer, "every message done", || {
        // A redriven job is done under its copy's id (or two copies' ids, if a move was repeated):
        // counted by job.
        let records = journal.read();
        let done = if redrive {
            done_jobs(&records).len()
        } else {
            done_ids(&records).len()
        };
        (done == total).then_some(())
    })
    .await;
    if let Some(operator) = operator {
        // A redrive whose moves let the run finish may not have answered yet, and only its answer
        // counts it: it is given the time to, rather than cut short by the end of the run.
        let _ = tokio::time::timeout(Duration::from_secs(30), async {
            while redriven.load(Ordering::Relaxed) == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        operator.abort();
        let moved = redriven.load(Ordering::Relaxed);
        common::report(format_args!(
            "process kills ({base}): {moved} dead letters redriven during the run"
        ));
        // Counted when a redrive answers: one cut short by the end of the run is not in it.
        assert!(moved > 0, "nothing was redriven during the run");
    }
    wait_until_empty(backend, &input).await;
    let status = consumer.terminate().await;
    assert!(status.success(), "{status}:\n{}", consumer.log());

    let records = journal.read();
    let done: Vec<&Record> = records
        .iter()
        .filter(|record| record.event == Event::Done)
        .collect();
    let distinct = done_ids(&records);
    let lost = if redrive {
        // A redriven job is done under its copy's id: jobs are counted by group and number.
        let done = done_jobs(&records);
        sent.iter().filter(|(_, job)| !done.contains(job)).count()
    } else {
        sent.iter().filter(|(id, _)| !distinct.contains(id)).count()
    };
    let redelivered: HashSet<&str> = records
        .iter()
        .filter(|record| record.event == Event::Start && record.receive_count > 1)
        .map(|record| record.message_id.as_str())
        .collect();
    // The kills left messages in flight, which came back: otherwise they proved nothing.
    assert!(
        !redelivered.is_empty(),
        "no message was received again after a kill"
    );
    // Evidence per kill: what each killed process had started (running, or done but not yet
    // deleted) and a later process received again. All kills but one must show some; one may
    // land between a delete and the next receive.
    let came_back: Vec<usize> = spans
        .iter()
        .map(|(from, to)| {
            let started: HashMap<&str, u32> = records[*from..*to]
                .iter()
                .filter(|record| record.event == Event::Start)
                .map(|record| (record.message_id.as_str(), record.receive_count))
                .collect();
            records[*to..]
                .iter()
                .filter(|record| {
                    record.event == Event::Start
                        && started
                            .get(record.message_id.as_str())
                            .is_some_and(|count| record.receive_count > *count)
                })
                .map(|record| record.message_id.as_str())
                .collect::<HashSet<_>>()
                .len()
        })
        .collect();
    common::report(format_args!(
        "process kills ({base}): messages each killed process had started and a later one \
         received again {came_back:?}"
    ));
    let with_work = came_back.iter().filter(|n| **n > 0).count();
    assert!(
        with_work >= KILLS - 1,
        "only {with_work} of {KILLS} kills cut work in hand: {came_back:?}"
    );
    let outputs = queue_load(backend, &output).await.visible;
    if fifo {
        // Outputs are deduplicated by their input's id: one each, whatever was re-delivered.
        assert_eq!(outputs, total as u64, "outputs stored");
    } else {
        assert!(outputs >= total as u64, "outputs stored: {outputs}");
    }
    let figures = Figures {
        seed,
        kills: KILLS,
        messages: total,
        completions: done.len(),
        redelivered: redelivered.len(),
        duplicates: done.len() - distinct.len(),
        lost,
        order_violations: fifo.then(|| order_violations(&records, &sent)),
        outputs,
        elapsed: started.elapsed(),
    };
    dir.remove();
    figures
}

// ---------------------------------------------------------------------------------------------
// The kill run with an inbox
// ---------------------------------------------------------------------------------------------

/// A kill run whose consumer posts each payment to a ledger table inside its inbox on the
/// PostgreSQL at `postgres`: each of `groups * per_group` payments is sent once, then 1–3 extra
/// times; the consumer is killed at five seeded points (by postings made) and restarted, and the
/// ledger is read at the end.
/// The database an inbox kill run's consumer keeps its keys and ledger in.
#[derive(Clone, Copy)]
enum Db<'a> {
    /// The PostgreSQL server at this URL.
    Postgres(&'a str),
    /// A SQLite file of the run's own (the embedded store: one process at a time).
    Sqlite,
}

/// The run's ledger, read by the test as the consumer writes it.
enum LedgerPool {
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

impl LedgerPool {
    async fn execute(&self, sql: String) {
        let sql = sqlx::AssertSqlSafe(sql);
        match self {
            Self::Postgres(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
            Self::Sqlite(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
        }
        .expect("a statement on the ledger");
    }

    async fn pair(&self, sql: String) -> (i64, i64) {
        let sql = sqlx::AssertSqlSafe(sql);
        match self {
            Self::Postgres(pool) => sqlx::query_as(sql).fetch_one(pool).await,
            Self::Sqlite(pool) => sqlx::query_as(sql).fetch_one(pool).await,
        }
        .expect("read the ledger")
    }

    async fn events(&self, sql: String) -> Vec<(i64, String)> {
        let sql = sqlx::AssertSqlSafe(sql);
        match self {
            Self::Postgres(pool) => sqlx::query_as(sql).fetch_all(pool).await,
            Self::Sqlite(pool) => sqlx::query_as(sql).fetch_all(pool).await,
        }
        .expect("read the ledger")
    }

    async fn postings(&self, sql: String) -> Vec<(String, i32)> {
        let sql = sqlx::AssertSqlSafe(sql);
        match self {
            Self::Postgres(pool) => sqlx::query_as(sql).fetch_all(pool).await,
            Self::Sqlite(pool) => sqlx::query_as(sql).fetch_all(pool).await,
        }
        .expect("read the ledger")
    }
}

async fn inbox_kill_run(
    backend: &Backend<AwsTransport>,
    db: Db<'_>,
    base: &str,
    groups: u32,
    per_group: u32,
) -> InboxFigures {
    const KILLS: usize = 5;
    let started = Instant::now();
    let endpoint = rust_stream::testing::live_endpoint("process kills with an inbox")
        .expect("checked by live()");
    let example = example_binary(EXAMPLE);
    let seed = kills::seed(&format!("process kills with an inbox ({base})"));
    let mut random = SplitMix(seed);
    let stem = base.trim_end_matches(".fifo");
    let dir = RunDir::new(&backend.name(stem));
    let fifo = base.ends_with(".fifo");
    let output_base = if fifo {
        format!("{stem}-done.fifo")
    } else {
        format!("{stem}-done")
    };
    let input = backend.queue(base, &[("VisibilityTimeout", "5")]).await;
    backend.queue(&output_base, &[]).await;
    let ledger = backend.name(stem).replace('-', "_");
    let (pool, store_setting, posted_column) = match db {
        Db::Postgres(url) => (
            LedgerPool::Postgres(
                sqlx::PgPool::connect(url)
                    .await
                    .expect("connect to the test's PostgreSQL"),
            ),
            ("FAULT_INBOX_POSTGRES_URL", url.to_owned()),
            "posted bigserial",
        ),
        Db::Sqlite => {
            let path = dir.path.join("inbox.db");
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
            let pool = sqlx::SqlitePool::connect_with(options)
                .await
                .expect("open the run's SQLite file");
            (
                LedgerPool::Sqlite(pool),
                ("FAULT_INBOX_SQLITE_PATH", path.display().to_string()),
                "posted INTEGER PRIMARY KEY",
            )
        }
    };
    pool.execute(format!(
        "CREATE TABLE {ledger} (job text NOT NULL, grp text NOT NULL, seq int NOT NULL, \
         amount bigint NOT NULL, {posted_column})"
    ))
    .await;

    // Every payment once, the groups interleaved; then the extra copies, in the same order.
    let publisher = backend.broker.publisher(SqsQueue::new(backend.name(base)));
    let kills::SentPayments {
        payments,
        expected_total,
        copies,
    } = kills::send_payments_with_copies(&publisher, fifo, groups, per_group, &mut random).await;
    let journal = Journal(dir.path.join("journal"));
    let settings = [
        ("FAULT_QUEUE", backend.name(base)),
        ("FAULT_OUTPUT_QUEUE", backend.name(&output_base)),
        ("FAULT_JOURNAL", journal.0.display().to_string()),
        ("FAULT_CONCURRENCY", groups.to_string()),
        ("FAULT_WAIT_SECONDS", "1".to_owned()),
        (store_setting.0, store_setting.1.clone()),
        ("FAULT_LEDGER_TABLE", ledger.clone()),
    ];
    let total = payments.len();
    let posted = || async {
        let (rows, distinct) = pool
            .pair(format!(
                "SELECT count(*), count(DISTINCT job) FROM {ledger}"
            ))
            .await;
        (rows as usize, distinct as usize)
    };
    let points = random.kill_points(50, total - 50, KILLS);
    common::report(format_args!(
        "process kills with an inbox ({base}): killed after {points:?} payments posted"
    ));
    let mut consumer = Consumer::start(&example, &endpoint, &settings, &dir, 0);
    for (kill, point) in points.iter().enumerate() {
        let lines_before = journal.read().len();
        let deadline = Instant::now() + PATIENCE;
        while !(journal.read().len() > lines_before && posted().await.1 >= *point) {
            assert!(
                Instant::now() < deadline,
                "not {point} payments posted within {PATIENCE:?}:\n{}",
                consumer.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(random.next() % 50)).await;
        consumer.kill();
        consumer = Consumer::start(&example, &endpoint, &settings, &dir, kill + 1);
    }
    let deadline = Instant::now() + PATIENCE;
    while posted().await.1 < total {
        assert!(
            Instant::now() < deadline,
            "not every payment posted within {PATIENCE:?}:\n{}",
            consumer.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until_empty(backend, &input).await;
    let status = consumer.terminate().await;
    assert!(status.success(), "{status}:\n{}", consumer.log());

    let (rows, distinct) = posted().await;
    let (total_posted, _) = pool
        .pair(format!(
            "SELECT CAST(coalesce(sum(amount), 0) AS BIGINT), CAST(0 AS BIGINT) FROM {ledger}"
        ))
        .await;
    let order_violations = if fifo {
        let rows = pool
            .postings(format!("SELECT grp, seq FROM {ledger} ORDER BY posted"))
            .await;
        Some(kills::postings_out_of_order(rows))
    } else {
        None
    };
    let records = journal.read();
    let redelivered: HashSet<&str> = records
        .iter()
        .filter(|record| record.event == Event::Start && record.receive_count > 1)
        .map(|record| record.message_id.as_str())
        .collect();
    assert!(
        !redelivered.is_empty(),
        "no message was received again after a kill"
    );
    let figures = InboxFigures {
        kills: "process kills",
        seed,
        payments: total,
        copies,
        handler_runs: records
            .iter()
            .filter(|record| record.event == Event::Start)
            .count(),
        redelivered: redelivered.len(),
        missing: total - distinct,
        posted_twice: rows - distinct,
        total: total_posted,
        expected_total,
        order_violations,
        elapsed: started.elapsed(),
    };
    if figures.order_violations.unwrap_or(0) > 0 {
        // Kept to look at: the journal and each consumer's log.
        common::report(format_args!(
            "the run's files are in {}",
            dir.path.display()
        ));
    } else {
        pool.execute(format!("DROP TABLE {ledger}")).await;
        dir.remove();
    }
    figures
}

/// In each group, the number of first completions that came before one sent earlier.
fn order_violations(records: &[Record], sent: &[(String, (String, u32))]) -> usize {
    let mut first: HashSet<&str> = HashSet::new();
    let mut by_group: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for record in records.iter().filter(|record| record.event == Event::Done) {
        if first.insert(&record.message_id) {
            by_group.entry(&record.group).or_default().push(record.seq);
        }
    }
    let sent_by_group: BTreeMap<&str, Vec<u32>> =
        sent.iter()
            .fold(BTreeMap::new(), |mut groups, (_, (group, seq))| {
                groups
                    .entry(group.as_str())
                    .or_insert_with(Vec::new)
                    .push(*seq);
                groups
            });
    let mut violations = 0;
    for (group, completed) in &by_group {
        let out_of_order = completed
            .windows(2)
            .filter(|pair| pair[1] < pair[0])
            .count();
        if out_of_order > 0 || Some(completed) != sent_by_group.get(group) {
            common::report(format_args!(
                "group {group}: completed first in the order {completed:?}"
            ));
        }
        violations += out_of_order;
    }
    violations
}

// ---------------------------------------------------------------------------------------------
// The consumer process
// ---------------------------------------------------------------------------------------------

/// A running consumer process; dropped (a test that panics), it is killed and reaped.
struct Consumer {
    child: Option<Child>,
    log: PathBuf,
}

impl Consumer {
    /// Starts the example on `endpoint` with `settings`, its output in `consumer-{n}.log`.
    fn start(
        example: &Path,
        endpoint: &str,
        settings: &[(&str, String)],
        dir: &RunDir,
        n: usize,
    ) -> Self {
        let log = dir.path.join(format!("consumer-{n}.log"));
        let file = std::fs::File::create(&log).expect("create the consumer's log");
        let mut command = Command::new(example);
        sqs_at(&mut command, Some(endpoint));
        command
            .envs(settings.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("the log file"))
            .stderr(file);
        let child = command
            .spawn()
            .unwrap_or_else(|error| panic!("start {}: {error}", example.display()));
        Self {
            child: Some(child),
            log,
        }
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("the consumer runs")
    }

    /// SIGKILL, and the process reaped.
    fn kill(mut self) {
        let mut child = self.child.take().expect("the consumer runs");
        child.kill().expect("SIGKILL the consumer");
        child.wait().expect("reap the consumer");
    }

    /// SIGTERM, and waits for the process to exit.
    async fn terminate(&mut self) -> ExitStatus {
        let pid = self.child().id().to_string();
        let signalled = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(signalled.success(), "kill -TERM {pid}");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child().try_wait().expect("the consumer's status") {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the consumer did not exit within {PATIENCE:?} of SIGTERM:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The process's output so far (its last 60 lines).
    /// Every line the consumer logged so far.
    fn full_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until `condition` gives a value, failing when the consumer exits first or after
/// [`PATIENCE`].
async fn wait_for<T>(
    consumer: &mut Consumer,
    what: &str,
    mut condition: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = condition() {
            return value;
        }
        if let Some(status) = consumer.child().try_wait().expect("the consumer's status") {
            panic!(
                "the consumer exited ({status}) before {what}:\n{}",
                consumer.log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "not {what} within {PATIENCE:?}:\n{}",
            consumer.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A directory of one run's journal and logs, under the system's temporary directory; kept when
/// the test fails, for a look.
struct RunDir {
    path: PathBuf,
}

impl RunDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("rust-stream-{name}"));
        std::fs::create_dir_all(&path).expect("create the run's directory");
        Self { path }
    }

    fn remove(self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ---------------------------------------------------------------------------------------------
// The journal
// ---------------------------------------------------------------------------------------------

/// The consumer's journal file: `start|done GROUP SEQ MESSAGE_ID RECEIVE_COUNT` lines.
struct Journal(PathBuf);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Start,
    Done,
}

#[derive(Debug, Clone)]
struct Record {
    event: Event,
    group: String,
    seq: u32,
    message_id: String,
    receive_count: u32,
}

impl Journal {
    /// The complete lines written so far (a line a kill cut short has no newline, and no effect:
    /// its message was not deleted).
    fn read(&self) -> Vec<Record> {
        let text = std::fs::read_to_string(&self.0).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let [event, group, seq, message_id, receive_count] = fields[..] else {
                    panic!("journal line {line:?}");
                };
                Record {
                    event: match event {
                        "start" => Event::Start,
                        "done" => Event::Done,
                        _ => panic!("journal line {line:?}"),
                    },
                    group: group.to_owned(),
                    seq: seq.parse().expect("a sequence number"),
                    message_id: message_id.to_owned(),
                    receive_count: receive_count.parse().expect("a receive count"),
                }
            })
            .collect()
    }
}

/// The messages with a done line.
fn done_ids(records: &[Record]) -> HashSet<String> {
    records
        .iter()
        .filter(|record| record.event == Event::Done)
        .map(|record| record.message_id.clone())
        .collect()
}

/// The jobs done, by group and number, whatever message carried them (a redriven copy has an id
/// of its own).
fn done_jobs(records: &[Record]) -> HashSet<(String, u32)> {
    records
        .iter()
        .filter(|record| record.event == Event::Done)
        .map(|record| (record.group.clone(), record.seq))
        .collect()
}

/// The messages whose last attempt started and has not finished.
fn running(records: &[Record]) -> Vec<String> {
    let mut open: HashMap<&str, usize> = HashMap::new();
    for record in records {
        let count = open.entry(&record.message_id).or_default();
        match record.event {
            Event::Start => *count += 1,
            Event::Done => *count = count.saturating_sub(1),
        }
    }
    let mut running: Vec<String> = open
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(id, _)| id.to_owned())
        .collect();
    running.sort();
    running
}

// ---------------------------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------------------------

/// Sends `per_group` jobs to each of `groups` groups, the groups interleaved; returns each
/// message's id with its job `(group, seq)`, in the order sent.
async fn send_jobs(
    backend: &Backend<AwsTransport>,
    queue: &str,
    groups: u32,
    per_group: u32,
) -> Vec<(String, (String, u32))> {
    send_jobs_with(&backend.broker, queue, groups, per_group, false, false).await
}

/// [`send_jobs`] through `broker`; with `large`, every tenth job carries 300 KB of padding, so
/// that a broker with large payloads sends it through S3; with `poison`, every second of those is
/// a poison job (see `examples/fault_consumer.rs`).
async fn send_jobs_with(
    broker: &SqsBroker,
    queue: &str,
    groups: u32,
    per_group: u32,
    large: bool,
    poison: bool,
) -> Vec<(String, (String, u32))> {
    let publisher = broker.publisher(SqsQueue::new(queue));
    let fifo = queue.ends_with(".fifo");
    let jobs: Vec<(String, u32)> = (0..per_group)
        .flat_map(|seq| (0..groups).map(move |group| (format!("g{group:02}"), seq)))
        .collect();
    let messages = jobs.iter().enumerate().map(|(n, (group, seq))| {
        let pad = if large && n % 10 == 9 {
            "p".repeat(300_000)
        } else {
            String::new()
        };
        let is_poison = poison && n % 20 == 19;
        let job =
            serde_json::json!({ "group": group, "seq": seq, "pad": pad, "poison": is_poison });
        let message = publisher.message(&job);
        if fifo {
            message
                .group_id(group.clone())
                .dedup_id(format!("{group}-{seq}"))
        } else {
            message
        }
    });
    let sent = publisher.send_batch(messages).await;
    jobs.into_iter()
        .zip(sent)
        .map(|(job, sent)| (sent.expect("send a job").message_id, job))
        .collect()
}

/// What a queue holds, as `GetQueueAttributes` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QueueLoad {
    visible: u64,
    in_flight: u64,
    delayed: u64,
}

async fn queue_load(backend: &Backend<AwsTransport>, url: &str) -> QueueLoad {
    let (visible, in_flight, delayed) = backend.left(url).await;
    QueueLoad {
        visible,
        in_flight,
        delayed,
    }
}

/// Reads the queue's counts until nothing is in flight or delayed, for at most `patience`;
/// returns the last reading and when it was made, measured from the call.
async fn settled_within(
    backend: &Backend<AwsTransport>,
    url: &str,
    patience: Duration,
) -> (QueueLoad, Duration) {
    let start = Instant::now();
    loop {
        let load = queue_load(backend, url).await;
        let at = start.elapsed();
        if (load.in_flight == 0 && load.delayed == 0) || at >= patience {
            return (load, at);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the queue holds nothing, visible, in flight or delayed, on three readings in a
/// row (LocalStack counts a message it is handing out as neither for an instant).
async fn wait_until_empty(backend: &Backend<AwsTransport>, url: &str) {
    let deadline = Instant::now() + PATIENCE;
    let mut empty = 0;
    while empty < 3 {
        let load = queue_load(backend, url).await;
        empty = if load
            == (QueueLoad {
                visible: 0,
                in_flight: 0,
                delayed: 0,
            }) {
            empty + 1
        } else {
            0
        };
        assert!(
            Instant::now() < deadline,
            "the queue is not empty after {PATIENCE:?}: {load:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
