//! [`Tracer`]: the loaded eBPF object, its scheduler hooks attached, plus the MPI libraries
//! probed so far and the processes traced.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::{bail, ensure, Context, Result};
use aya::{
    maps::{Array, HashMap, Map, MapData, PerCpuArray},
    programs::{
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
        BtfTracePoint, UProbe,
    },
    sys::{is_uprobe_multi_supported, UProbeMultiFeature},
    Ebpf, EbpfLoader,
};
use lbf_common::{
    counter,
    maps::{self, SendRules, ThreadClock, ThreadState, COMM_BYTES, MAX_LIBS},
    mpi, FnReads, Record, RecordKind, ARG_WORDS, MAX_FNS, MEM_BYTES,
};

use super::{
    btf::LIFECYCLE_TRACEPOINTS, kernel_facts, notices::InitWatch, procfs, reader::RecordReader,
    ring::RecordRing, ring_slots::create_rings, symbols, thread_states::ThreadStates, warm,
};

/// The `Attach` record of thread `tid` of `pid`, seeded at `ts_ns` with CPU clock `cpu_ns`.
fn attach_record(pid: u32, tid: u32, ts_ns: u64, cpu_ns: u64) -> Record {
    Record {
        kind: RecordKind::Attach as u16,
        fn_id: 0,
        mem_len: 0,
        part: 0,
        tgid: pid,
        tid,
        ts_ns,
        cpu_ns,
        args: [0; ARG_WORDS],
        mem: [0; MEM_BYTES],
    }
}

/// The eBPF object, built by `lbf-user/build.rs` from `lbf-ebpf`.
pub(super) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lbf.bpf.o"));

/// How to load the tracer.
#[derive(Clone, Debug)]
pub struct TracerOptions {
    /// Size of the record ring buffers together in bytes: split evenly among one ring buffer
    /// per CPU (up to `lbf_common::maps::MAX_RINGS`), each rounded up to a power of two of at
    /// least a page.
    pub ringbuf_bytes: u32,
    /// Keep every MPI and PVM call's return probe, even where the kernel could skip those
    /// `lbf_common::mpi::return_optional` allows: the scheme before uprobe sessions, against
    /// which tests and `cargo xtask bench-probe` check that skipping them changes no event
    /// and measure what it saves.
    pub all_returns: bool,
}

impl TracerOptions {
    /// Default ring buffer size, all CPUs' rings together: 16 MiB, about 100,000 calls (most
    /// take 128 or 192 bytes), or [`TracerOptions::MIN_DEFAULT_RING_BYTES`] per ring where
    /// that is more (over 8 CPUs).
    pub fn default_ringbuf_bytes() -> u32 {
        default_ringbuf_bytes_for(ring_count().unwrap_or(1))
    }

    /// The least each CPU's ring buffer gets by default: 2 MiB. In smaller rings every
    /// record costs more: on the one-rank `MPI_Comm_rank` loop the exit program ran some
    /// 245 ns per call with 256 KiB rings (what 16 MiB split among 64 CPUs gives) against
    /// 185-220 with 2 MiB or 8 MiB ones (docs/probe-overhead.md, session 10), and a small ring
    /// wakes the reader more often.
    pub const MIN_DEFAULT_RING_BYTES: u32 = 2 << 20;
}

impl Default for TracerOptions {
    fn default() -> Self {
        Self {
            ringbuf_bytes: Self::default_ringbuf_bytes(),
            all_returns: false,
        }
    }
}

/// An MPI library the tracer probes.
#[derive(Clone, Debug)]
pub struct AttachedLibrary {
    /// The library file (or statically linked executable).
    pub path: PathBuf,
    /// Its slot: the index its memory reads are kept under in the kernel.
    pub slot: u32,
    /// `(fn_id, symbol)` of the functions probed in it.
    pub probed: Vec<(u16, &'static str)>,
    /// Symbols of `lbf_common::mpi::NAMES` it does not define (not probed).
    pub missing: Vec<&'static str>,
    /// `(dev, inode)`: the file's identity, to attach each file once.
    identity: (u64, u64),
}

/// Sums of the kernel side's per-CPU counters (see `lbf_common::counter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostCounts {
    /// Records dropped because the ring buffer was full.
    pub ringbuf_full: u64,
    /// Call exits dropped because their entry was not seen.
    pub exit_without_entry: u64,
    /// Exits of calls a thread was inside when tracing began: not modelled, not lost.
    pub in_progress_at_attach: u64,
    /// Records whose user memory read failed (`mem_len` 0).
    pub mem_read_failed: u64,
    /// Records of threads without a CPU clock (`cpu_ns` 0).
    pub no_clock: u64,
    /// `MPI_Init` notices dropped (see `lbf_common::counter::INIT_NOTICES_LOST`).
    pub init_notices_lost: u64,
    /// Unsuccessful polls that wrote no record of their own (not a loss: see
    /// `lbf_common::counter::POLLS_COALESCED`).
    pub polls_coalesced: u64,
    /// Calls of MPI and PVM functions the traced threads made (entry probe hits).
    pub call_entries: u64,
    /// Return probe hits of those calls: `(call_entries + call_returns) / call_entries` is
    /// the probe hits per call, 2 where every call takes its return probe.
    pub call_returns: u64,
    /// Blocking sends whose return probe was skipped because they surely went eagerly (see
    /// `lbf_common::counter::EAGER_SENDS_UNRETURNED`).
    pub eager_sends_unreturned: u64,
    /// Nanoseconds the hypervisor took the CPU from traced threads while they ran, left out of
    /// their CPU clocks (see `lbf_common::counter::STOLEN_NS`); `None` when the kernel side
    /// found no steal clock to read (not a KVM guest, or a kernel without the way to it).
    pub stolen_ns: Option<u64>,
}

