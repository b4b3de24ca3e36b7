//! Public behaviour of prox-kernels: every available ISA against the scalar
//! reference over random inputs and awkward dimensions, plus known values
//! computed in f64.
//!
//! Randomness is seeded: `PROX_SEED=<u64>` replays a run; the seed is printed
//! in every failure message.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use prox_kernels::f32 as fk;
use prox_kernels::{available_isas, canonical, Isa, Metric, TopK};

const DEFAULT_SEED: u64 = 0x5EED_2026_0001;

/// Around every lane width in use (4 for NEON, 8 for AVX2/portable, 32 for
/// the 4x unrolled loops) plus the production dimensions.
const DIMS: &[usize] = &[
    0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 384, 768, 1536,
];

fn seed() -> u64 {
    prox_testkit::seed(DEFAULT_SEED)
}

/// Runs a seeded property; failures name the seed that replays them.
fn check<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let seed = seed();
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    if let Err(e) = runner.run(&strategy, test) {
        panic!("property {name} failed (replay with PROX_SEED={seed}): {e}");
    }
}

fn non_scalar_isas() -> Vec<Isa> {
    available_isas()
        .into_iter()
        .filter(|&i| i != Isa::Scalar)
        .collect()
}

fn pair(range: f32) -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    prop::sample::select(DIMS)
        .prop_flat_map(move |d| (vec(-range..range, d), vec(-range..range, d)))
}

/// A query, `n` rows and the dimension.
fn batch(range: f32) -> impl Strategy<Value = (Vec<f32>, Vec<f32>, usize)> {
    (prop::sample::select(DIMS), 0usize..6)
        .prop_flat_map(move |(d, n)| (vec(-range..range, d), vec(-range..range, d * n), Just(n)))
}

fn l2_mag(a: &[f32], b: &[f32]) -> f64 {
    canonical::l2sq(a, b)
}

fn dot_mag(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs())
        .sum()
}

fn close(got: f32, want: f32, magnitude: f64, what: &str) -> Result<(), TestCaseError> {
    let tol = f64::from(fk::F32_REL_TOL) * magnitude.max(f64::from(f32::MIN_POSITIVE));
    let diff = (f64::from(got) - f64::from(want)).abs();
    prop_assert!(
        diff <= tol,
        "{what}: got {got}, want {want}, |diff| {diff} > tol {tol}"
    );
    Ok(())
}

#[test]
fn f32_one_to_one_matches_scalar() {
    let isas = non_scalar_isas();
    check("f32_one_to_one", 96, pair(100.0), |(a, b)| {
        let l2 = fk::l2sq_with(Isa::Scalar, &a, &b).unwrap();
        let dt = fk::dot_with(Isa::Scalar, &a, &b).unwrap();
        let cs = fk::cosine_distance_with(Isa::Scalar, &a, &b).unwrap();
        let (lm, dm) = (l2_mag(&a, &b), dot_mag(&a, &b));
        let norm = (canonical::dot(&a, &a) * canonical::dot(&b, &b)).sqrt();
        let cm = if norm > 0.0 { dm / norm } else { 1.0 };
        for &isa in &isas {
            close(
                fk::l2sq_with(isa, &a, &b).unwrap(),
                l2,
                lm,
                &format!("l2sq {isa} d={}", a.len()),
            )?;
            close(
                fk::dot_with(isa, &a, &b).unwrap(),
                dt,
                dm,
                &format!("dot {isa} d={}", a.len()),
            )?;
            close(
                fk::cosine_distance_with(isa, &a, &b).unwrap(),
                cs,
                cm,
                &format!("cosine {isa} d={}", a.len()),
            )?;
        }
        Ok(())
    });
}

