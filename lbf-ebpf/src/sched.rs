//! Scheduler and process lifecycle hooks: the process filter (forks of traced processes are
//! traced), `Fork`/`Exec`/`Exit` records, and the exact per-thread CPU clock.
//!
//! All four are BTF tracepoints: they are handed the kernel's objects themselves (tasks, whose
//! states in task storage, see `maps::THREADS`, they reach directly; an exec's
//! `linux_binprm`), and read fields at offsets user space took from the kernel's BTF (see
//! `lbf_common::maps::KernelOffsets`). Their links also detach at once, where a classic
//! tracepoint's perf-event link waits for an RCU grace period (some 75 ms here). Each fires in
//! the context of the task it names first: `task_newtask` in the parent, `sched_process_exec`
//! in the new image, `sched_process_exit` in the exiting thread, `sched_switch` in the thread
//! switched out.

use aya_ebpf::{
    bindings::task_struct,
    helpers::{
        bpf_get_current_comm, bpf_ktime_get_ns, bpf_probe_read_kernel,
        gen::bpf_probe_read_kernel_str,
    },
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use lbf_common::{counter, maps::KernelOffsets, RecordKind, MEM_BYTES};

use crate::{
    maps::{
        add, current_sum_exec_runtime, is_traced, lbf_steal_clock, new_thread_state, offsets,
        sum_exec_runtime, ADOPT_COMM, SEND_RULES, THREADS, TRACED,
    },
    record::{current_ids, lbf_write_pending, Draft, Mem},
};

/// `CLONE_THREAD`: the new task is a thread of its parent's group, not a new process.
const CLONE_THREAD: u64 = 0x0001_0000;

/// The `T` at `offset` bytes into the kernel object at `object`; `None` for an offset the
/// kernel does not have, or a failed read.
#[inline(always)]
fn kernel_field<T>(object: u64, offset: u32) -> Option<T> {
    if offset == KernelOffsets::ABSENT {
        return None;
    }
    // SAFETY: a checked read of kernel memory.
    unsafe { bpf_probe_read_kernel(object.wrapping_add(offset as u64) as *const T) }.ok()
}

/// Argument `n` of a BTF tracepoint, a task (`struct task_struct *`).
#[inline(always)]
fn task_arg(ctx: &BtfTracePointContext, n: usize) -> *mut task_struct {
    // SAFETY: the caller names an argument of type `struct task_struct *`; the verifier checks
    // the access against the tracepoint's BTF.
    unsafe { ctx.arg::<*const task_struct>(n) as *mut task_struct }
}

/// A task was created (fork, vfork, clone of a thread) by a traced process: give the new
/// thread a state (CPU clock); if it is a new process, trace it and emit `Fork` with
/// `args[0]` = its tgid. The tracepoint's arguments: the new task and the clone flags.
#[btf_tracepoint(function = "task_newtask")]
pub fn task_newtask(ctx: BtfTracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return 0;
    }
    let task = task_arg(&ctx, 0);
    // SAFETY: argument 1 is the clone flags, a u64.
    let flags: u64 = unsafe { ctx.arg(1) };
    let pid_at = (task as u64).wrapping_add(offsets().task_pid as u64) as *const i32;
    // SAFETY: a checked read of the new task's `pid` (its offset from the kernel's BTF).
    let Ok(child) = (unsafe { bpf_probe_read_kernel(pid_at) }) else {
        return 0;
    };
    let child = child as u32;
    let thread = flags & CLONE_THREAD != 0;
    // SAFETY: `task` is the tracepoint's task argument.
    let _ = unsafe { new_thread_state(task, if thread { tgid } else { child }, child) };
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
/// the NUL). The tracepoint's arguments: the task, its old pid, its `linux_binprm`.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(ctx: BtfTracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) && !adopt_by_name(tgid) {
        return 0;
    }
    // SAFETY: argument 2 is the exec's `struct linux_binprm *`.
    let bprm: u64 = unsafe { ctx.arg(2) };
    let Some(filename) = kernel_field::<u64>(bprm, offsets().binprm_filename) else {
        return 0;
    };
    let Some(mut d) = Draft::reserve(RecordKind::Exec, 0, tgid, tid, Mem::Full) else {
        return 0;
    };
    let r = d.record();
    // SAFETY: reads at most MEM_BYTES into the reserved record's `mem`.
    let n = unsafe {
        bpf_probe_read_kernel_str(
            (*r).mem.as_mut_ptr() as *mut _,
            MEM_BYTES as u32,
            filename as *const _,
        )
    };
    if n > 0 {
        unsafe { (*r).mem_len = n as u16 };
    }
    d.submit(|_| 0);
    // Calls of the old image in flight never return (a deferred entry record of one was
    // written before the `Exec` record). A thread other than the leader that executed the
    // new image has taken the leader's id.
    if let Some(state) = THREADS.current() {
        // SAFETY: the thread's state, written only by this thread's hooks and probes.
        unsafe {
            (*state).tid = tid;
            (*state).depth = 0;
            (*state).entry.ts_ns = 0;
            // The old image's call that returned unseen is gone with its memory, and so is
            // its text.
            (*state).unreturned = 0;
            (*state).code = [0, 0];
        }
    }
    // The old image's MPI is gone with it.
    let _ = SEND_RULES.remove(&tgid);
    0
}