/// How the MPI probes are attached, chosen at load from what the kernel supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// One uprobe_multi link per library for all entries and one for all returns (Linux 6.6
    /// and later). Ending a capture costs about two RCU grace periods per library.
    Multi,
    /// One perf-event uprobe per function and direction. Ending a capture costs about one RCU
    /// grace period (0.1-0.2 s) per probe, some 20 s for a library.
    PerPoint,
}

impl AttachMode {
    /// The names of the entry and the exit program (see `lbf-ebpf/src/mpi.rs`).
    fn programs(self) -> (&'static str, &'static str) {
        match self {
            Self::Multi => ("mpi_enter", "mpi_exit"),
            Self::PerPoint => ("mpi_enter_pp", "mpi_exit_pp"),
        }
    }

    /// uprobe_multi if the running kernel can create such links, else per point.
    pub(super) fn detect() -> Result<Self> {
        let multi = is_uprobe_multi_supported(UProbeMultiFeature::LinkCreation)
            .context("probing the kernel for uprobe_multi links")?;
        Ok(if multi { Self::Multi } else { Self::PerPoint })
    }
}

/// Which return probes the MPI and PVM calls take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returns {
    /// Every call's: an entry and an exit program, a link each.
    Every,
    /// Only those the calls' entries ask for (`lbf_common::mpi::return_optional`): one program
    /// for both, attached as a uprobe session (Linux 6.13 and later, with uprobe_multi).
    AsNeeded,
}

impl Returns {
    /// The first kernel with uprobe sessions.
    const SESSIONS_SINCE: (u8, u8) = (6, 13);

    /// [`Returns::AsNeeded`] where the kernel has uprobe sessions and `all_returns` is not
    /// asked for, else [`Returns::Every`].
    fn choose(mode: AttachMode, all_returns: bool) -> Result<Self> {
        let (major, minor) = Self::SESSIONS_SINCE;
        let kernel =
            aya::util::KernelVersion::current().context("reading the running kernel's version")?;
        let sessions = kernel >= aya::util::KernelVersion::new(major, minor, 0);
        Ok(if sessions && mode == AttachMode::Multi && !all_returns {
            Self::AsNeeded
        } else {
            Self::Every
        })
    }
}

/// The program of the MPI and PVM probes as a uprobe session (see `lbf-ebpf/src/mpi.rs`).
const SESSION_PROGRAM: &str = "mpi_session";
/// The empty entry probe program (the benchmarks' baseline), which also warms uprobe
/// registration at start-up (see `warm`).
const EMPTY_ENTRY_PROGRAM: &str = "empty_enter";

/// Checks that `found` holds every program of `names`: the object has them all.
fn expect_programs(found: &[(&str, &mut aya::programs::Program)], names: &[&str]) -> Result<()> {
    ensure!(
        found.len() == names.len(),
        "eBPF programs missing from the object: found only {:?} of {names:?}",
        found.iter().map(|(n, _)| *n).collect::<Vec<_>>()
    );
    Ok(())
}

/// Verifies the lifecycle programs, the BTF tracepoint programs that follow processes and their
/// CPU clocks (`programs`: named after their [`LIFECYCLE_TRACEPOINTS`]), whose BTF type ids
/// are `tracepoints` (in that order).
fn load_lifecycle(
    programs: &mut [(&str, &mut aya::programs::Program)],
    tracepoints: &[u32; 4],
) -> Result<()> {
    expect_programs(programs, &LIFECYCLE_TRACEPOINTS)?;
    for (name, prog) in programs {
        let at = LIFECYCLE_TRACEPOINTS
            .iter()
            .position(|p| p == name)
            .expect("checked by expect_programs");
        let prog: &mut BtfTracePoint = (&mut **prog).try_into()?;
        prog.load_by_btf_id(tracepoints[at])
            .with_context(|| format!("verifying eBPF program {name}"))?;
    }
    Ok(())
}

