//! A tournament tree: the earliest of a fixed set of slots, updated in O(log n).
//!
//! The simulation keeps one slot per node (its next finish time), and each node one slot per
//! process (its finish time in virtual time), and asks for the earliest after every change:
//! with many nodes or processes a linear scan per event would dominate, and a binary heap's
//! sift branches on every comparison of times, which the processor cannot predict.

use std::hint::select_unpredictable;

/// Minimum over `len` slots, each holding a time or nothing.
///
/// A *winner tree*: each tree node holds the time and slot of the earliest slot below it,
/// times as IEEE-754 bits (which order like non-negative times). An update replays the
/// matches on the slot's path to the root, carrying the winner so far in registers: each
/// level loads only the sibling's entry, which does not depend on the level below, so the
/// levels do not wait on each other's stores. A match orders by time, then by slot, and
/// selects without a hard-to-predict branch.
#[derive(Debug)]
pub(super) struct MinTree {
    /// `entries[k]` for tree node `k`: nodes `1..leaves` are internal (the children of `k`
    /// are `2k` and `2k + 1`), node `leaves + i` is slot `i` itself.
    entries: Vec<Entry>,
    leaves: usize,
}

/// A tree node: the time of the earliest slot below it, as bits ([`EMPTY`] for nothing),
/// and that slot.
#[derive(Clone, Copy, Debug)]
struct Entry {
    time: u64,
    slot: u64,
}

/// The bits of an empty slot: a NaN pattern that no time has, above every time's bits, and
/// below `u64::MAX` (a match adds 1 to it).
const EMPTY: u64 = u64::MAX - 1;

impl MinTree {
    /// `len` empty slots.
    pub(super) fn new(len: usize) -> Self {
        let leaves = len.next_power_of_two().max(1);
        let mut entries = vec![
            Entry {
                time: EMPTY,
                slot: 0
            };
            2 * leaves
        ];
        for (i, e) in entries[leaves..].iter_mut().enumerate() {
            e.slot = i as u64;
        }
        // Every node's winner must be a slot below it, even while all are empty.
        for k in (1..leaves).rev() {
            entries[k] = entries[2 * k];
        }
        MinTree { entries, leaves }
    }

    /// Sets slot `i` to `time` (or empties it).
    #[inline]
    pub(super) fn set(&mut self, i: usize, time: Option<f64>) {
        // `+ 0.0` turns a -0.0 into +0.0, whose bits sort first.
        let bits = time.map_or(EMPTY, |t| {
            debug_assert!(t >= 0.0, "negative or NaN time {t}");
            (t + 0.0).to_bits()
        });
        let mut k = self.leaves + i;
        let mut winner = Entry {
            time: bits,
            slot: i as u64,
        };
        self.entries[k] = winner;
        while k > 1 {
            let sibling = self.entries[k ^ 1];
            // A left sibling (`k` is odd) holds the lower slots, so it wins ties: it wins if
            // its time is below the winner's plus 1.
            let sibling_wins = sibling.time < winner.time + (k as u64 & 1);
            winner.time = select_unpredictable(sibling_wins, sibling.time, winner.time);
            winner.slot = select_unpredictable(sibling_wins, sibling.slot, winner.slot);
            k /= 2;
            self.entries[k] = winner;
        }
    }

    /// The slots that hold a time, in slot order.
    pub(super) fn occupied(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.leaves).filter(|&i| self.entries[self.leaves + i].time != EMPTY)
    }

    /// The earliest `(time, slot)`, ties going to the lower slot.
    pub(super) fn min(&self) -> Option<(f64, usize)> {
        // With one slot, node 1 is the slot itself.
        let Entry { time, slot } = self.entries[1];
        (time != EMPTY).then(|| (f64::from_bits(time), slot as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::MinTree;

    #[test]
    fn tracks_the_minimum_through_updates() {
        let mut t = MinTree::new(5);
        assert_eq!(t.min(), None);
        t.set(3, Some(2.0));
        t.set(1, Some(5.0));
        assert_eq!(t.min(), Some((2.0, 3)));
        t.set(4, Some(2.0));
        assert_eq!(t.min(), Some((2.0, 3)));
        t.set(3, None);
        assert_eq!(t.min(), Some((2.0, 4)));
        t.set(4, Some(9.0));
        assert_eq!(t.min(), Some((5.0, 1)));
        t.set(1, None);
        t.set(4, None);
        assert_eq!(t.min(), None);
    }

    #[test]
    fn one_slot() {
        let mut t = MinTree::new(1);
        t.set(0, Some(1.0));
        assert_eq!(t.min(), Some((1.0, 0)));
    }

    #[test]
    fn a_slot_set_first_is_not_hidden_by_a_lower_slot_set_later() {
        let mut t = MinTree::new(8);
        t.set(5, Some(3.0));
        t.set(0, Some(1.0));
        t.set(0, None);
        assert_eq!(t.min(), Some((3.0, 5)));
    }

    #[test]
    fn ties_go_to_the_lower_slot_whatever_the_order_of_updates() {
        let mut t = MinTree::new(8);
        for i in [6, 2, 7, 5] {
            t.set(i, Some(1.0));
        }
        assert_eq!(t.min(), Some((1.0, 2)));
        t.set(2, Some(0.0));
        t.set(2, Some(-0.0));
        t.set(0, Some(0.0));
        assert_eq!(t.min(), Some((0.0, 0)));
    }
}
