//! The online what-if engine: builds the Group Activity Graph of each target configuration
//! while events arrive, and predicts each target's run time (LBF, NF, or both at once).
//!
//! This module knows nothing of eBPF, MPI or files: its input is per-process [`Event`]s in
//! per-process order, interleaved in any way; its output is one [`Prediction`] per [`Target`]
//! and, on request, the predicted schedule through a [`ScheduleSink`].
//!
//! See `docs/engine.md` for the semantics and where they deviate from the paper's pseudocode.

mod collective;
mod comm;
mod min_tree;
mod msgs;
mod node;
mod node_model;
mod shaper;
mod sim;
mod slices;
mod streams;
mod time;

use crate::event::{Event, EventKind, ProcId, ProcInfo, ProcedureCpu};
use crate::procedure::ProcedureError;
use crate::target::{Node, Target};

/// Receives the predicted schedule of one target as it is computed, for timelines.
///
/// Times are predicted seconds from the start of the run. Each node's calls come in time
/// order, different nodes' need not: a process alone on its node runs ahead of the others
/// (see `docs/engine.md`).
pub trait ScheduleSink {
    /// `proc` on `node` was runnable from `start` to `end`, progressing at `rate` CPU-seconds
    /// per second (its share of the node).
    fn running(&mut self, proc: ProcId, node: usize, start: f64, end: f64, rate: f64);
    /// `proc` waited (for a message or a collective) from `start` to `end`.
    fn waiting(&mut self, proc: ProcId, node: usize, start: f64, end: f64);
    /// A message from `from` (sent at `sent`) reached `to` at `arrived`.
    fn message(&mut self, from: ProcId, to: ProcId, sent: f64, arrived: f64, bytes: u64);
    /// `proc`'s event `kind` happened (was reported into the GAG) at `time`. The default
    /// ignores it.
    fn event(&mut self, proc: ProcId, node: usize, time: f64, kind: &EventKind) {
        let _ = (proc, node, time, kind);
    }
}

/// The result for one target.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// The target's name.
    pub target: String,
    /// Predicted run time in seconds: the time of the last exit.
    pub predicted_seconds: f64,
    /// How much later (negative: sooner) than measured the processes start their modelled
    /// work in this prediction: the start-up model's shift ([`crate::startup`]); 0 where the
    /// start-up is taken as measured.
    pub startup_shift_seconds: f64,
}

/// How far one target's simulation has got, for periodic reports while a capture runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// The target's name.
    pub target: String,
    /// Predicted time reached so far: a lower bound on the final prediction.
    pub simulated_seconds: f64,
    /// Processes whose exit has been simulated.
    pub exited: usize,
}

