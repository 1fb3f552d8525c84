//! The processes of a capture that learns them while the program runs (sockets, PVM): a
//! process joins at its first message, and gets the next process id.
//!
//! An [`EventSink`] must hear of every process before the first event of any (a trace's
//! header lists them all, the engine is built for them all). So a roster holds every event
//! back until it knows the whole set: at the end of the capture, or as soon as the number of
//! processes it was told to expect ([`Roster::expect`]: `lbf-trace --procs`, or the processes
//! a target places) have joined. It then announces them, in id order, and from then on hands
//! out each process's events as they settle (see [`Timeline`]), so memory holds only the
//! events not settled yet. A process joining after that is not in the trace: its events are
//! counted as lost, and a receive of one of its messages becomes a `Keepalive`.
//!
//! Either way each process gets the same events in the same order: when they are handed out
//! changes nothing in the result.
//!
//! Once announced, a process that ended and whose events have all left is forgotten, with
//! what the capture's clock knew of it: only its totals stay (its [`ProcInfo`] is in the
//! announced list), or, for a process beyond the expected number, its PID (a receive of one
//! of its messages is still a `Keepalive`). So a long capture holds entries for the running
//! processes only.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::anomaly::{note, Anomalies, Anomaly};
use crate::record_capture::Backlog;
use crate::timeline::{At, Item, RunClock, Timeline};
use crate::{EventSink, ProcStats};
use lbf_model::event::{Event, EventDetail, EventKind, ProcId, ProcInfo};
use lbf_model::stream::Role;

/// How the notes of a roster name its processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Labels {
    /// One of them: "process", "task".
    pub one: &'static str,
    /// Several: "processes", "tasks".
    pub many: &'static str,
    /// What makes one part of the trace, after the noun: "used a socket".
    pub joins: &'static str,
}

/// Where a process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Part of the trace, with this id.
    Member(u32),
    /// Joined after the expected number had: left out, its events counted as lost.
    Beyond,
}

/// One process that joined: its events and what its calls moved.
#[derive(Debug)]
pub struct Proc {
    /// Its events, in order.
    pub timeline: Timeline,
    /// What its calls moved (the CPU and waiting time are added as events leave).
    pub stats: ProcStats,
    /// Whether its `Exit` is queued.
    exited: bool,
    name: String,
    standing: Standing,
}

/// A process of the trace, by id.
#[derive(Debug)]
struct Member {
    tgid: u32,
    /// Its totals, once it ended, its events all left and its entry was freed.
    ended: Option<ProcStats>,
}

/// What a roster handed out, for the capture's summary.
#[derive(Debug, Default)]
pub struct Handed {
    /// The processes of the trace, by id.
    pub procs: Vec<ProcInfo>,
    /// Their totals, indexed like `procs`.
    pub stats: Vec<ProcStats>,
    /// Events of processes beyond the expected number, left out of the trace.
    pub lost_events: u64,
}

/// The processes of a capture, and when their events may leave; see the module documentation.
#[derive(Debug)]
pub struct Roster {
    host: String,
    labels: Labels,
    expected: Option<usize>,
    /// Processes that joined, until they end and their events have all left.
    procs: FxHashMap<u32, Proc>,
    /// Members, by id.
    order: Vec<Member>,
    /// The processes as announced; empty until then.
    announced: Vec<ProcInfo>,
    /// Processes whose events may have settled since the last hand-out (once announced).
    touched: Vec<u32>,
    /// The CPU clocks of the threads of processes attached while running, as tracing began,
    /// until their process joins.
    attach_cpu: FxHashMap<u32, Vec<(u32, u64)>>,
    lost_events: u64,
    /// Processes beyond the expected number whose entries were freed.
    left_out: FxHashSet<u32>,
}

impl Roster {
    /// No process yet; they run on `host`. Events wait for the end of the capture unless
    /// [`Roster::expect`] says how many processes to wait for.
    pub fn new(host: impl Into<String>, labels: Labels) -> Self {
        Roster {
            host: host.into(),
            labels,
            expected: None,
            procs: FxHashMap::default(),
            order: Vec::new(),
            announced: Vec::new(),
            touched: Vec::new(),
            attach_cpu: FxHashMap::default(),
            lost_events: 0,
            left_out: FxHashSet::default(),
        }
    }

    /// Announces the processes, and lets events flow, once `n` have joined (`None`: at the
    /// end of the capture).
    pub fn expect(&mut self, n: Option<usize>) {
        self.expected = n;
    }

