//! Request counters and the Prometheus text exposition (format 0.0.4).
//!
//! Labels are bounded: `route` is the matched route template (or `other`),
//! `status` the numeric HTTP status, map labels come from published root
//! names (validated by the engine) and are escaped anyway.

use crate::registry::MapRegistry;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 14] = [
    0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Counters shared by every request.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// route -> status -> requests answered.
    requests: Mutex<BTreeMap<String, BTreeMap<u16, u64>>>,
    /// route -> latency histogram.
    latency: Mutex<BTreeMap<String, Histogram>>,
    /// HTTP requests being handled.
    pub(crate) in_flight: AtomicI64,
    /// Search jobs admitted and not yet started on the pool.
    pub(crate) queued: AtomicI64,
    /// Search jobs running on the pool.
    pub(crate) running: AtomicI64,
    /// Requests refused because the queue was full.
    pub(crate) rejected: AtomicU64,
    /// Requests whose deadline expired (cancelled).
    pub(crate) expired: AtomicU64,
    /// Queries answered (a batch counts each of its vectors).
    pub(crate) queries: AtomicU64,
    /// Background refresh passes, and those that failed.
    pub(crate) refreshes: AtomicU64,
    pub(crate) refresh_failures: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Escapes a label value (`\`, `"`, newline).
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Records one answered request.
    pub(crate) fn observe(&self, route: &str, status: u16, took: Duration) {
        // Route keys are allocated only the first time a route is seen.
        {
            let mut req = lock(&self.requests);
            if !req.contains_key(route) {
                req.insert(route.to_string(), BTreeMap::new());
            }
            if let Some(by_status) = req.get_mut(route) {
                *by_status.entry(status).or_default() += 1;
            }
        }
        let secs = took.as_secs_f64();
        let mut lat = lock(&self.latency);
        if !lat.contains_key(route) {
            lat.insert(route.to_string(), Histogram::default());
        }
        let Some(h) = lat.get_mut(route) else { return };
        if let Some(i) = BUCKETS.iter().position(|&b| secs <= b) {
            h.counts[i] += 1;
        }
        h.count += 1;
        h.sum += secs;
    }

    /// The Prometheus text exposition, including one `prox_map_info` series
    /// per published map naming its current descriptor.
    pub(crate) fn render(&self, maps: &MapRegistry) -> String {
        let mut o = String::new();
        let g = |o: &mut String, name: &str, kind: &str, help: &str, v: String| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        let _ = writeln!(
            o,
            "# HELP prox_http_requests_total HTTP requests answered, by route and status.\n# TYPE prox_http_requests_total counter"
        );
        let requests: Vec<((String, u16), u64)> = lock(&self.requests)
            .iter()
            .flat_map(|(r, by)| by.iter().map(move |(s, n)| ((r.clone(), *s), *n)))
            .collect();
        for ((route, status), n) in &requests {
            let _ = writeln!(
                o,
                "prox_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                esc(route)
            );
        }
        let _ = writeln!(
            o,
            "# HELP prox_http_errors_total HTTP requests answered with status >= 400, by route.\n# TYPE prox_http_errors_total counter"
        );
        let mut errors: BTreeMap<&str, u64> = BTreeMap::new();
        for ((route, status), n) in &requests {
            let e = errors.entry(route.as_str()).or_default();
            if *status >= 400 {
                *e += n;
            }
        }
        for (route, n) in errors {
            let _ = writeln!(o, "prox_http_errors_total{{route=\"{}\"}} {n}", esc(route));
        }
        let _ = writeln!(
            o,
            "# HELP prox_http_request_duration_seconds Request latency, arrival to response.\n# TYPE prox_http_request_duration_seconds histogram"
        );
        for (route, h) in lock(&self.latency).iter() {
            let r = esc(route);
            let mut acc = 0;
            for (b, c) in BUCKETS.iter().zip(h.counts) {
                acc += c;
                let _ = writeln!(
                    o,
                    "prox_http_request_duration_seconds_bucket{{route=\"{r}\",le=\"{b}\"}} {acc}"
                );
            }
            let _ = writeln!(
                o,
                "prox_http_request_duration_seconds_bucket{{route=\"{r}\",le=\"+Inf\"}} {}\nprox_http_request_duration_seconds_sum{{route=\"{r}\"}} {}\nprox_http_request_duration_seconds_count{{route=\"{r}\"}} {}",
                h.count, h.sum, h.count
            );
        }
        let ld = |a: &AtomicI64| a.load(Ordering::Relaxed).to_string();
        let lu = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        g(
            &mut o,
            "prox_http_in_flight",
            "gauge",
            "HTTP requests being handled.",
            ld(&self.in_flight),
        );
        g(
            &mut o,
            "prox_search_queue_depth",
            "gauge",
            "Search jobs admitted and waiting for a search thread.",
            ld(&self.queued),
        );
        g(
            &mut o,
            "prox_search_running",
            "gauge",
            "Search jobs running on the search pool.",
            ld(&self.running),
        );
        g(
            &mut o,
            "prox_search_rejected_total",
            "counter",
            "Requests refused with 503 (search queue or in-flight limit full).",
            lu(&self.rejected),
        );
        g(
            &mut o,
            "prox_search_deadline_expired_total",
            "counter",
            "Requests cancelled because their deadline expired.",
            lu(&self.expired),
        );
        g(
            &mut o,
            "prox_search_queries_total",
            "counter",
            "Query vectors answered (batch vectors counted one by one).",
            lu(&self.queries),
        );
        g(
            &mut o,
            "prox_refresh_total",
            "counter",
            "Background root refresh passes.",
            lu(&self.refreshes),
        );
        g(
            &mut o,
            "prox_refresh_failures_total",
            "counter",
            "Refresh passes or map loads that failed.",
            lu(&self.refresh_failures),
        );
        let _ = writeln!(
            o,
            "# HELP prox_map_info The descriptor currently served per map (value 1).\n# TYPE prox_map_info gauge"
        );
        let snaps = maps.snapshots();
        for s in &snaps {
            let _ = writeln!(
                o,
                "prox_map_info{{map=\"{}\",descriptor=\"{}\",generation=\"{}\"}} 1",
                esc(s.name()),
                s.descriptor(),
                s.generation()
            );
        }
        let _ = writeln!(
            o,
            "# HELP prox_map_records Records in the served version of each map.\n# TYPE prox_map_records gauge"
        );
        for s in &snaps {
            let _ = writeln!(
                o,
                "prox_map_records{{map=\"{}\"}} {}",
                esc(s.name()),
                s.len()
            );
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_and_labels_escaped() {
        let m = Metrics::default();
        m.observe("/a", 200, Duration::from_micros(300));
        m.observe("/a", 200, Duration::from_millis(3));
        m.observe("/a", 404, Duration::from_secs(9));
        m.observe("x\"y", 200, Duration::ZERO);
        let t = m.render(&MapRegistry::new());
        assert!(t.contains("prox_http_requests_total{route=\"/a\",status=\"200\"} 2"));
        assert!(t.contains("prox_http_errors_total{route=\"/a\"} 1"));
        assert!(
            t.contains("prox_http_request_duration_seconds_bucket{route=\"/a\",le=\"0.0005\"} 1")
        );
        assert!(
            t.contains("prox_http_request_duration_seconds_bucket{route=\"/a\",le=\"0.005\"} 2")
        );
        assert!(t.contains("prox_http_request_duration_seconds_bucket{route=\"/a\",le=\"5\"} 2"));
        assert!(t.contains("prox_http_request_duration_seconds_bucket{route=\"/a\",le=\"+Inf\"} 3"));
        assert!(t.contains("route=\"x\\\"y\""));
    }
}
