//! Seeded Gaussian-mixture datasets and exact ground truth.
//!
//! The mixture has `clusters` components. Component `c` has a centre drawn
//! from N(0, I), a low-rank shape (a `rank x dim` basis with N(0, 1/dim)
//! entries and per-direction scales decaying as `(j+1)^-1/2`), a spread drawn
//! log-normally around 1, and a weight drawn log-normally, so clusters differ
//! in size and density like real embeddings do. A point is
//! `centre + spread * Σ_j z_j * scale_j * basis_j + noise * ε` with standard
//! normal `z` and `ε`. Under cosine and inner product every vector is scaled
//! to unit length (the usual form of text embeddings).
//!
//! Determinism: row `i` of the base set draws from its own random stream
//! derived from `(seed, "base", i)` (queries likewise), so rows can be made in
//! parallel and the output is identical for every thread count.
//!
//! Ground truth ([`ground_truth`]) is exact under the spec's canonical math
//! (`prox_kernels::canonical::score`), ties broken by the smaller id, so it
//! agrees with an exact search of a map built from the same rows.

use crate::io::Matrix;
use prox_kernels::Metric;
use rayon::prelude::*;

/// xoshiro256** seeded through splitmix64: small, fast, and reproducible
/// everywhere (no platform-dependent state).
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

/// One splitmix64 step.
pub fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let s = [
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
        ];
        Rng { s }
    }

    /// An independent stream for `(seed, tag, index)`.
    pub fn stream(seed: u64, tag: u64, index: u64) -> Rng {
        let mut x = seed ^ tag.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let a = splitmix64(&mut x);
        let mut y = a ^ index.wrapping_mul(0x8CB9_2BA7_2F3D_8DD7);
        Rng::new(splitmix64(&mut y))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `0..n` (`n > 0`), by rejection (no modulo bias).
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// Standard normal by Box–Muller (one of the pair is discarded, which
    /// keeps the stream position independent of call parity).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Parameters of a Gaussian-mixture dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct GmmSpec {
    /// Base vectors.
    pub n: usize,
    /// Dimension.
    pub dim: usize,
    /// Query vectors (drawn from the same mixture).
    pub queries: usize,
    /// Mixture components.
    pub clusters: usize,
    /// Rank of each component's shape.
    pub rank: usize,
    /// Isotropic noise added to every point (relative to the unit centre
    /// spread).
    pub noise: f64,
    /// Scale of the within-cluster shape relative to the centre spread.
    pub spread: f64,
    /// Seed of everything.
    pub seed: u64,
    /// Metric: cosine and inner product produce unit vectors.
    pub metric: Metric,
}

impl GmmSpec {
    /// Defaults for `n` x `dim` with `queries` queries: `clusters =
    /// clamp(n / 100, 8, 1000)`, rank `min(dim, 16)`, spread 0.6, noise 0.1.
    pub fn new(n: usize, dim: usize, queries: usize, seed: u64, metric: Metric) -> GmmSpec {
        GmmSpec {
            n,
            dim,
            queries,
            clusters: (n / 100).clamp(8, 1000),
            rank: dim.min(16),
            noise: 0.1,
            spread: 0.6,
            seed,
            metric,
        }
    }
}

const TAG_MODEL: u64 = 1;
const TAG_BASE: u64 = 2;
const TAG_QUERY: u64 = 3;

struct Component {
    centre: Vec<f32>,
    /// `rank x dim`, row-major, already multiplied by the direction scales
    /// and the component spread.
    basis: Vec<f32>,
}

struct Model {
    components: Vec<Component>,
    /// Cumulative weights, last = 1.
    cumulative: Vec<f64>,
}

impl Model {
    fn new(spec: &GmmSpec) -> Model {
        let d = spec.dim;
        let r = spec.rank.min(d);
        let mut weights = Vec::with_capacity(spec.clusters);
        let components = (0..spec.clusters)
            .map(|c| {
                let mut rng = Rng::stream(spec.seed, TAG_MODEL, c as u64);
                let centre: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
                let spread = spec.spread * (0.25 * rng.normal()).exp();
                weights.push((0.5 * rng.normal()).exp());
                let inv_sqrt_d = 1.0 / (d as f64).sqrt();
                let mut basis = Vec::with_capacity(r * d);
                for j in 0..r {
                    let scale = spread * ((j + 1) as f64).powf(-0.5);
                    for _ in 0..d {
                        basis.push((rng.normal() * scale * inv_sqrt_d) as f32);
                    }
                }
                Component { centre, basis }
            })
            .collect();
        let total: f64 = weights.iter().sum();
        let mut acc = 0.0;
        let mut cumulative: Vec<f64> = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        Model {
            components,
            cumulative,
        }
    }

