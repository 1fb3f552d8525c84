//! The messages of one simulation between their send and their receive, by message id.
//!
//! Every message is looked up two or three times per target (its send, the receiver reaching
//! its `recv_end`, and a wake-up if it had to wait), so the table is a plain open-addressing
//! one: one multiplication to hash, linear probing at most half full, and deletion by moving
//! the following entries back (no tombstones). Message ids are usually consecutive, which
//! Fibonacci hashing spreads evenly. It grows with the messages in flight, as a map would.

use crate::event::{MsgId, ProcId};

/// A message between its send and its receive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Msg {
    /// Sent, not yet received: it leaves at `at` (for a message sent by rendezvous, once its
    /// receive was answered; see `sim/rendezvous.rs`).
    Sent { at: f64, bytes: u64, from: ProcId },
    /// A receiver waits for it; not yet sent. Its receive was posted (answered, for a
    /// message sent by rendezvous) at `posted`.
    Awaited { by: ProcId, posted: f64 },
    /// Its receive was posted and answered at `at`, by a receiver that does not wait for it
    /// yet; not yet sent. Matters only if it is sent by rendezvous.
    Posted { by: ProcId, at: f64 },
    /// Sent by rendezvous at `at`; its receive is not answered yet.
    Requested { at: f64, bytes: u64, from: ProcId },
}

/// Messages by id.
#[derive(Debug)]
pub(super) struct MsgTable {
    /// A power-of-two number of slots, at most half of them used.
    slots: Vec<Option<(MsgId, Msg)>>,
    /// `64 - log2(slots.len())`: the hash is the top bits of the id's product.
    shift: u32,
    len: usize,
}

/// Slots of a new table.
const INITIAL_SLOTS: usize = 16;

impl MsgTable {
    /// An empty table.
    pub(super) fn new() -> Self {
        MsgTable {
            slots: vec![None; INITIAL_SLOTS],
            shift: 64 - INITIAL_SLOTS.trailing_zeros(),
            len: 0,
        }
    }

    /// The slot where probing for `msg` starts.
    #[inline]
    fn home(&self, msg: MsgId) -> usize {
        // Fibonacci hashing: 2^64 divided by the golden ratio.
        (msg.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `msg`, if it is in the table.
    #[inline]
    pub(super) fn find(&self, msg: MsgId) -> Option<usize> {
        let mut i = self.home(msg);
        loop {
            match self.slots[i] {
                Some((id, _)) if id == msg => return Some(i),
                Some(_) => i = (i + 1) & self.mask(),
                None => return None,
            }
        }
    }

    /// The message `msg`, if it is in the table.
    #[inline]
    pub(super) fn get(&self, msg: &MsgId) -> Option<&Msg> {
        let i = self.find(*msg)?;
        self.slots[i].as_ref().map(|(_, m)| m)
    }

    /// The message in slot `i` (from [`MsgTable::find`]).
    #[inline]
    pub(super) fn at(&self, i: usize) -> Msg {
        self.slots[i].expect("an occupied slot").1
    }

    /// Puts `msg` in the table as `state`, returning what it replaced.
    #[inline]
    pub(super) fn insert(&mut self, msg: MsgId, state: Msg) -> Option<Msg> {
        let mut i = self.home(msg);
        loop {
            match &mut self.slots[i] {
                Some((id, old)) if *id == msg => return Some(std::mem::replace(old, state)),
                Some(_) => i = (i + 1) & self.mask(),
                slot @ None => {
                    *slot = Some((msg, state));
                    self.len += 1;
                    if 2 * self.len > self.slots.len() {
                        self.grow();
                    }
                    return None;
                }
            }
        }
    }

    /// Removes `msg` from the table, returning it.
    #[inline]
    pub(super) fn remove(&mut self, msg: &MsgId) -> Option<Msg> {
        let i = self.find(*msg)?;
        Some(self.remove_at(i))
    }

    /// Removes the message in slot `i` (from [`MsgTable::find`]), returning it. The entries
    /// after it that probing would no longer reach move back into the hole.
    #[inline]
    pub(super) fn remove_at(&mut self, i: usize) -> Msg {
        let (_, removed) = self.slots[i].take().expect("an occupied slot");
        self.len -= 1;
        let mask = self.mask();
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while let Some((id, _)) = self.slots[j] {
            // The entry at `j` may fill the hole if its probe passes the hole on its way:
            // its home is at least as far back from `j` as the hole is.
            if (j.wrapping_sub(self.home(id)) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
            j = (j + 1) & mask;
        }
        removed
    }

    /// Doubles the number of slots.
    #[cold]
    fn grow(&mut self) {
        let slots = vec![None; 2 * self.slots.len()];
        let old = std::mem::replace(&mut self.slots, slots);
        self.shift -= 1;
        self.len = 0;
        for (id, msg) in old.into_iter().flatten() {
            self.insert(id, msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts and removals agree with a `HashMap`, through growth and wrap-around.
    #[test]
    fn behaves_like_a_map() {
        let mut table = MsgTable::new();
        let mut map = HashMap::new();
        let mut rng = 7u64;
        for step in 0..100_000u64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = rng >> 33;
            // Ids from a sliding window, as captures number messages in order; sometimes
            // far ones, so that probes collide.
            let id = match r % 7 {
                0 => r.wrapping_mul(0x1000),
                _ => step / 3 + r % 64,
            };
            if r.is_multiple_of(3) {
                assert_eq!(table.remove(&id), map.remove(&id), "remove {id}");
            } else {
                let msg = if r.is_multiple_of(2) {
                    Msg::Awaited {
                        by: r as u32,
                        posted: 0.5,
                    }
                } else {
                    Msg::Sent {
                        at: step as f64,
                        bytes: r,
                        from: 3,
                    }
                };
                assert_eq!(table.insert(id, msg), map.insert(id, msg), "insert {id}");
            }
            assert_eq!(table.len, map.len());
            if step % 1000 == 0 {
                for (&id, &msg) in &map {
                    assert_eq!(table.find(id).map(|i| table.at(i)), Some(msg));
                }
            }
        }
    }
}
