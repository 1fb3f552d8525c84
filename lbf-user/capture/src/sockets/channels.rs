//! Matching sends to receives on sockets, by byte offsets (streams) or datagram order.
//!
//! A stream direction (one way of one TCP or UNIX stream connection) is a sequence of bytes:
//! the sender's k-th send covers `[a, b)`, a receive that consumes bytes up to offset `e`
//! depends on the send that holds byte `e - 1`, its last byte. The engine wants one message
//! per receive, so a send is cut where receives end: the send holding the ends of `k`
//! receives becomes `k` messages, the first taking its bytes up to the first receive's end
//! (plus the bytes of earlier sends no receive ended in, which travel with it), the last
//! taking the rest of the send. Its bytes leave one after the other, so each message but the
//! first leaves after those of the messages before it ([`Piece::after`]): the last arrives
//! when the whole send would. A send no receive ends in carries no message of its own: its
//! bytes travel with the next message of its direction. A send's cuts are known once the
//! receiver has consumed all of its bytes, so its outcome is reported then.
//!
//! A datagram channel (UDP, UNIX datagram or seqpacket) delivers whole datagrams in order:
//! one send, one message, consumed by one receive, whatever its buffer size.
//!
//! Sends and receives are named by opaque tokens chosen by the caller; outcomes name them.
//!
//! A channel no descriptor can use any more (see [`super::descriptors`]) is closed
//! ([`Channels::close`]): what is open on it is settled as at the end of a capture and its
//! state freed, so that memory follows the connections open, not all those ever made.
//!
//! Where the two ends of a stream are seen by different captures (cluster mode: a TCP
//! connection between hosts), each capture hands its end's sends and receives on
//! ([`StreamOp`]) to the one place that sees both, the builder, which matches them with these
//! same [`Channels`]. There the ends finish apart ([`Channels::end_done`]): the sender's once
//! its node has delivered every send it made on the direction, the receiver's likewise.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;

use lbf_model::event::{EventKind, MsgId};
pub use lbf_model::stream::{Channel, Direction, EndClosed, Endpoint, Role, StreamOp};

/// One message a send becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The message id, consumed by exactly one receive.
    pub msg: MsgId,
    /// Its payload for the cost model.
    pub bytes: u64,
    /// The bytes of its send that leave before its own (those of the send's earlier
    /// messages): see `EventKind::Send::after`.
    pub after: u64,
}

/// What became of a send or a receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Send `token` becomes `pieces` (empty: no receive ended in it and its bytes travel with
    /// a later message, or nobody received them: then `unconsumed` counts them).
    Send {
        /// The caller's token of the send.
        token: u64,
        /// The messages, in order.
        pieces: Vec<Piece>,
        /// Bytes no receive consumed (only at the end of a capture).
        unconsumed: u64,
    },
    /// Receive `token` consumed message `msg` (`None`: no send is known for its bytes).
    Recv {
        /// The caller's token of the receive.
        token: u64,
        /// The message its last byte came with.
        msg: Option<MsgId>,
        /// The token of the send that byte came with (reported before that send's own
        /// outcome, or in the same list).
        from: Option<u64>,
    },
}

impl Outcome {
    /// The token of the send or receive it settles.
    pub fn token(&self) -> u64 {
        match self {
            Outcome::Send { token, .. } | Outcome::Recv { token, .. } => *token,
        }
    }

    /// The events its send or receive becomes: a send's messages, or a `Keepalive` carrying
    /// its CPU when no receive ended in it; a receive's `RecvEnd`, or a `Keepalive` when no
    /// send is known for its bytes.
    pub fn events(&self) -> Vec<EventKind> {
        match self {
            Outcome::Send { pieces, .. } if !pieces.is_empty() => pieces
                .iter()
                .map(|p| EventKind::Send {
                    msg: p.msg,
                    bytes: p.bytes,
                    rendezvous: false,
                    after: p.after,
                })
                .collect(),
            Outcome::Recv { msg: Some(msg), .. } => vec![EventKind::RecvEnd { msg: *msg }],
            _ => vec![EventKind::Keepalive],
        }
    }

