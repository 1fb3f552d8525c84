//! A progress bar on stderr for calibrations that take more than a second: nothing for the
//! quick ones, so scripts and short runs see only the results.

use std::io::Write;
use std::time::{Duration, Instant};

/// How long a calibration runs before its bar appears.
const QUIET: Duration = Duration::from_secs(1);

/// A progress bar named after what it measures.
#[derive(Debug)]
pub struct Progress {
    what: String,
    start: Instant,
    shown: bool,
    hidden: bool,
    /// The line last drawn: a line is drawn again only when it changes.
    last: String,
}

impl Progress {
    /// A bar for `what` (e.g. `TCP ping-pong with 10.0.0.2:7000`), shown once it has run 1 s.
    pub fn new(what: &str) -> Self {
        Progress {
            what: what.to_string(),
            start: Instant::now(),
            shown: false,
            hidden: false,
            last: String::new(),
        }
    }

    /// A bar that never shows (for tests and library use).
    pub fn hidden() -> Self {
        Progress {
            hidden: true,
            ..Progress::new("")
        }
    }

    /// Step `done` of `total` is starting; `now` says what it measures.
    pub fn show(&mut self, done: usize, total: usize, now: &str) {
        if self.hidden || self.start.elapsed() < QUIET {
            return;
        }
        let width = 30;
        let filled = (done * width).checked_div(total).unwrap_or(width);
        let line = format!(
            "\r{} [{}{}] {done}/{total} {now:<12}",
            self.what,
            "#".repeat(filled),
            ".".repeat(width - filled)
        );
        if line != self.last {
            self.shown = true;
            eprint!("{line}");
            let _ = std::io::stderr().flush();
            self.last = line;
        }
    }

    /// The calibration is over: ends the bar's line if it was shown.
    pub fn done(&mut self) {
        if self.shown {
            eprintln!(
                "\r{} done in {:.1} s{:<40}",
                self.what,
                self.start.elapsed().as_secs_f64(),
                ""
            );
            self.shown = false;
        }
    }
}
