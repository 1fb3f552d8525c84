//! The predicted schedule of one target as a Chrome/Perfetto trace-event JSON file, streamed to
//! disk while the engine runs (memory does not grow with the schedule).
//!
//! Layout: one Perfetto process per node, one thread per traced process; complete events
//! (`"ph":"X"`) named `running` (with the process's `share` of the node in `args`) and
//! `waiting`; instant events at each reported event; a flow arrow (`"ph":"s"` to `"ph":"f"`)
//! per message. Timestamps are microseconds of predicted time.

use crate::engine::ScheduleSink;
use crate::event::{EventKind, ProcId, ProcInfo};
use crate::target::Target;
use crate::trace::kind_name;
use serde_json::json;
use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::rc::Rc;

/// A timeline being written. Hand [`Timeline::sink`] to the engine's `set_schedule_sink`, and
/// call [`Timeline::finish`] once the engine has finished (and so dropped the sink).
pub struct Timeline<W: Write> {
    shared: Rc<RefCell<Writer<W>>>,
}

/// The state the timeline and the engine's sink share.
struct Writer<W: Write> {
    out: BufWriter<W>,
    /// The node of each process, for the ends of message arrows.
    node_of: Vec<usize>,
    next_flow: u64,
    /// The first write error; later writes are skipped and `finish` reports it.
    error: Option<io::Error>,
}

impl Timeline<File> {
    /// Creates the file at `path` for the schedule of `target`, whose processes are `procs`.
    pub fn create(path: &Path, target: &Target, procs: &[ProcInfo]) -> io::Result<Self> {
        Timeline::new(File::create(path)?, target, procs)
    }
}

impl<W: Write + 'static> Timeline<W> {
    /// Starts the timeline of `target` on `out`: writes the opening and names every node
    /// (`target: node i`) and process (its trace name, or `process i`).
    pub fn new(out: W, target: &Target, procs: &[ProcInfo]) -> io::Result<Self> {
        let mut node_of = vec![0; procs.len()];
        for (n, node) in target.nodes.iter().enumerate() {
            for &p in &node.procs {
                if let Some(slot) = node_of.get_mut(p as usize) {
                    *slot = n;
                }
            }
        }
        let mut w = Writer {
            out: BufWriter::new(out),
            node_of,
            next_flow: 0,
            error: None,
        };
        w.out
            .write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        let mut first = true;
        for (n, node) in target.nodes.iter().enumerate() {
            let name = format!("{}: node {n}", target.name);
            let meta = json!({"ph":"M","name":"process_name","pid":n,"args":{"name":name}});
            w.line(first, &meta)?;
            first = false;
            for &p in &node.procs {
                let proc = procs
                    .get(p as usize)
                    .map(|i| i.name.as_str())
                    .unwrap_or_default();
                let name = if proc.is_empty() {
                    format!("process {p}")
                } else {
                    proc.to_string()
                };
                let meta =
                    json!({"ph":"M","name":"thread_name","pid":n,"tid":p,"args":{"name":name}});
                w.line(false, &meta)?;
            }
        }
        if first {
            return Err(io::Error::other(
                "a timeline needs a target with at least one node",
            ));
        }
        Ok(Timeline {
            shared: Rc::new(RefCell::new(w)),
        })
    }

    /// The sink to give the engine for this timeline's target.
    pub fn sink(&self) -> Box<dyn ScheduleSink> {
        Box::new(Sink(Rc::clone(&self.shared)))
    }

    /// Closes the JSON and returns the output; reports the first write error, if any.
    pub fn finish(self) -> io::Result<W> {
        let cell = Rc::try_unwrap(self.shared).map_err(|_| {
            io::Error::other("the timeline's sink is still in use: finish the engine first")
        })?;
        let mut w = cell.into_inner();
        if let Some(e) = w.error.take() {
            return Err(e);
        }
        w.out.write_all(b"\n]}\n")?;
        w.out.into_inner().map_err(io::IntoInnerError::into_error)
    }
}

impl<W: Write> Writer<W> {
    /// Writes one trace event, preceded by a separator unless it is the first.
    fn line(&mut self, first: bool, value: &serde_json::Value) -> io::Result<()> {
        if !first {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut self.out, value).map_err(io::Error::from)
    }

    /// Writes a trace event from the engine, remembering a failure for `finish`.
    fn emit(&mut self, value: serde_json::Value) {
        if self.error.is_none() {
            if let Err(e) = self.line(false, &value) {
                self.error = Some(e);
            }
        }
    }

    fn node(&self, proc: ProcId) -> usize {
        self.node_of.get(proc as usize).copied().unwrap_or_default()
    }
}

/// Predicted seconds as trace-event microseconds.
fn us(seconds: f64) -> f64 {
    seconds * 1e6
}

/// The engine's end of a [`Timeline`].
struct Sink<W: Write>(Rc<RefCell<Writer<W>>>);

impl<W: Write> ScheduleSink for Sink<W> {
    fn running(&mut self, proc: ProcId, node: usize, start: f64, end: f64, rate: f64) {
        self.0.borrow_mut().emit(json!({
            "ph": "X", "name": "running", "cat": "cpu", "pid": node, "tid": proc,
            "ts": us(start), "dur": us(end - start), "args": {"share": rate},
        }));
    }

