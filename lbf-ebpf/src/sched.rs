//! Scheduler and process lifecycle hooks: the process filter (forks of traced processes are
//! traced), `Fork`/`Exec`/`Exit` records, and the exact per-thread CPU clock.
//!
//! Classic tracepoints are used, with field offsets user space read from tracefs (see
//! `lbf_common::maps::KernelOffsets`). Each fires in the context of the task it names
//! first: `task_newtask` in the parent, `sched_process_exec` in the new image,
//! `sched_process_exit` in the exiting thread, `sched_switch` in the thread switched out.

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_ktime_get_ns, gen::bpf_probe_read_kernel_str},
    macros::tracepoint,
    programs::TracePointContext,
    EbpfContext,
};
use lbf_common::{maps::KernelOffsets, RecordKind, MEM_BYTES};

use crate::{
    maps::{
        current_sum_exec_runtime, is_traced, new_thread_state, offsets, ADOPT_COMM, THREADS, TRACED,
    },
    record::{current_ids, write_deferred_entry, Draft, Mem},
};

/// `CLONE_THREAD`: the new task is a thread of its parent's group, not a new process.
const CLONE_THREAD: u64 = 0x0001_0000;

/// Reads a tracepoint field of type `T` at `offset`.
#[inline(always)]
fn field<T>(ctx: &TracePointContext, offset: u32) -> Option<T> {
    // SAFETY: the offset comes from the tracepoint's format; the read is checked.
    unsafe { ctx.read_at::<T>(offset as usize).ok() }
}

/// A task was created (fork, vfork, clone of a thread) by a traced process: give the new
/// thread a state (CPU clock); if it is a new process, trace it and emit `Fork` with
/// `args[0]` = its tgid.
#[tracepoint]
pub fn task_newtask(ctx: TracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return 0;
    }
    let off = offsets();
    let (Some(child), Some(flags)) = (
        field::<i32>(&ctx, off.newtask_pid),
        field::<u64>(&ctx, off.newtask_clone_flags),
    ) else {
        return 0;
    };
    let child = child as u32;
    let thread = flags & CLONE_THREAD != 0;
    let _ = new_thread_state(if thread { tgid } else { child }, child);
    if thread {
        return 0;
    }
    let _ = TRACED.insert(&child, &1, 0);
    if let Some(d) = Draft::reserve(RecordKind::Fork, 0, tgid, tid, Mem::None) {
        d.submit(|i| if i == 0 { child as u64 } else { 0 });
    }
    0
}

/// Whether the current task's command name (the new image's, at exec) is the one user space
/// asked to adopt; if so, it is traced from now on.
#[inline(always)]
fn adopt_by_name(tgid: u32) -> bool {
    let Some(want) = ADOPT_COMM.get(0) else {
        return false;
    };
    if want[0] == 0 {
        return false;
    }
    let Ok(comm) = bpf_get_current_comm() else {
        return false;
    };
    // Both are NUL-padded to the same length: equal names are equal arrays.
    let same = (0..comm.len()).all(|i| comm[i] == want[i]);
    same && TRACED.insert(&tgid, &1, 0).is_ok()
}

/// A traced process replaced its image, or a process started running the command name user
/// space adopts: emit `Exec` with the file name in `mem` (NUL-terminated, `mem_len` counts
/// the NUL).
#[tracepoint]
pub fn sched_process_exec(ctx: TracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) && !adopt_by_name(tgid) {
        return 0;
    }
    let Some(loc) = field::<u32>(&ctx, offsets().exec_filename) else {
        return 0;
    };
    let Some(mut d) = Draft::reserve(RecordKind::Exec, 0, tgid, tid, Mem::Full) else {
        return 0;
    };
    let r = d.record();
    // `__data_loc`: the low 16 bits are the string's offset in the record.
    let src = (ctx.as_ptr() as usize + (loc & 0xffff) as usize) as *const u8;
    // SAFETY: reads at most MEM_BYTES into the reserved record's `mem`.
    let n = unsafe {
        bpf_probe_read_kernel_str((*r).mem.as_mut_ptr() as *mut _, MEM_BYTES as u32, src as _)
    };
    if n > 0 {
        unsafe { (*r).mem_len = n as u16 };
    }
    d.submit(|_| 0);
    // Calls of the old image in flight never return (a deferred entry record of one was
    // written before the `Exec` record).
    if let Some(state) = THREADS.get_ptr_mut(&tid) {
        // SAFETY: a map value, written only by this thread's hooks and probes.
        unsafe {
            (*state).depth = 0;
            (*state).entry.ts_ns = 0;
        }
    }
    0
}

/// A traced thread exited: write the deferred entry record of a call it ended in (killed, or
/// `exit` inside a probed call), and drop its state. If it was the last thread of its group
/// (the tracepoint's `group_dead`; on kernels without that field, the thread whose tid is
/// the tgid), emit `Exit` and stop tracing the group.
#[tracepoint]
pub fn sched_process_exit(ctx: TracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return 0;
    }
    let off = offsets().exit_group_dead;
    let group_dead = if off == KernelOffsets::ABSENT {
        tid == tgid
    } else {
        field::<u8>(&ctx, off).unwrap_or(0) != 0
    };
    if let Some(state) = THREADS.get_ptr_mut(&tid) {
        // SAFETY: a map value, written only by this thread's hooks and probes.
        write_deferred_entry(unsafe { &mut *state }, tid);
    }
    if group_dead {
        if let Some(d) = Draft::reserve(RecordKind::Exit, 0, tgid, tid, Mem::None) {
            d.submit(|_| 0);
        }
        let _ = TRACED.remove(&tgid);
    }
    let _ = THREADS.remove(&tid);
    0
}

/// Context switch: close the running interval of the traced thread switched out (taking the
/// scheduler's own total, just updated for it, when the offset is known) and open one for the
/// traced thread switched in.
#[tracepoint]
pub fn sched_switch(ctx: TracePointContext) -> u32 {
    let off = offsets();
    let (Some(prev), Some(next)) = (
        field::<i32>(&ctx, off.switch_prev_pid),
        field::<i32>(&ctx, off.switch_next_pid),
    ) else {
        return 0;
    };
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(s) = THREADS.get_ptr_mut(&(prev as u32)) {
        // SAFETY: map value valid during the program; the thread is switching out on this CPU.
        unsafe {
            let c = &raw mut (*s).clock;
            if let Some(sum) = current_sum_exec_runtime() {
                (*c).acc_ns = sum;
            } else if (*c).switched_in_ns != 0 {
                (*c).acc_ns += now.saturating_sub((*c).switched_in_ns);
            }
            (*c).switched_in_ns = 0;
        }
    }
    if let Some(s) = THREADS.get_ptr_mut(&(next as u32)) {
        // SAFETY: as above; the thread is switching in on this CPU.
        unsafe { (*s).clock.switched_in_ns = now };
    }
    0
}
