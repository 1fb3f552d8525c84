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
