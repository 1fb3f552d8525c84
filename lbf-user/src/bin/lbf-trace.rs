//! `lbf-trace`: capture what an MPI program does, with eBPF, without modifying it.
//! Thin: parses arguments, wires `lbf::probe` to a record sink, reports.

use std::{
    fs::File,
    io::BufWriter,
    path::PathBuf,
    process::ExitCode,
    sync::atomic::{AtomicBool, AtomicI32, Ordering},
};

use anyhow::{bail, Context, Result};
use clap::Parser;
use lbf::capture::mpi::Library;
use lbf::capture::select::{self, Source};
use lbf::capture::EventSink;
use lbf::config::{ProcedureArgs, TargetArgs};
use lbf::event::{Event, EventDetail, ProcInfo};
use lbf::predict_live::LivePredictor;
use lbf::probe::procedures::{self as traced_procedures, ProcedureSpec};
use lbf::probe::{self, HeldChild, InitWatch, JsonLinesSink, RecordSink, TracerOptions};
use lbf::record::{CaptureSink, Recorder, Scope};
use lbf::report::{add_teardown, loss_as_cause, table, warnings};
use lbf::trace::{Header, Summary, TraceWriter};
use std::time::{Duration, Instant};

/// Trace a distributed program's messages, process lifecycle and exact CPU time with eBPF:
/// MPI programs by their MPI calls, PVM programs by their PVM calls, anything else by its
/// TCP, UDP and UNIX socket system calls.
///
/// Either run a command under tracing (`lbf-trace [OPTIONS] -- mpirun -np 4 ./prog`), which
/// traces the command and every process it starts from its first instruction, or attach to
/// running processes (`lbf-trace -p 1234,1235`) and the processes they start from now on.
/// The capture ends when every traced process has ended, or on Ctrl-C / SIGTERM. With a
/// command, lbf-trace exits with the command's exit status.
///
/// Needs root (CAP_BPF, CAP_PERFMON). MPI libraries are found in the traced processes' memory
/// maps and, for programs started later, through `ldconfig -p` (Open MPI's libmpi.so.40,
/// MPICH's libmpich.so.12), unless --mpi-lib names them. The probes of a library are one
/// uprobe_multi link per direction, removed at once at the end; kernels before 6.6 have no
/// such links and get one uprobe per function instead, whose removal then takes about 20 s
/// (one RCU grace period each; -v says which).
///
/// One source per capture (--source, chosen automatically by default; --mpi-lib implies MPI):
/// MPI if a word of the command names an MPI launcher (mpirun*, mpiexec*, orterun, srun,
/// prun), through wrappers (taskset, numactl, env, nice, chrt, time, timeout, sh -c) and the
/// shell scripts it runs, or names a program linking an MPI library (C, C++ or Fortran
/// bindings), else PVM if it links libpvm3, else sockets. A socket or PVM capture whose
/// processes turn out to map an MPI library says so on stderr (trace it with --source mpi). So an MPI program on the TCP transport is captured once, by its MPI calls (its
/// launcher's control connections are not application messages). With sockets (and PVM),
/// the processes that never send or receive a message are left out of the trace.
///
/// With --target or --nodes (the same targets as `lbf-gag predict`), the events also feed the
/// what-if engine as they come, and the predicted run times are printed at the end (and, as
/// lower bounds, every --interval seconds). With neither -o nor a target, lbf-trace prints
/// each process's totals at the end: messages and bytes sent and received, collectives, the
/// CPU seconds its events carry ("in waits": how many of them it spent waiting inside calls),
/// and the CPU outside the model ("untimed": start-up before MPI_Init returned, teardown).
///
/// Events flow (to -o and the targets) while the program runs once every process is known,
/// since a trace's header and the engine list them all: an MPI job tells its size; a socket
/// or PVM program does not, so give its number of processes with --procs (or a --target
/// file, whose processes count; the short form --nodes places any number). Without it, a
/// socket or PVM capture holds every event in memory until the program ends, and --interval
/// shows no prediction until then.
///
/// Records the kernel side had to drop (ring buffer full) are reported at the end; a larger
/// --ringbuf-size helps.
#[derive(Parser)]
#[command(name = "lbf-trace", version, verbatim_doc_comment, after_help = AFTER_HELP)]
struct Cli {
    /// Attach to these running processes (comma-separated PIDs) and their future children.
    #[arg(
        short = 'p',
        long = "pid",
        value_delimiter = ',',
        conflicts_with = "command"
    )]
    pids: Vec<u32>,

    /// Ring buffer size in bytes, split evenly among one ring buffer per CPU (each rounded up
    /// to a power of two). Most MPI calls take 128 or 192 bytes of it (whole cache lines), a
    /// few 384. The default is 16 MiB, or 2 MiB per CPU where that is more: records cost
    /// more in smaller rings.
    #[arg(long, default_value_t = TracerOptions::default_ringbuf_bytes())]
    ringbuf_size: u32,

    /// Give every MPI call a return probe. By default (Linux 6.13 and later) a nonblocking
    /// send or receive and MPI_Comm_rank/size made from the program's own code skip theirs
    /// (one trap per call instead of two) and their out-parameters are read at the thread's
    /// next MPI call: same events. This is the baseline that check is made against
    /// (docs/probe-overhead.md).
    #[arg(long)]
    all_returns: bool,

    /// Probe this MPI library (or statically linked MPI program) instead of searching for
    /// them; repeatable.
    #[arg(long = "mpi-lib", value_name = "PATH")]
    mpi_libs: Vec<PathBuf>,

    /// Debug: write every raw record as one JSON line to FILE (flushed every 200 ms, so it
    /// can be followed while the capture runs). Without -o or a target, only that: the
    /// records are not captured into events, and no totals are printed.
    #[arg(long, value_name = "FILE")]
    raw_dump: Option<PathBuf>,

    /// Write the captured events (one process per MPI rank) as a trace (format version 2) to
    /// FILE, for `lbf-gag` to replay.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,

    #[command(flatten)]
    targets: TargetArgs,

    /// Follow the CPU spent inside this function: NAME (a function of the program or of a
    /// library it links, static functions included where the binary keeps its symbol table;
    /// a C++ or Rust path such as ns::work too), NAME@OBJECT where several objects define it
    /// (OBJECT: a path or a file name such as spa or libfoo.so), or 0xADDRESS (in the program,
    /// or 0xADDRESS@OBJECT). Repeatable, up to 8. Each event then carries the CPU its thread spent inside each
    /// since the previous event (recursion counted once), for `lbf-gag predict --move`,
    /// `--zero` and `--speedup`. Each call costs an entry and a return probe (some 2.2 us
    /// here): see docs/probe-overhead.md for how often is too often.
    #[arg(long = "procedure", value_name = "NAME[@OBJECT]")]
    procedure: Vec<ProcedureSpec>,

    #[command(flatten)]
    changes: ProcedureArgs,

    /// Every SECONDS while the program runs, print how many events the capture has handed
    /// out and how many it holds (waiting for their messages or, see --procs, for every
    /// process to be known), and with targets how far each prediction has got.
    #[arg(long, value_name = "SECONDS", value_parser = parse_interval)]
    interval: Option<Duration>,

    /// Write the trace file (-o) out at least every SECONDS (and at every --interval report),
    /// in whole lines: a capture killed at any instant (kill -9, out of memory, a reboot)
    /// leaves a trace that `lbf-gag predict` reads up to there.
    #[arg(long, value_name = "SECONDS", value_parser = parse_interval, default_value = "1")]
    flush_interval: Duration,

    /// Stop the capture, as Ctrl-C would, once it holds more than N events in memory (some
    /// 90 bytes each). A capture attached to a running MPI job (-p), and a socket or PVM
    /// capture without --procs, hold every event until the program ends. What was captured is
    /// then written and predicted, matched as a capture stopped early is; the program runs on,
    /// untraced.
    #[arg(long, value_name = "N", default_value_t = 5_000_000)]
    max_held: u64,

    /// Sockets and PVM: the program has N processes (those that send or receive). Once N have,
    /// they are announced and the events flow while the program runs, memory holding only
    /// those whose messages are not settled yet. Without it (or a --target file, whose
    /// processes count) every event waits for the end of the capture, because the set of
    /// processes is known only then. A process beyond N is left out of the trace: an error
    /// at the end, its events counted as lost. A count never reached is noted, and the
    /// events are handed out at the end. MPI needs none: the job tells its size.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    procs: Option<u32>,

    /// Read at niceness N (-20 to 19) while capturing; the traced command keeps the
    /// priority lbf-trace was started with. Where the program keeps every core busy, a
    /// positive N lets it run first (`halo 10 50`, compute-heavy, on a 2-core machine: x1.014
    /// of its untraced time at the usual priority, x0.992 at 19), at a cost in liveness:
    /// lbf-trace then reads in the gaps, so --interval reports and live predictions lag
    /// behind the program, and from half a ring buffer on the kernel side wakes it at every
    /// record, which slows the program down rather than lose records. Default: unchanged.
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(-20..=19)
    )]
    nice: Option<i32>,

    /// Where messages are captured: MPI calls, PVM calls or socket system calls. Default:
    /// chosen from the program (see above).
    #[arg(long, value_enum, value_name = "SOURCE")]
    source: Option<Source>,

    /// Say what is probed and how the capture went.
    #[arg(short, long)]
    verbose: bool,

    /// The command to run and trace, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

