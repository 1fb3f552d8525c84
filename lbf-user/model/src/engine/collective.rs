//! Collective operations: who has arrived, when everyone may leave, and what it costs.
//!
//! Model: every participant leaves at the same time, when the last one has arrived plus a cost
//! derived from the target's tables. A tree-shaped algorithm needs `ceil(log2 size)` rounds of
//! point-to-point messages for a barrier, a broadcast or a reduction, and twice that for an
//! all-reduce style exchange (a reduction followed by a broadcast). Each round costs one
//! message of the collective's payload, from the remote table if the participants span more
//! than one node and from the local table otherwise. This is the simplest model that grows
//! with both the group size and the payload; it ignores contention, like the paper's
//! point-to-point model (section 2.2).
//!
//! An all-to-all exchange ([`CollOp::Alltoall`]) is a pairwise exchange instead: `size - 1`
//! rounds, in each of which every member sends one block to another at once, so that it
//! costs `size - 1` messages of the largest member's payload shared out over the rounds
//! (its `bytes` are the sum of its blocks to the others: `MPI_Alltoallv`'s uneven members
//! cost what the member sending most sends).
//!
//! The payload is the largest any participant declared (members of a `v` collective declare
//! their own).

use super::comm::CachedNetwork;
use crate::event::{CollOp, ProcId};

/// Cost in seconds, after the last arrival, of a collective.
pub(super) fn cost(
    network: &CachedNetwork,
    op: CollOp,
    size: u32,
    bytes: u64,
    multi_node: bool,
) -> f64 {
    if size <= 1 {
        return 0.0;
    }
    let depth = 32 - (size - 1).leading_zeros(); // ceil(log2 size)
    let rounds = match op {
        CollOp::Barrier | CollOp::Bcast | CollOp::Reduce => depth,
        CollOp::Allreduce => 2 * depth,
        CollOp::Alltoall => {
            let rounds = size - 1;
            let block = bytes.div_ceil(u64::from(rounds));
            return rounds as f64 * network.seconds(!multi_node, block);
        }
    };
    rounds as f64 * network.seconds(!multi_node, bytes)
}

/// One collective instance in progress.
#[derive(Debug)]
pub(super) struct Collective {
    /// The operation, from the first arrival.
    pub(super) op: CollOp,
    /// Participants, from the first arrival; later arrivals must agree.
    pub(super) size: u32,
    /// Largest payload any participant declared.
    pub(super) bytes: u64,
    /// The latest arrival so far: participants running ahead of the global order may
    /// arrive out of time order (see `Sim::runs_ahead`).
    pub(super) latest: f64,
    /// Participants that have arrived.
    pub(super) arrived: u32,
    /// Participants that have left.
    pub(super) departed: u32,
    /// Node of the first arrival, and whether any other arrival was on another node.
    pub(super) first_node: usize,
    /// Whether the participants span more than one node.
    pub(super) multi_node: bool,
    /// When everyone may leave, once the last participant has arrived.
    pub(super) ends_at: Option<f64>,
    /// Participants already waiting to leave.
    pub(super) waiters: Vec<ProcId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{CommTable, Network};

    fn net() -> CachedNetwork {
        CachedNetwork::new(Network {
            local: CommTable::new(vec![(0.0, 1.0)]).unwrap(),
            remote: CommTable::new(vec![(0.0, 10.0)]).unwrap(),
        })
    }

    #[test]
    fn rounds_grow_with_log2_of_size() {
        let n = net();
        assert_eq!(cost(&n, CollOp::Barrier, 1, 0, false), 0.0);
        assert_eq!(cost(&n, CollOp::Barrier, 2, 0, false), 1.0);
        assert_eq!(cost(&n, CollOp::Barrier, 4, 0, false), 2.0);
        assert_eq!(cost(&n, CollOp::Barrier, 5, 0, false), 3.0);
        assert_eq!(cost(&n, CollOp::Allreduce, 4, 0, false), 4.0);
        assert_eq!(cost(&n, CollOp::Bcast, 4, 0, true), 20.0);
    }

    #[test]
    fn alltoall_is_size_less_1_rounds_of_a_share_of_the_largest_payload() {
        let n = CachedNetwork::new(Network {
            local: CommTable::new(vec![(0.0, 1.0), (300.0, 4.0)]).unwrap(),
            remote: CommTable::new(vec![(0.0, 10.0)]).unwrap(),
        });
        assert_eq!(cost(&n, CollOp::Alltoall, 1, 300, false), 0.0);
        // 3 rounds of 100 bytes: 1 + 100 * 3 / 300 = 2 s each.
        assert_eq!(cost(&n, CollOp::Alltoall, 4, 300, false), 6.0);
        assert_eq!(cost(&n, CollOp::Alltoall, 4, 0, true), 30.0);
    }
}
