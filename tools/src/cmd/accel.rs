//! `prox accel build`: build HNSW and/or PQ sidecars and the persisted
//! search layouts of an existing proximity map and print their manifest
//! CIDs; plus the `k=v,...`
//! parameter parsers shared with `prox build --hnsw/--pq`.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use prox_engine::accel::{build_layouts, build_sidecars_and_lists, HnswParams, PqSpec};
use prox_engine::proximity::search::ExactLayout;
use prox_engine::store::MmapStore;
use prox_engine::{BlockStore, Cid};
use std::path::PathBuf;
use std::sync::Arc;

/// Examples shown by `prox accel --help`.
pub const EXAMPLES: &str = "\
Examples:
  prox accel build --store db --name docs --hnsw
  prox accel build --store db --name docs --hnsw max_connections=32,ef_construction=200 --pq subquantizers=48
  prox accel build --store db --descriptor <PRXI cid> --hnsw build=canonical
  prox accel build --store db --name docs --layout

HNSW keys: max_connections (m), ef_construction (efc), ef_search (ef), level_bits,
  overfetch, seed, build=fast|canonical. Defaults 16,200,64,4,8,0, fast
  (a canonical build records ef_construction 128, the spec default, unless given).
PQ keys: subquantizers (m), centroids (k), iterations, rerank, seed, preset=auto|spec.
  Defaults (preset=auto) follow the map: 4-bit codes (16 centroids) for the IVF
  fast scan, 6 iterations, rerank 8, seed 0, and one subquantizer per 2, 4, 8...
  dimensions, the fewest that keep the code within 96 bytes (d=128: 64, d=384: 96).
  preset=spec starts from the spec defaults 8,256,12,8,0 (8-bit codes, no fast scan).";

/// `prox accel ...`.
#[derive(Debug, Args)]
pub struct AccelArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AccelCommand,
}

/// Accelerator subcommands.
#[derive(Debug, Subcommand)]
pub enum AccelCommand {
    /// Build sidecars for an existing map and print their manifest CIDs.
    Build(AccelBuildArgs),
}

/// `prox accel build`.
#[derive(Debug, Args)]
pub struct AccelBuildArgs {
    /// Store directory.
    #[arg(long)]
    pub store: PathBuf,
    /// Named root of the map (a typed content root or a bare descriptor).
    #[arg(long, required_unless_present = "descriptor")]
    pub name: Option<String>,
    /// The map's PRXI descriptor CID (instead of --name).
    #[arg(long, conflicts_with = "name")]
    pub descriptor: Option<Cid>,
    /// Build an HNSW sidecar; optional `k=v,...` parameters.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_parser = parse_hnsw)]
    pub hnsw: Option<HnswParams>,
    /// Build a PQ sidecar; optional `k=v,...` parameters.
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_parser = parse_pq)]
    pub pq: Option<PqSpec>,
    /// Persist the native search layouts (the scan arena) so the map
    /// opens without building them.
    #[arg(long)]
    pub layout: bool,
    /// With --layout, `localM` also persists the exact-L2 local frames of
    /// width M (L2 maps), `splitM` the rotated split arena, which exact
    /// queries then read at open.
    #[arg(long, default_value = "off", requires = "layout")]
    pub exact_layout: ExactLayout,
    /// Measure the map's recall profile on this many of its records and
    /// publish it (what `--recall` chooses from); 0: none. Default: 400
    /// when --hnsw or --pq builds a sidecar of a named map (the old
    /// profile measured other sidecars), else none. Needs --name.
    #[arg(long, value_name = "QUERIES")]
    pub profile: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// clap value parser for `--hnsw k=v,...` (also used by `prox build`).
pub fn parse_hnsw(s: &str) -> Result<HnswParams, String> {
    HnswParams::parse(s).map_err(|e| e.to_string())
}

/// clap value parser for `--pq k=v,...` (also used by `prox build`);
/// dimension-dependent checks happen at build time.
pub fn parse_pq(s: &str) -> Result<PqSpec, String> {
    PqSpec::parse(s).map_err(|e| e.to_string())
}

