//! The maps shared with user space (names, sizes and value types in `lbf_common::maps`).

use aya_ebpf::{
    bindings::task_struct,
    macros::{btf_map, map},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use lbf_common::{
    counter,
    maps::{
        KernelOffsets, SendRules, ThreadState, COMM_BYTES, INIT_NOTICES_BYTES, MAX_LIBS, MAX_RINGS,
        MAX_TRACED,
    },
    FnReads, MAX_FNS,
};

use crate::{record::current_ids, ring_array::RingArray, task_storage::TaskStorage};

/// The command name whose executions are traced (`lbf_common::maps::ADOPT_COMM`).
#[map]
pub static ADOPT_COMM: Array<[u8; COMM_BYTES]> = Array::with_max_entries(1, 0);

/// Records for user space: one ring buffer per CPU (`lbf_common::maps::RINGS`), put in by user
/// space after loading.
#[btf_map]
pub static RINGS: RingArray<{ MAX_RINGS as usize }> = RingArray::new();

/// The ring buffers in use less one (`lbf_common::maps::RING_MASK`), set before loading.
#[unsafe(no_mangle)]
pub static RING_MASK: u32 = 0;

/// The ring buffer records written on this CPU go into; `None` if user space has not put it in
/// (the record is then counted as lost).
#[inline(always)]
pub fn this_cpus_ring() -> Option<*mut core::ffi::c_void> {
    // SAFETY: a plain static the loader patched before load; nothing writes it after.
    let mask = unsafe { core::ptr::read_volatile(&RING_MASK) };
    // SAFETY: a helper without arguments.
    let cpu = unsafe { aya_ebpf::helpers::gen::bpf_get_smp_processor_id() };
    RINGS.get(cpu & mask)
}

/// `MPI_Init` notices (`lbf_common::maps::INIT_NOTICES`).
#[map]
pub static INIT_NOTICES: RingBuf = RingBuf::with_byte_size(INIT_NOTICES_BYTES, 0);

/// Traced thread group ids.
#[map]
pub static TRACED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TRACED, 0);

/// What tells that a traced process's blocking send goes eagerly
/// (`lbf_common::maps::SEND_RULES`), by tgid; removed when the process executes a new image
/// or ends.
#[map]
pub static SEND_RULES: HashMap<u32, SendRules> = HashMap::with_max_entries(MAX_TRACED, 0);

/// State (CPU clock, calls in flight) of each traced thread, kept in the thread's task: a
/// probe finds its thread's state by a pointer walk from the current task instead of a hash
/// lookup by thread id, and the state ends with the thread.
#[btf_map]
pub static THREADS: TaskStorage<ThreadState> = TaskStorage::new();

/// Memory reads per `slot * MAX_FNS + fn_id`.
#[map]
pub static FN_READS: Array<FnReads> = Array::with_max_entries(MAX_FNS * MAX_LIBS, 0);

/// Per-CPU counters indexed by `lbf_common::counter`.
#[map]
pub static COUNTERS: PerCpuArray<u64> =
    PerCpuArray::with_max_entries(lbf_common::counter::COUNT, 0);

/// Where this CPU's steal clock is (a kernel address), found at the first reading on the CPU;
/// 0 until then (see [`lbf_steal_clock`]).
#[map]
pub static STEAL_CLOCKS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The nanoseconds the hypervisor has taken this CPU from the virtual machine so far (a KVM
/// guest's steal clock, which the host brings up to date whenever it gives the CPU back), or 0
/// where the kernel has none or the way to it is unknown. Thread clocks leave them out, as the
/// scheduler does (see `lbf_common::maps::ThreadClock`).
///
/// The way: the current task's `se.cfs_rq->rq` is this CPU's run queue, the per-CPU variable
/// `runqueues`; `steal_time` lies at the same distance from it as in the per-CPU section. The
/// run queue's `cpu` is checked before the address is kept. A global BPF function, verified
/// once per program.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn lbf_steal_clock() -> u64 {
    let Some(slot) = STEAL_CLOCKS.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's value of a per-CPU array; nothing else runs on the CPU meanwhile.
    let mut at = unsafe { *slot };
    if at == 0 {
        let Some(found) = find_steal_clock() else {
            return 0;
        };
        at = found;
        // SAFETY: as above.
        unsafe { *slot = at };
    }
    // SAFETY: a checked read of kernel memory.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(at as *const u64) }.unwrap_or(0)
}

/// The address of this CPU's steal clock (see [`lbf_steal_clock`]), if the offsets are known
/// and the run queue found is this CPU's.
#[inline(always)]
fn find_steal_clock() -> Option<u64> {
    let o = offsets();
    if o.task_cfs_rq == KernelOffsets::ABSENT || o.percpu_steal == KernelOffsets::ABSENT {
        return None;
    }
    let read = |at: u64| -> Option<u64> {
        // SAFETY: a checked read of kernel memory.
        unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(at as *const u64) }.ok()
    };
    // SAFETY: the current task is valid while the program runs.
    let task = unsafe { aya_ebpf::helpers::bpf_get_current_task() };
    let cfs_rq = read(task + u64::from(o.task_cfs_rq))?;
    let rq = read(cfs_rq + u64::from(o.cfs_rq_rq))?;
    // SAFETY: a checked read of kernel memory.
    let cpu: u32 = unsafe {
        aya_ebpf::helpers::bpf_probe_read_kernel((rq + u64::from(o.rq_cpu)) as *const u32)
    }
    .ok()?;
    // SAFETY: a helper without arguments.
    if cpu != unsafe { aya_ebpf::helpers::gen::bpf_get_smp_processor_id() } {
        return None;
    }
    Some(
        rq.wrapping_sub(u64::from(o.percpu_runqueues))
            .wrapping_add(u64::from(o.percpu_steal)),
    )
}

