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
//! `pvm_psend`.
//!
//! # Which message a receive took
//!
//! PVM delivers a pair of tasks' messages in order, and a receive takes the first message in
//! its queue that matches its source and tag (-1: any); so the `k`-th message from task `s` to
//! task `d` with tag `t` is the `k`-th that `d` receives from `s` with tag `t`. A message's id
//! is a hash of (`s`, `d`, `t`, `k`) ([`ids::pvm_message`]), which the sender and the
//! receiver compute alike: task ids are unique in the virtual machine, so two captures on two
//! hosts (cluster mode, [`PvmCapture::across_hosts`]) name a message between their tasks the
//! same without seeing each other's records.
//!
//! The receiver learns `s` and `t` (its arguments may be -1) from the message itself: at the
//! return of `pvm_recv`, `pvm_nrecv` and `pvm_trecv`, the kernel side reads the head of the
//! `struct pmsg` that libpvm3's variable `pvmrbuf` ([`RECEIVE_BUFFER`]) then points at
//! (`m_mid`, `m_len`, `m_tag`, `m_src`; offsets checked against `pvm_bufinfo` of the installed
//! library), finding the variable through its GOT slot from the probed function's address
//! (`lbf_common::GlobalPtr`). The head is used only if its `m_mid` is the buffer id the call
//! returned. `pvm_precv` takes the head read at the return of the `pvm_recv` it makes inside.
//! Without a head (the read failed), a receive takes the first queued message of this
//! capture matching its source and tag, as before; in cluster mode a message from another
//! host then stays unmatched (a `Keepalive`). Message contexts (`pvm_setcontext`) are not
//! told apart, nor is the order of receives that a `pvm_recvf` matching function changes.
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
//! | `pvm_bcast` | one `Send` per destination of the `pvm_mcast` it makes inside, at its entry |
//! | `pvm_barrier` | `CollStart` at the entry, `CollEnd` at the return (one collective per group and barrier number, [`ids::pvm_barrier`]) |
//!
//! The group library talks to the group server (`pvmgs`) with `pvm_send`/`pvm_recv` from
//! inside these calls: calls nested in a probed call are ignored (but for the `pvm_mcast` of
//! a `pvm_bcast` and the `pvm_recv` of a `pvm_precv`), as are messages to and from
//! the group server's task id (from group calls not probed, like `pvm_lvgroup`); `pvmgs`
//! itself is not part of the trace.
//!
//! A process appears in the trace once it sends or receives; pvmd, the console and shells do
//! not. Process ids follow the order of first message (in cluster mode each host's capture
//! numbers its own tasks so, and the node maps them to the ids it streams). As for sockets, events are handed out
//! at the end, unless the capture is told how many tasks to expect
//! ([`PvmCapture::expecting`]): then they flow once that many have sent or received (see
//! [`super::roster`]).

use rustc_hash::FxHashMap;
use std::collections::VecDeque;

use lbf_common::{pvm, FnReads, GlobalPtr, MemRead, Record, RecordKind};

use crate::anomaly::{Anomalies, Anomaly};
use crate::gaps::LostRecords;
use crate::ids;
use crate::record_capture::{Backlog, RecordCapture};
use crate::roster::{Labels, Proc, Roster};
use crate::timeline::{At, RunClock};
use crate::{EventSink, Summary};
use lbf_model::event::{CollOp, EventKind, MsgId};

/// Most destinations of one `pvm_mcast` a record holds (256 bytes of 4-byte task ids).
const MCAST_MAX: usize = 64;

/// Bytes of a group name read at the entry of a group call.
const GROUP_NAME_BYTES: u16 = 64;

/// The PVM group server, a task of PVM's own: never part of the trace.
const GROUP_SERVER: &str = "pvmgs";

/// The libpvm3 variable holding the active receive buffer (`struct pmsg *pvmrbuf`), which a
/// receive sets to the message it returns.
pub const RECEIVE_BUFFER: &str = "pvmrbuf";

