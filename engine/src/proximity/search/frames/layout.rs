//! The frames' stored forms: the fixed-point basis, the members'
//! second-stage rows and their reordering into blocks.

use super::{Block, Members, Residual, BLOCK};

/// A member's second-stage row: the other `m − s` codes, then their
/// `Σŷ̂²` (i32), the full-width `e_x` rounded up and the full-width
/// out-of-basis interval rounded outwards (f32 each), little-endian.
pub(super) struct SecondRow;

impl SecondRow {
    /// Row bytes for `r` codes.
    pub(super) const fn stride(r: usize) -> usize {
        r + 16
    }

    pub(super) fn push(out: &mut Vec<u8>, codes: &[i8], norm: i32, res: Residual) {
        out.extend(codes.iter().map(|&c| c as u8));
        out.extend_from_slice(&norm.to_le_bytes());
        out.extend_from_slice(&f32_up(res.err).to_le_bytes());
        out.extend_from_slice(&f32_down(res.tail[0]).to_le_bytes());
        out.extend_from_slice(&f32_up(res.tail[1]).to_le_bytes());
    }

    /// `(Σ q_j·x_j over the codes, Σx̂², e_x, interval)` of one row.
    #[inline]
    pub(super) fn read(row: &[u8], q: &[i8]) -> (i32, i32, f64, [f64; 2]) {
        let r = q.len();
        // Exact in i32 (at most 127·128 per term).
        let dot: i32 = q
            .iter()
            .zip(&row[..r])
            .map(|(&a, &b)| i32::from(a) * i32::from(b as i8))
            .sum();
        let word =
            |k: usize| -> [u8; 4] { row[r + 4 * k..r + 4 * k + 4].try_into().unwrap_or([0; 4]) };
        let norm = i32::from_le_bytes(word(0));
        let err = f64::from(f32::from_le_bytes(word(1)));
        let tail = [
            f64::from(f32::from_le_bytes(word(2))),
            f64::from(f32::from_le_bytes(word(3))),
        ];
        (dot, norm, err, tail)
    }
}

/// The smallest f32 at least `x`.
fn f32_up(x: f64) -> f32 {
    let y = x as f32;
    if f64::from(y) < x {
        y.next_up()
    } else {
        y
    }
}

/// The largest f32 at most `x`.
fn f32_down(x: f64) -> f32 {
    let y = x as f32;
    if f64::from(y) > x {
        y.next_down()
    } else {
        y
    }
}

impl Members {
    pub(super) fn append(&mut self, o: &Members) {
        self.rec.extend_from_slice(&o.rec);
        self.codes.extend_from_slice(&o.codes);
        self.norms.extend_from_slice(&o.norms);
        self.first.extend_from_slice(&o.first);
        self.second.extend_from_slice(&o.second);
    }

    /// The members reordered by `perm` (`s` and `r = m − s` codes each).
    pub(super) fn permuted(&self, perm: &[usize], s: usize, r: usize) -> Members {
        fn rows<T: Copy>(v: &[T], w: usize, perm: &[usize]) -> Vec<T> {
            perm.iter()
                .flat_map(|&i| v[i * w..(i + 1) * w].iter().copied())
                .collect()
        }
        fn pick<T: Copy>(v: &[T], perm: &[usize]) -> Vec<T> {
            perm.iter().map(|&i| v[i]).collect()
        }
        Members {
            rec: pick(&self.rec, perm),
            codes: rows(&self.codes, s, perm),
            norms: pick(&self.norms, perm),
            first: pick(&self.first, perm),
            second: if r == 0 {
                Vec::new()
            } else {
                rows(&self.second, SecondRow::stride(r), perm)
            },
        }
    }

    /// The blocks of members `0..len` (every [`BLOCK`], the last shorter).
    pub(super) fn blocks(&self) -> Vec<Block> {
        self.first
            .chunks(BLOCK)
            .map(|rs| Block {
                err: rs.iter().fold(0.0, |a: f64, r| a.max(r.err)),
                tail: rs.iter().fold([f64::INFINITY, 0.0], |a, r| {
                    [a[0].min(r.tail[0]), a[1].max(r.tail[1])]
                }),
            })
            .collect()
    }
}

/// The stored basis entries: `A_ji = k_ji · 2^-15` for an `i16` `k_ji`
/// (half the bytes of f32 per query projection; the conversion is exact,
/// so every bound below holds for the stored basis as it is).
pub(super) fn to_fixed(at: &[f32]) -> Vec<i16> {
    at.iter()
        .map(|&a| (f64::from(a) * 32_768.0).round().clamp(-32_767.0, 32_767.0) as i16)
        .collect()
}

/// The f32 value of a stored entry (exact).
#[inline]
pub(super) fn entry(k: i16) -> f32 {
    f32::from(k) * prox_kernels::project::SCALE
}

/// `y = A·v̂` in f32 over `at = Aᵀ` (`d × w`, stored fixed point): each
/// `y_j` is summed in `i` order, the same IEEE operations on every ISA
/// ([`prox_kernels::project`]).
#[inline]
pub(super) fn project(at: &[i16], w: usize, v: &[f32], y: &mut [f32]) {
    debug_assert_eq!(y.len(), w);
    prox_kernels::project::fixed(at, v, y);
}
