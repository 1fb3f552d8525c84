//! Communicators across processes.
//!
//! A communicator gets an id the same on every host ([`ids::communicator`]):
//! `MPI_COMM_WORLD` is [`WORLD`]; a communicator created by the n-th
//! `MPI_Comm_dup`/`MPI_Comm_split`/`MPI_Cart_create` a process makes on a parent is the same
//! object in every member, so it is identified by (parent, n, color). Ranks in a dup are the
//! parent's, and so are a Cartesian grid's (neither Open MPI 4.1 nor MPICH 4.0 reorders
//! them; a grid smaller than its parent takes the parent's size until `MPI_Comm_size` says
//! otherwise, and its collectives are wrong until then); ranks
//! in a split are ordered by (key, parent rank) among the members of one color, computed once
//! every member of the parent has entered the split (which MPI guarantees before any of them
//! returns) — when they all run on this host. `MPI_Comm_rank`/`MPI_Comm_size` answers fill in
//! whatever is still unknown. Intercommunicators and group-based creation (`MPI_Comm_create`)
//! are not probed.
//!
//! Collectives are grouped by call order: the n-th collective call on a communicator by each
//! member is the same instance ([`ids::collective`]).

use rustc_hash::FxHashMap;

use super::matching::CommId;
use crate::ids;

pub use crate::ids::WORLD;

/// `MPI_UNDEFINED` (the same in Open MPI and MPICH): a split color that yields no communicator.
pub const UNDEFINED: i32 = -32766;

/// One member's part in a communicator creation.
#[derive(Clone, Copy, Debug)]
struct Member {
    tgid: u32,
    color: i32,
    key: i32,
    parent_rank: u32,
}

/// A creation in progress: members so far, and which of them have collected their result.
#[derive(Default)]
struct Creation {
    split: bool,
    members: Vec<Member>,
    collected: usize,
}

/// What a member learns about a communicator it created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Created {
    /// The communicator.
    pub comm: CommId,
    /// The member's rank in it, when known.
    pub rank: Option<u32>,
}

/// Communicator sizes and creations in progress.
#[derive(Default)]
pub struct Comms {
    sizes: FxHashMap<CommId, u32>,
    creations: FxHashMap<(CommId, u32), Creation>,
}

impl Comms {
    /// Only `MPI_COMM_WORLD`, of unknown size.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of members of `comm`, when known.
    pub fn size(&self, comm: CommId) -> Option<u32> {
        self.sizes.get(&comm).copied()
    }

    /// Records that `comm` has `size` members.
    pub fn set_size(&mut self, comm: CommId, size: u32) {
        self.sizes.insert(comm, size);
    }

    /// Process `tgid` (rank `parent_rank` of `parent`) enters its `seq`-th creation on
    /// `parent`: a dup (`split == None`) or a split with `(color, key)`.
    pub fn enter_creation(
        &mut self,
        parent: CommId,
        seq: u32,
        tgid: u32,
        parent_rank: u32,
        split: Option<(i32, i32)>,
    ) {
        let creation = self.creations.entry((parent, seq)).or_default();
        creation.split = split.is_some();
        let (color, key) = split.unwrap_or((0, 0));
        creation.members.push(Member {
            tgid,
            color,
            key,
            parent_rank,
        });
    }

    /// Process `tgid` leaves its `seq`-th creation on `parent`: the communicator it got, or
    /// `None` for a split with color `MPI_UNDEFINED` (or a creation never entered).
    pub fn leave_creation(&mut self, parent: CommId, seq: u32, tgid: u32) -> Option<Created> {
        let parent_size = self.size(parent);
        let creation = self.creations.get_mut(&(parent, seq))?;
        let me = *creation.members.iter().find(|m| m.tgid == tgid)?;
        creation.collected += 1;
        let complete = parent_size.is_some_and(|n| creation.members.len() as u32 >= n);
        let result = (me.color != UNDEFINED).then(|| {
            let color = if creation.split { me.color } else { 0 };
            let comm = ids::communicator(parent, seq, color);
            let rank = if !creation.split {
                Some(me.parent_rank)
            } else if complete {
                let mut same: Vec<&Member> = creation
                    .members
                    .iter()
                    .filter(|m| m.color == me.color)
                    .collect();
                same.sort_by_key(|m| (m.key, m.parent_rank));
                self.sizes.insert(comm, same.len() as u32);
                same.iter().position(|m| m.tgid == tgid).map(|r| r as u32)
            } else {
                None
            };
            if !creation.split {
                if let Some(n) = parent_size {
                    self.sizes.insert(comm, n);
                }
            }
            Created { comm, rank }
        });
        if complete && creation.collected >= creation.members.len() {
            self.creations.remove(&(parent, seq));
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_ranks_follow_key_then_parent_rank() {
        let mut c = Comms::new();
        c.set_size(WORLD, 4);
        // (tgid, parent rank, color, key)
        let members = [
            (10, 0, 0, 5),
            (11, 1, 1, 0),
            (12, 2, 0, 1),
            (13, 3, UNDEFINED, 0),
        ];
        for &(tgid, rank, color, key) in &members {
            c.enter_creation(WORLD, 0, tgid, rank, Some((color, key)));
        }
        let a = c.leave_creation(WORLD, 0, 10).unwrap();
        let b = c.leave_creation(WORLD, 0, 11).unwrap();
        let d = c.leave_creation(WORLD, 0, 12).unwrap();
        assert_eq!(c.leave_creation(WORLD, 0, 13), None);
        assert_eq!((a.comm, a.rank), (d.comm, Some(1)));
        assert_eq!(d.rank, Some(0));
        assert_ne!(a.comm, b.comm);
        assert_eq!((c.size(a.comm), c.size(b.comm)), (Some(2), Some(1)));
        assert!(c.creations.is_empty());
    }

    #[test]
    fn dup_keeps_ranks_and_size() {
        let mut c = Comms::new();
        c.set_size(WORLD, 2);
        c.enter_creation(WORLD, 0, 1, 0, None);
        c.enter_creation(WORLD, 0, 2, 1, None);
        let x = c.leave_creation(WORLD, 0, 2).unwrap();
        assert_eq!(x.rank, Some(1));
        assert_eq!(c.size(x.comm), Some(2));
    }
}