/// Where the fields read of a `struct pmsg` (PVM 3.4, x86-64) start: `m_ref`, then `m_mid`,
/// `m_len`, `m_ctx`, `m_tag`, `m_wid`, `m_src`, `m_dst` (32 bytes of `int`s).
const PMSG_HEAD_OFFSET: u32 = 40;
/// Bytes read of a `struct pmsg` from [`PMSG_HEAD_OFFSET`].
const PMSG_HEAD_BYTES: u16 = 32;

/// The host part of a PVM task id (`TIDHOST`): the index of the task's pvmd in the virtual
/// machine, so two tasks run on one host exactly when their task ids share it.
const TID_HOST: i32 = 0x3ffc_0000;

/// What the head of a received message says (see [`PMSG_HEAD_OFFSET`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Delivered {
    /// The buffer id (`m_mid`), which the receive returns.
    mid: i32,
    /// The body's length in bytes.
    len: u64,
    tag: i32,
    /// The sending task.
    src: i32,
}

impl Delivered {
    /// The head read at a receive's return, if the read succeeded.
    fn read(rec: &Record) -> Option<Self> {
        if usize::from(rec.mem_len) < usize::from(PMSG_HEAD_BYTES) {
            return None;
        }
        let int = |field: usize| {
            let at = field * 4;
            i32::from_le_bytes([
                rec.mem[at],
                rec.mem[at + 1],
                rec.mem[at + 2],
                rec.mem[at + 3],
            ])
        };
        Some(Delivered {
            mid: int(1),
            len: int(2).max(0) as u64,
            tag: int(4),
            src: int(6),
        })
    }
}

/// How a PVM capture's notes name its processes.
const LABELS: Labels = Labels {
    one: "task",
    many: "tasks",
    joins: "sent or received a PVM message",
};

