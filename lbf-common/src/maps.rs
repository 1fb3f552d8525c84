//! The BPF maps and load-time settings lbf's eBPF object shares with user space: their names,
//! value types and sizes. The record stream itself is described by [`crate::Record`].
//!
//! The kernel side keeps only what it needs to filter and to stamp records: which processes
//! are traced, and per traced thread its CPU clock and the entry arguments of its calls until
//! they return (kept in the thread's task, [`THREADS`]: one lookup per probe hit finds both). Which library's memory layout a call
//! is read with comes from the probe's attach cookie (`crate::mpi::cookie`).

/// The ring buffers of [`crate::Record`]s: an array of [`MAX_RINGS`] slots
/// (`BPF_MAP_TYPE_ARRAY_OF_MAPS`), of which user space fills the first [`RING_MASK`] + 1 with
/// ring buffers of one size. A record goes into the ring of the CPU it is written on (its
/// number masked by [`RING_MASK`]), so that threads on different CPUs do not contend for one
/// ring buffer's lock and cache lines at every record.
pub const RINGS: &str = "RINGS";
/// Slots of [`RINGS`]: at most this many ring buffers, however many CPUs.
pub const MAX_RINGS: u32 = 64;
/// The global (`u32`) masking a CPU number into a slot of [`RINGS`]: the number of ring
/// buffers less one (a power of two less one), set by user space before loading.
pub const RING_MASK: &str = "RING_MASK";
/// A small ring buffer of `u32` tgids, one per `MPI_Init` or `MPI_Init_thread` entry of a
/// traced process, each waking its reader: user space inspects the process (its MPI library,
/// its rank) while it is surely alive, instead of when the capture reaches its records, which
/// may be after a short-lived rank has ended.
pub const INIT_NOTICES: &str = "INIT_NOTICES";
/// Bytes of [`INIT_NOTICES`]: room for 1023 notices (8-byte header, the tgid padded to 8).
pub const INIT_NOTICES_BYTES: u32 = 16 << 10;
/// Traced thread group ids (`u32` tgid -> `u8` 1). User space seeds it; forks extend it.
pub const TRACED: &str = "TRACED";
/// A command name (`[u8; COMM_BYTES]`, NUL-padded; all zero: none) whose processes the kernel
/// side starts tracing when they execute it, as `task_newtask` does for forks: a node daemon
/// selecting by name traces a rank from its exec, before its first MPI call.
pub const ADOPT_COMM: &str = "ADOPT_COMM";
/// Bytes of a task's command name in the kernel (`TASK_COMM_LEN`), the NUL included.
pub const COMM_BYTES: usize = 16;
/// Per-thread state ([`ThreadState`]) of traced threads: a task-storage map
/// (`BPF_MAP_TYPE_TASK_STORAGE`), whose values live in the tasks and end with them. The kernel
/// side finds a thread's state from its task; user space names the thread by a pidfd of it (an
/// `i32` file descriptor from `pidfd_open(tid, PIDFD_THREAD)`) and cannot list the map.
pub const THREADS: &str = "THREADS";
/// Memory reads per library slot and function: an array indexed by
/// `slot * MAX_FNS + fn_id` of [`crate::FnReads`].
pub const FN_READS: &str = "FN_READS";
/// Per-CPU `u64` counters indexed by [`crate::counter`] constants.
pub const COUNTERS: &str = "COUNTERS";
/// Per CPU, where the kernel side found the CPU's steal clock (a kernel address; 0 while
/// not found): see [`ThreadClock`].
pub const STEAL_CLOCKS: &str = "STEAL_CLOCKS";
/// The global holding [`KernelOffsets`], set by user space before loading.
pub const KERNEL_OFFSETS: &str = "KERNEL_OFFSETS";
/// The global (`u64`) holding the unread bytes in a ring of [`RINGS`] from which a record's
/// submit wakes the reader: an eighth of a ring buffer, set by user space with its size (the kernel
/// side would otherwise ask the ring buffer its size at every record, a helper call).
pub const WAKE_BYTES: &str = "WAKE_BYTES";

