//! One process's events in order, some of them not settled yet: a send whose receiver has not
//! consumed all of its bytes (it may become several messages), a receive whose send has not
//! been seen. Events leave only in order, so the queue grows while an early slot is open.
//!
//! A cluster node's socket capture also queues sends and receives it does not match itself
//! ([`Item::Stream`]: connections to other hosts, matched by the builder), in their place
//! among the process's events; the builder holds its processes' events in timelines of its
//! own while their messages are matched ([`Timeline::emit_after`]).

use rustc_hash::FxHashMap;
use std::collections::VecDeque;

use lbf_common::{Record, RecordKind};

use lbf_model::event::{EventKind, ProcedureCpu};

use crate::procedures::ProcedureShares;
use lbf_model::stream::StreamOp;

/// What a settled slot hands out.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// An event for the engine.
    Event(EventKind),
    /// A send or receive matched elsewhere (boxed: rarer and larger than an event).
    Stream(Box<StreamOp>),
}

/// An instant of one thread: its CPU clock then, and the time (`CLOCK_MONOTONIC`
/// nanoseconds, the records' `ts_ns`) where the capture knows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct At {
    /// The thread's CPU clock.
    pub cpu: u64,
    /// The time, if known.
    pub ts: Option<u64>,
}

impl At {
    /// When the thread's clock read `cpu`, at time `ts`.
    pub fn new(cpu: u64, ts: u64) -> At {
        At { cpu, ts: Some(ts) }
    }

    /// When the thread's clock read `cpu`, at a time not known.
    pub fn cpu(cpu: u64) -> At {
        At { cpu, ts: None }
    }
}

/// A queued event, or several once a send is cut into messages (`None` until settled).
#[derive(Debug)]
struct Slot {
    cpu_ns: u64,
    /// When it happened, if known (every item of the slot happened then).
    ts_ns: Option<u64>,
    /// The CPU in traced procedures among `cpu_ns`.
    procedures: ProcedureCpu,
    items: Option<Vec<Item>>,
}

/// The queue of one process and its CPU bookkeeping.
#[derive(Debug, Default)]
pub struct Timeline {
    queue: VecDeque<Slot>,
    /// Absolute index of `queue[0]`.
    base: u64,
    /// CPU clock of each thread at this process's previous event.
    cpu_base: FxHashMap<u32, u64>,
    /// The CPU its threads spent in traced procedures (`ProcCpu` records go here).
    pub procedures: ProcedureShares,
}

/// A `poll`, `select` or `epoll_wait` (or a run of them) that the next receive continues: its
/// entry and its return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The (first) wait's entry.
    pub entry: At,
    /// The (last) wait's return.
    pub exit: At,
}

impl Wait {
    /// `earlier` (if any) followed by a wait from `entry` to `exit`: waits in a row make one.
    pub fn after(earlier: Option<Wait>, entry: At, exit: At) -> Wait {
        Wait {
            entry: earlier.map_or(entry, |w| w.entry),
            exit,
        }
    }
}

impl Timeline {
    /// Thread `tid`'s CPU clock read `cpu_at` when tracing began (its process was attached
    /// while running): its first event carries the CPU it used since then, not since it
    /// started. Ignored once the thread has an event.
    pub fn attached(&mut self, tid: u32, cpu_at: u64) {
        self.cpu_base.entry(tid).or_insert(cpu_at);
    }

    /// Queues `kind`, happening at thread `tid`'s instant `at`.
    pub fn emit(&mut self, tid: u32, at: At, kind: EventKind) {
        self.push(tid, at, Some(vec![Item::Event(kind)]));
    }

    /// Queues a send or receive that is matched elsewhere, made at thread `tid`'s instant
    /// `at`: it leaves as it is, in its place.
    pub fn emit_stream(&mut self, tid: u32, at: At, op: StreamOp) {
        self.push(tid, at, Some(vec![Item::Stream(Box::new(op))]));
    }

    /// Queues an event to be settled with [`Timeline::settle`]; returns its slot.
    pub fn open(&mut self, tid: u32, at: At) -> u64 {
        self.push(tid, at, None)
    }

    /// Queues `kind` after `cpu_ns` of CPU since the previous event, of which `procedures`
    /// in traced procedures, for a stream of events that already carry their CPU (the
    /// builder's).
    pub fn emit_after(&mut self, cpu_ns: u64, procedures: ProcedureCpu, kind: EventKind) {
        self.push_slot_with(cpu_ns, None, procedures, Some(vec![Item::Event(kind)]));
    }

