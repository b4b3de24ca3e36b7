//! Helpers shared by the `prox` binary's test files (each includes this
//! module with `mod common;` and uses the part it needs).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The `prox` binary under test, without the caller's store or log
/// settings.
pub(crate) fn prox() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_prox"));
    c.env_remove("PROX_STORE").env_remove("RUST_LOG");
    c
}

/// Runs `prox ARGS`.
pub(crate) fn run(args: &[&str]) -> Output {
    prox().args(args).output().expect("run prox")
}

/// Runs a command that must succeed.
pub(crate) fn succeeds(args: &[&str]) -> Output {
    let o = run(args);
    assert!(
        o.status.success(),
        "prox {args:?} failed ({:?}):\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Runs a command that must succeed; returns stdout.
pub(crate) fn ok(args: &[&str]) -> String {
    String::from_utf8(succeeds(args).stdout).expect("utf-8 stdout")
}

/// A path as a CLI argument.
pub(crate) fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The seed passed to `prox datagen`: `PROX_SEED` when set, else `default`.
pub(crate) fn seed(default: u64) -> String {
    prox_testkit::seed(default).to_string()
}

/// The shape of a `prox datagen` set.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Base vectors.
    pub(crate) n: usize,
    /// Dimensions.
    pub(crate) dim: usize,
    /// Query vectors.
    pub(crate) queries: usize,
    /// Ground-truth neighbours per query.
    pub(crate) k: usize,
}

/// Runs `prox datagen` of `shape` with `seed` (and `extra` options) into
/// `out` (`base.fvecs`, `query.fvecs`, `gt.ivecs`).
pub(crate) fn datagen(out: &Path, shape: Shape, seed: &str, extra: &[&str]) {
    let (n, dim, queries, k) = (
        shape.n.to_string(),
        shape.dim.to_string(),
        shape.queries.to_string(),
        shape.k.to_string(),
    );
    let mut args = vec![
        "datagen",
        "--n",
        &n,
        "--dim",
        &dim,
        "--queries",
        &queries,
        "--k",
        &k,
        "--seed",
        seed,
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    ok(&args);
}

/// The rows of an `.fvecs` file.
pub(crate) fn read_fvecs(path: &Path) -> Vec<Vec<f32>> {
    let bytes = std::fs::read(path).expect("read fvecs");
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let d = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 4;
        let row = bytes[at..at + 4 * d]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        at += 4 * d;
        out.push(row);
    }
    out
}

/// The `CRMF` metadata of the named root `name` in `store` (through
/// `prox inspect --json`), e.g. `["prox.layout.arena"]`: a hex CID.
pub(crate) fn root_metadata(store: &str, name: &str) -> serde_json::Value {
    let first = |text: String| -> serde_json::Value {
        let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let manifest = first(ok(&["inspect", "--store", store, "--root", name, "--json"]));
    let crmf = manifest["root"].as_str().expect("root CID").to_string();
    first(ok(&["inspect", "--store", store, &crmf, "--json"]))["metadata"].clone()
}

/// The result ids (`.ivecs` bytes) of `prox query --k K` on map `name` in
/// `store` for `queries`, with `extra` options; written beside `queries`.
pub(crate) fn query_ids(
    store: &str,
    name: &str,
    queries: &Path,
    k: &str,
    extra: &[&str],
) -> Vec<u8> {
    let out = queries.with_extension(format!("{}.ivecs", std::process::id()));
    let mut args = vec![
        "query",
        "--store",
        store,
        "--name",
        name,
        "--queries",
        s(queries),
        "--k",
        k,
        "--out",
        s(&out),
    ];
    args.extend_from_slice(extra);
    ok(&args);
    let ids = std::fs::read(&out).expect("query --out file");
    let _ = std::fs::remove_file(&out);
    ids
}

/// `VERB --store STORE --name NAME FLAG FILE EXTRA...`: a command on a
/// named map with one file argument.
pub(crate) fn map_cmd<'a>(
    verb: &'a str,
    store: &'a Path,
    name: &'a str,
    flag: &'a str,
    file: &'a Path,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut v = vec![verb, "--store", s(store), "--name", name, flag, s(file)];
    v.extend_from_slice(extra);
    v
}
