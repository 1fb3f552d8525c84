//! `lbf-gag`: predicts a traced program's run time on other placements (LBF) and networks
//! (NF) by replaying its trace through the online engine. Thin: parses arguments, wires
//! `lbf::trace`, `lbf::config`, `lbf::engine` and `lbf::report`, prints.

mod advise;
mod calibrate;

use anyhow::{Context, Result};
use clap::{error::ErrorKind, CommandFactory, Parser, Subcommand};
use lbf::capture::select::Source;
use lbf::config::{ProcedureArgs, TargetArgs};
use lbf::engine::{Engine, EngineError, Prediction, Progress};
use lbf::net::builder::serve;
use lbf::net::serve_config::ServeConfig;
use lbf::net::tls::self_signed;
use lbf::report::critical_path::{Profile, Recorder, TracedEvent};
use lbf::report::{add_teardown, json_lines, loss_as_cause, table, warnings, Timeline};
use lbf::target::Target;
use lbf::trace::TraceReader;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;

/// Predict how long a traced program would run on other machines and networks.
#[derive(Parser)]
#[command(name = "lbf-gag", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Predict(Predict),
    Advise(advise::Advise),
    Speed(Speed),
    FitNetwork(FitNetwork),
    Serve(Serve),
    Cert(Cert),
    Calibrate(calibrate::Calibrate),
}

/// A program's own speed on one host relative to another, from its traces on both.
///
/// The ratio of the compute CPU (every event's CPU but what blocking calls spent waiting)
/// of the trace taken on the reference host to that of the trace taken on the other: above
/// 1, the other host runs this program's compute faster. Both traces must have the same
/// processes. CPU time does not show a cgroup's quota: `lbf-node calibrate --cpu` measures
/// what a host's processes get. Use the figure as a node's or a cluster host's `speed`.
#[derive(clap::Args)]
#[command(after_help = "Example:\n  lbf-gag speed --reference on-a.trace.jsonl on-b.trace.jsonl")]
struct Speed {
    /// The trace taken on the reference host (speed 1).
    #[arg(long, value_name = "TRACE")]
    reference: PathBuf,

    /// The trace of the same program taken on the host to rate.
    trace: PathBuf,
}

/// The network table a traced run saw, from its own messages: NF from the present network,
/// without a separate benchmark.
///
/// Each message is timed from its send to its arrival (the events' wall-clock `t_ns`, which
/// lbf-trace writes for MPI jobs), where its receiver was already waiting when it was sent.
/// Per size class (0 B, then powers of two) the one-way time is a low quantile of those times
/// (--quantile, the lower envelope), and the table written is the fewest of those points that
/// reproduce them all within 2 %, as `lbf-node calibrate` fits (linear between points,
/// extrapolated past the last two). A message sent by rendezvous counts its time less two
/// empty-message times (the handshake, which the engine adds itself). It prints every size
/// class with how many messages supported it.
///
/// The trace's processes on one host give the `local` table; --remote says their messages
/// crossed a network all the same (ranks in network namespaces or containers of one
/// machine). Messages between processes the trace puts on different hosts are left out:
/// their clocks differ.
#[derive(clap::Args)]
#[command(after_help = FIT_NETWORK_HELP)]
struct FitNetwork {
    /// The trace (taken by lbf-trace of an MPI job, whose events carry `t_ns`).
    trace: PathBuf,

    /// Write the table here (TOML: `local = [[bytes, seconds], ...]` or `remote = ...`, the
    /// size classes as comments).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// The table is `remote`: the messages crossed a network although the trace names one
    /// host.
    #[arg(long)]
    remote: bool,

    /// The quantile of each size class's times taken as its one-way time (0 to 1).
    #[arg(long, value_name = "Q", default_value_t = lbf::calibrate::trace_network::QUANTILE)]
    quantile: f64,
}

const FIT_NETWORK_HELP: &str = "\
Examples:
  # within this host: 4 ranks over the MPI library's shared memory
  sudo lbf-trace -o run.trace.jsonl -- mpirun -np 4 ./app
  lbf-gag fit-network run.trace.jsonl -o local.toml

  # 2 ranks in two network namespaces (or containers) of this machine, whose link is the
  # network to measure; mpirun starts the second rank there (see tests/calibrate.rs)
  sudo lbf-trace -o run.trace.jsonl -- mpirun -np 2 --host 10.0.0.1,10.0.0.2 ./app
  lbf-gag fit-network run.trace.jsonl --remote -o net.toml

The file's line is a target's [network] `local` or `remote`, a cluster file's [[host]]
`local` or [[network]] `table` (docs/targets.md).";

