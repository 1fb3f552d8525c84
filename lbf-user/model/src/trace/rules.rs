//! The trace format's rules about messages, checked as the reader goes (see
//! `docs/trace-format.md`): a message id is sent once, received once and posted at most once;
//! a send by rendezvous has its `send_end` by the same process before that process exits.
//!
//! Memory follows the messages in flight, not the trace's length: a message is forgotten once
//! it has been sent and received (and its rendezvous ended). An id used again after that names
//! a new message, as the format allows; a reuse while the first is in flight is an error here,
//! and the engine refuses one whose two messages would be in flight at once in a simulation.

use rustc_hash::FxHashMap;

use super::error::TraceErrorKind;
use crate::event::{Event, EventKind, MsgId, ProcId};

/// What is known of one message in flight: the lines of its events so far.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    /// The send's line, and whether it went by rendezvous and awaits its `send_end`.
    sent: Option<(u64, bool)>,
    /// The receive's line.
    received: Option<u64>,
    /// The post's line.
    posted: Option<u64>,
}

impl Seen {
    /// Whether nothing more may come of this message.
    fn done(&self) -> bool {
        matches!(self.sent, Some((_, false))) && self.received.is_some()
    }
}

/// The rules' state over the events read so far.
#[derive(Debug, Default)]
pub(super) struct MessageRules {
    seen: FxHashMap<MsgId, Seen>,
    /// Rendezvous sends awaiting their `send_end`, per process: message and line.
    rendezvous: FxHashMap<ProcId, Vec<(MsgId, u64)>>,
}

impl MessageRules {
    /// Checks `event`, read on `line`, against what came before.
    pub(super) fn check(&mut self, event: &Event, line: u64) -> Result<(), TraceErrorKind> {
        let twice = |what: &'static str, msg: MsgId, first: u64| {
            Err(TraceErrorKind::Repeated {
                what,
                msg,
                first_line: first,
            })
        };
        match event.kind {
            EventKind::Send {
                msg, rendezvous, ..
            } => {
                let s = self.seen.entry(msg).or_default();
                if let Some((first, _)) = s.sent {
                    return twice("sent", msg, first);
                }
                s.sent = Some((line, rendezvous));
                if rendezvous {
                    self.rendezvous
                        .entry(event.proc)
                        .or_default()
                        .push((msg, line));
                }
                self.forget_if_done(msg);
            }
            EventKind::RecvEnd { msg } => {
                let s = self.seen.entry(msg).or_default();
                if let Some(first) = s.received {
                    return twice("received", msg, first);
                }
                s.received = Some(line);
                self.forget_if_done(msg);
            }
            EventKind::RecvPost { msg } => {
                let s = self.seen.entry(msg).or_default();
                if let Some(first) = s.posted {
                    return twice("posted", msg, first);
                }
                s.posted = Some(line);
            }
            EventKind::SendEnd { msg } => {
                if let Some(pending) = self.rendezvous.get_mut(&event.proc) {
                    pending.retain(|&(m, _)| m != msg);
                }
                if let Some(s) = self.seen.get_mut(&msg) {
                    if let Some((_, rendezvous)) = s.sent.as_mut() {
                        *rendezvous = false;
                    }
                }
                self.forget_if_done(msg);
            }
            EventKind::Exit => {
                if let Some(&(msg, send_line)) = self
                    .rendezvous
                    .remove(&event.proc)
                    .as_deref()
                    .and_then(<[_]>::first)
                {
                    return Err(TraceErrorKind::NoSendEnd {
                        proc: event.proc,
                        msg,
                        send_line,
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Forgets `msg` once nothing more may come of it.
    fn forget_if_done(&mut self, msg: MsgId) {
        if self.seen.get(&msg).is_some_and(Seen::done) {
            self.seen.remove(&msg);
        }
    }
}
