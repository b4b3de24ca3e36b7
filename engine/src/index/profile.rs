//! The recall profile: every search setting a map can run, measured on a
//! sample of its own records (recall@k against the exact answer, time per
//! query), persisted as a `PRLY` layout of kind
//! [`LayoutKind::RecallProfile`] (docs/formats-proximity.md, "Layout
//! sidecars"). [`Request::recall`](super::Request::recall) picks from it
//! the fastest setting whose measured recall reaches the target.
//!
//! Kind header: `uv k | uv queries | uv edits | u8 sidecars (bit 0 HNSW,
//! bit 1 PQ) | HNSW manifest CID (32, with bit 0) | PQ manifest CID (32,
//! with bit 1)`. Payload: `uv entries`, then per entry `u8 path (0
//! native, 1 hnsw, 2 pq) | u8 mode (native: 0 exact, 1 fast, 2 balanced,
//! 3 high; 0 on a sidecar) | uv ef | uv nprobe | uv rerank | uv found |
//! uv found_sq | f32 micros`. Each sample record asks for `k + 1` hits
//! and is compared without itself (recall@k): `found <= k · queries`
//! neighbours of the exact answers were returned, `found_sq` is the sum
//! over the queries of each one's found count squared (the spread of the
//! per-query recall), and `micros` is the mean single-thread time per
//! query. `edits` counts the records changed by writes since the profile
//! was measured (it is carried forward by [`super::Index::apply`]).
//!
//! The recalls are a function of the map and its sidecars (every search
//! is deterministic); the times are measurements of the machine that
//! measured them, so the profile's bytes are not a function of the
//! descriptor alone, unlike the other layouts. The choice a profile makes
//! is the same on every machine that reads it.

use super::request::{PathChoice, QueryMode, Request};
use crate::accel::Path;
use crate::cid::Cid;
use crate::codec::{put_f32, put_uv, Reader};
use crate::error::{Error, Result};
use crate::proximity::format::LayoutKind;
use crate::proximity::layout_io::{manifest, mismatch, payload, persist_payload};
use crate::store::BlockStore;

const OBJ: &str = "PRLY";

/// Most entries a profile may hold.
const MAX_ENTRIES: usize = 4096;

/// One search setting: a path and its knobs (0 where a knob does not
/// apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The path.
    pub path: Path,
    /// The native preset ([`QueryMode::Exact`], `Fast`, `Balanced` or
    /// `High`); [`QueryMode::Auto`] on a sidecar path.
    pub mode: QueryMode,
    /// HNSW candidate-list size.
    pub ef: u32,
    /// PQ fast-scan lists probed (0: the index's default).
    pub nprobe: u32,
    /// PQ rerank multiplier.
    pub rerank: u32,
}

impl Setting {
    /// A native search with `mode`.
    pub fn native(mode: QueryMode) -> Setting {
        Setting {
            path: Path::Native,
            mode,
            ef: 0,
            nprobe: 0,
            rerank: 0,
        }
    }

    /// The HNSW path at `ef`.
    pub fn hnsw(ef: u32) -> Setting {
        Setting {
            path: Path::Hnsw,
            mode: QueryMode::Auto,
            ef,
            nprobe: 0,
            rerank: 0,
        }
    }

    /// The PQ path probing `nprobe` lists (0: flat scan or the default)
    /// and reranking `rerank` candidates per hit.
    pub fn pq(nprobe: u32, rerank: u32) -> Setting {
        Setting {
            path: Path::Pq,
            mode: QueryMode::Auto,
            ef: 0,
            nprobe,
            rerank,
        }
    }
}

impl Setting {
    /// Sets `req`'s path, mode, `ef`, `nprobe` and `rerank` to this
    /// setting's (a knob of 0 becomes `None`).
    pub fn apply_to(&self, req: &mut Request) {
        req.mode = self.mode;
        req.path = match self.path {
            Path::Native => PathChoice::Native,
            Path::Hnsw => PathChoice::Hnsw,
            Path::Pq => PathChoice::Pq,
        };
        let knob = |v: u32| (v > 0).then_some(v as usize);
        req.ef = knob(self.ef);
        req.nprobe = knob(self.nprobe);
        req.rerank = knob(self.rerank);
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.path {
            Path::Native => write!(f, "native {}", self.mode),
            Path::Hnsw => write!(f, "hnsw ef={}", self.ef),
            Path::Pq if self.nprobe == 0 => write!(f, "pq rerank={}", self.rerank),
            Path::Pq => write!(f, "pq nprobe={} rerank={}", self.nprobe, self.rerank),
        }
    }
}

