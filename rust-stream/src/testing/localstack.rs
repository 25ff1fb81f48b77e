//! A LocalStack for a crate's own live tests, with no Docker and no checkout of this repository.
//!
//! [`LocalStack::shared`] reuses the server named by [`LIVE_ENDPOINT_VAR`]
//! or else starts one for the test process, on a free port of `127.0.0.1`. It is started by the
//! same script the repository's `scripts/localstack.sh` runs (`localstack.sh` beside this file,
//! carried in the crate): a Python virtualenv with a pinned LocalStack, installed once under the
//! test binary's target dir (`target/localstack`; [`LOCALSTACK_DIR_VAR`] names another place),
//! behind a file lock so that test binaries running at once install it once.
//!
//! The script is run in its `serve` mode: it starts the server, prints the endpoint, and stops the
//! server when its standard input closes. The test process holds the other end of that pipe, so
//! the server stops when the last [`LocalStack`] handle is dropped or, for the shared one, when the
//! process ends, however it ends (a failed assertion, an abort, a kill): the kernel closes the
//! pipe.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The environment variable that names a live SQS-compatible endpoint (LocalStack, say) for live
/// tests and `on_each_backend`'s live leg, to reuse instead of starting a [`LocalStack`].
pub const LIVE_ENDPOINT_VAR: &str = "RUST_STREAM_LIVE_ENDPOINT";

/// The longest a receive on a [`live_broker`] long-polls: a stop waits for the receive in flight
/// while the app holds messages, so a stop takes at most about this long more than its handlers
/// rather than up to the 20 s of a default long poll (an idle app's stop gives it up after a
/// second), and a poll the stop gave up is soon over at the server.
pub const LIVE_POLL_SECONDS: i32 = 1;

/// The environment variable that names where [`LocalStack`] installs LocalStack and keeps its
/// logs, when the test binary's target dir will not do.
pub const LOCALSTACK_DIR_VAR: &str = "RUST_STREAM_LOCALSTACK_DIR";

/// The script that installs, starts and stops LocalStack: the one the repository runs too.
const SCRIPT: &str = include_str!("localstack.sh");

/// A LocalStack server for live tests: one named by [`LIVE_ENDPOINT_VAR`]
/// and reused, or one this process started, stopped when the last clone of its handle is dropped
/// (the [shared](Self::shared) one: when the process ends). Cheap to clone.
///
/// ```no_run
/// use rust_stream::testing::LocalStack;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let localstack = LocalStack::shared().expect("a LocalStack for the live tests");
/// // Region `us-east-1`, test credentials, long polls of at most 1 s (stops take no 20 s).
/// let broker = localstack.broker().await;
/// println!("SQS at {}", localstack.endpoint());
/// # let _ = broker;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LocalStack {
    server: Arc<Server>,
}

/// Why no LocalStack could be had.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LocalStackError {
    /// The folder to install it in, or its log, could not be written.
    #[error("cannot prepare {path} for LocalStack: {reason}")]
    Folder {
        /// The folder or file.
        path: PathBuf,
        /// What the system said.
        reason: String,
    },
    /// `bash` could not be run.
    #[error("cannot run bash to install and start LocalStack: {0}")]
    Bash(String),
    /// The install or the start failed; the log says why.
    #[error("LocalStack did not start (log: {}); its last lines:\n{tail}", log.display())]
    Start {
        /// The script's log: the install, the start, and the server's last lines.
        log: PathBuf,
        /// The log's last lines.
        tail: String,
    },
}

/// A server and, when this process started it, the pipe that keeps it running.
#[derive(Debug)]
struct Server {
    endpoint: String,
    started: Option<Started>,
}

/// The script in `serve` mode: it stops the server once `hold` is closed.
#[derive(Debug)]
struct Started {
    script: Mutex<Child>,
    hold: Mutex<Option<ChildStdin>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(started) = &self.started else {
            return;
        };
        // Closing the pipe is the stop; waiting for the script keeps the port busy no longer than
        // the handle, so a test that starts a server after this one finds everything stopped.
        drop(
            started
                .hold
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let _ = started
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .wait();
    }
}