const AFTER_HELP: &str = "\
Examples:
  # trace a 4-rank job, keep the trace, predict it on 4 nodes over Gigabit Ethernet
  sudo lbf-trace -o run.trace.jsonl --nodes 4 --network gige -- mpirun -np 4 ./app

  # attach to running ranks; predict two target files, reporting every 10 s
  sudo lbf-trace -p 4242,4243 --target two-nodes.toml --target one-node.toml --interval 10

  # a server and its 3 clients over sockets: events (and predictions) flow while they run
  sudo lbf-trace -o spa.trace.jsonl --procs 4 --nodes 2 --interval 10 -- ./spa all tcp:127.0.0.1:7300 20 5

  # the paper's SPA over MPI: follow its two service procedures, predict each moved to the
  # clients and each made free, on the machine it ran on (1 node of 2 cores)
  sudo lbf-trace -o spa.trace.jsonl --procedure servBusy1 --procedure servBusy2 \\
      --nodes 1 --cores 2 --move servBusy1 --zero servBusy2 -- mpirun -np 4 ./spa_mpi

  # replay the trace later against other targets (no root needed)
  lbf-gag predict run.trace.jsonl --nodes 8 --cores 2

Exit status: the command's, with a command; otherwise 0, or 1 on error.";

/// clap's parser for --interval: positive seconds.
fn parse_interval(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

/// Set by SIGINT/SIGTERM: stop the capture.
static STOP: AtomicBool = AtomicBool::new(false);
/// The signal that asked to stop, to pass on to the command.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::Relaxed);
    STOP.store(true, Ordering::Relaxed);
}

