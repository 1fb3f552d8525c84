//! Messages sent by rendezvous: the send waits for its receive.
//!
//! An MPI library sends a message above its eager limit (or any synchronous send's) only
//! once the receiver has matched it: the sender announces it, the receiver answers once its
//! receive is posted, and only then does the data move. The sender's blocking send (or its
//! wait on a nonblocking one) returns once the data has gone. Measured with Open MPI 4.1 and
//! MPICH 4.0 (see `docs/engine.md`), a library answers only inside an MPI call, and a receive
//! posted with `MPI_Irecv` is answered at the receiver's next wait, not at the post.
//!
//! The model, for message `m` sent by rendezvous at `s` from process `p` to process `q`:
//!
//! - `q` *answers* `m` at `r`: the first time, at or after its `recv_post` of `m`, that it
//!   reaches a wait (a `recv_end`, `send_end` or `coll_end`, blocking or not); without a
//!   `recv_post`, when it reaches `m`'s `recv_end`.
//! - With `c0` the target's time for an empty message from `p` to `q` (local or remote
//!   table): the request reaches `q` at `s + c0`, the answer reaches `p` `c0` later, so the data
//!   leaves at `D = max(s + c0, r) + c0` and arrives at `A = D + comm(bytes)`.
//! - `m`'s `recv_end` happens at `max(now, A)`, as an eager message's at its arrival; the
//!   sender's `send_end` of `m` also at `max(now, A)`: its call returns once the data has
//!   gone.
//!
//! `A` is a function of `s` and `r` alone, so the order in which the simulation meets the
//! send and the answer does not matter. Each adds to the time it was taken at least one
//! delay between the two processes' nodes before it reaches the other process, as a message
//! does, so a process alone on its node may still run ahead (see `Sim::runs_ahead`).
//!
//! State: the message in [`Sim`]'s message map (`Requested` until answered, `Posted` when
//! answered before it was sent, `Sent` once both are known), each process's posts not yet
//! answered, and the rendezvous sends not yet completed by their sender ([`Completion`]),
//! which are dropped when the sender exits.

use super::{Msg, Sim, SimResult, State};
use crate::engine::EngineError;
use crate::event::{MsgId, ProcId};

/// A rendezvous send whose sender has not completed it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Completion {
    /// The sender.
    from: ProcId,
    /// Where the transfer is.
    state: Transfer,
}

/// Where the transfer of a rendezvous message is, as its sender sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Transfer {
    /// The receive is not answered yet; the sender has not reached its send_end.
    Pending,
    /// The receive is not answered yet; the sender waits at its send_end.
    Waiting,
    /// The data arrives (and the send completes) at this time.
    Ends(f64),
}

impl Sim {
    /// Process `p` sends `msg` of `bytes` by rendezvous now.
    pub(super) fn send_rendezvous(
        &mut self,
        p: usize,
        msg: MsgId,
        bytes: u64,
        origin: u64,
    ) -> SimResult<()> {
        let duplicate = || Box::new(EngineError::DuplicateMessage { msg, origin });
        let from = p as ProcId;
        let completion = Completion {
            from,
            state: Transfer::Pending,
        };
        if self.sends.insert(msg, completion).is_some() {
            return Err(duplicate());
        }
        let requested = Msg::Requested {
            at: self.now,
            bytes,
            from,
        };
        match self.msgs.insert(msg, requested) {
            None => {}
            Some(Msg::Posted { by, at }) => {
                self.transfer(msg, p, by as usize, self.now, at, bytes);
            }
            Some(Msg::Awaited { by, posted }) => {
                let arrival = self.transfer(msg, p, by as usize, self.now, posted, bytes);
                self.wake_at(by as usize, arrival);
            }
            Some(Msg::Sent { .. } | Msg::Requested { .. }) => return Err(duplicate()),
        }
        Ok(())
    }

    /// Process `p` reaches a wait: the receives it posted since its last wait are answered
    /// now. Inlined: mostly there are none.
    #[inline]
    pub(super) fn answer_posts(&mut self, p: usize) -> SimResult<()> {
        if self.unanswered == 0 {
            return Ok(());
        }
        self.answer_posts_now(p)
    }

