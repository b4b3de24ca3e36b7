//! Progress reporting on stderr.
//!
//! Bars show position, rate and ETA. They are hidden when `--quiet` was
//! given ([`set_quiet`]) or stderr is not a terminal, so scripts and tests
//! see clean output. [`note`] prints an informational line under the same
//! rule about `--quiet` (but also when stderr is redirected).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static QUIET: AtomicBool = AtomicBool::new(false);

/// Sets the process-wide quiet flag (from `--quiet`).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// True if `--quiet` was given.
pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// True if bars are drawn: not quiet and stderr is a terminal.
pub fn bars_visible() -> bool {
    !is_quiet() && std::io::stderr().is_terminal()
}

/// A progress bar over `len` items of `unit` (e.g. "rows"), labelled
/// `msg`; hidden when bars are not visible.
pub fn bar(len: u64, msg: &str, unit: &str) -> ProgressBar {
    if !bars_visible() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let template = format!(
        "{{msg:>12}} [{{bar:32}}] {{human_pos}}/{{human_len}} {unit} {{per_sec}} ETA {{eta}}"
    );
    pb.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// A spinner for work of unknown length (e.g. an index build inside the
/// engine); hidden when bars are not visible.
pub fn spinner(msg: &str) -> ProgressBar {
    if !bars_visible() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// Prints an informational line on stderr unless `--quiet`.
pub fn note(msg: impl std::fmt::Display) {
    if !is_quiet() {
        eprintln!("{msg}");
    }
}
