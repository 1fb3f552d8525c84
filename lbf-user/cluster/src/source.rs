//! Where a node's events come from: a live capture of local processes (the probe and capture
//! layers, as `lbf-trace` uses them), or the replay of some processes of a trace file or of a
//! generated synthetic trace (tests, benchmarks, demos). Both hand the same [`Chunk`]s to [`super::node::run`].

use super::node::Chunk;
use super::wire::{BatchBuilder, BATCH_EVENTS};
use anyhow::{bail, Context, Result};
use lbf_model::event::{Event, ProcId, ProcInfo, ProcedureCpu};
#[cfg(feature = "live")]
use lbf_model::stream::{EndClosed, StreamOp};
use lbf_model::trace::{synthetic, TraceReader};
use lbf_proto::Proc;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Packs events into batches and hands full ones to the node, waiting when it is busy.
pub(crate) struct Batcher {
    builder: BatchBuilder,
    tx: mpsc::Sender<Chunk>,
    /// When the oldest event of the batch being filled arrived.
    since: Instant,
    /// Set once the node has gone (it failed): the source then stops.
    closed: bool,
}

impl Batcher {
    /// Batches for a node that follows `procedures` procedures.
    pub(crate) fn new(tx: mpsc::Sender<Chunk>, procedures: usize) -> Self {
        Batcher {
            builder: BatchBuilder::new(procedures),
            tx,
            since: Instant::now(),
            closed: false,
        }
    }

    /// Packs an event and its process's CPU in the followed procedures since its previous.
    pub(crate) fn push(&mut self, event: &Event, shares: &ProcedureCpu) {
        self.started_batch();
        self.builder.push(event, shares);
        self.flush_if_full();
    }

    /// Packs a send or receive on a connection between hosts.
    #[cfg(feature = "live")]
    pub(crate) fn push_stream(
        &mut self,
        proc: ProcId,
        cpu_ns: u64,
        shares: &ProcedureCpu,
        op: &StreamOp,
    ) {
        self.started_batch();
        self.builder.push_stream(proc, cpu_ns, shares, op);
        self.flush_if_full();
    }

    /// Packs the close of an end of a connection between hosts.
    #[cfg(feature = "live")]
    pub(crate) fn push_closed(&mut self, end: &EndClosed) {
        self.started_batch();
        self.builder.push_closed(end);
    }

    /// Notes when a batch's first item arrived.
    fn started_batch(&mut self) {
        if self.builder.is_empty() {
            self.since = Instant::now();
        }
    }

    fn flush_if_full(&mut self) {
        if self.builder.len() >= BATCH_EVENTS {
            self.flush();
        }
    }

    /// Hands over the partial batch once it is a tenth of a second old, so that the builder
    /// is never far behind a slow stream (a live capture, a paced replay).
    pub(crate) fn flush_if_old(&mut self) {
        if self.since.elapsed() > Duration::from_millis(100) {
            self.flush();
        }
    }

    /// Hands over the partial batch.
    fn flush(&mut self) {
        if !self.builder.is_empty() && !self.closed {
            self.closed = self
                .tx
                .blocking_send(Chunk::Events(Box::new(self.builder.take())))
                .is_err();
        }
    }

    /// Tells the node when the run started, on the wall clock.
    #[cfg(feature = "live")]
    pub(crate) fn origin(&mut self, run_start_unix_ns: u64) {
        if !self.closed {
            let chunk = Chunk::Origin { run_start_unix_ns };
            self.closed = self.tx.blocking_send(chunk).is_err();
        }
    }

    /// Tells the node that process `proc` started, as `info` (its header entry) says: when,
    /// and its start-up's figures.
    #[cfg(feature = "live")]
    pub(crate) fn started(&mut self, proc: ProcId, info: &ProcInfo) {
        if !self.closed {
            let chunk = Chunk::Started(proc_of(proc, info));
            self.closed = self.tx.blocking_send(chunk).is_err();
        }
    }

    /// Hands over what is left, then the end.
    pub(crate) fn end(mut self, measured_seconds: f64, teardown_seconds: f64, lost_events: u64) {
        self.flush();
        let _ = self.tx.blocking_send(Chunk::End {
            measured_seconds,
            teardown_seconds,
            lost_events,
        });
    }
}

