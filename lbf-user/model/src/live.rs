//! Predictions while a capture runs: the capture's events feed the engine directly, so the
//! targets' predicted run times are known when the program ends (and, lower bounds, while it
//! runs) without writing and replaying a trace.
//!
//! A bad target or an inconsistent event stream stops the live prediction, never the capture:
//! the trace being written is worth more than the prediction, and the error is reported at
//! the end.

use crate::config::{ProcedureArgs, TargetArgs};
use crate::engine::{Engine, Prediction};
use crate::event::{Event, EventDetail, ProcInfo};
use crate::sink::EventSink;

/// An [`EventSink`] that runs the engine on the captured events for the targets given.
pub struct LivePredictor {
    targets: TargetArgs,
    /// Targets that change traced procedures (`--move`, `--zero`, `--speedup`).
    changes: ProcedureArgs,
    /// The procedures the capture follows, in the order of the events' shares.
    procedures: Vec<String>,
    procs: Vec<ProcInfo>,
    engine: Option<Engine>,
    /// Events pushed so far; the n-th event is `origin` n in engine errors.
    pushed: u64,
    /// Why live prediction stopped, if it did.
    failed: Option<String>,
}

impl LivePredictor {
    /// Predicts `targets` (resolved once the capture has announced its processes).
    pub fn new(targets: TargetArgs) -> Self {
        Self::with_procedures(targets, ProcedureArgs::default(), Vec::new())
    }

    /// Predicts `targets` and the procedure changes `changes` of the procedures the capture
    /// follows (`procedures`, in the order of the events' shares).
    pub fn with_procedures(
        targets: TargetArgs,
        changes: ProcedureArgs,
        procedures: Vec<String>,
    ) -> Self {
        LivePredictor {
            targets,
            changes,
            procedures,
            procs: Vec::new(),
            engine: None,
            pushed: 0,
            failed: None,
        }
    }

    /// One line per target: how far its prediction has got (a lower bound on the final one).
    pub fn progress(&self) -> Vec<String> {
        if let Some(why) = &self.failed {
            return vec![format!("live prediction stopped: {why}")];
        }
        let Some(engine) = &self.engine else {
            return vec!["no event yet".to_string()];
        };
        engine
            .progress()
            .into_iter()
            .map(|p| {
                format!(
                    "{}: at least {:.3} s predicted so far, {} of {} processes done",
                    p.target,
                    p.simulated_seconds,
                    p.exited,
                    self.procs.len()
                )
            })
            .collect()
    }

    /// The final predictions, once the capture has ended, or why there are none.
    pub fn finish(self) -> Result<Vec<Prediction>, String> {
        if let Some(why) = self.failed {
            return Err(why);
        }
        let engine = self
            .engine
            .ok_or_else(|| "no process sent an event".to_string())?;
        engine
            .finish()
            .map_err(|e| format!("{e} (\"at N\" is the N-th event of the capture)"))
    }

    /// The engine, built at the first event, when every process has been announced.
    fn engine(&mut self) -> Result<&mut Engine, String> {
        if self.engine.is_none() {
            let targets = self
                .targets
                .resolve(self.procs.len())
                .map_err(|e| e.to_string())?;
            let targets = self.changes.extend(targets, &self.procs);
            let engine = Engine::for_procs_with_procedures(&self.procs, &self.procedures, targets)
                .map_err(|e| e.to_string())?;
            self.engine = Some(engine);
        }
        Ok(self.engine.as_mut().expect("built above"))
    }
}

impl EventSink for LivePredictor {
    fn process(&mut self, info: &ProcInfo) {
        self.procs.push(info.clone());
    }

    fn event(&mut self, event: &Event) {
        self.event_with(event, &EventDetail::NONE);
    }

    fn event_with(&mut self, event: &Event, detail: &EventDetail) {
        if self.failed.is_some() {
            return;
        }
        self.pushed += 1;
        let origin = self.pushed;
        let result = self.engine().and_then(|engine| {
            engine
                .push_with_procedures(*event, &detail.procedures, origin)
                .map_err(|e| e.to_string())
        });
        if let Err(why) = result {
            self.failed = Some(why);
        }
    }
}
