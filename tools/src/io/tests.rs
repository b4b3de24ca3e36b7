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
    let mut raw = Vec::new();
    for x in data {
        raw.extend_from_slice(&x.to_le_bytes());
    }
    npy_raw(rows, dim, &raw, version, descr)
}

/// An .npy file of `descr` holding the already encoded `raw` data.
fn npy_raw(rows: usize, dim: usize, raw: &[u8], version: u8, descr: &str) -> Vec<u8> {
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
    b.extend_from_slice(raw);
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

    std::fs::write(&p, npy_bytes_with(3, 2, &data, 1, "<i4")).unwrap();
    let e = format!("{:#}", VectorReader::open(&p).err().unwrap());
    assert!(e.contains("bad.npy") && e.contains("<i4"), "{e}");

    std::fs::write(
        &p,
        npy_bytes_with(3, 1, &data[..3], 1, "<f4").replace_shape(),
    )
    .unwrap();
    let e = format!("{:#}", VectorReader::open(&p).err().unwrap());
    assert!(e.contains("2-D"), "{e}");

    std::fs::write(&p, b"not numpy at all").unwrap();
    let e = format!("{:#}", VectorReader::open(&p).err().unwrap());
    assert!(e.contains("magic"), "{e}");
}

/// Rewrites a `(3, 1)` shape into the 1-D `(3,)`.
trait ReplaceShape {
    fn replace_shape(self) -> Vec<u8>;
}

impl ReplaceShape for Vec<u8> {
    fn replace_shape(mut self) -> Vec<u8> {
        let at = self.windows(6).position(|w| w == b"(3, 1)").unwrap();
        self[at..at + 6].copy_from_slice(b"(3,)  ");
        self
    }
}

#[test]
fn npy_dtypes_are_widened_to_f32() {
    let dir = tmp();
    let want = vec![1.0f32, -2.0, 0.5, 3.0];
    let p = dir.path().join("x.npy");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "<f2",
            want.iter()
                .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                .collect(),
        ),
        (">f4", want.iter().flat_map(|&x| x.to_be_bytes()).collect()),
        (
            "<f8",
            want.iter()
                .flat_map(|&x| f64::from(x).to_le_bytes())
                .collect(),
        ),
        ("|i1", vec![1, 0xfe, 0, 3]),
        ("|u1", vec![1, 2, 0, 3]),
    ];
    for (descr, raw) in cases {
        std::fs::write(&p, npy_raw(2, 2, &raw, 1, descr)).unwrap();
        let m = read_matrix(&p).unwrap();
        let expect: Vec<f32> = match descr {
            "|i1" => vec![1.0, -2.0, 0.0, 3.0],
            "|u1" => vec![1.0, 2.0, 0.0, 3.0],
            _ => want.clone(),
        };
        assert_eq!((m.dim, m.data), (2, expect), "{descr}");
    }
    // A float64 too large for f32 becomes infinite and is refused.
    let raw: Vec<u8> = [1e300f64, 0.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    std::fs::write(&p, npy_raw(1, 2, &raw, 1, "<f8")).unwrap();
    assert!(err_of(&p).contains("not finite"));
}

