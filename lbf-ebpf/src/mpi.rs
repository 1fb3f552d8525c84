//! MPI call probes: one entry program and one exit program for every probed function of every
//! library, told apart by the attach cookie (`lbf_common::mpi::cookie`: function id and library
//! slot). `mpi_enter`/`mpi_exit` are `uprobe.multi` programs: user space attaches each with one
//! uprobe_multi link per library, which the kernel removes in one go at the end (perf-event
//! uprobes are removed one RCU grace period each). `mpi_enter_pp`/`mpi_exit_pp` are the same
//! code as classic per-point programs, for kernels without uprobe_multi (before 6.6). The entry
//! of `PMPI_Init` and `PMPI_Init_thread` records the caller's library slot, so that later calls
//! read memory with that library's layout.
//!
//! Entry: records the 6 register arguments and the first 2 stack arguments, reads the user
//! memory the function's entry [`lbf_common::MemRead`] asks for, and keeps the arguments until
//! the return. Exit: records the return value and the kept arguments, and reads memory with
//! the exit `MemRead`, whose pointers are taken from the kept entry arguments.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_probe_read_user, gen::bpf_get_attach_cookie},
    programs::{ProbeContext, RetProbeContext},
};
use lbf_common::{
    counter,
    maps::MAX_LIBS,
    mpi::{split_cookie, INIT, INIT_THREAD},
    FnReads, RecordKind, ARG_WORDS, MAX_FNS,
};

use crate::{
    maps::{count, in_flight_key, is_traced, FN_READS, IN_FLIGHT, LIB_OF},
    record::{current_ids, Draft},
};

/// The memory reads for `fn_id` in the library slot of process `tgid`.
#[inline(always)]
fn reads_for(tgid: u32, fn_id: u16) -> Option<FnReads> {
    // SAFETY: values are copied out at once.
    let slot = unsafe { LIB_OF.get(&tgid).copied() }.unwrap_or(0) & (MAX_LIBS - 1);
    FN_READS.get(slot * MAX_FNS + fn_id as u32).copied()
}

/// The function id and library slot the probe that fired was attached with.
#[inline(always)]
fn attach_cookie(ctx: *mut c_void) -> (u16, u32) {
    // SAFETY: `ctx` is the probe program's context.
    split_cookie(unsafe { bpf_get_attach_cookie(ctx) })
}

/// Entry of a probed function (which one: the attach cookie).
#[inline(always)]
fn on_entry(ctx: *mut c_void) {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return;
    }
    let (fn_id, slot) = attach_cookie(ctx);
    if fn_id == INIT || fn_id == INIT_THREAD {
        let _ = LIB_OF.insert(&tgid, &slot, 0);
    }
    let ctx = ProbeContext::new(ctx);
    let regs = ctx.regs;
    // SAFETY: `regs` is the probe's register context.
    let (mut args, sp) = unsafe {
        (
            [
                (*regs).rdi,
                (*regs).rsi,
                (*regs).rdx,
                (*regs).rcx,
                (*regs).r8,
                (*regs).r9,
                0,
                0,
            ],
            (*regs).rsp,
        )
    };
    // At entry [sp] is the return address; the 7th and 8th arguments follow it. One read of
    // both (each helper call costs tens of ns per MPI call).
    // SAFETY: checked user read; a failure leaves 0s.
    let [a7, a8] = unsafe { bpf_probe_read_user((sp + 8) as *const [u64; 2]) }.unwrap_or([0, 0]);
    args[6] = a7;
    args[7] = a8;
    let _ = IN_FLIGHT.insert(&in_flight_key(tid, fn_id), &args, 0);
    if let Some(mut d) = Draft::reserve(RecordKind::CallEntry, fn_id, tgid, tid) {
        // SAFETY: the draft's record is reserved and ours.
        unsafe { (*d.record()).args = args };
        if let Some(reads) = reads_for(tgid, fn_id) {
            d.read_user(&reads.entry, &args);
        }
        d.submit();
    }
}

/// Return of a probed function (which one: the attach cookie). Without kept entry arguments
/// (entry missed) nothing is recorded and `EXIT_WITHOUT_ENTRY` is counted.
#[inline(always)]
fn on_exit(ctx: *mut c_void) {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return;
    }
    let (fn_id, _) = attach_cookie(ctx);
    let ctx = RetProbeContext::new(ctx);
    let key = in_flight_key(tid, fn_id);
    // SAFETY: the value is copied out at once.
    let Some(entry) = (unsafe { IN_FLIGHT.get(&key).copied() }) else {
        count(counter::EXIT_WITHOUT_ENTRY);
        return;
    };
    let _ = IN_FLIGHT.remove(&key);
    // SAFETY: `regs` is the probe's register context.
    let ret = unsafe { (*ctx.regs).rax };
    if let Some(mut d) = Draft::reserve(RecordKind::CallExit, fn_id, tgid, tid) {
        let r = d.record();
        // SAFETY: the draft's record is reserved and ours.
        unsafe {
            let args = &mut (*r).args;
            args[0] = ret;
            args[1..ARG_WORDS].copy_from_slice(&entry[..ARG_WORDS - 1]);
        }
        if let Some(reads) = reads_for(tgid, fn_id) {
            d.read_user(&reads.exit, &entry);
        }
        d.submit();
    }
}

/// Entry of any probed function, through a uprobe_multi link.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe.multi")]
fn mpi_enter(ctx: *mut c_void) -> u32 {
    on_entry(ctx);
    0
}

/// Return of any probed function, through a uprobe_multi link.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uretprobe.multi")]
fn mpi_exit(ctx: *mut c_void) -> u32 {
    on_exit(ctx);
    0
}

/// [`mpi_enter`] for one perf-event uprobe per function (kernels without uprobe_multi).
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe")]
fn mpi_enter_pp(ctx: *mut c_void) -> u32 {
    on_entry(ctx);
    0
}

/// [`mpi_exit`] for one perf-event uretprobe per function (kernels without uprobe_multi).
#[unsafe(no_mangle)]
#[unsafe(link_section = "uretprobe")]
fn mpi_exit_pp(ctx: *mut c_void) -> u32 {
    on_exit(ctx);
    0
}

/// An entry probe that does nothing, attached like [`mpi_enter`]: the baseline against which
/// `cargo xtask bench-probe` states what lbf's own work adds to a uprobe's cost.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe.multi")]
fn empty_enter(_ctx: *mut c_void) -> u32 {
    0
}

/// A return probe that does nothing, attached like [`mpi_exit`] (see [`empty_enter`]).
#[unsafe(no_mangle)]
#[unsafe(link_section = "uretprobe.multi")]
fn empty_exit(_ctx: *mut c_void) -> u32 {
    0
}
