//! The one rule for a test whose precondition is missing: it fails, unless the run opted out.
//!
//! Std only, so that crates below the test kit (whose tests cannot take it as a dependency
//! without a circle) include this same file with `#[path]` instead of a copy of their own.

use std::fs;
use std::io::Write;

/// The environment variable of the explicit opt-out (`scripts/test --unit-only`).
pub const UNIT_ONLY_ENV: &str = "GATE64_UNIT_ONLY";
/// The file, named by `scripts/test`, where every skip is written as a line.
pub const SKIP_LOG_ENV: &str = "GATE64_SKIP_LOG";

/// A test whose precondition `why` is missing (a tool, root, a kernel feature) calls this and
/// then returns. Without the opt-out (`GATE64_UNIT_ONLY`) it panics, naming the test and what
/// is missing: a run that was not told to leave such tests out never passes them by skipping.
/// With it, it prints `skipping <test>: <why>` and adds that line to the file named by
/// `GATE64_SKIP_LOG`, from which `scripts/test` counts the skips.
pub fn skip_or_fail(test: &str, why: &str) {
    if std::env::var_os(UNIT_ONLY_ENV).is_none() {
        panic!(
            "{test}: {why}. `sudo scripts/test` installs and checks what the tests need; to run \
             without it, opt out explicitly with `scripts/test --unit-only` ({UNIT_ONLY_ENV}=1)"
        );
    }
    let line = format!("skipping {test}: {why}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        // Appends of one short line are atomic on Linux, so tests in parallel do not mix.
        if let Ok(mut f) = fs::OpenOptions::new().append(true).create(true).open(path) {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}
