//! The critical path of a target's predicted schedule, and what it is made of: which
//! process computes along it, how much of that is each traced procedure, how much is
//! messages in flight, and how much is start-up (a process not started yet). It says what to
//! tune next: a procedure that makes up a large share of the critical path is worth a
//! `--zero` or `--move` what-if.
//!
//! The path is walked back from the last exit: along a process while it computes, and from a
//! receive that waited to the send of its message (the message's flight is communication).
//! A wait that no message ended (a collective, a rendezvous send's completion) stays on its
//! process and counts as communication. A process's computing is split among procedures as
//! the event it computed towards was (its procedures' share of that event's work in the
//! target).
//!
//! [`Recorder`] keeps a target's whole schedule in memory (the engine's [`ScheduleSink`]);
//! [`Profile::of`] walks it once the engine has finished.

use std::cell::RefCell;
use std::rc::Rc;

use crate::engine::ScheduleSink;
use crate::event::{EventKind, ProcId, ProcedureCpu, MAX_PROCEDURES};
use crate::procedure::{ProcedureAction, ProcedureChange};

/// What a process did over a stretch of predicted time.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Doing {
    Running,
    Waiting,
}

/// The recorded schedule of one process.
#[derive(Clone, Debug, Default)]
struct ProcSchedule {
    /// `(start, end, doing)`, in time order.
    stretches: Vec<(f64, f64, Doing)>,
    /// When each of its events happened, in order.
    events: Vec<f64>,
}

/// A target's schedule, recorded while the engine runs.
#[derive(Debug, Default)]
struct Schedule {
    procs: Vec<ProcSchedule>,
    /// `(to, arrived, from, sent)` of every message.
    messages: Vec<(ProcId, f64, ProcId, f64)>,
}

/// Records a target's schedule for [`Profile::of`]: give [`Recorder::sink`] to the engine's
/// `set_schedule_sink`.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    shared: Rc<RefCell<Schedule>>,
}

/// The engine's side of a [`Recorder`].
struct RecorderSink(Rc<RefCell<Schedule>>);

impl Recorder {
    /// A recorder for `procs` processes.
    pub fn new(procs: usize) -> Self {
        let schedule = Schedule {
            procs: vec![ProcSchedule::default(); procs],
            messages: Vec::new(),
        };
        Recorder {
            shared: Rc::new(RefCell::new(schedule)),
        }
    }

    /// The sink to hand to the engine.
    pub fn sink(&self) -> Box<dyn ScheduleSink> {
        Box::new(RecorderSink(self.shared.clone()))
    }
}

impl ScheduleSink for RecorderSink {
    fn running(&mut self, proc: ProcId, _node: usize, start: f64, end: f64, _rate: f64) {
        push_stretch(&mut self.0.borrow_mut(), proc, start, end, Doing::Running);
    }
    fn waiting(&mut self, proc: ProcId, _node: usize, start: f64, end: f64) {
        push_stretch(&mut self.0.borrow_mut(), proc, start, end, Doing::Waiting);
    }
    fn message(&mut self, from: ProcId, to: ProcId, sent: f64, arrived: f64, _bytes: u64) {
        self.0.borrow_mut().messages.push((to, arrived, from, sent));
    }
    fn event(&mut self, proc: ProcId, _node: usize, time: f64, _kind: &EventKind) {
        if let Some(p) = self.0.borrow_mut().procs.get_mut(proc as usize) {
            p.events.push(time);
        }
    }
}

/// Appends a stretch, merging it with the previous one of the same kind that it continues.
fn push_stretch(s: &mut Schedule, proc: ProcId, start: f64, end: f64, doing: Doing) {
    let Some(p) = s.procs.get_mut(proc as usize) else {
        return;
    };
    match p.stretches.last_mut() {
        Some(last) if last.2 == doing && last.1 == start => last.1 = end,
        _ => p.stretches.push((start, end, doing)),
    }
}

/// One event as traced, for splitting computing among procedures: its CPU, whether that CPU
/// is waiting (not work), and its procedures' shares.
#[derive(Clone, Copy, Debug)]
pub struct TracedEvent {
    /// Its `cpu_ns`.
    pub cpu_ns: u64,
    /// Whether its kind's CPU is waiting (`recv_end`, `send_end`, `coll_end`).
    pub waits: bool,
    /// The CPU of each traced procedure in it.
    pub procedures: ProcedureCpu,
}

