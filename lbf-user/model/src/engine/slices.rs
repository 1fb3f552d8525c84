//! Time slices on one oversubscribed target node: the scheduler-aware node model.
//!
//! The fluid model ([`super::node`]) shares a node's cores continuously, as the paper's
//! round-robin with an infinitely small quantum. An operating system hands out cores in
//! slices: a process keeps its core until it gives it up or its slice ends, and a process
//! that waits by polling (MPICH's default) holds its core for a whole slice while it waits.
//! With more processes than cores, every hand-off of a message between two such processes
//! then waits for the scheduler, which the fluid model leaves out (see `docs/engine.md`).
//!
//! The model, for a node with more processes than cores (with fewer, every process has a
//! core of its own and the fluid model is exact):
//! - A process that wants a core (it has work, it polls, or its wait has just been answered)
//!   takes a free core at once, or joins the tail of the node's run queue.
//! - A core's process keeps it while it works, and, if waiting processes poll
//!   ([`Wait::Spin`]), while it waits. A process that waits by yielding ([`Wait::Yield`])
//!   gives the core to the head of the queue at once and does not queue until its wait is
//!   answered.
//! - Slices are `slice` seconds long, on a grid from the moment the core's process took it,
//!   like the scheduler's tick: at a slice's end, if processes are queued, the core's process
//!   goes to the tail of the queue and the head takes the core for a new slice (unless the
//!   head itself lost a core at that instant: slices that end together on several cores
//!   do not pass one process from core to core).
//! - A polling process whose wait is answered while it holds a core goes on at once; one that
//!   is queued goes on when it takes a core.
//!
//! A process works at the node's speed while it holds a core. While every process that holds
//! or wants a core only polls, nothing can happen on the node but a rotation of who holds it:
//! such slice ends are not steps of the simulation, and are caught up with when something
//! changes ([`SlicedNode::catch_up`]).

use std::collections::VecDeque;

use crate::event::ProcId;
use crate::target::{Node, Scheduler, Wait};

/// What a process of the node wants from it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// Nothing: not started, starved for events outside a core, waiting by yielding, exited.
    Nothing,
    /// To work: while it holds a core, the time it finishes; while it does not, the
    /// CPU-seconds it still has to do. (Kept this way, the work done is computed once per
    /// turn on a core, not at every step: the result does not depend on how often the
    /// simulation looks at the node.)
    Work(f64),
    /// To poll: it waits, holding a core or queued for one.
    Poll,
    /// To go on: its wait has been answered, it needs a core to notice.
    Resume,
    /// It holds its core at the step the simulation is taking for it (it finished its work or
    /// its wait): the simulation says next what it wants.
    Held,
}

/// One process of the node.
#[derive(Clone, Copy, Debug)]
struct Slot {
    want: Want,
    /// The core it holds, if any.
    core: Option<usize>,
    /// When it last joined the queue.
    queued_at: f64,
}

/// One core: the slot of the process holding it, and when that process took it.
#[derive(Clone, Copy, Debug)]
struct Core {
    slot: Option<usize>,
    since: f64,
}

/// What happens next on a node.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Next {
    /// The process holding the core finishes its work, or notices that its wait was answered.
    Done,
    /// The core's slice ends and a queued process takes it.
    SliceEnd,
}

/// An oversubscribed node under the time-slice model (see the module's documentation).
#[derive(Debug)]
pub(super) struct SlicedNode {
    speed: f64,
    slice: f64,
    wait: Wait,
    /// The process in each slot, in id order.
    procs: Vec<ProcId>,
    slots: Vec<Slot>,
    cores: Vec<Core>,
    /// Slots waiting for a core, in the order they will take one.
    queue: VecDeque<usize>,
    /// The time of the simulation's last change to the node.
    synced_at: f64,
}

impl SlicedNode {
    /// The node `node` with nothing running, at time 0.
    pub(super) fn new(node: &Node, scheduler: &Scheduler) -> Self {
        let mut procs = node.procs.clone();
        procs.sort_unstable();
        SlicedNode {
            speed: node.speed,
            slice: scheduler.slice,
            wait: scheduler.wait,
            slots: vec![
                Slot {
                    want: Want::Nothing,
                    core: None,
                    queued_at: 0.0,
                };
                procs.len()
            ],
            procs,
            cores: vec![
                Core {
                    slot: None,
                    since: 0.0,
                };
                node.cores as usize
            ],
            queue: VecDeque::new(),
            synced_at: 0.0,
        }
    }

