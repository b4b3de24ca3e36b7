//! The node's persistent ed25519 identity.
//!
//! Stored as libp2p's protobuf key encoding in a file created with mode
//! 0600 on first start (atomically: written to a temporary file in the same
//! directory, then hard-linked into place so two racing starts agree).

use crate::error::{Error, Result};
use libp2p::identity::Keypair;
use std::io::Write;
use std::path::Path;

/// Loads the key at `path`, creating a new ed25519 key there if absent.
pub fn load_or_create(path: &Path) -> Result<Keypair> {
    let bad = |reason: String| Error::Identity {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::read(path) {
        Ok(bytes) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "identity key is readable by others; expected 0600");
                }
            }
            let key = Keypair::from_protobuf_encoding(&bytes).map_err(|e| bad(e.to_string()))?;
            if key.key_type() != libp2p::identity::KeyType::Ed25519 {
                return Err(bad(format!(
                    "expected an ed25519 key, found {:?}",
                    key.key_type()
                )));
            }
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = Keypair::generate_ed25519();
            let bytes = key.to_protobuf_encoding().map_err(|e| bad(e.to_string()))?;
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir)?;
            let tmp = dir.join(format!(".sync.key.{}.tmp", std::process::id()));
            {
                let mut opts = std::fs::OpenOptions::new();
                opts.write(true).create_new(true);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    opts.mode(0o600);
                }
                let mut f = opts.open(&tmp)?;
                f.write_all(&bytes)?;
                f.sync_all()?;
            }
            let linked = std::fs::hard_link(&tmp, path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => Ok(key),
                // Another process won the race: use its key.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create(path),
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether the multiaddr `addr` names its peer (ends in `/p2p/<peer id>`),
/// so a connection to it authenticates that peer. A malformed address is
/// [`Error::Config`].
pub fn names_peer(addr: &str) -> Result<bool> {
    let a: libp2p::Multiaddr = addr
        .parse()
        .map_err(|e| Error::Config(format!("bad peer address {addr:?}: {e}")))?;
    Ok(a.iter()
        .any(|p| matches!(p, libp2p::multiaddr::Protocol::P2p(_))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_with_mode_0600_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/sync.key");
        let a = load_or_create(&path).unwrap();
        let b = load_or_create(&path).unwrap();
        assert_eq!(a.public().to_peer_id(), b.public().to_peer_id());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        std::fs::write(&path, b"garbage").unwrap();
        assert!(matches!(load_or_create(&path), Err(Error::Identity { .. })));
    }
}
