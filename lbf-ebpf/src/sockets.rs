//! System call probes for the socket capture: the `sys_enter` and `sys_exit` raw tracepoints
//! (no kprobes, no tracefs needed). For a traced process calling a system call listed in
//! `SYSCALLS`, the entry keeps the 6 arguments and the CPU clock; the return emits one
//! `Syscall` record (see `lbf_common::RecordKind::Syscall`) with the return value, the kept
//! arguments and the entry's CPU clock, and reads the user memory the call's `exit` read asks
//! for (`sendmmsg`/`recvmmsg` message vectors, `socketpair`'s descriptors). Which descriptors are sockets, and which
//! sockets talk to which, is user space's business.

use aya_ebpf::{
    bindings::pt_regs,
    helpers::bpf_probe_read_kernel,
    macros::{map, raw_tracepoint},
    maps::{HashMap, LruHashMap},
    programs::RawTracePointContext,
    EbpfContext,
};
use lbf_common::{
    counter, maps::MAX_IN_FLIGHT, syscalls::MAX_SYSCALLS, FnReads, RecordKind, ARG_WORDS,
};

use crate::{
    maps::{count, is_traced},
    record::{cpu_now, current_ids, Draft, Mem, UserRead},
};

/// The recorded system calls: number -> memory reads. Filled by user space.
#[map]
pub static SYSCALLS: HashMap<u32, FnReads> = HashMap::with_max_entries(MAX_SYSCALLS, 0);

/// Per thread id, the system call in progress: its 6 arguments, its number and the CPU
/// clock at its entry. LRU so that calls that never return (exit) age out.
#[map]
pub static SYSCALL_ENTRY: LruHashMap<u32, [u64; ARG_WORDS]> =
    LruHashMap::with_max_entries(MAX_IN_FLIGHT, 0);

/// Argument `i` of the raw tracepoint (`sys_enter`: `regs`, `id`; `sys_exit`: `regs`, `ret`).
#[inline(always)]
fn raw_arg(ctx: &RawTracePointContext, i: usize) -> u64 {
    // SAFETY: raw tracepoint contexts are arrays of u64 arguments; both hooks have two.
    unsafe { *(ctx.as_ptr() as *const u64).add(i) }
}

/// Entry of a system call: keep the arguments of a listed call of a traced process.
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn sys_enter(ctx: RawTracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return 0;
    }
    let nr = raw_arg(&ctx, 1) as u32;
    // SAFETY: presence test only.
    if unsafe { SYSCALLS.get(&nr) }.is_none() {
        return 0;
    }
    // SAFETY: `regs` is the kernel's saved user registers; the read is checked.
    let Ok(regs) = (unsafe { bpf_probe_read_kernel(raw_arg(&ctx, 0) as *const pt_regs) }) else {
        return 0;
    };
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    // The x86-64 system call convention: rdi, rsi, rdx, r10, r8, r9.
    let saved = [
        regs.rdi,
        regs.rsi,
        regs.rdx,
        regs.r10,
        regs.r8,
        regs.r9,
        nr as u64,
        cpu_now(tid, now),
    ];
    let _ = SYSCALL_ENTRY.insert(&tid, &saved, 0);
    0
}

/// Return of a system call: emit the `Syscall` record of a call kept at its entry.
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return 0;
    }
    // SAFETY: the value is copied out at once.
    let Some(saved) = (unsafe { SYSCALL_ENTRY.get(&tid).copied() }) else {
        return 0;
    };
    let _ = SYSCALL_ENTRY.remove(&tid);
    let nr = saved[6] as u32;
    // SAFETY: the value is copied out at once.
    let Some(reads) = (unsafe { SYSCALLS.get(&nr).copied() }) else {
        count(counter::EXIT_WITHOUT_ENTRY);
        return 0;
    };
    let ret = raw_arg(&ctx, 1);
    // Memory is read only after a successful call; pointers index the 6 arguments.
    let read = if (ret as i64) >= 0 {
        UserRead::plan(&reads.exit, &saved)
    } else {
        None
    };
    let mem = Mem::for_read(read.as_ref());
    if let Some(mut d) = Draft::reserve(RecordKind::Syscall, nr as u16, tgid, tid, mem) {
        if let Some(read) = &read {
            d.read_user(read);
        }
        d.submit(|i| match i {
            0 => ret,
            7 => saved[7],
            _ => saved[i - 1],
        });
    }
    0
}
