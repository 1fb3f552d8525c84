//! Matching the messages of a job the capture attached to while it ran (`lbf-trace -p`).
//!
//! Tracing from the job's start, the k-th send of an envelope (communicator, source,
//! destination, tag) matches the k-th receive that resolved to it. Attached mid-run, each side
//! counts from its own attach: the sends seen are the job's sends `a, a+1, ...` of the
//! envelope, the receives seen its receives `b, b+1, ...`, where `a` sends happened and `b`
//! receives were posted before the attach, and neither count is visible (a call in progress at
//! the attach is not seen at all: its return probe was never armed). So the `i`-th receive
//! seen took the `(i + d)`-th send seen, `d = b - a` being the envelope's *offset*: positive
//! when receives posted before the attach (a blocking receive waiting at the attach, an
//! `MPI_Irecv` posted before it) took messages sent after it; negative when receives posted
//! after the attach took messages sent before it (in flight at the attach).
//!
//! What fixes `d`:
//! - Causality: a receive completes after its send was entered, so the `i`-th receive took
//!   one of the sends entered before its completion, `i + d < sent_by(completion)`, for every
//!   `i`: `d <= min_i (sent_by(C_i) - i - 1)`, the *timing bound*.
//! - The end of the job: MPI has every message received by `MPI_Finalize`, so when the
//!   capture saw both ends to their end, `a + sends = b + receives`: `d = sends - receives`.
//!   That value also meets the timing bound (the last receive completes after the last send),
//!   so the offset is the timing bound, and is exact.
//!
//! A capture that ended before the job (stopped early) has only the timing bound, which is the
//! offset if at some completion every message sent so far had been received (the receiver
//! had caught up); a receiver that was still behind at every completion seen would be matched
//! to later sends than it took. Those receives are counted as matched by timing alone.
//!
//! Nothing earlier fixes `d` in general: a receiver consuming old messages in flight and one
//! whose receives were posted before the attach look the same until the end (MPI's own
//! per-peer sequence numbers are not reachable from the calls' arguments). So the receives of
//! such envelopes stay unmatched until the capture ends, and their processes' events are held
//! until then; the sends get their ids at once (the `j`-th send seen is message `j`).
//!
//! What the capture cannot pair is counted ([`Boundary`]): receives whose message was sent
//! before the attach (`i + d < 0`; not a dependency of anything seen, so the model has none),
//! and sends taken by receives posted before the attach (`j < d`), which the model does not
//! see completed.
//!
//! Collectives have the same problem: the n-th collective on a communicator is numbered by
//! each member from its own attach, and a member that was inside one at the attach sees one
//! fewer. By the end of the job every member has made the same collectives, so counted from
//! the end they agree ([`AttachedCollectives`]): each member's last collective seen is the
//! same instance. An instance some member entered before the attach is incomplete in the
//! capture and left out of the model (its events carry their CPU as `Keepalive`s), counted.
//! A capture that ended before the job aligns them the same way, which assumes that each
//! member's last collective seen is the same instance (it can be one apart if the capture
//! stopped while one member had entered a collective the others had not); this is counted.

use rustc_hash::FxHashMap;

use super::matching::{CommId, Envelope, Matched, RecvId};
use crate::ids;
use lbf_model::event::{CollId, CollOp, EventKind};

/// A send seen on an envelope numbered from an attach.
#[derive(Clone, Copy, Debug)]
struct Send {
    /// When it was entered (`CLOCK_MONOTONIC` ns).
    ts: u64,
    bytes: u64,
}

/// A receive resolved to an envelope numbered from an attach, in posting order.
#[derive(Clone, Copy, Debug)]
struct Recv {
    id: RecvId,
    /// When it completed (the return of the call that completed it).
    ts: u64,
    /// Its size, when its status told.
    bytes: Option<u64>,
}

/// What one envelope's two ends did after the attach.
#[derive(Clone, Debug, Default)]
struct Ends {
    sends: Vec<Send>,
    recvs: Vec<Recv>,
}

/// What the capture could not pair at an attach, counted over the envelopes aligned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Boundary {
    /// Receives that took a message sent before the attach (no dependency in the model).
    pub recvs_of_earlier_sends: u64,
    /// Sends taken by receives posted before the attach (their receive is not modelled).
    pub sends_to_earlier_recvs: u64,
    /// Sends no receive took by the end of the capture.
    pub unreceived_sends: u64,
    /// Receives matched by the timing bound alone: the capture ended before the job did.
    pub recvs_by_timing: u64,
}

