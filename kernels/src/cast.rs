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
}
