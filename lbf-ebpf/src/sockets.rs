//! System call probes for the socket capture: the `sys_enter` and `sys_exit` raw tracepoints
//! (no kprobes, no tracefs needed). For a traced process calling a system call listed in
//! `SYSCALLS`, the entry keeps the 6 arguments and the CPU clock; the return emits a
//! `Syscall` record (see `lbf_common::RecordKind::Syscall`) with the return value, the kept
//! arguments and the entry's CPU clock, and the user memory the call's
//! `lbf_common::syscalls::SyscallRead` asks for (`sendto`'s and `sendmsg`'s destination,
//! `recvmsg`'s control data, `socketpair`'s descriptors, the message sizes of `sendmmsg` and
//! `recvmmsg`, whose long vectors take several records). Which descriptors are sockets, and
//! which sockets talk to which, is user space's business.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::pt_regs,
    helpers::{bpf_probe_read_kernel, bpf_probe_read_user, gen::bpf_loop},
    macros::{map, raw_tracepoint},
    maps::{HashMap, LruHashMap},
    programs::RawTracePointContext,
    EbpfContext,
};
use lbf_common::{
    counter,
    maps::MAX_IN_FLIGHT,
    syscalls::{how, SyscallRead, AT_ATTACH, ENTRY_WORDS, MAX_PARTS, MAX_SYSCALLS, WORDS_PER_PART},
    RecordKind, ARG_WORDS,
};

use crate::{
    maps::{count, is_traced},
    record::{cpu_now, current_ids, Draft, Mem, UserRead},
};

/// The recorded system calls: number -> memory read. Filled by user space.
#[map]
pub static SYSCALLS: HashMap<u32, SyscallRead> = HashMap::with_max_entries(MAX_SYSCALLS, 0);

/// Per thread id, the system call in progress: its 6 arguments, its number, the CPU clock and
/// the time at its entry (`lbf_common::syscalls::SYSCALL_ENTRY`). LRU so that calls that never
/// return (exit) age out. User space puts in the threads of a process it attaches to, marked
/// [`AT_ATTACH`].
#[map]
pub static SYSCALL_ENTRY: LruHashMap<u32, [u64; ENTRY_WORDS]> =
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
    let _ = SYSCALL_ENTRY.insert(&tid, &entry_now(&regs, nr), 0);
    0
}

/// Return of a system call: emit the `Syscall` record of a call kept at its entry, or of a
/// call the thread was in when it was attached (see [`entry_at_attach`]).
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> u32 {
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return 0;
    }
    // SAFETY: the value is copied out at once.
    let Some(mut saved) = (unsafe { SYSCALL_ENTRY.get(&tid).copied() }) else {
        return 0;
    };
    let _ = SYSCALL_ENTRY.remove(&tid);
    if saved[6] == AT_ATTACH {
        saved = match entry_at_attach(&ctx) {
            Some(entry) => entry,
            None => return 0,
        };
    }
    let nr = saved[6] as u32;
    // SAFETY: the value is copied out at once.
    let Some(reads) = (unsafe { SYSCALLS.get(&nr).copied() }) else {
        count(counter::EXIT_WITHOUT_ENTRY);
        return 0;
    };
    let ret = raw_arg(&ctx, 1);
    // The record's words (`lbf_common::RecordKind::Syscall`): the return value, the first 5
    // arguments, the entry's time and CPU clock.
    let word = |i: usize| match i {
        0 => ret,
        6 => saved[8],
        7 => saved[7],
        _ => saved[i - 1],
    };
    // Memory is read only after a successful call.
    if (ret as i64) >= 0 && reads.how == how::STRIDED {
        emit_parts(&reads, &saved, ret, nr as u16, tgid, tid, word);
        return 0;
    }
    let read = if (ret as i64) >= 0 {
        UserRead::or_none(plan(&reads, &saved))
    } else {
        UserRead::NONE
    };
    let mem = Mem::for_read(&read);
    if let Some(mut d) = Draft::reserve(RecordKind::Syscall, nr as u16, tgid, tid, mem) {
        d.read_user(&read);
        d.submit(word);
    }
    0
}

/// The entry of the call returning now, for a thread user space attached to ([`AT_ATTACH`]):
/// its number and arguments as the kernel saved them at the entry (`orig_rax`; `rdi`,
/// `rsi`, `rdx`, `r10`, `r8`, `r9`), the CPU clock now for the entry's; `None` for a call
/// not recorded.
#[inline(always)]
fn entry_at_attach(ctx: &RawTracePointContext) -> Option<[u64; ENTRY_WORDS]> {
    // SAFETY: `regs` is the kernel's saved user registers; the read is checked.
    let regs = unsafe { bpf_probe_read_kernel(raw_arg(ctx, 0) as *const pt_regs) }.ok()?;
    let nr = regs.orig_rax as u32;
    // SAFETY: presence test only.
    unsafe { SYSCALLS.get(&nr) }?;
    Some(entry_now(&regs, nr))
}