    /// Queues, after `cpu_ns` of CPU (of which `procedures` in traced procedures), an event
    /// to be settled with [`Timeline::settle`]; returns its slot.
    pub fn open_after(&mut self, cpu_ns: u64, procedures: ProcedureCpu) -> u64 {
        self.push_slot_with(cpu_ns, None, procedures, None)
    }

    /// Settles slot `slot` as `kinds` (at least one): the first carries the slot's CPU and
    /// procedure CPU, the others none.
    pub fn settle(&mut self, slot: u64, kinds: Vec<EventKind>) {
        debug_assert!(!kinds.is_empty());
        if let Some(s) = slot
            .checked_sub(self.base)
            .and_then(|i| self.queue.get_mut(i as usize))
        {
            s.items = Some(kinds.into_iter().map(Item::Event).collect());
        }
    }

    /// Queues a `RecvStart` for a receive entered at `entry`, or where `wait`, the
    /// `poll`-like wait just before it, began. Returns the wait's end in that case: the
    /// receive's `RecvEnd` belongs there, so that the CPU after the wait (the receive call
    /// itself, and anything the process did before it) is work.
    pub fn recv_start(&mut self, tid: u32, entry: At, wait: Option<Wait>) -> Option<At> {
        let at = match wait {
            Some(w) if w.entry.cpu <= entry.cpu => w.entry,
            _ => entry,
        };
        self.push(tid, at, Some(vec![Item::Event(EventKind::RecvStart)]));
        wait.map(|w| w.exit)
    }

    /// Hands out, in order as `(cpu_ns, procedure CPU, time, item)`, the settled items at the
    /// front of the queue, up to the first slot still open; with `all`, every item, an open
    /// slot as a `Keepalive` carrying its CPU (the end of a capture).
    pub fn drain(&mut self, all: bool, mut out: impl FnMut(u64, &ProcedureCpu, Option<u64>, Item)) {
        while self.queue.front().is_some_and(|s| all || s.items.is_some()) {
            let slot = self.queue.pop_front().expect("checked");
            self.base += 1;
            let items = slot
                .items
                .unwrap_or_else(|| vec![Item::Event(EventKind::Keepalive)]);
            for (i, item) in items.into_iter().enumerate() {
                match i {
                    0 => out(slot.cpu_ns, &slot.procedures, slot.ts_ns, item),
                    _ => out(0, &ProcedureCpu::NONE, slot.ts_ns, item),
                }
            }
        }
    }

    /// Events queued and not handed out yet.
    pub fn held(&self) -> usize {
        self.queue.len()
    }

    /// The slot of the first event not handed out yet, if any: after a [`Timeline::drain`],
    /// the open slot the others wait behind.
    pub fn first_held(&self) -> Option<u64> {
        (!self.queue.is_empty()).then_some(self.base)
    }

    fn push(&mut self, tid: u32, at: At, items: Option<Vec<Item>>) -> u64 {
        let base = self.cpu_base.entry(tid).or_insert(0);
        let cpu_ns = at.cpu.saturating_sub(*base);
        *base = (*base).max(at.cpu);
        let procedures = self.procedures.share(tid, at.cpu);
        self.push_slot_with(cpu_ns, at.ts, procedures, items)
    }

    fn push_slot_with(
        &mut self,
        cpu_ns: u64,
        ts_ns: Option<u64>,
        procedures: ProcedureCpu,
        items: Option<Vec<Item>>,
    ) -> u64 {
        self.queue.push_back(Slot {
            cpu_ns,
            ts_ns,
            procedures,
            items,
        });
        self.base + self.queue.len() as u64 - 1
    }
}

/// A capture's clock, kept from every record: when the run started (its first record), when
/// it ended (the last exit of a process started during the capture, else the last record), and when each process started (its
/// fork under the tracer, where its CPU clock starts, or its exec if it was not forked under
/// the tracer). Shared by the MPI, PVM and socket captures. It also keeps what each process
/// ran, from its exec (or its parent's, for a forked child): a process that exits before user
/// space looks at it still has a name.
#[derive(Debug, Default)]
pub struct RunClock {
    first_ts: Option<u64>,
    last_ts: u64,
    last_exit_ts: Option<u64>,
    starts: FxHashMap<u32, u64>,
    commands: FxHashMap<u32, String>,
}