/// The envelopes numbered from an attach, until [`Attached::align`] matches them.
#[derive(Debug, Default)]
pub struct Attached {
    envelopes: FxHashMap<Envelope, Ends>,
}

impl Attached {
    /// Whether `env` is numbered from an attach.
    pub fn has(&self, env: &Envelope) -> bool {
        self.envelopes.contains_key(env)
    }

    /// Numbers `env` from an attach from now on.
    pub fn start(&mut self, env: Envelope) {
        self.envelopes.entry(env).or_default();
    }

    /// Registers a send of `bytes` on `env` entered at `ts`; returns its message id. Sends of
    /// one envelope come from one process, in the order it made them.
    pub fn send(&mut self, env: Envelope, ts: u64, bytes: u64) -> u64 {
        let ends = self.envelopes.entry(env).or_default();
        ends.sends.push(Send { ts, bytes });
        ids::message(&env, ends.sends.len() as u64 - 1)
    }

    /// Registers receive `id`, the next on `env` in posting order, completed at `ts`.
    pub fn receive(&mut self, env: Envelope, id: RecvId, ts: u64, bytes: Option<u64>) {
        let ends = self.envelopes.entry(env).or_default();
        ends.recvs.push(Recv { id, ts, bytes });
    }

    /// Receives registered and not matched yet.
    pub fn pending(&self) -> u64 {
        self.envelopes.values().map(|e| e.recvs.len() as u64).sum()
    }

    /// Matches every receive registered to its send, with each envelope's offset (see the
    /// module documentation), and forgets them all. `ended`: the capture saw every process
    /// to its end, so the offsets are exact; else they are the timing bound.
    pub fn align(&mut self, ended: bool, matched: &mut Vec<Matched>) -> Boundary {
        let mut boundary = Boundary::default();
        for (env, ends) in self.envelopes.drain() {
            let (sends, recvs) = (ends.sends.len() as i64, ends.recvs.len() as i64);
            // Without receives seen, a capture that ended saw every send go to a receive
            // posted before the attach; one that stopped early may just have stopped first.
            let d = match (recvs, ended) {
                (0, false) => 0,
                _ => offset(&ends.sends, &ends.recvs).min(sends - recvs),
            };
            for (i, r) in ends.recvs.iter().enumerate() {
                let j = i as i64 + d;
                if j < 0 {
                    boundary.recvs_of_earlier_sends += 1;
                    continue;
                }
                let send = ends.sends[j as usize];
                matched.push(Matched {
                    recv: r.id,
                    msg: ids::message(&env, j as u64),
                    bytes: r.bytes.or(Some(send.bytes)),
                });
            }
            boundary.sends_to_earlier_recvs += d.clamp(0, sends) as u64;
            boundary.unreceived_sends += (sends - recvs - d) as u64;
            if !ended {
                boundary.recvs_by_timing += recvs as u64;
            }
        }
        boundary
    }
}

/// The timing bound of an envelope's offset: the largest `d` such that every receive `i`
/// completed after send `i + d` was entered. `i64::MAX` without receives.
fn offset(sends: &[Send], recvs: &[Recv]) -> i64 {
    let mut entered: Vec<u64> = sends.iter().map(|s| s.ts).collect();
    entered.sort_unstable();
    recvs
        .iter()
        .enumerate()
        .map(|(i, r)| entered.partition_point(|&t| t <= r.ts) as i64 - i as i64 - 1)
        .min()
        .unwrap_or(i64::MAX)
}

/// A collective one member entered after the attach: the queue slots of its events.
#[derive(Clone, Copy, Debug)]
struct Part {
    /// The `CollStart`'s slot.
    start: u64,
    /// The `CollEnd`'s slot, once the member left.
    end: Option<u64>,
    op: CollOp,
    size: u32,
    bytes: u64,
}

/// A collective event of a member, once its instance is known: the member's process, the
/// slot, and what the event is (`Keepalive` for an instance entered before the attach).
pub type Settled = (u32, u64, EventKind);

