//! A target's network with each table's last lookup remembered.
//!
//! Programs send many messages of one size in a row (a halo exchange, a round of tasks), and a
//! lookup searches and interpolates a sorted table; remembering the last size per table skips
//! that. The remembered value is what the table gave, so results are bit-for-bit the same.

use std::cell::Cell;

use crate::target::{CommTable, Network};

/// One table and its last `(bytes, seconds)` lookup.
#[derive(Debug)]
struct CachedTable {
    table: CommTable,
    last: Cell<(u64, f64)>,
}

impl CachedTable {
    fn new(table: CommTable) -> Self {
        let last = Cell::new((0, table.seconds(0)));
        CachedTable { table, last }
    }

    #[inline]
    fn seconds(&self, bytes: u64) -> f64 {
        let (last_bytes, last_seconds) = self.last.get();
        if bytes == last_bytes {
            return last_seconds;
        }
        let seconds = self.table.seconds(bytes);
        self.last.set((bytes, seconds));
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

    /// The least time any message between nodes can take. A table is linear between its
    /// points, flat below the first and extrapolated past the last, so its least value is at
    /// a point or at the largest size.
    pub(super) fn least_remote_seconds(&self) -> f64 {
        let table = &self.remote.table;
        table
            .points()
            .iter()
            .map(|&(_, seconds)| seconds)
            .fold(table.seconds(u64::MAX), f64::min)
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
        assert_eq!(net(vec![]).least_remote_seconds(), 0.0);
        assert_eq!(
            net(vec![(0.0, 2.0), (10.0, 1.0), (20.0, 3.0)]).least_remote_seconds(),
            1.0
        );
        // Decreasing past the last point: extrapolation reaches 0.
        assert_eq!(
            net(vec![(0.0, 2.0), (10.0, 1.0)]).least_remote_seconds(),
            0.0
        );
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
