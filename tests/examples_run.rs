//! Each example runs as a person runs it, `cargo run --example NAME`, and does what its docs say:
//! exits 0 after fulfilling every order, each customer's in the order placed, on the in-process
//! account by default and on LocalStack when `AWS_ENDPOINT_URL` names it; and fails with a clear
//! error when the endpoint it names is unreachable.
//!
//! The examples are built by `cargo test` already, so the nested `cargo run` (offline, same
//! target directory and profile) only finds them fresh and runs them; it is killed, and the test
//! fails with what it printed, if it runs past [`PATIENCE`].

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

use common::process::{output_within, sqs_at};

/// How long one nested `cargo run` may take: the examples give up on their own after 60 s, and a
/// loaded machine may still be linking one.
const PATIENCE: Duration = Duration::from_secs(300);

/// The examples of `FIFO` in the seed, with the macro and by hand.
const FIFO_EXAMPLES: [&str; 2] = ["sqs_subscriptions_fifo", "manual_sqs_subscriptions_fifo"];

fn cargo_run_example(name: &str, endpoint: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--offline", "--example", name])
        .env("NO_COLOR", "1");
    sqs_at(&mut command, endpoint);
    output_within(&mut command, PATIENCE)
}

/// The order ids fulfilled, by customer, in the order the log shows them.
fn fulfilled_by_customer(log: &str) -> BTreeMap<String, Vec<u64>> {
    let mut fulfilled: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in log.lines().filter(|line| line.contains("order fulfilled")) {
        let field = |name: &str| {
            let start = line.find(&format!("{name}="))? + name.len() + 1;
            let value = line[start..].split_whitespace().next()?;
            Some(value.trim_matches('"').to_owned())
        };
        let id = field("order.id")
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("no order.id in {line:?}"));
        let customer = field("order.customer").unwrap_or_else(|| panic!("no customer in {line:?}"));
        fulfilled.entry(customer).or_default().push(id);
    }
    fulfilled
}

/// Runs both examples against `endpoint` (or in process) and checks each customer's orders came
/// out in the order placed.
fn assert_examples_fulfil_in_order(endpoint: Option<&str>) {
    for example in FIFO_EXAMPLES {
        let output = cargo_run_example(example, endpoint);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{example} failed ({}):\n{stdout}\n{stderr}",
            output.status
        );
        let fulfilled = fulfilled_by_customer(&stdout);
        let expected = BTreeMap::from([
            ("ada".to_owned(), vec![1, 3, 5]),
            ("grace".to_owned(), vec![2, 4, 6]),
        ]);
        assert_eq!(fulfilled, expected, "{example}:\n{stdout}");
        assert!(
            stdout.contains("all orders fulfilled"),
            "{example}:\n{stdout}"
        );
    }
}

#[test]
fn the_fifo_examples_fulfil_each_customers_orders_in_order_and_exit_0() {
    assert_examples_fulfil_in_order(None);
}

#[test]
fn with_aws_endpoint_url_the_fifo_examples_run_on_localstack() {
    let Some(endpoint) = rust_stream::testing::live_endpoint("the live example run") else {
        return;
    };
    assert_examples_fulfil_in_order(Some(&endpoint));
}

#[test]
fn an_unreachable_endpoint_fails_the_example_with_a_clear_error() {
    // Nothing listens there.
    let output = cargo_run_example(FIFO_EXAMPLES[0], Some("http://127.0.0.1:9"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("SQS unreachable"), "{stderr}");
}

#[test]
fn the_quickstart_fulfils_its_orders_and_exits_0() {
    let output = cargo_run_example("quickstart", None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let fulfilled = fulfilled_by_customer(&stdout);
    let expected = BTreeMap::from([
        ("ada".to_owned(), vec![1, 3, 5]),
        ("grace".to_owned(), vec![2, 4, 6]),
    ]);
    assert_eq!(fulfilled, expected, "{stdout}");
    assert!(stdout.contains("all orders fulfilled"), "{stdout}");
    // The project's first example does not warn about its own set-up.
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains(" WARN "))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}

/// The payment ids each fan-out handler logged, by what it logged (`payment booked`, ...).
fn handled_payments(log: &str) -> BTreeMap<String, Vec<u64>> {
    let mut handled: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for event in ["payment booked", "payment reviewed", "payment noticed"] {
        for line in log.lines().filter(|line| line.contains(event)) {
            let start = line.find("payment.id=").expect("a payment.id") + "payment.id=".len();
            let id = line[start..]
                .split_whitespace()
                .next()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("no payment.id in {line:?}"));
            handled.entry(event.to_owned()).or_default().push(id);
        }
    }
    for ids in handled.values_mut() {
        ids.sort_unstable();
    }
    handled
}