impl TracedEvent {
    /// `kind`'s event of `cpu_ns` with `procedures`.
    pub fn new(kind: &EventKind, cpu_ns: u64, procedures: ProcedureCpu) -> Self {
        let waits = matches!(
            kind,
            EventKind::RecvEnd { .. } | EventKind::SendEnd { .. } | EventKind::CollEnd { .. }
        );
        TracedEvent {
            cpu_ns,
            waits,
            procedures,
        }
    }

    /// The fraction of this event's work in the target that is each procedure's: a speed
    /// change scales its share, a moved procedure's share leaves a sender's event (the whole
    /// of a receive's work is moved in: it goes to the first procedure moved).
    fn fractions(&self, changes: &[(usize, ProcedureChange)]) -> [f64; MAX_PROCEDURES] {
        let mut share = [0.0; MAX_PROCEDURES];
        let mut work = if self.waits { 0.0 } else { self.cpu_ns as f64 };
        if self.waits {
            // Work before a receive exists only as a procedure moved in.
            if let Some((i, _)) = changes
                .iter()
                .find(|(_, c)| matches!(c.action, ProcedureAction::Move { .. }))
            {
                share[*i] = 1.0;
            }
            return share;
        }
        for (i, s) in share.iter_mut().enumerate() {
            *s = self.procedures.0[i] as f64;
        }
        for (i, change) in changes {
            if let Some(removed) = change.action.removed_fraction() {
                work -= share[*i] * removed;
                share[*i] *= 1.0 - removed;
            }
        }
        if work > 0.0 {
            for s in &mut share {
                *s = (*s / work).clamp(0.0, 1.0);
            }
        }
        share
    }
}

/// Where a target's predicted time went along its critical path, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The predicted time: the critical path's length.
    pub total: f64,
    /// Per process: the time it computed on the path (its procedures included).
    pub processes: Vec<f64>,
    /// Per traced procedure: the time it ran on the path.
    pub procedures: Vec<f64>,
    /// Messages in flight, and waits no message ended.
    pub communication: f64,
    /// Before the path's first process started.
    pub startup: f64,
}

