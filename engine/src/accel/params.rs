//! Accelerator parameters (the `C_h` and `C_pq` configurations of
//! proximity-format.md sections 7 and 8) and the `k=v,...` parser shared by
//! `prox build --hnsw/--pq` and `prox accel build`.

use crate::error::{Error, Result};
use crate::proximity::HnswConfig;

/// How an HNSW graph is constructed. Both write the same format; only the
/// manifest's canonical flag differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BuildKind {
    /// Standard HNSW insertion bounded by `ef_construction` with the
    /// diversifying neighbour heuristic (flag `00`, disposable). Deterministic
    /// at any thread count; used by default.
    #[default]
    Fast,
    /// The spec's exact quadratic construction (section 12.12, flag `01`),
    /// byte-identical with the reference.
    Canonical,
}

/// HNSW configuration (`C_h`) plus the build kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HnswParams {
    /// Maximum neighbours per node and layer (`m`). The fast build allows
    /// `2 * m` on layer 0, as is usual for HNSW.
    pub max_connections: u16,
    /// Candidate-list size during construction (fast build only).
    pub ef_construction: u32,
    /// Default candidate-list size for queries.
    pub ef_search: u32,
    /// Bits of leading zeros per promotion level (spec 12.3 with `level_bits`
    /// in place of `log_chunk_size`).
    pub level_bits: u8,
    /// Default rerank multiplier recorded in the manifest (`overfetch`).
    pub overfetch: u32,
    /// Seed of the level hash.
    pub seed: u64,
    /// Canonical or fast construction.
    pub build: BuildKind,
}

impl Default for HnswParams {
    /// The spec defaults: 16, 128, 64, 4, 8, 0; fast build.
    fn default() -> Self {
        HnswParams {
            max_connections: 16,
            ef_construction: 128,
            ef_search: 64,
            level_bits: 4,
            overfetch: 8,
            seed: 0,
            build: BuildKind::Fast,
        }
    }
}

impl HnswParams {
    /// Checks the loader rules of section 8.1 (`max_connections > 0`,
    /// `ef_construction >= max_connections`, `ef_search > 0`,
    /// `overfetch > 0`, `1 <= level_bits <= 63`) with the one validator of
    /// the persisted form, [`HnswConfig::validate`].
    pub fn validate(&self) -> Result<()> {
        self.config().validate()
    }

    /// The persisted configuration (manifest fields) of these parameters.
    pub fn config(&self) -> HnswConfig {
        HnswConfig {
            max_connections: self.max_connections,
            ef_construction: self.ef_construction,
            ef_search: self.ef_search,
            level_bits: self.level_bits,
            overfetch_multiplier: self.overfetch,
            seed: self.seed,
        }
    }

    /// Parameters of a persisted configuration; `canonical` is the
    /// manifest's flag.
    pub fn from_config(c: &HnswConfig, canonical: bool) -> HnswParams {
        HnswParams {
            max_connections: c.max_connections,
            ef_construction: c.ef_construction,
            ef_search: c.ef_search,
            level_bits: c.level_bits,
            overfetch: c.overfetch_multiplier,
            seed: c.seed,
            build: if canonical {
                BuildKind::Canonical
            } else {
                BuildKind::Fast
            },
        }
    }

    /// What `prox build --hnsw` builds when no parameter is given: the
    /// spec defaults with `ef_construction` 200 (a better graph for about
    /// 1.5x the build time; hnswlib's usual setting).
    pub fn recommended() -> Self {
        HnswParams {
            ef_construction: RECOMMENDED_EF_CONSTRUCTION,
            ..HnswParams::default()
        }
    }

