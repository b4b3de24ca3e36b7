//! Seeded randomness for the kernels' equivalence tests (test builds only).

/// The test's seed: `PROX_SEED` when set (decimal), else `default`. Tests
/// print it in their failure messages so a failure can be replayed.
pub(crate) fn seed(default: u64) -> u64 {
    std::env::var("PROX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A SplitMix64 stream from `seed`.
pub(crate) fn splitmix(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
