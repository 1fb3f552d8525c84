//! Shared by the capture integration tests (MPI, sockets, PVM): builds the C workloads of
//! `tests/workloads/*` (cached by modification time), runs a shell command under the eBPF
//! tracer with a capture (or under the `lbf-trace` binary), parses the programs' `LBF-CHECK`
//! lines, and checks a capture against them: messages, bytes, CPU per process, and the
//! prediction for the configuration the run had; and checks that `lbf-trace` handed events
//! out while the program ran. A run can also be traced twice at once, from its start and by
//! a tracer attached while it runs ([`trace_attaching`]).

#![allow(dead_code)] // each test crate uses its own part

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lbf::capture::mpi::Library;
use lbf::capture::{EventLog, Summary};
use lbf::engine::Engine;
use lbf::event::{Event, EventKind};
use lbf::probe::{self, HeldChild, RecordSink, Tracer, TracerOptions};
use lbf::target::{Network, Node, Target};
use lbf::trace::TraceReader;

#[path = "../machine/mod.rs"]
pub(crate) mod machine;
mod watchdog;
use machine::{machine_cpu_seconds, own_cpu_seconds, BUSY_MACHINE};
use watchdog::{Watchdog, RUN_LIMIT};

/// One traced run at a time: the machine has 2 cores and the CPU checks need them.
static TRACING: Mutex<()> = Mutex::new(());

/// Relative tolerance between the CPU a process measured and the CPU of its events.
pub(crate) const CPU_TOLERANCE: f64 = 0.05;
/// Relative tolerance between the predicted and the measured run time.
pub(crate) const TIME_TOLERANCE: f64 = 0.10;
/// Runs of one workload before a prediction outside [`TIME_TOLERANCE`] fails the test. The
/// same untraced run varies by up to 15 % here from one run to the next (MPICH's ring, 2
/// ranks: 0.350 to 0.406 s over 12 runs), which a prediction from one run's CPU times cannot
/// know; a systematic error misses every time.
pub(crate) const TIMING_ATTEMPTS: u32 = 3;

/// The start of a miss that is no miss: other work took the machine during the run, whose
/// configuration is then not the one predicted.
pub(crate) const BUSY: &str = "machine busy: ";

/// Runs `attempt` (one traced run, its accounts checked, then its prediction) until its
/// prediction is within tolerance, at most [`TIMING_ATTEMPTS`] times; panics with every miss.
/// Runs during which the machine was busy ([`BUSY`]) are retried too; if every run was, the
/// check is recorded as not made ([`machine::not_checked`]) rather than passed or failed.
pub(crate) fn timed(mut attempt: impl FnMut() -> Result<(), String>) {
    let mut misses = Vec::new();
    for n in 1..=TIMING_ATTEMPTS {
        match attempt() {
            Ok(()) => return,
            Err(miss) => {
                eprintln!("attempt {n} of {TIMING_ATTEMPTS}: {miss}");
                misses.push(miss);
            }
        }
    }
    if misses.iter().all(|m| m.starts_with(BUSY)) {
        machine::not_checked(&misses.join("; "));
        return;
    }
    panic!(
        "the prediction missed in all {TIMING_ATTEMPTS} runs: {}",
        misses.join("; ")
    );
}

/// Whether this process may load eBPF programs; the tests skip (and say so) otherwise.
pub(crate) fn can_trace() -> bool {
    machine::require("root (tracing loads eBPF)", machine::is_root())
}

