//! The one rule that turns a [`Request`] into the search that runs (the
//! rule itself is documented on [`crate::index`]).

use super::request::{PathChoice, QueryMode, Request};
use crate::accel::{self, Accelerators, Plan};
use crate::error::{Error, Result};
use crate::keys::Filter;
use crate::proximity::search::{Budget, Mode, Preset};

/// Where a query goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The native search in this mode; `probes` overrides an adaptive
    /// preset's sub-list count.
    Native { mode: Mode, probes: Option<usize> },
    /// A sidecar plan ([`accel::Path::Hnsw`] or [`accel::Path::Pq`]).
    Sidecar(Plan),
}

/// The native preset a mode names (`auto`: balanced).
fn preset(mode: QueryMode) -> Mode {
    match mode {
        QueryMode::Exact => Mode::Exact,
        QueryMode::Fast => Mode::Adaptive(Preset::Fast),
        QueryMode::Auto | QueryMode::Balanced => Mode::Adaptive(Preset::Balanced),
        QueryMode::High => Mode::Adaptive(Preset::HighRecall),
    }
}

/// Routes a validated `req` on a map of `records` records with the loaded
/// sidecars `accel`; `filtered` is the `(nprobe, rerank)` of a filtered PQ
/// plan ([`accel::Planner::pq_filtered`]).
pub(crate) fn route(
    req: &Request,
    accel: &Accelerators,
    records: usize,
    filtered: Option<(usize, usize)>,
) -> Result<Route> {
    let native = |mode| {
        Ok(Route::Native {
            mode,
            probes: req.nprobe,
        })
    };
    if let Some(b) = req.budget {
        return native(Mode::Budgeted(Budget {
            max_distance_evals: Some(b),
            ..Budget::default()
        }));
    }
    let planner_mode = match (req.mode, req.path) {
        (QueryMode::Exact, _) | (_, PathChoice::Native) => return native(preset(req.mode)),
        (_, PathChoice::Hnsw) if accel.hnsw.is_none() => {
            return Err(missing("HNSW", "--hnsw"));
        }
        (_, PathChoice::Pq) if accel.pq.is_none() => return Err(missing("PQ", "--pq")),
        (_, PathChoice::Hnsw) => accel::Mode::Hnsw,
        (_, PathChoice::Pq) => accel::Mode::Pq,
        (QueryMode::Auto, PathChoice::Auto) => accel::Mode::Auto,
        // A named preset is a native preset.
        (_, PathChoice::Auto) => return native(preset(req.mode)),
    };
    let eligible = match (&req.filter, planner_mode) {
        (Some(f), accel::Mode::Auto) => eligible(accel, f),
        _ => None,
    };
    let mut planner = accel.planner();
    planner.pq_filtered = filtered;
    let plan = planner.plan(&accel::Request {
        mode: planner_mode,
        k: req.k,
        ef: req.ef,
        rerank: req.rerank.or(req.ef),
        nprobe: req.nprobe,
        records,
        eligible,
    })?;
    match plan.path {
        accel::Path::Native => native(preset(req.mode)),
        _ => Ok(Route::Sidecar(plan)),
    }
}

fn missing(what: &str, flag: &str) -> Error {
    Error::InvalidRequest {
        field: "path",
        reason: format!("the map has no {what} sidecar (build one with prox accel build {flag})"),
    }
}

/// Records `filter` admits, counted from a loaded sidecar's key-ordered
/// ids (the planner's selectivity input); `None` without a sidecar.
fn eligible(accel: &Accelerators, filter: &Filter) -> Option<usize> {
    type LowerBound<'a> = Box<dyn Fn(&[u8]) -> usize + 'a>;
    let (lower, n): (LowerBound<'_>, usize) = match (&accel.hnsw, &accel.pq) {
        (Some((g, _)), _) => (Box::new(|k| g.lower_bound(k) as usize), g.node_count()),
        (None, Some(p)) => (Box::new(|k| p.lower_bound(k)), p.len()),
        (None, None) => return None,
    };
    Some(match (filter, filter.interval()) {
        (Filter::Keys(keys), _) => keys.len(),
        (_, Some((start, end))) => {
            let lo = lower(start);
            end.map_or(n, |e| lower(&e)).saturating_sub(lo)
        }
        (_, None) => n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_sidecars() {
        let none = Accelerators::default();
        let r = |req: &Request| route(req, &none, 100, None).unwrap();
        let balanced = Route::Native {
            mode: Mode::Adaptive(Preset::Balanced),
            probes: None,
        };
        assert_eq!(r(&Request::new(5)), balanced);
        assert_eq!(
            r(&Request::new(5).mode(QueryMode::Exact)),
            Route::Native {
                mode: Mode::Exact,
                probes: None
            }
        );
        assert!(matches!(
            r(&Request::new(5).mode(QueryMode::Fast).budget(7)),
            Route::Native {
                mode: Mode::Budgeted(Budget {
                    max_distance_evals: Some(7),
                    ..
                }),
                ..
            }
        ));
        for p in [PathChoice::Hnsw, PathChoice::Pq] {
            assert!(matches!(
                route(&Request::new(5).path(p), &none, 100, None),
                Err(Error::InvalidRequest { field: "path", .. })
            ));
        }
    }
}
