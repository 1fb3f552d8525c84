//! Writing records into the ring buffer of the CPU the program runs on (see
//! `lbf_common::maps::RINGS`): the header (kind, ids, time, CPU clock), the arguments and the
//! optional user memory read, in an item only as long as that read needs. Never blocks: a full
//! ring buffer drops the record and counts it. User space merges the rings by the records'
//! stamps, each taken by the program that writes the record.

use core::{ffi::c_void, mem::MaybeUninit};

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        gen::{
            bpf_probe_read_kernel, bpf_probe_read_user, bpf_ringbuf_query, bpf_ringbuf_reserve,
            bpf_ringbuf_submit,
        },
    },
};
use lbf_common::{
    counter,
    maps::{DeferredEntry, LostRun, ThreadClock, ThreadState},
    GlobalPtr, MemRead, PairHead, Record, RecordKind, ARG_WORDS, MEM_BYTES, MORE_MEM_AT,
    MORE_MEM_BYTES, PAIR_HEAD_BYTES, RECORD_HEAD_BYTES, SHORT_ARG_WORDS, SHORT_MEM_BYTES,
};

use crate::maps::{
    add, count, current_sum_exec_runtime, lbf_steal_clock, this_cpus_ring, wake_bytes, THREADS,
};

/// The calling thread's ids: `(tgid, tid)`.
#[inline(always)]
pub fn current_ids() -> (u32, u32) {
    let id = bpf_get_current_pid_tgid();
    ((id >> 32) as u32, id as u32)
}

/// The running (current) thread's cumulative on-CPU nanoseconds at `now`, from its state's
/// clock ([`clock_at`]). Without a state: `sum_exec_runtime`, or 0; counted.
#[inline(always)]
pub fn cpu_now(now: u64) -> u64 {
    cpu_of(THREADS.current(), now)
}

/// [`cpu_now`] with the thread's state (if it has one) at hand.
#[inline(always)]
fn cpu_of(state: Option<*mut ThreadState>, now: u64) -> u64 {
    match state {
        // SAFETY: a map value, valid for the program's run.
        Some(state) => clock_at(unsafe { &mut (*state).clock }, now),
        None => {
            count(counter::NO_CLOCK);
            current_sum_exec_runtime().unwrap_or(0)
        }
    }
}

/// The running (current) thread's cumulative on-CPU nanoseconds at `now`, by its `clock`,
/// less what the hypervisor stole since the switch-in (see [`ThreadClock::running_at`]). A
/// clock that does not know when the thread was switched in (its switch-in not seen) takes
/// the scheduler's `sum_exec_runtime` (stale by at most a scheduler tick) and starts its
/// running interval now.
#[inline(always)]
pub fn clock_at(clock: &mut ThreadClock, now: u64) -> u64 {
    let steal = lbf_steal_clock();
    if clock.switched_in_ns == 0 {
        if let Some(sum) = current_sum_exec_runtime() {
            clock.set_from_total(sum, clock.acc_ns);
        }
        clock.switch_in(now, steal);
        clock.acc_ns
    } else {
        clock.running_at(now, steal)
    }
}

/// How much of `mem` a record is reserved with (see [`lbf_common::Record`]): records that carry
/// no memory or a short read take a few cache lines of the ring buffer instead of six.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mem {
    /// No `mem`.
    None,
    /// [`SHORT_MEM_BYTES`] of `mem`.
    Short,
    /// All [`MEM_BYTES`] of `mem`.
    Full,
}

impl Mem {
    /// Bytes of `mem` reserved.
    #[inline(always)]
    fn bytes(self) -> usize {
        match self {
            Self::None => 0,
            Self::Short => SHORT_MEM_BYTES,
            Self::Full => MEM_BYTES,
        }
    }

    /// The room a record needs for `read`.
    #[inline(always)]
    pub fn for_read(read: &UserRead) -> Self {
        match read.len as usize {
            0 => Self::None,
            1..=SHORT_MEM_BYTES => Self::Short,
            _ => Self::Full,
        }
    }
}

