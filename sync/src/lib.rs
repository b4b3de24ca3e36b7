//! prox-sync: replication of named roots between peers over libp2p, the
//! daemon, and query serving. Owns the async runtime.
