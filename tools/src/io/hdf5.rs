//! ann-benchmarks HDF5 input (the `hdf5` cargo feature): one 2-D dataset
//! of a file (`train` by default; `test`, `neighbors` and `distances` are
//! the layout's others), read in chunks of rows through the HDF5 library,
//! which converts any integer or float element type to f32.

use super::error::Problem;

/// Rows are read in slices of about this many bytes of f32 (small under
/// test, so slices turn over on small files).
#[cfg(not(test))]
const CHUNK_BYTES: usize = 4 << 20;
#[cfg(test)]
const CHUNK_BYTES: usize = 100;

pub(crate) struct Reader {
    ds: hdf5_metno::Dataset,
    rows: u64,
    dim: usize,
    /// Rows per slice read.
    chunk_rows: u64,
    /// The current slice, row-major, and the first row it holds.
    buf: Vec<f32>,
    buf_start: u64,
    /// The next row to return.
    next: u64,
}

fn lib(e: hdf5_metno::Error) -> Problem {
    Problem::Hdf5(e.to_string())
}

impl Reader {
    /// Opens `dataset` of the file at `path` and checks it is a 2-D array
    /// of a numeric type.
    pub(crate) fn open(path: &std::path::Path, dataset: &str) -> Result<Reader, Problem> {
        if !path.is_file() {
            return Err(Problem::io(
                "cannot open",
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            ));
        }
        let file = hdf5_metno::File::open(path)
            .map_err(|e| Problem::BadHeader(format!("not an HDF5 file or unreadable ({e})")))?;
        let ds = match file.dataset(dataset) {
            Ok(ds) => ds,
            Err(_) => {
                let mut have = file.member_names().map_err(lib)?;
                have.sort();
                return Err(Problem::NoDataset {
                    name: dataset.to_string(),
                    have: have.join(", "),
                });
            }
        };
        let shape = ds.shape();
        let [rows, dim] = shape[..] else {
            return Err(Problem::BadShape(shape.iter().map(|&x| x as u64).collect()));
        };
        if dim == 0 || dim > super::MAX_DIM {
            return Err(Problem::BadDimension {
                got: dim as i64,
                min: 1,
                max: super::MAX_DIM as i64,
            });
        }
        use hdf5_metno::types::TypeDescriptor as T;
        let dtype = ds.dtype().map_err(lib)?;
        match dtype.to_descriptor() {
            Ok(T::Float(_) | T::Integer(_) | T::Unsigned(_)) => {}
            Ok(other) => {
                return Err(Problem::UnsupportedDtype {
                    dtype: other.to_string(),
                    expected: "an integer or float type",
                })
            }
            Err(e) => {
                return Err(Problem::UnsupportedDtype {
                    dtype: e.to_string(),
                    expected: "an integer or float type",
                })
            }
        }
        Ok(Reader {
            ds,
            rows: rows as u64,
            dim,
            chunk_rows: (CHUNK_BYTES / (dim * 4)).max(1) as u64,
            buf: Vec::new(),
            buf_start: 0,
            next: 0,
        })
    }

    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    pub(crate) fn next_into(&mut self, out: &mut Vec<f32>) -> Result<bool, Problem> {
        if self.next == self.rows {
            return Ok(false);
        }
        let in_buf = self.next - self.buf_start;
        if self.buf.is_empty() || in_buf as usize * self.dim >= self.buf.len() {
            let start = self.next;
            let end = (start + self.chunk_rows).min(self.rows);
            use hdf5_metno::{Hyperslab, SliceOrIndex};
            let rows = SliceOrIndex::from(start as usize..end as usize);
            let all = SliceOrIndex::from(..);
            let slice = self
                .ds
                .read_slice_2d::<f32, _>(Hyperslab::from(vec![rows, all]))
                .map_err(lib)?;
            self.buf.clear();
            self.buf.extend(slice.iter().copied());
            self.buf_start = start;
        }
        let at = (self.next - self.buf_start) as usize * self.dim;
        out.clear();
        out.extend_from_slice(&self.buf[at..at + self.dim]);
        self.next += 1;
        Ok(true)
    }
}