/// A sink that counts records (when no other output is asked for).
struct CountingSink;

impl RecordSink for CountingSink {
    fn record(&mut self, _: &lbf_common::Record) -> Result<()> {
        Ok(())
    }
    fn finish(&mut self, _: &probe::LostCounts) -> Result<()> {
        Ok(())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("lbf-trace: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    if cli.pids.is_empty() && cli.command.is_empty() {
        bail!("nothing to trace: give a command after `--`, or -p PID (see --help)");
    }
    for pid in &cli.pids {
        if !std::path::Path::new(&format!("/proc/{pid}")).is_dir() {
            bail!("no process with PID {pid}");
        }
    }
    if cli.pids.contains(&1) {
        bail!(
            "-p 1 would trace the init process and so every process the host starts from now \
             on; give the PIDs of the job's processes (or of its launcher) instead"
        );
    }
    let source = cli.source.unwrap_or_else(|| {
        if !cli.mpi_libs.is_empty() {
            // Naming an MPI library to probe says the program is an MPI program.
            Source::Mpi
        } else if cli.command.is_empty() {
            select::for_pids(&cli.pids)
        } else {
            select::for_command(&cli.command)
        }
    });
    if source != Source::Mpi && !cli.mpi_libs.is_empty() {
        eprintln!(
            "lbf-trace: warning: --mpi-lib is not used with --source {}",
            source.name()
        );
    }
    if cli.verbose {
        eprintln!("lbf-trace: capturing {source} messages");
    }
    let expected = expected_procs(&cli, source)?;
    let attaching_to_mpi = cli.command.is_empty() && source == Source::Mpi;
    if attaching_to_mpi {
        eprintln!(
            "lbf-trace: note: attaching to a running MPI job: which send each receive took is \
             known only when the job ends (messages in flight at the attach shift the two \
             sides' counts), so events are held until then and predictions come at the end. \
             Stopped earlier, lbf-trace matches them by timing alone and says so."
        );
    }
    let scope = Scope::Whole { expected };
    let started = Instant::now();
    let options = TracerOptions {
        ringbuf_bytes: cli.ringbuf_size,
        all_returns: cli.all_returns,
    };
    // Which MPI libraries to probe (`ldconfig -p`, the launcher's name, the program's own
    // symbols) is found while the eBPF object loads.
    let libraries = std::thread::scope(|threads| {
        let libraries = (source == Source::Mpi).then(|| threads.spawn(|| mpi_libraries(&cli)));
        let recorder = Recorder::load(source, &options, &scope, "lbf-trace", cli.verbose);
        let libraries = libraries.map(|l| l.join().expect("the thread finding MPI libraries"));
        recorder.map(|r| (r, libraries))
    });
    let (mut recorder, libraries) = libraries?;
    let loaded = started.elapsed();
    if let Some(libraries) = libraries {
        recorder.attach_mpi(libraries?)?;
        if cli.verbose {
            eprintln!(
                "lbf-trace: start-up: eBPF loaded in {} ms, MPI probes attached in {} ms",
                loaded.as_millis(),
                (started.elapsed() - loaded).as_millis()
            );
        }
    }
    let raw: Box<dyn RecordSink> = match &cli.raw_dump {
        Some(path) => {
            let file = File::create(path)
                .with_context(|| format!("creating the raw dump {}", path.display()))?;
            Box::new(JsonLinesSink::new(BufWriter::new(file)))
        }
        None => Box::new(CountingSink),
    };
    let procedures = attach_procedures(&cli, recorder.tracer())?;
    let live = (!cli.targets.is_empty() || !cli.changes.is_empty()).then(|| {
        LivePredictor::with_procedures(cli.targets.clone(), cli.changes.clone(), procedures.clone())
    });
    // The trace file first: an unwritable path is an error before anything runs.
    let file = match &cli.output {
        Some(path) => Some(TraceFile {
            path: path.clone(),
            source,
            procs: Vec::new(),
            procedures: procedures.clone(),
            file: Some(File::create(path).with_context(|| {
                format!(
                    "cannot write the trace {}: nothing was run; give -o a path in a writable \
                     directory",
                    path.display()
                )
            })?),
            writer: None,
            origin: 0,
            error: None,
        }),
        None => None,
    };
    // Asked for neither a trace nor predictions, lbf-trace still captures, and prints what it
    // saw at the end (see `report`); unless asked for the raw records only.
    let capture = file.is_some() || live.is_some() || cli.raw_dump.is_none();
    let outputs = Outputs {
        file,
        live,
        events: 0,
    };
    let (trace, init_watch) = if capture {
        let (sink, watch) = recorder.capture(hostname(), scope, outputs)?;
        (Some(sink), watch)
    } else {
        (None, None)
    };
    let mut sink = Tee {
        raw,
        trace,
        interval: cli.interval,
        last_report: Instant::now(),
        flush_interval: cli.flush_interval,
        last_flush: Instant::now(),
        max_held: cli.max_held,
        last_held_check: Instant::now(),
        mpi_watch: (source != Source::Mpi).then(|| MpiWatch::new(source)),
    };
    let tracer = recorder.tracer();
    let mut reader = tracer.records()?;
    // SAFETY: the handler only stores to atomics.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let mut child = None;
    if cli.command.is_empty() {
        for &pid in &cli.pids {
            tracer.trace_pid(pid)?;
        }
        if cli.verbose {
            let pids: Vec<String> = cli.pids.iter().map(u32::to_string).collect();
            eprintln!(
                "lbf-trace: probes attached: tracing PID {} (Ctrl-C stops)",
                pids.join(",")
            );
        }
    } else {
        let mut c = HeldChild::spawn(&cli.command)?;
        tracer.trace_held_child(c.pid())?;
        if let Some(trace) = sink.trace.as_mut() {
            trace.started_by_tracer(c.pid());
        }
        c.release()?;
        child = Some(c);
    }
    // The command, started above, keeps the priority lbf-trace was started with.
    if let Some(nice) = cli.nice {
        set_niceness(nice);
    }
    let cpu_before = own_cpu_seconds();
    let end = lbf::record::run(tracer, &mut reader, &mut sink, &STOP)?;
    let capture_cpu = own_cpu_seconds() - cpu_before;
    if let Some(Err(e)) = init_watch.map(InitWatch::finish) {
        eprintln!("lbf-trace: warning: {e:#}");
    }
    // A call in progress at an attach (its exit came without its entry) is the attach's
    // boundary, not a loss: the kernel side counts it apart, the capture notes it, and it is
    // not in `lost_records`.
    if let Some(watch) = &sink.mpi_watch {
        watch.finish();
    }
    if let Some(trace) = sink.trace {
        report(trace, source, cli.verbose)?;
    }
    let lost = end.lost;
    if lost.ringbuf_full > 0 {
        eprintln!(
            "lbf-trace: warning: {} records lost (ring buffer full); try a larger --ringbuf-size",
            lost.ringbuf_full
        );
    }
    if lost.exit_without_entry + lost.mem_read_failed + lost.no_clock > 0 {
        eprintln!(
            "lbf-trace: warning: {} call exits without their entry, {} failed memory reads, \
             {} records without a CPU clock",
            lost.exit_without_entry, lost.mem_read_failed, lost.no_clock
        );
    }
    if lost.polls_coalesced > 0 {
        eprintln!(
            "lbf-trace: {} unsuccessful polls (MPI_Test*, MPI_Iprobe finding nothing) left no \
             record of their own: each run of them is one record",
            lost.polls_coalesced
        );
    }
    if cli.verbose && lost.call_entries > 0 {
        eprintln!(
            "lbf-trace: {} MPI/PVM calls took {} return probes: {:.3} probe hits per call \
             ({} blocking sends found eager skipped theirs)",
            lost.call_entries,
            lost.call_returns,
            (lost.call_entries + lost.call_returns) as f64 / lost.call_entries as f64,
            lost.eager_sends_unreturned
        );
    }
    if cli.verbose {
        match lost.stolen_ns {
            Some(ns) => eprintln!(
                "lbf-trace: the hypervisor took {:.3} ms of CPU from the traced threads while \
                 they ran (steal time): left out of their CPU, as the scheduler leaves it out",
                ns as f64 * 1e-6
            ),
            None => eprintln!(
                "lbf-trace: no steal clock read (not a KVM guest): on a virtual machine, CPU \
                 the hypervisor takes while a thread runs counts as the thread's until its \
                 next context switch"
            ),
        }
        let how = if end.stopped {
            "stopped by signal"
        } else {
            "all traced processes ended"
        };
        eprintln!(
            "lbf-trace: {} records; {how}; lbf-trace used {:.3} s of CPU while capturing \
             ({:.0} ns per record)",
            end.records,
            capture_cpu,
            capture_cpu * 1e9 / end.records.max(1) as f64
        );
    }
    // The probes go before the wait: a command still running (the capture was stopped) runs
    // on untraced, at its normal speed.
    let detaching = Instant::now();
    drop(reader);
    drop(recorder);
    if cli.verbose {
        eprintln!(
            "lbf-trace: probes detached in {} ms",
            detaching.elapsed().as_millis()
        );
    }
    match child {
        Some(mut c) => {
            if end.stopped {
                c.signal(STOP_SIGNAL.load(Ordering::Relaxed));
            }
            c.wait()
        }
        None => Ok(0),
    }
}

/// Sets the calling thread's niceness (lbf-trace reads records on one thread); a failure
/// is a warning, the capture going on at the current priority.
fn set_niceness(nice: i32) {
    // SAFETY: setpriority has no memory preconditions; `who` 0 is the calling thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
        eprintln!(
            "lbf-trace: warning: could not set its niceness to {nice} ({}); capturing at the \
             current priority",
            std::io::Error::last_os_error()
        );
    }
}

