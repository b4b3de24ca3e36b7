//! The readers against `str::parse` and serde_json, and each other.

use super::number::{eight_digits, number_f32, short_digits, token_f32};
use super::request::{parse_checked, parse_fast, Want};
use super::*;
use proptest::prelude::*;
use prox_engine::index::{QueryMode, Request};
use prox_engine::keys::Filter;
use prox_testkit::{seed, SplitMix64};
use serde_json::Value;

const L: Limits = Limits {
    max_k: 100,
    max_batch: 4,
};

fn field_of(r: Result<(Vec<f32>, Request), ApiError>) -> String {
    r.unwrap_err().field.unwrap()
}

#[test]
fn parses_a_full_request() {
    let body = br#"{"vector":[1,2.5],"k":3,"mode":"exact","ef":40,
        "filter":{"keys":["0b","0a","0b"]},"with_values":true}"#;
    let (v, q) = search_request(body, 2, L).unwrap();
    assert_eq!(v, vec![1.0, 2.5]);
    assert_eq!(
        (q.k, q.mode, q.ef, q.with_values),
        (3, QueryMode::Exact, Some(40), true)
    );
    assert_eq!(
        q.filter,
        Some(Filter::Keys(vec![vec![0x0a], vec![0x0b]].into()))
    );
    let (_, q) =
        search_request(br#"{"vector":[0,0],"filter":{"range":["00",null]}}"#, 2, L).unwrap();
    assert_eq!(
        q.filter,
        Some(Filter::Range {
            start: vec![0],
            end: None
        })
    );
}

