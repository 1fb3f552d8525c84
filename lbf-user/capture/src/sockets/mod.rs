//! Socket capture: turns the `Syscall` records of any program that talks over TCP, UDP or
//! UNIX sockets into the engine's per-process events, without modifying or knowing the
//! program.
//!
//! [`syscall`] decodes the records, [`resolve`] tells which descriptors are sockets and names
//! the channels both ends share (asking copies of the descriptors, [`fd_copy`], and
//! [`sock_diag`]; [`proc_net`] where no copy may be made), [`channels`] matches sends to
//! receives by byte offsets, [`super::timeline`] keeps each process's events in order until
//! their messages are known.
//!
//! # Events from calls
//!
//! | call | events |
//! | --- | --- |
//! | `write`, `writev`, `send`, `sendto`, `sendmsg` on a socket | `Send` at the return, one per message the bytes become (see [`channels`]), or a `Keepalive` when the bytes travel with a later message |
//! | `sendmmsg` | as above, per message of the vector (a long vector takes several records, handled as one call) |
//! | `sendfile`, `splice` into a socket | as a send of the bytes moved; `splice` out of a socket is a receive |
//! | `read`, `readv`, `recv`, `recvfrom`, `recvmsg`, `recvmmsg` returning bytes | `RecvStart` at the entry and `RecvEnd` at the return; right after a `poll`, `select` or `epoll_wait`, `RecvStart` at the wait's entry and `RecvEnd` at its return |
//! | receives returning nothing (end of stream, `EAGAIN`, `MSG_PEEK`) | none: their CPU goes to the next event |
//! | process exit | `Exit` |
//!
//! A process appears in the trace once it sends or receives on a socket; processes that never
//! do (shells, launchers) are left out. Process ids follow the order of first socket use.
//! That set is known only at the end of the capture, unless the capture is told how many
//! processes to expect ([`SocketCapture::expecting`]): then the events flow as soon as that
//! many have used a socket, each once it is settled (see [`super::roster`]); otherwise they
//! are handed out by [`SocketCapture::finish`].
//!
//! # Memory on a long run
//!
//! What the capture keeps is bounded by what is open, not by how long the program ran:
//! [`descriptors`] counts the descriptors holding each channel, and a channel's matching
//! state is freed (what is still open on it settled as at the end of a capture) once no
//! descriptor of either end is open in any process; a process's descriptors, waits and
//! roster entry go when it ends (its roster entry once its events have left, see
//! [`super::roster`]); tokens live only while their send or receive is unsettled. With
//! [`SocketCapture::expecting`], events leave as they settle, so a server handling many short
//! connections runs in constant memory ([`SocketCapture::backlog`] tells what is kept).
//!
//! # Limits
//!
//! - UDP receivers are told apart by port (see [`resolve::udp_channel`]); `sendmmsg`
//!   messages naming their own destination on an unconnected UDP socket are not matched
//!   (`sendto` and `sendmsg` are).
//! - Descriptors passed over UNIX sockets are followed when received by `recvmsg`, not by
//!   `recvmmsg`.
//! - Messages are matched where both ends are seen. A cluster node's capture
//!   ([`SocketCapture::matching_between_hosts`]) sees one end of a TCP connection to another
//!   host: it matches UNIX and loopback connections itself and hands a TCP connection's
//!   sends and receives on ([`EventSink::stream_op`]), in their place among the process's
//!   events, with its ends' closes ([`EventSink::stream_closed`]), for the builder to match
//!   with the same [`channels`]. UDP datagrams are not matched there at all (their other
//!   end may be on another host, which nothing tells).

pub mod channels;
pub mod descriptors;
pub mod fd_copy;
pub mod proc_net;
pub mod resolve;
pub mod sock_diag;
pub mod syscall;

use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;

use lbf_common::{Record, RecordKind};

use self::channels::{Channel, Channels, Direction, EndClosed, Endpoint, Outcome, Role, StreamOp};
use self::descriptors::{Descriptors, Fd};
use self::resolve::{SocketChannels, SocketResolver, Unidentified};
use self::syscall::Call;
use crate::anomaly::{note, Anomalies, Anomaly};
use crate::gaps::LostRecords;
use crate::record_capture::{Backlog, Kept, RecordCapture};
use crate::roster::{Labels, Proc, Roster};
use crate::timeline::{At, RunClock, Wait};
use crate::{EventSink, Summary};
use lbf_model::event::EventKind;

