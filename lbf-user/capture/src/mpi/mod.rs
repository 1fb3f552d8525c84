//! MPI capture: turns the probe's raw [`Record`]s into the engine's per-process [`Event`](lbf_model::event::Event)s.
//!
//! This module owns MPI semantics in user space: decoding each library's ABI ([`openmpi`],
//! [`mpich`]; the argument positions shared by both in [`call`]), telling which processes are
//! ranks ([`inspect`]), matching sends to receives ([`matching`]), grouping collectives and
//! communicators ([`comms`]) and CPU accounting ([`process`]). It knows nothing of eBPF
//! loading, trace files or the engine's algorithm.
//!
//! # Events from calls
//!
//! The CPU of an event is the calling thread's CPU since the process's previous event.
//! CPU before the entry of a blocking call is work; CPU inside it is waiting.
//!
//! | call | events |
//! | --- | --- |
//! | `MPI_Send` family, `MPI_Isend` family | `Send` at entry, flagged `rendezvous` when the message waits for its receive ([`eager`]); an eager blocking send's CPU inside counts as work |
//! | `MPI_Send` family, by rendezvous | also `SendEnd` at exit: the CPU inside is waiting |
//! | `MPI_Recv` | `RecvStart` at entry, `RecvEnd` at exit |
//! | `MPI_Irecv` | `RecvPost` at entry (its message filled in once the receive is matched); the receive is posted for matching order |
//! | `MPI_Wait*` / `MPI_Test*` completing receives or rendezvous sends | `RecvStart` at entry, one `RecvEnd` per receive and one `SendEnd` per rendezvous send at exit; nothing if none completed |
//! | unsuccessful `MPI_Test*` / `MPI_Iprobe` (no records: one `Polls` record per run of them) | none; the CPU spent inside them goes into the wait of the next `RecvStart`, if the next event is one (a progress loop's polls are waiting; the work between them stays work) |
//! | `MPI_Sendrecv*` | `Send` at entry, `RecvStart`, `RecvEnd` (and `SendEnd` if by rendezvous) at exit |
//! | `MPI_Probe` | the next `RecvStart` is moved back to the probe's entry |
//! | collectives, `MPI_Comm_dup`/`split` | `CollStart` at entry, `CollEnd` at exit |
//! | `MPI_Finalize` | `Exit` at exit (or at process exit without it) |
//!
//! Processes that never call MPI (`mpirun`, Hydra proxies) are not ranks and emit nothing.
//! A rank's process id is its `MPI_COMM_WORLD` rank, from the launcher's environment or its
//! `MPI_Comm_rank(MPI_COMM_WORLD)` answer; one MPI job per capture.
//!
//! # When records arrive
//!
//! Each thread's records arrive in the order it made them, but an entry record without user
//! memory arrives only with its exit record, at the call's return, stamped as at the entry
//! (the kernel side writes both in one ring buffer item: `lbf_common::maps::ThreadState`'s
//! `entry`). So nothing here may rely on another process's entry arriving early, and nothing
//! does: a receive whose send is not seen yet waits for it in [`matching`] (as one from
//! another host does; the guess for a wildcard receive without a visible status, the oldest
//! send seen, now counts sends in the order they returned), `MPI_Probe` and request handles
//! are the thread's own, and the
//! exceptions (`MPI_Comm_split`, whose members' entries make the new ranks) have their entry
//! written at once (`lbf_common::mpi::entry_at_once`). The events themselves are unchanged,
//! so final predictions are too: the engine's result does not depend on when events arrive
//! (it steps only once every process's next event is known). Live, a call's events are seen
//! when it returns rather than when it starts (a rank blocked in a collective or a rendezvous
//! send shows its `CollStart` or `Send` then; a blocking receive's events come at its return
//! anyway), so a live lower bound lags by at most the calls in flight.
//!
//! A call whose return probe is skipped (`lbf_common::mpi::return_optional`: nonblocking
//! sends and receives, `MPI_Comm_rank`/`size`, called from the program's own code) has its
//! exit record written at the thread's next probe hit, its out-parameter (the request handle,
//! the answer) read then and its exit stamped then. Nothing here makes an event of those
//! exits' stamps, so the events are the same as with every return probe (the
//! `return_probes` test checks it).
//!
//! # Limits
//!
//! - Wait/test calls see at most as many requests as fit in a record (32 for Open MPI, 64 for
//!   MPICH); completions beyond are lost (counted).
//! - An `MPI_Irecv`'s `RecvPost` holds back the process's later events until the receive is
//!   completed and matched. A receive never completed (its request freed or cancelled, its
//!   completion beyond a record's requests) drops its post when its request handle is
//!   reused, when the process ends, or at the end of the capture (counted).
//! - Persistent requests, one-sided and neighbourhood calls, intercommunicators are not handled.
//! - There are no periodic `Keepalive`s: the records only come at MPI calls.
//! - Attaching to a running job (`lbf-trace -p`): a call in progress at the attach is not seen
//!   (its return probe was never armed), nor is a request made before it. Both sides of a
//!   message count from their own attach, so their counts differ by what was in flight; the
//!   receives are matched when the capture ends, exactly if the job ended, else by timing
//!   alone ([`alignment`]), and collectives are numbered from the end alike. The model of an
//!   attached rank starts at the attach, each thread with the CPU it used since (an `Attach`
//!   record per thread carries its clock then). What could not be paired is counted. A node
//!   capture of some ranks (cluster mode) aligns only the messages between its own ranks:
//!   messages to or from other hosts and collectives keep the numbering from the attach
//!   (each host sees one side only), and are counted as such.

