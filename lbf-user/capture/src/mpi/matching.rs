//! Point-to-point matching: gives every send and the receive that consumed it the same
//! message id, computed alike on every host ([`ids::message`]), so that a message between two
//! hosts matches at the cluster builder although each host's capture saw one end.
//!
//! MPI's non-overtaking rule: for one envelope (communicator, source, destination, tag), the
//! k-th send matches the k-th receive *in posting order* among the receives that resolved to
//! that envelope. The sender numbers its sends per envelope; the receiver numbers the receives
//! that resolve to each envelope. A receive resolves when it completes: from its arguments
//! when they name the source and tag, else from its status. Because a wildcard receive posted
//! earlier may still resolve to the same envelope, a completed receive is numbered only once
//! no earlier-posted, still-unresolved receive of the same destination could take the same
//! message.
//!
//! A receive of a message whose sender is a process of this capture (all of them, unless the
//! capture sees only some ranks of `MPI_COMM_WORLD`) resolves only once that send was seen: a
//! send lost to the capture (of unknown size, on an unknown communicator) leaves its receive
//! unmatched rather than waiting in the model for a message that never leaves.
//!
//! A wildcard receive whose status was not visible (`MPI_STATUS_IGNORE`, a `Waitany`) takes
//! the oldest unreceived send its pattern admits among the sends this capture saw to its own
//! processes (`local` sends, kept until received, for this and for their sizes): the message
//! MPI itself would most likely have delivered. Such a receive of a message from another host
//! cannot be resolved and stays unmatched.
//!
//! A capture attached to a running job numbers the envelopes both of whose ends it sees from
//! the attach, and matches them only when it ends ([`alignment`](super::alignment)): a resolved receive of such
//! an envelope takes its place among the envelope's receives, and its message once the
//! envelope's offset is known ([`Matcher::align`]). A wildcard receive whose status is not
//! visible cannot take a place there: it is left unmatched and counted.
//!
//! State: a counter per envelope ever used on each side, the receives not yet resolved, and
//! the local sends not yet received; after an attach, what each envelope's ends did.

use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, VecDeque};

use super::alignment::{Attached, Boundary};
use super::call::Status;
use crate::ids;
use lbf_model::event::MsgId;

/// A communicator's id, the same on every host (see [`ids::communicator`]); not a
/// process-local handle.
pub type CommId = u64;

/// Identifies one posted receive.
pub type RecvId = u64;

/// The envelope of a message: ranks are in the communicator's rank space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Communicator.
    pub comm: CommId,
    /// Sender's rank.
    pub src: u32,
    /// Receiver's rank.
    pub dst: u32,
    /// Tag.
    pub tag: i32,
}

/// What a posted receive accepts: `None` source or tag is a wildcard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// Communicator.
    pub comm: CommId,
    /// Receiver's rank.
    pub dst: u32,
    /// Sender's rank, or any.
    pub src: Option<u32>,
    /// Tag, or any.
    pub tag: Option<i32>,
}

impl Pattern {
    fn admits(&self, src: u32, tag: i32) -> bool {
        self.src.is_none_or(|s| s == src) && self.tag.is_none_or(|t| t == tag)
    }

    fn envelope(&self, src: u32, tag: i32) -> Envelope {
        Envelope {
            comm: self.comm,
            src,
            dst: self.dst,
            tag,
        }
    }
}

/// A receive paired with the message it consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matched {
    /// The receive.
    pub recv: RecvId,
    /// The message.
    pub msg: MsgId,
    /// The message's size: from the receive's status, else from the local send; `None` for
    /// a message from another host whose status was not visible.
    pub bytes: Option<u64>,
}

/// A local send not yet received.
#[derive(Clone, Copy, Debug)]
struct PendingSend {
    /// Its number among the sends of its envelope.
    k: u64,
    /// Global order of local sends, for the oldest-first fallback.
    seq: u64,
    bytes: u64,
}