impl LocalStack {
    /// The server named by [`LIVE_ENDPOINT_VAR`] when it is set, or else
    /// the one this process starts on first use and keeps until it ends (tests run one after
    /// another, and a start costs seconds; the first install, minutes). Blocks until the server
    /// is healthy; calls made meanwhile wait for the same start.
    ///
    /// # Errors
    ///
    /// Why the server could not be installed or started: the same answer for every later call,
    /// so that a failed install is not tried again by each test.
    pub fn shared() -> Result<Self, LocalStackError> {
        static SHARED: OnceLock<Result<LocalStack, LocalStackError>> = OnceLock::new();
        if let Some(endpoint) = named_endpoint() {
            return Ok(Self::reused(endpoint));
        }
        SHARED.get_or_init(Self::start).clone()
    }

    /// A new server for this handle and its clones alone, on a free port, stopped when the last
    /// of them is dropped. Blocks until it is healthy.
    ///
    /// # Errors
    ///
    /// Why the server could not be installed or started.
    pub fn start() -> Result<Self, LocalStackError> {
        let home = install_dir();
        std::fs::create_dir_all(&home).map_err(|error| LocalStackError::Folder {
            path: home.clone(),
            reason: error.to_string(),
        })?;
        let port = free_port().map_err(|error| LocalStackError::Folder {
            path: home.clone(),
            reason: format!("no free port on 127.0.0.1: {error}"),
        })?;
        let log = home.join(format!("serve-{port}.log"));
        let log_file = std::fs::File::create(&log).map_err(|error| LocalStackError::Folder {
            path: log.clone(),
            reason: error.to_string(),
        })?;
        let _ = writeln!(
            std::io::stderr().lock(),
            "rust-stream: starting LocalStack on 127.0.0.1:{port} for live tests (installed under {} \
             on first use, which takes minutes; log: {})",
            home.display(),
            log.display()
        );
        let mut script = Command::new("bash")
            .arg("-c")
            .arg(SCRIPT)
            .arg("localstack.sh")
            .arg("serve")
            .env("LOCALSTACK_HOME", &home)
            .env("LOCALSTACK_PORT", port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|error| LocalStackError::Bash(error.to_string()))?;
        let hold = script.stdin.take();
        let mut endpoint = String::new();
        let read = script
            .stdout
            .take()
            .map(|stdout| BufReader::new(stdout).read_line(&mut endpoint));
        let endpoint = endpoint.trim().to_owned();
        if !matches!(read, Some(Ok(_))) || endpoint.is_empty() {
            // The script printed no endpoint: it failed, and has stopped what it started.
            drop(hold);
            let _ = script.wait();
            return Err(LocalStackError::Start {
                tail: tail(&log, 40),
                log,
            });
        }
        Ok(Self {
            server: Arc::new(Server {
                endpoint,
                started: Some(Started {
                    script: Mutex::new(script),
                    hold: Mutex::new(hold),
                }),
            }),
        })
    }

    /// A server someone else runs, left running.
    fn reused(endpoint: String) -> Self {
        Self {
            server: Arc::new(Server {
                endpoint,
                started: None,
            }),
        }
    }

    /// The server's URL, `http://127.0.0.1:PORT` for one started here.
    pub fn endpoint(&self) -> &str {
        &self.server.endpoint
    }

    /// Whether this process started the server (rather than reusing one an environment variable
    /// named).
    pub fn is_started_here(&self) -> bool {
        self.server.started.is_some()
    }

    /// A broker on this server for a test: region `us-east-1`, test credentials, and long polls
    /// of at most a second, so that stopping an app does not wait out a 20 s receive (see
    /// [`live_broker`]).
    #[cfg(feature = "aws")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
    pub async fn broker(&self) -> crate::SqsBroker {
        live_broker(self.endpoint()).await
    }
}

/// A broker on a live SQS-compatible server for a test: region `us-east-1`, test credentials, and
/// long polls of at most [`LIVE_POLL_SECONDS`] whatever the subscriptions ask, so that stopping
/// an app (which waits for the receive in flight while it holds messages, so that what the poll
/// brings is not hidden) takes about a second more than its handlers rather than up to 20. The
/// transport is
/// [`AwsTransport::local`](crate::aws::AwsTransport::local): nothing is loaded, nothing can fail.
#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub async fn live_broker(endpoint: &str) -> crate::SqsBroker {
    let transport = crate::aws::AwsTransport::local(endpoint, "us-east-1");
    crate::SqsBroker::with_transport(crate::transport::layer::Hooked::new(transport, ShortPolls))
}

