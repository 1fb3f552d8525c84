//! The event ABI shared by lbf's eBPF programs (kernel side) and lbf-user (user space).
//!
//! Everything here is `#[repr(C)]`, plain old data and `no_std`: the kernel side writes these
//! records into a BPF ring buffer and user space reinterprets the bytes. The kernel side stays
//! dumb: it records *which* hook fired, *when* (wall clock and the thread's exact CPU clock),
//! the raw call arguments and a few bytes of user memory that user space asked for. All MPI
//! semantics (handles, statuses, datatypes, matching) live in user space, where they can be
//! tested.
#![no_std]

pub mod maps;
pub mod mpi;
pub mod pvm;
pub mod syscalls;

/// Number of raw argument words captured per call (6 register arguments, 2 stack arguments).
pub const ARG_WORDS: usize = 8;

/// Bytes of user memory a record can carry (statuses, request handles, arrays of them).
pub const MEM_BYTES: usize = 256;

/// Room for user memory of a record whose read is this short or shorter (a status, a
/// handle): it is reserved with this much `mem` instead of [`MEM_BYTES`].
pub const SHORT_MEM_BYTES: usize = 32;

/// Bytes of a [`Record`] before `mem`: the least a ring buffer item holds.
pub const RECORD_HEAD_BYTES: usize = core::mem::offset_of!(Record, mem);

/// Argument words a [`RecordKind::CallPair`] item carries for a function of at most this many
/// arguments (see [`mpi::pair_arg_words`]) instead of [`ARG_WORDS`]: `MPI_Comm_rank`,
/// `MPI_Wait`, `MPI_Test`, `MPI_Barrier` and the like take 32 bytes less of the ring buffer
/// per call, and the kernel side writes 4 words less.
pub const SHORT_ARG_WORDS: usize = 4;

/// Bytes of a [`RecordKind::CallPair`] item before its argument words: its [`PairHead`].
pub const PAIR_HEAD_BYTES: usize = core::mem::size_of::<PairHead>();

/// The start of a [`RecordKind::CallPair`] item: a call's entry and exit stamps and its
/// return value. The item goes on with [`PairHead::arg_words`] argument words (the entry's
/// `args`; the rest are 0) and then the exit's `mem`, reserved as for a [`Record`]: none,
/// [`SHORT_MEM_BYTES`] or [`MEM_BYTES`], of which [`PairHead::mem_len`] bytes are valid.
///
/// Its first 32 bytes are laid out as a [`Record`]'s, so that `kind` is found in the same
/// place in every item. Compared with two [`Record`] heads (an entry's and an exit's, whose
/// `args` repeat the entry's), it takes 72 bytes less of the ring buffer per call (104 with
/// [`SHORT_ARG_WORDS`]), and the kernel side writes the arguments once instead of twice:
/// writing records is most of what lbf's probes add to a uprobe's own cost
/// (`cargo xtask bench-probe`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairHead {
    /// [`RecordKind::CallPair`] as `u16`.
    pub kind: u16,
    /// The probed function.
    pub fn_id: u16,
    /// Number of valid bytes of the exit's `mem`.
    pub mem_len: u16,
    /// Number of argument words after this head: [`SHORT_ARG_WORDS`] or [`ARG_WORDS`].
    pub arg_words: u16,
    /// Process id (thread group id).
    pub tgid: u32,
    /// Thread id.
    pub tid: u32,
    /// The entry's `ts_ns`.
    pub entry_ts_ns: u64,
    /// The entry's `cpu_ns`.
    pub entry_cpu_ns: u64,
    /// The exit's `ts_ns`.
    pub exit_ts_ns: u64,
    /// The exit's `cpu_ns`.
    pub exit_cpu_ns: u64,
    /// The return value (the exit record's `args[0]`).
    pub ret: u64,
}

/// Capacity of the per-function table of memory reads (indexed by function id, a `u16`).
pub const MAX_FNS: u32 = 128;

