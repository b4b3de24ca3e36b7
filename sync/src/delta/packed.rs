//! Zstd-coded blocks (`ZBLOCK`/`ZDELTA` frames, docs/sync.md): one zstd
//! frame per block, compressed with the concatenated bases as a raw
//! *prefix* (zstd's patch-from mode: the frame copies from anywhere in the
//! bases and entropy-codes what it does not copy), or without one.
//!
//! Decoding bounds the output before allocating: the frame must carry its
//! content size, at most `max_len`, and be the whole payload; the window a
//! frame may ask for is capped at [`WINDOW_LOG_MAX`]. Every failure is a
//! [`PatchError`]; the result is hashed against its CID by the caller.

use super::PatchError;
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, DParameter};

/// Compression level of `ZBLOCK`/`ZDELTA` answers. With long-distance
/// matching against the bases, higher levels shrink block updates by a few
/// percent for several times the encoding time (docs/sync.md).
pub const LEVEL: i32 = 1;

/// Largest window (log2 bytes) a frame may use: covers three bases and the
/// block at the 4 MiB block limit (16 MiB).
pub const WINDOW_LOG_MAX: u32 = 24;

/// Compresses `target` as one zstd frame (content size included) with
/// `prefix` as its raw prefix (empty: none). `None` if zstd fails or the
/// inputs need a window above [`WINDOW_LOG_MAX`].
pub fn compress(prefix: &[u8], target: &[u8], level: i32) -> Option<Vec<u8>> {
    let span = (prefix.len() + target.len()).max(1 << 10);
    let window_log = usize::BITS - (span - 1).leading_zeros();
    if window_log > WINDOW_LOG_MAX {
        return None;
    }
    let mut cctx = CCtx::create();
    cctx.set_parameter(CParameter::CompressionLevel(level))
        .ok()?;
    cctx.set_parameter(CParameter::ContentSizeFlag(true)).ok()?;
    cctx.set_parameter(CParameter::ChecksumFlag(false)).ok()?;
    if !prefix.is_empty() {
        // The window must reach back over the whole prefix.
        cctx.set_parameter(CParameter::WindowLog(window_log.max(10)))
            .ok()?;
        cctx.set_parameter(CParameter::EnableLongDistanceMatching(true))
            .ok()?;
        cctx.ref_prefix(prefix).ok()?;
    }
    cctx.set_pledged_src_size(Some(target.len() as u64)).ok()?;
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(target.len()));
    cctx.compress2(&mut out, target).ok()?;
    Some(out)
}