/// Why a descriptor is looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lookup {
    /// It was just made (connected) a socket: identify it while it is surely open.
    Early,
    /// A send or receive on a descriptor known to be a socket.
    UseOfSocket,
    /// A send or receive on a descriptor of a process attached while running.
    UseOfAny,
}

/// How a socket capture's notes name its processes.
const LABELS: Labels = Labels {
    one: "process",
    many: "processes",
    joins: "used a socket",
};

/// Turns `Syscall` and lifecycle records into events; see the module documentation.
pub struct SocketCapture {
    resolver: Box<dyn SocketResolver>,
    fds: Descriptors,
    /// Running processes traced since they started (forked or exec'd under the tracer):
    /// every socket they hold was made by a recorded call, so their other descriptors need
    /// no lookup. Descriptors of processes attached later are looked up on first use.
    born: FxHashSet<u32>,
    /// The processes that used a socket, in order of first use, and their events.
    roster: Roster,
    /// Per process, the `poll`-like wait its next receive continues.
    waits: FxHashMap<u32, Wait>,
    /// Names of the processes that made a recorded call, for the note when none used a
    /// socket: the running ones, and those that ended before any process used a socket.
    seen: BTreeMap<u32, String>,
    channels: Channels,
    /// Token of a send or receive -> (tgid, slot).
    tokens: FxHashMap<u64, (u32, u64)>,
    next_token: u64,
    clock: RunClock,
    anomalies: Anomalies,
    /// Records the kernel side lost, per process.
    lost: LostRecords,
    /// Sockets of families not captured, by family: normal in tools (`ip` uses netlink), so
    /// reported only when no process used a captured socket.
    other_families: Anomalies,
    unmatched_sends: u64,
    unmatched_recvs: u64,
    /// Per thread id, a `sendmmsg`/`recvmmsg` whose next part's record is still to come, with
    /// its process.
    held: FxHashMap<u32, (u32, syscall::Decoded)>,
    /// Whether TCP connections between hosts are left to be matched where both ends meet
    /// (see [`SocketCapture::matching_between_hosts`]).
    between_hosts: bool,
    /// The ends of such connections identified here, with the bytes they moved so far, until
    /// no descriptor holds them.
    ends: FxHashMap<(Direction, Role), u64>,
    /// Ends closed since the last record, to tell the sink.
    closed: Vec<EndClosed>,
}

impl SocketCapture {
    /// A capture asking `resolver` about descriptors and naming `host` as the processes' host.
    pub fn new(resolver: Box<dyn SocketResolver>, host: impl Into<String>) -> Self {
        SocketCapture {
            resolver,
            fds: Descriptors::default(),
            born: FxHashSet::default(),
            roster: Roster::new(host, LABELS),
            waits: FxHashMap::default(),
            seen: BTreeMap::new(),
            channels: Channels::new(),
            tokens: FxHashMap::default(),
            next_token: 0,
            clock: RunClock::default(),
            anomalies: Anomalies::new(),
            lost: LostRecords::default(),
            other_families: Anomalies::new(),
            unmatched_sends: 0,
            unmatched_recvs: 0,
            held: FxHashMap::default(),
            between_hosts: false,
            ends: FxHashMap::default(),
            closed: Vec::new(),
        }
    }

    /// Leaves TCP connections that may join two hosts (neither address a loopback one) to be
    /// matched where both ends meet, as a cluster node must: their sends and receives go to
    /// the sink as they are ([`EventSink::stream_op`]), in their place among the process's
    /// events, and each end's close with the bytes it moved ([`EventSink::stream_closed`]).
    /// UNIX and loopback connections are matched here as usual; UDP datagrams are not matched
    /// (each a `Keepalive`, counted as unmatched and noted).
    pub fn matching_between_hosts(mut self) -> Self {
        self.between_hosts = true;
        self
    }

