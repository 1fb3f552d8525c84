//! A target node as the simulation sees it: shared continuously ([`NodeState`], the paper's
//! model) or handed out in time slices ([`SlicedNode`], the scheduler-aware model).
//!
//! A target with a [`Scheduler`] slices only its oversubscribed nodes: on a node with no more
//! processes than cores every process has a core of its own, and both models give the same
//! schedule, the continuous one for less work.

use super::node::NodeState;
use super::slices::SlicedNode;
use crate::event::ProcId;
use crate::target::{Node, Scheduler};

/// One node of a target's simulation.
#[derive(Debug)]
pub(super) enum NodeModel {
    /// Processor sharing with an infinitely small quantum.
    Fluid(NodeState),
    /// Time slices (boxed: the fluid node is the common, hot case).
    Sliced(Box<SlicedNode>),
}

impl NodeModel {
    /// The model of `node` for a target with `scheduler`, at time 0.
    pub(super) fn new(node: &Node, scheduler: Option<&Scheduler>) -> Self {
        match scheduler {
            Some(s) if node.procs.len() > node.cores as usize => {
                NodeModel::Sliced(Box::new(SlicedNode::new(node, s)))
            }
            _ => NodeModel::Fluid(NodeState::new(node)),
        }
    }

    /// The slot of each of the node's processes, as `(process, slot)`.
    pub(super) fn slots(&self) -> Vec<(ProcId, usize)> {
        match self {
            NodeModel::Fluid(n) => n.slots().collect(),
            NodeModel::Sliced(n) => n.slots().collect(),
        }
    }

    /// Whether the node hands out time slices: its processes' waits go through it
    /// ([`NodeModel::start_wait`], [`NodeModel::answer`]).
    #[inline]
    pub(super) fn is_sliced(&self) -> bool {
        matches!(self, NodeModel::Sliced(_))
    }

    /// The process in `slot` has `work` CPU-seconds to do from `now`.
    #[inline]
    pub(super) fn join(&mut self, now: f64, slot: usize, work: f64) {
        match self {
            NodeModel::Fluid(n) => n.join(now, slot, work),
            NodeModel::Sliced(n) => sliced_join(n, now, slot, work),
        }
    }

    /// The time of the node's next step, if any.
    #[inline]
    pub(super) fn next_finish(&mut self) -> Option<f64> {
        match self {
            NodeModel::Fluid(n) => n.next_finish(),
            NodeModel::Sliced(n) => sliced_next_finish(n),
        }
    }

    /// Takes the node's next step at `now`: the process that finished its work (or, on a
    /// sliced node, goes on after its wait), or `None` for a step internal to the node.
    #[inline]
    pub(super) fn pop_finished(&mut self, now: f64) -> Option<ProcId> {
        match self {
            NodeModel::Fluid(n) => Some(n.pop_finished(now)),
            NodeModel::Sliced(n) => sliced_pop_finished(n, now),
        }
    }

    /// [`NodeState::run_alone`]: only a fluid node has a process alone on it.
    #[inline]
    pub(super) fn run_alone(&mut self, now: f64, work: f64, until: f64) -> Option<f64> {
        match self {
            NodeModel::Fluid(n) => n.run_alone(now, work, until),
            NodeModel::Sliced(_) => unreachable!("a sliced node has more than one process"),
        }
    }

    /// Adds `delta` to a fluid node's polling load at `now` ([`NodeState::add_polling`]).
    #[inline]
    pub(super) fn add_polling(&mut self, now: f64, delta: f64) {
        if let NodeModel::Fluid(n) = self {
            n.add_polling(now, delta);
        }
    }

    /// The process in `slot` of a sliced node starts waiting at `now`.
    pub(super) fn start_wait(&mut self, now: f64, slot: usize) {
        if let NodeModel::Sliced(n) = self {
            n.start_wait(now, slot);
        }
    }

    /// The wait of the process in `slot` is answered at `now`: whether it goes on at once
    /// (always, on a fluid node; on a sliced one, if it holds or takes a core).
    pub(super) fn answer(&mut self, now: f64, slot: usize) -> bool {
        match self {
            NodeModel::Fluid(_) => true,
            NodeModel::Sliced(n) => n.answer(now, slot),
        }
    }

    /// The process in `slot` exits at `now`: on a sliced node it gives up its core.
    pub(super) fn leave(&mut self, now: f64, slot: usize) {
        if let NodeModel::Sliced(n) = self {
            n.leave(now, slot);
        }
    }

    /// The rate of each running process (for timelines).
    pub(super) fn rate(&self) -> f64 {
        match self {
            NodeModel::Fluid(n) => n.rate(),
            NodeModel::Sliced(n) => n.rate(),
        }
    }

    /// The rate of a process alone on a fluid node (for timelines).
    pub(super) fn alone_rate(&self) -> f64 {
        match self {
            NodeModel::Fluid(n) => n.alone_rate(),
            NodeModel::Sliced(n) => n.rate(),
        }
    }

    /// The processes making progress on their work now, in process id order.
    pub(super) fn runnable(&self) -> Vec<ProcId> {
        match self {
            NodeModel::Fluid(n) => n.runnable().collect(),
            NodeModel::Sliced(n) => n.working().collect(),
        }
    }
}

// The sliced node's steps, out of line: the fluid node's are the hot path, and inlined these
// made every step's code larger.

/// [`SlicedNode::join`], out of line.
#[cold]
#[inline(never)]
fn sliced_join(n: &mut SlicedNode, now: f64, slot: usize, work: f64) {
    n.join(now, slot, work);
}

/// [`SlicedNode::next_finish`], out of line.
#[cold]
#[inline(never)]
fn sliced_next_finish(n: &SlicedNode) -> Option<f64> {
    n.next_finish()
}

/// [`SlicedNode::pop_finished`], out of line.
#[cold]
#[inline(never)]
fn sliced_pop_finished(n: &mut SlicedNode, now: f64) -> Option<ProcId> {
    n.pop_finished(now)
}
