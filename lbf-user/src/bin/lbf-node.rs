//! `lbf-node`: the node daemon of cluster mode. Captures this host's MPI, PVM or socket
//! processes (or replays some processes of a trace) and streams their events to the central
//! builder, `lbf-gag serve`. Thin: parses arguments, wires `lbf::net::source` to
//! `lbf::net::node`, reports.

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Parser};
use lbf::capture::select::Source;
use lbf::event::ProcId;
use lbf::net::live::{Live, Selection};
use lbf::net::node::{self, NodeConfig};
use lbf::net::privileges::{self, CAPTURE_KEEPS};
use lbf::net::source;
use lbf::net::tls;
use lbf::probe::procedures::ProcedureSpec;
use lbf::probe::TracerOptions;
use lbf::trace::synthetic;
use lbf_proto::Proc;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Stream this host's processes' events to the central lbf builder (`lbf-gag serve`).
///
/// Live capture (root): select processes by --pid, --comm, --cgroup, --all-mpi or --all-pvm;
/// they and their descendants are traced with the same eBPF probes as lbf-trace, by their
/// MPI calls, their PVM calls or their socket system calls (--source). --procs names the
/// global process ids that run on this host: MPI_COMM_WORLD ranks, or for PVM and sockets
/// the ids this host's processes take in order of their first message on this host (give
/// each host's node its own ids). Once the probes are attached the daemon drops every
/// capability but CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH.
///
/// Replay (--replay TRACE, or --synthetic for a generated trace): streams the --procs
/// processes as if captured live; for tests, benchmarks and demos. Keeps no capability.
///
/// Batches wait in a spool on disk (--spool-dir, at most --spool-size bytes) until the
/// builder acknowledges them, so builder restarts and network cuts lose nothing: the daemon
/// reconnects and resends from the last acknowledged batch. If the spool fills while the
/// builder is unreachable, events are dropped, counted, logged and reported to the builder.
#[derive(Parser)]
#[command(name = "lbf-node", version, verbatim_doc_comment, after_help = AFTER_HELP)]
#[command(group = ArgGroup::new("selection").required(true)
    .args(["pid", "comm", "cgroup", "all_mpi", "all_pvm", "replay", "synthetic"]))]
struct Cli {
    /// The builder, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", help_heading = "Builder")]
    builder: String,

    /// The builder's certificate (PEM), the only one trusted (from `lbf-gag cert`).
    #[arg(long, value_name = "FILE", help_heading = "Builder")]
    ca: PathBuf,

    #[command(flatten)]
    identity: IdentityArgs,

    /// The global process ids streamed from this host, e.g. `0-3` or `0,2,4`.
    #[arg(long, value_name = "IDS", value_parser = parse_ids)]
    procs: BTreeSet<ProcId>,

    /// Capture these running processes (comma-separated PIDs) and their descendants.
    #[arg(long, value_delimiter = ',', help_heading = "Live capture")]
    pid: Vec<u32>,

    /// Capture the processes with this command name (as in /proc/PID/comm), e.g. the MPI
    /// launcher's daemon (`prted`, `orted`, `hydra_pmi_proxy`) to follow every rank it starts,
    /// or the program's name: processes that start it later are traced from their exec.
    #[arg(long, value_name = "NAME", help_heading = "Live capture")]
    comm: Option<String>,

    /// Capture the processes of this cgroup (v2 directory); checked again every 200 ms for
    /// processes that join it.
    #[arg(long, value_name = "DIR", help_heading = "Live capture")]
    cgroup: Option<PathBuf>,

    /// Capture every process that has an MPI library mapped (opt-in: it is broad).
    #[arg(long, help_heading = "Live capture")]
    all_mpi: bool,

    /// Capture every process that has the PVM library (libpvm3) mapped (opt-in: it is broad).
    /// Implies --source pvm.
    #[arg(long, help_heading = "Live capture")]
    all_pvm: bool,

    /// What the captured program's messages are: MPI calls, PVM calls, or the bytes it sends
    /// and receives on TCP, UDP and UNIX sockets. Default: PVM with --all-pvm, or when the
    /// --pid processes map the PVM library and no MPI library; else MPI (sockets are never
    /// the default). A PVM virtual machine may span hosts (one lbf-node on each), and so may
    /// TCP connections: the builder matches their messages between hosts. The two ends of
    /// UNIX sockets must be on this host; UDP datagrams are not matched (docs/cluster.md).
    #[arg(long, value_enum, help_heading = "Live capture")]
    source: Option<Source>,