#[test]
fn f32_one_to_many_matches_one_to_one() {
    let isas = available_isas();
    check("f32_one_to_many", 64, batch(10.0), |(q, rows, n)| {
        let d = q.len();
        for &isa in &isas {
            let mut l2 = vec![f32::NAN; n];
            let mut dt = vec![f32::NAN; n];
            let mut cs = vec![f32::NAN; n];
            prop_assert!(fk::l2sq_many_with(isa, &q, &rows, &mut l2));
            prop_assert!(fk::dot_many_with(isa, &q, &rows, &mut dt));
            prop_assert!(fk::cosine_many_with(isa, &q, &rows, &mut cs));
            for i in 0..n {
                let r = &rows[i * d..(i + 1) * d];
                let what = format!("{isa} d={d} row {i}");
                close(
                    l2[i],
                    fk::l2sq_with(Isa::Scalar, &q, r).unwrap(),
                    l2_mag(&q, r),
                    &what,
                )?;
                close(
                    dt[i],
                    fk::dot_with(Isa::Scalar, &q, r).unwrap(),
                    dot_mag(&q, r),
                    &what,
                )?;
                close(
                    cs[i],
                    fk::cosine_distance_with(Isa::Scalar, &q, r).unwrap(),
                    1.0,
                    &what,
                )?;
                for m in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
                    let mut s = vec![0.0f32; n];
                    prop_assert!(fk::score_many_with(isa, m, &q, &rows, &mut s));
                    let one = fk::score_with(isa, m, &q, r).unwrap();
                    let mag = if m == Metric::L2 {
                        l2_mag(&q, r)
                    } else {
                        dot_mag(&q, r)
                    };
                    close(s[i], one, mag, &format!("score {m} {what}"))?;
                }
            }
        }
        Ok(())
    });
}

#[test]
fn f32_known_values_against_f64() {
    // Exactly representable inputs: every ISA must get the exact answers.
    let a: Vec<f32> = (0..100).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..100).map(|i| (i % 5) as f32 * 0.5).collect();
    let l2 = canonical::l2sq(&a, &b) as f32;
    let dt = canonical::dot(&a, &b) as f32;
    for isa in available_isas() {
        assert_eq!(fk::l2sq_with(isa, &a, &b), Some(l2), "{isa}");
        assert_eq!(fk::dot_with(isa, &a, &b), Some(dt), "{isa}");
        assert_eq!(fk::score_with(isa, Metric::InnerProduct, &a, &b), Some(-dt));
        assert_eq!(
            fk::cosine_distance_with(isa, &[1.0, 0.0], &[0.0, 1.0]),
            Some(1.0)
        );
        assert_eq!(
            fk::cosine_distance_with(isa, &[2.0, 0.0], &[-3.0, 0.0]),
            Some(2.0)
        );
        assert_eq!(
            fk::cosine_distance_with(isa, &[0.0, 0.0], &[1.0, 1.0]),
            Some(1.0)
        );
    }
    // Inexact inputs: within the documented tolerance of the f64 value.
    let a: Vec<f32> = (0..1536).map(|i| ((i as f32) * 0.37).sin()).collect();
    let b: Vec<f32> = (0..1536).map(|i| ((i as f32) * 0.11).cos()).collect();
    let want_l2 = canonical::l2sq(&a, &b);
    let want_dot = canonical::dot(&a, &b);
    let want_cos = 1.0 - want_dot / (canonical::dot(&a, &a) * canonical::dot(&b, &b)).sqrt();
    for isa in available_isas() {
        let tol = f64::from(fk::F32_REL_TOL);
        let got = f64::from(fk::l2sq_with(isa, &a, &b).unwrap());
        assert!(
            (got - want_l2).abs() <= tol * want_l2,
            "{isa} l2 {got} vs {want_l2}"
        );
        let got = f64::from(fk::dot_with(isa, &a, &b).unwrap());
        assert!(
            (got - want_dot).abs() <= tol * dot_mag(&a, &b),
            "{isa} dot {got} vs {want_dot}"
        );
        let got = f64::from(fk::cosine_distance_with(isa, &a, &b).unwrap());
        assert!(
            (got - want_cos).abs() <= tol,
            "{isa} cos {got} vs {want_cos}"
        );
    }
}

#[test]
fn dispatched_isa_is_available_and_respects_env() {
    let chosen = prox_kernels::isa();
    assert!(chosen.is_available());
    match prox_kernels::requested_isa() {
        Ok(Some(forced)) => {
            assert_eq!(chosen, forced);
            assert_eq!(prox_kernels::try_isa(), Ok(forced));
        }
        Ok(None) => assert_eq!(chosen, prox_kernels::best_isa()),
        // An unknown or unavailable override: `isa()` warned and fell back,
        // `try_isa()` reports the error.
        Err(e) => {
            assert_eq!(chosen, prox_kernels::best_isa());
            assert_eq!(prox_kernels::try_isa(), Err(e));
        }
    }
}

