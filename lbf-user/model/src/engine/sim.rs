//! One target's simulation: the online GAG builder of the paper's section 2.1.
//!
//! The simulation replays every process's events on the target's nodes in global time order.
//! It may only take a step when every live process's next event is known (the paper's "each
//! process has a current or pending event"): a process whose stream has run dry could otherwise
//! still produce an event earlier than the step. Processes whose next event is unknown are
//! *starved*; the simulation resumes as soon as their events arrive.
//!
//! Per process, an event needs its CPU work done first (on its node, shared with the node's
//! other runnable processes), then *reaches* the event, which may complete at once (send,
//! keepalive, recv_start, coll_start) or block (recv_end until its message arrives, coll_end
//! until the collective ends). Wake-ups are timers, processed in time order with the nodes'
//! work completions. Ties are broken by node index, then process id, never by arrival order,
//! so the result is a function of the per-process streams alone.
//!
//! A process alone on its node does not wait for the global order: it runs ahead through its
//! events as far as they and its messages and collectives allow, which gives the same result
//! for less work (see `Sim::runs_ahead`).
//!
//! Messages sent by rendezvous (a send that waits for its receive) are handled in
//! [`rendezvous`].

mod rendezvous;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::collective::{self, Collective};
use super::comm::CachedNetwork;
use super::min_tree::MinTree;
use super::msgs::{Msg, MsgTable};
use super::node_model::NodeModel;
use super::streams::{Queued, Streams};
use super::time::TimeKey;
use super::{EngineError, Prediction, Progress, ScheduleSink};
use crate::event::{CollId, EventKind, MsgId, ProcId};
use crate::target::Target;

/// Results inside the simulation: the error is boxed so that the hot paths move a pointer,
/// not the whole error.
pub(super) type SimResult<T> = Result<T, Box<EngineError>>;

/// Where a process is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    /// Its next event has not arrived.
    Starved,
    /// Its next event has arrived while other processes were starved: it goes on once none
    /// is (see [`Sim::resume`]).
    Resumed,
    /// Its first event is known but it starts later (see [`Sim::set_start`]).
    NotStarted,
    /// Doing the CPU work before its current event.
    Computing,
    /// At a recv_end, waiting for the message, or at a send_end, waiting for the end of its
    /// rendezvous message's transfer.
    WaitMsg,
    /// At a coll_end, waiting for the collective to end.
    WaitColl,
    /// Done.
    Exited,
}

/// A process in the simulation.
#[derive(Clone, Debug)]
struct Proc {
    state: State,
    /// Absolute index of the next event to load from the stream. While the process computes
    /// or waits, the event before it is the *current* one, which stays in the stream (see
    /// [`Sim::held`]): reading it there in place is cheaper than copying it here, and a
    /// copy of a just-stored event stalled the processor's store forwarding.
    cursor: u64,
    /// Origin of the last event loaded, for errors.
    last_origin: u64,
    /// When the current wait began: for a message or a collective (for timelines), or for
    /// the next event (where a process alone on its node resumes, see [`Sim::runs_ahead`]).
    wait_since: f64,
    /// When the process starts; it does nothing before.
    start: f64,
    /// The group of processes sharing cores it is in (the engine's node): the node the
    /// target places it on or, where processes are bound to cores, its core there.
    node: usize,
    /// The target's node: messages within it take the local table.
    host: u32,
    /// Whether it is alone on its node (see [`Sim::runs_ahead`]).
    alone: bool,
    /// Its slot on its node (see [`NodeModel::join`]).
    slot: usize,
}