fn modified(path: &Path) -> std::time::SystemTime {
    path.metadata()
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Workload `name` of `tests/workloads/<family>` built with gcc and `libs`, rebuilt when a
/// file of that folder is newer than the binary.
pub(crate) fn workload(family: &str, name: &str, libs: &[&str]) -> PathBuf {
    workload_built_by("gcc", family, name, libs)
}

/// Workload `name` of `tests/workloads/<family>` built by the C compiler (or MPI wrapper)
/// `cc` with `libs`, rebuilt when a file of that folder (or the shared `work.h`) is newer than
/// the binary. Its source is `name.c`, or for a Fortran compiler (`mpif90.openmpi`)
/// `name.f90` or the fixed-form `name.f`.
pub(crate) fn workload_built_by(cc: &str, family: &str, name: &str, libs: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/workloads")
        .join(family);
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{family}-{cc}"));
    std::fs::create_dir_all(&out_dir).expect("creating the workload build directory");
    let bin = out_dir.join(name);
    let newest = std::fs::read_dir(&dir)
        .expect("the workload folder")
        .map(|e| modified(&e.expect("a folder entry").path()))
        .chain([modified(&dir.join("../work.h"))])
        .max()
        .expect("a workload");
    if !(bin.exists() && modified(&bin) > newest) {
        // Built aside and renamed into place: tests running at once may build the same
        // workload, and one must not run a binary another is still writing.
        let aside = out_dir.join(format!(".{name}-{:?}", std::thread::current().id()));
        let src = ["c", "f90", "f"]
            .map(|ext| dir.join(format!("{name}.{ext}")))
            .into_iter()
            .find(|src| src.exists())
            .unwrap_or_else(|| panic!("no source of workload {name} in {}", dir.display()));
        let status = Command::new(cc)
            .args(["-O1", "-g", "-Wall", "-o"])
            .arg(&aside)
            .arg(&src)
            .args(libs)
            .status()
            .unwrap_or_else(|e| panic!("running {cc}: {e}"));
        assert!(status.success(), "{cc} failed on {}", src.display());
        std::fs::rename(&aside, &bin).expect("moving the workload into place");
    }
    bin
}

/// One `LBF-CHECK` line: `key=value` fields.
#[derive(Clone, Debug)]
pub(crate) struct Check(pub HashMap<String, String>);

impl Check {
    /// Field `key` as a number.
    pub(crate) fn num(&self, key: &str) -> u64 {
        self.0
            .get(key)
            .unwrap_or_else(|| panic!("LBF-CHECK without {key}: {:?}", self.0))
            .parse()
            .expect("a number")
    }
}

/// The `LBF-CHECK` lines anywhere in `output` (PVM prefixes its workers' lines).
pub(crate) fn parse_checks(output: &str) -> Vec<Check> {
    output
        .lines()
        .filter_map(|l| l.split_once("LBF-CHECK ").map(|(_, rest)| rest))
        .map(|fields| {
            Check(
                fields
                    .split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        })
        .collect()
}

/// What a traced run produced.
pub(crate) struct Traced {
    /// The events.
    pub log: EventLog,
    /// The capture's summary.
    pub summary: Summary,
    /// The programs' own accounts.
    pub checks: Vec<Check>,
    /// What the command printed (standard output and error).
    pub output: String,
    /// CPU seconds the whole machine used while the command ran (every process, traced or
    /// not), to tell whether other work competed with the run.
    pub machine_cpu_seconds: f64,
    /// CPU seconds of this test process (the tracer) and of the command's processes it and
    /// they waited for, over the same time: not competing work.
    pub own_cpu_seconds: f64,
    /// CPU seconds the hypervisor took from the machine while the command ran (steal time):
    /// lbf's clock counts such a pause of a running thread as its CPU until its next context
    /// switch, the thread's own clock does not (see `lbf_common::maps::ThreadClock`).
    pub steal_seconds: f64,
}

/// Runs `command` (a shell command line) under a tracer prepared by `prepare`, feeding
/// `sink`; returns the command's output once `finish` has turned the sink into a run.
pub(crate) fn trace<S: RecordSink>(
    label: &str,
    command: &str,
    prepare: impl FnOnce(&mut Tracer),
    sink: S,
    finish: impl FnOnce(S) -> (EventLog, Summary),
) -> Traced {
    run_traced(label, command, prepare, sink, finish, |_| {})
}

/// [`trace`], calling `started` with the command's PID once it runs.
fn run_traced<S: RecordSink>(
    label: &str,
    command: &str,
    prepare: impl FnOnce(&mut Tracer),
    mut sink: S,
    finish: impl FnOnce(S) -> (EventLog, Summary),
    started: impl FnOnce(u32),
) -> Traced {
    let _one = TRACING.lock().unwrap_or_else(|e| e.into_inner());
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{label}.out"));
    let command = format!("( {command} ) > {} 2>&1", out.display());
    // At the highest priority (this thread, and the command it forks): other work on a
    // shared machine (builds) then barely competes with the run whose time is predicted,
    // nor with the tracer, which must identify sockets while they are open.
    machine::raise_priority();
    let mut tracer = Tracer::load(&TracerOptions::default()).expect("loading the eBPF tracer");
    prepare(&mut tracer);
    let mut reader = tracer.records().expect("ring buffer");
    // In a session of its own, so that the watchdog can kill all of it.
    let argv = ["setsid", "sh", "-c", &command].map(String::from);
    let mut child = HeldChild::spawn(&argv).expect("spawning");
    tracer.trace_pid(child.pid()).expect("tracing the command");
    child.release().expect("starting the command");
    started(child.pid());
    let stop = Arc::new(AtomicBool::new(false));
    let watchdog = Watchdog::start(child.pid(), RUN_LIMIT, stop.clone());
    let (cpu_before, own_before) = (machine_cpu_seconds(), own_cpu_seconds());
    let steal_before = machine::steal_seconds();
    let end = lbf::record::run(&mut tracer, &mut reader, &mut sink, &stop).expect("capturing");
    let machine_cpu_seconds = machine_cpu_seconds() - cpu_before;
    let steal_seconds = machine::steal_seconds() - steal_before;
    let status = child.wait().expect("waiting for the command");
    let own_cpu_seconds = own_cpu_seconds() - own_before;
    let output = std::fs::read_to_string(&out).expect("reading the program's output");
    if let Some(processes) = watchdog.finish() {
        panic!(
            "`{command}` still ran after {RUN_LIMIT:?} and was killed.\nIts output:\n{output}\n\
             The machine's processes when it was killed:\n{processes}"
        );
    }
    assert_eq!(status, 0, "`{command}` failed:\n{output}");
    // Failed memory reads are allowed: they concern calls of other processes (the PVM
    // console packing strings), and the programs' own counts are checked below.
    assert_eq!(
        (end.lost.ringbuf_full, end.lost.exit_without_entry),
        (0, 0),
        "the kernel side lost records: {:?}",
        end.lost
    );
    let (log, summary) = finish(sink);
    Traced {
        log,
        summary,
        checks: parse_checks(&output),
        output,
        machine_cpu_seconds,
        own_cpu_seconds,
        steal_seconds,
    }
}

/// An installed MPI implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    /// The name Debian's compiler wrapper and launcher carry (`mpicc.NAME`, `mpirun.NAME`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi",
            Mpi::Mpich => "mpich",
        }
    }

    /// The shell command that runs `np` ranks of `program args` as `setup` says.
    pub(crate) fn launch(self, np: u32, program: &str, args: &str, setup: Setup) -> String {
        let Setup { env, mca, cpus } = setup;
        let taskset = cpus.map_or(String::new(), |c| format!("taskset -c {c} "));
        match self {
            Mpi::OpenMpi => format!(
                "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {env} {taskset}\
                 mpirun.openmpi --oversubscribe --bind-to none {mca} -np {np} {program} {args}"
            ),
            Mpi::Mpich => format!("{env} {taskset}mpirun.mpich -n {np} {program} {args}"),
        }
    }

    /// The library.
    pub(crate) fn library(self) -> Library {
        match self {
            Mpi::OpenMpi => Library::OpenMpi,
            Mpi::Mpich => Library::Mpich,
        }
    }

    /// How much a waiting rank of a job of `np` ranks loads its core (see docs/targets.md):
    /// MPICH polls flat out; Open MPI yields the CPU while it polls only when `mpirun` finds
    /// more ranks than slots (this machine's cores, whatever `taskset` allows), and polls flat
    /// out otherwise.
    pub(crate) fn spin(self, np: u32) -> f64 {
        match self {
            Mpi::OpenMpi if f64::from(np) > machine::cores() => 0.0,
            Mpi::OpenMpi | Mpi::Mpich => 1.0,
        }
    }
}