/// What a record describes: a process lifecycle change or a probed library call.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A traced process forked a new process; `args[0]` is the child's tgid.
    Fork = 1,
    /// A traced process called exec; the record's `mem` holds the new file name (NUL-terminated).
    Exec = 2,
    /// A traced thread group exited (its last thread ended).
    Exit = 3,
    /// Entry of a probed function; `fn_id` says which.
    CallEntry = 4,
    /// Return of a probed function; `fn_id` says which, `args[0]` is the return value.
    CallExit = 5,
    /// Return of a recorded system call (see [`syscalls`]): `fn_id` is its number, `args[0]`
    /// the return value, `args[1..6]` its first 5 arguments (user space reads no call's 6th;
    /// the kernel side's memory reads have it), `args[6]` the time (`ts_ns`'s clock) and
    /// `args[7]` the thread's CPU clock at its entry (`ts_ns` and `cpu_ns` are the return's).
    Syscall = 6,
    /// A probed call's entry and exit in one ring buffer item, laid out as [`PairHead`] says.
    /// The kernel side writes one for a call whose entry record carries no user memory (one
    /// reservation per call instead of two); user space splits it into the call's
    /// `CallEntry` and `CallExit` records (`lbf-user`'s `probe::decode`), so record consumers
    /// only ever see those.
    CallPair = 7,
    /// Tracing of a running thread began here: written by user space (never by the kernel
    /// side) for each thread of a process it starts tracing, when it seeds the thread's CPU
    /// clock. `ts_ns` is when, `cpu_ns` the clock then (the CPU the thread used before it was
    /// traced); `args` are 0. It comes before every other record of its thread, so that the
    /// CPU a thread uses from the attach to its first probed call is known.
    Attach = 8,
    /// A run of unsuccessful polls of the thread, written just before its next record (see
    /// [`maps::PollRun`]): `fn_id` is the last poll's function, `ts_ns` and `cpu_ns` the
    /// stamps at its return; `args[0]` is the number of polls, `args[1]` and `args[2]` the
    /// `ts_ns` and `cpu_ns` at the first poll's entry, `args[3]` the CPU spent inside the
    /// polls. The polls themselves have no records.
    Polls = 9,
    /// Records of the thread the ring buffer had no room for (see [`maps::LostRun`]),
    /// written just before its next record, or read from its state at the end of the
    /// capture: `args[0]` is how many, `args[1]` the `ts_ns` when the first was lost.
    /// `ts_ns` is when it was written, `cpu_ns` 0. The capture then knows which process has
    /// a gap, from when.
    Lost = 10,
    /// The CPU the thread has spent inside each traced procedure (`lbf-trace --procedure`),
    /// written just before its next record after it entered or left one (see
    /// [`maps::ProcedureClocks`]): `args[i]` is its total inside procedure `i` at the record's
    /// `cpu_ns`, and bit `i` of `fn_id` whether it was inside procedure `i` then (its total
    /// grows with its clock from there).
    ProcCpu = 11,
}

impl RecordKind {
    /// Decodes the raw `kind` field; `None` for values this build does not know.
    pub fn from_raw(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Fork,
            2 => Self::Exec,
            3 => Self::Exit,
            4 => Self::CallEntry,
            5 => Self::CallExit,
            6 => Self::Syscall,
            7 => Self::CallPair,
            8 => Self::Attach,
            9 => Self::Polls,
            10 => Self::Lost,
            11 => Self::ProcCpu,
            _ => return None,
        })
    }
}

