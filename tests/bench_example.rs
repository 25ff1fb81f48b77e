//! The end-to-end benchmark (`examples/bench`) runs as its docs say and reports what it promises,
//! so it cannot rot between the runs someone makes of it: a small in-process run prints every
//! in-process table (with the date and the machine's load) and writes JSON in which each figure
//! stands beside its limit, measured in the same run; on LocalStack the same for the consume and
//! publish rows, with API calls per message by action; with a PostgreSQL too, the inbox's rows
//! with the database round trips of each side; and a wrong option is refused with the usage.
//!
//! The figures themselves are not judged (this is a debug build on a loaded machine): only what
//! holds whatever the speed, such as a queued message taking at least its body's bytes and a
//! receive or a delete call carrying at most 10 messages.
//!
//! The nested `cargo run` (offline, same target directory and profile) builds the example if this
//! test run has not, and is killed, failing the test with what it printed, past [`PATIENCE`].

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use common::process::output_within;
use serde_json::Value;

/// How long one nested `cargo run` may take: a loaded machine may still be building the example.
const PATIENCE: Duration = Duration::from_secs(300);

/// Runs the benchmark with `args`, its JSON written to a file of this test's own.
fn run_bench(test: &str, args: &[&str]) -> (Output, PathBuf) {
    let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-{test}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    let mut command = Command::new(env!("CARGO"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--offline", "--example", "bench", "--"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .env("NO_COLOR", "1");
    (output_within(&mut command, PATIENCE), json)
}

/// The run's JSON, after checking it succeeded.
fn report(output: &Output, json: &PathBuf) -> (String, Value) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the benchmark failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let written = std::fs::read_to_string(json)
        .unwrap_or_else(|error| panic!("no JSON at {}: {error}\n{stdout}", json.display()));
    let _ = std::fs::remove_file(json);
    (
        stdout,
        serde_json::from_str(&written).expect("the JSON parses"),
    )
}

fn number(row: &Value, field: &str) -> f64 {
    row[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {field} in {row}"))
}

fn rows<'a>(report: &'a Value, pointer: &str) -> &'a Vec<Value> {
    report
        .pointer(pointer)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no {pointer} rows in {report:#}"))
}

/// A LocalStack row: the median of its runs, each side run as often as the other.
fn assert_median_of_runs(row: &Value, runs: usize) {
    for (figure, all) in [
        ("msgs_per_sec", "runs_msgs_per_sec"),
        ("limit_msgs_per_sec", "limit_runs_msgs_per_sec"),
    ] {
        let all: Vec<f64> = row[all]
            .as_array()
            .unwrap_or_else(|| panic!("no {all} in {row}"))
            .iter()
            .map(|run| run.as_f64().unwrap())
            .collect();
        assert_eq!(all.len(), runs, "{row}");
        assert!(all.contains(&number(row, figure)), "{row}");
    }
}

/// A figure beside its limit: both measured (positive), and the ratio theirs.
fn assert_beside_limit(row: &Value, figure: &str, limit: &str) {
    let (figure, limit) = (number(row, figure), number(row, limit));
    assert!(figure > 0.0 && limit > 0.0, "{row}");
    let ratio = number(row, "ratio");
    assert!(
        (ratio - figure / limit).abs() <= 1e-9 * ratio.abs().max(1.0),
        "the ratio is not figure / limit: {row}"
    );
}

#[test]
fn a_small_in_process_run_reports_each_figure_beside_its_limit() {
    let (output, json) = run_bench(
        "in-process",
        &[
            "--quick",
            "--in-process",
            "--messages",
            "2000",
            "--throughput-repeats",
            "2",
            "--memory-messages",
            "20000",
            "--latency-secs",
            "0.3",
        ],
    );
    let (stdout, report) = report(&output, &json);

    for heading in [
        "load",
        "| workload",
        "limit: mpsc + serde_json msg/s",
        "limit p99",
        "beyond the body",
    ] {
        assert!(stdout.contains(heading), "no {heading:?} in:\n{stdout}");
    }
    assert!(report["date"].as_str().is_some_and(|d| d.ends_with("UTC")));
    assert!(report["machine"]["load_at_start"]
        .as_str()
        .is_some_and(|load| load.split(' ').count() == 3));
    assert!(
        report["localstack"].is_null(),
        "--in-process runs no LocalStack row"
    );

    let throughput = rows(&report, "/throughput");
    let workloads: Vec<&str> = throughput
        .iter()
        .map(|row| row["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        workloads,
        [
            "standard",
            "standard",
            "FIFO, 100 groups",
            "FIFO, 100 groups",
            "FIFO, 10,000 groups",
            "FIFO, 10,000 groups"
        ]
    );
    for row in throughput {
        assert_eq!(row["messages"], 2000, "{row}");
        assert_beside_limit(row, "msgs_per_sec", "limit_msgs_per_sec");
        // A receive returns at most 10 messages and a delete call deletes at most 10.
        assert!(number(row, "api_calls_per_message") >= 0.2, "{row}");
        // Allocations are counted: each decoded order allocates its customer's name, on either
        // side (the count misses at most a few dozen per thread).
        assert!(number(row, "allocations_per_message") >= 1.0, "{row}");
        assert!(number(row, "limit_allocations_per_message") >= 0.5, "{row}");
        // Each row ran twice, each run in a fresh process; the row is one of its runs.
        let runs: Vec<f64> = row["run_ratios"]
            .as_array()
            .unwrap_or_else(|| panic!("no run_ratios in {row}"))
            .iter()
            .map(|ratio| ratio.as_f64().unwrap())
            .collect();
        assert_eq!(runs.len(), 2, "{row}");
        assert!(runs.contains(&number(row, "ratio")), "{row}");
    }

    let latency = rows(&report, "/latency");
    assert_eq!(latency.len(), 2);
    for row in latency {
        assert_eq!(row["rate"], 10_000, "{row}");
        assert!(number(row, "messages") > 0.0, "{row}");
        for prefix in ["", "limit_"] {
            let at = |name: &str| number(row, &format!("{prefix}{name}_us"));
            assert!(at("p50") <= at("p99") && at("p99") <= at("max"), "{row}");
        }
        assert!(number(row, "p50_us") > 0.0, "{row}");
    }

    let memory = rows(&report, "/memory");
    assert_eq!(memory.len(), 2);
    for row in memory {
        assert_beside_limit(row, "bytes_per_message", "limit_bytes_per_message");
        // Wherever a message waits, it holds at least its body.
        assert!(number(row, "bytes_per_message") >= 100.0, "{row}");
        assert!(number(row, "limit_bytes_per_message") >= 100.0, "{row}");
    }
}

#[test]
fn on_localstack_a_small_run_reports_the_engine_beside_a_plain_sdk_loop() {
    let Some(endpoint) = rust_stream::testing::live_endpoint("the benchmark's LocalStack rows")
    else {
        return;
    };
    let (output, json) = run_bench(
        "localstack",
        &[
            "--localstack",
            &endpoint,
            "--localstack-messages",
            "100",
            "--localstack-repeats",
            "2",
        ],
    );
    let (stdout, report) = report(&output, &json);
    assert!(stdout.contains("plain aws-sdk-sqs loops"), "{stdout}");
    assert!(
        rows(&report, "/throughput").is_empty(),
        "--localstack alone runs no in-process row"
    );

    let consume = rows(&report, "/localstack/consume");
    let cases: Vec<(&str, u64)> = consume
        .iter()
        .map(|row| {
            (
                row["workload"].as_str().unwrap(),
                row["pollers"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        cases,
        [
            ("standard", 1),
            ("standard", 4),
            ("FIFO, 50 groups", 1),
            ("FIFO, 50 groups", 4)
        ]
    );
    for row in consume {
        assert_beside_limit(row, "msgs_per_sec", "limit_msgs_per_sec");
        assert_median_of_runs(row, 2);
        for calls in ["calls_per_message", "limit_calls_per_message"] {
            // Every message was received and deleted, at most 10 a call, and nothing sent.
            let per = |action: &str| number(&row[calls], action);
            assert!(per("receive") >= 0.1 && per("delete") >= 0.1, "{row}");
            assert_eq!(per("send"), 0.0, "{row}");
            assert!(
                per("total") + 1e-9 >= per("receive") + per("delete"),
                "{row}"
            );
        }
    }

    let publish = rows(&report, "/localstack/publish");
    let cases: Vec<(&str, &str)> = publish
        .iter()
        .map(|row| {
            (
                row["workload"].as_str().unwrap(),
                row["how"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        cases,
        [
            ("standard", "one send_batch"),
            ("FIFO, 50 groups", "one send_batch"),
            ("standard", "a send() each, 64 tasks"),
            ("FIFO, 1 hot group", "a send() each, 64 tasks"),
            ("FIFO, 50 groups", "a send() each, 64 tasks"),
            ("FIFO, 1,000 groups", "a send() each, 64 tasks"),
        ]
    );
    for row in publish {
        assert_beside_limit(row, "msgs_per_sec", "limit_msgs_per_sec");
        assert_median_of_runs(row, 2);
        for calls in ["calls_per_message", "limit_calls_per_message"] {
            let per = |action: &str| number(&row[calls], action);
            assert!(per("send") >= 0.1, "{row}");
            assert_eq!(per("receive") + per("delete"), 0.0, "{row}");
        }
    }
}

#[test]
fn on_localstack_and_postgres_a_small_inbox_run_counts_the_round_trips_of_each_side() {
    let Some(endpoint) = rust_stream::testing::live_endpoint("the benchmark's inbox rows") else {
        return;
    };
    let Some(postgres) = rust_stream::testing::live_postgres_url("the benchmark's inbox rows")
    else {
        return;
    };
    let (output, json) = run_bench(
        "inbox",
        &[
            "--only",
            "inbox",
            "--localstack",
            &endpoint,
            "--postgres",
            &postgres,
            "--inbox-messages",
            "200",
            "--localstack-repeats",
            "2",
        ],
    );
    let (stdout, report) = report(&output, &json);
    assert!(stdout.contains("The inbox's cost"), "{stdout}");
    assert!(
        report["localstack"].is_null(),
        "--only inbox runs no other LocalStack row"
    );
    let sides = rows(&report, "/inbox/rows");
    assert_eq!(sides.len(), 2);
    let trips: Vec<f64> = sides
        .iter()
        .map(|row| {
            assert_eq!(
                row["runs_msgs_per_sec"].as_array().unwrap().len(),
                2,
                "{row}"
            );
            assert!(number(row, "msgs_per_sec") > 0.0, "{row}");
            number(row, "round_trips_per_message")
        })
        .collect();
    // BEGIN, INSERT, COMMIT and the pool's ping; the inbox adds its claim. A connection's first
    // use of a statement prepares it (a round trip more), ten connections over 200 messages.
    assert!(
        (4.0..4.3).contains(&trips[0]),
        "without the inbox: {trips:?}"
    );
    assert!((5.0..5.3).contains(&trips[1]), "with the inbox: {trips:?}");
    let ratio = number(&report["inbox"], "ratio");
    assert!(
        (ratio - number(&sides[1], "msgs_per_sec") / number(&sides[0], "msgs_per_sec")).abs()
            < 1e-9,
        "{report:#}"
    );
}

/// The cpu section: each side of each row counted in a process of its own, beside the plain loop,
/// on the delayed account and (with an endpoint) on LocalStack, every run kept.
#[test]
fn a_small_cpu_run_reports_each_sides_cpu_a_message_beside_the_plain_loops() {
    let endpoint = rust_stream::testing::live_endpoint("the benchmark's CPU rows on LocalStack");
    let mut args = vec![
        "--in-process",
        "--only",
        "cpu",
        "--round-trip-messages",
        "300",
        "--localstack-messages",
        "100",
        "--localstack-repeats",
        "2",
    ];
    if let Some(endpoint) = &endpoint {
        args.extend(["--localstack", endpoint.as_str()]);
    }
    let (output, json) = run_bench("cpu", &args);
    let (stdout, report) = report(&output, &json);
    assert!(stdout.contains("CPU a message"), "{stdout}");
    let rows = rows(&report, "/cpu/rows");
    let backends: Vec<&str> = rows
        .iter()
        .map(|row| row["backend"].as_str().unwrap())
        .collect();
    let on_localstack = backends.iter().filter(|&&b| b == "local_stack").count();
    assert_eq!(
        on_localstack,
        if endpoint.is_some() { 4 } else { 0 },
        "{backends:?}"
    );
    assert_eq!(rows.len() - on_localstack, 4, "{backends:?}");
    for row in rows {
        assert_beside_limit(row, "cpu_us_per_message", "plain_cpu_us_per_message");
        for (figure, all) in [
            ("cpu_us_per_message", "runs_cpu_us"),
            ("plain_cpu_us_per_message", "plain_runs_cpu_us"),
        ] {
            let all: Vec<f64> = row[all]
                .as_array()
                .unwrap_or_else(|| panic!("no {all} in {row}"))
                .iter()
                .map(|run| run.as_f64().unwrap())
                .collect();
            assert_eq!(all.len(), 2, "{row}");
            assert!(all.contains(&number(row, figure)), "{row}");
        }
        let messages = if row["backend"] == "local_stack" {
            100.0
        } else {
            300.0
        };
        assert_eq!(number(row, "messages"), messages, "{row}");
        assert!(!row["load_at_start"].as_str().unwrap().is_empty(), "{row}");
    }
}

#[test]
fn an_unknown_option_is_refused_with_the_usage() {
    let (output, _) = run_bench("refused", &["--fast"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown option \"--fast\""), "{stderr}");
    assert!(
        stderr.contains("usage: cargo run --release --example bench"),
        "{stderr}"
    );
}