/// CPU seconds this process has used (all its threads; not its children).
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// How many processes a socket or PVM capture is to expect: --procs, or the processes the
/// --target files place (which must agree); `None` for MPI, whose job tells its size.
fn expected_procs(cli: &Cli, source: Source) -> Result<Option<usize>> {
    let placed = cli.targets.procs_placed()?;
    let given = cli.procs.map(|n| n as usize);
    if let (Some(given), Some(placed)) = (given, placed) {
        if given != placed {
            bail!("--procs {given}, but the --target files place {placed} processes");
        }
    }
    if source == Source::Mpi {
        if given.is_some() {
            eprintln!("lbf-trace: warning: --procs is not used with MPI: the job tells its size");
        }
        return Ok(None);
    }
    let expected = given.or(placed);
    if expected.is_none() && (cli.interval.is_some() || cli.verbose) {
        eprintln!(
            "lbf-trace: note: without --procs, a {source} capture knows its processes only \
             when the program ends, so every event waits until then (see --help)"
        );
    }
    Ok(expected)
}

/// The MPI libraries to probe: the --mpi-lib ones if given, else those mapped by the PIDs
/// (with -p) or those installed (with a command).
fn mpi_libraries(cli: &Cli) -> Result<Vec<PathBuf>> {
    if !cli.mpi_libs.is_empty() {
        return Ok(cli.mpi_libs.clone());
    }
    if cli.command.is_empty() {
        return libraries_of(&cli.pids);
    }
    // Programs that carry MPI themselves (statically linked) are probed as libraries are.
    let mut installed = probe::installed_mpi_libraries()?;
    // Only the launcher's own library, where its name says which.
    if let Some(lib) = select::launcher_library(&cli.command) {
        installed.retain(|p| Library::from_path(&p.to_string_lossy()).is_none_or(|l| l == lib));
        if cli.verbose {
            eprintln!(
                "lbf-trace: the launcher is {lib:?}'s: probing {} only",
                lib.soname()
            );
        }
    }
    installed.extend(select::statically_linked_mpi(&cli.command));
    if installed.is_empty() {
        bail!(
            "--source mpi, but no MPI library found (ldconfig -p lists no libmpi.so / \
             libmpich.so): give one with --mpi-lib, or trace by --source sockets or pvm"
        );
    }
    Ok(installed)
}

