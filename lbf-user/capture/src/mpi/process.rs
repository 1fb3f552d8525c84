//! One traced MPI process: its ABI and rank, its open calls, requests and communicators, its
//! CPU clocks, and the queue of its events not yet handed to the sink.
//!
//! Events must leave in process order with their message ids known, so an event whose
//! message is not matched yet (a `RecvEnd`, or the `RecvPost` of an `MPI_Irecv`) holds back
//! the ones after it. The queue therefore only grows while a receive of this process is
//! unmatched: from an `MPI_Irecv` to its completion, and from a receive's completion until
//! its send is seen.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;

use super::call::{DerivedTypes, Entry};
use super::eager::EagerLimits;
use super::library::Abi;
use super::matching::{CommId, RecvId};
use crate::procedures::ProcedureShares;
use crate::{EventSink, ProcStats};
use lbf_model::event::{CollId, Event, EventDetail, EventKind, MsgId, ProcedureCpu};

/// A call entered and not yet returned.
#[derive(Clone, Debug)]
pub struct OpenCall {
    /// Which function.
    pub fn_id: u16,
    /// The decoded entry; `None` for a probed call made inside another one (ignored).
    pub entry: Option<Entry>,
    /// The thread's CPU clock at entry.
    pub cpu_ns: u64,
    /// When it was entered (`CLOCK_MONOTONIC` ns).
    pub ts_ns: u64,
    /// The receive posted at entry, if any.
    pub posted: Option<RecvId>,
    /// The collective instance entered, if any.
    pub coll: Option<CollId>,
    /// The communicator creation entered: (parent, sequence number).
    pub creation: Option<(CommId, u32)>,
    /// The message this call sent by rendezvous, if any: a blocking send completes it at
    /// its exit, a nonblocking one hands it to its request.
    pub rendezvous: Option<MsgId>,
}

/// What a live request handle stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// A nonblocking send (its message was emitted at the call), with the message if it went
    /// by rendezvous (its completion is then an event).
    Send(Option<MsgId>),
    /// A nonblocking receive.
    Recv(RecvId),
    /// An operation that moves nothing (`MPI_PROC_NULL` peer).
    Null,
}

/// A communicator as this process holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalComm {
    /// Its capture-wide id.
    pub id: CommId,
    /// This process's rank in it, when known.
    pub rank: Option<u32>,
}

/// An event waiting in a process's queue; `kind == None` until its message is matched.
#[derive(Clone, Copy, Debug)]
struct Slot {
    cpu_ns: u64,
    /// When the event happened (`CLOCK_MONOTONIC` ns).
    ts_ns: u64,
    /// The CPU in traced procedures among `cpu_ns`.
    procedures: ProcedureCpu,
    kind: Option<EventKind>,
    /// Bytes of the matched message, for statistics.
    bytes: u64,
    /// Whether the slot is a receive's post (else, while `kind` is `None`, its end).
    post: bool,
}

/// One traced MPI process.
pub struct Process {
    /// Its MPI ABI.
    pub abi: Abi,
    /// Its world rank (its process id in the trace), once known.
    pub rank: Option<u32>,
    /// Which of its sends go by rendezvous.
    pub eager: EagerLimits,
    /// Open calls per thread, innermost last.
    pub calls: FxHashMap<u32, Vec<OpenCall>>,
    /// Live request handles.
    pub requests: FxHashMap<u64, Request>,
    /// Communicators other than `MPI_COMM_WORLD`, by local handle.
    pub comms: FxHashMap<u64, LocalComm>,
    /// Communicator creations made so far, per parent.
    pub creations: FxHashMap<CommId, u32>,
    /// Collectives entered so far, per communicator.
    pub collectives: FxHashMap<CommId, u64>,
    /// Sizes of the derived datatypes the process made (see `call`'s module documentation).
    pub derived: DerivedTypes,
    /// Whether its `Exit` event is queued; later calls are ignored.
    pub exited: bool,
    /// Whether it was traced from the middle of its run (attached after `MPI_Init`).
    pub mid_run: bool,
    /// Totals over the events handed to the sink.
    pub stats: ProcStats,
    /// The CPU its threads spent in traced procedures (`ProcCpu` records go here).
    pub procedures: ProcedureShares,
    /// CPU clock of each thread at this process's previous event.
    cpu_base: FxHashMap<u32, u64>,
    /// CPU clock of each thread when tracing began, for a process attached while running,
    /// until the thread's first event.
    attach_cpu: FxHashMap<u32, u64>,
    /// CPU clock and time at the entry of an `MPI_Probe` whose wait the next receive
    /// continues.
    wait_start: Option<(u64, u64)>,
    /// The time of the record being handled (`CLOCK_MONOTONIC` ns): when the events it makes
    /// happen, unless they say otherwise.
    pub now_ns: u64,
    /// CPU spent inside unsuccessful polls since the previous event (see [`Self::polled`]).
    polled_ns: u64,
    queue: VecDeque<Slot>,
    /// Absolute index of `queue[0]`.
    queue_base: u64,
}