pub mod alignment;
pub mod call;
pub mod comms;
pub mod eager;
pub mod inspect;
pub mod library;
pub mod matching;
pub mod mpich;
pub mod openmpi;
pub mod process;

use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;

use lbf_common::{mpi, Record, RecordKind, MEM_BYTES, MORE_MEM_AT};

use self::alignment::AttachedCollectives;
use self::call::{CollBytes, Completion, Entry, Peer, RecvArgs, SendArgs, Status};
use self::comms::Comms;
use self::eager::{Route, SendMode};
use self::inspect::{CpuAllowance, ProcessInspector};
use self::library::Abi;
use self::matching::{Envelope, Matcher, Pattern, RecvId};
use self::process::{LocalComm, OpenCall, Process, Request};
use crate::anomaly::{count, note, Anomalies, Anomaly};
use crate::gaps::LostRecords;
use crate::ids;
use crate::timeline::RunClock;
use crate::{EventSink, Summary};
use lbf_model::event::{CollId, CollOp, EventKind, MsgId, ProcInfo};

pub use self::library::Library;

/// Turns records into events; see the module documentation.
pub struct Capture {
    inspector: Box<dyn ProcessInspector>,
    host: String,
    procs: FxHashMap<u32, Process>,
    /// Processes that call MPI but could not be inspected, and duplicate ranks.
    rejected: FxHashSet<u32>,
    rank_owner: FxHashMap<u32, u32>,
    /// The ranks this capture is to see when it sees part of the job (one host's, in
    /// cluster mode); `None`: all of `MPI_COMM_WORLD`.
    local_ranks: Option<BTreeSet<u32>>,
    /// Whether every expected rank is known and announced, so events may flow.
    started: bool,
    matcher: Matcher,
    comms: Comms,
    /// Where each pending `RecvEnd` waits: (tgid, slot).
    recv_slots: FxHashMap<RecvId, (u32, u64)>,
    /// Where each pending `RecvPost` (of an `MPI_Irecv`) waits: (tgid, slot).
    post_slots: FxHashMap<RecvId, (u32, u64)>,
    /// When the run started and ended, and when each process started.
    clock: RunClock,
    /// When each process's `MPI_Init` returned, or when it was first seen past it (attached
    /// to a running job): where the model of the process starts.
    past_init: FxHashMap<u32, u64>,
    /// The CPU clock of each process's thread when its `MPI_Init` returned: its start-up's
    /// CPU (`ProcInfo::startup_cpu_ns`).
    startup_cpu: FxHashMap<u32, u64>,
    /// What each process could use of its host's CPUs when inspected.
    cpus: FxHashMap<u32, CpuAllowance>,
    /// The latest `MPI_Finalize` entry: where the model of the job ends.
    last_finalize: Option<u64>,
    /// The `Attach` records of each process not inspected yet: (thread, time, CPU clock).
    attaches: FxHashMap<u32, Vec<(u32, u64, u64)>>,
    /// Collectives of processes attached while running, numbered when the capture ends.
    attached_colls: AttachedCollectives,
    anomalies: Anomalies,
    /// Records the kernel side lost, per process.
    lost: LostRecords,
    /// The processes a record gave events to, kept to save an allocation per record.
    touched: Vec<u32>,
}

impl Capture {
    /// A capture that asks `inspector` about new MPI processes and names `host` as their host.
    pub fn new(inspector: Box<dyn ProcessInspector>, host: impl Into<String>) -> Self {
        Capture {
            inspector,
            host: host.into(),
            procs: FxHashMap::default(),
            rejected: FxHashSet::default(),
            rank_owner: FxHashMap::default(),
            local_ranks: None,
            started: false,
            matcher: Matcher::new(),
            comms: Comms::new(),
            recv_slots: FxHashMap::default(),
            post_slots: FxHashMap::default(),
            clock: RunClock::default(),
            past_init: FxHashMap::default(),
            startup_cpu: FxHashMap::default(),
            cpus: FxHashMap::default(),
            last_finalize: None,
            attaches: FxHashMap::default(),
            attached_colls: AttachedCollectives::default(),
            anomalies: Anomalies::new(),
            lost: LostRecords::default(),
            touched: Vec::new(),
        }
    }

    /// Makes this a capture of part of a job: the processes of `ranks` (its ranks on this
    /// host, in cluster mode). Events flow once these are known, not all of
    /// `MPI_COMM_WORLD`; messages and collectives get the ids the other hosts' captures give
    /// them ([`ids`]).
    pub fn only_ranks(mut self, ranks: BTreeSet<u32>) -> Self {
        self.matcher.only_ranks(ranks.clone());
        self.local_ranks = Some(ranks);
        self
    }

