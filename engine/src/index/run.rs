//! Running queries on an [`Index`]: validation, the route, the search and
//! the answer's values and vectors.

use super::open::{Index, Scratch};
use super::plan;
use super::profile::{no_profile, Choice};
use super::request::{PathChoice, QueryMode, Request};
use super::response::{Counters, Neighbour, Response};
use super::route::{route, Route};
use crate::accel::{self, Path};
use crate::error::{Error, Result};
use crate::keys::{Filter, KeySet};
use crate::proximity::math;
use crate::proximity::search::{Completion, SearchContext, SearchRequest};
use rayon::prelude::*;

/// The unfiltered recall@10 whose profile setting a filtered PQ plan
/// starts from.
const FILTERED_RECALL: f64 = 0.99;

impl Index {
    /// `req` with a field or boolean filter replaced by the key set it
    /// admits, read from the map's field indexes (the eligible set every
    /// search path then takes). A field the map does not index is
    /// [`Error::UnknownField`]; a value of another type than the field's
    /// index is [`Error::FieldTypeMismatch`]. Key filters pass unchanged.
    pub fn resolve_filter(&self, req: &Request) -> Result<Request> {
        let Some(f) = req.filter.as_ref().filter(|f| !f.is_key_filter()) else {
            return Ok(req.clone());
        };
        let keys = match self.filters.get(f) {
            Some(keys) => keys,
            None => {
                let map = self.map();
                let keys: KeySet = crate::secondary::eval(
                    self.fields.as_deref(),
                    map.store(),
                    &map.directory()?,
                    f,
                )?
                .into();
                self.filters.put(f, &keys);
                keys
            }
        };
        let mut out = req.clone();
        out.filter = Some(crate::keys::Filter::Keys(keys));
        Ok(out)
    }

    /// Answers one query: `vector` is raw (`dims` finite components; it is
    /// prepared with the map's metric). Errors are typed and never panics:
    /// [`Error::WrongDimension`], [`Error::NonFiniteVector`],
    /// [`Error::ZeroCosineVector`], [`Error::InvalidRequest`] naming the
    /// field at fault, [`Error::DeadlineExceeded`] when the request's
    /// deadline passed before the search finished.
    pub fn search(&self, scratch: &mut Scratch, vector: &[f32], req: &Request) -> Result<Response> {
        let mut response = Response::default();
        self.search_into(scratch, vector, req, &mut response)?;
        Ok(response)
    }

    /// [`Index::search`] writing into `out`, whose hits and their key
    /// buffers are reused: with the same `scratch` and `out` from query to
    /// query, a search without values, vectors or a filter allocates
    /// nothing in steady state. On error `out` is unspecified.
    pub fn search_into(
        &self,
        scratch: &mut Scratch,
        vector: &[f32],
        req: &Request,
        out: &mut Response,
    ) -> Result<()> {
        if req.filter.as_ref().is_some_and(|f| !f.is_key_filter()) {
            let resolved = self.resolve_filter(req)?;
            return self.search_into(scratch, vector, &resolved, out);
        }
        req.validate()?;
        self.check_vector(vector)?;
        // Only a request the accel planner decides (path and mode auto, no
        // recall target) can take the filtered PQ plan, and only a filter
        // that may admit more than the sets always scored directly.
        let planned =
            req.mode == QueryMode::Auto && req.path == PathChoice::Auto && req.recall.is_none();
        let filtered = match &req.filter {
            Some(Filter::Keys(keys)) if keys.len() <= accel::SMALL_ELIGIBLE => None,
            Some(_) if planned => self.filtered_pq(),
            _ => None,
        };
        let loaded = match (&self.accel.hnsw, &self.accel.pq, filtered) {
            (_, _, Some(_)) => plan::Loaded::FastScan,
            (None, None, _) => plan::Loaded::Directory,
            _ => plan::Loaded::InMemory,
        };
        if let Some(keys) = plan::direct_keys(req, self.len() as usize, loaded) {
            return self.direct_into(scratch, vector, keys, req, out);
        }
        self.routed_into(scratch, vector, req, filtered, out)?;
        if let Some(keys) = plan::under_filled(req, out.hits.len()) {
            return self.direct_into(scratch, vector, keys, req, out);
        }
        Ok(())
    }