    fn waiting(&mut self, proc: ProcId, node: usize, start: f64, end: f64) {
        self.0.borrow_mut().emit(json!({
            "ph": "X", "name": "waiting", "cat": "wait", "pid": node, "tid": proc,
            "ts": us(start), "dur": us(end - start),
        }));
    }

    fn message(&mut self, from: ProcId, to: ProcId, sent: f64, arrived: f64, bytes: u64) {
        let mut w = self.0.borrow_mut();
        let id = w.next_flow;
        w.next_flow += 1;
        let (from_node, to_node) = (w.node(from), w.node(to));
        let args = json!({"bytes": bytes, "from": from, "to": to});
        w.emit(json!({
            "ph": "s", "name": "message", "cat": "msg", "id": id,
            "pid": from_node, "tid": from, "ts": us(sent), "args": args,
        }));
        w.emit(json!({
            "ph": "f", "bp": "e", "name": "message", "cat": "msg", "id": id,
            "pid": to_node, "tid": to, "ts": us(arrived),
        }));
    }

    fn event(&mut self, proc: ProcId, node: usize, time: f64, kind: &EventKind) {
        self.0.borrow_mut().emit(json!({
            "ph": "i", "s": "t", "name": kind_name(kind), "cat": "event",
            "pid": node, "tid": proc, "ts": us(time),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Network, Node};
    use serde_json::Value;

    fn target() -> Target {
        Target {
            name: "pair".into(),
            nodes: vec![Node::new(vec![0]), Node::new(vec![1])],
            network: Network::default(),
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
            procedures: Vec::new(),
        }
    }

    fn procs() -> Vec<ProcInfo> {
        vec![
            ProcInfo {
                id: 0,
                name: "rank0".into(),
                host: String::new(),
                ..Default::default()
            },
            ProcInfo {
                id: 1,
                name: String::new(),
                host: String::new(),
                ..Default::default()
            },
        ]
    }

    fn events(json: &[u8]) -> Vec<Value> {
        let doc: Value = serde_json::from_slice(json).expect("the timeline is valid JSON");
        doc["traceEvents"]
            .as_array()
            .expect("a traceEvents array")
            .clone()
    }

    #[test]
    fn schedule_becomes_trace_events() {
        let timeline = Timeline::new(Vec::new(), &target(), &procs()).unwrap();
        let mut sink = timeline.sink();
        sink.running(0, 0, 0.0, 1.5, 0.5);
        sink.waiting(1, 1, 0.0, 2.0);
        sink.message(0, 1, 1.5, 2.0, 4096);
        sink.event(1, 1, 2.0, &EventKind::RecvEnd { msg: 1 });
        drop(sink);
        let ev = events(&timeline.finish().unwrap());

        let names: Vec<_> = ev
            .iter()
            .filter(|e| e["ph"] == "M")
            .map(|e| &e["args"]["name"])
            .collect();
        assert_eq!(
            names,
            ["pair: node 0", "rank0", "pair: node 1", "process 1"]
        );

        let run = ev.iter().find(|e| e["name"] == "running").unwrap();
        assert_eq!(
            (run["ph"].as_str(), run["pid"].as_u64(), run["tid"].as_u64()),
            (Some("X"), Some(0), Some(0))
        );
        assert_eq!(
            (run["ts"].as_f64(), run["dur"].as_f64()),
            (Some(0.0), Some(1.5e6))
        );
        assert_eq!(run["args"]["share"], 0.5);
        let wait = ev.iter().find(|e| e["name"] == "waiting").unwrap();
        assert_eq!(
            (wait["pid"].as_u64(), wait["dur"].as_f64()),
            (Some(1), Some(2e6))
        );

        let start = ev.iter().find(|e| e["ph"] == "s").unwrap();
        let end = ev.iter().find(|e| e["ph"] == "f").unwrap();
        assert_eq!(start["id"], end["id"]);
        assert_eq!(
            (start["pid"].as_u64(), start["ts"].as_f64()),
            (Some(0), Some(1.5e6))
        );
        assert_eq!(
            (end["pid"].as_u64(), end["tid"].as_u64(), end["ts"].as_f64()),
            (Some(1), Some(1), Some(2e6))
        );
        assert_eq!(start["args"]["bytes"], 4096);

        let instant = ev.iter().find(|e| e["ph"] == "i").unwrap();
        assert_eq!(instant["name"], "recv_end");
    }

    #[test]
    fn finish_refuses_while_the_engine_holds_the_sink() {
        let timeline = Timeline::new(Vec::new(), &target(), &procs()).unwrap();
        let _sink = timeline.sink();
        let err = timeline.finish().err().unwrap();
        assert!(err.to_string().contains("finish the engine first"), "{err}");
    }

    #[test]
    fn a_target_without_nodes_is_refused() {
        let empty = Target {
            nodes: vec![],
            ..target()
        };
        assert!(Timeline::new(Vec::new(), &empty, &procs()).is_err());
    }
}
