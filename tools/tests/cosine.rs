//! Cosine maps over real embeddings: the debian-minilm base set (59,251 x
//! 384 MiniLM vectors, some of whose unit normalisation cycles instead of
//! reaching a fixed point) builds as a cosine map through the CLI, and its
//! exact search equals a brute force over the prepared vectors, bit for bit.

mod common;

use common::{prox, read_fvecs};
use prox_engine::proximity::math::{prepare, sqrt_floor};
use prox_kernels::Metric;
use std::path::{Path, PathBuf};

/// `../shared` (or `PROX_SHARED`); `None` (skip) when absent, a failure
/// under CI.
fn shared() -> Option<PathBuf> {
    let dir = std::env::var_os("PROX_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    if dir.join("bench/data/debian-minilm/base.fvecs").is_file() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "shared bench data missing at {}",
        dir.display()
    );
    eprintln!("skipped: no shared bench data at {}", dir.display());
    None
}

fn write_fvecs(path: &Path, rows: &[Vec<f32>]) {
    let mut bytes = Vec::new();
    for r in rows {
        bytes.extend_from_slice(&(r.len() as u32).to_le_bytes());
        for x in r {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).expect("write fvecs");
}

/// The canonical cosine score (proximity-format.md 11.2).
fn cosine_score(a: &[f32], b: &[f32]) -> f64 {
    let mut dot = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        dot += f64::from(x) * f64::from(y);
    }
    let s = 1.0 - dot.clamp(-1.0, 1.0);
    if s == 0.0 {
        0.0
    } else {
        s
    }
}

/// The reference's rule alone (proximity-format.md 11.1): true when the
/// unit iteration reaches a fixed point within 16 rounds.
fn spec_converges(v: &[f32]) -> bool {
    let mut v = v.to_vec();
    for _ in 0..16 {
        let n2: f64 = v.iter().fold(0.0, |a, &x| a + f64::from(x) * f64::from(x));
        let inv = 1.0 / sqrt_floor(n2);
        let w: Vec<f32> = v
            .iter()
            .map(|&x| (f64::from(x) * inv) as f32)
            .map(|y| if y == 0.0 { 0.0 } else { y })
            .collect();
        if w.iter().zip(&v).all(|(a, b)| a.to_bits() == b.to_bits()) {
            return true;
        }
        v = w;
    }
    false
}

#[test]
fn debian_minilm_builds_as_a_cosine_map_and_exact_search_is_brute_force() {
    let Some(shared) = shared() else { return };
    let data = shared.join("bench/data/debian-minilm");
    let base = read_fvecs(&data.join("base.fvecs"));
    let dims = base[0].len() as u32;
    let prepared: Vec<Vec<f32>> = base
        .iter()
        .map(|v| prepare(Metric::Cosine, dims, v, None).expect("every vector prepares"))
        .collect();
    // The set holds vectors the reference refuses (key 0x59e among them).
    let cycling: Vec<usize> = base
        .iter()
        .enumerate()
        .filter(|(_, v)| !spec_converges(v))
        .map(|(i, _)| i)
        .collect();
    assert!(cycling.contains(&0x59e), "cycling rows: {cycling:?}");
    for &i in &cycling {
        let again = prepare(Metric::Cosine, dims, &prepared[i], None).unwrap();
        assert_eq!(again, prepared[i], "row {i} re-prepares to itself");
    }

    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("db");
    let store = store.to_str().unwrap();
    let built = prox()
        .args([
            "build", "--store", store, "--name", "m", "--metric", "cosine",
        ])
        .arg("--input")
        .arg(data.join("base.fvecs"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "build failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );

    let queries: Vec<Vec<f32>> = read_fvecs(&data.join("query.fvecs"))
        .into_iter()
        .take(40)
        .collect();
    let qfile = tmp.path().join("q.fvecs");
    write_fvecs(&qfile, &queries);
    let k = 10;
    let out = prox()
        .args(["query", "--store", store, "--name", "m", "--k", "10"])
        .args(["--mode", "exact", "--path", "native", "--json"])
        .arg("--queries")
        .arg(&qfile)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "query failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), queries.len());

    for (qi, (q, line)) in queries.iter().zip(&lines).enumerate() {
        let q = prepare(Metric::Cosine, dims, q, None).unwrap();
        let mut scored: Vec<(f64, u64)> = prepared
            .iter()
            .enumerate()
            .map(|(i, v)| (cosine_score(&q, v), i as u64))
            .collect();
        scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let got: Vec<(f64, u64)> = line["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let key = hex::decode(r["key"].as_str().unwrap()).unwrap();
                let id = u64::from_be_bytes(key.try_into().unwrap());
                (r["score"].as_f64().unwrap(), id)
            })
            .collect();
        assert_eq!(got.len(), k, "query {qi}");
        for (rank, (g, w)) in got.iter().zip(&scored).enumerate() {
            assert_eq!(g.1, w.1, "query {qi} rank {rank}: key");
            assert_eq!(
                g.0.to_bits(),
                w.0.to_bits(),
                "query {qi} rank {rank}: score"
            );
        }
    }
}
