//! Writing records into the ring buffer: the header (kind, ids, time, CPU clock) and the
//! optional user memory read. Never blocks: a full ring buffer drops the record and counts it.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE},
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns, gen::bpf_probe_read_user},
    maps::ring_buf::RingBufEntry,
};
use lbf_common::{counter, maps::ThreadClock, MemRead, Record, RecordKind, ARG_WORDS, MEM_BYTES};

use crate::maps::{count, current_sum_exec_runtime, EVENTS, THREADS};

/// The calling thread's ids: `(tgid, tid)`.
#[inline(always)]
pub fn current_ids() -> (u32, u32) {
    let id = bpf_get_current_pid_tgid();
    ((id >> 32) as u32, id as u32)
}

/// The running (current) thread `tid`'s cumulative on-CPU nanoseconds at `now`, from its
/// state's clock ([`clock_at`]). Without a state: `sum_exec_runtime`, or 0; counted.
#[inline(always)]
pub fn cpu_now(tid: u32, now: u64) -> u64 {
    match THREADS.get_ptr_mut(&tid) {
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

/// A reserved record being filled; submitted with [`Draft::submit`].
pub struct Draft {
    entry: RingBufEntry<Record>,
}

impl Draft {
    /// Reserves a record of `kind` for the current thread, stamped now, its CPU clock looked
    /// up by `tid`. `None` (and counted as lost) when the ring buffer is full.
    #[inline(always)]
    pub fn reserve(kind: RecordKind, fn_id: u16, tgid: u32, tid: u32) -> Option<Self> {
        Self::reserve_clocked(kind, fn_id, tgid, tid, |now| cpu_now(tid, now))
    }

    /// [`Draft::reserve`] with the thread's CPU clock at hand.
    #[inline(always)]
    pub fn reserve_with_clock(
        kind: RecordKind,
        fn_id: u16,
        tgid: u32,
        tid: u32,
        clock: &mut ThreadClock,
    ) -> Option<Self> {
        Self::reserve_clocked(kind, fn_id, tgid, tid, |now| clock_at(clock, now))
    }

    /// Reserves a record stamped now, `cpu_at(now)` giving the thread's CPU clock.
    #[inline(always)]
    fn reserve_clocked(
        kind: RecordKind,
        fn_id: u16,
        tgid: u32,
        tid: u32,
        cpu_at: impl FnOnce(u64) -> u64,
    ) -> Option<Self> {
        let Some(mut entry) = EVENTS.reserve::<Record>(0) else {
            count(counter::LOST_RINGBUF);
            return None;
        };
        let now = unsafe { bpf_ktime_get_ns() };
        let r = entry.as_mut_ptr();
        // SAFETY: `r` points at a reserved, exclusively owned record.
        unsafe {
            (*r).kind = kind as u16;
            (*r).fn_id = fn_id;
            (*r).mem_len = 0;
            (*r)._pad = 0;
            (*r).tgid = tgid;
            (*r).tid = tid;
            (*r).ts_ns = now;
            (*r).cpu_ns = cpu_at(now);
        }
        let mut d = Self { entry };
        d.set_args(|_| 0);
        Some(d)
    }

    /// Sets `args[i]` to `word(i)` for every `i`, one store per word: the BPF backend lowers
    /// array copies and fills to calls of byte-at-a-time `memcpy`/`memset` subprograms, some
    /// hundreds of instructions per record (volatile keeps LLVM from forming those calls).
    #[inline(always)]
    pub fn set_args(&mut self, word: impl Fn(usize) -> u64) {
        let args = self.record() as *mut u8;
        for i in 0..ARG_WORDS {
            // SAFETY: `args` of the reserved record, `i` < ARG_WORDS.
            unsafe {
                let slot = args.add(core::mem::offset_of!(Record, args)) as *mut u64;
                core::ptr::write_volatile(slot.add(i), word(i));
            }
        }
    }

    /// The record being filled.
    #[inline(always)]
    pub fn record(&mut self) -> *mut Record {
        self.entry.as_mut_ptr()
    }

    /// Reads user memory into `mem` as `read` says, taking the pointer and the element count
    /// from `args` (the call's entry arguments). A failed read leaves `mem_len` 0 (counted).
    #[inline(always)]
    pub fn read_user(&mut self, read: &MemRead, args: &[u64; ARG_WORDS]) {
        // `get` rather than indexing: a bounds-check panic would not pass the verifier.
        let Some(&ptr) = args.get((read.ptr_arg as usize).wrapping_sub(1)) else {
            return;
        };
        let mut len = read.len as u64;
        if read.count_arg != 0 {
            let Some(&n) = args.get(read.count_arg as usize - 1) else {
                return;
            };
            // Counts are C ints: only the low 32 bits of the register are defined.
            len = len.saturating_mul(n as u32 as u64);
        }
        if len > MEM_BYTES as u64 {
            len = MEM_BYTES as u64;
        }
        // Nothing is mapped in the first page: 0 is NULL (Open MPI's MPI_STATUS_IGNORE), 1 is
        // MPICH's MPI_STATUS_IGNORE. Such pointers mean "no data", not a failed read.
        if ptr < 4096 || len == 0 {
            return;
        }
        let r = self.record();
        // SAFETY: the destination is the reserved record's `mem`, `len` <= MEM_BYTES.
        let rc = unsafe {
            bpf_probe_read_user((*r).mem.as_mut_ptr() as *mut _, len as u32, ptr as *const _)
        };
        if rc == 0 {
            unsafe { (*r).mem_len = len as u16 };
        } else {
            count(counter::MEM_READ_FAILED);
        }
    }

    /// Hands the record to user space, waking the reader only once the ring buffer is an
    /// eighth full: a wake-up per record (an interrupt, and a context switch on a machine whose
    /// cores run the traced program) costs several times the probe itself. The reader polls
    /// on a short timer besides.
    #[inline(always)]
    pub fn submit(self) {
        let avail = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
        let size = EVENTS.query(BPF_RB_RING_SIZE as u64);
        let wake = if avail >= size / 8 {
            BPF_RB_FORCE_WAKEUP
        } else {
            BPF_RB_NO_WAKEUP
        };
        self.entry.submit(wake as u64);
    }
}
