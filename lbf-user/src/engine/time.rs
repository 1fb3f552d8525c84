//! Totally ordered simulation times, so times can key heaps and trees.

use std::cmp::Ordering;

/// A time or virtual time in seconds, ordered by `f64::total_cmp`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Time(pub(super) f64);

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Time {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}