/// The simulation of one target.
pub(super) struct Sim {
    name: String,
    network: CachedNetwork,
    /// The target's spin weight: the load a waiting process puts on its node.
    spin: f64,
    nodes: Vec<NodeModel>,
    /// Next work completion time of each node, up to date except for the nodes in `dirty`.
    /// A step brings its process's node up to date once it is over (see [`Sim::refresh`]);
    /// changes to other nodes go through `dirty`.
    finishes: MinTree,
    /// Nodes whose runnable set changed since `finishes` was last brought up to date, other
    /// than the node of the process a step is taken for.
    dirty: Vec<usize>,
    /// Whether each node is in `dirty`.
    is_dirty: Vec<bool>,
    /// Wake-ups of waiting processes, keyed by time, then process.
    timers: BinaryHeap<Reverse<TimeKey>>,
    /// The time of the step being taken: the global order's, or that of a process running
    /// ahead (see [`Sim::runs_ahead`]).
    now: f64,
    /// Processes alone on their node run ahead at times below this one (see
    /// [`Sim::runs_ahead`]); 0 if they never do.
    horizon: f64,
    /// Processes alone on their node that were woken or resumed, with the time each goes on
    /// at; they run ahead before the next step in the global order.
    ready: Vec<(usize, f64)>,
    /// The latest time a process running ahead has reached, for [`Sim::progress`].
    reached: f64,
    /// The time of the last exit so far: the prediction once every process has exited.
    end: f64,
    procs: Vec<Proc>,
    /// Live processes whose next event has not arrived.
    starved: usize,
    /// Per process: when it last starved, in the order of the simulation's steps (see
    /// [`Sim::resume`]). Apart from [`Proc`], which the hot paths read.
    starved_at: Vec<u64>,
    /// How many times processes have starved: orders `starved_at`.
    starvations: u64,
    /// Processes whose next event arrived while others were starved (see [`Sim::resume`]).
    resumed: Vec<usize>,
    /// Processes not yet exited.
    live: usize,
    msgs: MsgTable,
    /// Rendezvous sends whose sender has not completed them (see [`rendezvous`]).
    sends: FxHashMap<MsgId, rendezvous::Completion>,
    /// Per process: its receives posted (`RecvPost`) and not yet answered, with the origin of
    /// each post; they are answered at the process's next wait (see [`rendezvous`]).
    posts: Vec<Vec<(MsgId, u64)>>,
    /// How many receives `posts` holds in all: a wait looks at its process's only if any.
    unanswered: usize,
    colls: FxHashMap<CollId, Collective>,
    sink: Option<Box<dyn ScheduleSink>>,
    /// Per node: when the current running slices began (for timelines).
    slice_start: Vec<f64>,
}

impl Sim {
    /// A simulation of `target` for `num_procs` processes, all starved at time 0.
    pub(super) fn new(num_procs: usize, target: Target) -> Result<Self, EngineError> {
        let bad = |reason: String| EngineError::BadTarget {
            target: target.name.clone(),
            reason,
        };
        target
            .placement(num_procs)
            .map_err(|e| bad(e.to_string()))?;
        // The engine's nodes are the groups of processes sharing cores: the target's nodes,
        // or their cores where processes are bound to them.
        let groups = target.core_groups();
        let mut procs = vec![
            Proc {
                state: State::Starved,
                cursor: 0,
                last_origin: 0,
                wait_since: 0.0,
                start: 0.0,
                node: 0,
                host: 0,
                alone: false,
                slot: 0,
            };
            num_procs
        ];
        for (g, (host, group)) in groups.iter().enumerate() {
            for &p in &group.procs {
                let proc = &mut procs[p as usize];
                proc.node = g;
                proc.host = *host as u32;
                proc.alone = group.procs.len() == 1;
            }
        }
        let nodes: Vec<NodeModel> = groups
            .iter()
            .map(|(_, group)| NodeModel::new(group, target.scheduler.as_ref()))
            .collect();
        for (p, slot) in nodes.iter().flat_map(NodeModel::slots) {
            procs[p as usize].slot = slot;
        }
        let network = CachedNetwork::new(target.network);
        // Below the horizon, adding the smallest delay between nodes to a time changes it:
        // its ulp is at most 2^-52 of it. Half the smallest delay covers the rounding of the
        // tables' interpolation. Where processes are bound to cores, the engine's nodes are
        // cores, and the delay between two cores of one node is the local table's.
        let split = groups.len() > target.nodes.len();
        let horizon = network.least_seconds(split) / 2.0 * 2f64.powi(52);
        Ok(Sim {
            nodes,
            finishes: MinTree::new(groups.len()),
            dirty: Vec::new(),
            is_dirty: vec![false; groups.len()],
            slice_start: vec![0.0; groups.len()],
            name: target.name,
            network,
            spin: target.spin,
            timers: BinaryHeap::new(),
            now: 0.0,
            horizon,
            ready: Vec::new(),
            reached: 0.0,
            end: 0.0,
            procs,
            starved: num_procs,
            starved_at: (0..num_procs as u64).collect(),
            starvations: num_procs as u64,
            resumed: Vec::new(),
            live: num_procs,
            msgs: MsgTable::new(),
            sends: FxHashMap::default(),
            posts: vec![Vec::new(); num_procs],
            unanswered: 0,
            colls: FxHashMap::default(),
            sink: None,
        })
    }

