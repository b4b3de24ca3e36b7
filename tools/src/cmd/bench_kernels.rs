//! `prox bench kernels`: one query against `n` contiguous rows (one-to-many)
//! for every fast kernel and every available ISA, side by side.
//!
//! Data is seeded (xorshift64*, `--seed`), rows are standard-normal-ish f32
//! (sum of uniforms). Each measurement repeats the scan until `--min-secs`
//! have passed (at least 3 times) and keeps the fastest repetition.
//! `ns_per_vector` = best time / n; `gb_per_s` counts the row bytes read
//! (4·d for f32, d for SQ8, m = d/16 for PQ codes).

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prox_kernels::pq::{self, Codebooks};
use prox_kernels::sq8::{self, Quantizer};
use prox_kernels::{f32 as fk, Isa};

/// Arguments of `prox bench kernels`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchKernelsArgs {
    /// Rows scanned per query.
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    /// Comma-separated dimensions.
    #[arg(long, default_value = "128,384,768,1536")]
    pub dims: String,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only this ISA (scalar|portable|avx2|neon); default: every available one.
    #[arg(long)]
    pub isa: Option<String>,
    /// Only kernels whose name contains this string (e.g. `f32_`, `sq8`).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Minimum measuring time per (kernel, isa, dim).
    #[arg(long, default_value_t = 0.3)]
    pub min_secs: f64,
}

/// Example invocations for `--help`.
pub const EXAMPLES: &str = "\
Examples:
  prox bench kernels --json
  prox bench kernels --dims 384 --isa avx2 --kernel f32_";

/// xorshift64* generator: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Roughly N(0, 1): sum of four uniforms, centred and scaled.
    fn normal(&mut self) -> f32 {
        let mut s = 0.0f32;
        for _ in 0..4 {
            s += (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        }
        (s - 2.0) * 1.732
    }

    fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.normal()).collect()
    }
}

/// One result line.
struct Record {
    kernel: &'static str,
    isa: Isa,
    dim: usize,
    n: usize,
    ns_per_vector: f64,
    gb_per_s: f64,
}

/// Best-of-repetitions time of `f`.
fn measure(min: Duration, mut f: impl FnMut()) -> Duration {
    f(); // warm-up (page faults, caches, frequency)
    let start = Instant::now();
    let mut best = Duration::MAX;
    let mut reps = 0;
    while reps < 3 || start.elapsed() < min {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
        reps += 1;
    }
    best
}

fn parse_dims(s: &str) -> Result<Vec<usize>> {
    let dims: Vec<usize> = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.trim()
                .parse::<usize>()
                .with_context(|| format!("bad dimension {p:?}"))
        })
        .collect::<Result<_>>()?;
    if dims.is_empty() || dims.contains(&0) {
        bail!("--dims needs positive dimensions, got {s:?}");
    }
    Ok(dims)
}

fn isas(choice: Option<&str>) -> Result<Vec<Isa>> {
    match choice {
        None | Some("all") => Ok(prox_kernels::available_isas()),
        Some(name) => {
            let isa: Isa = name.parse()?;
            if !isa.is_available() {
                bail!(prox_kernels::IsaError::Unavailable {
                    requested: isa,
                    available: prox_kernels::available_isas(),
                });
            }
            Ok(vec![isa])
        }
    }
}