#[derive(Clone, Copy, Debug)]
enum PostState {
    Posted,
    /// Completed; `Some((src, tag))` when the envelope is known; the size when the status
    /// said; when (`CLOCK_MONOTONIC` ns).
    Completed(Option<(u32, i32)>, Option<u64>, u64),
}

#[derive(Clone, Copy, Debug)]
struct Posted {
    id: RecvId,
    pattern: Pattern,
    state: PostState,
}

/// Local sends to one (communicator, destination rank), by (source, tag), oldest first.
type Mailbox = FxHashMap<(u32, i32), VecDeque<PendingSend>>;

/// Matches sends and receives; see the module documentation.
#[derive(Default)]
pub struct Matcher {
    next_recv: RecvId,
    next_seq: u64,
    /// Sends so far, per envelope.
    sent: FxHashMap<Envelope, u64>,
    /// Receives resolved so far, per envelope.
    received: FxHashMap<Envelope, u64>,
    /// Local sends not yet received, by (communicator, destination rank).
    mailboxes: FxHashMap<(CommId, u32), Mailbox>,
    /// Unresolved receives by (communicator, receiver rank), in posting order.
    posted: FxHashMap<(CommId, u32), VecDeque<Posted>>,
    /// Where each unresolved receive is queued.
    queue_of: FxHashMap<RecvId, (CommId, u32)>,
    matched: Vec<Matched>,
    /// The world ranks of this capture when it sees only some; `None`: the whole job.
    local_world: Option<BTreeSet<u32>>,
    /// Whether envelopes first used from now on are numbered from an attach.
    from_attach: bool,
    /// The envelopes numbered from an attach.
    attached: Attached,
    /// Wildcard receives without a visible status on a capture attached mid-run.
    unplaced: u64,
    /// Sends and receives after an attach whose envelope has an end on another host: they
    /// keep the numbering from the attach.
    unaligned: u64,
}

impl Matcher {
    /// An empty matcher.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes this the matcher of a capture that sees only the world ranks `ranks`: receives
    /// of messages from other ranks resolve without their send.
    pub fn only_ranks(&mut self, ranks: BTreeSet<u32>) {
        self.local_world = Some(ranks);
    }

    /// Numbers the envelopes between processes of this capture that are first used from now
    /// on from an attach: a process was found running (see [`alignment`](super::alignment)).
    pub fn attached_mid_run(&mut self) {
        self.from_attach = true;
    }

    /// Whether a process was found running ([`Matcher::attached_mid_run`]).
    pub fn is_attached_mid_run(&self) -> bool {
        self.from_attach
    }

    /// Whether `env` is numbered from an attach; starts numbering it so if it is new, between
    /// processes of this capture, and the capture attached mid-run.
    fn numbered_from_attach(&mut self, env: &Envelope) -> bool {
        if !self.from_attach {
            return false;
        }
        if self.attached.has(env) {
            return true;
        }
        let fresh = !self.sent.contains_key(env) && !self.received.contains_key(env);
        let local = is_local(&self.local_world, env.comm, env.src)
            && is_local(&self.local_world, env.comm, env.dst);
        if !local {
            self.unaligned += 1;
        }
        let start = fresh && local;
        if start {
            self.attached.start(*env);
        }
        start
    }

    /// Registers a send of `bytes` with envelope `env`, entered at `ts`, and returns its
    /// message id. A send to a process of this capture (`is_local`) is kept until its
    /// receive resolves.
    pub fn send(&mut self, env: Envelope, bytes: u64, ts: u64) -> MsgId {
        if self.numbered_from_attach(&env) {
            return self.attached.send(env, ts, bytes);
        }
        let counter = self.sent.entry(env).or_default();
        let k = *counter;
        *counter += 1;
        // Unless its receive resolved already (from its arguments, before this send's record).
        if is_local(&self.local_world, env.comm, env.dst)
            && self.received.get(&env).is_none_or(|&r| r <= k)
        {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.mailboxes
                .entry((env.comm, env.dst))
                .or_default()
                .entry((env.src, env.tag))
                .or_default()
                .push_back(PendingSend { k, seq, bytes });
            self.try_match((env.comm, env.dst));
        }
        ids::message(&env, k)
    }

