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

/// Per-phase progress of an index build ([`prox_engine::proximity::Progress`]):
/// a bar per phase with throughput and ETA on a terminal, one JSON line per
/// finished phase on stderr with `json`, and the seconds and records of
/// every phase for the end summary.
pub struct Phases {
    json: bool,
    state: std::sync::Mutex<PhaseState>,
}

#[derive(Default)]
struct PhaseState {
    bar: Option<ProgressBar>,
    current: Option<(prox_engine::proximity::Phase, std::time::Instant, u64)>,
    done: Vec<PhaseTime>,
}

/// One finished phase.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseTime {
    /// "read", "sort", "cluster", "write", "sidecars".
    pub phase: &'static str,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Records processed.
    pub records: u64,
}

impl Phases {
    /// A reporter; `json` adds one JSON line per phase on stderr.
    pub fn new(json: bool) -> Phases {
        Phases {
            json,
            state: std::sync::Mutex::new(PhaseState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PhaseState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The phases finished so far, in order.
    pub fn times(&self) -> Vec<PhaseTime> {
        self.lock().done.clone()
    }
}

impl prox_engine::proximity::Progress for Phases {
    fn start(&self, phase: prox_engine::proximity::Phase, total: Option<u64>) {
        let mut s = self.lock();
        let b = match total {
            Some(n) => bar(n, phase.name(), "records"),
            None => spinner(phase.name()),
        };
        s.bar = Some(b);
        s.current = Some((phase, std::time::Instant::now(), 0));
    }

    fn advance(&self, n: u64) {
        let mut s = self.lock();
        if let Some(b) = &s.bar {
            b.inc(n);
        }
        if let Some(c) = s.current.as_mut() {
            c.2 += n;
        }
    }

    fn finish(&self, phase: prox_engine::proximity::Phase) {
        let mut s = self.lock();
        if let Some(b) = s.bar.take() {
            b.finish_and_clear();
        }
        let Some((p, t, records)) = s.current.take() else {
            return;
        };
        debug_assert_eq!(p, phase);
        let seconds = t.elapsed().as_secs_f64();
        let time = PhaseTime {
            phase: phase.name(),
            seconds,
            records,
        };
        if self.json && !is_quiet() {
            let rate = if seconds > 0.0 {
                records as f64 / seconds
            } else {
                0.0
            };
            eprintln!(
                "{}",
                serde_json::json!({
                    "phase": time.phase,
                    "seconds": seconds,
                    "records": records,
                    "records_per_second": rate,
                })
            );
        }
        s.done.push(time);
    }
}