    /// The end it leaves unmatched, if any: a send with bytes no receive consumed, a receive
    /// without a send.
    pub fn unmatched(&self) -> Option<Role> {
        match self {
            Outcome::Send { unconsumed, .. } if *unconsumed > 0 => Some(Role::Send),
            Outcome::Recv { msg: None, .. } => Some(Role::Recv),
            _ => None,
        }
    }
}

/// A send whose bytes are not all consumed yet.
#[derive(Debug)]
struct OpenSend {
    token: u64,
    start: u64,
    end: u64,
    /// `(end offset of a receive, its message)`, increasing.
    cuts: Vec<(u64, MsgId)>,
}

/// One direction of a stream.
#[derive(Debug, Default)]
struct Stream {
    sent: u64,
    received: u64,
    sends: VecDeque<OpenSend>,
    /// Receives ending past what has been sent so far (their send's record is still to
    /// come): `(token, end offset)`.
    early: VecDeque<(u64, u64)>,
    /// Bytes of resolved sends no receive ended in, for the next message.
    carry: u64,
    /// No send is to come any more: a receive past the bytes sent has no send.
    sender_done: bool,
    /// No receive is to come any more: a send's bytes not consumed yet never will be.
    receiver_done: bool,
}

/// Datagrams to one socket.
#[derive(Debug, Default)]
struct Datagrams {
    sends: VecDeque<(u64, u64)>,
    early: VecDeque<u64>,
}

/// Every channel's state and the message id counter.
#[derive(Debug, Default)]
pub struct Channels {
    streams: FxHashMap<(Endpoint, Endpoint), Stream>,
    datagrams: FxHashMap<Endpoint, Datagrams>,
    next_msg: MsgId,
}

impl Channels {
    /// No channels yet; message ids start at 1.
    pub fn new() -> Self {
        Channels {
            next_msg: 1,
            ..Default::default()
        }
    }

    fn msg(&mut self) -> MsgId {
        let m = self.next_msg;
        self.next_msg += 1;
        m
    }

    /// A send of `bytes` bytes on `channel`; returns the outcomes it settles.
    pub fn send(&mut self, channel: Channel, token: u64, bytes: u64) -> Vec<Outcome> {
        let mut out = Vec::new();
        match channel {
            Channel::Stream { from, to } => {
                let s = self.streams.entry((from, to)).or_default();
                s.sends.push_back(OpenSend {
                    token,
                    start: s.sent,
                    end: s.sent + bytes,
                    cuts: Vec::new(),
                });
                s.sent += bytes;
                while let Some(&(recv, end)) = s.early.front() {
                    if end > s.sent {
                        break;
                    }
                    s.early.pop_front();
                    let msg = self.next_msg;
                    self.next_msg += 1;
                    out.push(Outcome::Recv {
                        token: recv,
                        msg: Some(msg),
                        from: cut(s, end, msg),
                    });
                }
                resolve_consumed(s, &mut out);
                if s.receiver_done {
                    settle_sends(s, &mut out);
                }
            }
            Channel::Datagram { to } => {
                let d = self.datagrams.entry(to).or_default();
                match d.early.pop_front() {
                    Some(recv) => {
                        let msg = self.msg();
                        out.extend(datagram(token, recv, msg, bytes));
                    }
                    None => d.sends.push_back((token, bytes)),
                }
            }
        }
        out
    }

