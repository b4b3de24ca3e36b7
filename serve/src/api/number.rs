//! Decimal text to the nearest f32, correctly rounded in one step
//! (bit-identical to `str::parse::<f32>`, never the double rounding of going
//! through f64 first).

/// `10^i`, each exactly representable in f64 (5^22 < 2^53).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// `10^-i` rounded to the nearest f64 (each within half a unit).
const NEG_POW10: [f64; 23] = [
    1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13, 1e-14,
    1e-15, 1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22,
];

/// The nearest f32 to `m * 10^e10` when one f64 operation finds it for
/// certain, else `None`.
///
/// Why it is exact: the f32 midpoints (halfway between neighbouring
/// f32s) inside f32's normal range are f64s whose 29 bits below f32's
/// precision are exactly `1000...0`; `r as f32` rounds to the nearest f32
/// of `r`, which is the nearest f32 to the exact value `v` whenever no
/// midpoint lies between `v` and `r` (or on `r`). Two cases:
///
/// * `m <= 2^53` and `|e10| <= 22`: both operands are exact f64s, so the
///   product or quotient `r` is `v` correctly rounded to f64 (one IEEE
///   operation), and `v` lies in `[1e-22, 2^53 * 1e22]`, inside f32's
///   normal range. Rounding to f64 is monotone and keeps the midpoints,
///   so `r` is on the same side of every midpoint as `v` unless `r` *is*
///   one; that case is left to the slow path.
/// * `2^53 < m < 10^19` (17 to 19 significant digits, what clients send
///   when they print f32 components as f64s) and `|e10| <= 22`: `m` is
///   rounded once to f64 and the operation rounds once more, so
///   `r = v(1 + ε)` with `|ε| < 2^-52 + 2^-106`, less than 3 units in the
///   last place of `r`. When `r`'s dropped bits are more than
///   [`MIDPOINT_SLACK`] units from the midpoint pattern, no midpoint lies
///   within 3 units of `r` (midpoints of a neighbouring binade are 2^27
///   units away), so `v` and `r` round to the same f32. `r` is also kept
///   below `2^127`, and it is at least `2^53 * 1e-22`, so both stay in the
///   normal range. Anything else takes the slow path.
fn clinger_f32(m: u64, e10: i64) -> Option<f32> {
    if !(-22..=22).contains(&e10) {
        return None;
    }
    if e10 < 0 {
        // A multiply by the rounded `10^e10` first (no divide): `m`, the
        // power and the product each round once, so `r = v(1 + ε)` with
        // `|ε| < 3·2^-53 + 2^-105`, under 3 units in the last place of `r`;
        // kept, as in the second case below, when `r` misses every midpoint
        // by more than [`MIDPOINT_SLACK`] units (`r < 10^19`: no range check).
        let r = m as f64 * NEG_POW10[(-e10) as usize];
        if (r.to_bits() & 0x1fff_ffff).abs_diff(0x1000_0000) > MIDPOINT_SLACK {
            return Some(r as f32);
        }
    }
    let r = if e10 >= 0 {
        m as f64 * POW10[e10 as usize]
    } else {
        m as f64 / POW10[(-e10) as usize]
    };
    let dropped = r.to_bits() & 0x1fff_ffff;
    let sure = if m <= 1 << 53 {
        dropped != 0x1000_0000
    } else {
        dropped.abs_diff(0x1000_0000) > MIDPOINT_SLACK && r < TWO_127
    };
    sure.then_some(r as f32)
}

/// Units in the last place of an f64 by which [`clinger_f32`]'s inexact
/// case must miss an f32 midpoint (its error is below 3).
const MIDPOINT_SLACK: u64 = 4;

/// `2^127`, below which every f32 rounding of an f64 is finite and normal
/// for the values [`clinger_f32`] sees.
const TWO_127: f64 = (1u128 << 127) as f64;

/// The value of `s` when it is exactly eight ASCII digits (the first one
/// most significant), else `None`; one 64-bit load and three multiplies
/// instead of eight dependent steps.
pub(super) fn eight_digits(s: &[u8]) -> Option<u64> {
    let v = u64::from_le_bytes(s.try_into().ok()?);
    // Every byte is 0x30..=0x39: high nibble 3, and adding 6 keeps it 3.
    let high = 0xf0f0_f0f0_f0f0_f0f0u64;
    if (v & high) | ((v.wrapping_add(0x0606_0606_0606_0606) & high) >> 4) != 0x3333_3333_3333_3333 {
        return None;
    }
    // Little-endian: the first digit is the lowest byte. Pairs, then
    // quads, then the whole: d0·10 + d1, then ·100, then ·10^4.
    let v = (v & 0x0f0f_0f0f_0f0f_0f0f).wrapping_mul(2561) >> 8;
    let v = (v & 0x00ff_00ff_00ff_00ff).wrapping_mul(6_553_601) >> 16;
    Some((v & 0x0000_ffff_0000_ffff).wrapping_mul(42_949_672_960_001) >> 32)
}

