//! The per-process event queues shared by every target's simulation.
//!
//! Each simulation reads each process's stream through its own cursor; an event is dropped once
//! every simulation has consumed it, so memory is bounded by the events not yet reported by the
//! slowest target, not by the trace's length.
//!
//! Every simulation reads an event at least twice (when it loads it and when it happens), so a
//! read must be cheap: each queue is a ring buffer of a power-of-two size, where the event of
//! absolute index `i` is at `i` modulo the size. A read is a comparison and a mask, and
//! dropping events only moves the front.

use crate::event::{Event, EventKind};

/// An event and where it came from (echoed in errors).
#[derive(Clone, Copy, Debug)]
pub(super) struct Queued {
    pub(super) event: Event,
    pub(super) origin: u64,
}

/// What fills the slots of a ring buffer that hold no event.
const VACANT: Queued = Queued {
    event: Event {
        proc: 0,
        cpu_ns: 0,
        kind: EventKind::Keepalive,
    },
    origin: 0,
};

/// One process's events from absolute index `front` to `end`.
#[derive(Debug, Default)]
struct Queue {
    /// Event `i` is at `i % ring.len()`; the length is 0 or a power of two.
    ring: Vec<Queued>,
    front: u64,
    end: u64,
    /// Whether the process's exit has been received.
    closed: bool,
}

impl Queue {
    /// Doubles the ring (at least 8 slots), keeping every event at its index's slot.
    #[cold]
    fn grow(&mut self) {
        let len = (2 * self.ring.len()).max(8);
        let mut ring = vec![VACANT; len];
        for i in self.front..self.end {
            ring[slot(i, len)] = self.ring[slot(i, self.ring.len())];
        }
        self.ring = ring;
    }
}

/// The slot of absolute index `i` in a ring of `len` (a power of two) slots.
#[inline]
fn slot(i: u64, len: usize) -> usize {
    i as usize & (len - 1)
}

/// Per-process queues, addressed by absolute event index.
#[derive(Debug)]
pub(super) struct Streams {
    queues: Vec<Queue>,
}

impl Streams {
    /// Empty streams for `n` processes.
    pub(super) fn new(n: usize) -> Self {
        Streams {
            queues: (0..n).map(|_| Queue::default()).collect(),
        }
    }

    /// Number of processes.
    pub(super) fn num_procs(&self) -> usize {
        self.queues.len()
    }

    /// Appends an event to process `p`'s stream.
    #[inline]
    pub(super) fn push(&mut self, p: usize, q: Queued) {
        let queue = &mut self.queues[p];
        if queue.end - queue.front == queue.ring.len() as u64 {
            queue.grow();
        }
        let at = slot(queue.end, queue.ring.len());
        queue.ring[at] = q;
        queue.end += 1;
    }

    /// Whether process `p`'s exit has been received.
    pub(super) fn is_closed(&self, p: usize) -> bool {
        self.queues[p].closed
    }

    /// Marks process `p`'s stream as complete.
    pub(super) fn close(&mut self, p: usize) {
        self.queues[p].closed = true;
    }

    /// The event at absolute index `i` of process `p`, if it has arrived. `i` must not be
    /// below what [`Streams::trim`] dropped.
    #[inline]
    pub(super) fn get(&self, p: usize, i: u64) -> Option<&Queued> {
        let queue = &self.queues[p];
        debug_assert!(i >= queue.front, "event {i} of process {p} was dropped");
        (i < queue.end).then(|| &queue.ring[slot(i, queue.ring.len())])
    }

    /// Drops process `p`'s events before absolute index `upto` (consumed by every target).
    #[inline]
    pub(super) fn trim(&mut self, p: usize, upto: u64) {
        let queue = &mut self.queues[p];
        queue.front = upto.clamp(queue.front, queue.end);
    }

    /// Events held in process `p`'s queue.
    pub(super) fn len_of(&self, p: usize) -> usize {
        let queue = &self.queues[p];
        (queue.end - queue.front) as usize
    }

    /// Absolute index one past process `p`'s last received event.
    pub(super) fn end_of(&self, p: usize) -> u64 {
        self.queues[p].end
    }

    /// Events held in all queues.
    pub(super) fn len(&self) -> usize {
        (0..self.queues.len()).map(|p| self.len_of(p)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(origin: u64) -> Queued {
        Queued { origin, ..VACANT }
    }

    #[test]
    fn keeps_events_by_absolute_index_across_growth_and_trims() {
        let mut s = Streams::new(2);
        let mut front = 0;
        for i in 0..100u64 {
            s.push(1, queued(i));
            // Keep a varying number of events, so the ring wraps and grows.
            if i % 7 == 6 {
                front = i - i % 5;
                s.trim(1, front);
            }
            for j in front..=i {
                assert_eq!(s.get(1, j).map(|q| q.origin), Some(j));
            }
            assert!(s.get(1, i + 1).is_none());
            assert_eq!(s.len_of(1), (i + 1 - front) as usize);
        }
        assert_eq!((s.end_of(1), s.len(), s.len_of(0)), (100, s.len_of(1), 0));
        s.trim(1, 1_000);
        assert_eq!((s.len(), s.end_of(1)), (0, 100));
    }
}
