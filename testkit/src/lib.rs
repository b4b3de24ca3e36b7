//! Seeded, replayable randomness for prox's tests and benches.
//!
//! Every randomized test takes its seed from [`seed`] (the `PROX_SEED`
//! environment variable when set, else the test's own default), prints it in
//! its failure messages, and draws from a [`SplitMix64`] stream started at
//! that seed, so a failure is replayed by running the test again with
//! `PROX_SEED=<seed>`.
//!
//! This crate is a dev-dependency only: no library or binary of the
//! workspace depends on it (`.ci/run` checks this), and it has no
//! dependencies of its own.

/// The seed of a randomized test: `PROX_SEED` when set, else `default`.
///
/// `PROX_SEED` is read as a decimal `u64`, or as hexadecimal with a `0x`
/// prefix; surrounding whitespace is ignored.
///
/// # Panics
///
/// When `PROX_SEED` is set but is not a `u64`: a typo must not silently run
/// the default seed instead of the one asked for.
pub fn seed(default: u64) -> u64 {
    match std::env::var("PROX_SEED") {
        Ok(s) => parse_seed(&s).unwrap_or_else(|| panic!("PROX_SEED must be a u64, got {s:?}")),
        Err(_) => default,
    }
}

/// Parses a seed written in decimal or as `0x`-prefixed hexadecimal.
fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The SplitMix64 generator (Steele, Lea and Flood, 2014): one `u64` of
/// state, a full period of 2^64, and fast enough for building test data.
///
/// The stream for a given seed is fixed forever: frozen CIDs in the tests
/// are computed from data drawn here, so no method may change what it
/// returns.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting at `seed` (its first output mixes `seed + γ`).
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    // Not an `Iterator`: the stream never ends, and callers want a `u64`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)` on a grid of 2^-23, from the top 24 bits.
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// Approximately standard normal: the sum of four [`unit`](Self::unit)
    /// draws scaled by `sqrt(3) / 2` (variance 1, tails bounded by ±3.46).
    pub fn gauss(&mut self) -> f32 {
        (0..4).map(|_| self.unit()).sum::<f32>() * 0.866
    }

    /// Uniform in `0..n` by reduction modulo `n` (the bias, below
    /// `n / 2^64`, does not matter for tests). `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `[0, 1)` on a grid of 2^-53, from the top 53 bits.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal by the Box-Muller transform of two
    /// [`unit_f64`](Self::unit_f64) draws (the cosine branch only).
    pub fn gauss_f64(&mut self) -> f64 {
        let (u, v) = (self.unit_f64().max(1e-300), self.unit_f64());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference outputs of SplitMix64 for seed 1234567 (from the
    /// generator's published C implementation).
    #[test]
    fn matches_the_reference_stream() {
        let mut r = SplitMix64::new(1_234_567);
        let want = [
            6_457_827_717_110_365_317,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
            4_593_380_528_125_082_431,
            16_408_922_859_458_223_821,
        ];
        for w in want {
            assert_eq!(r.next(), w);
        }
    }

    #[test]
    fn draws_stay_in_their_ranges() {
        let mut r = SplitMix64::new(seed(0x7e57));
        for _ in 0..10_000 {
            let u = r.unit();
            assert!((-1.0..1.0).contains(&u), "{u}");
            let g = r.gauss();
            assert!(g.abs() <= 3.5, "{g}");
            assert!(r.below(7) < 7);
            let f = r.unit_f64();
            assert!((0.0..1.0).contains(&f), "{f}");
            assert!(r.gauss_f64().is_finite());
        }
    }

    #[test]
    fn seeds_parse_in_decimal_and_hex() {
        assert_eq!(parse_seed(" 42 "), Some(42));
        assert_eq!(parse_seed("0x2a"), Some(42));
        assert_eq!(parse_seed("0X2A"), Some(42));
        assert_eq!(parse_seed("forty-two"), None);
        assert_eq!(parse_seed("-1"), None);
    }
}