/// Why the engine cannot go on. Every variant names the process and the `origin` of the
/// offending event (the value passed to [`Engine::push`], e.g. a trace line number; 0 if none).
#[derive(Clone, Debug, PartialEq)]
pub enum EngineError {
    /// A target is unusable: a process on no node or on two, a node without cores, ...
    BadTarget {
        /// The target's name.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// A target changes a procedure the trace does not record, or one twice.
    BadProcedure {
        /// The target's name.
        target: String,
        /// What is wrong.
        reason: ProcedureError,
    },
    /// An event names a process outside the trace's process list.
    UnknownProcess {
        /// The process named.
        proc: ProcId,
        /// Where the event came from.
        origin: u64,
    },
    /// An event follows the process's exit.
    EventAfterExit {
        /// The process.
        proc: ProcId,
        /// Where the event came from.
        origin: u64,
    },
    /// Two sends carry the same message id, or two receives consume the same message.
    DuplicateMessage {
        /// The message id.
        msg: u64,
        /// Where the second use came from.
        origin: u64,
    },
    /// A send_end names a message its process did not send by rendezvous, or completes one
    /// twice.
    BadSendEnd {
        /// The process of the send_end.
        proc: ProcId,
        /// The message it names.
        msg: u64,
        /// Where the send_end came from.
        origin: u64,
    },
    /// Inconsistent collective: participants disagree on its size, or more arrive than its size.
    BadCollective {
        /// The collective id.
        coll: u64,
        /// What is wrong.
        reason: String,
        /// Where the offending event came from.
        origin: u64,
    },
    /// Every live process waits and nothing can wake any of them.
    Deadlock {
        /// The waiting processes with the origin of the event each waits at, and what for.
        waiting: Vec<(ProcId, u64, String)>,
    },
    /// The stream ended before these processes exited.
    Truncated {
        /// Processes without an exit, with the origin of their last event (0 if none).
        unfinished: Vec<(ProcId, u64)>,
    },
}

/// Processes an error lists one by one; the others are counted.
const LISTED: usize = 20;

/// Ends a list of `n` processes of which [`LISTED`] were written.
fn and_more(f: &mut std::fmt::Formatter<'_>, n: usize) -> std::fmt::Result {
    match n.checked_sub(LISTED) {
        Some(more) if more > 0 => write!(f, "\n  and {more} more processes"),
        _ => Ok(()),
    }
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |origin: &u64| {
            if *origin == 0 {
                String::new()
            } else {
                format!(" (at {origin})")
            }
        };
        match self {
            EngineError::BadTarget { target, reason } => {
                write!(f, "target `{target}` is unusable: {reason}")
            }
            EngineError::BadProcedure { target, reason } => {
                write!(f, "target `{target}`: {reason}")
            }
            EngineError::UnknownProcess { proc, origin } => write!(
                f,
                "event for process {proc}, which is not in the trace's process list{}",
                at(origin)
            ),
            EngineError::EventAfterExit { proc, origin } => {
                write!(f, "event for process {proc} after its exit{}", at(origin))
            }
            EngineError::DuplicateMessage { msg, origin } => write!(
                f,
                "message {msg} is sent twice or received twice{}: an id names one message \
                 at a time (a reused id's two messages would be in flight at once here)",
                at(origin)
            ),
            EngineError::BadSendEnd { proc, msg, origin } => write!(
                f,
                "process {proc} completes message {msg}, which it did not send by rendezvous \
                 or completed already{}",
                at(origin)
            ),
            EngineError::BadCollective {
                coll,
                reason,
                origin,
            } => {
                write!(f, "collective {coll}: {reason}{}", at(origin))
            }
            EngineError::Deadlock { waiting } => {
                write!(
                    f,
                    "deadlock: every live process waits and none can be woken"
                )?;
                for (p, origin, what) in waiting.iter().take(LISTED) {
                    write!(f, "\n  process {p}{} {what}", at(origin))?;
                }
                and_more(f, waiting.len())
            }
            EngineError::Truncated { unfinished } => {
                write!(f, "the event stream ended before every process exited:")?;
                for (p, origin) in unfinished.iter().take(LISTED) {
                    match origin {
                        0 => write!(f, "\n  process {p} sent no event")?,
                        o => write!(f, "\n  process {p}: last event at {o}")?,
                    }
                }
                and_more(f, unfinished.len())
            }
        }
    }
}

impl std::error::Error for EngineError {}

/// The online engine: one simulation per target, fed by one stream of events.
///
/// ```
/// use lbf_model::engine::Engine;
/// use lbf_model::event::{Event, EventKind};
/// use lbf_model::target::{Network, Node, Target};
///
/// let both_on_one = Target {
///     name: "1 node".into(),
///     nodes: vec![Node::new(vec![0, 1])],
///     network: Network::default(),
///     spin: 0.0,
///     scheduler: None,
///     bind_to_cores: false,
///     procedures: Vec::new(),
/// };
/// let mut engine = Engine::new(2, vec![both_on_one]).unwrap();
/// for p in 0..2 {
///     engine.push(Event { proc: p, cpu_ns: 1_000_000_000, kind: EventKind::Exit }, 0).unwrap();
/// }
/// let predictions = engine.finish().unwrap();
/// assert_eq!(predictions[0].predicted_seconds, 2.0);
/// ```
pub struct Engine {
    streams: streams::Streams,
    /// The simulations of targets that change no procedure: they read `streams`.
    sims: Vec<sim::Sim>,
    /// The targets that change procedures, each reading a stream of its own.
    shaped: Vec<Shaped>,
    /// Where each target, in the order given, is: `(false, i)` is `sims[i]`, `(true, i)`
    /// `shaped[i]`.
    order: Vec<(bool, usize)>,
    /// Processes whose shaped streams grew in the current push (reused).
    touched: Vec<usize>,
    /// Each target's start-up shift, in the order given ([`Prediction::startup_shift_seconds`]).
    startup_shifts: Vec<f64>,
    /// Each target's nodes, in the order given, for the start-up model
    /// ([`Engine::set_starts`]).
    target_nodes: Vec<Vec<Node>>,
    /// The first error: the engine refuses further input after it.
    failed: Option<EngineError>,
}