/// Runs the fan-out example against `endpoint` (or in process): every payment booked, the
/// large ones reviewed and the euro ones noticed, each once, through the topic's filter policies.
fn assert_fan_out(endpoint: Option<&str>) {
    let output = cargo_run_example("fan_out", endpoint);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "fan_out failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(
        handled_payments(&stdout),
        BTreeMap::from([
            ("payment booked".to_owned(), vec![1, 2, 3, 4]),
            ("payment noticed".to_owned(), vec![1, 3]),
            ("payment reviewed".to_owned(), vec![2, 3]),
        ]),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#"topic="fan-out-payments-posted""#),
        "the ledger read its envelope's topic:\n{stdout}"
    );
}

#[test]
fn the_fan_out_example_delivers_each_payment_where_its_policies_take_it() {
    assert_fan_out(None);
}

#[test]
fn with_aws_endpoint_url_the_fan_out_example_runs_on_localstack() {
    let Some(endpoint) = rust_stream::testing::live_endpoint("the live fan-out example") else {
        return;
    };
    assert_fan_out(Some(&endpoint));
}

/// The ledger example books the same postings with a handler of one posting a call and with a
/// batch handler: the same balances and dead letters, and at least 5× fewer store round trips for
/// the batch handler (it says so, and exits 0 only then).
#[test]
fn the_ledger_example_books_the_same_postings_in_at_least_5x_fewer_round_trips_in_batches() {
    let output = cargo_run_example("ledger", None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "ledger failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let round_trips = |prefix: &str| -> u32 {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{stdout}"));
        line[prefix.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no round trips in {line:?}"))
    };
    let one = round_trips("one posting a call: ");
    let batch = round_trips("a batch a call: ");
    assert_eq!(one, 600, "a round trip a posting:\n{stdout}");
    assert!(
        batch * 5 <= one,
        "{batch} round trips in batches against {one}:\n{stdout}"
    );
    assert!(
        stdout.contains("same balances and dead letters: true"),
        "{stdout}"
    );
}

/// Runs the routing example against `endpoint` (or in process): each of the three types handled
/// by its own handler, once, and the fourth dead-lettered with a reason naming its type.
fn assert_routing(endpoint: Option<&str>) {
    let output = cargo_run_example("routing", endpoint);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "routing failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    for (line, times) in [
        ("payment posted", 1),
        ("payment reversed", 1),
        ("account closed", 1),
        ("dead letter read", 1),
    ] {
        let found = stdout.lines().filter(|log| log.contains(line)).count();
        assert_eq!(found, times, "`{line}` {found} times:\n{stdout}");
    }
    assert!(
        stdout.contains("it carries type `RefundIssued`"),
        "the reason names the type no handler takes:\n{stdout}"
    );
}

#[test]
fn the_routing_example_hands_each_type_to_its_handler_and_dead_letters_the_rest() {
    assert_routing(None);
}

#[test]
fn with_aws_endpoint_url_the_routing_example_runs_on_localstack() {
    let Some(endpoint) = rust_stream::testing::live_endpoint("the live routing example") else {
        return;
    };
    assert_routing(Some(&endpoint));
}

/// Runs the payments example against `endpoint` (or in process): three copies of `pay-1` and one
/// `pay-2` post twice in all, the two extra copies acked by the inbox without running, and each
/// posting is announced once through the outbox.
fn assert_payments(endpoint: Option<&str>) {
    let output = cargo_run_example("payments", endpoint);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "payments failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(stdout.matches("payment posted").count(), 2, "{stdout}");
    assert_eq!(
        stdout
            .matches("handled before: acked without running")
            .count(),
        2,
        "{stdout}"
    );
    assert!(
        stdout.contains("postings=2 total_cents=2240"),
        "the ledger holds pay-1 once and pay-2 once:\n{stdout}"
    );
    assert_eq!(
        stdout.matches("posting announced").count(),
        2,
        "each posting announced once, through the outbox:\n{stdout}"
    );
}

