//! Errors of starting and running a server (request errors are
//! [`crate::ApiError`] responses, never this type).

use std::net::SocketAddr;

/// Why a server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is unusable.
    #[error("invalid serve config: {0}")]
    InvalidConfig(String),
    /// Binding a non-loopback address without a token.
    #[error("refusing to serve on non-loopback {addr} without a token (--token-file)")]
    TokenRequired {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// I/O while serving.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The engine failed (e.g. loading the initial maps).
    #[error(transparent)]
    Engine(#[from] prox_engine::Error),
    /// Building the search thread pool failed.
    #[error("cannot start the search pool: {0}")]
    Pool(String),
    /// The server task panicked or was aborted.
    #[error("server task failed: {0}")]
    Task(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