    /// Posts a receive accepting `pattern`; it competes for messages from now on, in order.
    pub fn post(&mut self, pattern: Pattern) -> RecvId {
        let id = self.next_recv;
        self.next_recv += 1;
        let queue = (pattern.comm, pattern.dst);
        self.posted.entry(queue).or_default().push_back(Posted {
            id,
            pattern,
            state: PostState::Posted,
        });
        self.queue_of.insert(id, queue);
        id
    }

    /// Marks receive `recv` completed at `ts`, with the status MPI reported when visible; a
    /// fully specific pattern needs none for its envelope. Unknown ids are ignored.
    pub fn complete(&mut self, recv: RecvId, status: Option<Status>, ts: u64) {
        let Some(&queue) = self.queue_of.get(&recv) else {
            return;
        };
        if let Some(p) = self
            .posted
            .get_mut(&queue)
            .and_then(|q| q.iter_mut().find(|p| p.id == recv))
        {
            let envelope = match (p.pattern.src, p.pattern.tag, status) {
                (Some(src), Some(tag), _) => Some((src, tag)),
                (_, _, Some(s)) if s.source >= 0 && p.pattern.admits(s.source as u32, s.tag) => {
                    Some((s.source as u32, s.tag))
                }
                _ => None,
            };
            p.state = PostState::Completed(envelope, status.map(|s| s.bytes), ts);
        }
        self.try_match(queue);
    }

    /// Takes receive `recv` out of matching (it was cancelled): it takes no message, and the
    /// receives posted after it may take the ones it would have. Unknown ids are ignored.
    pub fn withdraw(&mut self, recv: RecvId) {
        let Some(queue) = self.queue_of.remove(&recv) else {
            return;
        };
        if let Some(q) = self.posted.get_mut(&queue) {
            q.retain(|p| p.id != recv);
        }
        self.try_match(queue);
    }

