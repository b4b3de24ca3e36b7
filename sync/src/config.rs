//! Node and daemon configuration (JSON file, overridable by CLI flags).

use crate::error::{Error, Result};
use crate::protocol::limits::Limits;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One `--follow PEER:NAME` entry: keep local root `name` in step with the
/// peer's root of the same name. Several entries with one name make one
/// follow that fetches from all of those peers (the first listed leads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Follow {
    /// Peer address (a multiaddr, ideally ending in `/p2p/<peer id>`).
    pub peer: String,
    /// Root name on the peer and locally.
    pub name: String,
}

impl std::str::FromStr for Follow {
    type Err = Error;

    /// Parses `MULTIADDR:NAME` (split at the last `:`; names cannot contain
    /// `:` in this form).
    fn from_str(s: &str) -> Result<Follow> {
        let (peer, name) = s
            .rsplit_once(':')
            .filter(|(p, n)| !p.is_empty() && !n.is_empty())
            .ok_or_else(|| Error::Config(format!("--follow expects PEER:NAME, got {s:?}")))?;
        Ok(Follow {
            peer: peer.to_string(),
            name: name.to_string(),
        })
    }
}

/// Configuration of a sync node / daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Multiaddrs to listen on (`/ip4/127.0.0.1/tcp/0` picks a port).
    pub listen: Vec<String>,
    /// Identity key file; default `<store>/sync.key`.
    pub key: Option<PathBuf>,
    /// Peer ids allowed to connect and be served. Empty: nobody is served
    /// unless [`Config::open`] is set (followed peers always are).
    pub allow: Vec<String>,
    /// With an empty allowlist, serve every peer (`--open`); peers admitted
    /// only by this share the session slots not reserved for followed peers.
    pub open: bool,
    /// Root names served; empty = all.
    pub serve: Vec<String>,
    /// Roots to follow.
    pub follow: Vec<Follow>,
    /// Fallback poll of followed roots, in seconds. Following is
    /// push-driven (the source announces changes to subscribed followers);
    /// this slow poll only covers lost announces and sources that do not
    /// support `Follow`.
    pub follow_interval_secs: u64,
    /// Without an allowlist, trust every peer with the bulk path and pushes.
    pub trust_all: bool,
    /// Try the bulk path when pulling into an empty store.
    pub bulk: bool,
    /// Block patches: pull changed blocks as patches against the previous
    /// version, and answer such requests (`docs/sync.md`, "Delta blocks").
    pub delta: bool,
    /// Zstd-coded answers: in pulls with patches, take changed blocks as
    /// zstd frames (against the old blocks as prefix, or alone) when the
    /// source offers them, and offer them (`docs/sync.md`, "Delta blocks").
    pub zstd: bool,
    /// Publishers (peer ids) whose signed root records this node requires:
    /// a pulled root must carry a valid record of one of them with a seq
    /// not lower than the one kept (unsigned roots are still accepted from
    /// allowlisted peers). Empty: records are optional.
    pub trust: Vec<String>,
    /// Sign the roots this node serves with its identity key.
    pub sign: bool,
    /// Validity of the records this node signs, seconds.
    pub record_validity_secs: u64,
    /// mDNS discovery on the local network.
    pub mdns: bool,
    /// Protocol limits and timeouts.
    pub limits: Limits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: Vec::new(),
            key: None,
            allow: Vec::new(),
            open: false,
            serve: Vec::new(),
            follow: Vec::new(),
            follow_interval_secs: 300,
            trust_all: false,
            bulk: true,
            delta: true,
            zstd: true,
            trust: Vec::new(),
            sign: false,
            record_validity_secs: 86_400,
            mdns: false,
            limits: Limits::default(),
        }
    }
}

impl Config {
    /// Reads a JSON config file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)?;
        let cfg: Config = serde_json::from_str(&text)
            .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks limits and parses every address and peer id once.
    pub fn validate(&self) -> Result<()> {
        self.limits.validate().map_err(Error::Config)?;
        for a in &self.listen {
            a.parse::<libp2p::Multiaddr>()
                .map_err(|e| Error::Config(format!("listen address {a:?}: {e}")))?;
        }
        for p in &self.allow {
            p.parse::<libp2p::PeerId>()
                .map_err(|e| Error::Config(format!("allowed peer {p:?}: {e}")))?;
        }
        for p in &self.trust {
            p.parse::<libp2p::PeerId>()
                .map_err(|e| Error::Config(format!("trusted publisher {p:?}: {e}")))?;
        }
        if self.record_validity_secs == 0 {
            return Err(Error::Config("record_validity_secs must be > 0".into()));
        }
        for f in &self.follow {
            f.peer
                .parse::<libp2p::Multiaddr>()
                .map_err(|e| Error::Config(format!("followed peer {:?}: {e}", f.peer)))?;
            prox_engine::store::validate_root_name(&f.name)?;
        }
        for n in &self.serve {
            prox_engine::store::validate_root_name(n)?;
        }
        if self.follow_interval_secs == 0 {
            return Err(Error::Config("follow_interval_secs must be > 0".into()));
        }
        Ok(())
    }
}
