//! PVM 3 capture: turns the probe records of `libpvm3` calls into the engine's events, for
//! unmodified PVM programs. Only task-to-task messages of the `pvm_*` API become messages,
//! whether PVM routes them through pvmd (the default) or directly (`PvmRouteDirect`): pvmd's
//! own traffic is never looked at.
//!
//! # ABI (PVM 3.4, x86-64)
//!
//! Task ids come from the return of `pvm_mytid`. A send's size is the sum of what was packed
//! into the active buffer since `pvm_initsend` (`pvm_pk*`: items times the item size;
//! `pvm_pkstr`: the string's length plus its NUL), or `len` times the datatype's size for
//! `pvm_psend`. PVM delivers a pair of tasks' messages in order, and a receive takes the first
//! message in its queue that matches its source and tag (-1: any); the capture does the same
//! over the messages in the order their sends began (sends are registered at their entry, so
//! before any receive of them returns). `pvm_precv` reports the sender, which is used.
//!
//! # Events from calls
//!
//! | call | events |
//! | --- | --- |
//! | `pvm_send`, `pvm_psend` | `Send` at the entry |
//! | `pvm_mcast` | one `Send` per destination at the entry (the record holds 64) |
//! | `pvm_recv`, `pvm_precv` | `RecvStart` at the entry, `RecvEnd` at the return |
//! | `pvm_nrecv`, `pvm_trecv` returning a message | `RecvStart` at the entry, `RecvEnd` at the return; nothing otherwise |
//! | process exit | `Exit` |
//!
//! | `pvm_joingroup` | nothing; the task is a member of the group from its return on |
//! | `pvm_bcast` | one `Send` per other member of the group at the entry |
//! | `pvm_barrier` | `CollStart` at the entry, `CollEnd` at the return (one collective per group and barrier number) |
//!
//! The group library talks to the group server (`pvmgs`) with `pvm_send`/`pvm_recv` from
//! inside these calls: calls nested in a probed call are ignored, as are messages to and from
//! the group server's task id (from group calls not probed, like `pvm_lvgroup`); `pvmgs`
//! itself is not part of the trace.
//!
//! A process appears in the trace once it sends or receives; pvmd, the console and shells do
//! not. Process ids follow the order of first message. As for sockets, events are handed out
//! at the end, unless the capture is told how many tasks to expect
//! ([`PvmCapture::expecting`]): then they flow once that many have sent or received (see
//! [`super::roster`]).

use std::collections::{BTreeMap, HashMap, VecDeque};

use lbf_common::{pvm, FnReads, MemRead, Record, RecordKind};

use super::roster::{Labels, Proc, Roster};
use super::source::{Backlog, RecordCapture};
use super::timeline::RunClock;
use super::{EventSink, Summary};
use crate::event::{CollOp, EventKind, MsgId};

/// Most destinations of one `pvm_mcast` a record holds (256 bytes of 4-byte task ids).
const MCAST_MAX: usize = 64;

/// Bytes of a group name read at the entry of a group call.
const GROUP_NAME_BYTES: u16 = 64;

/// The PVM group server, a task of PVM's own: never part of the trace.
const GROUP_SERVER: &str = "pvmgs";

/// How a PVM capture's notes name its processes.
const LABELS: Labels = Labels {
    one: "task",
    many: "tasks",
    joins: "sent or received a PVM message",
};

/// The memory reads of the probed PVM functions: the string of `pvm_pkstr`, the task ids of
/// `pvm_mcast` (at entry) and the sender of `pvm_precv` (at the return).
pub fn fn_reads() -> Vec<(u16, FnReads)> {
    let at_entry = |ptr_arg, count_arg, len| FnReads {
        entry: MemRead {
            ptr_arg,
            count_arg,
            len,
        },
        exit: MemRead::default(),
    };
    vec![
        (pvm::PKSTR, at_entry(1, 0, 256)),
        // At the return: the library has read the name, so its page is resident.
        (
            pvm::JOINGROUP,
            FnReads {
                entry: MemRead::default(),
                exit: MemRead {
                    ptr_arg: 1,
                    count_arg: 0,
                    len: GROUP_NAME_BYTES,
                },
            },
        ),
        (pvm::BCAST, at_entry(1, 0, GROUP_NAME_BYTES)),
        (pvm::BARRIER, at_entry(1, 0, GROUP_NAME_BYTES)),
        (pvm::MCAST, at_entry(1, 2, 4)),
        (
            pvm::PRECV,
            FnReads {
                entry: MemRead::default(),
                exit: MemRead {
                    ptr_arg: 6,
                    count_arg: 0,
                    len: 4,
                },
            },
        ),
    ]
}

