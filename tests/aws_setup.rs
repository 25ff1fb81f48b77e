//! Connecting to SQS as the environment configures it: `SqsBroker::from_env` fails before any SQS
//! call, with an error saying what to set, when no region is configured or no credentials load;
//! `SqsBroker::from_env_or_in_process` picks the in-process account or SQS by the rule its docs
//! give, and logs which.
//!
//! These tests set process environment variables, which every thread of the process shares, so
//! this binary is the only one that does, and each test holds `ENVIRONMENT` for its whole run: it
//! sets the variables while no other thread of the binary does anything but wait, runs its
//! scenario on a runtime of its own, stops that runtime, and only then restores them.

mod common;

use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rust_stream::transport::Transport;
use rust_stream::{ConnectError, SqsBroker, SqsQueue};

/// Held by the test that has the process environment to itself.
static ENVIRONMENT: Mutex<()> = Mutex::new(());

/// Every variable aws-config reads for a region, credentials, a profile or an endpoint: each test
/// starts with all of them unset, so the developer's shell or a CI machine's role plays no part.
const AWS_VARIABLES: [&str; 22] = [
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
];

/// The environment as it was before a test, put back when the test ends, even by a panic.
struct Restore {
    saved: Vec<(&'static str, Option<std::ffi::OsString>)>,
    _lock: MutexGuard<'static, ()>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        for (name, value) in &self.saved {
            match value {
                Some(value) => std::env::set_var(name, value),
                None => std::env::remove_var(name),
            }
        }
    }
}

/// A path where no file is, for the profile files: the developer's `~/.aws` plays no part.
fn no_file() -> PathBuf {
    std::env::temp_dir().join("rust-stream-aws-setup-no-such-file")
}

/// Runs `scenario` with only `variables` of the AWS ones set (the profile files pointing nowhere
/// and the instance metadata service disabled unless `variables` say otherwise), and returns its
/// answer and what it logged.
fn in_environment<T>(variables: &[(&str, &str)], scenario: impl Future<Output = T>) -> (T, String) {
    let lock = ENVIRONMENT.lock().unwrap_or_else(PoisonError::into_inner);
    let _restore = Restore {
        saved: AWS_VARIABLES
            .iter()
            .map(|name| (*name, std::env::var_os(name)))
            .collect(),
        _lock: lock,
    };
    for name in AWS_VARIABLES {
        std::env::remove_var(name);
    }
    std::env::set_var("AWS_CONFIG_FILE", no_file());
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", no_file());
    // A CI machine on EC2 would answer with its own region and role.
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    for (name, value) in variables {
        assert!(
            AWS_VARIABLES.contains(name),
            "{name} is not restored after the test"
        );
        std::env::set_var(name, value);
    }

    let log = common::CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let answer = tracing::subscriber::with_default(subscriber, || runtime.block_on(scenario));
    // Stopped before the variables are restored: its blocking threads (name lookups) read the
    // environment too.
    drop(runtime);
    (answer, log.text())
}

/// `future`'s answer and how long it took, measured inside the test's turn at the environment.
async fn timed<T>(future: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let answer = future.await;
    (answer, started.elapsed())
}

/// A profile directory with `config` and `credentials` files, removed when dropped.
struct Profiles {
    directory: PathBuf,
}

impl Profiles {
    fn new(config: &str, credentials: &str) -> Self {
        let directory = std::env::temp_dir().join(format!(
            "rust-stream-aws-setup-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&directory).expect("a temporary directory");
        std::fs::write(directory.join("config"), config).expect("write config");
        std::fs::write(directory.join("credentials"), credentials).expect("write credentials");
        Self { directory }
    }

    fn config(&self) -> String {
        self.directory.join("config").display().to_string()
    }

    fn credentials(&self) -> String {
        self.directory.join("credentials").display().to_string()
    }
}

impl Drop for Profiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

/// A port on which nothing listens.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("an address").port()
}

#[test]
fn a_missing_region_is_an_error_that_names_what_to_set() {
    let ((from_env, builder, empty), _) = in_environment(
        &[
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
        ],
        async {
            let from_env = SqsBroker::from_env().await;
            let builder = SqsBroker::aws()
                .endpoint("http://127.0.0.1:4566")
                .test_credentials()
                .connect()
                .await;
            let empty = SqsBroker::aws().region("").connect().await;
            (from_env, builder, empty)
        },
    );
    let error = from_env.expect_err("no region is configured");
    assert_eq!(error, ConnectError::MissingRegion);
    let message = error.to_string();
    for what in ["AWS_REGION", "AWS_DEFAULT_REGION", "profile"] {
        assert!(message.contains(what), "{message:?} does not name {what}");
    }
    assert_eq!(builder.err(), Some(ConnectError::MissingRegion));
    assert_eq!(empty.err(), Some(ConnectError::MissingRegion));
}

#[test]
fn a_region_from_the_profile_is_enough() {
    let profiles = Profiles::new(
        "[profile work]\nregion = eu-west-1\n",
        "[work]\naws_access_key_id = test\naws_secret_access_key = test\n",
    );
    let (config, credentials) = (profiles.config(), profiles.credentials());
    let files = [
        ("AWS_CONFIG_FILE", config.as_str()),
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.as_str()),
    ];
    let (by_builder, _) = in_environment(&files, SqsBroker::aws().profile("work").connect());
    let (by_variable, _) = in_environment(
        &[files[0], files[1], ("AWS_PROFILE", "work")],
        SqsBroker::from_env(),
    );
    by_variable.expect("AWS_PROFILE names a profile with a region and credentials");
    by_builder.expect("`.profile(..)` names a profile with a region and credentials");
}

