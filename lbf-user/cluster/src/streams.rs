//! The builder's matching of TCP connections between hosts. Each host's node sees one end of
//! such a connection: it sends the sends and receives of its end ([`NodeEvent::Stream`]), in
//! their place among the process's events, and the close of its end with the bytes it moved
//! ([`EndClosed`]). Here both ends meet, and the socket capture's own matcher
//! ([`Channels`]: byte offsets per direction, a send cut where receives end) turns them into
//! the events a capture of both ends would have made: a send into its messages (or a
//! `Keepalive`), a receive into its `RecvEnd`.
//!
//! # What is held, and for how long
//!
//! A send's messages are known once the receiver has consumed all of its bytes, and a
//! receive's once the send of its last byte is known: until then the process's events wait
//! behind it, in a [`Timeline`] per process (the capture's own). A process with nothing
//! waiting passes its events straight on. So the builder holds what one node has reported
//! and the other not yet: about as many events as the nodes' streams are apart. The
//! connection's state (byte offsets, sends not consumed yet) is kept until both ends are done:
//!
//! - an end is done once its node said it closed and every byte it moved there has been
//!   matched (the close may overtake the end's last events: other processes' streams on the
//!   node, or a batch order), or once its node's stream has ended;
//! - an end at an address no node of the job has (a peer that is not traced) is done from the
//!   start: sends to it and receives from it are unmatched, as in a capture on one host.
//!
//! The applier adds the events held here to the node's events queued in the engine when it
//! decides whether to stop reading a node that is far ahead (see [`super::apply`]), and never
//! stops a node a starved process here waits for; [`StreamMatcher::view`] tells what is held.

use super::wire::NodeEvent;
use lbf_capture::ids;
use lbf_capture::sockets::channels::{
    Channels, Direction, EndClosed, Endpoint, Outcome, Role, StreamOp,
};
use lbf_capture::timeline::{Item, Timeline};
use lbf_model::event::{Event, ProcId, ProcedureCpu};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

/// Engine events let go, in order, each with the CPU its process spent in the followed
/// procedures since its previous event. An event made from a send or receive carries its
/// shares on the first event made from it (as in a capture: the first carries the CPU).
#[derive(Debug, Default)]
pub struct Ready {
    /// The events.
    pub events: Vec<Event>,
    /// Their shares: empty while every one is none (a job without procedures costs nothing
    /// more), else one per event.
    shares: Vec<ProcedureCpu>,
}

impl Ready {
    /// Appends `event` with its shares.
    pub fn push(&mut self, event: Event, shares: &ProcedureCpu) {
        if !shares.is_none() || !self.shares.is_empty() {
            self.shares.resize(self.events.len(), ProcedureCpu::NONE);
            self.shares.push(*shares);
        }
        self.events.push(event);
    }

    /// Takes every event with its shares, in order; leaves it empty.
    pub fn drain(&mut self) -> impl Iterator<Item = (Event, ProcedureCpu)> + '_ {
        let shares = std::mem::take(&mut self.shares);
        self.events.drain(..).enumerate().map(move |(i, e)| {
            let s = shares.get(i).copied().unwrap_or(ProcedureCpu::NONE);
            (e, s)
        })
    }
}

/// A send or receive waiting for its match.
struct Pending {
    proc: ProcId,
    slot: u64,
    dir: Direction,
    role: Role,
}

/// What is known of a direction's two ends.
#[derive(Default)]
struct Ends {
    /// The bytes its sending end moved in all, once that end closed.
    sent_in_all: Option<u64>,
    /// The bytes its receiving end moved in all, once that end closed.
    received_in_all: Option<u64>,
    sender_done: bool,
    receiver_done: bool,
}

/// What the matching of connections between hosts holds and did, for `/results` and
/// `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StreamView {
    /// Events held behind a send or receive not matched yet.
    pub held_events: usize,
    /// Connection directions whose state is kept.
    pub directions: usize,
    /// Sends and receives the nodes reported.
    pub operations: u64,
    /// Messages matched (each a send's piece consumed by one receive).
    pub messages: u64,
    /// Sends with bytes no receive consumed.
    pub unmatched_sends: u64,
    /// Receives no send is known for.
    pub unmatched_receives: u64,
}

