//! `PQPQ`: product-quantization sidecar manifest (section 7).

use super::{
    check_f64, put_components, read_components, read_header, read_metric, FORMAT_VERSION, MAGIC_PQ,
    MAX_ENTRIES,
};
use crate::cid::Cid;
use crate::codec::{put_f64, put_uv, Reader};
use crate::error::{Error, Result};
use prox_kernels::Metric;

const OBJ: &str = "PQPQ";

/// PQ training configuration (`C_pq`); its bytes are fingerprinted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PqConfig {
    /// Number of subspaces `m`.
    pub subquantizers: u32,
    /// Centroids per subspace `k` (1..=256 for a usable config).
    pub centroids: u16,
    /// Lloyd iterations.
    pub iterations: u16,
    /// Search re-rank multiplier (runtime hint, persisted).
    pub rerank_multiplier: u32,
    /// Seed of the initial-centroid hash.
    pub seed: u64,
}

impl Default for PqConfig {
    /// 8 subspaces, 256 centroids, 12 iterations, re-rank 8, seed 0.
    fn default() -> Self {
        PqConfig {
            subquantizers: 8,
            centroids: 256,
            iterations: 12,
            rerank_multiplier: 8,
            seed: 0,
        }
    }
}

impl PqConfig {
    /// The `C_pq` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        put_uv(&mut out, u64::from(self.subquantizers));
        put_uv(&mut out, u64::from(self.centroids));
        put_uv(&mut out, u64::from(self.iterations));
        put_uv(&mut out, u64::from(self.rerank_multiplier));
        out.extend_from_slice(&self.seed.to_le_bytes());
        out
    }

    /// SHA-256 of [`to_bytes`](Self::to_bytes).
    pub fn fingerprint(&self) -> Cid {
        Cid::of(&self.to_bytes())
    }

    /// Loader checks: `1 <= m <= dims`, `1 <= k <= 256`, iterations > 0,
    /// re-rank > 0.
    pub fn validate(&self, dims: u32) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidConfig(format!("PQ: {m}")));
        if self.subquantizers == 0 || self.subquantizers > dims {
            return bad("subquantizers must be in 1..=dimensions");
        }
        if self.centroids == 0 || self.centroids > 256 {
            return bad("centroids must be in 1..=256");
        }
        if self.iterations == 0 {
            return bad("iterations must be > 0");
        }
        if self.rerank_multiplier == 0 {
            return bad("rerank_multiplier must be > 0");
        }
        Ok(())
    }

    fn read(r: &mut Reader<'_>) -> Result<PqConfig> {
        Ok(PqConfig {
            subquantizers: r.uv32()?,
            centroids: r.uv16()?,
            iterations: r.uv16()?,
            rerank_multiplier: r.uv32()?,
            seed: r.u64le()?,
        })
    }
}

/// One subspace's codebook: `count` centroids of `width` components,
/// centroid-major (`centroids[j*width .. (j+1)*width]` is centroid `j`).
#[derive(Debug, Clone, PartialEq)]
pub struct Codebook {
    /// Components per centroid (>= 1).
    pub width: u32,
    /// `count * width` canonical components.
    pub centroids: Vec<f32>,
}

impl Codebook {
    /// Number of centroids.
    pub fn count(&self) -> usize {
        if self.width == 0 {
            0
        } else {
            self.centroids.len() / self.width as usize
        }
    }

    /// Centroid `j`.
    pub fn centroid(&self, j: usize) -> Option<&[f32]> {
        let w = self.width as usize;
        self.centroids.get(j * w..(j + 1) * w)
    }
}

/// A decoded `PQPQ` manifest.
///
/// Invariants (encode and decode): one codebook per subquantizer, each with
/// exactly `config.centroids` centroids and a width in `1..=dims`, widths
/// summing to `dims`; both error statistics finite and `>= 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct PqManifest {
    /// The PRXI this sidecar was trained on.
    pub source: Cid,
    /// Vector dimensions.
    pub dims: u32,
    /// Metric of the source map.
    pub metric: Metric,
    /// Training configuration.
    pub config: PqConfig,
    /// `CRAB` tree: record key -> `subquantizers` code bytes.
    pub code_root: Cid,
    /// Codebooks, one per subspace in order.
    pub codebooks: Vec<Codebook>,
    /// Mean squared reconstruction error.
    pub mean_squared_error: f64,
    /// Maximum squared reconstruction error.
    pub max_squared_error: f64,
}