/// How an MPI run is launched beyond the defaults.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Setup<'a> {
    /// Environment variables (`NAME=value ...`) of the launcher and the ranks.
    pub env: &'a str,
    /// Open MPI's `--mca` options.
    pub mca: &'a str,
    /// The CPUs (a `taskset -c` list) the job runs on; all if `None`.
    pub cpus: Option<&'a str>,
}

/// Probes every installed MPI library: how the MPI tests prepare a tracer.
pub(crate) fn probe_mpi(tracer: &mut Tracer) {
    for path in probe::installed_mpi_libraries().expect("finding MPI libraries") {
        if let Some(lib) = Library::from_path(&path.to_string_lossy()) {
            tracer
                .attach_mpi_library(&path, &lib.fn_reads())
                .expect("attaching");
        }
    }
}

/// Where [`trace_attaching`] attaches its second tracer: to the `procs` processes named
/// `program` that the command starts, `after` the tracer from the start has had
/// `after_records` records (the job is under way).
pub(crate) struct Attach {
    /// Their command name (`/proc/PID/comm`).
    pub program: String,
    /// How many there are.
    pub procs: usize,
    /// Records of the tracer from the start to wait for.
    pub after_records: u64,
    /// How long to wait after those.
    pub after: Duration,
}

/// A record sink that counts the records it passes on.
struct Counted<'a, S> {
    sink: S,
    records: &'a AtomicU64,
}

impl<S: RecordSink> RecordSink for Counted<'_, S> {
    fn record(&mut self, record: &lbf_common::Record) -> anyhow::Result<()> {
        self.records.fetch_add(1, Ordering::Relaxed);
        self.sink.record(record)
    }
    fn finish(&mut self, lost: &probe::LostCounts) -> anyhow::Result<()> {
        self.sink.finish(lost)
    }
    fn tick(&mut self) -> anyhow::Result<()> {
        self.sink.tick()
    }
}

