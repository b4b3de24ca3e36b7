//! Input validation and the contiguous vector arena.

use crate::error::{Error, Result};

/// Row alignment of the arena in f32 elements (64 bytes, one cache line).
const ALIGN: usize = 16;

/// Checks accelerator input: keys strictly ascending (the map's key order),
/// every vector `dims` long and finite.
pub(crate) fn check_records(records: &[(Vec<u8>, Vec<f32>)], dims: usize) -> Result<()> {
    if dims == 0 {
        return Err(Error::InvalidArgument("dimensions must be > 0".into()));
    }
    for (i, (key, v)) in records.iter().enumerate() {
        if i > 0 {
            let prev = &records[i - 1].0;
            if prev == key {
                return Err(Error::DuplicateKey { key: key.clone() });
            }
            if prev > key {
                return Err(Error::InvalidArgument(format!(
                    "records are not in key order at key {}",
                    hex::encode(key)
                )));
            }
        }
        check_vector(v, dims, Some(key))?;
    }
    Ok(())
}

/// Checks one vector's length and finiteness.
pub(crate) fn check_vector(v: &[f32], dims: usize, key: Option<&[u8]>) -> Result<()> {
    if v.len() != dims {
        return Err(Error::WrongDimension {
            expected: dims,
            got: v.len(),
            key: key.map(<[u8]>::to_vec),
        });
    }
    if let Some(index) = v.iter().position(|x| !x.is_finite()) {
        return Err(Error::NonFiniteVector {
            index,
            key: key.map(<[u8]>::to_vec),
        });
    }
    Ok(())
}

/// A map's records in key order as the sidecar loaders keep them (read by
/// `source::map_rows`): the keys, and the prepared vectors in one arena
/// (row `i` is record `i`'s).
#[derive(Debug, Clone)]
pub(crate) struct Rows {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) vectors: Arena,
}

/// Vectors in one contiguous allocation. Invariant: row `i` starts at
/// `base + i * stride`, `stride` is `dims` rounded up to 16 floats and
/// `base` makes every row start on a 64-byte boundary; padding is zero.
#[derive(Clone)]
pub(crate) struct Arena {
    dims: usize,
    stride: usize,
    base: usize,
    len: usize,
    data: Vec<f32>,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("dims", &self.dims)
            .field("len", &self.len)
            .finish()
    }
}

