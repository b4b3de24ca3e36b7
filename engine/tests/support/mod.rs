//! Helpers shared by the engine's test binaries (each includes this file
//! with `mod support;`): the replayable seed and a tiny deterministic
//! generator. Each binary uses a different subset, hence the allow.
#![allow(dead_code)]

/// The seed of a randomized test: `PROX_SEED` when set (decimal), else
/// `default`. Tests print it in their failure messages so a failure can be
/// replayed.
pub(crate) fn seed_or(default: u64) -> u64 {
    std::env::var("PROX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// splitmix64: a tiny, fast, fully deterministic generator.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1), 24 random bits.
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Approximately standard normal (scaled sum of four uniforms).
    pub(crate) fn gauss(&mut self) -> f32 {
        (0..4).map(|_| self.unit()).sum::<f32>() * 0.866
    }

    /// Uniform in `0..n` (modulo bias is irrelevant for tests).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