/// Offsets of the kernel data read (tracepoint fields, `task_struct`), set before loading.
#[unsafe(no_mangle)]
pub static KERNEL_OFFSETS: KernelOffsets = KernelOffsets::UNKNOWN;

/// Unread bytes in a ring buffer of [`RINGS`] from which a submit wakes the reader
/// (`lbf_common::maps::WAKE_BYTES`), set before loading; this is a placeholder.
#[unsafe(no_mangle)]
pub static WAKE_BYTES: u64 = (1 << 20) / 8;

/// Reads [`WAKE_BYTES`] as set at load time (volatile, so the compiler keeps the load).
#[inline(always)]
pub fn wake_bytes() -> u64 {
    // SAFETY: a plain static the loader patched before load; nothing writes it after.
    unsafe { core::ptr::read_volatile(&WAKE_BYTES) }
}

/// Reads [`KERNEL_OFFSETS`] as set at load time (volatile, so the compiler keeps the load).
#[inline(always)]
pub fn offsets() -> KernelOffsets {
    // SAFETY: a plain static the loader patched before load; nothing writes it after.
    unsafe { core::ptr::read_volatile(&KERNEL_OFFSETS) }
}

/// The running thread's executable text, `[start, end)` (`mm_struct.start_code`, `.end_code`
/// of its address space); `None` where it cannot be read (a kernel thread, unknown offsets).
#[inline(always)]
pub fn executable_text() -> Option<[u64; 2]> {
    let o = offsets();
    if o.task_mm == KernelOffsets::ABSENT || o.mm_start_code == KernelOffsets::ABSENT {
        return None;
    }
    // SAFETY: the current task is valid while the program runs; checked reads of kernel memory.
    unsafe {
        let task = aya_ebpf::helpers::bpf_get_current_task();
        let mm: u64 =
            aya_ebpf::helpers::bpf_probe_read_kernel((task + o.task_mm as u64) as *const u64)
                .ok()?;
        let text: [u64; 2] = aya_ebpf::helpers::bpf_probe_read_kernel(
            (mm + o.mm_start_code as u64) as *const [u64; 2],
        )
        .ok()?;
        (text[1] > text[0]).then_some(text)
    }
}

/// The memory reads of function `fn_id` in library slot `slot`.
#[inline(always)]
pub fn fn_reads(slot: u32, fn_id: u16) -> Option<&'static FnReads> {
    FN_READS.get((slot & (MAX_LIBS - 1)) * MAX_FNS + fn_id as u32)
}

/// The state of the running (current) thread: its own, or a new one if its process is traced
/// (a thread whose creation was not seen). `None` for threads of untraced processes, and when
/// the state cannot be created (counted as `NO_CLOCK`).
#[inline(always)]
pub fn thread_state() -> Option<*mut ThreadState> {
    if let Some(state) = THREADS.current() {
        return Some(state);
    }
    let (tgid, tid) = current_ids();
    if !is_traced(tgid) {
        return None;
    }
    init_thread_state(THREADS.current_or_zeroed(), tgid, tid)
}

/// Gives the new task `task` (thread `tid` of process `tgid`) a fresh state: no clock yet, no
/// call in flight. `None` (counted as `NO_CLOCK`) when it cannot be created.
///
/// # Safety
/// `task` is a task pointer the verifier accepts (see [`TaskStorage::of`]).
#[inline(always)]
pub unsafe fn new_thread_state(
    task: *mut task_struct,
    tgid: u32,
    tid: u32,
) -> Option<*mut ThreadState> {
    // SAFETY: the caller's.
    init_thread_state(unsafe { THREADS.of_or_zeroed(task) }, tgid, tid)
}

/// Sets the ids of a just created (zeroed) `state`; counts `NO_CLOCK` if there is none.
#[inline(always)]
fn init_thread_state(
    state: Option<*mut ThreadState>,
    tgid: u32,
    tid: u32,
) -> Option<*mut ThreadState> {
    match state {
        // SAFETY: the task's storage, valid for the program's run.
        Some(s) => unsafe {
            (*s).tgid = tgid;
            (*s).tid = tid;
        },
        None => count(counter::NO_CLOCK),
    }
    state
}

/// Adds one to the per-CPU counter `index`.
#[inline(always)]
pub fn count(index: u32) {
    add(index, 1);
}

/// Adds `n` to the per-CPU counter `index`.
#[inline(always)]
pub fn add(index: u32, n: u64) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { *c += n };
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
    // SAFETY: the current task is valid while the program runs.
    sum_exec_runtime(unsafe { aya_ebpf::helpers::bpf_get_current_task() })
}

/// `se.sum_exec_runtime` of the task at kernel address `task` (see
/// [`current_sum_exec_runtime`]).
#[inline(always)]
pub fn sum_exec_runtime(task: u64) -> Option<u64> {
    let off = offsets().task_sum_exec_runtime;
    if off == KernelOffsets::ABSENT {
        return None;
    }
    // SAFETY: a checked read of kernel memory.
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel((task + off as u64) as *const u64).ok() }
}
