//! The plug between the probe layer and a capture: a [`RecordSink`] that feeds every record
//! to a [`RecordCapture`] (the MPI capture, the socket capture, ...) and its events to an
//! [`EventSink`].

use lbf_common::Record;

use lbf_capture::anomaly::{count, Anomaly};
use lbf_capture::record_capture::{Backlog, RecordCapture};
use lbf_capture::{EventSink, Summary};
use lbf_probe::{LostCounts, RecordSink};

/// Feeds a live record stream into a capture; [`CaptureSink::into_parts`] gives back the
/// event sink and the summary once the probe layer has called `finish`.
pub struct CaptureSink<S: EventSink> {
    capture: Option<Box<dyn RecordCapture>>,
    events: S,
    summary: Option<Summary>,
}

impl<S: EventSink> CaptureSink<S> {
    /// Sends the events `capture` makes of the records to `events`.
    pub fn new(capture: impl RecordCapture + 'static, events: S) -> Self {
        CaptureSink {
            capture: Some(Box::new(capture)),
            events,
            summary: None,
        }
    }

    /// Tells the capture that process `pid` is the command the tracer started (see
    /// [`RecordCapture::started_by_tracer`]).
    pub fn started_by_tracer(&mut self, pid: u32) {
        if let Some(capture) = &mut self.capture {
            capture.started_by_tracer(pid);
        }
    }

    /// What the capture holds back now (nothing once it has finished).
    pub fn backlog(&self) -> Backlog {
        self.capture
            .as_ref()
            .map_or_else(Backlog::default, |c| c.backlog())
    }

    /// The event sink, while the capture runs.
    pub fn events_mut(&mut self) -> &mut S {
        &mut self.events
    }

    /// The event sink, and the summary if the stream has finished.
    pub fn into_parts(self) -> (S, Option<Summary>) {
        (self.events, self.summary)
    }
}

impl<S: EventSink> RecordSink for CaptureSink<S> {
    fn record(&mut self, record: &Record) -> anyhow::Result<()> {
        if let Some(capture) = &mut self.capture {
            capture.record(record, &mut self.events);
        }
        Ok(())
    }

    /// Finishes the capture; records the kernel side dropped are noted as anomalies, and so
    /// are calls in progress at an attach (the attach's boundary, not a loss).
    fn finish(&mut self, lost: &LostCounts) -> anyhow::Result<()> {
        if let Some(capture) = self.capture.take() {
            let mut summary = capture.finish(&mut self.events);
            for (what, n) in [
                (Anomaly::RingBufferFull, lost.ringbuf_full),
                (Anomaly::ExitRecordWithoutEntry, lost.exit_without_entry),
                (Anomaly::InProgressAtAttach, lost.in_progress_at_attach),
                (Anomaly::InitNoticeLost, lost.init_notices_lost),
            ] {
                count(&mut summary.anomalies, what, n);
            }
            summary.lost_records = lost.ringbuf_full + lost.exit_without_entry;
            self.summary = Some(summary);
        }
        Ok(())
    }
}