    /// A receive of `bytes` bytes (more than 0) on `channel`; returns the outcomes it settles.
    pub fn recv(&mut self, channel: Channel, token: u64, bytes: u64) -> Vec<Outcome> {
        let mut out = Vec::new();
        match channel {
            Channel::Stream { from, to } => {
                let s = self.streams.entry((from, to)).or_default();
                s.received += bytes;
                let end = s.received;
                if end > s.sent || !s.early.is_empty() {
                    if s.sender_done {
                        out.push(Outcome::Recv {
                            token,
                            msg: None,
                            from: None,
                        });
                    } else {
                        s.early.push_back((token, end));
                    }
                    return out;
                }
                let msg = self.next_msg;
                self.next_msg += 1;
                out.push(Outcome::Recv {
                    token,
                    msg: Some(msg),
                    from: cut(s, end, msg),
                });
                resolve_consumed(s, &mut out);
            }
            Channel::Datagram { to } => {
                let d = self.datagrams.entry(to).or_default();
                match d.sends.pop_front() {
                    Some((send, bytes)) => {
                        let msg = self.msg();
                        out.extend(datagram(send, token, msg, bytes));
                    }
                    None => d.early.push_back(token),
                }
            }
        }
        out
    }

    /// Settles everything still open at the end of a capture: receives without a send get
    /// no message; sends cut by receives keep their pieces; others count as unconsumed.
    pub fn finish(&mut self) -> Vec<Outcome> {
        let mut out = Vec::new();
        for (_, s) in self.streams.drain() {
            finish_stream(s, &mut out);
        }
        for (_, d) in self.datagrams.drain() {
            finish_datagrams(d, &mut out);
        }
        sort_outcomes(&mut out);
        out
    }

    /// Forgets `channel`, which no descriptor can use any more (both ends of a stream
    /// closed, a datagram socket closed): what is still open on it is settled as at the end
    /// of a capture, since no later call can change it. Returns those outcomes.
    pub fn close(&mut self, channel: Channel) -> Vec<Outcome> {
        let mut out = Vec::new();
        match channel {
            Channel::Stream { from, to } => {
                if let Some(s) = self.streams.remove(&(from, to)) {
                    finish_stream(s, &mut out);
                }
            }
            Channel::Datagram { to } => {
                if let Some(d) = self.datagrams.remove(&to) {
                    finish_datagrams(d, &mut out);
                }
            }
        }
        sort_outcomes(&mut out);
        out
    }

    /// The end `role` of direction `dir` will do nothing more (its capture delivered all it
    /// did there): when the sender is done, receives still waiting for bytes get no message;
    /// when the receiver is done, the sends it did not consume are settled with the cuts
    /// they have. Later calls of the done end's kind are settled at once, likewise. Once
    /// both ends are done the direction's state is freed, as [`Channels::close`] frees it.
    /// Returns the outcomes settled.
    pub fn end_done(&mut self, dir: Direction, role: Role) -> Vec<Outcome> {
        let mut out = Vec::new();
        let key = (dir.from, dir.to);
        let s = self.streams.entry(key).or_default();
        match role {
            Role::Send => {
                s.sender_done = true;
                fail_early(s, &mut out);
            }
            Role::Recv => {
                s.receiver_done = true;
                settle_sends(s, &mut out);
            }
        }
        if s.sender_done && s.receiver_done {
            self.streams.remove(&key);
        }
        sort_outcomes(&mut out);
        out
    }

    /// The bytes sent and received so far on direction `dir` (0 and 0 once its state is
    /// freed, or before any).
    pub fn moved(&self, dir: Direction) -> (u64, u64) {
        self.streams
            .get(&(dir.from, dir.to))
            .map_or((0, 0), |s| (s.sent, s.received))
    }

    /// Channels whose state is kept: stream directions and datagram receivers.
    pub fn len(&self) -> usize {
        self.streams.len() + self.datagrams.len()
    }