/// The MPI libraries mapped by `pids`; an error if none has one.
fn libraries_of(pids: &[u32]) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for &pid in pids {
        let mapped = probe::mpi_libraries_mapped_by(pid)?;
        if mapped.is_empty() {
            eprintln!("lbf-trace: warning: PID {pid} has no MPI library mapped");
        }
        paths.extend(mapped);
    }
    if paths.is_empty() {
        bail!(
            "--source mpi, but none of the processes {pids:?} has an MPI library mapped (no \
             object defining PMPI_Init): trace them by --source sockets or pvm instead"
        );
    }
    Ok(paths)
}

/// Reports what the capture `trace` saw once it has finished: writes the trace file, says
/// what it could not model, and prints the predictions, or, asked for neither a trace nor
/// predictions, each process's totals. A capture of no process is an error when a trace or
/// predictions were asked for, and a note otherwise.
fn report(trace: CaptureSink<Outputs>, source: Source, verbose: bool) -> Result<()> {
    let (outputs, summary) = trace.into_parts();
    let totals_only = outputs.file.is_none() && outputs.live.is_none();
    let summary = summary.expect("the capture loop finishes its sink");
    let measured = Summary {
        measured_seconds: summary.measured_seconds,
        lost_events: summary.lost_records + summary.lost_events,
        teardown_seconds: summary.teardown_seconds,
        gaps: summary.gaps.clone(),
    };
    if let Some(file) = outputs.file {
        let path = file.path.clone();
        file.finish(&measured)?;
        if verbose {
            eprintln!(
                "lbf-trace: wrote {} processes to {}; measured {:.3} s",
                summary.procs.len(),
                path.display(),
                summary.measured_seconds
            );
        }
    }
    if summary.procs.is_empty() {
        let why: Vec<String> = summary.anomalies.keys().map(|a| a.to_string()).collect();
        let why = if why.is_empty() {
            format!("no traced process sent or received a {source} message")
        } else {
            why.join("; ")
        };
        if totals_only {
            eprintln!("lbf-trace: nothing captured: {why}");
            return Ok(());
        }
        bail!("nothing to predict: {why}");
    }
    for (what, n) in &summary.anomalies {
        eprintln!("lbf-trace: warning: {what} ({n}x)");
    }
    if summary.lost_events > 0 {
        eprintln!(
            "lbf-trace: error: more processes sent or received than the {} expected: {} \
             events of the others are not in the trace (see the warnings; give the right \
             --procs)",
            summary.procs.len(),
            summary.lost_events
        );
    }
    if totals_only {
        print!("{}", summary.totals_table());
        eprintln!(
            "lbf-trace: to predict other configurations give --nodes N or --target FILE; \
             to keep the trace, -o FILE (see --help)"
        );
    }
    if let Some(live) = outputs.live {
        match live.finish() {
            Ok(mut predictions) => {
                add_teardown(&mut predictions, Some(&measured));
                for w in warnings(Some(&measured)) {
                    eprintln!("lbf-trace: warning: {w}");
                }
                print!("{}", table(&predictions, Some(&measured)));
            }
            Err(why) => match loss_as_cause(&measured) {
                Some(loss) => eprintln!("lbf-trace: error: no prediction: {loss}: {why}"),
                None => eprintln!("lbf-trace: error: no prediction: {why}"),
            },
        }
    }
    Ok(())
}