/// A read of user memory a record carries: `len` (1 to [`MEM_BYTES`]) bytes at `ptr`, or none
/// ([`UserRead::NONE`], `len` 0).
///
/// "None" is a value rather than an `Option`: the read is kept across helper calls, and
/// LLVM spills an `Option`'s undefined payload to the stack, which the verifier rejects.
#[derive(Clone, Copy)]
pub struct UserRead {
    ptr: u64,
    len: u32,
}

impl UserRead {
    /// No read.
    pub const NONE: Self = Self { ptr: 0, len: 0 };

    /// Whether this is [`UserRead::NONE`].
    #[inline(always)]
    pub fn is_none(&self) -> bool {
        self.len == 0
    }

    /// `read`, or [`UserRead::NONE`].
    #[inline(always)]
    pub fn or_none(read: Option<Self>) -> Self {
        read.unwrap_or(Self::NONE)
    }

    /// The read `read` asks for, taking the pointer and the element count from `args` (the
    /// call's entry arguments), or for [`MemRead::FROM_GLOBAL`] the pointer `global` leads to
    /// from the probed function's address `func_ip()`; the length is capped at [`MEM_BYTES`].
    /// `None` if it asks for none, or for none here: nothing is mapped in the first page, so
    /// pointers there (0 is NULL, Open MPI's `MPI_STATUS_IGNORE`; 1 is MPICH's) mean "no
    /// data", not a failed read.
    #[inline(always)]
    pub fn plan(
        read: &MemRead,
        global: &GlobalPtr,
        args: &[u64; ARG_WORDS],
        func_ip: impl FnOnce() -> u64,
    ) -> Option<Self> {
        if read.ptr_arg == MemRead::FROM_GLOBAL {
            return Self::at(follow(global, func_ip())?, read.len as u32);
        }
        // `get` rather than indexing: a bounds-check panic would not pass the verifier.
        let &ptr = args.get((read.ptr_arg as usize).wrapping_sub(1))?;
        let mut len = read.len as u64;
        if read.count_arg != 0 {
            let &n = args.get(read.count_arg as usize - 1)?;
            // Counts are C ints: only the low 32 bits of the register are defined.
            len = len.saturating_mul(n as u32 as u64);
        }
        Self::at(ptr, len.min(MEM_BYTES as u64) as u32)
    }

    /// A read of `len` bytes at `ptr`, capped at [`MEM_BYTES`]; `None` for none (see
    /// [`UserRead::plan`]).
    #[inline(always)]
    pub fn at(ptr: u64, len: u32) -> Option<Self> {
        let len = len.min(MEM_BYTES as u32);
        (ptr >= 4096 && len > 0).then_some(Self { ptr, len })
    }
}

/// The address `global` leads to from the probed function's address `func_ip`: the pointer
/// at the end of its chain of loads, plus its offset. `None` (counted) if a load fails, as
/// it does where the kernel does not tell uprobes their function's address (0).
#[inline(always)]
fn follow(global: &GlobalPtr, func_ip: u64) -> Option<u64> {
    let mut ptr = func_ip.wrapping_add(global.delta as u64);
    for i in 0..GlobalPtr::MAX_LOADS {
        if i >= global.loads {
            break;
        }
        let mut next = MaybeUninit::<u64>::uninit();
        // SAFETY: reads 8 bytes of user memory into `next`.
        let rc = unsafe {
            bpf_probe_read_user(next.as_mut_ptr() as *mut c_void, 8, ptr as *const c_void)
        };
        if rc != 0 {
            count(counter::MEM_READ_FAILED);
            return None;
        }
        // SAFETY: filled by the successful read.
        ptr = unsafe { next.assume_init() };
    }
    Some(ptr.wrapping_add(global.offset as u64))
}

/// [`write_pending`] as a global BPF function, for [`Draft::reserve`] and the thread's end:
/// verified once per program instead of once per inlined copy (`sys_exit`'s verification
/// halves, `sched_process_exit`'s too). Not for the MPI probes' own paths, whose verification
/// it makes longer.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn lbf_write_pending(state: *mut ThreadState) -> i32 {
    // SAFETY: null or the thread's state.
    let Some(state) = (unsafe { state.as_mut() }) else {
        return 0;
    };
    write_pending(state);
    0
}

