//! The builder's engine thread: consumes journaled batches in arrival order, matches the
//! connections between hosts they report ([`super::streams`]), feeds the online engine, writes
//! the merged trace, and completes the job once every process has exited and every node has
//! sent its last batch.

use super::status::{Gate, Status};
use super::streams::{Ready, StreamMatcher};
use super::wire::NodeEvent;
use anyhow::{Context, Result};
use lbf_capture::sockets::channels::EndClosed;
use lbf_model::engine::{Engine, Prediction};
use lbf_model::event::{EventKind, ProcedureCpu};
use lbf_model::report::{add_teardown, table};
use lbf_model::target::Target;
use lbf_model::trace::{Header, Summary, TraceWriter};
use lbf_proto::{End, Hello};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, watch};

/// One journaled batch for the engine.
pub struct Work {
    /// The node it came from.
    pub node: String,
    /// Its events.
    pub events: Vec<NodeEvent>,
    /// The CPU each event's process spent in the job's procedures since its previous event:
    /// one per event, or none when the job follows no procedure.
    pub procedures: Vec<ProcedureCpu>,
    /// The ends of connections between hosts it says closed.
    pub closed: Vec<EndClosed>,
    /// How the node's run ended, on its final batch.
    pub end: Option<End>,
}

/// How the engine thread ends: the final predictions, with the measured run and losses.
pub struct Outcome {
    /// One per target, in configuration order.
    pub predictions: Vec<Prediction>,
    /// The run as measured, and the events lost.
    pub summary: Summary,
}

/// Events of one node's processes the engine (and the matching of connections between hosts)
/// may hold before the builder stops reading from that node (about 40 bytes each).
const NODE_QUEUE_LIMIT: usize = 1 << 18;
/// How often the engine thread, holding a live job's first batches, looks for the hellos it
/// waits for.
const HELLO_POLL: Duration = Duration::from_millis(20);