/// Bytes per item of a `pvm_pk*` function, or of a `pvm_psend` datatype code.
fn item_size(fn_id: u16) -> Option<u64> {
    Some(match fn_id {
        pvm::PKBYTE => 1,
        pvm::PKSHORT | pvm::PKUSHORT => 2,
        pvm::PKINT | pvm::PKUINT | pvm::PKFLOAT => 4,
        pvm::PKLONG | pvm::PKULONG | pvm::PKDOUBLE | pvm::PKCPLX => 8,
        pvm::PKDCPLX => 16,
        _ => return None,
    })
}

/// The NUL-terminated group name at the start of `mem`.
fn group_name(mem: &[u8]) -> Option<String> {
    let end = mem.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&mem[..end]).into_owned())
}

/// Bytes per item of `pvm_psend`'s `datatype` (`PVM_STR` 0 ... `PVM_ULONG` 11).
fn datatype_size(code: u64) -> u64 {
    match code {
        0 | 1 => 1,
        2 | 9 => 2,
        3 | 4 | 10 => 4,
        5 | 6 | 8 | 11 => 8,
        7 => 16,
        _ => 1,
    }
}

/// A message sent and not yet received.
#[derive(Clone, Copy, Debug)]
struct Pending {
    msg: MsgId,
    src: i32,
    tag: i32,
    bytes: u64,
    /// The sending process.
    sender: u32,
}

/// A call entered and not yet returned.
#[derive(Clone, Copy, Debug)]
struct Open {
    fn_id: u16,
    args: [u64; 8],
    cpu_ns: u64,
    /// Made inside another probed call (PVM calls itself): ignored.
    nested: bool,
    /// The collective a `pvm_barrier` entered.
    coll: Option<u64>,
}

/// One traced process's PVM state (its events are in the roster once it sends or receives).
#[derive(Debug, Default)]
struct Task {
    tid: Option<i32>,
    packed: u64,
    /// Something packed since `pvm_initsend` has an unknown size (a string the record could
    /// not hold).
    packed_unknown: bool,
    calls: HashMap<u32, Vec<Open>>,
    /// Barriers entered so far, per group.
    barriers: HashMap<String, u64>,
    /// The group server or another process that is never part of the trace.
    excluded: bool,
}

/// Turns PVM call records into events; see the module documentation.
pub struct PvmCapture {
    tasks: HashMap<u32, Task>,
    /// The tasks that sent or received, in order of first message, and their events.
    roster: Roster,
    /// Messages not yet received, per destination task id, in order of sending.
    queues: HashMap<i32, VecDeque<Pending>>,
    next_msg: MsgId,
    /// Task ids of the group server, learnt from the sends inside group calls: messages to and
    /// from it are PVM's, not the program's (the group calls not probed, like `pvm_lvgroup`,
    /// talk to it with `pvm_send` too).
    servers: Vec<i32>,
    /// Task ids of each group's members.
    groups: HashMap<String, Vec<i32>>,
    /// Barriers some members of the group have not entered yet: (group, barrier number) ->
    /// (collective id, members still to enter).
    barriers: HashMap<(String, u64), (u64, u32)>,
    /// Collective id of the next barrier.
    next_coll: u64,
    clock: RunClock,
    anomalies: BTreeMap<String, u64>,
    unmatched_recvs: u64,
}

impl PvmCapture {
    /// A capture naming `host` as its processes' host.
    pub fn new(host: impl Into<String>) -> Self {
        PvmCapture {
            tasks: HashMap::new(),
            roster: Roster::new(host, LABELS),
            queues: HashMap::new(),
            next_msg: 1,
            servers: Vec::new(),
            groups: HashMap::new(),
            barriers: HashMap::new(),
            next_coll: 1,
            clock: RunClock::default(),
            anomalies: BTreeMap::new(),
            unmatched_recvs: 0,
        }
    }