/// Writes what thread `state` has pending before its next record: the record of its run of
/// unsuccessful polls, then its deferred entry record. Called before anything else the thread
/// records, so that its records stay in order, and when the thread ends.
#[inline(always)]
pub fn write_pending(state: &mut ThreadState) {
    write_lost(state);
    // Stamped as the earliest record pending, which it goes before.
    let at = if state.polls.count != 0 {
        Some((state.polls.last_ts_ns, state.polls.last_cpu_ns))
    } else if state.entry.ts_ns != 0 {
        Some((state.entry.ts_ns, state.entry.cpu_ns))
    } else {
        None
    };
    crate::procedure::write_procedures(state, at);
    write_polls(state);
    write_deferred_entry(state);
}

/// Writes the [`RecordKind::Lost`] record of the thread's lost records, if it has lost some
/// since its last record (see `lbf_common::maps::LostRun`). If the ring buffer is still full
/// the count stays, for the next record to try again.
#[inline(always)]
fn write_lost(state: &mut ThreadState) {
    let lost = &mut state.lost as *mut LostRun;
    // Volatile: `note_lost` writes these fields through the thread's state pointer while
    // callers hold `state` (a failed reservation below any of them).
    // SAFETY: `lost` points into the thread's state, a map value.
    let (count, first_ts) = unsafe {
        (
            core::ptr::read_volatile(&(*lost).count),
            core::ptr::read_volatile(&(*lost).first_ts_ns),
        )
    };
    if count == 0 {
        return;
    }
    let (tgid, tid) = (state.tgid, state.tid);
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(reserved) = reserve(line_sized(RECORD_HEAD_BYTES as u64), 0) else {
        return;
    };
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&mut (*lost).count, 0) };
    // SAFETY: the item is a reserved, exclusively owned record head.
    unsafe {
        write_head(
            reserved.item as *mut Record,
            RecordKind::Lost,
            0,
            tgid,
            tid,
            (now, 0),
        )
    };
    let draft = Draft {
        reserved,
        mem: Mem::None,
    };
    draft.submit(|i| match i {
        0 => count,
        1 => first_ts,
        _ => 0,
    });
}

/// Counts `records` lost (the ring buffer full) in the current thread's state, if it has
/// one: its next record says so ([`write_lost`]).
#[inline(always)]
fn note_lost(records: u64) {
    let Some(state) = THREADS.current() else {
        return;
    };
    // SAFETY: a map value, written only by this thread's probes and hooks; volatile as in
    // `write_lost`.
    unsafe {
        let lost = &mut (*state).lost as *mut LostRun;
        let count = core::ptr::read_volatile(&(*lost).count);
        if count == 0 {
            core::ptr::write_volatile(&mut (*lost).first_ts_ns, bpf_ktime_get_ns());
        }
        core::ptr::write_volatile(&mut (*lost).count, count + records);
    }
}

/// Writes the [`RecordKind::Polls`] record of the thread's run of unsuccessful polls, if it
/// has one (see `lbf_common::maps::PollRun`), stamped as the run's last poll returned.
#[inline(always)]
pub fn write_polls(state: &mut ThreadState) {
    let count = state.polls.count;
    if count == 0 {
        return;
    }
    state.polls.count = 0;
    // Field by field: a struct copy would become a byte-at-a-time `memcpy` call.
    let run = &state.polls;
    let (first_ts, first_cpu, inside) = (run.first_ts_ns, run.first_cpu_ns, run.inside_cpu_ns);
    let stamp = (run.last_ts_ns, run.last_cpu_ns);
    let (fn_id, tgid, tid) = (run.fn_id as u16, state.tgid, state.tid);
    let draft = Draft::reserve_stamped(RecordKind::Polls, fn_id, tgid, tid, Mem::None, || stamp);
    if let Some(d) = draft {
        d.submit(|i| match i {
            0 => count,
            1 => first_ts,
            2 => first_cpu,
            3 => inside,
            _ => 0,
        });
    }
}