/// The hello's entry ([`Proc`]) of process `id` as a trace header describes it (`info`): its
/// name, its start, and its start-up's figures, which the builder's start-up model uses
/// (`lbf_model::startup`).
pub fn proc_of(id: ProcId, info: &ProcInfo) -> Proc {
    Proc {
        id,
        name: info.name.clone(),
        start_ns: info.start_ns,
        startup_cpu_ns: info.startup_cpu_ns,
        cpus: info.cpus.clone(),
        cpu_quota_milli: info.cpu_quota_milli,
        quota_cgroup: info.quota_cgroup.clone(),
    }
}

/// What a hello says of process `p` into its trace header entry `info` (whose name and host
/// the builder sets): its start-up's figures. The start itself is on the builder's time line
/// (see `apply`).
pub fn startup_figures_into(p: &Proc, info: &mut ProcInfo) {
    info.startup_cpu_ns = p.startup_cpu_ns;
    info.cpus.clone_from(&p.cpus);
    info.cpu_quota_milli = p.cpu_quota_milli;
    info.quota_cgroup.clone_from(&p.quota_cgroup);
}

/// The processes `ids` of the trace at `path`, as the trace's header names them, and the
/// procedures the trace follows (which a replay of it follows too).
pub fn replay_procs(path: &Path, ids: &BTreeSet<ProcId>) -> Result<(Vec<ProcInfo>, Vec<String>)> {
    let reader = TraceReader::open(path).with_context(|| path.display().to_string())?;
    let procs = &reader.header().procs;
    if let Some(id) = ids.iter().find(|&&id| id as usize >= procs.len()) {
        bail!(
            "{}: the trace has {} processes (ids 0 to {}); there is no process {id}",
            path.display(),
            procs.len(),
            procs.len().saturating_sub(1)
        );
    }
    let infos = ids.iter().map(|&id| procs[id as usize].clone()).collect();
    Ok((infos, reader.header().procedures.clone()))
}

/// Streams the events of processes `ids` from the trace at `path`, with their shares of the
/// trace's procedures, at most `rate` events per second if given; the end carries the
/// trace's measured seconds.
pub fn replay(
    path: &Path,
    ids: &BTreeSet<ProcId>,
    rate: Option<f64>,
    tx: mpsc::Sender<Chunk>,
) -> Result<()> {
    let mut reader = TraceReader::open(path).with_context(|| path.display().to_string())?;
    let procedures = reader.header().procedures.len();
    let events = std::iter::from_fn(|| reader.next_event().transpose());
    let events = events.map(|e| {
        e.map(|e| (e.event, e.procedures))
            .with_context(|| path.display().to_string())
    });
    let mut out = Batcher::new(tx, procedures);
    if stream(events, ids, rate, &mut out)? {
        let measured = reader.summary().map_or(0.0, |s| s.measured_seconds);
        out.end(measured, 0.0, 0);
    }
    Ok(())
}

/// Streams the events of processes `ids` of the synthetic trace `config` describes (see
/// [`synthetic`](mod@lbf_model::trace::synthetic)), generated on the fly: the benchmark's source, no file needed.
pub fn synthetic(
    config: synthetic::Config,
    ids: &BTreeSet<ProcId>,
    rate: Option<f64>,
    tx: mpsc::Sender<Chunk>,
) -> Result<()> {
    let mut out = Batcher::new(tx, 0);
    let events = synthetic::events(config).map(|e| Ok((e, ProcedureCpu::NONE)));
    if stream(events, ids, rate, &mut out)? {
        out.end(0.0, 0.0, 0);
    }
    Ok(())
}

/// Hands `out` the events of processes `ids` (each with its shares of the procedures),
/// paced to `rate` events per second if given. False if the node went away before the end.
fn stream(
    events: impl Iterator<Item = Result<(Event, ProcedureCpu)>>,
    ids: &BTreeSet<ProcId>,
    rate: Option<f64>,
    out: &mut Batcher,
) -> Result<bool> {
    let start = Instant::now();
    let mut sent = 0u64;
    // Paced every millisecond's worth of events, each batch handed over within a tenth of
    // a second.
    let every = rate.map_or(1, |r| (r / 1000.0).max(1.0) as u64);
    for event in events {
        let (event, shares) = event?;
        if !ids.contains(&event.proc) {
            continue;
        }
        out.push(&event, &shares);
        sent += 1;
        if let Some(rate) = rate.filter(|_| sent.is_multiple_of(every)) {
            out.flush_if_old();
            let due = Duration::from_secs_f64(sent as f64 / rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        if out.closed {
            return Ok(false);
        }
    }
    Ok(true)
}
