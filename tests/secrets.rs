//! Credentials never show in `Debug` output or in logs.
//!
//! Every type of `rust_stream::sqs` that holds or meets the AWS configuration is formatted with
//! `{:?}` (and errors with `{}`) while the credentials are set to recognisable values, from the
//! environment and given in code; none shows the secret access key, the session token or the
//! access key id, nor the password of an endpoint URL. The access key id is treated as a secret
//! here although AWS calls it an identifier: it names the account's user, and nothing the library
//! prints needs it.
//!
//! Logs are captured at TRACE, with span opens and closes, by a subscriber writing to a buffer,
//! which also sees aws-sdk-sqs's and aws-smithy's own spans and events (they log through
//! `tracing`): a run against LocalStack that publishes and handles a message, and a run against a
//! closed port that fails, log none of the credentials either.
//!
//! This binary sets the credential variables of its own process once, before any test reads them,
//! and every test expects the same values.

mod common;

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use common::engine::{jobs, Job, Scripted};
use rust_stream::aws::AwsTransport;
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, live_endpoint, TestApp};

const ACCESS_KEY_ID: &str = "AKIAIDSHOULDNOTSHOW7";
const SECRET_ACCESS_KEY: &str = "secret-access-key-should-not-show";
const SESSION_TOKEN: &str = "session-token-should-not-show";
/// The password of an endpoint URL with user info (`http://user:password@host`).
const ENDPOINT_PASSWORD: &str = "endpoint-password-should-not-show";

const SECRETS: [&str; 4] = [
    ACCESS_KEY_ID,
    SECRET_ACCESS_KEY,
    SESSION_TOKEN,
    ENDPOINT_PASSWORD,
];

/// Where nothing listens.
const CLOSED_PORT: &str = "http://127.0.0.1:9";

/// Every span and event of any test of this binary, at TRACE: its target, and its fields as
/// `Debug` and `Display` show them.
static LOGS: OnceLock<Logs> = OnceLock::new();

type Logs = Arc<Mutex<Vec<Logged>>>;

#[derive(Debug, Clone)]
struct Logged {
    target: String,
    text: String,
}

impl Logged {
    /// Whether the SDK's crates, or the HTTP client under them, logged it.
    fn by_the_sdk(&self) -> bool {
        [
            "aws_smithy_",
            "aws_sigv4",
            "aws_runtime",
            "aws_config",
            "aws_sdk_sqs",
            "hyper",
            "h2",
            "rustls",
        ]
        .iter()
        .any(|sdk| self.target.starts_with(sdk))
    }
}

/// A layer that keeps every span's and event's fields, as a formatting subscriber would show them.
struct Capture(Logs);

#[derive(Default)]
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push_str(&format!(" {}={value}", field.name()));
    }
}

impl Capture {
    fn keep(&self, target: &str, record: impl FnOnce(&mut Fields)) {
        let mut fields = Fields::default();
        record(&mut fields);
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Logged {
                target: target.to_owned(),
                text: fields.0,
            });
    }
}

impl<S> tracing_subscriber::Layer<S> for Capture
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attributes: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.keep(attributes.metadata().target(), |fields| {
            attributes.record(fields)
        });
    }

    fn on_record(
        &self,
        span: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        context: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let target = context
            .metadata(span)
            .map_or("", |metadata| metadata.target());
        self.keep(target, |fields| values.record(fields));
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.keep(event.metadata().target(), |fields| event.record(fields));
    }
}