impl RunClock {
    /// Notes a record; call it for every record, first thing.
    pub fn observe(&mut self, rec: &Record) {
        self.first_ts.get_or_insert(rec.ts_ns);
        self.last_ts = self.last_ts.max(rec.ts_ns);
        match RecordKind::from_raw(rec.kind) {
            Some(RecordKind::Fork) => {
                let child = rec.args[0] as u32;
                self.starts.insert(child, rec.ts_ns);
                if let Some(command) = self.commands.get(&rec.tgid).cloned() {
                    self.commands.insert(child, command);
                }
            }
            Some(RecordKind::Exec) => {
                self.starts.entry(rec.tgid).or_insert(rec.ts_ns);
                let file = &rec.mem[..usize::from(rec.mem_len).min(rec.mem.len())];
                let file = file.split(|&b| b == 0).next().unwrap_or_default();
                let base = file.rsplit(|&b| b == b'/').next().unwrap_or_default();
                if !base.is_empty() {
                    self.commands
                        .insert(rec.tgid, String::from_utf8_lossy(base).into_owned());
                }
            }
            // A process that ran before the capture (a remote-shell server, a resource
            // manager's daemon the node follows) is not part of the run: its exit, maybe long
            // after the job, does not end it.
            Some(RecordKind::Exit) if self.starts.contains_key(&rec.tgid) => {
                self.last_exit_ts = Some(rec.ts_ns)
            }
            _ => {}
        }
    }

    /// Forgets process `tgid`, which ended and which its capture will not ask about any more,
    /// so that the clock does not grow with every process of a long run. The run's start and
    /// end are unchanged.
    pub fn forget(&mut self, tgid: u32) {
        self.starts.remove(&tgid);
        self.commands.remove(&tgid);
    }

    /// The run's first record's time (`CLOCK_MONOTONIC` ns), once there is one.
    pub fn first(&self) -> Option<u64> {
        self.first_ts
    }

    /// Nanoseconds from the run's first record to `ts` (0 before any record).
    pub fn since_first(&self, ts: u64) -> u64 {
        self.first_ts.map_or(0, |first| ts.saturating_sub(first))
    }

    /// Nanoseconds from the run's first record to the start of `tgid` (0 if unknown).
    pub fn start_of(&self, tgid: u32) -> u64 {
        self.starts.get(&tgid).map_or(0, |&at| self.since_first(at))
    }

    /// A name for process `tgid` in traces, its command and PID like `spa[1234]`: the file it
    /// executed, else (a process running before the capture) its `/proc/PID/comm`.
    pub fn name_of(&self, tgid: u32) -> String {
        let command = match self.commands.get(&tgid) {
            Some(c) => c.clone(),
            None => std::fs::read_to_string(format!("/proc/{tgid}/comm"))
                .unwrap_or_default()
                .trim()
                .to_string(),
        };
        format!("{command}[{tgid}]")
    }

    /// When the run ended: the last exit of a process started during the capture, else the
    /// last record.
    pub fn end(&self) -> u64 {
        self.last_exit_ts.unwrap_or(self.last_ts)
    }

    /// Wall seconds from the first record to the end of the run.
    pub fn measured_seconds(&self) -> f64 {
        self.since_first(self.end()) as f64 * 1e-9
    }
}

#[cfg(test)]
mod tests {
    use super::RunClock;
    use lbf_common::{Record, RecordKind, ARG_WORDS, MEM_BYTES};

    fn record(kind: RecordKind, tgid: u32, arg0: u64, mem: &[u8]) -> Record {
        let mut r = Record {
            kind: kind as u16,
            fn_id: 0,
            mem_len: mem.len() as u16,
            part: 0,
            tgid,
            tid: tgid,
            ts_ns: 1_000,
            cpu_ns: 0,
            args: [0; ARG_WORDS],
            mem: [0; MEM_BYTES],
        };
        r.args[0] = arg0;
        r.mem[..mem.len()].copy_from_slice(mem);
        r
    }

    /// Processes gone before anyone looks at `/proc` keep the name of what they executed, and
    /// a forked child its parent's until it executes something else.
    #[test]
    fn names_come_from_exec_and_fork() {
        let mut clock = RunClock::default();
        // PIDs far above pid_max, so `/proc` cannot answer for them.
        clock.observe(&record(
            RecordKind::Exec,
            4_000_001,
            0,
            b"/usr/bin/spa\0junk",
        ));
        clock.observe(&record(RecordKind::Fork, 4_000_001, 4_000_002, b""));
        assert_eq!(clock.name_of(4_000_001), "spa[4000001]");
        assert_eq!(clock.name_of(4_000_002), "spa[4000002]");
        clock.observe(&record(RecordKind::Exec, 4_000_002, 0, b"./tsp\0"));
        assert_eq!(clock.name_of(4_000_002), "tsp[4000002]");
        assert_eq!(clock.name_of(4_000_003), "[4000003]");
    }
}
