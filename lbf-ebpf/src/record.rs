//! Writing records into the ring buffer: the header (kind, ids, time, CPU clock), the
//! arguments and the optional user memory read, in an item only as long as that read needs.
//! Never blocks: a full ring buffer drops the record and counts it.

use core::{ffi::c_void, mem::MaybeUninit};

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        gen::{bpf_probe_read_user, bpf_ringbuf_reserve, bpf_ringbuf_submit},
    },
    maps::RingBuf,
};
use lbf_common::{
    counter,
    maps::{DeferredEntry, ThreadClock, ThreadState},
    GlobalPtr, MemRead, Record, RecordKind, ARG_WORDS, MEM_BYTES, RECORD_HEAD_BYTES,
    SHORT_MEM_BYTES,
};

use crate::maps::{add, count, current_sum_exec_runtime, wake_bytes, EVENTS, THREADS};

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

/// The running (current) thread's cumulative on-CPU nanoseconds at `now`, by its `clock`. A
/// clock that does not know when the thread was switched in (seeded by user space, or its
/// switch-in not seen) takes the scheduler's `sum_exec_runtime` (stale by at most a scheduler
/// tick) and starts its running interval now.
#[inline(always)]
pub fn clock_at(clock: &mut ThreadClock, now: u64) -> u64 {
    if clock.switched_in_ns == 0 {
        if let Some(sum) = current_sum_exec_runtime() {
            clock.acc_ns = sum;
        }
        clock.switched_in_ns = now;
        clock.acc_ns
    } else {
        clock.acc_ns + now.saturating_sub(clock.switched_in_ns)
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
    /// The room a record needs for `read`.
    #[inline(always)]
    pub fn for_read(read: Option<&UserRead>) -> Self {
        match read {
            None => Self::None,
            Some(r) if r.len as usize <= SHORT_MEM_BYTES => Self::Short,
            Some(_) => Self::Full,
        }
    }
}

/// A read of user memory a record carries: `len` (1 to [`MEM_BYTES`]) bytes at `ptr`.
#[derive(Clone, Copy)]
pub struct UserRead {
    ptr: u64,
    len: u32,
}

impl UserRead {
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

/// Writes the deferred entry record of the thread whose state is `state`, if it has one (see
/// `lbf_common::maps::ThreadState::entry`): the record of its innermost call in flight,
/// stamped when the call was entered. Called before anything else the thread
/// records, so that its records stay in order, and when the thread ends inside the call.
#[inline(always)]
pub fn write_deferred_entry(state: &mut ThreadState) {
    let entry = state.entry;
    if entry.ts_ns == 0 {
        return;
    }
    state.entry.ts_ns = 0;
    let Some(call) = state.innermost() else {
        return;
    };
    let (fn_id, tgid, tid) = (call.fn_id as u16, state.tgid, state.tid);
    let draft = Draft::reserve_stamped(
        RecordKind::CallEntry,
        fn_id,
        tgid,
        tid,
        Mem::None,
        1,
        || (entry.ts_ns, entry.cpu_ns),
    );
    if let Some(d) = draft {
        // SAFETY: `i` < ARG_WORDS, within `call.args`; one load per word (no `memcpy`).
        d.submit(|i| unsafe { core::ptr::read_volatile(call.args.as_ptr().add(i)) });
    }
}

/// A reserved record being filled; submitted with [`Draft::submit`].
pub struct Draft {
    /// The ring buffer item reserved, submitted as a whole.
    item: *mut c_void,
    /// The record being filled: the item's only record, or the second of a
    /// [`RecordKind::CallPair`].
    record: *mut Record,
    mem: Mem,
}

impl Draft {
    /// Reserves a record of `kind` for the current thread (ids `tgid`, `tid`) with room `mem`,
    /// stamped now by its CPU clock. The thread's deferred entry record, if any, is written
    /// first. `None` (and counted as lost) when the ring buffer is full.
    #[inline(always)]
    pub fn reserve(kind: RecordKind, fn_id: u16, tgid: u32, tid: u32, mem: Mem) -> Option<Self> {
        let state = THREADS.current();
        if let Some(state) = state {
            // SAFETY: a map value, written only by this thread's probes and hooks.
            write_deferred_entry(unsafe { &mut *state });
        }
        Self::reserve_stamped(kind, fn_id, tgid, tid, mem, 1, || {
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
        Self::reserve_stamped(kind, fn_id, tgid, tid, mem, 1, || {
            stamp_now(|now| clock_at(clock, now))
        })
    }

    /// Reserves one [`RecordKind::CallPair`] item for a call of `fn_id` whose entry record was
    /// deferred: writes that entry record (stamped `entry`, with the call's entry arguments
    /// `args`) and returns the call's `CallExit` record, with room `mem`, stamped now.
    /// `None` (both records counted as lost) when the ring buffer is full.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn reserve_pair(
        fn_id: u16,
        tgid: u32,
        tid: u32,
        mem: Mem,
        clock: &mut ThreadClock,
        entry: &DeferredEntry,
        args: &[u64; ARG_WORDS],
    ) -> Option<Self> {
        let pair = Self::reserve_stamped(RecordKind::CallPair, fn_id, tgid, tid, mem, 2, || {
            (entry.ts_ns, entry.cpu_ns)
        })?;
        pair.write_args(|i| args[i]);
        // SAFETY: a pair item holds the entry record's head, then the exit record (room
        // reserved above).
        let exit = unsafe { (pair.item as *mut u8).add(RECORD_HEAD_BYTES) } as *mut Record;
        let stamp = stamp_now(|now| clock_at(clock, now));
        // SAFETY: the exit record's head, within the reserved item.
        unsafe { write_head(exit, RecordKind::CallExit, fn_id, tgid, tid, stamp) };
        Some(Self {
            record: exit,
            ..pair
        })
    }

    /// Reserves an item of `records` records (1, or 2 for a [`RecordKind::CallPair`]), the
    /// last with room `mem`, and writes the head of the first: `kind`, the ids, and the
    /// `(ts_ns, cpu_ns)` `stamp` gives (called once reserved). A full ring buffer counts
    /// `records` lost.
    #[inline(always)]
    fn reserve_stamped(
        kind: RecordKind,
        fn_id: u16,
        tgid: u32,
        tid: u32,
        mem: Mem,
        records: u64,
        stamp: impl FnOnce() -> (u64, u64),
    ) -> Option<Self> {
        let size = RECORD_HEAD_BYTES * records as usize
            + match mem {
                Mem::None => 0,
                Mem::Short => SHORT_MEM_BYTES,
                Mem::Full => MEM_BYTES,
            };
        let ring = &EVENTS as *const RingBuf as *mut c_void;
        // SAFETY: `ring` is the ring buffer map; the size is one of six constants.
        let item = unsafe { bpf_ringbuf_reserve(ring, size as u64, 0) };
        if item.is_null() {
            add(counter::LOST_RINGBUF, records);
            return None;
        }
        let record = item as *mut Record;
        // SAFETY: `record` points at a reserved, exclusively owned record head.
        unsafe { write_head(record, kind, fn_id, tgid, tid, stamp()) };
        Some(Self { item, record, mem })
    }

    /// The record being filled; only its head, and `mem` as far as reserved, exist.
    #[inline(always)]
    pub fn record(&mut self) -> *mut Record {
        self.record
    }

    /// Reads user memory into `mem` as `read` says, as much as the record has room for. A
    /// failed read leaves `mem_len` 0 (counted).
    #[inline(always)]
    pub fn read_user(&mut self, read: &UserRead) {
        let len = match self.mem {
            Mem::None => return,
            Mem::Short => read.len.min(SHORT_MEM_BYTES as u32),
            Mem::Full => read.len.min(MEM_BYTES as u32),
        };
        let r = self.record;
        // SAFETY: the destination is the reserved record's `mem`, `len` within its room.
        let rc = unsafe {
            bpf_probe_read_user((*r).mem.as_mut_ptr() as *mut _, len, read.ptr as *const _)
        };
        if rc == 0 {
            unsafe { (*r).mem_len = len as u16 };
        } else {
            count(counter::MEM_READ_FAILED);
        }
    }

    /// Marks the record as part `part` of its call (see [`lbf_common::Record::part`]).
    #[inline(always)]
    pub fn set_part(&mut self, part: u16) {
        // SAFETY: the reserved record head.
        unsafe { (*self.record).part = part };
    }

    /// Reads the `u32` at user address `ptr` into word `index` of `mem` (a [`Mem::Full`]
    /// record's), which then ends `mem`. False, and `mem` left as it was, for an index out of
    /// room or a failed read (counted).
    #[inline(always)]
    pub fn read_user_word(&mut self, index: usize, ptr: u64) -> bool {
        if self.mem != Mem::Full || index >= MEM_BYTES / 4 {
            return false;
        }
        let r = self.record;
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

    /// Sets `args[i]` to `word(i)` for every `i` and hands the record to user space, waking
    /// the reader only once the ring buffer is an eighth full ([`wake_bytes`]): a wake-up per
    /// record (an interrupt, and a context switch on a machine whose cores run the traced
    /// program) costs several times the probe itself. The reader polls on a short timer
    /// besides.
    ///
    /// The words are stored one by one: the BPF backend lowers array copies and fills to
    /// calls of byte-at-a-time `memcpy`/`memset` subprograms, some hundreds of instructions
    /// per record (volatile keeps LLVM from forming those calls).
    #[inline(always)]
    pub fn submit(self, word: impl Fn(usize) -> u64) {
        self.write_args(word);
        let wake = if EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= wake_bytes() {
            BPF_RB_FORCE_WAKEUP
        } else {
            BPF_RB_NO_WAKEUP
        };
        // SAFETY: the item reserved, submitted once.
        unsafe { bpf_ringbuf_submit(self.item, wake as u64) };
    }

    /// Sets `args[i]` of the record being filled to `word(i)` for every `i`, one store per
    /// word (see [`Draft::submit`]).
    #[inline(always)]
    fn write_args(&self, word: impl Fn(usize) -> u64) {
        // SAFETY: `args` of the reserved record head, `i` < ARG_WORDS.
        let args = unsafe { (*self.record).args.as_mut_ptr() };
        for i in 0..ARG_WORDS {
            unsafe { core::ptr::write_volatile(args.add(i), word(i)) };
        }
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
