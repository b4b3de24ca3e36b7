//! `prox bench sync`: replication cost on loopback.
//!
//! Builds a seeded proximity map (optionally with its HNSW sidecar) in a
//! memory store, publishes it as a typed root, and measures with two real
//! nodes on 127.0.0.1, every connection relayed through a byte-counting
//! proxy: a cold clone level by level (`WANT` batches), a cold clone through
//! the bulk path, and pulls of updates touching a fraction of the records
//! (applied through `Index::apply`, as `prox update` does, so sidecars are
//! edited in place), each pulled with whole blocks, with block patches, and
//! with patches and zstd frames.
//! The same closure bytes are then copied over a bare libp2p
//! stream (same transport) and raw TCP (same framing and hashing) in the
//! same run. Medians over `--runs`.

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::Args;
use prox_engine::accel::{build_sidecars, HnswParams};
use prox_engine::index::{Batch, Index, Options, WriteOptions};
use prox_engine::manifest::RootManifest;
use prox_engine::proximity::{ContentRoot, ProximityConfig, ProximityMap, RootKind};
use prox_engine::refs;
use prox_engine::{BlockStore, Cid, MemStore};
use prox_sync::bench::{bare_stream_copy, multiaddr, raw_tcp_copy, socket_addr, CountingProxy};
use prox_sync::{Config, Linker, Node, RefsLinker, Stores};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// Examples for `prox bench sync --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox bench sync                       # 100k x 128, with and without HNSW
  prox bench sync --n 20000 --runs 3 --json > sync.jsonl";

/// Arguments of `prox bench sync`.
#[derive(Debug, Clone, Args)]
pub struct BenchSyncArgs {
    /// Records in the map.
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    /// Dimensions.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Fractions of records changed by the update scenarios
    /// (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "0.001,0.01,0.1")]
    pub update_fraction: Vec<f64>,
    /// Runs per scenario (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Data seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Only the variant without the HNSW sidecar.
    #[arg(long)]
    pub no_hnsw: bool,
    /// Also clone from 1 up to this many sources at once, each behind a
    /// relay capped at `--source-rate` (0: skip).
    #[arg(long, default_value_t = 0)]
    pub sources: usize,
    /// Cap of each source's relay in the `--sources` scenarios, MB/s
    /// (10^6 bytes).
    #[arg(long, default_value_t = 10.0)]
    pub source_rate: f64,
    /// Print one JSON object per scenario instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One measured scenario.
#[derive(Debug, Clone, Serialize)]
pub struct SyncResult {
    /// Scenario name.
    pub scenario: String,
    /// Whether the HNSW sidecar is part of the root.
    pub hnsw: bool,
    /// Records in the map.
    pub records: usize,
    /// Blocks the receiver lacked (ideal count).
    pub ideal_blocks: u64,
    /// Bytes of those blocks (ideal payload).
    pub ideal_bytes: u64,
    /// Blocks fetched.
    pub blocks_fetched: u64,
    /// Block bytes fetched (as stored).
    pub bytes_fetched: u64,
    /// Blocks that arrived as patches.
    pub blocks_patched: u64,
    /// Blocks that arrived as zstd frames.
    pub blocks_compressed: u64,
    /// Block payload received (whole blocks and patches as sent).
    pub bytes_received: u64,
    /// Bytes relayed by the counting proxy, both directions.
    pub wire_bytes: u64,
    /// `wire_bytes / ideal_bytes`.
    pub wire_ratio: f64,
    /// Dependent round trips (control + block rounds).
    pub round_trips: u64,
    /// Median wall time.
    pub seconds: f64,
    /// Payload throughput, MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Throughput relative to a bare libp2p stream copy of the same bytes.
    pub vs_bare_stream: Option<f64>,
    /// Throughput relative to a raw TCP copy of the same bytes.
    pub vs_raw_tcp: Option<f64>,
}

fn vectors(
    n: usize,
    dim: usize,
    seed: u64,
    bump: &HashSet<usize>,
) -> Vec<(Vec<u8>, Vec<f32>, Vec<u8>)> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let mut v: Vec<f32> = (0..dim)
                .map(|_| (next() % 2_000_001) as f32 / 1e5 - 10.0)
                .collect();
            if bump.contains(&i) {
                v[0] += 0.25;
            }
            (format!("rec{i:08}").into_bytes(), v, Vec::new())
        })
        .collect()
}

