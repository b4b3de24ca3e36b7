//! The content-defined chunk boundary predicate (prolly-core.md section 4).

use super::Config;
use xxhash_rust::xxh64::Xxh64;

/// Lower 32 bits of `XXH64(key || value, seed)`.
pub fn boundary_hash(seed: u64, key: &[u8], value: &[u8]) -> u32 {
    let mut h = Xxh64::new(seed);
    h.update(key);
    h.update(value);
    h.digest() as u32
}

/// The hash half of the predicate: `low32(XXH64(key || value)) <= u32::MAX / factor`.
/// A factor of 0 (rejected by [`Config::validate`]) never fires.
pub fn hash_test(cfg: &Config, key: &[u8], value: &[u8]) -> bool {
    match cfg.threshold() {
        Some(t) => boundary_hash(cfg.hash_seed, key, value) <= t,
        None => false,
    }
}

/// Whether the chunk being built closes after this item.
///
/// `count` is the number of items in the current chunk INCLUDING this one.
/// Below `min_chunk_size` never; at or above `max_chunk_size` always (the
/// minimum wins when `min > max`); otherwise the hash test. At the leaf level
/// `key`/`value` are the entry; at internal levels they are the child's first
/// key and its 32 CID bytes.
pub fn is_boundary(cfg: &Config, count: usize, key: &[u8], value: &[u8]) -> bool {
    if count < cfg.min_chunk_size {
        return false;
    }
    if count >= cfg.max_chunk_size {
        return true;
    }
    hash_test(cfg, key, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh64_self_test_values() {
        let full = |d: &[u8]| {
            let mut h = Xxh64::new(0);
            h.update(d);
            h.digest()
        };
        assert_eq!(full(b""), 0xef46db3751d8e999);
        assert_eq!(full(b"a"), 0xd24ec4f1a98c6e5b);
        assert_eq!(full(b"abc"), 0x44bc2cf5ad770999);
        // Streaming over two writes equals one-shot over the concatenation.
        assert_eq!(boundary_hash(0, b"ab", b"c"), full(b"abc") as u32);
    }

    #[test]
    fn fixture_walkthrough_decisions() {
        let cfg = Config::new(2, 4, 2, 0);
        // Section 11.5: a=1 .. d=4 under threshold 7fffffff.
        assert_eq!(boundary_hash(0, b"a", b"1"), 0xb106ea90);
        assert!(!is_boundary(&cfg, 3, b"c", b"3"));
        assert!(is_boundary(&cfg, 4, b"d", b"4"));
        assert!(!is_boundary(&cfg, 1, b"e", b"5"));
    }
}