/// Counts an unsuccessful poll of the thread whose state is `state` in its run (see
/// `lbf_common::maps::PollRun`): the call of `fn_id` entered as `entry` says and returning
/// now, by the thread's clock.
#[inline(always)]
pub fn count_poll(state: &mut ThreadState, fn_id: u16, entry: &DeferredEntry) {
    let (ts_ns, cpu_ns) = stamp_now(|now| clock_at(&mut state.clock, now));
    let run = &mut state.polls;
    if run.count == 0 {
        run.first_ts_ns = entry.ts_ns;
        run.first_cpu_ns = entry.cpu_ns;
        run.inside_cpu_ns = 0;
    }
    run.count += 1;
    run.fn_id = fn_id as u64;
    run.last_ts_ns = ts_ns;
    run.last_cpu_ns = cpu_ns;
    run.inside_cpu_ns += cpu_ns.saturating_sub(entry.cpu_ns);
    count(counter::POLLS_COALESCED);
}

/// Keeps the user memory `read` asks for in the thread's state, as its deferred entry's
/// (`lbf_common::maps::ThreadState::entry_mem`); a failed read keeps none (counted).
#[inline(always)]
pub fn keep_entry_read(state: &mut ThreadState, read: &UserRead) {
    let len = read.len.min(MEM_BYTES as u32);
    state.entry_mem.len = 0;
    if len == 0 {
        return;
    }
    // SAFETY: `len` bytes fit the state's `words` (MEM_BYTES).
    let rc = unsafe {
        bpf_probe_read_user(
            state.entry_mem.words.as_mut_ptr() as *mut c_void,
            len,
            read.ptr as *const c_void,
        )
    };
    if rc == 0 {
        state.entry_mem.len = len as u64;
    } else {
        count(counter::MEM_READ_FAILED);
    }
}

/// Writes the deferred entry record of the thread whose state is `state`, if it has one (see
/// `lbf_common::maps::ThreadState::entry`): the record of its innermost call in flight,
/// stamped when the call was entered, with the user memory kept for it, if any. Use
/// [`write_pending`] before a record; this alone only where a run of polls goes on (at a
/// poll's entry).
#[inline(always)]
pub fn write_deferred_entry(state: &mut ThreadState) {
    let entry = state.entry;
    if entry.ts_ns == 0 {
        return;
    }
    state.entry.ts_ns = 0;
    let kept = state.entry_mem.len;
    state.entry_mem.len = 0;
    let Some(call) = state.innermost() else {
        return;
    };
    let (fn_id, tgid, tid) = (call.fn_id as u16, state.tgid, state.tid);
    // Each arm a constant room (see `Draft::reserve_stamped`).
    let room = match kept {
        0 => Mem::None,
        1..=32 => Mem::Short,
        _ => Mem::Full,
    };
    let draft = Draft::reserve_stamped(RecordKind::CallEntry, fn_id, tgid, tid, room, || {
        (entry.ts_ns, entry.cpu_ns)
    });
    if let Some(mut d) = draft {
        if kept != 0 {
            d.copy_kept(&state.entry_mem.words, kept);
        }
        // SAFETY: `i` < ARG_WORDS, within `call.args`; one load per word (no `memcpy`).
        d.submit(|i| unsafe { core::ptr::read_volatile(call.args.as_ptr().add(i)) });
    }
}

/// A reserved record being filled; submitted with [`Draft::submit`].
pub struct Draft {
    /// The ring buffer item reserved: the record.
    reserved: Reserved,
    mem: Mem,
}

impl Draft {
    /// Reserves a record of `kind` for the current thread (ids `tgid`, `tid`) with room `mem`,
    /// stamped now by its CPU clock. What the thread has pending ([`write_pending`]) is
    /// written first. `None` (and counted as lost) when the ring buffer is full.
    #[inline(always)]
    pub fn reserve(kind: RecordKind, fn_id: u16, tgid: u32, tid: u32, mem: Mem) -> Option<Self> {
        let state = THREADS.current();
        if let Some(state) = state {
            lbf_write_pending(state);
        }
        Self::reserve_stamped(kind, fn_id, tgid, tid, mem, || {
            stamp_now(|now| cpu_of(state, now))
        })
    }

    /// [`Draft::reserve`] for a call record, with the thread's CPU clock at hand (the caller
    /// has dealt with any deferred entry record).
    #[inline(always)]
    pub fn reserve_with_clock(
        kind: RecordKind,
        fn_id: u16,
        tgid: u32,
        tid: u32,
        mem: Mem,
        clock: &mut ThreadClock,
    ) -> Option<Self> {
        Self::reserve_stamped(kind, fn_id, tgid, tid, mem, || {
            stamp_now(|now| clock_at(clock, now))
        })
    }