/// Run the central GAG builder of cluster mode: node daemons (lbf-node) stream events to it
/// over TLS, and it predicts every configured target online.
///
/// Nodes authenticate with a per-node token (`[tokens]` in the configuration). Every batch is
/// journaled before it is acknowledged, so a restarted builder (same --config, same journal)
/// carries on where it stopped and predicts exactly what an undisturbed run would. Live
/// results: GET /results and /nodes (JSON), /metrics (Prometheus) on the `http` address.
/// The final table is printed when every process has exited and every node has finished.
#[derive(clap::Args)]
#[command(after_help = SERVE_HELP)]
struct Serve {
    /// The builder's configuration (TOML; see deploy/builder.toml and docs/cluster.md).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,

    /// Exit once the job is complete and its report written (default: keep serving).
    #[arg(long)]
    exit_when_done: bool,
}

const SERVE_HELP: &str = "\
Examples:
  # one-time set-up: a certificate for the builder's address, copied to every node
  lbf-gag cert --name gag.example --name 10.0.0.1 --out /etc/lbf/builder

  # serve a job; see the predictions while it runs
  lbf-gag serve --config /etc/lbf/builder.toml
  curl -s http://127.0.0.1:7401/results

A new job needs a new (or emptied) journal directory: the journal is what lets a
restarted builder continue the current one.";

/// Make a self-signed certificate and key for the builder (PEM): OUT.pem and OUT.key.
///
/// Copy OUT.pem to every node (lbf-node --ca OUT.pem); keep OUT.key on the builder only.
#[derive(clap::Args)]
#[command(
    after_help = "Example:\n  lbf-gag cert --name gag.example --name 10.0.0.1 --out /etc/lbf/builder"
)]
struct Cert {
    /// A host name or IP address nodes use to reach the builder; repeatable.
    #[arg(long = "name", value_name = "NAME", default_values_t = ["localhost".to_string(), "127.0.0.1".to_string()])]
    names: Vec<String>,

    /// Output path without extension.
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
}

/// Replay a trace once, predicting its run time on every target given.
///
/// A target is a placement of the trace's processes onto nodes plus a network. Give targets as
/// TOML files (--target, repeatable; see docs/targets.md) and/or in the short form (--nodes
/// with --cores, --layout, --speed, --network). A cluster file (--cluster) describes measured
/// hosts and networks (lbf-node calibrate) that target files name; alone, it is the target.
/// Every target is evaluated in one pass.
///
/// A trace that followed procedures (lbf-trace --procedure NAME) also answers what-ifs about
/// them: --move NAME, --zero NAME and --speedup NAME=S each add a target (the placement given
/// with the procedure changed; without one, the placement the trace ran on), and target files
/// may change procedures in their procedure tables (see docs/targets.md).
#[derive(clap::Args)]
#[command(
    group = clap::ArgGroup::new("targets").required(true).multiple(true)
        .args(["target", "nodes", "cluster", "moves", "zeros", "speedups"]),
    after_help = AFTER_HELP,
)]
struct Predict {
    /// The trace (lbf trace format, JSON Lines, version 1 or 2; see docs/trace-format.md).
    trace: PathBuf,

    #[command(flatten)]
    targets: TargetArgs,

    #[command(flatten)]
    procedures: ProcedureArgs,

    /// Print one JSON object per target and line instead of a table (`target`,
    /// `predicted_seconds`, `complete`; with a completed trace `measured_seconds`, `speedup`,
    /// `lost_events`; `startup_shift_seconds` where the start-up model moved the start-up,
    /// see docs/engine.md).
    #[arg(long)]
    json: bool,

    /// Write one target's predicted schedule as a Perfetto / Chrome trace-event JSON file.
    #[arg(long, value_name = "OUT.json")]
    timeline: Option<PathBuf>,

    /// The target whose schedule --timeline writes (default: the first).
    #[arg(long, value_name = "NAME", requires = "timeline")]
    timeline_target: Option<String>,

    /// After the table, each target's critical path: the share of its predicted time each
    /// process computes on it, each traced procedure (of that), messages in flight, and
    /// start-up. What makes up most of it is what to tune next. Keeps every target's
    /// schedule in memory.
    #[arg(long, conflicts_with = "timeline")]
    critical_path: bool,
}

const AFTER_HELP: &str = "\
Examples:
  # two target files, compared with the measured run
  lbf-gag predict run.trace.jsonl --target two-nodes.toml --target one-node.toml

  # 64 processes on 8 nodes of 4 cores over Gigabit Ethernet, as JSON
  lbf-gag predict run.trace.jsonl --nodes 8 --cores 4 --network gige --json

  # a trace taken with lbf-trace --procedure servBusy1: servBusy1 moved from the server to
  # the clients it answers, made free, made twice as fast, each on one node of 2 cores
  lbf-gag predict spa.trace.jsonl --nodes 1 --cores 2 --move servBusy1 --zero servBusy1 \\
      --speedup servBusy1=2

  # on measured hosts: a cluster file, and a target placing nodes on its hosts by name
  lbf-gag predict run.trace.jsonl --cluster lab.toml --target apart.toml

  # the predicted schedule of one target, to open in https://ui.perfetto.dev
  lbf-gag predict run.trace.jsonl --target two-nodes.toml --nodes 4 \\
      --timeline schedule.json --timeline-target two-nodes

