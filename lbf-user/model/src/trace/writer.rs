//! Buffered writer of traces (the current version, [`super::FORMAT_VERSION`]).

use super::{kind_name, op_name, Header, Summary, FORMAT_NAME, FORMAT_VERSION};
use crate::event::{Event, EventKind, ProcInfo, ProcedureCpu};
use crate::source::Source;
use serde::Serialize;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Writes a trace: the header at creation, then events, then the summary at [`finish`].
/// A writer dropped without `finish` leaves a truncated trace, which readers accept and report
/// as such.
///
/// Each line is formatted whole before it goes into the output buffer, so the buffer, and
/// the file it is emptied into, only ever hold whole lines: a capture killed at any instant
/// leaves a file that ends at a line's end (up to what it had not [`flush`]ed yet).
///
/// [`finish`]: TraceWriter::finish
/// [`flush`]: TraceWriter::flush
pub struct TraceWriter<W: Write> {
    out: BufWriter<W>,
    /// How many procedures the header lists: each event's `proc_ns` has as many entries.
    procedures: usize,
    /// The line being formatted.
    line: Vec<u8>,
}

/// The header line, fields in the documented order.
#[derive(Serialize)]
struct HeaderLine<'a> {
    format: &'static str,
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<Source>,
    procs: &'a [ProcInfo],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    procedures: &'a [String],
}

/// The summary line.
#[derive(Serialize)]
struct SummaryLine<'a> {
    summary: &'a Summary,
}

impl TraceWriter<File> {
    /// Creates (or truncates) the file at `path` and writes the header.
    pub fn create(path: &Path, header: &Header) -> io::Result<Self> {
        Self::new(File::create(path)?, header)
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header to `out`, buffering all output.
    pub fn new(out: W, header: &Header) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 16, out);
        let line = HeaderLine {
            format: FORMAT_NAME,
            version: FORMAT_VERSION,
            source: header.source,
            procs: &header.procs,
            procedures: &header.procedures,
        };
        let mut text = serde_json::to_vec(&line)?;
        text.push(b'\n');
        out.write_all(&text)?;
        Ok(TraceWriter {
            out,
            procedures: header.procedures.len(),
            line: Vec::with_capacity(256),
        })
    }

    /// Appends one event line.
    pub fn write_event(&mut self, event: &Event) -> io::Result<()> {
        self.write_event_with(event, &ProcedureCpu::NONE, None)
    }

    /// Appends one event line with the CPU its process spent in each of the header's
    /// procedures (written only when one is not 0) and, if known, when it happened (`t_ns`,
    /// nanoseconds after the capture's clock origin).
    pub fn write_event_with(
        &mut self,
        event: &Event,
        shares: &ProcedureCpu,
        t_ns: Option<u64>,
    ) -> io::Result<()> {
        self.line.clear();
        let out = &mut self.line;
        let kind = kind_name(&event.kind);
        write!(
            out,
            r#"{{"p":{},"k":"{kind}","cpu_ns":{}"#,
            event.proc, event.cpu_ns
        )?;
        match event.kind {
            EventKind::Send {
                msg,
                bytes,
                rendezvous,
                after,
            } => {
                write!(out, r#","msg":{msg},"bytes":{bytes}"#)?;
                if rendezvous {
                    out.write_all(br#","rendezvous":true"#)?;
                }
                if after > 0 {
                    write!(out, r#","after":{after}"#)?;
                }
            }
            EventKind::RecvEnd { msg }
            | EventKind::RecvPost { msg }
            | EventKind::SendEnd { msg } => write!(out, r#","msg":{msg}"#)?,
            EventKind::CollStart {
                coll,
                op,
                size,
                bytes,
            } => write!(
                out,
                r#","coll":{coll},"op":"{}","size":{size},"bytes":{bytes}"#,
                op_name(op)
            )?,
            EventKind::CollEnd { coll } => write!(out, r#","coll":{coll}"#)?,
            EventKind::RecvStart | EventKind::Keepalive | EventKind::Exit => {}
        }
        let listed = shares.first(self.procedures);
        if listed.iter().any(|&ns| ns > 0) {
            out.write_all(br#","proc_ns":["#)?;
            for (i, ns) in listed.iter().enumerate() {
                let comma = if i == 0 { "" } else { "," };
                write!(out, "{comma}{ns}")?;
            }
            out.write_all(b"]")?;
        }
        if let Some(t) = t_ns {
            write!(out, r#","t_ns":{t}"#)?;
        }
        out.write_all(b"}\n")?;
        self.out.write_all(&self.line)
    }

    /// Pushes buffered lines to the underlying writer, so that a live capture's file is
    /// readable up to here.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Writes the summary line, flushes, and returns the underlying writer.
    pub fn finish(mut self, summary: &Summary) -> io::Result<W> {
        let mut text = serde_json::to_vec(&SummaryLine { summary })?;
        text.push(b'\n');
        self.out.write_all(&text)?;
        self.out
            .into_inner()
            .map_err(io::IntoInnerError::into_error)
    }
}