/// The builder's matching of connections between hosts; see the module documentation.
#[derive(Default)]
pub struct StreamMatcher {
    channels: Channels,
    /// Processes with events waiting, each behind its first send or receive not matched yet.
    held: HashMap<ProcId, Timeline>,
    /// Sends and receives not matched yet, by token.
    pending: HashMap<u64, Pending>,
    /// The token of each open slot, by process and slot.
    tokens: HashMap<(ProcId, u64), u64>,
    next_token: u64,
    dirs: HashMap<Direction, Ends>,
    /// The nodes whose host has each address.
    owners: HashMap<IpAddr, BTreeSet<String>>,
    ended: HashSet<String>,
    view: StreamView,
}

impl StreamMatcher {
    /// Nothing matched yet; nodes are added with [`StreamMatcher::add_node`].
    pub fn new() -> Self {
        StreamMatcher {
            channels: Channels::new(),
            ..Default::default()
        }
    }

    /// Node `node`'s host has `addresses`: the ends of connections with one of them are that
    /// node's to report. Every node of the job must be added before the first stream event.
    pub fn add_node(&mut self, node: &str, addresses: &[IpAddr]) {
        for &a in addresses {
            self.owners.entry(a).or_default().insert(node.to_string());
        }
    }

    /// Takes one event of a node's stream, whose process spent `shares` in the followed
    /// procedures since its previous event; appends to `out` the engine events it lets go.
    pub fn push(&mut self, event: NodeEvent, shares: &ProcedureCpu, out: &mut Ready) {
        match event {
            // Nothing held (an MPI job's every event): no lookup.
            NodeEvent::Event(e) if self.held.is_empty() => out.push(e, shares),
            NodeEvent::Event(e) => match self.held.get_mut(&e.proc) {
                // Its first held event is still open: nothing more can go.
                Some(t) => t.emit_after(e.cpu_ns, *shares, e.kind),
                None => out.push(e, shares),
            },
            NodeEvent::Stream { proc, cpu_ns, op } => {
                self.view.operations += 1;
                let slot = self
                    .held
                    .entry(proc)
                    .or_default()
                    .open_after(cpu_ns, *shares);
                let token = self.next_token;
                self.next_token += 1;
                let StreamOp { dir, role, bytes } = *op;
                self.pending.insert(
                    token,
                    Pending {
                        proc,
                        slot,
                        dir,
                        role,
                    },
                );
                self.tokens.insert((proc, slot), token);
                let outcomes = match role {
                    Role::Send => self.channels.send(dir.channel(), token, bytes),
                    Role::Recv => self.channels.recv(dir.channel(), token, bytes),
                };
                self.apply(outcomes, out);
                self.check(dir, out);
                self.drain(proc, out);
            }
        }
    }

    /// An end of a connection closed on its node; appends to `out` the events that lets go.
    pub fn closed(&mut self, end: EndClosed, out: &mut Ready) {
        let ends = self.dirs.entry(end.dir).or_default();
        match end.role {
            Role::Send => ends.sent_in_all = Some(end.bytes),
            Role::Recv => ends.received_in_all = Some(end.bytes),
        }
        self.check(end.dir, out);
    }

    /// Node `node`'s stream ended: every end it holds is done. Appends to `out` the events
    /// that lets go.
    pub fn node_ended(&mut self, node: &str, out: &mut Ready) {
        self.ended.insert(node.to_string());
        let dirs: Vec<Direction> = self.dirs.keys().copied().collect();
        for dir in dirs {
            self.check(dir, out);
        }
    }

    /// Every node ended: settles what is still open, as at the end of a capture, and appends
    /// to `out` every event held.
    pub fn finish(&mut self, out: &mut Ready) {
        let outcomes = self.channels.finish();
        self.apply(outcomes, out);
        self.dirs.clear();
        let mut procs: Vec<ProcId> = self.held.keys().copied().collect();
        procs.sort_unstable();
        for proc in procs {
            let mut t = self.held.remove(&proc).expect("listed");
            drain_into(&mut t, proc, true, out);
        }
        self.pending.clear();
        self.tokens.clear();
    }

    /// Events of `proc` held here.
    pub fn held_of(&self, proc: ProcId) -> usize {
        self.held.get(&proc).map_or(0, Timeline::held)
    }

