//! `rust-stream asyncapi` on a real service binary (the workspace's `fault_consumer` example):
//! its document printed pretty, compact with `--json`, written with `--output`; and its
//! refusals, each on standard error with exit status 1 and the binary named: a missing binary,
//! one that fails, one that prints no JSON, JSON that is no AsyncAPI 3 document, one that hangs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The queues the example's document is for.
const QUEUES: [(&str, &str); 2] = [
    ("FAULT_QUEUE", "cli-asyncapi-jobs.fifo"),
    ("FAULT_OUTPUT_QUEUE", "cli-asyncapi-done.fifo"),
];

/// An example of the workspace, built as the suite's tests build theirs (same profile).
fn example_binary(name: &str) -> PathBuf {
    // target/<profile>/deps/<this test> -> target/<profile>/examples/<example>
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in target/<profile>/deps");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the CLI crate lies in the workspace");
    let mut command = Command::new(env!("CARGO"));
    command.current_dir(workspace).args([
        "build",
        "--quiet",
        "--offline",
        "-p",
        "rust-stream-suite",
        "--example",
        name,
    ]);
    if profile_dir.ends_with("release") {
        command.arg("--release");
    }
    let built = command.output().expect("cargo runs");
    assert!(
        built.status.success(),
        "cargo build --example {name}: {}\n{}",
        built.status,
        String::from_utf8_lossy(&built.stderr)
    );
    let binary = profile_dir.join("examples").join(name);
    assert!(binary.exists(), "{} was not built", binary.display());
    binary
}

/// Runs `rust-stream asyncapi` with `args`, the example's queues in the environment when `queues`.
fn cli(args: &[&str], queues: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rust-stream"));
    for (name, value) in QUEUES {
        if queues {
            command.env(name, value);
        } else {
            command.env_remove(name);
        }
    }
    command
        .arg("asyncapi")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn ok(args: &[&str]) -> String {
    let output = cli(args, true);
    assert!(
        output.status.success(),
        "{args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Fails with exit status 1, nothing on stdout, one line on stderr naming `binary`; that line.
fn refused(args: &[&str], queues: bool, binary: &str) -> String {
    let output = cli(args, queues);
    assert_eq!(output.status.code(), Some(1), "{args:?} must fail");
    assert!(output.stdout.is_empty(), "{args:?} printed on stdout");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with(&format!("error: `{binary} --asyncapi`: ")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

/// The channels of a document and their addresses.
fn channels(document: &Value) -> Vec<(String, String)> {
    document["channels"]
        .as_object()
        .expect("channels")
        .iter()
        .map(|(name, channel)| {
            (
                name.clone(),
                channel["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A directory of this test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "rust-stream-cli-asyncapi-{}-{test}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// An executable shell script `name` with `body`.
    fn script(&self, name: &str, body: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_service_binarys_document_is_printed_pretty_compact_or_to_a_file() {
    let binary = example_binary("fault_consumer");
    let binary = binary.to_str().unwrap();
    let expected = vec![
        (
            "cli-asyncapi-done.fifo".to_owned(),
            "cli-asyncapi-done.fifo".to_owned(),
        ),
        (
            "cli-asyncapi-jobs.fifo".to_owned(),
            "cli-asyncapi-jobs.fifo".to_owned(),
        ),
    ];

    let pretty = ok(&[binary]);
    assert!(pretty.starts_with("{\n  \""), "not pretty: {pretty}");
    let document: Value = serde_json::from_str(&pretty).unwrap();
    assert_eq!(document["asyncapi"], "3.0.0");
    assert_eq!(document["info"]["title"], "fault-consumer");
    assert_eq!(channels(&document), expected);

    let compact = ok(&[binary, "--json"]);
    assert_eq!(compact.lines().count(), 1, "not compact: {compact}");
    assert_eq!(serde_json::from_str::<Value>(&compact).unwrap(), document);

    let scratch = Scratch::new("output");
    let file = scratch.0.join("fault-consumer.asyncapi.json");
    let said = ok(&[binary, "--output", file.to_str().unwrap()]);
    assert_eq!(
        said,
        format!(
            "wrote the AsyncAPI 3.0.0 document of {binary} (2 channels) to {}\n",
            file.display()
        )
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written, document);
    let said: Value =
        serde_json::from_str(&ok(&[binary, "--json", "--output", file.to_str().unwrap()])).unwrap();
    assert_eq!(said["channels"], 2);
    assert_eq!(said["output"], file.to_str().unwrap());

    // An output file that cannot be written: named, nothing printed.
    let missing_dir = scratch.0.join("no-such-dir").join("doc.json");
    let output = cli(&[binary, "--output", missing_dir.to_str().unwrap()], true);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "cannot write the AsyncAPI document of `{binary}` to {}",
            missing_dir.display()
        )),
        "{stderr}"
    );
}

#[test]
fn what_is_no_asyncapi_document_is_refused_with_the_binary_named() {
    // Missing.
    let missing = refused(&["/no/such/service"], true, "/no/such/service");
    assert!(missing.contains("no such binary"), "{missing}");

    // A service that fails: its exit status and what it said.
    let binary = example_binary("fault_consumer");
    let binary = binary.to_str().unwrap();
    let failed = refused(&[binary], false, binary);
    assert!(
        failed.contains("exited with status 2: error: FAULT_QUEUE is not set"),
        "{failed}"
    );

    // No JSON: /bin/echo prints its arguments, which shows the extra ones are passed after
    // `--asyncapi`.
    let echoed = refused(&["/bin/echo", "--", "hello", "there"], true, "/bin/echo");
    assert!(
        echoed.contains("printed no JSON document") && echoed.contains("`--asyncapi hello there`"),
        "{echoed}"
    );

    // JSON, but no AsyncAPI 3 document.
    let scratch = Scratch::new("refusals");
    let openapi = scratch.script("openapi", r#"echo '{"openapi":"3.1.0"}'"#);
    let refusal = refused(&[&openapi], true, &openapi);
    assert!(refusal.contains("without an `asyncapi` field"), "{refusal}");
    let old = scratch.script("old", r#"echo '{"asyncapi":"2.6.0","channels":{}}'"#);
    let refusal = refused(&[&old], true, &old);
    assert!(refusal.contains(r#"version "2.6.0", not 3.x"#), "{refusal}");
    let list = scratch.script("list", "echo '[1, 2]'");
    let refusal = refused(&[&list], true, &list);
    assert!(refusal.contains("not an object"), "{refusal}");

    // One that never ends is killed at the timeout.
    let hangs = scratch.script("hangs", "exec sleep 30");
    let started = std::time::Instant::now();
    let refusal = refused(&[&hangs, "--timeout", "0.5"], true, &hangs);
    assert!(refusal.contains("still running after 0.5 s"), "{refusal}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}
