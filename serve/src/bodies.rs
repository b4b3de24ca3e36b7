//! Public entry points to the request-body parsers, one per body kind, for
//! fuzzing (`fuzz/`, target `http_body`) and offline checks. Each only
//! calls the parser the server itself uses; none parses anything of its
//! own. `application/octet-stream` search bodies (little-endian f32 rows,
//! options from the query string) have their own pair of entry points.

use crate::api::{self, ApiError};
use prox_engine::index::Request;

/// The parsing limits of [`crate::Config`] that apply to a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// Largest `k`.
    pub max_k: usize,
    /// Most rows in a `search:batch` body.
    pub max_batch: usize,
}

impl BodyLimits {
    fn api(self) -> api::Limits {
        api::Limits {
            max_k: self.max_k,
            max_batch: self.max_batch,
        }
    }
}

/// Parses a `POST /v1/maps/{name}/search` body for a map of `dims`
/// dimensions (the single-pass reader, falling back to the checked one):
/// the query vector and the request options.
pub fn search(
    body: &[u8],
    dims: usize,
    limits: BodyLimits,
) -> Result<(Vec<f32>, Request), ApiError> {
    api::search_request(body, dims, limits.api())
}

/// Parses a `POST /v1/maps/{name}/search:batch` body: the rows flattened
/// row-major, their number, and the request options.
pub fn batch(
    body: &[u8],
    dims: usize,
    limits: BodyLimits,
) -> Result<(Vec<f32>, usize, Request), ApiError> {
    api::batch_request(body, dims, limits.api())
}

/// [`search`] with the checked reader only (the one every body the
/// single-pass reader gives up on goes through); the two must agree.
pub fn search_checked(
    body: &[u8],
    dims: usize,
    limits: BodyLimits,
) -> Result<(Vec<f32>, Request), ApiError> {
    api::search_request_checked(body, dims, limits.api())
}

/// [`batch`] with the checked reader only.
pub fn batch_checked(
    body: &[u8],
    dims: usize,
    limits: BodyLimits,
) -> Result<(Vec<f32>, usize, Request), ApiError> {
    api::batch_request_checked(body, dims, limits.api())
}

/// Parses an `application/octet-stream` `search` body (one little-endian
/// f32 row of `dims`) with its options from the decoded query-string
/// `pairs`.
pub fn search_binary(
    body: &[u8],
    pairs: &[(String, String)],
    dims: usize,
    limits: BodyLimits,
) -> Result<(Vec<f32>, Request), ApiError> {
    api::search_binary(body, pairs, dims, limits.api())
}

/// Parses an `application/octet-stream` `search:batch` body (rows of
/// `dims` little-endian f32) with its options from `pairs`.
pub fn batch_binary(
    body: &[u8],
    pairs: &[(String, String)],
    dims: usize,
    limits: BodyLimits,
) -> Result<(Vec<f32>, usize, Request), ApiError> {
    api::batch_binary(body, pairs, dims, limits.api())
}