/// Sends records to the raw dump (or nowhere) and to the capture (none when only the raw
/// records were asked for).
struct Tee {
    raw: Box<dyn RecordSink>,
    trace: Option<CaptureSink<Outputs>>,
    /// How often to report live predictions (--interval).
    interval: Option<Duration>,
    last_report: Instant,
    /// How often to write the trace file out (--flush-interval).
    flush_interval: Duration,
    last_flush: Instant,
    /// The most events the capture may hold (--max-held).
    max_held: u64,
    last_held_check: Instant,
    /// With sockets and PVM: which traced processes turn out to be MPI processes.
    mpi_watch: Option<MpiWatch>,
}

impl Tee {
    /// Writes out the trace file's lines so far.
    fn flush_trace(&mut self) {
        self.last_flush = Instant::now();
        if let Some(file) = self
            .trace
            .as_mut()
            .and_then(|t| t.events_mut().file.as_mut())
        {
            file.flush();
        }
    }
}

/// Watches the processes of a socket or PVM capture for MPI. A process that has an MPI
/// library mapped (or execs a program that links one) means the command is an MPI job that
/// the command line did not reveal, captured by its sockets (its launcher's control
/// connections, its ranks' transport) instead of its MPI calls: that must not pass silently.
/// Says so on stderr at the first such process, and again at the end.
struct MpiWatch {
    /// The capture's source.
    source: Source,
    /// The processes whose memory maps have been looked at since their last exec.
    checked: std::collections::HashSet<u32>,
    /// The MPI processes found: PID, program and MPI library.
    found: Vec<(u32, String, String)>,
}

impl MpiWatch {
    fn new(source: Source) -> Self {
        MpiWatch {
            source,
            checked: Default::default(),
            found: Vec::new(),
        }
    }

