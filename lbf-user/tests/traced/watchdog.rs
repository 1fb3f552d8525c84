//! A time limit on one traced run: a job that hangs (an MPI library waiting for a peer that
//! never answers, a tracer that never sees the end) is killed, and its test fails saying
//! which processes were left and in what state, instead of stalling the suite until CI's
//! time runs out with nothing to show.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long one traced run may last. The longest runs of the suite take about 10 s.
pub(super) const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Watches a job that runs in its own session (its leader `pid` started under `setsid`).
pub(super) struct Watchdog {
    done: mpsc::Sender<()>,
    thread: JoinHandle<Option<String>>,
}

impl Watchdog {
    /// Starts watching the session led by `pid`: after `limit`, lists every process, kills
    /// the session's processes and sets `stop` (which ends the capture loop).
    pub(super) fn start(pid: u32, limit: Duration, stop: Arc<AtomicBool>) -> Self {
        let (done, finished) = mpsc::channel();
        let thread = std::thread::spawn(move || match finished.recv_timeout(limit) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                let listing = processes();
                // SAFETY: kill(2) on the job's process group (its leader ran setsid).
                unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
                stop.store(true, Ordering::Relaxed);
                Some(listing)
            }
        });
        Self { done, thread }
    }

    /// Stops watching; returns the process listing taken when the limit passed, if it did.
    pub(super) fn finish(self) -> Option<String> {
        let _ = self.done.send(());
        self.thread.join().expect("the watchdog thread")
    }
}

/// The machine's processes (not kernel threads) as a forest, with states, CPU times and
/// where each waits in the kernel: what hung, and where.
fn processes() -> String {
    Command::new("ps")
        .args(["-N", "--ppid", "2", "--forest"])
        .args(["-o", "pid,ppid,pgid,stat,etime,time,wchan:20,args"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("(ps failed: {e})"))
}
