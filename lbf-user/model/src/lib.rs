//! lbf's model: what-if prediction of a distributed program's run time from its events.
//!
//! A program's processes are known by their events (send, start and end of a receive,
//! collectives, exit) and the exact CPU each used between two of them ([`event`]). The
//! [`engine`] merges the processes that a [`target`] places on one node into a Group Activity
//! Graph and simulates it: the time of its last exit is the predicted run time (LBF, Eom and
//! Hollingsworth, IEEE TSE 2000); another network's message costs give NF. It runs many
//! targets in one pass, online: events may be pushed while the program still runs.
//!
//! Events come from a capture (the `lbf-capture` crate, fed by eBPF probes in `lbf-probe`)
//! or from a [`trace`] file; they reach their consumers through an [`sink::EventSink`].
//! Targets are written in TOML or a short form ([`config`]); [`report`] prints the
//! predictions. This crate knows nothing of eBPF, MPI or async runtimes.
//!
//! # Example
//!
//! Two processes: process 0 computes 1 ms and sends a message to process 1, which waits for
//! it and then computes 2 ms. On one single-core node they run one after the other; on two
//! nodes with free messages, process 1's 2 ms start when process 0's message arrives.
//!
//! ```
//! use lbf_model::config::parse_target;
//! use lbf_model::engine::Engine;
//! use lbf_model::trace::TraceReader;
//!
//! let trace = r#"{"format":"lbf-trace","version":2,"procs":[{"id":0,"name":"a"},{"id":1,"name":"b"}]}
//! {"p":0,"k":"send","cpu_ns":1000000,"msg":1,"bytes":8}
//! {"p":0,"k":"exit","cpu_ns":0}
//! {"p":1,"k":"recv_start","cpu_ns":0}
//! {"p":1,"k":"recv_end","cpu_ns":0,"msg":1}
//! {"p":1,"k":"exit","cpu_ns":2000000}
//! "#;
//! let mut reader = TraceReader::new(trace.as_bytes())?;
//! let procs = reader.header().procs.clone();
//! let one_core = parse_target("[[node]]\nprocs = [0, 1]\ncores = 1\n", "one core", 2)?;
//! let two_nodes = parse_target("[[node]]\nprocs = [0]\n[[node]]\nprocs = [1]\n", "two", 2)?;
//! let mut engine = Engine::for_procs(&procs, vec![one_core, two_nodes])?;
//! while let Some(e) = reader.next_event()? {
//!     engine.push(e.event, e.line)?;
//! }
//! let predictions = engine.finish()?;
//! assert!((predictions[0].predicted_seconds - 0.003).abs() < 1e-9);
//! assert!((predictions[1].predicted_seconds - 0.003).abs() < 1e-9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod advise;
pub mod config;
pub mod engine;
pub mod event;
pub mod live;
pub mod procedure;
pub mod report;
pub mod sink;
pub mod source;
pub mod startup;
pub mod stream;
pub mod target;
pub mod trace;