    /// Expects `n` processes to use sockets (`None`: unknown, the default): once they have,
    /// they are announced and their events flow as they settle, rather than at the end. A
    /// process using a socket after them is left out of the trace (noted, its events counted
    /// as lost).
    pub fn expecting(mut self, n: Option<usize>) -> Self {
        self.roster.expect(n);
        self
    }

    /// Consumes one record, handing the events it settles to `sink` once every expected
    /// process is known.
    pub fn record(&mut self, rec: &Record, sink: &mut dyn EventSink) {
        self.consume(rec);
        self.roster.hand_out(&mut self.clock, sink);
        for end in self.closed.drain(..) {
            sink.stream_closed(&end);
        }
    }

    /// Events held back and events left out so far, and the state kept for open connections
    /// and running processes.
    pub fn backlog(&self) -> Backlog {
        Backlog {
            kept: Some(Kept {
                channels: self.channels.len() + self.ends.len(),
                descriptors: self.fds.len(),
                processes: self.roster.entries(),
            }),
            ..self.roster.backlog()
        }
    }

    fn consume(&mut self, rec: &Record) {
        self.clock.observe(rec);
        match RecordKind::from_raw(rec.kind) {
            Some(RecordKind::Syscall) => self.syscall(rec),
            Some(RecordKind::Fork) => {
                // The child starts with its parent's descriptors.
                let child = rec.args[0] as u32;
                self.born.insert(child);
                let mut released = Vec::new();
                self.fds.inherit(rec.tgid, child, &mut released);
                self.close_channels(released);
            }
            Some(RecordKind::Exec) => {
                // The command lbf-trace started is first seen at its exec.
                match self.seen.get_mut(&rec.tgid) {
                    // Seen before it (lbf-trace's own child waiting to run the command, by
                    // the time the record is read): named from now on by what it runs.
                    Some(name) => *name = self.clock.name_of(rec.tgid),
                    None => {
                        self.born.insert(rec.tgid);
                    }
                }
                self.fds.executed(rec.tgid);
            }
            Some(RecordKind::Exit) => {
                let tgid = rec.tgid;
                self.release_held(|t| t == tgid);
                let mut released = Vec::new();
                self.fds.ended(tgid, &mut released);
                self.close_channels(released);
                self.waits.remove(&tgid);
                self.born.remove(&tgid);
                if self.roster.joined_any() {
                    self.seen.remove(&tgid); // no note will name it
                }
                self.roster.exit(
                    tgid,
                    rec.tid,
                    At::new(rec.cpu_ns, rec.ts_ns),
                    &mut self.clock,
                );
            }
            Some(RecordKind::Attach) => self.roster.attached(rec.tgid, rec.tid, rec.cpu_ns),
            Some(RecordKind::Lost) => self.lost.record(rec),
            Some(RecordKind::ProcCpu) => self.roster.procedure_cpu(rec),
            Some(
                RecordKind::CallEntry
                | RecordKind::CallExit
                | RecordKind::CallPair
                | RecordKind::Polls,
            ) => {}
            None => note(&mut self.anomalies, Anomaly::UnknownRecordKind),
        }
    }

    /// The socket descriptor `fd` of `tgid` is, identified on first use. A descriptor of a
    /// process traced since its start that no recorded call made a socket is none.
    fn socket(&mut self, tgid: u32, fd: i32) -> Option<SocketChannels> {
        match self.fds.get(tgid, fd) {
            Some(Fd::Socket(s)) => Some(s),
            Some(Fd::Ignored) => None,
            Some(Fd::Unresolved | Fd::BeforeExec(_)) => {
                self.identify(tgid, fd, Lookup::UseOfSocket)
            }
            None if self.born.contains(&tgid) => None,
            None => self.identify(tgid, fd, Lookup::UseOfAny),
        }
    }