/// `10^i` for the digit counts [`short_digits`] returns.
const POW10_U64: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// The value and count of the ASCII digits that `s` (eight bytes, *not*
/// all digits) starts with: 0 to 7 of them, the first most significant.
pub(super) fn short_digits(s: &[u8]) -> (u64, u32) {
    let Ok(bytes) = s.try_into() else {
        return (0, 0);
    };
    let v = u64::from_le_bytes(bytes);
    let t = v ^ 0x3030_3030_3030_3030;
    // Per byte: the top bit set where the byte is not a digit (the low
    // seven bits plus 0x76 reach 0x80 from 10 on, without carrying into
    // the next byte; bytes from 0x80 on keep their own top bit).
    let not_digit =
        (((t & 0x7f7f_7f7f_7f7f_7f7f) + 0x7676_7676_7676_7676) | t) & 0x8080_8080_8080_8080;
    let n = (not_digit.trailing_zeros() / 8).min(7);
    if n == 0 {
        return (0, 0);
    }
    // The n digits moved to the top bytes, '0's below: eight digits whose
    // value is that of the n.
    let w = (v << (8 * (8 - n))) | (0x3030_3030_3030_3030u64 >> (8 * n));
    let w = (w & 0x0f0f_0f0f_0f0f_0f0f).wrapping_mul(2561) >> 8;
    let w = (w & 0x00ff_00ff_00ff_00ff).wrapping_mul(6_553_601) >> 16;
    (
        (w & 0x0000_ffff_0000_ffff).wrapping_mul(42_949_672_960_001) >> 32,
        n,
    )
}

/// Reads one JSON number (RFC 8259: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`)
/// at `b[*i..]`, advancing `*i` past it, and returns the nearest f32
/// (infinite beyond f32's range, like `str::parse::<f32>`). `None`, with
/// `*i` unchanged, when no number starts there. What follows the number is
/// not looked at.
pub(super) fn number_f32(b: &[u8], i: &mut usize) -> Option<f32> {
    let start = *i;
    let mut j = start;
    let neg = b.get(j) == Some(&b'-');
    j += usize::from(neg);
    // Significant digits (leading zeros excluded) accumulated into `m`;
    // `m` is exact while `sig <= 19` (10^19 - 1 < 2^64).
    let mut m = 0u64;
    let mut sig = 0u32;
    let mut e10 = 0i64;
    let digit = |c: u8, m: &mut u64, sig: &mut u32| {
        if *m != 0 || c != b'0' {
            *sig += 1;
        }
        *m = m.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
    };
    match b.get(j) {
        Some(b'0') => j += 1,
        Some(b'1'..=b'9') => {
            while let Some(&c @ b'0'..=b'9') = b.get(j) {
                digit(c, &mut m, &mut sig);
                j += 1;
            }
        }
        _ => return None,
    }
    if b.get(j) == Some(&b'.') {
        j += 1;
        let first = j;
        // Eight digits at a time while there are eight, then one by one.
        while let Some(v) = b.get(j..j + 8).and_then(eight_digits) {
            if m != 0 {
                sig += 8;
            } else if v != 0 {
                // Leading zeros of the chunk are not significant.
                sig += v.ilog10() + 1;
            }
            m = m.wrapping_mul(100_000_000).wrapping_add(v);
            e10 -= 8;
            j += 8;
        }
        // The last 0-7 digits: with eight bytes left to load, in one step.
        if let Some((v, n)) = b.get(j..j + 8).map(short_digits) {
            if m != 0 {
                sig += n;
            } else if v != 0 {
                sig += v.ilog10() + 1;
            }
            m = m.wrapping_mul(POW10_U64[n as usize]).wrapping_add(v);
            e10 -= i64::from(n);
            j += n as usize;
        }
        while let Some(&c @ b'0'..=b'9') = b.get(j) {
            digit(c, &mut m, &mut sig);
            e10 -= 1;
            j += 1;
        }
        if j == first {
            return None;
        }
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        j += 1;
        let eneg = match b.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let first = j;
        let mut e = 0i64;
        while let Some(&c @ b'0'..=b'9') = b.get(j) {
            // Saturates far beyond any exponent that matters (the slow path
            // reads the text itself).
            e = (e * 10 + i64::from(c - b'0')).min(1 << 40);
            j += 1;
        }
        if j == first {
            return None;
        }
        e10 += if eneg { -e } else { e };
    }
    // `sig == 0`: every digit is zero (`m` itself can wrap to 0 when
    // `sig > 19`).
    let fast = if sig == 0 {
        Some(0.0)
    } else if sig <= 19 {
        clinger_f32(m, e10)
    } else {
        None
    };
    let x = match fast {
        Some(x) => x,
        // The token is ASCII (checked above) and a valid Rust float literal.
        None => std::str::from_utf8(&b[start + usize::from(neg)..j])
            .ok()?
            .parse::<f32>()
            .ok()?,
    };
    *i = j;
    Some(if neg { -x } else { x })
}

/// `t` (a whole number token) as the nearest f32: [`number_f32`] when `t`
/// is one JSON number, else whatever `str::parse::<f32>` says.
pub(super) fn token_f32(t: &str) -> Result<f32, std::num::ParseFloatError> {
    let mut i = 0;
    match number_f32(t.as_bytes(), &mut i) {
        Some(x) if i == t.len() => Ok(x),
        _ => t.parse::<f32>(),
    }
}