/// The memory reads of the probed PVM functions: the string of `pvm_pkstr`, the task ids of
/// `pvm_mcast` (at entry), the sender of `pvm_precv` and the head of the message a receive
/// returns (at the return; from the library's variable [`RECEIVE_BUFFER`], whose distance
/// from each function the probe fills in).
pub fn fn_reads() -> Vec<(u16, FnReads)> {
    let at_entry = |ptr_arg, count_arg, len| FnReads {
        entry: MemRead {
            ptr_arg,
            count_arg,
            len,
        },
        ..FnReads::default()
    };
    // At the return of a receive: the head of the message it made the active receive buffer.
    let delivered = FnReads {
        exit: MemRead {
            ptr_arg: MemRead::FROM_GLOBAL,
            count_arg: 0,
            len: PMSG_HEAD_BYTES,
        },
        global: GlobalPtr {
            delta: 0,
            loads: 2,
            offset: PMSG_HEAD_OFFSET,
        },
        ..FnReads::default()
    };
    vec![
        (pvm::RECV, delivered),
        (pvm::NRECV, delivered),
        (pvm::TRECV, delivered),
        (pvm::PKSTR, at_entry(1, 0, 256)),
        // At the return: the library has read the name, so its page is resident.
        (
            pvm::JOINGROUP,
            FnReads {
                exit: MemRead {
                    ptr_arg: 1,
                    count_arg: 0,
                    len: GROUP_NAME_BYTES,
                },
                ..FnReads::default()
            },
        ),
        (pvm::BCAST, at_entry(1, 0, GROUP_NAME_BYTES)),
        (pvm::BARRIER, at_entry(1, 0, GROUP_NAME_BYTES)),
        (pvm::MCAST, at_entry(1, 2, 4)),
        (
            pvm::PRECV,
            FnReads {
                exit: MemRead {
                    ptr_arg: 6,
                    count_arg: 0,
                    len: 4,
                },
                ..FnReads::default()
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

/// The message a receive took.
#[derive(Clone, Copy, Debug)]
enum Found {
    /// One sent on this host, taken off its queue.
    Here(Pending),
    /// One sent on another host (cluster mode), whose capture gives it the id `msg`.
    Elsewhere { msg: MsgId, bytes: u64 },
    /// None this capture can name: its send is not in the trace.
    Nothing,
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
    /// The message a `pvm_recv` made inside this call returned (`pvm_precv` receives so).
    delivered: Option<Delivered>,
}

/// One traced process's PVM state (its events are in the roster once it sends or receives).
#[derive(Debug, Default)]
struct Task {
    tid: Option<i32>,
    packed: u64,
    /// Something packed since `pvm_initsend` has an unknown size (a string the record could
    /// not hold).
    packed_unknown: bool,
    calls: FxHashMap<u32, Vec<Open>>,
    /// Barriers entered so far, per group.
    barriers: FxHashMap<String, u64>,
    /// The group server or another process that is never part of the trace.
    excluded: bool,
}

/// Turns PVM call records into events; see the module documentation.
pub struct PvmCapture {
    tasks: FxHashMap<u32, Task>,
    /// The tasks that sent or received, in order of first message, and their events.
    roster: Roster,
    /// Messages not yet received, per destination task id, in order of sending.
    queues: FxHashMap<i32, VecDeque<Pending>>,
    /// Messages sent so far per (source, destination, tag): the next one's number.
    sent: FxHashMap<(i32, i32, i32), u64>,
    /// Messages received so far per (source, destination, tag).
    received: FxHashMap<(i32, i32, i32), u64>,
    /// Whether other hosts' tasks are captured elsewhere (cluster mode): messages to and from
    /// them keep their ids without their other end here.
    across_hosts: bool,
    /// Task ids of the group server, learnt from the sends inside group calls: messages to and
    /// from it are PVM's, not the program's (the group calls not probed, like `pvm_lvgroup`,
    /// talk to it with `pvm_send` too).
    servers: Vec<i32>,
    /// Task ids of each group's members.
    groups: FxHashMap<String, Vec<i32>>,
    /// Barriers some members of the group have not entered yet: (group, barrier number) ->
    /// members still to enter.
    barriers: FxHashMap<(String, u64), u32>,
    clock: RunClock,
    anomalies: Anomalies,
    /// Records the kernel side lost, per process.
    lost: LostRecords,
    unmatched_recvs: u64,
}

impl PvmCapture {
    /// A capture naming `host` as its processes' host.
    pub fn new(host: impl Into<String>) -> Self {
        PvmCapture {
            tasks: FxHashMap::default(),
            roster: Roster::new(host, LABELS),
            queues: FxHashMap::default(),
            sent: FxHashMap::default(),
            received: FxHashMap::default(),
            across_hosts: false,
            servers: Vec::new(),
            groups: FxHashMap::default(),
            barriers: FxHashMap::default(),
            clock: RunClock::default(),
            anomalies: Anomalies::new(),
            lost: LostRecords::default(),
            unmatched_recvs: 0,
        }
    }

    fn note(&mut self, what: Anomaly) {
        crate::anomaly::note(&mut self.anomalies, what);
    }

    /// Expects `n` tasks to send or receive (`None`: unknown, the default): once they have,
    /// they are announced and their events flow as they come, rather than at the end. A task
    /// sending or receiving after them is left out of the trace (noted, its events counted
    /// as lost).
    pub fn expecting(mut self, n: Option<usize>) -> Self {
        self.roster.expect(n);
        self
    }

    /// Makes this a capture of one host's part of a virtual machine that spans several
    /// (cluster mode: the other hosts' tasks are captured there): a message between a task of
    /// this host and one of another host gets its id ([`ids::pvm_message`]) without its other
    /// end, which the other host's capture gives the same id.
    pub fn across_hosts(mut self) -> Self {
        self.across_hosts = true;
        self
    }

    /// Whether a message from task `src` to task `dst` has both ends in this capture: always
    /// on one host; in cluster mode, when the two share a host.
    fn both_ends_here(&self, src: i32, dst: i32) -> bool {
        !self.across_hosts || (src & TID_HOST) == (dst & TID_HOST)
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
                    .exit(rec.tgid, rec.tid, At::cpu(rec.cpu_ns), &mut self.clock)
            }
            Some(RecordKind::Attach) => self.roster.attached(rec.tgid, rec.tid, rec.cpu_ns),
            Some(RecordKind::Lost) => self.lost.record(rec),
            Some(RecordKind::ProcCpu) => self.roster.procedure_cpu(rec),
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
        // `pvm_bcast` sends with `pvm_mcast` to the members it looked up: its messages, made at
        // its entry's CPU clock.
        let bcast_entry = stack
            .first()
            .filter(|o| o.fn_id == pvm::BCAST && rec.fn_id == pvm::MCAST && stack.len() == 1)
            .map(|o| (o.cpu_ns, o.args[1] as i32));
        let t = self.tasks.get_mut(&rec.tgid).expect("inserted above");
        let stack = t.calls.entry(rec.tid).or_default();
        stack.push(Open {
            fn_id: rec.fn_id,
            args: rec.args,
            cpu_ns: rec.cpu_ns,
            nested,
            coll: None,
            delivered: None,
        });
        let packed = t.packed;
        let mem = &rec.mem[..usize::from(rec.mem_len).min(rec.mem.len())];
        let a = rec.args;
        if let Some((cpu_ns, tag)) = bcast_entry {
            let tids = self.mcast_tids(mem, a[1]);
            self.send(rec.tgid, rec.tid, cpu_ns, &tids, tag, packed);
        }
        if nested {
            return;
        }
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
            pvm::SEND => self.send(
                rec.tgid,
                rec.tid,
                rec.cpu_ns,
                &[a[0] as i32],
                a[1] as i32,
                packed,
            ),
            pvm::PSEND => {
                let bytes = (a[3] as u32 as u64) * datatype_size(a[4] as u32 as u64);
                self.send(
                    rec.tgid,
                    rec.tid,
                    rec.cpu_ns,
                    &[a[0] as i32],
                    a[1] as i32,
                    bytes,
                );
            }
            pvm::MCAST => {
                let tids = self.mcast_tids(mem, a[1]);
                self.send(rec.tgid, rec.tid, rec.cpu_ns, &tids, a[2] as i32, packed);
            }
            pvm::BARRIER => match group_name(mem) {
                Some(g) => self.barrier(rec, g, a[1] as i32),
                None => self.note(Anomaly::BarrierOfUnreadableGroup),
            },
            _ => {}
        }
    }

    /// The destinations of a `pvm_mcast` to `count` tasks whose entry read `mem`.
    fn mcast_tids(&mut self, mem: &[u8], count: u64) -> Vec<i32> {
        let n = count as u32 as usize;
        if n > MCAST_MAX {
            self.note(Anomaly::McastTooWide);
        }
        mem.chunks_exact(4)
            .take(n)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
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
        let coll = ids::pvm_barrier(&g, *seq);
        let key = (g, *seq);
        *seq += 1;
        let left = self.barriers.entry(key.clone()).or_insert(size);
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
            At::cpu(rec.cpu_ns),
            EventKind::CollStart {
                coll,
                op: CollOp::Barrier,
                size,
                bytes: 0,
            },
        );
        p.stats.collectives += 1;
    }

    /// Emits one `Send` of `bytes` per destination in `dsts` with `tag`, made by thread `tid`
    /// of process `tgid` at its CPU clock `cpu_ns`, and queues the messages whose receiver
    /// this capture sees.
    fn send(&mut self, tgid: u32, tid: u32, cpu_ns: u64, dsts: &[i32], tag: i32, bytes: u64) {
        let src = self.tasks.get(&tgid).and_then(|t| t.tid).unwrap_or(-1);
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
        if self.tasks.get(&tgid).is_some_and(|t| t.packed_unknown) {
            self.note(Anomaly::PvmSendOfUnknownSize);
        }
        if src < 0 {
            self.note(Anomaly::PvmSendByUnknownTask);
        }
        for dst in dsts {
            let k = self.sent.entry((src, dst, tag)).or_default();
            let msg = ids::pvm_message(src, dst, tag, *k);
            *k += 1;
            let p = self.member(tgid);
            p.stats.sends += 1;
            p.stats.send_bytes += bytes;
            p.timeline.emit(
                tid,
                At::cpu(cpu_ns),
                EventKind::Send {
                    after: 0,
                    msg,
                    bytes,
                    rendezvous: false,
                },
            );
            if self.both_ends_here(src, dst) {
                self.queues.entry(dst).or_default().push_back(Pending {
                    msg,
                    src,
                    tag,
                    bytes,
                    sender: tgid,
                });
            }
        }
    }

    fn exit(&mut self, rec: &Record) {
        let Some(t) = self.tasks.get_mut(&rec.tgid) else {
            return;
        };
        let Some(open) = t.calls.get_mut(&rec.tid).and_then(Vec::pop) else {
            return;
        };
        if open.fn_id != rec.fn_id {
            return;
        }
        let ret = rec.args[0] as i64 as i32;
        if open.nested {
            // The `pvm_recv` inside a `pvm_precv`: the message it returned is the precv's.
            let outer = t.calls.get_mut(&rec.tid).and_then(|s| s.last_mut());
            if let Some(outer) = outer.filter(|o| o.fn_id == pvm::PRECV && rec.fn_id == pvm::RECV) {
                outer.delivered = Delivered::read(rec).filter(|d| d.mid == ret);
            }
            return;
        }
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
            pvm::RECV | pvm::NRECV | pvm::TRECV if ret > 0 => {
                // The head read is of the buffer the receive returned, or of none.
                let delivered = Delivered::read(rec).filter(|d| d.mid == ret);
                self.receive(rec, open.cpu_ns, a[0] as i32, a[1] as i32, delivered);
            }
            pvm::PRECV if ret >= 0 => {
                let from = if rec.mem_len >= 4 {
                    i32::from_le_bytes([rec.mem[0], rec.mem[1], rec.mem[2], rec.mem[3]])
                } else {
                    a[0] as i32
                };
                self.receive(rec, open.cpu_ns, from, a[1] as i32, open.delivered);
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
                    _ => self.note(Anomaly::JoinGroupUnknown),
                }
            }
            pvm::BARRIER => {
                if let (Some(coll), Some(p)) = (open.coll, self.roster.get_mut(rec.tgid)) {
                    p.timeline
                        .emit(rec.tid, At::cpu(rec.cpu_ns), EventKind::CollEnd { coll });
                }
            }
            _ => {}
        }
    }

    /// A receive of a message from `from` with `tag` (-1: any) returned at `rec`; it began
    /// at the thread's CPU clock `entry_cpu`. `delivered`: the head of the message it returned,
    /// which names the message ([`ids::pvm_message`]); without it (the read failed), the
    /// first queued message matching `from` and `tag`, which only a sender on this host has.
    fn receive(
        &mut self,
        rec: &Record,
        entry_cpu: u64,
        from: i32,
        tag: i32,
        delivered: Option<Delivered>,
    ) {
        let from = delivered.map_or(from, |d| d.src);
        if self.servers.contains(&from) {
            return;
        }
        let me = self.tasks.get(&rec.tgid).and_then(|t| t.tid);
        let found = match (me, delivered) {
            (Some(me), Some(d)) => {
                let k = self.received.entry((d.src, me, d.tag)).or_default();
                let msg = ids::pvm_message(d.src, me, d.tag, *k);
                *k += 1;
                let local = self.queues.get_mut(&me).and_then(|q| {
                    let i = q.iter().position(|m| m.msg == msg)?;
                    q.remove(i)
                });
                match local {
                    Some(m) => Found::Here(m),
                    None if !self.both_ends_here(d.src, me) => {
                        Found::Elsewhere { msg, bytes: d.len }
                    }
                    None => Found::Nothing,
                }
            }
            (Some(me), None) => {
                self.note(Anomaly::PvmRecvHeadUnread);
                let queued = self.queues.get_mut(&me).and_then(|q| {
                    let i = q.iter().position(|m| {
                        (from == -1 || m.src == from) && (tag == -1 || m.tag == tag)
                    })?;
                    q.remove(i)
                });
                match queued {
                    Some(m) => {
                        *self.received.entry((m.src, me, m.tag)).or_default() += 1;
                        Found::Here(m)
                    }
                    None => Found::Nothing,
                }
            }
            (None, _) => {
                self.note(Anomaly::PvmRecvByUnknownTask);
                Found::Nothing
            }
        };
        // Its send is not in the trace.
        let from_beyond = matches!(found, Found::Here(m) if self.roster.is_beyond(m.sender));
        if from_beyond {
            self.note(Anomaly::RecvFromLeftOut { labels: LABELS });
        }
        let p = self.member(rec.tgid);
        // No poll-like waits are recorded for PVM: the receive is the wait.
        let _ = p.timeline.recv_start(rec.tid, At::cpu(entry_cpu), None);
        let (msg, bytes) = match found {
            Found::Here(m) if !from_beyond => (Some(m.msg), m.bytes),
            Found::Here(m) => (None, m.bytes),
            Found::Elsewhere { msg, bytes } => (Some(msg), bytes),
            Found::Nothing => (None, 0),
        };
        if !matches!(found, Found::Nothing) {
            p.stats.recvs += 1;
            p.stats.recv_bytes += bytes;
        }
        let kind = msg.map_or(EventKind::Keepalive, |msg| EventKind::RecvEnd { msg });
        p.timeline.emit(rec.tid, At::cpu(rec.cpu_ns), kind);
        if matches!(found, Found::Nothing) {
            self.unmatched_recvs += 1;
        }
    }

    /// Ends the capture: announces the tasks that sent or received, in order of first
    /// message, unless that has happened, and hands out their events.
    pub fn finish(mut self, sink: &mut dyn EventSink) -> Summary {
        let mut anomalies = std::mem::take(&mut self.anomalies);
        let gaps = self.lost.gaps(&self.clock, |tgid| self.roster.id_of(tgid));
        let handed = self.roster.finish(&self.clock, sink, &mut anomalies);
        if handed.procs.is_empty() {
            crate::anomaly::note(&mut anomalies, Anomaly::NoPvmMessage);
        }
        Summary {
            procs: handed.procs,
            stats: handed.stats,
            lost_events: handed.lost_events,
            unmatched_sends: self.queues.values().map(|q| q.len() as u64).sum(),
            unmatched_recvs: self.unmatched_recvs,
            measured_seconds: self.clock.measured_seconds(),
            anomalies,
            gaps,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventLog;
    use lbf_common::{ARG_WORDS, MEM_BYTES};
    use lbf_model::event::Event;

    /// Task ids of a virtual machine of two hosts: a master on host 1, a worker on host 2.
    const MASTER: i32 = 0x40002;
    const WORKER: i32 = 0x80001;

    /// Feeds a capture records of one task (process `tgid`), each at 1 µs more CPU.
    struct Task<'a> {
        capture: &'a mut PvmCapture,
        log: &'a mut EventLog,
        tgid: u32,
        cpu: u64,
    }

    impl Task<'_> {
        fn record(&mut self, kind: RecordKind, fn_id: u16, args: &[u64], mem: &[u8]) {
            self.cpu += 1_000;
            let mut r = Record {
                kind: kind as u16,
                fn_id,
                mem_len: mem.len() as u16,
                part: 0,
                tgid: self.tgid,
                tid: self.tgid,
                ts_ns: self.cpu,
                cpu_ns: self.cpu,
                args: [0; ARG_WORDS],
                mem: [0; MEM_BYTES],
            };
            r.args[..args.len()].copy_from_slice(args);
            r.mem[..mem.len()].copy_from_slice(mem);
            self.capture.record(&r, self.log);
        }

        /// A call without memory reads returning `ret`.
        fn call(&mut self, fn_id: u16, args: &[u64], ret: u64) {
            self.record(RecordKind::CallEntry, fn_id, args, &[]);
            self.record(RecordKind::CallExit, fn_id, &[ret], &[]);
        }

        /// `pvm_send` of one int to `to` with `tag`.
        fn send(&mut self, to: i32, tag: i32) {
            self.call(pvm::INITSEND, &[0], 1);
            self.call(pvm::PKINT, &[0, 1, 1], 0);
            self.call(pvm::SEND, &[to as u32 as u64, tag as u64], 0);
        }

        /// `pvm_recv(-1, -1)` returning buffer 5, whose head says it came from `src` with
        /// `tag` (None: the head was not read).
        fn recv_any(&mut self, head: Option<(i32, i32)>) {
            let any = u64::from(u32::MAX);
            self.record(RecordKind::CallEntry, pvm::RECV, &[any, any], &[]);
            let mut mem = Vec::new();
            if let Some((src, tag)) = head {
                for field in [1, 5, 4, 0, tag, 0, src, 0] {
                    mem.extend_from_slice(&field.to_le_bytes());
                }
            }
            self.record(RecordKind::CallExit, pvm::RECV, &[5, any, any], &mem);
        }
    }

    /// The message ids of the `send` and `recv_end` events of `log`.
    fn ids(log: &EventLog) -> (Vec<MsgId>, Vec<MsgId>) {
        let of = |want_send: bool| {
            log.events
                .iter()
                .filter_map(|e: &Event| match e.kind {
                    EventKind::Send { msg, .. } if want_send => Some(msg),
                    EventKind::RecvEnd { msg } if !want_send => Some(msg),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        (of(true), of(false))
    }

    /// Runs a master on one capture and a worker on another (two hosts): the master sends the
    /// worker two tasks, the worker answers each; `heads` says whether receives read their
    /// message's head.
    fn two_hosts(heads: bool) -> ((EventLog, Summary), (EventLog, Summary)) {
        let run = |tgid: u32, me: i32, peer: i32, master: bool| {
            let mut capture = PvmCapture::new("h").expecting(Some(1)).across_hosts();
            let mut log = EventLog::default();
            let mut t = Task {
                capture: &mut capture,
                log: &mut log,
                tgid,
                cpu: 0,
            };
            t.call(pvm::MYTID, &[], me as u64);
            for _ in 0..2 {
                if master {
                    t.send(peer, 1);
                    t.recv_any(heads.then_some((peer, 3)));
                } else {
                    t.recv_any(heads.then_some((peer, 1)));
                    t.send(peer, 3);
                }
            }
            t.record(RecordKind::Exit, 0, &[], &[]);
            let summary = capture.finish(&mut log);
            (log, summary)
        };
        (
            run(4_190_001, MASTER, WORKER, true),
            run(4_190_002, WORKER, MASTER, false),
        )
    }

    /// Each host's capture names the messages it sees one end of as the other host's does.
    #[test]
    fn captures_on_two_hosts_name_each_message_alike() {
        let ((master, ms), (worker, ws)) = two_hosts(true);
        let (master_sends, master_recvs) = ids(&master);
        let (worker_sends, worker_recvs) = ids(&worker);
        assert_eq!(master_sends.len(), 2);
        assert_eq!(master_sends, worker_recvs);
        assert_eq!(worker_sends, master_recvs);
        assert_ne!(master_sends[0], master_sends[1]);
        // Sends to the other host wait for no receive here.
        for s in [ms, ws] {
            assert_eq!((s.unmatched_sends, s.unmatched_recvs), (0, 0));
        }
    }

    /// Without the message's head a receive can only take a send of its own host: one from
    /// another host stays unmatched (a keepalive), and says why.
    #[test]
    fn without_the_head_a_message_from_another_host_is_unmatched() {
        let ((master, ms), _) = two_hosts(false);
        assert!(ids(&master).1.is_empty());
        assert_eq!(ms.unmatched_recvs, 2);
        assert!(ms.anomalies.contains_key(&Anomaly::PvmRecvHeadUnread));
    }

    /// On one host (lbf-trace) a receive of a queued send gets that send's id, whether the
    /// head was read or not.
    #[test]
    fn on_one_host_receives_take_the_queued_sends() {
        for heads in [true, false] {
            let mut capture = PvmCapture::new("h").expecting(Some(2));
            let mut log = EventLog::default();
            let (a, b) = (0x40002, 0x40003);
            let mut master = Task {
                capture: &mut capture,
                log: &mut log,
                tgid: 4_190_001,
                cpu: 0,
            };
            master.call(pvm::MYTID, &[], a as u64);
            master.send(b, 1);
            master.send(b, 2);
            let mut worker = Task {
                tgid: 4_190_002,
                cpu: 0,
                ..master
            };
            worker.call(pvm::MYTID, &[], b as u64);
            worker.recv_any(heads.then_some((a, 1)));
            worker.recv_any(heads.then_some((a, 2)));
            let summary = capture.finish(&mut log);
            let (sends, recvs) = ids(&log);
            assert_eq!(sends, recvs, "heads read: {heads}");
            assert_eq!(summary.unmatched_sends, 0);
        }
    }
}