/// Refuses an exact-L2 layout (`--exact-layout localM|splitM`) to persist
/// for a map of another metric, whose exact search never uses one.
pub fn check_exact_layout(layout: ExactLayout, metric: prox_kernels::Metric) -> Result<()> {
    if matches!(layout, ExactLayout::Local(_) | ExactLayout::Split(_))
        && metric != prox_kernels::Metric::L2
    {
        bail!(
            "--exact-layout persists an exact-L2 layout, but the map's metric is {metric}: its \
             exact search uses the plain arena (drop the flag)"
        );
    }
    Ok(())
}

/// Runs `prox accel ...`.
pub fn run(args: &AccelArgs) -> Result<()> {
    match &args.command {
        AccelCommand::Build(b) => run_build(b),
    }
}

fn run_build(args: &AccelBuildArgs) -> Result<()> {
    let sidecar = args.hnsw.is_some() || args.pq.is_some();
    let profile = args.profile.unwrap_or(if sidecar {
        prox_engine::index::DEFAULT_PROFILE_QUERIES
    } else {
        0
    });
    if !sidecar && !args.layout && profile == 0 {
        bail!("nothing to build: pass --hnsw, --pq, --layout and/or --profile");
    }
    if args.profile.is_some_and(|q| q > 0) && args.name.is_none() {
        bail!("--profile publishes beside a named map: pass --name");
    }
    if args.store.to_str().is_some_and(prox_s3::is_s3_url) {
        bail!("accel build needs a store directory, not a bucket");
    }
    let store: Arc<dyn BlockStore> = Arc::new(
        MmapStore::open(&args.store)
            .with_context(|| format!("opening store {}", args.store.display()))?,
    );
    let profile_only = !sidecar && !args.layout;
    let published = match &args.name {
        Some(n) => Some(crate::map::resolve(&*store, n)?),
        None => None,
    };
    let descriptor = match (&args.descriptor, &published) {
        (Some(c), _) => *c,
        (None, Some(p)) => p.descriptor,
        (None, None) => bail!("pass --name or --descriptor"),
    };
    let t = std::time::Instant::now();
    if profile_only {
        return report_profile(store, args, profile, t);
    }
    let pq = match &args.pq {
        Some(spec) => {
            let map = prox_engine::proximity::ProximityMap::load(&*store, descriptor)
                .with_context(|| format!("loading map {descriptor}"))?;
            Some(
                spec.resolve(map.dims() as usize, map.len())
                    .context("--pq")?,
            )
        }
        None => None,
    };
    if !matches!(args.exact_layout, ExactLayout::Off | ExactLayout::Auto) {
        let metric = prox_engine::proximity::ProximityMap::load(&*store, descriptor)
            .with_context(|| format!("loading map {descriptor}"))?
            .metric();
        check_exact_layout(args.exact_layout, metric)?;
    }
    let (side, fresh_lists) = build_sidecars_and_lists(
        &*store,
        descriptor,
        args.hnsw.as_ref(),
        pq.as_ref(),
        args.layout,
    )
    .with_context(|| format!("building sidecars of {descriptor}"))?;
    let layouts = if args.layout {
        // A PQ sidecar trained now gave its lists; else those of the
        // published one are built from the store.
        let stored_pq = match &side.pq {
            Some(_) => None,
            None => published
                .filter(|p| p.descriptor == descriptor)
                .and_then(|p| p.pq),
        };
        let mut l = build_layouts(&*store, descriptor, stored_pq, args.exact_layout)
            .with_context(|| format!("building the search layouts of {descriptor}"))?;
        l.ivf = l.ivf.or(fresh_lists);
        l
    } else {
        Default::default()
    };
    store.commit()?;
    // Attach the new sidecars to the named root (keeping a published sidecar
    // of the other kind), so queries and sync see them.
    if let (Some(name), Some(p)) = (&args.name, published) {
        if p.descriptor == descriptor {
            let attached = crate::map::Published {
                descriptor,
                hnsw: side.hnsw.as_ref().map(|s| s.manifest_cid).or(p.hnsw),
                pq: side.pq.as_ref().map(|s| s.manifest_cid).or(p.pq),
                layouts: prox_engine::proximity::Layouts {
                    arena: layouts.arena.or(p.layouts.arena),
                    adaptive: layouts.adaptive.or(p.layouts.adaptive),
                    // The published lists depend on the vectors alone, so
                    // they still serve a new sidecar with 4-bit codes; an
                    // 8-bit one has no fast scan and would refuse them.
                    ivf: layouts.ivf.or(p.layouts.ivf.filter(|_| {
                        side.pq.as_ref().is_none_or(|s| {
                            let c = &s.manifest.config;
                            c.centroids <= 16 && c.subquantizers <= 256
                        })
                    })),
                    // A profile measured other sidecars.
                    profile: p.layouts.profile.filter(|_| !sidecar),
                    frames: layouts.frames.or(p.layouts.frames),
                    rotated: layouts.rotated.or(p.layouts.rotated),
                },
            };
            crate::map::publish(&*store, name, &attached)?;
        }
    }
    let profiled = match (&args.name, published) {
        (Some(name), Some(p)) if p.descriptor == descriptor => {
            crate::map::profile(Arc::clone(&store), name, profile)?
        }
        _ => None,
    };
    let secs = t.elapsed().as_secs_f64();
    let hnsw = side.hnsw.as_ref().map(|s| s.manifest_cid.to_string());
    let pq = side.pq.as_ref().map(|s| s.manifest_cid.to_string());
    let mut out = crate::out::Stdout::new();
    if args.json {
        let v = serde_json::json!({
            "descriptor": descriptor.to_string(),
            "hnsw": hnsw,
            "hnsw_canonical": side.hnsw.as_ref().map(|s| s.manifest.canonical),
            "pq": pq,
            "pq_mse": side.pq.as_ref().map(|s| s.manifest.mean_squared_error),
            "layout_arena": layouts.arena.map(|c| c.to_string()),
            "layout_adaptive": layouts.adaptive.map(|c| c.to_string()),
            "layout_ivf": layouts.ivf.map(|c| c.to_string()),
            "layout_frames": layouts.frames.map(|c| c.to_string()),
            "layout_rotated": layouts.rotated.map(|c| c.to_string()),
            "profile": profiled.as_ref().map(|p| p.cid.to_string()),
            "seconds": secs,
        });
        out.json(&v)?;
    } else {
        if let Some(h) = &hnsw {
            out.line(format!("hnsw {h}"))?;
        }
        if let Some(p) = &pq {
            out.line(format!("pq {p}"))?;
        }
        if let Some(a) = layouts.arena {
            out.line(format!("layout.arena {a}"))?;
        }
        if let Some(a) = layouts.adaptive {
            out.line(format!("layout.adaptive {a}"))?;
        }
        if let Some(a) = layouts.ivf {
            out.line(format!("layout.ivf {a}"))?;
        }
        if let Some(a) = layouts.frames {
            out.line(format!("layout.frames {a}"))?;
        }
        if let Some(a) = layouts.rotated {
            out.line(format!("layout.rotated {a}"))?;
        }
        if let Some(p) = &profiled {
            out.line(format!("layout.profile {}", p.cid))?;
        }
    }
    out.flush()
}

