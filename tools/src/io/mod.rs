//! Streaming vector readers and writers.
//!
//! Formats, chosen by file extension ([`Format::from_path`]):
//!
//! * `.fvecs`, `.bvecs`, `.ivecs` (TEXMEX): per row a little-endian `i32`
//!   dimension, then that many `f32` / `u8` / `i32` components;
//! * `.npy`: NumPy version 1–3 files holding a 2-D, C-order, little-endian
//!   `float32` array;
//! * `.jsonl` / `.json` / `.ndjson`: one JSON object per line with a
//!   `"vector"` array and optional hex `"key"` and `"value"` strings.
//!
//! [`VectorReader`] yields one [`Row`] at a time from a buffered reader, so
//! a file is never held in memory by the reader; callers that need all rows
//! (an index build) copy each row exactly once. Every row is checked: equal
//! dimensions across rows, finite components, no truncation. Errors name the
//! file and the 0-based row (and for JSON lines, the 1-based line).
//!
//! `.hdf5` (ann-benchmarks) is recognised and rejected with an explanation:
//! see docs/cli.md.

mod jsonl;
mod npy;
mod texmex;

pub use jsonl::JsonLines;
pub use texmex::{FvecsWriter, IvecsWriter};

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Upper bound on a vector's dimension accepted from a file header: larger
/// values are treated as corruption rather than allocated.
pub const MAX_DIM: usize = 1 << 20;

/// A vector file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// TEXMEX `.fvecs` (f32 components).
    Fvecs,
    /// TEXMEX `.bvecs` (u8 components).
    Bvecs,
    /// TEXMEX `.ivecs` (i32 components; ground-truth ids).
    Ivecs,
    /// NumPy `.npy`, 2-D little-endian float32, C order.
    Npy,
    /// JSON lines.
    Jsonl,
    /// ann-benchmarks HDF5 (recognised, not supported).
    Hdf5,
}

impl Format {
    /// Picks the format from the file extension.
    pub fn from_path(path: &Path) -> Result<Format> {
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
            _ => bail!(
                "{}: unknown vector file extension {ext:?} (expected .fvecs, .bvecs, .ivecs, .npy, .jsonl)",
                path.display()
            ),
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
}

/// A streaming reader of vectors from any supported format.
pub struct VectorReader {
    path: PathBuf,
    inner: Inner,
    /// Rows returned so far; also the 0-based index of the next row.
    rows: u64,
    /// The dimension fixed by the header or the first row.
    dim: Option<usize>,
}

impl VectorReader {
    /// Opens `path`, reading only its header (if any).
    pub fn open(path: impl AsRef<Path>) -> Result<VectorReader> {
        let path = path.as_ref().to_path_buf();
        let format = Format::from_path(&path)?;
        let file = std::fs::File::open(&path)
            .with_context(|| format!("{}: cannot open", path.display()))?;
        let size = file.metadata().map(|m| m.len()).ok();
        let inner = match format {
            Format::Fvecs => Inner::Texmex(texmex::Reader::new(file, texmex::Elem::F32, size)),
            Format::Bvecs => Inner::Texmex(texmex::Reader::new(file, texmex::Elem::U8, size)),
            Format::Ivecs => bail!(
                "{}: .ivecs holds integer ids (ground truth), not vectors",
                path.display()
            ),
            Format::Npy => Inner::Npy(
                npy::Reader::new(file)
                    .with_context(|| format!("{}: bad .npy header", path.display()))?,
            ),
            Format::Jsonl => Inner::Jsonl(jsonl::VectorLines::new(file)),
            Format::Hdf5 => bail!(
                "{}: HDF5 input is not supported (no HDF5 library in the default build); \
                 convert it first, e.g. python3 -c \"import h5py,numpy; \
                 numpy.save('train.npy', h5py.File('{}')['train'][:].astype('float32'))\", \
                 then pass the .npy file (see docs/cli.md)",
                path.display(),
                path.display()
            ),
        };
        let dim = match &inner {
            Inner::Npy(r) => Some(r.dim()),
            _ => None,
        };
        Ok(VectorReader {
            path,
            inner,
            rows: 0,
            dim,
        })
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
    /// for `.npy`, an estimate from the file size and the first row for
    /// TEXMEX files; `None` for JSON lines).
    pub fn len_hint(&mut self) -> Option<u64> {
        match &mut self.inner {
            Inner::Texmex(r) => r.len_hint(),
            Inner::Npy(r) => Some(r.rows()),
            Inner::Jsonl(_) => None,
        }
    }

    /// Reads the next row into `row` (reusing its buffers). Returns `false`
    /// at the end of the input.
    pub fn next_into(&mut self, row: &mut Row) -> Result<bool> {
        let index = self.rows;
        let more = match &mut self.inner {
            Inner::Texmex(r) => r.next_into(&mut row.vector),
            Inner::Npy(r) => r.next_into(&mut row.vector),
            Inner::Jsonl(r) => r.next_into(row),
        }
        .with_context(|| self.locate(index))?;
        if !more {
            return Ok(false);
        }
        let dim = row.vector.len();
        match self.dim {
            None => {
                if dim == 0 {
                    bail!("{}: empty vector", self.locate(index));
                }
                self.dim = Some(dim);
            }
            Some(d) if d != dim => bail!(
                "{}: dimension {dim} differs from the first row's {d}",
                self.locate(index)
            ),
            Some(_) => {}
        }
        if let Some((j, x)) = row.vector.iter().enumerate().find(|(_, x)| !x.is_finite()) {
            bail!("{}: component {j} is {x} (not finite)", self.locate(index));
        }
        self.rows += 1;
        Ok(true)
    }

    /// "file: row i" (plus the line number for JSON lines).
    fn locate(&self, index: u64) -> String {
        match &self.inner {
            Inner::Jsonl(r) => format!("{}: line {} (row {index})", self.path.display(), r.line()),
            _ => format!("{}: row {index}", self.path.display()),
        }
    }
}

impl Iterator for VectorReader {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
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
pub fn read_matrix(path: impl AsRef<Path>) -> Result<Matrix> {
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
    let Some(dim) = reader.dim() else {
        bail!("{}: no vectors", path.as_ref().display());
    };
    Ok(Matrix { dim, data })
}

/// Reads a TEXMEX `.ivecs` file of ground-truth ids: one `Vec<i32>` per row
/// (rows may differ in length). Negative ids are rejected.
pub fn read_ivecs(path: impl AsRef<Path>) -> Result<Vec<Vec<u32>>> {
    let path = path.as_ref();
    let file =
        std::fs::File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let size = file.metadata().map(|m| m.len()).ok();
    let mut r = texmex::Reader::new(file, texmex::Elem::I32, size);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    loop {
        let i = out.len();
        let more = r
            .next_ids_into(&mut buf)
            .with_context(|| format!("{}: row {i}", path.display()))?;
        if !more {
            break;
        }
        let mut ids = Vec::with_capacity(buf.len());
        for (j, &x) in buf.iter().enumerate() {
            if x < 0 {
                bail!("{}: row {i}: id {j} is negative ({x})", path.display());
            }
            ids.push(x as u32);
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
