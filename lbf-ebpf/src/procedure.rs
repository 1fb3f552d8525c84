//! Entry and return probes of traced procedures (`lbf-trace --procedure`): the CPU each traced
//! thread spends inside each of them, kept in the thread's state
//! (`lbf_common::maps::ProcedureClocks`) by the same clock as its records, and written to user
//! space as a `ProcCpu` record before the thread's next record after a change. A procedure
//! call costs the uprobe pair and a few stores; it writes no record of its own.
//!
//! The attach cookie is the procedure's index (0 to `MAX_PROCEDURES - 1`).

use core::ffi::c_void;

use aya_ebpf::helpers::gen::bpf_get_attach_cookie;
use lbf_common::{
    maps::{ThreadState, MAX_PROCEDURES},
    RecordKind,
};

use crate::{
    maps::thread_state,
    mpi::finish_unreturned,
    record::{clock_at, stamp_now, Draft},
};

/// The procedure the probe is for, if the cookie names one.
#[inline(always)]
fn procedure(ctx: *mut c_void) -> Option<usize> {
    // SAFETY: the helper reads the cookie of the link that ran this program.
    let i = unsafe { bpf_get_attach_cookie(ctx) } as usize;
    (i < MAX_PROCEDURES).then_some(i)
}

/// Entry of procedure `cookie`: its outermost entry starts its clock.
#[inline(always)]
fn on_enter(ctx: *mut c_void) {
    let (Some(i), Some(state)) = (procedure(ctx), thread_state()) else {
        return;
    };
    // SAFETY: a map value, written only by this thread's probes and hooks.
    let state = unsafe { &mut *state };
    finish_unreturned(state);
    let (_, cpu) = stamp_now(|now| clock_at(&mut state.clock, now));
    let p = &mut state.procedures;
    if let (Some(depth), Some(entered)) = (p.depth.get_mut(i), p.entered_cpu_ns.get_mut(i)) {
        if *depth == 0 {
            *entered = cpu;
            p.changed = 1;
        }
        *depth += 1;
    }
}

/// Return of procedure `cookie`: its outermost return adds the call's CPU to its total. A
/// return without an entry (a call in progress when the probes were attached) is ignored.
#[inline(always)]
fn on_return(ctx: *mut c_void) {
    let (Some(i), Some(state)) = (procedure(ctx), thread_state()) else {
        return;
    };
    // SAFETY: as in `on_enter`.
    let state = unsafe { &mut *state };
    finish_unreturned(state);
    let (_, cpu) = stamp_now(|now| clock_at(&mut state.clock, now));
    let p = &mut state.procedures;
    let (Some(depth), Some(entered), Some(total)) = (
        p.depth.get_mut(i),
        p.entered_cpu_ns.get(i),
        p.total_ns.get_mut(i),
    ) else {
        return;
    };
    if *depth == 0 {
        return;
    }
    *depth -= 1;
    if *depth == 0 {
        *total += cpu.saturating_sub(*entered);
        p.changed = 1;
    }
}

/// Writes the thread's `ProcCpu` record if a procedure was entered or left since the last
/// one, stamped `at` (`(ts_ns, cpu_ns)`: the stamp of the record it goes before, which may be
/// earlier than now, as a deferred entry's is): each total at that clock, and which
/// procedures the thread was inside then.
#[inline(always)]
pub fn write_procedures(state: &mut ThreadState, at: Option<(u64, u64)>) {
    if state.procedures.changed == 0 {
        return;
    }
    state.procedures.changed = 0;
    let (ts_ns, cpu_ns) = match at {
        Some(at) => at,
        None => stamp_now(|now| clock_at(&mut state.clock, now)),
    };
    let p = &state.procedures;
    let mut inside = 0u16;
    let mut totals = [0u64; MAX_PROCEDURES];
    for i in 0..MAX_PROCEDURES {
        totals[i] = p.total_ns[i];
        if p.depth[i] > 0 {
            inside |= 1 << i;
            totals[i] += cpu_ns.saturating_sub(p.entered_cpu_ns[i]);
        }
    }
    let (tgid, tid) = (state.tgid, state.tid);
    let draft = Draft::reserve_at(RecordKind::ProcCpu, inside, tgid, tid, (ts_ns, cpu_ns));
    if let Some(d) = draft {
        d.submit(|i| totals[i]);
    }
}

/// Entry of a traced procedure, through a uprobe_multi link.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe.multi")]
fn procedure_enter(ctx: *mut c_void) -> u32 {
    on_enter(ctx);
    0
}

/// Return of a traced procedure, through a uprobe_multi link.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uretprobe.multi")]
fn procedure_return(ctx: *mut c_void) -> u32 {
    on_return(ctx);
    0
}

/// [`procedure_enter`] for one perf-event uprobe per procedure.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe")]
fn procedure_enter_pp(ctx: *mut c_void) -> u32 {
    on_enter(ctx);
    0
}

/// [`procedure_return`] for one perf-event uretprobe per procedure.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uretprobe")]
fn procedure_return_pp(ctx: *mut c_void) -> u32 {
    on_return(ctx);
    0
}