    /// Parses `k=v,...` over [`HnswParams::recommended`]. Keys:
    /// `max_connections` (`m`), `ef_construction` (`efc`), `ef_search`
    /// (`ef`), `level_bits`, `overfetch`, `seed`, `build` (`fast` |
    /// `canonical`). An empty string gives the recommended parameters. When
    /// `ef_construction` is not given it is at least `max_connections`, and
    /// a canonical build (which does not use it) records the spec's 128, so
    /// its manifest matches the reference's defaults. The result is
    /// validated.
    pub fn parse(s: &str) -> Result<Self> {
        let mut p = HnswParams::recommended();
        let mut efc_given = false;
        for (k, v) in parse_kv(s)? {
            match k {
                "max_connections" | "m" => p.max_connections = num(k, v)?,
                "ef_construction" | "efc" => {
                    p.ef_construction = num(k, v)?;
                    efc_given = true;
                }
                "ef_search" | "ef" => p.ef_search = num(k, v)?,
                "level_bits" => p.level_bits = num(k, v)?,
                "overfetch" | "overfetch_multiplier" => p.overfetch = num(k, v)?,
                "seed" => p.seed = num(k, v)?,
                "build" | "mode" => {
                    p.build = match v {
                        "fast" => BuildKind::Fast,
                        "canonical" => BuildKind::Canonical,
                        _ => {
                            return Err(Error::InvalidArgument(format!(
                                "hnsw build must be fast or canonical, got {v:?}"
                            )))
                        }
                    }
                }
                _ => return Err(unknown("hnsw", k)),
            }
        }
        if !efc_given {
            p.ef_construction = match p.build {
                BuildKind::Canonical => HnswParams::default().ef_construction,
                BuildKind::Fast => p.ef_construction,
            }
            .max(u32::from(p.max_connections));
        }
        p.validate()?;
        Ok(p)
    }
}

/// PQ configuration (`C_pq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PqParams {
    /// Number of subspaces `m` (1..=dimensions).
    pub subquantizers: u32,
    /// Centroids per subspace `k` (1..=256, and <= record count).
    pub centroids: u16,
    /// Lloyd iterations (> 0).
    pub iterations: u16,
    /// Candidates reranked exactly per result (`k * rerank`), > 0.
    pub rerank: u32,
    /// Seed of the centroid initialisation.
    pub seed: u64,
}

impl Default for PqParams {
    /// The spec defaults: 8, 256, 12, 8, 0.
    fn default() -> Self {
        PqParams {
            subquantizers: 8,
            centroids: 256,
            iterations: 12,
            rerank: 8,
            seed: 0,
        }
    }
}

impl PqParams {
    /// Checks the loader rules of section 7 for `dims` dimensions.
    pub fn validate(&self, dims: usize) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(format!("pq: {m}")));
        if self.subquantizers == 0 || self.subquantizers as usize > dims {
            return bad(format!(
                "subquantizers must be in 1..={dims}, got {}",
                self.subquantizers
            ));
        }
        if self.centroids == 0 || self.centroids > 256 {
            return bad(format!(
                "centroids must be in 1..=256, got {}",
                self.centroids
            ));
        }
        if self.iterations == 0 {
            return bad("iterations must be > 0".into());
        }
        if self.rerank == 0 {
            return bad("rerank must be > 0".into());
        }
        Ok(())
    }

    /// What `prox build --pq` builds when no parameter is given, for a map
    /// of `records` vectors of `dims` dimensions: 4-bit codes (16
    /// centroids, fewer only when the map has fewer records) that the IVF
    /// fast scan reads, 6 training rounds, and one subquantizer per
    /// `w` dimensions, `w` the smallest power of two from 2 that keeps the
    /// code at most 96 bytes (d = 128: 64; d = 384: 96; d = 768: 96).
    pub fn recommended(dims: usize, records: u64) -> Self {
        let dims = dims.max(1);
        let mut width = 2usize;
        while dims.div_ceil(width) > RECOMMENDED_MAX_SUBQUANTIZERS {
            width *= 2;
        }
        PqParams {
            subquantizers: dims.div_ceil(width).min(dims) as u32,
            centroids: records.clamp(1, 16) as u16,
            iterations: 6,
            ..PqParams::default()
        }
    }

    /// Parses `k=v,...` over the spec defaults (8 subquantizers of 256
    /// centroids). Keys as [`PqSpec::parse`], without `preset`. Range
    /// checks that depend on the dimensions happen at build time.
    pub fn parse(s: &str) -> Result<Self> {
        if parse_kv(s)?.iter().any(|(k, _)| *k == "preset") {
            return Err(Error::InvalidArgument(
                "a preset depends on the map's shape: use PqSpec".into(),
            ));
        }
        PqSpec::parse(s)?.over(PqParams::default())
    }
}