/// A target that changes procedures: its simulation reads the events as its changes shape
/// them (see `shaper.rs`).
struct Shaped {
    shaper: shaper::Shaper,
    streams: streams::Streams,
    sim: sim::Sim,
}

impl Shaped {
    /// Absolute index of the first event of process `p` the simulation still needs.
    fn consumed(&self, p: usize) -> u64 {
        self.sim.held(p)
    }

    /// Feeds `touched`'s grown streams to the simulation.
    fn run(&mut self, touched: &mut Vec<usize>) -> Result<(), EngineError> {
        for p in touched.drain(..) {
            self.sim.on_event(p, &self.streams).map_err(|e| *e)?;
        }
        Ok(())
    }
}

impl Engine {
    /// An engine for a trace of `num_procs` processes (ids `0..num_procs`), evaluating every
    /// target in one pass. Fails if a target does not place every process on exactly one node,
    /// or changes a procedure (the trace records none: see [`Engine::with_procedures`]).
    pub fn new(num_procs: usize, targets: Vec<Target>) -> Result<Self, EngineError> {
        Engine::with_procedures(num_procs, &[], targets)
    }

    /// An engine for a trace of `num_procs` processes that records the CPU of the procedures
    /// `procedures` (in the order its events list their shares, [`ProcedureCpu`]). Fails as
    /// [`Engine::new`] does, and if a target changes a procedure not in `procedures` or one
    /// twice.
    pub fn with_procedures(
        num_procs: usize,
        procedures: &[String],
        targets: Vec<Target>,
    ) -> Result<Self, EngineError> {
        let mut sims = Vec::new();
        let mut shaped = Vec::new();
        let num_targets = targets.len();
        let target_nodes = targets.iter().map(|t| t.nodes.clone()).collect();
        let mut order = Vec::with_capacity(num_targets);
        for target in targets {
            if target.procedures.is_empty() {
                order.push((false, sims.len()));
                sims.push(sim::Sim::new(num_procs, target)?);
                continue;
            }
            let indices =
                crate::procedure::resolve(&target.procedures, procedures).map_err(|reason| {
                    EngineError::BadProcedure {
                        target: target.name.clone(),
                        reason,
                    }
                })?;
            let shaper = shaper::Shaper::new(&target.procedures, &indices, num_procs);
            order.push((true, shaped.len()));
            shaped.push(Shaped {
                shaper,
                streams: streams::Streams::new(num_procs),
                sim: sim::Sim::new(num_procs, target)?,
            });
        }
        Ok(Engine {
            streams: streams::Streams::new(num_procs),
            sims,
            shaped,
            order,
            touched: Vec::new(),
            startup_shifts: vec![0.0; num_targets],
            target_nodes,
            failed: None,
        })
    }

    /// An engine for the processes `procs` (the trace header's list, ids `0..procs.len()`),
    /// starting each at its `start_ns`, moved in each target by the start-up model
    /// ([`crate::startup`]); see [`Engine::new`] and [`Engine::set_start`].
    pub fn for_procs(procs: &[ProcInfo], targets: Vec<Target>) -> Result<Self, EngineError> {
        Engine::for_procs_with_procedures(procs, &[], targets)
    }

