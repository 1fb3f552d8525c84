//! MPI call probes: one entry program and one exit program for every probed function of every
//! library, told apart by the attach cookie (`lbf_common::mpi::cookie`: function id and library
//! slot). `mpi_enter`/`mpi_exit` are `uprobe.multi` programs: user space attaches each with one
//! uprobe_multi link per library, which the kernel removes in one go at the end (perf-event
//! uprobes are removed one RCU grace period each). `mpi_enter_pp`/`mpi_exit_pp` are the same
//! code as classic per-point programs, for kernels without uprobe_multi (before 6.6). The
//! cookie's slot selects the memory reads of the library the probe is in.
//!
//! Both look up the calling thread's state (`lbf_common::maps::ThreadState`, in task storage)
//! once: it says whether the thread is traced, and holds its ids, its CPU clock and its calls
//! in flight. Entry: takes the 6 register arguments and the first 2 stack arguments, and
//! keeps them in the thread's state until the return. Exit: records the return value and the
//! kept arguments, and reads memory with the exit [`lbf_common::MemRead`], whose pointers are
//! taken from the kept entry arguments, or found from a global variable of the probed library
//! ([`lbf_common::GlobalPtr`], located from the function's address: `bpf_get_func_ip`).
//!
//! The entry record is written at the entry only when it carries user memory (the function's
//! entry `MemRead`) or user space needs it before the return
//! ([`lbf_common::mpi::entry_at_once`]). Otherwise its time and CPU clock are kept in the
//! thread's state and the record is written at the return, in one ring buffer item with the
//! exit record ([`RecordKind::CallPair`]): one ring buffer reservation and submit per call
//! instead of two (some 20 ns less per call here). Whatever else the thread records first
//! (a call inside this one, a system call, its end) writes the deferred entry record before
//! it, so every thread's records stay in order (see `record::write_deferred_entry`).
//!
//! Polls (`MPI_Test*`, `MPI_Iprobe`: `lbf_common::mpi::poll_flag_arg`) always defer their
//! entry record, keeping what its read found (the request handles) in the thread's state. At
//! the return the exit program reads the poll's outcome; one that found nothing writes no
//! record at all, and only counts in the thread's run of polls (`lbf_common::maps::PollRun`),
//! which the thread's next record is preceded by, as one [`RecordKind::Polls`] record. A
//! progress loop then writes a record per change of state, not per poll, and cannot flood
//! the ring buffer however little CPU its reader gets.
//!
//! Where the kernel has uprobe sessions (Linux 6.13), one program, [`mpi_session`], serves as
//! both, and a call's return probe runs only if its entry asks for it. A call whose return is
//! optional ([`lbf_common::mpi::return_optional`]: a nonblocking send or receive,
//! `MPI_Comm_rank`/`size`) made from the program's executable skips it: its entry keeps the
//! call in the thread's state as ever and marks it returned unseen
//! (`lbf_common::maps::ThreadState::unreturned`), and the thread's next probe hit first writes
//! the exit record the return would have written, reading the out-parameters (the request
//! handle, the rank or size) then ([`finish_unreturned`]). A thread that ends first writes
//! only the call's entry record: at its exit hook its memory is gone (see
//! `sched::sched_process_exit`). A thread's records keep their order; only the exit's stamps
//! are later, and the capture makes no event of them.
//!
//! The entry of `MPI_Init` or `MPI_Init_thread` also writes the process id to a small ring
//! buffer of its own, waking its reader at once (`lbf_common::maps::INIT_NOTICES`): user space
//! inspects the process then, while it surely lives, rather than when its records are read.

use core::{ffi::c_void, mem::MaybeUninit};

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP,
    helpers::gen::{bpf_get_attach_cookie, bpf_get_func_ip, bpf_probe_read_user},
    programs::{ProbeContext, RetProbeContext},
};
use lbf_common::{
    counter,
    maps::{abi, CallInFlight, DeferredEntry, ThreadState, MAX_NESTED},
    mpi::{self, split_cookie, Cookie, MAX_ARGS},
    RecordKind, ARG_WORDS,
};

use crate::{
    maps::{count, executable_text, fn_reads, thread_state, INIT_NOTICES, SEND_RULES},
    record::{
        clock_at, count_poll, keep_entry_read, stamp_now, write_deferred_entry, write_pending,
        write_polls, Draft, Mem, PairDraft, UserRead,
    },
};

