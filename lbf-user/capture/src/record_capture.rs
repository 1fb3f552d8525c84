//! [`RecordCapture`]: what every event source's capture (MPI, sockets, PVM) offers the live
//! record stream, so that `live::CaptureSink` and `lbf-trace` drive any of them alike.

use lbf_common::Record;

use crate::mpi::Capture;
use crate::{EventSink, Summary};

/// What a running capture holds back or leaves out, for reports while it runs: memory grows
/// with the events held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Events queued and not handed out yet: waiting for their messages, or for every
    /// process to be known.
    pub held_events: usize,
    /// Events left out of the trace so far (see [`Summary::lost_events`]).
    pub lost_events: u64,
    /// What a socket capture keeps per connection and per process (`None` for other
    /// captures): it must stay bounded by what is open, however long the program runs.
    pub kept: Option<Kept>,
}

/// State a socket capture keeps while connections and processes are open, freed when they
/// close or end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// Channels with matching state: directions of stream connections, datagram receivers.
    pub channels: usize,
    /// Descriptors known to be sockets (or looked at), over all processes.
    pub descriptors: usize,
    /// Processes with an entry: running, or ended with events still held.
    pub processes: usize,
}

/// Something that turns raw records into events: one per event source.
pub trait RecordCapture {
    /// Consumes one record, handing any events it completes to `sink`.
    fn record(&mut self, rec: &Record, sink: &mut dyn EventSink);
    /// Ends the capture: hands out what is left and summarises.
    fn finish(self: Box<Self>, sink: &mut dyn EventSink) -> Summary;
    /// What the capture holds back now.
    fn backlog(&self) -> Backlog;
    /// Process `pid` is the command the tracer started and traced before it executed: traced
    /// from its start, although records of it come before its exec.
    fn started_by_tracer(&mut self, _pid: u32) {}
}

impl RecordCapture for Capture {
    fn record(&mut self, rec: &Record, sink: &mut dyn EventSink) {
        Capture::record(self, rec, sink);
    }
    fn finish(self: Box<Self>, sink: &mut dyn EventSink) -> Summary {
        Capture::finish(*self, sink)
    }
    fn backlog(&self) -> Backlog {
        Backlog {
            held_events: self.held_events(),
            ..Backlog::default()
        }
    }
}
