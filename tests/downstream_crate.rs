//! A crate of someone else's, tested the way `docs/testing.md` says: `tests/downstream/` is the
//! guide's example crate (a payments service and its live test, a path dependency on
//! `rust-stream`), and every one of its files stands in the guide word for word. The test copies
//! it beside nothing of this repository but the library, and runs `cargo test` in it: both legs of
//! its `on_each_backend` test, with the LocalStack `RUST_STREAM_LIVE_ENDPOINT` names or one the
//! kit starts (skipped as the kit says under `RUST_STREAM_SKIP_LIVE=1`, never under CI).
//!
//! The build reuses this workspace's: `CARGO_TARGET_DIR` is this workspace's target dir, the
//! workspace's `Cargo.lock` is copied in (the same versions), and the workspace's debug-info
//! profile and `rust-stream` features are passed on the command line, so that most dependencies
//! hash as they do here (a cold build of the AWS SDK costs minutes). None of that changes what
//! the crate is.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The example crate's files, as the guide shows them.
const FILES: [&str; 3] = ["Cargo.toml", "src/lib.rs", "tests/live.rs"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_file_of_the_example_crate_is_in_the_guide() {
    let guide = std::fs::read_to_string(root().join("docs/testing.md")).unwrap();
    for file in FILES {
        let text = std::fs::read_to_string(root().join("tests/downstream").join(file)).unwrap();
        assert!(
            guide.contains(&text),
            "docs/testing.md does not show tests/downstream/{file} as it is:\n{text}"
        );
    }
}

#[test]
fn the_guides_example_crate_passes_its_tests() {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target dir")
        .to_path_buf();
    // Outside this workspace, so that cargo does not take it for a member of it.
    let home = std::env::temp_dir().join(format!("rust-stream-downstream-{}", std::process::id()));
    let krate = home.join("payments");
    for file in FILES {
        let to = krate.join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let text = std::fs::read_to_string(root().join("tests/downstream").join(file)).unwrap();
        // The guide's crate sits beside a checkout; this one points at this checkout.
        let text = text.replace(
            r#"path = "../rust-stream/rust-stream""#,
            &format!(
                "path = {:?}",
                root().join("rust-stream").display().to_string()
            ),
        );
        std::fs::write(to, text).unwrap();
    }
    std::fs::copy(root().join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();

    let started = Instant::now();
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(&krate)
        .args([
            "test",
            "--features",
            "rust-stream/schemars,rust-stream/opentelemetry",
        ])
        .args(["--config", r#"profile.dev.debug="line-tables-only""#])
        .args(["--config", r#"profile.dev.package."*".debug=false"#])
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "cargo test in the example crate took {:?}",
        started.elapsed()
    );
    std::fs::remove_dir_all(&home).unwrap();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("test a_payment_is_booked_on_each_backend ... ok"),
        "{stdout}"
    );
    assert!(
        stdout.contains("test the_service_creates_its_queues_on_localstack ... ok"),
        "{stdout}"
    );
    if std::env::var_os(rust_stream::testing::LIVE_ENDPOINT_VAR).is_some() {
        assert!(!stderr.contains("SKIPPED"), "{stderr}");
    }
}
