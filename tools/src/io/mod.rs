//! Streaming vector readers and writers.
//!
//! Formats, chosen by file extension ([`Format::from_path`]):
//!
//! * `.fvecs`, `.bvecs`, `.ivecs` (TEXMEX): per row a little-endian `i32`
//!   dimension, then that many `f32` / `u8` / `i32` components;
//! * `.npy`: NumPy version 1–3 files holding a 2-D, C-order array of
//!   float32, float16, float64, int8 or uint8 (either byte order), widened
//!   to f32; a regular file is memory mapped and decoded row by row;
//! * `.jsonl` / `.json` / `.ndjson`: one JSON object per line with a
//!   `"vector"` array and optional hex `"key"` and `"value"` strings;
//! * `.hdf5` / `.h5` (ann-benchmarks layout) with the `hdf5` cargo feature:
//!   one 2-D dataset (`train` unless named), read in slices of rows.
//!
//! [`VectorReader`] yields one [`Row`] at a time, so a file is never held
//! in memory by the reader; callers that need all rows (an index build)
//! copy each row exactly once. Every row is checked: equal dimensions
//! across rows, finite components, no truncation. Every failure is an
//! [`InputError`] naming the file, the row (and line, byte offset, shard
//! row where they apply) and the [`Problem`].
//!
//! [`VectorReader::open_as`] also reads standard input (`-`, with an
//! explicit [`Format`]) and a directory of `.npy` / `.fvecs` / `.bvecs`
//! shards as one input, in file-name order.

mod error;
#[cfg(feature = "hdf5")]
mod hdf5;
mod jsonl;
mod npy;
mod texmex;

pub use error::{InputError, Location, Problem};
pub use jsonl::JsonLines;
pub use texmex::{FvecsWriter, IvecsWriter};

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Upper bound on a vector's dimension accepted from a file header: larger
/// values are treated as corruption rather than allocated.
pub const MAX_DIM: usize = 1 << 20;

/// The HDF5 dataset read when none is named (ann-benchmarks' base vectors).
pub const DEFAULT_HDF5_DATASET: &str = "train";

/// A vector file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// TEXMEX `.fvecs` (f32 components).
    Fvecs,
    /// TEXMEX `.bvecs` (u8 components).
    Bvecs,
    /// TEXMEX `.ivecs` (i32 components; ground-truth ids).
    Ivecs,
    /// NumPy `.npy`, 2-D, C order, float32/16/64 or int8/uint8.
    Npy,
    /// JSON lines.
    Jsonl,
    /// ann-benchmarks HDF5 (read with the `hdf5` cargo feature).
    Hdf5,
}

impl Format {
    /// Picks the format from the file extension.
    pub fn from_path(path: &Path) -> Result<Format, InputError> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .unwrap_or_default();
        Ok(match ext.as_str() {
            "fvecs" => Format::Fvecs,
            "bvecs" => Format::Bvecs,
            "ivecs" => Format::Ivecs,
            "npy" => Format::Npy,
            "jsonl" | "json" | "ndjson" => Format::Jsonl,
            "hdf5" | "h5" => Format::Hdf5,
            _ => return Err(InputError::file(path, Problem::UnknownExtension(ext))),
        })
    }
}

/// One input row. `key` and `value` are only present in JSON lines input.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// The record key, if the format carries one.
    pub key: Option<Vec<u8>>,
    /// The vector components.
    pub vector: Vec<f32>,
    /// The record value, if the format carries one.
    pub value: Option<Vec<u8>>,
}

enum Inner {
    Texmex(texmex::Reader),
    Npy(npy::Reader),
    Jsonl(jsonl::VectorLines),
    #[cfg(feature = "hdf5")]
    Hdf5(hdf5::Reader),
}

impl Inner {
    /// Rows declared up front (`.npy`, HDF5).
    fn declared(&self) -> Option<(u64, usize)> {
        match self {
            Inner::Npy(r) => Some((r.rows(), r.dim())),
            #[cfg(feature = "hdf5")]
            Inner::Hdf5(r) => Some((r.rows(), r.dim())),
            _ => None,
        }
    }
}

/// The path that means standard input.
pub const STDIN: &str = "-";

/// A streaming reader of vectors from any supported format: one file,
/// standard input (`-`, with an explicit format), or a directory of
/// `.npy` / `.fvecs` / `.bvecs` shards read in file-name order as one input
/// (rows numbered across shards; every shard must have the same dimension).
pub struct VectorReader {
    path: PathBuf,
    /// Boxed: the readers' buffers and headers are large.
    inner: Box<Inner>,
    /// Shards not yet opened, in order, with their row counts if known
    /// (directory input).
    pending: std::collections::VecDeque<(PathBuf, Option<u64>)>,
    /// Whether the input is a directory of shards.
    sharded: bool,
    /// Rows of the shards already finished (directory input).
    before: u64,
    /// Rows returned so far; also the 0-based index of the next row.
    rows: u64,
    /// The dimension fixed by the header or the first row.
    dim: Option<usize>,
}

