//! NumPy `.npy` reader for 2-D, C-order arrays of float32, float16,
//! float64, int8 or uint8 (either byte order), widened to f32 row by row.
//!
//! The header (magic, version, dict literal) is parsed by `npyz`; this
//! module checks what a vector file must be (2-D, C order, a numeric dtype
//! it can widen) and decodes the data itself. A regular file is memory
//! mapped: rows are decoded straight from the mapping and the pages already
//! consumed are dropped every [`RELEASE_BYTES`], so a file larger than
//! memory is never resident whole; its size is checked against the header
//! when it is opened (truncation names the row it cuts, trailing bytes are
//! refused). Standard input is read row by row through a buffer.

use super::error::{Location, Problem};
use npyz::{Endianness, NpyFile, NpyHeader, Order, TypeChar};
use std::io::{BufReader, Read};

/// Consumed mapped bytes are released to the kernel in steps of this size
/// (small under test, so the release path runs on small files).
#[cfg(not(test))]
const RELEASE_BYTES: usize = 64 << 20;
#[cfg(test)]
const RELEASE_BYTES: usize = 3 * PAGE;

/// Counts the bytes read through it, so the header length is known.
struct Counting<R> {
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

/// An element type the reader widens to f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elem {
    F32,
    F16,
    F64,
    I8,
    U8,
}

impl Elem {
    fn size(self) -> usize {
        match self {
            Elem::F64 => 8,
            Elem::F32 => 4,
            Elem::F16 => 2,
            Elem::I8 | Elem::U8 => 1,
        }
    }
}

/// Decodes one row's raw bytes into `out`.
fn decode(raw: &[u8], elem: Elem, big: bool, out: &mut Vec<f32>) {
    out.clear();
    match elem {
        Elem::F32 => out.extend(raw.chunks_exact(4).map(|c| {
            let b = [c[0], c[1], c[2], c[3]];
            if big {
                f32::from_be_bytes(b)
            } else {
                f32::from_le_bytes(b)
            }
        })),
        Elem::F16 => out.extend(raw.chunks_exact(2).map(|c| {
            let b = [c[0], c[1]];
            f32::from(if big {
                half::f16::from_be_bytes(b)
            } else {
                half::f16::from_le_bytes(b)
            })
        })),
        Elem::F64 => out.extend(raw.chunks_exact(8).map(|c| {
            let b = [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]];
            (if big {
                f64::from_be_bytes(b)
            } else {
                f64::from_le_bytes(b)
            }) as f32
        })),
        Elem::I8 => out.extend(raw.iter().map(|&b| f32::from(b as i8))),
        Elem::U8 => out.extend(raw.iter().map(|&b| f32::from(b))),
    }
}

/// Where the data bytes come from.
enum Data {
    /// A memory-mapped regular file; `released` is the mapped prefix
    /// already handed back to the kernel.
    Mapped { map: memmap2::Mmap, released: usize },
    /// A pipe, read row by row.
    Stream(BufReader<Box<dyn Read + Send>>),
}

pub(crate) struct Reader {
    data: Data,
    elem: Elem,
    big: bool,
    rows: u64,
    dim: usize,
    /// Bytes before the data (magic, version, header).
    offset: u64,
    next: u64,
    raw: Vec<u8>,
}

/// A header problem or a problem at a row (with its byte offset).
pub(crate) type Failure = (Location, Problem);

fn whole(problem: Problem) -> Failure {
    (Location::default(), problem)
}

const EXPECTED: &str = "float32, float16, float64, int8 or uint8 ('<f4', '<f2', '<f8', '|i1', \
                        '|u1', either byte order)";

