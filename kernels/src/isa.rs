//! Instruction-set selection: detected once per process, cached, overridable.
//!
//! The choice is made the first time any dispatched kernel (or [`isa`]) runs:
//! `PROX_ISA` if set (and available), otherwise the best available tier in
//! the order AVX2+FMA, NEON, portable, scalar. It is stored in one atomic byte
//! and never re-detected; every dispatcher reads that byte with a relaxed load.
//!
//! Invariant: the cached ISA is always one of [`available_isas`], so the
//! `unsafe` `#[target_feature]` kernels behind it are sound to call.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// A kernel implementation tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Plain Rust loops, sequential accumulation; the reference for every test.
    Scalar,
    /// The `wide` crate: fixed 8-lane vectors whose instructions are chosen at
    /// compile time (SSE2 on a baseline x86-64 build, NEON on aarch64).
    Portable,
    /// x86-64 AVX2 + FMA via `std::arch`, selected at run time.
    Avx2,
    /// aarch64 Advanced SIMD via `std::arch`.
    Neon,
}

impl Isa {
    /// Every tier, in increasing order of preference.
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Portable, Isa::Neon, Isa::Avx2];

    /// The lowercase name used by `PROX_ISA` and in benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Neon => "neon",
        }
    }

    /// Whether this tier can run on the current machine (cached detection).
    pub fn is_available(self) -> bool {
        available_mask() & self.bit() != 0
    }

    fn bit(self) -> u8 {
        match self {
            Isa::Scalar => 1,
            Isa::Portable => 2,
            Isa::Avx2 => 4,
            Isa::Neon => 8,
        }
    }

    fn from_code(code: u8) -> Option<Isa> {
        match code {
            1 => Some(Isa::Scalar),
            2 => Some(Isa::Portable),
            4 => Some(Isa::Avx2),
            8 => Some(Isa::Neon),
            _ => None,
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Isa {
    type Err = IsaError;

    fn from_str(s: &str) -> Result<Self, IsaError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(Isa::Scalar),
            "portable" | "wide" => Ok(Isa::Portable),
            "avx2" => Ok(Isa::Avx2),
            "neon" => Ok(Isa::Neon),
            _ => Err(IsaError::Unknown(s.to_owned())),
        }
    }
}

/// Whether the AVX2 tier may also use AVX-512 VNNI on 256-bit registers
/// (AVX2, AVX-512 VNNI and AVX-512 VL; detected once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn vnni() -> bool {
    static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VNNI.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx2")
    })
}

/// Why an ISA could not be selected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IsaError {
    /// The name is not one of `scalar`, `portable`, `avx2`, `neon`.
    Unknown(String),
    /// The tier exists but this CPU (or target) cannot run it.
    Unavailable {
        /// The tier that was asked for.
        requested: Isa,
        /// What this machine offers.
        available: Vec<Isa>,
    },
}

impl fmt::Display for IsaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IsaError::Unknown(s) => write!(
                f,
                "unknown ISA {s:?} in PROX_ISA (expected scalar, portable, avx2 or neon)"
            ),
            IsaError::Unavailable {
                requested,
                available,
            } => {
                write!(
                    f,
                    "ISA {requested} is not available on this machine; available:"
                )?;
                for isa in available {
                    write!(f, " {isa}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for IsaError {}

/// Bit set of available tiers, detected once.
fn available_mask() -> u8 {
    static MASK: OnceLock<u8> = OnceLock::new();
    *MASK.get_or_init(detect)
}

fn detect() -> u8 {
    let mut mask = Isa::Scalar.bit() | Isa::Portable.bit();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            mask |= Isa::Avx2.bit();
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            mask |= Isa::Neon.bit();
        }
    }
    mask
}

/// Every tier this machine can run, scalar first, best last.
pub fn available_isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
}

/// The best tier this machine can run, ignoring `PROX_ISA`.
pub fn best_isa() -> Isa {
    // `available_isas` always contains Scalar, so `last` is never `None`.
    available_isas().last().copied().unwrap_or(Isa::Scalar)
}

/// The ISA requested by `PROX_ISA`, validated: `Ok(None)` when unset or empty.
pub fn requested_isa() -> Result<Option<Isa>, IsaError> {
    match std::env::var("PROX_ISA") {
        Ok(s) if !s.trim().is_empty() => {
            let isa: Isa = s.parse()?;
            if isa.is_available() {
                Ok(Some(isa))
            } else {
                Err(IsaError::Unavailable {
                    requested: isa,
                    available: available_isas(),
                })
            }
        }
        _ => Ok(None),
    }
}

/// 0 = not chosen yet; otherwise an `Isa::bit()`.
static CHOSEN: AtomicU8 = AtomicU8::new(0);

/// The ISA the dispatched kernels use, choosing it on first call.
///
/// Applies `PROX_ISA`. If that variable names an unknown or unavailable tier,
/// prints one warning to stderr and uses the best available tier instead;
/// binaries that want a hard failure call [`try_isa`] at start-up.
#[inline]
pub fn isa() -> Isa {
    match Isa::from_code(CHOSEN.load(Ordering::Relaxed)) {
        Some(isa) => isa,
        None => init_isa(),
    }
}

#[cold]
fn init_isa() -> Isa {
    let chosen = match requested_isa() {
        Ok(Some(isa)) => isa,
        Ok(None) => best_isa(),
        Err(e) => {
            let best = best_isa();
            eprintln!("prox-kernels: warning: {e}; using {best}");
            best
        }
    };
    // Racing initialisers compute the same value; the first store wins.
    match CHOSEN.compare_exchange(0, chosen.bit(), Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => chosen,
        Err(prev) => Isa::from_code(prev).unwrap_or(chosen),
    }
}

/// Chooses the ISA from `PROX_ISA`, failing if it names an unknown or
/// unavailable tier. Call it once at program start to turn a bad override
/// into an error instead of [`isa`]'s warning-and-fallback.
pub fn try_isa() -> Result<Isa, IsaError> {
    let isa = requested_isa()?.unwrap_or_else(best_isa);
    set_isa(isa)?;
    Ok(isa)
}

/// Forces the tier used by every dispatched kernel from now on.
///
/// Errors (and changes nothing) if `isa` is not available here.
pub fn set_isa(isa: Isa) -> Result<(), IsaError> {
    if !isa.is_available() {
        return Err(IsaError::Unavailable {
            requested: isa,
            available: available_isas(),
        });
    }
    CHOSEN.store(isa.bit(), Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for isa in Isa::ALL {
            assert_eq!(isa.name().parse::<Isa>(), Ok(isa));
            assert_eq!(isa.to_string(), isa.name());
        }
        assert!(matches!("sse9".parse::<Isa>(), Err(IsaError::Unknown(_))));
    }

    #[test]
    fn scalar_and_portable_always_available() {
        let all = available_isas();
        assert!(all.contains(&Isa::Scalar));
        assert!(all.contains(&Isa::Portable));
        assert!(all.contains(&isa()));
    }

    #[test]
    fn unavailable_isa_is_an_error() {
        #[cfg(target_arch = "x86_64")]
        let missing = Isa::Neon;
        #[cfg(not(target_arch = "x86_64"))]
        let missing = Isa::Avx2;
        let err = set_isa(missing).unwrap_err();
        assert!(err.to_string().contains("not available"), "{err}");
    }
}
