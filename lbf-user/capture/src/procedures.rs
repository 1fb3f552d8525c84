//! The CPU each thread spent inside the traced procedures (`lbf-trace --procedure`), from the
//! kernel side's `ProcCpu` records, and each event's share of it: the procedure CPU of the
//! event's thread between the process's previous event and this one, by the same clock as
//! the event's `cpu_ns`.
//!
//! A `ProcCpu` record gives a thread's totals at one reading of its clock and which
//! procedures it was inside then; until the next one, a total grows with the clock while the
//! thread is inside (a procedure that makes the calls the events come from), and stays put
//! otherwise. So the total at any event's clock reading is known, whichever record the event
//! came from.

use rustc_hash::FxHashMap;

use lbf_common::Record;
use lbf_model::event::{ProcedureCpu, MAX_PROCEDURES};

/// One thread's procedure totals at one clock reading.
#[derive(Clone, Copy, Debug, Default)]
struct Reading {
    cpu_ns: u64,
    totals: ProcedureCpu,
    /// Bit `i`: inside procedure `i` at `cpu_ns`.
    inside: u16,
}

impl Reading {
    /// The totals when the clock reads `cpu_ns`.
    fn at(&self, cpu_ns: u64) -> ProcedureCpu {
        let mut totals = self.totals;
        for (i, t) in totals.0.iter_mut().enumerate() {
            if self.inside & (1 << i) != 0 {
                *t = (*t + cpu_ns).saturating_sub(self.cpu_ns);
            }
        }
        totals
    }
}

/// The procedure CPU of one process's threads, and where each thread's previous event was.
#[derive(Debug, Default)]
pub struct ProcedureShares {
    readings: FxHashMap<u32, Reading>,
    /// Each thread's totals at the process's previous event of it.
    base: FxHashMap<u32, ProcedureCpu>,
}

impl ProcedureShares {
    /// Takes a `ProcCpu` record of one of the process's threads.
    pub fn observe(&mut self, rec: &Record) {
        let mut totals = ProcedureCpu::NONE;
        let n = MAX_PROCEDURES.min(rec.args.len());
        totals.0[..n].copy_from_slice(&rec.args[..n]);
        self.readings.insert(
            rec.tid,
            Reading {
                cpu_ns: rec.cpu_ns,
                totals,
                inside: rec.fn_id,
            },
        );
    }

    /// The share of an event of thread `tid` whose clock reads `cpu_ns`: the procedure CPU
    /// since the thread's previous event.
    pub fn share(&mut self, tid: u32, cpu_ns: u64) -> ProcedureCpu {
        let Some(reading) = self.readings.get(&tid) else {
            return ProcedureCpu::NONE;
        };
        let now = reading.at(cpu_ns);
        let base = self.base.entry(tid).or_default();
        let mut share = ProcedureCpu::NONE;
        for i in 0..MAX_PROCEDURES {
            share.0[i] = now.0[i].saturating_sub(base.0[i]);
            base.0[i] = base.0[i].max(now.0[i]);
        }
        share
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lbf_common::RecordKind;

    fn proc_cpu(tid: u32, cpu_ns: u64, totals: [u64; 2], inside: u16) -> Record {
        let mut args = [0; lbf_common::ARG_WORDS];
        args[..2].copy_from_slice(&totals);
        Record {
            kind: RecordKind::ProcCpu as u16,
            fn_id: inside,
            mem_len: 0,
            part: 0,
            tgid: 1,
            tid,
            ts_ns: 0,
            cpu_ns,
            args,
            mem: [0; lbf_common::MEM_BYTES],
        }
    }

    #[test]
    fn shares_follow_the_readings() {
        let mut s = ProcedureShares::default();
        assert_eq!(s.share(7, 100), ProcedureCpu::NONE);
        // 30 ns in procedure 0, then outside.
        s.observe(&proc_cpu(7, 200, [30, 0], 0));
        assert_eq!(s.share(7, 210).0[..2], [30, 0]);
        assert_eq!(s.share(7, 220).0[..2], [0, 0]);
        // Inside procedure 1 from 300 (its total 5 then): an event at 340 has 45 of it.
        s.observe(&proc_cpu(7, 300, [30, 5], 0b10));
        assert_eq!(s.share(7, 340).0[..2], [0, 45]);
        // Another thread has its own.
        assert_eq!(s.share(8, 340), ProcedureCpu::NONE);
    }
}