fn publish(
    store: &dyn BlockStore,
    recs: Vec<(Vec<u8>, Vec<f32>, Vec<u8>)>,
    hnsw: bool,
) -> Result<Vec<u8>> {
    let dims = recs[0].1.len() as u32;
    let map = ProximityMap::build(store, &ProximityConfig::new(dims), recs)?;
    let desc = map.descriptor_cid();
    let mut crmf = ContentRoot::new(RootKind::ProximityDescriptor, desc);
    crmf.dims = None;
    if hnsw {
        let side = build_sidecars(store, desc, Some(&HnswParams::default()), None)?;
        if let Some(h) = side.hnsw {
            crmf.metadata
                .insert(refs::META_HNSW.to_vec(), h.manifest_cid.as_bytes().to_vec());
        }
    }
    let crmf_cid = store.put(&crmf.encode()?)?;
    let value = RootManifest::new(Some(crmf_cid), refs::typed_root_config()).encode();
    store.set_root("bench", Some(&value))?;
    Ok(value)
}

fn closure(store: &dyn BlockStore, value: &[u8]) -> Result<Vec<(Cid, Bytes)>> {
    let l = RefsLinker;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut stack = l.root_links(value)?;
    while let Some((c, k)) = stack.pop() {
        if seen.insert(c) {
            let b = store
                .get(&c)?
                .with_context(|| format!("block {c} missing"))?;
            stack.extend(l.links(&k, &b)?);
            out.push((c, b));
        }
    }
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn mem_stores() -> Stores {
    Stores::new(Arc::new(MemStore::new()), Arc::new(MemStore::new()))
}

struct Pair {
    source: Node<RefsLinker>,
    proxy: CountingProxy,
}

/// What a source offers for the blocks of an update.
#[derive(Debug, Clone, Copy)]
enum Offer {
    /// Whole blocks only.
    Whole,
    /// Plain patches (`DELTA`).
    Patches,
    /// Patches and zstd frames, the smallest per block.
    Zstd,
}

impl Offer {
    fn name(self) -> &'static str {
        match self {
            Offer::Whole => "whole",
            Offer::Patches => "delta",
            Offer::Zstd => "zstd",
        }
    }
}

impl Pair {
    async fn start(src: Stores, trusted: bool, offer: Offer) -> Result<Pair> {
        Self::start_capped(src, trusted, offer, None).await
    }

    /// A source whose relay sends at most `rate` bytes/s.
    async fn start_capped(
        src: Stores,
        trusted: bool,
        offer: Offer,
        rate: Option<u64>,
    ) -> Result<Pair> {
        let cfg = Config {
            listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
            trust_all: trusted,
            open: true,
            delta: !matches!(offer, Offer::Whole),
            zstd: matches!(offer, Offer::Zstd),
            ..Config::default()
        };
        let key = libp2p_key();
        let source = Node::start(&cfg, key, src, RefsLinker).await?;
        let sa = socket_addr(&source.listen_addrs()[0]).context("tcp listen address")?;
        let proxy = CountingProxy::start_capped(sa, rate).await?;
        Ok(Pair { source, proxy })
    }

    fn addr(&self) -> prox_sync::bench::Multiaddr {
        multiaddr(self.proxy.addr()).with(prox_sync::bench::Protocol::P2p(self.source.peer_id()))
    }
}

fn libp2p_key() -> prox_sync::bench::Keypair {
    prox_sync::bench::Keypair::generate_ed25519()
}

async fn receiver() -> Result<(Node<RefsLinker>, Stores)> {
    let s = mem_stores();
    let cfg = Config::default();
    Ok((
        Node::start(&cfg, libp2p_key(), s.clone(), RefsLinker).await?,
        s,
    ))
}

fn print_result(r: &SyncResult, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
        return Ok(());
    }
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    println!(
        "{:<16} {:>5} {:>8} {:>11} {:>11} {:>6.3} {:>4} {:>8.3} {:>8.1} {:>7} {:>7}",
        r.scenario,
        r.hnsw,
        r.blocks_fetched,
        r.ideal_bytes,
        r.wire_bytes,
        r.wire_ratio,
        r.round_trips,
        r.seconds,
        r.mb_per_s,
        f(r.vs_bare_stream),
        f(r.vs_raw_tcp)
    );
    Ok(())
}