    /// Takes the pairs matched since the last call.
    pub fn drain_matched(&mut self) -> std::vec::Drain<'_, Matched> {
        self.matched.drain(..)
    }

    /// Matches the receives of the envelopes numbered from an attach (see [`alignment`](super::alignment));
    /// `ended`: the capture saw every process to its end. Returns what it could not pair, the
    /// wildcard receives it could not place, and the sends and receives with an end on another
    /// host, which it numbered from the attach.
    pub fn align(&mut self, ended: bool) -> (Boundary, u64, u64) {
        let boundary = self.attached.align(ended, &mut self.matched);
        (boundary, self.unplaced, self.unaligned)
    }

    /// Local sends whose receive has not resolved.
    pub fn unmatched_sends(&self) -> u64 {
        self.mailboxes
            .values()
            .flat_map(|m| m.values())
            .map(|q| q.len() as u64)
            .sum()
    }

    /// Receives posted but not resolved.
    pub fn unmatched_recvs(&self) -> u64 {
        self.queue_of.len() as u64
    }

    /// Resolves what can be resolved among the receives of one (communicator, rank).
    fn try_match(&mut self, queue_key: (CommId, u32)) {
        // Taken out while `self` resolves, and put back after: an emptied queue or mailbox
        // stays, keeping its allocation for the next messages of this (communicator, rank).
        let Some(mut queue) = self
            .posted
            .get_mut(&queue_key)
            .filter(|q| !q.is_empty())
            .map(std::mem::take)
        else {
            return;
        };
        let mut mailbox = self
            .mailboxes
            .get_mut(&queue_key)
            .map(std::mem::take)
            .unwrap_or_default();
        // Patterns of earlier receives still unresolved: a later receive must not take a
        // message one of them could take first.
        let mut blockers: Vec<Pattern> = Vec::new();
        let blocked =
            |blockers: &[Pattern], src: u32, tag: i32| blockers.iter().any(|b| b.admits(src, tag));
        let mut i = 0;
        while i < queue.len() {
            let posted = queue[i];
            let resolved = match posted.state {
                PostState::Posted => None,
                PostState::Completed(Some((src, tag)), status_bytes, ts)
                    if !blocked(&blockers, src, tag) =>
                {
                    let env = posted.pattern.envelope(src, tag);
                    if self.numbered_from_attach(&env) {
                        self.attached.receive(env, posted.id, ts, status_bytes);
                        Some(Resolution::Attached)
                    } else {
                        let counter = self.received.entry(env).or_default();
                        let k = *counter;
                        let seen = mailbox
                            .get(&(src, tag))
                            .is_some_and(|q| q.iter().any(|s| s.k == k));
                        (seen || !is_local(&self.local_world, env.comm, env.src)).then(|| {
                            *counter += 1;
                            let send = take_up_to(&mut mailbox, (src, tag), k);
                            let bytes = status_bytes.or(send.map(|s| s.bytes));
                            Resolution::Message((src, tag), k, bytes)
                        })
                    }
                }
                PostState::Completed(Some(_), _, _) => None,
                PostState::Completed(None, status_bytes, _) => {
                    let oldest = mailbox
                        .iter()
                        .filter(|(&(src, tag), q)| {
                            !q.is_empty()
                                && posted.pattern.admits(src, tag)
                                && !blocked(&blockers, src, tag)
                        })
                        .min_by_key(|(_, q)| q[0].seq)
                        .map(|(&key, _)| key);
                    let guess = oldest.and_then(|key| {
                        let send = mailbox.get_mut(&key)?.pop_front()?;
                        let counter = self
                            .received
                            .entry(posted.pattern.envelope(key.0, key.1))
                            .or_default();
                        *counter = (*counter).max(send.k + 1);
                        let bytes = status_bytes.or(Some(send.bytes));
                        Some(Resolution::Message(key, send.k, bytes))
                    });
                    // After an attach the sends it could have taken are not kept: it cannot
                    // be placed, and must not hold back the receives after it.
                    guess.or_else(|| {
                        self.from_attach.then(|| {
                            self.unplaced += 1;
                            Resolution::Unplaced
                        })
                    })
                }
            };
            match resolved {
                Some(Resolution::Message((src, tag), k, bytes)) => {
                    if mailbox.get(&(src, tag)).is_some_and(VecDeque::is_empty) {
                        mailbox.remove(&(src, tag));
                    }
                    self.matched.push(Matched {
                        recv: posted.id,
                        msg: ids::message(&posted.pattern.envelope(src, tag), k),
                        bytes,
                    });
                    self.queue_of.remove(&posted.id);
                    queue.remove(i);
                }
                Some(Resolution::Attached | Resolution::Unplaced) => {
                    self.queue_of.remove(&posted.id);
                    queue.remove(i);
                }
                None => {
                    blockers.push(match posted.state {
                        PostState::Completed(Some((src, tag)), _, _) => Pattern {
                            src: Some(src),
                            tag: Some(tag),
                            ..posted.pattern
                        },
                        _ => posted.pattern,
                    });
                    i += 1;
                }
            }
        }
        self.posted.insert(queue_key, queue);
        self.mailboxes.insert(queue_key, mailbox);
    }
}

/// How a completed receive was resolved.
enum Resolution {
    /// It took message `k` of `(src, tag)` on its communicator, of the size given if known.
    Message((u32, i32), u64, Option<u64>),
    /// Its envelope is numbered from an attach: it took its place there (see [`alignment`](super::alignment)).
    Attached,
    /// A wildcard without a visible status after an attach: left unmatched.
    Unplaced,
}

