//! Totally ordered simulation times tagged with an id, so heaps compare one integer.

/// A non-negative time in seconds (or +infinity) and an id (a process), packed into one
/// integer that orders by time, then by id.
///
/// For non-negative numbers the IEEE-754 bits order exactly like the values, so the time's bits
/// go in the high half and the id in the low half: one integer comparison replaces a float
/// comparison and a tie-break, which the simulation's heaps do on every step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct TimeKey(u128);

impl TimeKey {
    /// Packs a non-negative, non-NaN `seconds` and `id`.
    #[inline]
    pub(super) fn new(seconds: f64, id: usize) -> Self {
        debug_assert!(seconds >= 0.0, "negative or NaN time {seconds}");
        // `+ 0.0` turns a -0.0 into +0.0, whose bits sort first.
        let bits = (seconds + 0.0).to_bits();
        TimeKey((u128::from(bits) << 64) | id as u128)
    }

    /// The time in seconds.
    #[inline]
    pub(super) fn time(self) -> f64 {
        f64::from_bits((self.0 >> 64) as u64)
    }

    /// The id.
    #[inline]
    pub(super) fn id(self) -> usize {
        self.0 as u64 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::TimeKey;

    #[test]
    fn orders_by_time_then_id() {
        let values = [0.0, -0.0, 1e-300, 0.5, 1.0, 2.5e9, f64::INFINITY];
        for a in values {
            for b in values {
                for (i, j) in [(0, 0), (0, 7), (7, 0), (3, usize::MAX >> 1)] {
                    let (ka, kb) = (TimeKey::new(a, i), TimeKey::new(b, j));
                    let expected = a.partial_cmp(&b).unwrap().then(i.cmp(&j));
                    assert_eq!(ka.cmp(&kb), expected, "({a}, {i}) vs ({b}, {j})");
                }
            }
        }
    }

    #[test]
    fn unpacks_what_it_packed() {
        let k = TimeKey::new(2.5, 42);
        assert_eq!((k.time(), k.id()), (2.5, 42));
    }
}