/// Runs `prox bench sync`.
pub fn run(args: &BenchSyncArgs) -> Result<()> {
    let rt = super::sync::runtime()?;
    let variants: &[bool] = if args.no_hnsw {
        &[false]
    } else {
        &[false, true]
    };
    if !args.json {
        println!(
            "{:<16} {:>5} {:>8} {:>11} {:>11} {:>6} {:>4} {:>8} {:>8} {:>7} {:>7}",
            "scenario",
            "hnsw",
            "blocks",
            "ideal_B",
            "wire_B",
            "wire/x",
            "rt",
            "s",
            "MB/s",
            "vs_bare",
            "vs_tcp"
        );
    }
    // Each variant is printed as soon as it is measured (the HNSW build of
    // a large map takes minutes).
    for &hnsw in variants {
        for r in rt.block_on(variant(args, hnsw))? {
            print_result(&r, args.json)?;
        }
    }
    Ok(())
}

async fn variant(args: &BenchSyncArgs, hnsw: bool) -> Result<Vec<SyncResult>> {
    let runs = args.runs.max(1);
    let src = mem_stores();
    let t = Instant::now();
    let value1 = {
        let store = src.main.clone();
        let recs = vectors(args.n, args.dim, args.seed, &HashSet::new());
        tokio::task::spawn_blocking(move || publish(&*store, recs, hnsw)).await??
    };
    eprintln!(
        "built {} x {} (hnsw {hnsw}) in {:.1} s",
        args.n,
        args.dim,
        t.elapsed().as_secs_f64()
    );
    // Single-thread CPU cost of the two per-block checks a receiver does
    // (decode as the declared kind, SHA-256), for reading the ratios.
    let t = Instant::now();
    let blocks1 = closure(&*src.main, &value1)?;
    let walk = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let hashed = blocks1.iter().filter(|(c, b)| Cid::of(b) == *c).count();
    let hash = t.elapsed().as_secs_f64();
    let ideal_bytes: u64 = blocks1.iter().map(|(_, b)| b.len() as u64).sum();
    eprintln!(
        "closure: {} blocks, {ideal_bytes} B; decode walk {walk:.3} s, SHA-256 {hash:.3} s ({hashed} ok), one thread",
        blocks1.len()
    );
    let payload: Vec<Bytes> = blocks1.iter().map(|(_, b)| b.clone()).collect();

    // Baselines on the same bytes.
    let mut bare_s = Vec::new();
    let mut tcp_s = Vec::new();
    for _ in 0..runs {
        bare_s.push(bare_stream_copy(&payload, true).await?.0.seconds);
        tcp_s.push(raw_tcp_copy(&payload).await?.seconds);
        eprintln!(
            "  bare-stream {:.3} s, raw-tcp {:.3} s",
            bare_s[bare_s.len() - 1],
            tcp_s[tcp_s.len() - 1]
        );
    }
    let (bare, tcp) = (median(bare_s), median(tcp_s));
    let mut out = Vec::new();
    out.push(SyncResult {
        scenario: "bare-stream".into(),
        hnsw,
        records: args.n,
        ideal_blocks: blocks1.len() as u64,
        ideal_bytes,
        blocks_fetched: blocks1.len() as u64,
        bytes_fetched: ideal_bytes,
        blocks_patched: 0,
        blocks_compressed: 0,
        bytes_received: ideal_bytes,
        wire_bytes: bare_stream_copy(&payload, true).await?.1,
        wire_ratio: 0.0,
        round_trips: 1,
        seconds: bare,
        mb_per_s: ideal_bytes as f64 / bare / 1e6,
        vs_bare_stream: Some(1.0),
        vs_raw_tcp: Some(tcp / bare),
    });
    if let Some(r) = out.last_mut() {
        r.wire_ratio = r.wire_bytes as f64 / ideal_bytes as f64;
    }
    out.push(SyncResult {
        scenario: "raw-tcp".into(),
        hnsw,
        records: args.n,
        ideal_blocks: blocks1.len() as u64,
        ideal_bytes,
        blocks_fetched: blocks1.len() as u64,
        bytes_fetched: ideal_bytes,
        blocks_patched: 0,
        blocks_compressed: 0,
        bytes_received: ideal_bytes,
        wire_bytes: ideal_bytes + 4 * blocks1.len() as u64,
        wire_ratio: (ideal_bytes + 4 * blocks1.len() as u64) as f64 / ideal_bytes as f64,
        round_trips: 1,
        seconds: tcp,
        mb_per_s: ideal_bytes as f64 / tcp / 1e6,
        vs_bare_stream: Some(bare / tcp),
        vs_raw_tcp: Some(1.0),
    });

    // Cold clones: level by level (untrusted) and bulk (trusted).
    for (scenario, trusted) in [("clone-levels", false), ("clone-bulk", true)] {
        let pair = Pair::start(src.clone(), trusted, Offer::Zstd).await?;
        let mut secs = Vec::new();
        let mut last = None;
        for _ in 0..runs {
            let (node, _stores) = receiver().await?;
            pair.proxy.reset();
            let r = node.pull(&pair.addr(), "bench", "bench").await?;
            eprintln!("  {scenario} hnsw={hnsw}: {:.3} s", r.seconds);
            secs.push(r.seconds);
            last = Some((r, pair.proxy.bytes()));
            node.shutdown().await;
        }
        let (r, wire) = last.context("at least one run")?;
        let s = median(secs);
        out.push(SyncResult {
            scenario: scenario.into(),
            hnsw,
            records: args.n,
            ideal_blocks: blocks1.len() as u64,
            ideal_bytes,
            blocks_fetched: r.blocks_fetched,
            bytes_fetched: r.bytes_fetched,
            blocks_patched: r.blocks_patched,
            blocks_compressed: r.blocks_compressed,
            bytes_received: r.bytes_received,
            wire_bytes: wire,
            wire_ratio: wire as f64 / ideal_bytes as f64,
            round_trips: r.round_trips,
            seconds: s,
            mb_per_s: r.bytes_fetched as f64 / s / 1e6,
            vs_bare_stream: Some(bare / s),
            vs_raw_tcp: Some(tcp / s),
        });
        pair.source.shutdown().await;
    }

    if args.sources > 0 {
        out.extend(capped_sources(args, hnsw, &src, ideal_bytes, blocks1.len() as u64).await?);
    }

    // Updates of a fraction of the records through the index API, each
    // pulled by replicas of v1 with whole blocks, patches, patches + zstd.
    let index1 = {
        let store = src.main.clone();
        tokio::task::spawn_blocking(move || {
            let open = Options {
                warm: false,
                ..Options::default()
            };
            Index::open(store, "bench", &open)
        })
        .await??
    };
    let index1 = Arc::new(index1);
    for &fraction in &args.update_fraction {
        let changes = ((args.n as f64 * fraction).round() as usize).clamp(1, args.n);
        let bump: HashSet<usize> = (0..changes)
            .map(|i| (i * 7919 + args.seed as usize) % args.n)
            .collect();
        let t = Instant::now();
        let value2 = {
            let (store, index1) = (src.main.clone(), index1.clone());
            let recs = vectors(args.n, args.dim, args.seed, &bump);
            let value1 = value1.clone();
            let bump = bump.clone();
            tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
                let mut batch = Batch::new();
                for (i, (key, vector, value)) in recs.into_iter().enumerate() {
                    if bump.contains(&i) {
                        batch.upsert(key, vector, value);
                    }
                }
                let applied = index1.apply(&batch, &WriteOptions::default())?;
                store.set_root("bench", Some(&value1))?;
                applied.index.commit("bench", Some(index1.descriptor()))?;
                Ok(store.root("bench")?.context("root after commit")?.to_vec())
            })
            .await??
        };
        eprintln!(
            "update of {} records applied in {:.1} s",
            bump.len(),
            t.elapsed().as_secs_f64()
        );
        let blocks2 = closure(&*src.main, &value2)?;
        let old: HashSet<Cid> = blocks1.iter().map(|(c, _)| *c).collect();
        let new_blocks: Vec<&(Cid, Bytes)> =
            blocks2.iter().filter(|(c, _)| !old.contains(c)).collect();
        let ideal2: u64 = new_blocks.iter().map(|(_, b)| b.len() as u64).sum();
        for offer in [Offer::Whole, Offer::Patches, Offer::Zstd] {
            let pair = Pair::start(src.clone(), false, offer).await?;
            let scenario = format!("update-{}-{}", bump.len(), offer.name());
            let mut secs = Vec::new();
            let mut last = None;
            for _ in 0..runs {
                let (node, stores) = receiver().await?;
                for (_, b) in &blocks1 {
                    stores.main.put(b)?;
                }
                stores.main.set_root("bench", Some(&value1))?;
                pair.proxy.reset();
                let r = node.pull(&pair.addr(), "bench", "bench").await?;
                eprintln!(
                    "  {scenario} hnsw={hnsw}: {:.3} s, {} blocks ({} patched, {} zstd), {} B received, {} round trips",
                    r.seconds, r.blocks_fetched, r.blocks_patched, r.blocks_compressed, r.bytes_received, r.round_trips
                );
                secs.push(r.seconds);
                last = Some((r, pair.proxy.bytes()));
                node.shutdown().await;
            }
            let (r, wire) = last.context("at least one run")?;
            let s = median(secs);
            out.push(SyncResult {
                scenario,
                hnsw,
                records: args.n,
                ideal_blocks: new_blocks.len() as u64,
                ideal_bytes: ideal2,
                blocks_fetched: r.blocks_fetched,
                bytes_fetched: r.bytes_fetched,
                blocks_patched: r.blocks_patched,
                blocks_compressed: r.blocks_compressed,
                bytes_received: r.bytes_received,
                wire_bytes: wire,
                wire_ratio: wire as f64 / ideal2.max(1) as f64,
                round_trips: r.round_trips,
                seconds: s,
                mb_per_s: r.bytes_fetched as f64 / s / 1e6,
                vs_bare_stream: None,
                vs_raw_tcp: None,
            });
            pair.source.shutdown().await;
        }
    }
    Ok(out)
}