    /// Reserves a record without `mem` stamped `at` (`(ts_ns, cpu_ns)`).
    #[inline(always)]
    pub fn reserve_at(
        kind: RecordKind,
        fn_id: u16,
        tgid: u32,
        tid: u32,
        at: (u64, u64),
    ) -> Option<Self> {
        Self::reserve_stamped(kind, fn_id, tgid, tid, Mem::None, || at)
    }

    /// Reserves a record with room `mem` and writes its head: `kind`, the ids, and the
    /// `(ts_ns, cpu_ns)` `stamp` gives (called once reserved). A full ring buffer counts it
    /// lost.
    #[inline(always)]
    fn reserve_stamped(
        kind: RecordKind,
        fn_id: u16,
        tgid: u32,
        tid: u32,
        mem: Mem,
        stamp: impl FnOnce() -> (u64, u64),
    ) -> Option<Self> {
        // Each arm a constant (computed apart, LLVM spills an undefined register the verifier
        // rejects).
        let size = line_sized(match mem {
            Mem::None => RECORD_HEAD_BYTES,
            Mem::Short => RECORD_HEAD_BYTES + SHORT_MEM_BYTES,
            Mem::Full => RECORD_HEAD_BYTES + MEM_BYTES,
        } as u64);
        let reserved = reserve(size, 1)?;
        // SAFETY: the item is a reserved, exclusively owned record head.
        unsafe {
            write_head(
                reserved.item as *mut Record,
                kind,
                fn_id,
                tgid,
                tid,
                stamp(),
            )
        };
        Some(Self { reserved, mem })
    }

    /// The record being filled; only its head, and `mem` as far as reserved, exist.
    #[inline(always)]
    pub fn record(&mut self) -> *mut Record {
        self.reserved.item as *mut Record
    }

    /// Reads user memory into `mem` as `read` says, as much as the record has room for. A
    /// failed read leaves `mem_len` 0 (counted).
    #[inline(always)]
    pub fn read_user(&mut self, read: &UserRead) {
        let r = self.record();
        // SAFETY: the reserved record's `mem`, with room `self.mem`, and its `mem_len`.
        unsafe { read_into((*r).mem.as_mut_ptr(), &mut (*r).mem_len, self.mem, read) };
    }

    /// Copies `len` bytes of `words` (user memory kept in the thread's state) into `mem`, as
    /// much as the record has room for.
    #[inline(always)]
    fn copy_kept(&mut self, words: &[u64; MEM_BYTES / 8], len: u64) {
        let len = match self.mem {
            Mem::None => return,
            Mem::Short => len.min(SHORT_MEM_BYTES as u64),
            Mem::Full => len.min(MEM_BYTES as u64),
        } as u32;
        let r = self.record();
        // SAFETY: `len` bytes within the reserved record's `mem` and within `words`.
        unsafe {
            if bpf_probe_read_kernel(
                (*r).mem.as_mut_ptr() as *mut c_void,
                len,
                words.as_ptr() as *const c_void,
            ) == 0
            {
                (*r).mem_len = len as u16;
            }
        }
    }

    /// Reads user memory for an entry with two reads ([`lbf_common::FnReads::entry_more`]) into
    /// a [`Mem::Full`] record: `first` into `mem[..MORE_MEM_AT]` (its length in `mem_len`),
    /// all [`MORE_MEM_BYTES`] at `more` (whatever its length: a constant length is one the
    /// verifier need not bound) from [`MORE_MEM_AT`] on, zeroed if it read nothing.
    #[inline(always)]
    pub fn read_user_two(&mut self, first: &UserRead, more: &UserRead) {
        if self.mem != Mem::Full {
            return;
        }
        let r = self.record();
        let first = UserRead {
            ptr: first.ptr,
            len: first.len.min(MORE_MEM_AT as u32),
        };
        // SAFETY: the reserved record's `mem`, all of it reserved; the first read stays
        // below MORE_MEM_AT, the second is within the MORE_MEM_BYTES from there.
        unsafe {
            read_into((*r).mem.as_mut_ptr(), &mut (*r).mem_len, Mem::Full, &first);
            let at = (*r).mem.as_mut_ptr().add(MORE_MEM_AT);
            // The helper zeroes its destination when the read fails.
            if more.is_none()
                || bpf_probe_read_user(at as *mut _, MORE_MEM_BYTES as u32, more.ptr as *const _)
                    != 0
            {
                for i in 0..MORE_MEM_BYTES / 8 {
                    core::ptr::write_volatile((at as *mut u64).add(i), 0);
                }
            }
        }
    }

