//! The wire format: request parsing with field-level errors, and the
//! response bodies (serde).
//!
//! Two readers, one answer. The single-pass reader ([`parse_fast`]) reads
//! a well-formed body in one pass: the top-level object and the vector
//! member with a strict RFC 8259 scanner that converts each number as it
//! goes, the other (few, small) members through serde_json. It accepts only
//! bodies that are valid JSON with a valid vector member and no repeated
//! member; on anything else it gives up and the checked reader runs.
//!
//! The checked reader streams the body through serde_json once: the vector
//! member (`vector`, or `vectors` of a batch) is captured as raw text whose
//! syntax serde_json checks without converting any number, and the option
//! members are read as values. The vector text is then read by [`Scan`]
//! straight into a `Vec<f32>`, with the length and finiteness checks. It
//! names the first problem; the options are checked field by field (the
//! same function for both readers), so both give the same result for every
//! body the single-pass reader accepts (tested on random and mutated
//! bodies).
//!
//! Every component is converted directly to the nearest f32, correctly
//! rounded: bit-identical to `str::parse::<f32>` and to serde_json's
//! `float_roundtrip` for an `f32`, never the double rounding of going
//! through f64 first ([`number_f32`]: an exact fast path for up to 19
//! significant digits and powers of ten up to 22, `str::parse` for the
//! rest). Every rejection names the field at fault (`body` for JSON that
//! does not parse or is not an object). Unknown fields are rejected, so a
//! typo never silently falls back to a default.

mod binary;
mod error;
mod number;
pub(crate) mod openapi;
mod request;
mod response;

pub(crate) use binary::{batch_binary, overlay, search_binary, upsert_binary};
pub use error::ApiError;
pub use request::filter_from_json;
pub(crate) use request::{
    batch_request, batch_request_checked, search_request, search_request_checked, Limits,
};
pub(crate) use response::{
    BatchResponse, MapInfo, RecordResponse, SearchResponse, WireAnswer, WireSidecars,
};

#[cfg(test)]
mod tests;