/// One measured setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// What ran.
    pub setting: Setting,
    /// Neighbours of the exact answers it returned (of `k · queries`).
    pub found: u64,
    /// The sum over the sample queries of each one's found count squared.
    pub found_sq: u64,
    /// Mean time per query on one thread, µs.
    pub micros: f32,
}

/// A profile is due to be measured again once the records changed since
/// it was measured pass this fraction of the map.
pub const PROFILE_STALE_FRACTION: f64 = 0.1;

/// A setting qualifies for a target when its measured recall less this
/// many standard errors of the sample mean reaches the target.
pub const RECALL_Z: f64 = 2.0;

/// A map's recall profile (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Neighbours compared per sample query (recall@k, the query's own
    /// record left out).
    pub k: u32,
    /// Sample queries.
    pub queries: u32,
    /// Records changed by writes since it was measured.
    pub edits: u64,
    /// The HNSW sidecar it measured, if any.
    pub hnsw: Option<Cid>,
    /// The PQ sidecar it measured, if any.
    pub pq: Option<Cid>,
    /// Every setting measured, in measurement order.
    pub entries: Vec<Measured>,
}

/// What [`Profile::choose`] picked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// The setting that runs.
    pub setting: Setting,
    /// Its measured recall (mean over the sample queries).
    pub recall: f64,
    /// The standard error of that mean.
    pub stderr: f64,
    /// Its measured time per query, µs.
    pub micros: f64,
    /// False when no setting reached the target (the most accurate one
    /// was chosen).
    pub reached: bool,
}

impl Profile {
    /// The measured recall of `e`.
    pub fn recall(&self, e: &Measured) -> f64 {
        let wanted = u64::from(self.k) * u64::from(self.queries);
        if wanted == 0 {
            return 0.0;
        }
        e.found as f64 / wanted as f64
    }

    /// The standard error of the measured recall of `e` (the sample
    /// standard deviation of the per-query recall over √queries).
    pub fn stderr(&self, e: &Measured) -> f64 {
        let (s, per) = (f64::from(self.queries), f64::from(self.k));
        if s < 2.0 || per == 0.0 {
            return 0.0;
        }
        let mean = e.found as f64 / (s * per);
        let square = e.found_sq as f64 / (s * per * per);
        let var = ((square - mean * mean) * s / (s - 1.0)).max(0.0);
        (var / s).sqrt()
    }

    /// The fastest setting whose measured recall less [`RECALL_Z`]
    /// standard errors is at least `target` (ties: the earlier entry); when
    /// none reaches it, the most accurate (then fastest) one with `reached`
    /// false. Only entries whose path `available` admits are considered.
    /// `None` when no entry is.
    pub fn choose(&self, target: f64, available: impl Fn(Path) -> bool) -> Option<Choice> {
        let usable = || self.entries.iter().filter(|e| available(e.setting.path));
        let best = |reached: bool, e: &Measured| Choice {
            setting: e.setting,
            recall: self.recall(e),
            stderr: self.stderr(e),
            micros: f64::from(e.micros),
            reached,
        };
        let fastest = usable()
            .filter(|e| self.recall(e) - RECALL_Z * self.stderr(e) >= target)
            .min_by(|a, b| a.micros.total_cmp(&b.micros));
        if let Some(e) = fastest {
            return Some(best(true, e));
        }
        usable()
            .min_by(|a, b| b.found.cmp(&a.found).then(a.micros.total_cmp(&b.micros)))
            .map(|e| best(false, e))
    }

    /// The kind header and payload bytes.
    fn encode(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut head = Vec::new();
        put_uv(&mut head, u64::from(self.k));
        put_uv(&mut head, u64::from(self.queries));
        put_uv(&mut head, self.edits);
        head.push(u8::from(self.hnsw.is_some()) | (u8::from(self.pq.is_some()) << 1));
        for c in [self.hnsw, self.pq].into_iter().flatten() {
            head.extend_from_slice(&c.0);
        }
        let mut out = Vec::new();
        put_uv(&mut out, self.entries.len() as u64);
        for e in &self.entries {
            let s = &e.setting;
            out.push(match s.path {
                Path::Native => 0,
                Path::Hnsw => 1,
                Path::Pq => 2,
            });
            out.push(match s.mode {
                QueryMode::Auto | QueryMode::Exact => 0,
                QueryMode::Fast => 1,
                QueryMode::Balanced => 2,
                QueryMode::High => 3,
            });
            for v in [s.ef, s.nprobe, s.rerank] {
                put_uv(&mut out, u64::from(v));
            }
            put_uv(&mut out, e.found);
            put_uv(&mut out, e.found_sq);
            put_f32(&mut out, OBJ, e.micros)?;
        }
        Ok((head, out))
    }