    /// Marks the record as part `part` of its call (see [`lbf_common::Record::part`]).
    #[inline(always)]
    pub fn set_part(&mut self, part: u16) {
        // SAFETY: the reserved record head.
        unsafe { (*self.record()).part = part };
    }

    /// Reads the `u32` at user address `ptr` into word `index` of `mem` (a [`Mem::Full`]
    /// record's), which then ends `mem`. False, and `mem` left as it was, for an index out of
    /// room or a failed read (counted).
    #[inline(always)]
    pub fn read_user_word(&mut self, index: usize, ptr: u64) -> bool {
        if self.mem != Mem::Full || index >= MEM_BYTES / 4 {
            return false;
        }
        let r = self.record();
        // SAFETY: 4 bytes within the reserved record's `mem`, `index` < MEM_BYTES / 4.
        let rc = unsafe {
            bpf_probe_read_user(
                (*r).mem.as_mut_ptr().add(index * 4) as *mut _,
                4,
                ptr as *const _,
            )
        };
        if rc != 0 {
            count(counter::MEM_READ_FAILED);
            return false;
        }
        unsafe { (*r).mem_len = (index as u16 + 1) * 4 };
        true
    }

    /// Sets `args[i]` to `word(i)` for every `i` and hands the record to user space
    /// ([`Reserved::commit`]).
    ///
    /// The words are stored one by one: the BPF backend lowers array copies and fills to
    /// calls of byte-at-a-time `memcpy`/`memset` subprograms, some hundreds of instructions
    /// per record (volatile keeps LLVM from forming those calls).
    #[inline(always)]
    pub fn submit(self, word: impl Fn(usize) -> u64) {
        self.fill(word);
        self.reserved.commit(false);
    }

    /// [`Draft::submit`], waking the reader at once: for a process's `Exit`, after which the
    /// capture may end (one a process, so the wake-up's cost does not add up).
    #[inline(always)]
    pub fn submit_waking(self, word: impl Fn(usize) -> u64) {
        self.fill(word);
        self.reserved.commit(true);
    }

    /// Sets `args[i]` to `word(i)` for every `i`.
    #[inline(always)]
    fn fill(&self, word: impl Fn(usize) -> u64) {
        // SAFETY: `args` of the reserved record head, `i` < ARG_WORDS.
        let args = unsafe { (*(self.reserved.item as *mut Record)).args.as_mut_ptr() };
        for i in 0..ARG_WORDS {
            unsafe { core::ptr::write_volatile(args.add(i), word(i)) };
        }
    }
}

/// A reserved [`RecordKind::CallPair`] item ([`PairHead`]) whose head and arguments are
/// written: its exit's user memory is read with [`PairDraft::read_user`], then it is
/// submitted with [`PairDraft::submit`].
pub struct PairDraft {
    /// The ring buffer item reserved.
    reserved: Reserved,
    /// Where the exit's `mem` starts in the item.
    mem: *mut u8,
    /// Its room.
    room: Mem,
}