impl Reader {
    /// Opens a regular file through a memory map.
    pub(crate) fn open_file(file: std::fs::File) -> Result<Reader, Failure> {
        // SAFETY: the map is read only and private to this reader; the
        // input file is not written by prox while a build reads it (a file
        // changed underneath by another process yields wrong rows, not
        // undefined reads: the length is fixed at map time and a shrunk
        // file surfaces as SIGBUS, the documented hazard of mapping input).
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| whole(Problem::io("cannot map", e)))?;
        let _ = map.advise(memmap2::Advice::Sequential);
        let mut r = Self::header(std::io::Cursor::new(&map[..]))?;
        let size = map.len() as u64;
        r.data = Data::Mapped { map, released: 0 };
        let row_bytes = (r.dim * r.elem.size()) as u64;
        let expected = r.offset + r.rows * row_bytes;
        if size > expected {
            return Err(whole(Problem::TrailingBytes {
                rows: r.rows,
                extra: size - expected,
            }));
        }
        if size < expected {
            let cut = (size - r.offset) / row_bytes;
            let at = Location {
                row: Some(cut),
                byte: Some(r.offset + cut * row_bytes),
                ..Location::default()
            };
            return Err((
                at,
                Problem::Truncated(format!(
                    "the header declares {} rows but the file ends inside row {cut}",
                    r.rows
                )),
            ));
        }
        Ok(r)
    }

    /// Reads the header from a stream (standard input).
    pub(crate) fn open_stream(src: Box<dyn Read + Send>) -> Result<Reader, Failure> {
        let mut src = BufReader::with_capacity(1 << 20, src);
        let mut r = Self::header(&mut src)?;
        r.data = Data::Stream(src);
        Ok(r)
    }

    /// Parses and checks the header; the data source is set by the caller.
    fn header(src: impl Read) -> Result<Reader, Failure> {
        let mut src = Counting {
            inner: src,
            read: 0,
        };
        let header = NpyHeader::from_reader(&mut src).map_err(|e| {
            whole(Problem::BadHeader(
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    "file shorter than its header (missing the \\x93NUMPY magic?)".into()
                } else {
                    format!("{e} (missing the \\x93NUMPY magic or a bad header)")
                },
            ))
        })?;
        let offset = src.read;
        let file = NpyFile::with_header(header, std::io::empty());
        if file.order() == Order::Fortran {
            return Err(whole(Problem::FortranOrder));
        }
        let [rows, dim] = file.shape()[..] else {
            return Err(whole(Problem::BadShape(file.shape().to_vec())));
        };
        if dim == 0 || dim as usize > super::MAX_DIM {
            return Err(whole(Problem::BadDimension {
                got: dim as i64,
                min: 1,
                max: super::MAX_DIM as i64,
            }));
        }
        let unsupported = |descr: String| {
            whole(Problem::UnsupportedDtype {
                dtype: descr,
                expected: EXPECTED,
            })
        };
        let dtype = file.dtype();
        let npyz::DType::Plain(t) = &dtype else {
            return Err(unsupported(dtype.descr().trim_matches('\'').to_string()));
        };
        let elem = match (t.type_char(), t.size_field()) {
            (TypeChar::Float, 4) => Elem::F32,
            (TypeChar::Float, 2) => Elem::F16,
            (TypeChar::Float, 8) => Elem::F64,
            (TypeChar::Int, 1) => Elem::I8,
            (TypeChar::Uint, 1) => Elem::U8,
            _ => return Err(unsupported(dtype.descr().trim_matches('\'').to_string())),
        };
        Ok(Reader {
            data: Data::Stream(BufReader::new(Box::new(std::io::empty()))),
            elem,
            big: t.endianness() == Endianness::Big,
            rows,
            dim: dim as usize,
            offset,
            next: 0,
            raw: Vec::new(),
        })
    }

    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    /// The byte offset of the next row.
    pub(crate) fn byte(&self) -> u64 {
        self.offset + self.next * (self.dim * self.elem.size()) as u64
    }

    pub(crate) fn next_into(&mut self, out: &mut Vec<f32>) -> Result<bool, Problem> {
        let row_bytes = self.dim * self.elem.size();
        let start = self.byte() as usize;
        match &mut self.data {
            Data::Mapped { map, released } => {
                if self.next == self.rows {
                    return Ok(false);
                }
                // The size was checked at open, so the row is in the map.
                decode(&map[start..start + row_bytes], self.elem, self.big, out);
                let end = start + row_bytes;
                if end - *released >= RELEASE_BYTES {
                    let upto = end / PAGE * PAGE;
                    // SAFETY: the map is a read-only shared file mapping, so
                    // MADV_DONTNEED only drops clean pages that are reloaded
                    // from the file if touched again; no slice into the
                    // released range is alive (rows are copied into `out`).
                    // Advisory: a failure (e.g. another page size) is
                    // harmless and ignored.
                    let _ = unsafe {
                        map.unchecked_advise_range(
                            memmap2::UncheckedAdvice::DontNeed,
                            *released,
                            upto - *released,
                        )
                    };
                    *released = upto;
                }
            }
            Data::Stream(src) => {
                if self.next == self.rows {
                    let mut probe = [0u8; 1];
                    let extra = src
                        .read(&mut probe)
                        .map_err(|e| Problem::io("read failed", e))?;
                    if extra > 0 {
                        return Err(Problem::TrailingBytes {
                            rows: self.rows,
                            extra: extra as u64,
                        });
                    }
                    return Ok(false);
                }
                self.raw.resize(row_bytes, 0);
                src.read_exact(&mut self.raw).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        Problem::Truncated(format!(
                            "the header declares {} rows but the input ends inside this one",
                            self.rows
                        ))
                    } else {
                        Problem::io("read failed", e)
                    }
                })?;
                decode(&self.raw, self.elem, self.big, out);
            }
        }
        self.next += 1;
        Ok(true)
    }
}

/// The page size `madvise` ranges are aligned to (on a machine with larger
/// pages the advice fails and is ignored).
const PAGE: usize = 4096;