/// The attach cookie of the probe that fired (`lbf_common::mpi::cookie`: function, library
/// slot, argument layout).
#[inline(always)]
fn raw_cookie(ctx: *mut c_void) -> u64 {
    // SAFETY: `ctx` is the probe program's context.
    unsafe { bpf_get_attach_cookie(ctx) }
}

/// The address of the probed function (for an entry and a return probe alike), as the
/// process has it mapped; 0 where the kernel does not tell.
#[inline(always)]
fn func_ip(ctx: *mut c_void) -> u64 {
    // SAFETY: `ctx` is the probe program's context.
    unsafe { bpf_get_func_ip(ctx) }
}

/// Keeps the entry arguments of a call of `fn_id` as the thread's innermost call in flight.
/// With [`MAX_NESTED`] calls already in flight (returns missed), the innermost is replaced.
#[inline(always)]
fn push_call(state: &mut ThreadState, fn_id: u16, args: &[u64; ARG_WORDS]) {
    let depth = (state.depth as usize).min(MAX_NESTED - 1);
    let Some(call) = state.calls.get_mut(depth) else {
        return;
    };
    call.fn_id = fn_id as u64;
    // One store per word: an array copy would become a byte-at-a-time `memcpy` call.
    for (i, &word) in args.iter().enumerate() {
        // SAFETY: `i` < ARG_WORDS, within `call.args`.
        unsafe { core::ptr::write_volatile(call.args.as_mut_ptr().add(i), word) };
    }
    state.depth = depth as u64 + 1;
}

/// Takes the innermost call of `fn_id` in flight off the thread's calls, with the calls
/// inside it (whose returns were missed). `None` if `fn_id` has no call in flight.
#[inline(always)]
fn pop_call(state: &mut ThreadState, fn_id: u16) -> Option<&CallInFlight> {
    let depth = (state.depth as usize).min(MAX_NESTED);
    let found = (0..MAX_NESTED)
        .rev()
        .find(|&i| i < depth && state.calls[i].fn_id == fn_id as u64)?;
    state.depth = found as u64;
    state.calls.get(found)
}

/// Which call a record is about: the function and the calling thread.
#[derive(Clone, Copy)]
struct Call {
    fn_id: u16,
    tgid: u32,
    tid: u32,
}

/// Entry of a probed function (which one: the attach cookie). Returns whether the call's
/// return probe is to be skipped, which a uprobe session ([`mpi_session`]) honours: for a
/// thread not traced, and for a call whose return is optional
/// ([`lbf_common::mpi::return_optional`]) made from the program's executable (see
/// [`called_from_executable`]), whose exit record the thread's next probe hit writes
/// ([`finish_unreturned`]). `session`: whether the return may be skipped at all.
#[inline(always)]
fn on_entry(ctx: *mut c_void, session: bool) -> bool {
    let Some(state) = thread_state() else {
        return true;
    };
    // SAFETY: a map value, written only by this thread's probes and hooks (which cannot run
    // concurrently with this one).
    let state = unsafe { &mut *state };
    count(counter::CALL_ENTRIES);
    finish_unreturned(state);
    let (tgid, tid) = (state.tgid, state.tid);
    let raw = raw_cookie(ctx);
    let cookie = split_cookie(raw);
    let call = Call {
        fn_id: cookie.fn_id,
        tgid,
        tid,
    };
    let regs = ProbeContext::new(ctx).regs;
    // SAFETY: `regs` is the probe's register context.
    let skip = session
        && ((cookie.return_optional && called_from_executable(state, unsafe { (*regs).rsp }))
            || (cookie.eager_by_size && surely_eager(tgid, regs)));
    // One `enter` for both argument layouts: inlined once, verified once.
    let args = if cookie.dropped != 0 {
        // SAFETY: `regs` is the probe's register context.
        unsafe { kept_args(&*regs, cookie.dropped) }
    } else {
        register_args(regs, cookie.stack_args)
    };
    enter(ctx, state, &cookie, call, &args);
    if skip {
        state.unreturned = raw;
    }
    skip
}

