//! Ids that every host computes alike from what its own processes did, so that the two ends of
//! a message, the members of a collective and of a communicator get the same id although each
//! host's capture saw only its own processes (cluster mode: one `lbf-node` per host, one
//! builder matching across them).
//!
//! Each id is a 64-bit hash of the MPI-level identity of the object: a message is the k-th of
//! its envelope (communicator, source, destination, tag), which MPI's non-overtaking rule makes
//! the same on both ends; a collective is the n-th on its communicator; a communicator is the
//! n-th created from its parent, with the creator's color. For PVM, a message is the k-th
//! from one task to another with its tag, and a barrier the n-th of its group. The hash is fixed here (not the
//! standard library's, which may change between Rust releases): nodes and builder must agree
//! on it, so changing it changes the cluster protocol's version. Collisions need two
//! identities among the ones in flight to share 64 bits.

use crate::mpi::matching::{CommId, Envelope};
use lbf_model::event::{CollId, EventKind, MsgId};

/// `MPI_COMM_WORLD`'s id.
pub const WORLD: CommId = 0;

/// The id of the `k`-th message (from 0) with envelope `env`.
pub fn message(env: &Envelope, k: u64) -> MsgId {
    hash(
        Domain::Message,
        &[
            env.comm,
            u64::from(env.src),
            u64::from(env.dst),
            u64::from(env.tag as u32),
            k,
        ],
    )
}

/// The id of the `seq`-th collective (from 0) on communicator `comm`.
pub fn collective(comm: CommId, seq: u64) -> CollId {
    hash(Domain::Collective, &[comm, seq])
}

/// The id of the communicator that the `seq`-th creation (from 0) on `parent` gives the
/// members of `color` (0 for a dup). Never [`WORLD`].
pub fn communicator(parent: CommId, seq: u32, color: i32) -> CommId {
    match hash(
        Domain::Communicator,
        &[parent, u64::from(seq), u64::from(color as u32)],
    ) {
        WORLD => 1,
        id => id,
    }
}

/// The id of `MPI_COMM_SELF` of the process whose `MPI_COMM_WORLD` rank is `rank`: a
/// communicator of that process alone. Never [`WORLD`].
pub fn self_comm(rank: u32) -> CommId {
    match hash(Domain::SelfComm, &[u64::from(rank)]) {
        WORLD => 1,
        id => id,
    }
}

/// The id of the `k`-th message (from 0) that PVM task `src` sent to task `dst` with `tag`.
/// PVM delivers the messages of a pair of tasks in order and a receive takes the first one
/// that matches, so the receiver's `k`-th receive of (`src`, `tag`) is the same message; task
/// ids are unique in the virtual machine, so both hosts compute the same id.
pub fn pvm_message(src: i32, dst: i32, tag: i32, k: u64) -> MsgId {
    hash(
        Domain::PvmMessage,
        &[
            u64::from(src as u32),
            u64::from(dst as u32),
            u64::from(tag as u32),
            k,
        ],
    )
}

/// The id of the `seq`-th barrier (from 0) of the PVM group named `group`.
pub fn pvm_barrier(group: &str, seq: u64) -> CollId {
    hash(Domain::PvmBarrier, &with_name(group, &[seq]))
}

/// The id, unique across a cluster job, of message `k` as numbered by the one place that
/// matched it, `origin`: a node's capture matching a socket message it saw both ends
/// of (the node's name), or the builder matching a connection between hosts (`""`, which no
/// node is named). Each numbers its messages from 1 on its own.
pub fn local_message(origin: &str, k: u64) -> MsgId {
    hash(Domain::LocalMessage, &with_name(origin, &[k]))
}

/// `kind` with its message id (if it has one) made unique in the job as numbered by `origin`
/// ([`local_message`]).
pub fn job_wide(kind: EventKind, origin: &str) -> EventKind {
    kind.with_msg(|msg| local_message(origin, msg))
}

/// `name`'s bytes as words (little-endian, the last one zero-padded), its length, then `rest`:
/// hash input that keeps names of different lengths apart.
fn with_name(name: &str, rest: &[u64]) -> Vec<u64> {
    let mut parts: Vec<u64> = name
        .as_bytes()
        .chunks(8)
        .map(|c| {
            let mut word = [0u8; 8];
            word[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(word)
        })
        .collect();
    parts.push(name.len() as u64);
    parts.extend_from_slice(rest);
    parts
}

/// Keeps the kinds of ids apart.
#[derive(Clone, Copy)]
enum Domain {
    Message = 1,
    Collective = 2,
    Communicator = 3,
    PvmMessage = 4,
    PvmBarrier = 5,
    LocalMessage = 6,
    SelfComm = 7,
}

/// Folds `parts` into 64 bits with SplitMix64's finaliser, a bijective mixer with full
/// avalanche: distinct inputs give unrelated outputs.
fn hash(domain: Domain, parts: &[u64]) -> u64 {
    parts.iter().fold(mix(domain as u64), |h, &p| {
        mix(h.rotate_left(23) ^ p.wrapping_add(0x9e37_79b9_7f4a_7c15))
    })
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The values are part of the cluster protocol: a change here must come with a new
    /// protocol version.
    #[test]
    fn ids_are_fixed() {
        let env = Envelope {
            comm: WORLD,
            src: 1,
            dst: 0,
            tag: 7,
        };
        assert_eq!(message(&env, 3), message(&env, 3));
        assert_eq!(message(&env, 0), 0x9254_1a55_fa13_b84d);
    }

    #[test]
    fn neighbouring_identities_do_not_collide() {
        let mut seen = HashSet::new();
        for src in 0..16 {
            for dst in 0..16 {
                for tag in [-1, 0, 1, 2] {
                    for k in 0..64 {
                        let env = Envelope {
                            comm: WORLD,
                            src,
                            dst,
                            tag,
                        };
                        assert!(seen.insert(message(&env, k)));
                    }
                }
            }
        }
        for seq in 0..1000 {
            assert!(seen.insert(collective(WORLD, seq)));
            assert!(seen.insert(communicator(WORLD, seq as u32, 0)));
            assert!(seen.insert(pvm_barrier("lbf", seq)));
            assert!(seen.insert(pvm_barrier("lbf2", seq)));
        }
        for src in [0x40002, 0x40003, 0x80001] {
            for dst in [0x40002, 0x80001, 0x80002] {
                for k in 0..64 {
                    assert!(seen.insert(pvm_message(src, dst, 1, k)));
                }
            }
        }
    }
}