#[test]
fn a_directory_of_shards_is_one_input() {
    let dir = tmp();
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    std::fs::write(
        shards.join("a.npy"),
        npy_bytes(2, 2, &[0.0, 1.0, 2.0, 3.0], 1),
    )
    .unwrap();
    std::fs::write(shards.join("b.fvecs"), fvecs_bytes(&[&[4.0, 5.0]])).unwrap();
    std::fs::write(shards.join("c.bvecs"), [2u8, 0, 0, 0, 6, 7]).unwrap();
    std::fs::write(shards.join("notes.txt"), "ignored").unwrap();
    let mut r = VectorReader::open(&shards).unwrap();
    assert_eq!(r.len_hint(), Some(4));
    assert_eq!(
        read_matrix(&shards).unwrap().data,
        (0..8).map(|x| x as f32).collect::<Vec<_>>()
    );

    std::fs::write(shards.join("d.fvecs"), fvecs_bytes(&[&[1.0, 2.0, 3.0]])).unwrap();
    let e = err_of(&shards);
    assert!(
        e.contains("d.fvecs") && e.contains("row 4") && e.contains("differs"),
        "{e}"
    );
    std::fs::remove_file(shards.join("d.fvecs")).unwrap();
    std::fs::write(shards.join("d.npy"), npy_bytes(1, 3, &[1.0, 2.0, 3.0], 1)).unwrap();
    let e = err_of(&shards);
    assert!(e.contains("d.npy") && e.contains("differs"), "{e}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = format!("{:#}", VectorReader::open(&empty).err().unwrap());
    assert!(e.contains("no .npy"), "{e}");
    let e = format!("{:#}", VectorReader::open(STDIN).err().unwrap());
    assert!(e.contains("--input-format"), "{e}");
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

/// The typed error of reading all of `path`.
fn typed(path: &Path) -> InputError {
    match read_matrix(path) {
        Ok(m) => panic!("{} read fine: {m:?}", path.display()),
        Err(e) => e,
    }
}

#[test]
fn texmex_errors_are_typed_with_row_and_byte() {
    let dir = tmp();
    let p = dir.path().join("t.fvecs");
    // Row 0 takes 4 + 2 * 4 = 12 bytes, so row 1 starts at byte 12.
    let mut b = fvecs_bytes(&[&[1.0, 2.0], &[3.0, 4.0]]);
    b.truncate(b.len() - 3);
    std::fs::write(&p, &b).unwrap();
    let e = typed(&p);
    assert!(matches!(e.problem, Problem::Truncated(_)), "{e}");
    assert_eq!((e.at.row, e.at.byte), (Some(1), Some(12)), "{e}");
    assert_eq!(e.path, p);
    assert!(e.to_string().contains("row 1, byte 12"), "{e}");

    std::fs::write(&p, fvecs_bytes(&[&[1.0, 2.0], &[3.0, 4.0, 5.0]])).unwrap();
    let e = typed(&p);
    assert!(
        matches!(
            e.problem,
            Problem::DimensionMismatch {
                got: 3,
                want: 2,
                against: "row"
            }
        ),
        "{e}"
    );
    assert_eq!((e.at.row, e.at.byte), (Some(1), Some(12)));

    std::fs::write(&p, fvecs_bytes(&[&[1.0, 2.0], &[0.0, f32::NEG_INFINITY]])).unwrap();
    let e = typed(&p);
    assert!(
        matches!(e.problem, Problem::NotFinite { component: 1, value } if value == f32::NEG_INFINITY),
        "{e}"
    );
    assert_eq!((e.at.row, e.at.byte), (Some(1), Some(12)));

    let mut b = fvecs_bytes(&[&[1.0]]);
    b.extend_from_slice(&(MAX_DIM as i32 + 1).to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let e = typed(&p);
    assert!(
        matches!(e.problem, Problem::BadDimension { got, .. } if got == MAX_DIM as i64 + 1),
        "{e}"
    );
    assert_eq!((e.at.row, e.at.byte), (Some(1), Some(8)));

    std::fs::write(&p, []).unwrap();
    assert!(matches!(typed(&p).problem, Problem::NoVectors));
    let gone = dir.path().join("missing.fvecs");
    let e = typed(&gone);
    assert!(
        matches!(
            e.problem,
            Problem::Io {
                what: "cannot open",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.path, gone);

    let gt = dir.path().join("gt.ivecs");
    let mut b = Vec::new();
    for row in [[1i32, 2], [3, -4]] {
        b.extend_from_slice(&2i32.to_le_bytes());
        for x in row {
            b.extend_from_slice(&x.to_le_bytes());
        }
    }
    std::fs::write(&gt, &b).unwrap();
    let e = read_ivecs(&gt).unwrap_err();
    assert!(
        matches!(e.problem, Problem::NegativeId { index: 1, id: -4 }),
        "{e}"
    );
    assert_eq!((e.at.row, e.at.byte), (Some(1), Some(12)));
    assert!(matches!(typed(&gt).problem, Problem::NotVectors));
}

#[test]
fn npy_errors_are_typed() {
    let dir = tmp();
    let p = dir.path().join("e.npy");
    let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let good = npy_bytes(3, 2, &data, 1);
    let header = good.len() - 24;

    let mut b = good.clone();
    b.truncate(b.len() - 1);
    std::fs::write(&p, &b).unwrap();
    let e = typed(&p);
    assert!(matches!(e.problem, Problem::Truncated(_)), "{e}");
    assert_eq!((e.at.row, e.at.byte), (Some(2), Some(header as u64 + 16)));

    let mut b = good.clone();
    b.extend_from_slice(&[0; 5]);
    std::fs::write(&p, &b).unwrap();
    assert!(matches!(
        typed(&p).problem,
        Problem::TrailingBytes { rows: 3, extra: 5 }
    ));

    let mut b = good.clone();
    let at = b
        .windows(5)
        .position(|w| w == b"False")
        .expect("fortran_order field");
    b[at..at + 5].copy_from_slice(b"True ");
    std::fs::write(&p, &b).unwrap();
    assert!(matches!(typed(&p).problem, Problem::FortranOrder));

    std::fs::write(&p, npy_raw(2, 2, &[0; 32], 1, "<i8")).unwrap();
    let e = typed(&p);
    assert!(
        matches!(&e.problem, Problem::UnsupportedDtype { dtype, .. } if dtype == "<i8"),
        "{e}"
    );
    std::fs::write(&p, npy_raw(2, 2, &[0; 64], 1, "<c16")).unwrap();
    assert!(matches!(
        typed(&p).problem,
        Problem::UnsupportedDtype { .. }
    ));

    std::fs::write(&p, npy_bytes(3, 1, &data[..3], 1).replace_shape()).unwrap();
    assert!(matches!(&typed(&p).problem, Problem::BadShape(s) if s == &[3]));
    std::fs::write(&p, npy_bytes(0, 0, &[], 1)).unwrap();
    assert!(matches!(
        typed(&p).problem,
        Problem::BadDimension { got: 0, .. }
    ));
    std::fs::write(&p, b"\x93NUMPY\x01").unwrap();
    assert!(matches!(typed(&p).problem, Problem::BadHeader(_)));

    let mut raw = Vec::new();
    for x in [1.0f64, f64::NAN] {
        raw.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&p, npy_raw(1, 2, &raw, 1, "<f8")).unwrap();
    let e = typed(&p);
    assert!(
        matches!(e.problem, Problem::NotFinite { component: 1, .. }),
        "{e}"
    );
    assert_eq!((e.at.row, e.at.byte), (Some(0), Some(header as u64)));
}

#[test]
fn mapped_npy_reads_across_released_pages() {
    // 700 rows x 24 float64 = 134,400 bytes: many release steps under test.
    let dir = tmp();
    let p = dir.path().join("big.npy");
    let (rows, dim) = (700usize, 24usize);
    let want: Vec<f32> = (0..rows * dim).map(|i| (i % 1009) as f32 * 0.25).collect();
    let raw: Vec<u8> = want
        .iter()
        .flat_map(|&x| f64::from(x).to_be_bytes())
        .collect();
    std::fs::write(&p, npy_raw(rows, dim, &raw, 2, ">f8")).unwrap();
    let m = read_matrix(&p).unwrap();
    assert_eq!((m.dim, m.len()), (dim, rows));
    assert_eq!(m.data, want);
}

#[test]
fn streamed_npy_checks_truncation_and_trailing_bytes() {
    let data: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let read = |bytes: Vec<u8>| -> Result<Vec<f32>, Problem> {
        let mut r =
            npy::Reader::open_stream(Box::new(std::io::Cursor::new(bytes))).map_err(|(_, p)| p)?;
        let (mut all, mut row) = (Vec::new(), Vec::new());
        while r.next_into(&mut row)? {
            all.extend_from_slice(&row);
        }
        Ok(all)
    };
    assert_eq!(read(npy_bytes(3, 2, &data, 3)).unwrap(), data);
    let mut b = npy_bytes(3, 2, &data, 1);
    b.truncate(b.len() - 2);
    assert!(matches!(read(b), Err(Problem::Truncated(_))));
    let mut b = npy_bytes(3, 2, &data, 1);
    b.push(0);
    assert!(matches!(
        read(b),
        Err(Problem::TrailingBytes { rows: 3, .. })
    ));
}

#[test]
fn shard_and_line_errors_are_typed() {
    let dir = tmp();
    let shards = dir.path().join("s");
    std::fs::create_dir(&shards).unwrap();
    std::fs::write(
        shards.join("a.fvecs"),
        fvecs_bytes(&[&[1.0, 2.0], &[3.0, 4.0]]),
    )
    .unwrap();
    std::fs::write(shards.join("b.npy"), npy_bytes(1, 3, &[1.0, 2.0, 3.0], 1)).unwrap();
    let e = typed(&shards);
    assert!(
        matches!(
            e.problem,
            Problem::DimensionMismatch {
                got: 3,
                want: 2,
                against: "shard"
            }
        ),
        "{e}"
    );
    assert_eq!(e.path, shards.join("b.npy"));
    assert_eq!((e.at.row, e.at.shard_row), (Some(2), Some(0)));

    std::fs::remove_file(shards.join("b.npy")).unwrap();
    std::fs::write(
        shards.join("b.fvecs"),
        fvecs_bytes(&[&[5.0, 6.0], &[f32::NAN, 0.0]]),
    )
    .unwrap();
    let e = typed(&shards);
    assert!(
        matches!(e.problem, Problem::NotFinite { component: 0, .. }),
        "{e}"
    );
    assert_eq!(e.path, shards.join("b.fvecs"));
    assert_eq!(
        (e.at.row, e.at.shard_row, e.at.byte),
        (Some(3), Some(1), Some(12))
    );

    let empty = dir.path().join("none");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(typed(&empty).problem, Problem::NoShards));
    assert!(matches!(
        VectorReader::open(STDIN).err().unwrap().problem,
        Problem::StdinNeedsFormat
    ));
    assert!(matches!(
        typed(&dir.path().join("x.csv")).problem,
        Problem::UnknownExtension(ext) if ext == "csv"
    ));

    let p = dir.path().join("l.jsonl");
    std::fs::write(
        &p,
        "{\"vector\": [1]}\n\n{\"vector\": [1], \"value\": \"q\"}\n",
    )
    .unwrap();
    let e = typed(&p);
    assert!(matches!(e.problem, Problem::BadLine(_)), "{e}");
    assert_eq!((e.at.line, e.at.row), (Some(3), Some(1)));
}

/// ann-benchmarks files written with the HDF5 library itself.
#[cfg(feature = "hdf5")]
mod hdf5_files {
    use super::*;

    /// Writes a 2-D dataset `name` of `rows` x `dim` to `file`.
    fn put<T: hdf5_metno::H5Type>(file: &hdf5_metno::File, name: &str, dim: usize, data: &[T]) {
        let shape = [data.len() / dim, dim];
        file.new_dataset::<T>()
            .shape(shape)
            .create(name)
            .unwrap()
            .write_raw(data)
            .unwrap();
    }

    /// train: 37 x 5 f32, test: 4 x 5 f64, neighbors: 4 x 3 i32,
    /// distances: 4 x 3 f32, plus a 1-D and a boolean dataset.
    fn ann_file(path: &Path) -> Vec<f32> {
        let f = hdf5_metno::File::create(path).unwrap();
        let train: Vec<f32> = (0..37 * 5).map(|i| i as f32 * 0.5 - 3.0).collect();
        put(&f, "train", 5, &train);
        let test: Vec<f64> = (0..20).map(|i| f64::from(i) * 0.25).collect();
        put(&f, "test", 5, &test);
        put(&f, "neighbors", 3, &(0..12).collect::<Vec<i32>>());
        put(&f, "distances", 3, &[0.5f32; 12]);
        f.new_dataset::<f32>()
            .shape([3])
            .create("flat")
            .unwrap()
            .write_raw(&[1.0f32, 2.0, 3.0])
            .unwrap();
        put(&f, "flags", 2, &[true, false, true, true]);
        train
    }

    #[test]
    fn ann_benchmarks_datasets_are_read_in_slices() {
        let dir = tmp();
        let p = dir.path().join("ann.hdf5");
        let train = ann_file(&p);
        // 37 rows of 20 bytes in slices of 5 rows (100 bytes under test).
        let mut r = VectorReader::open(&p).unwrap();
        assert_eq!((r.dim(), r.len_hint()), (Some(5), Some(37)));
        let m = read_matrix(&p).unwrap();
        assert_eq!((m.dim, &m.data), (5, &train));

        let q = PathBuf::from(format!("{}:test", p.display()));
        let m = read_matrix(&q).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m.row(3), &[3.75f32, 4.0, 4.25, 4.5, 4.75]);
        let r = VectorReader::open_dataset(&p, None, Some("neighbors")).unwrap();
        let rows: Vec<Vec<f32>> = r.map(|r| r.unwrap().vector).collect();
        assert_eq!(rows[1], vec![3.0, 4.0, 5.0]);
    }

    #[test]
    fn hdf5_errors_are_typed() {
        let dir = tmp();
        let p = dir.path().join("ann.h5");
        ann_file(&p);
        let e = VectorReader::open_dataset(&p, None, Some("base"))
            .err()
            .unwrap();
        assert!(
            matches!(&e.problem, Problem::NoDataset { name, have }
                if name == "base" && have == "distances, flags, flat, neighbors, test, train"),
            "{e}"
        );
        assert_eq!(e.path, p);
        let e = VectorReader::open_dataset(&p, None, Some("flat"))
            .err()
            .unwrap();
        assert!(
            matches!(&e.problem, Problem::BadShape(s) if s == &[3]),
            "{e}"
        );
        let e = VectorReader::open_dataset(&p, None, Some("flags"))
            .err()
            .unwrap();
        assert!(matches!(e.problem, Problem::UnsupportedDtype { .. }), "{e}");

        let bad = dir.path().join("nan.hdf5");
        let f = hdf5_metno::File::create(&bad).unwrap();
        let mut v = vec![1.0f32; 5 * 4];
        v[13] = f32::NAN;
        put(&f, "train", 4, &v);
        drop(f);
        let e = typed(&bad);
        assert!(
            matches!(e.problem, Problem::NotFinite { component: 1, .. }),
            "{e}"
        );
        assert_eq!(e.at.row, Some(3));

        let not = dir.path().join("not.hdf5");
        std::fs::write(&not, b"\x89HDF\r\n").unwrap();
        assert!(matches!(typed(&not).problem, Problem::BadHeader(_)));
        assert!(matches!(
            typed(&dir.path().join("missing.hdf5")).problem,
            Problem::Io { .. }
        ));
    }
}

#[cfg(not(feature = "hdf5"))]
#[test]
fn hdf5_without_the_feature_says_how_to_get_it() {
    let dir = tmp();
    let p = dir.path().join("ann.hdf5");
    std::fs::write(&p, b"\x89HDF\r\n").unwrap();
    let e = typed(&p);
    assert!(
        matches!(&e.problem, Problem::Unsupported(why) if why.contains("--features hdf5")),
        "{e}"
    );
}
