//! Where events go: the [`EventSink`] every capture hands its processes and events to, in
//! order per process, and an in-memory one ([`EventLog`]). A trace writer, the live predictor
//! and a cluster node's stream are sinks too.

use crate::event::{Event, EventDetail, EventKind, ProcId, ProcInfo, ProcedureCpu};
use crate::stream::{EndClosed, StreamOp};

/// Receives what a capture produces, in order per process.
///
/// Every rank of `MPI_COMM_WORLD` is announced, in rank order, before the first event of any
/// of them, so a sink can write a trace header listing them all.
pub trait EventSink {
    /// A process; called once per process, before any event.
    fn process(&mut self, info: &ProcInfo);
    /// The next event of `event.proc`.
    fn event(&mut self, event: &Event);
    /// The next event of `event.proc`, with what the capture knows beyond it: the CPU its
    /// process spent in each traced procedure since its previous event (a capture told to
    /// follow procedures) and when it happened. A sink that keeps neither takes the event
    /// alone, as the default does.
    fn event_with(&mut self, event: &Event, detail: &EventDetail) {
        let _ = detail;
        self.event(event);
    }
    /// Where the processes' `start_ns` count from: the capture's first record, in
    /// `CLOCK_MONOTONIC` nanoseconds. Called once, before the first process. Sinks that put
    /// several captures on one time line (a cluster node) need it; others ignore it.
    fn clock_origin(&mut self, _monotonic_ns: u64) {}
    /// The next event of `proc`, a send or receive on a connection to another host, which
    /// the capture leaves to be matched where both ends meet (only a socket capture told to,
    /// `lbf-capture`'s `SocketCapture::matching_between_hosts`, makes these; a cluster node passes
    /// them on to the builder). `cpu_ns` is the CPU since the process's previous event, of
    /// which `procedures` in each traced procedure (as [`EventDetail::procedures`]). A sink
    /// that matches nothing elsewhere keeps both as a `Keepalive`.
    fn stream_op(&mut self, proc: ProcId, cpu_ns: u64, procedures: &ProcedureCpu, _op: &StreamOp) {
        let event = Event {
            proc,
            cpu_ns,
            kind: EventKind::Keepalive,
        };
        let detail = EventDetail {
            procedures: *procedures,
            monotonic_ns: None,
        };
        self.event_with(&event, &detail);
    }
    /// An end of a connection to another host closed (see [`EventSink::stream_op`]); not a
    /// process's event, and in no order with them.
    fn stream_closed(&mut self, _end: &EndClosed) {}
}

/// An [`EventSink`] that keeps everything in memory (tests, small captures).
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    /// Processes in order of appearance.
    pub procs: Vec<ProcInfo>,
    /// Events in order of emission.
    pub events: Vec<Event>,
}

impl EventSink for EventLog {
    fn process(&mut self, info: &ProcInfo) {
        self.procs.push(info.clone());
    }
    fn event(&mut self, event: &Event) {
        self.events.push(*event);
    }
}