/// The first [`ARG_WORDS`] arguments at a function's entry: the 6 in registers, then the 7th
/// and 8th from the stack where `stack_args` says the function has them, else zeros.
#[inline(always)]
fn register_args(regs: *mut aya_ebpf::bindings::pt_regs, stack_args: bool) -> [u64; ARG_WORDS] {
    // At entry [sp] is the return address; the 7th and 8th arguments follow it: one read of
    // both, which zeroes them on failure, and only for functions that have them (a user read
    // costs some 40 ns). Else zeroed word by word (`[0, 0]` would call a byte-wise `memset`).
    let mut stack = MaybeUninit::<[u64; 2]>::uninit();
    // SAFETY: `regs` is the probe's register context; `stack` is filled either way.
    unsafe {
        if stack_args {
            bpf_probe_read_user(
                stack.as_mut_ptr() as *mut c_void,
                16,
                ((*regs).rsp + 8) as *const c_void,
            );
        } else {
            let words = stack.as_mut_ptr() as *mut u64;
            core::ptr::write_volatile(words, 0);
            core::ptr::write_volatile(words.add(1), 0);
        }
        let stack = stack.assume_init();
        [
            (*regs).rdi,
            (*regs).rsi,
            (*regs).rdx,
            (*regs).rcx,
            (*regs).r8,
            (*regs).r9,
            stack[0],
            stack[1],
        ]
    }
}

/// Whether the blocking send (`MPI_Send(buf, count, datatype, dest, tag, comm)`) of process
/// `tgid` whose entry probe has the registers `regs` surely goes eagerly, by the process's
/// [`SEND_RULES`] (see [`lbf_common::maps::SendRules`]): its return is then no event, and a
/// uprobe session skips it.
#[inline(always)]
fn surely_eager(tgid: u32, regs: *mut aya_ebpf::bindings::pt_regs) -> bool {
    // SAFETY: `regs` is the probe's register context.
    let (count, datatype, dest, comm) =
        unsafe { ((*regs).rsi, (*regs).rdx, (*regs).rcx, (*regs).r9) };
    lbf_surely_eager(tgid, count, datatype, dest, comm) != 0
}

/// [`surely_eager`]'s work as a global BPF function, verified once rather than inlined into
/// the session program's entry path: 1 if a send of `items` items of `datatype` to `dest` of
/// `comm` by process `tgid` surely goes eagerly (counted in
/// `lbf_common::counter::EAGER_SENDS_UNRETURNED`), else 0.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn lbf_surely_eager(
    tgid: u32,
    items: u64,
    datatype: u64,
    dest: u64,
    comm: u64,
) -> i32 {
    // SAFETY: a map value, written by user space only.
    let Some(rules) = (unsafe { SEND_RULES.get(&tgid) }) else {
        return 0;
    };
    let size = match rules.abi {
        abi::MPICH => abi::mpich_builtin_size(datatype as u32),
        abi::OPEN_MPI => {
            let mut size = MaybeUninit::<u64>::uninit();
            // SAFETY: reads 8 bytes of user memory into `size`.
            let rc = unsafe {
                bpf_probe_read_user(
                    size.as_mut_ptr() as *mut c_void,
                    8,
                    (datatype + abi::OPEN_MPI_DATATYPE_SIZE_AT as u64) as *const c_void,
                )
            };
            // SAFETY: filled by the successful read.
            (rc == 0).then(|| unsafe { size.assume_init() })
        }
        _ => None,
    };
    let eager = rules.surely_eager(items as i32, size, dest as i32, comm);
    if eager {
        count(counter::EAGER_SENDS_UNRETURNED);
    }
    eager as i32
}

/// Whether the call whose entry probe fired with stack pointer `rsp` comes from the program's
/// own executable: its return address (at `rsp`) in the executable's text, which the thread's
/// state keeps once read. The program's own code keeps an out-parameter where the program
/// will use it (a request handle until its wait); a library between the program and MPI (a
/// language binding) may pass a variable of its own frame, gone by the thread's next probe hit.
#[inline(always)]
fn called_from_executable(state: &mut ThreadState, rsp: u64) -> bool {
    if state.code[1] == 0 {
        let Some(text) = executable_text() else {
            return false;
        };
        state.code = text;
    }
    let mut ret = MaybeUninit::<u64>::uninit();
    // SAFETY: reads 8 bytes of user memory into `ret`.
    let rc =
        unsafe { bpf_probe_read_user(ret.as_mut_ptr() as *mut c_void, 8, rsp as *const c_void) };
    // SAFETY: filled by the successful read.
    rc == 0 && (state.code[0]..state.code[1]).contains(&unsafe { ret.assume_init() })
}