/// One record in the ring buffer.
///
/// A ring buffer item is a record cut short after `mem[..n]`: it holds the first
/// [`RECORD_HEAD_BYTES`] + `n` bytes, `n` being 0 for records without memory,
/// [`SHORT_MEM_BYTES`] for short reads and [`MEM_BYTES`] otherwise (`mem_len <= n`). Most
/// records take 128 bytes of the ring instead of 352. A [`RecordKind::CallPair`] item
/// holds two records in the shorter form [`PairHead`] describes. Every item is rounded up to
/// whole cache lines with the ring buffer's 8-byte header (see lbf-ebpf's `record`): the bytes
/// past the record, like those of `mem` past `mem_len`, are whatever the ring held there.
///
/// `cpu_ns` is the calling thread's cumulative on-CPU time in nanoseconds, kept exact by the
/// scheduler hooks (time switched in is added at every switch out), so the CPU used between two
/// records of one thread is a subtraction, without sampling.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Record {
    /// A [`RecordKind`] as `u16`.
    pub kind: u16,
    /// For calls: which probed function (an index into user space's probe table).
    pub fn_id: u16,
    /// Number of valid bytes in `mem`.
    pub mem_len: u16,
    /// `Syscall` records: which part of its call this record is. A call whose memory read
    /// spans several records (a long `sendmmsg`/`recvmmsg` vector, see
    /// [`syscalls::SyscallRead`]) has parts 0, 1, ... in a row; every other record is part 0.
    pub part: u16,
    /// Process id (thread group id).
    pub tgid: u32,
    /// Thread id.
    pub tid: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// The thread's cumulative on-CPU nanoseconds at this instant.
    pub cpu_ns: u64,
    /// `CallEntry`: rdi, rsi, rdx, rcx, r8, r9 (the 6 integer register arguments), then the
    /// 64-bit words at user `sp+8` and `sp+16` (the 7th and 8th integer arguments; 0 if
    /// unreadable, and 0 for functions known to take at most 6, see `mpi::cookie`).
    /// Arguments of C type `int` only have their low 32 bits defined.
    /// `CallExit`: `args[0]` = rax (the return value), `args[1..8]` = the entry's
    /// `args[0..7]` (the 8th entry word is not repeated). `Fork`: `args[0]` = the child's
    /// tgid. Otherwise 0.
    pub args: [u64; ARG_WORDS],
    /// User memory read as the [`MemRead`] for this function and phase asked (for `Exec`, the
    /// file name, NUL-terminated). Only `mem[..mem_len]` is meaningful.
    pub mem: [u8; MEM_BYTES],
}

/// Where to read user memory for one function at one phase (entry or exit).
///
/// User space fills a table of these per function because the layouts differ between MPI
/// libraries (Open MPI's handles are pointers, MPICH's are ints; their `MPI_Status` differ).
/// The read happens at the phase given; at exit, `ptr_arg` refers to the *entry* arguments,
/// which the kernel side saved.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemRead {
    /// 0 = no read. Otherwise 1 + the index into `args` of the pointer to read from, or
    /// [`MemRead::FROM_GLOBAL`].
    pub ptr_arg: u8,
    /// 0 = fixed length `len`. Otherwise 1 + the index into `args` of an element count; the
    /// length read is then `count * len`, capped at [`MEM_BYTES`].
    pub count_arg: u8,
    /// Bytes to read (or bytes per element when `count_arg` is set).
    pub len: u16,
}

impl MemRead {
    /// The `ptr_arg` of a read whose pointer no argument holds: it is found in the probed
    /// library's own data, as the function's [`FnReads::global`] says.
    pub const FROM_GLOBAL: u8 = u8::MAX;
}

/// How the kernel side finds a pointer that the probed library keeps in a global variable
/// (PVM's current receive buffer, which no argument of `pvm_recv` leads to): from an address
/// at a fixed distance from the probed function's own (`bpf_get_func_ip`, so the library's
/// load address needs no lookup), it loads `loads` pointers in a chain, and reads at the last
/// one plus `offset`. With `loads` 2 and the address of the variable's GOT slot, the chain
/// finds the variable wherever the dynamic linker put it (a program referring to it has it
/// copied into its own data).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalPtr {
    /// The first address, minus the probed function's address (both as the library's ELF
    /// file gives them).
    pub delta: i64,
    /// Pointers loaded in a chain from the first address, at most [`GlobalPtr::MAX_LOADS`].
    pub loads: u32,
    /// Bytes added to the last pointer loaded: where the read starts.
    pub offset: u32,
}

impl GlobalPtr {
    /// Most pointers one chain loads.
    pub const MAX_LOADS: u32 = 3;
}

/// Where in `mem` the second read of an entry ([`FnReads::entry_more`]) goes, and so the
/// most bytes the first read of such an entry carries.
pub const MORE_MEM_AT: usize = 192;

/// Most bytes the second read of an entry ([`FnReads::entry_more`]) carries.
pub const MORE_MEM_BYTES: usize = MEM_BYTES - MORE_MEM_AT;