/// Runs the benchmark and prints one line per (kernel, isa, dim).
pub fn run(args: &BenchKernelsArgs) -> Result<()> {
    // Fail loudly on a bad PROX_ISA instead of falling back.
    prox_kernels::try_isa()?;
    let dims = parse_dims(&args.dims)?;
    let isas = isas(args.isa.as_deref())?;
    if args.n == 0 {
        bail!("--n must be positive");
    }
    if !args.min_secs.is_finite() || args.min_secs < 0.0 {
        bail!("--min-secs must be a non-negative number");
    }
    let min = Duration::from_secs_f64(args.min_secs);
    let n = args.n;
    let wanted = |k: &str| args.kernel.as_deref().is_none_or(|f| k.contains(f));
    if !args.json {
        println!(
            "{:<12} {:<9} {:>5} {:>8} {:>14} {:>9}",
            "kernel", "isa", "dim", "n", "ns/vector", "GB/s"
        );
    }
    for &d in &dims {
        let mut rng = Rng::new(args.seed ^ d as u64);
        let rows = rng.vec(n.checked_mul(d).context("n * dim overflows")?);
        let q = rng.vec(d);
        let mut out = vec![0.0f32; n];
        let mut out_i = vec![0i32; n];
        let emit = |rec: Record| -> Result<()> {
            if args.json {
                let line = serde_json::json!({
                    "kernel": rec.kernel,
                    "isa": rec.isa.name(),
                    "dim": rec.dim,
                    "n": rec.n,
                    "ns_per_vector": (rec.ns_per_vector * 1000.0).round() / 1000.0,
                    "gb_per_s": (rec.gb_per_s * 1000.0).round() / 1000.0,
                });
                println!("{line}");
            } else {
                println!(
                    "{:<12} {:<9} {:>5} {:>8} {:>14.3} {:>9.2}",
                    rec.kernel,
                    rec.isa.name(),
                    rec.dim,
                    rec.n,
                    rec.ns_per_vector,
                    rec.gb_per_s
                );
            }
            Ok(())
        };
        let record = |kernel: &'static str, isa: Isa, row_bytes: usize, t: Duration| {
            let secs = t.as_secs_f64().max(1e-12);
            emit(Record {
                kernel,
                isa,
                dim: d,
                n,
                ns_per_vector: secs * 1e9 / n as f64,
                gb_per_s: (n * row_bytes) as f64 / secs / 1e9,
            })
        };

        // f32 one-to-many.
        type F32Many = fn(Isa, &[f32], &[f32], &mut [f32]) -> bool;
        let f32_kernels: [(&'static str, F32Many); 3] = [
            ("f32_l2sq", fk::l2sq_many_with),
            ("f32_dot", fk::dot_many_with),
            ("f32_cosine", fk::cosine_many_with),
        ];
        for (name, kernel) in f32_kernels {
            if !wanted(name) {
                continue;
            }
            for &isa in &isas {
                let t = measure(min, || {
                    kernel(isa, black_box(&q), black_box(&rows), &mut out);
                    black_box(&out);
                });
                record(name, isa, 4 * d, t)?;
            }
        }

        // SQ8: group size 32 (capped at d), asymmetric f32 query and i8·i8.
        if wanted("sq8") {
            let quant = Quantizer::fit(d, 32.min(d), &rows)?;
            let codes = quant.encode_many(&rows);
            let query = quant.query(&q);
            let qcodes = quant.encode_many(&q);
            for &isa in &isas {
                if wanted("sq8_l2sq") {
                    let t = measure(min, || {
                        query.l2sq_many_with(isa, black_box(&codes), &mut out);
                        black_box(&out);
                    });
                    record("sq8_l2sq", isa, d, t)?;
                }
                if wanted("sq8_dot") {
                    let t = measure(min, || {
                        query.dot_many_with(isa, black_box(&codes), &mut out);
                        black_box(&out);
                    });
                    record("sq8_dot", isa, d, t)?;
                }
                if wanted("sq8_dot_i8") {
                    let t = measure(min, || {
                        sq8::dot_i8_many_with(
                            isa,
                            black_box(&qcodes),
                            black_box(&codes),
                            &mut out_i,
                        );
                        black_box(&out_i);
                    });
                    record("sq8_dot_i8", isa, d, t)?;
                }
            }
        }

        // PQ: m = d/16 subspaces (at least 1) of 256 centroids; codes are
        // random bytes, since the scan cost does not depend on their values.
        if wanted("pq_adc") {
            let m = (d / 16).max(1);
            let cb = Codebooks::new(d, m, 256, rng.vec(256 * d))?;
            let codes: Vec<u8> = (0..n * m).map(|_| rng.next_u64() as u8).collect();
            let table = pq::adc_table_l2(&q, &cb);
            for &isa in &isas {
                let t = measure(min, || {
                    pq::adc_scan_with(isa, black_box(&table), black_box(&codes), &mut out);
                    black_box(&out);
                });
                record("pq_adc", isa, m, t)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dims_and_rejects_zero() {
        assert_eq!(parse_dims("128, 384").unwrap(), vec![128, 384]);
        assert!(parse_dims("0").is_err());
        assert!(parse_dims("x").is_err());
        assert!(parse_dims("").is_err());
    }

    #[test]
    fn tiny_run_succeeds() {
        let args = BenchKernelsArgs {
            n: 17,
            dims: "9".into(),
            json: true,
            isa: Some("scalar".into()),
            kernel: None,
            seed: 1,
            min_secs: 0.0,
        };
        run(&args).unwrap();
        assert!(isas(Some("sse9")).is_err());
    }
}
