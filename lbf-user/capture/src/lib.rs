//! lbf's captures: raw probe records to the model's events, for each source a program can be
//! captured from. [`mpi`] follows MPI calls (each library's ABI, matching sends to receives,
//! communicators and collectives, CPU accounting), [`pvm`] PVM 3 calls, [`sockets`] the
//! socket system calls of any program; [`select`] says which source a command or a process
//! is. Each is a [`record_capture::RecordCapture`]: it takes `lbf_common::Record`s, whoever
//! read them (the eBPF probes of `lbf-probe` live, or a test by hand), and hands the events
//! to an [`EventSink`].
//!
//! Nothing here loads eBPF, reads trace files or runs the engine.

pub mod anomaly;
pub mod gaps;
pub mod ids;
pub mod mpi;
pub mod procedures;
pub mod procfs;
pub mod pvm;
pub mod record_capture;
pub mod roster;
pub mod select;
pub mod sockets;
pub mod timeline;
mod totals;

use anomaly::Anomalies;
use lbf_model::event::{EventKind, ProcInfo};
pub use lbf_model::sink::{EventLog, EventSink};

/// Totals over the events of one process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcStats {
    /// `Send` events.
    pub sends: u64,
    /// Bytes of those sends.
    pub send_bytes: u64,
    /// Matched `RecvEnd` events.
    pub recvs: u64,
    /// Bytes of the messages received.
    pub recv_bytes: u64,
    /// `CollStart` events.
    pub collectives: u64,
    /// CPU over all events.
    pub cpu_ns: u64,
    /// CPU on `RecvEnd`, `SendEnd` and `CollEnd` events: waiting inside MPI.
    pub wait_ns: u64,
    /// CPU before `MPI_Init` returned and inside `MPI_Finalize`: start-up and teardown, which
    /// no event carries. The model of a rank runs from `MPI_Init`'s return (see
    /// [`ProcInfo::start_ns`]) to `MPI_Finalize`'s entry; what comes before and after is taken
    /// as measured. A rank attached while running is modelled from the attach: the CPU it
    /// used before is in neither figure.
    pub untimed_cpu_ns: u64,
}

impl ProcStats {
    /// Adds `other`'s totals to these (every field: a field added to the struct must be
    /// added here too).
    pub fn add(&mut self, other: &ProcStats) {
        let ProcStats {
            sends,
            send_bytes,
            recvs,
            recv_bytes,
            collectives,
            cpu_ns,
            wait_ns,
            untimed_cpu_ns,
        } = *other;
        self.sends += sends;
        self.send_bytes += send_bytes;
        self.recvs += recvs;
        self.recv_bytes += recv_bytes;
        self.collectives += collectives;
        self.cpu_ns += cpu_ns;
        self.wait_ns += wait_ns;
        self.untimed_cpu_ns += untimed_cpu_ns;
    }

    fn count(&mut self, cpu_ns: u64, kind: &EventKind, bytes: u64) {
        self.cpu_ns += cpu_ns;
        match *kind {
            EventKind::Send { bytes, .. } => {
                self.sends += 1;
                self.send_bytes += bytes;
            }
            EventKind::RecvEnd { .. } => {
                self.recvs += 1;
                self.recv_bytes += bytes;
                self.wait_ns += cpu_ns;
            }
            EventKind::CollStart { .. } => self.collectives += 1,
            EventKind::CollEnd { .. } | EventKind::SendEnd { .. } => self.wait_ns += cpu_ns,
            _ => {}
        }
    }
}

/// What a finished capture saw.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// The ranks, by id.
    pub procs: Vec<ProcInfo>,
    /// Totals per rank, indexed like `procs`.
    pub stats: Vec<ProcStats>,
    /// Wall time from the first record to the last exit of a process started during the
    /// capture (else the last record), in seconds.
    pub measured_seconds: f64,
    /// Wall seconds from the last `MPI_Finalize` entry to the end of the run: teardown, which
    /// predictions take as measured (see `trace::Summary::teardown_seconds`).
    pub teardown_seconds: f64,
    /// Sends no receive consumed.
    pub unmatched_sends: u64,
    /// Receives completed without a matching send (emitted as `Keepalive`s).
    pub unmatched_recvs: u64,
    /// Things the capture could not model, with how often they happened.
    pub anomalies: Anomalies,
    /// Records the kernel side dropped (set by `lbf-record`'s `CaptureSink`).
    pub lost_records: u64,
    /// Which processes of the trace those were of, from when (as far as the kernel side
    /// could tell: a record lost by a thread with no state is in the total alone).
    pub gaps: Vec<gaps::Gap>,
    /// Events the capture left out of the trace: those of processes that joined a socket or
    /// PVM capture after the number it expected had (see [`roster`]).
    pub lost_events: u64,
}
