//! Numeric building blocks shared by the accelerators (`accel`) and the
//! native search (`proximity::search`), below both so that neither imports
//! the other.
//!
//! * [`kernel`]: the deterministic (`det_*`) and fastest (`fast_*`) f32
//!   distance kernels.
//! * [`kmeans`]: Lloyd's k-means over f32 rows and over i8 codes.
//! * [`pq`]: canonical product-quantizer training (spec 12.11).
//! * [`fastscan`]: a query's 4-bit fast-scan ADC table.
//! * [`topk`]: selection of the best candidates with their ties.

pub(crate) mod fastscan;
pub(crate) mod kernel;
pub(crate) mod kmeans;
pub(crate) mod pq;
pub(crate) mod topk;
