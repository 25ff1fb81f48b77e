//! `rust-stream asyncapi`: a service binary's AsyncAPI 3.0 document, as the binary prints it when
//! run with `--asyncapi` (a rust-stream app builds it without connecting), checked to be one
//! before it is printed or written.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::Failure;

/// What the binary printed on standard error, at most this many characters in a refusal.
const STDERR_SHOWN: usize = 2_000;

/// What the binary printed on standard output, at most this many characters in a refusal.
const STDOUT_SHOWN: usize = 200;

/// How often the binary's end is looked for while it runs.
const POLL: Duration = Duration::from_millis(20);

/// What `asyncapi` was asked for.
pub(crate) struct Request {
    /// The service binary.
    pub(crate) binary: PathBuf,
    /// Arguments after `--asyncapi`.
    pub(crate) args: Vec<String>,
    /// Where to write the document; standard output when `None`.
    pub(crate) output: Option<PathBuf>,
    /// How long the binary may take.
    pub(crate) timeout: Duration,
    /// Compact JSON (`--json`) instead of pretty.
    pub(crate) json: bool,
}

/// Runs the binary, checks its document and returns what to print.
pub(crate) fn run(request: &Request) -> Result<String, Failure> {
    let shown = request.binary.display().to_string();
    let refuse = |why: String| Failure::Asyncapi(format!("`{shown} --asyncapi`: {why}"));
    let printed = output_within(&request.binary, &request.args, request.timeout, &shown)?;
    let document = document(&printed).map_err(refuse)?;
    let mut text = if request.json {
        serde_json::to_string(&document)
    } else {
        serde_json::to_string_pretty(&document)
    }
    .map_err(|error| refuse(format!("cannot write its document as JSON: {error}")))?;
    text.push('\n');
    let Some(path) = &request.output else {
        return Ok(text);
    };
    std::fs::write(path, &text).map_err(|error| {
        Failure::Asyncapi(format!(
            "cannot write the AsyncAPI document of `{shown}` to {}: {error}",
            path.display()
        ))
    })?;
    let channels = document["channels"].as_object().map_or(0, |c| c.len());
    Ok(if request.json {
        super::to_json(&serde_json::json!({
            "binary": shown,
            "output": path.display().to_string(),
            "asyncapi": document["asyncapi"],
            "channels": channels,
        }))
    } else {
        format!(
            "wrote the AsyncAPI {} document of {shown} ({channels} channels) to {}\n",
            document["asyncapi"].as_str().unwrap_or_default(),
            path.display()
        )
    })
}

/// The binary's standard output when it ran to a successful end within `timeout`.
fn output_within(
    binary: &Path,
    args: &[String],
    timeout: Duration,
    shown: &str,
) -> Result<Vec<u8>, Failure> {
    let refuse = |why: String| Failure::Asyncapi(format!("`{shown} --asyncapi`: {why}"));
    let mut child = Command::new(binary)
        .arg("--asyncapi")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| {
            refuse(match error.kind() {
                std::io::ErrorKind::NotFound => {
                    "no such binary: give the path of a service binary (e.g. \
                     target/release/examples/fault_consumer)"
                        .to_owned()
                }
                std::io::ErrorKind::PermissionDenied => {
                    "cannot run it (permission denied): is it an executable?".to_owned()
                }
                _ => format!("cannot run it: {error}"),
            })
        })?;
    // Read on threads, so that a binary filling a pipe does not stall, and through channels, so
    // that a grandchild holding a pipe open cannot hold this command past its deadline.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(POLL),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(refuse(format!(
                    "still running after {} s: a service prints its document and exits at once \
                     with --asyncapi (does this binary support it?); give more time with \
                     --timeout SECONDS",
                    timeout.as_secs_f64()
                )));
            }
            Err(error) => return Err(refuse(format!("cannot wait for it: {error}"))),
        }
    };
    let remaining = deadline.saturating_duration_since(Instant::now());
    let stdout = stdout.recv_timeout(remaining).unwrap_or_default();
    let stderr = stderr.recv_timeout(POLL).unwrap_or_default();
    if !status.success() {
        let ended = status.code().map_or_else(
            || "was killed by a signal".to_owned(),
            |code| format!("exited with status {code}"),
        );
        // One line, as every refusal of the command line.
        let said = String::from_utf8_lossy(&stderr)
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        return Err(refuse(if said.is_empty() {
            format!("{ended} and said nothing on standard error")
        } else {
            format!("{ended}: {}", cut(&said, STDERR_SHOWN))
        }));
    }
    Ok(stdout)
}

/// A pipe read to its end on a thread; the bytes arrive on the channel.
fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (send, receive) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = send.send(bytes);
        });
    }
    receive
}

/// The AsyncAPI 3 document in `printed`, or why it is none.
fn document(printed: &[u8]) -> Result<serde_json::Value, String> {
    let text = String::from_utf8_lossy(printed);
    let document: serde_json::Value = serde_json::from_str(&text).map_err(|error| {
        format!(
            "printed no JSON document ({error}); it printed `{}`; is it a rust-stream service \
             that supports --asyncapi?",
            cut(text.trim(), STDOUT_SHOWN)
        )
    })?;
    let Some(object) = document.as_object() else {
        return Err("printed JSON that is not an object, so no AsyncAPI document".to_owned());
    };
    match object.get("asyncapi") {
        Some(serde_json::Value::String(version)) if version.starts_with("3.") => Ok(document),
        Some(version) => Err(format!(
            "printed an AsyncAPI document of version {version}, not 3.x"
        )),
        None => Err(
            "printed a JSON object without an `asyncapi` field, so no AsyncAPI document".to_owned(),
        ),
    }
}

/// `text` cut to `most` characters, with `…` when cut.
fn cut(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        text.to_owned()
    } else {
        text.chars().take(most).collect::<String>() + "…"
    }
}

#[cfg(test)]
mod tests {
    use super::document;

    #[test]
    fn only_a_json_object_with_an_asyncapi_3_version_is_a_document() {
        assert!(document(br#"{"asyncapi":"3.0.0","channels":{}}"#).is_ok());
        let refusals = [
            (&b"hello"[..], "printed no JSON document"),
            (b"[1]", "not an object"),
            (br#"{"openapi":"3.1.0"}"#, "without an `asyncapi` field"),
            (br#"{"asyncapi":"2.6.0"}"#, "version \"2.6.0\", not 3.x"),
            (br#"{"asyncapi":3}"#, "version 3, not 3.x"),
        ];
        for (printed, why) in refusals {
            let refusal = document(printed).unwrap_err();
            assert!(refusal.contains(why), "{refusal}");
        }
    }
}