/// Whether `rank` of communicator `comm` is a process of a capture that sees the world ranks
/// `local_world` (`None`: all of them). For another communicator than `MPI_COMM_WORLD`, only
/// when the capture has the whole job: its members' world ranks may be on other hosts.
fn is_local(local_world: &Option<BTreeSet<u32>>, comm: CommId, rank: u32) -> bool {
    match local_world {
        None => true,
        Some(ranks) => comm == ids::WORLD && ranks.contains(&rank),
    }
}

/// Drops the local sends of `key` numbered up to `k` (received), returning the `k`-th.
fn take_up_to(mailbox: &mut Mailbox, key: (u32, i32), k: u64) -> Option<PendingSend> {
    let queue = mailbox.get_mut(&key)?;
    let mut found = None;
    while queue.front().is_some_and(|s| s.k <= k) {
        found = queue.pop_front().filter(|s| s.k == k);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(src: u32, dst: u32, tag: i32) -> Envelope {
        Envelope {
            comm: 0,
            src,
            dst,
            tag,
        }
    }

    fn pattern(dst: u32, src: Option<u32>, tag: Option<i32>) -> Pattern {
        Pattern {
            comm: 0,
            dst,
            src,
            tag,
        }
    }

    fn status(source: i32, tag: i32) -> Status {
        Status {
            source,
            tag,
            bytes: 0,
        }
    }

    fn pairs(m: &mut Matcher) -> Vec<(RecvId, MsgId)> {
        m.drain_matched()
            .collect::<Vec<_>>()
            .into_iter()
            .map(|x| (x.recv, x.msg))
            .collect()
    }

    #[test]
    fn same_envelope_matches_in_posting_order() {
        let mut m = Matcher::new();
        let s0 = m.send(env(1, 0, 5), 10, 0);
        let s1 = m.send(env(1, 0, 5), 20, 0);
        let r0 = m.post(pattern(0, Some(1), Some(5)));
        let r1 = m.post(pattern(0, Some(1), Some(5)));
        // The later receive completes first: it still gets the second message.
        m.complete(r1, None, 0);
        assert_eq!(pairs(&mut m), vec![]);
        m.complete(r0, None, 0);
        assert_eq!(pairs(&mut m), vec![(r0, s0), (r1, s1)]);
        assert_eq!((m.unmatched_sends(), m.unmatched_recvs()), (0, 0));
    }

    #[test]
    fn any_source_resolves_from_status() {
        let mut m = Matcher::new();
        let a = m.send(env(1, 0, 7), 4, 0);
        let b = m.send(env(2, 0, 9), 8, 0);
        let r0 = m.post(pattern(0, None, None));
        let r1 = m.post(pattern(0, None, None));
        m.complete(r0, Some(status(2, 9)), 0);
        m.complete(r1, Some(status(1, 7)), 0);
        let mut got = pairs(&mut m);
        got.sort();
        assert_eq!(got, vec![(r0, b), (r1, a)]);
    }

    #[test]
    fn pending_wildcard_blocks_later_receive_of_same_envelope() {
        let mut m = Matcher::new();
        let s0 = m.send(env(1, 0, 3), 1, 0);
        let s1 = m.send(env(1, 0, 3), 1, 0);
        let wild = m.post(pattern(0, None, Some(3)));
        let specific = m.post(pattern(0, Some(1), Some(3)));
        m.complete(specific, None, 0);
        assert_eq!(
            pairs(&mut m),
            vec![],
            "the wildcard posted first may take message 0"
        );
        m.complete(wild, Some(status(1, 3)), 0);
        assert_eq!(pairs(&mut m), vec![(wild, s0), (specific, s1)]);
    }

    #[test]
    fn different_envelopes_do_not_block_each_other() {
        let mut m = Matcher::new();
        let from1 = m.post(pattern(0, Some(1), Some(0)));
        let from2 = m.post(pattern(0, Some(2), Some(0)));
        let s = m.send(env(2, 0, 0), 1, 0);
        // Out-of-order completion (Waitany): the second receive completes first.
        m.complete(from2, None, 0);
        assert_eq!(pairs(&mut m), vec![(from2, s)]);
        let t = m.send(env(1, 0, 0), 1, 0);
        m.complete(from1, None, 0);
        assert_eq!(pairs(&mut m), vec![(from1, t)]);
    }

    #[test]
    fn unknown_status_takes_oldest_admissible_send() {
        let mut m = Matcher::new();
        let _other_tag = m.send(env(3, 0, 1), 1, 0);
        let first = m.send(env(2, 0, 2), 1, 0);
        let _second = m.send(env(1, 0, 2), 1, 0);
        let r = m.post(pattern(0, None, Some(2)));
        m.complete(r, None, 0);
        assert_eq!(pairs(&mut m), vec![(r, first)]);
        assert_eq!(m.unmatched_sends(), 2);
    }

    #[test]
    fn completion_before_send_waits_for_the_send_of_a_local_sender() {
        let mut m = Matcher::new();
        let r = m.post(pattern(1, Some(0), Some(0)));
        m.complete(r, None, 0);
        assert_eq!(pairs(&mut m), vec![]);
        let s = m.send(env(0, 1, 0), 1, 0);
        assert_eq!(pairs(&mut m), vec![(r, s)]);
    }

    #[test]
    fn a_receive_from_another_host_resolves_without_its_send() {
        let mut m = Matcher::new();
        m.only_ranks(BTreeSet::from([1]));
        let r = m.post(pattern(1, Some(0), Some(0)));
        m.complete(r, None, 0);
        let got = m.drain_matched().collect::<Vec<_>>();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].bytes, None, "no status, no local send: size unknown");
        assert_eq!(got[0].msg, ids::message(&env(0, 1, 0), 0));
        assert_eq!((m.unmatched_sends(), m.unmatched_recvs()), (0, 0));
    }

    /// Two hosts' captures, each seeing one end of every message, give both ends the same
    /// ids: the sender's host numbers sends, the receiver's host numbers resolved receives.
    #[test]
    fn the_two_ends_of_a_message_between_hosts_get_the_same_id() {
        let (mut a, mut b) = (Matcher::new(), Matcher::new());
        a.only_ranks(BTreeSet::from([1, 2]));
        b.only_ranks(BTreeSet::from([0]));
        let sent: Vec<MsgId> = [(1, 5), (1, 5), (2, 5), (1, 6)]
            .iter()
            .map(|&(src, tag)| a.send(env(src, 0, tag), 8, 0))
            .collect();
        assert_eq!(a.unmatched_sends(), 0, "sends to another host are not kept");
        let wild = b.post(pattern(0, None, Some(5)));
        let from1 = b.post(pattern(0, Some(1), Some(5)));
        let any = b.post(pattern(0, None, None));
        let tag6 = b.post(pattern(0, Some(1), Some(6)));
        // Completed out of order; the statuses say who sent.
        b.complete(tag6, None, 0);
        b.complete(from1, None, 0);
        b.complete(any, Some(status(2, 5)), 0);
        b.complete(wild, Some(status(1, 5)), 0);
        let mut got = pairs(&mut b);
        got.sort();
        assert_eq!(
            got,
            vec![
                (wild, sent[0]),
                (from1, sent[1]),
                (any, sent[2]),
                (tag6, sent[3])
            ]
        );
    }

    #[test]
    fn communicators_are_separate() {
        let mut m = Matcher::new();
        let s = m.send(
            Envelope {
                comm: 1,
                src: 0,
                dst: 0,
                tag: 0,
            },
            1,
            0,
        );
        let r = m.post(Pattern {
            comm: 0,
            dst: 0,
            src: None,
            tag: None,
        });
        m.complete(r, None, 0);
        assert_eq!(pairs(&mut m), vec![]);
        let r1 = m.post(Pattern {
            comm: 1,
            dst: 0,
            src: None,
            tag: None,
        });
        m.complete(r1, Some(status(0, 0)), 0);
        assert_eq!(pairs(&mut m), vec![(r1, s)]);
    }
}
