//! Processor sharing on one target node, in virtual time.
//!
//! All runnable processes of a node progress at the same rate,
//! `speed * min(1, cores / runnable)`. Instead of decrementing every process's remaining work
//! at every step, the node keeps a *virtual clock*: the CPU-seconds each runnable process has
//! received since the node was created. A process that joins at virtual time `v` with `w`
//! CPU-seconds of work finishes at virtual time `v + w`, whatever happens to the rate in
//! between. The next process to finish is the one with the smallest finish time, and the only
//! way to leave the runnable set is to finish: so every change costs O(log n) and nothing is
//! touched per step.
//!
//! The finish times are kept in a tournament tree ([`MinTree`]) with one slot per process of
//! the node, in process id order, so that ties go to the lower process id. An update replays
//! a fixed number of matches without a branch that depends on the times; a binary heap's sift
//! branches on every comparison, and those branches, which the processor cannot predict, cost
//! more than the tree's extra instructions (a heap made the whole benchmark 8 % slower).
//!
//! A process that finishes usually joins again at once with the work before its next event.
//! So a finished process keeps its slot, out of the count, until the next join replaces it
//! (one update instead of two) or another operation empties the slot.

use super::min_tree::MinTree;
use crate::event::ProcId;
use crate::target::Node;

/// The runnable processes of one node and its virtual clock.
#[derive(Debug)]
pub(super) struct NodeState {
    cores: u32,
    speed: f64,
    /// Each runnable process's finish virtual time, by slot.
    runnable: MinTree,
    /// The process in each slot: the node's processes in id order, so that ties go to the
    /// lower process id.
    procs: Vec<ProcId>,
    /// Runnable processes: the occupied slots but the finished one.
    count: usize,
    /// The slot of a process that has finished and is no longer runnable, while the slot
    /// still holds its finish time (see the module's documentation).
    finished: Option<usize>,
    /// Per-process rate for the current load: kept up to date, as it is needed at every step.
    rate: Rate,
    /// The rate for each number of runnable processes while none polls, computed once: the
    /// rate changes at nearly every step, and on an oversubscribed node it is a division.
    rates: Vec<Rate>,
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
        let mut procs = node.procs.clone();
        procs.sort_unstable();
        let rates = (0..=procs.len())
            .map(|runnable| Rate::new(rate(node.speed, node.cores, runnable as f64)))
            .collect();
        NodeState {
            cores: node.cores,
            speed: node.speed,
            runnable: MinTree::new(procs.len()),
            procs,
            count: 0,
            finished: None,
            rate: Rate::new(node.speed),
            rates,
            polling: 0.0,
            virtual_now: 0.0,
            synced_at: 0.0,
        }
    }

    /// Per-process rate with the current number of runnable and polling processes.
    pub(super) fn rate(&self) -> f64 {
        self.rate.value
    }

    /// Processes runnable now.
    fn len(&self) -> usize {
        self.count
    }

    /// The slot of each of the node's processes, as `(process, slot)`: [`NodeState::join`]
    /// takes a process by its slot.
    pub(super) fn slots(&self) -> impl Iterator<Item = (ProcId, usize)> + '_ {
        self.procs.iter().enumerate().map(|(slot, &p)| (p, slot))
    }

    /// Recomputes `rate` after the load changed.
    #[inline]
    fn update_rate(&mut self) {
        self.rate = self.rate_for(self.len());
    }

    /// The rate with `runnable` processes and the current polling load.
    #[inline]
    fn rate_for(&self, runnable: usize) -> Rate {
        // Without polling the load is the number of runnable processes (`+ 0.0` changes no
        // number), whose rate is in the table.
        if self.polling == 0.0 {
            self.rates[runnable]
        } else {
            Rate::new(rate(self.speed, self.cores, runnable as f64 + self.polling))
        }
    }

    /// The rate of the node's only process while it is runnable.
    pub(super) fn alone_rate(&self) -> f64 {
        self.rate_for(1).value
    }

    /// Adds `delta` (positive or negative) to the polling load at real time `now`.
    pub(super) fn add_polling(&mut self, now: f64, delta: f64) {
        self.sync(now);
        self.polling = (self.polling + delta).max(0.0);
        self.update_rate();
    }

    /// The runnable processes, in process id order.
    pub(super) fn runnable(&self) -> impl Iterator<Item = ProcId> + '_ {
        self.runnable
            .occupied()
            .filter(|&slot| Some(slot) != self.finished)
            .map(|slot| self.procs[slot])
    }

    /// Brings the virtual clock up to real time `now`.
    fn sync(&mut self, now: f64) {
        if self.len() > 0 {
            self.virtual_now += self.rate.value * (now - self.synced_at);
        }
        self.synced_at = now;
    }

    /// Empties the slot of the finished process, if there is one.
    #[inline]
    fn drop_finished(&mut self) {
        if let Some(slot) = self.finished.take() {
            self.runnable.set(slot, None);
        }
    }

    /// Makes the process in `slot` runnable at real time `now` with `work` CPU-seconds to do.
    #[inline]
    pub(super) fn join(&mut self, now: f64, slot: usize, work: f64) {
        self.sync(now);
        if self.finished.is_some_and(|f| f != slot) {
            self.drop_finished();
        }
        self.finished = None;
        self.runnable.set(slot, Some(self.virtual_now + work));
        self.count += 1;
        self.update_rate();
    }

    /// The node's only process, `proc`, joins at real time `now` with `work` CPU-seconds to
    /// do ([`NodeState::join`]). If it finishes before real time `until`, it also finishes
    /// ([`NodeState::pop_finished`] at that time), and the time is returned; else it stays
    /// runnable. The same arithmetic as those two, without the heap: a process alone on its
    /// node is the one that finishes first.
    #[inline]
    pub(super) fn run_alone(&mut self, now: f64, work: f64, until: f64) -> Option<f64> {
        debug_assert_eq!(self.len(), 0, "run_alone with another process runnable");
        self.sync(now);
        // `+ 0.0` as the tree keeps it.
        let finish = (self.virtual_now + work) + 0.0;
        self.finished = None;
        let rate = self.rate_for(1);
        let t = self.synced_at + rate.divide((finish - self.virtual_now).max(0.0));
        if t >= until {
            self.runnable.set(0, Some(finish));
            self.count = 1;
            self.rate = rate;
            return None;
        }
        self.runnable.set(0, None);
        self.virtual_now += rate.value * (t - self.synced_at);
        self.synced_at = t;
        self.rate = self.rate_for(0);
        self.virtual_now = self.virtual_now.max(finish);
        Some(t)
    }

    /// Real time at which the next runnable process finishes its work, if any is runnable.
    #[inline]
    pub(super) fn next_finish(&mut self) -> Option<f64> {
        self.drop_finished();
        let (finish, _) = self.runnable.min()?;
        Some(self.real_time_of(finish))
    }

    /// Real time at which a runnable process finishing at virtual time `finish` finishes, at
    /// the current rate.
    #[inline]
    fn real_time_of(&self, finish: f64) -> f64 {
        let remaining = (finish - self.virtual_now).max(0.0);
        self.synced_at + self.rate.divide(remaining)
    }

    /// Removes the process that finishes first, at real time `now` (its finish time).
    pub(super) fn pop_finished(&mut self, now: f64) -> ProcId {
        self.drop_finished();
        self.sync(now);
        let (finish, slot) = self.runnable.min().expect("pop_finished on an idle node");
        self.finished = Some(slot);
        self.count -= 1;
        self.update_rate();
        // Snap the clock to the finish time so rounding never leaves a sliver of work behind.
        self.virtual_now = self.virtual_now.max(finish);
        self.procs[slot]
    }
}