#[test]
fn missing_credentials_are_an_error_that_names_what_to_set() {
    let ((connected, took), _) =
        in_environment(&[("AWS_REGION", "eu-west-1")], timed(SqsBroker::from_env()));
    let error = connected.expect_err("no credentials are configured");
    assert!(
        matches!(error, ConnectError::MissingCredentials { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    for what in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"] {
        assert!(message.contains(what), "{message:?} does not name {what}");
    }
    // Found without waiting: under the 5 s a credentials provider may take to answer.
    assert!(took < Duration::from_secs(4), "{took:?}");
}

#[test]
fn an_unreachable_instance_metadata_service_fails_the_connect_within_seconds() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let ((connected, took), log) = in_environment(
        &[
            ("AWS_REGION", "eu-west-1"),
            ("AWS_EC2_METADATA_DISABLED", "false"),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", &endpoint),
        ],
        timed(SqsBroker::from_env()),
    );
    let error = connected.expect_err("no credentials are configured");
    assert!(
        matches!(error, ConnectError::MissingCredentials { .. }),
        "{error:?}"
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert!(
        error.to_string().contains(
            "Any warnings of the AWS SDK just before, about the instance metadata service (IMDS), \
             come from this search"
        ),
        "{error}\n{log}"
    );
}

/// Answers every HTTP request with `403 Forbidden`, as an instance metadata service that refuses
/// the caller does; returns its address.
fn forbidding_server() -> String {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("an address"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(
                b"HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\nConnection: close\r\n\r\nForbidden",
            );
        }
    });
    address
}

/// The SDK logs its own warnings about an instance metadata service that refuses it before the
/// connect fails; the library's error comes after them and says where they come from.
#[test]
fn the_sdks_instance_metadata_warnings_are_explained_by_the_error_that_follows() {
    let endpoint = forbidding_server();
    let (connected, log) = in_environment(
        &[
            ("AWS_REGION", "eu-west-1"),
            ("AWS_EC2_METADATA_DISABLED", "false"),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", &endpoint),
        ],
        SqsBroker::from_env(),
    );
    let error = connected.expect_err("no credentials are configured");
    assert!(
        log.lines()
            .any(|line| line.contains(" WARN ") && line.contains("403")),
        "the SDK warned about the refusal: {log}"
    );
    assert!(
        error.to_string().contains(
            "Any warnings of the AWS SDK just before, about the instance metadata service (IMDS), \
             come from this search: outside EC2 nothing answers there, and \
             AWS_EC2_METADATA_DISABLED=true skips it"
        ),
        "{error}"
    );
}

/// A mistyped region: the SDK calls the region's endpoint, which no name server knows. The error
/// names the endpoint and the region, not only "dns error".
#[test]
fn a_connection_error_names_the_endpoint_and_the_region() {
    let port = closed_port();
    let ((mistyped, closed), _) = in_environment(&[], async {
        let call = |builder: rust_stream::aws::AwsBrokerBuilder| async move {
            let transport = builder
                .test_credentials()
                .transport()
                .await
                .expect("complete");
            transport
                .get_queue_url("orders")
                .await
                .expect_err("unreachable")
        };
        (
            call(SqsBroker::aws().region("us-esat-1")).await,
            call(
                SqsBroker::aws()
                    .region("eu-west-1")
                    .endpoint(format!("http://127.0.0.1:{port}")),
            )
            .await,
        )
    });
    assert!(
        mistyped.to_string().starts_with("SQS unreachable: ")
            && mistyped.to_string().ends_with(
                "(calling SQS at https://sqs.us-esat-1.amazonaws.com, the endpoint of region \
                 us-esat-1; check the region's name)"
            ),
        "{mistyped}"
    );
    assert!(
        closed.to_string().starts_with("SQS unreachable: ")
            && closed.to_string().ends_with(&format!(
                "(calling SQS at http://127.0.0.1:{port} in region eu-west-1)"
            )),
        "{closed}"
    );
}

