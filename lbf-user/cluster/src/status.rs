//! What the builder knows, shared between its connections, its engine thread and its HTTP
//! endpoints: per-node state, the predictions so far, and counters; rendered as JSON
//! (`/results`, `/nodes`, the final report) and as Prometheus text (`/metrics`).

use super::streams::StreamView;
use lbf_model::engine::{Prediction, Progress};
use lbf_proto::Hello;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The builder's shared state.
pub struct Status {
    inner: Mutex<Inner>,
    /// Events journaled and acknowledged.
    pub events_received: AtomicU64,
    /// Events the engine has consumed.
    pub events_applied: AtomicU64,
    /// Events applied per second over the last second, as `f64` bits.
    rate: AtomicU64,
}

struct Inner {
    procs: usize,
    nodes: BTreeMap<String, Node>,
    targets: Vec<TargetView>,
    complete: bool,
    error: Option<String>,
    measured_seconds: Option<f64>,
    streams: StreamView,
}

struct Node {
    hello: Hello,
    gate: Arc<Gate>,
    connected: bool,
    last_seq: u64,
    events: u64,
    lost_events: u64,
    ended: bool,
    last_batch: Option<Instant>,
    /// Events of its processes held behind connections between hosts not matched yet.
    held_events: usize,
}

/// One target's state in `/results`.
#[derive(Clone, Serialize)]
pub struct TargetView {
    /// The target's name.
    pub target: String,
    /// Predicted time reached so far (a lower bound until `complete`).
    pub simulated_seconds: f64,
    /// Processes whose exit has been simulated.
    pub exited: usize,
    /// The prediction, once the job is complete.
    pub predicted_seconds: Option<f64>,
}

/// `/results` and the final report.
#[derive(Serialize)]
pub struct ResultsView {
    /// Every process exited, every node ended, and the engine finished.
    pub complete: bool,
    /// Why the engine stopped, if it did: the predictions are then meaningless.
    pub error: Option<String>,
    /// The job's process count.
    pub procs: usize,
    /// Events consumed by the engine.
    pub events: u64,
    /// Events the nodes lost (spool full, capture loss): nonzero makes predictions suspect.
    pub lost_events: u64,
    /// The measured run time (the longest any node reported), once complete.
    pub measured_seconds: Option<f64>,
    /// One entry per target.
    pub targets: Vec<TargetView>,
    /// The matching of TCP connections between hosts: what it holds and matched.
    pub streams: StreamView,
}

/// One node in `/nodes`.
#[derive(Serialize)]
pub struct NodeView {
    /// The node's name.
    pub node: String,
    /// Its host's name, cores and CPU model, as it reported them.
    pub hostname: String,
    /// Cores of its host.
    pub cores: u32,
    /// CPU model of its host.
    pub cpu_model: String,
    /// The global process ids it streams.
    pub procs: Vec<u32>,
    /// Whether a connection from it is open.
    pub connected: bool,
    /// Whether the builder holds its stream back (it is far ahead of the others).
    pub paused: bool,
    /// The last batch journaled.
    pub last_seq: u64,
    /// Events journaled.
    pub events: u64,
    /// Events it reported lost.
    pub lost_events: u64,
    /// Whether its final batch arrived.
    pub ended: bool,
    /// Seconds since its last batch arrived (lag when the node should be sending).
    pub seconds_since_last_batch: Option<f64>,
    /// Events of its processes held behind connections between hosts not matched yet.
    pub held_events: usize,
}

