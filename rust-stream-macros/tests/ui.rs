//! Compile-fail and compile-pass cases of `#[subscriber]`: each misuse in `ui/fail/` must fail
//! with the error snapshotted beside it, on the user's token; each look-alike in `ui/pass/` must
//! build.
//!
//! Compiler messages change between Rust releases, so the snapshots follow one toolchain,
//! [`PINNED`], which is also the workspace's declared minimum Rust version (a test holds the two
//! together): the suite runs on the minimum. On another toolchain the cases are skipped with a
//! note written straight to the terminal (not captured), except under CI, where a suite that did
//! not run fails. Regenerate snapshots with `TRYBUILD=overwrite cargo test -p
//! rust-stream-macros --test ui`, then read every `.stderr`.

use std::io::Write;
use std::process::Command;

/// The `rustc` release the `.stderr` snapshots were made with.
const PINNED: &str = "1.95.";

fn rustc_release() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let output = Command::new(rustc)
        .arg("--version")
        .output()
        .expect("run `rustc --version`");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn ui() {
    let release = rustc_release();
    if !release.starts_with(&format!("rustc {PINNED}")) {
        let note = format!(
            "the ui snapshots follow rustc {PINNED}x, this is {}",
            release.trim()
        );
        assert!(std::env::var_os("CI").is_none(), "{note}; CI must run them");
        // Straight to the terminal: libtest captures `eprintln!`, which would hide the skip.
        let _ = writeln!(std::io::stderr().lock(), "SKIPPED ui: {note}");
        return;
    }
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}

/// The declared minimum Rust version is the snapshots' toolchain, so the compile-fail suite is
/// proven on the minimum a user may build with.
#[test]
fn minimum_rust_version_is_the_pinned_toolchain() {
    let minimum = env!("CARGO_PKG_RUST_VERSION");
    assert!(
        format!("{minimum}.").starts_with(PINNED),
        "rust-version {minimum} differs from the ui snapshots' rustc {PINNED}x: raise one or \
         regenerate the other"
    );
}
