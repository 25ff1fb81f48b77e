//! The built `rust-stream` binary against LocalStack: each command's table and `--json` output,
//! its refusals (named queue, non-zero exit, the error on standard error), and no credential in
//! anything it prints.

use std::process::{Command, Output};

use rust_stream::aws::AwsTransport;
use rust_stream::operations::Peek;
use rust_stream::testing::{live_endpoint, QueueNames};
use rust_stream::transport::{MessageAttributeValue, SendMessage};
use rust_stream::{SqsBroker, DEAD_LETTER_REASON_HEADER, SOURCE_QUEUE_HEADER};

/// A secret that must never show in the output.
const SECRET: &str = "cli-secret-wJalrXUtnFEMI-K7MDENG";

/// Runs the binary against `endpoint` with test credentials and `args`.
fn cli(endpoint: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rust-stream"));
    for name in [
        "AWS_ENDPOINT_URL_SQS",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_DEFAULT_REGION",
    ] {
        command.env_remove(name);
    }
    let output = command
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .args(args)
        .output()
        .expect("the binary runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !printed.contains(SECRET),
        "{args:?} printed the secret key:\n{printed}"
    );
    output
}

fn ok(endpoint: &str, args: &[&str]) -> String {
    let output = cli(endpoint, args);
    assert!(
        output.status.success(),
        "{args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn json(endpoint: &str, args: &[&str]) -> serde_json::Value {
    let mut with = args.to_vec();
    with.push("--json");
    let text = ok(endpoint, &with);
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{args:?}: {error}\n{text}"))
}

/// Fails with exit status 1 and returns what it said on standard error.
fn refused(endpoint: &str, args: &[&str]) -> String {
    let output = cli(endpoint, args);
    assert_eq!(output.status.code(), Some(1), "{args:?} must fail");
    assert!(output.stdout.is_empty(), "{args:?} printed on stdout");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn every_command_prints_a_table_and_json_and_refuses_with_the_queue_named() {
    let Some(endpoint) = live_endpoint("the command line's tests") else {
        return;
    };
    let names = QueueNames::new();
    let dlq = names.queue_name("cli-dlq.fifo");
    let source = names.queue_name("cli-orders.fifo");
    let plain = names.queue_name("cli-plain");
    let e = endpoint.as_str();

    // create
    let created = ok(e, &["create", &dlq, "--fifo"]);
    assert!(
        created.starts_with(&format!("created {dlq}: ")),
        "{created}"
    );
    let created = json(
        e,
        &[
            "create",
            &source,
            "--fifo",
            "--content-dedup",
            "--dead-letter",
            &dlq,
            "--max-receive-count",
            "3",
        ],
    );
    assert_eq!(created["queue"], source.as_str());
    assert!(created["url"].as_str().unwrap().ends_with(&source));
    ok(e, &["create", &plain]);
    let missing_dlq = refused(
        e,
        &[
            "create",
            &names.queue_name("cli-x"),
            "--dead-letter",
            "cli-none",
            "--max-receive-count",
            "2",
        ],
    );
    assert!(missing_dlq.contains("`cli-none`"), "{missing_dlq}");

    // send: a FIFO message without a group is refused, naming the queue
    let no_group = refused(e, &["send", &source, "--body", "x"]);
    assert!(
        no_group.contains(&source) && no_group.to_lowercase().contains("group"),
        "{no_group}"
    );
    for n in 0..3 {
        let sent = ok(e, &["send", &plain, "--body", &format!("plain {n}")]);
        assert!(sent.starts_with(&format!("sent to {plain}: ")), "{sent}");
    }
    // Dead-letter copies, as the engine writes them, are sent by the library (the command line
    // sends plain messages only).
    let sent = json(
        e,
        &[
            "send",
            &dlq,
            "--body",
            "{\"id\":1}",
            "--group",
            "acct-1",
            "--dedup",
            "d1",
        ],
    );
    assert!(sent["sequence_number"].as_str().is_some());

    // queues
    let listed = json(e, &["queues", "--prefix", "cli-"]);
    let rows = listed.as_array().unwrap();
    let row = |name: &str| rows.iter().find(|q| q["name"] == name).cloned().unwrap();
    assert_eq!(row(&plain)["visible"], 3);
    assert_eq!(row(&source)["dead_letter"]["queue"], dlq.as_str());
    assert_eq!(row(&source)["dead_letter"]["max_receive_count"], 3);
    assert_eq!(row(&dlq)["dead_letter_sources"][0], source.as_str());
    let table = ok(e, &["queues", "--prefix", "cli-"]);
    assert!(table.starts_with("QUEUE"), "{table}");
    let plain_line = table.lines().find(|l| l.starts_with(&plain)).unwrap();
    assert!(
        plain_line.contains("standard") && plain_line.contains(" 3 "),
        "{plain_line}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&source) && l.contains(&format!("{dlq} (after 3 receives)"))),
        "{table}"
    );

    // peek, show
    let peeked = json(e, &["peek", &plain, "--amount", "2"]);
    assert_eq!(peeked.as_array().unwrap().len(), 2);
    let id = peeked[0]["message_id"].as_str().unwrap().to_owned();
    let table = ok(e, &["peek", &plain]);
    assert!(table.starts_with("MESSAGE_ID"), "{table}");
    assert_eq!(
        table.lines().count(),
        4,
        "a header and three messages:\n{table}"
    );
    let fifo_refused = refused(e, &["peek", &dlq]);
    assert!(
        fifo_refused.contains(&dlq) && fifo_refused.contains("--force"),
        "{fifo_refused}"
    );
    let bound_dlq = names.queue_name("cli-bound-dlq");
    let bound = names.queue_name("cli-bound");
    ok(e, &["create", &bound_dlq]);
    ok(
        e,
        &[
            "create",
            &bound,
            "--dead-letter",
            &bound_dlq,
            "--max-receive-count",
            "5",
        ],
    );
    let redrive_refused = refused(e, &["peek", &bound]);
    assert!(
        redrive_refused.contains(&bound) && redrive_refused.contains("RedrivePolicy"),
        "{redrive_refused}"
    );
    let forced = json(e, &["peek", &bound, "--force"]);
    assert_eq!(forced, serde_json::json!([]));
    let shown = json(e, &["show", &plain, &id]);
    assert_eq!(shown["message_id"], id.as_str());
    assert!(shown["attributes"]["SentTimestamp"].is_string());
    let detail = ok(e, &["show", &plain, &id]);
    assert!(
        detail.starts_with(&format!("message {id}")) && detail.contains("  body: plain "),
        "{detail}"
    );
    let not_found = refused(e, &["show", &plain, "no-such-id"]);
    assert!(
        not_found.contains(&plain) && not_found.contains("no-such-id"),
        "{not_found}"
    );

    // redrive: the DLQ's one message names no source; a dry run to a named queue, then for real
    let report = json(e, &["redrive", &dlq, "--dry-run"]);
    assert_eq!(report["moved"].as_array().unwrap().len(), 0);
    assert!(report["left"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("--to"));
    let report = json(e, &["redrive", &dlq, "--to", &source, "--dry-run"]);
    assert_eq!(report["moved"][0]["to"], source.as_str());
    assert_eq!(report["moved"][0]["dry_run"], true);
    let table = ok(e, &["redrive", &dlq, "--to", &source, "--rate", "20"]);
    assert!(
        table.contains(&format!(
            "moved 1 from {dlq}; 0 came back (left for the next run); 0 left (0 refused); 0 \
             remain in it"
        )),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains(&source) && l.contains("acct-1")),
        "{table}"
    );
    let bad_rate = refused(e, &["redrive", &dlq, "--rate", "0"]);
    assert!(
        bad_rate.contains(&dlq) && bad_rate.contains("rate"),
        "{bad_rate}"
    );

    // purge
    let unconfirmed = refused(e, &["purge", &plain]);
    assert!(
        unconfirmed.contains(&format!("--yes-i-mean {plain}")),
        "{unconfirmed}"
    );
    let wrong = refused(e, &["purge", &plain, "--yes-i-mean", &source]);
    assert!(wrong.contains(&plain), "{wrong}");
    let purged = json(e, &["purge", &plain, "--yes-i-mean", &plain]);
    assert_eq!(purged["purged"], true);

    // A queue that does not exist, on every command that names one.
    let ghost = names.queue_name("cli-ghost");
    for args in [
        vec!["peek", ghost.as_str()],
        vec!["send", ghost.as_str(), "--body", "x"],
        vec!["redrive", ghost.as_str()],
        vec!["purge", ghost.as_str(), "--yes-i-mean", ghost.as_str()],
        vec!["delete", ghost.as_str(), "--id", "x"],
    ] {
        let error = refused(e, &args);
        assert!(error.contains(&ghost), "{args:?}: {error}");
        assert!(error.contains("does not exist"), "{args:?}: {error}");
    }
}

#[test]
fn an_unreachable_endpoint_fails_on_stderr_without_the_credentials() {
    // Nothing listens on port 9 of loopback: the call fails and says so, with no secret.
    let output = cli("http://127.0.0.1:9", &["queues"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with("error: listing the queues: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("127.0.0.1:9"),
        "the endpoint is named: {stderr}"
    );
}

/// Issue 41, items 1 and 2, from the built binary: `peek` shows each copy's reason; `redrive`
/// by reason says in a dry run "would move N, M stay", writes progress lines when standard error
/// is no terminal, and ends with its summary; `delete --id` removes the named dead letter with an
/// audit line, says which ids it did not find, and refuses to choose nothing.
#[test]
fn redrive_and_delete_by_filter_from_the_command_line_with_progress_and_audit_lines() {
    let Some(endpoint) = live_endpoint("the command line's tests") else {
        return;
    };
    let names = QueueNames::new();
    let dlq = names.queue_name("cli-sel-dlq");
    let target = names.queue_name("cli-sel-target");
    let e = endpoint.as_str();
    ok(e, &["create", &dlq]);
    ok(e, &["create", &target]);
    // Dead-letter copies as the engine writes them, through the library.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let poison_ids: Vec<String> = runtime.block_on(async {
        let ops = SqsBroker::with_transport(AwsTransport::local(e, "us-east-1")).operations();
        let copy = |n: u32, reason: &str| {
            SendMessage::new(format!(r#"{{"n":{n}}}"#))
                .attribute(SOURCE_QUEUE_HEADER, MessageAttributeValue::string(&target))
                .attribute(
                    DEAD_LETTER_REASON_HEADER,
                    MessageAttributeValue::string(reason),
                )
        };
        for n in 0..12 {
            ops.send(&dlq, copy(n, "ledger unavailable")).await.unwrap();
        }
        let mut ids = Vec::new();
        for n in 12..14 {
            let sent = ops
                .send(&dlq, copy(n, "currency JPY unsupported"))
                .await
                .unwrap();
            ids.push(sent.message_id);
        }
        // LocalStack may count a message sent a moment ago late: wait until a peek sees all.
        for _ in 0..50 {
            if ops.peek(&dlq, &Peek::new().amount(20)).await.unwrap().len() == 14 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        ids
    });

    let table = ok(e, &["peek", &dlq, "--amount", "20", "--reason", "JPY"]);
    let header = table.lines().next().unwrap();
    assert!(header.contains("REASON"), "{table}");
    assert_eq!(
        table.lines().count(),
        3,
        "a header and the two poison copies:\n{table}"
    );
    assert!(
        table
            .lines()
            .skip(1)
            .all(|l| l.contains("currency JPY unsupported")),
        "{table}"
    );

    let dry = ok(e, &["redrive", &dlq, "--reason", "ledger", "--dry-run"]);
    assert!(
        dry.ends_with(&format!("would move 12 from {dlq}, 2 stay\n")),
        "{dry}"
    );
    let output = cli(e, &["redrive", &dlq, "--reason", "ledger"]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(&format!("redrive: moved 10 from {dlq} so far\n")),
        "a progress line on a standard error that is no terminal: {stderr}"
    );
    assert!(
        stdout.ends_with(&format!(
            "2 not chosen by the filter; moved 12 from {dlq}; 0 came back (left for the next \
             run); 0 left (0 refused); 2 remain in it\n"
        )),
        "{stdout}"
    );

    let nothing = refused(e, &["delete", &dlq]);
    assert!(
        nothing.contains(&dlq) && nothing.contains("purge"),
        "{nothing}"
    );
    let poison = poison_ids[0].as_str();
    let output = cli(e, &["delete", &dlq, "--id", poison, "--id", "no-such-id"]);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(&format!("deleted {poison} from {dlq} (group -, original "))
            && stderr.contains("reason: currency JPY unsupported)"),
        "an audit line: {stderr}"
    );
    assert!(stdout.contains("not found no-such-id"), "{stdout}");
    assert!(
        stdout.ends_with(&format!(
            "1 not chosen by the filter; deleted 1 from {dlq}; 0 left; 1 remain in it\n"
        )),
        "{stdout}"
    );
    // A FIFO send without `--dedup` gets a fresh id: two sends, two messages.
    let fifo = names.queue_name("cli-sel-send.fifo");
    ok(e, &["create", &fifo, "--fifo"]);
    for _ in 0..2 {
        ok(e, &["send", &fifo, "--body", "pay 7", "--group", "acct-1"]);
    }
    let listed = json(e, &["queues", "--prefix", &fifo]);
    assert_eq!(listed[0]["visible"], 2, "{listed}");

    let left = json(e, &["peek", &dlq]);
    let left = left.as_array().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["message_id"], poison_ids[1].as_str());
}

/// Issue 41, item 6: `send --stdin` sends JSON lines in `SendMessageBatch` calls of 10 (a FIFO
/// queue's each with a fresh deduplication id), a mistyped queue gets "did you mean" from the
/// queue list, and `queues` shows a dead-letter count with the margin spelled out.
#[test]
fn send_reads_json_lines_from_stdin_and_a_mistyped_queue_gets_did_you_mean() {
    use std::io::Write;
    use std::process::Stdio;
    let Some(endpoint) = live_endpoint("the command line's tests") else {
        return;
    };
    let names = QueueNames::new();
    let fifo = names.queue_name("cli-lines.fifo");
    let dlq = names.queue_name("cli-lines-dlq.fifo");
    let e = endpoint.as_str();
    ok(e, &["create", &dlq, "--fifo"]);
    ok(
        e,
        &[
            "create",
            &fifo,
            "--fifo",
            "--dead-letter",
            &dlq,
            "--max-receive-count",
            "15",
        ],
    );
    let lines: String = (0..25).map(|n| format!("{{\"n\":{n}}}\n")).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rust-stream"))
        .env("AWS_ENDPOINT_URL", e)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .args(["send", &fifo, "--stdin", "--group", "g", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sent: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(sent["sent"].as_array().unwrap().len(), 25, "{sent}");
    assert_eq!(sent["failed"].as_array().unwrap().len(), 0, "{sent}");
    // Stored once each, in the lines' order (one group): the queue's own messages, peeked.
    let peeked = json(e, &["peek", &fifo, "--amount", "30", "--force"]);
    let bodies: Vec<String> = peeked
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["body"].as_str().unwrap().to_owned())
        .collect();
    // A peek on SQS is one receive (10 at most): the group's head, in the lines' order.
    let want: Vec<String> = (0..10).map(|n| format!("{{\"n\":{n}}}")).collect();
    assert_eq!(bodies, want);
    let mut ids: Vec<&str> = sent["sent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        25,
        "25 messages stored, none deduplicated: {sent}"
    );

    // A typo: the queue that exists is named.
    let typo = fifo.replacen("lines", "lnies", 1);
    let said = refused(e, &["peek", &typo]);
    assert!(
        said.contains(&format!("`{typo}` does not exist")) && said.contains(&format!("`{fifo}`")),
        "{said}"
    );
    // The margin spelled out beside the count.
    let queues = ok(e, &["queues", "--prefix", &names.queue_name("cli-lines")]);
    assert!(
        queues.contains(&format!("{dlq} (after 15 receives: 5 attempts +10 margin)")),
        "{queues}"
    );
}