    fn note(&mut self, what: &str) {
        *self.anomalies.entry(what.to_string()).or_default() += 1;
    }

    /// Expects `n` tasks to send or receive (`None`: unknown, the default): once they have,
    /// they are announced and their events flow as they come, rather than at the end. A task
    /// sending or receiving after them is left out of the trace (noted, its events counted
    /// as lost).
    pub fn expecting(mut self, n: Option<usize>) -> Self {
        self.roster.expect(n);
        self
    }

    /// Task `tgid`, made part of the trace.
    fn member(&mut self, tgid: u32) -> &mut Proc {
        let clock = &self.clock;
        self.roster
            .join(tgid, || clock.name_of(tgid), &mut self.anomalies)
    }

    /// Consumes one record, handing its events to `sink` once every expected task is known.
    pub fn record(&mut self, rec: &Record, sink: &mut dyn EventSink) {
        self.clock.observe(rec);
        match RecordKind::from_raw(rec.kind) {
            Some(RecordKind::CallEntry) => self.entry(rec),
            Some(RecordKind::CallExit) => self.exit(rec),
            Some(RecordKind::Exit) => {
                self.roster
                    .exit(rec.tgid, rec.tid, rec.cpu_ns, &mut self.clock)
            }
            _ => {}
        }
        self.roster.hand_out(&mut self.clock, sink);
    }

    /// Events held back and events left out so far.
    pub fn backlog(&self) -> Backlog {
        self.roster.backlog()
    }

    fn entry(&mut self, rec: &Record) {
        if !self.tasks.contains_key(&rec.tgid) {
            let name = self.clock.name_of(rec.tgid);
            let t = self.tasks.entry(rec.tgid).or_default();
            t.excluded = name.starts_with(&format!("{GROUP_SERVER}["));
        }
        let t = self.tasks.entry(rec.tgid).or_default();
        if t.excluded {
            return;
        }
        let stack = t.calls.entry(rec.tid).or_default();
        let nested = !stack.is_empty();
        // A group call sends to the group server: learn its task id.
        let in_group_call = stack
            .first()
            .is_some_and(|o| matches!(o.fn_id, pvm::JOINGROUP | pvm::BCAST | pvm::BARRIER));
        if in_group_call && rec.fn_id == pvm::SEND {
            let server = rec.args[0] as i32;
            if !self.servers.contains(&server) {
                self.servers.push(server);
            }
        }
        let t = self.tasks.get_mut(&rec.tgid).expect("inserted above");
        let stack = t.calls.entry(rec.tid).or_default();
        stack.push(Open {
            fn_id: rec.fn_id,
            args: rec.args,
            cpu_ns: rec.cpu_ns,
            nested,
            coll: None,
        });
        if nested {
            return;
        }
        let (packed, me) = (t.packed, t.tid);
        let mem = &rec.mem[..usize::from(rec.mem_len).min(rec.mem.len())];
        let a = rec.args;
        let mut pack = |n: u64| {
            if let Some(t) = self.tasks.get_mut(&rec.tgid) {
                t.packed += n;
            }
        };
        match rec.fn_id {
            id if item_size(id).is_some() => {
                pack((a[1] as u32 as u64) * item_size(id).unwrap_or(0));
            }
            pvm::PKSTR => match mem.iter().position(|&b| b == 0) {
                Some(n) => pack(n as u64 + 1),
                None => {
                    if let Some(t) = self.tasks.get_mut(&rec.tgid) {
                        t.packed_unknown = true;
                    }
                }
            },
            pvm::SEND => self.send(rec, &[a[0] as i32], a[1] as i32, packed),
            pvm::PSEND => {
                let bytes = (a[3] as u32 as u64) * datatype_size(a[4] as u32 as u64);
                self.send(rec, &[a[0] as i32], a[1] as i32, bytes);
            }
            pvm::MCAST => {
                let n = a[1] as u32 as usize;
                if n > MCAST_MAX {
                    self.note("pvm_mcast to more tasks than a record holds (64)");
                }
                let tids: Vec<i32> = mem
                    .chunks_exact(4)
                    .take(n)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                self.send(rec, &tids, a[2] as i32, packed);
            }
            pvm::BCAST => match group_name(mem) {
                Some(g) => {
                    let others: Vec<i32> = self
                        .groups
                        .get(&g)
                        .map(|m| m.iter().copied().filter(|&x| Some(x) != me).collect())
                        .unwrap_or_default();
                    self.send(rec, &others, a[1] as i32, packed);
                }
                None => self.note("pvm_bcast to an unreadable group name"),
            },
            pvm::BARRIER => match group_name(mem) {
                Some(g) => self.barrier(rec, g, a[1] as i32),
                None => self.note("pvm_barrier of an unreadable group name"),
            },
            _ => {}
        }
    }