/// A traced thread exited: write the deferred entry record of a call it ended in (killed, or
/// `exit` inside a probed call, or after a call whose return it skipped); its state goes with
/// its task. The exit record of a call that returned unseen is not written: `do_exit` has
/// released the thread's memory before this tracepoint (`exit_mm`), so the out-parameters it
/// would carry cannot be read, and without them it tells user space nothing (nor does this
/// program then make the verifier check `lbf_leave` a second time, see
/// docs/probe-overhead.md). If it was the last thread of its group (its group's count of live
/// threads, which `do_exit` decremented before the tracepoint, is 0; without the offsets, the
/// thread whose tid is the tgid), emit `Exit` and stop tracing the group. The tracepoint's first argument is the exiting task.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return 0;
    }
    let o = offsets();
    let live = kernel_field::<u64>(task_arg(&ctx, 0) as u64, o.task_signal)
        .and_then(|signal| kernel_field::<i32>(signal, o.signal_live));
    let group_dead = match live {
        Some(live) => live == 0,
        None => tid == tgid,
    };
    if let Some(state) = THREADS.current() {
        // SAFETY: the thread's state, written only by this thread's hooks and probes.
        let state = unsafe { &mut *state };
        state.unreturned = 0;
        lbf_write_pending(state);
    }
    if group_dead {
        if let Some(d) = Draft::reserve(RecordKind::Exit, 0, tgid, tid, Mem::None) {
            d.submit_waking(|_| 0);
        }
        let _ = TRACED.remove(&tgid);
        let _ = SEND_RULES.remove(&tgid);
    }
    0
}

/// Context switch: close the running interval of the traced thread switched out (taking the
/// scheduler's own total, just updated for it, when the offset is known) and open one for the
/// traced thread switched in, from its total too: exact, as it is not running. A clock seeded
/// at an attach is anchored at its first switch instead (see
/// `lbf_common::maps::ThreadClock::unanchored`). The tracepoint's arguments: `preempt`, the
/// task switched out, the task switched in, its state.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> u32 {
    let now = unsafe { bpf_ktime_get_ns() };
    // The steal clock is read only for a traced thread: every switch on the machine runs this.
    // SAFETY: argument 1 is the task switched out (the current one).
    if let Some(s) = unsafe { THREADS.of(task_arg(&ctx, 1)) } {
        // SAFETY: the task's state; the thread is switching out on this CPU.
        unsafe {
            let c = &mut (*s).clock;
            if c.switched_in_ns != 0 {
                // Running since its switch-in (or, seeded at an attach, since the seed).
                let steal = lbf_steal_clock();
                let reading = c.running_at(now, steal);
                add(counter::STOLEN_NS, steal.saturating_sub(c.steal_in_ns));
                match current_sum_exec_runtime() {
                    Some(sum) => c.set_from_total(sum, reading),
                    None => c.acc_ns = reading,
                }
            } else if let Some(sum) = current_sum_exec_runtime() {
                c.set_from_total(sum, c.acc_ns);
            }
            c.switched_in_ns = 0;
        }
    }
    let next = task_arg(&ctx, 2);
    // SAFETY: argument 2 is the task switched in.
    if let Some(s) = unsafe { THREADS.of(next) } {
        // SAFETY: as above; the thread is switching in on this CPU.
        unsafe {
            let c = &mut (*s).clock;
            if let Some(sum) = sum_exec_runtime(next as u64) {
                // Not running since its switch-out (or, seeded at an attach, since the seed).
                c.set_from_total(sum, c.acc_ns);
            }
            c.switch_in(now, lbf_steal_clock());
        }
    }
    0
}
