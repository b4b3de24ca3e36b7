//! The reference order, one `j` at a time within each row.

use super::SCALE;

pub(crate) fn fixed(k: &[i16], v: &[f32], y: &mut [f32]) {
    let w = y.len();
    y.iter_mut().for_each(|x| *x = 0.0);
    if w == 0 {
        return;
    }
    for (row, &vi) in k.chunks_exact(w).zip(v) {
        for (yj, &a) in y.iter_mut().zip(row) {
            *yj += (f32::from(a) * SCALE) * vi;
        }
    }
}