/// Caps each receive's long poll at [`LIVE_POLL_SECONDS`].
#[cfg(feature = "aws")]
struct ShortPolls;

#[cfg(feature = "aws")]
impl crate::transport::layer::Hooks for ShortPolls {
    fn receive_message(
        &self,
        inner: &impl crate::transport::Transport,
        queue_url: &str,
        mut request: crate::transport::ReceiveMessage,
    ) -> impl std::future::Future<
        Output = Result<Vec<crate::transport::ReceivedMessage>, crate::transport::TransportError>,
    > + Send {
        request.wait_time_seconds = Some(
            request
                .wait_time_seconds
                .map_or(LIVE_POLL_SECONDS, |wait| wait.min(LIVE_POLL_SECONDS)),
        );
        inner.receive_message(queue_url, request)
    }
}

/// The endpoint [`LIVE_ENDPOINT_VAR`] names, if it is set and not empty.
pub(super) fn named_endpoint() -> Option<String> {
    std::env::var(LIVE_ENDPOINT_VAR)
        .ok()
        .filter(|value| !value.is_empty())
}

/// Where LocalStack is installed: [`LOCALSTACK_DIR_VAR`], else `localstack` in the target dir the
/// test binary was built in (found by cargo's `CACHEDIR.TAG` above it; for a doc test, which runs
/// from a temporary folder, the nearest `target` beside the crate's manifest or above it), else a
/// per-user cache dir.
pub fn install_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(LOCALSTACK_DIR_VAR).filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    let built_in = std::env::current_exe()
        .ok()
        .and_then(|exe| target_dir_of(&exe));
    // cargo sets CARGO_MANIFEST_DIR for the tests it runs, doc tests included.
    let beside_manifest = || {
        let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
        manifest
            .ancestors()
            .map(|dir| dir.join("target"))
            .find(|target| target.is_dir())
    };
    if let Some(target) = built_in.or_else(beside_manifest) {
        return target.join("localstack");
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("rust-stream").join("localstack")
}

/// The cargo target dir a binary was built in: the nearest folder above it with cargo's
/// `CACHEDIR.TAG`, or else (a target dir cargo did not make itself has no tag) the folder above
/// the profile of a test binary, which is `<target>/<profile>/deps/<name>`.
fn target_dir_of(exe: &Path) -> Option<PathBuf> {
    if let Some(tagged) = exe
        .ancestors()
        .skip(1)
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
    {
        return Some(tagged.to_path_buf());
    }
    let deps = exe.parent().filter(|dir| dir.ends_with("deps"))?;
    Some(deps.parent()?.parent()?.to_path_buf())
}

/// A port nobody listens on now. Another process may take it before LocalStack does; the
/// script then says that the port is in use.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The last `lines` lines of a log, or why it could not be read.
fn tail(log: &Path, lines: usize) -> String {
    let mut text = String::new();
    if let Err(error) = std::fs::File::open(log).and_then(|mut file| file.read_to_string(&mut text))
    {
        return format!("(unreadable: {error})");
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_install_dir_is_the_target_dir_a_binary_was_built_in() {
        let root = std::env::temp_dir().join(format!("rust-stream-target-{}", std::process::id()));
        let deps = root.join("target/debug/deps");
        std::fs::create_dir_all(&deps).unwrap();
        std::fs::write(root.join("target/CACHEDIR.TAG"), "Signature").unwrap();
        assert_eq!(
            target_dir_of(&deps.join("service-0123")),
            Some(root.join("target"))
        );
        assert_eq!(target_dir_of(&root.join("elsewhere/bin")), None);
        std::fs::remove_file(root.join("target/CACHEDIR.TAG")).unwrap();
        assert_eq!(
            target_dir_of(&deps.join("service-0123")),
            Some(root.join("target")),
            "a target dir without its tag"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_script_carried_in_the_crate_is_the_one_with_the_pinned_version() {
        assert!(SCRIPT.contains("localstack-core[runtime]=="), "{SCRIPT}");
        assert!(SCRIPT.contains("do_serve"), "{SCRIPT}");
    }
}
