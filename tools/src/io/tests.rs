//! Reader and writer tests on small files in a temporary directory.

use super::*;
use std::io::Write;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn fvecs_bytes(rows: &[&[f32]]) -> Vec<u8> {
    let mut b = Vec::new();
    for r in rows {
        b.extend_from_slice(&(r.len() as i32).to_le_bytes());
        for x in *r {
            b.extend_from_slice(&x.to_le_bytes());
        }
    }
    b
}

fn npy_bytes(rows: usize, dim: usize, data: &[f32], version: u8) -> Vec<u8> {
    npy_bytes_with(rows, dim, data, version, "<f4")
}

fn npy_bytes_with(rows: usize, dim: usize, data: &[f32], version: u8, descr: &str) -> Vec<u8> {
    let dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {dim}), }}");
    let prefix = if version == 1 { 10 } else { 12 };
    let pad = 64 - (prefix + dict.len() + 1) % 64;
    let header = format!("{dict}{}\n", " ".repeat(pad));
    let mut b = b"\x93NUMPY".to_vec();
    b.push(version);
    b.push(0);
    if version == 1 {
        b.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        b.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    b.extend_from_slice(header.as_bytes());
    for x in data {
        b.extend_from_slice(&x.to_le_bytes());
    }
    b
}

fn err_of(path: &Path) -> String {
    match read_matrix(path) {
        Ok(m) => panic!("{} read fine: {m:?}", path.display()),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn fvecs_round_trip_and_len_hint() {
    let dir = tmp();
    let p = dir.path().join("a.fvecs");
    let m = Matrix {
        dim: 3,
        data: vec![1.0, 2.0, 3.0, -0.0, 0.5, 1e30],
    };
    write_fvecs(&p, &m).unwrap();
    assert_eq!(std::fs::read(&p).unwrap().len(), 2 * (4 + 12));
    let mut r = VectorReader::open(&p).unwrap();
    let first = r.next().unwrap().unwrap();
    assert_eq!(first.vector, vec![1.0, 2.0, 3.0]);
    assert_eq!(first.key, None);
    assert_eq!(r.len_hint(), Some(2));
    assert_eq!(read_matrix(&p).unwrap(), m);
}

#[test]
fn bvecs_are_widened() {
    let dir = tmp();
    let p = dir.path().join("a.bvecs");
    let mut b = Vec::new();
    for row in [[0u8, 255], [7, 9]] {
        b.extend_from_slice(&2i32.to_le_bytes());
        b.extend_from_slice(&row);
    }
    std::fs::write(&p, b).unwrap();
    assert_eq!(read_matrix(&p).unwrap().data, vec![0.0, 255.0, 7.0, 9.0]);
}

#[test]
fn malformed_texmex_names_the_row() {
    let dir = tmp();
    let p = dir.path().join("t.fvecs");
    let mut b = fvecs_bytes(&[&[1.0, 2.0], &[3.0, 4.0]]);
    b.truncate(b.len() - 3);
    std::fs::write(&p, &b).unwrap();
    let e = err_of(&p);
    assert!(
        e.contains("t.fvecs: row 1") && e.contains("truncated"),
        "{e}"
    );

    std::fs::write(&p, fvecs_bytes(&[&[1.0, 2.0], &[3.0, 4.0, 5.0]])).unwrap();
    let e = err_of(&p);
    assert!(e.contains("row 1") && e.contains("dimension 3"), "{e}");

    std::fs::write(
        &p,
        fvecs_bytes(&[&[1.0, 2.0], &[3.0, 4.0], &[f32::NAN, 0.0]]),
    )
    .unwrap();
    let e = err_of(&p);
    assert!(
        e.contains("row 2") && e.contains("component 0 is NaN"),
        "{e}"
    );

    std::fs::write(&p, fvecs_bytes(&[&[1.0, f32::INFINITY]])).unwrap();
    let e = err_of(&p);
    assert!(e.contains("row 0") && e.contains("inf"), "{e}");

    let mut b = fvecs_bytes(&[&[1.0]]);
    b.extend_from_slice(&(-5i32).to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let e = err_of(&p);
    assert!(
        e.contains("row 1") && e.contains("implausible dimension -5"),
        "{e}"
    );

    std::fs::write(&p, [1u8, 0]).unwrap();
    let e = err_of(&p);
    assert!(e.contains("row 0") && e.contains("dimension header"), "{e}");

    std::fs::write(&p, []).unwrap();
    assert!(err_of(&p).contains("no vectors"));
}

#[test]
fn ivecs_round_trip_and_negative_ids() {
    let dir = tmp();
    let p = dir.path().join("gt.ivecs");
    let rows = vec![vec![3u32, 1, 2], vec![], vec![7]];
    write_ivecs(&p, &rows).unwrap();
    assert_eq!(read_ivecs(&p).unwrap(), rows);
    let mut b = Vec::new();
    b.extend_from_slice(&1i32.to_le_bytes());
    b.extend_from_slice(&(-1i32).to_le_bytes());
    std::fs::write(&p, b).unwrap();
    let e = format!("{:#}", read_ivecs(&p).unwrap_err());
    assert!(e.contains("row 0") && e.contains("negative"), "{e}");
    let e = format!("{:#}", VectorReader::open(&p).err().unwrap());
    assert!(e.contains("ids"), "{e}");
}

#[test]
fn npy_versions_and_errors() {
    let dir = tmp();
    let data: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
    for v in [1u8, 2, 3] {
        let p = dir.path().join(format!("v{v}.npy"));
        std::fs::write(&p, npy_bytes(3, 2, &data, v)).unwrap();
        let mut r = VectorReader::open(&p).unwrap();
        assert_eq!(r.dim(), Some(2));
        assert_eq!(r.len_hint(), Some(3));
        assert_eq!(read_matrix(&p).unwrap().data, data);
    }
    let p = dir.path().join("bad.npy");
    let mut b = npy_bytes(3, 2, &data, 1);
    b.truncate(b.len() - 1);
    std::fs::write(&p, &b).unwrap();
    let e = err_of(&p);
    assert!(e.contains("row 2") && e.contains("truncated"), "{e}");

    let mut b = npy_bytes(3, 2, &data, 1);
    b.extend_from_slice(&[0, 0, 0, 0]);
    std::fs::write(&p, &b).unwrap();
    assert!(err_of(&p).contains("trailing bytes"));

    std::fs::write(&p, npy_bytes_with(3, 2, &data, 1, "<f8")).unwrap();
    let e = format!("{:#}", VectorReader::open(&p).err().unwrap());
    assert!(e.contains("bad.npy") && e.contains("<f8"), "{e}");

    std::fs::write(&p, b"not numpy at all").unwrap();
    let e = format!("{:#}", VectorReader::open(&p).err().unwrap());
    assert!(e.contains("magic"), "{e}");
}

#[test]
fn npy_header_parser() {
    let h = npy::parse_header("{'fortran_order': True, \"shape\": (4,), 'descr': '|u1'}").unwrap();
    assert_eq!(h.shape, vec![4]);
    assert!(h.fortran_order);
    assert_eq!(h.descr, "|u1");
    for bad in [
        "",
        "{",
        "{'descr': '<f4'",
        "{'x': 1}",
        "{'shape': (1, a)}",
        "{} junk",
    ] {
        assert!(npy::parse_header(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn json_lines_rows_keys_and_errors() {
    let dir = tmp();
    let p = dir.path().join("v.jsonl");
    let mut f = std::fs::File::create(&p).unwrap();
    writeln!(f, r#"{{"key": "00ff", "vector": [1, 2.5], "value": ""}}"#).unwrap();
    writeln!(f).unwrap();
    writeln!(f, r#"{{"vector": [3, 4]}}"#).unwrap();
    drop(f);
    let rows: Vec<Row> = VectorReader::open(&p)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(rows[0].key, Some(vec![0, 255]));
    assert_eq!(rows[0].value, Some(vec![]));
    assert_eq!(rows[1].vector, vec![3.0, 4.0]);
    assert_eq!(rows[1].key, None);

    for (text, want) in [
        (
            "{\"vector\": [1]}\n{\"vector\": [1, 2]}\n",
            "line 2 (row 1)",
        ),
        ("{\"key\": \"zz\", \"vector\": [1]}\n", "not valid hex"),
        ("{\"vector\": [1e39]}\n", "out of range"),
        ("{\"vector\": []}\n", "empty vector"),
        ("{\"vector\": [1], \"extra\": 1}\n", "unknown field"),
        ("not json\n", "line 1"),
    ] {
        std::fs::write(&p, text).unwrap();
        let e = err_of(&p);
        assert!(e.contains(want) && e.contains("v.jsonl"), "{text:?}: {e}");
    }
}

#[test]
fn unsupported_extensions() {
    let dir = tmp();
    for name in ["x.hdf5", "x.csv"] {
        let p = dir.path().join(name);
        std::fs::write(&p, b"").unwrap();
        let e = format!("{:#}", VectorReader::open(&p).err().unwrap());
        assert!(e.contains(name), "{e}");
    }
}
