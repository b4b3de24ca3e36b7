//! Byte layout of segment files and the recovery scanner.
//!
//! A segment file is a 16-byte header followed by items, back to back, with
//! no padding (all integers little-endian):
//!
//! ```text
//! header : "PXSEG\0\0\x01" (8) | segment id u64 (8)
//! block  : "PXB1" (4) | len u32 (4) | cid [32] | hsum u32 (4) | payload [len] | sum u64 (8)
//!          hsum = low 32 bits of xxh64(seed 0) over the first 40 bytes
//!          sum  = xxh64(seed 0) over everything before it (header + payload)
//! commit : "PXC1" (4) | 0u32 (4) | xxh64 of those 8 bytes (8)
//! ```
//!
//! The checksums detect torn writes cheaply at open; they are not the
//! integrity guarantee: every payload is still checked against its CID
//! (SHA-256) before a reader sees it. The header checksum lets the scanner
//! tell "header intact, payload damaged" (the CID is known, so a read can
//! report [`Error::Corrupt`](crate::Error::Corrupt) naming it) from bytes that
//! are not a record at all.
//!
//! [`scan`] never trusts a length it has not checked: after an invalid item
//! it resynchronises on the next position that parses as a fully valid item.
//! Bytes after the last valid item are the *tail*; only the writer truncates
//! it, and only in the newest segment (a torn append).

use crate::cid::Cid;
use xxhash_rust::xxh64::xxh64;

/// First 8 bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"PXSEG\0\0\x01";
/// Length of the segment file header (magic + id).
pub const SEGMENT_HEADER_LEN: usize = 16;
/// Magic of a block record.
pub const BLOCK_MAGIC: [u8; 4] = *b"PXB1";
/// Magic of a commit marker.
pub const COMMIT_MAGIC: [u8; 4] = *b"PXC1";
/// Bytes of a block record before its payload.
pub const BLOCK_HEADER_LEN: usize = 44;
/// Bytes of a block record after its payload.
pub const BLOCK_TRAILER_LEN: usize = 8;
/// Framing overhead of one block record.
pub const BLOCK_OVERHEAD: usize = BLOCK_HEADER_LEN + BLOCK_TRAILER_LEN;
/// Length of a commit marker.
pub const COMMIT_LEN: usize = 16;
/// Largest block payload a segment accepts (1 GiB).
pub const MAX_BLOCK_LEN: usize = 1 << 30;

/// Encodes a segment file header for segment `id`.
pub fn segment_header(id: u64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..].copy_from_slice(&id.to_le_bytes());
    h
}

/// The segment id stored in a header, if the header is well formed.
pub fn parse_segment_header(buf: &[u8]) -> Option<u64> {
    if buf.len() < SEGMENT_HEADER_LEN || buf[..8] != SEGMENT_MAGIC {
        return None;
    }
    Some(u64::from_le_bytes(buf[8..16].try_into().ok()?))
}

/// Appends a block record for `data` (whose CID is `cid`) to `out`.
/// The caller guarantees `data.len() <= MAX_BLOCK_LEN`.
pub fn encode_block(out: &mut Vec<u8>, cid: &Cid, data: &[u8]) {
    debug_assert!(data.len() <= MAX_BLOCK_LEN);
    let start = out.len();
    out.extend_from_slice(&BLOCK_MAGIC);
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(cid.as_bytes());
    let hsum = xxh64(&out[start..start + 40], 0) as u32;
    out.extend_from_slice(&hsum.to_le_bytes());
    out.extend_from_slice(data);
    let sum = xxh64(&out[start..], 0);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// Appends a commit marker to `out`.
pub fn encode_commit(out: &mut Vec<u8>) {
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&COMMIT_MAGIC);
    out.extend_from_slice(&head);
    out.extend_from_slice(&xxh64(&head, 0).to_le_bytes());
}

/// One item found by [`scan`]. Offsets are relative to the scanned buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A block record. `intact` is false when the header checksum holds but
    /// the record checksum does not (the payload or trailer is damaged).
    Block {
        /// CID named in the record header.
        cid: Cid,
        /// Offset of the record's first byte.
        offset: usize,
        /// Payload length.
        len: usize,
        /// Whether the whole-record checksum matched.
        intact: bool,
    },
    /// A commit marker at `offset`.
    Commit {
        /// Offset of the marker.
        offset: usize,
    },
    /// Bytes that are not a valid item, followed by a valid item.
    Garbage {
        /// First damaged byte.
        start: usize,
        /// One past the last damaged byte.
        end: usize,
    },
}