The speed-up column is the measured run time over the predicted one (above 1: faster).
Errors name the trace line at fault; the engine's \"(at N)\" is line N of the trace.
Exit status: 0 success, 1 error (trace, target or engine), 2 usage, 3 predicted from a trace
cut short (no summary line: the capture was killed or stopped before its end).";

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Predict(args) => match predict(&args) {
            Ok(Complete::No) => return ExitCode::from(3),
            Ok(Complete::Yes) => Ok(()),
            Err(e) => Err(e),
        },
        Command::Serve(args) => {
            ServeConfig::load(&args.config).and_then(|config| serve(config, args.exit_when_done))
        }
        Command::Cert(args) => cert(&args),
        Command::Calibrate(args) => calibrate::calibrate(&args),
        Command::Advise(args) => advise::advise(&args),
        Command::Speed(args) => speed(&args),
        Command::FitNetwork(args) => fit_network(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Writes the builder's certificate and key.
fn speed(args: &Speed) -> Result<()> {
    let s = lbf::calibrate::program::compare(&args.reference, &args.trace)
        .map_err(anyhow::Error::msg)?;
    println!("process  reference CPU (s)  this CPU (s)  speed");
    for (p, (a, b)) in s.reference.iter().zip(&s.other).enumerate() {
        let ratio = if *b > 0.0 { a / b } else { f64::NAN };
        println!("{p:>7}  {a:>17.6}  {b:>12.6}  {ratio:.4}");
    }
    println!("speed = {:.4}", s.speed);
    Ok(())
}

/// Fits the network table of a trace's messages, prints it and writes it.
fn fit_network(args: &FitNetwork) -> Result<()> {
    if !(0.0..=1.0).contains(&args.quantile) {
        anyhow::bail!("--quantile {} is not between 0 and 1", args.quantile);
    }
    let options = lbf::calibrate::trace_network::Options {
        quantile: args.quantile,
        remote: args.remote,
    };
    let how = std::env::args().collect::<Vec<_>>().join(" ");
    let fit = lbf::calibrate::trace_network::fit_network(&args.trace, options, &how)
        .map_err(anyhow::Error::msg)?;
    print!("{}", fit.listing());
    if let Some(path) = &args.output {
        std::fs::write(path, fit.table.toml())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn cert(args: &Cert) -> Result<()> {
    let (cert, key) = self_signed(&args.names)?;
    let cert_path = args.out.with_extension("pem");
    let key_path = args.out.with_extension("key");
    std::fs::write(&cert_path, cert).with_context(|| format!("writing {}", cert_path.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&key_path)
        .with_context(|| format!("writing {}", key_path.display()))?;
    file.write_all(key.as_bytes())
        .with_context(|| format!("writing {}", key_path.display()))?;
    println!(
        "{} (give to nodes: --ca) and {} (builder only) for {}",
        cert_path.display(),
        key_path.display(),
        args.names.join(", ")
    );
    Ok(())
}

/// Whether a trace was complete (it ends with its summary line).
enum Complete {
    Yes,
    No,
}

fn predict(args: &Predict) -> Result<Complete> {
    // Output piped into a reader that stops (`| head`): end quietly, as other tools do, rather
    // than panic on the write. Only here: the builder (`serve`) must see a closed connection
    // as an error on that connection, not die of it.
    // SAFETY: restoring the default action of a signal, before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let trace = args.trace.display();
    let mut reader = TraceReader::open(&args.trace).with_context(|| trace.to_string())?;
    let header = reader.header().clone();
    let targets = args.targets.resolve(header.procs.len())?;
    let targets = args.procedures.extend(targets, &header.procs);
    let timeline_index = timeline_index(args, &targets);
    let timeline = match (&args.timeline, timeline_index) {
        (Some(path), Some(i)) => Some(
            Timeline::create(path, &targets[i], &header.procs)
                .with_context(|| format!("cannot write the timeline {}", path.display()))?,
        ),
        _ => None,
    };
    let targets_kept = targets.clone();
    let mut engine = Engine::for_procs_with_procedures(&header.procs, &header.procedures, targets)?;
    if let (Some(timeline), Some(i)) = (&timeline, timeline_index) {
        engine.set_schedule_sink(i, timeline.sink());
    }
    let recorders: Vec<Recorder> = match args.critical_path {
        true => (0..targets_kept.len())
            .map(|i| {
                let recorder = Recorder::new(header.procs.len());
                engine.set_schedule_sink(i, recorder.sink());
                recorder
            })
            .collect(),
        false => Vec::new(),
    };
    let mut traced: Vec<Vec<TracedEvent>> = vec![Vec::new(); header.procs.len()];
    let inconsistent = || format!("{trace}: inconsistent trace (\"at N\" is line N)");
    // After an inconsistency the rest is read all the same: the summary says whether the
    // capture lost records, which is then the likely cause.
    let mut pushed = Ok(());
    while let Some(e) = reader.next_event().with_context(|| trace.to_string())? {
        if pushed.is_ok() {
            pushed = engine.push_with_procedures(e.event, &e.procedures, e.line);
        }
        if args.critical_path {
            let event = TracedEvent::new(&e.event.kind, e.event.cpu_ns, e.procedures);
            traced[e.event.proc as usize].push(event);
        }
    }
    let loss = reader.summary().and_then(loss_as_cause);
    let cut_short = reader.summary().is_none();
    // A trace cut short (no summary) predicts what it has: where each target's simulation of
    // the captured part got to, a lower bound, when its processes did not all exit.
    let reached: Vec<(Progress, f64)> = if cut_short {
        engine
            .progress()
            .into_iter()
            .zip(engine.startup_shifts().iter().copied())
            .collect()
    } else {
        Vec::new()
    };
    let predictions = pushed.and_then(|()| match engine.finish() {
        Err(EngineError::Truncated { unfinished }) if cut_short => {
            eprintln!(
                "warning: {trace}: {} processes had not exited where the trace ends: each \
                 prediction is the time the captured part reaches, a lower bound",
                unfinished.len()
            );
            Ok(reached
                .into_iter()
                .map(|(r, shift)| Prediction {
                    target: r.target,
                    predicted_seconds: r.simulated_seconds,
                    startup_shift_seconds: shift,
                })
                .collect())
        }
        result => result,
    });
    let predictions = predictions.map_err(|e| {
        let e = anyhow::Error::new(e).context(inconsistent());
        match loss {
            Some(loss) => e.context(format!("{trace}: {loss}")),
            None => e,
        }
    });
    let mut predictions = predictions?;
    if let Some((line, bytes)) = reader.cut_line() {
        eprintln!(
            "warning: {trace}: line {line} was cut short ({bytes} bytes, the capture stopped \
             while writing it): dropped"
        );
    }
    if let (Some(timeline), Some(path)) = (timeline, &args.timeline) {
        timeline
            .finish()
            .with_context(|| format!("cannot write the timeline {}", path.display()))?;
    }
    let names: Vec<String> = header.procs.iter().map(|p| p.name.clone()).collect();
    let profiles: Vec<String> = recorders
        .iter()
        .zip(&targets_kept)
        .zip(&predictions)
        .map(|((recorder, target), prediction)| {
            let changes: Vec<_> = lbf::procedure::resolve(&target.procedures, &header.procedures)
                .map(|indices| indices.into_iter().zip(target.procedures.clone()).collect())
                .unwrap_or_default();
            let total = prediction.predicted_seconds;
            let procedures = header.procedures.len();
            let profile = Profile::of(recorder, total, &traced, procedures, &changes);
            profile.text(&target.name, &names, &header.procedures)
        })
        .collect();
    let summary = reader.summary().cloned();
    add_teardown(&mut predictions, summary.as_ref());
    for w in warnings(summary.as_ref()) {
        eprintln!("warning: {trace}: {w}");
    }
    if args.json {
        print!(
            "{}",
            json_lines(&predictions, summary.as_ref(), header.source)
        );
    } else {
        if let Some(source) = header.source {
            println!("source: {}", source_label(source));
        }
        print!("{}", table(&predictions, summary.as_ref()));
    }
    for profile in profiles {
        print!("\n{profile}");
    }
    Ok(if summary.is_some() {
        Complete::Yes
    } else {
        Complete::No
    })
}

/// How the table names a trace's source: `MPI`, `PVM` or `sockets`.
fn source_label(source: Source) -> &'static str {
    match source {
        Source::Mpi => "MPI",
        Source::Pvm => "PVM",
        Source::Sockets => "sockets",
    }
}

/// Which target --timeline records; exits with a usage error for an unknown --timeline-target.
fn timeline_index(args: &Predict, targets: &[Target]) -> Option<usize> {
    args.timeline.as_ref()?;
    let Some(name) = &args.timeline_target else {
        return Some(0);
    };
    let found = targets.iter().position(|t| &t.name == name);
    if found.is_none() {
        let names: Vec<_> = targets.iter().map(|t| format!("\"{}\"", t.name)).collect();
        let message = format!(
            "no target is named \"{name}\"; the targets are {}",
            names.join(", ")
        );
        Cli::command()
            .error(ErrorKind::InvalidValue, message)
            .exit();
    }
    found
}
