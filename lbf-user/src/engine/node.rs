//! Processor sharing on one target node, in virtual time.
//!
//! All runnable processes of a node progress at the same rate,
//! `speed * min(1, cores / runnable)`. Instead of decrementing every process's remaining work
//! at every step, the node keeps a *virtual clock*: the CPU-seconds each runnable process has
//! received since the node was created. A process that joins at virtual time `v` with `w`
//! CPU-seconds of work finishes at virtual time `v + w`, whatever happens to the rate in
//! between. The next process to finish is the one with the smallest finish time, kept in a
//! heap, and the only way to leave the runnable set is to finish: so every change costs
//! O(log n) and nothing is touched per step.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::time::TimeKey;
use crate::event::ProcId;
use crate::target::Node;

/// The runnable processes of one node and its virtual clock.
#[derive(Debug)]
pub(super) struct NodeState {
    cores: u32,
    speed: f64,
    /// Keyed by finish virtual time, then process; smallest first.
    runnable: BinaryHeap<Reverse<TimeKey>>,
    /// Load of the waiting processes that poll: the number of polling processes times the
    /// target's spin weight. They share the cores but make no progress.
    polling: f64,
    /// Virtual clock at real time `synced_at`.
    virtual_now: f64,
    /// Real time at which `virtual_now` was last brought up to date.
    synced_at: f64,
}

impl NodeState {
    /// A node with nothing runnable, at time 0.
    pub(super) fn new(node: &Node) -> Self {
        NodeState {
            cores: node.cores,
            speed: node.speed,
            runnable: BinaryHeap::new(),
            polling: 0.0,
            virtual_now: 0.0,
            synced_at: 0.0,
        }
    }

    /// Per-process rate with the current number of runnable and polling processes.
    pub(super) fn rate(&self) -> f64 {
        let load = self.runnable.len() as f64 + self.polling;
        if load <= self.cores as f64 {
            return self.speed;
        }
        self.speed * self.cores as f64 / load
    }

    /// Adds `delta` (positive or negative) to the polling load at real time `now`.
    pub(super) fn add_polling(&mut self, now: f64, delta: f64) {
        self.sync(now);
        self.polling = (self.polling + delta).max(0.0);
    }

    /// The runnable processes, in no particular order.
    pub(super) fn runnable(&self) -> impl Iterator<Item = ProcId> + '_ {
        self.runnable.iter().map(|Reverse(k)| k.id() as ProcId)
    }

    /// Brings the virtual clock up to real time `now`.
    fn sync(&mut self, now: f64) {
        if !self.runnable.is_empty() {
            self.virtual_now += self.rate() * (now - self.synced_at);
        }
        self.synced_at = now;
    }

    /// Makes `proc` runnable at real time `now` with `work` CPU-seconds to do.
    pub(super) fn join(&mut self, now: f64, proc: ProcId, work: f64) {
        self.sync(now);
        self.runnable.push(Reverse(TimeKey::new(
            self.virtual_now + work,
            proc as usize,
        )));
    }

    /// Real time at which the next runnable process finishes its work, if any is runnable.
    pub(super) fn next_finish(&self) -> Option<f64> {
        let Reverse(finish) = self.runnable.peek()?;
        let remaining = (finish.time() - self.virtual_now).max(0.0);
        Some(self.synced_at + remaining / self.rate())
    }

    /// Removes the process that finishes first, at real time `now` (its finish time).
    pub(super) fn pop_finished(&mut self, now: f64) -> ProcId {
        self.sync(now);
        let Reverse(finish) = self.runnable.pop().expect("pop_finished on an idle node");
        // Snap the clock to the finish time so rounding never leaves a sliver of work behind.
        self.virtual_now = self.virtual_now.max(finish.time());
        finish.id() as ProcId
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cores: u32, speed: f64) -> NodeState {
        NodeState::new(&Node {
            procs: vec![],
            cores,
            speed,
        })
    }

    #[test]
    fn two_processes_share_one_core() {
        let mut n = node(1, 1.0);
        n.join(0.0, 0, 1.0);
        n.join(0.0, 1, 3.0);
        assert_eq!(n.next_finish(), Some(2.0));
        assert_eq!(n.pop_finished(2.0), 0);
        // process 1 has 2 CPU-seconds left and now runs alone
        assert_eq!(n.next_finish(), Some(4.0));
    }

    #[test]
    fn a_late_joiner_slows_the_others() {
        let mut n = node(1, 2.0);
        n.join(0.0, 0, 4.0); // alone: would finish at 2.0
        n.join(1.0, 1, 1.0); // at 1.0, 2 CPU-s left for 0; both now at rate 1
        assert_eq!(n.next_finish(), Some(2.0));
        assert_eq!(n.pop_finished(2.0), 1);
        assert_eq!(n.next_finish(), Some(2.5));
    }

    #[test]
    fn polling_processes_take_a_share_without_progress() {
        let mut n = node(1, 1.0);
        n.join(0.0, 0, 1.0);
        n.add_polling(0.0, 1.0); // one process polls as hard as it can
        assert_eq!(n.next_finish(), Some(2.0));
        n.add_polling(1.0, -1.0); // at 1.0 it stops: half the work is left
        assert_eq!(n.next_finish(), Some(1.5));
    }

    #[test]
    fn cores_are_not_shared_until_oversubscribed() {
        let mut n = node(2, 1.0);
        n.join(0.0, 0, 1.0);
        n.join(0.0, 1, 1.0);
        assert_eq!(n.next_finish(), Some(1.0));
        n.join(0.0, 2, 1.0);
        assert_eq!(n.next_finish(), Some(1.5));
    }
}
