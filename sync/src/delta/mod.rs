//! Block patches: a new block expressed as copy ranges of an old block plus
//! literal bytes (`DELTA` frames of `/prox/blocks/1`, docs/sync.md).
//!
//! Format (varints are unsigned LEB128, at most 10 bytes):
//!
//! ```text
//! patch   = target_len varint, op*
//! op      = h varint, then
//!           h even: COPY    len = h >> 1 (>= 1), offset varint   (base[offset..offset+len])
//!           h odd:  LITERAL len = h >> 1 (>= 1), len raw bytes
//! ```
//!
//! Applying checks every field before using it: a copy must lie inside the
//! base, no op may write past `target_len`, the ops must produce exactly
//! `target_len` bytes, and `target_len` is bounded by the caller before any
//! allocation. The result is *not* trusted: the receiver hashes it against
//! the CID it asked for, like any received block.
//!
//! The encoder copies the common prefix and suffix, then matches the middle
//! against the whole base through a content-sampled index of 16-byte
//! windows (about one position in eight, chosen by the window's hash, so a
//! shifted run of bytes is found wherever it moved).
//!
//! [`compress`] and [`decompress`] code a block as one zstd frame, with the
//! bases as a raw prefix or without (`ZDELTA`/`ZBLOCK`, see `packed`).

mod packed;

pub use packed::{compress, decompress, LEVEL, WINDOW_LOG_MAX};
use prox_engine::Cid;
use std::collections::HashMap;

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The patch ended inside a field.
    #[error("patch truncated")]
    Truncated,
    /// A varint longer than 10 bytes or above `u64`.
    #[error("bad varint in patch")]
    BadVarint,
    /// The announced length is above the block limit.
    #[error("patch target of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Announced length.
        len: u64,
        /// Limit in force.
        max: u64,
    },
    /// A copy outside the base block.
    #[error("copy of {len} bytes at {offset} outside a base of {base} bytes")]
    CopyOutOfRange {
        /// Copy offset.
        offset: u64,
        /// Copy length.
        len: u64,
        /// Base length.
        base: u64,
    },
    /// An op of length zero (never produced by the encoder).
    #[error("empty op in patch")]
    EmptyOp,
    /// The ops produce more or fewer bytes than announced.
    #[error("patch produces {got} bytes, announced {expected}")]
    WrongLength {
        /// Announced length.
        expected: u64,
        /// Bytes produced (or that would be, at the first overflow).
        got: u64,
    },
    /// A zstd frame that does not state its content size.
    #[error("zstd frame without a content size")]
    NoContentSize,
    /// Bytes after the one zstd frame of a compressed answer.
    #[error("{bytes} bytes after the zstd frame")]
    Trailing {
        /// How many.
        bytes: u64,
    },
    /// The zstd frame does not decode (zstd's reason).
    #[error("zstd: {0}")]
    Zstd(&'static str),
}

/// Window hashed for matching; also the shortest copy the matcher emits
/// (a copy op costs up to ~8 bytes, so shorter runs go as literals).
const WINDOW: usize = 16;
/// One position in `1 << SAMPLE_BITS` is indexed / probed.
const SAMPLE_BITS: u32 = 3;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(p: &[u8], pos: &mut usize) -> Result<u64, PatchError> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = *p.get(*pos).ok_or(PatchError::Truncated)?;
        *pos += 1;
        let part = (b & 0x7f) as u64;
        if i == 9 && part > 1 {
            return Err(PatchError::BadVarint);
        }
        v |= part << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(PatchError::BadVarint)
}

fn copy(out: &mut Vec<u8>, offset: usize, len: usize) {
    if len > 0 {
        put_varint(out, (len as u64) << 1);
        put_varint(out, offset as u64);
    }
}

fn literal(out: &mut Vec<u8>, bytes: &[u8]) {
    if !bytes.is_empty() {
        put_varint(out, ((bytes.len() as u64) << 1) | 1);
        out.extend_from_slice(bytes);
    }
}

