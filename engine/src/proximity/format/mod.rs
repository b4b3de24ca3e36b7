//! Byte-exact codecs for every proximity object (proximity-format.md
//! sections 1-10).
//!
//! Each object type has one `encode` and one strict `decode`. Decoders follow
//! the common order of section 1.4: magic, version (a mismatch is the typed
//! [`Error::UnsupportedProximityVersion`] and is checked before any other
//! field), fields in order with canonical varints and floats, no trailing
//! bytes, then semantic validation. Every length or count read from the input
//! is checked against the bytes that remain before anything is allocated, so
//! a hostile input cannot make a decoder allocate more than a small multiple
//! of its own size. Encoders validate the same invariants and refuse to write
//! bytes their decoder would reject.

mod content_root;
mod descriptor;
mod hnsw;
mod layout;
mod node;
mod pq;
mod quantizer;
mod record;
mod vector;

#[cfg(test)]
mod tests;

pub use content_root::{
    is_typed_root_config, typed_root_config, ContentRoot, RootKind, CONTENT_ROOT_VERSION,
    MAX_METADATA, META_HNSW, META_PQ, META_SECONDARY_PREFIX, TYPED_ROOT_ENCODING,
};
pub use descriptor::{Descriptor, DirectoryBlock, ProximityConfig};
pub use hnsw::{HnswConfig, HnswManifest, HnswNode, HnswNodeRef, MAX_LEVEL};
pub use layout::{
    chunk_count, decode_chunk, encode_chunk, LayoutKind, LayoutManifest, LAYOUT_CHUNK,
    MAGIC_LAYOUT, MAGIC_LAYOUT_CHUNK, META_LAYOUT_ADAPTIVE, META_LAYOUT_ARENA, META_LAYOUT_FRAMES,
    META_LAYOUT_IVF, META_LAYOUT_PREFIX, META_LAYOUT_PROFILE, META_LAYOUT_ROTATED,
};
pub(crate) use node::{entry_len, header_len};
pub use node::{NodeEntry, NodeKind, ProxNode, VectorRef};
pub use pq::{Codebook, PqConfig, PqManifest};
pub use quantizer::Quantizer;
pub use record::Record;
pub use vector::ExternalVector;

use crate::codec::{put_f32, Reader};
use crate::error::{Error, Result};
use prox_kernels::Metric;

/// The version byte every current proximity object except `CRMF` carries.
pub const FORMAT_VERSION: u8 = 2;
/// The only vector encoding: little-endian f32 components.
pub const VECTOR_F32_LE: u8 = 1;
/// Upper bound on entry, dimension, subspace and neighbour counts (2^24).
pub const MAX_ENTRIES: u64 = 16_777_216;
/// Upper bound on key (and metadata) lengths: 64 MiB.
pub const MAX_KEY: usize = 67_108_864;

/// Magic of `PRVR` records.
pub const MAGIC_RECORD: &[u8; 4] = b"PRVR";
/// Magic of `PRXI` descriptors.
pub const MAGIC_DESCRIPTOR: &[u8; 4] = b"PRXI";
/// Magic of `PRXN` hierarchy nodes.
pub const MAGIC_NODE: &[u8; 4] = b"PRXN";
/// Magic of `PRXV` external vectors.
pub const MAGIC_VECTOR: &[u8; 4] = b"PRXV";
/// Magic of `PQS8` node-local scalar quantizers.
pub const MAGIC_QUANTIZER: &[u8; 4] = b"PQS8";
/// Magic of `PQPQ` product-quantization manifests.
pub const MAGIC_PQ: &[u8; 4] = b"PQPQ";
/// Magic of `HNSW` graph manifests.
pub const MAGIC_HNSW: &[u8; 4] = b"HNSW";
/// Magic of `HNSN` graph values.
pub const MAGIC_HNSN: &[u8; 4] = b"HNSN";
/// Magic of `CRMF` typed content-root manifests.
pub const MAGIC_CONTENT_ROOT: &[u8; 4] = b"CRMF";
/// Tag that opens the `PRXI` configuration fingerprint pre-image.
pub const MAGIC_FINGERPRINT: &[u8; 4] = b"PCFG";