impl Process {
    /// A process using `abi` with eager limits `eager`, whose rank may already be known.
    pub fn new(abi: Abi, eager: EagerLimits, rank: Option<u32>) -> Self {
        Process {
            abi,
            rank,
            eager,
            calls: FxHashMap::default(),
            requests: FxHashMap::default(),
            comms: FxHashMap::default(),
            creations: FxHashMap::default(),
            collectives: FxHashMap::default(),
            derived: DerivedTypes::default(),
            exited: false,
            mid_run: false,
            stats: ProcStats::default(),
            procedures: ProcedureShares::default(),
            cpu_base: FxHashMap::default(),
            attach_cpu: FxHashMap::default(),
            wait_start: None,
            now_ns: 0,
            polled_ns: 0,
            queue: VecDeque::new(),
            queue_base: 0,
        }
    }

    /// The communicator `handle` names in this process.
    pub fn comm(&self, handle: u64) -> Option<LocalComm> {
        if handle == self.abi.world() {
            return Some(LocalComm {
                id: super::comms::WORLD,
                rank: self.rank,
            });
        }
        if handle == self.abi.comm_self() {
            // Each rank's own communicator of one member (see `ids::self_comm`).
            return self.rank.map(|rank| LocalComm {
                id: crate::ids::self_comm(rank),
                rank: Some(0),
            });
        }
        self.comms.get(&handle).copied()
    }

    /// Remembers that a wait for a message began at `cpu_ns` (an `MPI_Probe` entry), now.
    pub fn probe_wait(&mut self, cpu_ns: u64) {
        let now = self.now_ns;
        self.wait_start.get_or_insert((cpu_ns, now));
    }

    /// Remembers that the process spent `inside_ns` of CPU inside unsuccessful polls
    /// (`MPI_Test*`, `MPI_Iprobe` finding nothing; `lbf_common::RecordKind::Polls`) since its
    /// previous event. If its next event begins a wait (a `RecvStart`), that CPU was spent
    /// waiting for it and goes into the wait; otherwise it stays work.
    pub fn polled(&mut self, inside_ns: u64) {
        self.polled_ns += inside_ns;
    }

    /// Queues event `kind` happening now, when thread `tid`'s clock reads `cpu_at`.
    pub fn emit(&mut self, tid: u32, cpu_at: u64, kind: EventKind) {
        self.wait_start = None;
        self.polled_ns = 0;
        self.push(tid, cpu_at, self.now_ns, Some(kind));
    }

    /// Takes the CPU of thread `tid` up to `cpu_at` out of the model: start-up until
    /// `MPI_Init` returns, or teardown inside `MPI_Finalize`. It is counted in
    /// [`ProcStats::untimed_cpu_ns`], not in any event.
    pub fn untimed(&mut self, tid: u32, cpu_at: u64) {
        let base = self.cpu_base(tid);
        let before = cpu_at.saturating_sub(*base);
        *base = (*base).max(cpu_at);
        self.stats.untimed_cpu_ns += before;
        // Procedure CPU out of the model too.
        let _ = self.procedures.share(tid, cpu_at);
    }

    /// Thread `tid`'s CPU clock read `cpu_at` when tracing began (the process was attached
    /// while running): the model of the thread starts there, and what it used before is in
    /// no event and no statistic.
    pub fn attached(&mut self, tid: u32, cpu_at: u64) {
        self.attach_cpu.insert(tid, cpu_at);
    }

    /// Thread `tid`'s CPU clock at this process's previous event; for its first, the clock
    /// when tracing began (0 for a thread traced from its start).
    fn cpu_base(&mut self, tid: u32) -> &mut u64 {
        self.cpu_base
            .entry(tid)
            .or_insert_with(|| self.attach_cpu.remove(&tid).unwrap_or(0))
    }