    /// [`Engine::for_procs`] for a trace that records `procedures` (see
    /// [`Engine::with_procedures`]).
    pub fn for_procs_with_procedures(
        procs: &[ProcInfo],
        procedures: &[String],
        targets: Vec<Target>,
    ) -> Result<Self, EngineError> {
        let mut engine = Engine::with_procedures(procs.len(), procedures, targets)?;
        engine.set_starts(procs);
        Ok(engine)
    }

    /// Starts each process of `procs` (the trace header's list) at its `start_ns`, moved in
    /// each target by the start-up model ([`crate::startup`]), which reads every process's
    /// figures at once: for an engine made before the header was complete (cluster mode's
    /// builder learns the processes from the nodes' hellos). Processes with no start (0)
    /// start at once. Must precede the processes' first events.
    pub fn set_starts(&mut self, procs: &[ProcInfo]) {
        let startup = crate::startup::Startup::of(procs);
        let shifts: Vec<f64> = self
            .target_nodes
            .iter()
            .map(|nodes| startup.as_ref().map_or(0.0, |s| s.shift(nodes)))
            .collect();
        for (target, &shift) in shifts.iter().enumerate() {
            for p in procs.iter().filter(|p| p.start_ns > 0) {
                let seconds = (p.start_ns as f64 * 1e-9 + shift).max(0.0);
                self.sim_mut(target).set_start(p.id as usize, seconds);
            }
        }
        self.startup_shifts = shifts;
    }

    /// Each target's start-up shift, in the order given (see
    /// [`Prediction::startup_shift_seconds`]).
    pub fn startup_shifts(&self) -> &[f64] {
        &self.startup_shifts
    }

    /// The simulation of target number `target`.
    fn sim_mut(&mut self, target: usize) -> &mut sim::Sim {
        match self.order[target] {
            (false, i) => &mut self.sims[i],
            (true, i) => &mut self.shaped[i].sim,
        }
    }

    /// Makes process `proc` start `seconds` after the run's start instead of at once, in every
    /// target: a job's launcher starts its ranks late, and the measured time includes that.
    /// Must precede `proc`'s first event.
    ///
    /// # Panics
    /// If `proc` is not a process of the trace, or `seconds` is negative or not finite.
    pub fn set_start(&mut self, proc: ProcId, seconds: f64) {
        assert!(
            seconds.is_finite() && seconds >= 0.0,
            "start time {seconds}"
        );
        for sim in &mut self.sims {
            sim.set_start(proc as usize, seconds);
        }
        for shaped in &mut self.shaped {
            shaped.sim.set_start(proc as usize, seconds);
        }
    }

    /// Records the predicted schedule of target number `target` into `sink`.
    ///
    /// # Panics
    /// If there is no target number `target`.
    pub fn set_schedule_sink(&mut self, target: usize, sink: Box<dyn ScheduleSink>) {
        self.sim_mut(target).set_sink(sink);
    }

    /// Feeds one event and advances every target as far as the events so far allow.
    /// `origin` is echoed in errors (a trace line number, a sequence number; 0 if none).
    pub fn push(&mut self, event: Event, origin: u64) -> Result<(), EngineError> {
        self.push_with_procedures(event, &ProcedureCpu::NONE, origin)
    }

