//! Running queries on an [`Index`]: validation, the route, the search and
//! the answer's values and vectors.

use super::open::{Index, Scratch};
use super::request::Request;
use super::response::{Counters, Neighbour, Response};
use super::route::{route, Route};
use crate::accel::Path;
use crate::error::{Error, Result};
use crate::proximity::math;
use crate::proximity::search::{Completion, SearchContext, SearchRequest};
use rayon::prelude::*;

impl Index {
    /// Answers one query: `vector` is raw (`dims` finite components; it is
    /// prepared with the map's metric). Errors are typed and never panics:
    /// [`Error::WrongDimension`], [`Error::NonFiniteVector`],
    /// [`Error::ZeroCosineVector`], [`Error::InvalidRequest`] naming the
    /// field at fault, [`Error::DeadlineExceeded`] when the request's
    /// deadline passed before the search finished.
    pub fn search(&self, scratch: &mut Scratch, vector: &[f32], req: &Request) -> Result<Response> {
        req.validate()?;
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
        let mut response = match route(req, &self.accel, self.len() as usize)? {
            Route::Native { mode, probes } => {
                let mut native = SearchRequest::new(req.k).mode(mode);
                native.probes = probes;
                native.filter = req.filter.clone();
                native.with_values = req.with_values && !req.with_vectors;
                native.deadline = req.deadline;
                let ctx = scratch.native.get_or_insert_with(SearchContext::new);
                let r = self.searcher().search_with(ctx, vector, &native)?;
                Response {
                    hits: r
                        .hits
                        .into_iter()
                        .map(|h| Neighbour {
                            key: h.key,
                            value: h.value,
                            vector: None,
                            score: h.score,
                        })
                        .collect(),
                    completion: r.completion,
                    path: Path::Native,
                    counters: Counters {
                        nodes: r.stats.nodes_visited,
                        distance_evals: r.stats.distance_evals,
                    },
                }
            }
            Route::Sidecar(plan) => {
                let prepared = math::prepare(self.metric(), dims as u32, vector, None)?;
                let out = self.accel.run_until(
                    &mut scratch.accel,
                    plan,
                    &prepared,
                    req.k,
                    req.filter.as_ref(),
                    req.deadline,
                )?;
                Response {
                    hits: out
                        .hits
                        .into_iter()
                        .map(|(key, score)| Neighbour {
                            key,
                            value: None,
                            vector: None,
                            score,
                        })
                        .collect(),
                    completion: Completion::Approximate,
                    path: plan.path,
                    counters: Counters::default(),
                }
            }
        };
        if req.with_vectors || (req.with_values && response.path != Path::Native) {
            self.fill(&mut response.hits, req)?;
        }
        Ok(response)
    }

    /// Answers every row of `vectors` (`n·dims` components, row-major) in
    /// parallel with one [`Scratch`] per worker; answers are in row order
    /// and identical to sequential [`Index::search`] calls.
    pub fn search_batch(&self, vectors: &[f32], req: &Request) -> Result<Vec<Response>> {
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
