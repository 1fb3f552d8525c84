//! A program-specific speed: how much faster one host runs a program's compute than
//! another, from the program traced on both (the ratio of its compute segments' CPU).
//!
//! A segment's CPU is the work before an event, as the engine counts it: every event's
//! `cpu_ns` but those of `recv_end`, `send_end` and `coll_end`, which a blocking call spent
//! waiting. CPU time shows how fast a host's CPU runs the program, not how much of a CPU its
//! processes get: a cgroup's quota does not show in it (`lbf-node calibrate --cpu` measures
//! that).

use lbf_model::event::EventKind;
use lbf_model::trace::TraceReader;
use std::path::Path;

/// Each process's compute CPU in `trace`, in seconds, by process id.
pub fn work_seconds(trace: &Path) -> Result<Vec<f64>, String> {
    let name = trace.display();
    let mut reader = TraceReader::open(trace).map_err(|e| format!("{name}: {e}"))?;
    let mut work = vec![0.0; reader.header().procs.len()];
    while let Some(e) = reader.next_event().map_err(|e| format!("{name}: {e}"))? {
        let waited = matches!(
            e.event.kind,
            EventKind::RecvEnd { .. } | EventKind::SendEnd { .. } | EventKind::CollEnd { .. }
        );
        let slot = work.get_mut(e.event.proc as usize).ok_or_else(|| {
            format!(
                "{name}: line {}: process {} is not in the header",
                e.line, e.event.proc
            )
        })?;
        if !waited {
            *slot += e.event.cpu_ns as f64 * 1e-9;
        }
    }
    Ok(work)
}

/// The program's speed on the host of trace `other` relative to the host of trace
/// `reference` (above 1: faster), and both traces' compute CPU per process.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramSpeed {
    /// Compute CPU seconds per process on the reference host.
    pub reference: Vec<f64>,
    /// Compute CPU seconds per process on the other host.
    pub other: Vec<f64>,
    /// The reference's total compute CPU over the other's.
    pub speed: f64,
}

/// Compares the traces `reference` and `other` of one program (the same processes).
pub fn compare(reference: &Path, other: &Path) -> Result<ProgramSpeed, String> {
    let a = work_seconds(reference)?;
    let b = work_seconds(other)?;
    if a.len() != b.len() {
        return Err(format!(
            "{} has {} processes and {} has {}: compare traces of one program with the same \
             processes",
            reference.display(),
            a.len(),
            other.display(),
            b.len()
        ));
    }
    let (ta, tb): (f64, f64) = (a.iter().sum(), b.iter().sum());
    if ta <= 0.0 || tb <= 0.0 {
        return Err("a trace without compute CPU has no speed".into());
    }
    Ok(ProgramSpeed {
        reference: a,
        other: b,
        speed: ta / tb,
    })
}
