//! The maps shared with user space (names, sizes and value types in `lbf_common::maps`) and
//! the one kernel-private map: the entry arguments of calls in flight.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use lbf_common::{
    maps::{KernelOffsets, ThreadClock, MAX_IN_FLIGHT, MAX_LIBS, MAX_TRACED},
    FnReads, ARG_WORDS, MAX_FNS,
};

/// Records for user space. User space sets the size before loading; this is a placeholder.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Traced thread group ids.
#[map]
pub static TRACED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TRACED, 0);

/// CPU clock per traced thread id.
#[map]
pub static CLOCKS: HashMap<u32, ThreadClock> = HashMap::with_max_entries(MAX_TRACED, 0);

/// Memory reads per `slot * MAX_FNS + fn_id`.
#[map]
pub static FN_READS: Array<FnReads> = Array::with_max_entries(MAX_FNS * MAX_LIBS, 0);

/// MPI library slot per traced tgid (absent: slot 0).
#[map]
pub static LIB_OF: HashMap<u32, u32> = HashMap::with_max_entries(MAX_TRACED, 0);

/// Per-CPU counters indexed by `lbf_common::counter`.
#[map]
pub static COUNTERS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(lbf_common::counter::COUNT, 0);

/// Entry arguments of calls in flight, keyed by [`in_flight_key`]. LRU so that entries whose
/// return was never seen (thread killed inside a call) age out instead of filling the map.
#[map]
pub static IN_FLIGHT: LruHashMap<u64, [u64; ARG_WORDS]> =
    LruHashMap::with_max_entries(MAX_IN_FLIGHT, 0);

/// Offsets of the kernel data read (tracepoint fields, `task_struct`), set before loading.
#[unsafe(no_mangle)]
pub static KERNEL_OFFSETS: KernelOffsets = KernelOffsets::LINUX_6_18;

/// Reads [`KERNEL_OFFSETS`] as set at load time (volatile, so the compiler keeps the load).
#[inline(always)]
pub fn offsets() -> KernelOffsets {
    // SAFETY: a plain static the loader patched before load; nothing writes it after.
    unsafe { core::ptr::read_volatile(&KERNEL_OFFSETS) }
}

/// Key of a call in flight: thread id and function id (a thread cannot be inside the same
/// probed function twice, barring recursion, which MPI functions do not do).
#[inline(always)]
pub fn in_flight_key(tid: u32, fn_id: u16) -> u64 {
    ((tid as u64) << 16) | fn_id as u64
}

/// Adds one to the per-CPU counter `index`.
#[inline(always)]
pub fn count(index: u32) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { *c += 1 };
    }
}

/// Whether thread group `tgid` is traced.
#[inline(always)]
pub fn is_traced(tgid: u32) -> bool {
    // SAFETY: the value is only tested for presence.
    unsafe { TRACED.get(&tgid).is_some() }
}

/// The current task's `se.sum_exec_runtime` (exact as of its last scheduler update), or
/// `None` when the offset is unknown (no BTF) or the read fails.
#[inline(always)]
pub fn current_sum_exec_runtime() -> Option<u64> {
    let off = offsets().task_sum_exec_runtime;
    if off == KernelOffsets::ABSENT {
        return None;
    }
    // SAFETY: the current task is valid while the program runs; the read is checked.
    unsafe {
        let task = aya_ebpf::helpers::bpf_get_current_task();
        aya_ebpf::helpers::bpf_probe_read_kernel((task + off as u64) as *const u64).ok()
    }
}
