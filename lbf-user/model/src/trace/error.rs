//! Errors of trace reading: each names the line and says what is wrong.

use std::fmt;

/// A problem at one line of a trace.
#[derive(Debug)]
pub struct TraceError {
    /// The 1-based line number (the header is line 1; 0 when the file could not be opened).
    pub line: u64,
    /// What is wrong.
    pub kind: TraceErrorKind,
}

/// What is wrong with a trace line.
#[derive(Debug)]
pub enum TraceErrorKind {
    /// The file could not be opened or read.
    Io(std::io::Error),
    /// The file is empty or its first line is not an lbf trace header.
    MissingHeader,
    /// The header names a format version this lbf does not read.
    UnsupportedVersion(u64),
    /// The header is there but malformed (process ids not `0..n` in order, ...).
    BadHeader(String),
    /// The line is not valid JSON, or a field has the wrong type.
    BadJson(String),
    /// The line ends before its JSON does (serde_json's end-of-input error): on the file's
    /// last line, a line cut short, which the reader drops (`TraceReader::cut_line`).
    Unfinished(String),
    /// The `k` field names no event kind.
    UnknownKind(String),
    /// A field the event kind needs is absent.
    MissingField {
        /// The event kind (`send`, ...), or `event` when even `k` is missing.
        kind: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// The `op` field of a `coll_start` names no collective operation.
    UnknownOp(String),
    /// The event's process is not in the header.
    UnknownProcess {
        /// The process id on the line.
        proc: u64,
        /// How many processes the header lists.
        procs: usize,
    },
    /// An event's `proc_ns` lists another number of shares than the header lists procedures.
    ProcedureCount {
        /// How many shares the line lists.
        listed: usize,
        /// How many procedures the header lists.
        procedures: usize,
    },
    /// A line follows the summary, which must be the last line.
    /// A message's send, receive or post appears twice (`what`: `sent`, `received`,
    /// `posted`), the first time on `first_line`.
    Repeated {
        /// Which event repeats.
        what: &'static str,
        /// The message.
        msg: crate::event::MsgId,
        /// The line of its first occurrence.
        first_line: u64,
    },
    /// Process `proc` exits before the `send_end` of its rendezvous message `msg`.
    NoSendEnd {
        /// The process.
        proc: crate::event::ProcId,
        /// The message it sent by rendezvous.
        msg: crate::event::MsgId,
        /// The line of the send.
        send_line: u64,
    },
    /// A header line in the body: two traces written into one file.
    SecondHeader,
    /// A line follows the summary line.
    AfterSummary {
        /// The summary's line.
        summary_line: u64,
    },
}

impl TraceError {
    /// An error at `line`.
    pub(crate) fn at(line: u64, kind: TraceErrorKind) -> Self {
        TraceError { line, kind }
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: ", self.line)?;
        }
        match &self.kind {
            TraceErrorKind::Io(e) => write!(f, "cannot read the trace: {e}"),
            TraceErrorKind::MissingHeader => write!(
                f,
                "not an lbf trace: the first line must be a header like \
                 {{\"format\":\"lbf-trace\",\"version\":1,\"procs\":[...]}}"
            ),
            TraceErrorKind::UnsupportedVersion(v) => write!(
                f,
                "trace format version {v} is not supported; this lbf reads versions {}",
                super::READABLE_VERSIONS
                    .map(|v| v.to_string())
                    .join(" and ")
            ),
            TraceErrorKind::BadHeader(why) => write!(f, "bad trace header: {why}"),
            TraceErrorKind::BadJson(why) | TraceErrorKind::Unfinished(why) => {
                write!(f, "bad JSON: {why}")
            }
            TraceErrorKind::UnknownKind(k) => write!(
                f,
                "unknown event kind \"{k}\"; \"k\" must be one of send, recv_start, recv_post, \
                 recv_end, send_end, coll_start, coll_end, keepalive, exit"
            ),
            TraceErrorKind::MissingField { kind, field } => {
                write!(f, "{kind} event is missing the field \"{field}\"")
            }
            TraceErrorKind::UnknownOp(op) => write!(
                f,
                "unknown collective op \"{op}\"; \"op\" must be one of barrier, bcast, reduce, \
                 allreduce, alltoall"
            ),
            TraceErrorKind::UnknownProcess { proc, procs } => write!(
                f,
                "process {proc} is not in the header, which lists {procs} processes (ids 0 to {})",
                procs.saturating_sub(1)
            ),
            TraceErrorKind::ProcedureCount { listed, procedures } => write!(
                f,
                "\"proc_ns\" lists {listed} numbers, but the header lists {procedures} \
                 procedures; it needs one number per procedure, in the header's order"
            ),
            TraceErrorKind::Repeated {
                what,
                msg,
                first_line,
            } => write!(
                f,
                "message {msg} is {what} a second time (first on line {first_line}); a message \
                 id is sent once, received once and posted at most once"
            ),
            TraceErrorKind::NoSendEnd {
                proc,
                msg,
                send_line,
            } => write!(
                f,
                "process {proc} exits before the send_end of message {msg}, which it sent by \
                 rendezvous on line {send_line}"
            ),
            TraceErrorKind::SecondHeader => write!(
                f,
                "a second header line: two traces were written into one file; give each \
                 capture its own -o file"
            ),
            TraceErrorKind::AfterSummary { summary_line } => write!(
                f,
                "a line follows the summary on line {summary_line}; the summary must be the \
                 last line"
            ),
        }
    }
}

/// The I/O error of [`TraceErrorKind::Io`] is in the message itself, so it is not also a
/// `source` (a report of the chain would print it twice).
impl std::error::Error for TraceError {}
