//! The events every source produces and the engine consumes: the vocabulary of a Program
//! Activity Graph (paper section 2).
//!
//! A source (a live capture, a trace file, a node daemon) emits, for every process, an ordered
//! stream of [`Event`]s. Each carries the CPU time the process used since its previous event.
//! Only each process's own order is meaningful; streams of different processes may interleave
//! arbitrarily.

use serde::{Deserialize, Serialize};

/// A process's id within one trace: dense, starting at 0, as listed in the trace header.
pub type ProcId = u32;

/// Identifies one message: ties a [`EventKind::Send`] to the one [`EventKind::RecvEnd`] that
/// consumed it (and, for a message sent by rendezvous, to its [`EventKind::RecvPost`] and
/// [`EventKind::SendEnd`]). Unique within a trace.
pub type MsgId = u64;

/// Identifies one collective operation instance: every participant's
/// [`EventKind::CollStart`]/[`EventKind::CollEnd`] carries the same id. Unique within a trace.
pub type CollId = u64;

/// A process as described in a trace header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcInfo {
    /// Dense id, the index into the header's list.
    pub id: ProcId,
    /// A human name such as `rank3` or `server`.
    #[serde(default)]
    pub name: String,
    /// The host the process ran on in the measured run.
    #[serde(default)]
    pub host: String,
    /// When the process started, in nanoseconds after the capture started (the launcher's
    /// start, for a job started by `mpirun`). The engine starts the process this late, so the
    /// prediction covers the launcher's start-up as the measured time does. 0 if unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_ns: u64,
    /// The CPU time its main thread had used by `start_ns` (its launch and its library's
    /// start-up, `MPI_Init` for MPI), in nanoseconds; 0 if unknown. With [`ProcInfo::cpus`]
    /// it lets a target with other cores or speeds predict the start-up, not take it as
    /// measured (see [`crate::startup`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub startup_cpu_ns: u64,
    /// The CPUs it could run on in the measured run (its affinity), in the kernel's list
    /// format (`0-3,8`); empty if unknown. The processes of one host together had the CPUs
    /// of all their lists.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpus: String,
    /// The CPU its cgroups allowed it in the measured run where that was a limit (a
    /// container's CPU limit: `cpu.max`'s quota over its period), in thousandths of a CPU
    /// (250: a quarter of a CPU); 0 if none limited it, or unknown. The processes of one
    /// [`ProcInfo::quota_cgroup`] shared it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_quota_milli: u64,
    /// The cgroup that set [`ProcInfo::cpu_quota_milli`] (its path in its hierarchy); empty
    /// if none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub quota_cgroup: String,
}

/// For serde: a zero start is not written.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The kind of a collective operation; selects the cost model's number of rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollOp {
    /// MPI_Barrier and similar pure synchronisation.
    Barrier,
    /// One-to-all data movement (MPI_Bcast, MPI_Scatter*).
    Bcast,
    /// All-to-one data movement (MPI_Reduce, MPI_Gather*).
    Reduce,
    /// All-to-all combinations (MPI_Allreduce, MPI_Allgather*, MPI_Reduce_scatter*).
    Allreduce,
    /// Personalised all-to-all exchange (MPI_Alltoall, MPI_Alltoallv): each member sends a
    /// block of its own to every other; its `bytes` are the sum of those blocks.
    Alltoall,
}

/// What happened at one event of one process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EventKind {
    /// A message is sent. An eager message leaves at this event's time; one sent by
    /// `rendezvous` leaves only once its receive is posted and answered (see
    /// `docs/engine.md`), and the sender's [`EventKind::SendEnd`] waits for its transfer.
    Send {
        /// The message, matched by a later `RecvEnd`.
        msg: MsgId,
        /// Payload size, for the communication cost tables.
        bytes: u64,
        /// Whether the message goes by rendezvous: an MPI library sends a message above its
        /// eager limit, or a synchronous send's, only once the receiver has matched it.
        rendezvous: bool,
        /// Bytes of the same send call that leave before this message's own: a socket send
        /// that several receives took is one message per receive, and its bytes leave one
        /// after the other, so a message costs what `after + bytes` would and the last
        /// arrives when the whole send would. 0 for every other message.
        after: u64,
    },
    /// The process starts waiting (entry of a blocking receive, or of a wait for receives or
    /// rendezvous sends). The CPU before it is work.
    RecvStart,
    /// The process posts the receive that will consume `msg` (an `MPI_Irecv`), before it
    /// waits for it. The CPU before it is work. It matters only to a message sent by
    /// rendezvous, whose transfer the receiver answers at its first wait from here on; a
    /// receive without one is posted when its `RecvEnd` is reached.
    RecvPost {
        /// The message the posted receive consumes.
        msg: MsgId,
    },
    /// The process has received `msg`: happens at max(now, arrival of `msg`). The CPU recorded
    /// on this event is waiting (MPI libraries spin), not work.
    RecvEnd {
        /// The message consumed.
        msg: MsgId,
    },
    /// The process enters collective `coll` with `size` participants and `bytes` of payload.
    /// The CPU before it is work.
    CollStart {
        /// The collective instance.
        coll: CollId,
        /// The operation, for the cost model.
        op: CollOp,
        /// Number of participating processes.
        size: u32,
        /// This participant's payload: what it contributes (a gather, a reduction, an
        /// all-gather), receives (a scatter) or, for [`CollOp::Alltoall`], sends to the other
        /// participants in all. Participants of a `v` collective state different payloads.
        bytes: u64,
    },
    /// The process's rendezvous send of `msg` has completed: happens at max(now, the end of
    /// the message's transfer). Its CPU is waiting, not work.
    SendEnd {
        /// The message sent by rendezvous, by this process.
        msg: MsgId,
    },
    /// The process leaves collective `coll`. Its CPU is waiting, not work.
    CollEnd {
        /// The collective instance.
        coll: CollId,
    },
    /// Carries CPU time forward and nothing else: lets the engine advance while a process
    /// computes without communicating.
    Keepalive,
    /// The process is done.
    Exit,
}

