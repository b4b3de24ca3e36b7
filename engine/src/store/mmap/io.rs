//! The store's file operations that change the disk, in one place so a
//! fault injector ([`super::faults`]) can intercept them.

use super::faults::{Faults, FileOp};
use crate::error::Result;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// File operations, optionally routed through a fault injector.
#[derive(Debug, Clone, Default)]
pub(super) struct Io {
    faults: Option<Faults>,
}

impl Io {
    pub(super) fn new(faults: Option<Faults>) -> Io {
        Io { faults }
    }

    fn run<T>(&self, op: FileOp<'_>, f: impl FnOnce() -> std::io::Result<T>) -> Result<T> {
        if let Some(h) = &self.faults {
            h.0.before(&op)?;
        }
        let out = f()?;
        if let Some(h) = &self.faults {
            h.0.after(&op);
        }
        Ok(out)
    }

    /// `pwrite` of all of `buf` at `offset`.
    pub(super) fn write_at(&self, file: &File, path: &Path, buf: &[u8], offset: u64) -> Result<()> {
        let op = FileOp::Write {
            path,
            offset,
            len: buf.len(),
        };
        self.run(op, || file.write_all_at(buf, offset))
    }

    /// fsync of a file's contents (and size).
    pub(super) fn sync(&self, file: &File, path: &Path) -> Result<()> {
        self.run(FileOp::Sync(path), || file.sync_data())
    }

    /// Truncates or extends a file.
    pub(super) fn set_len(&self, file: &File, path: &Path, len: u64) -> Result<()> {
        self.run(FileOp::SetLen { path, len }, || file.set_len(len))
    }

    /// Creates a new file for reading and writing; fails if it exists.
    pub(super) fn create_new(&self, path: &Path) -> Result<File> {
        self.run(FileOp::Create(path), || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
        })
    }

    /// Opens a file for writing, creating it empty if absent (never
    /// truncating an existing one).
    pub(super) fn open_or_create(&self, path: &Path) -> Result<File> {
        if path.exists() {
            return Ok(OpenOptions::new().read(true).write(true).open(path)?);
        }
        self.create_new(path)
    }

    /// Unlinks a file; an absent file is not an error.
    pub(super) fn remove(&self, path: &Path) -> Result<()> {
        if !path.exists() {
            return Ok(());
        }
        self.run(FileOp::Remove(path), || match fs::remove_file(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        })
    }

    /// Renames `from` over `to` (atomic on one file system).
    pub(super) fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.run(FileOp::Rename { from, to }, || fs::rename(from, to))
    }

    /// Fsyncs a directory so creations, renames and unlinks in it are
    /// durable.
    pub(super) fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.run(FileOp::SyncDir(dir), || File::open(dir)?.sync_all())
    }
}
