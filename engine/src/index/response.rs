//! [`Response`]: the answer to one query, whatever path ran.

use super::profile::Choice;
use crate::accel::Path;
use crate::proximity::search::Completion;

/// One result record.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbour {
    /// The record's key.
    pub key: Vec<u8>,
    /// Its value, when the request asked for values.
    pub value: Option<Vec<u8>>,
    /// Its stored vector, when the request asked for vectors.
    pub vector: Option<Vec<f32>>,
    /// Canonical score of the prepared query against the record
    /// (proximity-format.md 11.1, 11.2): the same on every path and ISA.
    pub score: f64,
}

/// Work counters of one search (native path; zero on a sidecar path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// `PRXN` nodes expanded.
    pub nodes: u64,
    /// Approximate distance evaluations.
    pub distance_evals: u64,
}

/// The answer to one query. The default is an empty answer, a buffer for
/// [`crate::index::Index::search_into`].
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// Hits ordered by `(score, key)`.
    pub hits: Vec<Neighbour>,
    /// How the search ended: [`Completion::Exact`] (provably the top k),
    /// [`Completion::Approximate`] or [`Completion::BudgetExhausted`].
    pub completion: Completion,
    /// The path that ran.
    pub path: Path,
    /// Work done.
    pub counters: Counters,
    /// The setting a `recall` request chose from the recall profile, with
    /// its measured recall and time (`None` without a `recall` target).
    pub tuned: Option<Choice>,
}

impl Default for Response {
    fn default() -> Self {
        Response {
            hits: Vec::new(),
            completion: Completion::Exact,
            path: Path::Native,
            counters: Counters::default(),
            tuned: None,
        }
    }
}
