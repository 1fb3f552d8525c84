//! Dense slots for message ids, assigned once by the engine and shared by every target.
//!
//! Message ids are arbitrary `u64`s (hashes of MPI envelopes), so a simulation would have to
//! hash each id to find its message's state, at the send and again at the receive. Instead the
//! engine maps each id to a small slot number as its events arrive and stores the slot with
//! the events; each simulation keeps its messages in a vector indexed by slot.
//!
//! A slot is freed, and its id forgotten, once no queued event refers to it and no simulation
//! holds state for it (every target has received the message): memory stays bounded by the
//! events not yet consumed by every target and the messages in flight, not by the trace's
//! length. An id seen again after that gets a fresh slot, in which every simulation starts
//! from nothing, as it would with its own map from ids.

use rustc_hash::FxHashMap;

use crate::event::MsgId;

/// The slot of each message id with queued events or state in some simulation.
#[derive(Debug, Default)]
pub(super) struct MsgSlots {
    slot_of: FxHashMap<MsgId, u32>,
    /// Per slot: its id, and the queued events that refer to it.
    slots: Vec<(MsgId, u32)>,
    /// Slots free for reuse.
    free: Vec<u32>,
}

impl MsgSlots {
    /// The slot of `msg`, for one more queued event that refers to it.
    pub(super) fn acquire(&mut self, msg: MsgId) -> u32 {
        let slots = &mut self.slots;
        let free = &mut self.free;
        let slot = *self.slot_of.entry(msg).or_insert_with(|| {
            free.pop().unwrap_or_else(|| {
                slots.push((msg, 0));
                u32::try_from(slots.len() - 1).expect("fewer than 2^32 messages in flight")
            })
        });
        // A reused slot has no references left from its previous id.
        let entry = &mut slots[slot as usize];
        *entry = (msg, entry.1 + 1);
        slot
    }

    /// One queued event that referred to `slot` is gone: every target has consumed it. Frees
    /// the slot if that was the last such event and `in_use` (whether a simulation still
    /// holds state for the slot) says no simulation needs it.
    pub(super) fn release(&mut self, slot: u32, in_use: impl FnOnce() -> bool) {
        let (msg, refs) = &mut self.slots[slot as usize];
        *refs -= 1;
        if *refs == 0 && !in_use() {
            self.slot_of.remove(msg);
            self.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MsgSlots;

    #[test]
    fn an_id_keeps_its_slot_while_referred_to_and_slots_are_reused() {
        let mut m = MsgSlots::default();
        let a = m.acquire(1 << 60);
        let b = m.acquire(7);
        assert_ne!(a, b);
        assert_eq!(m.acquire(1 << 60), a);
        m.release(a, || false);
        assert_eq!(m.acquire(1 << 60), a, "one event still refers to it");
        m.release(a, || false);
        m.release(a, || true);
        assert_eq!(m.acquire(1 << 60), a, "a simulation still holds it");
        m.release(a, || false);
        assert_eq!(m.acquire(9), a, "freed and reused for another id");
    }
}
