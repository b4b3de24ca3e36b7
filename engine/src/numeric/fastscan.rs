//! The query side of 4-bit fast-scan ADC: the per-query distance table over
//! 16-centroid codebooks and its u8 quantisation, shared by the PQ fast scan
//! and the native adaptive search's 4-bit pass.

use prox_kernels::pq::fastscan::{self, Lut, TableKind, CODES};
use prox_kernels::Metric;

/// The query's u8 fast-scan table for 4-bit codebooks `books_t`
/// (`fastscan::transpose_books`, `k` centroids, `m` subspaces): the f32
/// `m × 16` table into `table` (squared L2 partials for L2, negated dot
/// partials for cosine and inner product; the same operations per entry on
/// every ISA), quantised into `lut` (allocated once, then reused). `None`
/// when the table has NaN partials (overflowing vectors).
pub(crate) fn query_lut<'l>(
    metric: Metric,
    q: &[f32],
    m: usize,
    books_t: &[f32],
    k: usize,
    table: &mut Vec<f32>,
    lut: &'l mut Option<Lut>,
) -> Option<&'l Lut> {
    let kind = match metric {
        Metric::L2 => TableKind::L2,
        Metric::Cosine | Metric::InnerProduct => TableKind::NegDot,
    };
    table.resize(CODES * m, 0.0);
    fastscan::table(kind, q, m, books_t, k, table);
    let ok = match lut.as_mut() {
        Some(l) => l.requantize(m, table, 0.0).is_ok(),
        None => match Lut::quantize(m, table, 0.0) {
            Ok(l) => {
                *lut = Some(l);
                true
            }
            Err(_) => false,
        },
    };
    lut.as_ref().filter(|_| ok)
}