impl Arena {
    /// An arena holding `rows` (each exactly `dims` long).
    pub(crate) fn from_rows<'a>(
        dims: usize,
        rows: impl ExactSizeIterator<Item = &'a [f32]>,
    ) -> Arena {
        let mut arena = Arena::alloc(dims, rows.len());
        for (i, row) in rows.enumerate() {
            let start = arena.base + i * arena.stride;
            arena.data[start..start + dims].copy_from_slice(&row[..dims]);
        }
        arena
    }

    /// An arena of `len` zero rows (aligned, padded).
    fn alloc(dims: usize, len: usize) -> Arena {
        let stride = dims.div_ceil(ALIGN).max(1) * ALIGN;
        let data = vec![0f32; len * stride + ALIGN];
        // align_offset may legally return usize::MAX; then fall back to 0.
        let base = match data.as_ptr().align_offset(ALIGN * 4) {
            off if off < ALIGN => off,
            _ => 0,
        };
        Arena {
            dims,
            stride,
            base,
            len,
            data,
        }
    }

    /// An arena of `len` zero rows to be filled through
    /// [`Arena::rows_mut`]. The buffer is advised onto huge pages before
    /// any row is written, so the kernel backs it with huge pages as it is
    /// first touched instead of copying pages into them later.
    pub(crate) fn zeroed(dims: usize, len: usize) -> Arena {
        let arena = Arena::alloc(dims, len);
        prox_kernels::prefetch::advise_huge_pages(&arena.data, false);
        arena
    }

    /// The rows as one mutable buffer and the row stride: row `i` is
    /// `buf[i·stride .. i·stride + dims]` (the rest of a stride is padding
    /// and must stay zero).
    pub(crate) fn rows_mut(&mut self) -> (&mut [f32], usize) {
        let end = self.base + self.len * self.stride;
        (&mut self.data[self.base..end], self.stride)
    }

    /// An arena holding `rows` (each exactly `dims` long), dropping each
    /// source row right after copying it.
    pub(crate) fn from_owned_rows(
        dims: usize,
        rows: impl ExactSizeIterator<Item = Vec<f32>>,
    ) -> Arena {
        let mut arena = Arena::alloc(dims, rows.len());
        let stride = arena.stride;
        for (i, row) in rows.enumerate() {
            let start = arena.base + i * stride;
            arena.data[start..start + dims].copy_from_slice(&row[..dims]);
        }
        arena
    }

    /// An arena over `flat` (`rows * dims` floats, row-major), reusing its
    /// allocation when `dims` is a multiple of 16 (rows are then already at
    /// the arena stride; the buffer only grows by one row of slack and the
    /// rows shift in place to a 64-byte boundary), otherwise copying.
    pub(crate) fn from_flat(dims: usize, mut flat: Vec<f32>) -> Arena {
        let rows = flat.len() / dims.max(1);
        let stride = dims.div_ceil(ALIGN).max(1) * ALIGN;
        if stride != dims || dims == 0 {
            return Arena::from_rows(dims, flat.chunks_exact(dims.max(1)).take(rows));
        }
        flat.truncate(rows * dims);
        flat.reserve_exact(ALIGN);
        flat.resize(rows * dims + ALIGN, 0.0);
        flat.shrink_to_fit();
        let base = match flat.as_ptr().align_offset(ALIGN * 4) {
            off if off < ALIGN => off,
            _ => 0,
        };
        flat.copy_within(0..rows * dims, base);
        flat[..base].fill(0.0);
        Arena {
            dims,
            stride,
            base,
            len: rows,
            data: flat,
        }
    }

    /// Number of rows.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Dimensions per row.
    pub(crate) fn dims(&self) -> usize {
        self.dims
    }

    /// Row `i` (exactly `dims` floats).
    #[inline]
    pub(crate) fn row(&self, i: usize) -> &[f32] {
        let start = self.base + i * self.stride;
        &self.data[start..start + self.dims]
    }

    /// Asks for transparent huge pages under the arena, converting the rows
    /// already written (`prox_kernels::prefetch::advise_huge_pages`): graph
    /// traversals probe it at random, and with 4 KiB pages nearly every
    /// probe of a large arena also missed the TLB. A hint; changes nothing.
    pub(crate) fn advise_huge_pages(&self) {
        prox_kernels::prefetch::advise_huge_pages(&self.data, true);
    }

    /// Bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.data.capacity() * 4
    }

    /// A new arena with `extra` rows appended.
    pub(crate) fn extended<'a>(&self, extra: impl ExactSizeIterator<Item = &'a [f32]>) -> Arena {
        let n = self.len;
        let old = (0..n).map(|i| self.row(i));
        let extra: Vec<&[f32]> = extra.collect();
        let all: Vec<&[f32]> = old.chain(extra.iter().copied()).collect();
        Arena::from_rows(self.dims, all.into_iter())
    }

    /// A new arena with rows in the order `perm` (row `i` of the result is
    /// row `perm[i]` of `self`).
    pub(crate) fn permuted(&self, perm: &[u32]) -> Arena {
        let rows: Vec<&[f32]> = perm.iter().map(|&p| self.row(p as usize)).collect();
        Arena::from_rows(self.dims, rows.into_iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_aligned_and_exact() {
        let rows: Vec<Vec<f32>> = (0..5).map(|i| vec![i as f32; 3]).collect();
        let a = Arena::from_rows(3, rows.iter().map(Vec::as_slice));
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(a.row(i), row.as_slice());
            assert_eq!(a.row(i).as_ptr() as usize % 64, 0);
        }
        let b = a.extended([[9f32, 9.0, 9.0].as_slice()].into_iter());
        assert_eq!(b.len(), 6);
        assert_eq!(b.row(5), &[9.0, 9.0, 9.0]);
        let c = b.permuted(&[5, 0]);
        assert_eq!(c.row(0), &[9.0, 9.0, 9.0]);
        for dims in [3usize, 16, 32] {
            let mut z = Arena::zeroed(dims, 4);
            let (buf, stride) = z.rows_mut();
            assert_eq!(buf.len(), 4 * stride);
            buf[stride..stride + dims].fill(2.0);
            assert_eq!(z.row(1), vec![2.0; dims].as_slice());
            assert_eq!(z.row(3), vec![0.0; dims].as_slice());
            assert_eq!(z.row(3).as_ptr() as usize % 64, 0);
            let flat: Vec<f32> = (0..5 * dims).map(|x| x as f32).collect();
            let f = Arena::from_flat(dims, flat.clone());
            assert_eq!(f.len(), 5);
            for i in 0..5 {
                assert_eq!(f.row(i), &flat[i * dims..(i + 1) * dims]);
                assert_eq!(f.row(i).as_ptr() as usize % 64, 0);
            }
        }
    }

    #[test]
    fn rejects_bad_records() {
        let ok = vec![(b"a".to_vec(), vec![1.0]), (b"b".to_vec(), vec![2.0])];
        check_records(&ok, 1).unwrap();
        let dup = vec![(b"a".to_vec(), vec![1.0]), (b"a".to_vec(), vec![2.0])];
        assert!(matches!(
            check_records(&dup, 1),
            Err(Error::DuplicateKey { .. })
        ));
        let unsorted = vec![(b"b".to_vec(), vec![1.0]), (b"a".to_vec(), vec![2.0])];
        assert!(check_records(&unsorted, 1).is_err());
        let nan = vec![(b"a".to_vec(), vec![f32::NAN])];
        assert!(matches!(
            check_records(&nan, 1),
            Err(Error::NonFiniteVector { .. })
        ));
        assert!(matches!(
            check_records(&ok, 2),
            Err(Error::WrongDimension { .. })
        ));
    }
}