/// Tells user space that process `tgid` entered `MPI_Init` (see
/// `lbf_common::maps::INIT_NOTICES`) and wakes it. A full ring drops the notice (counted):
/// user space then inspects the process when it reaches its records, as it does processes
/// attached to.
#[inline(always)]
fn notice_init(tgid: u32) {
    if INIT_NOTICES
        .output(&(tgid as u64), BPF_RB_FORCE_WAKEUP as u64)
        .is_err()
    {
        count(counter::INIT_NOTICES_LOST);
    }
}

/// Keeps `args` as the thread's call in flight (the function the probe's `cookie` names) and
/// writes its entry record, or defers it to the return (see the module documentation).
#[inline(always)]
fn enter(
    ctx: *mut c_void,
    state: &mut ThreadState,
    cookie: &Cookie,
    call: Call,
    args: &[u64; ARG_WORDS],
) {
    let poll = cookie.poll_flag != 0;
    // A call made inside a call in flight: the outer call's entry record comes first. A run
    // of unsuccessful polls goes on through a poll's entry, and ends at any other record.
    if poll {
        write_deferred_entry(state);
    } else {
        write_pending(state);
    }
    push_call(state, call.fn_id, args);
    if call.fn_id == mpi::INIT || call.fn_id == mpi::INIT_THREAD {
        notice_init(call.tgid);
    }
    let reads = fn_reads(cookie.slot, call.fn_id);
    let read = UserRead::or_none(
        reads.and_then(|r| UserRead::plan(&r.entry, &r.global, args, || func_ip(ctx))),
    );
    if poll {
        // Whether this poll leaves a record is known at its return: its entry record, with
        // what it read, waits in the thread's state until then.
        keep_entry_read(state, &read);
        let (ts_ns, cpu_ns) = stamp_now(|now| clock_at(&mut state.clock, now));
        state.entry = DeferredEntry { ts_ns, cpu_ns };
        return;
    }
    // A second read (`FnReads::entry_more`): its pointer is an argument's.
    let two = reads.is_some_and(|r| r.entry_more.ptr_arg != 0);
    if read.is_none() && !two && !cookie.entry_at_once {
        let (ts_ns, cpu_ns) = stamp_now(|now| clock_at(&mut state.clock, now));
        state.entry = DeferredEntry { ts_ns, cpu_ns };
        return;
    }
    if two {
        let more = UserRead::or_none(
            reads.and_then(|r| UserRead::plan(&r.entry_more, &r.global, args, || 0)),
        );
        let Call { fn_id, tgid, tid } = call;
        let clock = &mut state.clock;
        let draft =
            Draft::reserve_with_clock(RecordKind::CallEntry, fn_id, tgid, tid, Mem::Full, clock);
        if let Some(mut d) = draft {
            d.read_user_two(&read, &more);
            d.submit(|i| args[i]);
        }
        return;
    }
    let mem = Mem::for_read(&read);
    let Call { fn_id, tgid, tid } = call;
    let draft = Draft::reserve_with_clock(
        RecordKind::CallEntry,
        fn_id,
        tgid,
        tid,
        mem,
        &mut state.clock,
    );
    submit(draft, &read, |i| args[i]);
}

/// Fills the record `draft` reserved (none if the ring buffer was full) with the user memory
/// `read` asks for and `words` as its arguments, and submits it.
#[inline(always)]
fn submit(draft: Option<Draft>, read: &UserRead, words: impl Fn(usize) -> u64) {
    if let Some(mut d) = draft {
        d.read_user(read);
        d.submit(words);
    }
}