/// Attaches the lifecycle programs [`load_lifecycle`] verified: from then on they write
/// records, so the record rings must be in place.
fn attach_lifecycle(programs: Vec<(&str, &mut aya::programs::Program)>) -> Result<()> {
    for (name, prog) in programs {
        let prog: &mut BtfTracePoint = prog.try_into()?;
        prog.attach()
            .with_context(|| format!("attaching to BTF tracepoint {name}"))?;
    }
    Ok(())
}

/// The MPI probes' programs: the session program where `returns` takes them as needed, else
/// `mode`'s entry and return programs.
fn uprobe_programs(mode: AttachMode, returns: Returns) -> Vec<&'static str> {
    match returns {
        Returns::AsNeeded => vec![SESSION_PROGRAM],
        Returns::Every => {
            let (enter, exit) = mode.programs();
            vec![enter, exit]
        }
    }
}

/// Verifies the MPI probes' programs (`programs`: those of `names`, [`uprobe_programs`]), as
/// a uprobe session where `returns` takes them as needed.
fn load_uprobe_programs(
    programs: Vec<(&str, &mut aya::programs::Program)>,
    names: &[&str],
    returns: Returns,
) -> Result<()> {
    expect_programs(&programs, names)?;
    for (name, prog) in programs {
        let prog: &mut UProbe = prog.try_into()?;
        match returns {
            Returns::AsNeeded => prog.load_session(),
            Returns::Every => prog.load(),
        }
        .with_context(|| format!("verifying eBPF program {name}"))?;
    }
    Ok(())
}

/// The loaded kernel side: scheduler hooks attached, MPI libraries probed on demand.
pub struct Tracer {
    /// The loaded object; `super::syscalls` attaches its system call hooks.
    pub(super) ebpf: Ebpf,
    mode: AttachMode,
    returns: Returns,
    libraries: Vec<AttachedLibrary>,
    /// `Attach` records of the threads [`Tracer::trace_pid`] seeded, not yet handed out.
    attached: Vec<Record>,
    /// Size of each record ring buffer in bytes.
    ring_bytes: u32,
    /// The record ring buffers, one per CPU, until [`Tracer::records`] takes them.
    rings: Vec<MapData>,
    /// The `RINGS` array the kernel side finds them in, taken out of the object to be filled
    /// on a thread of its own; held so that it lives as long as the programs.
    _ring_slots: Map,
    /// The links of the uprobes. Detaching one waits for an RCU grace period (24 to 60 ms
    /// here), which made up most of the time between the traced command's end and
    /// lbf-trace's: see the `Drop` implementation.
    links: Vec<Box<dyn Send>>,
}

/// Detaching the probes waits for the kernel (an RCU grace period per uprobe link), so the
/// last references to them are left to a detached process (`hold_in_background`): this
/// process's own closes return at once, and a user's command line does not wait for the
/// kernel's clean-up. Where no process can be made, the links are closed side by side on
/// threads.
impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some(release) = hold_in_background() {
            // Not the last references now: these closes return at once.
            self.links.clear();
            drop(release);
            return;
        }
        std::thread::scope(|scope| {
            for link in self.links.drain(..) {
                scope.spawn(move || drop(link));
            }
        });
    }
}

/// Makes a process, detached from this one, that holds a copy of every open file (the probes'
/// links among them) until the returned end of a pipe is closed, then closes them all (the
/// last references: the kernel's detaching happens there) and exits. `None` if it could not
/// be made.
fn hold_in_background() -> Option<OwnedFd> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // SAFETY: both ends are ours to own.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fork. The child only forks again and exits, and the grandchild only closes
    // descriptors, reads and exits (all async-signal-safe, as a child of a threaded process
    // must be).
    unsafe {
        match libc::fork() {
            -1 => None,
            0 => {
                if libc::fork() == 0 {
                    // The grandchild: standard streams first (no pipe of the user's waits for
                    // it), then its copy of the pipe's write end, then it waits for this
                    // process to close its own: until then every link has another reference.
                    libc::syscall(libc::SYS_close_range, 0u32, 2u32, 0u32);
                    libc::close(write.as_raw_fd());
                    let mut byte = 0u8;
                    while libc::read(read.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) > 0 {}
                    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                }
                libc::_exit(0)
            }
            child => {
                // Reaped at once (its exit closes copies others hold: fast); its child, now an
                // orphan, is init's to reap.
                let mut status = 0;
                (libc::waitpid(child, &mut status, 0) == child).then_some(write)
            }
        }
    }
}

