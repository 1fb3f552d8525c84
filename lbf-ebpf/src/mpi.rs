//! MPI call probes: one entry uprobe and one exit uretprobe per function of
//! `lbf_common::mpi`, generated from its list. aya 0.13 cannot attach a uprobe with a cookie,
//! so each program carries its function id as a constant and is named after it:
//! `mpi_enter_<id>` and `mpi_exit_<id>`. `PMPI_Init` and `PMPI_Init_thread` also have one
//! entry program per library slot, `mpi_enter_<id>_lib<slot>`, which record the caller's
//! library slot so that later calls read memory with that library's layout.
//!
//! Entry: records the 6 register arguments and the first 2 stack arguments, reads the user
//! memory the function's entry [`lbf_common::MemRead`] asks for, and keeps the arguments until
//! the return. Exit: records the return value and the kept arguments, and reads memory with
//! the exit `MemRead`, whose pointers are taken from the kept entry arguments.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::bpf_probe_read_user,
    programs::{ProbeContext, RetProbeContext},
};
use lbf_common::{
    counter,
    maps::MAX_LIBS,
    mpi::{INIT, INIT_THREAD},
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

/// Entry of function `fn_id`; `slot` is set for the per-library `PMPI_Init*` programs.
#[inline(always)]
fn on_entry(ctx: &ProbeContext, fn_id: u16, slot: Option<u32>) {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return;
    }
    if let Some(slot) = slot {
        let _ = LIB_OF.insert(&tgid, &slot, 0);
    }
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
    // At entry [sp] is the return address; the 7th and 8th arguments follow it.
    // SAFETY: checked user reads; a failure leaves 0.
    unsafe {
        args[6] = bpf_probe_read_user((sp + 8) as *const u64).unwrap_or(0);
        args[7] = bpf_probe_read_user((sp + 16) as *const u64).unwrap_or(0);
    }
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

/// Return of function `fn_id`. Without kept entry arguments (entry missed) nothing is
/// recorded and `EXIT_WITHOUT_ENTRY` is counted.
#[inline(always)]
fn on_exit(ctx: &RetProbeContext, fn_id: u16) {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return;
    }
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

/// One entry and one exit program per function of the list.
macro_rules! mpi_probes {
    ($($id:ident = $num:literal => $sym:literal,)*) => {$(
        #[allow(non_snake_case)]
        mod $id {
            use super::*;

            #[unsafe(export_name = concat!("mpi_enter_", $num))]
            #[unsafe(link_section = "uprobe")]
            fn enter(ctx: *mut c_void) -> u32 {
                on_entry(&ProbeContext::new(ctx), $num, None);
                0
            }

            #[unsafe(export_name = concat!("mpi_exit_", $num))]
            #[unsafe(link_section = "uretprobe")]
            fn exit(ctx: *mut c_void) -> u32 {
                on_exit(&RetProbeContext::new(ctx), $num);
                0
            }
        }
    )*};
}

lbf_common::with_mpi_functions!(mpi_probes);

/// Per-library-slot entry programs of the `PMPI_Init*` functions.
macro_rules! init_probes {
    ($($module:ident: $num:literal, $slot:literal;)*) => {$(
        mod $module {
            use super::*;

            #[unsafe(export_name = concat!("mpi_enter_", $num, "_lib", $slot))]
            #[unsafe(link_section = "uprobe")]
            fn enter(ctx: *mut c_void) -> u32 {
                on_entry(&ProbeContext::new(ctx), $num, Some($slot));
                0
            }
        }
    )*};
}

const _: () = assert!(INIT == 1 && INIT_THREAD == 2 && MAX_LIBS == 4);

init_probes! {
    init_lib0: 1, 0; init_lib1: 1, 1; init_lib2: 1, 2; init_lib3: 1, 3;
    init_thread_lib0: 2, 0; init_thread_lib1: 2, 1; init_thread_lib2: 2, 2; init_thread_lib3: 2, 3;
}