/// The collectives of processes attached while running, until
/// [`AttachedCollectives::align`] numbers them (see the module documentation).
#[derive(Debug, Default)]
pub struct AttachedCollectives {
    /// Per communicator, per member process, its collectives in order.
    comms: FxHashMap<CommId, FxHashMap<u32, Vec<Part>>>,
    /// Where the collective a member is in (by its provisional id) is kept.
    open: FxHashMap<(u32, CollId), (CommId, usize)>,
}

impl AttachedCollectives {
    /// Member `member` entered a collective `(op, size, bytes)` on `comm` (its provisional
    /// id `coll`), whose `CollStart` waits in `slot`.
    pub fn enter(
        &mut self,
        comm: CommId,
        member: u32,
        coll: CollId,
        slot: u64,
        (op, size, bytes): (CollOp, u32, u64),
    ) {
        let parts = self
            .comms
            .entry(comm)
            .or_default()
            .entry(member)
            .or_default();
        parts.push(Part {
            start: slot,
            end: None,
            op,
            size,
            bytes,
        });
        self.open.insert((member, coll), (comm, parts.len() - 1));
    }

    /// Member `member` left collective `coll`; its `CollEnd` waits in `slot`.
    pub fn leave(&mut self, member: u32, coll: CollId, slot: u64) {
        let Some((comm, k)) = self.open.remove(&(member, coll)) else {
            return;
        };
        if let Some(part) = self
            .comms
            .get_mut(&comm)
            .and_then(|m| m.get_mut(&member))
            .and_then(|parts| parts.get_mut(k))
        {
            part.end = Some(slot);
        }
    }