/// Sets the credential variables and installs the capturing subscriber, once for the binary.
fn set_up() -> Logs {
    LOGS.get_or_init(|| {
        // Before any test reads the environment: every test waits here for the first one.
        std::env::set_var("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY);
        std::env::set_var("AWS_SESSION_TOKEN", SESSION_TOKEN);
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
        std::env::set_var("AWS_REGION", "us-east-1");
        let logs = Logs::default();
        use tracing_subscriber::layer::SubscriberExt as _;
        let subscriber = tracing_subscriber::registry().with(Capture(logs.clone()));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        logs
    })
    .clone()
}

/// Asserts `text` (what `what` printed) holds none of the secrets.
fn assert_no_secret(what: &str, text: &str) {
    assert_none_of(&SECRETS, what, text);
}

/// Asserts the logs hold neither the secret access key nor the session token, and the access key
/// id only in the SDK's own TRACE events, which print the resolved identity with the SDK's
/// `Debug` of credentials (the id shown, the rest redacted); rust-stream cannot change what the
/// SDK logs. (The SDK's TRACE events and its HTTP client's also show the endpoint URL as given,
/// user info and all, so the endpoint's password is checked in rust-stream's own events and
/// `Debug` output only.)
/// Returns how many records were checked.
fn assert_no_secret_logged(what: &str, logs: &Logs) -> usize {
    let logs = snapshot(logs);
    for logged in logs.iter() {
        let what = format!("{what} (target `{}`)", logged.target);
        assert_none_of(&[SECRET_ACCESS_KEY, SESSION_TOKEN], &what, &logged.text);
        if !logged.by_the_sdk() {
            assert_none_of(&[ACCESS_KEY_ID, ENDPOINT_PASSWORD], &what, &logged.text);
        }
    }
    assert!(
        logs.iter()
            .any(|logged| logged.by_the_sdk() && logged.text.contains(ACCESS_KEY_ID)),
        "not vacuous: the SDK's own events, which show the access key id, were captured"
    );
    logs.len()
}

fn snapshot(logs: &Logs) -> Vec<Logged> {
    logs.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn assert_none_of(secrets: &[&str], what: &str, text: &str) {
    for secret in secrets {
        if let Some(at) = text.find(secret) {
            let start = text[..at]
                .char_indices()
                .rev()
                .nth(200)
                .map_or(0, |(i, _)| i);
            let end = (at + secret.len() + 200).min(text.len());
            let end = (end..=text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap();
            panic!("{what} shows `{secret}`:\n...{}...", &text[start..end]);
        }
    }
}

/// A transport over an SDK client configured in code with all three credentials.
fn transport_with_credentials_in_code(endpoint: &str) -> AwsTransport {
    let credentials = Credentials::new(
        ACCESS_KEY_ID,
        SECRET_ACCESS_KEY,
        Some(SESSION_TOKEN.to_owned()),
        None,
        "in-code",
    );
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(credentials)
        .build();
    AwsTransport::from_client(
        aws_sdk_sqs::Client::from_conf(config),
        Some(endpoint.to_owned()),
    )
}

#[tokio::test]
async fn debug_output_of_every_configuration_type_shows_no_credentials() {
    let _logs = set_up();
    let with_password = format!("http://rust-stream:{ENDPOINT_PASSWORD}@127.0.0.1:9");
    let builder = SqsBroker::aws()
        .endpoint(&with_password)
        .region("us-east-1")
        .profile("default");
    assert_no_secret("AwsBrokerBuilder", &format!("{builder:?}"));
    assert!(
        format!("{builder:?}").contains("127.0.0.1:9"),
        "the endpoint's host is still shown: {builder:?}"
    );

    // Credentials from the environment, as `from_env` and the builder load them.
    let from_environment = builder
        .clone()
        .transport()
        .await
        .expect("the environment has credentials");
    assert_no_secret("AwsTransport", &format!("{from_environment:?}"));
    assert_no_secret("AwsTransport", &format!("{from_environment:#?}"));
    let broker = builder.clone().connect().await.unwrap();
    assert_no_secret("SqsBroker", &format!("{broker:?}"));
    let from_env = SqsBroker::from_env().await.unwrap();
    assert_no_secret("SqsBroker::from_env", &format!("{from_env:#?}"));

    // Credentials given in code, to a client the transport is made from.
    let in_code = transport_with_credentials_in_code(CLOSED_PORT);
    assert_no_secret("AwsTransport::from_client", &format!("{in_code:#?}"));
    let broker = SqsBroker::with_transport(in_code.clone());
    assert_no_secret("SqsBroker::with_transport", &format!("{broker:#?}"));

    // What a failed call and a failed start carry.
    let publisher = broker.publisher("events");
    assert_no_secret("Publisher", &format!("{publisher:?}"));
    let failed = publisher.raw("x").send().await.unwrap_err();
    assert_no_secret("PublishError", &format!("{failed:?} {failed}"));
    let (handler, _) = Scripted::new(|_, _| Ok(()));
    let started = RustStream::new(AppInfo::new("secrets", "0"))
        .with_broker(broker.clone(), |b| {
            b.include(subscriber(SqsQueue::new("events"), handler).build());
        })
        .run_until(std::future::pending())
        .await
        .unwrap_err();
    assert_no_secret("RunError", &format!("{started:?} {started}"));
    let missing = rust_stream::ConnectError::MissingCredentials {
        reason: "none".into(),
    };
    assert_no_secret("ConnectError", &format!("{missing:?} {missing}"));

    // Not vacuous: the SDK client a transport holds shows the access key id in its own `Debug`,
    // which a derived `Debug` of the transport would print.
    let credentials = Credentials::new(ACCESS_KEY_ID, SECRET_ACCESS_KEY, None, None, "sdk");
    let client = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(credentials)
            .build(),
    );
    assert!(format!("{client:?}").contains(ACCESS_KEY_ID));
}

/// Publishes and handles one message on LocalStack with the credentials set, from the
/// environment and in code, logging at TRACE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_localstack_with_credentials_logs_none_of_them() {
    let logs = set_up();
    let Some(endpoint) = live_endpoint("secrets: a run on LocalStack") else {
        return;
    };
    let from_environment = SqsBroker::aws()
        .endpoint(&endpoint)
        .region("us-east-1")
        .connect()
        .await
        .unwrap();
    let in_code = SqsBroker::with_transport(transport_with_credentials_in_code(&endpoint));
    for (n, broker) in [from_environment, in_code].into_iter().enumerate() {
        let queue = SqsQueue::new(format!("secrets-{n}-{}", std::process::id()))
            .create_if_missing()
            .wait(Duration::from_secs(1));
        let (handler, log) = Scripted::new(|_, _| Ok(()));
        let running = TestApp::spawn(RustStream::new(AppInfo::new("secrets", "0")).with_broker(
            broker.clone(),
            |b| {
                b.include(subscriber(queue.clone(), handler).build());
            },
        ))
        .await
        .expect("the app starts");
        broker
            .publisher(queue.clone())
            .message(&Job::new("g", 1))
            .send()
            .await
            .unwrap();
        eventually("the job handled", async || !jobs(&log).is_empty()).await;
        running.drain().await;
        running.stop().await.unwrap();
    }
    let checked = assert_no_secret_logged("the logs of a run on LocalStack", &logs);
    let logs = snapshot(&logs);
    assert!(
        logs.iter()
            .any(|logged| logged.by_the_sdk() && logged.text.contains("SendMessageBatch")),
        "the SDK's own TRACE events of the calls are captured"
    );
    assert!(
        logs.iter().any(|logged| logged
            .text
            .to_ascii_lowercase()
            .contains("x-amz-security-token")),
        "the SDK logged its signed requests, where a session token would show"
    );
    assert!(
        logs.iter()
            .any(|logged| logged.target.starts_with("rust_stream")),
        "rust-stream's own spans and events are captured"
    );
    println!("checked {checked} spans and events");
}

/// A start and a publish against a closed port fail, after the SDK's retries, and log none of
/// the credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_against_a_closed_port_fails_and_logs_no_credentials() {
    let logs = set_up();
    let with_password = format!("http://rust-stream:{ENDPOINT_PASSWORD}@127.0.0.1:9");
    for broker in [
        SqsBroker::aws()
            .endpoint(&with_password)
            .region("us-east-1")
            .connect()
            .await
            .unwrap(),
        SqsBroker::with_transport(transport_with_credentials_in_code(CLOSED_PORT)),
    ] {
        let error = broker
            .publisher("events")
            .raw("x")
            .send()
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("SQS unreachable"),
            "a connection error: {error}"
        );
        assert_no_secret("a PublishError", &format!("{error:?} {error}"));
    }
    let checked = assert_no_secret_logged("the logs of a run against a closed port", &logs);
    assert!(
        snapshot(&logs)
            .iter()
            .any(|logged| logged.by_the_sdk() && logged.text.contains("127.0.0.1:9")),
        "the SDK's attempts are captured"
    );
    println!("checked {checked} spans and events");
}
