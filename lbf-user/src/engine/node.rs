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
//!
//! A process that finishes usually joins again at once with the work before its next event.
//! So a finished process stays at the top of the heap, out of the count, until the next join
//! replaces it (one sift instead of a pop and a push) or another operation removes it.

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
    /// Keyed by finish virtual time, then process; smallest first. While `finished_top`,
    /// the top is a process that has finished and is no longer runnable.
    runnable: BinaryHeap<Reverse<TimeKey>>,
    /// Whether the heap's top has finished (see the module's documentation).
    finished_top: bool,
    /// Per-process rate for the current load: kept up to date, as it is needed at every step.
    rate: f64,
    /// The rate for each number of runnable processes while none polls, computed once: the
    /// rate changes at nearly every step, and on an oversubscribed node it is a division.
    rates: Vec<f64>,
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
        let rates = (0..=node.procs.len())
            .map(|runnable| rate(node.speed, node.cores, runnable as f64))
            .collect();
        NodeState {
            cores: node.cores,
            speed: node.speed,
            runnable: BinaryHeap::new(),
            finished_top: false,
            rate: node.speed,
            rates,
            polling: 0.0,
            virtual_now: 0.0,
            synced_at: 0.0,
        }
    }

    /// Per-process rate with the current number of runnable and polling processes.
    pub(super) fn rate(&self) -> f64 {
        self.rate
    }

    /// Processes runnable now.
    fn len(&self) -> usize {
        self.runnable.len() - usize::from(self.finished_top)
    }

    /// Recomputes `rate` after the load changed.
    #[inline]
    fn update_rate(&mut self) {
        self.rate = self.rate_for(self.len());
    }

    /// The rate with `runnable` processes and the current polling load.
    #[inline]
    fn rate_for(&self, runnable: usize) -> f64 {
        // Without polling the load is the number of runnable processes (`+ 0.0` changes no
        // number), whose rate is in the table.
        if self.polling == 0.0 {
            self.rates[runnable]
        } else {
            rate(self.speed, self.cores, runnable as f64 + self.polling)
        }
    }

    /// The rate of the node's only process while it is runnable.
    pub(super) fn alone_rate(&self) -> f64 {
        self.rate_for(1)
    }

    /// Adds `delta` (positive or negative) to the polling load at real time `now`.
    pub(super) fn add_polling(&mut self, now: f64, delta: f64) {
        self.sync(now);
        self.polling = (self.polling + delta).max(0.0);
        self.update_rate();
    }

    /// The runnable processes, in no particular order.
    pub(super) fn runnable(&self) -> impl Iterator<Item = ProcId> + '_ {
        // The heap's slice starts with its top.
        let runnable = &self.runnable.as_slice()[usize::from(self.finished_top)..];
        runnable.iter().map(|Reverse(k)| k.id() as ProcId)
    }

    /// Brings the virtual clock up to real time `now`.
    fn sync(&mut self, now: f64) {
        if self.len() > 0 {
            self.virtual_now += self.rate * (now - self.synced_at);
        }
        self.synced_at = now;
    }

    /// Removes the finished process from the top of the heap, if it is there.
    fn drop_finished(&mut self) {
        if self.finished_top {
            self.finished_top = false;
            self.runnable.pop();
        }
    }

    /// Makes `proc` runnable at real time `now` with `work` CPU-seconds to do.
    pub(super) fn join(&mut self, now: f64, proc: ProcId, work: f64) {
        self.sync(now);
        let key = Reverse(TimeKey::new(self.virtual_now + work, proc as usize));
        if self.finished_top {
            self.finished_top = false;
            *self.runnable.peek_mut().expect("a finished top") = key;
        } else {
            self.runnable.push(key);
        }
        self.update_rate();
    }

    /// The node's only process, `proc`, joins at real time `now` with `work` CPU-seconds to
    /// do ([`NodeState::join`]). If it finishes before real time `until`, it also finishes
    /// ([`NodeState::pop_finished`] at that time), and the time is returned; else it stays
    /// runnable. The same arithmetic as those two, without the heap: a process alone on its
    /// node is the one that finishes first.
    #[inline]
    pub(super) fn run_alone(
        &mut self,
        now: f64,
        proc: ProcId,
        work: f64,
        until: f64,
    ) -> Option<f64> {
        debug_assert_eq!(self.len(), 0, "run_alone with another process runnable");
        self.sync(now);
        let key = TimeKey::new(self.virtual_now + work, proc as usize);
        self.runnable.clear();
        self.finished_top = false;
        let rate = self.rate_for(1);
        let t = self.synced_at + (key.time() - self.virtual_now).max(0.0) / rate;
        if t >= until {
            self.runnable.push(Reverse(key));
            self.rate = rate;
            return None;
        }
        self.virtual_now += rate * (t - self.synced_at);
        self.synced_at = t;
        self.rate = self.rate_for(0);
        self.virtual_now = self.virtual_now.max(key.time());
        Some(t)
    }

    /// Real time at which the next runnable process finishes its work, if any is runnable.
    #[inline]
    pub(super) fn next_finish(&mut self) -> Option<f64> {
        self.drop_finished();
        let Reverse(finish) = *self.runnable.peek()?;
        Some(self.real_time_of(finish))
    }

    /// Real time at which the runnable process keyed `finish` finishes, at the current rate.
    #[inline]
    fn real_time_of(&self, finish: TimeKey) -> f64 {
        let remaining = (finish.time() - self.virtual_now).max(0.0);
        self.synced_at + remaining / self.rate
    }

    /// Removes the process that finishes first, at real time `now` (its finish time).
    pub(super) fn pop_finished(&mut self, now: f64) -> ProcId {
        self.drop_finished();
        self.sync(now);
        let Reverse(finish) = *self.runnable.peek().expect("pop_finished on an idle node");
        self.finished_top = true;
        self.update_rate();
        // Snap the clock to the finish time so rounding never leaves a sliver of work behind.
        self.virtual_now = self.virtual_now.max(finish.time());
        finish.id() as ProcId
    }
}