#[test]
fn topk_matches_full_sort() {
    let strategy = (0usize..20, vec((0u8..16, 0u32..64), 0..200));
    check("topk", 128, strategy, |(k, cands)| {
        let mut t = TopK::new(k);
        for &(s, id) in &cands {
            t.push(f32::from(s) * 0.25, id);
        }
        let mut all: Vec<(f32, u32)> = cands
            .iter()
            .map(|&(s, id)| (f32::from(s) * 0.25, id))
            .collect();
        all.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        all.truncate(k);
        let thr = t.threshold();
        let got = t.into_sorted_vec();
        if k > 0 && got.len() == k {
            prop_assert_eq!(thr, got[k - 1].0);
        }
        prop_assert_eq!(got, all);
        Ok(())
    });
}

// ------------------------------------------------------------------ SQ8

use prox_kernels::sq8::{self, Quantizer};

/// dim ≥ 1, a group size, training/scan rows, and a query.
fn sq8_case() -> impl Strategy<Value = (Quantizer, Vec<f32>, Vec<f32>, usize)> {
    (
        prop::sample::select(&DIMS[1..]),
        0usize..6,
        prop::sample::select(&[1usize, 3, 8, 16, 32, 4096][..]),
    )
        .prop_flat_map(|(d, n, g)| {
            (
                vec(-50.0f32..50.0, d * n),
                vec(-50.0f32..50.0, d),
                Just((d, n, g.min(d))),
            )
        })
        .prop_map(|(rows, q, (d, n, g))| {
            let quant = Quantizer::fit(d, g, &rows).expect("valid parameters");
            (quant, rows, q, n)
        })
}

#[test]
fn sq8_asymmetric_matches_scalar() {
    let isas = non_scalar_isas();
    check("sq8_asymmetric", 64, sq8_case(), |(quant, rows, q, n)| {
        let d = quant.dim();
        let codes = quant.encode_many(&rows);
        let query = quant.query(&q);
        let mut recon = vec![0.0f32; d];
        for isa in &isas {
            let mut l2 = vec![f32::NAN; n];
            let mut dt = vec![f32::NAN; n];
            prop_assert!(query.l2sq_many_with(*isa, &codes, &mut l2));
            prop_assert!(query.dot_many_with(*isa, &codes, &mut dt));
            for i in 0..n {
                let c = &codes[i * d..(i + 1) * d];
                quant.decode(c, &mut recon);
                let what = format!("sq8 {isa} d={d} g={} row {i}", quant.group_size());
                let want_l2 = query.l2sq_with(Isa::Scalar, c).unwrap();
                let want_dt = query.dot_with(Isa::Scalar, c).unwrap();
                close(
                    query.l2sq_with(*isa, c).unwrap(),
                    want_l2,
                    l2_mag(&q, &recon),
                    &what,
                )?;
                close(
                    query.dot_with(*isa, c).unwrap(),
                    want_dt,
                    dot_mag(&q, &recon),
                    &what,
                )?;
                close(l2[i], want_l2, l2_mag(&q, &recon), &what)?;
                close(dt[i], want_dt, dot_mag(&q, &recon), &what)?;
            }
        }
        // The scalar reference itself agrees with f64 math on the decoded rows.
        for i in 0..n {
            let c = &codes[i * d..(i + 1) * d];
            quant.decode(c, &mut recon);
            let what = format!("sq8 scalar vs f64 d={d} row {i}");
            close(
                query.l2sq_with(Isa::Scalar, c).unwrap(),
                canonical::l2sq(&q, &recon) as f32,
                l2_mag(&q, &recon),
                &what,
            )?;
            close(
                query.dot_with(Isa::Scalar, c).unwrap(),
                canonical::dot(&q, &recon) as f32,
                dot_mag(&q, &recon),
                &what,
            )?;
        }
        Ok(())
    });
}

#[test]
fn sq8_integer_dot_is_bit_exact() {
    let isas = available_isas();
    let strategy = (prop::sample::select(DIMS), 0usize..5)
        .prop_flat_map(|(d, n)| (vec(any::<i8>(), d), vec(any::<i8>(), d * n), Just(n)));
    check("sq8_dot_i8", 96, strategy, |(q, rows, n)| {
        let d = q.len();
        for i in 0..n {
            let r = &rows[i * d..(i + 1) * d];
            let exact: i64 = q
                .iter()
                .zip(r)
                .map(|(&a, &b)| i64::from(a) * i64::from(b))
                .sum();
            for &isa in &isas {
                prop_assert_eq!(
                    sq8::dot_i8_with(isa, &q, r),
                    Some(exact as i32),
                    "{} d={}",
                    isa,
                    d
                );
            }
        }
        for &isa in &isas {
            let mut out = vec![0i32; n];
            prop_assert!(sq8::dot_i8_many_with(isa, &q, &rows, &mut out));
            for (i, &o) in out.iter().enumerate() {
                prop_assert_eq!(
                    o,
                    sq8::dot_i8_with(Isa::Scalar, &q, &rows[i * d..(i + 1) * d]).unwrap()
                );
            }
        }
        Ok(())
    });
}