#[test]
fn parses_budget_rerank_nprobe_and_vectors() {
    let body = br#"{"vector":[1,2],"budget":500,"rerank":4,"nprobe":12,"path":"native",
        "with_vectors":true,"ef":null}"#;
    let (_, q) = search_request(body, 2, L).unwrap();
    assert_eq!(
        (
            q.budget,
            q.rerank,
            q.nprobe,
            q.ef,
            q.with_vectors,
            q.with_values
        ),
        (Some(500), Some(4), Some(12), None, true, false)
    );
    let f = |b: &[u8]| field_of(search_request(b, 2, L));
    assert_eq!(f(br#"{"vector":[1,2],"budget":0}"#), "budget");
    assert_eq!(f(br#"{"vector":[1,2],"rerank":-1}"#), "rerank");
    assert_eq!(f(br#"{"vector":[1,2],"nprobe":"8"}"#), "nprobe");
    assert_eq!(f(br#"{"vector":[1,2],"with_vectors":1}"#), "with_vectors");
}

#[test]
fn names_the_field_at_fault() {
    let f = |b: &[u8]| field_of(search_request(b, 2, L));
    assert_eq!(f(b"{"), "body");
    assert_eq!(f(b"[1]"), "body");
    assert_eq!(f(br#"{"k":1}"#), "vector");
    assert_eq!(f(br#"{"vector":[1]}"#), "vector");
    assert_eq!(f(br#"{"vector":[1,"x"]}"#), "vector");
    assert_eq!(f(br#"{"vector":[1,1e39]}"#), "vector");
    assert_eq!(f(br#"{"vector":[1,2],"k":0}"#), "k");
    assert_eq!(f(br#"{"vector":[1,2],"k":101}"#), "k");
    assert_eq!(f(br#"{"vector":[1,2],"k":-1}"#), "k");
    assert_eq!(f(br#"{"vector":[1,2],"mode":"slow"}"#), "mode");
    assert_eq!(f(br#"{"vector":[1,2],"path":"x"}"#), "path");
    assert_eq!(f(br#"{"vector":[1,2],"ef":0}"#), "ef");
    assert_eq!(
        f(br#"{"vector":[1,2],"filter":{"prefix":"zz"}}"#),
        "filter.prefix"
    );
    assert_eq!(f(br#"{"vector":[1,2],"filter":{"a":1,"b":2}}"#), "filter");
    assert_eq!(f(br#"{"vector":[1,2],"with_values":1}"#), "with_values");
    assert_eq!(f(br#"{"vector":[1,2],"kk":1}"#), "kk");
    let b = batch_request(br#"{"vectors":[[1,2],[3]]}"#, 2, L).unwrap_err();
    assert_eq!(b.field.as_deref(), Some("vectors[1]"));
    let b = batch_request(br#"{"vectors":[]}"#, 2, L).unwrap_err();
    assert_eq!(b.field.as_deref(), Some("vectors"));
    let b = batch_request(br#"{"vectors":[[1,2],[1,2],[1,2],[1,2],[1,2]]}"#, 2, L);
    assert_eq!(b.unwrap_err().field.as_deref(), Some("vectors"));
}

/// The references for one body's vector: each component through
/// `str::parse::<f32>`, and the whole array through serde_json into
/// `Vec<f32>` (`float_roundtrip`); they must agree with each other.
fn reference(body: &str) -> Vec<u32> {
    let v: Value = serde_json::from_str(body).unwrap();
    let text = v["vector"].to_string();
    let inner = body
        .split_once('[')
        .and_then(|(_, r)| r.split_once(']'))
        .unwrap()
        .0;
    let by_str: Vec<u32> = inner
        .split(',')
        .map(|t| t.trim().parse::<f32>().unwrap().to_bits())
        .collect();
    let raw = &body[body.find('[').unwrap()..=body.find(']').unwrap()];
    let by_serde: Vec<f32> = serde_json::from_str(raw).unwrap();
    let by_serde: Vec<u32> = by_serde.iter().map(|f| f.to_bits()).collect();
    assert_eq!(by_str, by_serde, "references disagree for {text}");
    by_str
}

fn parsed_bits(body: &str, dims: usize) -> Vec<u32> {
    let (v, _) =
        search_request(body.as_bytes(), dims, L).unwrap_or_else(|e| panic!("{e:?} for {body}"));
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn vector_parse_equals_str_parse_and_serde_f32_bit_for_bit() {
    let seed = seed(0x5eed_0008);
    let mut rng = SplitMix64::new(seed);
    let mut next = move || rng.next();
    for round in 0..400 {
        let dims = 1 + (next() % 64) as usize;
        let parts: Vec<String> = (0..dims)
            .map(|_| {
                let r = next();
                let f = f64::from_bits(r);
                let h = f32::from_bits(r as u32);
                let g = (r as i64 as f64) / (1u64 << (r % 60)) as f64;
                match r % 9 {
                    0 => format!("{}", g as f32),
                    1 => format!("{g}"),
                    2 => format!("{g:.25e}"),
                    3 => format!("{}", (r % 1000) as i64 - 500),
                    4 if f.abs() < 3.4e38 => format!("{f:e}"),
                    // Every finite f32 bit pattern, shortest and long forms
                    // (subnormals included).
                    5 if h.is_finite() => format!("{h:e}"),
                    6 if h.is_finite() => format!("{:.40e}", h as f64),
                    // Exact f32 midpoints, nudged by less than an f64 ulp.
                    7 if h.is_finite() && h != f32::MAX => {
                        let mid = (h as f64 + h.next_up() as f64) / 2.0;
                        format!("{:.30e}", mid)
                    }
                    _ => format!("{:.17}", g / 3.0),
                }
            })
            .collect();
        let sep = [",", " , ", ",\n", "\t,"][(next() % 4) as usize];
        let body = format!(r#"{{"vector":[ {} ],"k":3}}"#, parts.join(sep));
        assert_eq!(
            parsed_bits(&body, dims),
            reference(&body),
            "seed {seed} round {round}: {body}"
        );
    }
}

#[test]
fn vector_parse_edge_cases() {
    for t in [
        "0",
        "-0",
        "0.0",
        "-0.0",
        "0e0",
        "0E+5",
        "1E+5",
        "1e-5",
        "-1.5e-3",
        "3.4028235e38",
        "-3.4028235e38",
        "3.40282356779733661637539395458142568447e38",
        "1e-45",
        "1.4e-45",
        "7e-46",
        "7.006492321624085e-46",
        "1e-50",
        "1.17549435e-38",
        "1.1754942e-38",
        "123456789012345678901234567890",
        "0.000000000000000000000000000000000000000001",
        "16777217",
        "-16777217",
        "1.00000005960464477539062500000000001",
    ] {
        let body = format!(r#"{{"vector":[{t}]}}"#);
        assert_eq!(parsed_bits(&body, 1), reference(&body), "{t}");
    }
    // 1 + 2^-24 + 2^-60: just above the midpoint between 1 and the next
    // f32. Rounding to f64 first lands exactly on the midpoint and then
    // ties to even (1.0); the correctly rounded f32 is the next one up.
    let body = r#"{"vector":[1.000000059604644776257986737988403547205962240695953369140625]}"#;
    assert_eq!(parsed_bits(body, 1), vec![1f32.next_up().to_bits()]);
    assert_eq!(parsed_bits(body, 1), reference(body));
    // Beyond f32's range (rounds to infinity): not finite, with the text.
    for t in ["3.40282357e38", "1e39", "-1e300", "1e400"] {
        let e = search_request(format!(r#"{{"vector":[0,{t}]}}"#).as_bytes(), 2, L).unwrap_err();
        assert_eq!(e.code, "not_finite", "{t}");
        assert!(e.message.contains(t), "{t}: {}", e.message);
    }
    // Whitespace everywhere the grammar allows it.
    let (v, _) = search_request(b" { \"vector\" :\n[ 1 ,\t2 ] , \"k\" : 1 } ", 2, L).unwrap();
    assert_eq!(v, vec![1.0, 2.0]);
    // Non-numbers anywhere are named by position, after the length check.
    for (body, msg) in [
        (
            r#"{"vector":[1,"a\"],[",3]}"#,
            "component 1 is not a number",
        ),
        (
            r#"{"vector":[1,{"a":[1,2]},3]}"#,
            "component 1 is not a number",
        ),
        (r#"{"vector":[1,2,null]}"#, "component 2 is not a number"),
        (r#"{"vector":[[1],2,true]}"#, "component 0 is not a number"),
        (r#"{"vector":[1,"x",2,3]}"#, "has 4 components"),
        (r#"{"vector":[]}"#, "has 0 components"),
    ] {
        let e = search_request(body.as_bytes(), 3, L).unwrap_err();
        assert!(e.message.contains(msg), "{body}: {}", e.message);
        assert_eq!(e.field.as_deref(), Some("vector"), "{body}");
    }
    let e = search_request(br#"{"vector":"[1,2]"}"#, 2, L).unwrap_err();
    assert_eq!(e.message, "must be an array of numbers");
}

/// Reads `body` with both readers; whenever the single-pass one answers,
/// the checked one must give the same vectors (bit for bit), options
/// and errors. Returns whether the single-pass reader answered.
fn readers_agree(body: &[u8], want: Want) -> bool {
    let mut fast = Vec::new();
    let Some(f) = parse_fast(body, want, L, &mut fast) else {
        return false;
    };
    let mut checked = Vec::new();
    let c = parse_checked(body, want, L, &mut checked);
    let text = String::from_utf8_lossy(body);
    assert_eq!(f, c, "{text}");
    if f.is_ok() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fast), bits(&checked), "{text}");
    }
    true
}

/// A decimal that is one JSON number: sign, integer part, optional
/// fraction and exponent, up to 30 significant digits.
fn decimal() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop_oneof![Just("0".to_string()), "[1-9][0-9]{0,24}"],
        proptest::option::of("[0-9]{1,30}"),
        proptest::option::of((
            prop_oneof![Just("e"), Just("E")],
            prop_oneof![Just(""), Just("+"), Just("-")],
            0u32..70,
        )),
    )
        .prop_map(|(neg, int, frac, exp)| {
            let mut s = String::new();
            if neg {
                s.push('-');
            }
            s.push_str(&int);
            if let Some(f) = frac {
                s.push('.');
                s.push_str(&f);
            }
            if let Some((e, sign, x)) = exp {
                s.push_str(&format!("{e}{sign}{x}"));
            }
            s
        })
}

/// Every way an f32 (or a point near an f32 midpoint) is printed.
fn printed_f32() -> impl Strategy<Value = String> {
    (any::<u32>(), 0u8..7, 6usize..19).prop_map(|(bits, how, digits)| {
        let h = f32::from_bits(bits);
        let h = if h.is_finite() { h } else { 1.5 };
        let mid = (h as f64 + h.next_up() as f64) / 2.0;
        match how {
            0 => format!("{h}"),
            1 => format!("{h:e}"),
            2 => serde_json::to_string(&h).unwrap(),
            3 => format!("{:.*e}", digits, h as f64),
            // Near (or at) the midpoint above h, with 7..=19 digits:
            // where rounding twice would go wrong.
            4 => format!("{mid:.digits$e}"),
            // The f32 printed as an f64 (17 significant digits as a
            // rule): what JSON clients holding f64s send.
            5 => format!("{}", h as f64),
            _ => format!("{mid:.digits$}"),
        }
    })
}

#[test]
fn eight_digits_reads_exactly_eight_ascii_digits() {
    let seed = seed(0x2545_f491_4f6c_dd1d);
    let mut rng = SplitMix64::new(seed);
    for _ in 0..20_000 {
        let x = rng.next();
        let n = x % 100_000_000;
        let t = format!("{n:08}");
        assert_eq!(eight_digits(t.as_bytes()), Some(n), "PROX_SEED={seed} {t}");
        // One byte replaced by a non-digit (or any byte outside 0-9).
        let mut bad = t.clone().into_bytes();
        let k = (x >> 32) as usize % 8;
        bad[k] = [b'/', b':', b'.', b'e', b' ', 0xff, 0x00, b'-'][(x >> 40) as usize % 8];
        assert_eq!(eight_digits(&bad), None, "PROX_SEED={seed} {bad:?}");
    }
    assert_eq!(eight_digits(b"1234567"), None);
    assert_eq!(eight_digits(b"123456789"), None);
}

#[test]
fn short_digits_reads_the_leading_digits_of_eight_bytes() {
    let seed = seed(0x2545_f491_4f6c_dd1d);
    let mut rng = SplitMix64::new(seed);
    // Bytes that end a run of digits: around '0'..='9', JSON
    // punctuation, and bytes with the top bit set.
    let stops = [
        b'/', b':', b'.', b',', b']', b'e', b' ', 0x00, 0x80, 0xb0, 0xb9, 0xff,
    ];
    for n in 0..8usize {
        for &stop in &stops {
            for _ in 0..200 {
                let mut s = [0u8; 8];
                for c in s.iter_mut() {
                    *c = (rng.next() % 256) as u8;
                }
                let mut want = 0u64;
                for c in s.iter_mut().take(n) {
                    *c = b'0' + (rng.next() % 10) as u8;
                    want = want * 10 + u64::from(*c - b'0');
                }
                s[n] = stop;
                assert_eq!(short_digits(&s), (want, n as u32), "PROX_SEED={seed} {s:?}");
            }
        }
    }
    assert_eq!(short_digits(b"12"), (0, 0), "fewer than eight bytes");
}

/// Many f32s printed as f64s, and points within a few f64 units of
/// the f32 midpoints printed with 17-19 digits (the inexact fast path's
/// hardest inputs), parse exactly as `str::parse::<f32>` does.
#[test]
fn long_decimals_near_midpoints_parse_exactly() {
    let seed = seed(0x9e37_79b9_7f4a_7c15);
    let mut rng = SplitMix64::new(seed);
    let mut next = || rng.next();
    for _ in 0..100_000 {
        let h = f32::from_bits(next() as u32);
        if !h.is_finite() {
            continue;
        }
        let mid = (f64::from(h) + f64::from(h.next_up())) / 2.0;
        let off = (next() % 9) as i64 - 4;
        let near = f64::from_bits((mid.to_bits() as i64 + off) as u64);
        let digits = 16 + (next() % 3) as usize;
        for t in [
            format!("{}", f64::from(h)),
            format!("{near:.digits$e}"),
            format!("{near}"),
        ] {
            let mut i = 0;
            let got = number_f32(t.as_bytes(), &mut i).map(f32::to_bits);
            assert_eq!(
                got,
                Some(t.parse::<f32>().unwrap().to_bits()),
                "PROX_SEED={seed} {t}"
            );
            assert_eq!(i, t.len(), "PROX_SEED={seed} {t}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn number_f32_equals_str_parse(t in prop_oneof![decimal(), printed_f32()]) {
        let want = t.parse::<f32>().unwrap();
        let mut i = 0;
        let got = number_f32(t.as_bytes(), &mut i);
        prop_assert_eq!(i, t.len(), "{}", t);
        prop_assert_eq!(got.map(f32::to_bits), Some(want.to_bits()), "{}", t);
        prop_assert_eq!(token_f32(&t).map(f32::to_bits), Ok(want.to_bits()), "{}", t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Well-formed bodies take the single pass; broken ones (one byte
    /// deleted, replaced or inserted) either take it with the checked
    /// reader's answer or fall back to it.
    #[test]
    fn single_pass_reader_agrees_with_the_checked_one(
        comps in proptest::collection::vec(prop_oneof![decimal(), printed_f32()], 1..6),
        k in 0u32..120,
        sep in prop_oneof![Just(","), Just(" , "), Just(",\n\t")],
        opts_first in any::<bool>(),
        batch in any::<bool>(),
        cut in any::<prop::sample::Index>(),
        edit in 0u8..4,
        byte in prop::sample::select(br#" []{},:"0159.eE+-axk\"#.to_vec()),
    ) {
        let dims = comps.len();
        let vector = format!("[{}]", comps.join(sep));
        let (member, want) = if batch {
            (
                format!(r#""vectors": [{vector},{vector}]"#),
                Want::Rows { dims, max_batch: L.max_batch },
            )
        } else {
            (format!(r#""vector":{vector}"#), Want::One { dims })
        };
        let opts = format!(r#""k":{k}, "mode" : "fast""#);
        let body = if opts_first {
            format!("{{{opts},{member}}}")
        } else {
            format!(" {{ {member} ,{opts} }}\n")
        };
        let valid = comps.iter().all(|c| c.parse::<f32>().unwrap().is_finite());
        let answered = readers_agree(body.as_bytes(), want);
        prop_assert_eq!(answered, valid, "{}", body);
        let mut b = body.into_bytes();
        let at = cut.index(b.len());
        match edit {
            0 => {
                b.remove(at);
            }
            1 => b[at] = byte,
            2 => b.insert(at, byte),
            _ => {
                // The vector member twice: the checked reader keeps the last.
                let twice = format!(r#"{{"vector":[{}],"vector":{vector}}}"#, "1,".repeat(dims - 1) + "1");
                b = twice.into_bytes();
                let one = Want::One { dims };
                prop_assert!(!readers_agree(&b, one), "repeated member");
            }
        }
        readers_agree(&b, want);
    }
}

#[test]
fn batch_rows_and_precedence() {
    let (flat, n, q) =
        batch_request(br#"{"k":2,"vectors":[[1,2],[3,4.5]],"mode":"exact"}"#, 2, L).unwrap();
    assert_eq!((flat, n, q.k), (vec![1.0, 2.0, 3.0, 4.5], 2, 2));
    // A repeated vector member replaces the earlier one.
    let (v, _) = search_request(br#"{"vector":[9,9],"vector":[1,2]}"#, 2, L).unwrap();
    assert_eq!(v, vec![1.0, 2.0]);
    // Malformed JSON wins over everything, then options, then the vector.
    let e = search_request(br#"{"vector":[1],"k":0"#, 2, L).unwrap_err();
    assert_eq!(
        (e.code, e.field.as_deref()),
        ("malformed_json", Some("body"))
    );
    let e = search_request(br#"{"vector":[1],"k":0}"#, 2, L).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("k"));
    let e = search_request(br#"{"vector":{"a":[1]}}"#, 2, L).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("vector"));
    let e = search_request(br#"{"vector":[1,2,3]}"#, 2, L).unwrap_err();
    assert_eq!(e.code, "wrong_dimension");
    let e = search_request(br#"{"vector":[1,1e39]}"#, 2, L).unwrap_err();
    assert_eq!(e.code, "not_finite");
    let e = search_request(b"[1", 2, L).unwrap_err();
    assert_eq!(e.code, "malformed_json");
    let e = batch_request(br#"{"vectors":[[1,2],[1,[2]]]}"#, 2, L).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("vectors[1]"));
    let e = batch_request(br#"{"vectors":5}"#, 2, L).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("vectors"));
}