impl PairDraft {
    /// Reserves the [`RecordKind::CallPair`] item of a call of `fn_id` by thread `tid` of
    /// `tgid`, whose entry record was deferred (stamped `entry`): writes its head, with the
    /// exit stamped now by `clock` and returning `ret`, and the call's entry arguments
    /// `args`: the first [`SHORT_ARG_WORDS`] if `short_args`, else all. The exit's `mem` gets
    /// room `mem`. `None` (both records counted as lost) when the ring buffer is full.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn reserve(
        fn_id: u16,
        (tgid, tid): (u32, u32),
        mem: Mem,
        short_args: bool,
        clock: &mut ThreadClock,
        entry: &DeferredEntry,
        ret: u64,
        args: &[u64; ARG_WORDS],
    ) -> Option<Self> {
        let words = if short_args {
            SHORT_ARG_WORDS
        } else {
            ARG_WORDS
        };
        let size = line_sized((PAIR_HEAD_BYTES + words * 8 + mem.bytes()) as u64);
        let reserved = reserve(size, 2)?;
        let item = reserved.item;
        let (exit_ts_ns, exit_cpu_ns) = stamp_now(|now| clock_at(clock, now));
        let head = PairHead {
            kind: RecordKind::CallPair as u16,
            fn_id,
            mem_len: 0,
            arg_words: words as u16,
            tgid,
            tid,
            entry_ts_ns: entry.ts_ns,
            entry_cpu_ns: entry.cpu_ns,
            exit_ts_ns,
            exit_cpu_ns,
            ret,
        };
        // SAFETY: the reserved item holds the head, `words` argument words and `mem`; one
        // store per word (see `Draft::submit`).
        unsafe {
            core::ptr::write(item as *mut PairHead, head);
            let at = (item as *mut u8).add(PAIR_HEAD_BYTES) as *mut u64;
            for (i, &word) in args.iter().enumerate().take(words) {
                core::ptr::write_volatile(at.add(i), word);
            }
            Some(Self {
                reserved,
                mem: at.add(words) as *mut u8,
                room: mem,
            })
        }
    }

    /// Reads the exit's user memory as `read` says, as much as the item has room for. A
    /// failed read leaves `mem_len` 0 (counted).
    #[inline(always)]
    pub fn read_user(&mut self, read: &UserRead) {
        let head = self.reserved.item as *mut PairHead;
        // SAFETY: the reserved item's `mem`, with room `self.room`, and its head's `mem_len`.
        unsafe { read_into(self.mem, &mut (*head).mem_len, self.room, read) };
    }

    /// Hands the item to user space ([`Reserved::commit`]).
    #[inline(always)]
    pub fn submit(self) {
        self.reserved.commit(false);
    }
}

/// The size to reserve for a record of `bytes`: rounded up so that the item, with the ring
/// buffer's 8-byte header, fills whole cache lines. Every item then starts a cache line of its
/// own, and the ranks on different CPUs that write one after the other into the ring buffer do
/// not write into the same line: with items packed end to end, the line one thread was
/// finishing went over to the other CPU for its next item and back (false sharing). Measured on
/// `ring 400000 0` (2 ranks, one per CPU; the kernel's eBPF statistics, 8 alternated runs):
/// the two programs ran 389 ns per call instead of 416. The cost is ring buffer room: the
/// bytes past a record's end are not written, and not read (see `lbf::probe::reader`).
#[inline(always)]
const fn line_sized(bytes: u64) -> u64 {
    const HEADER: u64 = 8;
    const LINE: u64 = 64;
    (bytes + HEADER).div_ceil(LINE) * LINE - HEADER
}

/// A ring buffer item reserved, to be filled and then handed over with [`Reserved::commit`].
struct Reserved {
    /// The item.
    item: *mut c_void,
    /// The ring buffer it is in.
    ring: *mut c_void,
    /// The item's size in bytes.
    size: u64,
}

/// Reserves an item of `size` bytes (one of a few constants) holding `records` records in this
/// CPU's ring buffer. `None`, and `records` counted lost (globally and in the thread's state),
/// when the ring buffer is full (or missing). `records` 0: an item that says what was lost,
/// not counted itself.
#[inline(always)]
fn reserve(size: u64, records: u64) -> Option<Reserved> {
    let reserved = this_cpus_ring().and_then(|ring| {
        // SAFETY: `ring` is a ring buffer map.
        let item = unsafe { bpf_ringbuf_reserve(ring, size, 0) };
        (!item.is_null()).then_some(Reserved { item, ring, size })
    });
    if reserved.is_none() && records > 0 {
        add(counter::LOST_RINGBUF, records);
        note_lost(records);
    }
    reserved
}