    /// Looks at the process of `record`: the program it execs, or at its first other record
    /// since, what it has mapped.
    fn record(&mut self, record: &lbf_common::Record) {
        use lbf_common::RecordKind;
        let pid = record.tgid;
        match RecordKind::from_raw(record.kind) {
            Some(RecordKind::Exec) => {
                self.checked.remove(&pid);
                let len = usize::from(record.mem_len).min(record.mem.len());
                let name = &record.mem[..len];
                let name = name.split(|&b| b == 0).next().unwrap_or_default();
                let name = String::from_utf8_lossy(name).into_owned();
                if let Some(lib) = select::mpi_library_linked_by(std::path::Path::new(&name)) {
                    self.found(pid, name, lib);
                }
            }
            Some(RecordKind::Exit) | None => {}
            Some(_) => {
                if self.checked.insert(pid) {
                    if let Some(lib) = select::mpi_library_mapped_by(pid) {
                        let program = std::fs::read_link(format!("/proc/{pid}/exe"))
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|_| "?".into());
                        self.found(pid, program, lib);
                    }
                }
            }
        }
    }

    fn found(&mut self, pid: u32, program: String, lib: String) {
        if self.found.iter().any(|(p, _, _)| *p == pid) {
            return;
        }
        if self.found.is_empty() {
            eprintln!(
                "lbf-trace: WARNING: process {pid} ({program}) is an MPI program (it links \
                 {lib}), but this capture takes {} messages: an MPI job's launcher and ranks \
                 are seen by their sockets, not their MPI calls. Trace it with --source mpi.",
                self.source
            );
        }
        self.found.push((pid, program, lib));
    }

    /// Repeats the warning at the end, with every MPI process found.
    fn finish(&self) {
        let Some((_, program, lib)) = self.found.first() else {
            return;
        };
        let pids: Vec<String> = self.found.iter().map(|(p, _, _)| p.to_string()).collect();
        eprintln!(
            "lbf-trace: WARNING: {} traced processes (PIDs {}; {program} links {lib}) are MPI \
             processes, captured as a {} program: this is not the MPI job's trace. Trace it \
             again with --source mpi.",
            self.found.len(),
            pids.join(", "),
            self.source
        );
    }
}

/// How often the capture's held events are compared with --max-held.
const HELD_CHECK: Duration = Duration::from_secs(1);

impl Tee {
    /// Stops the capture (sets [`STOP`]) once it holds more than --max-held events.
    fn check_held(&mut self) {
        let Some(trace) = &self.trace else {
            return;
        };
        if self.last_held_check.elapsed() < HELD_CHECK {
            return;
        }
        self.last_held_check = Instant::now();
        let held = trace.backlog().held_events;
        if held as u64 > self.max_held && !STOP.swap(true, Ordering::Relaxed) {
            eprintln!(
                "lbf-trace: stopping the capture: it holds {held} events, more than --max-held \
                 {} (about 90 bytes each). What was captured is written and predicted as a \
                 capture stopped early; the program runs on, untraced. A socket or PVM capture \
                 holds nothing once --procs is given.",
                self.max_held
            );
        }
    }
}

impl RecordSink for Tee {
    fn record(&mut self, record: &lbf_common::Record) -> Result<()> {
        if let Some(watch) = &mut self.mpi_watch {
            watch.record(record);
        }
        self.raw.record(record)?;
        match &mut self.trace {
            Some(t) => t.record(record),
            None => Ok(()),
        }
    }
    fn finish(&mut self, lost: &probe::LostCounts) -> Result<()> {
        self.raw.finish(lost)?;
        match &mut self.trace {
            Some(t) => t.finish(lost),
            None => Ok(()),
        }
    }
    fn tick(&mut self) -> Result<()> {
        self.raw.tick()?;
        self.check_held();
        if self.last_flush.elapsed() >= self.flush_interval {
            self.flush_trace();
        }
        let (Some(interval), true) = (self.interval, self.trace.is_some()) else {
            return Ok(());
        };
        if self.last_report.elapsed() < interval {
            return Ok(());
        }
        self.last_report = Instant::now();
        self.flush_trace();
        let Some(trace) = &mut self.trace else {
            return Ok(());
        };
        let backlog = trace.backlog();
        let lost = match backlog.lost_events {
            0 => String::new(),
            n => format!(", {n} lost (processes beyond --procs)"),
        };
        let kept = backlog.kept.map_or_else(String::new, |k| {
            format!(
                ", kept: {} channels, {} descriptors, {} processes",
                k.channels, k.descriptors, k.processes
            )
        });
        eprintln!(
            "lbf-trace: capture: {} events handed out, {} held{kept}{lost}",
            trace.events_mut().events,
            backlog.held_events
        );
        if let Some(live) = &trace.events_mut().live {
            for line in live.progress() {
                eprintln!("lbf-trace: {line}");
            }
        }
        Ok(())
    }
}