    /// Looks descriptor `fd` of `tgid` up and remembers what it is. `lookup` says why: a
    /// socket just made or connected that cannot be looked at stays unresolved (its process
    /// may have closed this copy and use another, e.g. a forked child's); one being used
    /// that cannot be looked at is noted if it is known to be a socket.
    fn identify(&mut self, tgid: u32, fd: i32, lookup: Lookup) -> Option<SocketChannels> {
        let (f, found) = match self.resolver.resolve(tgid, fd) {
            Ok(Some(s)) => (Fd::Socket(s), Some(s)),
            Ok(None) => (Fd::Ignored, None),
            Err(why @ Unidentified::Family) => {
                note(&mut self.anomalies, Anomaly::SocketUnidentified(why));
                (Fd::Ignored, None)
            }
            Err(_) if lookup == Lookup::Early => (Fd::Unresolved, None),
            Err(why) => {
                if lookup == Lookup::UseOfSocket {
                    note(&mut self.anomalies, Anomaly::SocketUnidentified(why));
                }
                (Fd::Ignored, None)
            }
        };
        self.set_fd(tgid, fd, f);
        found
    }

    /// Descriptor `fd` of `tgid` is now `f`; frees the channels no descriptor holds any more.
    fn set_fd(&mut self, tgid: u32, fd: i32, f: Fd) {
        if let Fd::Socket(s) = f {
            // The ends of connections between hosts held here, closed when released.
            let sides = [(s.send, Role::Send), (Some(s.recv), Role::Recv)];
            for (dir, role) in sides {
                if let Some(dir) = dir.and_then(|c| self.elsewhere(c)) {
                    self.ends.entry((dir, role)).or_insert(0);
                }
            }
        }
        let mut released = Vec::new();
        self.fds.set(tgid, fd, f, &mut released);
        self.close_channels(released);
    }

    /// Descriptor `fd` of `tgid` was closed; frees the channels no descriptor holds any more.
    fn close_fd(&mut self, tgid: u32, fd: i32) {
        let mut released = Vec::new();
        self.fds.close(tgid, fd, &mut released);
        self.close_channels(released);
    }

    /// Frees the state of `channels`, which no descriptor can use any more, settling what is
    /// still open on them as the end of the capture would.
    fn close_channels(&mut self, channels: Vec<Channel>) {
        for c in channels {
            if let Some(dir) = self.elsewhere(c) {
                for role in [Role::Send, Role::Recv] {
                    if let Some(bytes) = self.ends.remove(&(dir, role)) {
                        self.closed.push(EndClosed { dir, role, bytes });
                    }
                }
                continue;
            }
            let outcomes = self.channels.close(c);
            self.apply(outcomes);
        }
    }

    /// The direction `c` is if it is matched elsewhere: a TCP connection that may join two
    /// hosts, when the capture leaves those to where both ends meet.
    fn elsewhere(&self, c: Channel) -> Option<Direction> {
        let Channel::Stream {
            from: from @ Endpoint::Inet { addr: a, .. },
            to: to @ Endpoint::Inet { addr: b, .. },
        } = c
        else {
            return None;
        };
        let joins_hosts = !a.ip().is_loopback() && !b.ip().is_loopback();
        (self.between_hosts && joins_hosts).then_some(Direction { from, to })
    }

    /// Queues, for each of `sizes`, a send or receive (`role`) on direction `dir`, matched
    /// elsewhere, made at thread `tid` of `tgid`'s instant `at`.
    fn stream_ops(
        &mut self,
        tgid: u32,
        tid: u32,
        dir: Direction,
        role: Role,
        sizes: &[u64],
        at: At,
    ) {
        for &bytes in sizes {
            let p = self.member(tgid);
            if role == Role::Send {
                p.stats.sends += 1;
                p.stats.send_bytes += bytes;
            } else {
                p.stats.recvs += 1;
                p.stats.recv_bytes += bytes;
            }
            p.timeline
                .emit_stream(tid, at, StreamOp { dir, role, bytes });
            *self.ends.entry((dir, role)).or_default() += bytes;
        }
    }

    /// The process `tgid`, made part of the trace.
    fn member(&mut self, tgid: u32) -> &mut Proc {
        let clock = &self.clock;
        self.roster
            .join(tgid, || clock.name_of(tgid), &mut self.anomalies)
    }