    /// Consumes one record, handing any events it completes to `sink`.
    pub fn record(&mut self, rec: &Record, sink: &mut dyn EventSink) {
        self.clock.observe(rec);
        if let Some(p) = self.procs.get_mut(&rec.tgid) {
            p.now_ns = rec.ts_ns;
        }
        match RecordKind::from_raw(rec.kind) {
            Some(RecordKind::CallEntry) => self.entry(rec),
            Some(RecordKind::CallExit) => self.exit(rec),
            Some(RecordKind::Attach) => {
                self.attaches
                    .entry(rec.tgid)
                    .or_default()
                    .push((rec.tid, rec.ts_ns, rec.cpu_ns));
            }
            Some(RecordKind::Exit) => {
                self.attaches.remove(&rec.tgid);
                self.inspector.forget(rec.tgid);
                if let Some(p) = self.procs.get_mut(&rec.tgid) {
                    if !p.exited {
                        p.exited = true;
                        p.emit(rec.tid, rec.cpu_ns, EventKind::Exit);
                        note(&mut self.anomalies, Anomaly::ExitedWithoutFinalize);
                        self.abandon_posts(rec.tgid, false);
                    }
                }
            }
            Some(RecordKind::Polls) => {
                if let Some(p) = self.procs.get_mut(&rec.tgid) {
                    p.polled(rec.args[3]);
                }
            }
            Some(RecordKind::Lost) => self.lost.record(rec),
            Some(RecordKind::ProcCpu) => {
                if let Some(p) = self.procs.get_mut(&rec.tgid) {
                    p.procedures.observe(rec);
                }
            }
            Some(RecordKind::Fork | RecordKind::Exec | RecordKind::Syscall) => {}
            // A pair item is split by the reader (`probe::reader`); never seen here.
            Some(RecordKind::CallPair) | None => {
                note(&mut self.anomalies, Anomaly::UnknownRecordKind)
            }
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.clear();
        touched.push(rec.tgid);
        self.settle_matched(&mut touched);
        if !self.started {
            let all_past_init = self
                .rank_owner
                .values()
                .all(|t| self.past_init.contains_key(t));
            let all_seen = match &self.local_ranks {
                Some(ranks) => ranks.iter().all(|r| self.rank_owner.contains_key(r)),
                None => self
                    .comms
                    .size(comms::WORLD)
                    .is_some_and(|n| self.rank_owner.len() as u32 >= n),
            };
            if all_past_init && all_seen {
                self.start(sink);
            }
        } else {
            for tgid in &touched {
                if let Some(p) = self.procs.get_mut(tgid) {
                    p.flush(sink);
                }
            }
        }
        self.touched = touched;
    }

    /// Fills the `RecvEnd`s of the receives the matcher matched since the last call; adds
    /// their processes to `touched`.
    fn settle_matched(&mut self, touched: &mut Vec<u32>) {
        for m in self.matcher.drain_matched() {
            if let Some((tgid, slot)) = self.post_slots.remove(&m.recv) {
                if let Some(p) = self.procs.get_mut(&tgid) {
                    p.fill(slot, EventKind::RecvPost { msg: m.msg }, 0);
                }
            }
            if let Some((tgid, slot)) = self.recv_slots.remove(&m.recv) {
                if let Some(p) = self.procs.get_mut(&tgid) {
                    p.fill(
                        slot,
                        EventKind::RecvEnd { msg: m.msg },
                        m.bytes.unwrap_or(0),
                    );
                    touched.push(tgid);
                }
                if m.bytes.is_none() {
                    note(&mut self.anomalies, Anomaly::RemoteOfUnknownSize);
                }
            }
        }
    }

    /// Matches the messages of envelopes numbered from an attach, now that the capture ends
    /// (see [`alignment`]), and counts what it could not pair; returns the sends no receive
    /// seen took.
    fn align(&mut self) -> u64 {
        let ended = self.procs.values().all(|p| p.exited);
        let (boundary, unplaced, unaligned) = self.matcher.align(ended);
        self.settle_matched(&mut Vec::new());
        let (settled, partial, colls) = self.attached_colls.align();
        for (tgid, slot, kind) in settled {
            if let Some(p) = self.procs.get_mut(&tgid) {
                p.fill(slot, kind, 0);
            }
        }
        for (what, n) in [
            (Anomaly::RecvOfEarlierSend, boundary.recvs_of_earlier_sends),
            (Anomaly::SendToEarlierRecv, boundary.sends_to_earlier_recvs),
            (Anomaly::UnreceivedSend, boundary.unreceived_sends),
            (Anomaly::RecvMatchedByTiming, boundary.recvs_by_timing),
            (Anomaly::WildcardWithoutStatus, unplaced),
            (Anomaly::RemoteEndNumberedFromAttach, unaligned),
            (Anomaly::CollectiveEnteredBeforeAttach, partial),
            (
                Anomaly::CollectiveAlignedByCount,
                if ended { 0 } else { colls },
            ),
        ] {
            count(&mut self.anomalies, what, n);
        }
        boundary.sends_to_earlier_recvs + boundary.unreceived_sends
    }

    /// Events queued until their receives are matched (or, before every rank is known,
    /// until then).
    pub fn held_events(&self) -> usize {
        self.procs.values().map(Process::held).sum()
    }

    /// How rank `rank` (process `tgid`) appears in the trace: named after its rank, starting
    /// when its `MPI_Init` returned (or when it started, if that is unknown), relative to
    /// the capture's first record. The launch and MPI's wire-up take wall time the CPU does
    /// not account for (waiting for the launcher, for the other ranks); they are part of the
    /// measured time, so the prediction takes them as measured and models what follows.
    fn proc_info(&self, rank: u32, tgid: u32) -> ProcInfo {
        let cpus = self.cpus.get(&tgid).cloned().unwrap_or_default();
        let quota = cpus.quota.as_ref();
        let start_ns = match self.past_init.get(&tgid) {
            Some(&at) => self.clock.since_first(at),
            None => self.clock.start_of(tgid),
        };
        ProcInfo {
            id: rank,
            name: format!("rank {rank}"),
            host: self.host.clone(),
            start_ns,
            startup_cpu_ns: self.startup_cpu.get(&tgid).copied().unwrap_or(0),
            cpus: cpus.list,
            cpu_quota_milli: quota.map_or(0, |q| (q.cpus * 1000.0).round() as u64),
            quota_cgroup: quota.map(|q| q.cgroup.clone()).unwrap_or_default(),
        }
    }

    /// Announces every rank, in rank order, and lets their events flow.
    fn start(&mut self, sink: &mut dyn EventSink) {
        self.started = true;
        if let Some(first) = self.clock.first() {
            sink.clock_origin(first);
        }
        let mut ranks: Vec<(u32, u32)> = self.rank_owner.iter().map(|(&r, &t)| (r, t)).collect();
        ranks.sort_unstable();
        for &(rank, tgid) in &ranks {
            sink.process(&self.proc_info(rank, tgid));
        }
        for (_, tgid) in ranks {
            if let Some(p) = self.procs.get_mut(&tgid) {
                p.flush(sink);
            }
        }
    }

    /// Ends the capture: gives up on receives never matched, closes processes without an
    /// exit, hands out what is left and summarises.
    pub fn finish(mut self, sink: &mut dyn EventSink) -> Summary {
        if !self.started {
            let missing = match &self.local_ranks {
                Some(ranks) => ranks.iter().any(|r| !self.rank_owner.contains_key(r)),
                None => self
                    .comms
                    .size(comms::WORLD)
                    .is_some_and(|n| n as usize > self.rank_owner.len()),
            };
            if missing {
                note(
                    &mut self.anomalies,
                    match self.local_ranks {
                        Some(_) => Anomaly::FewerRanksThanHost,
                        None => Anomaly::FewerRanksThanWorld,
                    },
                );
            }
            self.start(sink);
        }
        let unmatched_after_attach = self.align();
        let mut tgids: Vec<u32> = self.procs.keys().copied().collect();
        tgids.sort_by_key(|t| self.procs[t].rank);
        let mut summary = Summary::default();
        for tgid in tgids {
            self.abandon_posts(tgid, true);
            let p = self.procs.get_mut(&tgid).expect("listed process");
            summary.unmatched_recvs += p.abandon_pending();
            if !p.exited {
                p.exited = true;
                p.emit(0, 0, EventKind::Exit);
                note(&mut self.anomalies, Anomaly::RankStillRunning);
            }
            let Some(rank) = p.rank else {
                note(&mut self.anomalies, Anomaly::RankNeverKnown);
                continue;
            };
            p.flush(sink);
            let stats = p.stats;
            summary.procs.push(self.proc_info(rank, tgid));
            summary.stats.push(stats);
        }
        summary.unmatched_sends = self.matcher.unmatched_sends() + unmatched_after_attach;
        summary.measured_seconds = self.clock.measured_seconds();
        let end = self.clock.end();
        summary.teardown_seconds =
            self.last_finalize.map_or(0, |f| end.saturating_sub(f)) as f64 * 1e-9;
        summary.gaps = self.lost.gaps(&self.clock, |tgid| {
            let rank = self.procs.get(&tgid)?.rank?;
            summary.procs.iter().any(|p| p.id == rank).then_some(rank)
        });
        summary.anomalies = self.anomalies;
        summary
    }

    /// The process `tgid`, inspected on its first MPI call; `None` if it cannot be modelled.
    fn process(&mut self, tgid: u32) -> Option<&mut Process> {
        // Known first (a rejected process is never in `procs`): the case of every record but
        // a process's first.
        if self.procs.contains_key(&tgid) {
            return self.procs.get_mut(&tgid);
        }
        if self.rejected.contains(&tgid) {
            return None;
        }
        let abi = match self.inspector.abi(tgid) {
            Ok(abi) => abi,
            Err(e) => {
                note(&mut self.anomalies, Anomaly::Uninspectable(e));
                self.rejected.insert(tgid);
                return None;
            }
        };
        let launch = self.inspector.launch_rank(tgid);
        if let Some(size) = launch.and_then(|l| l.size) {
            self.comms.set_size(comms::WORLD, size);
        }
        let eager = self.inspector.eager_limits(tgid, abi.library());
        if let Some(cpus) = self.inspector.cpus(tgid) {
            self.cpus.insert(tgid, cpus);
        }
        self.procs.insert(tgid, Process::new(abi, eager, None));
        if let Some(l) = launch {
            self.claim_rank(tgid, l.rank);
        }
        self.procs.get_mut(&tgid)
    }

    /// Makes `rank` the world rank of `tgid`, unless another process has it.
    fn claim_rank(&mut self, tgid: u32, rank: u32) {
        match self.rank_owner.get(&rank) {
            Some(&owner) if owner != tgid => {
                note(
                    &mut self.anomalies,
                    Anomaly::RankClaimedTwice { rank, owner, tgid },
                );
                self.procs.remove(&tgid);
                self.rejected.insert(tgid);
            }
            _ => {
                self.rank_owner.insert(rank, tgid);
                self.comms.set_size(ids::self_comm(rank), 1);
                if let Some(p) = self.procs.get_mut(&tgid) {
                    p.rank = Some(rank);
                }
            }
        }
    }

    fn entry(&mut self, rec: &Record) {
        let mem = &rec.mem[..usize::from(rec.mem_len).min(MEM_BYTES)];
        if self.process(rec.tgid).is_none() {
            return;
        }
        let init = matches!(rec.fn_id, mpi::INIT | mpi::INIT_THREAD);
        let before_init = !self.past_init.contains_key(&rec.tgid);
        let p = self.procs.get_mut(&rec.tgid).expect("inspected above");
        // A process's first record: it was not known before.
        p.now_ns = rec.ts_ns;
        let stack = p.calls.entry(rec.tid).or_default();
        let nested = !stack.is_empty() || p.exited;
        if !nested && !init && before_init {
            // Attached after MPI_Init: the model starts at the attach, each thread with the
            // CPU it used since (here, if the attach was not seen).
            match self.attaches.remove(&rec.tgid) {
                Some(threads) => {
                    let at = threads.iter().map(|&(_, ts, _)| ts).min();
                    self.past_init.insert(rec.tgid, at.unwrap_or(rec.ts_ns));
                    for (tid, _, cpu) in threads {
                        p.attached(tid, cpu);
                    }
                }
                None => {
                    self.past_init.insert(rec.tgid, rec.ts_ns);
                    p.untimed(rec.tid, rec.cpu_ns);
                }
            }
            p.mid_run = true;
            self.matcher.attached_mid_run();
        }
        // The second entry read, where the function has one (`FnReads::entry_more`).
        let more = if rec.kind == RecordKind::CallEntry as u16 && call::has_more(rec.fn_id) {
            &rec.mem[MORE_MEM_AT..]
        } else {
            &[][..]
        };
        let entry = (!nested)
            .then(|| call::decode_entry(&p.abi, rec.fn_id, &rec.args, mem, more, &p.derived));
        let mut open = OpenCall {
            fn_id: rec.fn_id,
            entry: None,
            cpu_ns: rec.cpu_ns,
            ts_ns: rec.ts_ns,
            posted: None,
            coll: None,
            creation: None,
            rendezvous: None,
        };
        match &entry {
            Some(Entry::Send { send, mode, .. }) => open.rendezvous = self.send(rec, send, *mode),
            Some(Entry::Recv { recv, nonblocking }) => {
                open.posted = self.post(rec.tgid, recv);
                if let (true, Some(id)) = (*nonblocking, open.posted) {
                    let p = self.procs.get_mut(&rec.tgid).expect("inspected above");
                    let slot = p.emit_pending_post(rec.tid, rec.cpu_ns);
                    self.post_slots.insert(id, (rec.tgid, slot));
                }
            }
            Some(Entry::SendRecv { send, recv }) => {
                open.rendezvous = self.send(rec, send, SendMode::Standard);
                open.posted = self.post(rec.tgid, recv);
            }
            Some(Entry::Probe) => p.probe_wait(rec.cpu_ns),
            Some(Entry::Finalize) => {
                // The model of the rank ends here; MPI_Finalize is teardown, as measured.
                p.exited = true;
                p.emit(rec.tid, rec.cpu_ns, EventKind::Exit);
                self.last_finalize = Some(self.last_finalize.unwrap_or(0).max(rec.ts_ns));
                self.abandon_posts(rec.tgid, false);
            }
            Some(Entry::Collective { comm, op, bytes }) => {
                let comm = comm.unwrap_or(p.abi.world());
                open.coll = self.collective(rec, comm, *op, bytes);
            }
            Some(Entry::TypeFree {
                handle: Some(handle),
            }) => {
                p.derived.remove(handle);
            }
            Some(Entry::CommCreate { parent, split }) => {
                let none = CollBytes::Known(0);
                open.coll = self.collective(rec, *parent, CollOp::Allreduce, &none);
                let p = self.procs.get_mut(&rec.tgid).expect("inspected above");
                match p.comm(*parent) {
                    Some(LocalComm {
                        id,
                        rank: Some(rank),
                    }) => {
                        let seq = p.creations.entry(id).or_default();
                        open.creation = Some((id, *seq));
                        self.comms.enter_creation(id, *seq, rec.tgid, rank, *split);
                        *seq += 1;
                    }
                    _ => note(&mut self.anomalies, Anomaly::UnknownParentComm),
                }
            }
            Some(Entry::Cancel { request: Some(h) }) => {
                let h = *h;
                self.cancel(rec.tgid, h);
            }
            Some(Entry::CommFree { comm: Some(handle) }) => {
                p.comms.remove(handle);
            }
            _ => {}
        }
        open.entry = entry;
        let p = self.procs.get_mut(&rec.tgid).expect("inspected above");
        p.calls.entry(rec.tid).or_default().push(open);
    }

    fn exit(&mut self, rec: &Record) {
        let mem = &rec.mem[..usize::from(rec.mem_len).min(MEM_BYTES)];
        let Some(p) = self.procs.get_mut(&rec.tgid) else {
            return;
        };
        let Some(mut open) = p.calls.get_mut(&rec.tid).and_then(Vec::pop) else {
            note(&mut self.anomalies, Anomaly::ExitWithoutEntry);
            return;
        };
        if open.fn_id != rec.fn_id {
            note(&mut self.anomalies, Anomaly::ExitOfOtherFunction);
            return;
        }
        let (tid, cpu) = (rec.tid, rec.cpu_ns);
        let Some(entry) = open.entry.take() else {
            return; // a call made inside another one
        };
        match entry {
            Entry::Init => {
                self.past_init.insert(rec.tgid, rec.ts_ns);
                self.startup_cpu.insert(rec.tgid, cpu);
                p.untimed(tid, cpu);
            }
            Entry::Finalize => p.untimed(tid, cpu),
            Entry::Probe
            | Entry::CommFree { .. }
            | Entry::Cancel { .. }
            | Entry::TypeFree { .. }
            | Entry::Other => {}
            Entry::TypeCreate { size } => self.leave_type_create(rec, mem, size),
            Entry::CommQuery { comm, size } => self.leave_comm_query(rec, mem, comm, size),
            Entry::Send { nonblocking, .. } => self.leave_send(rec, mem, nonblocking, &open),
            Entry::Recv {
                nonblocking: true, ..
            } => self.leave_irecv(rec, mem, &open),
            Entry::Recv {
                nonblocking: false, ..
            }
            | Entry::SendRecv { .. } => self.leave_recv(rec, mem, &open),
            Entry::Complete {
                requests,
                how,
                truncated,
            } => self.leave_completion(rec, mem, &open, (&requests, how, truncated)),
            Entry::Collective { .. } => self.leave_collective(rec.tgid, tid, cpu, open.coll),
            Entry::CommCreate { .. } => self.leave_comm_create(rec, mem, &open),
        }
    }

    /// The return of a type constructor: the new type's handle (read at the return) has
    /// `size` bytes, if known.
    fn leave_type_create(&mut self, rec: &Record, mem: &[u8], size: Option<u64>) {
        let p = self.procs.get_mut(&rec.tgid).expect("caller looked it up");
        match (p.abi.handles(mem).first().copied(), size) {
            (Some(h), Some(size)) => {
                p.derived.insert(h, size);
            }
            (Some(h), None) => {
                // A handle reused for a type of unknown size: not the old one's.
                p.derived.remove(&h);
            }
            (None, _) => {}
        }
    }

    /// The return of `MPI_Comm_size` (`size`) or `MPI_Comm_rank` on `comm`: the answer (read
    /// at the return) sizes the communicator, or gives the process its rank in it (in
    /// `MPI_COMM_WORLD`: its rank, if its launcher did not say).
    fn leave_comm_query(&mut self, rec: &Record, mem: &[u8], comm: u64, size: bool) {
        let Some(value) = Abi::int(mem).and_then(|v| u32::try_from(v).ok()) else {
            return;
        };
        let p = self.procs.get_mut(&rec.tgid).expect("caller looked it up");
        match (p.comm(comm), size) {
            (Some(c), true) => self.comms.set_size(c.id, value),
            (Some(c), false) if c.id == comms::WORLD => {
                if p.rank.is_none() {
                    self.claim_rank(rec.tgid, value);
                }
            }
            (Some(_), false) => {
                if let Some(c) = p.comms.get_mut(&comm) {
                    c.rank = Some(value);
                }
            }
            (None, _) => {}
        }
    }

    /// The return of a send: a nonblocking one's request (read at the return) stands for its
    /// message; a blocking one that went by rendezvous ends its wait here.
    fn leave_send(&mut self, rec: &Record, mem: &[u8], nonblocking: bool, open: &OpenCall) {
        let p = self.procs.get_mut(&rec.tgid).expect("caller looked it up");
        match (nonblocking, open.rendezvous) {
            (true, rendezvous) => {
                if let Some(&h) = p.abi.handles(mem).first() {
                    self.new_request(rec.tgid, h, Request::Send(rendezvous));
                }
            }
            (false, Some(msg)) => p.emit(rec.tid, rec.cpu_ns, EventKind::SendEnd { msg }),
            (false, None) => {}
        }
    }

    /// The return of `MPI_Irecv`: its request (read at the return) stands for the receive
    /// posted at the entry.
    fn leave_irecv(&mut self, rec: &Record, mem: &[u8], open: &OpenCall) {
        let p = self.procs.get_mut(&rec.tgid).expect("caller looked it up");
        if let Some(&h) = p.abi.handles(mem).first() {
            let request = open.posted.map_or(Request::Null, Request::Recv);
            self.new_request(rec.tgid, h, request);
        }
    }

    /// The return of a blocking receive or a `MPI_Sendrecv*`: the receive completes with the
    /// status read at the return, and a send that went by rendezvous ends its wait.
    fn leave_recv(&mut self, rec: &Record, mem: &[u8], open: &OpenCall) {
        let p = self.procs.get_mut(&rec.tgid).expect("caller looked it up");
        let status = p.abi.statuses(mem).first().copied();
        let recvs: Vec<_> = open.posted.map(|id| (id, status)).into_iter().collect();
        let sends: Vec<_> = open.rendezvous.into_iter().collect();
        if !recvs.is_empty() || !sends.is_empty() {
            let at = (rec.tgid, rec.tid, rec.ts_ns);
            self.complete(at, (open.cpu_ns, open.ts_ns), rec.cpu_ns, &recvs, &sends);
        }
    }

    /// The return of a wait or test call on `requests` (as read at the entry): those it
    /// completed (all for `Completion::All`, else the handles it changed, read at the return)
    /// complete their receives, with their statuses where visible, and end their rendezvous
    /// sends' waits.
    fn leave_completion(
        &mut self,
        rec: &Record,
        mem: &[u8],
        open: &OpenCall,
        (requests, how, truncated): (&[u64], Completion, bool),
    ) {
        if truncated {
            note(&mut self.anomalies, Anomaly::RequestArrayTooLong);
        }
        let p = self.procs.get_mut(&rec.tgid).expect("caller looked it up");
        let after = p.abi.handles(mem);
        let statuses = if how == Completion::All {
            p.abi.statuses(mem)
        } else {
            Vec::new()
        };
        let (mut recvs, mut sends) = (Vec::new(), Vec::new());
        let mut earlier = 0;
        for (i, h) in requests.iter().enumerate() {
            let done = match how {
                Completion::All => true,
                Completion::Changed => after.get(i).is_some_and(|a| a != h),
            };
            if !done {
                continue;
            }
            match p.requests.remove(h) {
                Some(Request::Recv(id)) => recvs.push((id, statuses.get(i).copied())),
                Some(Request::Send(Some(msg))) => sends.push(msg),
                Some(_) => {}
                None if p.mid_run && *h != p.abi.request_null() => earlier += 1,
                None => {}
            }
        }
        count(&mut self.anomalies, Anomaly::RequestBeforeAttach, earlier);
        if !recvs.is_empty() || !sends.is_empty() {
            let at = (rec.tgid, rec.tid, rec.ts_ns);
            self.complete(at, (open.cpu_ns, open.ts_ns), rec.cpu_ns, &recvs, &sends);
        }
    }

    /// The return of `MPI_Comm_dup`, `MPI_Comm_split` or `MPI_Cart_create`: the collective
    /// ends, and the new handle (read at the return) names the communicator the creation
    /// made, once every member has entered it.
    fn leave_comm_create(&mut self, rec: &Record, mem: &[u8], open: &OpenCall) {
        let p = self.procs.get_mut(&rec.tgid).expect("caller looked it up");
        let handle = p.abi.handles(mem).first().copied();
        self.leave_collective(rec.tgid, rec.tid, rec.cpu_ns, open.coll);
        if let (Some((parent, seq)), Some(handle)) = (open.creation, handle) {
            if let Some(created) = self.comms.leave_creation(parent, seq, rec.tgid) {
                let p = self.procs.get_mut(&rec.tgid).expect("looked up above");
                p.comms.insert(
                    handle,
                    LocalComm {
                        id: created.comm,
                        rank: created.rank,
                    },
                );
            }
        }
    }

    /// Emits a `Send` for `send` (in `mode`) at the entry `rec` and registers it for
    /// matching. Returns its message if it goes by rendezvous.
    fn send(&mut self, rec: &Record, send: &SendArgs, mode: SendMode) -> Option<MsgId> {
        let p = self
            .procs
            .get_mut(&rec.tgid)
            .expect("caller inspected the process");
        let dst = match send.dest {
            Peer::Null => return None,
            Peer::Rank(r) => r,
            Peer::Any => {
                note(&mut self.anomalies, Anomaly::SendToInvalidRank);
                return None;
            }
        };
        let Some(LocalComm {
            id: comm,
            rank: Some(src),
        }) = p.comm(send.comm)
        else {
            note(&mut self.anomalies, Anomaly::SendOnUnknownComm);
            return None;
        };
        let bytes = send.bytes.unwrap_or_else(|| {
            note(&mut self.anomalies, Anomaly::SendOfUnknownSize);
            0
        });
        let route = match (&self.local_ranks, comm) {
            _ if dst == src => Route::Itself,
            (None, _) => Route::SameHost,
            (Some(ranks), comms::WORLD) if ranks.contains(&dst) => Route::SameHost,
            (Some(_), comms::WORLD) => Route::OtherHost,
            (Some(_), _) => Route::Unknown,
        };
        // Attached mid-run, a receive may have been posted before the attach, unseen: a
        // send waiting for its post would wait forever in the model, so sends stay eager.
        let rendezvous =
            !self.matcher.is_attached_mid_run() && p.eager.rendezvous(route, mode, bytes);
        let msg = self.matcher.send(
            Envelope {
                comm,
                src,
                dst,
                tag: send.tag,
            },
            bytes,
            rec.ts_ns,
        );
        let kind = EventKind::Send {
            after: 0,
            msg,
            bytes,
            rendezvous,
        };
        p.emit(rec.tid, rec.cpu_ns, kind);
        rendezvous.then_some(msg)
    }

    /// Process `tgid`'s MPI returned request handle `h` for `request`. A receive that had the
    /// handle before was never seen to complete (freed, cancelled, or its completion lost):
    /// its post is dropped.
    fn new_request(&mut self, tgid: u32, h: u64, request: Request) {
        let Some(p) = self.procs.get_mut(&tgid) else {
            return;
        };
        if let Some(Request::Recv(old)) = p.requests.insert(h, request) {
            if let Some((_, slot)) = self.post_slots.remove(&old) {
                p.abandon_post(slot);
                note(&mut self.anomalies, Anomaly::RecvNeverCompleted);
            }
        }
    }

    /// Process `tgid` cancels its request `h` (`MPI_Cancel`). A receive is taken out of
    /// matching, so that it takes no message: programs cancel the receives no message will
    /// answer (a cancel that comes too late, after a message matched it, leaves that send
    /// unmatched, counted). Its completion then completes nothing. A send's cancel is not
    /// modelled (counted).
    fn cancel(&mut self, tgid: u32, h: u64) {
        let Some(p) = self.procs.get_mut(&tgid) else {
            return;
        };
        match p.requests.get(&h) {
            Some(&Request::Recv(id)) => {
                p.requests.insert(h, Request::Null);
                if let Some((_, slot)) = self.post_slots.remove(&id) {
                    p.abandon_post(slot);
                }
                self.matcher.withdraw(id);
            }
            Some(Request::Send(_)) => note(&mut self.anomalies, Anomaly::SendCancelled),
            Some(Request::Null) | None => {}
        }
    }

    /// Process `tgid` ends, or the capture does (`at_end`): the posts of its receives not
    /// completed are dropped and counted. A post whose receive completed but is not matched
    /// yet (an attached capture matches when it ends, see [`alignment`]) is kept until the
    /// capture ends; dropped then, its receive counts as unmatched.
    fn abandon_posts(&mut self, tgid: u32, at_end: bool) {
        let Some(p) = self.procs.get_mut(&tgid) else {
            return;
        };
        let completed = &self.recv_slots;
        let mut dropped = 0;
        self.post_slots.retain(|id, &mut (owner, slot)| {
            let done = completed.contains_key(id);
            if owner != tgid || (done && !at_end) {
                return true;
            }
            p.abandon_post(slot);
            dropped += u64::from(!done);
            false
        });
        count(&mut self.anomalies, Anomaly::RecvNeverCompleted, dropped);
    }

    /// Posts a receive for matching; `None` if it moves nothing or cannot be placed.
    fn post(&mut self, tgid: u32, recv: &RecvArgs) -> Option<RecvId> {
        let p = self.procs.get(&tgid)?;
        let src = match recv.source {
            Peer::Null => return None,
            Peer::Any => None,
            Peer::Rank(r) => Some(r),
        };
        let Some(LocalComm {
            id: comm,
            rank: Some(dst),
        }) = p.comm(recv.comm.unwrap_or(p.abi.world()))
        else {
            note(&mut self.anomalies, Anomaly::RecvOnUnknownComm);
            return None;
        };
        Some(self.matcher.post(Pattern {
            comm,
            dst,
            src,
            tag: recv.tag,
        }))
    }

    /// Emits the `RecvStart` (at `entry`: the call's CPU clock and time), one pending `RecvEnd` per completed receive
    /// and one `SendEnd` per completed rendezvous send (at `exit_cpu`), then completes the
    /// receives in the matcher with their statuses, at `ts`.
    fn complete(
        &mut self,
        (tgid, tid, ts): (u32, u32, u64),
        entry: (u64, u64),
        exit_cpu: u64,
        recvs: &[(RecvId, Option<Status>)],
        sends: &[MsgId],
    ) {
        let p = self
            .procs
            .get_mut(&tgid)
            .expect("caller looked up the process");
        p.emit_recv_start(tid, entry);
        for &(id, _) in recvs {
            let slot = p.emit_pending(tid, exit_cpu);
            self.recv_slots.insert(id, (tgid, slot));
        }
        for &msg in sends {
            p.emit(tid, exit_cpu, EventKind::SendEnd { msg });
        }
        for &(id, status) in recvs {
            self.matcher.complete(id, status, ts);
        }
    }

    /// Emits a `CollStart` for the entry `rec` of a collective on `comm`, whose member states
    /// its payload as `bytes`; returns its id.
    fn collective(
        &mut self,
        rec: &Record,
        comm: u64,
        op: CollOp,
        bytes: &CollBytes,
    ) -> Option<u64> {
        let p = self
            .procs
            .get_mut(&rec.tgid)
            .expect("caller inspected the process");
        let Some(local) = p.comm(comm) else {
            note(&mut self.anomalies, Anomaly::CollectiveOnUnknownComm);
            return None;
        };
        let Some(size) = self.comms.size(local.id) else {
            note(&mut self.anomalies, Anomaly::CollectiveOfUnknownCommSize);
            return None;
        };
        let (bytes, anomaly) = bytes.resolve(size, local.rank);
        if let Some(what) = anomaly {
            note(&mut self.anomalies, what);
        }
        let seq = p.collectives.entry(local.id).or_default();
        let coll = ids::collective(local.id, *seq);
        *seq += 1;
        if p.mid_run && self.local_ranks.is_some() {
            note(&mut self.anomalies, Anomaly::CollectiveAfterAttach);
        }
        if p.mid_run && self.local_ranks.is_none() {
            // Numbered from the end of the capture (see `alignment`).
            let slot = p.emit_pending(rec.tid, rec.cpu_ns);
            self.attached_colls
                .enter(local.id, rec.tgid, coll, slot, (op, size, bytes));
        } else {
            let start = EventKind::CollStart {
                coll,
                op,
                size,
                bytes,
            };
            p.emit(rec.tid, rec.cpu_ns, start);
        }
        Some(coll)
    }

    /// Emits the `CollEnd` of collective `coll` (if it was modelled) of thread `tid` of
    /// `tgid`, whose clock reads `cpu`.
    fn leave_collective(&mut self, tgid: u32, tid: u32, cpu: u64, coll: Option<CollId>) {
        let (Some(coll), Some(p)) = (coll, self.procs.get_mut(&tgid)) else {
            return;
        };
        if p.mid_run && self.local_ranks.is_none() {
            let slot = p.emit_pending(tid, cpu);
            self.attached_colls.leave(tgid, coll, slot);
        } else {
            p.emit(tid, cpu, EventKind::CollEnd { coll });
        }
    }
}

#[cfg(test)]
mod tests;