/// Opens one source (a file, or standard input for [`STDIN`]) as `format`;
/// `dataset` names the HDF5 dataset.
fn open_inner(path: &Path, format: Format, dataset: Option<&str>) -> Result<Inner, InputError> {
    let fail = |problem| InputError::file(path, problem);
    let stdin = path == Path::new(STDIN);
    let open = || -> Result<(std::fs::File, Option<u64>), InputError> {
        let file = std::fs::File::open(path).map_err(|e| fail(Problem::io("cannot open", e)))?;
        let size = file.metadata().map(|m| m.len()).ok();
        Ok((file, size))
    };
    let stream = || -> Result<(Box<dyn std::io::Read + Send>, Option<u64>), InputError> {
        if stdin {
            return Ok((Box::new(std::io::stdin()), None));
        }
        let (file, size) = open()?;
        Ok((Box::new(file), size))
    };
    let npy_failure = |(at, problem): npy::Failure| InputError {
        path: path.to_path_buf(),
        at,
        problem,
    };
    Ok(match format {
        Format::Fvecs => {
            let (src, size) = stream()?;
            Inner::Texmex(texmex::Reader::new(src, texmex::Elem::F32, size))
        }
        Format::Bvecs => {
            let (src, size) = stream()?;
            Inner::Texmex(texmex::Reader::new(src, texmex::Elem::U8, size))
        }
        Format::Ivecs => return Err(fail(Problem::NotVectors)),
        Format::Npy if stdin => {
            Inner::Npy(npy::Reader::open_stream(Box::new(std::io::stdin())).map_err(npy_failure)?)
        }
        Format::Npy => Inner::Npy(npy::Reader::open_file(open()?.0).map_err(npy_failure)?),
        Format::Jsonl => Inner::Jsonl(jsonl::VectorLines::new(stream()?.0)),
        #[cfg(feature = "hdf5")]
        Format::Hdf5 if stdin => {
            return Err(fail(Problem::Unsupported(
                "HDF5 cannot be read from standard input; pass the file".into(),
            )))
        }
        #[cfg(feature = "hdf5")]
        Format::Hdf5 => Inner::Hdf5(
            hdf5::Reader::open(path, dataset.unwrap_or(DEFAULT_HDF5_DATASET)).map_err(fail)?,
        ),
        #[cfg(not(feature = "hdf5"))]
        Format::Hdf5 => {
            let _ = dataset;
            return Err(fail(Problem::Unsupported(format!(
                "HDF5 input needs prox built with the `hdf5` feature (cargo build \
                 --features hdf5, which needs libhdf5-dev); or convert it first, e.g. \
                 python3 -c \"import h5py,numpy; numpy.save('train.npy', \
                 h5py.File('{}')['train'][:].astype('float32'))\", then pass the .npy \
                 file (see docs/cli.md)",
                path.display()
            ))));
        }
    })
}