/// Per traced process (`u32` tgid -> [`SendRules`]): what tells the kernel side that a
/// blocking send of the process surely goes eagerly, so that its return probe may be skipped
/// (`crate::mpi::eager_by_size`). User space writes it when the process enters `MPI_Init`
/// (from the process's library, rank and configuration); a process without an entry keeps
/// every send's return.
pub const SEND_RULES: &str = "SEND_RULES";

/// Which library's handles a process's sends carry ([`SendRules::abi`]), and how each gives a
/// datatype's size: what the kernel side and the capture both read.
pub mod abi {
    /// Not known: no send is found eager.
    pub const UNKNOWN: u64 = 0;
    /// MPICH: handles are `int`s ([`mpich_builtin_size`]).
    pub const MPICH: u64 = 1;
    /// Open MPI: handles are pointers; a datatype's points at an `opal_datatype_t`, whose
    /// `size_t size` is at [`OPEN_MPI_DATATYPE_SIZE_AT`].
    pub const OPEN_MPI: u64 = 2;

    /// Byte offset of `opal_datatype_t::size` at an Open MPI 4.1 datatype handle.
    pub const OPEN_MPI_DATATYPE_SIZE_AT: usize = 24;

    /// The size of MPICH datatype `handle` if it is a builtin: bits 30-31 (the kind) are 1,
    /// and bits 8-15 hold the size (`MPI_INT` = `0x4c000405`: 4 bytes).
    pub const fn mpich_builtin_size(handle: u32) -> Option<u64> {
        if handle >> 30 == 1 {
            Some(((handle >> 8) & 0xff) as u64)
        } else {
            None
        }
    }
}

/// One process's [`SEND_RULES`] entry. A blocking standard-mode send (`MPI_Send`,
/// `MPI_Rsend`) of `count` items of a datatype whose size the kernel side finds goes eagerly
/// (its return is no event of the model) when its bytes are below `eager_below` and it is not
/// to the process itself, or below `self_eager_below` whatever its destination. A send is
/// known not to be to the process itself when its communicator is `world_comm` and its
/// destination is not `world_rank`. These are the capture's own rules
/// (`lbf_capture::mpi::eager`), taken at their most cautious: where the kernel side is not
/// sure, the send keeps its return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendRules {
    /// One more than the largest message sent eagerly to another process, whatever its host;
    /// 0: none is.
    pub eager_below: u64,
    /// One more than the largest message sent eagerly to any process, the process itself
    /// included; 0: every send to itself waits for its receive.
    pub self_eager_below: u64,
    /// `MPI_COMM_WORLD`'s handle in the process; [`SendRules::NO_COMM`] while its rank is
    /// not known.
    pub world_comm: u64,
    /// The process's rank in `MPI_COMM_WORLD`.
    pub world_rank: u64,
    /// Which library's handles its sends carry ([`abi`]).
    pub abi: u64,
}

impl SendRules {
    /// A [`SendRules::world_comm`] that no communicator argument equals.
    pub const NO_COMM: u64 = u64::MAX;

    /// Whether a blocking standard-mode send of `count` items of `size` bytes each to rank
    /// `dest` of communicator `comm` (the argument's register, whose upper half is undefined
    /// for MPICH's `int` handles) surely goes eagerly. `size` `None`: not known.
    pub const fn surely_eager(&self, count: i32, size: Option<u64>, dest: i32, comm: u64) -> bool {
        // Sizes beyond 4 GiB are taken as unknown: below, the product fits in 63 bits
        // (the eBPF target has no 128-bit multiply for a saturating one).
        let (Some(size), true) = (size, count >= 0) else {
            return false;
        };
        if size > u32::MAX as u64 {
            return false;
        }
        let comm = if self.abi == abi::MPICH {
            comm as u32 as u64
        } else {
            comm
        };
        let bytes = count as u64 * size;
        if bytes < self.self_eager_below {
            return true;
        }
        bytes < self.eager_below
            && comm == self.world_comm
            && dest >= 0
            && dest as u64 != self.world_rank
    }
}

/// Maximum number of traced processes.
pub const MAX_TRACED: u32 = 16384;
/// Maximum number of system calls (one per thread) in flight at once.
pub const MAX_IN_FLIGHT: u32 = 16384;
/// Number of MPI library slots: each attached library gets one, so that processes of
/// different MPI implementations (whose handles and statuses differ in size) get their own
/// memory reads. A call is read with the reads of the slot in its probe's attach cookie.
pub const MAX_LIBS: u32 = 4;
/// Probed calls one thread can have in flight at once (a probed function calling another,
/// as Open MPI's `MPI_Sendrecv_replace` calls `PMPI_Sendrecv`).
pub const MAX_NESTED: usize = 4;

