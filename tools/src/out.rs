//! Standard-output helpers.
//!
//! Output goes through [`Stdout`] so that a closed pipe (`prox ... | head`)
//! ends the command quietly instead of panicking: write errors are returned
//! and [`is_broken_pipe`] lets `main` exit with status 0 for them.

use std::io::Write;

/// A locked, buffered stdout.
pub struct Stdout {
    inner: std::io::BufWriter<std::io::StdoutLock<'static>>,
}

impl Stdout {
    /// Locks stdout for the life of the value.
    pub fn new() -> Self {
        Self {
            inner: std::io::BufWriter::new(std::io::stdout().lock()),
        }
    }

    /// Writes one line.
    pub fn line(&mut self, s: impl std::fmt::Display) -> anyhow::Result<()> {
        writeln!(self.inner, "{s}")?;
        Ok(())
    }

    /// Writes one JSON value as a line.
    pub fn json(&mut self, v: &impl serde::Serialize) -> anyhow::Result<()> {
        // Serialise first so that write errors stay io::Errors (a
        // serde_json error hides the io error from the anyhow chain).
        let line = serde_json::to_string(v)?;
        writeln!(self.inner, "{line}")?;
        Ok(())
    }

    /// Flushes buffered output.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.inner.flush()?;
        Ok(())
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Stdout {
    fn drop(&mut self) {
        let _ = self.inner.flush();
    }
}

/// True if the error chain bottoms out in a broken pipe on output.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
