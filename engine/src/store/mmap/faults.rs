//! Fault injection for the store's file operations, for tests.
//!
//! Every write, fsync, truncation, creation, rename and unlink the store
//! makes goes through [`FileFaults`] when [`MmapOptions::faults`] is set
//! (reads through the mapping do not). [`FaultPlan`] is the injector the
//! tests use: it fails one chosen operation with ENOSPC, EIO or a failing
//! fsync, or simulates a power loss at a chosen operation, after which
//! [`FaultPlan::power_loss`] rewrites the directory to what a disk would
//! hold: the contents of each file as of its last fsync, and only the
//! directory entries made durable by a directory fsync.
//!
//! [`MmapOptions::faults`]: super::MmapOptions::faults

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One file operation of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp<'a> {
    /// A new file is created (or an existing one truncated to zero).
    Create(&'a Path),
    /// `len` bytes are written at `offset`.
    Write {
        /// The file.
        path: &'a Path,
        /// Byte offset.
        offset: u64,
        /// Bytes written.
        len: usize,
    },
    /// The file's contents are fsynced.
    Sync(&'a Path),
    /// The file is truncated or extended to `len`.
    SetLen {
        /// The file.
        path: &'a Path,
        /// New length.
        len: u64,
    },
    /// `from` is renamed over `to`.
    Rename {
        /// Old name.
        from: &'a Path,
        /// New name.
        to: &'a Path,
    },
    /// The file is unlinked.
    Remove(&'a Path),
    /// The directory is fsynced (making creations, renames and unlinks in it
    /// durable).
    SyncDir(&'a Path),
}

impl FileOp<'_> {
    fn writes_data(&self) -> bool {
        matches!(
            self,
            FileOp::Create(_) | FileOp::Write { .. } | FileOp::SetLen { .. }
        )
    }

    fn syncs(&self) -> bool {
        matches!(self, FileOp::Sync(_) | FileOp::SyncDir(_))
    }
}

/// A hook around the store's file operations.
pub trait FileFaults: Send + Sync {
    /// Called before `op`; an error is returned to the store as if the
    /// operating system had failed the operation (which is then not done).
    fn before(&self, op: &FileOp<'_>) -> io::Result<()>;

    /// Called after `op` succeeded.
    fn after(&self, op: &FileOp<'_>) {
        let _ = op;
    }
}

/// A shared [`FileFaults`] handle for [`MmapOptions`](super::MmapOptions)
/// (compares by identity).
#[derive(Clone)]
pub struct Faults(pub Arc<dyn FileFaults>);

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Faults(..)")
    }
}

impl PartialEq for Faults {
    fn eq(&self, other: &Faults) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Faults {}

/// What [`FaultPlan`] injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// ENOSPC on a data-changing operation (create, write, set_len).
    NoSpace,
    /// EIO on any operation.
    Eio,
    /// EIO on an fsync (of a file or of the directory).
    SyncFails,
    /// Power is lost before the operation: it and every later operation
    /// fail with EIO, and [`FaultPlan::power_loss`] drops what was not
    /// fsynced.
    PowerLoss,
}

#[derive(Debug, Default)]
struct PlanState {
    /// Operations seen (all kinds).
    ops: u64,
    /// Operations seen that `fault` applies to.
    eligible: u64,
    /// Inject `fault.0` at the `fault.1`-th eligible operation (0-based).
    fault: Option<(FaultKind, u64)>,
    fired: bool,
    powered_off: bool,
    /// Contents as of the last fsync of the file now at each path.
    synced: HashMap<PathBuf, Vec<u8>>,
    /// What a power loss leaves at each path.
    durable: HashMap<PathBuf, Vec<u8>>,
    /// Names created, renamed or unlinked since the last directory fsync.
    dirty: HashSet<PathBuf>,
}

/// A [`FileFaults`] that injects one fault and models power loss. See the
/// [module docs](self).
#[derive(Debug)]
pub struct FaultPlan {
    dir: PathBuf,
    state: Mutex<PlanState>,
}

/// Files of the store that the plan tracks (the lock file is not data).
fn tracked(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n != "LOCK")
}

