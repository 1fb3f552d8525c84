//! The capture loop: drain records into a sink until every traced process has ended or the
//! caller asks to stop, then report what the kernel side lost.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::Result;

use lbf_probe::{LostCounts, RecordReader, RecordSink, Tracer};

/// How long one wait for records lasts at most: bounds the reaction to a stop request and how
/// late records are read. The kernel side wakes the reader sooner when the ring buffer has
/// filled to an eighth since it was last drained, so records are read in batches (a reader
/// that drained after every record would compete with the traced program for the CPUs). No
/// wait when the reader is behind (a drain read an eighth of the ring buffer or more): it
/// drains again at once.
const POLL: Duration = Duration::from_millis(10);
/// How often the traced set is checked for ended processes.
const LIVENESS: Duration = Duration::from_millis(200);
/// How long after an `Exit` record the traced set is checked at every wake-up instead, with
/// waits of [`EXIT_POLL`]: the kernel side wakes the reader at a process's `Exit` record and
/// then takes the process out of the set, so the capture ends a millisecond or two after the
/// last one's end rather than up to a [`POLL`] (or a [`LIVENESS`] interval) later.
const AFTER_EXIT: Duration = Duration::from_millis(100);
/// How long one wait for records lasts at most within [`AFTER_EXIT`] of an `Exit`.
const EXIT_POLL: Duration = Duration::from_millis(1);

/// How a capture ended.
#[derive(Clone, Copy, Debug)]
pub struct CaptureEnd {
    /// Records handed to the sink.
    pub records: u64,
    /// The kernel side's loss counters at the end.
    pub lost: LostCounts,
    /// True if it ended because `stop` was set, false if every traced process ended.
    pub stopped: bool,
}

/// Drains `reader` into `sink` until no traced process is left or `stop` becomes true (the
/// `Attach` records of threads [`Tracer::trace_pid`] seeded go first, see
/// [`Tracer::take_attached`]), then
/// drains what remains, hands over the entry records of calls still in flight that the kernel
/// side deferred (see [`Tracer::deferred_entries`]) and calls `sink.finish` with the loss
/// counters.
pub fn run(
    tracer: &mut Tracer,
    reader: &mut RecordReader,
    sink: &mut dyn RecordSink,
    stop: &AtomicBool,
) -> Result<CaptureEnd> {
    run_adopting(tracer, reader, sink, stop, &mut |_| Ok(()))
}

/// [`run`], calling `adopt` with the tracer every `LIVENESS` interval (before the check for
/// live processes) so that it can trace processes that appeared since: a node daemon's
/// selection by command name or cgroup matches processes that are not descendants of the
/// ones it traces already.
pub fn run_adopting(
    tracer: &mut Tracer,
    reader: &mut RecordReader,
    sink: &mut dyn RecordSink,
    stop: &AtomicBool,
    adopt: &mut dyn FnMut(&mut Tracer) -> Result<()>,
) -> Result<CaptureEnd> {
    let mut records = 0;
    let mut last_check = Instant::now();
    let mut exited_at = None;
    let stopped = loop {
        // Before the ring buffer's records: none of a thread seeded since can precede its own.
        for attach in tracer.take_attached() {
            sink.record(&attach)?;
            records += 1;
        }
        let drained = reader.drain(sink)?;
        records += drained.records;
        if drained.exits > 0 {
            exited_at = Some(Instant::now());
        }
        let after_exit = exited_at.is_some_and(|t: Instant| t.elapsed() < AFTER_EXIT);
        if !drained.behind {
            reader.wait(if after_exit { EXIT_POLL } else { POLL })?;
        }
        sink.tick()?;
        if stop.load(Ordering::Relaxed) {
            break true;
        }
        if after_exit || last_check.elapsed() >= LIVENESS {
            last_check = Instant::now();
            adopt(tracer)?;
            if !any_traced_alive(tracer)? {
                break false;
            }
        }
    };
    // Records of the last exits were submitted before their process left the traced set.
    records += reader.drain_all(sink)?.records;
    for entry in tracer.deferred_entries()? {
        sink.record(&entry)?;
        records += 1;
    }
    let lost = tracer.lost_counts()?;
    sink.finish(&lost)?;
    Ok(CaptureEnd {
        records,
        lost,
        stopped,
    })
}

/// Whether any traced process is still running; forgets traced processes that ended without
/// the kernel side seeing their exit.
fn any_traced_alive(tracer: &mut Tracer) -> Result<bool> {
    let mut alive = false;
    for pid in tracer.traced_pids()? {
        if lbf_capture::procfs::has_ended(pid) {
            tracer.untrace_pid(pid)?;
        } else {
            alive = true;
        }
    }
    Ok(alive)
}
