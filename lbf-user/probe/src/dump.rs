//! A [`RecordSink`] that writes each record as one JSON line, to look at real data and check
//! the capture end to end (`lbf-trace --raw-dump FILE`).

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lbf_common::{mpi, Record, RecordKind};
use serde_json::json;

use super::{LostCounts, RecordSink};

/// Writes records as JSON lines: `kind`, `fn` (the symbol, for calls), `fn_id`, `tgid`,
/// `tid`, `ts_ns`, `cpu_ns`, `args` (8 numbers) and `mem` (hex of the `mem_len` valid bytes).
/// The last line is `{"lost": {...}}` with the kernel side's counters. What is written is
/// flushed at least every 200 ms while the capture runs, so that the dump can be
/// followed (`tail -f`) and a killed capture leaves all but its last moments.
pub struct JsonLinesSink<W: Write> {
    out: W,
    flushed: Instant,
}

/// How long a record may wait in the dump's buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

impl<W: Write> JsonLinesSink<W> {
    /// A sink writing to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            flushed: Instant::now(),
        }
    }
}

/// The JSON form of one record.
pub fn record_json(r: &Record) -> serde_json::Value {
    let kind = match RecordKind::from_raw(r.kind) {
        Some(k) => format!("{k:?}"),
        None => format!("Unknown({})", r.kind),
    };
    let name = mpi::NAMES
        .iter()
        .find(|(id, _)| *id == r.fn_id)
        .map(|(_, n)| *n);
    let len = (r.mem_len as usize).min(r.mem.len());
    let mem: String = r.mem[..len].iter().map(|b| format!("{b:02x}")).collect();
    json!({
        "kind": kind,
        "fn": name,
        "fn_id": r.fn_id,
        "tgid": r.tgid,
        "tid": r.tid,
        "ts_ns": r.ts_ns,
        "cpu_ns": r.cpu_ns,
        "args": r.args,
        "mem": mem,
    })
}

impl<W: Write> RecordSink for JsonLinesSink<W> {
    fn record(&mut self, record: &Record) -> Result<()> {
        writeln!(self.out, "{}", record_json(record)).context("writing the raw dump")
    }

    fn tick(&mut self) -> Result<()> {
        if self.flushed.elapsed() >= FLUSH_EVERY {
            self.out.flush().context("flushing the raw dump")?;
            self.flushed = Instant::now();
        }
        Ok(())
    }

    fn finish(&mut self, lost: &LostCounts) -> Result<()> {
        let line = json!({ "lost": {
            "ringbuf_full": lost.ringbuf_full,
            "exit_without_entry": lost.exit_without_entry,
            "in_progress_at_attach": lost.in_progress_at_attach,
            "mem_read_failed": lost.mem_read_failed,
            "no_clock": lost.no_clock,
            "init_notices_lost": lost.init_notices_lost,
            "polls_coalesced": lost.polls_coalesced,
            "call_entries": lost.call_entries,
            "call_returns": lost.call_returns,
            "eager_sends_unreturned": lost.eager_sends_unreturned,
            "stolen_ns": lost.stolen_ns,
        }});
        writeln!(self.out, "{line}").context("writing the raw dump")?;
        self.out.flush().context("flushing the raw dump")
    }
}