impl PqManifest {
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(OBJ, m));
        if self.codebooks.len() != self.config.subquantizers as usize {
            return bad(format!(
                "{} codebooks for {} subquantizers",
                self.codebooks.len(),
                self.config.subquantizers
            ));
        }
        let mut total: u64 = 0;
        for (s, b) in self.codebooks.iter().enumerate() {
            if b.width == 0 || b.width > self.dims {
                return bad(format!("subspace {s}: width {} outside 1..=dims", b.width));
            }
            if b.centroids.len() != usize::from(self.config.centroids) * b.width as usize {
                return bad(format!(
                    "subspace {s}: centroid count does not match config"
                ));
            }
            total += u64::from(b.width);
        }
        if total != u64::from(self.dims) {
            return bad(format!(
                "subspace widths sum to {total}, dimensions {}",
                self.dims
            ));
        }
        if self.config.centroids > 256 {
            return bad("more than 256 centroids".into());
        }
        for x in [self.mean_squared_error, self.max_squared_error] {
            check_f64(OBJ, x)?;
            if x < 0.0 {
                return bad("negative error statistic".into());
            }
        }
        Ok(())
    }

    /// Encodes the manifest.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(MAGIC_PQ);
        out.push(FORMAT_VERSION);
        out.push(0);
        out.extend_from_slice(self.source.as_bytes());
        put_uv(&mut out, u64::from(self.dims));
        out.push(self.metric.id());
        let cfg = self.config.to_bytes();
        out.extend_from_slice(&cfg);
        out.extend_from_slice(self.code_root.as_bytes());
        put_uv(&mut out, self.codebooks.len() as u64);
        for b in &self.codebooks {
            put_uv(&mut out, b.count() as u64);
            put_uv(&mut out, u64::from(b.width));
            put_components(&mut out, OBJ, &b.centroids)?;
        }
        put_f64(&mut out, OBJ, self.mean_squared_error)?;
        put_f64(&mut out, OBJ, self.max_squared_error)?;
        out.extend_from_slice(Cid::of(&cfg).as_bytes());
        Ok(out)
    }

    /// Decodes a `PQPQ` manifest (loaders additionally call
    /// [`PqConfig::validate`]).
    pub fn decode(bytes: &[u8]) -> Result<PqManifest> {
        let mut r = Reader::new(bytes, OBJ);
        read_header(&mut r, MAGIC_PQ)?;
        let flags = r.u8()?;
        if flags != 0 {
            return Err(r.invalid(format!("unknown flags {flags:#04x}")));
        }
        let source = r.cid()?;
        let dims = r.uv32()?;
        let metric = read_metric(&mut r)?;
        let config = PqConfig::read(&mut r)?;
        let code_root = r.cid()?;
        let subspaces = r.uv()?;
        if subspaces > MAX_ENTRIES {
            return Err(r.invalid(format!("{subspaces} subspaces exceed {MAX_ENTRIES}")));
        }
        if subspaces != u64::from(config.subquantizers) {
            return Err(r.invalid(format!(
                "{subspaces} subspaces, config says {}",
                config.subquantizers
            )));
        }
        // Each subspace takes at least two bytes (count and width varints).
        let mut codebooks = Vec::with_capacity((subspaces as usize).min(r.remaining() / 2));
        let mut total: u64 = 0;
        for s in 0..subspaces {
            let k = r.uv()?;
            if k > 256 {
                return Err(r.invalid(format!("subspace {s}: {k} centroids exceed 256")));
            }
            let width = r.uv()?;
            if width > u64::from(dims) {
                return Err(r.invalid(format!("subspace {s}: width {width} exceeds dimensions")));
            }
            if k != u64::from(config.centroids) || width == 0 {
                return Err(r.invalid(format!("subspace {s}: bad codebook shape")));
            }
            if k * width * 4 > r.remaining() as u64 {
                return Err(r.invalid(format!("subspace {s}: codebook longer than input")));
            }
            let centroids = read_components(&mut r, (k * width) as usize)?;
            total += width;
            codebooks.push(Codebook {
                width: width as u32,
                centroids,
            });
        }
        if total != u64::from(dims) {
            return Err(r.invalid(format!("subspace widths sum to {total}, dimensions {dims}")));
        }
        let mean_squared_error = r.f64()?;
        let max_squared_error = r.f64()?;
        if mean_squared_error < 0.0 || max_squared_error < 0.0 {
            return Err(r.invalid("negative error statistic"));
        }
        let fp = r.cid()?;
        if fp != config.fingerprint() {
            return Err(r.invalid("configuration fingerprint mismatch"));
        }
        r.finish()?;
        let m = PqManifest {
            source,
            dims,
            metric,
            config,
            code_root,
            codebooks,
            mean_squared_error,
            max_squared_error,
        };
        m.validate()?;
        Ok(m)
    }
}