    /// Decodes and checks a kind header and payload (manifest `cid`).
    fn decode(head: &[u8], body: &[u8], cid: Cid) -> Result<Profile> {
        let mut r = Reader::new(head, OBJ);
        let k = r.uv32()?;
        let queries = r.uv32()?;
        let edits = r.uv()?;
        let flags = r.u8()?;
        if flags > 3 {
            return Err(mismatch(cid, format!("sidecar flags {flags:#x}")));
        }
        let hnsw = if flags & 1 != 0 { Some(r.cid()?) } else { None };
        let pq = if flags & 2 != 0 { Some(r.cid()?) } else { None };
        r.finish()?;
        if k == 0 || queries == 0 {
            return Err(mismatch(cid, format!("k {k} over {queries} queries")));
        }
        let wanted = u64::from(k) * u64::from(queries);
        let mut r = Reader::new(body, OBJ);
        let count = r.uv_usize()?;
        if count == 0 || count > MAX_ENTRIES {
            return Err(mismatch(cid, format!("{count} entries")));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let (path, mode) = (r.u8()?, r.u8()?);
            let (ef, nprobe, rerank) = (r.uv32()?, r.uv32()?, r.uv32()?);
            let found = r.uv()?;
            let found_sq = r.uv()?;
            let micros = r.f32()?;
            let setting = match (path, mode) {
                (0, m) if ef == 0 && nprobe == 0 && rerank == 0 => Setting::native(match m {
                    0 => QueryMode::Exact,
                    1 => QueryMode::Fast,
                    2 => QueryMode::Balanced,
                    3 => QueryMode::High,
                    _ => return Err(mismatch(cid, format!("native mode {m}"))),
                }),
                (1, 0) if ef > 0 && nprobe == 0 && rerank == 0 && hnsw.is_some() => {
                    Setting::hnsw(ef)
                }
                (2, 0) if ef == 0 && rerank > 0 && pq.is_some() => Setting::pq(nprobe, rerank),
                _ => {
                    return Err(mismatch(
                        cid,
                        format!(
                            "entry path {path} mode {mode} ef {ef} nprobe {nprobe} rerank {rerank}"
                        ),
                    ))
                }
            };
            // Per query 0 <= f <= k, so found² / queries <= found_sq
            // <= k · found.
            let spread = u128::from(found_sq) * u128::from(queries) >= u128::from(found).pow(2)
                && u128::from(found_sq) <= u128::from(k) * u128::from(found);
            if found > wanted || !spread || !micros.is_finite() || micros < 0.0 {
                return Err(mismatch(
                    cid,
                    format!("entry {setting}: {found} of {wanted} found in {micros} µs"),
                ));
            }
            entries.push(Measured {
                setting,
                found,
                found_sq,
                micros,
            });
        }
        r.finish()?;
        Ok(Profile {
            k,
            queries,
            edits,
            hnsw,
            pq,
            entries,
        })
    }

    /// Writes the profile as a layout bound to the descriptor `source`
    /// (`dims` dimensions, `records` records); returns the manifest CID.
    pub fn persist(
        &self,
        store: &dyn BlockStore,
        source: Cid,
        dims: usize,
        records: u64,
    ) -> Result<Cid> {
        let (head, body) = self.encode()?;
        persist_payload(
            store,
            LayoutKind::RecallProfile,
            source,
            dims,
            records,
            head,
            body,
        )
    }

    /// Loads the profile layout `cid` of the descriptor `source`.
    /// [`Error::NotFound`] for a missing block, [`Error::InvalidArgument`]
    /// for another kind's or descriptor's layout, [`Error::Corrupt`] for
    /// bytes that do not decode or do not fit.
    pub fn load(store: &dyn BlockStore, cid: Cid, source: Cid, dims: usize) -> Result<Profile> {
        let m = manifest(store, cid, LayoutKind::RecallProfile, source, dims)?;
        let mut body = Vec::with_capacity(m.payload_len as usize);
        payload(store, &m, cid)?.visit(m.payload_len as usize, |s| body.extend_from_slice(s))?;
        Profile::decode(&m.params, &body, cid).map_err(|e| match e {
            Error::Corrupt { .. } => e,
            other => Error::Corrupt {
                cid,
                reason: other.to_string(),
            },
        })
    }

    /// True when the records changed since the measurement (`edits`) pass
    /// [`PROFILE_STALE_FRACTION`] of a map of `records` records: it still
    /// answers, and should be measured again.
    pub fn is_stale(&self, records: u64) -> bool {
        self.edits as f64 > PROFILE_STALE_FRACTION * records as f64
    }