/// One traced thread's CPU clock, as the `sched_switch` hook keeps it.
///
/// While the thread runs, its on-CPU time is `acc_ns + (now - switched_in_ns)`. At each
/// switch-out and switch-in `acc_ns` is set from the scheduler's own `sum_exec_runtime`
/// (exact, less `offset_ns`; or, without BTF, increased at the switch-out by the time since
/// the switch-in). `switched_in_ns == 0` means "not known to be running": switched out, or
/// its switch-in was not seen (some machines do not report every `sched_switch`); a probe hit
/// of such a (running) thread re-reads `sum_exec_runtime` into `acc_ns` and starts the
/// running interval there.
///
/// While the thread runs the clock counts wall time less the time the hypervisor took the
/// CPU from the virtual machine (its steal clock, `steal_in_ns`), as the scheduler's total
/// does: a virtual CPU's pauses (on this project's VM some 0.4 % of a spinning thread's wall
/// time, in pauses of 20 µs to several ms; 6 ms within one 10 ms procedure call on a busy
/// host) count as the thread's CPU in neither. Where the steal clock cannot be read (a
/// kernel without `cfs_rq.rq` or the KVM guest's `steal_time`), the clock counts the pauses
/// while the thread runs, and the exact total at its next switch takes them out again: a
/// reading there can then be below one taken before it; user space counts such a step as 0
/// and takes the difference out of the following events, so the CPU over a run stays the
/// scheduler's, unless the thread ends before it has used that much more CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadClock {
    /// On-CPU nanoseconds accumulated up to the last switch-out (or the seed).
    pub acc_ns: u64,
    /// `bpf_ktime_get_ns()` at the last switch-in, 0 if unknown or switched out.
    pub switched_in_ns: u64,
    /// The scheduler's total less this clock, wrapping (0 for a thread traced from its
    /// start): the clock reads `sum_exec_runtime - offset_ns` wherever it takes the
    /// scheduler's total. Set for a clock seeded at an attach at its first context switch
    /// (see `unanchored`).
    pub offset_ns: u64,
    /// The CPU's steal clock (nanoseconds the hypervisor ran something else) at the switch-in,
    /// or [`ThreadClock::STEAL_UNKNOWN`] until the first reading of a clock user space seeded.
    pub steal_in_ns: u64,
    /// 1 for a clock user space seeded from /proc at an attach, until its first context
    /// switch. /proc's figure for a running thread is up to a scheduler tick stale (the
    /// scheduler updates it at ticks and switches), so rather than jump by that much at its
    /// first exact reading, which would put CPU used before the attach into an interval after
    /// it, the clock keeps its reading there and takes the difference as `offset_ns`.
    pub unanchored: u64,
}

impl ThreadClock {
    /// `steal_in_ns` of a clock whose switch-in the steal clock was not read at: its first
    /// reading takes the steal clock then.
    pub const STEAL_UNKNOWN: u64 = u64::MAX;

    /// The clock of a thread user space seeds at an attach: `acc_ns` its CPU then (from
    /// /proc), counted as running since `now` (see [`ThreadClock::unanchored`]).
    pub fn seeded(acc_ns: u64, now: u64) -> Self {
        Self {
            acc_ns,
            switched_in_ns: now,
            offset_ns: 0,
            steal_in_ns: Self::STEAL_UNKNOWN,
            unanchored: 1,
        }
    }

    /// Starts a running interval at `now`, the CPU's steal clock reading `steal`.
    #[inline(always)]
    pub fn switch_in(&mut self, now: u64, steal: u64) {
        self.switched_in_ns = now;
        self.steal_in_ns = steal;
    }