/// A transport for a local stand-in needs nothing from the environment, so it is made without
/// `.await` and without a `Result`, and calls where it was told to.
#[test]
fn a_local_transport_is_made_without_loading_anything() {
    let port = closed_port();
    let (closed, _) = in_environment(&[], async {
        let transport =
            rust_stream::aws::AwsTransport::local(format!("http://127.0.0.1:{port}"), "eu-west-1");
        transport
            .get_queue_url("orders")
            .await
            .expect_err("unreachable")
    });
    assert!(
        closed.to_string().ends_with(&format!(
            "(calling SQS at http://127.0.0.1:{port} in region eu-west-1)"
        )),
        "{closed}"
    );
}

#[test]
fn a_silent_instance_metadata_service_fails_the_connect_within_seconds() {
    // Takes connections and never answers, as a firewall that drops packets makes it look.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("an address"));
    let silent = [
        ("AWS_EC2_METADATA_DISABLED", "false"),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.as_str()),
    ];

    let ((connected, took), _) = in_environment(&silent, timed(SqsBroker::from_env()));
    assert_eq!(connected.err(), Some(ConnectError::MissingRegion));
    assert!(took < Duration::from_secs(8), "{took:?}");

    let ((connected, took), _) = in_environment(
        &[silent[0], silent[1], ("AWS_REGION", "eu-west-1")],
        timed(SqsBroker::from_env()),
    );
    let error = connected.expect_err("no credentials are configured");
    assert!(
        matches!(error, ConnectError::MissingCredentials { .. }),
        "{error:?}"
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    drop(listener);
}

#[test]
fn without_sqs_variables_the_chooser_picks_the_in_process_account() {
    let (published, log) = in_environment(&[], async {
        let broker = SqsBroker::from_env_or_in_process().await?;
        let queue = SqsQueue::new("chosen").create_if_missing();
        broker.publisher(queue).message(&"hello").send().await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    });
    published.expect("the in-process account needs no configuration");
    assert!(log.contains("in-process SQS account"), "{log}");
}

#[test]
fn a_region_alone_makes_the_chooser_pick_amazon_sqs() {
    let (connected, log) = in_environment(
        &[
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
        ],
        SqsBroker::from_env_or_in_process(),
    );
    connected.expect("a region and credentials are a complete configuration");
    assert!(log.contains("running on Amazon SQS"), "{log}");
    assert!(log.contains("AWS_REGION"), "{log}");

    let (connected, log) = in_environment(
        &[("AWS_REGION", "eu-west-1")],
        SqsBroker::from_env_or_in_process(),
    );
    assert!(
        matches!(connected, Err(ConnectError::MissingCredentials { .. })),
        "{connected:?}"
    );
    assert!(log.contains("running on Amazon SQS"), "{log}");
}

mod live {
    use super::*;

    #[test]
    fn with_an_endpoint_the_chooser_picks_sqs_there() {
        let Some(endpoint) = rust_stream::testing::live_endpoint("the live chooser test") else {
            return;
        };
        let name = format!(
            "aws-setup-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos()
        );
        // As a local stack is configured: its endpoint, a region and dummy credentials.
        let (found, log) = in_environment(
            &[
                ("AWS_ENDPOINT_URL", &endpoint),
                ("AWS_REGION", "us-east-1"),
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
            ],
            async {
                let broker = SqsBroker::from_env_or_in_process().await?;
                let queue = SqsQueue::new(name.as_str()).create_if_missing();
                broker.publisher(queue).message(&"hello").send().await?;
                // The queue is on LocalStack, not in some account of this process.
                let local_stack = SqsBroker::aws()
                    .endpoint(&endpoint)
                    .region("us-east-1")
                    .test_credentials()
                    .transport()
                    .await?;
                local_stack.get_queue_url(&name).await?;
                Ok::<_, Box<dyn std::error::Error>>(())
            },
        );
        found.expect("the message went to a queue on LocalStack");
        assert!(
            log.contains("at the endpoint the environment names"),
            "{log}"
        );
        assert!(log.contains(&endpoint), "{log}");
    }
}