    /// How long to wait for the selection to match a process.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 30.0,
        help_heading = "Live capture"
    )]
    wait: f64,

    /// Probe this MPI library instead of those the selected processes map; repeatable.
    #[arg(long = "mpi-lib", value_name = "PATH", help_heading = "Live capture")]
    mpi_libs: Vec<PathBuf>,

    /// Follow the CPU the captured processes spend in the function NAME, as lbf-trace
    /// --procedure does (repeatable, at most 8; NAME@OBJECT, 0xADDRESS@OBJECT): every event
    /// then carries it, for the builder's procedure what-ifs (its `[job]` must list the same
    /// procedures, in the same order). With --pid, NAME is looked for in what those
    /// processes map and in the programs their command lines name (a launcher's); with
    /// another selection the processes are not known yet, so give the object's path:
    /// NAME@/path/to/program.
    #[arg(
        long = "procedure",
        value_name = "NAME[@OBJECT]",
        help_heading = "Live capture"
    )]
    procedure: Vec<ProcedureSpec>,

    /// Kernel ring buffer size in bytes, split evenly among one ring buffer per CPU. The
    /// default is 16 MiB, or 2 MiB per CPU where that is more (see lbf-trace --help).
    #[arg(long, default_value_t = TracerOptions::default_ringbuf_bytes(), help_heading = "Live capture")]
    ringbuf_size: u32,

    /// Replay the --procs processes of this trace (lbf trace format, version 1 or 2) instead
    /// of capturing.
    #[arg(long, value_name = "TRACE", help_heading = "Replay")]
    replay: Option<PathBuf>,

    /// Replay the --procs processes of a synthetic trace generated on the fly, given as
    /// PROCS:EVENTS:SEED (as `cargo xtask bench-cluster` does; no file needed).
    #[arg(long, value_name = "P:E:S", value_parser = parse_synthetic, help_heading = "Replay")]
    synthetic: Option<synthetic::Config>,

    /// Replay at most this many events per second (default: as fast as the builder takes).
    #[arg(long, value_name = "EVENTS", help_heading = "Replay")]
    rate: Option<f64>,

    /// The spool directory (emptied at start).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/spool/lbf-node",
        help_heading = "Spool"
    )]
    spool_dir: PathBuf,

    /// The spool's size limit in bytes (suffixes K, M, G).
    #[arg(long, value_name = "BYTES", default_value = "1G", value_parser = lbf::calibrate::args::parse_size, help_heading = "Spool")]
    spool_size: u64,

    /// Reconnect when batches stay unacknowledged this long (a silently cut connection).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    ack_timeout: f64,

    /// After the last batch, wait for the builder's final predictions and print them.
    #[arg(long)]
    wait_results: bool,
}

const AFTER_HELP: &str = "\
Examples:
  # ranks 0-3 of an MPI job started on this host by Open MPI's daemon
  lbf-node --builder gag.example:7400 --ca /etc/lbf/builder.pem --token-file /etc/lbf/token \\
      --procs 0-3 --comm prted

  # a running job, by PID, with the builder on the same host
  lbf-node --builder 127.0.0.1:7400 --ca builder.pem --procs 4-7 --pid 5120,5121,5122,5123

  # follow the CPU of two functions of the program that mpirun (PID 4242) runs (the
  # builder's [job] lists procedures = [\"servBusy1\", \"servBusy2\"]); selecting by
  # command name, give the program's path
  lbf-node --builder gag.example:7400 --ca builder.pem --procs 0-3 --pid 4242 \\
      --procedure servBusy1 --procedure servBusy2
  lbf-node --builder gag.example:7400 --ca builder.pem --procs 0-3 --comm prted \\
      --procedure servBusy1@/opt/spa/spa --procedure servBusy2@/opt/spa/spa

  # a PVM master and its 4 workers, all on this host, started by the script with PID 6001
  lbf-node --builder 127.0.0.1:7400 --ca builder.pem --procs 0-4 --source pvm --pid 6001

  # the PVM tasks of a second host of the same virtual machine: ids 5-8, the tasks spawned by
  # this host's pvmd (started before the virtual machine, the node adopts pvmd at its exec)
  lbf-node --builder gag.example:7400 --ca builder.pem --procs 5-8 --source pvm --comm pvmd

  # the server of a TCP client/server program (its clients run on other hosts, each with
  # its own node), started by the script with PID 7001
  lbf-node --builder gag.example:7400 --ca builder.pem --procs 0 --source sockets --pid 7001

  # replay processes 0 and 1 of a trace (no root needed), then print the predictions
  LBF_NODE_TOKEN=$(cat a.token) lbf-node --builder 127.0.0.1:7400 --ca builder.pem --node a \\
      --procs 0,1 --replay run.trace.jsonl --spool-dir /tmp/spool-a --wait-results