    /// [`Sim::answer_posts`] when some process has posts.
    #[cold]
    fn answer_posts_now(&mut self, p: usize) -> SimResult<()> {
        let mut posts = std::mem::take(&mut self.posts[p]);
        self.unanswered -= posts.len();
        for &(msg, origin) in &posts {
            let by = p as ProcId;
            match self.msgs.get(&msg) {
                None => {
                    self.msgs.insert(msg, Msg::Posted { by, at: self.now });
                }
                Some(&Msg::Requested { at, bytes, from }) => {
                    self.transfer(msg, from as usize, p, at, self.now, bytes);
                }
                // Sent eagerly: the post changes nothing.
                Some(Msg::Sent { .. }) => {}
                Some(Msg::Posted { .. } | Msg::Awaited { .. }) => {
                    return Err(Box::new(EngineError::DuplicateMessage { msg, origin }))
                }
            }
        }
        // Hand the allocation back for the next posts.
        posts.clear();
        self.posts[p] = posts;
        Ok(())
    }

    /// Process `p` is at the recv_end of `msg`, which is known to be sent by rendezvous but
    /// not answered (`Requested`), or answered but not sent (`Posted`).
    #[cold]
    pub(super) fn await_rendezvous(
        &mut self,
        p: usize,
        msg: MsgId,
        origin: u64,
    ) -> SimResult<bool> {
        match self.msgs.get(&msg) {
            Some(&Msg::Requested { at, bytes, from }) => {
                // Not answered yet: the recv_end answers it.
                let arrival = self.transfer(msg, from as usize, p, at, self.now, bytes);
                Ok(self.arrives(p, msg, arrival))
            }
            Some(&Msg::Posted { by, at }) if by as usize == p => {
                let awaited = Msg::Awaited { by, posted: at };
                self.msgs.insert(msg, awaited);
                self.start_wait(p, State::WaitMsg);
                Ok(false)
            }
            _ => Err(Box::new(EngineError::DuplicateMessage { msg, origin })),
        }
    }

    /// Process `p` is at the send_end of `msg`: completes now if the transfer has ended.
    pub(super) fn await_send(&mut self, p: usize, msg: MsgId, origin: u64) -> SimResult<bool> {
        self.answer_posts(p)?;
        let bad = || {
            Box::new(EngineError::BadSendEnd {
                proc: p as ProcId,
                msg,
                origin,
            })
        };
        let Some(c) = self.sends.get_mut(&msg) else {
            return Err(bad());
        };
        if c.from as usize != p {
            return Err(bad());
        }
        match c.state {
            Transfer::Pending => {
                c.state = Transfer::Waiting;
                self.start_wait(p, State::WaitMsg);
                Ok(false)
            }
            Transfer::Waiting => Err(bad()),
            Transfer::Ends(t) => {
                self.sends.remove(&msg);
                if t <= self.now {
                    return Ok(true);
                }
                self.start_wait(p, State::WaitMsg);
                self.wake_at(p, t);
                Ok(false)
            }
        }
    }

    /// Process `p` has exited: its rendezvous sends will never be completed by it.
    #[inline]
    pub(super) fn forget_sends(&mut self, p: usize) {
        if !self.sends.is_empty() {
            self.sends.retain(|_, c| c.from as usize != p);
        }
        if self.unanswered > 0 {
            self.unanswered -= self.posts[p].len();
            self.posts[p] = Vec::new();
        }
    }

