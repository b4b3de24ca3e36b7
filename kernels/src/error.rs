//! The kernel crate's error type: invalid parameters of quantizers and
//! codebooks. Slice-shape mismatches in the hot kernels are caller bugs and
//! panic with a message instead (documented per function).

use std::fmt;

/// An invalid quantizer or codebook parameter.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A length that must match a dimension does not.
    WrongDimension {
        /// What was being checked.
        what: &'static str,
        /// The length required.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A parameter outside its legal range.
    InvalidParameter {
        /// The parameter's name.
        what: &'static str,
        /// Why it is rejected.
        reason: String,
    },
    /// A NaN or infinite value where a finite one is required.
    NonFinite {
        /// What was being checked.
        what: &'static str,
        /// Position of the first offending value.
        index: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WrongDimension {
                what,
                expected,
                got,
            } => write!(f, "{what}: expected length {expected}, got {got}"),
            Error::InvalidParameter { what, reason } => write!(f, "invalid {what}: {reason}"),
            Error::NonFinite { what, index } => {
                write!(f, "{what}: non-finite value at index {index}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Result alias for kernel constructors.
pub type Result<T, E = Error> = std::result::Result<T, E>;