    /// True when the profile measured exactly these sidecars.
    pub fn matches(&self, hnsw: Option<Cid>, pq: Option<Cid>) -> bool {
        self.hnsw == hnsw && self.pq == pq
    }
}

/// The error of a `recall` request on a map without a usable profile.
pub(crate) fn no_profile(why: &str) -> Error {
    Error::InvalidRequest {
        field: "recall",
        reason: format!(
            "{why}; measure one with `prox accel build --profile` (or build the map \
             with `prox build`, which measures it)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStore;

    fn sample() -> Profile {
        // Every query finds the same count (no spread), except where noted.
        let m = |setting, found: u64, micros| Measured {
            setting,
            found,
            found_sq: (found * found).div_ceil(100),
            micros,
        };
        Profile {
            k: 10,
            queries: 100,
            edits: 3,
            hnsw: Some(Cid([7; 32])),
            pq: Some(Cid([9; 32])),
            entries: vec![
                m(Setting::native(QueryMode::Exact), 1000, 900.0),
                m(Setting::native(QueryMode::Balanced), 990, 300.0),
                m(Setting::hnsw(16), 900, 40.0),
                m(Setting::hnsw(64), 985, 110.0),
                m(Setting::pq(4, 4), 950, 60.0),
                m(Setting::pq(0, 8), 960, 250.0),
            ],
        }
    }

    #[test]
    fn chooses_the_fastest_setting_that_reaches_the_target() {
        let p = sample();
        let all = |_| true;
        let pick = |t| p.choose(t, all).unwrap();
        assert_eq!(pick(0.5).setting, Setting::hnsw(16));
        assert_eq!(pick(0.95).setting, Setting::pq(4, 4));
        assert_eq!(pick(0.98).setting, Setting::hnsw(64));
        assert_eq!(pick(0.99).setting, Setting::native(QueryMode::Balanced));
        assert!(pick(1.0).reached && pick(1.0).setting == Setting::native(QueryMode::Exact));
        assert_eq!(pick(0.95).recall, 0.95);
        assert_eq!(pick(0.95).stderr, 0.0);
        // The same mean with a spread (half the queries find all 10, half
        // 9) is short of 0.95 by a standard error.
        let mut spread = p.clone();
        spread.entries[4].found_sq = 50 * 100 + 50 * 81;
        let c = spread.choose(0.95, all).unwrap();
        assert_eq!(c.setting, Setting::hnsw(64));
        let e = &spread.entries[4];
        assert!(
            (spread.stderr(e) - 0.005).abs() < 1e-4,
            "{}",
            spread.stderr(e)
        );
        // Without the HNSW sidecar its entries are not candidates.
        let c = p.choose(0.98, |path| path != Path::Hnsw).unwrap();
        assert_eq!(c.setting, Setting::native(QueryMode::Balanced));
        // A target nothing reaches takes the most accurate setting.
        let c = p.choose(0.999, |path| path == Path::Pq).unwrap();
        assert!(!c.reached);
        assert_eq!(c.setting, Setting::pq(0, 8));
        assert!(p.choose(0.5, |_| false).is_none());
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        let store = MemStore::new();
        let p = sample();
        let src = Cid([1; 32]);
        let cid = p.persist(&store, src, 8, 5000).unwrap();
        assert_eq!(Profile::load(&store, cid, src, 8).unwrap(), p);
        assert!(matches!(
            Profile::load(&store, cid, Cid([2; 32]), 8),
            Err(Error::InvalidArgument(_))
        ));
        let (head, body) = p.encode().unwrap();
        // Truncated anywhere: an error, never a panic.
        for cut in 0..body.len() {
            assert!(Profile::decode(&head, &body[..cut], cid).is_err());
        }
        for cut in 0..head.len() {
            assert!(Profile::decode(&head[..cut], &body, cid).is_err());
        }
        // Every single-byte change either decodes to a valid profile or is
        // rejected.
        for i in 0..body.len() {
            let mut b = body.clone();
            b[i] ^= 0x5a;
            if let Ok(q) = Profile::decode(&head, &b, cid) {
                assert!(q.entries.iter().all(|e| e.found <= 1000));
            }
        }
        // More found than asked for, or an HNSW entry without the sidecar.
        let mut bad = p.clone();
        bad.entries[0].found = 1001;
        let (h, b) = bad.encode().unwrap();
        assert!(matches!(
            Profile::decode(&h, &b, cid),
            Err(Error::Corrupt { .. })
        ));
        let mut bad = p.clone();
        bad.hnsw = None;
        let (h, b) = bad.encode().unwrap();
        assert!(matches!(
            Profile::decode(&h, &b, cid),
            Err(Error::Corrupt { .. })
        ));
    }
}