    fn sample(&self, spec: &GmmSpec, rng: &mut Rng, out: &mut [f32]) {
        let u = rng.uniform();
        let c = self
            .cumulative
            .partition_point(|&w| w <= u)
            .min(self.components.len() - 1);
        let comp = &self.components[c];
        let d = spec.dim;
        out.copy_from_slice(&comp.centre);
        for j in 0..spec.rank.min(d) {
            let z = rng.normal() as f32;
            for (o, b) in out.iter_mut().zip(&comp.basis[j * d..(j + 1) * d]) {
                *o += z * b;
            }
        }
        for o in out.iter_mut() {
            *o += (spec.noise * rng.normal()) as f32;
        }
        if spec.metric != Metric::L2 {
            let norm = out
                .iter()
                .map(|&x| f64::from(x) * f64::from(x))
                .sum::<f64>()
                .sqrt();
            if norm > 0.0 {
                for o in out.iter_mut() {
                    *o = (f64::from(*o) / norm) as f32;
                }
            } else {
                out[0] = 1.0;
            }
        }
    }

    fn matrix(&self, spec: &GmmSpec, rows: usize, tag: u64) -> Matrix {
        let d = spec.dim;
        let mut data = vec![0f32; rows * d];
        data.par_chunks_mut(d.max(1))
            .enumerate()
            .for_each(|(i, row)| {
                let mut rng = Rng::stream(spec.seed, tag, i as u64);
                self.sample(spec, &mut rng, row);
            });
        Matrix { dim: d, data }
    }
}

/// A generated dataset.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// Base vectors (row `i` has id `i`).
    pub base: Matrix,
    /// Query vectors.
    pub queries: Matrix,
}

/// Generates the base and query sets of `spec` (no ground truth).
pub fn generate(spec: &GmmSpec) -> Dataset {
    assert!(
        spec.dim > 0 && spec.clusters > 0,
        "dim and clusters must be positive"
    );
    let model = Model::new(spec);
    Dataset {
        base: model.matrix(spec, spec.n, TAG_BASE),
        queries: model.matrix(spec, spec.queries, TAG_QUERY),
    }
}

/// A scored candidate ordered by (score, id); scores are finite.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cand(f64, u32);

impl Eq for Cand {}

