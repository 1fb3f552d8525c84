//! The per-process event queues shared by every target's simulation.
//!
//! Each simulation reads each process's stream through its own cursor; an event is dropped once
//! every simulation has consumed it, so memory is bounded by the events not yet reported by the
//! slowest target, not by the trace's length.

use std::collections::VecDeque;

use crate::event::Event;

/// An event and where it came from (echoed in errors).
#[derive(Clone, Copy, Debug)]
pub(super) struct Queued {
    pub(super) event: Event,
    pub(super) origin: u64,
}

/// Per-process queues, addressed by absolute event index.
#[derive(Debug)]
pub(super) struct Streams {
    queues: Vec<VecDeque<Queued>>,
    /// Absolute index of each queue's front.
    front: Vec<u64>,
    /// Whether the process's exit has been received.
    closed: Vec<bool>,
}

impl Streams {
    /// Empty streams for `n` processes.
    pub(super) fn new(n: usize) -> Self {
        Streams {
            queues: (0..n).map(|_| VecDeque::new()).collect(),
            front: vec![0; n],
            closed: vec![false; n],
        }
    }

    /// Number of processes.
    pub(super) fn num_procs(&self) -> usize {
        self.queues.len()
    }

    /// Appends an event to process `p`'s stream.
    pub(super) fn push(&mut self, p: usize, q: Queued) {
        self.queues[p].push_back(q);
    }

    /// Whether process `p`'s exit has been received.
    pub(super) fn is_closed(&self, p: usize) -> bool {
        self.closed[p]
    }

    /// Marks process `p`'s stream as complete.
    pub(super) fn close(&mut self, p: usize) {
        self.closed[p] = true;
    }

    /// The event at absolute index `i` of process `p`, if it has arrived.
    #[inline]
    pub(super) fn get(&self, p: usize, i: u64) -> Option<&Queued> {
        self.queues[p].get((i - self.front[p]) as usize)
    }

    /// Drops process `p`'s events before absolute index `upto` (consumed by every target).
    pub(super) fn trim(&mut self, p: usize, upto: u64) {
        let q = &mut self.queues[p];
        let n = ((upto - self.front[p]) as usize).min(q.len());
        q.drain(..n);
        self.front[p] += n as u64;
    }

    /// Events held in process `p`'s queue.
    pub(super) fn len_of(&self, p: usize) -> usize {
        self.queues[p].len()
    }

    /// Absolute index one past process `p`'s last received event.
    pub(super) fn end_of(&self, p: usize) -> u64 {
        self.front[p] + self.queues[p].len() as u64
    }

    /// Events held in all queues.
    pub(super) fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }
}