Calibration (lbf-node calibrate --help): measures this host's network tables and CPU for
targets and cluster files, e.g. `lbf-node calibrate --peer b:7300 -o net.toml`.

Exit status: 0 when every batch is acknowledged, 1 on an error (refused by the builder,
source failed), 3 when events were lost (all that was kept is acknowledged). Events lost are logged and reported to the builder; see docs/cluster.md.";

/// `0-3,8,10-11` as a set of ids.
fn parse_ids(text: &str) -> Result<BTreeSet<ProcId>, String> {
    let mut ids = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let number = |s: &str| {
            s.trim()
                .parse::<ProcId>()
                .map_err(|_| format!("`{s}` is not a process id (write e.g. 0-3,8)"))
        };
        match part.split_once('-') {
            Some((a, b)) => ids.extend(number(a)?..=number(b)?),
            None => {
                ids.insert(number(part)?);
            }
        }
    }
    if ids.is_empty() {
        return Err("no process id given".into());
    }
    Ok(ids)
}

/// `PROCS:EVENTS:SEED` as a synthetic trace's description.
fn parse_synthetic(text: &str) -> Result<synthetic::Config, String> {
    let parts: Vec<u64> = text
        .split(':')
        .map(|p| p.parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("`{text}` is not PROCS:EVENTS:SEED (e.g. 64:1000000:1)"))?;
    match parts[..] {
        [procs @ 2..=1_000_000, events, seed] => Ok(synthetic::Config {
            procs: procs as u32,
            events,
            seed,
        }),
        _ => Err(format!(
            "`{text}` is not PROCS:EVENTS:SEED with at least 2 processes (e.g. 64:1000000:1)"
        )),
    }
}

/// Set by SIGINT/SIGTERM: end the capture (what was captured is still delivered).
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

#[path = "lbf-node/calibrate.rs"]
mod calibrate;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("calibrate") {
        let words = [format!("{} calibrate", args[0])]
            .into_iter()
            .chain(args[2..].iter().cloned())
            .collect();
        return match calibrate::main(words) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lbf-node calibrate: error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run(Cli::parse()) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_lost) => ExitCode::from(3),
        Err(e) => {
            eprintln!("lbf-node: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How a node or calibration agent names itself to its builder and checks the builder:
/// the options both take.
#[derive(clap::Args)]
struct IdentityArgs {
    /// The name to check the builder's certificate against (default: HOST of --builder).
    #[arg(
        long,
        value_name = "NAME",
        requires = "builder",
        help_heading = "Builder"
    )]
    server_name: Option<String>,

    /// This node's name, unique in the job and a key of the builder's `[tokens]` (default:
    /// the host name).
    #[arg(
        long,
        value_name = "NAME",
        requires = "builder",
        help_heading = "Builder"
    )]
    node: Option<String>,

    /// File holding this node's token (as in the builder's `[tokens]`); or set LBF_NODE_TOKEN.
    #[arg(
        long,
        value_name = "FILE",
        requires = "builder",
        help_heading = "Builder"
    )]
    token_file: Option<PathBuf>,
}

/// Who a node or calibration agent is to its builder, and how it checks the builder.
struct Identity {
    /// The name the builder's certificate must carry.
    server_name: String,
    /// This node's name.
    node: String,
    /// Its token.
    token: String,
    /// TLS trusting only the builder's certificate.
    tls: tls::ClientTls,
}

impl IdentityArgs {
    /// The identity these options give for `builder` (HOST:PORT) and its certificate `ca`:
    /// the token from --token-file or LBF_NODE_TOKEN, the node name (default: the host
    /// name), the server name (default: HOST of `builder`).
    fn resolve(&self, builder: &str, ca: &std::path::Path) -> Result<Identity> {
        let token = match &self.token_file {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))?
                .trim()
                .to_string(),
            None => std::env::var("LBF_NODE_TOKEN").context(
                "no token: give --token-file FILE or set LBF_NODE_TOKEN (the value of this node \
                 in the builder's [tokens])",
            )?,
        };
        lbf::net::serve_config::check_token(&token).context("this node's token")?;
        let host = builder
            .rsplit_once(':')
            .map(|(h, _)| h.trim_matches(['[', ']']))
            .context("--builder must be HOST:PORT")?;
        Ok(Identity {
            server_name: self.server_name.clone().unwrap_or_else(|| host.to_string()),
            node: self
                .node
                .clone()
                .unwrap_or_else(|| node::host_facts().hostname),
            token,
            tls: tls::client_config(ca)?,
        })
    }
}