/// Runs `command` traced from its start as [`trace`] does, and meanwhile traces it a second
/// time as `lbf-trace -p` would: a second tracer, prepared alike and loaded while the command
/// runs, attaches to the processes `attach` names and feeds the sink `attached_sink` makes,
/// until they end. Returns the run traced from its start, then the run traced from the attach
/// (whose measured time starts at the attach; both have the programs' `LBF-CHECK` lines).
#[allow(clippy::too_many_arguments)]
pub(crate) fn trace_attaching<S: RecordSink, A: RecordSink>(
    label: &str,
    command: &str,
    prepare: impl Fn(&mut Tracer) + Sync,
    attach: &Attach,
    sink: S,
    finish: impl FnOnce(S) -> (EventLog, Summary),
    attached_sink: impl FnOnce() -> A + Send,
    finish_attached: impl FnOnce(A) -> (EventLog, Summary) + Send,
) -> (Traced, Traced) {
    let prepare = &prepare;
    let records = &AtomicU64::new(0);
    let sink = Counted { sink, records };
    let finish = |counted: Counted<S>| finish(counted.sink);
    let (from_start, mut attached) = std::thread::scope(|scope| {
        let mut second = None;
        let from_start = run_traced(label, command, prepare, sink, finish, |root| {
            second = Some(scope.spawn(move || {
                let mut tracer =
                    Tracer::load(&TracerOptions::default()).expect("loading the second tracer");
                prepare(&mut tracer);
                let mut reader = tracer.records().expect("ring buffer");
                let pids = descendants_named(root, &attach.program, attach.procs);
                while records.load(Ordering::Relaxed) < attach.after_records {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(attach.after);
                let (cpu_before, own_before) = (machine_cpu_seconds(), own_cpu_seconds());
                let steal_before = machine::steal_seconds();
                for pid in pids {
                    tracer
                        .trace_pid(pid)
                        .expect("attaching to a running process");
                }
                let mut sink = attached_sink();
                let stop = AtomicBool::new(false);
                let end = lbf::record::run(&mut tracer, &mut reader, &mut sink, &stop)
                    .expect("capturing");
                // Calls entered between the probes' attach and the processes' return without
                // their entry: counted as in progress at the attach, not as missed entries.
                eprintln!(
                    "attached: {} calls in progress at the attach",
                    end.lost.in_progress_at_attach
                );
                assert_eq!(
                    (end.lost.ringbuf_full, end.lost.exit_without_entry),
                    (0, 0),
                    "the kernel side lost records: {:?}",
                    end.lost
                );
                let (log, summary) = finish_attached(sink);
                Traced {
                    log,
                    summary,
                    checks: Vec::new(),
                    output: String::new(),
                    machine_cpu_seconds: machine_cpu_seconds() - cpu_before,
                    own_cpu_seconds: own_cpu_seconds() - own_before,
                    steal_seconds: machine::steal_seconds() - steal_before,
                }
            }));
        });
        let second = second.expect("the command started");
        (
            from_start,
            second.join().expect("the attached tracer's thread"),
        )
    });
    attached.checks = from_start.checks.clone();
    attached.output = from_start.output.clone();
    (from_start, attached)
}

/// The `n` processes named `name` descending from `root`, once there are that many (waits up
/// to a minute).
fn descendants_named(root: u32, name: &str, n: usize) -> Vec<u32> {
    let descends = |mut pid: u32| {
        while let Some(p) = machine::parent_of(pid).filter(|&p| p > 1) {
            if p == root {
                return true;
            }
            pid = p;
        }
        false
    };
    wait_for(|| {
        let found: Vec<u32> = machine::process_ids()
            .into_iter()
            .filter(|&pid| machine::comm(pid).as_deref() == Some(name) && descends(pid))
            .collect();
        if found.len() == n {
            return Ok(found);
        }
        Err(format!(
            "{n} processes named {name} did not appear (found {found:?})"
        ))
    })
}

/// Tries `attempt` every 10 ms until it succeeds; after a minute, panics with what its last
/// try said.
pub(crate) fn wait_for<T>(mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match attempt() {
            Ok(t) => return t,
            Err(why) => assert!(Instant::now() < deadline, "waited a minute: {why}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What a run of the `lbf-trace` binary printed and wrote.
pub(crate) struct TraceRun {
    /// Its exit status.
    pub code: i32,
    /// Its standard output: the traced command's, then the predictions.
    pub stdout: String,
    /// Its standard error: reports and warnings.
    pub stderr: String,
    /// The trace it wrote (-o); empty if it was asked for none.
    pub trace: PathBuf,
}

/// Runs `lbf-trace -o <label>.trace.jsonl ARGS` as one traced run at a time (see [`trace`]).
pub(crate) fn lbf_trace(label: &str, args: &[&str]) -> TraceRun {
    lbf_trace_during(label, args, |_| {})
}

/// [`lbf_trace`], calling `during` with lbf-trace's process id once it runs; lbf-trace's
/// output goes to files meanwhile, so that `during` may stop it for a while.
pub(crate) fn lbf_trace_during(label: &str, args: &[&str], during: impl FnOnce(u32)) -> TraceRun {
    let trace = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{label}.trace.jsonl"));
    run_lbf_trace(Some(trace), args, during)
}

/// Runs `lbf-trace ARGS` asked for neither a trace nor predictions, as one traced run at a
/// time (see [`trace`]).
pub(crate) fn lbf_trace_without_outputs(args: &[&str]) -> TraceRun {
    run_lbf_trace(None, args, |_| {})
}

/// Runs `lbf-trace [-o TRACE] ARGS` at the highest priority (as in [`trace`]), calling
/// `during` with its process id while it runs.
fn run_lbf_trace(trace: Option<PathBuf>, args: &[&str], during: impl FnOnce(u32)) -> TraceRun {
    let _one = TRACING.lock().unwrap_or_else(|e| e.into_inner());
    let mut command = Command::new(env!("CARGO_BIN_EXE_lbf-trace"));
    if let Some(trace) = &trace {
        let _ = std::fs::remove_file(trace);
        command.arg("-o").arg(trace);
    }
    let out = |name: &str| Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lbf-trace.{name}"));
    let file = |name: &str| std::fs::File::create(out(name)).expect("creating an output file");
    machine::raise_priority();
    let mut child = command
        .args(args)
        .stdout(file("stdout"))
        .stderr(file("stderr"))
        .spawn()
        .expect("running lbf-trace");
    during(child.id());
    let status = child.wait().expect("waiting for lbf-trace");
    let read = |name: &str| std::fs::read_to_string(out(name)).expect("reading lbf-trace's output");
    TraceRun {
        code: status.code().unwrap_or(-1),
        stdout: read("stdout"),
        stderr: read("stderr"),
        trace: trace.unwrap_or_default(),
    }
}

/// The `capture:` reports of `lbf-trace --interval` in `stderr`: events handed out and
/// events held at each.
pub(crate) fn capture_reports(stderr: &str) -> Vec<(u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("lbf-trace: capture: "))
        .map(|l| {
            let n: Vec<u64> = l
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            (n[0], n[1])
        })
        .collect()
}

/// What a socket capture kept at one `lbf-trace --interval` report.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeptReport {
    /// Events handed out so far.
    pub handed: u64,
    /// Channels with matching state.
    pub channels: u64,
    /// Descriptors known.
    pub descriptors: u64,
    /// Processes with an entry.
    pub processes: u64,
}

/// The socket capture's `kept:` counts in the `capture:` reports of `lbf-trace --interval`.
pub(crate) fn kept_reports(stderr: &str) -> Vec<KeptReport> {
    stderr
        .lines()
        .filter_map(|l| {
            let handed = l.strip_prefix("lbf-trace: capture: ")?.split(' ').next()?;
            let kept = l.split_once(", kept: ")?.1;
            let n: Vec<u64> = kept
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            Some(KeptReport {
                handed: handed.parse().ok()?,
                channels: n[0],
                descriptors: n[1],
                processes: n[2],
            })
        })
        .collect()
}

/// Checks that `lbf-trace --interval` handed the events out while the program ran: its
/// reports (at least 3) show events handed out before the end, never more than `most_held`
/// held back, and the trace has at least ten times that many events (so that holding them
/// all until the end could not pass). Returns the largest number held.
pub(crate) fn check_streamed(run: &TraceRun, most_held: u64) -> u64 {
    let reports = capture_reports(&run.stderr);
    eprintln!("capture reports (handed out, held): {reports:?}");
    assert!(reports.len() >= 3, "too few reports:\n{}", run.stderr);
    assert!(
        reports.iter().filter(|(handed, _)| *handed > 0).count() >= reports.len() - 1,
        "events were not handed out while the program ran:\n{}",
        run.stderr
    );
    assert!(reports.windows(2).all(|w| w[0].0 <= w[1].0), "{reports:?}");
    let held = reports.iter().map(|&(_, held)| held).max().unwrap_or(0);
    assert!(held <= most_held, "held up to {held} events: {reports:?}");
    let events = read_trace(&run.trace).1.len() as u64;
    assert!(
        events >= 10 * most_held,
        "a run this short ({events} events) shows nothing"
    );
    held
}

/// The lower bounds `lbf-trace --interval` reported for its targets while the program ran,
/// in seconds ("at least S s predicted so far").
pub(crate) fn predicted_so_far(stderr: &str) -> Vec<f64> {
    stderr
        .lines()
        .filter_map(|l| {
            l.split_once(": at least ")?
                .1
                .split_once(" s predicted so far")
        })
        .map(|(seconds, _)| seconds.parse().expect("seconds"))
        .collect()
}

/// The processes, events and summary of the trace at `path`.
pub(crate) fn read_trace(
    path: &Path,
) -> (Vec<lbf::event::ProcInfo>, Vec<Event>, lbf::trace::Summary) {
    let mut reader = TraceReader::open(path).expect("opening the trace");
    let mut events = Vec::new();
    while let Some(e) = reader.next_event().expect("reading the trace") {
        events.push(e.event);
    }
    let summary = *reader.summary().expect("a complete trace");
    (reader.header().procs.clone(), events, summary)
}

/// Checks the trace `lbf-trace` wrote against the programs' `LBF-CHECK` lines in its
/// output: `expected_procs` processes, nothing lost, every message sent and received once,
/// and per process (MPI ranks by their `rank`, named `rank N`; other processes by the `pid`
/// their name ends with) the receives and the bytes sent.
pub(crate) fn check_trace_file(run: &TraceRun, expected_procs: usize) {
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let (procs, events, summary) = read_trace(&run.trace);
    assert_eq!(procs.len(), expected_procs, "{procs:?}");
    assert_eq!(summary.lost_events, 0);
    check_messages(&events);
    let checks = parse_checks(&run.stdout);
    assert_eq!(checks.len(), expected_procs, "{}", run.stdout);
    for c in &checks {
        let named = |name: &str| match c.0.get("pid") {
            Some(pid) => name.ends_with(&format!("[{pid}]")),
            None => name == format!("rank {}", c.num("rank")),
        };
        let p = procs
            .iter()
            .position(|p| named(&p.name))
            .unwrap_or_else(|| panic!("process of {:?} not in the trace: {procs:?}", c.0));
        let of_p = || events.iter().filter(|e| e.proc == p as u32);
        let recvs = of_p()
            .filter(|e| matches!(e.kind, EventKind::RecvEnd { .. }))
            .count() as u64;
        let send_bytes: u64 = of_p()
            .map(|e| match e.kind {
                EventKind::Send { bytes, .. } => bytes,
                _ => 0,
            })
            .sum();
        assert_eq!(
            (recvs, send_bytes),
            (c.num("recvs"), c.num("send_bytes")),
            "{}: receives and bytes sent",
            procs[p].name
        );
    }
}

/// Checks that every message of `events` is sent once and received once.
fn check_messages(events: &[Event]) {
    let mut sent: HashMap<u64, u32> = HashMap::new();
    let mut received: HashMap<u64, u32> = HashMap::new();
    for e in events {
        match e.kind {
            EventKind::Send { msg, .. } => *sent.entry(msg).or_default() += 1,
            EventKind::RecvEnd { msg } => *received.entry(msg).or_default() += 1,
            _ => {}
        }
    }
    assert!(sent.values().all(|&n| n == 1) && received.values().all(|&n| n == 1));
    assert_eq!(sent.len(), received.len(), "sends and receives pair up");
    assert!(sent.keys().all(|m| received.contains_key(m)));
}

/// Checks a run against its programs' accounts (processes are told apart by the `pid` field:
/// trace names end in `[PID]`), then its prediction against its run time unless other work
/// competed for the machine (see [`check_prediction`]).
pub(crate) fn check(t: &Traced, expected_procs: usize) -> Result<(), String> {
    let s = &t.summary;
    check_accounts(t, expected_procs, |c| {
        let pid = c.num("pid");
        s.procs
            .iter()
            .position(|p| p.name.ends_with(&format!("[{pid}]")))
            .unwrap_or_else(|| panic!("process {pid} not in the trace: {:?}", s.procs))
    });
    check_prediction(t, 0.0, Measured::Programs)
}

/// Checks a run against its programs' accounts: every message sent and received once, and
/// per process (the index into the trace's processes `locate` gives for an `LBF-CHECK` line)
/// messages, bytes, collectives and CPU.
pub(crate) fn check_accounts(t: &Traced, expected_procs: usize, locate: impl Fn(&Check) -> usize) {
    let s = &t.summary;
    eprintln!("anomalies: {:?}", s.anomalies);
    assert!(s.anomalies.is_empty(), "anomalies: {:?}", s.anomalies);
    assert_eq!(
        t.checks.len(),
        expected_procs,
        "one LBF-CHECK line per process"
    );
    assert_eq!(
        s.procs.len(),
        expected_procs,
        "traced processes: {:?}",
        s.procs
    );
    check_messages(&t.log.events);
    assert_eq!((s.unmatched_sends, s.unmatched_recvs), (0, 0));
    for c in &t.checks {
        let i = locate(c);
        let st = &s.stats[i];
        eprintln!("{}: program {:?}\n    capture {st:?}", s.procs[i].name, c.0);
        assert_eq!(
            (st.sends, st.send_bytes, st.recvs, st.recv_bytes),
            (
                c.num("sends"),
                c.num("send_bytes"),
                c.num("recvs"),
                c.num("recv_bytes")
            ),
            "{} messages and bytes",
            s.procs[i].name
        );
        if c.0.contains_key("colls") {
            assert_eq!(
                st.collectives,
                c.num("colls"),
                "{} collectives",
                s.procs[i].name
            );
        }
        // Over by at most the tolerance and the steal time, short by at most the tolerance.
        let cpu = c.num("cpu_ns") as f64;
        let captured = (st.cpu_ns + st.untimed_cpu_ns) as f64;
        let steal = t.steal_seconds * 1e9;
        let over = captured - cpu;
        let allowed = CPU_TOLERANCE * cpu + if over > 0.0 { steal } else { 0.0 };
        assert!(
            over.abs() <= allowed,
            "{} CPU: capture {captured} ns, program {cpu} ns (steal time during the run: {steal} ns)",
            s.procs[i].name,
        );
    }
}

/// What a prediction is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Measured {
    /// The capture's measured time (first traced process's start to the last exit), against
    /// the prediction as it stands: right when the traced command is the job (`mpirun ...`).
    Capture,
    /// The longest run time a program measured itself (`wall_ns`), against the prediction
    /// from the first process's start: when the traced command does more than the programs
    /// (starting and halting pvmd, a shell starting servers and clients).
    Programs,
}

/// Checks the prediction for the configuration the run had (one node with this machine's
/// cores; waiting processes loading it by `spin`) against the run time, `measured` one way or
/// the other, unless other work competed for the machine. A miss is an `Err` saying by how
/// much, for [`timed`] to run again.
pub(crate) fn check_prediction(t: &Traced, spin: f64, measured: Measured) -> Result<(), String> {
    let s = &t.summary;
    let (predicted, measured) = match measured {
        Measured::Capture => (
            predict_as_run(t, spin) + s.teardown_seconds,
            s.measured_seconds,
        ),
        Measured::Programs => {
            // The engine starts each process when it started in the run (the traced shell
            // first): measure the prediction from the program's first process.
            let wall = t.checks.iter().map(|c| c.num("wall_ns")).max().unwrap_or(0);
            (predict_as_run(t, spin) - first_start(t), wall as f64 * 1e-9)
        }
    };
    let (ours, others) = (programs_cpu_seconds(t), competing_share(t));
    let starts: Vec<String> = s
        .procs
        .iter()
        .map(|p| format!("{:.3}", p.start_ns as f64 * 1e-9))
        .collect();
    eprintln!(
        "measured {measured:.4} s, predicted {predicted:.4} s for the run's own configuration \
         (processes started at [{}] s, teardown {:.4} s; CPU: programs {ours:.3} s, tracer and \
         launcher {:.3} s, others {:.1} % of the machine)",
        starts.join(", "),
        s.teardown_seconds,
        (t.own_cpu_seconds - ours).max(0.0),
        others * 100.0,
    );
    if others > BUSY_MACHINE {
        return Err(format!(
            "{BUSY}other processes used {:.0} % of the machine's CPU during the run, so the \
             run's configuration is not the one predicted",
            others * 100.0
        ));
    }
    within_tolerance(predicted, measured)
}

/// CPU seconds the traced programs used, by their events and start-up.
fn programs_cpu_seconds(t: &Traced) -> f64 {
    t.summary
        .stats
        .iter()
        .map(|st| (st.cpu_ns + st.untimed_cpu_ns) as f64 * 1e-9)
        .sum()
}

/// The share of the machine's CPU that other work used during run `t`. A prediction is for
/// the machine as the run had it: with other work competing for the cores (a busy shared
/// machine), the run is slower than any placement predicts.
pub(crate) fn competing_share(t: &Traced) -> f64 {
    // The command's processes are in `own` when waited for by it, in `ours` when not (PVM
    // tasks are pvmd's children): the larger counts, once. Daemons the job relies on (pvmd,
    // PVM's group server) are the job's too: the command prints their CPU.
    // SAFETY: sysconf has no preconditions.
    let tick = 1.0 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let daemons: f64 = t
        .output
        .lines()
        .filter_map(|l| l.strip_prefix("LBF-DAEMON-CPU ticks="))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .map(|ticks| ticks * tick)
        .sum();
    machine::others_share(
        t.machine_cpu_seconds,
        t.own_cpu_seconds.max(programs_cpu_seconds(t)) + daemons,
        t.summary.measured_seconds,
    )
}

/// When the first process of run `t` started, in seconds after the capture's start.
pub(crate) fn first_start(t: &Traced) -> f64 {
    t.summary
        .procs
        .iter()
        .map(|p| p.start_ns)
        .min()
        .unwrap_or(0) as f64
        * 1e-9
}

/// `Ok` if `predicted` is within [`TIME_TOLERANCE`] of `measured`, else the miss.
fn within_tolerance(predicted: f64, measured: f64) -> Result<(), String> {
    if (predicted - measured).abs() <= TIME_TOLERANCE * measured {
        Ok(())
    } else {
        Err(format!(
            "predicted {predicted:.4} s, measured {measured:.4} s: off by more than {:.0} %",
            TIME_TOLERANCE * 100.0
        ))
    }
}

/// Checks the "what if" prediction from run `traced` for the configuration of run `other`
/// (one node of `cores` cores; waiting processes loading it by `spin`) against `other`'s run
/// time, unless other work competed for the machine during either run. Both are taken from
/// the first process's start to the last exit: the launcher's start-up and the library's
/// teardown are taken as measured in the traced run, and differ between configurations
/// (Open MPI's start-up took 66 ms longer on one core than on two here), which no model of
/// the run itself predicts.
pub(crate) fn check_what_if(
    traced: &Traced,
    cores: u32,
    spin: f64,
    other: &Traced,
) -> Result<(), String> {
    let predicted = predict_on(traced, cores, spin) - first_start(traced);
    let s = &other.summary;
    let measured = s.measured_seconds - s.teardown_seconds - first_start(other);
    let others = competing_share(traced).max(competing_share(other));
    eprintln!(
        "measured {measured:.4} s on {cores} cores, predicted {predicted:.4} s from a run of \
         {:.4} s, from the first start to the last exit (others used up to {:.1} % of the \
         machine)",
        traced.summary.measured_seconds,
        others * 100.0
    );
    if others > BUSY_MACHINE {
        return Err(format!(
            "{BUSY}other processes used {:.0} % of the machine's CPU during a run",
            others * 100.0
        ));
    }
    within_tolerance(predicted, measured)
}

/// The engine's prediction for the configuration the run had: every process on one node
/// with this machine's cores, starting when it started, messages free (loopback and veth
/// cost microseconds).
pub(crate) fn predict_as_run(t: &Traced, spin: f64) -> f64 {
    let cores = machine::cores() as u32;
    predict_on(t, cores, spin)
}

/// The engine's prediction for run `t` on one node of `cores` cores, each process starting
/// when it started, messages free.
pub(crate) fn predict_on(t: &Traced, cores: u32, spin: f64) -> f64 {
    let target = Target {
        name: "as run".into(),
        nodes: vec![Node {
            procs: (0..t.summary.procs.len() as u32).collect(),
            cores,
            speed: 1.0,
        }],
        network: Network::default(),
        spin,
    };
    let mut engine = Engine::for_procs(&t.summary.procs, vec![target]).expect("a valid target");
    for (i, e) in t.log.events.iter().enumerate() {
        engine
            .push(*e, i as u64 + 1)
            .expect("the engine takes the events");
    }
    engine.finish().expect("the prediction")[0].predicted_seconds
}

/// Two network namespaces joined by a veth pair, `10.231.N.1` and `10.231.N.2`, removed on
/// drop. Names carry this process's PID so that parallel test runs do not collide.
pub(crate) struct NetnsPair {
    /// The namespaces' names.
    pub names: [String; 2],
    /// Their addresses.
    pub addrs: [String; 2],
    /// The veth ends, one in each namespace.
    pub veths: [String; 2],
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("running ip");
    assert!(status.success(), "ip {}", args.join(" "));
}

impl NetnsPair {
    /// Creates the pair; `n` (0-255) tells pairs of one process apart.
    pub(crate) fn new(n: u8) -> Self {
        let pid = std::process::id();
        let names = [format!("lbf{pid}-{n}a"), format!("lbf{pid}-{n}b")];
        let veth = [format!("lv{pid}{n}a"), format!("lv{pid}{n}b")];
        let addrs = [format!("10.231.{n}.1"), format!("10.231.{n}.2")];
        let pair = NetnsPair {
            names: names.clone(),
            addrs: addrs.clone(),
            veths: veth.clone(),
        };
        for name in &names {
            ip(&["netns", "add", name]);
        }
        ip(&[
            "link", "add", &veth[0], "netns", &names[0], "type", "veth", "peer", "name", &veth[1],
            "netns", &names[1],
        ]);
        for i in 0..2 {
            ip(&[
                "-n",
                &names[i],
                "addr",
                "add",
                &format!("{}/24", addrs[i]),
                "dev",
                &veth[i],
            ]);
            ip(&["-n", &names[i], "link", "set", &veth[i], "up"]);
            ip(&["-n", &names[i], "link", "set", "lo", "up"]);
        }
        // The ends report their carrier a moment later, and their IPv6 link-local addresses
        // stay tentative for a second or two (duplicate address detection); until both are
        // done, UCX (under MPICH) finds no usable interface.
        for i in 0..2 {
            wait_for(|| {
                let show = |what: &[&str]| {
                    Command::new("ip")
                        .args(["-n", &names[i], "-o"])
                        .args(what)
                        .args(["dev", &veth[i]])
                        .output()
                        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                        .map_err(|e| e.to_string())
                };
                let (link, addrs) = (show(&["link", "show"])?, show(&["addr", "show"])?);
                if link.contains("state UP") && !addrs.contains("tentative") {
                    Ok(())
                } else {
                    Err(format!("{} is not ready: {link}{addrs}", veth[i]))
                }
            });
        }
        pair
    }
}

impl NetnsPair {
    /// Shapes both directions of the link with a token bucket (`tc qdisc ... tbf`) of `rate`
    /// (tc's units, e.g. `100mbit`) and `burst` bytes, replacing any shaping before.
    pub(crate) fn shape(&self, rate: &str, burst: u32) {
        for i in 0..2 {
            let status = Command::new("tc")
                .args([
                    "-n",
                    &self.names[i],
                    "qdisc",
                    "replace",
                    "dev",
                    &self.veths[i],
                ])
                .args(["root", "tbf", "rate", rate, "burst", &burst.to_string()])
                .args(["latency", "100ms"])
                .status()
                .expect("running tc");
            assert!(
                status.success(),
                "tc qdisc replace ... tbf rate {rate} on {}",
                self.veths[i]
            );
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}
