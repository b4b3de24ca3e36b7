//! Streaming vector readers and writers.
//!
//! Formats, chosen by file extension ([`Format::from_path`]):
//!
//! * `.fvecs`, `.bvecs`, `.ivecs` (TEXMEX): per row a little-endian `i32`
//!   dimension, then that many `f32` / `u8` / `i32` components;
//! * `.npy`: NumPy version 1–3 files holding a 2-D, C-order array of
//!   float32, float16, float64, int8 or uint8 (either byte order), widened
//!   to f32;
//! * `.jsonl` / `.json` / `.ndjson`: one JSON object per line with a
//!   `"vector"` array and optional hex `"key"` and `"value"` strings.
//!
//! [`VectorReader`] yields one [`Row`] at a time from a buffered reader, so
//! a file is never held in memory by the reader; callers that need all rows
//! (an index build) copy each row exactly once. Every row is checked: equal
//! dimensions across rows, finite components, no truncation. Errors name the
//! file and the 0-based row (and for JSON lines, the 1-based line).
//!
//! [`VectorReader::open_as`] also reads standard input (`-`, with an
//! explicit [`Format`]) and a directory of `.npy` / `.fvecs` / `.bvecs`
//! shards as one input, in file-name order.
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
    /// NumPy `.npy`, 2-D, C order, float32/16/64 or int8/uint8.
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
    /// Rows of the shards already finished (directory input).
    before: u64,
    /// Rows returned so far; also the 0-based index of the next row.
    rows: u64,
    /// The dimension fixed by the header or the first row.
    dim: Option<usize>,
}

/// Opens one source (a file, or standard input for [`STDIN`]) as `format`.
fn open_inner(path: &Path, format: Format) -> Result<Inner> {
    let (src, size): (Box<dyn std::io::Read + Send>, Option<u64>) = if path == Path::new(STDIN) {
        (Box::new(std::io::stdin()), None)
    } else {
        let file = std::fs::File::open(path)
            .with_context(|| format!("{}: cannot open", path.display()))?;
        let size = file.metadata().map(|m| m.len()).ok();
        (Box::new(file), size)
    };
    Ok(match format {
        Format::Fvecs => Inner::Texmex(texmex::Reader::new(src, texmex::Elem::F32, size)),
        Format::Bvecs => Inner::Texmex(texmex::Reader::new(src, texmex::Elem::U8, size)),
        Format::Ivecs => bail!(
            "{}: .ivecs holds integer ids (ground truth), not vectors",
            path.display()
        ),
        Format::Npy => Inner::Npy(
            npy::Reader::new(src, size)
                .with_context(|| format!("{}: bad .npy header", path.display()))?,
        ),
        Format::Jsonl => Inner::Jsonl(jsonl::VectorLines::new(src)),
        Format::Hdf5 => bail!(
            "{}: HDF5 input is not supported (no HDF5 library in the default build); \
             convert it first, e.g. python3 -c \"import h5py,numpy; \
             numpy.save('train.npy', h5py.File('{}')['train'][:].astype('float32'))\", \
             then pass the .npy file (see docs/cli.md)",
            path.display(),
            path.display()
        ),
    })
}

/// The shard files of a directory input: every `.npy`, `.fvecs` and
/// `.bvecs` file directly inside it, in file-name order.
fn shards(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))? {
        let p = e
            .with_context(|| format!("{}: cannot list", dir.display()))?
            .path();
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
        bail!(
            "{}: directory holds no .npy, .fvecs or .bvecs shard",
            dir.display()
        );
    }
    Ok(files)
}

impl VectorReader {
    /// Opens `path`, reading only its header (if any); the format comes
    /// from the extension.
    pub fn open(path: impl AsRef<Path>) -> Result<VectorReader> {
        Self::open_as(path, None)
    }

    /// Opens `path` as `format` (or by its extension when `None`). `-` is
    /// standard input and needs a format; a directory is read as shards.
    pub fn open_as(path: impl AsRef<Path>, format: Option<Format>) -> Result<VectorReader> {
        let path = path.as_ref().to_path_buf();
        let mut pending = std::collections::VecDeque::new();
        let first = if path.is_dir() {
            let mut files = shards(&path)?.into_iter();
            let first = files.next().expect("shards() returns at least one file");
            // Row counts of the other shards, for the progress bar: exact
            // for .npy, from the file size for TEXMEX files.
            for p in files {
                let mut r = VectorReader::open(&p)?;
                let hint = r.len_hint().or_else(|| r.texmex_hint());
                pending.push_back((p, hint));
            }
            first
        } else if path == Path::new(STDIN) {
            if format.is_none() {
                bail!("reading vectors from standard input needs a format (--input-format)");
            }
            path.clone()
        } else {
            path.clone()
        };
        let format = match format {
            Some(f) if !path.is_dir() => f,
            _ => Format::from_path(&first)?,
        };
        let inner = open_inner(&first, format)?;
        let dim = match &inner {
            Inner::Npy(r) => Some(r.dim()),
            _ => None,
        };
        Ok(VectorReader {
            path: first,
            inner: Box::new(inner),
            pending,
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
    /// for `.npy`, an estimate from the file size and the first row for
    /// TEXMEX files; `None` for JSON lines).
    pub fn len_hint(&mut self) -> Option<u64> {
        let current = match &mut *self.inner {
            Inner::Texmex(r) => r.len_hint(),
            Inner::Npy(r) => Some(r.rows()),
            Inner::Jsonl(_) => None,
        }?;
        let mut rest = 0;
        for (_, h) in &self.pending {
            rest += (*h)?;
        }
        Some(self.before + current + rest)
    }

    /// Reads the next row into `row` (reusing its buffers). Returns `false`
    /// at the end of the input.
    pub fn next_into(&mut self, row: &mut Row) -> Result<bool> {
        let index = self.rows;
        loop {
            let more = match &mut *self.inner {
                Inner::Texmex(r) => r.next_into(&mut row.vector),
                Inner::Npy(r) => r.next_into(&mut row.vector),
                Inner::Jsonl(r) => r.next_into(row),
            }
            .with_context(|| self.locate(index))?;
            if more {
                break;
            }
            let Some((next, _)) = self.pending.pop_front() else {
                return Ok(false);
            };
            let format = Format::from_path(&next)?;
            let inner = open_inner(&next, format)?;
            if let (Inner::Npy(r), Some(d)) = (&inner, self.dim) {
                if r.dim() != d {
                    bail!(
                        "{}: dimension {} differs from the first shard's {d}",
                        next.display(),
                        r.dim()
                    );
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
        let local = index - self.before;
        let shard = if self.before > 0 || !self.pending.is_empty() {
            format!(" of the directory input, row {local} of this shard")
        } else {
            String::new()
        };
        match &*self.inner {
            Inner::Jsonl(r) => format!("{}: line {} (row {index})", self.path.display(), r.line()),
            _ => format!("{}: row {index}{shard}", self.path.display()),
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
    let mut r = texmex::Reader::new(Box::new(file), texmex::Elem::I32, size);
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
