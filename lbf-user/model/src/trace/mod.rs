//! Trace files: the engine's [`Event`]s on disk, so a capture can be replayed offline.
//!
//! The format is JSON Lines (see `docs/trace-format.md`): a header line naming the processes,
//! one event per line, and, when the capture completed, a summary line. Version 2 adds what
//! messages sent by rendezvous need (`recv_post`, `send_end`, `send`'s `rendezvous` flag);
//! version 1 traces read as before. [`TraceReader`] streams
//! a file (memory does not grow with its length) and names the line of every problem;
//! [`TraceWriter`] writes the same format. [`synthetic`] generates large deadlock-free traces
//! on the fly for benchmarks and tests.
//!
//! This module knows nothing of the engine or of targets.

mod error;
mod flat;
mod line;
mod reader;
mod rules;
pub mod synthetic;
mod writer;

pub use error::{TraceError, TraceErrorKind};
pub use reader::TraceReader;
pub use writer::TraceWriter;

use crate::event::{CollOp, Event, EventKind, ProcId, ProcInfo, ProcedureCpu};
use crate::source::Source;
use serde::{Deserialize, Serialize};

/// The value of the header's `format` field.
pub const FORMAT_NAME: &str = "lbf-trace";

/// The format version this crate writes.
pub const FORMAT_VERSION: u64 = 2;

/// The format versions this crate reads: version 2 only added to version 1.
pub const READABLE_VERSIONS: [u64; 2] = [1, FORMAT_VERSION];

/// What a trace's first line says: the processes, in id order (ids are `0..procs.len()`).
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The processes of the traced run.
    pub procs: Vec<ProcInfo>,
    /// Where the capture took its events: MPI calls, PVM calls or socket system calls.
    /// `None` when the trace does not say (written before traces said, or merged from
    /// several hosts' streams).
    pub source: Option<Source>,
    /// The procedures whose CPU each event carries (`lbf-trace --procedure`), in the order of
    /// [`LineEvent::procedures`]; empty when the capture followed none.
    pub procedures: Vec<String>,
}

/// The closing line of a completed capture: how long the measured run took, and whether the
/// capture dropped events (its predictions are then unreliable) and where.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Wall-clock seconds of the measured run.
    pub measured_seconds: f64,
    /// Events the capture lost (ring buffer overflow and the like).
    pub lost_events: u64,
    /// Wall-clock seconds from the last process's end of modelled work (for MPI, entering
    /// `MPI_Finalize`) to the end of the run: library and launcher teardown, which the
    /// predictions take as measured and add (see [`crate::report::add_teardown`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub teardown_seconds: f64,
    /// Where `lost_events` are, as far as the capture knows: each process whose records the
    /// kernel side could not keep (the ring buffer full), from when. Its events after that
    /// point miss some, which can leave a receive without its send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<Gap>,
}

/// A gap in one process's records: from `from_seconds` into the run, `records` of them were
/// lost (the ring buffer full), all or some of the process's events after that point.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gap {
    /// The process.
    pub p: ProcId,
    /// When its first record was lost, in seconds after the capture started.
    pub from_seconds: f64,
    /// How many of its records were lost.
    pub records: u64,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "process {} lost {} records from {:.3} s into the run",
            self.p, self.records, self.from_seconds
        )
    }
}

/// For serde: a zero teardown is not written.
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// One event read from a trace, with the line it came from (1-based; the header is line 1),
/// to pass on as the engine's `origin` so that its errors point back into the file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LineEvent {
    /// The line number in the trace file.
    pub line: u64,
    /// The event.
    pub event: Event,
    /// The CPU its process spent in each of the header's procedures since its previous event.
    pub procedures: ProcedureCpu,
    /// When it happened, in nanoseconds after the capture's clock origin (`t_ns`), where the
    /// capture wrote it.
    pub t_ns: Option<u64>,
}

/// The value of an event's `k` field.
pub fn kind_name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::Send { .. } => "send",
        EventKind::RecvStart => "recv_start",
        EventKind::RecvEnd { .. } => "recv_end",
        EventKind::RecvPost { .. } => "recv_post",
        EventKind::SendEnd { .. } => "send_end",
        EventKind::CollStart { .. } => "coll_start",
        EventKind::CollEnd { .. } => "coll_end",
        EventKind::Keepalive => "keepalive",
        EventKind::Exit => "exit",
    }
}

/// The value of a `coll_start` event's `op` field.
pub fn op_name(op: CollOp) -> &'static str {
    match op {
        CollOp::Barrier => "barrier",
        CollOp::Bcast => "bcast",
        CollOp::Reduce => "reduce",
        CollOp::Allreduce => "allreduce",
        CollOp::Alltoall => "alltoall",
    }
}

/// The operation named `name` in a `coll_start` event's `op` field.
pub fn parse_op(name: &str) -> Option<CollOp> {
    [
        CollOp::Barrier,
        CollOp::Bcast,
        CollOp::Reduce,
        CollOp::Allreduce,
        CollOp::Alltoall,
    ]
    .into_iter()
    .find(|&op| op_name(op) == name)
}

#[cfg(test)]
mod tests;