/// Runs the node; returns the number of events lost.
fn run(cli: Cli) -> Result<u64> {
    let Identity {
        server_name,
        node: node_name,
        token,
        tls,
    } = cli.identity.resolve(&cli.builder, &cli.ca)?;
    if !cli.procedure.is_empty() && (cli.replay.is_some() || cli.synthetic.is_some()) {
        bail!(
            "--procedure goes with a live capture; a replayed trace streams the procedures it \
             followed"
        );
    }
    let (names, procedures, live) = match (&cli.replay, &cli.synthetic) {
        (Some(trace), _) => {
            let (infos, procedures) = source::replay_procs(trace, &cli.procs)?;
            let procs = infos.iter().map(|p| source::proc_of(p.id, p));
            (procs.collect(), procedures, None)
        }
        (None, Some(config)) => {
            if let Some(id) = cli.procs.iter().find(|&&id| id >= config.procs) {
                bail!(
                    "--procs names process {id}, but the synthetic trace has {} processes",
                    config.procs
                );
            }
            (procs_named(&cli.procs, "rank"), Vec::new(), None)
        }
        (None, None) => {
            let selection = selection(&cli)?;
            let source = cli.source.unwrap_or_else(|| selection.implied_source());
            let live = Live::start(
                &selection,
                source,
                Duration::from_secs_f64(cli.wait),
                &cli.mpi_libs,
                cli.ringbuf_size,
                cli.procs.clone(),
                &cli.procedure,
            )?;
            let prefix = match source {
                Source::Mpi => "rank ",
                Source::Pvm => "task ",
                Source::Sockets => "process ",
            };
            let procedures = live.procedures().to_vec();
            (procs_named(&cli.procs, prefix), procedures, Some(live))
        }
    };
    let keep: &[caps::Capability] = if live.is_some() { &CAPTURE_KEEPS } else { &[] };
    let dropped = privileges::drop_to(keep)?;
    if !dropped.is_empty() {
        eprintln!(
            "lbf-node: dropped {} capabilities; kept {:?}",
            dropped.len(),
            keep
        );
    }
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let config = NodeConfig {
        builder: cli.builder.clone(),
        server_name,
        tls,
        node: node_name,
        token,
        procs: names,
        procedures,
        spool_dir: cli.spool_dir.clone(),
        spool_bytes: cli.spool_size,
        ack_timeout: Duration::from_secs_f64(cli.ack_timeout),
        wait_results: cli.wait_results,
        await_starts: live.is_some(),
    };
    let (ids, rate, name) = (cli.procs.clone(), cli.rate, config.node.clone());
    let report = match (live, cli.replay.clone(), cli.synthetic) {
        (Some(live), _, _) => node::run(config, move |tx| live.run(&name, &STOP, tx))?,
        (None, Some(trace), _) => {
            node::run(config, move |tx| source::replay(&trace, &ids, rate, tx))?
        }
        (None, None, Some(gen)) => {
            node::run(config, move |tx| source::synthetic(gen, &ids, rate, tx))?
        }
        (None, None, None) => unreachable!("clap requires a source"),
    };
    eprintln!(
        "lbf-node: done: {} batches acknowledged, {} events lost, {} reconnections",
        report.batches, report.lost_events, report.reconnections
    );
    if let Some(results) = report.results {
        for t in &results.targets {
            println!("{}\t{:.6}", t.target, t.predicted_seconds);
        }
    }
    Ok(report.lost_events)
}

/// Processes `ids` named `{prefix}{id}`, their start unknown.
fn procs_named(ids: &BTreeSet<ProcId>, prefix: &str) -> Vec<Proc> {
    ids.iter()
        .map(|&id| Proc {
            id,
            name: format!("{prefix}{id}"),
            ..Proc::default()
        })
        .collect()
}

/// The live-capture selection of the command line.
fn selection(cli: &Cli) -> Result<Selection> {
    Ok(if !cli.pid.is_empty() {
        Selection::Pids(cli.pid.clone())
    } else if let Some(name) = &cli.comm {
        Selection::Comm(name.clone())
    } else if let Some(dir) = &cli.cgroup {
        Selection::Cgroup(dir.clone())
    } else if cli.all_mpi {
        Selection::AllMpi
    } else if cli.all_pvm {
        Selection::AllPvm
    } else {
        bail!("no source: give --pid, --comm, --cgroup, --all-mpi, --all-pvm or --replay")
    })
}