/// Per-process rate on a node of `speed` and `cores` with a load of `load` processes.
fn rate(speed: f64, cores: u32, load: f64) -> f64 {
    if load <= cores as f64 {
        speed
    } else {
        speed * cores as f64 / load
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cores: u32, speed: f64) -> NodeState {
        NodeState::new(&Node {
            procs: vec![0, 1, 2, 3],
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
    fn run_alone_is_join_then_pop_finished() {
        let (mut a, mut b) = (node(1, 0.7), node(1, 0.7));
        let bits = |n: &NodeState| (n.virtual_now.to_bits(), n.synced_at.to_bits(), n.rate);
        let mut now = 0.0;
        for (i, work) in [0.3, 1e-7, 2.5, 0.1, 1e-3].into_iter().enumerate() {
            now += 0.1 * i as f64;
            b.add_polling(now, 0.25 * (i % 2) as f64);
            a.add_polling(now, 0.25 * (i % 2) as f64);
            b.join(now, 3, work);
            let t = b.next_finish().unwrap();
            // Not before `until`: the process stays runnable, as after `join`.
            assert_eq!(a.run_alone(now, 3, work, t), None);
            assert_eq!((bits(&a), a.next_finish()), (bits(&b), Some(t)));
            a.pop_finished(t);
            b.pop_finished(t);
            assert_eq!(bits(&a), bits(&b));
            // Before `until`: the process also finishes, as after `pop_finished`.
            now = t;
            b.join(now, 3, work);
            let t = b.next_finish().unwrap();
            assert_eq!(b.pop_finished(t), 3);
            assert_eq!(a.run_alone(now, 3, work, f64::INFINITY), Some(t));
            assert_eq!((bits(&a), a.next_finish()), (bits(&b), b.next_finish()));
            now = t;
        }
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