    /// The reading at `now` of a clock known to be running (`switched_in_ns != 0`), the CPU's
    /// steal clock reading `steal`: `acc_ns` plus the wall time since the switch-in less what
    /// the hypervisor stole of it.
    #[inline(always)]
    pub fn running_at(&mut self, now: u64, steal: u64) -> u64 {
        if self.steal_in_ns == Self::STEAL_UNKNOWN {
            self.steal_in_ns = steal;
        }
        let ran = now.saturating_sub(self.switched_in_ns);
        let stolen = steal.saturating_sub(self.steal_in_ns);
        self.acc_ns + ran.saturating_sub(stolen)
    }

    /// Sets `acc_ns` from the scheduler's total `sum` (exact at a context switch), at an
    /// instant when this clock reads `reading`: `sum - offset_ns`. An unanchored clock is
    /// anchored first: its offset becomes `sum - reading` (wrapping), so that it keeps its
    /// reading (see [`ThreadClock::unanchored`]).
    #[inline(always)]
    pub fn set_from_total(&mut self, sum: u64, reading: u64) {
        if self.unanchored != 0 {
            self.offset_ns = sum.wrapping_sub(reading);
            self.unanchored = 0;
        }
        self.acc_ns = sum.wrapping_sub(self.offset_ns);
    }
}

/// The entry arguments of a probed call in flight, kept for its exit record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallInFlight {
    /// The function's id (`u64` to keep `args` aligned).
    pub fn_id: u64,
    /// The entry record's `args`.
    pub args: [u64; crate::ARG_WORDS],
}

/// The stamps of an entry record not written yet (see [`ThreadState::entry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeferredEntry {
    /// The entry's `ts_ns`; 0: no entry record is deferred.
    pub ts_ns: u64,
    /// The entry's `cpu_ns`.
    pub cpu_ns: u64,
}

/// What the kernel side keeps per traced thread: its CPU clock and its probed calls in flight.
///
/// A probe hit finds it with one lookup from the current task (see [`THREADS`]), and the
/// thread's ids in it (no helper call for them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadState {
    /// The thread's CPU clock.
    pub clock: ThreadClock,
    /// The thread's group id.
    pub tgid: u32,
    /// The thread's id (it changes when a thread other than the group leader executes a new
    /// program: it takes the leader's id, which the kernel side's exec hook records).
    pub tid: u32,
    /// Number of calls in `calls` (innermost last); at most [`MAX_NESTED`]. (A `u64` so that
    /// the struct has no padding.)
    pub depth: u64,
    /// The innermost call's entry record, when it is deferred: an entry record without user
    /// memory is written at the call's return, in one ring buffer item with the exit record
    /// ([`crate::RecordKind::CallPair`]), which halves the ring buffer work per call. Any
    /// other record of the thread (a call inside this one, a system call, its exit) writes
    /// the deferred entry first, so each thread's records keep their order; only the
    /// innermost call's entry can be deferred.
    pub entry: DeferredEntry,
    /// The calls in flight, outermost first.
    pub calls: [CallInFlight; MAX_NESTED],
    /// 1 from when user space seeded the state of a thread that was already running (an
    /// attach) until the thread completes a traced call: until then an exit without its entry
    /// is a call that was in progress at the attach, not a missed entry.
    pub seeded: u64,
    /// The user memory of the deferred entry record (`entry`), when it has some: a poll's
    /// entry read (its request handles) is kept here rather than written at once, since an
    /// unsuccessful poll writes no record at all (see [`PollRun`]).
    pub entry_mem: EntryMem,
    /// The unsuccessful polls since the thread's last record.
    pub polls: PollRun,
    /// The thread's records lost since its last record written.
    pub lost: LostRun,
    /// The CPU the thread spent inside traced procedures.
    pub procedures: ProcedureClocks,
    /// The attach cookie (`crate::mpi::cookie`) of the thread's innermost call when its
    /// entry skipped the return probe (`crate::mpi::return_optional`): the call has returned
    /// unseen, and its exit record is written at the thread's next probe hit, before anything
    /// else, reading its out-parameters then. 0: none.
    pub unreturned: u64,
    /// The executable's text, `[start, end)` (`mm_struct.start_code`, `.end_code`), read once
    /// per thread and program: a call whose return address is there comes from the program's
    /// own code. `end` 0: not read yet.
    pub code: [u64; 2],
}