/// The shard files of a directory input: every `.npy`, `.fvecs` and
/// `.bvecs` file directly inside it, in file-name order.
fn shards(dir: &Path) -> Result<Vec<PathBuf>, InputError> {
    let fail = |e| InputError::file(dir, Problem::io("cannot list", e));
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(fail)? {
        let p = e.map_err(fail)?.path();
        if p.is_file()
            && matches!(
                Format::from_path(&p),
                Ok(Format::Npy | Format::Fvecs | Format::Bvecs)
            )
        {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(InputError::file(dir, Problem::NoShards));
    }
    Ok(files)
}

/// Splits `FILE.hdf5:DATASET` (or `.h5`) into the file and the dataset;
/// any other path is returned whole.
pub fn split_dataset(path: &Path) -> (PathBuf, Option<String>) {
    if let Some(s) = path.to_str() {
        if let Some((file, ds)) = s.rsplit_once(':') {
            let lower = file.to_ascii_lowercase();
            if !ds.is_empty() && (lower.ends_with(".hdf5") || lower.ends_with(".h5")) {
                return (PathBuf::from(file), Some(ds.to_string()));
            }
        }
    }
    (path.to_path_buf(), None)
}

impl VectorReader {
    /// Opens `path`, reading only its header (if any); the format comes
    /// from the extension.
    pub fn open(path: impl AsRef<Path>) -> Result<VectorReader, InputError> {
        Self::open_as(path, None)
    }

    /// Opens `path` as `format` (or by its extension when `None`). `-` is
    /// standard input and needs a format; a directory is read as shards;
    /// `FILE.hdf5:DATASET` names an HDF5 dataset.
    pub fn open_as(
        path: impl AsRef<Path>,
        format: Option<Format>,
    ) -> Result<VectorReader, InputError> {
        let (path, dataset) = split_dataset(path.as_ref());
        Self::open_dataset(path, format, dataset.as_deref())
    }

    /// As [`open_as`](Self::open_as), reading HDF5 dataset `dataset`
    /// ([`DEFAULT_HDF5_DATASET`] when `None`).
    pub fn open_dataset(
        path: impl AsRef<Path>,
        format: Option<Format>,
        dataset: Option<&str>,
    ) -> Result<VectorReader, InputError> {
        let path = path.as_ref().to_path_buf();
        let mut pending = std::collections::VecDeque::new();
        let sharded = path.is_dir();
        let first = if sharded {
            let mut files = shards(&path)?.into_iter();
            let first = files
                .next()
                .ok_or_else(|| InputError::file(&path, Problem::NoShards))?;
            // Row counts of the other shards, for the progress bar: exact
            // for .npy, from the file size for TEXMEX files. Opening checks
            // each shard's header (and a mapped .npy's size) up front.
            for p in files {
                let mut r = VectorReader::open(&p)?;
                let hint = r.len_hint().or_else(|| r.texmex_hint());
                pending.push_back((p, hint));
            }
            first
        } else {
            if path == Path::new(STDIN) && format.is_none() {
                return Err(InputError::file(&path, Problem::StdinNeedsFormat));
            }
            path.clone()
        };
        let format = match format {
            Some(f) if !sharded => f,
            _ => Format::from_path(&first)?,
        };
        let inner = open_inner(&first, format, dataset)?;
        let dim = inner.declared().map(|(_, d)| d);
        Ok(VectorReader {
            path: first,
            inner: Box::new(inner),
            pending,
            sharded,
            before: 0,
            rows: 0,
            dim,
        })
    }

    /// A TEXMEX file's row count from its size and first row (reads it).
    fn texmex_hint(&mut self) -> Option<u64> {
        let mut row = Row::default();
        match &mut *self.inner {
            Inner::Texmex(r) => {
                r.next_into(&mut row.vector).ok()?;
                r.len_hint()
            }
            _ => None,
        }
    }

    /// The file being read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The dimension, once known (from the header, or after the first row).
    pub fn dim(&self) -> Option<usize> {
        self.dim
    }

    /// Rows returned so far.
    pub fn rows_read(&self) -> u64 {
        self.rows
    }

    /// The number of rows, if the format lets it be known up front (exact
    /// for `.npy` and HDF5, an estimate from the file size and the first
    /// row for TEXMEX files; `None` for JSON lines).
    pub fn len_hint(&mut self) -> Option<u64> {
        let current = match &*self.inner {
            Inner::Texmex(r) => r.len_hint(),
            Inner::Jsonl(_) => None,
            other => other.declared().map(|(n, _)| n),
        }?;
        let mut rest = 0;
        for (_, h) in &self.pending {
            rest += (*h)?;
        }
        Some(self.before + current + rest)
    }

    /// Reads the next row into `row` (reusing its buffers). Returns `false`
    /// at the end of the input.
    pub fn next_into(&mut self, row: &mut Row) -> Result<bool, InputError> {
        let index = self.rows;
        let mut byte;
        loop {
            byte = match &*self.inner {
                Inner::Npy(r) => Some(r.byte()),
                _ => None,
            };
            let more = match &mut *self.inner {
                Inner::Texmex(r) => r.next_into(&mut row.vector),
                Inner::Npy(r) => r.next_into(&mut row.vector),
                Inner::Jsonl(r) => r.next_into(row),
                #[cfg(feature = "hdf5")]
                Inner::Hdf5(r) => r.next_into(&mut row.vector),
            }
            .map_err(|problem| self.fail(index, byte, problem))?;
            if more {
                break;
            }
            let Some((next, _)) = self.pending.pop_front() else {
                return Ok(false);
            };
            let format = Format::from_path(&next)?;
            let inner = open_inner(&next, format, None)?;
            if let (Some((_, got)), Some(want)) = (inner.declared(), self.dim) {
                if got != want {
                    return Err(InputError {
                        path: next,
                        at: Location {
                            row: Some(index),
                            shard_row: Some(0),
                            ..Location::default()
                        },
                        problem: Problem::DimensionMismatch {
                            got,
                            want,
                            against: "shard",
                        },
                    });
                }
            }
            self.before = index;
            self.path = next;
            *self.inner = inner;
        }
        let dim = row.vector.len();
        match self.dim {
            None => {
                if dim == 0 {
                    return Err(self.fail(index, byte, Problem::EmptyVector));
                }
                self.dim = Some(dim);
            }
            Some(want) if want != dim => {
                let problem = Problem::DimensionMismatch {
                    got: dim,
                    want,
                    against: "row",
                };
                return Err(self.fail(index, byte, problem));
            }
            Some(_) => {}
        }
        if let Some((component, &value)) =
            row.vector.iter().enumerate().find(|(_, x)| !x.is_finite())
        {
            return Err(self.fail(index, byte, Problem::NotFinite { component, value }));
        }
        self.rows += 1;
        Ok(true)
    }

    /// The error for `problem` at row `index`; `byte` is the row's offset
    /// when the caller knows it (`.npy`), else the reader's own.
    fn fail(&self, index: u64, byte: Option<u64>, problem: Problem) -> InputError {
        let mut at = Location {
            row: Some(index),
            byte,
            ..Location::default()
        };
        if self.sharded {
            at.shard_row = Some(index - self.before);
        }
        match &*self.inner {
            Inner::Jsonl(r) => at.line = Some(r.line()),
            Inner::Texmex(r) => at.byte = Some(r.row_start()),
            _ => {}
        }
        InputError {
            path: self.path.clone(),
            at,
            problem,
        }
    }
}

impl Iterator for VectorReader {
    type Item = Result<Row, InputError>;

    fn next(&mut self) -> Option<Result<Row, InputError>> {
        let mut row = Row::default();
        match self.next_into(&mut row) {
            Ok(true) => Some(Ok(row)),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// A dense row-major matrix of f32 vectors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Matrix {
    /// Components per row.
    pub dim: usize,
    /// `len() * dim` components, row after row.
    pub data: Vec<f32>,
}

impl Matrix {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    /// True if there are no rows.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// All rows in order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = &[f32]> + '_ {
        self.data.chunks_exact(self.dim.max(1))
    }
}

/// Reads every vector of `path` into a [`Matrix`] (keys and values of JSON
/// lines are ignored). Fails on an empty file.
pub fn read_matrix(path: impl AsRef<Path>) -> Result<Matrix, InputError> {
    let mut reader = VectorReader::open(path.as_ref())?;
    let mut data = Vec::new();
    if let (Some(n), Some(d)) = (reader.len_hint(), reader.dim()) {
        data.reserve((n as usize).saturating_mul(d).min(1 << 28));
    }
    let mut row = Row::default();
    while reader.next_into(&mut row)? {
        if data.is_empty() {
            if let Some(n) = reader.len_hint() {
                data.reserve((n as usize).saturating_mul(row.vector.len()).min(1 << 28));
            }
        }
        data.extend_from_slice(&row.vector);
    }
    let Some(dim) = reader.dim().filter(|_| !data.is_empty()) else {
        return Err(InputError::file(path.as_ref(), Problem::NoVectors));
    };
    Ok(Matrix { dim, data })
}

/// Reads a TEXMEX `.ivecs` file of ground-truth ids: one `Vec<i32>` per row
/// (rows may differ in length). Negative ids are rejected.
pub fn read_ivecs(path: impl AsRef<Path>) -> Result<Vec<Vec<u32>>, InputError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path)
        .map_err(|e| InputError::file(path, Problem::io("cannot open", e)))?;
    let size = file.metadata().map(|m| m.len()).ok();
    let mut r = texmex::Reader::new(Box::new(file), texmex::Elem::I32, size);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    loop {
        let i = out.len() as u64;
        let fail = |r: &texmex::Reader, problem| InputError {
            path: path.to_path_buf(),
            at: Location {
                row: Some(i),
                byte: Some(r.row_start()),
                ..Location::default()
            },
            problem,
        };
        let more = r.next_ids_into(&mut buf).map_err(|p| fail(&r, p))?;
        if !more {
            break;
        }
        let mut ids = Vec::with_capacity(buf.len());
        for (index, &id) in buf.iter().enumerate() {
            if id < 0 {
                return Err(fail(&r, Problem::NegativeId { index, id }));
            }
            ids.push(id as u32);
        }
        out.push(ids);
    }
    Ok(out)
}

/// Writes `m` as `.fvecs`.
pub fn write_fvecs(path: impl AsRef<Path>, m: &Matrix) -> Result<()> {
    let mut w = FvecsWriter::create(path.as_ref())?;
    for row in m.rows() {
        w.push(row)?;
    }
    w.finish()
}

/// Writes `rows` as `.ivecs`.
pub fn write_ivecs(path: impl AsRef<Path>, rows: &[Vec<u32>]) -> Result<()> {
    let mut w = IvecsWriter::create(path.as_ref())?;
    for row in rows {
        w.push(row)?;
    }
    w.finish()
}

/// Decodes a hex string (an optional `0x` prefix is allowed) for error
/// messages that name the field.
pub fn parse_hex(field: &str, s: &str) -> Result<Vec<u8>> {
    let t = s.strip_prefix("0x").unwrap_or(s);
    hex::decode(t).with_context(|| format!("{field} {s:?} is not valid hex"))
}

#[cfg(test)]
mod tests;