    /// Scores `keys` directly (the planner's exact path for small or
    /// under-filled eligible sets) into `out`.
    fn direct_into(
        &self,
        scratch: &mut Scratch,
        vector: &[f32],
        keys: &KeySet,
        req: &Request,
        out: &mut Response,
    ) -> Result<()> {
        let (prepared, work) = (&mut scratch.prepared, &mut scratch.prep_work);
        math::prepare_into(
            self.metric(),
            self.dims() as u32,
            vector,
            None,
            prepared,
            work,
        )?;
        let mut n = 0;
        let (hits, spare) = (&mut out.hits, &mut scratch.spare_keys);
        let scored = self.accel.score_set(
            &mut scratch.accel,
            prepared,
            req.k,
            keys,
            req.deadline,
            |key, score| {
                put(hits, spare, &mut n, key, score);
            },
        )?;
        let evals = if scored {
            keys.len() as u64
        } else {
            let r = self.searcher().direct(prepared, keys, req.k)?;
            for h in &r.hits {
                put(hits, spare, &mut n, &h.key, h.score);
            }
            r.stats.rescored
        };
        out.completion = Completion::Exact;
        out.path = Path::Native;
        out.tuned = None;
        out.counters = Counters {
            nodes: 0,
            distance_evals: evals,
        };
        self.finish(scratch, n, req, out, true)
    }

    /// The setting a request with recall `target` runs: the fastest entry
    /// of the recall profile measured to reach it, among the loaded paths
    /// ([`super::Profile::choose`]). [`Error::InvalidRequest`] on `recall`
    /// when the map has no usable profile.
    pub fn choose(&self, target: f64) -> Result<Choice> {
        let profile = match (self.profile(), self.layouts.profile, &self.profile_error) {
            (Some(p), _, _) => p,
            (None, Some(cid), Some(reason)) => {
                return Err(Error::Corrupt {
                    cid,
                    reason: format!("recall profile: {reason}"),
                })
            }
            (None, Some(_), None) => {
                return Err(no_profile(
                    "the map's recall profile was measured on other sidecars",
                ))
            }
            (None, None, _) => return Err(no_profile("the map has no recall profile")),
        };
        profile
            .choose(target, |p| match p {
                Path::Native => true,
                Path::Hnsw => self.accel.hnsw.is_some(),
                Path::Pq => self.accel.pq.is_some(),
            })
            .ok_or_else(|| no_profile("no path of the map's recall profile is loaded"))
    }

    /// `(nprobe, rerank)` of a filtered PQ plan on a 4-bit PQ sidecar: the
    /// fastest PQ setting of the recall profile measured to reach
    /// [`FILTERED_RECALL`] unfiltered. `None` (no filtered PQ plan) without
    /// a 4-bit PQ sidecar, a usable profile or a PQ setting that reached
    /// the target: how many lists a partition needs, and whether the codes
    /// rank well enough at all, only a measurement on the map says.
    fn filtered_pq(&self) -> Option<(usize, usize)> {
        if !self.accel.pq.as_ref()?.fast_scan_supported() {
            return None;
        }
        let choice = self.profile()?.choose(FILTERED_RECALL, |p| p == Path::Pq)?;
        let s = choice.setting;
        choice
            .reached
            .then_some((s.nprobe as usize, s.rerank as usize))
    }

    /// The request a `recall` target turns `req` into (the profile's
    /// choice, with path, mode and knobs set) and that choice.
    fn tune(&self, req: &Request, target: f64) -> Result<(Request, Choice)> {
        let choice = self.choose(target)?;
        let mut r = req.clone();
        r.recall = None;
        choice.setting.apply_to(&mut r);
        Ok((r, choice))
    }

    /// `vector`'s dimension and finiteness.
    fn check_vector(&self, vector: &[f32]) -> Result<()> {
        let dims = self.dims();
        if vector.len() != dims {
            return Err(Error::WrongDimension {
                expected: dims,
                got: vector.len(),
                key: None,
            });
        }
        if let Some(index) = vector.iter().position(|x| !x.is_finite()) {
            return Err(Error::NonFiniteVector { index, key: None });
        }
        Ok(())
    }