#[test]
fn sq8_integer_dot_wraps_identically_past_the_bound() {
    // 140_000 · 128² = 2_293_760_000 > i32::MAX: the documented mod-2^32 result.
    let a = vec![-128i8; 140_000];
    let want = (140_000i64 * 16_384) as i32;
    for isa in available_isas() {
        assert_eq!(sq8::dot_i8_with(isa, &a, &a), Some(want), "{isa}");
    }
}

#[test]
fn sq8_fit_matches_python_model() {
    // Generated with /work/shared/tools/prox_fixture_check.py `sq8_build`
    // (dims 5, group 2) on these f32 vectors.
    let v: [f32; 15] = [
        0.1, -0.25, 3.3, 1e-3, -7.77, 0.05, 0.3, -3.31, 0.0, 2.0, -0.1, 0.125, 1.0, -2e-3, 7.0,
    ];
    let q = Quantizer::fit(5, 2, &v).unwrap();
    let bits: Vec<u32> = q.scales().iter().map(|s| s.to_bits()).collect();
    assert_eq!(bits, vec![0x3b1a_cf38, 0x3cd5_820e, 0x3d7a_9909]);
    let codes = q.encode_many(&v);
    assert_eq!(
        codes,
        vec![42, -106, 127, 0, -127, 21, 127, -127, 0, 33, -42, 53, 38, 0, 114]
    );
    assert_eq!(q.max_error(&v, &codes).to_bits(), 0x3ccf_b400);
}

// ------------------------------------------------------------------ PQ

use prox_kernels::pq::{self, AdcTable, Codebooks};

/// Codebooks (dim, m, k), a query, and `n` code rows (some bytes may be ≥ k).
fn pq_case() -> impl Strategy<Value = (Codebooks, Vec<f32>, Vec<u8>, usize)> {
    (
        prop::sample::select(&DIMS[1..]),
        1usize..17,
        1usize..=256,
        0usize..40,
    )
        .prop_flat_map(|(d, m, k, n)| {
            let m = m.min(d);
            (
                vec(-10.0f32..10.0, k * d),
                vec(-10.0f32..10.0, d),
                vec(any::<u8>(), m * n),
                Just((d, m, k, n)),
            )
        })
        .prop_map(|(data, q, codes, (d, m, k, n))| {
            (
                Codebooks::new(d, m, k, data).expect("valid codebooks"),
                q,
                codes,
                n,
            )
        })
}

#[test]
fn pq_scan_is_bit_exact_across_isas() {
    let isas = available_isas();
    check("pq_scan", 48, pq_case(), |(cb, q, codes, n)| {
        for table in [
            pq::adc_table_l2(&q, &cb),
            pq::adc_table_dot(&q, &cb),
            AdcTable::for_metric(Metric::Cosine, &q, &cb),
        ] {
            let want: Vec<f32> = codes
                .chunks_exact(cb.m())
                .map(|c| table.distance(c))
                .collect();
            for &isa in &isas {
                let mut out = vec![f32::NAN; n];
                prop_assert!(pq::adc_scan_with(isa, &table, &codes, &mut out));
                let got: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
                let exp: Vec<u32> = want.iter().map(|x| x.to_bits()).collect();
                prop_assert_eq!(got, exp, "{} d={} m={} k={}", isa, cb.dim(), cb.m(), cb.k());
            }
        }
        Ok(())
    });
}

