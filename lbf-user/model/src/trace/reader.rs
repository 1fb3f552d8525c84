//! Streaming reader of traces (versions 1 and 2).

use super::line::{parse, Record};
use super::rules::MessageRules;
use super::{
    Header, LineEvent, Summary, TraceError, TraceErrorKind, FORMAT_NAME, READABLE_VERSIONS,
};
use crate::event::ProcInfo;
use crate::source::Source;
use serde::Deserialize;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Read buffer size: large enough that a read call per 1 MiB keeps system-call cost negligible.
const BUFFER_BYTES: usize = 1 << 20;

/// Reads a trace one line at a time: memory stays constant whatever the file's length.
///
/// Construction reads and checks the header; iteration yields the events with their line
/// numbers; after the last event, [`TraceReader::summary`] tells whether the capture completed.
pub struct TraceReader<R> {
    input: R,
    buf: Vec<u8>,
    line: u64,
    header: Header,
    summary: Option<(u64, Summary)>,
    /// The last line, when it was cut short and dropped: its number and its bytes.
    cut: Option<(u64, usize)>,
    /// The format's rules about messages, checked as events are read.
    rules: MessageRules,
}

/// The header line as written, every field optional so that each absence gets its own message.
#[derive(Deserialize)]
struct RawHeader {
    format: Option<String>,
    version: Option<u64>,
    source: Option<String>,
    procs: Option<Vec<ProcInfo>>,
    procedures: Option<Vec<String>>,
}

impl TraceReader<BufReader<File>> {
    /// Opens the trace at `path` and reads its header.
    pub fn open(path: &Path) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|e| TraceError::at(0, TraceErrorKind::Io(e)))?;
        Self::new(BufReader::with_capacity(BUFFER_BYTES, file))
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Reads the header from `input`, which should be buffered generously.
    pub fn new(input: R) -> Result<Self, TraceError> {
        let mut reader = TraceReader {
            input,
            buf: Vec::with_capacity(256),
            line: 0,
            header: Header {
                procs: Vec::new(),
                source: None,
                procedures: Vec::new(),
            },
            summary: None,
            cut: None,
            rules: MessageRules::default(),
        };
        if !reader.read_line()? {
            return Err(TraceError::at(1, TraceErrorKind::MissingHeader));
        }
        // An editor's UTF-8 byte-order mark: not part of the header.
        if reader.buf.starts_with(b"\xEF\xBB\xBF") {
            reader.buf.drain(..3);
        }
        reader.header = parse_header(&reader.buf).map_err(|kind| TraceError::at(1, kind))?;
        Ok(reader)
    }

    /// The trace's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The summary, once iteration has reached it; `None` before, and for a truncated
    /// capture (one that did not end with a summary line).
    pub fn summary(&self) -> Option<&Summary> {
        self.summary.as_ref().map(|(_, s)| s)
    }

    /// The trace's last line when it was cut short (the file ends in the middle of a line, as a
    /// capture killed while writing leaves it): its line number and its bytes. That line is
    /// dropped, and the trace has no summary. `None` for a trace that ends at a line's end.
    pub fn cut_line(&self) -> Option<(u64, usize)> {
        self.cut
    }

    /// The next event, `Ok(None)` at the end of the file. A last line cut short that does not
    /// parse is dropped ([`TraceReader::cut_line`]) rather than an error.
    pub fn next_event(&mut self) -> Result<Option<LineEvent>, TraceError> {
        while self.read_line()? {
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if let Some((summary_line, _)) = self.summary {
                return Err(self.error(TraceErrorKind::AfterSummary { summary_line }));
            }
            let text = self.buf.trim_ascii_end();
            match parse(text, self.header.procs.len(), self.header.procedures.len()) {
                Ok(Record::Event(event, procedures, t_ns)) => {
                    if let Err(kind) = self.rules.check(&event, self.line) {
                        return Err(self.error(kind));
                    }
                    return Ok(Some(LineEvent {
                        line: self.line,
                        event,
                        procedures,
                        t_ns,
                    }));
                }
                Ok(Record::Summary(summary)) => self.summary = Some((self.line, summary)),
                Err(TraceErrorKind::Unfinished(_)) if self.buf.last() != Some(&b'\n') => {
                    // Only the last line can lack its newline: the file ends here.
                    self.cut = Some((self.line, self.buf.len()));
                    return Ok(None);
                }
                Err(kind) => return Err(self.error(kind)),
            }
        }
        Ok(None)
    }

    /// Reads the next line into `buf`; false at the end of the input.
    fn read_line(&mut self) -> Result<bool, TraceError> {
        self.buf.clear();
        let n = self
            .input
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| TraceError::at(self.line + 1, TraceErrorKind::Io(e)))?;
        if n == 0 {
            return Ok(false);
        }
        self.line += 1;
        Ok(true)
    }

    fn error(&self, kind: TraceErrorKind) -> TraceError {
        TraceError::at(self.line, kind)
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<LineEvent, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

/// Checks the header line: format name, version, and process ids `0..n` in order.
fn parse_header(text: &[u8]) -> Result<Header, TraceErrorKind> {
    let raw: RawHeader = serde_json::from_slice(text).map_err(|_| TraceErrorKind::MissingHeader)?;
    if raw.format.as_deref() != Some(FORMAT_NAME) {
        return Err(TraceErrorKind::MissingHeader);
    }
    match raw.version {
        Some(v) if READABLE_VERSIONS.contains(&v) => {}
        Some(other) => return Err(TraceErrorKind::UnsupportedVersion(other)),
        None => {
            return Err(TraceErrorKind::BadHeader(
                "the field \"version\" is missing".into(),
            ))
        }
    }
    let procs = raw
        .procs
        .ok_or_else(|| TraceErrorKind::BadHeader("the field \"procs\" is missing".into()))?;
    if let Some((index, p)) = procs.iter().enumerate().find(|(i, p)| p.id as usize != *i) {
        return Err(TraceErrorKind::BadHeader(format!(
            "process number {index} in \"procs\" has id {}; ids must be 0, 1, 2, ... in order",
            p.id
        )));
    }
    let source = match raw.source.as_deref() {
        None => None,
        Some("mpi") => Some(Source::Mpi),
        Some("pvm") => Some(Source::Pvm),
        Some("sockets") => Some(Source::Sockets),
        Some(other) => {
            return Err(TraceErrorKind::BadHeader(format!(
                "\"source\" is \"{other}\"; it must be \"mpi\", \"pvm\" or \"sockets\""
            )))
        }
    };
    let procedures = raw.procedures.unwrap_or_default();
    crate::procedure::check_list(&procedures)
        .map_err(|e| TraceErrorKind::BadHeader(format!("\"procedures\" {e}")))?;
    Ok(Header {
        procs,
        source,
        procedures,
    })
}
