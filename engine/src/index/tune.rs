//! Measuring a map's recall profile ([`super::profile`]): every setting
//! of every path the index has, run on a sample of the map's own records.
//!
//! The sample is `queries` records evenly strided in key order. Each is
//! searched for `k + 1` hits and its own key is dropped from the answer
//! (the first `k` of the rest are kept): a record stands in for an unseen
//! query near the data, and the measure is recall@k. (The record itself
//! takes one of the `(k + 1) · rerank` candidates a PQ search reranks, so
//! the others get slightly more than a `k`-hit request's `k · rerank`;
//! comparing only `k - 1` neighbours instead would overstate recall@k
//! more, as a shorter list is easier to find.) The exact answer comes from
//! the native exact search the same way. Each setting runs the whole sample on the
//! calling thread, timed, best of [`PASSES`] passes.
//!
//! Settings, each path swept from cheap to dear until a setting finds
//! every exact neighbour, costs more than the exact search, or
//! [`PLATEAU`] settings in a row found almost nothing more:
//! * native: exact, then the fast, balanced and high presets;
//! * HNSW: `ef` from [`EF`] (more than `k`);
//! * PQ with fast scan: `nprobe` from [`NPROBE`] (at most the lists) for
//!   each rerank multiplier of [`FAST_RERANK`]; without: the multipliers
//!   of [`FLAT_RERANK`].

use super::open::{Index, Scratch};
use super::profile::{Measured, Profile, Setting};
use super::request::{QueryMode, Request};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::proximity::{self, format::META_LAYOUT_PROFILE};
use rayon::prelude::*;
use std::collections::HashSet;
use std::time::Instant;

/// Sample queries measured by default.
pub const DEFAULT_PROFILE_QUERIES: usize = 500;

/// Hits per query the profile measures (recall@10).
pub const PROFILE_K: usize = 10;

/// Sample queries the exact search is timed on (its answers for the whole
/// sample run in parallel).
const EXACT_TIMED: usize = 32;

/// Timed passes per setting (the fastest counts); a setting whose first
/// pass takes longer than a second runs once.
const PASSES: usize = 2;

/// A sweep stops after this many settings in a row that found (almost)
/// nothing more.
const PLATEAU: usize = 3;

/// HNSW candidate-list sizes tried.
const EF: [u32; 13] = [12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768];

/// Fast-scan lists probed.
const NPROBE: [u32; 16] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256];

/// Rerank multipliers with fast scan.
const FAST_RERANK: [u32; 6] = [2, 4, 6, 8, 12, 16];

/// Rerank multipliers of a flat PQ scan.
const FLAT_RERANK: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The sample: keys and raw vectors.
struct Sample {
    keys: Vec<Vec<u8>>,
    vectors: Vec<Vec<f32>>,
    /// The exact top `k` of each, its own key left out.
    truth: Vec<HashSet<Vec<u8>>>,
}

impl Index {
    /// Measures this index's recall profile on `queries` of its records
    /// (at most the map's size; see the module docs). A map with fewer
    /// than [`PROFILE_K`]` + 2` records is [`Error::InvalidArgument`].
    /// Takes seconds on a large map: the exact answers alone are `queries`
    /// exact searches.
    pub fn measure_profile(&self, queries: usize) -> Result<Profile> {
        let k = PROFILE_K;
        let n = self.len() as usize;
        if n < k + 2 {
            return Err(Error::InvalidArgument(format!(
                "a recall profile needs at least {} records, the map has {n}",
                k + 2
            )));
        }
        if queries == 0 {
            return Err(Error::InvalidArgument(
                "a recall profile needs at least one query".into(),
            ));
        }
        let s = queries.min(n);
        let mut sample = self.sample(s)?;
        let exact_micros = self.exact_answers(&mut sample, k)?;
        let per = k as u64;
        let wanted = per * s as u64;
        let mut entries = vec![Measured {
            setting: Setting::native(QueryMode::Exact),
            found: wanted,
            found_sq: per * per * s as u64,
            micros: exact_micros as f32,
        }];
        let mut sweep = |settings: &mut dyn Iterator<Item = Setting>| -> Result<()> {
            let (mut best, mut flat) = (0u64, 0);
            for setting in settings {
                let m = self.run_setting(&sample, setting, k)?;
                entries.push(m);
                // A plateau: PLATEAU settings in a row gained under a
                // thousandth of the neighbours.
                flat = if m.found > best + wanted / 1000 {
                    0
                } else {
                    flat + 1
                };
                best = best.max(m.found);
                if m.found == wanted || f64::from(m.micros) > exact_micros || flat == PLATEAU {
                    break;
                }
            }
            Ok(())
        };
        for mode in [QueryMode::Fast, QueryMode::Balanced, QueryMode::High] {
            sweep(&mut std::iter::once(Setting::native(mode)))?;
        }
        if self.accel.hnsw.is_some() {
            sweep(
                &mut EF
                    .into_iter()
                    .filter(|&ef| ef as usize > k)
                    .map(Setting::hnsw),
            )?;
        }
        if let Some(pq) = &self.accel.pq {
            match pq.fast_scan() {
                Some(fs) => {
                    let lists = fs.nlist() as u32;
                    for rerank in FAST_RERANK {
                        let mut probes = NPROBE
                            .into_iter()
                            .filter(|&p| p <= lists)
                            .map(|p| Setting::pq(p, rerank));
                        sweep(&mut probes)?;
                    }
                }
                None => sweep(&mut FLAT_RERANK.into_iter().map(|r| Setting::pq(0, r)))?,
            }
        }
        Ok(Profile {
            k: k as u32,
            queries: s as u32,
            edits: 0,
            hnsw: self.sidecars.hnsw.filter(|_| self.accel.hnsw.is_some()),
            pq: self.sidecars.pq.filter(|_| self.accel.pq.is_some()),
            entries,
        })
    }

