//! A target's network with each table's recent lookups remembered.
//!
//! Programs send messages of a few sizes (a halo exchange, tasks out and results back), and a
//! lookup searches and interpolates a sorted table, a division on the way from a message to
//! its arrival; a small direct-mapped cache of sizes per table skips that. The remembered
//! values are what the table gave, so results are bit-for-bit the same.

use std::cell::Cell;

use crate::target::{CommTable, Network};

/// Sizes a table remembers: a power of two.
const REMEMBERED: usize = 16;

/// One table and its recent `(bytes, seconds)` lookups, each size in the entry its hash picks.
#[derive(Debug)]
struct CachedTable {
    table: CommTable,
    recent: [Cell<(u64, f64)>; REMEMBERED],
}

impl CachedTable {
    fn new(table: CommTable) -> Self {
        let zero = (0, table.seconds(0));
        CachedTable {
            table,
            recent: std::array::from_fn(|_| Cell::new(zero)),
        }
    }

    #[inline]
    fn seconds(&self, bytes: u64) -> f64 {
        // Fibonacci hashing: the top bits of the product with 2^64 over the golden ratio.
        let entry = &self.recent[(bytes.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize];
        let (recent_bytes, recent_seconds) = entry.get();
        if bytes == recent_bytes {
            return recent_seconds;
        }
        let seconds = self.table.seconds(bytes);
        entry.set((bytes, seconds));
        seconds
    }
}

/// A target's local and remote tables, each remembering its last lookup.
#[derive(Debug)]
pub(super) struct CachedNetwork {
    local: CachedTable,
    remote: CachedTable,
}

impl CachedNetwork {
    /// Wraps `network`.
    pub(super) fn new(network: Network) -> Self {
        CachedNetwork {
            local: CachedTable::new(network.local),
            remote: CachedTable::new(network.remote),
        }
    }

    /// The least time any message between nodes can take (within a node too, if `local`).
    /// A table is linear between its points, flat below the first and extrapolated past the
    /// last, so its least value is at a point or at the largest size.
    pub(super) fn least_seconds(&self, local: bool) -> f64 {
        let least = |table: &CommTable| {
            table
                .points()
                .iter()
                .map(|&(_, seconds)| seconds)
                .fold(table.seconds(u64::MAX), f64::min)
        };
        let remote = least(&self.remote.table);
        match local {
            true => remote.min(least(&self.local.table)),
            false => remote,
        }
    }

    /// One-way time of `bytes` within a node if `local`, between nodes otherwise.
    #[inline]
    pub(super) fn seconds(&self, local: bool, bytes: u64) -> f64 {
        if local {
            self.local.seconds(bytes)
        } else {
            self.remote.seconds(bytes)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_remote_time_is_at_a_point_or_past_the_last() {
        let net = |remote: Vec<(f64, f64)>| {
            CachedNetwork::new(Network {
                local: CommTable::default(),
                remote: CommTable::new(remote).unwrap(),
            })
        };
        assert_eq!(net(vec![]).least_seconds(false), 0.0);
        assert_eq!(
            net(vec![(0.0, 2.0), (10.0, 1.0), (20.0, 3.0)]).least_seconds(false),
            1.0
        );
        // Decreasing past the last point: extrapolation reaches 0.
        assert_eq!(net(vec![(0.0, 2.0), (10.0, 1.0)]).least_seconds(false), 0.0);
    }

    #[test]
    fn gives_the_tables_values_whatever_the_order_of_lookups() {
        let local = CommTable::new(vec![(0.0, 1e-6), (1e3, 2e-6), (1e6, 1e-3)]).unwrap();
        let remote = CommTable::new(vec![(0.0, 5e-5), (1e6, 1e-2)]).unwrap();
        let net = CachedNetwork::new(Network {
            local: local.clone(),
            remote: remote.clone(),
        });
        for bytes in [0, 0, 500, 500, 2_000_000, 7, 500, 0] {
            assert_eq!(net.seconds(true, bytes), local.seconds(bytes));
            assert_eq!(net.seconds(false, bytes), remote.seconds(bytes));
        }
    }
}