    /// Process `tgid`, which joins now (named `name()`) unless it has already.
    pub fn join(
        &mut self,
        tgid: u32,
        name: impl FnOnce() -> String,
        anomalies: &mut Anomalies,
    ) -> &mut Proc {
        if !self.procs.contains_key(&tgid) {
            let full = self.expected.is_some_and(|n| self.order.len() >= n);
            let standing = if full {
                Standing::Beyond
            } else {
                self.order.push(Member { tgid, ended: None });
                Standing::Member(self.order.len() as u32 - 1)
            };
            let name = name();
            if full {
                let what = Anomaly::LeftOut {
                    labels: self.labels,
                    name: name.clone(),
                    expected: self.order.len(),
                };
                note(anomalies, what);
            }
            let mut timeline = Timeline::default();
            for (tid, cpu) in self.attach_cpu.remove(&tgid).unwrap_or_default() {
                timeline.attached(tid, cpu);
            }
            let proc = Proc {
                timeline,
                stats: ProcStats::default(),
                exited: false,
                name,
                standing,
            };
            self.procs.insert(tgid, proc);
        }
        self.get_mut(tgid).expect("joined above")
    }

    /// The id of process `tgid` in the trace, if it is a member.
    pub fn id_of(&self, tgid: u32) -> Option<ProcId> {
        self.order
            .iter()
            .position(|m| m.tgid == tgid)
            .map(|i| i as ProcId)
    }

    /// Thread `tid` of process `tgid` was running when tracing began, its CPU clock reading
    /// `cpu_ns` (an `Attach` record): the process's model starts there.
    pub fn attached(&mut self, tgid: u32, tid: u32, cpu_ns: u64) {
        match self.procs.get_mut(&tgid) {
            Some(p) => p.timeline.attached(tid, cpu_ns),
            None => self.attach_cpu.entry(tgid).or_default().push((tid, cpu_ns)),
        }
    }

    /// A `ProcCpu` record (the CPU of a thread in traced procedures) of process `tgid`, if
    /// it has joined.
    pub fn procedure_cpu(&mut self, rec: &lbf_common::Record) {
        if let Some(p) = self.procs.get_mut(&rec.tgid) {
            p.timeline.procedures.observe(rec);
        }
    }

    /// Process `tgid`, if it has joined.
    pub fn get_mut(&mut self, tgid: u32) -> Option<&mut Proc> {
        let p = self.procs.get_mut(&tgid)?;
        // Before the announcement nothing leaves, and then every process is looked at.
        if !self.announced.is_empty() {
            self.touched.push(tgid);
        }
        Some(p)
    }

    /// Whether process `tgid` joined after the expected number had (its messages are not in
    /// the trace).
    pub fn is_beyond(&self, tgid: u32) -> bool {
        self.left_out.contains(&tgid)
            || self
                .procs
                .get(&tgid)
                .is_some_and(|p| p.standing == Standing::Beyond)
    }

    /// Whether any process has joined.
    pub fn joined_any(&self) -> bool {
        !self.procs.is_empty() || !self.left_out.is_empty() || !self.order.is_empty()
    }

    /// Process `tgid` ended (at its thread `tid`'s instant `at`): its `Exit`, if it joined
    /// and has none yet. One that never joined never will: `clock` forgets it.
    pub fn exit(&mut self, tgid: u32, tid: u32, at: At, clock: &mut RunClock) {
        match self.get_mut(tgid) {
            Some(p) if !p.exited => {
                p.exited = true;
                p.timeline.emit(tid, at, EventKind::Exit);
            }
            Some(_) => {}
            None => {
                self.attach_cpu.remove(&tgid);
                clock.forget(tgid)
            }
        }
    }

    /// Processes with an entry: running, or ended with events still to leave.
    pub fn entries(&self) -> usize {
        self.procs.len()
    }

    /// Events queued and not handed out yet, over all processes, and events of processes
    /// beyond the expected number so far.
    pub fn backlog(&self) -> Backlog {
        Backlog {
            held_events: self.procs.values().map(|p| p.timeline.held()).sum(),
            lost_events: self.lost_events,
            kept: None,
        }
    }