/// The arguments of a function with more than [`ARG_WORDS`] of them: all [`MAX_ARGS`] (6 in
/// registers, then the stack above the return address), less those `dropped` marks, in order,
/// zero-padded.
#[inline(always)]
unsafe fn kept_args(regs: &aya_ebpf::bindings::pt_regs, dropped: u16) -> [u64; ARG_WORDS] {
    const STACK: usize = MAX_ARGS as usize - 6;
    let mut stack = MaybeUninit::<[u64; STACK]>::uninit();
    // SAFETY: reads user memory into `stack` (zeroed on failure).
    unsafe {
        bpf_probe_read_user(
            stack.as_mut_ptr() as *mut c_void,
            (STACK * 8) as u32,
            (regs.rsp + 8) as *const c_void,
        );
    }
    // SAFETY: filled above either way.
    let stack = unsafe { stack.assume_init() };
    let all = [
        regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9, stack[0], stack[1], stack[2],
        stack[3], stack[4], stack[5],
    ];
    let mut out = MaybeUninit::<[u64; ARG_WORDS]>::uninit();
    let words = out.as_mut_ptr() as *mut u64;
    let mut j = 0;
    for (i, &word) in all.iter().enumerate() {
        if dropped & (1 << i) == 0 && j < ARG_WORDS {
            // SAFETY: `j` < ARG_WORDS; one store per word (no byte-wise `memcpy`).
            unsafe { core::ptr::write_volatile(words.add(j), word) };
            j += 1;
        }
    }
    while j < ARG_WORDS {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(words.add(j), 0) };
        j += 1;
    }
    // SAFETY: every word written.
    unsafe { out.assume_init() }
}

/// Return of a probed function (which one: the attach cookie): see [`leave`].
#[inline(always)]
fn on_exit(ctx: *mut c_void) {
    let Some(state) = thread_state() else {
        return;
    };
    // SAFETY: as in `on_entry`.
    let state = unsafe { &mut *state };
    count(counter::CALL_RETURNS);
    finish_unreturned(state);
    // SAFETY: `regs` is the probe's register context.
    let ret = unsafe { (*RetProbeContext::new(ctx).regs).rax };
    lbf_leave(state, raw_cookie(ctx), ret, func_ip(ctx));
}

/// [`leave`] as a global BPF function: the verifier checks its body once per program instead
/// of once per call site (a return, and [`finish_unreturned`] at an entry and a return), which
/// is most of what verifying `mpi_session` took (see docs/probe-overhead.md). The function's
/// address is taken at every return for it (a read of the uprobe's context).
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn lbf_leave(state: *mut ThreadState, raw: u64, ret: u64, ip: u64) -> i32 {
    // SAFETY: null or the thread's state (see `on_entry`).
    let Some(state) = (unsafe { state.as_mut() }) else {
        return 0;
    };
    leave(state, &split_cookie(raw), ret, || ip);
    0
}

/// Writes the exit record of the thread's call that returned unseen, if it has one (see
/// `lbf_common::maps::ThreadState::unreturned`): as its return probe would have, reading its
/// out-parameters now and stamped now. Called first at every probe hit of the thread (MPI
/// entries and returns, followed procedures), so that its records keep their order. The
/// return value was not seen: the record says `MPI_SUCCESS` (0), which the capture does not
/// read. Such calls read no memory from a global (`func_ip` 0).
#[inline(always)]
pub fn finish_unreturned(state: &mut ThreadState) {
    let raw = state.unreturned;
    if raw == 0 {
        return;
    }
    state.unreturned = 0;
    lbf_leave(state, raw, 0, 0);
}