/// Reads user memory into `mem` (room `room`) as `read` says, as much as fits, and sets
/// `*mem_len` to the bytes read; a failed read leaves it as it was (counted).
///
/// # Safety
/// `mem` and `mem_len` point into a reserved item, `mem` with room `room`.
#[inline(always)]
unsafe fn read_into(mem: *mut u8, mem_len: *mut u16, room: Mem, read: &UserRead) {
    let len = match room {
        Mem::None => return,
        Mem::Short => read.len.min(SHORT_MEM_BYTES as u32),
        Mem::Full => read.len.min(MEM_BYTES as u32),
    };
    // SAFETY: the caller's; `len` is within the room.
    unsafe {
        if bpf_probe_read_user(mem as *mut _, len, read.ptr as *const _) == 0 {
            *mem_len = len as u16;
            return;
        }
        // A fixed-length read of an array whose length no argument gives (an `MPI_Alltoallv`
        // count array, one int per rank) may run past the last mapped page after it: what is
        // before that page's end is read, and user space sees how far the array went.
        // `to_end < len <= room`, so the mask changes nothing but shows the verifier the bound.
        let to_end = 4096 - (read.ptr & 4095) as u32;
        let mask = match room {
            Mem::Short => SHORT_MEM_BYTES as u32 - 1,
            _ => MEM_BYTES as u32 - 1,
        };
        let to_end = to_end & mask;
        if to_end < len && bpf_probe_read_user(mem as *mut _, to_end, read.ptr as *const _) == 0 {
            *mem_len = to_end as u16;
            return;
        }
        count(counter::MEM_READ_FAILED);
    }
}

impl Reserved {
    /// Hands the item to user space. It wakes the reader once, when this item takes the
    /// unread bytes of its ring buffer past an eighth ([`wake_bytes`]), and then at every
    /// record only from half full on.
    ///
    /// A wake-up costs the traced thread some 10 µs here (an interrupt; on a virtual machine an
    /// exit to the hypervisor), twenty times the probe itself. Waking the reader at every record
    /// from an eighth on, while it pauses between batches, made the probes cost that much each
    /// on long runs. From half full on, though, the reader is falling behind, and that cost is
    /// what keeps the ring from overflowing: it slows the traced threads down to the reader's
    /// pace instead of losing their records. The reader polls on a short timer besides, which
    /// also catches a crossing that two CPUs' records hide from each other (where CPUs share a
    /// ring).
    /// `wake_now`: wake the reader whatever the ring's fill.
    #[inline(always)]
    fn commit(self, wake_now: bool) {
        // SAFETY: `ring` is the ring buffer map the item was reserved in.
        let unread = unsafe { bpf_ringbuf_query(self.ring, BPF_RB_AVAIL_DATA as u64) };
        let wake = wake_bytes();
        // The item's own bytes include the ring buffer's 8-byte header (sizes are multiples
        // of 8).
        let crossed = unread >= wake && unread < wake + self.size + 8;
        let flag = if wake_now || crossed || unread >= 4 * wake {
            BPF_RB_FORCE_WAKEUP
        } else {
            BPF_RB_NO_WAKEUP
        };
        // SAFETY: the item reserved, submitted once.
        unsafe { bpf_ringbuf_submit(self.item, flag as u64) };
    }
}

/// `(now, cpu_at(now))`: a record's `ts_ns` and `cpu_ns` for an event happening now.
#[inline(always)]
pub fn stamp_now(cpu_at: impl FnOnce(u64) -> u64) -> (u64, u64) {
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    (now, cpu_at(now))
}

/// Writes a record head: `kind`, `fn_id`, the ids, `(ts_ns, cpu_ns)` as `stamp`, no `mem`,
/// part 0 (`args` are written at the submit).
///
/// # Safety
/// `record` points at a reserved record head.
#[inline(always)]
unsafe fn write_head(
    record: *mut Record,
    kind: RecordKind,
    fn_id: u16,
    tgid: u32,
    tid: u32,
    (ts_ns, cpu_ns): (u64, u64),
) {
    // SAFETY: the caller's.
    unsafe {
        (*record).kind = kind as u16;
        (*record).fn_id = fn_id;
        (*record).mem_len = 0;
        (*record).part = 0;
        (*record).tgid = tgid;
        (*record).tid = tid;
        (*record).ts_ns = ts_ns;
        (*record).cpu_ns = cpu_ns;
    }
}