impl FaultPlan {
    /// A plan for the store in `dir`, taking its current files as durable.
    /// Injects nothing until [`inject`](Self::inject) is called.
    pub fn new(dir: &Path) -> io::Result<Arc<FaultPlan>> {
        let mut st = PlanState::default();
        if dir.is_dir() {
            for e in std::fs::read_dir(dir)? {
                let path = e?.path();
                if path.is_file() && tracked(&path) {
                    let bytes = std::fs::read(&path)?;
                    st.synced.insert(path.clone(), bytes.clone());
                    st.durable.insert(path, bytes);
                }
            }
        }
        Ok(Arc::new(FaultPlan {
            dir: dir.to_path_buf(),
            state: Mutex::new(st),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PlanState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Injects `kind` at the `nth` (0-based) operation it applies to,
    /// counted from now.
    pub fn inject(&self, kind: FaultKind, nth: u64) {
        let mut st = self.lock();
        st.fault = Some((kind, nth));
        st.eligible = 0;
        st.fired = false;
    }

    /// Whether the injected fault has fired.
    pub fn fired(&self) -> bool {
        self.lock().fired
    }

    /// Operations seen so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Cuts the power now: every later operation fails.
    pub fn cut_power(&self) {
        self.lock().powered_off = true;
    }

    /// Rewrites the directory to what survives a power loss: each durable
    /// name with its contents as of its last fsync; other files removed.
    /// Call after dropping the store. Power comes back on.
    pub fn power_loss(&self) -> io::Result<()> {
        let mut st = self.lock();
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            if tracked(&path) && !st.durable.contains_key(&path) {
                std::fs::remove_file(&path)?;
            }
        }
        for (path, bytes) in &st.durable {
            std::fs::write(path, bytes)?;
        }
        st.synced = st.durable.clone();
        st.dirty.clear();
        st.powered_off = false;
        st.fault = None;
        Ok(())
    }
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected EIO ({what})"))
}

impl FileFaults for FaultPlan {
    fn before(&self, op: &FileOp<'_>) -> io::Result<()> {
        let mut st = self.lock();
        st.ops += 1;
        if st.powered_off {
            return Err(eio("power lost"));
        }
        let Some((kind, nth)) = st.fault else {
            return Ok(());
        };
        if st.fired {
            return Ok(());
        }
        let applies = match kind {
            FaultKind::NoSpace => op.writes_data(),
            FaultKind::SyncFails => op.syncs(),
            FaultKind::Eio | FaultKind::PowerLoss => true,
        };
        if !applies {
            return Ok(());
        }
        st.eligible += 1;
        if st.eligible - 1 != nth {
            return Ok(());
        }
        st.fired = true;
        match kind {
            FaultKind::NoSpace => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            FaultKind::Eio => Err(eio("chosen operation")),
            FaultKind::SyncFails => Err(eio("fsync")),
            FaultKind::PowerLoss => {
                st.powered_off = true;
                Err(eio("power lost"))
            }
        }
    }

    fn after(&self, op: &FileOp<'_>) {
        let mut st = self.lock();
        match *op {
            FileOp::Create(p) if tracked(p) => {
                st.synced.insert(p.to_path_buf(), Vec::new());
                st.dirty.insert(p.to_path_buf());
            }
            FileOp::Rename { from, to } => {
                let bytes = st.synced.remove(from).unwrap_or_default();
                st.synced.insert(to.to_path_buf(), bytes);
                st.dirty.insert(from.to_path_buf());
                st.dirty.insert(to.to_path_buf());
            }
            FileOp::Remove(p) => {
                st.synced.remove(p);
                st.dirty.insert(p.to_path_buf());
            }
            FileOp::Sync(p) if tracked(p) => {
                // A file that cannot be read back is treated as empty.
                let bytes = std::fs::read(p).unwrap_or_default();
                if !st.dirty.contains(p) && p.exists() {
                    st.durable.insert(p.to_path_buf(), bytes.clone());
                }
                st.synced.insert(p.to_path_buf(), bytes);
            }
            FileOp::SyncDir(_) => {
                let dirty: Vec<PathBuf> = st.dirty.drain().collect();
                for p in dirty {
                    match st.synced.get(&p) {
                        Some(bytes) if p.exists() => {
                            let bytes = bytes.clone();
                            st.durable.insert(p, bytes);
                        }
                        _ => {
                            st.durable.remove(&p);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}
