//! JSON lines: one JSON object per line; blank lines are skipped.

use super::error::Problem;
use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::io::{BufRead, BufReader, Read};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// Reads lines, skipping blank ones, and counting them (1-based).
struct Lines {
    src: BufReader<Box<dyn Read + Send>>,
    line: u64,
    buf: String,
}

impl Lines {
    fn new(file: Box<dyn Read + Send>) -> Lines {
        Lines {
            src: BufReader::with_capacity(1 << 20, file),
            line: 0,
            buf: String::new(),
        }
    }

    /// The next non-blank line, or `None` at the end.
    fn next_line(&mut self) -> Result<Option<&str>> {
        loop {
            self.buf.clear();
            let n = self
                .src
                .read_line(&mut self.buf)
                .context("not valid UTF-8 text or unreadable")?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if !self.buf.trim().is_empty() {
                return Ok(Some(self.buf.trim_end()));
            }
        }
    }
}

/// A vector line: `{"key": hex, "vector": [...], "value": hex}` with key and
/// value optional, or `"payload": {...}` instead of `"value"` (stored as
/// canonical JSON, docs/payloads.md).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VectorLine {
    #[serde(default)]
    key: Option<String>,
    vector: Vec<f32>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    payload: Option<serde_json::Value>,
}

/// Vectors from JSON lines, for [`super::VectorReader`] (which adds the
/// file name and row to errors).
pub(crate) struct VectorLines {
    lines: Lines,
}

impl VectorLines {
    pub(crate) fn new(file: Box<dyn Read + Send>) -> VectorLines {
        VectorLines {
            lines: Lines::new(file),
        }
    }

    /// The 1-based number of the line read last.
    pub(crate) fn line(&self) -> u64 {
        self.lines.line
    }

    pub(crate) fn next_into(&mut self, row: &mut super::Row) -> Result<bool, Problem> {
        let text = match self.lines.next_line() {
            Ok(Some(text)) => text,
            Ok(None) => return Ok(false),
            Err(e) => return Err(Problem::BadLine(format!("{e:#}"))),
        };
        let bad = |e: anyhow::Error| Problem::BadLine(format!("{e:#}"));
        let v: VectorLine =
            serde_json::from_str(text).map_err(|e| Problem::BadLine(e.to_string()))?;
        row.key = v
            .key
            .as_deref()
            .map(|k| super::parse_hex("key", k))
            .transpose()
            .map_err(bad)?;
        row.value = match (v.value.as_deref(), &v.payload) {
            (Some(_), Some(_)) => {
                return Err(Problem::BadLine(
                    "a line has either value or payload, not both".into(),
                ))
            }
            (Some(k), None) => Some(super::parse_hex("value", k).map_err(bad)?),
            (None, Some(p)) if p.is_object() => {
                Some(prox_engine::secondary::encode_canonical(p).map_err(|e| bad(e.into()))?)
            }
            (None, Some(_)) => {
                return Err(Problem::BadLine("payload must be a JSON object".into()))
            }
            (None, None) => None,
        };
        row.vector = v.vector;
        Ok(true)
    }
}

/// A typed JSON-lines reader: yields `(line number, T)`; errors name the
/// file and line.
pub struct JsonLines<T> {
    path: PathBuf,
    lines: Lines,
    _t: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> JsonLines<T> {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<JsonLines<T>> {
        let f = std::fs::File::open(path)
            .with_context(|| format!("{}: cannot open", path.display()))?;
        Ok(JsonLines {
            path: path.to_path_buf(),
            lines: Lines::new(Box::new(f)),
            _t: PhantomData,
        })
    }

    /// "file: line N" for the line read last.
    pub fn locate(&self) -> String {
        format!("{}: line {}", self.path.display(), self.lines.line)
    }
}

impl<T: DeserializeOwned> Iterator for JsonLines<T> {
    type Item = Result<(u64, T)>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = match self.lines.next_line() {
            Ok(None) => return None,
            Ok(Some(text)) => serde_json::from_str::<T>(text).map_err(anyhow::Error::from),
            Err(e) => Err(e),
        };
        Some(
            r.map(|v| (self.lines.line, v))
                .with_context(|| self.locate()),
        )
    }
}