    /// The search [`route`] picks for a validated `req`, into `out`;
    /// `filtered` is [`Index::filtered_pq`] for a filtered request.
    fn routed_into(
        &self,
        scratch: &mut Scratch,
        vector: &[f32],
        req: &Request,
        filtered: Option<(usize, usize)>,
        out: &mut Response,
    ) -> Result<()> {
        let dims = self.dims();
        let mut n = 0;
        let tuned;
        out.tuned = None;
        let req = match req.recall {
            None => req,
            Some(target) => {
                let (r, choice) = self.tune(req, target)?;
                tuned = r;
                out.tuned = Some(choice);
                &tuned
            }
        };
        match route(req, &self.accel, self.len() as usize, filtered)? {
            Route::Native { mode, probes } => {
                let mut native = SearchRequest::new(req.k).mode(mode);
                native.probes = probes;
                native.filter = req.filter.as_ref().map(std::borrow::Cow::Borrowed);
                native.with_values = req.with_values && !req.with_vectors;
                native.deadline = req.deadline;
                let ctx = scratch.native.get_or_insert_with(SearchContext::new);
                let mut r = self.searcher().search_with(ctx, vector, &native)?;
                for h in &mut r.hits {
                    put(
                        &mut out.hits,
                        &mut scratch.spare_keys,
                        &mut n,
                        &h.key,
                        h.score,
                    )
                    .value = h.value.take();
                }
                ctx.recycle(r.hits);
                out.completion = r.completion;
                out.path = Path::Native;
                out.counters = Counters {
                    nodes: r.stats.nodes_visited,
                    distance_evals: r.stats.distance_evals,
                };
            }
            Route::Sidecar(plan) => {
                let (prepared, work, spare) = (
                    &mut scratch.prepared,
                    &mut scratch.prep_work,
                    &mut scratch.spare_keys,
                );
                math::prepare_into(self.metric(), dims as u32, vector, None, prepared, work)?;
                let hits = &mut out.hits;
                self.accel.run_each(
                    &mut scratch.accel,
                    plan,
                    prepared,
                    req.k,
                    req.filter.as_ref(),
                    req.deadline,
                    |key, score| {
                        put(hits, spare, &mut n, key, score);
                    },
                )?;
                out.completion = Completion::Approximate;
                out.path = plan.path;
                out.counters = Counters::default();
            }
        }
        let valueless = out.path != Path::Native;
        self.finish(scratch, n, req, out, valueless)
    }

    /// Drops the hits of `out` past `n` (keeping their key buffers) and
    /// reads the vectors, and the values when the search did not
    /// (`valueless`), that `req` asks for.
    fn finish(
        &self,
        scratch: &mut Scratch,
        n: usize,
        req: &Request,
        out: &mut Response,
        valueless: bool,
    ) -> Result<()> {
        while out.hits.len() > n {
            if let Some(h) = out.hits.pop() {
                scratch.spare_keys.push(h.key);
            }
        }
        if req.with_vectors || (req.with_values && valueless) {
            self.fill(&mut out.hits, req)?;
        }
        Ok(())
    }

    /// Answers every row of `vectors` (`n·dims` components, row-major) in
    /// parallel with one [`Scratch`] per worker; answers are in row order
    /// and identical to sequential [`Index::search`] calls.
    pub fn search_batch(&self, vectors: &[f32], req: &Request) -> Result<Vec<Response>> {
        if req.filter.as_ref().is_some_and(|f| !f.is_key_filter()) {
            let resolved = self.resolve_filter(req)?;
            return self.search_batch(vectors, &resolved);
        }
        let dims = self.dims();
        if dims == 0 || !vectors.len().is_multiple_of(dims) {
            return Err(Error::WrongDimension {
                expected: dims,
                got: vectors.len() % dims.max(1),
                key: None,
            });
        }
        vectors
            .par_chunks(dims)
            .map_init(Scratch::default, |scratch, v| self.search(scratch, v, req))
            .collect()
    }

    /// Reads the values and vectors `req` asks for from the directory.
    /// (Values and vectors are copied into the response, so asking for them
    /// allocates per hit.)
    fn fill(&self, hits: &mut [Neighbour], req: &Request) -> Result<()> {
        for hit in hits {
            let (vector, value) = self.get(&hit.key)?.ok_or_else(|| Error::Corrupt {
                cid: self.descriptor,
                reason: format!(
                    "hit {} is missing from the directory",
                    hex::encode(&hit.key)
                ),
            })?;
            if req.with_values {
                hit.value = Some(value);
            }
            if req.with_vectors {
                hit.vector = Some(vector);
            }
        }
        Ok(())
    }
}

/// Writes hit `*n` of `hits` (reusing the element and its key buffer when
/// there is one, else a key buffer from `spare`), clears its value and
/// vector, and advances `*n`.
fn put<'h>(
    hits: &'h mut Vec<Neighbour>,
    spare: &mut Vec<Vec<u8>>,
    n: &mut usize,
    key: &[u8],
    score: f64,
) -> &'h mut Neighbour {
    if *n == hits.len() {
        hits.push(Neighbour {
            key: spare.pop().unwrap_or_default(),
            value: None,
            vector: None,
            score,
        });
    }
    let h = &mut hits[*n];
    *n += 1;
    h.key.clear();
    h.key.extend_from_slice(key);
    h.value = None;
    h.vector = None;
    h.score = score;
    h
}