impl EventKind {
    /// This event with its message id (a send's, a receive's, a post's or a send end's), if it
    /// has one, replaced by `f` of it: where ids are renumbered (made unique across hosts, or
    /// small for a test).
    pub fn with_msg(self, mut f: impl FnMut(MsgId) -> MsgId) -> Self {
        match self {
            EventKind::Send {
                msg,
                bytes,
                rendezvous,
                after,
            } => EventKind::Send {
                msg: f(msg),
                bytes,
                rendezvous,
                after,
            },
            EventKind::RecvPost { msg } => EventKind::RecvPost { msg: f(msg) },
            EventKind::RecvEnd { msg } => EventKind::RecvEnd { msg: f(msg) },
            EventKind::SendEnd { msg } => EventKind::SendEnd { msg: f(msg) },
            other => other,
        }
    }
}

/// One event of one process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Event {
    /// The process the event belongs to.
    pub proc: ProcId,
    /// CPU nanoseconds the process used since its previous event (or since it started).
    pub cpu_ns: u64,
    /// What happened.
    pub kind: EventKind,
}

/// How many procedures one trace can follow ([`ProcedureCpu`] holds one share for each).
pub const MAX_PROCEDURES: usize = 8;

/// The CPU one process spent inside each traced procedure since its previous event, in
/// nanoseconds: entry `i` is for the trace's procedure `i` (the header's `procedures`, in
/// order). Each share is part of the event's `cpu_ns` (a procedure's time is the process's
/// time); a procedure that calls itself, or another selected procedure, is counted once in
/// each. All zero for a trace without procedures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcedureCpu(pub [u64; MAX_PROCEDURES]);

impl ProcedureCpu {
    /// No CPU in any procedure.
    pub const NONE: ProcedureCpu = ProcedureCpu([0; MAX_PROCEDURES]);

    /// The shares of the first `n` procedures, as a trace line lists them.
    pub fn first(&self, n: usize) -> &[u64] {
        &self.0[..n.min(MAX_PROCEDURES)]
    }

    /// Whether every share is 0.
    pub fn is_none(&self) -> bool {
        self.0 == [0; MAX_PROCEDURES]
    }

    /// Shares from a list (a trace line's `proc_ns`); `None` if it has more than
    /// [`MAX_PROCEDURES`] entries.
    pub fn from_slice(shares: &[u64]) -> Option<Self> {
        let mut cpu = ProcedureCpu::NONE;
        cpu.0.get_mut(..shares.len())?.copy_from_slice(shares);
        Some(cpu)
    }
}

/// What a capture knows of an event beyond the engine's [`Event`], for the sinks that keep it
/// (a trace file, the live engine's procedures): kept apart so that the engine's events stay
/// small.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventDetail {
    /// The CPU its process spent in each traced procedure since its previous event.
    pub procedures: ProcedureCpu,
    /// When it happened, in `CLOCK_MONOTONIC` nanoseconds (the kernel records' `ts_ns`);
    /// `None` where the capture does not say. A trace file writes it as `t_ns`, relative to
    /// the capture's clock origin ([`crate::sink::EventSink::clock_origin`]).
    pub monotonic_ns: Option<u64>,
}

impl EventDetail {
    /// Nothing beyond the event.
    pub const NONE: EventDetail = EventDetail {
        procedures: ProcedureCpu::NONE,
        monotonic_ns: None,
    };
}