impl Profile {
    /// The critical path of `recorder`'s schedule, which ends at `total`. `events[p]` are
    /// process `p`'s events as traced, in order; `procedures` names the traced procedures;
    /// `changes` are the target's, with their procedures' indices.
    pub fn of(
        recorder: &Recorder,
        total: f64,
        events: &[Vec<TracedEvent>],
        procedures: usize,
        changes: &[(usize, ProcedureChange)],
    ) -> Profile {
        let s = recorder.shared.borrow();
        let mut profile = Profile {
            total,
            processes: vec![0.0; s.procs.len()],
            procedures: vec![0.0; procedures],
            communication: 0.0,
            startup: 0.0,
        };
        let mut arrivals: Vec<(ProcId, f64, ProcId, f64)> = s.messages.clone();
        arrivals.sort_by(|a, b| (a.0, a.1).partial_cmp(&(b.0, b.1)).expect("finite times"));
        // The process that ends last.
        let last = s
            .procs
            .iter()
            .enumerate()
            .filter_map(|(p, ps)| ps.stretches.last().map(|st| (p, st.1)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let Some((mut p, _)) = last else {
            profile.startup = total;
            return profile;
        };
        let mut t = total;
        // Each process's stretches are visited backwards; an index per process.
        let mut next: Vec<usize> = s.procs.iter().map(|ps| ps.stretches.len()).collect();
        while t > 0.0 {
            let ps = &s.procs[p];
            while next[p] > 0 && ps.stretches[next[p] - 1].0 >= t {
                next[p] -= 1;
            }
            if next[p] == 0 {
                profile.startup += t;
                break;
            }
            let (start, end, doing) = ps.stretches[next[p] - 1];
            if end < t {
                // Between stretches: at events, or not started; computing at no cost.
                profile.processes[p] += t - end;
                t = end;
                continue;
            }
            match doing {
                Doing::Running => {
                    // Back to the previous event at most (which is before `t`, and the
                    // stretch begins before `t`): the work before it was towards another.
                    let k = ps.events.partition_point(|&e| e < t);
                    let from = match k {
                        0 => start,
                        _ => start.max(ps.events[k - 1]),
                    };
                    let spent = t - from;
                    profile.processes[p] += spent;
                    if let Some(event) = events.get(p).and_then(|e| e.get(k)) {
                        let fractions = event.fractions(changes);
                        for (i, f) in profile.procedures.iter_mut().enumerate() {
                            *f += spent * fractions[i];
                        }
                    }
                    t = from;
                }
                Doing::Waiting => {
                    let i = arrivals.partition_point(|a| (a.0 as usize, a.1) < (p, t));
                    match arrivals.get(i).filter(|a| a.0 as usize == p && a.1 == t) {
                        Some(&(_, arrived, from, sent)) if sent <= t => {
                            profile.communication += arrived - sent;
                            p = from as usize;
                            t = sent;
                        }
                        _ => {
                            profile.communication += t - start;
                            t = start;
                        }
                    }
                }
            }
        }
        profile
    }

    /// The profile as text: one line per process, procedure, communication and start-up,
    /// each with its share of the predicted time, under a title naming `target`.
    pub fn text(&self, target: &str, procs: &[String], procedures: &[String]) -> String {
        let pct = |x: f64| {
            if self.total > 0.0 {
                100.0 * x / self.total
            } else {
                0.0
            }
        };
        let mut out = format!(
            "critical path of `{target}` ({:.3} s of predicted time, teardown not included):\n",
            self.total
        );
        let mut line = |what: String, x: f64| {
            out.push_str(&format!("  {what:<28} {:>6.1} %  {x:>9.3} s\n", pct(x)));
        };
        for (p, &x) in self.processes.iter().enumerate() {
            if x > 0.0 {
                let name = procs
                    .get(p)
                    .cloned()
                    .unwrap_or_else(|| format!("process {p}"));
                line(format!("process {name}"), x);
            }
        }
        for (i, &x) in self.procedures.iter().enumerate() {
            line(format!("  of which {}", procedures[i]), x);
        }
        line("communication".into(), self.communication);
        line("start-up".into(), self.startup);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::event::Event;
    use crate::target::{Network, Node, Target};

    /// Fig. 1's graph on two nodes: S computes 5 s (3 in F) and sends; R computes 1 s, waits,
    /// computes 1 s. The path: S's 5 s, the message (free), R's last 1 s.
    #[test]
    fn the_path_of_figure1() {
        const S: u64 = 1_000_000_000;
        let f = |ns: u64| ProcedureCpu::from_slice(&[ns]).unwrap();
        let send = EventKind::Send {
            after: 0,
            msg: 1,
            bytes: 0,
            rendezvous: false,
        };
        let events = [
            (1, S, EventKind::RecvStart, f(0)),
            (1, 0, EventKind::RecvEnd { msg: 1 }, f(0)),
            (1, S, EventKind::Exit, f(0)),
            (0, 5 * S, send, f(3 * S)),
            (0, 0, EventKind::Exit, f(0)),
        ];
        let target = Target {
            name: "spread".into(),
            nodes: vec![Node::new(vec![0]), Node::new(vec![1])],
            network: Network::default(),
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
            procedures: Vec::new(),
        };
        let mut engine = Engine::with_procedures(2, &["F".into()], vec![target]).unwrap();
        let recorder = Recorder::new(2);
        engine.set_schedule_sink(0, recorder.sink());
        let mut traced = vec![Vec::new(), Vec::new()];
        for (i, &(p, cpu_ns, kind, shares)) in events.iter().enumerate() {
            let event = Event {
                proc: p,
                cpu_ns,
                kind,
            };
            engine
                .push_with_procedures(event, &shares, i as u64)
                .unwrap();
            traced[p as usize].push(TracedEvent::new(&kind, cpu_ns, shares));
        }
        let total = engine.finish().unwrap()[0].predicted_seconds;
        let profile = Profile::of(&recorder, total, &traced, 1, &[]);
        assert_eq!(profile.total, 6.0);
        assert_eq!(profile.processes, vec![5.0, 1.0]);
        assert_eq!(profile.procedures, vec![3.0]);
        assert_eq!((profile.communication, profile.startup), (0.0, 0.0));
        let text = profile.text("spread", &["S".into(), "R".into()], &["F".into()]);
        assert!(text.contains("process S"), "{text}");
        assert!(text.contains("of which F"), "{text}");
    }
}
