//! The typed error of every vector reader: which file, where in it, and
//! what is wrong, so callers (and tests) can match on the problem instead
//! of parsing a message.

use std::fmt;
use std::path::PathBuf;

/// A reader failure: the file, the position in it and the problem.
#[derive(Debug, thiserror::Error)]
#[error("{}: {at}{problem}", path.display())]
pub struct InputError {
    /// The file (or shard, or `-`) being read.
    pub path: PathBuf,
    /// Where in the file the problem is.
    pub at: Location,
    /// What is wrong.
    pub problem: Problem,
}

/// A position in an input. Rows are 0-based and count across the shards
/// of a directory input; lines (JSON lines) are 1-based.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Location {
    /// The row across the whole input.
    pub row: Option<u64>,
    /// The row within the current shard, when the input is a directory.
    pub shard_row: Option<u64>,
    /// The 1-based line (JSON lines).
    pub line: Option<u64>,
    /// The byte offset in the file where the row (or header) starts.
    pub byte: Option<u64>,
}

impl fmt::Display for Location {
    /// "line L (row R), byte B: " with the parts that are known; empty for
    /// a problem of the whole file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match (self.line, self.row) {
            (Some(l), Some(r)) => parts.push(format!("line {l} (row {r})")),
            (Some(l), None) => parts.push(format!("line {l}")),
            (None, Some(r)) => parts.push(format!("row {r}")),
            (None, None) => {}
        }
        if let Some(s) = self.shard_row {
            parts.push(format!("row {s} of this shard of the directory input"));
        }
        if let Some(b) = self.byte {
            parts.push(format!("byte {b}"));
        }
        if parts.is_empty() {
            Ok(())
        } else {
            write!(f, "{}: ", parts.join(", "))
        }
    }
}

/// What is wrong with an input.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The file could not be opened or read.
    #[error("{what}: {source}")]
    Io {
        /// What was being done ("cannot open", "read failed").
        what: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The extension names no supported format.
    #[error("unknown vector file extension {0:?} (expected .fvecs, .bvecs, .ivecs, .npy, .jsonl, .hdf5)")]
    UnknownExtension(String),
    /// The format exists but cannot be used here (with the reason).
    #[error("{0}")]
    Unsupported(String),
    /// The file ends inside a row or header.
    #[error("truncated: {0}")]
    Truncated(String),
    /// A row's dimension differs from the first row's (or first shard's).
    #[error("dimension {got} differs from the first {against}'s {want}")]
    DimensionMismatch {
        /// This row's (shard's) dimension.
        got: usize,
        /// The dimension fixed by the first row (shard).
        want: usize,
        /// "row" or "shard".
        against: &'static str,
    },
    /// A dimension outside `1..=MAX_DIM` (or negative) in a header.
    #[error("implausible dimension {got} (expected {min}..={max})")]
    BadDimension {
        /// The dimension read.
        got: i64,
        /// The smallest accepted.
        min: i64,
        /// The largest accepted.
        max: i64,
    },
    /// A vector with no components.
    #[error("empty vector")]
    EmptyVector,
    /// A NaN or infinite component (after widening to f32).
    #[error("component {component} is {value} (not finite)")]
    NotFinite {
        /// The 0-based component.
        component: usize,
        /// Its value.
        value: f32,
    },
    /// An element type the reader cannot widen to f32.
    #[error("dtype {dtype:?} is not supported: expected {expected}")]
    UnsupportedDtype {
        /// The file's type, as the file spells it.
        dtype: String,
        /// The types that are accepted.
        expected: &'static str,
    },
    /// A Fortran-order (column-major) `.npy` array.
    #[error("Fortran-order arrays are not supported; save with numpy.ascontiguousarray")]
    FortranOrder,
    /// An array that is not 2-D (rows, dim).
    #[error("shape {0:?} is not 2-D (rows, dim)")]
    BadShape(Vec<u64>),
    /// A malformed header (with the parser's reason).
    #[error("bad header: {0}")]
    BadHeader(String),
    /// Bytes after the rows a header declares.
    #[error("trailing bytes after the {rows} rows the header declares ({extra} extra)")]
    TrailingBytes {
        /// Rows the header declares.
        rows: u64,
        /// Bytes beyond them.
        extra: u64,
    },
    /// A JSON line that does not parse or has a bad field.
    #[error("invalid vector line: {0}")]
    BadLine(String),
    /// A missing dataset in an HDF5 file.
    #[error("no dataset {name:?} (the file has: {have})")]
    NoDataset {
        /// The dataset asked for.
        name: String,
        /// The datasets present, comma-separated.
        have: String,
    },
    /// The HDF5 library reported an error.
    #[error("HDF5: {0}")]
    Hdf5(String),
    /// An `.ivecs` file (ids) given where vectors are expected.
    #[error(".ivecs holds integer ids (ground truth), not vectors")]
    NotVectors,
    /// A negative id in an `.ivecs` ground-truth row.
    #[error("id {index} is negative ({id})")]
    NegativeId {
        /// The 0-based position in the row.
        index: usize,
        /// The id read.
        id: i32,
    },
    /// An input with no rows where vectors are needed.
    #[error("no vectors")]
    NoVectors,
    /// A directory input with no shard in it.
    #[error("directory holds no .npy, .fvecs or .bvecs shard")]
    NoShards,
    /// Standard input without `--input-format`.
    #[error("reading vectors from standard input needs a format (--input-format)")]
    StdinNeedsFormat,
}

impl Problem {
    /// Wraps an I/O error with what was being done.
    pub(crate) fn io(what: &'static str, source: std::io::Error) -> Problem {
        Problem::Io { what, source }
    }
}

impl InputError {
    /// A problem of the whole file (no row).
    pub(crate) fn file(path: impl Into<PathBuf>, problem: Problem) -> InputError {
        InputError {
            path: path.into(),
            at: Location::default(),
            problem,
        }
    }
}