/// Result of scanning a segment body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Items in file order.
    pub items: Vec<Item>,
    /// One past the last valid item: where a torn tail begins (equal to the
    /// buffer length when there is no tail).
    pub end: usize,
}

enum Parsed {
    /// A fully valid item of `len` bytes.
    Valid(Item, usize),
    /// A block whose header is valid and whose extent (`len` bytes) fits in
    /// the buffer, but whose record checksum fails.
    Damaged(Item, usize),
    /// Not an item (or not complete).
    Invalid,
}

fn parse_at(buf: &[u8], pos: usize) -> Parsed {
    let rest = &buf[pos..];
    if rest.len() >= BLOCK_HEADER_LEN && rest[..4] == BLOCK_MAGIC {
        let len = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let hsum = u32::from_le_bytes([rest[40], rest[41], rest[42], rest[43]]);
        if xxh64(&rest[..40], 0) as u32 != hsum || len > MAX_BLOCK_LEN {
            return Parsed::Invalid;
        }
        let total = BLOCK_OVERHEAD + len;
        if rest.len() < total {
            return Parsed::Invalid;
        }
        let mut cid = [0u8; 32];
        cid.copy_from_slice(&rest[8..40]);
        let body = BLOCK_HEADER_LEN + len;
        let mut sum = [0u8; 8];
        sum.copy_from_slice(&rest[body..total]);
        let intact = xxh64(&rest[..body], 0) == u64::from_le_bytes(sum);
        let item = Item::Block {
            cid: Cid(cid),
            offset: pos,
            len,
            intact,
        };
        if intact {
            Parsed::Valid(item, total)
        } else {
            Parsed::Damaged(item, total)
        }
    } else if rest.len() >= COMMIT_LEN && rest[..4] == COMMIT_MAGIC && rest[4..8] == [0; 4] {
        let mut sum = [0u8; 8];
        sum.copy_from_slice(&rest[8..16]);
        if xxh64(&rest[..8], 0) == u64::from_le_bytes(sum) {
            Parsed::Valid(Item::Commit { offset: pos }, COMMIT_LEN)
        } else {
            Parsed::Invalid
        }
    } else {
        Parsed::Invalid
    }
}

/// The first position `>= from` holding a fully valid item.
fn resync(buf: &[u8], from: usize) -> Option<usize> {
    let mut pos = from;
    while pos + 4 <= buf.len() {
        let window = &buf[pos..];
        // Jump to the next byte that could start a magic ("PXB1"/"PXC1").
        let step = window.iter().position(|&b| b == b'P')?;
        pos += step;
        if let Parsed::Valid(..) = parse_at(buf, pos) {
            return Some(pos);
        }
        pos += 1;
    }
    None
}

