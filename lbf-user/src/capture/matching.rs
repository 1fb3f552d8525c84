//! Point-to-point matching: pairs every send with the receive that consumed it.
//!
//! MPI's non-overtaking rule: for one envelope (communicator, source, destination, tag), the
//! k-th send matches the k-th receive *in posting order* among the receives that resolved to
//! that envelope. A receive resolves when it completes: from its arguments when they name the
//! source and tag, else from its status. Because a wildcard receive posted earlier may still
//! resolve to the same envelope, a completed receive is matched only once no earlier-posted,
//! still-unmatched receive of the same destination could take the same message.
//!
//! A wildcard receive whose status was not visible (`MPI_STATUS_IGNORE`, a `Waitany`, a
//! `Sendrecv`) takes the oldest unmatched send its pattern admits: the message MPI itself
//! would most likely have delivered.
//!
//! State is only what is unmatched: sends without their receive yet and posted receives.

use std::collections::{HashMap, VecDeque};

use crate::event::MsgId;

/// A communicator's id within one capture (not a process-local handle).
pub type CommId = u32;

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
}

/// A receive paired with the send it consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matched {
    /// The receive.
    pub recv: RecvId,
    /// The message.
    pub msg: MsgId,
    /// The message's size as the sender stated it.
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct PendingSend {
    msg: MsgId,
    /// Global order of sends, for the oldest-first fallback.
    seq: u64,
    bytes: u64,
}

#[derive(Clone, Copy, Debug)]
enum PostState {
    Posted,
    /// Completed; `Some((src, tag))` when the envelope is known.
    Completed(Option<(u32, i32)>),
}

#[derive(Clone, Copy, Debug)]
struct Posted {
    id: RecvId,
    pattern: Pattern,
    state: PostState,
}

/// Sends to one (communicator, destination rank), by (source, tag), oldest first.
type Mailbox = HashMap<(u32, i32), VecDeque<PendingSend>>;

/// Matches sends and receives; see the module documentation.
#[derive(Default)]
pub struct Matcher {
    next_msg: MsgId,
    next_recv: RecvId,
    next_seq: u64,
    /// Unmatched sends by (communicator, destination rank).
    mailboxes: HashMap<(CommId, u32), Mailbox>,
    /// Unmatched receives by (communicator, receiver rank), in posting order.
    posted: HashMap<(CommId, u32), VecDeque<Posted>>,
    /// Where each unmatched receive is queued.
    queue_of: HashMap<RecvId, (CommId, u32)>,
    matched: Vec<Matched>,
}

