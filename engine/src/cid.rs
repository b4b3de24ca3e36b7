//! Content identifiers: `CID = SHA-256(bytes)`, 32 raw bytes.

use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;

/// A content identifier: the SHA-256 of a block's exact bytes.
///
/// `Display` prints the full lowercase hex; `Debug` prints a short prefix.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Cid(pub [u8; 32]);

impl Cid {
    /// Length of a CID in bytes.
    pub const LEN: usize = 32;

    /// Hashes `bytes` and returns their CID.
    pub fn of(bytes: &[u8]) -> Cid {
        Cid(Sha256::digest(bytes).into())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Builds a CID from a 32-byte slice; `None` for any other length.
    pub fn from_slice(bytes: &[u8]) -> Option<Cid> {
        <[u8; 32]>::try_from(bytes).ok().map(Cid)
    }

    /// Full lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// True when `bytes` hash to this CID.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        Cid::of(bytes) == *self
    }
}

impl fmt::Display for Cid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Cid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cid({}…)", &self.to_hex()[..12])
    }
}

/// Error parsing a CID from hex.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CID hex {input:?}: expected 64 hex digits")]
pub struct ParseCidError {
    /// The rejected input (truncated to 80 characters).
    pub input: String,
}

impl FromStr for Cid {
    type Err = ParseCidError;

    fn from_str(s: &str) -> Result<Cid, ParseCidError> {
        let err = || ParseCidError {
            input: s.chars().take(80).collect(),
        };
        let bytes = hex::decode(s.trim()).map_err(|_| err())?;
        Cid::from_slice(&bytes).ok_or_else(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_debug_is_short() {
        let c = Cid::of(b"abc");
        assert_eq!(
            c.to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(c.to_string().parse::<Cid>().unwrap(), c);
        assert!(format!("{c:?}").len() < 24);
        assert!("zz".parse::<Cid>().is_err());
    }
}