/// Code bytes (subquantizers) [`PqParams::recommended`] stays within.
pub const RECOMMENDED_MAX_SUBQUANTIZERS: usize = 96;

/// `ef_construction` of [`HnswParams::recommended`].
pub const RECOMMENDED_EF_CONSTRUCTION: u32 = 200;

/// Which defaults a [`PqSpec`] fills in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PqPreset {
    /// [`PqParams::recommended`] for the map's shape.
    #[default]
    Auto,
    /// The spec defaults ([`PqParams::default`]: 8, 256, 12, 8, 0).
    Spec,
}

/// PQ parameters as a user asks for them (`prox build --pq k=v,...`,
/// Python `pq=`): the keys given, the rest from a preset that may depend
/// on the map's shape, so it is resolved once dimensions and record count
/// are known ([`PqSpec::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PqSpec {
    /// Where unset parameters come from.
    pub preset: PqPreset,
    /// `subquantizers` (`m`), when given.
    pub subquantizers: Option<u32>,
    /// `centroids` (`k`), when given.
    pub centroids: Option<u16>,
    /// `iterations`, when given.
    pub iterations: Option<u16>,
    /// `rerank`, when given.
    pub rerank: Option<u32>,
    /// `seed`, when given.
    pub seed: Option<u64>,
}

impl PqSpec {
    /// Parses `k=v,...`. Keys: `subquantizers` (`m`), `centroids` (`k`),
    /// `iterations` (`iters`), `rerank`, `seed`, and `preset` (`auto`, the
    /// default, or `spec`). An empty string asks for the preset alone.
    pub fn parse(s: &str) -> Result<Self> {
        let mut p = PqSpec::default();
        for (k, v) in parse_kv(s)? {
            match k {
                "subquantizers" | "m" => p.subquantizers = Some(num(k, v)?),
                "centroids" | "k" => p.centroids = Some(num(k, v)?),
                "iterations" | "iters" => p.iterations = Some(num(k, v)?),
                "rerank" | "rerank_multiplier" => p.rerank = Some(num(k, v)?),
                "seed" => p.seed = Some(num(k, v)?),
                "preset" => {
                    p.preset = match v {
                        "auto" => PqPreset::Auto,
                        "spec" => PqPreset::Spec,
                        _ => {
                            return Err(Error::InvalidArgument(format!(
                                "pq preset must be auto or spec, got {v:?}"
                            )))
                        }
                    }
                }
                _ => return Err(unknown("pq", k)),
            }
        }
        Ok(p)
    }

    /// The parameters for a map of `records` vectors of `dims` dimensions,
    /// validated.
    pub fn resolve(&self, dims: usize, records: u64) -> Result<PqParams> {
        let base = match self.preset {
            PqPreset::Auto => PqParams::recommended(dims, records),
            PqPreset::Spec => PqParams::default(),
        };
        let p = self.over(base)?;
        p.validate(dims)?;
        Ok(p)
    }

    /// The keys given over `base`.
    fn over(&self, base: PqParams) -> Result<PqParams> {
        Ok(PqParams {
            subquantizers: self.subquantizers.unwrap_or(base.subquantizers),
            centroids: self.centroids.unwrap_or(base.centroids),
            iterations: self.iterations.unwrap_or(base.iterations),
            rerank: self.rerank.unwrap_or(base.rerank),
            seed: self.seed.unwrap_or(base.seed),
        })
    }
}

impl From<PqParams> for PqSpec {
    /// Every parameter given.
    fn from(p: PqParams) -> Self {
        PqSpec {
            preset: PqPreset::Auto,
            subquantizers: Some(p.subquantizers),
            centroids: Some(p.centroids),
            iterations: Some(p.iterations),
            rerank: Some(p.rerank),
            seed: Some(p.seed),
        }
    }
}