    /// Enters barrier number n (this task's n-th) of group `g` with `count` participants
    /// (-1: every member).
    fn barrier(&mut self, rec: &Record, g: String, count: i32) {
        let size = if count > 0 {
            count as u32
        } else {
            self.groups.get(&g).map_or(1, |m| m.len() as u32)
        };
        let t = self.tasks.entry(rec.tgid).or_default();
        let seq = t.barriers.entry(g.clone()).or_default();
        let key = (g, *seq);
        *seq += 1;
        let (coll, left) = self.barriers.entry(key.clone()).or_insert_with(|| {
            self.next_coll += 1;
            (self.next_coll - 1, size)
        });
        let coll = *coll;
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.barriers.remove(&key);
        }
        if let Some(open) = t.calls.get_mut(&rec.tid).and_then(|s| s.last_mut()) {
            open.coll = Some(coll);
        }
        let p = self.member(rec.tgid);
        p.timeline.emit(
            rec.tid,
            rec.cpu_ns,
            EventKind::CollStart {
                coll,
                op: CollOp::Barrier,
                size,
                bytes: 0,
            },
        );
        p.stats.collectives += 1;
    }

    /// Emits one `Send` per destination at the entry `rec` and queues the messages.
    fn send(&mut self, rec: &Record, dsts: &[i32], tag: i32, bytes: u64) {
        let src = self.tasks.get(&rec.tgid).and_then(|t| t.tid).unwrap_or(-1);
        let dsts: Vec<i32> = dsts
            .iter()
            .copied()
            .filter(|d| !self.servers.contains(d))
            .collect();
        // Only messages of the program count: the group library's requests to the group
        // server carry the group's name as a string, which needs no size.
        if dsts.is_empty() {
            return;
        }
        if self.tasks.get(&rec.tgid).is_some_and(|t| t.packed_unknown) {
            self.note("PVM send of unknown size (a packed string longer than 255 bytes)");
        }
        if src < 0 {
            self.note("PVM send by a task whose id is unknown (no pvm_mytid seen)");
        }
        for dst in dsts {
            let msg = self.next_msg;
            self.next_msg += 1;
            let p = self.member(rec.tgid);
            p.stats.sends += 1;
            p.stats.send_bytes += bytes;
            p.timeline.emit(
                rec.tid,
                rec.cpu_ns,
                EventKind::Send {
                    msg,
                    bytes,
                    rendezvous: false,
                },
            );
            self.queues.entry(dst).or_default().push_back(Pending {
                msg,
                src,
                tag,
                bytes,
                sender: rec.tgid,
            });
        }
    }

    fn exit(&mut self, rec: &Record) {
        let Some(t) = self.tasks.get_mut(&rec.tgid) else {
            return;
        };
        let Some(open) = t.calls.get_mut(&rec.tid).and_then(Vec::pop) else {
            return;
        };
        if open.nested || open.fn_id != rec.fn_id {
            return;
        }
        let ret = rec.args[0] as i64 as i32;
        let a = open.args;
        if t.excluded {
            return;
        }
        match open.fn_id {
            pvm::MYTID if ret > 0 => t.tid = Some(ret),
            pvm::INITSEND => {
                t.packed = 0;
                t.packed_unknown = false;
            }
            pvm::RECV | pvm::PRECV => {
                let from = if open.fn_id == pvm::PRECV && rec.mem_len >= 4 {
                    i32::from_le_bytes([rec.mem[0], rec.mem[1], rec.mem[2], rec.mem[3]])
                } else {
                    a[0] as i32
                };
                let ok = if open.fn_id == pvm::RECV {
                    ret > 0
                } else {
                    ret >= 0
                };
                if ok {
                    self.receive(rec, open.cpu_ns, from, a[1] as i32);
                }
            }
            pvm::NRECV | pvm::TRECV if ret > 0 => {
                self.receive(rec, open.cpu_ns, a[0] as i32, a[1] as i32);
            }
            pvm::JOINGROUP if ret >= 0 => {
                let mem = &rec.mem[..usize::from(rec.mem_len).min(rec.mem.len())];
                match (t.tid, group_name(mem)) {
                    (Some(me), Some(g)) => {
                        let members = self.groups.entry(g).or_default();
                        if !members.contains(&me) {
                            members.push(me);
                        }
                    }
                    _ => self.note("pvm_joingroup by an unknown task or of an unreadable group"),
                }
            }
            pvm::BARRIER => {
                if let (Some(coll), Some(p)) = (open.coll, self.roster.get_mut(rec.tgid)) {
                    p.timeline
                        .emit(rec.tid, rec.cpu_ns, EventKind::CollEnd { coll });
                }
            }
            _ => {}
        }
    }

    /// A receive of a message from `from` with `tag` (-1: any) returned at `rec`; it began
    /// at the thread's CPU clock `entry_cpu`.
    fn receive(&mut self, rec: &Record, entry_cpu: u64, from: i32, tag: i32) {
        if self.servers.contains(&from) {
            return;
        }
        let me = self.tasks.get(&rec.tgid).and_then(|t| t.tid);
        let found = me.and_then(|me| {
            let q = self.queues.get_mut(&me)?;
            let i = q
                .iter()
                .position(|m| (from == -1 || m.src == from) && (tag == -1 || m.tag == tag))?;
            q.remove(i)
        });
        if me.is_none() {
            self.note("PVM receive by a task whose id is unknown (no pvm_mytid seen)");
        }
        // Its send is not in the trace.
        let from_beyond = found.is_some_and(|m| self.roster.is_beyond(m.sender));
        if from_beyond {
            self.note(
                "receive of a message from a task left out of the trace (a Keepalive instead)",
            );
        }
        let p = self.member(rec.tgid);
        // No poll-like waits are recorded for PVM: the receive is the wait.
        let _ = p.timeline.recv_start(rec.tid, entry_cpu, None);
        match found {
            Some(m) => {
                p.stats.recvs += 1;
                p.stats.recv_bytes += m.bytes;
                let kind = if from_beyond {
                    EventKind::Keepalive
                } else {
                    EventKind::RecvEnd { msg: m.msg }
                };
                p.timeline.emit(rec.tid, rec.cpu_ns, kind);
            }
            None => {
                p.timeline.emit(rec.tid, rec.cpu_ns, EventKind::Keepalive);
                self.unmatched_recvs += 1;
            }
        }
    }

    /// Ends the capture: announces the tasks that sent or received, in order of first
    /// message, unless that has happened, and hands out their events.
    pub fn finish(mut self, sink: &mut dyn EventSink) -> Summary {
        let mut anomalies = std::mem::take(&mut self.anomalies);
        let handed = self.roster.finish(&self.clock, sink, &mut anomalies);
        if handed.procs.is_empty() {
            let what = "no traced process sent or received a PVM message";
            *anomalies.entry(what.to_string()).or_default() += 1;
        }
        Summary {
            procs: handed.procs,
            stats: handed.stats,
            lost_events: handed.lost_events,
            unmatched_sends: self.queues.values().map(|q| q.len() as u64).sum(),
            unmatched_recvs: self.unmatched_recvs,
            measured_seconds: self.clock.measured_seconds(),
            anomalies,
            ..Summary::default()
        }
    }
}

impl RecordCapture for PvmCapture {
    fn record(&mut self, rec: &Record, sink: &mut dyn EventSink) {
        PvmCapture::record(self, rec, sink);
    }
    fn finish(self: Box<Self>, sink: &mut dyn EventSink) -> Summary {
        PvmCapture::finish(*self, sink)
    }
    fn backlog(&self) -> Backlog {
        PvmCapture::backlog(self)
    }
}
