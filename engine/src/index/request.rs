//! [`Request`]: what one query asks for, whatever the front end.

use crate::error::{Error, Result};
use crate::keys::Filter;
use std::time::Instant;

/// How hard a search works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueryMode {
    /// Let the index choose (see [`crate::index`] for the rule).
    #[default]
    Auto,
    /// Provably the brute-force top k (native search, never a sidecar).
    Exact,
    /// Native adaptive search, fastest preset.
    Fast,
    /// Native adaptive search, balanced preset.
    Balanced,
    /// Native adaptive search, high-recall preset.
    High,
}

impl QueryMode {
    /// Every mode, in the order the docs list them.
    pub const ALL: [QueryMode; 5] = [
        QueryMode::Auto,
        QueryMode::Exact,
        QueryMode::Fast,
        QueryMode::Balanced,
        QueryMode::High,
    ];

    /// Parses `auto`, `exact`, `fast`, `balanced`, `high`.
    pub fn parse(s: &str) -> Option<QueryMode> {
        QueryMode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The wire and CLI spelling.
    pub fn name(self) -> &'static str {
        match self {
            QueryMode::Auto => "auto",
            QueryMode::Exact => "exact",
            QueryMode::Fast => "fast",
            QueryMode::Balanced => "balanced",
            QueryMode::High => "high",
        }
    }
}

impl std::str::FromStr for QueryMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        QueryMode::parse(s)
            .ok_or_else(|| format!("{s:?} is not a mode (auto, exact, fast, balanced, high)"))
    }
}

impl std::fmt::Display for QueryMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which path a search runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathChoice {
    /// Let the index choose (see [`crate::index`] for the rule).
    #[default]
    Auto,
    /// The native `PRXN` search.
    Native,
    /// The HNSW sidecar.
    Hnsw,
    /// The PQ sidecar.
    Pq,
}

impl PathChoice {
    /// Every choice, in the order the docs list them.
    pub const ALL: [PathChoice; 4] = [
        PathChoice::Auto,
        PathChoice::Native,
        PathChoice::Hnsw,
        PathChoice::Pq,
    ];

    /// Parses `auto`, `native`, `hnsw`, `pq`.
    pub fn parse(s: &str) -> Option<PathChoice> {
        PathChoice::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The wire and CLI spelling.
    pub fn name(self) -> &'static str {
        match self {
            PathChoice::Auto => "auto",
            PathChoice::Native => "native",
            PathChoice::Hnsw => "hnsw",
            PathChoice::Pq => "pq",
        }
    }
}

impl std::str::FromStr for PathChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        PathChoice::parse(s).ok_or_else(|| format!("{s:?} is not a path (auto, native, hnsw, pq)"))
    }
}

impl std::fmt::Display for PathChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One query's parameters, minus its vector. The same type for the CLI,
/// the HTTP server and the library; [`Request::new`] gives the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Hits wanted (>= 1).
    pub k: usize,
    /// Search effort.
    pub mode: QueryMode,
    /// Most distance evaluations a native search may spend (the budgeted
    /// exact search); `None`: uncapped.
    pub budget: Option<u64>,
    /// Forced path.
    pub path: PathChoice,
    /// HNSW candidate-list size (`None`: the manifest's `ef_search`; raised
    /// to `k` when smaller). Also the PQ rerank multiplier when `rerank` is
    /// `None`.
    pub ef: Option<usize>,
    /// PQ: coarse lists probed by the fast-scan path (`None`: the index's
    /// default). Native adaptive search: sub-lists scanned (`None`: the
    /// preset's count).
    pub nprobe: Option<usize>,
    /// PQ: candidates reranked exactly per hit (`None`: `ef`, else the
    /// manifest's).
    pub rerank: Option<usize>,
    /// Target recall@10 in `[0, 1]`: the fastest path and setting of the
    /// map's recall profile measured to reach it runs
    /// ([`crate::index::Profile::choose`]; reported in
    /// [`crate::index::Response::tuned`]). Only with path and mode `auto`
    /// and no `ef`, `nprobe`, `rerank` or budget.
    pub recall: Option<f64>,
    /// Eligible keys; `None`: every record.
    pub filter: Option<Filter>,
    /// Return each hit's value.
    pub with_values: bool,
    /// Return each hit's stored vector.
    pub with_vectors: bool,
    /// When the search must stop: past it every path ends with
    /// [`Error::DeadlineExceeded`] within about a millisecond (`None`: no
    /// limit). Never changes the hits of a search that finishes in time.
    pub deadline: Option<Instant>,
}

impl Default for Request {
    fn default() -> Self {
        Request::new(10)
    }
}