/// Where the capture's events go: the trace file (-o) and the live engine (targets).
struct Outputs {
    file: Option<TraceFile>,
    live: Option<LivePredictor>,
    /// Events handed out so far, for --interval reports.
    events: u64,
}

impl EventSink for Outputs {
    fn process(&mut self, info: &ProcInfo) {
        if let Some(f) = &mut self.file {
            f.process(info);
        }
        if let Some(l) = &mut self.live {
            l.process(info);
        }
    }
    fn event(&mut self, event: &Event) {
        self.event_with(event, &EventDetail::NONE);
    }
    fn event_with(&mut self, event: &Event, detail: &EventDetail) {
        self.events += 1;
        if let Some(f) = &mut self.file {
            f.event_with(event, detail);
        }
        if let Some(l) = &mut self.live {
            l.event_with(event, detail);
        }
    }
    fn clock_origin(&mut self, monotonic_ns: u64) {
        if let Some(f) = &mut self.file {
            f.clock_origin(monotonic_ns);
        }
    }
}

/// Writes captured events to a trace file (format version 2). The capture announces every
/// rank before the first event, so the header is written when the first event comes (or at
/// the end).
struct TraceFile {
    path: PathBuf,
    /// Where the capture takes its events, for the header.
    source: Source,
    procs: Vec<ProcInfo>,
    /// The procedures followed (`--procedure`), for the header.
    procedures: Vec<String>,
    /// The file, created before the command ran, until the header is written into it.
    file: Option<File>,
    writer: Option<TraceWriter<File>>,
    /// The first write error; reported at the end.
    error: Option<std::io::Error>,
    /// The capture's clock origin (`CLOCK_MONOTONIC` ns), which events' `t_ns` count from.
    origin: u64,
}

impl TraceFile {
    fn writer(&mut self) -> std::io::Result<&mut TraceWriter<File>> {
        if self.writer.is_none() {
            let header = Header {
                procs: self.procs.clone(),
                source: Some(self.source),
                procedures: self.procedures.clone(),
            };
            let file = self.file.take().expect("created at the start, taken once");
            self.writer = Some(TraceWriter::new(file, &header)?);
        }
        Ok(self.writer.as_mut().expect("created above"))
    }

    /// Writes out the lines written so far (whole lines; see `TraceWriter`), so that the
    /// file is usable if lbf-trace is killed. A failure is kept and reported at the end.
    fn flush(&mut self) {
        if let (Some(writer), None) = (self.writer.as_mut(), &self.error) {
            if let Err(e) = writer.flush() {
                self.error = Some(e);
            }
        }
    }

    /// Writes the summary line (and the header if no event came).
    fn finish(mut self, summary: &Summary) -> Result<()> {
        let path = self.path.display().to_string();
        let context = || format!("writing the trace {path}");
        if let Some(e) = self.error.take() {
            return Err(e).with_context(context);
        }
        self.writer().with_context(context)?;
        let writer = self.writer.take().expect("created above");
        writer.finish(summary).with_context(context)?;
        Ok(())
    }
}

impl EventSink for TraceFile {
    fn process(&mut self, info: &ProcInfo) {
        self.procs.push(info.clone());
    }
    fn clock_origin(&mut self, monotonic_ns: u64) {
        self.origin = monotonic_ns;
    }
    fn event(&mut self, event: &Event) {
        self.event_with(event, &EventDetail::NONE);
    }
    fn event_with(&mut self, event: &Event, detail: &EventDetail) {
        if self.error.is_none() {
            // Relative to the clock origin, as the processes' `start_ns`.
            let origin = self.origin;
            let t_ns = detail.monotonic_ns.map(|t| t.saturating_sub(origin));
            let written = self
                .writer()
                .and_then(|w| w.write_event_with(event, &detail.procedures, t_ns));
            if let Err(e) = written {
                self.error = Some(e);
            }
        }
    }
}

/// Finds and probes the procedures of --procedure (in the command's programs and libraries,
/// or in what the processes of -p map); returns their names, in order, as the trace lists
/// them.
fn attach_procedures(cli: &Cli, tracer: &mut probe::Tracer) -> Result<Vec<String>> {
    if cli.procedure.is_empty() {
        return Ok(Vec::new());
    }
    let objects = if cli.command.is_empty() {
        traced_procedures::objects_of_pids(&cli.pids)
    } else {
        traced_procedures::objects_of_command(&cli.command)
    };
    let attached = traced_procedures::attach_all(
        tracer,
        &cli.procedure,
        |_| Ok(objects.clone()),
        "lbf-trace",
    )?;
    if cli.verbose {
        for (name, found) in &attached {
            eprintln!("lbf-trace: procedure {name}: {}", found.describe());
        }
    }
    Ok(attached.into_iter().map(|(name, _)| name).collect())
}

/// This machine's name, for the trace header.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}