    /// The slot of each of the node's processes, as `(process, slot)`.
    pub(super) fn slots(&self) -> impl Iterator<Item = (ProcId, usize)> + '_ {
        self.procs.iter().enumerate().map(|(slot, &p)| (p, slot))
    }

    /// The processes working now (holding a core, with work to do), in slot order.
    pub(super) fn working(&self) -> impl Iterator<Item = ProcId> + '_ {
        self.slots
            .iter()
            .zip(&self.procs)
            .filter(|(s, _)| s.core.is_some() && matches!(s.want, Want::Work(_)))
            .map(|(_, &p)| p)
    }

    /// The rate of a working process: the node's speed (it has a core of its own).
    pub(super) fn rate(&self) -> f64 {
        self.speed
    }

    /// The process in `slot` has `work` CPU-seconds to do from `now`: it goes on with its
    /// core if it holds one, else asks for one.
    pub(super) fn join(&mut self, now: f64, slot: usize, work: f64) {
        self.bring_to(now);
        match self.slots[slot].core {
            Some(_) => self.slots[slot].want = Want::Work(now + work / self.speed),
            None => {
                self.slots[slot].want = Want::Work(work);
                self.ask(now, slot);
            }
        }
    }

    /// The process in `slot` starts waiting at `now`: polling it keeps (or asks for) a core,
    /// yielding it gives up its core.
    pub(super) fn start_wait(&mut self, now: f64, slot: usize) {
        self.bring_to(now);
        match self.wait {
            Wait::Spin => {
                self.slots[slot].want = Want::Poll;
                if self.slots[slot].core.is_none() {
                    self.ask(now, slot);
                }
            }
            Wait::Yield => {
                self.slots[slot].want = Want::Nothing;
                self.give_up(now, slot);
            }
        }
    }

    /// The wait of the process in `slot` is answered at `now`. Returns true if it goes on at
    /// once (it holds a core, or takes a free one; it is then held, see
    /// [`SlicedNode::pop_finished`]); else it goes on when it takes a core.
    pub(super) fn answer(&mut self, now: f64, slot: usize) -> bool {
        self.bring_to(now);
        self.rotate_due(now);
        let queued = self.slots[slot].want == Want::Poll && self.slots[slot].core.is_none();
        self.slots[slot].want = Want::Resume;
        if self.slots[slot].core.is_none() && !queued {
            self.ask(now, slot);
        }
        if self.slots[slot].core.is_some() {
            self.slots[slot].want = Want::Held;
            return true;
        }
        false
    }

    /// The process in `slot` exits at `now`: it gives up its core or its place in the queue.
    pub(super) fn leave(&mut self, now: f64, slot: usize) {
        self.bring_to(now);
        self.slots[slot].want = Want::Nothing;
        if let Some(i) = self.queue.iter().position(|&s| s == slot) {
            self.queue.remove(i);
        }
        self.give_up(now, slot);
    }

    /// When the next step of the node happens: a process finishes its work or goes on after
    /// its wait, or a slice ends with a process queued. `None` if nothing will happen until
    /// the simulation changes the node.
    pub(super) fn next_finish(&self) -> Option<f64> {
        self.next().map(|(t, ..)| t)
    }

    /// Takes the node's next step at `now` (its time, [`SlicedNode::next_finish`]): returns
    /// the process that finished its work or goes on after its wait (it is held, the
    /// simulation says next what it wants), or `None` for a slice's end.
    pub(super) fn pop_finished(&mut self, now: f64) -> Option<ProcId> {
        let (_, core, next) = self
            .next()
            .expect("pop_finished on a node with no next step");
        self.synced_at = now;
        let slot = self.cores[core].slot.expect("a step on an idle core");
        match next {
            Next::Done => {
                self.slots[slot].want = Want::Held;
                Some(self.procs[slot])
            }
            Next::SliceEnd => {
                self.rotate(core, now);
                None
            }
        }
    }

    /// The next step, as (time, core, what): at equal times, finishes (on any core) before
    /// slice ends, then the lower core.
    fn next(&self) -> Option<(f64, usize, Next)> {
        let rotating = self.rotating();
        let steps = self.cores.iter().enumerate().flat_map(|(c, core)| {
            let done = core.slot.and_then(|slot| match self.slots[slot].want {
                Want::Work(finish) => Some((finish, c, Next::Done)),
                Want::Resume => Some((self.synced_at, c, Next::Done)),
                _ => None,
            });
            let end = (rotating && core.slot.is_some())
                .then(|| (self.rotation_at(core.since), c, Next::SliceEnd));
            done.into_iter().chain(end)
        });
        self.earliest(steps)
    }

    /// The step of `steps` to take first, at the earliest time: of the steps at that time
    /// (within a billionth of a slice, as times reached in different ways round
    /// differently), finishes before slice ends, then the lower core.
    fn earliest(
        &self,
        steps: impl Iterator<Item = (f64, usize, Next)> + Clone,
    ) -> Option<(f64, usize, Next)> {
        let first = steps.clone().map(|(t, ..)| t).min_by(f64::total_cmp)?;
        let (_, c, next) = steps
            .filter(|&(t, ..)| t <= first + self.tie())
            .min_by_key(|&(_, c, next)| (next == Next::SliceEnd, c))?;
        Some((first, c, next))
    }

    /// How close two times are to count as one instant: a billionth of a slice.
    fn tie(&self) -> f64 {
        self.slice * 1e-9
    }

    /// Whether slice ends are steps: a process is queued and some process holding or wanting
    /// a core can make progress (see the module's documentation). A held process counts: the
    /// simulation is taking a step for it, and a slice ending in that very instant comes after
    /// the step (finishes come before slice ends), not before it as a catch-up.
    fn rotating(&self) -> bool {
        !self.queue.is_empty()
            && self
                .slots
                .iter()
                .any(|s| matches!(s.want, Want::Work(_) | Want::Resume | Want::Held))
    }

    /// When a core held since `since` is next handed to the head of the queue: at the first
    /// end of a slice ([`SlicedNode::slice_end`]), unless the head lost a core at that very
    /// moment (a process preempted on one core does not take another in the same instant),
    /// then at the next.
    fn rotation_at(&self, since: f64) -> f64 {
        let end = self.slice_end(since);
        match self.queue.front() {
            Some(&head) if self.slots[head].queued_at >= end - self.tie() => end + self.slice,
            _ => end,
        }
    }

    /// The first end of a slice, on the grid from `since`, after the last step (at
    /// [`SlicedNode::synced_at`], or exactly then: a time within a billionth of a slice of a
    /// grid point is on it, as the times' rounding would otherwise skip a whole slice).
    fn slice_end(&self, since: f64) -> f64 {
        let slices = ((self.synced_at - since - self.tie()) / self.slice)
            .ceil()
            .max(1.0);
        since + slices * self.slice
    }

    /// Takes the slice ends due at `now` (within a billionth of a slice) before a wait
    /// answered at `now` queues its process: at one instant, the node's own steps come before
    /// answered waits, whichever the simulation's times, rounded their own way, put first. A
    /// finish due then is left to the simulation, and the slice ends after it.
    fn rotate_due(&mut self, now: f64) {
        while let Some((t, c, Next::SliceEnd)) = self.next() {
            if t > now + self.tie() {
                return;
            }
            self.rotate(c, now);
        }
    }

    /// Brings the node to `now` before the simulation changes it: the rotations of polling
    /// processes that were not steps ([`SlicedNode::catch_up`]).
    fn bring_to(&mut self, now: f64) {
        self.catch_up(now);
        self.synced_at = now;
    }

    /// Takes the slice ends up to `now` that were not steps because only polling processes
    /// held or wanted a core: each rotates who holds the core, in time order.
    fn catch_up(&mut self, now: f64) {
        if self.queue.is_empty() || self.rotating() {
            return;
        }
        loop {
            let ends = self
                .cores
                .iter()
                .enumerate()
                .filter(|(_, core)| core.slot.is_some())
                .map(|(c, core)| (self.rotation_at(core.since), c, Next::SliceEnd));
            let Some((t, c, _)) = self.earliest(ends).filter(|&(t, ..)| t <= now) else {
                return;
            };
            self.synced_at = t;
            self.rotate(c, t);
        }
    }

    /// The process in `slot` wants a core at `now`: takes a free one, or queues.
    fn ask(&mut self, now: f64, slot: usize) {
        match self.cores.iter().position(|c| c.slot.is_none()) {
            Some(c) => self.take(c, slot, now),
            None => self.enqueue(slot, now),
        }
    }

    /// The process in `slot` gives up its core at `now`, if it holds one: the head of the
    /// queue takes it.
    fn give_up(&mut self, now: f64, slot: usize) {
        let Some(c) = self.slots[slot].core else {
            return;
        };
        self.lose_core(slot, now);
        self.cores[c].slot = None;
        if let Some(next) = self.queue.pop_front() {
            self.take(c, next, now);
        }
    }

    /// The slice of core `c` ends at `now`: its process goes to the tail of the queue and the
    /// head takes the core.
    fn rotate(&mut self, c: usize, now: f64) {
        let Some(next) = self.queue.pop_front() else {
            return;
        };
        if let Some(slot) = self.cores[c].slot.take() {
            self.lose_core(slot, now);
            self.enqueue(slot, now);
        }
        self.take(c, next, now);
    }

    /// The process in `slot` joins the tail of the queue at `now`.
    fn enqueue(&mut self, slot: usize, now: f64) {
        debug_assert!(!self.queue.contains(&slot), "slot {slot} queued twice");
        self.slots[slot].queued_at = now;
        self.queue.push_back(slot);
    }

    /// The process in `slot` takes core `c` at `now` for a new slice.
    fn take(&mut self, c: usize, slot: usize, now: f64) {
        self.cores[c] = Core {
            slot: Some(slot),
            since: now,
        };
        let s = &mut self.slots[slot];
        s.core = Some(c);
        if let Want::Work(left) = s.want {
            s.want = Want::Work(now + left / self.speed);
        }
    }

    /// The process in `slot` loses its core at `now`: what it has left of its work is kept.
    fn lose_core(&mut self, slot: usize, now: f64) {
        let s = &mut self.slots[slot];
        s.core = None;
        if let Want::Work(finish) = s.want {
            s.want = Want::Work(((finish - now) * self.speed).max(0.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(procs: u32, cores: u32, wait: Wait) -> SlicedNode {
        SlicedNode::new(
            &Node {
                procs: (0..procs).collect(),
                cores,
                speed: 1.0,
            },
            &Scheduler { slice: 0.004, wait },
        )
    }

    #[test]
    fn two_workers_on_one_core_take_turns_by_slices() {
        let mut n = node(2, 1, Wait::Spin);
        n.join(0.0, 0, 0.006);
        n.join(0.0, 1, 0.002);
        // 0 runs 4 ms, then 1 runs its 2 ms, then 0 its last 2 ms.
        assert_eq!(n.next_finish(), Some(0.004));
        assert_eq!(n.pop_finished(0.004), None);
        assert_eq!(n.next_finish(), Some(0.006));
        assert_eq!(n.pop_finished(0.006), Some(1));
        n.leave(0.006, 1);
        assert_eq!(n.next_finish(), Some(0.008));
        assert_eq!(n.pop_finished(0.008), Some(0));
    }

    #[test]
    fn a_polling_process_holds_its_core_until_its_slice_ends() {
        let mut n = node(2, 1, Wait::Spin);
        n.join(0.0, 0, 0.001);
        n.join(0.0, 1, 0.001);
        assert_eq!(n.pop_finished(0.001), Some(0));
        // 0 sends to 1 and waits, polling: 1 takes the core only at the slice's end.
        n.start_wait(0.001, 0);
        assert_eq!(n.next_finish(), Some(0.004));
        assert_eq!(n.pop_finished(0.004), None);
        assert_eq!(n.next_finish(), Some(0.005));
        assert_eq!(n.pop_finished(0.005), Some(1));
        // 1 answers 0 and waits: 0 is queued, polling, and goes on when it takes the core.
        n.start_wait(0.005, 1);
        assert!(!n.answer(0.005, 0));
        assert_eq!(n.next_finish(), Some(0.008));
        assert_eq!(n.pop_finished(0.008), None);
        assert_eq!(n.next_finish(), Some(0.008));
        assert_eq!(n.pop_finished(0.008), Some(0));
    }

    #[test]
    fn a_yielding_process_hands_its_core_over_at_once() {
        let mut n = node(2, 1, Wait::Yield);
        n.join(0.0, 0, 0.001);
        n.join(0.0, 1, 0.001);
        assert_eq!(n.pop_finished(0.001), Some(0));
        n.start_wait(0.001, 0);
        assert_eq!(n.next_finish(), Some(0.002));
        assert_eq!(n.pop_finished(0.002), Some(1));
        n.start_wait(0.002, 1);
        // 0's wait is answered with the core free: it goes on at once.
        assert!(n.answer(0.002, 0));
    }

    #[test]
    fn polling_processes_rotate_without_steps() {
        let mut n = node(3, 1, Wait::Spin);
        for slot in 0..3 {
            n.start_wait(0.0, slot);
        }
        // 0 holds the core; nothing can happen until a wait is answered.
        assert_eq!(n.next_finish(), None);
        // At 9 ms the core has gone 0 -> 1 (4 ms) -> 2 (8 ms): 0, answered while queued
        // first, takes the core when 2's slice ends, at 12 ms.
        assert!(!n.answer(0.009, 0));
        assert_eq!(n.next_finish(), Some(0.012));
        assert_eq!(n.pop_finished(0.012), None);
        assert_eq!(n.next_finish(), Some(0.012));
        assert_eq!(n.pop_finished(0.012), Some(0));
    }
}