/// Records of one thread the ring buffer had no room for since the thread's last record
/// written. The kernel side counts them here (and in the global counter); the thread's next
/// record is preceded by one [`crate::RecordKind::Lost`] record saying how many and from
/// when, so that a capture knows which process has a gap in its records.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostRun {
    /// Records lost; 0: none.
    pub count: u64,
    /// `ts_ns` when the first of them was lost.
    pub first_ts_ns: u64,
}

/// Most procedures one capture follows (`lbf-trace --procedure`): one argument word of a
/// [`crate::RecordKind::ProcCpu`] record each.
pub const MAX_PROCEDURES: usize = crate::ARG_WORDS;

/// The CPU one thread spent inside each traced procedure, kept by the procedure's entry and
/// return probes. A procedure entered again before it returns (recursion) is counted once:
/// from its outermost entry to its outermost return. Its totals reach user space in a
/// [`crate::RecordKind::ProcCpu`] record before the thread's next record after a change.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcedureClocks {
    /// Whether an entry or a return happened since the last `ProcCpu` record.
    pub changed: u64,
    /// Per procedure: how many of its calls are in progress.
    pub depth: [u64; MAX_PROCEDURES],
    /// Per procedure: the thread's CPU clock at its outermost entry in progress.
    pub entered_cpu_ns: [u64; MAX_PROCEDURES],
    /// Per procedure: the CPU spent inside it in calls that returned.
    pub total_ns: [u64; MAX_PROCEDURES],
}

/// The user memory read at a deferred entry (see [`ThreadState::entry_mem`]): `len` bytes
/// of `words`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryMem {
    /// Valid bytes of `words`; 0: none.
    pub len: u64,
    /// The bytes read, as words (`[u8; MEM_BYTES]` has no `Default`).
    pub words: [u64; crate::MEM_BYTES / 8],
}

/// A run of unsuccessful polls (`MPI_Test*` or `MPI_Iprobe` calls that found nothing, see
/// `crate::mpi::poll_flag_arg`) of one thread since its last record. Such a call writes no
/// record: the kernel side counts it here, and the thread's next record is preceded by one
/// [`crate::RecordKind::Polls`] record saying what the run was. A polling loop then costs a
/// record per change of state, not per poll, and cannot flood the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollRun {
    /// Unsuccessful polls in the run; 0: no run.
    pub count: u64,
    /// The last poll's function.
    pub fn_id: u64,
    /// `ts_ns` and `cpu_ns` at the entry of the run's first poll.
    pub first_ts_ns: u64,
    /// See `first_ts_ns`.
    pub first_cpu_ns: u64,
    /// `ts_ns` and `cpu_ns` at the return of the run's last poll.
    pub last_ts_ns: u64,
    /// See `last_ts_ns`.
    pub last_cpu_ns: u64,
    /// CPU nanoseconds the thread spent inside the run's polls (not between them).
    pub inside_cpu_ns: u64,
}

impl ThreadState {
    /// The state of thread `tid` of process `tgid` with clock `clock` and no call in flight.
    pub fn new(tgid: u32, tid: u32, clock: ThreadClock) -> Self {
        Self {
            clock,
            tgid,
            tid,
            ..Self::default()
        }
    }

    /// [`ThreadState::new`] for a thread already running when tracing begins: it may be inside
    /// a call (see [`ThreadState::seeded`]).
    pub fn seeded(tgid: u32, tid: u32, clock: ThreadClock) -> Self {
        Self {
            seeded: 1,
            ..Self::new(tgid, tid, clock)
        }
    }

    /// The innermost call in flight, if any. Written for the eBPF verifier, which bounds an
    /// index only in the register it checked: LLVM, left to itself, computes the address from
    /// `depth` in another register, or before the check. The index is read back through a
    /// volatile load (LLVM cannot see through it to `depth`) and masked (LLVM drops the mask
    /// only where the check dominates the address, on the very register checked).
    #[inline(always)]
    pub fn innermost(&self) -> Option<&CallInFlight> {
        const _: () = assert!(MAX_NESTED.is_power_of_two());
        let index = (self.depth as usize).wrapping_sub(1);
        // SAFETY: a read of a local.
        let index = unsafe { core::ptr::read_volatile(&index) };
        if index < MAX_NESTED {
            Some(&self.calls[index & (MAX_NESTED - 1)])
        } else {
            None
        }
    }
}

