//! Where a capture's records were lost: the kernel side counts the records of each thread
//! the ring buffer had no room for and says so before the thread's next record
//! (`lbf_common::RecordKind::Lost`); a capture keeps them per process and, at the end, names
//! the processes of the trace that have gaps and from when ([`Gap`]), so that a prediction
//! from the trace can say where it is unsure.

use std::collections::BTreeMap;

use lbf_common::Record;
use lbf_model::event::ProcId;
pub use lbf_model::trace::Gap;

use crate::timeline::RunClock;

/// The lost records of each process: when the first was lost, and how many.
#[derive(Debug, Default)]
pub(crate) struct LostRecords(BTreeMap<u32, (u64, u64)>);

impl LostRecords {
    /// Takes a `Lost` record.
    pub(crate) fn record(&mut self, rec: &Record) {
        let (first, count) = self.0.entry(rec.tgid).or_insert((rec.args[1], 0));
        *first = (*first).min(rec.args[1]);
        *count += rec.args[0];
    }

    /// The gaps of the processes `id_of` names (by process id), by process; a process left
    /// out of the trace has none, its records being counted in the total alone.
    pub(crate) fn gaps(&self, clock: &RunClock, id_of: impl Fn(u32) -> Option<ProcId>) -> Vec<Gap> {
        let mut gaps: Vec<Gap> = self
            .0
            .iter()
            .filter_map(|(&tgid, &(first, records))| {
                Some(Gap {
                    p: id_of(tgid)?,
                    from_seconds: clock.since_first(first) as f64 * 1e-9,
                    records,
                })
            })
            .collect();
        gaps.sort_by_key(|g| g.p);
        gaps
    }
}
