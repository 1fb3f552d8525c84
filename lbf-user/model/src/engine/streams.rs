//! The per-process event queues shared by every target's simulation.
//!
//! Each simulation reads each process's stream through its own cursor; an event is dropped once
//! every simulation has consumed it, so memory is bounded by the events not yet reported by the
//! slowest target, not by the trace's length.
//!
//! Every simulation reads an event at least twice (when it loads it and when it happens), so a
//! read must be cheap: each queue is a ring buffer of a power-of-two size, where the event of
//! absolute index `i` is at `i - base` modulo the size. A read is a subtraction, a comparison
//! and a mask, and dropping events only moves the front. A ring is filled in slot order from
//! its allocation on, so the memory of slots never used is never touched.
//!
//! The engine drops events only when a ring is full ([`Streams::is_full`]): asking every
//! simulation which events it still needs at every push cost more than the push itself, and a
//! ring grows as it did when the front followed every push, since it grows only when full.

use crate::event::{Event, EventKind};

/// An event as every simulation reads it, decoded once when it arrives, and where it came
/// from (echoed in errors).
#[derive(Clone, Copy, Debug)]
pub(super) struct Queued {
    pub(super) kind: EventKind,
    /// The CPU-seconds of work before the event: its CPU time, except for `recv_end`,
    /// `coll_end` and `send_end`, whose CPU was spent spinning while waiting (see
    /// `docs/engine.md`).
    pub(super) work: f64,
    pub(super) origin: u64,
}

impl Queued {
    /// `event`, from `origin`.
    #[inline]
    pub(super) fn new(event: &Event, origin: u64) -> Self {
        let work = match event.kind {
            EventKind::RecvEnd { .. } | EventKind::CollEnd { .. } | EventKind::SendEnd { .. } => {
                0.0
            }
            _ => event.cpu_ns as f64 * 1e-9,
        };
        Queued {
            kind: event.kind,
            work,
            origin,
        }
    }
}

/// One process's events from absolute index `front` to `end`.
#[derive(Debug, Default)]
struct Queue {
    /// Event `i` is in slot `(i - base) % size`. Slots are filled in order, so the ring's
    /// length grows up to `size` and stays there.
    ring: Vec<Queued>,
    /// The ring's size: 0 or a power of two.
    size: usize,
    /// The absolute index of slot 0's first event.
    base: u64,
    front: u64,
    end: u64,
    /// Whether the process's exit has been received.
    closed: bool,
}

impl Queue {
    /// The slot of absolute index `i`.
    #[inline]
    fn slot(&self, i: u64) -> usize {
        (i - self.base) as usize & (self.size - 1)
    }

    /// Doubles the ring's size (at least 8 slots) when it is full, in place: its events are
    /// rotated to run in order from slot 0, and the allocation grows behind them (as a
    /// `VecDeque`'s does, without a second copy alive at the same time).
    #[cold]
    fn grow(&mut self) {
        debug_assert_eq!(self.ring.len(), self.size, "grow a ring that is not full");
        let first = if self.size == 0 {
            0
        } else {
            self.slot(self.front)
        };
        self.ring.rotate_left(first);
        self.base = self.front;
        self.size = (2 * self.size).max(8);
        self.ring.reserve_exact(self.size - self.ring.len());
    }
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
        if queue.end - queue.front == queue.size as u64 {
            queue.grow();
        }
        let at = queue.slot(queue.end);
        if at == queue.ring.len() {
            queue.ring.push(q);
        } else {
            queue.ring[at] = q;
        }
        queue.end += 1;
    }

    /// Whether process `p`'s ring has no room left: [`Streams::push`] would grow it, unless
    /// [`Streams::trim`] drops events first.
    #[inline]
    pub(super) fn is_full(&self, p: usize) -> bool {
        let queue = &self.queues[p];
        queue.end - queue.front == queue.size as u64
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
        (i < queue.end).then(|| &queue.ring[queue.slot(i)])
    }

    /// Drops process `p`'s events before absolute index `upto` (consumed by every target).
    #[inline]
    pub(super) fn trim(&mut self, p: usize, upto: u64) {
        let queue = &mut self.queues[p];
        queue.front = upto.clamp(queue.front, queue.end);
    }

    /// Events held in process `p`'s queue.
    #[cfg(test)]
    fn len_of(&self, p: usize) -> usize {
        let queue = &self.queues[p];
        (queue.end - queue.front) as usize
    }

    /// Absolute index one past process `p`'s last received event.
    pub(super) fn end_of(&self, p: usize) -> u64 {
        self.queues[p].end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(origin: u64) -> Queued {
        let event = Event {
            proc: 1,
            cpu_ns: 0,
            kind: EventKind::Keepalive,
        };
        Queued::new(&event, origin)
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
        assert_eq!((s.end_of(1), s.len_of(0)), (100, 0));
        s.trim(1, 1_000);
        assert_eq!((s.len_of(1), s.end_of(1)), (0, 100));
    }
}
