//! A target's changes to traced procedures, applied to the events before its simulation reads
//! them: each target with [`ProcedureChange`]s reads a stream of its own, in which
//!
//! - a **speed change** (zero, speed-up `S`) takes `1 - 1/S` of each event's procedure CPU out
//!   of the event's work (all of it for zero);
//! - a **move** takes the procedure CPU of each interval of a process that ends at a send
//!   (the events after its previous inter-process event up to the send) out of those events'
//!   work, and gives it to the receiver as work before that message's `recv_end`, where the
//!   simulation does it before it waits for the message (the paper's Fig. 1 and 2).
//!
//! A move is known only when its interval closes (at a send, or at a receive or collective,
//! which keeps the procedure where it ran), and the receiver's share only when the sender's
//! send is known; until then the events wait here, in order per process, and the target's
//! simulation is starved of them. Events without procedure CPU pass straight through, and a
//! target without changes does not come here at all. The simulation stays a function of the
//! per-process streams: the shaped stream of a process depends on its own events and on the
//! shares of the messages it receives, never on the order of arrival.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::streams::{Queued, Streams};
use crate::event::{Event, EventKind, MsgId, ProcedureCpu, MAX_PROCEDURES};
use crate::procedure::{ProcedureAction, ProcedureChange};

/// Seconds of CPU per traced procedure, indexed as the trace lists them.
type Seconds = [f64; MAX_PROCEDURES];

/// One move of a target, by the trace's procedure index.
#[derive(Debug)]
struct MoveRule {
    procedure: usize,
    /// Per process: whether the procedure moves from it; `None`: from every process.
    from: Option<Vec<bool>>,
    /// Per process: whether the procedure moves to it; `None`: to every receiver.
    to: Option<Vec<bool>>,
}

/// Why an event waits in the shaper.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hold {
    /// Ready to go to the simulation.
    Ready,
    /// In the open interval of its process: what of its work moves is known when the interval
    /// closes.
    Open,
    /// In an interval closed by the send of this message, whose receiver is not known yet (a
    /// move names receivers).
    Closing(MsgId),
    /// A `recv_end` of this message, whose moved share is not known yet.
    MovedIn(MsgId),
}

/// An event held back, with its moveable procedure CPU.
#[derive(Debug)]
struct Held {
    queued: Queued,
    /// The CPU of each moved procedure in this event.
    moveable: Seconds,
    hold: Hold,
}

/// One process's events held back.
#[derive(Debug, Default)]
struct ProcHeld {
    events: VecDeque<Held>,
    /// The moveable CPU of the open interval so far.
    open: Seconds,
    /// Whether the open interval has any: if not, and nothing is held, an event passes through.
    open_any: bool,
}

/// A send whose interval's move is not decided yet.
#[derive(Debug)]
struct PendingSend {
    sender: usize,
    moveable: Seconds,
}

/// Applies one target's procedure changes to the events on their way to its simulation.
#[derive(Debug)]
pub(super) struct Shaper {
    /// `(procedure, fraction of its CPU removed)` for each speed change.
    speed: Vec<(usize, f64)>,
    moves: Vec<MoveRule>,
    /// Whether a move names its receivers: a send's move then waits for its receiver.
    names_receivers: bool,
    procs: Vec<ProcHeld>,
    /// Sends whose move waits for the receiver.
    pending: FxHashMap<MsgId, PendingSend>,
    /// The receiver of each message whose `recv_end` is held for its moved share.
    awaiting: FxHashMap<MsgId, usize>,
    /// Moved CPU (seconds) of messages whose `recv_end` is not yet known. Every message of a
    /// target with moves passes here, so a receive never waits for a send that moved nothing.
    decided: FxHashMap<MsgId, f64>,
}