/// A call of `cookie`'s function returned `ret`: its exit record. Without kept entry arguments
/// nothing is recorded and `EXIT_WITHOUT_ENTRY` is counted (`IN_PROGRESS_AT_ATTACH` while the
/// thread, seeded at an attach, has completed no traced call: see `ThreadState::seeded`). A deferred entry
/// record of this call goes into one item with the exit record; one of a call inside this one
/// (whose return was missed) is written first.
/// `func_ip` gives the function's address, for reads from a global.
#[inline(always)]
fn leave(state: &mut ThreadState, cookie: &Cookie, ret: u64, func_ip: impl FnOnce() -> u64) {
    let (tgid, tid) = (state.tgid, state.tid);
    let Cookie {
        fn_id,
        slot,
        short_args,
        poll_flag,
        ..
    } = *cookie;
    let deferred = state.entry;
    let own_entry =
        deferred.ts_ns != 0 && state.innermost().is_some_and(|c| c.fn_id == fn_id as u64);
    if own_entry && poll_flag != 0 && found_nothing(state, poll_flag) {
        // An unsuccessful poll: no record, one more in the thread's run of polls.
        state.entry.ts_ns = 0;
        state.entry_mem.len = 0;
        state.seeded = 0;
        let _ = pop_call(state, fn_id);
        count_poll(state, fn_id, &deferred);
        return;
    }
    // A deferred entry with user memory (a poll's) is written as a record of its own.
    let paired = own_entry && state.entry_mem.len == 0;
    if paired {
        crate::procedure::write_procedures(state, Some((deferred.ts_ns, deferred.cpu_ns)));
        write_polls(state);
        state.entry.ts_ns = 0;
    } else {
        write_pending(state);
    }
    let Some(call) = pop_call(state, fn_id) else {
        count(if state.seeded != 0 {
            counter::IN_PROGRESS_AT_ATTACH
        } else {
            counter::EXIT_WITHOUT_ENTRY
        });
        return;
    };
    // A copy on the stack, one load per word (an array copy would call a byte-at-a-time
    // `memcpy`): the verifier accepts the variable index of a memory read into it.
    let entry: [u64; ARG_WORDS] =
        // SAFETY: `i` < ARG_WORDS, within `call.args`.
        core::array::from_fn(|i| unsafe { core::ptr::read_volatile(call.args.as_ptr().add(i)) });
    // The thread completed a traced call: a later exit without its entry is a missed entry.
    state.seeded = 0;
    let read = UserRead::or_none(
        fn_reads(slot, fn_id).and_then(|r| UserRead::plan(&r.exit, &r.global, &entry, func_ip)),
    );
    let mem = Mem::for_read(&read);
    let clock = &mut state.clock;
    if paired {
        let draft = PairDraft::reserve(
            fn_id,
            (tgid, tid),
            mem,
            short_args,
            clock,
            &deferred,
            ret,
            &entry,
        );
        if let Some(mut d) = draft {
            d.read_user(&read);
            d.submit();
        }
        return;
    }
    let draft = Draft::reserve_with_clock(RecordKind::CallExit, fn_id, tgid, tid, mem, clock);
    submit(draft, &read, |i| if i == 0 { ret } else { entry[i - 1] });
}

/// Whether the poll the thread's innermost call is found nothing: the `int` its argument
/// `poll_flag - 1` points at (`lbf_common::mpi::poll_flag_arg`) is 0. False if it cannot be
/// read (the call then leaves its records, as any other).
#[inline(always)]
fn found_nothing(state: &ThreadState, poll_flag: u8) -> bool {
    let Some(call) = state.innermost() else {
        return false;
    };
    // Constant indices only (see `ThreadState::innermost`).
    let ptr = match poll_flag {
        2 => call.args[1],
        3 => call.args[2],
        4 => call.args[3],
        _ => return false,
    };
    let mut flag = MaybeUninit::<i32>::uninit();
    // SAFETY: reads 4 bytes of user memory into `flag`.
    let rc =
        unsafe { bpf_probe_read_user(flag.as_mut_ptr() as *mut c_void, 4, ptr as *const c_void) };
    // SAFETY: filled by the successful read.
    rc == 0 && unsafe { flag.assume_init() } == 0
}

/// Entry of any probed function, through a uprobe_multi link.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe.multi")]
fn mpi_enter(ctx: *mut c_void) -> u32 {
    on_entry(ctx, false);
    0
}

/// Return of any probed function, through a uprobe_multi link.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uretprobe.multi")]
fn mpi_exit(ctx: *mut c_void) -> u32 {
    on_exit(ctx);
    0
}

/// Entry and return of any probed function, through a uprobe_multi link of a uprobe session
/// (Linux 6.13): the kernel runs it at the entry and, unless that run returns 1, again at
/// the return, so a call whose return is not wanted costs one trap, not two (see
/// [`on_entry`]). The entry is told from the return by the instruction pointer: at the entry
/// it is the function's address (or, past its breakpoint, the byte after); at the return, the
/// caller's return address.
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe.multi")]
fn mpi_session(ctx: *mut c_void) -> u32 {
    // SAFETY: `regs` is the probe's register context.
    let ip = unsafe { (*ProbeContext::new(ctx).regs).rip };
    if ip.wrapping_sub(func_ip(ctx)) <= 1 {
        return on_entry(ctx, true) as u32;
    }
    on_exit(ctx);
    0
}

/// [`mpi_enter`] for one perf-event uprobe per function (kernels without uprobe_multi).
#[unsafe(no_mangle)]
#[unsafe(link_section = "uprobe")]
fn mpi_enter_pp(ctx: *mut c_void) -> u32 {
    on_entry(ctx, false);
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
