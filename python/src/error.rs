//! Engine and sync errors as the typed exceptions of `prox.errors`.
//!
//! The exception classes are defined in Python (so each can also derive
//! from the built-in a caller expects, e.g. `ValueError`); they are looked
//! up when an error is raised, and carry the engine's data as attributes
//! (`field`, `expected`, `got`, `key`, `cid`).

use prox_engine::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// Attribute values an exception carries.
pub(crate) enum Attr {
    Str(String),
    Int(u64),
    Bytes(Vec<u8>),
}

/// The exception `prox.errors.<class>` with `message` and `attrs`.
pub(crate) fn raise(class: &str, message: String, attrs: Vec<(&'static str, Attr)>) -> PyErr {
    Python::attach(|py| match build(py, class, &message, attrs) {
        Ok(e) => e,
        Err(e) => e,
    })
}

fn build(
    py: Python<'_>,
    class: &str,
    message: &str,
    attrs: Vec<(&'static str, Attr)>,
) -> PyResult<PyErr> {
    let ty = py
        .import("prox.errors")?
        .getattr(class)?
        .cast_into::<PyType>()
        .map_err(|_| PyRuntimeError::new_err(format!("prox.errors.{class} is not a class")))?;
    let value = ty.call1((message,))?;
    for (name, v) in attrs {
        match v {
            Attr::Str(s) => value.setattr(name, s)?,
            Attr::Int(n) => value.setattr(name, n)?,
            Attr::Bytes(b) => value.setattr(name, pyo3::types::PyBytes::new(py, &b))?,
        }
    }
    Ok(PyErr::from_value(value))
}

/// `InvalidInputError(message)` naming `field`.
pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> PyErr {
    raise(
        "InvalidInputError",
        message.into(),
        vec![("field", Attr::Str(field.into()))],
    )
}

fn key_attr(key: &Option<Vec<u8>>) -> Vec<(&'static str, Attr)> {
    key.iter()
        .map(|k| ("key", Attr::Bytes(k.clone())))
        .collect()
}

/// The exception for an engine error.
pub(crate) fn engine(e: Error) -> PyErr {
    let msg = e.to_string();
    let (class, attrs) = match &e {
        Error::WrongDimension { expected, got, key } => {
            let mut a = key_attr(key);
            a.push(("expected", Attr::Int(*expected as u64)));
            a.push(("got", Attr::Int(*got as u64)));
            ("InvalidInputError", a)
        }
        Error::NonFiniteVector { key, .. }
        | Error::ZeroCosineVector { key }
        | Error::NoUnitFixedPoint { key } => ("InvalidInputError", key_attr(key)),
        Error::DuplicateKey { key } => ("InvalidInputError", key_attr(&Some(key.clone()))),
        Error::InvalidRequest { field, .. } => (
            "InvalidInputError",
            vec![("field", Attr::Str(field.to_string()))],
        ),
        Error::UnknownField { .. } | Error::FieldTypeMismatch { .. } => (
            "InvalidInputError",
            vec![("field", Attr::Str("filter".to_string()))],
        ),
        Error::InvalidArgument(_)
        | Error::InvalidConfig(_)
        | Error::InvalidRootName { .. }
        | Error::NodeTooLarge { .. } => ("InvalidInputError", vec![]),
        Error::KeyTooLong { .. } => ("InvalidInputError", vec![]),
        Error::Conflict { .. } => ("ConflictError", vec![]),
        Error::CanonicalHnsw { .. } => ("UnsupportedError", vec![]),
        Error::UnknownMap { .. } => ("UnknownMapError", vec![]),
        Error::DeadlineExceeded => ("DeadlineExceededError", vec![]),
        Error::Corrupt { cid, .. } | Error::NotFound { cid } => {
            ("CorruptError", vec![("cid", Attr::Str(cid.to_hex()))])
        }
        Error::Truncated { .. }
        | Error::TrailingBytes { .. }
        | Error::Varint { .. }
        | Error::InvalidObject { .. }
        | Error::UnsupportedProximityVersion { .. }
        | Error::StoreDamaged { .. }
        | Error::MissingReachable { .. } => ("CorruptError", vec![]),
        Error::Locked { .. }
        | Error::ReadOnly { .. }
        | Error::Poisoned { .. }
        | Error::Io(_)
        | Error::Owner { .. }
        | Error::OwnerRefused { .. } => ("StoreError", vec![]),
        _ => ("ProxError", vec![]),
    };
    raise(class, msg, attrs)
}

/// The exception for a sync error (engine errors inside it keep their
/// engine class).
pub(crate) fn sync(e: prox_sync::Error) -> PyErr {
    match e {
        prox_sync::Error::Engine(e) => engine(e),
        prox_sync::Error::Config(m) => raise("InvalidInputError", m, vec![]),
        e => raise("SyncError", e.to_string(), vec![]),
    }
}