    /// Hands out what has settled since the last call, once every expected process has
    /// joined (announcing them first). Call it after each record.
    pub fn hand_out(&mut self, clock: &mut RunClock, sink: &mut dyn EventSink) {
        if self.announced.is_empty() {
            if !self
                .expected
                .is_some_and(|n| n > 0 && self.order.len() >= n)
            {
                return;
            }
            self.announce(clock, sink);
            let everyone: Vec<u32> = self.procs.keys().copied().collect();
            self.touched.extend(everyone);
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for tgid in touched {
            self.drain(tgid, false, sink);
            self.free_if_done(tgid, clock);
        }
    }

    /// Forgets process `tgid` (and `clock` forgets it too) if it ended and its events have
    /// all left, keeping only its totals (a member) or its PID (a process beyond).
    fn free_if_done(&mut self, tgid: u32, clock: &mut RunClock) {
        if !self
            .procs
            .get(&tgid)
            .is_some_and(|p| p.exited && p.timeline.held() == 0)
        {
            return;
        }
        let p = self.procs.remove(&tgid).expect("checked");
        match p.standing {
            Standing::Member(id) => self.order[id as usize].ended = Some(p.stats),
            Standing::Beyond => {
                self.left_out.insert(tgid);
            }
        }
        clock.forget(tgid);
    }

    /// Ends the capture: closes processes still running with an `Exit` (noted), announces
    /// the members if that has not happened (noting when fewer joined than expected), and
    /// hands out every event left, a slot still open as a `Keepalive`.
    pub fn finish(
        mut self,
        clock: &RunClock,
        sink: &mut dyn EventSink,
        anomalies: &mut Anomalies,
    ) -> Handed {
        let l = self.labels;
        // Processes that ended and handed everything out have no entry left.
        for p in self.procs.values_mut().filter(|p| !p.exited) {
            p.exited = true;
            p.timeline.emit(0, At::cpu(0), EventKind::Exit);
            if matches!(p.standing, Standing::Member(_)) {
                note(anomalies, Anomaly::StillRunning { labels: l });
            }
        }
        if self.announced.is_empty() {
            if let Some(n) = self.expected.filter(|&n| self.order.len() < n) {
                let what = Anomaly::FewerJoined {
                    labels: l,
                    expected: n,
                    joined: self.order.len(),
                };
                note(anomalies, what);
            }
            self.announce(clock, sink);
        }
        let mut tgids: Vec<u32> = self.procs.keys().copied().collect();
        tgids.sort_unstable();
        for tgid in tgids {
            self.drain(tgid, true, sink);
        }
        let stats = self
            .order
            .iter()
            .map(|m| m.ended.unwrap_or_else(|| self.procs[&m.tgid].stats))
            .collect();
        Handed {
            procs: self.announced,
            stats,
            lost_events: self.lost_events,
        }
    }

    /// Announces the members as processes `0, 1, ...`, in order of joining.
    fn announce(&mut self, clock: &RunClock, sink: &mut dyn EventSink) {
        if let Some(first) = clock.first() {
            sink.clock_origin(first);
        }
        self.announced = self
            .order
            .iter()
            .enumerate()
            .map(|(id, m)| ProcInfo {
                id: id as u32,
                name: self.procs[&m.tgid].name.clone(),
                host: self.host.clone(),
                start_ns: clock.start_of(m.tgid),
                ..Default::default()
            })
            .collect();
        for p in &self.announced {
            sink.process(p);
        }
    }

    /// Hands out the settled events of `tgid` (`all`: every event, open slots as
    /// `Keepalive`s), or counts them as lost if it is beyond the expected number.
    fn drain(&mut self, tgid: u32, all: bool, sink: &mut dyn EventSink) {
        let Some(p) = self.procs.get_mut(&tgid) else {
            return;
        };
        let stats = &mut p.stats;
        let lost = &mut self.lost_events;
        let standing = p.standing;
        p.timeline
            .drain(all, |cpu_ns, procedures, ts_ns, item| match standing {
                Standing::Member(id) => {
                    stats.cpu_ns += cpu_ns;
                    match item {
                        Item::Event(kind) => {
                            if matches!(kind, EventKind::RecvEnd { .. }) {
                                stats.wait_ns += cpu_ns;
                            }
                            let event = Event {
                                proc: id,
                                cpu_ns,
                                kind,
                            };
                            let detail = EventDetail {
                                procedures: *procedures,
                                monotonic_ns: ts_ns,
                            };
                            sink.event_with(&event, &detail);
                        }
                        Item::Stream(op) => {
                            if op.role == Role::Recv {
                                stats.wait_ns += cpu_ns;
                            }
                            sink.stream_op(id, cpu_ns, procedures, &op);
                        }
                    }
                }
                Standing::Beyond => *lost += 1,
            });
    }
}