/// The [`SYSCALL_ENTRY`] value of call `nr` whose arguments are in `regs`, entered now: the
/// x86-64 system call convention's argument registers (rdi, rsi, rdx, r10, r8, r9), the
/// number, the thread's CPU clock and the time.
#[inline(always)]
fn entry_now(regs: &pt_regs, nr: u32) -> [u64; ENTRY_WORDS] {
    // SAFETY: a helper without arguments.
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    [
        regs.rdi,
        regs.rsi,
        regs.rdx,
        regs.r10,
        regs.r8,
        regs.r9,
        nr as u64,
        cpu_now(now),
        now,
    ]
}

/// The read `read` asks for ([`how::PLAIN`] or [`how::INDIRECT`]), pointers taken from the
/// call's entry `args`; `None` for none.
#[inline(always)]
fn plan(read: &SyscallRead, args: &[u64; ENTRY_WORDS]) -> Option<UserRead> {
    // `get` rather than indexing: a bounds-check panic would not pass the verifier.
    let &ptr = args.get(read.arg as usize)?;
    match read.how {
        how::PLAIN => UserRead::at(ptr, read.len as u32),
        how::INDIRECT if ptr >= 4096 => {
            // SAFETY: a checked read of user memory.
            let [at, len] =
                unsafe { bpf_probe_read_user((ptr + read.offset as u64) as *const [u64; 2]) }
                    .ok()?;
            UserRead::at(at, (len as u32).min(read.len as u32))
        }
        _ => None,
    }
}

/// A call with a [`how::STRIDED`] read, as [`emit_part`] needs it.
#[repr(C)]
struct Strided {
    /// The record's argument words.
    words: [u64; ARG_WORDS],
    /// Where the elements start.
    base: u64,
    /// Elements to read (the return value, capped).
    n: u64,
    /// Bytes per element.
    stride: u64,
    /// Where the `u32` read is in an element.
    offset: u64,
    nr: u16,
    tgid: u32,
    tid: u32,
}

/// Emits the records of a call with a [`how::STRIDED`] read that returned `ret` elements:
/// [`WORDS_PER_PART`] of them to a record, as parts 0, 1, ... (at least part 0). A failed
/// read ends the call's records (user space sees elements missing).
///
/// The parts are a `bpf_loop` of [`emit_part`]: the verifier checks one part, where a loop
/// over all of them had it walk [`MAX_PARTS`] times [`WORDS_PER_PART`] reads, which took a
/// quarter of a second at every start of lbf-trace.
#[inline(always)]
fn emit_parts(
    read: &SyscallRead,
    args: &[u64; ENTRY_WORDS],
    ret: u64,
    nr: u16,
    tgid: u32,
    tid: u32,
    word: impl Fn(usize) -> u64,
) {
    let Some(&base) = args.get(read.arg as usize) else {
        return;
    };
    let mut strided = Strided {
        words: core::array::from_fn(&word),
        base,
        n: ret.min((MAX_PARTS * WORDS_PER_PART) as u64),
        stride: read.stride as u64,
        offset: read.offset as u64,
        nr,
        tgid,
        tid,
    };
    // SAFETY: `emit_part` takes the `Strided` passed, which outlives the call.
    unsafe {
        bpf_loop(
            MAX_PARTS as u32,
            emit_part as *mut c_void,
            &mut strided as *mut Strided as *mut c_void,
            0,
        )
    };
}

/// `bpf_loop` callback: emits part `part` of the [`Strided`] call `ctx`; 1 (stop) after the
/// last part, a full ring buffer or a failed read.
extern "C" fn emit_part(part: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: `emit_parts` passes its `Strided`.
    let call = unsafe { &*(ctx as *const Strided) };
    let part = (part as usize).min(MAX_PARTS);
    let first = part * WORDS_PER_PART;
    if part > 0 && first as u64 >= call.n {
        return 1;
    }
    let (nr, tgid, tid) = (call.nr, call.tgid, call.tid);
    let Some(mut d) = Draft::reserve(RecordKind::Syscall, nr, tgid, tid, Mem::Full) else {
        return 1;
    };
    d.set_part(part as u16);
    let mut complete = true;
    for i in 0..WORDS_PER_PART {
        if (first + i) as u64 >= call.n {
            break;
        }
        let at = call.base + (first + i) as u64 * call.stride + call.offset;
        if !d.read_user_word(i, at) {
            complete = false;
            break;
        }
    }
    // SAFETY: `i` < ARG_WORDS, within `words`; one load per word (no `memcpy`).
    d.submit(|i| unsafe { core::ptr::read_volatile(call.words.as_ptr().add(i)) });
    if complete {
        0
    } else {
        1
    }
}