    fn syscall(&mut self, rec: &Record) {
        let (tgid, tid) = (rec.tgid, rec.tid);
        if !self.seen.contains_key(&tgid) {
            let name = self.clock.name_of(tgid);
            self.seen.insert(tgid, name);
        }
        let d = syscall::decode(rec);
        let held = self.held.remove(&tid);
        if d.part > 0 {
            // The next part of the call held for this thread, if any.
            if let Some((tgid, mut first)) = held {
                if first.continue_with(d) {
                    self.call_or_hold(tgid, tid, first);
                    return;
                }
                self.call(tgid, tid, first);
            }
            note(&mut self.anomalies, Anomaly::MmsgWithoutStart);
            return;
        }
        if let Some((tgid, first)) = held {
            self.call(tgid, tid, first);
        }
        self.call_or_hold(tgid, tid, d);
    }

    /// Handles a call of thread `tid` of process `tgid` unless the record of its next part
    /// is still to come.
    fn call_or_hold(&mut self, tgid: u32, tid: u32, d: syscall::Decoded) {
        if d.more {
            self.held.insert(tid, (tgid, d));
        } else {
            self.call(tgid, tid, d);
        }
    }

    /// Handles the calls held for their next part of the processes `which` selects: that
    /// part will not come (it was lost).
    fn release_held(&mut self, which: impl Fn(u32) -> bool) {
        let tids: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, (tgid, _))| which(*tgid))
            .map(|(&tid, _)| tid)
            .collect();
        for tid in tids {
            let (tgid, d) = self.held.remove(&tid).expect("held");
            self.call(tgid, tid, d);
        }
    }

    /// Handles one call of thread `tid` of process `tgid`, all its records' messages
    /// together.
    fn call(&mut self, tgid: u32, tid: u32, d: syscall::Decoded) {
        if d.missing > 0 {
            note(&mut self.anomalies, Anomaly::MmsgSizesUnread);
        }
        for &fd in &d.received {
            // A descriptor passed by another process: made here by no recorded call.
            self.set_fd(tgid, fd, Fd::Unresolved);
            self.identify(tgid, fd, Lookup::Early);
        }
        if !matches!(d.call, Call::Wait | Call::Recv { .. }) {
            // The process did something else: no receive directly follows the wait.
            self.waits.remove(&tgid);
        }
        let sent = d.sent();
        match d.call {
            Call::Send { fd, sizes, to_port } => {
                if let Some(s) = self.socket(tgid, fd) {
                    self.send(tgid, tid, s, &sizes, to_port, sent);
                }
            }
            Call::Recv { fd, sizes } => match self.socket(tgid, fd) {
                Some(s) => self.recv(tgid, tid, s, &sizes, d.entry, d.exit),
                None => {
                    self.waits.remove(&tgid);
                }
            },
            Call::Transfer { from, to, bytes } => {
                if let Some(s) = self.socket(tgid, to) {
                    self.send(tgid, tid, s, &[bytes], None, sent);
                } else if let Some(s) = self.socket(tgid, from) {
                    self.recv(tgid, tid, s, &[bytes], d.entry, d.exit);
                }
            }
            Call::Wait => {
                let earlier = self.waits.get(&tgid).copied();
                let wait = Wait::after(earlier, d.entry, d.exit);
                self.waits.insert(tgid, wait);
            }
            Call::Open {
                family: Some(f), ..
            } if !CAPTURED_FAMILIES.contains(&f) => {
                note(
                    &mut self.other_families,
                    Anomaly::OtherFamily {
                        family: family_name(f),
                    },
                );
            }
            Call::Open { fds, connected, .. } => {
                let found: Vec<Option<SocketChannels>> = fds
                    .iter()
                    .map(|&fd| {
                        self.set_fd(tgid, fd, Fd::Unresolved);
                        connected
                            .then(|| self.identify(tgid, fd, Lookup::Early))
                            .flatten()
                    })
                    .collect();
                // A socketpair's ends are each other's peer, unless a number was closed and
                // reused before the lookup (`socketpair`, `fork`, the parent closes its
                // child's end and makes another socket): then look them up on use, in
                // whichever process uses them.
                if let [Some(a), Some(b)] = found[..] {
                    if a.send != Some(b.recv) {
                        for fd in fds {
                            self.set_fd(tgid, fd, Fd::Unresolved);
                        }
                    }
                }
            }
            Call::Connected { fd } => {
                self.identify(tgid, fd, Lookup::Early);
            }
            Call::Close { fd } => self.close_fd(tgid, fd),
            Call::Dup { old, new } => {
                // `dup2`/`dup3` close `new` first.
                self.close_fd(tgid, new);
                if self.fds.get(tgid, old) == Some(Fd::Unresolved) {
                    // The same socket, looked at through the copy: the original may be
                    // closed already (`fcntl(F_DUPFD)` or `dup2`, then `close`).
                    self.set_fd(tgid, new, Fd::Unresolved);
                    self.identify(tgid, new, Lookup::Early);
                } else if let Some(s) = self.socket(tgid, old) {
                    self.set_fd(tgid, new, Fd::Socket(s));
                } else if self.fds.get(tgid, old).is_some() {
                    self.set_fd(tgid, new, Fd::Ignored);
                }
            }
            Call::Nothing => {}
        }
    }

    /// Queues one `Send` per message of `sizes` sent through socket `s` at `at` (see
    /// `syscall::Decoded::sent`), to the UDP port `to_port` named, else to its connected peer.
    fn send(
        &mut self,
        tgid: u32,
        tid: u32,
        s: SocketChannels,
        sizes: &[u64],
        to_port: Option<u16>,
        at: At,
    ) {
        let is_udp = is_udp(s.recv);
        if is_udp && self.between_hosts {
            self.unmatched_datagrams(tgid, tid, Role::Send, sizes, at);
            return;
        }
        let to = to_port.filter(|_| is_udp).map(resolve::udp_channel);
        let Some(channel) = to.or(s.send) else {
            note(&mut self.anomalies, Anomaly::UnconnectedDatagram);
            return;
        };
        if let Some(dir) = self.elsewhere(channel) {
            self.stream_ops(tgid, tid, dir, Role::Send, sizes, at);
            return;
        }
        for &bytes in sizes {
            let p = self.member(tgid);
            p.stats.sends += 1;
            p.stats.send_bytes += bytes;
            let slot = p.timeline.open(tid, at);
            let token = self.token(tgid, slot);
            let outcomes = self.channels.send(channel, token, bytes);
            self.apply(outcomes);
        }
    }

    /// A receive of `sizes` through socket `s`, entered at `entry` and returning at `exit`:
    /// its `RecvStart`, then one `RecvEnd` per message, matched.
    fn recv(&mut self, tgid: u32, tid: u32, s: SocketChannels, sizes: &[u64], entry: At, exit: At) {
        let wait = self.waits.remove(&tgid);
        let end = self.member(tgid).timeline.recv_start(tid, entry, wait);
        let at = end.unwrap_or(exit);
        if let Some(dir) = self.elsewhere(s.recv) {
            self.stream_ops(tgid, tid, dir, Role::Recv, sizes, at);
            return;
        }
        if is_udp(s.recv) && self.between_hosts {
            self.unmatched_datagrams(tgid, tid, Role::Recv, sizes, at);
            return;
        }
        for &bytes in sizes {
            let p = self.member(tgid);
            p.stats.recvs += 1;
            p.stats.recv_bytes += bytes;
            let slot = p.timeline.open(tid, at);
            let token = self.token(tgid, slot);
            let outcomes = self.channels.recv(s.recv, token, bytes);
            self.apply(outcomes);
        }
    }

    /// UDP datagrams of a capture matching between hosts, sent or received (`role`) by
    /// thread `tid` of `tgid` at its instant `at`: not matched, since their other end
    /// may be on another host, which nothing here tells (UDP receivers are told apart by port
    /// alone), and a datagram waiting for a match would hold its process's events until its
    /// socket closes. Each is a `Keepalive`, counted as unmatched and noted.
    fn unmatched_datagrams(&mut self, tgid: u32, tid: u32, role: Role, sizes: &[u64], at: At) {
        for &bytes in sizes {
            match role {
                Role::Send => self.unmatched_sends += 1,
                Role::Recv => self.unmatched_recvs += 1,
            }
            let p = self.member(tgid);
            if role == Role::Send {
                p.stats.sends += 1;
                p.stats.send_bytes += bytes;
            }
            p.timeline.emit(tid, at, EventKind::Keepalive);
            note(&mut self.anomalies, Anomaly::UdpUnmatched);
        }
    }

    fn token(&mut self, tgid: u32, slot: u64) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        self.tokens.insert(t, (tgid, slot));
        t
    }

    /// Settles the slots the channels' outcomes name.
    fn apply(&mut self, outcomes: Vec<Outcome>) {
        for o in outcomes {
            match o.unmatched() {
                Some(Role::Send) => self.unmatched_sends += 1,
                Some(Role::Recv) => self.unmatched_recvs += 1,
                None => {}
            }
            let mut kinds = o.events();
            if let Outcome::Recv {
                msg: Some(_),
                from: Some(from),
                ..
            } = o
            {
                // Its send is not in the trace.
                let sender = self.tokens.get(&from).map(|&(t, _)| t);
                if sender.is_some_and(|t| self.roster.is_beyond(t)) {
                    note(
                        &mut self.anomalies,
                        Anomaly::RecvFromLeftOut { labels: LABELS },
                    );
                    kinds = vec![EventKind::Keepalive];
                }
            }
            if let Some((tgid, slot)) = self.tokens.remove(&o.token()) {
                if let Some(p) = self.roster.get_mut(tgid) {
                    p.timeline.settle(slot, kinds);
                }
            }
        }
    }

    /// Ends the capture: settles what is open, announces the processes that used sockets (in
    /// order of first use) unless that has happened, and hands out their events. A process
    /// still running gets an `Exit` (noted).
    pub fn finish(mut self, sink: &mut dyn EventSink) -> Summary {
        self.release_held(|_| true);
        for end in self.closed.drain(..) {
            sink.stream_closed(&end);
        }
        let outcomes = self.channels.finish();
        self.apply(outcomes);
        let gaps = self.lost.gaps(&self.clock, |tgid| self.roster.id_of(tgid));
        let handed = self.roster.finish(&self.clock, sink, &mut self.anomalies);
        let mut summary = Summary {
            gaps,
            procs: handed.procs,
            stats: handed.stats,
            lost_events: handed.lost_events,
            unmatched_sends: self.unmatched_sends,
            unmatched_recvs: self.unmatched_recvs,
            measured_seconds: self.clock.measured_seconds(),
            ..Summary::default()
        };
        if summary.procs.is_empty() {
            let seen = self.seen.values().cloned().collect();
            note(&mut self.anomalies, Anomaly::NoSocketUsed { seen });
            self.anomalies.append(&mut self.other_families);
        }
        summary.anomalies = self.anomalies;
        summary
    }
}