impl Tracer {
    /// Loads the embedded eBPF object with `options` and attaches the process-lifecycle and
    /// CPU-clock hooks. Needs root (CAP_BPF and CAP_PERFMON); says so plainly otherwise.
    pub fn load(options: &TracerOptions) -> Result<Self> {
        check_privileges()?;
        let kernel = kernel_facts::facts()?;
        let count = ring_count()?;
        let ring = ringbuf_size(options.ringbuf_bytes / count);
        let mut ebpf = object_loader()
            .override_global(maps::KERNEL_OFFSETS, &kernel.offsets, true)
            .override_global(maps::WAKE_BYTES, &wake_bytes(ring), true)
            .override_global(maps::RING_MASK, &(count - 1), true)
            .load(OBJECT)
            .context("loading lbf's eBPF object into the kernel")?;
        // Out of the object, so that a thread of its own can fill it while others load the
        // programs (the programs were given its descriptor when the object was loaded).
        let mut slots = ebpf
            .take_map(maps::RINGS)
            .with_context(|| format!("map {} missing from the object", maps::RINGS))?;
        let mode = AttachMode::detect()?;
        let returns = Returns::choose(mode, options.all_returns)?;
        // The MPI probes' programs are the largest to verify: they load on a thread of their
        // own while this one loads the lifecycle hooks (the kernel verifies privileged programs
        // in parallel), and a third makes the record rings (putting them in place waits for
        // an RCU grace period: see `ring_slots`). The lifecycle hooks are attached once the rings are in place.
        // A fourth meanwhile has the empty probe program pay the kernel's wait before a first
        // uprobe registration (see `warm`).
        let uprobes = uprobe_programs(mode, returns);
        let mut lifecycle = Vec::new();
        let mut mpi = Vec::new();
        let mut empty = None;
        for (name, prog) in ebpf.programs_mut() {
            if LIFECYCLE_TRACEPOINTS.contains(&name) {
                lifecycle.push((name, prog));
            } else if uprobes.contains(&name) {
                mpi.push((name, prog));
            } else if name == EMPTY_ENTRY_PROGRAM && mode == AttachMode::Multi {
                empty = Some(prog);
            }
        }
        let (rings, warmth) = std::thread::scope(|scope| {
            let mpi = scope.spawn(|| load_uprobe_programs(mpi, &uprobes, returns));
            // Not needed, only faster: a kernel that refuses it attaches as before.
            let warmth = scope.spawn(|| {
                let prog = <&mut UProbe>::try_from(empty?).ok()?;
                warm::warm_uprobes(prog).ok()
            });
            let rings = scope.spawn(|| create_rings(&mut slots, count, ring));
            let loaded = load_lifecycle(&mut lifecycle, &kernel.tracepoints);
            let rings = rings.join().expect("the thread making the record rings");
            let attached = loaded
                .and(rings)
                .and_then(|rings| attach_lifecycle(lifecycle).map(|()| rings));
            let mpi = mpi
                .join()
                .expect("the thread loading the MPI probes' programs");
            let warmth = warmth.join().expect("the thread warming uprobes");
            attached.and_then(|rings| mpi.map(|()| (rings, warmth)))
        })?;
        Ok(Self {
            ebpf,
            mode,
            returns,
            libraries: Vec::new(),
            attached: Vec::new(),
            ring_bytes: ring,
            rings,
            _ring_slots: slots,
            links: warmth
                .map(|w| Box::new(w) as Box<dyn Send>)
                .into_iter()
                .collect(),
        })
    }

    /// How the MPI probes are attached on this kernel.
    pub fn attach_mode(&self) -> AttachMode {
        self.mode
    }

    /// Which return probes the MPI and PVM calls take.
    pub fn returns(&self) -> Returns {
        self.returns
    }

    /// Starts tracing process `pid` (and, from now on, its descendants): adds it to the
    /// kernel's filter and seeds its threads' states with their CPU clocks from `/proc`,
    /// noting an `Attach` record for each seeded thread (see [`Tracer::take_attached`]). A
    /// seeded thread may be inside a recorded system call (blocked, waiting for a CPU, or
    /// running in the kernel): the kernel side records that call at its return (see
    /// `lbf_common::syscalls::AT_ATTACH`).
    ///
    /// A thread the kernel side already traces (the process was adopted at its exec, or
    /// forked from a traced one, before a scan found it) keeps its state: re-seeding it
    /// would forget the calls it is in, whose returns would then come without an entry.
    pub fn trace_pid(&mut self, pid: u32) -> Result<()> {
        let seeded = self.start_tracing(pid)?;
        self.mark_system_calls_at_attach(&seeded)
    }

    /// [`Tracer::trace_pid`] for a child this process forked and holds before its exec
    /// (`HeldChild`): the call its thread waits in is lbf's own start handshake, not one of
    /// the traced program's, so its return is not recorded.
    pub fn trace_held_child(&mut self, pid: u32) -> Result<()> {
        self.start_tracing(pid).map(drop)
    }

