//! `prox bench serve`: a bounded closed-loop HTTP load generator for the
//! search API, compared in the same run with in-process search of the same
//! map at the same thread count.
//!
//! Each client thread owns one keep-alive connection and sends the next
//! query as soon as the previous answer arrives (closed loop), for a fixed
//! duration per concurrency level. Request bodies are serialized before the
//! clock starts; responses are checked for status 200 only (recall is
//! measured in a separate, untimed pass). Latencies go into a fixed
//! 1-microsecond histogram (0..1 s, plus an overflow bucket), so memory is
//! bounded whatever the duration.
//!
//! CPU per query comes from the kernel's per-thread run time
//! (`/proc/thread-self/schedstat` of each load or in-process search thread,
//! `/proc/PID/task/*/schedstat` of the server with `--server-pid`), so the
//! server's cost outside the search is its CPU per HTTP query minus the
//! in-process search's CPU per query at the same settings.

use crate::io;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use prox_engine::index::{self, QueryMode, Request, Scratch};
use prox_engine::proximity;
use prox_engine::Index;
use prox_serve::client::{resolve_url, Client};
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Examples for `prox bench serve --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox serve --store db --http 127.0.0.1:7700 --search-threads 2 &
  prox bench serve --url http://127.0.0.1:7700 --name minilm --queries q.fvecs \\
      --gt gt.ivecs --ef 24 --concurrency 1,8,64 --duration 30s --store db --threads 2

For each concurrency level, prints QPS and p50/p95/p99 latency of
POST /v1/maps/NAME/search; with --store, also in-process single-query and
batch QPS of the same map and settings at --threads, measured in the same
run, and the ratio of HTTP to in-process single-query throughput. With
--rounds N the measurements alternate N times (slices of --duration / N)
and each ratio is also reported per round with its median.

  prox bench serve --url http://127.0.0.1:7700 --name minilm --queries q.fvecs \
      --body binary --server-pid $SERVER_PID --store db --concurrency 8

--body binary sends little-endian f32 rows (options in the query string);
--server-pid reports the server's CPU per query, and with --store the part
of it outside the search (server CPU per HTTP query minus in-process search
CPU per query).";

/// How the search requests carry their vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BodyKind {
    /// A JSON body with the vector as numbers.
    Json,
    /// `application/octet-stream` little-endian f32, options in the query
    /// string.
    Binary,
}

/// Arguments of `prox bench serve`.
#[derive(Debug, Clone, Args)]
pub struct BenchServeArgs {
    /// Server base URL (http://host:port).
    #[arg(long)]
    pub url: String,
    /// Map name.
    #[arg(long)]
    pub name: String,
    /// Query vectors (.fvecs, .npy, ...).
    #[arg(long)]
    pub queries: PathBuf,
    /// Ground truth (.ivecs) for a recall pass (untimed).
    #[arg(long)]
    pub gt: Option<PathBuf>,
    /// Concurrent clients per level (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    pub concurrency: Vec<usize>,
    /// Duration of each level (e.g. 30s, 500ms, 2m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// HNSW ef sent with every query (default: the sidecar's).
    #[arg(long)]
    pub ef: Option<usize>,
    /// Search mode sent with every query (auto, exact, fast, balanced, high).
    #[arg(long, default_value = "auto")]
    pub mode: String,
    /// Bearer token file.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The server's store: also measure in-process search of the same map.
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// In-process search threads (compare with the server's --search-threads).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Alternate the rows this many times, each slice `--duration / N`
    /// long (with `--store`: in-process single, batch, then every HTTP
    /// level, per round). Totals are over all slices; each HTTP level's
    /// ratio to in-process single is also given per round, with the
    /// median, so drift in a shared machine's speed hits both sides alike.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Request body format.
    #[arg(long, value_enum, default_value_t = BodyKind::Json)]
    pub body: BodyKind,
    /// The server's process id (same machine): report its CPU per query
    /// from /proc.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Print one JSON object per measurement on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Parses `30s`, `500ms`, `2m` or plain seconds.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?} (e.g. 30s, 500ms, 2m)"))?;
    let secs = v * mul;
    if !(0.01..=3600.0).contains(&secs) {
        return Err(format!("duration {s:?} must be between 10ms and 1h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Latency histogram: 1 µs buckets up to 1 s, then one overflow bucket.
struct Hist {
    counts: Vec<u64>,
    over: u64,
    max_us: u64,
}

const HIST_US: usize = 1_000_000;

impl Hist {
    fn new() -> Hist {
        Hist {
            counts: vec![0; HIST_US],
            over: 0,
            max_us: 0,
        }
    }
    fn add(&mut self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        self.max_us = self.max_us.max(us);
        match self.counts.get_mut(us as usize) {
            Some(c) => *c += 1,
            None => self.over += 1,
        }
    }
    fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.over += o.over;
        self.max_us = self.max_us.max(o.max_us);
    }
    fn total(&self) -> u64 {
        self.counts.iter().sum::<u64>() + self.over
    }
    /// The `p` quantile in milliseconds (overflow reports the maximum).
    fn quantile_ms(&self, p: f64) -> f64 {
        let n = self.total();
        if n == 0 {
            return f64::NAN;
        }
        let rank = ((p * n as f64).ceil() as u64).clamp(1, n);
        let mut acc = 0;
        for (us, c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= rank {
                return us as f64 / 1000.0;
            }
        }
        self.max_us as f64 / 1000.0
    }
}

/// One measured configuration.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    what: String,
    threads: usize,
    queries: u64,
    errors: u64,
    secs: f64,
    qps: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    /// CPU of the measuring threads per query (load generator or
    /// in-process search), µs.
    cpu_us_per_query: Option<f64>,
    /// CPU of the server process per query, µs (`--server-pid`).
    server_cpu_us_per_query: Option<f64>,
}

fn per_query_us(ns: Option<u64>, n: u64) -> Option<f64> {
    ns.filter(|_| n > 0).map(|ns| ns as f64 / 1000.0 / n as f64)
}

fn row(what: &str, threads: usize, h: &Hist, errors: u64, secs: f64) -> Row {
    let n = h.total();
    Row {
        what: what.to_string(),
        threads,
        queries: n,
        errors,
        secs,
        qps: n as f64 / secs.max(1e-9),
        p50_ms: h.quantile_ms(0.50),
        p95_ms: h.quantile_ms(0.95),
        p99_ms: h.quantile_ms(0.99),
        cpu_us_per_query: None,
        server_cpu_us_per_query: None,
    }
}

/// A row's measurements summed over rounds.
struct Tally {
    hist: Hist,
    errors: u64,
    secs: f64,
    /// CPU ns of the measuring threads; `None` once any slice lacked it.
    cpu_ns: Option<u64>,
    server_ns: Option<u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            hist: Hist::new(),
            errors: 0,
            secs: 0.0,
            cpu_ns: Some(0),
            server_ns: Some(0),
        }
    }

    fn add(&mut self, m: &Measured, server_ns: Option<u64>) {
        self.hist.merge(&m.hist);
        self.errors += m.errors;
        self.secs += m.secs;
        self.cpu_ns = self.cpu_ns.zip(m.cpu_ns).map(|(a, b)| a + b);
        self.server_ns = self.server_ns.zip(server_ns).map(|(a, b)| a + b);
    }

    fn row(&self, what: &str, threads: usize, server: bool) -> Row {
        let mut r = row(what, threads, &self.hist, self.errors, self.secs);
        r.cpu_us_per_query = per_query_us(self.cpu_ns, r.queries);
        if server {
            r.server_cpu_us_per_query = per_query_us(self.server_ns, r.queries);
        }
        r
    }
}

/// Run time of the calling thread, ns (`/proc/thread-self/schedstat`).
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Run time of every live thread of process `pid`, ns.
fn process_cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0u64;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = t.ok()?.path().join("schedstat");
        // A thread may exit between the listing and the read.
        if let Ok(s) = std::fs::read_to_string(path) {
            total += s.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(total)
}

/// What one closed-loop slice measured.
struct Measured {
    hist: Hist,
    errors: u64,
    secs: f64,
    /// Summed run time of the worker threads over the slice, ns.
    cpu_ns: Option<u64>,
}

/// The median of `xs` (the mean of the middle two for an even count; NaN
/// when empty).
fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The request body of query `q`: JSON, or its little-endian f32 row.
fn body(args: &BenchServeArgs, q: &[f32]) -> Vec<u8> {
    if args.body == BodyKind::Binary {
        return q.iter().flat_map(|x| x.to_le_bytes()).collect();
    }
    let mut v = serde_json::json!({"vector": q, "k": args.k, "mode": args.mode});
    if let Some(ef) = args.ef {
        v["ef"] = serde_json::json!(ef);
    }
    v.to_string().into_bytes()
}

/// The search path, with the options in the query string for a binary
/// body, and the body's content type.
fn search_target(args: &BenchServeArgs) -> (String, &'static str) {
    let mut path = format!("/v1/maps/{}/search", args.name);
    match args.body {
        BodyKind::Json => (path, "application/json"),
        BodyKind::Binary => {
            path.push_str(&format!("?k={}&mode={}", args.k, args.mode));
            if let Some(ef) = args.ef {
                path.push_str(&format!("&ef={ef}"));
            }
            (path, "application/octet-stream")
        }
    }
}

/// Runs `threads` closed-loop workers for `dur`: each takes the next item
/// index (round robin over `items`) and runs `op` on it as soon as its
/// previous one returns, timing it. `make` builds one worker's `op`
/// (its connection, its scratch) before the clock starts; `op` returning
/// `false` counts an error instead of a latency.
fn closed_loop<M, F>(threads: usize, items: usize, dur: Duration, make: M) -> Measured
where
    M: Fn() -> F + Sync,
    F: FnMut(usize) -> bool,
{
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let ready = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (next, stop, ready, make) = (&next, &stop, &ready, &make);
                sc.spawn(move || {
                    let mut op = make();
                    let mut h = Hist::new();
                    let mut errors = 0u64;
                    ready.wait();
                    let cpu0 = thread_cpu_ns();
                    while !stop.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed) % items;
                        let t = Instant::now();
                        if op(i) {
                            h.add(t.elapsed());
                        } else {
                            errors += 1;
                        }
                    }
                    let cpu = thread_cpu_ns().zip(cpu0).map(|(b, a)| b.saturating_sub(a));
                    (h, errors, cpu)
                })
            })
            .collect();
        ready.wait();
        let t0 = Instant::now();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        let secs = t0.elapsed().as_secs_f64();
        let mut m = Measured {
            hist: Hist::new(),
            errors: 0,
            secs,
            cpu_ns: Some(0),
        };
        for w in workers {
            if let Ok((h, e, cpu)) = w.join() {
                m.hist.merge(&h);
                m.errors += e;
                m.cpu_ns = m.cpu_ns.zip(cpu).map(|(a, b)| a + b);
            }
        }
        m
    })
}

/// `c` closed-loop HTTP clients, each on its own keep-alive connection,
/// sending the pre-encoded `requests`; only the status of each answer is
/// checked (anything but 200, or an I/O error, counts as an error).
fn http_level(client: &Client, requests: &[Vec<u8>], c: usize, dur: Duration) -> Measured {
    closed_loop(c, requests.len(), dur, || {
        let mut cl = client.clone();
        let mut body = Vec::with_capacity(4096);
        move |i| matches!(cl.send_prepared(&requests[i], &mut body), Ok(200))
    })
}

/// `threads` threads each searching one query at a time in process,
/// through the same [`Index::search`] the server runs.
fn inproc_single(
    snap: &Index,
    queries: &io::Matrix,
    q: &Request,
    threads: usize,
    dur: Duration,
) -> Measured {
    closed_loop(threads, queries.len(), dur, || {
        let mut scratch = Scratch::default();
        move |i| snap.search(&mut scratch, queries.row(i), q).is_ok()
    })
}

/// Whole-query-set batches on a pool of `threads` until `dur` has passed
/// (at least one batch). Latency here is per batch, so only QPS is kept.
fn inproc_batch(
    snap: &Index,
    queries: &io::Matrix,
    q: &Request,
    threads: usize,
    dur: Duration,
) -> Result<(u64, f64)> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("cannot start the thread pool")?;
    let rows: Vec<&[f32]> = queries.rows().collect();
    let t0 = Instant::now();
    let mut done = 0u64;
    while done == 0 || t0.elapsed() < dur {
        let ok = pool.install(|| {
            rows.par_iter()
                .map_init(Scratch::default, |s, v| snap.search(s, v, q).is_ok())
                .filter(|ok| *ok)
                .count()
        });
        done += ok as u64;
    }
    Ok((done, t0.elapsed().as_secs_f64()))
}

fn report(rows: &mut Vec<Row>, r: Row, json: bool) -> Result<()> {
    crate::progress::note(format!(
        "{:<28} {:>9.0} QPS  p50 {:>7.3} ms  p95 {:>7.3} ms  p99 {:>7.3} ms  ({} queries, {} errors)",
        format!("{} @{}", r.what, r.threads),
        r.qps,
        r.p50_ms,
        r.p95_ms,
        r.p99_ms,
        r.queries,
        r.errors
    ));
    let cpu = |what: &str, v: Option<f64>| v.map(|x| format!("  {what} {x:.1} µs/query"));
    if let Some(line) = [
        cpu("client-side CPU", r.cpu_us_per_query),
        cpu("server CPU", r.server_cpu_us_per_query),
    ]
    .into_iter()
    .flatten()
    .reduce(|a, b| a + &b)
    {
        crate::progress::note(format!("{:<28}{line}", ""));
    }
    if json {
        println!("{}", serde_json::to_string(&r)?);
    }
    rows.push(r);
    Ok(())
}

/// Runs `prox bench serve`.
pub fn run(args: &BenchServeArgs) -> Result<()> {
    if args.concurrency.is_empty() || args.concurrency.iter().any(|&c| c == 0 || c > 1024) {
        bail!("--concurrency values must be in 1..=1024");
    }
    if args.k == 0 || args.threads == 0 {
        bail!("--k and --threads must be at least 1");
    }
    if !(1..=1000).contains(&args.rounds) {
        bail!("--rounds must be in 1..=1000");
    }
    if args.duration / (args.rounds as u32) < Duration::from_millis(10) {
        bail!("--duration / --rounds must be at least 10ms per slice");
    }
    let mode = QueryMode::parse(&args.mode).with_context(|| {
        format!(
            "--mode {:?}: auto, exact, fast, balanced or high",
            args.mode
        )
    })?;
    let addr = resolve_url(&args.url).with_context(|| format!("--url {}", args.url))?;
    let token = match &args.token_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("reading {}", p.display()))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    if let Some(pid) = args.server_pid {
        if process_cpu_ns(pid).is_none() {
            bail!("--server-pid {pid}: cannot read /proc/{pid}/task/*/schedstat");
        }
    }
    let queries = io::read_matrix(&args.queries)?;
    if queries.is_empty() {
        bail!("{}: no queries", args.queries.display());
    }
    let bodies: Vec<Vec<u8>> = queries.rows().map(|q| body(args, q)).collect();
    let (path, content_type) = search_target(args);
    let headers = [("Content-Type", content_type)];
    let mut client = Client::new(addr).with_timeout(Duration::from_secs(30));
    if let Some(t) = &token {
        client = client.with_token(t.clone());
    }
    let requests: Vec<Vec<u8>> = bodies
        .iter()
        .map(|b| client.prepare_with("POST", &path, Some(b), &headers))
        .collect();
    // Untimed pass: checks the answers, the path, and recall.
    let mut found = Vec::with_capacity(queries.len());
    let mut paths = std::collections::BTreeSet::new();
    for (i, b) in bodies.iter().enumerate() {
        let r = client
            .request_with("POST", &path, Some(b), &headers)
            .with_context(|| format!("query {i}"))?;
        if r.status != 200 {
            bail!(
                "query {i}: HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
        let v = r.json()?;
        paths.insert(v["path"].as_str().unwrap_or("?").to_string());
        let ids = v["results"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|h| h["key"].as_str())
                    .filter_map(|k| hex::decode(k).ok())
                    .filter_map(|k| crate::map::key_to_id(&k))
                    .map(|id| id as u32)
                    .collect::<Vec<u32>>()
            })
            .unwrap_or_default();
        found.push(ids);
    }
    let mut note = format!(
        "{} queries, {} bodies, k {}, mode {}, ef {}, path {}; load average before: {}",
        queries.len(),
        match args.body {
            BodyKind::Json => "JSON",
            BodyKind::Binary => "binary",
        },
        args.k,
        args.mode,
        args.ef.map_or("default".to_string(), |e| e.to_string()),
        paths.into_iter().collect::<Vec<_>>().join(","),
        loadavg()
    );
    if let Some(gt) = &args.gt {
        let truth = io::read_ivecs(gt)?;
        if truth.len() != found.len() {
            bail!(
                "{}: {} rows for {} queries",
                gt.display(),
                truth.len(),
                found.len()
            );
        }
        note.push_str(&format!(
            "; recall@{} {:.4}",
            args.k,
            crate::gmm::recall_at(&found, &truth, args.k)
        ));
    }
    crate::progress::note(note);

    let rounds = args.rounds;
    let slice = args.duration / rounds as u32;
    let snap = match &args.store {
        Some(dir) => {
            let store: Arc<dyn prox_engine::BlockStore> = Arc::new(
                prox_engine::MmapStore::open_read_only(dir)
                    .with_context(|| format!("opening {}", dir.display()))?,
            );
            let (d, side) = proximity::resolve(&*store, &args.name)?
                .with_context(|| format!("no map {:?} in {}", args.name, dir.display()))?;
            Some(Index::load(store, d, side, &index::Options::default())?)
        }
        None => None,
    };
    let q = Request {
        ef: args.ef,
        ..Request::new(args.k).mode(mode)
    };
    let mut single = Tally::new();
    let mut batch = (0u64, 0f64);
    let mut http: Vec<Tally> = args.concurrency.iter().map(|_| Tally::new()).collect();
    // Per round: in-process single QPS, then each level's HTTP QPS.
    let mut per_round: Vec<(f64, Vec<f64>)> = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        // In-process first in each round, while the server is idle.
        let mut base = f64::NAN;
        if let Some(snap) = &snap {
            let m = inproc_single(snap, &queries, &q, args.threads, slice);
            base = m.hist.total() as f64 / m.secs.max(1e-9);
            single.add(&m, None);
            let (n, secs) = inproc_batch(snap, &queries, &q, args.threads, slice)?;
            batch = (batch.0 + n, batch.1 + secs);
        }
        let mut levels = Vec::with_capacity(args.concurrency.len());
        for (&c, tally) in args.concurrency.iter().zip(&mut http) {
            let before = args.server_pid.and_then(process_cpu_ns);
            let m = http_level(&client, &requests, c, slice);
            let after = args.server_pid.and_then(process_cpu_ns);
            levels.push(m.hist.total() as f64 / m.secs.max(1e-9));
            let server = after.zip(before).map(|(b, a)| b.saturating_sub(a));
            tally.add(&m, server);
        }
        if rounds > 1 {
            let mut line = format!("round {round}/{rounds}:");
            if snap.is_some() {
                line.push_str(&format!(" in-process single {base:.0} QPS;"));
            }
            for (&c, qps) in args.concurrency.iter().zip(&levels) {
                line.push_str(&format!(" http @{c} {qps:.0} QPS"));
                if snap.is_some() {
                    line.push_str(&format!(" ({:.1}%)", 100.0 * qps / base.max(1e-9)));
                }
                line.push(';');
            }
            line.pop();
            crate::progress::note(line);
        }
        per_round.push((base, levels));
    }

    let mut rows = Vec::new();
    let mut inproc_single_qps = None;
    let mut inproc_cpu = None;
    if snap.is_some() {
        let r = single.row("in-process single", args.threads, false);
        inproc_single_qps = Some(r.qps);
        inproc_cpu = r.cpu_us_per_query;
        report(&mut rows, r, args.json)?;
        let r = Row {
            what: "in-process batch".into(),
            threads: args.threads,
            queries: batch.0,
            errors: 0,
            secs: batch.1,
            qps: batch.0 as f64 / batch.1.max(1e-9),
            p50_ms: f64::NAN,
            p95_ms: f64::NAN,
            p99_ms: f64::NAN,
            cpu_us_per_query: None,
            server_cpu_us_per_query: None,
        };
        report(&mut rows, r, args.json)?;
    }
    for (li, (&c, tally)) in args.concurrency.iter().zip(&http).enumerate() {
        let r = tally.row("http", c, args.server_pid.is_some());
        if let (Some(server), Some(search)) = (
            r.server_cpu_us_per_query,
            inproc_cpu.filter(|_| snap.is_some()),
        ) {
            crate::progress::note(format!(
                "http @{c}: server CPU {server:.1} µs per query, of which outside the search {:.1} µs \
                 (in-process search {search:.1} µs per query)",
                server - search
            ));
            if args.json {
                let j = serde_json::json!({
                    "what": "server CPU per query",
                    "threads": c,
                    "body": format!("{:?}", args.body).to_lowercase(),
                    "server_us": server,
                    "search_us": search,
                    "outside_search_us": server - search,
                });
                println!("{j}");
            }
        }
        if let Some(base) = inproc_single_qps {
            let ratios: Vec<f64> = per_round
                .iter()
                .map(|(b, levels)| levels[li] / b.max(1e-9))
                .collect();
            let overall = r.qps / base.max(1e-9);
            let mut note = format!(
                "http @{c}: {:.1}% of in-process single-query QPS at {} threads",
                100.0 * overall,
                args.threads
            );
            if rounds > 1 {
                let pct: Vec<String> = ratios.iter().map(|x| format!("{:.1}", 100.0 * x)).collect();
                note.push_str(&format!(
                    " (per round: {}%; median {:.1}%)",
                    pct.join(", "),
                    100.0 * median(&ratios)
                ));
            }
            crate::progress::note(note);
            if args.json {
                let j = serde_json::json!({
                    "what": "http / in-process single",
                    "threads": c,
                    "in_process_threads": args.threads,
                    "ratio": overall,
                    "per_round": ratios,
                    "median": median(&ratios),
                });
                println!("{j}");
            }
        }
        report(&mut rows, r, args.json)?;
    }
    crate::progress::note(format!("load average after: {}", loadavg()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_quantiles() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert!(parse_duration("0s").is_err() && parse_duration("x").is_err());
        let mut h = Hist::new();
        for us in 1..=100u64 {
            h.add(Duration::from_micros(us * 10));
        }
        h.add(Duration::from_secs(3));
        assert_eq!(h.total(), 101);
        assert_eq!(h.quantile_ms(0.5), 0.51);
        assert_eq!(h.quantile_ms(1.0), 3000.0);
    }
}
