//! Parsing one line of a trace (versions 1 and 2) into an event or the summary.

use super::{flat, parse_op, Summary, TraceErrorKind};
use crate::event::{Event, EventKind, ProcId, ProcedureCpu};
use serde::Deserialize;
use std::borrow::Cow;

/// What one body line holds.
#[derive(Debug, PartialEq)]
pub(super) enum Record {
    /// An event of one of the header's processes, with its procedures' CPU and its `t_ns`.
    Event(Event, ProcedureCpu, Option<u64>),
    /// The closing summary.
    Summary(Summary),
}

/// Every field any line may carry; borrowed so that parsing allocates nothing. Fields not
/// listed are skipped.
#[derive(Debug, Default, Deserialize, PartialEq)]
pub(super) struct RawLine<'a> {
    pub(super) p: Option<u64>,
    #[serde(borrow)]
    pub(super) k: Option<Cow<'a, str>>,
    pub(super) cpu_ns: Option<u64>,
    pub(super) msg: Option<u64>,
    pub(super) bytes: Option<u64>,
    pub(super) coll: Option<u64>,
    #[serde(borrow)]
    pub(super) op: Option<Cow<'a, str>>,
    pub(super) size: Option<u32>,
    pub(super) rendezvous: Option<bool>,
    pub(super) after: Option<u64>,
    /// When the event happened (a capture's wall clock), nanoseconds after its origin.
    pub(super) t_ns: Option<u64>,
    /// The CPU in each of the header's procedures (serde_json's path only: the fast path
    /// leaves arrays to it).
    pub(super) proc_ns: Option<Vec<u64>>,
    pub(super) summary: Option<Summary>,
    /// Only a header has it: a header in the body is a trace written twice into one file.
    #[serde(borrow)]
    pub(super) format: Option<Cow<'a, str>>,
}

/// Parses a non-blank body line of a trace whose header lists `procs` processes and
/// `procedures` procedures.
pub(super) fn parse(
    text: &[u8],
    procs: usize,
    procedures: usize,
) -> Result<Record, TraceErrorKind> {
    let raw = match flat::parse(text) {
        Some(raw) => raw,
        None => serde_json::from_slice(text).map_err(bad_json)?,
    };
    if let Some(summary) = raw.summary {
        return Ok(Record::Summary(summary));
    }
    if raw.format.is_some() {
        return Err(TraceErrorKind::SecondHeader);
    }
    let name = raw.k.as_deref().ok_or(TraceErrorKind::MissingField {
        kind: "event",
        field: "k",
    })?;
    let (kind_static, kind) = event_kind(name, &raw)?;
    let need = |value: Option<u64>, field| {
        value.ok_or(TraceErrorKind::MissingField {
            kind: kind_static,
            field,
        })
    };
    let proc = need(raw.p, "p")?;
    if proc >= procs as u64 {
        return Err(TraceErrorKind::UnknownProcess { proc, procs });
    }
    let cpu_ns = need(raw.cpu_ns, "cpu_ns")?;
    let shares = match &raw.proc_ns {
        None => ProcedureCpu::NONE,
        Some(list) if list.len() == procedures => {
            ProcedureCpu::from_slice(list).expect("the header lists at most MAX_PROCEDURES")
        }
        Some(list) => {
            return Err(TraceErrorKind::ProcedureCount {
                listed: list.len(),
                procedures,
            })
        }
    };
    let event = Event {
        proc: proc as ProcId,
        cpu_ns,
        kind,
    };
    Ok(Record::Event(event, shares, raw.t_ns))
}

/// serde_json's message, its position within the one-line text given as a column.
fn bad_json(e: serde_json::Error) -> TraceErrorKind {
    let message = e.to_string();
    let what = message.split(" at line ").next().unwrap_or(&message);
    let why = format!("{what} at column {}", e.column());
    if e.is_eof() {
        TraceErrorKind::Unfinished(why)
    } else {
        TraceErrorKind::BadJson(why)
    }
}

/// The kind named by `k`, with the fields it needs taken from `raw`.
fn event_kind(name: &str, raw: &RawLine) -> Result<(&'static str, EventKind), TraceErrorKind> {
    let missing = |kind, field| TraceErrorKind::MissingField { kind, field };
    let kind = match name {
        "send" => EventKind::Send {
            msg: raw.msg.ok_or(missing("send", "msg"))?,
            bytes: raw.bytes.ok_or(missing("send", "bytes"))?,
            rendezvous: raw.rendezvous.unwrap_or(false),
            after: raw.after.unwrap_or(0),
        },
        "recv_start" => EventKind::RecvStart,
        "recv_post" => EventKind::RecvPost {
            msg: raw.msg.ok_or(missing("recv_post", "msg"))?,
        },
        "recv_end" => EventKind::RecvEnd {
            msg: raw.msg.ok_or(missing("recv_end", "msg"))?,
        },
        "send_end" => EventKind::SendEnd {
            msg: raw.msg.ok_or(missing("send_end", "msg"))?,
        },
        "coll_start" => {
            let op = raw.op.as_deref().ok_or(missing("coll_start", "op"))?;
            EventKind::CollStart {
                coll: raw.coll.ok_or(missing("coll_start", "coll"))?,
                op: parse_op(op).ok_or_else(|| TraceErrorKind::UnknownOp(op.to_string()))?,
                size: raw.size.ok_or(missing("coll_start", "size"))?,
                bytes: raw.bytes.ok_or(missing("coll_start", "bytes"))?,
            }
        }
        "coll_end" => EventKind::CollEnd {
            coll: raw.coll.ok_or(missing("coll_end", "coll"))?,
        },
        "keepalive" => EventKind::Keepalive,
        "exit" => EventKind::Exit,
        other => return Err(TraceErrorKind::UnknownKind(other.to_string())),
    };
    Ok((super::kind_name(&kind), kind))
}