    /// Records the predicted schedule into `sink` from now on.
    pub(super) fn set_sink(&mut self, sink: Box<dyn ScheduleSink>) {
        self.sink = Some(sink);
    }

    /// Makes process `p` start at `seconds` instead of 0. Must precede `p`'s first event.
    pub(super) fn set_start(&mut self, p: usize, seconds: f64) {
        self.procs[p].start = seconds;
    }

    /// Absolute index of the next event this simulation will read from process `p`.
    pub(super) fn cursor(&self, p: usize) -> u64 {
        self.procs[p].cursor
    }

    /// Absolute index of the first event of process `p` this simulation still needs: the
    /// current one while `p` works towards it or waits at it, else the next one to read.
    pub(super) fn held(&self, p: usize) -> u64 {
        let proc = &self.procs[p];
        match proc.state {
            State::Computing | State::WaitMsg | State::WaitColl => proc.cursor - 1,
            State::Starved | State::Resumed | State::NotStarted | State::Exited => proc.cursor,
        }
    }

    /// The event process `p` works towards or waits at.
    #[inline]
    fn current<'s>(&self, p: usize, streams: &'s Streams) -> &'s Queued {
        streams
            .get(p, self.procs[p].cursor - 1)
            .expect("a simulation holds its current events in the streams")
    }

    /// Called when process `p`'s stream has grown: resumes `p` if it was starved, then runs as
    /// far as the known events allow. Inlined into the caller, which calls it for every target
    /// and event: mostly `p` is not starved and there is nothing to do.
    #[inline]
    pub(super) fn on_event(&mut self, p: usize, streams: &Streams) -> SimResult<()> {
        if self.procs[p].state != State::Starved {
            return Ok(());
        }
        self.resume(p, streams)
    }

    /// [`Sim::on_event`] for a starved `p`.
    ///
    /// The global order stopped when the first of the starved processes starved: `now` is
    /// when it did. Processes whose events arrive while others are still starved go on once
    /// none is, in the order in which they starved, which is the order of the steps that
    /// took them there: so they reach their node in the same order whatever the order in
    /// which their events arrive, as a node that hands out time slices needs.
    #[inline(never)]
    fn resume(&mut self, p: usize, streams: &Streams) -> SimResult<()> {
        self.starved -= 1;
        let since = self.procs[p].wait_since;
        if self.runs_ahead(p, since) {
            self.ready.push((p, since));
        } else if self.starved == 0 && self.resumed.is_empty() {
            self.advance_proc(p, streams)?;
            self.refresh(self.procs[p].node);
        } else {
            let proc = &mut self.procs[p];
            proc.state = State::Resumed;
            // Its last event is the one that arrived, for errors.
            if let Some(q) = streams.get(p, proc.cursor) {
                proc.last_origin = q.origin;
            }
            self.resumed.push(p);
        }
        if self.starved == 0 && !self.resumed.is_empty() {
            self.go_on_resumed(streams)?;
        }
        self.run(streams)
    }

    /// The resumed processes go on, in the order in which they starved, until one starves
    /// again: it keeps its place, before the others, as it would have gone on to the end of
    /// its turn had its events been there.
    #[cold]
    fn go_on_resumed(&mut self, streams: &Streams) -> SimResult<()> {
        let mut resumed = std::mem::take(&mut self.resumed);
        resumed.sort_unstable_by_key(|&q| Reverse(self.starved_at[q]));
        while let Some(q) = resumed.pop() {
            let turn = self.starved_at[q];
            self.advance_proc(q, streams)?;
            self.refresh(self.procs[q].node);
            if self.starved > 0 {
                if self.procs[q].state == State::Starved {
                    self.starved_at[q] = turn;
                }
                break;
            }
        }
        self.resumed = resumed;
        Ok(())
    }

    /// Whether process `p` runs ahead of the global order from time `t` on.
    ///
    /// A process alone on its node shares the node with nobody: when it finishes its work
    /// depends on nothing else, and it waits only for messages and collectives, whose
    /// arrival times are data. So it does not wait for the global order: it runs through its
    /// events until it blocks (on a message or collective not yet known), starves or exits,
    /// and a wake-up lets it go on at once. This skips the tree of nodes and the timers, and
    /// runs one process's events back to back. Nodes still compute exactly what they would
    /// in the global order, because each node's steps are its own process's, in its order.
    ///
    /// The others' steps are unchanged too: a process running ahead takes its steps at or
    /// after the global order's time, so what it sends to the others takes effect, as in the
    /// global order, only if sent at least one delay between nodes earlier. That holds while
    /// adding that delay changes a time, that is below [`Sim::horizon`]; past it (or if the
    /// network has delays of 0 between nodes, whose ties the global order breaks), such a
    /// process follows the global order like any other.
    #[inline]
    fn runs_ahead(&self, p: usize, t: f64) -> bool {
        self.procs[p].alone && t < self.horizon
    }

    /// Waiting process `p` goes on at `t`, or when it started waiting if that is later (which
    /// only a process running ahead can have done): at once if it runs ahead, else as a timer
    /// in the global order.
    fn wake_at(&mut self, p: usize, t: f64) {
        let t = t.max(self.procs[p].wait_since);
        if self.runs_ahead(p, t) {
            self.ready.push((p, t));
        } else {
            self.timers.push(Reverse(TimeKey::new(t, p)));
        }
    }

    /// Takes steps until some process starves or every process has exited: first the
    /// processes running ahead, then one step in time order, and again.
    fn run(&mut self, streams: &Streams) -> SimResult<()> {
        loop {
            if !self.ready.is_empty() {
                self.run_ahead(streams)?;
            }
            if self.starved > 0 || self.live == 0 {
                return Ok(());
            }
            if !self.dirty.is_empty() {
                self.refresh_dirty();
            }
            let finish = self.finishes.min();
            let timer = self.timers.peek().map(|Reverse(k)| (k.time(), k.id()));
            match (finish, timer) {
                (Some((tf, n)), Some((tt, _))) if tf <= tt => self.finish_work(tf, n, streams)?,
                (Some((tf, n)), None) => self.finish_work(tf, n, streams)?,
                (_, Some((tt, p))) => {
                    self.timers.pop();
                    self.wake(tt, p, streams)?;
                    self.refresh(self.procs[p].node);
                }
                (None, None) => return Err(Box::new(self.deadlock(streams))),
            }
        }
    }

    /// Brings node `n`'s next finish time in [`Sim::finishes`] up to date: a step does so for
    /// its process's node when it is over (the node usually changed twice: a process finished
    /// its work and joined again with the next).
    #[inline]
    fn refresh(&mut self, n: usize) {
        self.finishes.set(n, self.nodes[n].next_finish());
    }

    /// Brings the nodes in [`Sim::dirty`] up to date.
    #[cold]
    fn refresh_dirty(&mut self) {
        while let Some(n) = self.dirty.pop() {
            self.is_dirty[n] = false;
            self.refresh(n);
        }
    }

    /// Lets the processes in [`Sim::ready`] run ahead until each blocks, starves or exits.
    fn run_ahead(&mut self, streams: &Streams) -> SimResult<()> {
        let global_now = self.now;
        while let Some((p, t)) = self.ready.pop() {
            self.now = t;
            self.reached = self.reached.max(t);
            if self.procs[p].state == State::Starved {
                self.advance_proc(p, streams)?;
            } else {
                self.wake(t, p, streams)?;
            }
        }
        self.now = global_now;
        Ok(())
    }

    /// Node `n` takes its next step at time `t`: the process that finishes its work first
    /// reaches its event, or (on a sliced node) a process goes on after its answered wait, or
    /// a slice ends.
    fn finish_work(&mut self, t: f64, n: usize, streams: &Streams) -> SimResult<()> {
        self.now = t;
        self.close_slices(n);
        if let Some(p) = self.nodes[n].pop_finished(t) {
            let p = p as usize;
            if matches!(self.procs[p].state, State::WaitMsg | State::WaitColl) {
                self.end_wait(p, streams)?;
            } else if self.reach(p, self.current(p, streams))? {
                self.advance_proc(p, streams)?;
            }
        }
        self.refresh(n);
        Ok(())
    }

    /// A timer of waiting process `p` fires at time `t`: its message has arrived or its
    /// collective has ended. It goes on now, or on a sliced node when it holds a core.
    fn wake(&mut self, t: f64, p: usize, streams: &Streams) -> SimResult<()> {
        self.now = t;
        if self.procs[p].state == State::NotStarted {
            self.procs[p].start = t;
            return self.advance_proc(p, streams);
        }
        let Proc { node: n, slot, .. } = self.procs[p];
        if self.nodes[n].is_sliced() {
            self.close_slices(n);
            if !self.nodes[n].answer(t, slot) {
                self.mark_dirty(n);
                return Ok(());
            }
        }
        self.end_wait(p, streams)
    }

    /// Waiting process `p`, whose wait was answered, goes on now.
    fn end_wait(&mut self, p: usize, streams: &Streams) -> SimResult<()> {
        let t = self.now;
        self.stop_polling(p);
        let current = self.current(p, streams);
        match current.kind {
            EventKind::RecvEnd { msg } => self.receive(p, msg),
            EventKind::CollEnd { coll } => self.leave_collective(coll),
            // The completion was taken when the send_end was reached.
            EventKind::SendEnd { .. } => {}
            _ => unreachable!("timer for a process that is not waiting"),
        }
        if let Some(sink) = &mut self.sink {
            let since = self.procs[p].wait_since;
            if t > since {
                sink.waiting(p as ProcId, self.procs[p].host as usize, since, t);
            }
        }
        self.report(p, &current.kind);
        self.advance_proc(p, streams)
    }

    /// Loads process `p`'s next events, completing those that need no work and do not block,
    /// until `p` computes, waits, starves or exits.
    fn advance_proc(&mut self, p: usize, streams: &Streams) -> SimResult<()> {
        loop {
            let proc = &mut self.procs[p];
            let Some(q) = streams.get(p, proc.cursor) else {
                proc.state = State::Starved;
                proc.wait_since = self.now;
                self.starved_at[p] = self.starvations;
                self.starvations += 1;
                self.starved += 1;
                return Ok(());
            };
            if proc.cursor == 0 && proc.start > self.now {
                if self.start_ahead(p) {
                    continue;
                }
                return Ok(());
            }
            proc.cursor += 1;
            proc.last_origin = q.origin;
            if q.work > 0.0 {
                proc.state = State::Computing;
                if !self.start_work(p, q.work) {
                    return Ok(());
                }
            }
            if !self.reach(p, q)? {
                return Ok(());
            }
        }
    }

    /// Process `p`, whose first event has arrived, starts later than now: if it runs ahead,
    /// moves on to its start and returns true; else waits for it in the global order.
    #[cold]
    fn start_ahead(&mut self, p: usize) -> bool {
        let start = self.procs[p].start;
        if self.runs_ahead(p, start) {
            self.now = start;
            return true;
        }
        self.procs[p].state = State::NotStarted;
        self.timers.push(Reverse(TimeKey::new(start, p)));
        false
    }

    /// Process `p` starts `work` CPU-seconds of work on its node now. If it runs ahead, also
    /// takes the step where it finishes (as [`Sim::finish_work`] would) and returns true;
    /// else the global order will take it, once the caller has refreshed `p`'s node (see
    /// [`Sim::refresh`]).
    #[inline]
    fn start_work(&mut self, p: usize, work: f64) -> bool {
        let Proc {
            node: n,
            alone,
            slot,
            ..
        } = self.procs[p];
        self.close_slices(n);
        if !alone {
            self.nodes[n].join(self.now, slot, work);
            return false;
        }
        let Some(t) = self.nodes[n].run_alone(self.now, work, self.horizon) else {
            self.mark_dirty(n);
            return false;
        };
        self.now = t;
        self.reached = self.reached.max(t);
        if self.sink.is_some() {
            self.emit_alone_slice(n, p);
        }
        true
    }

    /// Notes that node `n`'s next finish time must be recomputed before the next step.
    fn mark_dirty(&mut self, n: usize) {
        if !self.is_dirty[n] {
            self.is_dirty[n] = true;
            self.dirty.push(n);
        }
    }

    /// Process `p` has done the work before its current event `q`: the event happens now
    /// unless it blocks. Returns whether `p` may go on to its next event.
    fn reach(&mut self, p: usize, q: &Queued) -> SimResult<bool> {
        let done = self.reach_kind(p, q)?;
        if done || q.kind == EventKind::Exit {
            self.report(p, &q.kind);
        }
        Ok(done)
    }

    /// Tells the sink, if any, that `p`'s event `kind` happened now.
    fn report(&mut self, p: usize, kind: &EventKind) {
        if let Some(sink) = &mut self.sink {
            sink.event(p as ProcId, self.procs[p].host as usize, self.now, kind);
        }
    }

    /// [`Sim::reach`] by event kind.
    fn reach_kind(&mut self, p: usize, q: &Queued) -> SimResult<bool> {
        match q.kind {
            // A message's size for the network: its bytes and those of its send call that
            // leave before them (`EventKind::Send::after`).
            EventKind::Send {
                msg,
                bytes,
                rendezvous: false,
                after,
            } => {
                self.send(p, msg, after + bytes, q.origin)?;
                Ok(true)
            }
            EventKind::Send {
                msg,
                bytes,
                rendezvous: true,
                after,
            } => {
                self.send_rendezvous(p, msg, after + bytes, q.origin)?;
                Ok(true)
            }
            EventKind::RecvStart | EventKind::Keepalive => Ok(true),
            EventKind::RecvPost { msg } => {
                self.posts[p].push((msg, q.origin));
                self.unanswered += 1;
                Ok(true)
            }
            EventKind::RecvEnd { msg } => self.await_message(p, msg, q.origin),
            EventKind::SendEnd { msg } => self.await_send(p, msg, q.origin),
            EventKind::CollStart {
                coll,
                op,
                size,
                bytes,
            } => {
                self.enter_collective(p, coll, op, size, bytes, q.origin)?;
                Ok(true)
            }
            EventKind::CollEnd { coll } => self.await_collective(p, coll, q.origin),
            EventKind::Exit => {
                self.exit(p);
                Ok(false)
            }
        }
    }

    /// Process `p` exits now.
    #[cold]
    fn exit(&mut self, p: usize) {
        let Proc { node: n, slot, .. } = self.procs[p];
        if self.nodes[n].is_sliced() {
            self.close_slices(n);
            self.nodes[n].leave(self.now, slot);
            self.mark_dirty(n);
        }
        self.procs[p].state = State::Exited;
        self.live -= 1;
        self.end = self.end.max(self.now);
        self.forget_sends(p);
    }

    /// One-way time of `bytes` from process `from` to process `to` on this target.
    #[inline]
    fn comm(&self, from: usize, to: usize, bytes: u64) -> f64 {
        let local = self.procs[from].host == self.procs[to].host;
        self.network.seconds(local, bytes)
    }

    fn send(&mut self, p: usize, msg: MsgId, bytes: u64, origin: u64) -> SimResult<()> {
        let sent = Msg::Sent {
            at: self.now,
            bytes,
            from: p as ProcId,
        };
        match self.msgs.insert(msg, sent) {
            // A posted receive matters only to a message sent by rendezvous.
            None | Some(Msg::Posted { .. }) => Ok(()),
            Some(Msg::Awaited { by, .. }) => {
                let arrival = self.now + self.comm(p, by as usize, bytes);
                self.wake_at(by as usize, arrival);
                Ok(())
            }
            Some(Msg::Sent { .. } | Msg::Requested { .. }) => Err(duplicate(msg, origin)),
        }
    }

    /// Process `p` is at the recv_end of `msg`: completes now if the message is there.
    fn await_message(&mut self, p: usize, msg: MsgId, origin: u64) -> SimResult<bool> {
        self.answer_posts(p)?;
        let Some(i) = self.msgs.find(msg) else {
            let awaited = Msg::Awaited {
                by: p as ProcId,
                posted: self.now,
            };
            self.msgs.insert(msg, awaited);
            self.start_wait(p, State::WaitMsg);
            return Ok(false);
        };
        let (at, bytes, from) = match self.msgs.at(i) {
            Msg::Sent { at, bytes, from } => (at, bytes, from),
            Msg::Awaited { .. } => return Err(duplicate(msg, origin)),
            Msg::Posted { .. } | Msg::Requested { .. } => {
                return self.await_rendezvous(p, msg, origin)
            }
        };
        let arrival = at + self.comm(from as usize, p, bytes);
        if arrival <= self.now {
            // Consumed through the slot found: one lookup.
            self.msgs.remove_at(i);
            self.report_message(from, p, at, arrival, bytes);
            return Ok(true);
        }
        self.start_wait(p, State::WaitMsg);
        self.wake_at(p, arrival);
        Ok(false)
    }

    /// Process `p`, at the recv_end of `msg`, receives it now if it arrives by now (returns
    /// true), else waits until it arrives at `t`.
    #[inline]
    fn arrives(&mut self, p: usize, msg: MsgId, t: f64) -> bool {
        if t <= self.now {
            self.receive(p, msg);
            return true;
        }
        self.start_wait(p, State::WaitMsg);
        self.wake_at(p, t);
        false
    }

    /// Process `p` consumes `msg`, which has arrived.
    fn receive(&mut self, p: usize, msg: MsgId) {
        if let Some(Msg::Sent { at, bytes, from }) = self.msgs.remove(&msg) {
            if self.sink.is_some() {
                let arrived = at + self.comm(from as usize, p, bytes);
                self.report_message(from, p, at, arrived, bytes);
            }
        }
    }

    /// Tells the sink, if any, that a message from `from` sent at `at` reached `p` at
    /// `arrived`.
    #[inline]
    fn report_message(&mut self, from: ProcId, p: usize, at: f64, arrived: f64, bytes: u64) {
        if let Some(sink) = &mut self.sink {
            sink.message(from, p as ProcId, at, arrived, bytes);
        }
    }

    /// Process `p` starts waiting now; if waiting processes poll, it loads its node (on a
    /// sliced node, the node's scheduler says what it does with its core).
    #[inline]
    fn start_wait(&mut self, p: usize, state: State) {
        self.procs[p].state = state;
        self.procs[p].wait_since = self.now;
        let Proc { node: n, slot, .. } = self.procs[p];
        if self.nodes[n].is_sliced() {
            self.close_slices(n);
            self.nodes[n].start_wait(self.now, slot);
            self.mark_dirty(n);
        }
        self.change_polling(p, self.spin);
    }

    /// Process `p` stops waiting now: it no longer loads its node.
    #[inline]
    fn stop_polling(&mut self, p: usize) {
        self.change_polling(p, -self.spin);
    }

    /// Adds `delta` to the polling load of `p`'s node, if waiting processes poll at all.
    #[inline]
    fn change_polling(&mut self, p: usize, delta: f64) {
        if self.spin > 0.0 {
            let n = self.procs[p].node;
            self.close_slices(n);
            self.nodes[n].add_polling(self.now, delta);
            self.mark_dirty(n);
        }
    }

    // Out of line, as are the other collective operations: they are rarer than messages, and
    // inlined they made the stack frame of every step larger.
    #[inline(never)]
    fn enter_collective(
        &mut self,
        p: usize,
        coll: CollId,
        op: crate::event::CollOp,
        size: u32,
        bytes: u64,
        origin: u64,
    ) -> SimResult<()> {
        let (node, now) = (self.procs[p].host as usize, self.now);
        let c = self.colls.entry(coll).or_insert_with(|| Collective {
            op,
            size,
            bytes,
            latest: now,
            arrived: 0,
            departed: 0,
            first_node: node,
            multi_node: false,
            ends_at: None,
            waiters: Vec::new(),
        });
        let bad = |reason: String| {
            Box::new(EngineError::BadCollective {
                coll,
                reason,
                origin,
            })
        };
        if c.size != size || c.op != op {
            return Err(bad(format!(
                "process {p} enters it as a {op:?} of {size}, others as a {:?} of {}",
                c.op, c.size
            )));
        }
        if c.arrived == c.size {
            return Err(bad(format!(
                "process {p} is participant {} of {}",
                c.size + 1,
                c.size
            )));
        }
        c.arrived += 1;
        c.bytes = c.bytes.max(bytes);
        c.latest = c.latest.max(now);
        c.multi_node |= node != c.first_node;
        if c.arrived == c.size {
            // The last participant in time, not necessarily the last one simulated: some
            // may have run ahead.
            let ends =
                c.latest + collective::cost(&self.network, c.op, c.size, c.bytes, c.multi_node);
            c.ends_at = Some(ends);
            for w in std::mem::take(&mut c.waiters) {
                self.wake_at(w as usize, ends);
            }
        }
        Ok(())
    }

    /// Process `p` is at the coll_end of `coll`: leaves now if the collective has ended.
    #[inline(never)]
    fn await_collective(&mut self, p: usize, coll: CollId, origin: u64) -> SimResult<bool> {
        self.answer_posts(p)?;
        let Some(c) = self.colls.get_mut(&coll) else {
            return Err(Box::new(EngineError::BadCollective {
                coll,
                reason: format!("process {p} leaves it without having entered it"),
                origin,
            }));
        };
        match c.ends_at {
            Some(t) if t <= self.now => {
                self.leave_collective(coll);
                Ok(true)
            }
            Some(t) => {
                self.start_wait(p, State::WaitColl);
                self.wake_at(p, t);
                Ok(false)
            }
            None => {
                c.waiters.push(p as ProcId);
                self.start_wait(p, State::WaitColl);
                Ok(false)
            }
        }
    }

    #[inline(never)]
    fn leave_collective(&mut self, coll: CollId) {
        if let Some(c) = self.colls.get_mut(&coll) {
            c.departed += 1;
            if c.departed == c.size {
                self.colls.remove(&coll);
            }
        }
    }

    /// Emits the running slices of node `n` up to now, before its runnable set changes, if
    /// there is a sink.
    #[inline(always)]
    fn close_slices(&mut self, n: usize) {
        if self.sink.is_some() {
            self.emit_slices(n);
        }
    }

    /// [`Sim::close_slices`] with a sink.
    #[cold]
    fn emit_slices(&mut self, n: usize) {
        let Some(sink) = &mut self.sink else { return };
        let start = self.slice_start[n];
        if self.now > start {
            let node = &self.nodes[n];
            let rate = node.rate();
            for p in node.runnable() {
                let host = self.procs[p as usize].host as usize;
                sink.running(p, host, start, self.now, rate);
            }
        }
        self.slice_start[n] = self.now;
    }

    /// [`Sim::close_slices`] at the finish of process `p`, alone on node `n`, which ran ahead
    /// (see [`NodeState::run_alone`]).
    #[cold]
    fn emit_alone_slice(&mut self, n: usize, p: usize) {
        let Some(sink) = &mut self.sink else { return };
        let start = self.slice_start[n];
        if self.now > start {
            let rate = self.nodes[n].alone_rate();
            let host = self.procs[p].host as usize;
            sink.running(p as ProcId, host, start, self.now, rate);
        }
        self.slice_start[n] = self.now;
    }

    /// The error for a state where every live process waits and nothing can wake any.
    fn deadlock(&self, streams: &Streams) -> EngineError {
        let waiting = self
            .procs
            .iter()
            .enumerate()
            .filter(|(_, pr)| matches!(pr.state, State::WaitMsg | State::WaitColl))
            .map(|(p, _)| {
                let q = self.current(p, streams);
                let what = match q.kind {
                    EventKind::RecvEnd { msg } => {
                        format!("waits for message {msg}, which no live process will send")
                    }
                    EventKind::CollEnd { coll } => {
                        let c = &self.colls[&coll];
                        format!(
                            "waits in collective {coll}, which {} of {} participants entered",
                            c.arrived, c.size
                        )
                    }
                    EventKind::SendEnd { msg } => format!(
                        "waits for the transfer of message {msg}, sent by rendezvous, whose \
                         receive no live process will post"
                    ),
                    _ => unreachable!(),
                };
                (p as ProcId, q.origin, what)
            })
            .collect();
        EngineError::Deadlock { waiting }
    }

    /// Progress so far.
    pub(super) fn progress(&self) -> Progress {
        Progress {
            target: self.name.clone(),
            simulated_seconds: self.now.max(self.reached),
            exited: self.procs.len() - self.live,
        }
    }

    /// The prediction once every process has exited, or why there is none.
    pub(super) fn finish(self) -> Result<Prediction, EngineError> {
        if self.live > 0 {
            let unfinished = self
                .procs
                .iter()
                .enumerate()
                .filter(|(_, pr)| pr.state != State::Exited)
                .map(|(p, pr)| (p as ProcId, pr.last_origin))
                .collect();
            return Err(EngineError::Truncated { unfinished });
        }
        Ok(Prediction {
            target: self.name,
            predicted_seconds: self.end,
            startup_shift_seconds: 0.0,
        })
    }
}

/// The error for a message sent twice or received twice.
#[cold]
fn duplicate(msg: MsgId, origin: u64) -> Box<EngineError> {
    Box::new(EngineError::DuplicateMessage { msg, origin })
}