impl Status {
    /// The state of a job of `procs` processes before anything arrived.
    pub fn new(procs: usize, targets: &[String]) -> Self {
        Status {
            inner: Mutex::new(Inner {
                procs,
                nodes: BTreeMap::new(),
                targets: targets
                    .iter()
                    .map(|t| TargetView {
                        target: t.clone(),
                        simulated_seconds: 0.0,
                        exited: 0,
                        predicted_seconds: None,
                    })
                    .collect(),
                complete: false,
                error: None,
                measured_seconds: None,
                streams: StreamView::default(),
            }),
            events_received: AtomicU64::new(0),
            events_applied: AtomicU64::new(0),
            rate: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a node (new, or recovered from the journal); its hello's token is dropped.
    pub fn add_node(&self, hello: &Hello, last_seq: u64, ended: bool) {
        let mut hello = hello.clone();
        hello.token.clear();
        self.lock().nodes.insert(
            hello.node.clone(),
            Node {
                hello,
                gate: Arc::default(),
                connected: false,
                last_seq,
                events: 0,
                lost_events: 0,
                ended,
                last_batch: None,
                held_events: 0,
            },
        );
    }

    /// The hello a node registered with, if it did.
    pub fn hello(&self, node: &str) -> Option<Hello> {
        self.lock().nodes.get(node).map(|n| n.hello.clone())
    }

    /// The gate of a registered node's stream.
    pub fn gate(&self, node: &str) -> Option<Arc<Gate>> {
        self.lock().nodes.get(node).map(|n| n.gate.clone())
    }

    /// Which node streams process `proc`, if any.
    pub fn owner(&self, proc: u32) -> Option<String> {
        self.lock()
            .nodes
            .values()
            .find(|n| n.hello.procs.iter().any(|p| p.id == proc))
            .map(|n| n.hello.node.clone())
    }

    /// Marks a node connected or not.
    pub fn set_connected(&self, node: &str, connected: bool) {
        if let Some(n) = self.lock().nodes.get_mut(node) {
            n.connected = connected;
        }
    }

    /// Records a journaled batch of `events` events from `node`.
    pub fn batch(&self, node: &str, seq: u64, events: u64, lost_events: u64, ended: bool) {
        if let Some(n) = self.lock().nodes.get_mut(node) {
            n.last_seq = seq;
            n.events += events;
            n.lost_events = n.lost_events.max(lost_events);
            n.ended |= ended;
            n.last_batch = Some(Instant::now());
        }
        self.events_received.fetch_add(events, Ordering::Relaxed);
    }

    /// Number of nodes registered.
    pub fn node_count(&self) -> usize {
        self.lock().nodes.len()
    }

    /// Events lost, all nodes together.
    pub fn lost_events(&self) -> u64 {
        self.lock().nodes.values().map(|n| n.lost_events).sum()
    }

    /// Records the engine's progress.
    pub fn progress(&self, progress: &[Progress]) {
        let mut inner = self.lock();
        for (view, p) in inner.targets.iter_mut().zip(progress) {
            view.simulated_seconds = p.simulated_seconds;
            view.exited = p.exited;
        }
    }

    /// Records what the matching of connections between hosts holds, in all and per node.
    pub fn streams(&self, view: StreamView, held_by_node: &[(String, usize)]) {
        let mut inner = self.lock();
        inner.streams = view;
        for (node, held) in held_by_node {
            if let Some(n) = inner.nodes.get_mut(node) {
                n.held_events = *held;
            }
        }
    }

    /// Records that the engine failed.
    pub fn fail(&self, error: String) {
        self.lock().error.get_or_insert(error);
    }

    /// Records the final predictions.
    pub fn complete(&self, predictions: &[Prediction], measured_seconds: f64) {
        let mut inner = self.lock();
        for (view, p) in inner.targets.iter_mut().zip(predictions) {
            view.predicted_seconds = Some(p.predicted_seconds);
            view.simulated_seconds = p.predicted_seconds;
        }
        inner.complete = true;
        inner.measured_seconds = Some(measured_seconds);
    }

    /// Sets the events applied per second.
    pub fn set_rate(&self, per_second: f64) {
        self.rate.store(per_second.to_bits(), Ordering::Relaxed);
    }

    /// `/results`.
    pub fn results(&self) -> ResultsView {
        let events = self.events_applied.load(Ordering::Relaxed);
        let lost_events = self.lost_events();
        let inner = self.lock();
        ResultsView {
            complete: inner.complete,
            error: inner.error.clone(),
            procs: inner.procs,
            events,
            lost_events,
            measured_seconds: inner.measured_seconds,
            targets: inner.targets.clone(),
            streams: inner.streams,
        }
    }

    /// `/nodes`.
    pub fn nodes(&self) -> Vec<NodeView> {
        self.lock()
            .nodes
            .values()
            .map(|n| {
                let host = n.hello.host.clone().unwrap_or_default();
                NodeView {
                    node: n.hello.node.clone(),
                    hostname: host.hostname,
                    cores: host.cores,
                    cpu_model: host.cpu_model,
                    procs: n.hello.procs.iter().map(|p| p.id).collect(),
                    connected: n.connected,
                    paused: n.gate.is_paused(),
                    last_seq: n.last_seq,
                    events: n.events,
                    lost_events: n.lost_events,
                    ended: n.ended,
                    seconds_since_last_batch: n.last_batch.map(|t| t.elapsed().as_secs_f64()),
                    held_events: n.held_events,
                }
            })
            .collect()
    }

    /// `/metrics`, in the Prometheus text exposition format.
    pub fn metrics(&self) -> String {
        let received = self.events_received.load(Ordering::Relaxed);
        let applied = self.events_applied.load(Ordering::Relaxed);
        let rate = f64::from_bits(self.rate.load(Ordering::Relaxed));
        let nodes = self.nodes();
        let results = self.results();
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        let one = |v: f64| vec![(String::new(), v)];
        let per_node = |f: &dyn Fn(&NodeView) -> f64| -> Vec<(String, f64)> {
            nodes
                .iter()
                .map(|n| (format!("{{node=\"{}\"}}", n.node), f(n)))
                .collect()
        };
        let per_target = |f: &dyn Fn(&TargetView) -> Option<f64>| -> Vec<(String, f64)> {
            results
                .targets
                .iter()
                .filter_map(|t| Some((format!("{{target=\"{}\"}}", escape(&t.target)), f(t)?)))
                .collect()
        };
        metric(
            "lbf_events_received_total",
            "counter",
            "Events journaled and acknowledged.",
            &one(received as f64),
        );
        metric(
            "lbf_events_applied_total",
            "counter",
            "Events consumed by the engine.",
            &one(applied as f64),
        );
        metric(
            "lbf_events_per_second",
            "gauge",
            "Events consumed by the engine per second, over the last second.",
            &one(rate),
        );
        metric(
            "lbf_lag_events",
            "gauge",
            "Events acknowledged but not yet consumed by the engine.",
            &one(received.saturating_sub(applied) as f64),
        );
        metric(
            "lbf_node_events_total",
            "counter",
            "Events journaled per node.",
            &per_node(&|n| n.events as f64),
        );
        metric(
            "lbf_node_lost_events_total",
            "counter",
            "Events a node lost (spool full, capture loss).",
            &per_node(&|n| n.lost_events as f64),
        );
        metric(
            "lbf_node_connected",
            "gauge",
            "1 while a node's connection is open.",
            &per_node(&|n| f64::from(u8::from(n.connected))),
        );
        metric(
            "lbf_node_paused",
            "gauge",
            "1 while the builder stops reading a node until the others catch up.",
            &per_node(&|n| f64::from(u8::from(n.paused))),
        );
        metric(
            "lbf_node_seconds_since_last_batch",
            "gauge",
            "Seconds since a node's last batch arrived.",
            &per_node(&|n| n.seconds_since_last_batch.unwrap_or(f64::NAN)),
        );
        metric(
            "lbf_node_socket_held_events",
            "gauge",
            "Events of a node's processes held behind TCP connections between hosts not \
             matched yet.",
            &per_node(&|n| n.held_events as f64),
        );
        let streams = results.streams;
        metric(
            "lbf_socket_held_events",
            "gauge",
            "Events held behind TCP connections between hosts not matched yet.",
            &one(streams.held_events as f64),
        );
        metric(
            "lbf_socket_directions",
            "gauge",
            "Directions of TCP connections between hosts whose matching state is kept.",
            &one(streams.directions as f64),
        );
        metric(
            "lbf_socket_operations_total",
            "counter",
            "Sends and receives on TCP connections between hosts the nodes reported.",
            &one(streams.operations as f64),
        );
        metric(
            "lbf_socket_messages_total",
            "counter",
            "Messages matched on TCP connections between hosts.",
            &one(streams.messages as f64),
        );
        metric(
            "lbf_socket_unmatched_sends_total",
            "counter",
            "Sends on TCP connections between hosts with bytes no receive consumed.",
            &one(streams.unmatched_sends as f64),
        );
        metric(
            "lbf_socket_unmatched_receives_total",
            "counter",
            "Receives on TCP connections between hosts without a known send.",
            &one(streams.unmatched_receives as f64),
        );
        metric(
            "lbf_simulated_seconds",
            "gauge",
            "Predicted time reached so far per target (a lower bound until complete).",
            &per_target(&|t| Some(t.simulated_seconds)),
        );
        metric(
            "lbf_predicted_seconds",
            "gauge",
            "Final predicted run time per target.",
            &per_target(&|t| t.predicted_seconds),
        );
        metric(
            "lbf_complete",
            "gauge",
            "1 once the job is complete.",
            &one(f64::from(u8::from(results.complete))),
        );
        metric(
            "lbf_engine_failed",
            "gauge",
            "1 if the engine stopped on an inconsistent stream.",
            &one(f64::from(u8::from(results.error.is_some()))),
        );
        out
    }
}

/// Whether a node's connection may read its next batch. The engine thread closes it while
/// the node's processes have many events queued in the engine (the node is far ahead of the
/// others), which bounds the builder's memory: TCP then holds the node back, and the node's
/// spool absorbs the wait.
#[derive(Default)]
pub struct Gate {
    paused: AtomicBool,
    opened: Notify,
}

impl Gate {
    /// Closes (`paused`) or opens the gate.
    pub fn set(&self, paused: bool) {
        if self.paused.swap(paused, Ordering::Relaxed) && !paused {
            self.opened.notify_waiters();
        }
    }

    /// Whether the gate is closed.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Returns once the gate is open.
    pub async fn wait_open(&self) {
        while self.is_paused() {
            // The timeout covers an opening between the check and the wait.
            let _ = tokio::time::timeout(Duration::from_millis(50), self.opened.notified()).await;
        }
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