    /// Numbers every collective from the end (see the module documentation) and forgets them
    /// all: the events to settle, how many instances were left out as entered before the
    /// attach, and how many were modelled.
    pub fn align(&mut self) -> (Vec<Settled>, u64, u64) {
        let mut settled = Vec::new();
        let (mut partial, mut modelled) = (0, 0);
        self.open.clear();
        for (comm, members) in self.comms.drain() {
            let size = members
                .values()
                .flatten()
                .map(|p| p.size)
                .max()
                .unwrap_or(0);
            // Instances every member saw: the last `complete` of each.
            let complete = if members.len() < size as usize {
                0
            } else {
                members.values().map(Vec::len).min().unwrap_or(0)
            };
            let most = members.values().map(Vec::len).max().unwrap_or(0);
            partial += (most - complete) as u64;
            modelled += complete as u64;
            for (member, parts) in members {
                for (k, part) in parts.iter().enumerate() {
                    let from_end = parts.len() - k;
                    let kinds = if from_end > complete {
                        (EventKind::Keepalive, EventKind::Keepalive)
                    } else {
                        let coll = ids::collective(comm, (from_end as u64).wrapping_neg());
                        let start = EventKind::CollStart {
                            coll,
                            op: part.op,
                            size: part.size,
                            bytes: part.bytes,
                        };
                        (start, EventKind::CollEnd { coll })
                    };
                    settled.push((member, part.start, kinds.0));
                    if let Some(end) = part.end {
                        settled.push((member, end, kinds.1));
                    }
                }
            }
        }
        (settled, partial, modelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENV: Envelope = Envelope {
        comm: ids::WORLD,
        src: 0,
        dst: 1,
        tag: 7,
    };

    /// Sends entered at `sends`, receives completed at `recvs` (ids 0, 1, ...): the send
    /// ordinal each receive was matched to (`None`: a message sent before the attach), and
    /// the counts.
    fn align(sends: &[u64], recvs: &[u64], ended: bool) -> (Vec<Option<u64>>, Boundary) {
        let mut a = Attached::default();
        let ids: Vec<u64> = sends.iter().map(|&t| a.send(ENV, t, 8)).collect();
        for (i, &t) in recvs.iter().enumerate() {
            a.receive(ENV, i as RecvId, t, None);
        }
        let mut matched = Vec::new();
        let boundary = a.align(ended, &mut matched);
        let of = |recv: RecvId| {
            let m = matched.iter().find(|m| m.recv == recv)?;
            ids.iter().position(|&id| id == m.msg).map(|j| j as u64)
        };
        ((0..recvs.len() as u64).map(of).collect(), boundary)
    }

    /// The receiver was waiting in a receive at the attach, which took the first send seen:
    /// each receive seen took the next send (what the old numbering got wrong).
    #[test]
    fn a_receive_waiting_at_the_attach_takes_the_first_send() {
        // Sends at 10, 30, 50; receives complete at 31 and 51.
        let (got, b) = align(&[10, 30, 50], &[31, 51], true);
        assert_eq!(got, vec![Some(1), Some(2)]);
        assert_eq!(b.sends_to_earlier_recvs, 1);
        assert_eq!((b.recvs_of_earlier_sends, b.unreceived_sends), (0, 0));
    }

    /// A message in flight at the attach is received first: it is no dependency.
    #[test]
    fn a_message_in_flight_at_the_attach_is_received_first() {
        let (got, b) = align(&[20, 40], &[5, 21, 41], true);
        assert_eq!(got, vec![None, Some(0), Some(1)]);
        assert_eq!(b.recvs_of_earlier_sends, 1);
        assert_eq!(b.sends_to_earlier_recvs, 0);
    }

    /// A receiver running behind (three messages queued at the attach): the timing bound alone
    /// would pair its receives with the latest sends; the end of the job says how far behind.
    #[test]
    fn a_receiver_behind_is_aligned_by_the_end_of_the_job() {
        // Sends at 1, 2, 3 (the burst), receives complete at 10, 11, 12, 13, 14, 15.
        let (got, b) = align(&[1, 2, 3], &[10, 11, 12, 13, 14, 15], true);
        assert_eq!(got, vec![None, None, None, Some(0), Some(1), Some(2)]);
        assert_eq!(b.recvs_of_earlier_sends, 3);
        assert_eq!(b.recvs_by_timing, 0);
    }

    /// Stopped before the job ended: the timing bound, counted as such; sends after the last
    /// receive stay unreceived.
    #[test]
    fn a_capture_stopped_early_uses_the_timing_bound() {
        let (got, b) = align(&[10, 30, 50, 70], &[31, 51], false);
        assert_eq!(got, vec![Some(1), Some(2)]);
        assert_eq!(b.recvs_by_timing, 2);
        assert_eq!((b.sends_to_earlier_recvs, b.unreceived_sends), (1, 1));
    }

    /// Without receives seen, every send went to a receive posted before the attach, or, if
    /// the capture stopped early, may not have been received yet.
    #[test]
    fn sends_without_receives_seen() {
        let (_, b) = align(&[1, 2], &[], true);
        assert_eq!((b.sends_to_earlier_recvs, b.unreceived_sends), (2, 0));
        let (_, b) = align(&[1, 2], &[], false);
        assert_eq!((b.sends_to_earlier_recvs, b.unreceived_sends), (0, 2));
    }

    /// Members counted from the end: the member that was inside a collective at the attach
    /// saw one fewer, and the others' first is left out; a communicator one member never used
    /// after the attach has no complete instance.
    #[test]
    fn collectives_are_numbered_from_the_end() {
        let mut c = AttachedCollectives::default();
        let barrier = (CollOp::Barrier, 2, 0);
        // Member 10 saw 3 collectives on communicator 5, member 11 two (slots 0, 1, ...).
        for (member, n) in [(10, 3), (11, 2)] {
            for k in 0..n {
                c.enter(5, member, k, 2 * k, barrier);
                c.leave(member, k, 2 * k + 1);
            }
        }
        c.enter(6, 10, 0, 100, barrier);
        let (settled, partial, modelled) = c.align();
        assert_eq!((partial, modelled), (2, 2));
        let kind = |member: u32, slot: u64| {
            settled
                .iter()
                .find(|s| s.0 == member && s.1 == slot)
                .map(|s| s.2)
                .unwrap()
        };
        assert_eq!(kind(10, 0), EventKind::Keepalive);
        assert_eq!(kind(10, 1), EventKind::Keepalive);
        assert_eq!(kind(10, 2), kind(11, 0), "the first instance both saw");
        assert_eq!(kind(10, 5), kind(11, 3));
        assert_ne!(kind(10, 2), kind(10, 4));
        assert!(matches!(kind(10, 4), EventKind::CollStart { size: 2, .. }));
        assert_eq!(
            kind(10, 100),
            EventKind::Keepalive,
            "member 11 never used 6"
        );
    }
}
