//! NumPy `.npy` reader for 2-D, C-order arrays of float32, float16,
//! float64, int8 or uint8 (either byte order), decoded by `npyz` and
//! widened to f32 row by row.
//!
//! The header (magic, version, dict literal) is parsed by `npyz`; this
//! module checks what a vector file must be (2-D, C order, a numeric dtype
//! it can widen) and, when the source size is known, that the data section
//! is exactly `rows · dim · item size` bytes long (truncation is reported on
//! the row it cuts, trailing bytes at the end).

use anyhow::{bail, Context, Result};
use npyz::{NpyFile, NpyHeader, NpyReader, Order};
use std::io::{BufReader, Read};

type Src = Counting<BufReader<Box<dyn Read + Send>>>;

/// Counts the bytes read through it, so the header length is known.
pub(crate) struct Counting<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// The element reader, one variant per supported dtype.
enum Data {
    F32(NpyReader<f32, Src>),
    F16(NpyReader<half::f16, Src>),
    F64(NpyReader<f64, Src>),
    I8(NpyReader<i8, Src>),
    U8(NpyReader<u8, Src>),
}

pub(crate) struct Reader {
    data: Data,
    rows: u64,
    dim: usize,
    next: u64,
    /// Header bytes plus the data the header declares, when the source
    /// size is known: the expected file size.
    expected_size: Option<(u64, u64)>,
}

/// Reads `dim` elements of one row from `r` into `out` as f32.
fn row<T: npyz::Deserialize>(
    r: &mut NpyReader<T, Src>,
    dim: usize,
    out: &mut Vec<f32>,
    widen: impl Fn(T) -> f32,
) -> std::io::Result<()> {
    out.clear();
    for _ in 0..dim {
        match r.next() {
            Some(x) => out.push(widen(x?)),
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "end of data",
                ))
            }
        }
    }
    Ok(())
}

impl Reader {
    /// Reads the header from `src`; `size` is the source's length in bytes
    /// if known (a file, not a pipe).
    pub(crate) fn new(src: Box<dyn Read + Send>, size: Option<u64>) -> Result<Reader> {
        let mut src = Counting {
            inner: BufReader::with_capacity(1 << 20, src),
            read: 0,
        };
        let header = NpyHeader::from_reader(&mut src).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                anyhow::anyhow!("file shorter than its header (missing the \\x93NUMPY magic?)")
            } else {
                anyhow::anyhow!("{e} (missing the \\x93NUMPY magic or a bad header)")
            }
        })?;
        let consumed = src.read;
        let file = NpyFile::with_header(header, src);
        if file.order() == Order::Fortran {
            bail!("Fortran-order arrays are not supported; save with numpy.ascontiguousarray");
        }
        let [rows, dim] = file.shape()[..] else {
            bail!("shape {:?} is not 2-D (rows, dim)", file.shape());
        };
        if dim == 0 || dim as usize > super::MAX_DIM {
            bail!("dimension {dim} is out of range 1..={}", super::MAX_DIM);
        }
        let descr = file.dtype().descr();
        let item = match &file.dtype() {
            npyz::DType::Plain(t) => t.num_bytes().unwrap_or(0) as u64,
            _ => 0,
        };
        let unsupported = || {
            anyhow::anyhow!(
                "dtype {descr:?} is not supported: expected float32, float16, float64, int8 \
                 or uint8 ('<f4', '<f2', '<f8', '|i1', '|u1', either byte order)"
            )
        };
        let kind = match &file.dtype() {
            npyz::DType::Plain(t) => (t.type_char(), t.size_field()),
            _ => return Err(unsupported()),
        };
        use npyz::TypeChar::{Float, Int, Uint};
        let data = match kind {
            (Float, 4) => Data::F32(file.data().map_err(|_| unsupported())?),
            (Float, 2) => Data::F16(file.data().map_err(|_| unsupported())?),
            (Float, 8) => Data::F64(file.data().map_err(|_| unsupported())?),
            (Int, 1) => Data::I8(file.data().map_err(|_| unsupported())?),
            (Uint, 1) => Data::U8(file.data().map_err(|_| unsupported())?),
            _ => return Err(unsupported()),
        };
        let expected_size = size.map(|s| (s, consumed + rows * dim * item));
        Ok(Reader {
            data,
            rows,
            dim: dim as usize,
            next: 0,
            expected_size,
        })
    }

    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    pub(crate) fn next_into(&mut self, out: &mut Vec<f32>) -> Result<bool> {
        if self.next == self.rows {
            if let Some((size, expected)) = self.expected_size {
                if size > expected {
                    bail!(
                        "trailing bytes after the {} rows the header declares ({} extra)",
                        self.rows,
                        size - expected
                    );
                }
            }
            return Ok(false);
        }
        let d = self.dim;
        match &mut self.data {
            Data::F32(r) => row(r, d, out, |x| x),
            Data::F16(r) => row(r, d, out, f32::from),
            Data::F64(r) => row(r, d, out, |x| x as f32),
            Data::I8(r) => row(r, d, out, f32::from),
            Data::U8(r) => row(r, d, out, f32::from),
        }
        .with_context(|| {
            format!(
                "truncated: the header declares {} rows but the file ends inside this one",
                self.rows
            )
        })?;
        self.next += 1;
        Ok(true)
    }
}