    /// Uses `profile` (measured on this index's sidecars, else
    /// [`Error::InvalidArgument`]) for `recall` requests from now on, also
    /// on an index already shared and searched. It is not persisted here:
    /// [`Index::publish_profile`] names it from a root, and a later write
    /// from this index carries it.
    pub fn set_profile(&self, profile: Profile) -> Result<()> {
        if !profile.matches(self.sidecars.hnsw, self.sidecars.pq) {
            return Err(Error::InvalidArgument(
                "the profile was measured on other sidecars than this index has".into(),
            ));
        }
        *self.profile.write().unwrap_or_else(|e| e.into_inner()) =
            Some(std::sync::Arc::new(profile));
        Ok(())
    }

    /// Persists `profile` (measured on this index) and names it from the
    /// root `name` beside what it already publishes, by compare-and-swap.
    /// The root must still publish this descriptor
    /// ([`Error::Conflict`] otherwise) and the sidecars the profile measured
    /// ([`Error::InvalidArgument`]). Returns the profile's manifest CID.
    pub fn publish_profile(&self, name: &str, profile: &Profile) -> Result<Cid> {
        let store = &**self.store();
        let (descriptor, sidecars, mut meta) =
            proximity::resolve_full(store, name)?.ok_or_else(|| Error::UnknownMap {
                name: name.to_string(),
            })?;
        if descriptor != self.descriptor {
            return Err(Error::Conflict {
                name: name.to_string(),
                expected: Some(self.descriptor),
                found: Some(descriptor),
            });
        }
        if !profile.matches(sidecars.hnsw, sidecars.pq) {
            return Err(Error::InvalidArgument(format!(
                "root {name:?} publishes other sidecars than the profile measured; \
                 measure it again"
            )));
        }
        let cid = profile.persist(store, descriptor, self.dims(), self.len())?;
        meta.insert(META_LAYOUT_PROFILE.to_vec(), cid.0.to_vec());
        proximity::publish_expecting_with(
            store,
            name,
            descriptor,
            &sidecars,
            &meta,
            Some(descriptor),
        )?;
        Ok(cid)
    }

    /// `s` records evenly strided in key order (`s <= len`).
    fn sample(&self, s: usize) -> Result<Sample> {
        let n = self.len() as usize;
        let mut keys = Vec::with_capacity(s);
        let mut next = 0;
        for (i, entry) in self.map().directory()?.iter().enumerate() {
            if next >= s {
                break;
            }
            if i == next * n / s {
                keys.push(entry?.0);
                next += 1;
            }
        }
        let mut vectors = Vec::with_capacity(s);
        for key in &keys {
            let (v, _) = self.get(key)?.ok_or_else(|| Error::Corrupt {
                cid: self.descriptor,
                reason: format!("record {} is missing", hex::encode(key)),
            })?;
            vectors.push(v);
        }
        if keys.len() != s {
            return Err(Error::Corrupt {
                cid: self.descriptor,
                reason: format!("the directory holds {} records, the map {n}", keys.len()),
            });
        }
        Ok(Sample {
            keys,
            vectors,
            truth: Vec::new(),
        })
    }

    /// The exact answers of the sample (in parallel), into
    /// `sample.truth`; returns the exact search's mean µs per query on
    /// one thread, timed on the first [`EXACT_TIMED`] queries.
    fn exact_answers(&self, sample: &mut Sample, k: usize) -> Result<f64> {
        let req = Request::new(k + 1).mode(QueryMode::Exact);
        let answers = sample
            .vectors
            .par_iter()
            .map_init(Scratch::default, |sc, v| self.search(sc, v, &req))
            .collect::<Result<Vec<_>>>()?;
        sample.truth = answers
            .iter()
            .zip(&sample.keys)
            .map(|(r, own)| {
                r.hits
                    .iter()
                    .filter(|h| &h.key != own)
                    .take(k)
                    .map(|h| h.key.clone())
                    .collect()
            })
            .collect();
        let timed = &sample.vectors[..sample.vectors.len().min(EXACT_TIMED)];
        let mut scratch = Scratch::default();
        let start = Instant::now();
        for v in timed {
            self.search(&mut scratch, v, &req)?;
        }
        Ok(start.elapsed().as_secs_f64() * 1e6 / timed.len() as f64)
    }

    /// Runs the sample with `setting` on this thread: the exact neighbours
    /// it found (and their per-query squares), and the best mean µs per
    /// query of [`PASSES`] passes.
    fn run_setting(&self, sample: &Sample, setting: Setting, k: usize) -> Result<Measured> {
        let mut req = Request::new(k + 1);
        setting.apply_to(&mut req);
        let mut scratch = Scratch::default();
        let mut best = f64::INFINITY;
        let (mut found, mut found_sq) = (0u64, 0u64);
        for pass in 0..PASSES {
            let start = Instant::now();
            let mut answers = Vec::with_capacity(sample.keys.len());
            for v in &sample.vectors {
                answers.push(self.search(&mut scratch, v, &req)?);
            }
            let secs = start.elapsed().as_secs_f64();
            best = best.min(secs);
            if pass == 0 {
                for ((r, own), truth) in answers.iter().zip(&sample.keys).zip(&sample.truth) {
                    let f = r
                        .hits
                        .iter()
                        .filter(|h| &h.key != own)
                        .take(k)
                        .filter(|h| truth.contains(&h.key))
                        .count() as u64;
                    found += f;
                    found_sq += f * f;
                }
            }
            if secs > 1.0 {
                break;
            }
        }
        Ok(Measured {
            setting,
            found,
            found_sq,
            micros: (best * 1e6 / sample.keys.len() as f64) as f32,
        })
    }
}