/// What the engine thread needs.
pub struct Applier {
    /// The job's trace header (its processes, the procedures its nodes follow).
    pub header: Header,
    /// The targets.
    pub targets: Vec<Target>,
    /// Where to write the merged trace, if anywhere.
    pub merged_trace: Option<PathBuf>,
    /// Where to write the final report (JSON), if anywhere.
    pub report: Option<PathBuf>,
    /// Shared state to update.
    pub status: Arc<Status>,
    /// The nodes of the job (the configuration's tokens).
    pub nodes: Vec<String>,
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
        let mut header = self.header.clone();
        let mut engine = Some(Engine::with_procedures(
            procs,
            &header.procedures,
            self.targets.clone(),
        )?);
        let part = self.merged_trace.as_deref().map(part_path);
        let mut trace = match &part {
            Some(path) => Some(
                TraceWriter::create(path, &header)
                    .with_context(|| format!("creating the merged trace {}", path.display()))?,
            ),
            None => None,
        };
        let mut exited = vec![false; procs];
        let mut remaining = procs;
        let mut ended = BTreeSet::new();
        let mut clocks = RunClocks::default();
        let mut origin = 0u64;
        let mut gates: BTreeMap<String, (Vec<u32>, Arc<Gate>)> = BTreeMap::new();
        // Whether the start-up model placed every process's start (see below).
        let mut modelled_starts = false;
        let mut streams = StreamMatcher::new();
        let mut addressed = BTreeSet::new();
        let mut ready = Ready::default();
        let mut waiting = VecDeque::new();
        while let Some(w) = self.next_work(&mut work, &mut waiting, clocks.origin.is_some()) {
            let Some(e) = engine.as_mut() else {
                continue;
            };
            if !gates.contains_key(&w.node) {
                let hello = self.status.hello(&w.node).unwrap_or_default();
                if hello.run_start_unix_ns > 0 && clocks.origin.is_none() {
                    clocks.origin = self.live_origin();
                }
                // At the first node, with every node's hello at hand (a live job waits for
                // them), every node's processes are described and start where the start-up
                // model puts them on each target, as `lbf-gag predict` does from the merged
                // trace; else each node's processes start as measured when its first batch
                // comes.
                if gates.is_empty() {
                    let hellos: Vec<Hello> = self
                        .nodes
                        .iter()
                        .filter_map(|n| self.status.hello(n))
                        .collect();
                    if hellos.len() == self.nodes.len() {
                        for h in &hellos {
                            describe(&mut header, h, clocks.shift(h));
                        }
                        e.set_starts(&header.procs);
                        modelled_starts = true;
                    }
                }
                if !modelled_starts {
                    describe(&mut header, &hello, clocks.shift(&hello));
                    for p in &hello.procs {
                        let start_ns = header.procs[p.id as usize].start_ns;
                        if start_ns > 0 {
                            e.set_start(p.id, start_ns as f64 * 1e-9);
                        }
                    }
                }
                let ids = hello.procs.iter().map(|p| p.id).collect();
                if let Some(gate) = self.status.gate(&w.node) {
                    gates.insert(w.node.clone(), (ids, gate));
                }
                // Which node holds a connection's end: every node of a live job has said
                // hello by now (see `live_origin`).
                for node in &self.nodes {
                    if let Some(h) = self.status.hello(node) {
                        if addressed.insert(node.clone()) {
                            streams.add_node(node, &addresses(&h.addresses));
                        }
                    }
                }
            }
            let held_before = streams.view().held_events;
            let pushed = w.events.len();
            for (i, event) in w.events.into_iter().enumerate() {
                let shares = w.procedures.get(i).unwrap_or(&ProcedureCpu::NONE);
                streams.push(event, shares, &mut ready);
            }
            for end in w.closed {
                streams.closed(end, &mut ready);
            }
            if let Some(end) = &w.end {
                streams.node_ended(&w.node, &mut ready);
                let hello = self.status.hello(&w.node).unwrap_or_default();
                clocks.end(&hello, end);
                ended.insert(w.node.clone());
            }
            if ended.len() >= self.status.node_count() {
                // Every node's stream is complete: what is still open stays unmatched.
                streams.finish(&mut ready);
            }
            for (event, shares) in ready.drain() {
                origin += 1;
                if let Some(t) = trace.as_mut() {
                    t.write_event_with(&event, &shares, None)
                        .context("writing the merged trace")?;
                }
                if let Err(err) = e.push_with_procedures(event, &shares, origin) {
                    self.status.fail(format!(
                        "{err} (\"at N\" is the N-th event applied; line N + 1 of the merged \
                         trace)"
                    ));
                }
                if event.kind == EventKind::Exit && !exited[event.proc as usize] {
                    exited[event.proc as usize] = true;
                    remaining -= 1;
                }
            }
            // Counted as the nodes sent them: what entered and is not held any more.
            let view = streams.view();
            let applied = (pushed + held_before).saturating_sub(view.held_events);
            self.status
                .events_applied
                .fetch_add(applied as u64, Ordering::Relaxed);
            self.status.progress(&e.progress());
            let awaited = streams.awaited(|p| e.is_starved(p));
            let mut held_by_node = Vec::with_capacity(gates.len());
            for (node, (procs, gate)) in &gates {
                gate.set(!awaited.contains(node) && holds_back(e, &streams, procs));
                let held = procs.iter().map(|&p| streams.held_of(p)).sum();
                held_by_node.push((node.clone(), held));
            }
            if view.operations > 0 {
                self.status.streams(view, &held_by_node);
            }
            if remaining > 0 || ended.len() < self.status.node_count() {
                continue;
            }
            let summary = Summary {
                measured_seconds: clocks.measured_seconds(),
                lost_events: self.status.lost_events(),
                teardown_seconds: clocks.teardown_seconds(),
                gaps: Vec::new(),
            };
            for (_, gate) in gates.values() {
                gate.set(false);
            }
            let predictions = match engine.take().expect("checked").finish() {
                Ok(mut p) => {
                    add_teardown(&mut p, Some(&summary));
                    p
                }
                Err(err) => {
                    self.status.fail(err.to_string());
                    Vec::new()
                }
            };
            self.status.complete(&predictions, summary.measured_seconds);
            if let (Some(t), Some(path), Some(part)) = (trace.take(), &self.merged_trace, &part) {
                t.finish(&summary)
                    .and_then(|_| write_merged(path, part, &header))
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

impl Applier {
    /// The next batch to apply, `None` once the channel is closed. A live job's batches wait
    /// in `waiting` (in arrival order, their nodes' reading paused) until every node has said
    /// hello (see [`Applier::live_origin`]; `origin_known`: it is settled). The channel is
    /// drained all the same: at the builder's start the journal's replay sends into it before
    /// the builder listens, so blocking here would keep a node that had not said hello before
    /// a restart from ever saying it, and the builder from ever starting.
    fn next_work(
        &self,
        work: &mut mpsc::Receiver<Work>,
        waiting: &mut VecDeque<Work>,
        origin_known: bool,
    ) -> Option<Work> {
        loop {
            let settled = origin_known || self.live_origin().is_some();
            if settled {
                if let Some(w) = waiting.pop_front() {
                    return Some(w);
                }
            }
            let w = if waiting.is_empty() {
                work.blocking_recv()?
            } else {
                match work.try_recv() {
                    Ok(w) => w,
                    Err(TryRecvError::Empty) => {
                        std::thread::sleep(HELLO_POLL);
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => return None,
                }
            };
            let live = self
                .status
                .hello(&w.node)
                .is_some_and(|h| h.run_start_unix_ns > 0);
            if settled || (!live && waiting.is_empty()) {
                return Some(w);
            }
            if waiting.is_empty() {
                eprintln!(
                    "lbf-gag: a live job: waiting for every node's hello to put its hosts on \
                     one time line"
                );
            }
            if let Some(gate) = self.status.gate(&w.node) {
                gate.set(true);
            }
            waiting.push_back(w);
        }
    }

    /// The time line of a live job: the earliest run start of its nodes, once every node of
    /// the job has said hello (nodes say hello once their ranks are past `MPI_Init`, which
    /// MPI's start-up makes nearly simultaneous); `None` until then, while no node's events
    /// are applied (see [`Applier::next_work`]).
    fn live_origin(&self) -> Option<u64> {
        let starts: Vec<u64> = self
            .nodes
            .iter()
            .filter_map(|n| self.status.hello(n))
            .map(|h| h.run_start_unix_ns)
            .collect();
        (starts.len() == self.nodes.len())
            .then(|| starts.into_iter().filter(|&s| s > 0).min().unwrap_or(0))
    }
}

/// Puts what node `hello` says of its processes into `header`: their host, their start on
/// the job's time line (the node's start moved by `shift`), their start-up's figures.
fn describe(header: &mut Header, hello: &Hello, shift: u64) {
    let host = hello.host.clone().unwrap_or_default().hostname;
    for p in &hello.procs {
        let Some(info) = header.procs.get_mut(p.id as usize) else {
            continue;
        };
        info.host.clone_from(&host);
        info.start_ns = p.start_ns + shift;
        super::source::startup_figures_into(p, info);
    }
}

/// The job's time line across nodes. Live nodes say when their runs started and ended on the
/// wall clock; the job runs from the earliest start to the latest end, and its teardown is
/// from the last `MPI_Finalize` entry on any node to that end. Replayed nodes (no wall-clock
/// start) share the trace's time line: the longest measured run, no teardown.
#[derive(Default)]
struct RunClocks {
    /// The earliest live run start (ns since the Unix epoch), once known.
    origin: Option<u64>,
    /// The latest run end, in seconds after the origin (or of a replayed run).
    end: f64,
    /// The latest `MPI_Finalize` entry, in seconds after the origin.
    last_finalize: Option<f64>,
}

impl RunClocks {
    /// What to add to the start times `hello` gives (relative to its node's run start) to
    /// place them after the origin.
    fn shift(&self, hello: &Hello) -> u64 {
        match self.origin {
            Some(origin) if hello.run_start_unix_ns > 0 => {
                hello.run_start_unix_ns.saturating_sub(origin)
            }
            _ => 0,
        }
    }

    /// Notes how the run of the node of `hello` ended.
    fn end(&mut self, hello: &Hello, end: &End) {
        let end_s = self.shift(hello) as f64 * 1e-9 + end.measured_seconds;
        self.end = self.end.max(end_s);
        if self.origin.is_some() && end.teardown_seconds > 0.0 {
            let finalize = end_s - end.teardown_seconds;
            self.last_finalize = Some(self.last_finalize.map_or(finalize, |f| f.max(finalize)));
        }
    }

    fn measured_seconds(&self) -> f64 {
        self.end
    }

    fn teardown_seconds(&self) -> f64 {
        self.last_finalize.map_or(0.0, |f| (self.end - f).max(0.0))
    }
}

/// Where the merged trace grows until the job completes: its header cannot be final before
/// every node has announced its processes' hosts and start times.
fn part_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".part");
    PathBuf::from(name)
}

/// Writes the merged trace at `path`: `header`, then the body of the finished `part`, which
/// it removes.
fn write_merged(path: &Path, part: &Path, header: &Header) -> std::io::Result<()> {
    let mut input = BufReader::new(File::open(part)?);
    input.read_until(b'\n', &mut Vec::new())?;
    let mut out = BufWriter::new(File::create(path)?);
    TraceWriter::new(&mut out, header)?.flush()?;
    std::io::copy(&mut input, &mut out)?;
    out.flush()?;
    std::fs::remove_file(part)
}

/// Whether to stop reading the stream of the node of `procs`: when its processes hold more
/// than [`NODE_QUEUE_LIMIT`] events in the engine and in `streams`, and none of them is
/// starved for want of its node's next events (the engine may need them to go on; one
/// starved behind a connection's match waits for another node, which the caller keeps
/// reading).
fn holds_back(engine: &Engine, streams: &StreamMatcher, procs: &[u32]) -> bool {
    let queued: usize = procs
        .iter()
        .map(|&p| engine.queued_events_of(p) + streams.held_of(p))
        .sum();
    let starved = |p: u32| engine.is_starved(p) && streams.held_of(p) == 0;
    queued > NODE_QUEUE_LIMIT && !procs.iter().any(|&p| starved(p))
}

/// A hello's addresses (the builder admits only hellos whose addresses are 4 or 16 bytes).
fn addresses(raw: &[Vec<u8>]) -> Vec<IpAddr> {
    raw.iter()
        .filter_map(|a| match a.len() {
            4 => Some(IpAddr::from(<[u8; 4]>::try_from(a.as_slice()).ok()?)),
            16 => Some(IpAddr::from(<[u8; 16]>::try_from(a.as_slice()).ok()?)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lbf_model::event::{Event, ProcInfo};
    use lbf_model::target::{Network, Node};
    use lbf_proto::Proc;
    use std::time::Instant;

    /// A live node's hello for process `id`.
    fn hello(node: &str, id: u32) -> Hello {
        Hello {
            node: node.into(),
            procs: vec![Proc {
                id,
                name: format!("rank {id}"),
                ..Proc::default()
            }],
            run_start_unix_ns: 1_000_000_000,
            ..Hello::default()
        }
    }

    /// A target putting processes 0 and 1 on one node of `cores` cores.
    fn one_node(name: &str, cores: u32) -> Target {
        Target {
            name: name.into(),
            nodes: vec![Node {
                procs: vec![0, 1],
                cores,
                speed: 1.0,
            }],
            network: Network::default(),
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
            procedures: Vec::new(),
        }
    }

    /// The engine thread of a job of processes 0 and 1 on nodes `a` and `b`, predicting
    /// `target`, writing the merged trace to `merged_trace` if given.
    fn applier(status: Arc<Status>, target: Target, merged_trace: Option<PathBuf>) -> Applier {
        Applier {
            header: Header {
                procs: (0..2)
                    .map(|id| ProcInfo {
                        id,
                        ..ProcInfo::default()
                    })
                    .collect(),
                source: None,
                procedures: Vec::new(),
            },
            targets: vec![target],
            merged_trace,
            report: None,
            status,
            nodes: vec!["a".into(), "b".into()],
        }
    }

    /// A batch of `node` with one event of `kind` for `proc`, the node's last if `end`.
    fn batch(node: &str, proc: u32, kind: EventKind, end: bool) -> Work {
        Work {
            node: node.into(),
            events: vec![NodeEvent::Event(Event {
                proc,
                cpu_ns: 1_000_000,
                kind,
            })],
            procedures: Vec::new(),
            closed: Vec::new(),
            end: end.then(End::default),
        }
    }

    /// The journal's replay at a restarted builder's start sends a node's batches before the
    /// builder listens, so before a node that had not said hello yet can. The engine thread
    /// must take them all the same (holding them until that hello), or the replay, and the
    /// builder with it, would wait forever on the full channel.
    #[test]
    fn batches_sent_before_a_node_says_hello_do_not_block_the_sender() {
        let status = Arc::new(Status::new(2, &["one".to_string()]));
        status.add_node(&hello("a", 0), 0, false);
        let applier = applier(status.clone(), one_node("one", 2), None);
        let (work, rx) = mpsc::channel(4);
        let (done, mut outcome) = watch::channel(None);
        let engine = std::thread::spawn(move || applier.run(rx, done));
        // Many more batches than the channel holds, as a replay sends them.
        let replay = std::thread::spawn(move || {
            for _ in 0..40 {
                work.blocking_send(batch("a", 0, EventKind::Keepalive, false))
                    .unwrap();
            }
            work.blocking_send(batch("a", 0, EventKind::Exit, true))
                .unwrap();
            work
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !replay.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the replay is stuck: the engine thread takes no batch before every hello"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let work = replay.join().unwrap();
        assert!(outcome.borrow().is_none(), "completed without node b");
        status.add_node(&hello("b", 1), 0, false);
        work.blocking_send(batch("b", 1, EventKind::Exit, true))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while outcome.borrow_and_update().is_none() {
            assert!(Instant::now() < deadline, "the job never completed");
            std::thread::sleep(Duration::from_millis(10));
        }
        let result = outcome.borrow().clone().unwrap();
        // Rank 0 ran 41 ms of CPU on its own core.
        let predicted = result.predictions[0].predicted_seconds;
        assert!((predicted - 0.041).abs() < 1e-9, "{predicted}");
        drop(work);
        engine.join().unwrap().unwrap();
    }

    /// Two live hosts, one rank each with 60 ms of start-up CPU on its one CPU, predicted on
    /// one node of one core: the start-up model, from both hellos' figures, starts both ranks
    /// 60 ms later there (120 ms of start-up CPU on one core), as `lbf-gag predict` does from
    /// the merged trace's header.
    #[test]
    fn the_start_up_model_moves_the_starts_by_every_hosts_figures() {
        let dir = std::env::temp_dir().join(format!("lbf-apply-startup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let merged = dir.join("merged.jsonl");
        let status = Arc::new(Status::new(2, &["one core".to_string()]));
        for (node, id) in [("a", 0), ("b", 1)] {
            let mut h = hello(node, id);
            h.host = Some(lbf_proto::HostFacts {
                hostname: node.into(),
                ..Default::default()
            });
            h.procs[0] = Proc {
                start_ns: 100_000_000,
                startup_cpu_ns: 60_000_000,
                cpus: "0".into(),
                ..h.procs[0].clone()
            };
            status.add_node(&h, 0, false);
        }
        let target = one_node("one core", 1);
        let applier = applier(status, target.clone(), Some(merged.clone()));
        let (work, rx) = mpsc::channel(4);
        let (done, outcome) = watch::channel(None);
        let engine = std::thread::spawn(move || applier.run(rx, done));
        work.blocking_send(batch("a", 0, EventKind::Exit, true))
            .unwrap();
        work.blocking_send(batch("b", 1, EventKind::Exit, true))
            .unwrap();
        drop(work);
        engine.join().unwrap().unwrap();
        let result = outcome.borrow().clone().expect("the job completed");
        let p = &result.predictions[0];
        assert!((p.startup_shift_seconds - 0.060).abs() < 1e-9, "{p:?}");
        // Both start at 160 ms and share the core for their 1 ms each.
        assert!((p.predicted_seconds - 0.162).abs() < 1e-9, "{p:?}");
        let reader = lbf_model::trace::TraceReader::open(&merged).unwrap();
        let again = Engine::for_procs(&reader.header().procs, vec![target]).unwrap();
        assert_eq!(again.startup_shifts(), [p.startup_shift_seconds]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