    /// The transfer of `msg` (`bytes`, from `from` to `to`), sent at `sent` and answered at
    /// `answered`: makes it `Sent` when its data leaves, and ends its sender's send then.
    /// Returns when the data arrives.
    fn transfer(
        &mut self,
        msg: MsgId,
        from: usize,
        to: usize,
        sent: f64,
        answered: f64,
        bytes: u64,
    ) -> f64 {
        let handshake = self.comm(from, to, 0);
        let leaves = (sent + handshake).max(answered) + handshake;
        let arrives = leaves + self.comm(from, to, bytes);
        let data = Msg::Sent {
            at: leaves,
            bytes,
            from: from as ProcId,
        };
        self.msgs.insert(msg, data);
        if let Some(c) = self.sends.get_mut(&msg) {
            match c.state {
                Transfer::Pending => c.state = Transfer::Ends(arrives),
                Transfer::Waiting => {
                    self.sends.remove(&msg);
                    self.wake_at(from, arrives);
                }
                Transfer::Ends(_) => unreachable!("a message is answered once"),
            }
        }
        arrives
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::{Engine, EngineError};
    use crate::event::{Event, EventKind, MsgId, ProcId};
    use crate::target::{CommTable, Network, Node, Target};

    /// Tenths of a second of CPU.
    fn ev(proc: ProcId, tenths: u64, kind: EventKind) -> Event {
        Event {
            proc,
            cpu_ns: tenths * 100_000_000,
            kind,
        }
    }

    fn send(msg: MsgId) -> EventKind {
        EventKind::Send {
            after: 0,
            msg,
            bytes: 1000,
            rendezvous: true,
        }
    }

    /// Processes 0 and 1 on nodes of their own; between nodes an empty message takes 0.1 s
    /// and 1000 bytes 1.1 s.
    fn two_nodes() -> Target {
        Target {
            name: "two nodes".into(),
            nodes: vec![Node::new(vec![0]), Node::new(vec![1])],
            network: Network {
                local: CommTable::default(),
                remote: CommTable::new(vec![(0.0, 0.1), (1000.0, 1.1)]).unwrap(),
            },
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
            procedures: Vec::new(),
        }
    }

    /// The prediction for `events` pushed in their order and, to check that the order does
    /// not matter, with process 1's events first (errors name the events by their place in
    /// the order, so only a prediction is compared).
    fn predict(events: &[Event]) -> Result<f64, EngineError> {
        let run = |order: Vec<Event>| {
            let mut engine = Engine::new(2, vec![two_nodes()])?;
            for (i, e) in order.into_iter().enumerate() {
                engine.push(e, i as u64 + 1)?;
            }
            Ok(engine.finish()?[0].predicted_seconds)
        };
        let given = run(events.to_vec());
        let (mut ones, zeros): (Vec<Event>, Vec<Event>) = events.iter().partition(|e| e.proc == 1);
        ones.extend(zeros);
        if let Ok(t) = given {
            assert_eq!(
                Ok(t),
                run(ones),
                "the order of the streams changed the result"
            );
        }
        given
    }

    fn close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-9, "got {got}, want {want}");
    }

    /// Sent at 1.0, answered by the receive at 3.0: the data leaves at
    /// max(1.0 + 0.1, 3.0) + 0.1 = 3.1 and arrives at 4.2, when both the send and the receive complete; both
    /// exit 1.0 later. Eagerly, the data would have arrived at 2.1 and the run ended at 4.0.
    #[test]
    fn a_blocking_send_waits_for_a_late_receive() {
        let events = [
            ev(0, 10, send(7)),
            ev(0, 0, EventKind::SendEnd { msg: 7 }),
            ev(0, 10, EventKind::Exit),
            ev(1, 30, EventKind::RecvStart),
            ev(1, 0, EventKind::RecvEnd { msg: 7 }),
            ev(1, 10, EventKind::Exit),
        ];
        close(predict(&events).unwrap(), 5.2);
        let eager = events.map(|mut e| {
            if let EventKind::Send { rendezvous, .. } = &mut e.kind {
                *rendezvous = false;
            }
            e
        });
        let eager: Vec<Event> = eager
            .into_iter()
            .filter(|e| !matches!(e.kind, EventKind::SendEnd { .. }))
            .collect();
        close(predict(&eager).unwrap(), 4.0);
    }

    /// A receive posted at 0.5 while the receiver then computes until 3.0 is answered only at
    /// its wait, 3.0: the same 5.2 as a receive posted there.
    #[test]
    fn a_receive_posted_early_is_answered_at_the_next_wait() {
        let events = [
            ev(1, 5, EventKind::RecvPost { msg: 7 }),
            ev(1, 25, EventKind::RecvStart),
            ev(1, 0, EventKind::RecvEnd { msg: 7 }),
            ev(1, 10, EventKind::Exit),
            ev(0, 10, send(7)),
            ev(0, 0, EventKind::SendEnd { msg: 7 }),
            ev(0, 10, EventKind::Exit),
        ];
        close(predict(&events).unwrap(), 5.2);
    }

    /// A sender that computes after its nonblocking send finds the transfer over (at 4.2)
    /// when it waits at 6.0, and goes on at once.
    #[test]
    fn a_send_completed_late_does_not_wait_for_a_transfer_already_over() {
        let events = [
            ev(0, 10, send(7)),
            ev(0, 50, EventKind::RecvStart),
            ev(0, 0, EventKind::SendEnd { msg: 7 }),
            ev(0, 10, EventKind::Exit),
            ev(1, 30, EventKind::RecvStart),
            ev(1, 0, EventKind::RecvEnd { msg: 7 }),
            ev(1, 10, EventKind::Exit),
        ];
        close(predict(&events).unwrap(), 7.0);
    }

    /// A halo exchange: each process posts its receive, sends by rendezvous and waits for the
    /// send. Each one's wait answers the other's message: process 0 waits from 1.0, process 1
    /// from 2.0. Message 1 (sent at 1.0, answered at 2.0) leaves at 2.1 and arrives at 3.2;
    /// message 2 (sent at 2.0, answered at 1.0) leaves at 2.2 and arrives at 3.3. Both
    /// processes have their message at 3.3 and exit at 4.3.
    #[test]
    fn a_wait_answers_the_receives_posted_before_it() {
        let events = [
            ev(0, 0, EventKind::RecvPost { msg: 2 }),
            ev(0, 10, send(1)),
            ev(0, 0, EventKind::SendEnd { msg: 1 }),
            ev(0, 0, EventKind::RecvStart),
            ev(0, 0, EventKind::RecvEnd { msg: 2 }),
            ev(0, 10, EventKind::Exit),
            ev(1, 0, EventKind::RecvPost { msg: 1 }),
            ev(1, 20, send(2)),
            ev(1, 0, EventKind::SendEnd { msg: 2 }),
            ev(1, 0, EventKind::RecvStart),
            ev(1, 0, EventKind::RecvEnd { msg: 1 }),
            ev(1, 10, EventKind::Exit),
        ];
        close(predict(&events).unwrap(), 4.3);
        // Without the posts, each send waits for a receive that comes after the other's send.
        let unposted: Vec<Event> = events
            .into_iter()
            .filter(|e| !matches!(e.kind, EventKind::RecvPost { .. }))
            .collect();
        match predict(&unposted) {
            Err(EngineError::Deadlock { waiting }) => {
                assert_eq!(waiting.len(), 2, "{waiting:?}");
                assert!(waiting[0].2.contains("sent by rendezvous"), "{waiting:?}");
            }
            other => panic!("expected a deadlock, got {other:?}"),
        }
    }

    #[test]
    fn a_send_end_of_an_eager_or_foreign_message_is_an_error() {
        let eager = EventKind::Send {
            after: 0,
            msg: 7,
            bytes: 10,
            rendezvous: false,
        };
        let events = [
            ev(0, 1, eager),
            ev(0, 1, EventKind::SendEnd { msg: 7 }),
            ev(1, 1, EventKind::SendEnd { msg: 8 }),
        ];
        let mut engine = Engine::new(2, vec![two_nodes()]).unwrap();
        engine.push(events[0], 1).unwrap();
        let err = engine.push(events[1], 2).unwrap_err();
        assert_eq!(
            err,
            EngineError::BadSendEnd {
                proc: 0,
                msg: 7,
                origin: 2
            }
        );
        assert!(
            err.to_string().contains("did not send by rendezvous"),
            "{err}"
        );
        let mut engine = Engine::new(2, vec![two_nodes()]).unwrap();
        engine.push(ev(0, 1, send(8)), 1).unwrap();
        let err = engine.push(events[2], 2).unwrap_err();
        assert!(
            matches!(err, EngineError::BadSendEnd { proc: 1, .. }),
            "{err}"
        );
    }
}