/// A rate, and its inverse when dividing by the rate is multiplying by the inverse.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rate {
    value: f64,
    /// `1 / value` if that is exact (`value` is a power of two, most often 1), else 0.
    inverse: f64,
}

impl Rate {
    fn new(value: f64) -> Self {
        let inverse = 1.0 / value;
        let power_of_two = value.to_bits() & ((1 << 52) - 1) == 0;
        let exact = power_of_two && inverse.is_normal() && inverse * value == 1.0;
        Rate {
            value,
            inverse: if exact { inverse } else { 0.0 },
        }
    }

    /// `x / value`. Multiplying by an exact inverse rounds the same real number as the
    /// division, so it gives the same bits; a division is the slowest operation on the way
    /// from one step to the next, and most nodes run at rate 1.
    #[inline]
    fn divide(self, x: f64) -> f64 {
        if self.inverse != 0.0 {
            x * self.inverse
        } else {
            x / self.value
        }
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
            assert_eq!(a.run_alone(now, work, t), None);
            assert_eq!((bits(&a), a.next_finish()), (bits(&b), Some(t)));
            a.pop_finished(t);
            b.pop_finished(t);
            assert_eq!(bits(&a), bits(&b));
            // Before `until`: the process also finishes, as after `pop_finished`.
            now = t;
            b.join(now, 3, work);
            let t = b.next_finish().unwrap();
            assert_eq!(b.pop_finished(t), 3);
            assert_eq!(a.run_alone(now, work, f64::INFINITY), Some(t));
            assert_eq!((bits(&a), a.next_finish()), (bits(&b), b.next_finish()));
            now = t;
        }
    }

    #[test]
    fn dividing_by_a_rate_is_dividing_by_its_value() {
        let mut x = 1e-310f64; // from subnormals up
        let mut rng = 1u64;
        while x < 1e300 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
            let x_ = x * (1.0 + (rng >> 11) as f64 / (1u64 << 53) as f64);
            for value in [
                1.0,
                2.0,
                0.5,
                16.0,
                0.75,
                1.5,
                3.0,
                1e-300,
                2f64.powi(-1000),
            ] {
                let rate = Rate::new(value);
                assert_eq!(
                    rate.divide(x_).to_bits(),
                    (x_ / value).to_bits(),
                    "{x_} / {value}"
                );
            }
            x *= 1.7;
        }
        assert_eq!(Rate::new(1.0).inverse, 1.0);
        assert_eq!(Rate::new(0.75).inverse, 0.0);
        assert_eq!(
            Rate::new(2f64.powi(1023)).inverse,
            0.0,
            "2^-1023 is subnormal"
        );
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
