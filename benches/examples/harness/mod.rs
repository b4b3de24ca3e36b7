//! Shared by the `--engine-cmd` examples (`accel_engine`, `pq_engine`):
//! TEXMEX readers, the `.ivecs` id writer and the per-setting JSON report
//! line of `peer_bench.py`'s engine protocol.
#![allow(dead_code)]

use prox_engine::accel::hnsw::IdHit;
use std::io::Write;

/// Reads `.fvecs` / `.ivecs` row by row (streaming: the file is never held
/// in memory next to the rows, so it does not inflate peak RSS).
pub(crate) fn read_vecs(path: &str, int: bool) -> Vec<Vec<f32>> {
    use std::io::Read;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let mut r = std::io::BufReader::with_capacity(1 << 20, file);
    let mut out = Vec::new();
    let mut head = [0u8; 4];
    let mut buf = Vec::new();
    while r.read_exact(&mut head).is_ok() {
        let d = u32::from_le_bytes(head) as usize;
        buf.resize(4 * d, 0);
        r.read_exact(&mut buf)
            .unwrap_or_else(|e| panic!("{path}: truncated row: {e}"));
        let row: Vec<f32> = buf
            .chunks_exact(4)
            .map(|c| {
                let b = [c[0], c[1], c[2], c[3]];
                if int {
                    i32::from_le_bytes(b) as f32
                } else {
                    f32::from_le_bytes(b)
                }
            })
            .collect();
        out.push(row);
    }
    out
}

/// Reads a `.fvecs` file straight into one row-major buffer: `(dims, rows)`.
pub(crate) fn read_flat(path: &str) -> (usize, Vec<f32>) {
    use std::io::Read;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let len = file.metadata().map_or(0, |m| m.len() as usize);
    let mut r = std::io::BufReader::with_capacity(1 << 20, file);
    let mut head = [0u8; 4];
    let mut dims = 0;
    let mut flat: Vec<f32> = Vec::new();
    let mut buf = Vec::new();
    while r.read_exact(&mut head).is_ok() {
        let d = u32::from_le_bytes(head) as usize;
        if dims == 0 {
            dims = d;
            flat.reserve_exact(len / (4 * d + 4) * d);
        }
        assert_eq!(d, dims, "{path}: rows of different dimensions");
        buf.resize(4 * d, 0);
        r.read_exact(&mut buf)
            .unwrap_or_else(|e| panic!("{path}: truncated row: {e}"));
        flat.extend(
            buf.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
    }
    assert!(dims > 0, "{path}: no rows");
    (dims, flat)
}

pub(crate) fn write_ivecs(path: &std::path::Path, rows: &[Vec<i32>]) {
    let mut buf = Vec::new();
    for r in rows {
        buf.extend_from_slice(&(r.len() as u32).to_le_bytes());
        for &x in r {
            buf.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(path, buf).expect("write ids");
}

pub(crate) fn to_row(hits: &[IdHit], k: usize) -> Vec<i32> {
    let mut row: Vec<i32> = hits.iter().map(|h| h.id as i32).collect();
    row.resize(k, -1);
    row
}

/// Writes the ids of one sweep setting to `out/ids_<tag>.ivecs` and prints
/// the harness's `search` event (recall and QPS when ground truth is given).
pub(crate) fn report_search(
    out: &std::path::Path,
    tag: &str,
    p: &str,
    ids: &[Vec<i32>],
    gt: Option<&Vec<Vec<f32>>>,
    k: usize,
    best: f64,
) {
    let f = out.join(format!("ids_{tag}.ivecs"));
    write_ivecs(&f, ids);
    let recall = gt.map(|gt| {
        let mut hit = 0usize;
        for (row, g) in ids.iter().zip(gt) {
            let truth: Vec<i32> = g[..k].iter().map(|&x| x as i32).collect();
            hit += row.iter().filter(|x| truth.contains(x)).count();
        }
        hit as f64 / (k * ids.len()) as f64
    });
    let extra = recall.map_or(String::new(), |r| {
        format!(
            r#", "recall": {r:.4}, "qps": {:.0}"#,
            ids.len() as f64 / best
        )
    });
    println!(
        r#"{{"event": "search", "param": "{p}", "seconds": {best}, "ids": "{}"{extra}}}"#,
        f.display()
    );
    std::io::stdout().flush().ok();
}

/// Prints the process's peak and current resident set size (`VmHWM`,
/// `VmRSS` of `/proc/self/status`, MB) at `phase` to stderr, so the phase
/// that sets the peak RSS can be found; silent where `/proc` is missing.
pub(crate) fn report_memory(phase: &str) {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(-1.0, |kb| kb / 1024.0)
    };
    eprintln!(
        r#"{{"event": "memory", "phase": "{phase}", "vm_hwm_mb": {:.1}, "vm_rss_mb": {:.1}}}"#,
        field("VmHWM:"),
        field("VmRSS:")
    );
}