impl Request {
    /// `k` nearest, mode and path auto, no budget, filter, values, vectors
    /// or deadline.
    pub fn new(k: usize) -> Request {
        Request {
            k,
            mode: QueryMode::Auto,
            budget: None,
            path: PathChoice::Auto,
            ef: None,
            nprobe: None,
            rerank: None,
            recall: None,
            filter: None,
            with_values: false,
            with_vectors: false,
            deadline: None,
        }
    }

    /// The same request with another mode.
    pub fn mode(mut self, mode: QueryMode) -> Request {
        self.mode = mode;
        self
    }

    /// The same request on another path.
    pub fn path(mut self, path: PathChoice) -> Request {
        self.path = path;
        self
    }

    /// The same request with a distance-evaluation budget.
    pub fn budget(mut self, budget: u64) -> Request {
        self.budget = Some(budget);
        self
    }

    /// The same request aiming at recall@10 `target` (see
    /// [`Request::recall`](Request#structfield.recall)).
    pub fn recall(mut self, target: f64) -> Request {
        self.recall = Some(target);
        self
    }

    /// The same request with a filter.
    pub fn filter(mut self, filter: Filter) -> Request {
        self.filter = Some(filter);
        self
    }

    /// The same request, stopped at `at`.
    pub fn deadline(mut self, at: Instant) -> Request {
        self.deadline = Some(at);
        self
    }

    /// Checks everything that does not depend on the map: `k`, `ef`,
    /// `nprobe` and `rerank` at least 1, a budget only where a native search
    /// runs, the filter's key set sorted.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &'static str, reason: &str| {
            Err(Error::InvalidRequest {
                field,
                reason: reason.to_string(),
            })
        };
        if self.k == 0 {
            return bad("k", "must be at least 1");
        }
        if self.ef == Some(0) {
            return bad("ef", "must be at least 1");
        }
        if self.nprobe == Some(0) {
            return bad("nprobe", "must be at least 1");
        }
        if self.rerank == Some(0) {
            return bad("rerank", "must be at least 1");
        }
        if let Some(r) = self.recall {
            if !(0.0..=1.0).contains(&r) {
                return bad("recall", "must be a number in [0, 1]");
            }
            let knobs = self.ef.is_some() || self.nprobe.is_some() || self.rerank.is_some();
            if self.path != PathChoice::Auto || self.mode != QueryMode::Auto {
                return bad("recall", "picks the path and mode itself: leave both auto");
            }
            if knobs || self.budget.is_some() {
                return bad(
                    "recall",
                    "picks the setting itself: no ef, nprobe, rerank or budget with it",
                );
            }
        }
        let sidecar = matches!(self.path, PathChoice::Hnsw | PathChoice::Pq);
        if sidecar && self.mode == QueryMode::Exact {
            return bad("path", "mode exact runs on the native path only");
        }
        if sidecar && self.budget.is_some() {
            return bad("path", "a budget applies to the native path only");
        }
        // Field and boolean filters are checked when `Index` resolves them.
        if let Some(f) = self.filter.as_ref().filter(|f| f.is_key_filter()) {
            f.validate().map_err(|e| Error::InvalidRequest {
                field: "filter",
                reason: match e {
                    Error::InvalidArgument(m) => m,
                    e => e.to_string(),
                },
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for m in QueryMode::ALL {
            assert_eq!(QueryMode::parse(m.name()), Some(m));
        }
        for p in PathChoice::ALL {
            assert_eq!(p.name().parse::<PathChoice>(), Ok(p));
        }
        assert_eq!(QueryMode::parse("HIGH"), None);
        assert!("".parse::<PathChoice>().is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let field = |r: Request| match r.validate() {
            Err(Error::InvalidRequest { field, .. }) => field,
            other => panic!("expected an invalid request, got {other:?}"),
        };
        assert_eq!(field(Request::new(0)), "k");
        assert_eq!(
            field(Request::new(3).path(PathChoice::Hnsw).budget(10)),
            "path"
        );
        assert_eq!(
            field(Request::new(3).path(PathChoice::Pq).mode(QueryMode::Exact)),
            "path"
        );
        let unsorted = Filter::Keys(vec![b"b".to_vec(), b"a".to_vec()].into());
        assert_eq!(field(Request::new(3).filter(unsorted)), "filter");
        assert!(Request::new(3).budget(5).validate().is_ok());
        for bad in [-0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert_eq!(field(Request::new(3).recall(bad)), "recall");
        }
        assert_eq!(
            field(Request::new(3).recall(0.9).path(PathChoice::Hnsw)),
            "recall"
        );
        assert_eq!(
            field(Request::new(3).recall(0.9).mode(QueryMode::High)),
            "recall"
        );
        let mut r = Request::new(3).recall(0.9);
        r.ef = Some(40);
        assert_eq!(field(r), "recall");
        assert!(Request::new(3).recall(1.0).validate().is_ok());
    }
}
