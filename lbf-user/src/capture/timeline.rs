//! One process's events in order, some of them not settled yet: a send whose receiver has not
//! consumed all of its bytes (it may become several messages), a receive whose send has not
//! been seen. Events leave only in order, so the queue grows while an early slot is open.

use std::collections::{HashMap, VecDeque};

use lbf_common::{Record, RecordKind};

use super::{EventSink, ProcStats};
use crate::event::{Event, EventKind, ProcInfo};

/// A queued event, or several once a send is cut into messages (`None` until settled).
#[derive(Debug)]
struct Slot {
    cpu_ns: u64,
    kinds: Option<Vec<EventKind>>,
}

/// The queue of one process and its CPU bookkeeping.
#[derive(Debug, Default)]
pub struct Timeline {
    queue: VecDeque<Slot>,
    /// Absolute index of `queue[0]`.
    base: u64,
    /// CPU clock of each thread at this process's previous event.
    cpu_base: HashMap<u32, u64>,
    /// CPU clock at the entry and the return of the `poll`/`select`/`epoll_wait` (or run of
    /// them) the next receive continues.
    wait: Option<(u64, u64)>,
}

impl Timeline {
    /// Queues `kind`, happening when thread `tid`'s clock reads `cpu_at`.
    pub fn emit(&mut self, tid: u32, cpu_at: u64, kind: EventKind) {
        self.wait = None;
        self.push(tid, cpu_at, Some(vec![kind]));
    }

    /// Queues an event to be settled with [`Timeline::settle`]; returns its slot.
    pub fn open(&mut self, tid: u32, cpu_at: u64) -> u64 {
        self.push(tid, cpu_at, None)
    }

    /// Settles slot `slot` as `kinds` (at least one): the first carries the slot's CPU, the
    /// others none.
    pub fn settle(&mut self, slot: u64, kinds: Vec<EventKind>) {
        debug_assert!(!kinds.is_empty());
        if let Some(s) = slot
            .checked_sub(self.base)
            .and_then(|i| self.queue.get_mut(i as usize))
        {
            s.kinds = Some(kinds);
        }
    }

    /// Remembers that the process waited (a `poll`-like call) from `entry_cpu` to
    /// `exit_cpu`; waits in a row make one.
    pub fn waited(&mut self, entry_cpu: u64, exit_cpu: u64) {
        let start = self.wait.map_or(entry_cpu, |(start, _)| start);
        self.wait = Some((start, exit_cpu));
    }

    /// Forgets a wait that no receive directly followed (the process did something else).
    pub fn not_waiting(&mut self) {
        self.wait = None;
    }

    /// Queues a `RecvStart` for a receive entered at `cpu_at`, or where the `poll`-like wait
    /// just before it began. Returns the wait's end in that case: the receive's `RecvEnd`
    /// belongs there, so that the CPU after the wait (the receive call itself, and anything
    /// the process did before it) is work.
    pub fn recv_start(&mut self, tid: u32, cpu_at: u64) -> Option<u64> {
        let wait = self.wait.take();
        let at = wait.map_or(cpu_at, |(start, _)| start.min(cpu_at));
        self.push(tid, at, Some(vec![EventKind::RecvStart]));
        wait.map(|(_, end)| end)
    }

    /// Hands out every event in order as `(cpu_ns, kind)`; a slot still open becomes a
    /// `Keepalive` carrying its CPU. Returns how many were open.
    pub fn drain(&mut self, mut out: impl FnMut(u64, EventKind)) -> u64 {
        let mut open = 0;
        self.base += self.queue.len() as u64;
        for slot in self.queue.drain(..) {
            let kinds = slot.kinds.unwrap_or_else(|| {
                open += 1;
                vec![EventKind::Keepalive]
            });
            for (i, kind) in kinds.into_iter().enumerate() {
                out(if i == 0 { slot.cpu_ns } else { 0 }, kind);
            }
        }
        open
    }

    fn push(&mut self, tid: u32, cpu_at: u64, kinds: Option<Vec<EventKind>>) -> u64 {
        let base = self.cpu_base.entry(tid).or_insert(0);
        let cpu_ns = cpu_at.saturating_sub(*base);
        *base = (*base).max(cpu_at);
        self.queue.push_back(Slot { cpu_ns, kinds });
        self.base + self.queue.len() as u64 - 1
    }
}

/// A process of a capture whose set of processes is known only at the end.
#[derive(Debug)]
pub struct Member {
    /// Its name in the trace.
    pub name: String,
    /// When it started (its fork, or exec if it was not forked under the tracer), in
    /// nanoseconds after the capture's first record: its CPU clock counts from there.
    pub start_ns: u64,
    /// Its events.
    pub timeline: Timeline,
    /// What its calls moved.
    pub stats: ProcStats,
}

/// Announces `members` as processes `0, 1, ...` on `host`, then hands out each one's events
/// in order; returns the processes and their totals (`stats` completed with the CPU of the
/// events and the part spent waiting in receives).
pub fn hand_out(
    members: Vec<Member>,
    host: &str,
    sink: &mut dyn EventSink,
) -> (Vec<ProcInfo>, Vec<ProcStats>) {
    let procs: Vec<ProcInfo> = members
        .iter()
        .enumerate()
        .map(|(id, m)| ProcInfo {
            id: id as u32,
            name: m.name.clone(),
            host: host.to_string(),
            start_ns: m.start_ns,
        })
        .collect();
    for p in &procs {
        sink.process(p);
    }
    let mut totals = Vec::with_capacity(members.len());
    for (id, m) in members.into_iter().enumerate() {
        let (mut timeline, mut stats) = (m.timeline, m.stats);
        timeline.drain(|cpu_ns, kind| {
            stats.cpu_ns += cpu_ns;
            if matches!(kind, EventKind::RecvEnd { .. }) {
                stats.wait_ns += cpu_ns;
            }
            sink.event(&Event {
                proc: id as u32,
                cpu_ns,
                kind,
            });
        });
        totals.push(stats);
    }
    (procs, totals)
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
    starts: HashMap<u32, u64>,
    commands: HashMap<u32, String>,
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