    /// Queues a `RecvStart` at `cpu_at` and `ts_at` (a waiting call's entry), or where an
    /// `MPI_Probe` began waiting, less the CPU spent in unsuccessful polls since the previous
    /// event ([`Self::polled`]; their time is not known: the event's time stays the call's).
    pub fn emit_recv_start(&mut self, tid: u32, (cpu_at, ts_at): (u64, u64)) {
        let polled = std::mem::take(&mut self.polled_ns);
        let at = cpu_at.saturating_sub(polled);
        let (at, ts) = match self.wait_start.take() {
            Some((cpu, ts)) if cpu < at => (cpu, ts.min(ts_at)),
            _ => (at, ts_at),
        };
        self.push(tid, at, ts, Some(EventKind::RecvStart));
    }

    /// Queues an event not known yet (a `RecvEnd` whose message is not matched, a collective
    /// event of a process attached while running whose instance is not known); returns its
    /// slot for [`Self::fill`].
    pub fn emit_pending(&mut self, tid: u32, cpu_at: u64) -> u64 {
        self.wait_start = None;
        self.polled_ns = 0;
        self.push(tid, cpu_at, self.now_ns, None)
    }

    /// Queues the `RecvPost` of a receive whose message is not known yet; returns its slot
    /// for [`Self::fill`].
    pub fn emit_pending_post(&mut self, tid: u32, cpu_at: u64) -> u64 {
        let slot = self.push(tid, cpu_at, self.now_ns, None);
        self.queue.back_mut().expect("just pushed").post = true;
        slot
    }

    /// Makes the pending event in `slot` `kind`, moving `bytes` (for statistics).
    pub fn fill(&mut self, slot: u64, kind: EventKind, bytes: u64) {
        if let Some(s) = self.slot(slot) {
            s.kind = Some(kind);
            s.bytes = bytes;
        }
    }

    /// Gives up on the pending post in `slot` (its receive will never be completed): it
    /// becomes a `Keepalive` carrying its CPU.
    pub fn abandon_post(&mut self, slot: u64) {
        if let Some(s) = self.slot(slot).filter(|s| s.kind.is_none()) {
            s.kind = Some(EventKind::Keepalive);
        }
    }

    /// Turns every pending event into a `Keepalive` carrying its CPU; returns how many
    /// receives (their ends) were pending.
    pub fn abandon_pending(&mut self) -> u64 {
        let mut n = 0;
        for s in self.queue.iter_mut().filter(|s| s.kind.is_none()) {
            s.kind = Some(EventKind::Keepalive);
            n += u64::from(!s.post);
        }
        n
    }

    /// The queued event at absolute index `slot`, if it is still queued.
    fn slot(&mut self, slot: u64) -> Option<&mut Slot> {
        slot.checked_sub(self.queue_base)
            .and_then(|i| self.queue.get_mut(i as usize))
    }

    /// Hands the queued events that are complete, in order, to `sink` (once the rank is known).
    pub fn flush(&mut self, sink: &mut dyn EventSink) {
        let Some(rank) = self.rank else { return };
        while let Some(&Slot {
            cpu_ns,
            ts_ns,
            procedures,
            kind: Some(kind),
            bytes,
            ..
        }) = self.queue.front()
        {
            self.stats.count(cpu_ns, &kind, bytes);
            let event = Event {
                proc: rank,
                cpu_ns,
                kind,
            };
            let detail = EventDetail {
                procedures,
                monotonic_ns: Some(ts_ns),
            };
            sink.event_with(&event, &detail);
            self.queue.pop_front();
            self.queue_base += 1;
        }
    }

    /// Events queued and not handed out yet.
    pub fn held(&self) -> usize {
        self.queue.len()
    }

    fn push(&mut self, tid: u32, cpu_at: u64, ts_ns: u64, kind: Option<EventKind>) -> u64 {
        let base = self.cpu_base(tid);
        let cpu_ns = cpu_at.saturating_sub(*base);
        *base = (*base).max(cpu_at);
        let procedures = self.procedures.share(tid, cpu_at);
        self.queue.push_back(Slot {
            cpu_ns,
            ts_ns,
            procedures,
            kind,
            bytes: 0,
            post: false,
        });
        self.queue_base + self.queue.len() as u64 - 1
    }
}
