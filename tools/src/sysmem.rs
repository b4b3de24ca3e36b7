//! Memory sizes on the command line and memory facts from `/proc`: the
//! machine's total memory (for the default `--memory-limit`) and this
//! process's peak resident set (for build summaries).

use anyhow::{bail, Context, Result};

/// Parses a size such as `2G`, `512M`, `1.5GiB`, `64k` or `1000000`
/// (binary multiples: `K` = 1024).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let x: f64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a size (e.g. 2G, 512M, 1000000)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => bail!("{s:?}: unknown size unit {u:?} (use K, M, G or T)"),
    };
    let bytes = x * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        bail!("{s:?} is out of range");
    }
    Ok(bytes as u64)
}

/// `1.5 GiB`-style rendering of a byte count.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = bytes as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// A `kB` field of a `/proc` file such as `/proc/meminfo`, in bytes.
fn proc_kb(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The machine's total memory (`MemTotal`), if `/proc` tells.
pub fn machine_memory() -> Option<u64> {
    proc_kb("/proc/meminfo", "MemTotal")
}

/// This process's peak resident set size (`VmHWM`), if `/proc` tells.
pub fn peak_rss() -> Option<u64> {
    proc_kb("/proc/self/status", "VmHWM")
}

/// Total size of the files under `dir` (0 if it does not exist).
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        for bad in ["", "G", "12X", "-1G", "1..2M"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 29), "1.5 GiB");
    }

    #[test]
    fn proc_facts_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(machine_memory().unwrap() > 1 << 20);
            assert!(peak_rss().unwrap() > 0);
        }
    }
}
