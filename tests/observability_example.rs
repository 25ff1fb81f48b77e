//! `examples/observability.rs` as an orchestrator and a Prometheus server see it: after a known
//! workload (the example sends itself 50 pings, in process), `/readyz` and `/healthz` answer 200
//! with the state, `/metrics` shows exactly what the workload did (50 received, sent and acked,
//! the SQS calls by action), and after SIGTERM the process exits 0.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::process::{example_binary, sqs_at};

const PINGS: u64 = 50;

/// How long the example may take to start, and to handle its pings, on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn the_observability_example_serves_probes_and_the_metrics_of_its_workload() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("an address").port()
    };
    let mut command = Command::new(example_binary("observability"));
    command
        .env("HEALTH_ADDR", format!("127.0.0.1:{port}"))
        .env("PINGS", PINGS.to_string())
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    sqs_at(&mut command, None);
    let mut service = KillOnDrop(command.spawn().expect("start the example"));

    let ready = wait_for(&mut service, "ready", || {
        get(port, "/readyz").filter(|answer| answer.starts_with("HTTP/1.1 200"))
    });
    assert!(ready.contains(r#""state":"running""#), "{ready}");
    assert!(ready.contains(r#""queue":"pings""#), "{ready}");
    assert!(ready.contains(r#""consuming":true"#), "{ready}");
    let live = get(port, "/healthz").expect("an answer");
    assert!(live.starts_with("HTTP/1.1 200"), "{live}");
    let unknown = get(port, "/nothing").expect("an answer");
    assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");

    let acked = r#"rust_stream_messages_settled{messaging_system="aws_sqs",messaging_destination_name="pings",rust_stream_outcome="acked"}"#;
    let pings = r#"{messaging_system="aws_sqs",messaging_destination_name="pings"}"#;
    // The last ping stays held until its delete is answered, a moment after it is acked.
    let held = format!("rust_stream_messages_held{pings}");
    let metrics = wait_for(&mut service, "every ping acked and deleted", || {
        get(port, "/metrics").filter(|page| {
            value(page, acked) == Some(PINGS as f64) && value(page, &held) == Some(0.0)
        })
    });
    assert_eq!(
        value(
            &metrics,
            &format!("messaging_client_consumed_messages{pings}")
        ),
        Some(PINGS as f64),
        "{metrics}"
    );
    assert_eq!(
        value(&metrics, &format!("messaging_client_sent_messages{pings}")),
        Some(PINGS as f64),
        "{metrics}"
    );
    assert_eq!(
        value(&metrics, &format!("rust_stream_messages_in_flight{pings}")),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        value(&metrics, &format!("rust_stream_messages_held{pings}")),
        Some(0.0),
        "{metrics}"
    );
    for outcome in ["retried", "dead_lettered"] {
        let settled = acked.replace(r#""acked""#, &format!("\"{outcome}\""));
        assert_eq!(value(&metrics, &settled), Some(0.0), "{outcome}: {metrics}");
    }
    assert_eq!(
        value(
            &metrics,
            &format!("rust_stream_messages_undecodable{pings}")
        ),
        Some(0.0),
        "{metrics}"
    );
    // Attempts' durations, one per ping, all successes, and receives' batch sizes adding up to
    // the pings.
    assert_eq!(
        value(
            &metrics,
            &format!("messaging_process_duration_count{pings}")
        ),
        Some(PINGS as f64),
        "{metrics}"
    );
    assert_eq!(
        value(
            &metrics,
            &format!("rust_stream_receive_batch_size_sum{pings}")
        ),
        Some(PINGS as f64),
        "{metrics}"
    );
    // The SQS calls by action: the pings went out in batches, and were deleted in batches.
    for action in ["SendMessageBatch", "ReceiveMessage", "DeleteMessageBatch"] {
        let calls = format!(
            r#"messaging_client_operation_duration_count{{messaging_system="aws_sqs",messaging_operation_name="{action}",messaging_destination_name="pings"}}"#
        );
        let calls = value(&metrics, &calls).unwrap_or_else(|| panic!("no {action}: {metrics}"));
        assert!((1.0..=PINGS as f64).contains(&calls), "{action}: {calls}");
    }

    let pid = service.0.id().to_string();
    let signalled = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(signalled.success());
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = service.0.try_wait().expect("its status") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "no exit within {PATIENCE:?} of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

/// The value of the sample named `series` (name and labels, as Prometheus writes them).
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Polls `look` until it gives a value, failing if the example exits first or after
/// [`PATIENCE`].
fn wait_for<T>(service: &mut KillOnDrop, what: &str, mut look: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = look() {
            return value;
        }
        if let Some(status) = service.0.try_wait().expect("its status") {
            panic!("the example exited ({status}) before {what}");
        }
        assert!(Instant::now() < deadline, "not {what} within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP request; `None` when nothing answers (not listening yet).
fn get(port: u16, path: &str) -> Option<String> {
    let mut connection = TcpStream::connect(("127.0.0.1", port)).ok()?;
    connection
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    // HTTP/1.1 keeps a connection open unless the request says otherwise.
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    connection.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    connection.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// A child process killed if the test fails before it exits.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