    /// [`Engine::push`] for an event that carries the CPU its process spent in each traced
    /// procedure since its previous event (see [`Engine::with_procedures`]).
    pub fn push_with_procedures(
        &mut self,
        event: Event,
        shares: &ProcedureCpu,
        origin: u64,
    ) -> Result<(), EngineError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.push_inner(event, shares, origin);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn push_inner(
        &mut self,
        event: Event,
        shares: &ProcedureCpu,
        origin: u64,
    ) -> Result<(), EngineError> {
        let p = event.proc as usize;
        if p >= self.num_procs() {
            return Err(EngineError::UnknownProcess {
                proc: event.proc,
                origin,
            });
        }
        if self.streams.is_closed(p) {
            return Err(EngineError::EventAfterExit {
                proc: event.proc,
                origin,
            });
        }
        if self.streams.is_full(p) {
            // Events every target is done with are dropped only when their room is needed.
            self.streams.trim(p, self.consumed(p));
        }
        self.streams.push(p, streams::Queued::new(&event, origin));
        if event.kind == EventKind::Exit {
            self.streams.close(p);
        }
        for sim in &mut self.sims {
            sim.on_event(p, &self.streams).map_err(|e| *e)?;
        }
        for shaped in &mut self.shaped {
            if shaped.streams.is_full(p) {
                shaped.streams.trim(p, shaped.consumed(p));
            }
            // The shaper may release other processes' events, whose rings are trimmed only
            // when they next receive one of their own: they grow meanwhile.
            shaped.shaper.push(
                &event,
                shares,
                origin,
                &mut shaped.streams,
                &mut self.touched,
            );
            shaped.run(&mut self.touched)?;
        }
        Ok(())
    }

    fn num_procs(&self) -> usize {
        self.streams.num_procs()
    }

    /// Absolute index of the first event of process `p` some target still needs.
    fn consumed(&self, p: usize) -> u64 {
        let held = self.sims.iter().map(|s| s.held(p)).min();
        held.unwrap_or_else(|| self.streams.end_of(p))
    }

    /// How far each target has got.
    pub fn progress(&self) -> Vec<Progress> {
        self.order
            .iter()
            .map(|&(shaped, i)| match shaped {
                false => self.sims[i].progress(),
                true => self.shaped[i].sim.progress(),
            })
            .collect()
    }

    /// Events received but not yet consumed by every target (the engine's memory footprint).
    pub fn queued_events(&self) -> usize {
        (0..self.num_procs() as ProcId)
            .map(|p| self.queued_events_of(p))
            .sum()
    }

    /// Events of process `proc` the engine holds (0 for an unknown process): received, and
    /// not yet consumed by every target.
    pub fn queued_events_of(&self, proc: ProcId) -> usize {
        let p = proc as usize;
        if p < self.num_procs() {
            let shaped: u64 = self
                .shaped
                .iter()
                .map(|s| s.streams.end_of(p) - s.consumed(p))
                .sum();
            (self.streams.end_of(p) - self.consumed(p) + shaped) as usize
        } else {
            0
        }
    }

    /// Whether some target has consumed every event of `proc` received so far and the
    /// process has not exited: that target may need `proc`'s next event to go on. A source
    /// feeding several processes may hold back while its processes have many events queued,
    /// but not while one of them is starved.
    pub fn is_starved(&self, proc: ProcId) -> bool {
        let p = proc as usize;
        p < self.num_procs()
            && !self.streams.is_closed(p)
            && (self
                .sims
                .iter()
                .any(|s| s.cursor(p) >= self.streams.end_of(p))
                || self
                    .shaped
                    .iter()
                    .any(|s| s.sim.cursor(p) >= s.streams.end_of(p)))
    }

    /// Ends the stream: every process must have exited. Returns one prediction per target,
    /// in the order the targets were given.
    pub fn finish(mut self) -> Result<Vec<Prediction>, EngineError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        for shaped in &mut self.shaped {
            shaped.shaper.flush(&mut shaped.streams, &mut self.touched);
            shaped.run(&mut self.touched)?;
        }
        let mut sims: Vec<Option<sim::Sim>> = self.sims.into_iter().map(Some).collect();
        let mut shaped: Vec<Option<sim::Sim>> =
            self.shaped.into_iter().map(|s| Some(s.sim)).collect();
        self.order
            .iter()
            .zip(&self.startup_shifts)
            .map(|(&(is_shaped, i), &shift)| {
                let slot = if is_shaped {
                    &mut shaped[i]
                } else {
                    &mut sims[i]
                };
                let mut prediction = slot.take().expect("each target once").finish()?;
                prediction.startup_shift_seconds = shift;
                Ok(prediction)
            })
            .collect()
    }
}