#[test]
fn pq_adc_equals_distance_to_reconstruction() {
    check("pq_adc_vs_decode", 48, pq_case(), |(cb, q, codes, _n)| {
        let l2 = pq::adc_table_l2(&q, &cb);
        let dt = pq::adc_table_dot(&q, &cb);
        let mut recon = vec![0.0f32; cb.dim()];
        for code in codes.chunks_exact(cb.m()) {
            if code.iter().any(|&c| usize::from(c) >= cb.k()) {
                prop_assert_eq!(l2.distance(code), f32::INFINITY);
                continue;
            }
            cb.decode(code, &mut recon);
            let what = format!("pq d={} m={} k={}", cb.dim(), cb.m(), cb.k());
            close(
                l2.distance(code),
                canonical::l2sq(&q, &recon) as f32,
                l2_mag(&q, &recon),
                &what,
            )?;
            close(
                dt.distance(code),
                canonical::dot(&q, &recon) as f32,
                dot_mag(&q, &recon),
                &what,
            )?;
        }
        Ok(())
    });
}

// ---- 4-bit PQ fast-scan -------------------------------------------------

use prox_kernels::pq::fastscan::{self, Lut};

/// `(m, rows, codes, table)`: awkward `m` (odd, 1, lane ± 1, the 256 limit)
/// and row counts around the 32-row block.
fn fastscan_case() -> impl Strategy<Value = (usize, usize, Vec<u8>, Vec<f32>)> {
    (
        prop::sample::select(
            &[
                1usize, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 64, 96, 192, 255, 256,
            ][..],
        ),
        prop::sample::select(&[0usize, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100][..]),
    )
        .prop_flat_map(|(m, n)| {
            (
                Just(m),
                Just(n),
                vec(0u8..16, m * n),
                vec(
                    prop_oneof![9 => -50f32..50.0, 1 => Just(f32::INFINITY)],
                    16 * m,
                ),
            )
        })
}

#[test]
fn fastscan_is_bit_exact_on_every_isa() {
    check(
        "fastscan_vs_scalar_model",
        96,
        fastscan_case(),
        |(m, n, codes, table)| {
            let lut =
                Lut::quantize(m, &table, 0.5).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut blocks = Vec::new();
            fastscan::pack(&codes, m, &mut blocks)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let nb = n.div_ceil(fastscan::BLOCK);
            prop_assert_eq!(blocks.len(), nb * fastscan::block_bytes(m));
            // The model: unpacked codes, entries summed in u32.
            let e = lut.entries();
            let want: Vec<u32> = codes
                .chunks_exact(m)
                .map(|c| {
                    c.iter()
                        .enumerate()
                        .map(|(s, &x)| u32::from(e[16 * s + usize::from(x)]))
                        .sum()
                })
                .collect();
            for isa in available_isas() {
                let mut out = vec![0u16; nb * fastscan::BLOCK];
                prop_assert!(fastscan::scan_with(isa, &lut, &blocks, &mut out));
                for (r, w) in want.iter().enumerate() {
                    prop_assert_eq!(u32::from(out[r]), *w, "{} m {} row {}", isa, m, r);
                }
                // Every row's approximate distance is within m/2 steps of the
                // f32 table sum (rounding error at most half a step per entry).
                for (r, c) in codes.chunks_exact(m).enumerate() {
                    let exact: f32 = 0.5
                        + c.iter()
                            .enumerate()
                            .map(|(s, &x)| table[16 * s + usize::from(x)])
                            .sum::<f32>();
                    if exact.is_finite() {
                        let approx = lut.distance(out[r]);
                        let tol =
                            lut.scale() * (m as f32 * 0.5 + 1.0) + 1e-3 * exact.abs().max(1.0);
                        prop_assert!(
                            (approx - exact).abs() <= tol,
                            "{} vs {} (tol {})",
                            approx,
                            exact,
                            tol
                        );
                    }
                }
            }
            Ok(())
        },
    );
}

#[test]
fn fastscan_max_sum_does_not_overflow() {
    // m = 256 with every entry quantised to 255: sums of 65 280.
    let m = fastscan::MAX_SUBSPACES;
    let mut table = vec![0f32; 16 * m];
    for row in table.chunks_exact_mut(16) {
        row[15] = 1.0;
    }
    let lut = Lut::quantize(m, &table, 0.0).unwrap();
    let codes = vec![15u8; 32 * m];
    let mut blocks = Vec::new();
    fastscan::pack(&codes, m, &mut blocks).unwrap();
    for isa in available_isas() {
        let mut out = vec![0u16; 32];
        assert!(fastscan::scan_with(isa, &lut, &blocks, &mut out));
        assert!(out.iter().all(|&x| x == 65_280), "{isa}: {out:?}");
    }
}