/// Hash of the window at `at` (`WINDOW` bytes must be there).
fn window_hash(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    let lo = u64::from_le_bytes(w);
    w.copy_from_slice(&b[at + 8..at + 16]);
    let hi = u64::from_le_bytes(w);
    (lo ^ hi.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn sampled(h: u64) -> bool {
    h >> (64 - SAMPLE_BITS) == 0
}

/// Encodes `target` as a patch against `base`. Always valid; the caller
/// decides whether it is worth sending (compare its length with the block).
pub fn encode(base: &[u8], target: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, target.len() as u64);
    let common = base.len().min(target.len());
    let prefix = base.iter().zip(target).take_while(|(a, b)| a == b).count();
    let suffix = base[prefix..]
        .iter()
        .rev()
        .zip(target[prefix..].iter().rev())
        .take(common - prefix)
        .take_while(|(a, b)| a == b)
        .count();
    copy(&mut out, 0, prefix);
    let mid_end = target.len() - suffix;
    if prefix < mid_end {
        middle(&mut out, base, target, prefix, mid_end);
    }
    copy(&mut out, base.len() - suffix, suffix);
    out
}

/// Encodes `target[start..end]` against the whole base.
fn middle(out: &mut Vec<u8>, base: &[u8], target: &[u8], start: usize, end: usize) {
    if base.len() < WINDOW || end - start < WINDOW {
        literal(out, &target[start..end]);
        return;
    }
    let mut index: HashMap<u64, u32> = HashMap::new();
    for i in 0..=base.len() - WINDOW {
        let h = window_hash(base, i);
        if sampled(h) {
            index.entry(h).or_insert(i as u32);
        }
    }
    let mut lit = start;
    let mut j = start;
    while j + WINDOW <= end {
        let h = window_hash(target, j);
        let found = if sampled(h) {
            index.get(&h).map(|&i| i as usize)
        } else {
            None
        };
        match found {
            Some(i) if base[i..i + WINDOW] == target[j..j + WINDOW] => {
                let (mut bi, mut tj) = (i, j);
                while tj > lit && bi > 0 && base[bi - 1] == target[tj - 1] {
                    bi -= 1;
                    tj -= 1;
                }
                let mut len = j - tj + WINDOW;
                while tj + len < end && bi + len < base.len() && base[bi + len] == target[tj + len]
                {
                    len += 1;
                }
                literal(out, &target[lit..tj]);
                copy(out, bi, len);
                j = tj + len;
                lit = j;
            }
            _ => j += 1,
        }
    }
    literal(out, &target[lit..end]);
}

/// Rebuilds the target from `base` and `patch`, refusing a target longer
/// than `max_len` before allocating it.
pub fn apply(base: &[u8], patch: &[u8], max_len: u64) -> Result<Vec<u8>, PatchError> {
    let mut pos = 0usize;
    let target_len = get_varint(patch, &mut pos)?;
    if target_len > max_len {
        return Err(PatchError::TooLarge {
            len: target_len,
            max: max_len,
        });
    }
    let mut out = Vec::with_capacity(target_len as usize);
    while pos < patch.len() {
        let h = get_varint(patch, &mut pos)?;
        let len = h >> 1;
        if len == 0 {
            return Err(PatchError::EmptyOp);
        }
        let got = out.len() as u64 + len;
        if got > target_len {
            return Err(PatchError::WrongLength {
                expected: target_len,
                got,
            });
        }
        // `len <= target_len <= max_len`, so it fits in usize from here on.
        let n = len as usize;
        if h & 1 == 0 {
            let offset = get_varint(patch, &mut pos)?;
            let src = usize::try_from(offset)
                .ok()
                .and_then(|o| Some(o..o.checked_add(n)?))
                .and_then(|r| base.get(r))
                .ok_or(PatchError::CopyOutOfRange {
                    offset,
                    len,
                    base: base.len() as u64,
                })?;
            out.extend_from_slice(src);
        } else {
            let src = pos
                .checked_add(n)
                .and_then(|e| patch.get(pos..e))
                .ok_or(PatchError::Truncated)?;
            out.extend_from_slice(src);
            pos += n;
        }
    }
    if out.len() as u64 != target_len {
        return Err(PatchError::WrongLength {
            expected: target_len,
            got: out.len() as u64,
        });
    }
    Ok(out)
}

/// Pairs each link of a new block with the link of its old version at the
/// same position (the base a patch may be computed against), `None` where
/// there is nothing sensible to pair or the link did not change.
///
/// Links present in both lists anchor the alignment (the longest run of
/// them in the same order in both); between two anchors, the changed new
/// links pair with the changed old links of that stretch, the first half
/// counting from its start and the second half from its end, so a node
/// inserted or removed (a chunk boundary that moved) shifts neither side and
/// never misaligns the stretches after it. A pair must agree on the kind. A
/// wrong guess costs nothing but the server's attempt: it sends the whole
/// block when the patch is not smaller.
pub fn pair_by_position<K: PartialEq>(new: &[(Cid, K)], old: &[(Cid, K)]) -> Vec<Option<Cid>> {
    pair_indices(new, old)
        .into_iter()
        .map(|j| j.map(|j| old[j].0))
        .collect()
}

/// [`pair_by_position`] as indices into `old`.
fn pair_indices<K: PartialEq>(new: &[(Cid, K)], old: &[(Cid, K)]) -> Vec<Option<usize>> {
    let mut out = vec![None; new.len()];
    let mut from = (0, 0);
    for (ai, aj) in anchors(new, old)
        .into_iter()
        .chain(std::iter::once((new.len(), old.len())))
    {
        let (n, o) = (ai - from.0, aj - from.1);
        for k in 0..n {
            let j = if k < n.div_ceil(2) {
                Some(k).filter(|&j| j < o)
            } else {
                o.checked_sub(n - k)
            };
            let Some(j) = j.map(|j| from.1 + j) else {
                continue;
            };
            let i = from.0 + k;
            if old[j].1 == new[i].1 && old[j].0 != new[i].0 {
                out[i] = Some(j);
            }
        }
        from = (ai + 1, aj + 1);
    }
    out
}

/// The links present in both lists, as `(new index, old index)` pairs
/// increasing in both: the longest such chain (patience sorting over the
/// old positions of the shared links, `O(n log n)`).
fn anchors<K>(new: &[(Cid, K)], old: &[(Cid, K)]) -> Vec<(usize, usize)> {
    let mut at: HashMap<Cid, usize> = HashMap::with_capacity(old.len());
    for (j, (c, _)) in old.iter().enumerate() {
        at.entry(*c).or_insert(j);
    }
    let shared: Vec<(usize, usize)> = new
        .iter()
        .enumerate()
        .filter_map(|(i, (c, _))| at.get(c).map(|&j| (i, j)))
        .collect();
    // tails[l]: index in `shared` of the smallest old position ending an
    // increasing chain of length l + 1; prev: each element's predecessor.
    let mut tails: Vec<usize> = Vec::new();
    let mut prev: Vec<Option<usize>> = vec![None; shared.len()];
    for (x, &(_, j)) in shared.iter().enumerate() {
        let l = tails.partition_point(|&t| shared[t].1 < j);
        prev[x] = l.checked_sub(1).map(|l| tails[l]);
        if l == tails.len() {
            tails.push(x);
        } else {
            tails[l] = x;
        }
    }
    let mut chain = Vec::with_capacity(tails.len());
    let mut cur = tails.last().copied();
    while let Some(x) = cur {
        chain.push(shared[x]);
        cur = prev[x];
    }
    chain.reverse();
    chain
}

/// Most old blocks one patch may copy from (`WANT_DELTA`).
pub const MAX_BASES: usize = 3;

/// For each link of a new block: its paired old link (see
/// [`pair_by_position`]) with the old links on either side of it, in tree
/// order and of the same kind. A patch copies from their concatenation: a
/// chunk boundary that moved makes a new node out of the end of one old
/// node and the start of the next, which the pair alone does not contain.
/// Returns `(paired, bases)`; `bases` is empty where nothing is paired.
pub fn bases_by_position<K: PartialEq>(
    new: &[(Cid, K)],
    old: &[(Cid, K)],
) -> Vec<(Option<Cid>, Vec<Cid>)> {
    pair_indices(new, old)
        .into_iter()
        .zip(new)
        .map(|(paired, (_, kind))| {
            let Some(j) = paired else {
                return (None, Vec::new());
            };
            let bases = old[j.saturating_sub(1)..(j + 2).min(old.len())]
                .iter()
                .filter(|(_, k)| k == kind)
                .map(|(c, _)| *c)
                .collect();
            (Some(old[j].0), bases)
        })
        .collect()
}

/// `n` pseudo-random bytes (xorshift64 from `seed`), for the tests of
/// this module and of [`packed`].
#[cfg(test)]
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(base: &[u8], target: &[u8]) -> usize {
        let p = encode(base, target);
        assert_eq!(apply(base, &p, 1 << 30).as_deref(), Ok(target));
        p.len()
    }

    #[test]
    fn small_edits_give_small_patches() {
        let base = noise(100_000, 7);
        // In-place change of 4 bytes.
        let mut t = base.clone();
        t[50_000..50_004].copy_from_slice(&[1, 2, 3, 4]);
        assert!(round_trip(&base, &t) < 32);
        // Insertion and deletion shift the rest.
        let mut t = base.clone();
        t.splice(30_000..30_000, noise(600, 9));
        t.drain(70_000..70_500);
        assert!(round_trip(&base, &t) < 700, "{}", round_trip(&base, &t));
        // A block moved elsewhere.
        let mut t = base[20_000..].to_vec();
        t.extend_from_slice(&base[..20_000]);
        assert!(round_trip(&base, &t) < 64);
    }

    #[test]
    fn unrelated_and_edge_inputs_round_trip() {
        for (b, t) in [
            (vec![], vec![]),
            (vec![], noise(100, 1)),
            (noise(100, 1), vec![]),
            (noise(5, 1), noise(7, 2)),
            (noise(10_000, 1), noise(10_000, 2)),
            (vec![0u8; 5000], vec![0u8; 9000]),
        ] {
            round_trip(&b, &t);
        }
    }

    #[test]
    fn links_pair_by_position_around_an_insertion() {
        let c = |i: u8| Cid::of(&[i]);
        let old: Vec<(Cid, u8)> = (0..6).map(|i| (c(i), 0)).collect();
        // 0 1 [2'] [new] [3'] 4 5 : ends kept, middle paired from both ends.
        let new = vec![
            (c(0), 0),
            (c(1), 0),
            (c(20), 0),
            (c(30), 0),
            (c(40), 0),
            (c(4), 0),
            (c(5), 0),
        ];
        let pairs = pair_by_position(&new, &old);
        assert_eq!(
            pairs,
            vec![None, None, Some(c(2)), Some(c(3)), Some(c(3)), None, None]
        );
        // Kinds must agree.
        let new = vec![(c(9), 1u8)];
        assert_eq!(pair_by_position(&new, &old[..1]), vec![None]);
        assert_eq!(pair_by_position::<u8>(&[], &old), Vec::<Option<Cid>>::new());
        assert_eq!(pair_by_position(&old, &[]), vec![None; 6]);
        // Bases: the pair and its neighbours, in tree order.
        let new = vec![
            (c(0), 0),
            (c(1), 0),
            (c(20), 0),
            (c(3), 0),
            (c(4), 0),
            (c(5), 0),
        ];
        let b = bases_by_position(&new, &old);
        assert_eq!(b[2], (Some(c(2)), vec![c(1), c(2), c(3)]));
        assert_eq!(b[0], (None, vec![]));
    }

    #[test]
    fn unchanged_links_between_changes_keep_later_pairs_aligned() {
        let c = |i: u16| Cid::of(&i.to_le_bytes());
        let old: Vec<(Cid, u8)> = (0..10).map(|i| (c(i), 0)).collect();
        // 1 changed and split in two; 7 changed in place; the rest kept.
        let new: Vec<(Cid, u8)> = [0, 100, 101, 2, 3, 4, 5, 6, 107, 8, 9]
            .into_iter()
            .map(|i| (c(i), 0))
            .collect();
        let pairs = pair_by_position(&new, &old);
        let want: Vec<Option<Cid>> = [None, Some(1), Some(1), None, None, None, None, None]
            .into_iter()
            .chain([Some(7), None, None])
            .map(|x| x.map(c))
            .collect();
        assert_eq!(pairs, want);
        // A link that moved does not anchor against the order of the rest.
        let new: Vec<(Cid, u8)> = [9, 1, 2, 3, 104, 5, 6, 7, 8]
            .into_iter()
            .map(|i| (c(i), 0))
            .collect();
        let pairs = pair_by_position(&new, &old);
        assert_eq!(pairs[4], Some(c(4)));
        assert_eq!(pairs[0], Some(c(0)));
    }

    #[test]
    fn bad_patches_are_typed_errors() {
        let base = noise(1000, 3);
        let target = {
            let mut t = base.clone();
            t[10] ^= 1;
            t
        };
        let good = encode(&base, &target);
        // Every truncation fails cleanly (never panics, never a wrong Ok).
        for cut in 0..good.len() {
            assert!(apply(&base, &good[..cut], 1 << 20).is_err(), "cut {cut}");
        }
        assert!(matches!(
            apply(&base, &good, 10),
            Err(PatchError::TooLarge { .. })
        ));
        // Copy past the base.
        let mut p = Vec::new();
        put_varint(&mut p, 10);
        copy(&mut p, 995, 10);
        assert!(matches!(
            apply(&base, &p, 1 << 20),
            Err(PatchError::CopyOutOfRange { .. })
        ));
        // Ops longer than announced.
        let mut p = Vec::new();
        put_varint(&mut p, 4);
        literal(&mut p, b"hello");
        assert!(matches!(
            apply(&base, &p, 1 << 20),
            Err(PatchError::WrongLength { .. })
        ));
        // Zero-length op, huge offsets, overlong varints.
        assert_eq!(apply(&base, &[1, 0], 1 << 20), Err(PatchError::EmptyOp));
        let mut p = vec![1, 2];
        put_varint(&mut p, u64::MAX);
        assert!(apply(&base, &p, 1 << 20).is_err());
        assert_eq!(
            apply(&base, &[0xff; 11], 1 << 20),
            Err(PatchError::BadVarint)
        );
    }
}