/// Splits `k=v,k=v` (whitespace around items ignored, empty items skipped).
/// Repeated keys are an error.
pub fn parse_kv(s: &str) -> Result<Vec<(&str, &str)>> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| Error::InvalidArgument(format!("expected key=value, got {item:?}")))?;
        let (k, v) = (k.trim(), v.trim());
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(Error::InvalidArgument(format!(
                "parameter {k:?} given twice"
            )));
        }
        out.push((k, v));
    }
    Ok(out)
}

fn num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T> {
    v.parse()
        .map_err(|_| Error::InvalidArgument(format!("parameter {k}: {v:?} is not a valid number")))
}

fn unknown(what: &str, k: &str) -> Error {
    Error::InvalidArgument(format!("unknown {what} parameter {k:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_defaults_and_overrides() {
        assert_eq!(HnswParams::parse("").unwrap(), HnswParams::recommended());
        assert_eq!(HnswParams::recommended().ef_construction, 200);
        // A canonical build records the spec's construction width unless told.
        assert_eq!(
            HnswParams::parse("build=canonical").unwrap(),
            HnswParams {
                build: BuildKind::Canonical,
                ..HnswParams::default()
            }
        );
        assert_eq!(HnswParams::parse("m=300").unwrap().ef_construction, 300);
        let p =
            HnswParams::parse("max_connections=8, ef_construction=40,level_bits=3,seed=9").unwrap();
        assert_eq!(
            (p.max_connections, p.ef_construction, p.level_bits, p.seed),
            (8, 40, 3, 9)
        );
        assert_eq!(
            HnswParams::parse("build=canonical").unwrap().build,
            BuildKind::Canonical
        );
        let q = PqParams::parse("subquantizers=4,centroids=16,iterations=3,rerank=2").unwrap();
        assert_eq!(
            (q.subquantizers, q.centroids, q.iterations, q.rerank),
            (4, 16, 3, 2)
        );
    }

    #[test]
    fn pq_defaults_follow_the_shape() {
        let m = |d, n| PqParams::recommended(d, n).subquantizers;
        assert_eq!((m(128, 1000), m(384, 1000), m(768, 1000)), (64, 96, 96));
        assert_eq!((m(100, 1000), m(256, 1000), m(960, 1000)), (50, 64, 60));
        assert_eq!((m(1, 1000), m(3, 1000)), (1, 2));
        let r = PqParams::recommended(128, 1_000_000);
        assert_eq!((r.centroids, r.iterations, r.rerank, r.seed), (16, 6, 8, 0));
        assert_eq!(PqParams::recommended(128, 5).centroids, 5);
        for d in 1..2000 {
            let p = PqParams::recommended(d, 100);
            assert!(p.validate(d).is_ok(), "d = {d}");
            assert!(p.subquantizers as usize <= RECOMMENDED_MAX_SUBQUANTIZERS);
        }
        // Keys override the preset; `preset=spec` gives the spec defaults.
        let s = PqSpec::parse("m=32,rerank=4").unwrap();
        let p = s.resolve(128, 1000).unwrap();
        assert_eq!((p.subquantizers, p.centroids, p.rerank), (32, 16, 4));
        let spec = PqSpec::parse("preset=spec")
            .unwrap()
            .resolve(128, 1000)
            .unwrap();
        assert_eq!(spec, PqParams::default());
        assert!(PqSpec::parse("preset=fast").is_err());
        assert!(PqParams::parse("preset=spec").is_err());
        assert!(PqSpec::parse("m=200").unwrap().resolve(128, 1000).is_err());
        let given = PqParams::recommended(384, 10);
        assert_eq!(PqSpec::from(given).resolve(384, 1_000_000).unwrap(), given);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(HnswParams::parse("m=0").is_err());
        assert!(HnswParams::parse("m=16,efc=8").is_err());
        assert!(HnswParams::parse("bogus=1").is_err());
        assert!(HnswParams::parse("m").is_err());
        assert!(HnswParams::parse("m=1,m=2").is_err());
        assert!(HnswParams::parse("level_bits=64").is_err());
        assert!(PqParams::parse("centroids=x").is_err());
        let big = PqParams {
            centroids: 300,
            ..PqParams::default()
        };
        assert!(big.validate(384).is_err());
        assert!(PqParams::default().validate(4).is_err());
        assert!(PqParams::default().validate(8).is_ok());
    }
}