/// Rebuilds a block from one zstd frame and the `prefix` it was compressed
/// against, refusing a content size above `max_len` before allocating.
pub fn decompress(prefix: &[u8], frame: &[u8], max_len: u64) -> Result<Vec<u8>, PatchError> {
    let len = match zstd_safe::get_frame_content_size(frame) {
        Ok(Some(len)) => len,
        Ok(None) => return Err(PatchError::NoContentSize),
        Err(_) => return Err(PatchError::Zstd("not a zstd frame")),
    };
    if len > max_len {
        return Err(PatchError::TooLarge { len, max: max_len });
    }
    match zstd_safe::find_frame_compressed_size(frame) {
        Ok(n) if n == frame.len() => {}
        Ok(n) => {
            return Err(PatchError::Trailing {
                bytes: (frame.len() - n.min(frame.len())) as u64,
            })
        }
        Err(code) => return Err(PatchError::Zstd(zstd_safe::get_error_name(code))),
    }
    let zerr = |code| PatchError::Zstd(zstd_safe::get_error_name(code));
    let mut dctx = DCtx::create();
    dctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX))
        .map_err(zerr)?;
    if !prefix.is_empty() {
        dctx.ref_prefix(prefix).map_err(zerr)?;
    }
    // `len <= max_len`, which the caller bounds by the block limit.
    let mut out = Vec::with_capacity(len as usize);
    dctx.decompress(&mut out, frame).map_err(zerr)?;
    if out.len() as u64 != len {
        return Err(PatchError::WrongLength {
            expected: len,
            got: out.len() as u64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::noise;
    use super::*;

    /// A frame whose header announces `len` bytes (single segment, 8-byte
    /// content size), followed by `tail`.
    fn header_claiming(len: u64, tail: &[u8]) -> Vec<u8> {
        let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
        f.extend_from_slice(&len.to_le_bytes());
        f.extend_from_slice(tail);
        f
    }

    #[test]
    fn blocks_round_trip_with_and_without_bases() {
        let base = noise(200_000, 5);
        // A block made of moved pieces of the base and a few new bytes.
        let mut target = base[120_000..150_000].to_vec();
        target.extend_from_slice(&noise(300, 9));
        target.extend_from_slice(&base[10_000..40_000]);
        let z = compress(&base, &target, LEVEL).unwrap();
        assert!(z.len() < 600, "{}", z.len());
        assert_eq!(decompress(&base, &z, 1 << 20).unwrap(), target);
        // No prefix: a compressible block shrinks on its own.
        let plain: Vec<u8> = (0..50_000u32).flat_map(|i| (i / 7).to_le_bytes()).collect();
        let z = compress(&[], &plain, LEVEL).unwrap();
        assert!(z.len() * 4 < plain.len(), "{}", z.len());
        assert_eq!(decompress(&[], &z, 1 << 20).unwrap(), plain);
        for (p, t) in [
            (vec![], vec![]),
            (noise(10, 1), vec![]),
            (vec![], noise(3, 2)),
        ] {
            let z = compress(&p, &t, LEVEL).unwrap();
            assert_eq!(decompress(&p, &z, 16).unwrap(), t);
        }
        // Inputs that would need a window above the limit are not coded.
        let big = vec![0u8; 9 << 20];
        assert_eq!(compress(&big, &big, LEVEL), None);
    }

    #[test]
    fn truncated_corrupt_and_oversized_frames_are_typed_errors() {
        let base = noise(20_000, 3);
        let mut target = base.clone();
        target[100..110].copy_from_slice(&[7; 10]);
        let z = compress(&base, &target, LEVEL).unwrap();
        for cut in 0..z.len() {
            assert!(decompress(&base, &z[..cut], 1 << 20).is_err(), "cut {cut}");
        }
        // The output bound is checked against the header, before decoding.
        assert_eq!(
            decompress(&base, &z, 19_999),
            Err(PatchError::TooLarge {
                len: 20_000,
                max: 19_999
            })
        );
        assert!(matches!(
            decompress(&[], &header_claiming(1 << 40, &[0; 16]), 4 << 20),
            Err(PatchError::TooLarge { len, .. }) if len == 1 << 40
        ));
        // One frame only: trailing bytes or a second frame are refused.
        let mut two = z.clone();
        two.extend_from_slice(&z);
        assert_eq!(
            decompress(&base, &two, 1 << 20),
            Err(PatchError::Trailing {
                bytes: z.len() as u64
            })
        );
        // A frame without a content size.
        let mut unsized_frame = Vec::new();
        let mut enc = zstd::stream::Encoder::new(&mut unsized_frame, 1).unwrap();
        std::io::Write::write_all(&mut enc, b"hello hello hello").unwrap();
        enc.finish().unwrap();
        assert_eq!(
            decompress(&[], &unsized_frame, 1 << 20),
            Err(PatchError::NoContentSize)
        );
        // Flipped bytes: a typed error or other bytes (the CID check
        // catches those), never a panic.
        for i in 0..z.len() {
            let mut bad = z.clone();
            bad[i] ^= 0x55;
            if let Ok(out) = decompress(&base, &bad, 1 << 20) {
                assert!(out.len() <= 1 << 20);
            }
        }
        // Another prefix than the one compressed against.
        if let Ok(out) = decompress(&noise(20_000, 4), &z, 1 << 20) {
            assert_ne!(out, target);
        }
        assert_eq!(
            decompress(&base, b"not zstd", 1 << 20),
            Err(PatchError::Zstd("not a zstd frame"))
        );
    }

    #[test]
    fn random_bytes_never_panic_and_never_exceed_the_bound() {
        let seed = std::env::var("PROX_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed_u64);
        let prefix = noise(4096, seed);
        for i in 0..3000u64 {
            let n = (i as usize * 37) % 700;
            let mut input = noise(n, seed ^ i.wrapping_mul(0x9E37_79B9));
            // Half the inputs start like a frame, so the decoder gets past
            // the magic number and the header.
            if i % 2 == 0 && n >= 5 {
                input[..4].copy_from_slice(&[0x28, 0xb5, 0x2f, 0xfd]);
            }
            let max = 1 + (i % 4096);
            for p in [&prefix[..], &[][..]] {
                if let Ok(out) = decompress(p, &input, max) {
                    assert!(out.len() as u64 <= max, "seed {seed} input {i}");
                }
            }
        }
    }
}