    /// The nodes that processes held here and `starved` (the engine waits for their next
    /// event) wait for: those holding the other end of the send or receive they wait behind.
    /// Stopping to read one of them could stop the job.
    pub fn awaited(&self, starved: impl Fn(ProcId) -> bool) -> HashSet<String> {
        let mut nodes = HashSet::new();
        for (&proc, t) in &self.held {
            let Some(p) = t
                .first_held()
                .filter(|_| starved(proc))
                .and_then(|slot| self.tokens.get(&(proc, slot)))
                .and_then(|token| self.pending.get(token))
            else {
                continue;
            };
            let other = match p.role {
                Role::Send => p.dir.to,
                Role::Recv => p.dir.from,
            };
            let owners = self.owners.get(&ip_of(other)).into_iter().flatten();
            nodes.extend(owners.filter(|n| !self.ended.contains(*n)).cloned());
        }
        nodes
    }

    /// What is held and what was matched so far.
    pub fn view(&self) -> StreamView {
        StreamView {
            held_events: self.held.values().map(Timeline::held).sum(),
            directions: self.dirs.len(),
            ..self.view
        }
    }

    /// Settles the slots `outcomes` name, with ids unique in the job, and lets go what that
    /// frees.
    fn apply(&mut self, outcomes: Vec<Outcome>, out: &mut Ready) {
        let mut touched = BTreeSet::new();
        for o in outcomes {
            match o.unmatched() {
                Some(Role::Send) => self.view.unmatched_sends += 1,
                Some(Role::Recv) => self.view.unmatched_receives += 1,
                None => {}
            }
            if matches!(o, Outcome::Recv { msg: Some(_), .. }) {
                self.view.messages += 1;
            }
            let Some(p) = self.pending.remove(&o.token()) else {
                continue;
            };
            self.tokens.remove(&(p.proc, p.slot));
            let kinds = o
                .events()
                .into_iter()
                .map(|k| ids::job_wide(k, ""))
                .collect();
            if let Some(t) = self.held.get_mut(&p.proc) {
                t.settle(p.slot, kinds);
                touched.insert(p.proc);
            }
        }
        for proc in touched {
            self.drain(proc, out);
        }
    }

    /// Lets go the events of `proc` up to its first open slot; forgets it if none is left.
    fn drain(&mut self, proc: ProcId, out: &mut Ready) {
        if let Some(t) = self.held.get_mut(&proc) {
            drain_into(t, proc, false, out);
            if t.held() == 0 {
                self.held.remove(&proc);
            }
        }
    }

    /// Marks the ends of `dir` done that are (see the module documentation), settling what
    /// that decides; forgets the direction once both are.
    fn check(&mut self, dir: Direction, out: &mut Ready) {
        let (sent, received) = self.channels.moved(dir);
        let gone = |end: Endpoint| {
            self.owners
                .get(&ip_of(end))
                .is_none_or(|nodes| nodes.iter().all(|n| self.ended.contains(n)))
        };
        let (from_gone, to_gone) = (gone(dir.from), gone(dir.to));
        let ends = self.dirs.entry(dir).or_default();
        let mut done = Vec::new();
        if !ends.sender_done && (from_gone || ends.sent_in_all.is_some_and(|n| sent >= n)) {
            ends.sender_done = true;
            done.push(Role::Send);
        }
        if !ends.receiver_done && (to_gone || ends.received_in_all.is_some_and(|n| received >= n)) {
            ends.receiver_done = true;
            done.push(Role::Recv);
        }
        if ends.sender_done && ends.receiver_done {
            self.dirs.remove(&dir);
        }
        for role in done {
            let outcomes = self.channels.end_done(dir, role);
            self.apply(outcomes, out);
        }
    }
}

/// Hands the settled events of `t` (`all`: every one) to `out` as events of `proc`.
fn drain_into(t: &mut Timeline, proc: ProcId, all: bool, out: &mut Ready) {
    t.drain(all, |cpu_ns, shares, _, item| {
        // The builder's timelines hold engine events only.
        if let Item::Event(kind) = item {
            out.push(Event { proc, cpu_ns, kind }, shares);
        }
    });
}

/// The address of a connection's end (only TCP ends are matched between hosts).
fn ip_of(end: Endpoint) -> IpAddr {
    match end {
        Endpoint::Inet { addr, .. } => addr.ip(),
        Endpoint::Unix { .. } => unreachable!("only TCP connections are matched between hosts"),
    }
}

#[cfg(test)]
mod tests;
