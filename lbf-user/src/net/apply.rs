//! The builder's engine thread: consumes journaled batches in arrival order, feeds the online
//! engine, writes the merged trace, and completes the job once every process has exited and
//! every node has sent its last batch.

use super::status::Status;
use crate::engine::{Engine, Prediction};
use crate::event::{Event, EventKind};
use crate::report::table;
use crate::target::Target;
use crate::trace::{Header, Summary, TraceWriter};
use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// One journaled batch for the engine.
pub struct Work {
    /// The node it came from.
    pub node: String,
    /// Its events.
    pub events: Vec<Event>,
    /// The node's measured seconds, on its final batch.
    pub end: Option<f64>,
}

/// How the engine thread ends: the final predictions, with the measured run and losses.
pub struct Outcome {
    /// One per target, in configuration order.
    pub predictions: Vec<Prediction>,
    /// The run as measured, and the events lost.
    pub summary: Summary,
}

/// What the engine thread needs.
pub struct Applier {
    /// The job's trace header (its processes).
    pub header: Header,
    /// The targets.
    pub targets: Vec<Target>,
    /// Where to write the merged trace, if anywhere.
    pub merged_trace: Option<PathBuf>,
    /// Where to write the final report (JSON), if anywhere.
    pub report: Option<PathBuf>,
    /// Shared state to update.
    pub status: Arc<Status>,
}

impl Applier {
    /// Runs the engine over everything `work` delivers until the job completes (then sends
    /// the outcome on `done`) or the channel closes. Returns an error only for files it
    /// cannot write; an inconsistent stream is recorded in the status instead.
    pub fn run(
        self,
        mut work: mpsc::Receiver<Work>,
        done: watch::Sender<Option<Arc<Outcome>>>,
    ) -> Result<()> {
        let procs = self.header.procs.len();
        let mut engine = Some(Engine::new(procs, self.targets)?);
        let mut trace = match &self.merged_trace {
            Some(path) => Some(
                TraceWriter::create(path, &self.header)
                    .with_context(|| format!("creating the merged trace {}", path.display()))?,
            ),
            None => None,
        };
        let mut exited = vec![false; procs];
        let mut remaining = procs;
        let mut ended = BTreeSet::new();
        let mut measured = 0.0f64;
        let mut origin = 0u64;
        while let Some(w) = work.blocking_recv() {
            let Some(e) = engine.as_mut() else {
                continue;
            };
            for event in &w.events {
                origin += 1;
                if let Some(t) = trace.as_mut() {
                    t.write_event(event).context("writing the merged trace")?;
                }
                if let Err(err) = e.push(*event, origin) {
                    self.status.fail(format!(
                        "{err} (\"at N\" is the N-th event received; line N + 1 of the \
                         merged trace)"
                    ));
                }
                if event.kind == EventKind::Exit && !exited[event.proc as usize] {
                    exited[event.proc as usize] = true;
                    remaining -= 1;
                }
            }
            self.status
                .events_applied
                .fetch_add(w.events.len() as u64, Ordering::Relaxed);
            self.status.progress(&e.progress());
            if let Some(m) = w.end {
                measured = measured.max(m);
                ended.insert(w.node);
            }
            if remaining > 0 || ended.len() < self.status.node_count() {
                continue;
            }
            let summary = Summary {
                measured_seconds: measured,
                lost_events: self.status.lost_events(),
            };
            let predictions = match engine.take().expect("checked").finish() {
                Ok(p) => p,
                Err(err) => {
                    self.status.fail(err.to_string());
                    Vec::new()
                }
            };
            self.status.complete(&predictions, measured);
            if let (Some(t), Some(path)) = (trace.take(), &self.merged_trace) {
                t.finish(&summary)
                    .with_context(|| format!("finishing the merged trace {}", path.display()))?;
            }
            if let Some(path) = &self.report {
                let json = serde_json::to_string_pretty(&self.status.results())?;
                std::fs::write(path, json + "\n")
                    .with_context(|| format!("writing the report {}", path.display()))?;
            }
            print!("{}", table(&predictions, Some(&summary)));
            let _ = done.send(Some(Arc::new(Outcome {
                predictions,
                summary,
            })));
        }
        if let Some(t) = trace.as_mut() {
            t.flush().context("writing the merged trace")?;
        }
        Ok(())
    }
}