/// Offsets of the kernel's data that the kernel side reads, set by user space before loading
/// so that the object follows the running kernel's layouts, all from the kernel's BTF. The
/// defaults mark every one unknown: user space always sets them.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOffsets {
    /// `linux_binprm.filename`: the file an exec runs, read by the `sched_process_exec` hook
    /// (which is handed the `linux_binprm`).
    pub binprm_filename: u32,
    /// `task_struct.signal`: the thread group's shared state.
    pub task_signal: u32,
    /// `signal_struct.live`: the group's threads not yet exiting; 0 at the
    /// `sched_process_exit` of the group's last thread.
    pub signal_live: u32,
    /// `task_struct.pid`: a new task's thread id, read by the `task_newtask` hook (which is
    /// handed the task).
    pub task_pid: u32,
    /// `task_struct.se.sum_exec_runtime`: the scheduler's exact on-CPU nanoseconds of a
    /// thread, up to date when the thread is switched out. [`KernelOffsets::ABSENT`] if
    /// unknown (then the clock is kept from `sched_switch` times alone).
    pub task_sum_exec_runtime: u32,
    /// `task_struct.mm`: the thread's address space.
    pub task_mm: u32,
    /// `mm_struct.start_code`, followed by `end_code`: the executable's text.
    pub mm_start_code: u32,
    /// `task_struct.se.cfs_rq`: the run queue (of its group) a task is on; its `rq` is the
    /// CPU's. With the next four, the way to the CPU's steal clock (see
    /// [`ThreadClock::steal_in_ns`]): `rq - percpu_runqueues + percpu_steal`, as a CPU's
    /// per-CPU variables lie at the same distances from one another as in the per-CPU section.
    pub task_cfs_rq: u32,
    /// `cfs_rq.rq`: the CPU's run queue.
    pub cfs_rq_rq: u32,
    /// `rq.cpu`: the run queue's CPU, checked against the CPU the program runs on.
    pub rq_cpu: u32,
    /// The per-CPU variable `runqueues` in the per-CPU section.
    pub percpu_runqueues: u32,
    /// The per-CPU variable `steal_time.steal` (a KVM guest's steal clock, nanoseconds) in the
    /// per-CPU section.
    pub percpu_steal: u32,
}

impl KernelOffsets {
    /// Marks a field the running kernel does not have.
    pub const ABSENT: u32 = u32::MAX;
    /// Every offset unknown: the placeholder in the object until user space sets them.
    pub const UNKNOWN: Self = Self {
        binprm_filename: KernelOffsets::ABSENT,
        task_signal: KernelOffsets::ABSENT,
        signal_live: KernelOffsets::ABSENT,
        task_pid: KernelOffsets::ABSENT,
        task_sum_exec_runtime: KernelOffsets::ABSENT,
        task_mm: KernelOffsets::ABSENT,
        mm_start_code: KernelOffsets::ABSENT,
        task_cfs_rq: KernelOffsets::ABSENT,
        cfs_rq_rq: KernelOffsets::ABSENT,
        rq_cpu: KernelOffsets::ABSENT,
        percpu_runqueues: KernelOffsets::ABSENT,
        percpu_steal: KernelOffsets::ABSENT,
    };
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C) plain old data, every bit pattern valid.
    unsafe impl aya::Pod for super::ThreadClock {}
    // SAFETY: repr(C) plain old data (u64s and u32s, no padding), every bit pattern valid.
    unsafe impl aya::Pod for super::ThreadState {}
    // SAFETY: repr(C) plain old data, every bit pattern valid.
    unsafe impl aya::Pod for super::KernelOffsets {}
    // SAFETY: plain `u64`s, no padding.
    unsafe impl aya::Pod for super::SendRules {}
}

#[cfg(test)]
mod tests {
    use super::{SendRules, ThreadClock};

    /// MPICH's builtin datatypes carry their size; the pair types and derived ones do not.
    #[test]
    fn mpich_builtin_handles_give_their_size() {
        use super::abi::mpich_builtin_size;
        assert_eq!(mpich_builtin_size(0x4c00_0405), Some(4), "MPI_INT");
        assert_eq!(mpich_builtin_size(0x4c00_080b), Some(8), "MPI_DOUBLE");
        assert_eq!(mpich_builtin_size(0x8c00_0000), None, "MPI_FLOAT_INT");
        assert_eq!(mpich_builtin_size(0xcc00_0000), None, "a derived type");
    }

