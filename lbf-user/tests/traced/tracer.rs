//! Runs a shell command under the eBPF tracer with a capture in this process, from its start
//! ([`trace`]) or also by a second tracer attached while it runs ([`trace_attaching`]),
//! measuring what else the machine did meanwhile.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lbf::capture::{EventLog, Summary};
use lbf::probe::{self, HeldChild, RecordSink, Tracer, TracerOptions};

use super::machine::{self, machine_cpu_seconds, own_cpu_seconds};
use super::watchdog::{Watchdog, RUN_LIMIT};
use super::workloads::{parse_checks, Check};
use super::TRACING;

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
    assert_nothing_lost(&end.lost);
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
                assert_nothing_lost(&end.lost);
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

/// Fails if the kernel side lost records (a ring buffer full, an exit whose entry was lost).
fn assert_nothing_lost(lost: &probe::LostCounts) {
    assert_eq!(
        (lost.ringbuf_full, lost.exit_without_entry),
        (0, 0),
        "the kernel side lost records: {lost:?}"
    );
}