impl Matcher {
    /// An empty matcher.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a send of `bytes` with envelope `env` and returns its message id.
    pub fn send(&mut self, env: Envelope, bytes: u64) -> MsgId {
        let msg = self.next_msg;
        self.next_msg += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.mailboxes
            .entry((env.comm, env.dst))
            .or_default()
            .entry((env.src, env.tag))
            .or_default()
            .push_back(PendingSend { msg, seq, bytes });
        self.try_match((env.comm, env.dst));
        msg
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

    /// Marks receive `recv` completed. `status` is the `(MPI_SOURCE, MPI_TAG)` MPI reported,
    /// when visible; a fully specific pattern needs none. Unknown ids are ignored.
    pub fn complete(&mut self, recv: RecvId, status: Option<(i32, i32)>) {
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
                (_, _, Some((src, tag))) if src >= 0 && p.pattern.admits(src as u32, tag) => {
                    Some((src as u32, tag))
                }
                _ => None,
            };
            p.state = PostState::Completed(envelope);
        }
        self.try_match(queue);
    }

    /// Takes the pairs matched since the last call.
    pub fn take_matched(&mut self) -> Vec<Matched> {
        std::mem::take(&mut self.matched)
    }

    /// Sends still waiting for their receive.
    pub fn unmatched_sends(&self) -> u64 {
        self.mailboxes
            .values()
            .flat_map(|m| m.values())
            .map(|q| q.len() as u64)
            .sum()
    }

    /// Receives posted but not matched.
    pub fn unmatched_recvs(&self) -> u64 {
        self.queue_of.len() as u64
    }

    /// Matches what can be matched among the receives of one (communicator, rank).
    fn try_match(&mut self, queue_key: (CommId, u32)) {
        let Some(queue) = self.posted.get_mut(&queue_key) else {
            return;
        };
        let mut mailbox = self.mailboxes.remove(&queue_key).unwrap_or_default();
        // Patterns of earlier receives still unmatched: a later receive must not take a
        // message one of them could take first.
        let mut blockers: Vec<Pattern> = Vec::new();
        let blocked =
            |blockers: &[Pattern], src: u32, tag: i32| blockers.iter().any(|b| b.admits(src, tag));
        let mut i = 0;
        while i < queue.len() {
            let posted = queue[i];
            let taken = match posted.state {
                PostState::Posted => None,
                PostState::Completed(Some((src, tag))) if !blocked(&blockers, src, tag) => mailbox
                    .get_mut(&(src, tag))
                    .and_then(|q| q.pop_front().map(|s| ((src, tag), s))),
                PostState::Completed(Some(_)) => None,
                PostState::Completed(None) => {
                    let oldest = mailbox
                        .iter()
                        .filter(|(&(src, tag), q)| {
                            !q.is_empty()
                                && posted.pattern.admits(src, tag)
                                && !blocked(&blockers, src, tag)
                        })
                        .min_by_key(|(_, q)| q[0].seq)
                        .map(|(&key, _)| key);
                    oldest.and_then(|key| mailbox.get_mut(&key)?.pop_front().map(|s| (key, s)))
                }
            };
            match taken {
                Some((key, send)) => {
                    if mailbox.get(&key).is_some_and(VecDeque::is_empty) {
                        mailbox.remove(&key);
                    }
                    self.matched.push(Matched {
                        recv: posted.id,
                        msg: send.msg,
                        bytes: send.bytes,
                    });
                    self.queue_of.remove(&posted.id);
                    queue.remove(i);
                }
                None => {
                    blockers.push(match posted.state {
                        PostState::Completed(Some((src, tag))) => Pattern {
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
        if queue.is_empty() {
            self.posted.remove(&queue_key);
        }
        if !mailbox.is_empty() {
            self.mailboxes.insert(queue_key, mailbox);
        }
    }
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

    fn pairs(m: &mut Matcher) -> Vec<(RecvId, MsgId)> {
        m.take_matched()
            .into_iter()
            .map(|x| (x.recv, x.msg))
            .collect()
    }

    #[test]
    fn same_envelope_matches_in_posting_order() {
        let mut m = Matcher::new();
        let s0 = m.send(env(1, 0, 5), 10);
        let s1 = m.send(env(1, 0, 5), 20);
        let r0 = m.post(pattern(0, Some(1), Some(5)));
        let r1 = m.post(pattern(0, Some(1), Some(5)));
        // The later receive completes first: it still gets the second message.
        m.complete(r1, None);
        assert_eq!(pairs(&mut m), vec![]);
        m.complete(r0, None);
        assert_eq!(pairs(&mut m), vec![(r0, s0), (r1, s1)]);
        assert_eq!((m.unmatched_sends(), m.unmatched_recvs()), (0, 0));
    }

    #[test]
    fn any_source_resolves_from_status() {
        let mut m = Matcher::new();
        let a = m.send(env(1, 0, 7), 4);
        let b = m.send(env(2, 0, 9), 8);
        let r0 = m.post(pattern(0, None, None));
        let r1 = m.post(pattern(0, None, None));
        m.complete(r0, Some((2, 9)));
        m.complete(r1, Some((1, 7)));
        let mut got = pairs(&mut m);
        got.sort();
        assert_eq!(got, vec![(r0, b), (r1, a)]);
    }

    #[test]
    fn pending_wildcard_blocks_later_receive_of_same_envelope() {
        let mut m = Matcher::new();
        let s0 = m.send(env(1, 0, 3), 1);
        let s1 = m.send(env(1, 0, 3), 1);
        let wild = m.post(pattern(0, None, Some(3)));
        let specific = m.post(pattern(0, Some(1), Some(3)));
        m.complete(specific, None);
        assert_eq!(
            pairs(&mut m),
            vec![],
            "the wildcard posted first may take message 0"
        );
        m.complete(wild, Some((1, 3)));
        assert_eq!(pairs(&mut m), vec![(wild, s0), (specific, s1)]);
    }

    #[test]
    fn different_envelopes_do_not_block_each_other() {
        let mut m = Matcher::new();
        let from1 = m.post(pattern(0, Some(1), Some(0)));
        let from2 = m.post(pattern(0, Some(2), Some(0)));
        let s = m.send(env(2, 0, 0), 1);
        // Out-of-order completion (Waitany): the second receive completes first.
        m.complete(from2, None);
        assert_eq!(pairs(&mut m), vec![(from2, s)]);
        let t = m.send(env(1, 0, 0), 1);
        m.complete(from1, None);
        assert_eq!(pairs(&mut m), vec![(from1, t)]);
    }

    #[test]
    fn unknown_status_takes_oldest_admissible_send() {
        let mut m = Matcher::new();
        let _other_tag = m.send(env(3, 0, 1), 1);
        let first = m.send(env(2, 0, 2), 1);
        let _second = m.send(env(1, 0, 2), 1);
        let r = m.post(pattern(0, None, Some(2)));
        m.complete(r, None);
        assert_eq!(pairs(&mut m), vec![(r, first)]);
        assert_eq!(m.unmatched_sends(), 2);
    }

    #[test]
    fn completion_before_send_waits_for_the_send() {
        let mut m = Matcher::new();
        let r = m.post(pattern(1, Some(0), Some(0)));
        m.complete(r, None);
        assert_eq!(pairs(&mut m), vec![]);
        let s = m.send(env(0, 1, 0), 1);
        assert_eq!(pairs(&mut m), vec![(r, s)]);
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
        );
        let r = m.post(Pattern {
            comm: 0,
            dst: 0,
            src: None,
            tag: None,
        });
        m.complete(r, None);
        assert_eq!(pairs(&mut m), vec![]);
        let r1 = m.post(Pattern {
            comm: 1,
            dst: 0,
            src: None,
            tag: None,
        });
        m.complete(r1, Some((0, 0)));
        assert_eq!(pairs(&mut m), vec![(r1, s)]);
    }
}