impl PartialOrd for Cand {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Cand {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// Exact top-`k` ids of every query against `base` under `metric`, by
/// canonical score then id, computed in parallel over queries. Calls
/// `tick` once per finished query (for progress bars).
///
/// The SIMD kernels shortlist and canonical math decides: with `f_i` the
/// fast score of row `i` and `e_i` a bound on `|f_i − canonical_i|` (twice
/// the kernels' documented [`F32_REL_TOL`](prox_kernels::f32::F32_REL_TOL)
/// times the magnitude sum: the score itself for L2, `‖q‖·‖x_i‖` for the dot
/// metrics), `T` = the k-th smallest `f_i + e_i` bounds the canonical k-th
/// score from above, so every row with `f_i − e_i ≤ T` is rescored
/// canonically and the rest cannot enter the top k.
pub fn ground_truth(
    base: &Matrix,
    queries: &Matrix,
    metric: Metric,
    k: usize,
    tick: &(dyn Fn() + Sync),
) -> Vec<Vec<u32>> {
    let n = base.len();
    let k = k.min(n);
    let tol = 2.0 * f64::from(prox_kernels::f32::F32_REL_TOL);
    let norms: Vec<f64> = match metric {
        Metric::L2 => Vec::new(),
        _ => base
            .rows()
            .map(|r| prox_kernels::canonical::dot(r, r).sqrt())
            .collect(),
    };
    queries
        .rows()
        .collect::<Vec<_>>()
        .par_iter()
        .map_init(
            || (vec![0f32; n], Vec::<f64>::with_capacity(n)),
            |(fast, upper), q| {
                if k == 0 {
                    tick();
                    return Vec::new();
                }
                prox_kernels::f32::score_many(metric, q, &base.data, fast);
                let qn = prox_kernels::canonical::dot(q, q).sqrt();
                let err = |i: usize, f: f64| match metric {
                    Metric::L2 => tol * f.abs() + 1e-30,
                    _ => tol * qn * norms[i] + 1e-30,
                };
                upper.clear();
                upper.extend(fast.iter().enumerate().map(|(i, &f)| {
                    let f = f64::from(f);
                    f + err(i, f)
                }));
                let (_, kth, _) = upper.select_nth_unstable_by(k - 1, |a, b| a.total_cmp(b));
                let t = *kth;
                let mut cands: Vec<Cand> = fast
                    .iter()
                    .enumerate()
                    .filter(|&(i, &f)| {
                        let f = f64::from(f);
                        f - err(i, f) <= t
                    })
                    .map(|(i, _)| {
                        Cand(
                            prox_kernels::canonical::score(metric, q, base.row(i)),
                            i as u32,
                        )
                    })
                    .collect();
                cands.sort_unstable();
                tick();
                cands.into_iter().take(k).map(|c| c.1).collect()
            },
        )
        .collect()
}

/// Recall@k of `found` against `truth`: |found[..k] ∩ truth[..k]| / k,
/// averaged over queries (a query with an empty truth row counts as 1).
pub fn recall_at(found: &[Vec<u32>], truth: &[Vec<u32>], k: usize) -> f64 {
    if found.is_empty() {
        return 0.0;
    }
    let mut total = 0.0;
    for (f, t) in found.iter().zip(truth) {
        let t = &t[..k.min(t.len())];
        if t.is_empty() {
            total += 1.0;
            continue;
        }
        let hit = f.iter().take(k).filter(|id| t.contains(id)).count();
        total += hit as f64 / t.len() as f64;
    }
    total / found.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> u64 {
        prox_testkit::seed(7)
    }

    #[test]
    fn generation_is_deterministic_across_thread_counts() {
        let s = seed();
        let spec = GmmSpec::new(500, 24, 20, s, Metric::L2);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| generate(&spec));
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
            .install(|| generate(&spec));
        assert_eq!(one.base, two.base, "seed {s}");
        assert_eq!(one.queries, two.queries, "seed {s}");
        let other = generate(&GmmSpec {
            seed: s + 1,
            ..spec
        });
        assert_ne!(one.base, other.base, "seed {s}");
    }

    #[test]
    fn unit_vectors_under_cosine() {
        let s = seed();
        let d = generate(&GmmSpec::new(200, 16, 5, s, Metric::Cosine));
        for row in d.base.rows() {
            let n: f64 = row.iter().map(|&x| f64::from(x).powi(2)).sum();
            assert!((n - 1.0).abs() < 1e-5, "seed {s}: norm² {n}");
        }
    }

    #[test]
    fn ground_truth_matches_a_full_sort() {
        let s = seed();
        for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
            let d = generate(&GmmSpec::new(300, 8, 10, s, metric));
            let gt = ground_truth(&d.base, &d.queries, metric, 10, &|| {});
            for (qi, q) in d.queries.rows().enumerate() {
                let mut all: Vec<Cand> = d
                    .base
                    .rows()
                    .enumerate()
                    .map(|(i, r)| Cand(prox_kernels::canonical::score(metric, q, r), i as u32))
                    .collect();
                all.sort();
                let want: Vec<u32> = all[..10].iter().map(|c| c.1).collect();
                assert_eq!(gt[qi], want, "seed {s} metric {metric} query {qi}");
            }
            assert_eq!(recall_at(&gt, &gt, 10), 1.0);
        }
    }

    #[test]
    fn rng_below_is_in_range_and_normal_is_centred() {
        let mut r = Rng::new(seed());
        let mut sum = 0.0;
        for _ in 0..10_000 {
            assert!(r.below(7) < 7);
            sum += r.normal();
        }
        assert!((sum / 10_000.0).abs() < 0.05, "mean {}", sum / 10_000.0);
    }
}