#[test]
fn the_payments_example_posts_each_payment_once_on_sqlite() {
    assert_payments(None);
}

#[test]
fn with_aws_endpoint_url_the_payments_example_runs_on_localstack() {
    if let Some(endpoint) = rust_stream::testing::live_endpoint("the payments example") {
        assert_payments(Some(&endpoint));
    }
}

/// Runs the example that writes its handler once for both database stores, on PostgreSQL at
/// `database_url` or else on SQLite: three copies of `pay-1` and one `pay-2` post twice in all,
/// the two extra copies acked by the inbox without running (issue 41, item 5).
fn assert_payments_any_store(database_url: Option<&str>) {
    let mut command = Command::new(env!("CARGO"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "run",
            "--quiet",
            "--offline",
            "--example",
            "payments_any_store",
        ])
        .env("NO_COLOR", "1");
    sqs_at(&mut command, None);
    match database_url {
        Some(url) => command.env("DATABASE_URL", url),
        None => command.env_remove("DATABASE_URL"),
    };
    let output = output_within(&mut command, PATIENCE);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "payments_any_store failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let on = if database_url.is_some() {
        "on PostgreSQL"
    } else {
        "on SQLite"
    };
    assert!(stdout.contains(on), "{on}:\n{stdout}");
    assert_eq!(stdout.matches("payment posted").count(), 2, "{stdout}");
    assert_eq!(
        stdout
            .matches("handled before: acked without running")
            .count(),
        2,
        "{stdout}"
    );
    assert!(
        stdout.contains("postings=2 total_cents=2240"),
        "the ledger holds pay-1 once and pay-2 once:\n{stdout}"
    );
}

#[test]
fn the_payments_any_store_example_posts_each_payment_once_on_sqlite() {
    assert_payments_any_store(None);
}

#[test]
fn with_database_url_the_payments_any_store_example_posts_each_payment_once_on_postgres() {
    if let Some(url) = rust_stream::testing::live_postgres_url("the payments_any_store example") {
        assert_payments_any_store(Some(&url));
    }
}

/// Runs the payment-files example against `endpoint` (or in process): its 5 MiB file goes through
/// S3 and all three files are booked in order, with one put and one get (it exits 0 only then).
fn assert_payment_files(endpoint: Option<&str>) {
    let output = cargo_run_example("payment_files", endpoint);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "payment_files failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let booked: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("payment file booked"))
        .filter_map(|line| line.split("file.number=").nth(1)?.split(' ').next())
        .collect();
    assert_eq!(booked, ["1", "2", "3"], "{stdout}");
    assert!(
        stdout.contains("put_object=1 get_object=1"),
        "one put and one get:\n{stdout}"
    );
}

#[test]
fn the_payment_files_example_sends_a_5_mib_file_through_s3_in_order() {
    assert_payment_files(None);
}

#[test]
fn with_aws_endpoint_url_the_payment_files_example_runs_on_localstack() {
    let Some(endpoint) = rust_stream::testing::live_endpoint("the live payment-files example")
    else {
        return;
    };
    assert_payment_files(Some(&endpoint));
}

#[test]
fn the_reminders_example_delivers_one_reminder_three_days_ahead_and_never_the_cancelled_one() {
    let started = std::time::Instant::now();
    let output = cargo_run_example("reminders", None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let delivered: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("reminder delivered:"))
        .collect();
    assert_eq!(delivered.len(), 1, "{stdout}");
    assert!(
        delivered[0].contains("invoice=inv-1001") && delivered[0].contains("day=\"3.000\""),
        "inv-1001's reminder, three days after: {stdout}"
    );
    assert!(stdout.contains("paid: reminder cancelled"), "{stdout}");
    assert!(stdout.contains("one reminder delivered three days ahead, one cancelled: done"));
    assert!(
        !stdout.lines().any(|line| line.contains(" WARN ")),
        "{stdout}"
    );
    println!("the reminders example ran in {:?}", started.elapsed());
}
