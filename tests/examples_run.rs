//! Each example runs as a person runs it, `cargo run --example NAME`, and does what its docs say:
//! exits 0 after fulfilling every order, each customer's in the order placed; and, while the SQS
//! backend is not built, exits 2 with a message when `AWS_ENDPOINT_URL` asks for it.
//!
//! The examples are built by `cargo test` already, so the nested `cargo run` (offline, same
//! target directory and profile) only finds them fresh and runs them.

use std::collections::BTreeMap;
use std::process::{Command, Output};

/// The examples of `FIFO` in the seed, with the macro and by hand.
const FIFO_EXAMPLES: [&str; 2] = ["sqs_subscriptions_fifo", "manual_sqs_subscriptions_fifo"];

fn cargo_run_example(name: &str, endpoint: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO"));
    command
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--offline", "--example", name])
        .env("NO_COLOR", "1")
        .env_remove("AWS_ENDPOINT_URL");
    if let Some(endpoint) = endpoint {
        command.env("AWS_ENDPOINT_URL", endpoint);
    }
    command.output().expect("run cargo")
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

#[test]
fn the_fifo_examples_fulfil_each_customers_orders_in_order_and_exit_0() {
    for example in FIFO_EXAMPLES {
        let output = cargo_run_example(example, None);
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
fn with_an_endpoint_the_fifo_examples_say_the_sqs_backend_is_missing_and_exit_2() {
    for example in FIFO_EXAMPLES {
        // Nothing listens there: the example must not get as far as calling it.
        let output = cargo_run_example(example, Some("http://127.0.0.1:9"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{example}:\n{stderr}");
        assert!(stderr.contains("not built yet"), "{example}:\n{stderr}");
    }
}
