//! prox-conformance: locating the shared fixtures (`../shared/conformance`,
//! overridable with `PROX_SHARED`) and the project's own frozen fixtures
//! (`conformance/fixtures/`) for the conformance test suite.
//!
//! Shared fixtures live outside the repository. Tests call
//! [`require_shared`]: when the folder is missing it panics under `CI=true`
//! (a CI run must never silently skip) and otherwise prints a notice and
//! lets the test return early.

use std::path::{Path, PathBuf};

/// The shared folder: `$PROX_SHARED` if set, else `<workspace>/../shared`.
/// `None` when that directory does not exist.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("PROX_SHARED") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("..")
            .join("shared"),
    };
    dir.is_dir().then_some(dir)
}

/// The shared folder, or `None` after printing a skip notice. Panics when
/// the folder is missing and the environment variable `CI` is `true`.
pub fn require_shared(test: &str) -> Option<PathBuf> {
    match shared_dir() {
        Some(d) => Some(d),
        None => {
            let ci = std::env::var("CI").map(|v| v == "true").unwrap_or(false);
            if ci {
                panic!(
                    "{test}: shared fixtures folder not found (set PROX_SHARED or place it at ../shared); CI=true forbids skipping"
                );
            }
            eprintln!("{test}: SKIPPED, shared fixtures folder not found (set PROX_SHARED)");
            None
        }
    }
}

/// Loads `<shared>/conformance/<name>` as JSON, or `None` (see [`require_shared`]).
pub fn shared_json(test: &str, name: &str) -> Option<serde_json::Value> {
    let dir = require_shared(test)?;
    let path = dir.join("conformance").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{test}: cannot read {}: {e}", path.display()));
    Some(
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{test}: bad JSON in {}: {e}", path.display())),
    )
}

/// The project's own frozen fixtures directory (`conformance/fixtures`).
pub fn own_fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Loads one of the project's own frozen fixture files; panics when absent
/// (they are part of the repository).
pub fn own_json(name: &str) -> serde_json::Value {
    let path = own_fixtures_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON in {}: {e}", path.display()))
}

/// Decodes a lowercase hex string from a fixture, panicking with context.
pub fn hex_bytes(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_else(|e| panic!("bad hex {s:?}: {e}"))
}