    /// Adds `pid` to the kernel's filter and seeds its threads (see [`Tracer::trace_pid`]);
    /// the ids of the threads seeded.
    fn start_tracing(&mut self, pid: u32) -> Result<Vec<u32>> {
        ensure!(
            procfs::exists(pid),
            "no process with PID {pid} (nothing in /proc/{pid})"
        );
        let threads = ThreadStates::new(self.ebpf.map(maps::THREADS))?;
        let mut seeded = Vec::new();
        for tid in procfs::thread_ids(pid)? {
            // Stamped just before its CPU is read: the clock counts the thread as running
            // from then on (the kernel side corrects it at its next switch-in if it was not).
            let now = monotonic_ns();
            // A thread that ended meanwhile has no schedstat; it needs no clock either.
            if let Ok(acc_ns) = procfs::thread_cpu_ns(pid, tid) {
                let clock = ThreadClock::seeded(acc_ns, now);
                if threads.insert_new(pid, tid, &ThreadState::seeded(pid, tid, clock))? {
                    self.attached.push(attach_record(pid, tid, now, acc_ns));
                    seeded.push(tid);
                }
            }
        }
        let mut traced: HashMap<&mut MapData, u32, u8> =
            HashMap::try_from(self.ebpf.map_mut(maps::TRACED).context("map TRACED")?)?;
        traced
            .insert(&pid, &1, 0)
            .with_context(|| format!("tracing PID {pid}"))?;
        Ok(seeded)
    }

