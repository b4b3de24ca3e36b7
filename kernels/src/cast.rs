//! Zero-copy reinterpretation between byte types.
//!
//! Packed layouts (a graph node's links and its `i8` codes in one byte
//! block) are stored as `[u8]`; the integer kernels take `[i8]`. `u8` and
//! `i8` have the same size, alignment (1) and set of valid bit patterns, so
//! the view is always sound; it lives here because kernels is the only
//! crate allowed `unsafe`.

/// `bytes` viewed as signed bytes (two's complement), without copying.
#[inline]
pub fn as_i8(bytes: &[u8]) -> &[i8] {
    // SAFETY: u8 and i8 have identical size and alignment and every bit
    // pattern is valid for both; the length and lifetime are carried over.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<i8>(), bytes.len()) }
}

/// `codes` viewed as unsigned bytes, without copying.
#[inline]
pub fn as_u8(codes: &[i8]) -> &[u8] {
    // SAFETY: as in `as_i8`, in the other direction.
    unsafe { std::slice::from_raw_parts(codes.as_ptr().cast::<u8>(), codes.len()) }
}

/// Fills `out` with the little-endian `f32`s of `bytes` (the first
/// `min(bytes.len() / 4, out.len())` of them), as one copy on
/// little-endian hosts.
#[inline]
pub fn f32_from_le(bytes: &[u8], out: &mut [f32]) {
    let n = out.len().min(bytes.len() / 4);
    #[cfg(target_endian = "little")]
    {
        // SAFETY: the view covers exactly the first `n` floats of `out`
        // (4·n bytes, u8 has alignment 1), every bit pattern is a valid
        // f32, and on a little-endian host the f32 whose bytes are
        // `b0..b3` is `f32::from_le_bytes([b0, b1, b2, b3])`.
        let dst = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), 4 * n) };
        dst.copy_from_slice(&bytes[..4 * n]);
    }
    #[cfg(not(target_endian = "little"))]
    for (o, c) in out[..n].iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_round_trip() {
        let b = [0u8, 1, 127, 128, 255];
        assert_eq!(as_i8(&b), &[0i8, 1, 127, -128, -1]);
        assert_eq!(as_u8(as_i8(&b)), &b);
        assert!(as_i8(&[]).is_empty());
    }

    #[test]
    fn f32_from_le_matches_from_le_bytes() {
        let vals = [0.0f32, -1.5, f32::MAX, f32::MIN_POSITIVE, 3.25e-7];
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = [9.0f32; 5];
        f32_from_le(&bytes, &mut out);
        assert_eq!(out, vals);
        // Shorter input fills a prefix only.
        let mut out = [9.0f32; 3];
        f32_from_le(&bytes[..9], &mut out);
        assert_eq!(out, [0.0, -1.5, 9.0]);
    }
}