    /// Whether no channel's state is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Settles what is open on stream direction `s` as at the end of a capture (see
/// [`Channels::finish`]).
fn finish_stream(mut s: Stream, out: &mut Vec<Outcome>) {
    fail_early(&mut s, out);
    settle_sends(&mut s, out);
}

/// Receives of `s` waiting for bytes no send will bring: no message.
fn fail_early(s: &mut Stream, out: &mut Vec<Outcome>) {
    for (token, _) in s.early.drain(..) {
        out.push(Outcome::Recv {
            token,
            msg: None,
            from: None,
        });
    }
}

/// Sends of `s` whose bytes no receive will consume any more: settled with the cuts they
/// have, or unconsumed. Those already consumed (by receives still waiting for a later send's
/// bytes) are settled as consumed, first.
fn settle_sends(s: &mut Stream, out: &mut Vec<Outcome>) {
    resolve_consumed(s, out);
    while let Some(send) = s.sends.pop_front() {
        let unconsumed = if send.cuts.is_empty() {
            send.end - send.start
        } else {
            0
        };
        out.push(settle(s.carry, send, unconsumed).0);
        s.carry = 0;
    }
}

/// Settles what is open on datagram channel `d` as at the end of a capture: receives get no
/// message, datagrams nobody received are unconsumed.
fn finish_datagrams(d: Datagrams, out: &mut Vec<Outcome>) {
    for token in d.early {
        out.push(Outcome::Recv {
            token,
            msg: None,
            from: None,
        });
    }
    for (token, bytes) in d.sends {
        out.push(Outcome::Send {
            token,
            pieces: Vec::new(),
            unconsumed: bytes,
        });
    }
}

/// The two outcomes of a datagram delivered: the receive's first, as for streams.
fn datagram(send: u64, recv: u64, msg: MsgId, bytes: u64) -> [Outcome; 2] {
    [
        Outcome::Recv {
            token: recv,
            msg: Some(msg),
            from: Some(send),
        },
        Outcome::Send {
            token: send,
            pieces: vec![Piece {
                msg,
                bytes,
                after: 0,
            }],
            unconsumed: 0,
        },
    ]
}

/// Records that a receive ending at offset `end` (at most `s.sent`) consumed message `msg`,
/// cut from the send holding byte `end - 1`; returns that send's token.
fn cut(s: &mut Stream, end: u64, msg: MsgId) -> Option<u64> {
    let send = s.sends.iter_mut().find(|o| o.start < end && end <= o.end)?;
    send.cuts.push((end, msg));
    Some(send.token)
}

/// Reports the sends whose bytes have all been consumed.
fn resolve_consumed(s: &mut Stream, out: &mut Vec<Outcome>) {
    while s.sends.front().is_some_and(|o| o.end <= s.received) {
        let send = s.sends.pop_front().expect("checked");
        let (outcome, carry) = settle(s.carry, send, 0);
        s.carry = carry;
        out.push(outcome);
    }
}

/// The pieces of `send` (see the module documentation) and the carry left for the next one.
fn settle(carry: u64, send: OpenSend, unconsumed: u64) -> (Outcome, u64) {
    if send.cuts.is_empty() {
        let carry = if unconsumed > 0 {
            0
        } else {
            carry + send.end - send.start
        };
        return (
            Outcome::Send {
                token: send.token,
                pieces: Vec::new(),
                unconsumed,
            },
            carry,
        );
    }
    let mut pieces = Vec::with_capacity(send.cuts.len());
    let mut prev = send.start;
    for &(end, msg) in &send.cuts {
        pieces.push(Piece {
            msg,
            bytes: end - prev,
            after: 0,
        });
        prev = end;
    }
    pieces[0].bytes += carry;
    if let Some(last) = pieces.last_mut() {
        last.bytes += send.end - prev;
    }
    for i in 1..pieces.len() {
        pieces[i].after = pieces[i - 1].after + pieces[i - 1].bytes;
    }
    (
        Outcome::Send {
            token: send.token,
            pieces,
            unconsumed,
        },
        0,
    )
}

/// Orders outcomes by token so that a capture's end is deterministic.
fn sort_outcomes(out: &mut [Outcome]) {
    out.sort_by_key(|o| match o {
        Outcome::Send { token, .. } | Outcome::Recv { token, .. } => *token,
    });
}