/// The [`MemRead`]s of one function: one at entry (and an optional second one), one at exit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FnReads {
    /// Read performed when the function is entered.
    pub entry: MemRead,
    /// Read performed when the function returns (pointers taken from the entry arguments).
    pub exit: MemRead,
    /// A second read at entry, for calls that need two pieces of user memory (a count array
    /// and a datatype, a struct's block lengths and datatypes). When set, the entry record
    /// is reserved with all [`MEM_BYTES`] of `mem`: the first read fills at most
    /// [`MORE_MEM_AT`] bytes (its `mem_len`), and this one the [`MORE_MEM_BYTES`] from
    /// [`MORE_MEM_AT`] on: all of them whatever its `len` (past the data asked for when that
    /// is shorter), zeroed if the read failed or its pointer is in the first page. Its
    /// `ptr_arg` may not be [`MemRead::FROM_GLOBAL`].
    pub entry_more: MemRead,
    /// Padding (0), so that the struct has none the compiler could leave uninitialised.
    pub pad: u32,
    /// Where a read whose `ptr_arg` is [`MemRead::FROM_GLOBAL`] reads.
    pub global: GlobalPtr,
}

/// Per-CPU counters the kernel side keeps, indexed by these constants in the `COUNTERS` map.
pub mod counter {
    /// Records dropped because the ring buffer was full (reserve failed).
    pub const LOST_RINGBUF: u32 = 0;
    /// Exits seen without a saved entry: the entry was missed. Not counted for the calls a
    /// thread was inside when tracing began (see [`IN_PROGRESS_AT_ATTACH`]).
    pub const EXIT_WITHOUT_ENTRY: u32 = 1;
    /// User memory reads that failed (bad pointer, or page not resident): `mem_len` is 0.
    pub const MEM_READ_FAILED: u32 = 2;
    /// Probe hits of a traced thread without a per-thread state (the map was full): its MPI
    /// calls are not recorded, and its other records' `cpu_ns` is the scheduler's
    /// `sum_exec_runtime` (stale by up to a tick), or 0 without BTF.
    pub const NO_CLOCK: u32 = 3;
    /// Exits of calls a thread was inside when tracing began (attached while running, before
    /// the thread completed a traced call): the attach's boundary, not a loss.
    pub const IN_PROGRESS_AT_ATTACH: u32 = 4;
    /// `MPI_Init` notices dropped because their ring buffer was full
    /// ([`crate::maps::INIT_NOTICES`]): those processes are inspected only when user space
    /// reads their records.
    pub const INIT_NOTICES_LOST: u32 = 5;
    /// Unsuccessful polls (`MPI_Test*`, `MPI_Iprobe` finding nothing) that wrote no record:
    /// each run of them is one [`crate::RecordKind::Polls`] record instead.
    pub const POLLS_COALESCED: u32 = 6;
    /// Entry probe hits of traced threads on MPI and PVM functions: their calls.
    pub const CALL_ENTRIES: u32 = 7;
    /// Return probe hits of traced threads on MPI and PVM functions: with
    /// [`CALL_ENTRIES`], the traps the calls cost (see `crate::mpi::return_optional`).
    pub const CALL_RETURNS: u32 = 8;
    /// Nanoseconds the hypervisor took the CPU from traced threads while they ran (a KVM
    /// guest's steal clock, over their running intervals): left out of their CPU clocks, as
    /// the scheduler leaves them out (see `crate::maps::ThreadClock`).
    pub const STOLEN_NS: u32 = 9;
    /// Blocking sends found eager at their entry (`crate::maps::SendRules`) whose return
    /// probe was skipped: of the calls without a return hit, those that are not
    /// `crate::mpi::return_optional` calls.
    pub const EAGER_SENDS_UNRETURNED: u32 = 10;
    /// Number of counters.
    pub const COUNT: u32 = 11;
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all five are repr(C) plain old data with no padding-dependent invariants.
    unsafe impl aya::Pod for super::Record {}
    unsafe impl aya::Pod for super::MemRead {}
    unsafe impl aya::Pod for super::FnReads {}
    unsafe impl aya::Pod for super::GlobalPtr {}
    unsafe impl aya::Pod for super::syscalls::SyscallRead {}
}