/// `prox accel build --name N --profile Q` alone: measure and publish the
/// recall profile of the published map.
fn report_profile(
    store: Arc<dyn BlockStore>,
    args: &AccelBuildArgs,
    queries: usize,
    t: std::time::Instant,
) -> Result<()> {
    let name = args
        .name
        .as_deref()
        .context("--profile publishes beside a named map: pass --name")?;
    let p = crate::map::profile(store, name, queries)?.with_context(|| {
        format!(
            "map {name:?} has fewer than {} records: too small to profile",
            prox_engine::index::PROFILE_K + 2
        )
    })?;
    let mut out = crate::out::Stdout::new();
    if args.json {
        out.json(&serde_json::json!({
            "profile": p.cid.to_string(),
            "table": crate::map::profile_json(&p.profile),
            "seconds": t.elapsed().as_secs_f64(),
        }))?;
    } else {
        out.line(format!("layout.profile {}", p.cid))?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers_accept_defaults_and_reject_garbage() {
        assert_eq!(parse_hnsw("").unwrap(), HnswParams::recommended());
        assert_eq!(parse_pq("m=4").unwrap().subquantizers, Some(4));
        assert!(parse_hnsw("max_connections=0").is_err());
        assert!(parse_pq("colour=blue").is_err());
    }
}
