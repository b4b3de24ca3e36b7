//! A frame's basis: the leading principal axes of its centred members by
//! block power iteration (scalar f64 in a fixed order).

use super::POWER;

/// An orthonormal basis (f64, `m` vectors of length `d`, row-major) of the
/// leading principal subspace of the centred rows `z` (`k × d`), by block
/// power iteration from the rows themselves; missing directions (fewer
/// independent rows than `m`) are filled with unit vectors.
pub(super) fn principal(z: &[f64], d: usize, m: usize) -> Vec<f64> {
    let k = z.len() / d;
    let mut cov = vec![0.0f64; d * d];
    for row in z.chunks_exact(d) {
        for i in 0..d {
            let zi = row[i];
            for (c, &zj) in cov[i * d..(i + 1) * d].iter_mut().zip(row) {
                *c += zi * zj;
            }
        }
    }
    let mut basis = vec![0.0f64; m * d];
    for j in 0..m {
        if j < k {
            basis[j * d..(j + 1) * d].copy_from_slice(&z[j * d..(j + 1) * d]);
        }
    }
    orthonormalize(&mut basis, d, m);
    let mut next = vec![0.0f64; m * d];
    for _ in 0..POWER {
        for (b, o) in basis.chunks_exact(d).zip(next.chunks_exact_mut(d)) {
            o.iter_mut().for_each(|x| *x = 0.0);
            for (i, &bi) in b.iter().enumerate() {
                for (x, &c) in o.iter_mut().zip(&cov[i * d..(i + 1) * d]) {
                    *x += c * bi;
                }
            }
        }
        std::mem::swap(&mut basis, &mut next);
        orthonormalize(&mut basis, d, m);
    }
    basis
}

/// Modified Gram-Schmidt (twice) on `m` rows of length `d`; a row that
/// vanishes (zero, or nothing left of it relative to its length) is
/// replaced by the next unit vector that does not.
fn orthonormalize(b: &mut [f64], d: usize, m: usize) {
    let mut unit = 0usize;
    for j in 0..m {
        let mut tries = 0;
        loop {
            let before = b[j * d..(j + 1) * d]
                .iter()
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt();
            for _ in 0..2 {
                for p in 0..j {
                    let (done, rest) = b.split_at_mut(j * d);
                    let prev = &done[p * d..(p + 1) * d];
                    let row = &mut rest[..d];
                    let dot: f64 = prev.iter().zip(row.iter()).map(|(a, b)| a * b).sum();
                    for (x, &p) in row.iter_mut().zip(prev) {
                        *x -= dot * p;
                    }
                }
            }
            let row = &mut b[j * d..(j + 1) * d];
            let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            if norm > 1e-9 * before && norm.is_finite() && tries < d + 2 {
                row.iter_mut().for_each(|x| *x /= norm);
                break;
            }
            if tries >= d + 2 {
                // Cannot happen for m <= d; keeps the loop bounded anyway.
                row.iter_mut().for_each(|x| *x = 0.0);
                break;
            }
            row.iter_mut().for_each(|x| *x = 0.0);
            row[unit % d] = 1.0;
            unit += 1;
            tries += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orthonormalize_fills_missing_directions() {
        let (d, m) = (5, 3);
        // Two parallel rows and a zero row.
        let mut b = vec![
            1.0, 2.0, 0.0, 0.0, 0.0, 2.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
        ];
        orthonormalize(&mut b, d, m);
        for i in 0..m {
            for j in 0..m {
                let dot: f64 = (0..d).map(|t| b[i * d + t] * b[j * d + t]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-12, "({i},{j}) {dot}");
            }
        }
    }
}