    /// Probes the MPI library (or MPI executable) at `path` for every process that runs it,
    /// the kernel filtering by traced process: an entry and an exit probe on each
    /// `lbf_common::mpi::NAMES` symbol resolved from its dynamic symbol table (one probe per
    /// address, its cookie naming the function and the library's slot; absent names are listed
    /// in `missing`), as one link per direction in [`AttachMode::Multi`]. `reads` are this
    /// library's memory reads. A file already attached is not attached twice; its reads are
    /// replaced.
    pub fn attach_mpi_library(
        &mut self,
        path: &Path,
        reads: &[(u16, FnReads)],
    ) -> Result<&AttachedLibrary> {
        let meta = path
            .metadata()
            .with_context(|| format!("MPI library {}", path.display()))?;
        let identity = (meta.dev(), meta.ino());
        if let Some(i) = self.libraries.iter().position(|l| l.identity == identity) {
            self.set_reads(self.libraries[i].slot, reads)?;
            return Ok(&self.libraries[i]);
        }
        let slot = self.libraries.len() as u32;
        ensure!(
            slot < MAX_LIBS,
            "cannot probe {}: already probing {MAX_LIBS} MPI libraries",
            path.display()
        );
        let wanted: Vec<&str> = mpi::NAMES.iter().map(|(_, n)| *n).collect();
        let offsets = symbols::dynamic_function_offsets(path, &wanted)?;
        let mut probed = Vec::new();
        let mut missing = Vec::new();
        let mut points = Vec::new();
        let mut seen_offsets = Vec::new();
        for &(id, name) in mpi::NAMES {
            let Some(&offset) = offsets.get(name) else {
                missing.push(name);
                continue;
            };
            if seen_offsets.contains(&offset) {
                continue;
            }
            seen_offsets.push(offset);
            points.push(UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(offset),
                cookie: Some(mpi::cookie(id, slot)),
            });
            probed.push((id, name));
        }
        ensure!(
            !probed.is_empty(),
            "{} defines none of the MPI functions lbf probes (PMPI_Init, PMPI_Send, ...)",
            path.display()
        );
        // A bare file name would be looked up in the linker cache: attach by absolute path.
        let target = path
            .canonicalize()
            .with_context(|| format!("MPI library {}", path.display()))?;
        self.attach_entry_exit(&target, &points)?;
        self.libraries.push(AttachedLibrary {
            path: path.to_path_buf(),
            slot,
            probed,
            missing,
            identity,
        });
        self.set_reads(slot, reads)?;
        Ok(&self.libraries[slot as usize])
    }

    /// The MPI libraries probed so far, in slot order.
    pub fn libraries(&self) -> &[AttachedLibrary] {
        &self.libraries
    }

    /// Sets the memory reads of library slot `slot`: `(fn_id, reads)` pairs; functions not
    /// listed read nothing.
    pub fn set_reads(&mut self, slot: u32, reads: &[(u16, FnReads)]) -> Result<()> {
        ensure!(slot < MAX_LIBS, "library slot {slot} out of range");
        let mut table: Array<&mut MapData, FnReads> =
            Array::try_from(self.ebpf.map_mut(maps::FN_READS).context("map FN_READS")?)?;
        for id in 0..MAX_FNS {
            table.set(slot * MAX_FNS + id, &FnReads::default(), 0)?;
        }
        for &(id, r) in reads {
            ensure!(
                (id as u32) < MAX_FNS,
                "function id {id} out of range (max {MAX_FNS})"
            );
            table.set(slot * MAX_FNS + id as u32, &r, 0)?;
        }
        Ok(())
    }

    /// Makes the kernel side trace every process that executes a program whose command name
    /// (as in `/proc/PID/comm`: the file's name, cut to 15 bytes) is `name`, from its exec on.
    pub fn adopt_comm(&mut self, name: &str) -> Result<()> {
        let bytes = name.as_bytes();
        ensure!(
            !bytes.is_empty() && bytes.len() < COMM_BYTES && !bytes.contains(&0),
            "command name `{name}`: the kernel keeps 1 to {} bytes of a command name",
            COMM_BYTES - 1
        );
        let mut comm = [0u8; COMM_BYTES];
        comm[..bytes.len()].copy_from_slice(bytes);
        let mut map: Array<&mut MapData, [u8; COMM_BYTES]> = Array::try_from(
            self.ebpf
                .map_mut(maps::ADOPT_COMM)
                .context("map ADOPT_COMM")?,
        )?;
        map.set(0, &comm, 0)?;
        Ok(())
    }

    /// The `Attach` records of the threads seeded since the last call, in the order they were
    /// seeded. A record sink must get them before any record the ring buffer holds of their
    /// threads: `lbf-record`'s capture loop hands them over before each drain.
    pub fn take_attached(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.attached)
    }

    /// Thread group ids the kernel side traces now.
    pub fn traced_pids(&self) -> Result<Vec<u32>> {
        let traced: HashMap<&MapData, u32, u8> =
            HashMap::try_from(self.ebpf.map(maps::TRACED).context("map TRACED")?)?;
        Ok(traced.keys().collect::<Result<_, _>>()?)
    }

    /// Stops tracing `pid` (used for processes that ended without their exit being seen).
    pub fn untrace_pid(&mut self, pid: u32) -> Result<()> {
        let mut traced: HashMap<&mut MapData, u32, u8> =
            HashMap::try_from(self.ebpf.map_mut(maps::TRACED).context("map TRACED")?)?;
        // Already gone is fine: the kernel side may have removed it meanwhile.
        let _ = traced.remove(&pid);
        Ok(())
    }

    /// Sums of the per-CPU loss counters.
    pub fn lost_counts(&self) -> Result<LostCounts> {
        let counters: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(self.ebpf.map(maps::COUNTERS).context("map COUNTERS")?)?;
        let sum = |i: u32| -> Result<u64> { Ok(counters.get(&i, 0)?.iter().sum()) };
        Ok(LostCounts {
            ringbuf_full: sum(counter::LOST_RINGBUF)?,
            exit_without_entry: sum(counter::EXIT_WITHOUT_ENTRY)?,
            in_progress_at_attach: sum(counter::IN_PROGRESS_AT_ATTACH)?,
            mem_read_failed: sum(counter::MEM_READ_FAILED)?,
            no_clock: sum(counter::NO_CLOCK)?,
            init_notices_lost: sum(counter::INIT_NOTICES_LOST)?,
            polls_coalesced: sum(counter::POLLS_COALESCED)?,
            call_entries: sum(counter::CALL_ENTRIES)?,
            call_returns: sum(counter::CALL_RETURNS)?,
            eager_sends_unreturned: sum(counter::EAGER_SENDS_UNRETURNED)?,
            stolen_ns: self
                .reads_steal_clock()?
                .then(|| sum(counter::STOLEN_NS))
                .transpose()?,
        })
    }

    /// Whether the kernel side found the steal clock of any CPU (see
    /// `lbf_common::maps::STEAL_CLOCKS`).
    fn reads_steal_clock(&self) -> Result<bool> {
        let clocks: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(
            self.ebpf
                .map(maps::STEAL_CLOCKS)
                .context("map STEAL_CLOCKS")?,
        )?;
        Ok(clocks.get(&0, 0)?.iter().any(|&at| at != 0))
    }

    /// The records the kernel side holds back and has not written (see
    /// `lbf_common::maps::ThreadState`): per live thread of a traced process, its records
    /// lost since its last ([`RecordKind::Lost`]), its run of unsuccessful polls
    /// ([`RecordKind::Polls`]), then the entry record of the probed call it
    /// is inside if that waits for the return (a thread that ended wrote its own). Each comes
    /// after every record its thread wrote. Read at the end of a capture, so that the calls
    /// still in flight keep their entry.
    pub fn deferred_entries(&self) -> Result<Vec<Record>> {
        let threads = ThreadStates::new(self.ebpf.map(maps::THREADS))?;
        let mut records = Vec::new();
        for pid in self.traced_pids()? {
            // A process that ended meanwhile has no threads left, nor states.
            for tid in procfs::thread_ids(pid).unwrap_or_default() {
                let Some(state) = threads.get(pid, tid)? else {
                    continue;
                };
                let lost = &state.lost;
                if lost.count != 0 {
                    let mut args = [0; ARG_WORDS];
                    args[..2].copy_from_slice(&[lost.count, lost.first_ts_ns]);
                    records.push(Record {
                        kind: RecordKind::Lost as u16,
                        fn_id: 0,
                        mem_len: 0,
                        part: 0,
                        tgid: state.tgid,
                        tid,
                        ts_ns: lost.first_ts_ns,
                        cpu_ns: 0,
                        args,
                        mem: [0; MEM_BYTES],
                    });
                }
                let run = &state.polls;
                if run.count != 0 {
                    let mut args = [0; ARG_WORDS];
                    args[..4].copy_from_slice(&[
                        run.count,
                        run.first_ts_ns,
                        run.first_cpu_ns,
                        run.inside_cpu_ns,
                    ]);
                    records.push(Record {
                        kind: RecordKind::Polls as u16,
                        fn_id: run.fn_id as u16,
                        mem_len: 0,
                        part: 0,
                        tgid: state.tgid,
                        tid,
                        ts_ns: run.last_ts_ns,
                        cpu_ns: run.last_cpu_ns,
                        args,
                        mem: [0; MEM_BYTES],
                    });
                }
                let (Some(call), true) = (state.innermost(), state.entry.ts_ns != 0) else {
                    continue;
                };
                let kept = (state.entry_mem.len as usize).min(MEM_BYTES);
                let mut mem = [0; MEM_BYTES];
                for (bytes, word) in mem.chunks_exact_mut(8).zip(state.entry_mem.words) {
                    bytes.copy_from_slice(&word.to_ne_bytes());
                }
                records.push(Record {
                    kind: RecordKind::CallEntry as u16,
                    fn_id: call.fn_id as u16,
                    mem_len: kept as u16,
                    part: 0,
                    tgid: state.tgid,
                    tid,
                    ts_ns: state.entry.ts_ns,
                    cpu_ns: state.entry.cpu_ns,
                    args: call.args,
                    mem,
                });
            }
        }
        Ok(records)
    }

    /// Takes the record ring buffers out as a [`RecordReader`] (once).
    pub fn records(&mut self) -> Result<RecordReader> {
        ensure!(
            !self.rings.is_empty(),
            "the record ring buffers were already taken"
        );
        let rings = std::mem::take(&mut self.rings)
            .into_iter()
            .map(|data| RecordRing::new(data, self.ring_bytes))
            .collect::<Result<Vec<_>>>()?;
        RecordReader::new(rings, wake_bytes(self.ring_bytes))
    }

    /// Starts a thread that calls `on_init` with the process id of every traced process that
    /// enters `MPI_Init` or `MPI_Init_thread`, as it does (see [`InitWatch`]). Once per
    /// tracer: the notices' ring buffer is taken.
    pub fn watch_inits(&mut self, on_init: impl FnMut(u32) + Send + 'static) -> Result<InitWatch> {
        let map = self
            .ebpf
            .take_map(maps::INIT_NOTICES)
            .context("the MPI_Init notices were already taken")?;
        let Map::RingBuf(data) = map else {
            bail!("map {} is not a ring buffer", maps::INIT_NOTICES);
        };
        InitWatch::spawn(RecordRing::new(data, maps::INIT_NOTICES_BYTES)?, on_init)
    }

    /// A function that hands the kernel side what tells process `tgid`'s eager sends
    /// (`lbf_common::maps::SendRules`), so that their return probes can be skipped: for the
    /// capture's inspection of each rank at `MPI_Init` (see [`Tracer::watch_inits`]). Once
    /// per tracer: the map is taken. A process whose rules do not fit the map keeps every
    /// send's return, which costs time, not events.
    pub fn send_rules_writer(&mut self) -> Result<impl FnMut(u32, SendRules) + Send + 'static> {
        let map = self
            .ebpf
            .take_map(maps::SEND_RULES)
            .context("the send rules were already taken")?;
        let mut rules: HashMap<MapData, u32, SendRules> = HashMap::try_from(map)?;
        Ok(move |tgid: u32, value: SendRules| {
            let _ = rules.insert(&tgid, &value, 0);
        })
    }

    /// Attaches the entry and the exit program at `points` of the file at `path` (absolute),
    /// each point's cookie naming its function: one session program for both where returns
    /// are taken as needed ([`Returns::AsNeeded`]). Else the exit probes first: a call entered
    /// between the two attaches then yields an exit without entry (counted), never an entry
    /// whose exit is lost.
    pub(super) fn attach_entry_exit(
        &mut self,
        path: &Path,
        points: &[UProbeAttachPoint<'static>],
    ) -> Result<()> {
        if self.returns == Returns::AsNeeded {
            return self.attach_uprobes(SESSION_PROGRAM, path, points);
        }
        let (enter, exit) = self.mode.programs();
        self.attach_uprobes(exit, path, points)?;
        self.attach_uprobes(enter, path, points)
    }

    /// Attaches the loaded uprobe program `name` at `points` of `path` (absolute), for all
    /// processes (the kernel side keeps to the traced ones).
    pub(super) fn attach_program_at(
        &mut self,
        name: &str,
        path: &Path,
        points: &[UProbeAttachPoint<'static>],
    ) -> Result<()> {
        self.attach_uprobes(name, path, points)
    }

    /// Attaches the loaded uprobe program `name` at `points` of `path`, for all processes.
    fn attach_uprobes(
        &mut self,
        name: &str,
        path: &Path,
        points: &[UProbeAttachPoint<'static>],
    ) -> Result<()> {
        let mode = self.mode;
        let prog: &mut UProbe = program(&mut self.ebpf, name)?;
        let link = prog
            .attach(points, path, UProbeScope::AllProcesses)
            .with_context(|| {
                format!(
                    "attaching {name} ({mode:?}) to {} functions of {}",
                    points.len(),
                    path.display()
                )
            })?;
        self.links.push(Box::new(prog.take_link(link)?));
        Ok(())
    }
}

/// The program `name` of the object as type `T`.
pub(super) fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let prog = ebpf
        .program_mut(name)
        .with_context(|| format!("eBPF program {name} missing from the object"))?;
    Ok(prog.try_into()?)
}

/// A loader for [`OBJECT`] that creates the task-storage map `THREADS` too, which aya has no
/// type for (user space reaches it through [`ThreadStates`]).
pub(super) fn object_loader<'a>() -> EbpfLoader<'a> {
    let mut loader = EbpfLoader::new();
    loader.allow_unsupported_maps();
    loader
}

/// The unread bytes from which a record's submit wakes the reader: an eighth of a ring buffer
/// of `ring` bytes (`lbf_common::maps::WAKE_BYTES`).
fn wake_bytes(ring: u32) -> u64 {
    ring as u64 / 8
}

/// [`TracerOptions::default_ringbuf_bytes`] for `rings` ring buffers.
fn default_ringbuf_bytes_for(rings: u32) -> u32 {
    (16 << 20).max(rings * TracerOptions::MIN_DEFAULT_RING_BYTES)
}

/// How many record ring buffers to make: one per CPU the kernel may number (a power of two, so
/// that a CPU's number masked selects its ring), at most `lbf_common::maps::MAX_RINGS`.
fn ring_count() -> Result<u32> {
    let cpus = aya::util::nr_cpus()
        .map_err(|(path, e)| anyhow::anyhow!("reading {path}: {e}"))?
        .get();
    Ok(cpus.next_power_of_two().min(maps::MAX_RINGS))
}

/// A ring buffer size the kernel accepts: a power of two, at least one page.
fn ringbuf_size(bytes: u32) -> u32 {
    bytes
        .max(4096)
        .checked_next_power_of_two()
        .unwrap_or(1 << 31)
}

/// CLOCK_MONOTONIC in nanoseconds, the clock of `bpf_ktime_get_ns`.
pub(super) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The wall-clock time (`CLOCK_REALTIME`, nanoseconds since the Unix epoch) of the
/// `CLOCK_MONOTONIC` instant `monotonic` (a record's `ts_ns`): what hosts, whose monotonic
/// clocks count from their own boots, can compare.
pub fn unix_ns_of(monotonic: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (now + monotonic).saturating_sub(monotonic_ns())
}

/// Fails with a plain message when this process cannot load eBPF programs.
fn check_privileges() -> Result<()> {
    const CAP_BPF: u32 = 39;
    const CAP_PERFMON: u32 = 38;
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| eff & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    bail!(
        "lbf needs root privileges (CAP_BPF and CAP_PERFMON) to load its eBPF probes; \
         run it with sudo"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ringbuf_size_is_a_power_of_two_of_at_least_a_page() {
        assert_eq!(ringbuf_size(0), 4096);
        assert_eq!(ringbuf_size(5000), 8192);
        assert_eq!(ringbuf_size(16 << 20), 16 << 20);
    }

    #[test]
    fn default_rings_are_16_mib_together_and_2_mib_each_at_least() {
        for (rings, total) in [(1, 16 << 20), (2, 16 << 20), (8, 16 << 20), (64, 128 << 20)] {
            assert_eq!(default_ringbuf_bytes_for(rings), total, "{rings} rings");
        }
        let total = TracerOptions::default_ringbuf_bytes();
        let each = ringbuf_size(total / ring_count().unwrap());
        assert!(
            each >= TracerOptions::MIN_DEFAULT_RING_BYTES,
            "{each} bytes per ring here"
        );
    }
}
