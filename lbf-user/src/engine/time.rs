//! Totally ordered simulation times, so times can key heaps and trees cheaply.

/// A non-negative time or virtual time in seconds (or +infinity), kept as its IEEE-754 bits:
/// for non-negative numbers the bits order exactly like the values, so comparisons are integer
/// comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Time(u64);

impl Time {
    /// Wraps a non-negative, non-NaN `seconds`.
    #[inline]
    pub(super) fn new(seconds: f64) -> Self {
        debug_assert!(seconds >= 0.0, "negative or NaN time {seconds}");
        // `+ 0.0` turns a -0.0 into +0.0, whose bits sort first.
        Time((seconds + 0.0).to_bits())
    }

    /// The raw bits, which order like the time.
    #[inline]
    pub(super) fn bits(self) -> u64 {
        self.0
    }

    /// The time whose [`Time::bits`] are `bits`.
    #[inline]
    pub(super) fn from_bits(bits: u64) -> Self {
        Time(bits)
    }

    /// The time in seconds.
    #[inline]
    pub(super) fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Time;

    #[test]
    fn orders_like_the_values() {
        let values = [0.0, -0.0, 1e-300, 0.5, 1.0, 2.5e9, f64::INFINITY];
        for a in values {
            for b in values {
                assert_eq!(Time::new(a) < Time::new(b), a < b, "{a} < {b}");
                assert_eq!(Time::new(a) == Time::new(b), a == b, "{a} == {b}");
            }
        }
    }
}
