//! A tournament tree: the earliest of a fixed set of slots, updated in O(log n).
//!
//! The simulation keeps one slot per node (its next finish time) and asks for the earliest
//! after every change; with many nodes a linear scan per event would dominate.

use super::time::Time;

/// Minimum over `len` slots, each holding a time or nothing.
#[derive(Debug)]
pub(super) struct MinTree {
    /// Leaves start at `leaves`; each internal node holds the min key below it. A key is the
    /// time's bits above the slot number, so one integer comparison orders by time, then slot.
    tree: Vec<u128>,
    leaves: usize,
}

const EMPTY: u128 = u128::MAX;

impl MinTree {
    /// `len` empty slots.
    pub(super) fn new(len: usize) -> Self {
        let leaves = len.next_power_of_two().max(1);
        MinTree {
            tree: vec![EMPTY; 2 * leaves],
            leaves,
        }
    }

    /// Sets slot `i` to `time` (or empties it).
    pub(super) fn set(&mut self, i: usize, time: Option<f64>) {
        let mut k = self.leaves + i;
        self.tree[k] = time.map_or(EMPTY, |t| {
            (u128::from(Time::new(t).bits()) << 64) | i as u128
        });
        while k > 1 {
            let m = self.tree[k].min(self.tree[k ^ 1]);
            k /= 2;
            if self.tree[k] == m {
                break;
            }
            self.tree[k] = m;
        }
    }

    /// The earliest `(time, slot)`, ties going to the lower slot.
    pub(super) fn min(&self) -> Option<(f64, usize)> {
        let key = self.tree[1];
        (key != EMPTY).then(|| {
            (
                Time::from_bits((key >> 64) as u64).get(),
                key as u64 as usize,
            )
        })
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
}