impl Shaper {
    /// A shaper for `changes`, whose procedures are at `indices` of the trace's list, for
    /// `num_procs` processes.
    pub(super) fn new(changes: &[ProcedureChange], indices: &[usize], num_procs: usize) -> Self {
        let mask = |ids: &Option<Vec<u32>>| {
            ids.as_ref().map(|ids| {
                let mut m = vec![false; num_procs];
                for &id in ids {
                    if let Some(slot) = m.get_mut(id as usize) {
                        *slot = true;
                    }
                }
                m
            })
        };
        let mut speed = Vec::new();
        let mut moves = Vec::new();
        for (change, &procedure) in changes.iter().zip(indices) {
            match &change.action {
                ProcedureAction::Move { from, to } => moves.push(MoveRule {
                    procedure,
                    from: mask(from),
                    to: mask(to),
                }),
                action => speed.push((procedure, action.removed_fraction().unwrap_or(0.0))),
            }
        }
        Shaper {
            speed,
            names_receivers: moves.iter().any(|m| m.to.is_some()),
            moves,
            procs: (0..num_procs).map(|_| ProcHeld::default()).collect(),
            pending: FxHashMap::default(),
            awaiting: FxHashMap::default(),
            decided: FxHashMap::default(),
        }
    }

    /// Takes `event` (with its procedures' CPU) and appends to `out` every event that is
    /// ready, in order per process, listing in `touched` the processes whose streams grew.
    pub(super) fn push(
        &mut self,
        event: &Event,
        shares: &ProcedureCpu,
        origin: u64,
        out: &mut Streams,
        touched: &mut Vec<usize>,
    ) {
        let p = event.proc as usize;
        let mut queued = Queued::new(event, origin);
        // Speed changes: only work is made faster; a wait's CPU is no work to remove.
        if queued.work > 0.0 {
            let removed: f64 = self
                .speed
                .iter()
                .map(|&(i, fraction)| shares.0[i] as f64 * 1e-9 * fraction)
                .sum();
            queued.work = (queued.work - removed).max(0.0);
        }
        if self.moves.is_empty() {
            out.push(p, queued);
            touched.push(p);
            return;
        }
        let mut moveable = [0.0; MAX_PROCEDURES];
        let mut any = false;
        if queued.work > 0.0 {
            for rule in &self.moves {
                let from = rule.from.as_ref().is_none_or(|m| m[p]);
                let share = shares.0[rule.procedure];
                if from && share > 0 {
                    moveable[rule.procedure] = share as f64 * 1e-9;
                    any = true;
                }
            }
        }
        match event.kind {
            EventKind::Keepalive | EventKind::RecvStart | EventKind::RecvPost { .. } => {
                let held = &mut self.procs[p];
                if held.events.is_empty() && !held.open_any && !any {
                    out.push(p, queued);
                    touched.push(p);
                    return;
                }
                for (o, m) in held.open.iter_mut().zip(moveable) {
                    *o += m;
                }
                held.open_any |= any;
                held.events.push_back(Held {
                    queued,
                    moveable,
                    hold: Hold::Open,
                });
            }
            EventKind::Send { msg, .. } => {
                let held = &mut self.procs[p];
                held.events.push_back(Held {
                    queued,
                    moveable,
                    hold: Hold::Open,
                });
                let mut total = std::mem::take(&mut held.open);
                for (t, m) in total.iter_mut().zip(moveable) {
                    *t += m;
                }
                let any = std::mem::take(&mut held.open_any) | any;
                if !any {
                    self.close_unmoved(p);
                    self.decided.insert(msg, 0.0);
                    self.release_moved_in(msg, out, touched);
                } else {
                    for h in self.procs[p].events.iter_mut().rev() {
                        if h.hold != Hold::Open {
                            break;
                        }
                        h.hold = Hold::Closing(msg);
                    }
                    self.pending.insert(
                        msg,
                        PendingSend {
                            sender: p,
                            moveable: total,
                        },
                    );
                    if !self.names_receivers {
                        self.decide(msg, None, out, touched);
                    } else if let Some(&r) = self.awaiting.get(&msg) {
                        self.decide(msg, Some(r), out, touched);
                    }
                }
            }
            EventKind::RecvEnd { msg } => {
                self.close_unmoved(p);
                let hold = match self.decided.remove(&msg) {
                    Some(f) => {
                        queued.work = f;
                        Hold::Ready
                    }
                    None => Hold::MovedIn(msg),
                };
                self.procs[p].events.push_back(Held {
                    queued,
                    moveable,
                    hold,
                });
                if hold != Hold::Ready {
                    self.awaiting.insert(msg, p);
                    if self.pending.contains_key(&msg) {
                        self.decide(msg, Some(p), out, touched);
                    }
                }
            }
            _ => {
                // Any other inter-process event closes the interval without a move.
                self.close_unmoved(p);
                self.procs[p].events.push_back(Held {
                    queued,
                    moveable,
                    hold: Hold::Ready,
                });
            }
        }
        self.drain(p, out, touched);
    }