/// Scans a segment body (`buf` starts right after the segment header, or
/// anywhere an item is expected). Never panics, whatever the bytes.
pub fn scan(buf: &[u8]) -> Scan {
    let mut out = Scan::default();
    let mut pos = 0usize;
    while pos < buf.len() {
        match parse_at(buf, pos) {
            Parsed::Valid(item, len) => {
                out.items.push(item);
                pos += len;
            }
            Parsed::Damaged(item, len) => {
                // A damaged record followed by valid data is damage in place;
                // with nothing valid after it, it is a torn tail.
                match resync(buf, pos + len) {
                    Some(next) => {
                        out.items.push(item);
                        if next > pos + len {
                            out.items.push(Item::Garbage {
                                start: pos + len,
                                end: next,
                            });
                        }
                        pos = next;
                    }
                    None => break,
                }
            }
            Parsed::Invalid => match resync(buf, pos + 1) {
                Some(next) => {
                    out.items.push(Item::Garbage {
                        start: pos,
                        end: next,
                    });
                    pos = next;
                }
                None => break,
            },
        }
    }
    out.end = pos.min(buf.len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prox_testkit::SplitMix64;

    fn block(data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        encode_block(&mut v, &Cid::of(data), data);
        v
    }

    #[test]
    fn round_trip_and_layout() {
        let mut buf = block(b"hello");
        encode_commit(&mut buf);
        assert_eq!(buf.len(), BLOCK_OVERHEAD + 5 + COMMIT_LEN);
        let s = scan(&buf);
        assert_eq!(s.end, buf.len());
        assert_eq!(
            s.items,
            vec![
                Item::Block {
                    cid: Cid::of(b"hello"),
                    offset: 0,
                    len: 5,
                    intact: true
                },
                Item::Commit { offset: 57 }
            ]
        );
    }

    #[test]
    fn every_truncation_is_a_tail() {
        let mut buf = block(b"abc");
        buf.extend(block(b"defgh"));
        let first = BLOCK_OVERHEAD + 3;
        for cut in 0..buf.len() {
            let s = scan(&buf[..cut]);
            let want = if cut >= first { first } else { 0 };
            assert_eq!(s.end, want, "cut {cut}");
            assert_eq!(s.items.len(), usize::from(cut >= first), "cut {cut}");
        }
    }

    #[test]
    fn damaged_payload_in_the_middle_is_reported_not_truncated() {
        let mut buf = block(b"first block");
        let second = buf.len();
        buf.extend(block(b"second"));
        encode_commit(&mut buf);
        buf[second + BLOCK_HEADER_LEN + 2] ^= 0x40;
        let s = scan(&buf);
        assert_eq!(s.end, buf.len());
        assert!(s.items.contains(&Item::Block {
            cid: Cid::of(b"second"),
            offset: second,
            len: 6,
            intact: false
        }));
    }

    #[test]
    fn damaged_header_becomes_garbage_and_scan_resyncs() {
        let mut buf = block(b"one");
        buf.extend(block(b"two"));
        buf.extend(block(b"three"));
        buf[BLOCK_OVERHEAD + 3 + 10] ^= 1; // inside the CID of "two"
        let s = scan(&buf);
        assert_eq!(s.end, buf.len());
        let cids: Vec<_> = s
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Block { cid, .. } => Some(*cid),
                _ => None,
            })
            .collect();
        assert_eq!(cids, vec![Cid::of(b"one"), Cid::of(b"three")]);
    }

    /// The invariants the fuzz target checks: items tile `[0, end)` in
    /// order and intact items re-encode to the bytes they came from.
    fn check_tiling(data: &[u8]) {
        let s = scan(data);
        assert!(s.end <= data.len());
        let mut pos = 0;
        for item in &s.items {
            match *item {
                Item::Block {
                    cid,
                    offset,
                    len,
                    intact,
                } => {
                    assert_eq!(offset, pos);
                    let end = offset + BLOCK_OVERHEAD + len;
                    if intact {
                        let mut again = Vec::new();
                        let body = &data[offset + BLOCK_HEADER_LEN..end - BLOCK_TRAILER_LEN];
                        encode_block(&mut again, &cid, body);
                        assert_eq!(again.as_slice(), &data[offset..end]);
                    }
                    pos = end;
                }
                Item::Commit { offset } => {
                    assert_eq!(offset, pos);
                    pos += COMMIT_LEN;
                }
                Item::Garbage { start, end } => {
                    assert_eq!(start, pos);
                    assert!(end > start);
                    pos = end;
                }
            }
        }
        assert_eq!(pos, s.end);
    }

    #[test]
    fn mutated_segments_keep_the_scan_invariants() {
        let seed = prox_testkit::seed(0x1234_5678_9abc_def1);
        // The test's output, printed on failure, names the seed to replay.
        eprintln!("PROX_SEED={seed}");
        let mut rng = SplitMix64::new(seed);
        let mut next = || rng.next();
        for _ in 0..400 {
            let mut buf = Vec::new();
            for _ in 0..next() % 6 {
                let data: Vec<u8> = (0..next() % 200).map(|_| next() as u8).collect();
                encode_block(&mut buf, &Cid::of(&data), &data);
                if next() % 3 == 0 {
                    encode_commit(&mut buf);
                }
            }
            for _ in 0..next() % 4 {
                if buf.is_empty() {
                    break;
                }
                let at = (next() % buf.len() as u64) as usize;
                match next() % 3 {
                    0 => buf[at] ^= 1 << (next() % 8),
                    1 => buf.truncate(at),
                    _ => buf.insert(at, next() as u8),
                }
            }
            check_tiling(&buf);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let seed = prox_testkit::seed(0x9e37_79b9_7f4a_7c15);
        eprintln!("PROX_SEED={seed}");
        let mut rng = SplitMix64::new(seed);
        for n in 0..300 {
            let mut buf = Vec::new();
            for _ in 0..n {
                let x = rng.next();
                buf.push(if x.is_multiple_of(7) { b'P' } else { x as u8 });
            }
            check_tiling(&buf);
        }
    }
}
