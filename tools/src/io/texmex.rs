//! TEXMEX `.fvecs` / `.bvecs` / `.ivecs`: per row a little-endian `i32`
//! dimension followed by that many components (f32, u8 or i32).

use super::error::Problem;
use anyhow::{bail, Context, Result};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Component type of a TEXMEX file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    F32,
    U8,
    I32,
}

impl Elem {
    fn size(self) -> usize {
        match self {
            Elem::F32 | Elem::I32 => 4,
            Elem::U8 => 1,
        }
    }
}

pub(crate) struct Reader {
    src: BufReader<Box<dyn Read + Send>>,
    elem: Elem,
    file_size: Option<u64>,
    first_dim: Option<usize>,
    raw: Vec<u8>,
    /// Byte offset of the row read last (of the next row before the first).
    row_start: u64,
    /// Byte offset of the next row.
    pos: u64,
}

/// Reads as many bytes as possible into `buf`; returns how many were read
/// (less than `buf.len()` only at the end of the file).
fn read_full(src: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match src.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl Reader {
    pub(crate) fn new(file: Box<dyn Read + Send>, elem: Elem, file_size: Option<u64>) -> Reader {
        Reader {
            src: BufReader::with_capacity(1 << 20, file),
            elem,
            file_size,
            first_dim: None,
            raw: Vec::new(),
            row_start: 0,
            pos: 0,
        }
    }

    /// Rows implied by the file size and the first row's dimension.
    pub(crate) fn len_hint(&self) -> Option<u64> {
        let d = self.first_dim? as u64;
        Some(self.file_size? / (4 + d * self.elem.size() as u64))
    }

    /// The byte offset where the row read last (or being read) starts.
    pub(crate) fn row_start(&self) -> u64 {
        self.row_start
    }

    /// Reads the next row's raw component bytes into `self.raw`; `false` at
    /// a clean end of file.
    fn next_raw(&mut self) -> Result<bool, Problem> {
        self.row_start = self.pos;
        let mut head = [0u8; 4];
        let got = read_full(&mut self.src, &mut head).map_err(|e| Problem::io("read failed", e))?;
        if got == 0 {
            return Ok(false);
        }
        if got < 4 {
            return Err(Problem::Truncated(
                "the file ends inside the 4-byte dimension header".into(),
            ));
        }
        let dim = i32::from_le_bytes(head);
        // Id rows (.ivecs) may be empty and may differ in length (a result
        // list shorter than k); vector rows may not.
        let ids = self.elem == Elem::I32;
        let min = i32::from(!ids);
        if dim < min || dim as usize > super::MAX_DIM {
            return Err(Problem::BadDimension {
                got: dim.into(),
                min: min.into(),
                max: super::MAX_DIM as i64,
            });
        }
        let dim = dim as usize;
        if let Some(first) = self.first_dim {
            if first != dim && !ids {
                return Err(Problem::DimensionMismatch {
                    got: dim,
                    want: first,
                    against: "row",
                });
            }
        } else {
            self.first_dim = Some(dim);
        }
        let want = dim * self.elem.size();
        self.raw.resize(want, 0);
        let got =
            read_full(&mut self.src, &mut self.raw).map_err(|e| Problem::io("read failed", e))?;
        if got < want {
            return Err(Problem::Truncated(format!(
                "expected {want} bytes of components, the file ends after {got}"
            )));
        }
        self.pos += 4 + want as u64;
        Ok(true)
    }

    /// Next vector (f32 or u8 components as f32).
    pub(crate) fn next_into(&mut self, out: &mut Vec<f32>) -> Result<bool, Problem> {
        if self.elem == Elem::I32 {
            return Err(Problem::NotVectors);
        }
        if !self.next_raw()? {
            return Ok(false);
        }
        out.clear();
        match self.elem {
            Elem::F32 => out.extend(
                self.raw
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            ),
            Elem::U8 | Elem::I32 => out.extend(self.raw.iter().map(|&b| b as f32)),
        }
        Ok(true)
    }

    /// Next row of i32 ids (`.ivecs`).
    pub(crate) fn next_ids_into(&mut self, out: &mut Vec<i32>) -> Result<bool, Problem> {
        if !self.next_raw()? {
            return Ok(false);
        }
        out.clear();
        out.extend(
            self.raw
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        Ok(true)
    }
}

/// Streaming `.fvecs` writer; call [`finish`](Self::finish) to flush and
/// surface write errors.
pub struct FvecsWriter {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
    dim: Option<usize>,
}

impl FvecsWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<FvecsWriter> {
        let f = std::fs::File::create(path)
            .with_context(|| format!("{}: cannot create", path.display()))?;
        Ok(FvecsWriter {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, f),
            dim: None,
        })
    }

    /// Appends one row; every row must have the first row's dimension.
    pub fn push(&mut self, row: &[f32]) -> Result<()> {
        check_dim(&self.path, &mut self.dim, row.len())?;
        let mut w = || -> std::io::Result<()> {
            self.out.write_all(&(row.len() as i32).to_le_bytes())?;
            for x in row {
                self.out.write_all(&x.to_le_bytes())?;
            }
            Ok(())
        };
        w().with_context(|| format!("{}: write failed", self.path.display()))
    }

    /// Flushes and syncs the file.
    pub fn finish(mut self) -> Result<()> {
        finish(&self.path, &mut self.out)
    }
}

/// Streaming `.ivecs` writer.
pub struct IvecsWriter {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
}

impl IvecsWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<IvecsWriter> {
        let f = std::fs::File::create(path)
            .with_context(|| format!("{}: cannot create", path.display()))?;
        Ok(IvecsWriter {
            path: path.to_path_buf(),
            out: BufWriter::new(f),
        })
    }

    /// Appends one row of ids (rows may differ in length, as in a result
    /// list shorter than k). Ids above `i32::MAX` are rejected.
    pub fn push(&mut self, ids: &[u32]) -> Result<()> {
        let mut w = || -> Result<()> {
            self.out.write_all(&(ids.len() as i32).to_le_bytes())?;
            for &id in ids {
                let v = i32::try_from(id).with_context(|| format!("id {id} exceeds i32"))?;
                self.out.write_all(&v.to_le_bytes())?;
            }
            Ok(())
        };
        w().with_context(|| format!("{}: write failed", self.path.display()))
    }

    /// Flushes and syncs the file.
    pub fn finish(mut self) -> Result<()> {
        finish(&self.path, &mut self.out)
    }
}

fn check_dim(path: &Path, dim: &mut Option<usize>, got: usize) -> Result<()> {
    if got == 0 || got > super::MAX_DIM {
        bail!(
            "{}: cannot write a vector of dimension {got}",
            path.display()
        );
    }
    match *dim {
        None => *dim = Some(got),
        Some(d) if d != got => bail!(
            "{}: row dimension {got} differs from the first row's {d}",
            path.display()
        ),
        Some(_) => {}
    }
    Ok(())
}

fn finish(path: &Path, out: &mut BufWriter<std::fs::File>) -> Result<()> {
    out.flush()
        .and_then(|_| out.get_ref().sync_all())
        .with_context(|| format!("{}: write failed", path.display()))
}