    /// A send is eager for sure only within the limits, and beyond the self limit only to
    /// another rank of `MPI_COMM_WORLD`.
    #[test]
    fn sends_are_surely_eager_only_where_every_route_sends_them_eagerly() {
        let world = 0x4400_0000;
        let rules = SendRules {
            eager_below: 8192,
            self_eager_below: 0,
            world_comm: world,
            world_rank: 1,
            abi: super::abi::MPICH,
        };
        let eager = |count, size, dest, comm| rules.surely_eager(count, size, dest, comm);
        assert!(eager(1023, Some(8), 0, world) && eager(8191, Some(1), 2, world));
        assert!(!eager(1024, Some(8), 0, world), "one byte over");
        assert!(!eager(1, Some(8), 1, world), "to itself: every send waits");
        assert!(!eager(1, Some(8), 0, world + 1), "another communicator");
        assert!(
            eager(1, Some(8), 0, world | 0xdead_0000_0000),
            "an int's upper half"
        );
        assert!(!eager(1, None, 0, world), "unknown size");
        assert!(!eager(-1, Some(8), 0, world) && !eager(1, Some(8), -2, world));
        let open_mpi = SendRules {
            eager_below: 4041,
            self_eager_below: 969,
            abi: super::abi::OPEN_MPI,
            ..rules
        };
        assert!(
            !open_mpi.surely_eager(200, Some(8), 0, world | 1 << 40),
            "a pointer in full"
        );
        assert!(
            open_mpi.surely_eager(121, Some(8), 1, world + 1),
            "968 bytes anywhere"
        );
        assert!(
            !open_mpi.surely_eager(122, Some(8), 1, world),
            "976 bytes to itself"
        );
        assert!(open_mpi.surely_eager(505, Some(8), 0, world));
        assert!(
            !SendRules::default().surely_eager(0, Some(8), 0, 0),
            "no rules, no skip"
        );
        let rank_unknown = SendRules {
            world_comm: SendRules::NO_COMM,
            ..rules
        };
        assert!(!rank_unknown.surely_eager(1, Some(8), 0, u64::MAX));
    }

    /// A seeded clock keeps its reading at its first exact total, whatever /proc missed, and
    /// follows the total from then on; a clock traced from the start takes the total as is.
    #[test]
    fn a_seeded_clock_is_anchored_at_its_first_total_and_follows_it_after() {
        let mut seeded = ThreadClock::seeded(1_000, 50);
        seeded.set_from_total(1_700, 1_200);
        assert_eq!((seeded.acc_ns, seeded.unanchored), (1_200, 0));
        seeded.set_from_total(2_700, 0);
        assert_eq!(seeded.acc_ns, 2_200);
        // A reading ahead of the total (the thread ran less than counted) wraps the offset.
        let mut ahead = ThreadClock::seeded(1_000, 50);
        ahead.set_from_total(1_100, 1_300);
        ahead.set_from_total(2_100, 0);
        assert_eq!(ahead.acc_ns, 2_300);
        let mut from_start = ThreadClock::default();
        from_start.set_from_total(900, 0);
        assert_eq!(from_start.acc_ns, 900);
    }

    /// A running clock leaves out what the hypervisor stole since its switch-in, never more
    /// than the wall time; a seeded clock counts steal from its first reading.
    #[test]
    fn a_running_clock_leaves_out_stolen_time() {
        let mut clock = ThreadClock {
            acc_ns: 1_000,
            ..ThreadClock::default()
        };
        clock.switch_in(10_000, 500);
        assert_eq!(clock.running_at(12_000, 500), 3_000);
        assert_eq!(clock.running_at(13_000, 1_100), 3_400);
        assert_eq!(clock.running_at(13_000, 9_999), 1_000);
        let mut seeded = ThreadClock::seeded(1_000, 10_000);
        assert_eq!(seeded.running_at(11_000, 7_000), 2_000);
        assert_eq!(seeded.running_at(12_000, 7_400), 2_600);
    }
}