impl RecordCapture for SocketCapture {
    fn record(&mut self, rec: &Record, sink: &mut dyn EventSink) {
        SocketCapture::record(self, rec, sink);
    }
    fn finish(self: Box<Self>, sink: &mut dyn EventSink) -> Summary {
        SocketCapture::finish(*self, sink)
    }
    fn backlog(&self) -> Backlog {
        SocketCapture::backlog(self)
    }
    /// Every socket of the command is made by a recorded call (it inherits only the tracer's
    /// standard streams): its unknown descriptors are not sockets and need no lookup, which
    /// could find a socket that reused the number of a file its loader read.
    fn started_by_tracer(&mut self, pid: u32) {
        self.born.insert(pid);
    }
}

/// Whether `c`, a socket's receiving channel, is a UDP socket's.
fn is_udp(c: Channel) -> bool {
    matches!(
        c,
        Channel::Datagram {
            to: Endpoint::Inet { .. }
        }
    )
}

/// Address families whose sockets are captured: `AF_UNIX`, `AF_INET`, `AF_INET6`.
const CAPTURED_FAMILIES: [i32; 3] = [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];

/// A family's name for messages, like `AF_NETLINK (16)`.
fn family_name(family: i32) -> String {
    let name = match family {
        libc::AF_NETLINK => "AF_NETLINK",
        libc::AF_PACKET => "AF_PACKET",
        libc::AF_BLUETOOTH => "AF_BLUETOOTH",
        libc::AF_VSOCK => "AF_VSOCK",
        libc::AF_ALG => "AF_ALG",
        _ => "address family",
    };
    format!("{name} ({family})")
}

#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
#[cfg(test)]
mod tests;