/// Clones of the `bench` root from 1, 2, .. `args.sources` sources at once,
/// each behind a relay capped at `args.source_rate` MB/s: how throughput
/// grows with the number of sources when each source's link is the limit.
async fn capped_sources(
    args: &BenchSyncArgs,
    hnsw: bool,
    src: &Stores,
    ideal_bytes: u64,
    ideal_blocks: u64,
) -> Result<Vec<SyncResult>> {
    anyhow::ensure!(args.source_rate > 0.0, "--source-rate must be > 0");
    let rate = (args.source_rate * 1e6) as u64;
    let mut pairs = Vec::new();
    for _ in 0..args.sources {
        pairs.push(Pair::start_capped(src.clone(), false, Offer::Whole, Some(rate)).await?);
    }
    let addrs: Vec<_> = pairs.iter().map(Pair::addr).collect();
    let mut out = Vec::new();
    let mut one = None;
    for k in 1..=args.sources {
        let scenario = format!("clone-{k}src-capped");
        let mut secs = Vec::new();
        let mut last = None;
        for _ in 0..args.runs.max(1) {
            let (node, _stores) = receiver().await?;
            for p in &pairs {
                p.proxy.reset();
            }
            let r = node
                .pull_many(&addrs[..k], "bench", "bench", Default::default())
                .await?;
            let wire: u64 = pairs.iter().map(|p| p.proxy.bytes()).sum();
            let per: Vec<u64> = r.sources.iter().map(|s| s.bytes).collect();
            eprintln!(
                "  {scenario} hnsw={hnsw}: {:.3} s, {} blocks, bytes per source {per:?}",
                r.seconds, r.blocks_fetched
            );
            secs.push(r.seconds);
            last = Some((r, wire));
            node.shutdown().await;
        }
        let (r, wire) = last.context("at least one run")?;
        let s = median(secs);
        let mb_per_s = r.bytes_fetched as f64 / s / 1e6;
        let base = *one.get_or_insert(mb_per_s);
        eprintln!(
            "  {scenario}: {mb_per_s:.1} MB/s, {:.2}x one source",
            mb_per_s / base
        );
        out.push(SyncResult {
            scenario,
            hnsw,
            records: args.n,
            ideal_blocks,
            ideal_bytes,
            blocks_fetched: r.blocks_fetched,
            bytes_fetched: r.bytes_fetched,
            blocks_patched: r.blocks_patched,
            blocks_compressed: r.blocks_compressed,
            bytes_received: r.bytes_received,
            wire_bytes: wire,
            wire_ratio: wire as f64 / ideal_bytes.max(1) as f64,
            round_trips: r.round_trips,
            seconds: s,
            mb_per_s,
            vs_bare_stream: None,
            vs_raw_tcp: None,
        });
    }
    for p in pairs {
        p.source.shutdown().await;
    }
    Ok(out)
}