    /// Closes `p`'s open interval at an event that is no send: its procedure CPU stays.
    fn close_unmoved(&mut self, p: usize) {
        let held = &mut self.procs[p];
        held.open = [0.0; MAX_PROCEDURES];
        held.open_any = false;
        for h in held.events.iter_mut().rev() {
            if h.hold != Hold::Open {
                break;
            }
            h.hold = Hold::Ready;
        }
    }

    /// Marks `p`'s events held as `hold` ready, with the fraction `moved` of each procedure's
    /// moveable CPU taken out of their work.
    fn close_where(&mut self, p: usize, hold: Hold, moved: &[f64; MAX_PROCEDURES]) {
        for h in self.procs[p].events.iter_mut().filter(|h| h.hold == hold) {
            let out: f64 = h.moveable.iter().zip(moved).map(|(m, f)| m * f).sum();
            if out > 0.0 {
                h.queued.work = (h.queued.work - out).max(0.0);
            }
            h.hold = Hold::Ready;
        }
    }

    /// Decides the move of the interval closed by message `msg`'s send, now that its receiver
    /// is known (`None` where no move names receivers, or where it never will be).
    fn decide(
        &mut self,
        msg: MsgId,
        receiver: Option<usize>,
        out: &mut Streams,
        touched: &mut Vec<usize>,
    ) {
        let Some(send) = self.pending.remove(&msg) else {
            return;
        };
        let mut moved = [0.0; MAX_PROCEDURES];
        let mut total = 0.0;
        for rule in &self.moves {
            let to = match (&rule.to, receiver) {
                (None, _) => true,
                (Some(mask), Some(r)) => mask[r],
                (Some(_), None) => false,
            };
            if to {
                moved[rule.procedure] = 1.0;
                total += send.moveable[rule.procedure];
            }
        }
        self.close_where(send.sender, Hold::Closing(msg), &moved);
        self.drain(send.sender, out, touched);
        self.decided.insert(msg, total);
        self.release_moved_in(msg, out, touched);
    }

    /// Gives a `recv_end` of `msg` waiting for its moved share the share decided.
    fn release_moved_in(&mut self, msg: MsgId, out: &mut Streams, touched: &mut Vec<usize>) {
        let Some(r) = self.awaiting.remove(&msg) else {
            return;
        };
        let f = self.decided.remove(&msg).unwrap_or(0.0);
        for h in self.procs[r].events.iter_mut() {
            if h.hold == Hold::MovedIn(msg) {
                h.queued.work = f;
                h.hold = Hold::Ready;
            }
        }
        self.drain(r, out, touched);
    }

    /// Passes `p`'s events from the front on while they are ready.
    fn drain(&mut self, p: usize, out: &mut Streams, touched: &mut Vec<usize>) {
        let held = &mut self.procs[p];
        let mut any = false;
        while held.events.front().is_some_and(|h| h.hold == Hold::Ready) {
            let h = held.events.pop_front().expect("checked");
            out.push(p, h.queued);
            any = true;
        }
        if any {
            touched.push(p);
        }
    }

    /// The stream has ended: what waits for an event that will not come goes as it is (an
    /// open interval keeps its procedure, a send whose receive never came moves nothing, a
    /// receive whose send never came gets nothing; the simulation then reports the missing
    /// message as it would without the change).
    pub(super) fn flush(&mut self, out: &mut Streams, touched: &mut Vec<usize>) {
        let pending: Vec<MsgId> = self.pending.keys().copied().collect();
        for msg in pending {
            self.decide(msg, None, out, touched);
        }
        for p in 0..self.procs.len() {
            self.close_unmoved(p);
            for h in self.procs[p].events.iter_mut() {
                if let Hold::MovedIn(msg) = h.hold {
                    h.queued.work = self.decided.remove(&msg).unwrap_or(0.0);
                    h.hold = Hold::Ready;
                }
            }
            self.drain(p, out, touched);
        }
    }
}