/// Reads the magic and the version byte; the version must be
/// [`FORMAT_VERSION`] and is checked before anything else is interpreted.
pub(crate) fn read_header(r: &mut Reader<'_>, magic: &[u8; 4]) -> Result<()> {
    r.expect_magic(magic)?;
    let found = r.u8()?;
    if found != FORMAT_VERSION {
        return Err(Error::UnsupportedProximityVersion {
            found,
            required: FORMAT_VERSION,
        });
    }
    Ok(())
}

/// Reads a one-byte metric id (1, 2 or 3).
pub(crate) fn read_metric(r: &mut Reader<'_>) -> Result<Metric> {
    let id = r.u8()?;
    Metric::from_id(id).ok_or_else(|| r.invalid(format!("unknown metric id {id}")))
}

/// Reads `dims` canonical f32 components. The byte count is checked against
/// the remaining input before allocating.
pub(crate) fn read_components(r: &mut Reader<'_>, dims: usize) -> Result<Vec<f32>> {
    if dims.checked_mul(4).is_none_or(|n| n > r.remaining()) {
        return Err(Error::Truncated { object: r.object() });
    }
    let mut v = vec![0f32; dims];
    read_components_into(r, &mut v)?;
    Ok(v)
}

/// The `4·dims` bytes of `dims` components, checked against the remaining
/// input.
fn component_bytes<'a>(r: &mut Reader<'a>, dims: usize) -> Result<&'a [u8]> {
    match dims.checked_mul(4) {
        Some(n) if n <= r.remaining() => r.take(n),
        _ => Err(Error::Truncated { object: r.object() }),
    }
}

/// [`read_components`] into `out` (`out.len()` components), with the same
/// checks and errors.
pub(crate) fn read_components_into(r: &mut Reader<'_>, out: &mut [f32]) -> Result<()> {
    let bytes = component_bytes(r, out.len())?;
    prox_kernels::cast::f32_from_le(bytes, out);
    // One branch-free pass (vectorised) flags a non-canonical component.
    let bad = out.iter().fold(false, |b, x| {
        let bits = x.to_bits();
        b | ((bits & 0x7f80_0000) == 0x7f80_0000) | (bits == 0x8000_0000)
    });
    if bad {
        let first = out
            .iter()
            .find(|x| !x.is_finite() || x.to_bits() == 0x8000_0000);
        return Err(r.invalid(match first {
            Some(x) if x.is_finite() => "negative zero f32",
            _ => "non-finite f32",
        }));
    }
    Ok(())
}

/// Appends canonical f32 components; refuses NaN/inf and `-0.0` (which must
/// have been normalised by preparation, section 11.1).
pub(crate) fn put_components(out: &mut Vec<u8>, object: &'static str, v: &[f32]) -> Result<()> {
    for &x in v {
        check_f32(object, x)?;
        put_f32(out, object, x)?;
    }
    Ok(())
}

/// Requires a canonical f32: finite and not `-0.0`.
pub(crate) fn check_f32(object: &'static str, x: f32) -> Result<()> {
    if !x.is_finite() {
        return Err(Error::invalid(object, "non-finite f32"));
    }
    if x.to_bits() == 0x8000_0000 {
        return Err(Error::invalid(object, "negative zero f32"));
    }
    Ok(())
}

/// Requires a canonical f64: finite and not `-0.0`.
pub(crate) fn check_f64(object: &'static str, x: f64) -> Result<()> {
    if !x.is_finite() {
        return Err(Error::invalid(object, "non-finite f64"));
    }
    if x.to_bits() == 0x8000_0000_0000_0000 {
        return Err(Error::invalid(object, "negative zero f64"));
    }
    Ok(())
}

/// Reads a key-like blob (`blob≤MAX_KEY`) as an owned vector.
pub(crate) fn read_key(r: &mut Reader<'_>) -> Result<Vec<u8>> {
    Ok(r.blob(MAX_KEY)?.to_vec())
}

/// Checks a key-like blob length before writing it.
pub(crate) fn check_key(object: &'static str, key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY {
        return Err(Error::invalid(
            object,
            format!("key of {} bytes exceeds {MAX_KEY}", key.len()),
        ));
    }
    Ok(())
}
