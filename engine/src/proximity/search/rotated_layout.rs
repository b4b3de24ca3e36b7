//! The rotated split arena persisted as a `PRLY` layout of kind
//! [`LayoutKind::RotatedArena`] (docs/formats-proximity.md, "Layout
//! sidecars"), so `--exact-layout splitM` opens without the covariance,
//! the Jacobi sweeps and a rotation of every record.
//!
//! Kind header: `uv m | u64le arena digest` (as for the local frames:
//! XXH64 of the scan arena's norms and residuals). Payload (little-endian,
//! fixed width, in this order): `Wᵀ` (`f64`, `d·d`, row-major), `rot_a`,
//! `rot_b`, `σ²` bound, `scale_a`, `scale_b` (`f64` each), the screen codes
//! (`i8`, `n·m`), the other codes (`i8`, `n·(d − m)`), the screen residuals
//! and the others' (`f64`, `n` each). The code norms and the largest screen
//! residual are recomputed at load. Every constant and residual must be
//! finite (scales positive), else [`Error::Corrupt`].

use super::arena::ScanArena;
use super::arena_layout::{check_digest, digest};
use super::rotated::Rotated;
use crate::cid::Cid;
use crate::codec::{put_uv, Reader};
use crate::error::Result;
use crate::proximity::format::LayoutKind;
use crate::proximity::layout_io::{manifest, mismatch, payload, persist_payload};
use crate::store::BlockStore;

const OBJ: &str = "PRLY";

/// Writes `rot` (built over `arena`) bound to `source`; returns the
/// manifest CID.
pub(crate) fn persist(
    rot: &Rotated,
    arena: &ScanArena,
    store: &dyn BlockStore,
    source: Cid,
) -> Result<Cid> {
    let (d, m, n) = (rot.dims, rot.m, rot.norms_a.len());
    let mut params = Vec::new();
    put_uv(&mut params, m as u64);
    params.extend_from_slice(&digest(arena).to_le_bytes());
    let mut out = Vec::with_capacity(8 * d * d + 40 + n * (d + 16));
    for v in rot
        .wt
        .iter()
        .chain([rot.rot_a, rot.rot_b, rot.sigma2, rot.scale_a, rot.scale_b].iter())
    {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend(rot.codes_a.iter().chain(&rot.codes_b).map(|&c| c as u8));
    for v in rot.err_a.iter().chain(&rot.err_b) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    persist_payload(
        store,
        LayoutKind::RotatedArena,
        source,
        d,
        n as u64,
        params,
        out,
    )
}

/// Loads the layout `cid` (bound to `source`) as the rotated arena over
/// `arena`. Errors as [`super::frames::persist::load`].
pub(crate) fn load(
    store: &dyn BlockStore,
    cid: Cid,
    source: Cid,
    arena: &ScanArena,
    dims: usize,
) -> Result<Rotated> {
    let man = manifest(store, cid, LayoutKind::RotatedArena, source, dims)?;
    let mut r = Reader::new(&man.params, OBJ);
    let m = r.uv_usize()?;
    let want_digest = r.u64le()?;
    r.finish()?;
    let (d, n) = (dims, arena.norms.len());
    if m == 0 || m > d || man.records != n as u64 {
        return Err(mismatch(
            cid,
            format!("width {m} over {} records, arena has {n}", man.records),
        ));
    }
    check_digest(cid, want_digest, arena)?;
    // `n ≤ 2^32` records of `d ≤ MAX_CODE_DIMS`: no overflow.
    let size = 8 * d * d + 40 + n * (d + 16);
    if man.payload_len != size as u64 {
        return Err(mismatch(
            cid,
            format!("payload of {} bytes, want {size}", man.payload_len),
        ));
    }
    let mut c = payload(store, &man, cid)?;
    let wt = c.values(d * d, f64::from_le_bytes)?;
    let k = c.values(5, f64::from_le_bytes)?;
    let mut codes = Vec::with_capacity(n * d);
    c.visit(n * d, |b| codes.extend(b.iter().map(|&x| x as i8)))?;
    let err = c.values(2 * n, f64::from_le_bytes)?;
    let finite = |v: &[f64]| v.iter().all(|x| x.is_finite() && *x >= 0.0);
    if !wt.iter().all(|x| x.is_finite())
        || !finite(&k)
        || !finite(&err)
        || k[3] <= 0.0
        || k[4] <= 0.0
    {
        return Err(mismatch(
            cid,
            "a constant or residual that is not finite".into(),
        ));
    }
    let codes_b = codes.split_off(n * m);
    let codes_a = codes;
    let norms = |codes: &[i8], w: usize| -> Vec<i32> {
        if w == 0 {
            return vec![0; n];
        }
        codes
            .chunks_exact(w)
            .map(|row| row.iter().map(|&x| i32::from(x) * i32::from(x)).sum())
            .collect()
    };
    let (norms_a, norms_b) = (norms(&codes_a, m), norms(&codes_b, d - m));
    let mut err_b = err;
    let err_a: Vec<f64> = err_b.drain(..n).collect();
    let err_a_max = err_a.iter().fold(0.0f64, |a, &x| a.max(x));
    Ok(Rotated {
        dims: d,
        m,
        wt,
        rot_a: k[0],
        rot_b: k[1],
        sigma2: k[2],
        scale_a: k[3],
        scale_b: k[4],
        codes_a,
        codes_b,
        norms_a,
        norms_b,
        err_a,
        err_b,
        err_a_max,
    })
}
