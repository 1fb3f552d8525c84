//! `lbf-node calibrate`: measures this host's network tables and CPU (`lbf::calibrate`),
//! prints what it measured and writes TOML a target or cluster file takes.

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Parser};
use lbf::calibrate::args::PingPongArgs;
use lbf::calibrate::cpu::{self, REFERENCE};
use lbf::calibrate::mpi::{self, Library, MpiRun};
use lbf::calibrate::output::{cpu_listing, cpu_toml, reference_rates, NetworkTable};
use lbf::calibrate::pingpong;
use lbf::calibrate::progress::Progress;
use lbf::net::calibration::agent::{self, AgentConfig};
use std::net::{TcpListener, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

/// Measure what a prediction needs to know of this host and its network.
///
/// Network: a ping-pong at 0 B and every power of two up to --max-bytes (16 MiB), each size
/// repeated (at least --min-reps, more while --seconds-per-size lasts); the one-way time is
/// half the median round trip. The table written has the fewest of the measured points that
/// reproduce every measured size within 2 %, read as lbf reads tables (linear between
/// points, extrapolated past the last two). Over TCP: run `--listen` on one host and
/// `--peer` on the other. Through MPI (--mpi): the bundled ping-pong
/// (tests/workloads/mpi/calibrate_pingpong.c, compiled by mpicc on first use) run by mpirun
/// with one rank here and one on the peer (mpirun must be able to start it there, as for any
/// job), or both here with --local (the library's shared memory).
///
/// CPU (--cpu): integer, floating-point and memory micro-benchmarks (32 KiB and 64 MiB
/// arrays) in turns of 2 ms for --seconds, timed by the wall clock; `speed` is how many
/// seconds of that work the reference host (built in, or --reference FILE from another
/// host's --cpu) would take per second here; `cores` the CPUs this process may use, fewer
/// where its cgroup's quota (cpu.max, or v1's cpu.cfs_quota_us) allows fewer. Inside a
/// cgroup, the measurement is what a process of that cgroup gets.
///
/// A whole cluster at once (--builder): run this on every host as an agent of the
/// coordinator `lbf-gag calibrate`, which orders each host's CPU and loopback measurements
/// and a ping-pong between its hosts, one at a time, and writes one cluster file. The agent
/// authenticates as a node does (--ca, --node, --token-file or LBF_NODE_TOKEN).
#[derive(Parser)]
#[command(name = "lbf-node calibrate", verbatim_doc_comment, after_help = AFTER_HELP)]
#[command(group = ArgGroup::new("what").required(true).args(["listen", "peer", "local", "cpu", "builder"]))]
pub(crate) struct Calibrate {
    /// Be an agent of the coordinator (`lbf-gag calibrate`) at HOST:PORT: measure what it
    /// orders, until it has finished.
    #[arg(
        long,
        value_name = "HOST:PORT",
        requires = "ca",
        help_heading = "Builder"
    )]
    builder: Option<String>,

    /// With --builder: the coordinator's certificate (PEM), the only one trusted.
    #[arg(
        long,
        value_name = "FILE",
        requires = "builder",
        help_heading = "Builder"
    )]
    ca: Option<PathBuf>,

    #[command(flatten)]
    identity: super::IdentityArgs,

    /// With --builder: how long to keep trying to reach the coordinator.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 120.0,
        requires = "builder",
        help_heading = "Builder"
    )]
    patience: f64,

    /// Answer TCP ping-pongs on ADDR:PORT (the other host runs --peer).
    #[arg(long, value_name = "ADDR:PORT", help_heading = "Network")]
    listen: Option<String>,

    /// With --listen: exit after serving this many peers (default: serve until killed).
    #[arg(long, value_name = "N", requires = "listen", help_heading = "Network")]
    clients: Option<u32>,

    /// Measure the table to the host at ADDR:PORT (running --listen): `remote`.
    #[arg(long, value_name = "ADDR:PORT", help_heading = "Network")]
    peer: Option<String>,

    /// Measure within this host (TCP over the loopback, or with --mpi the MPI library's
    /// shared memory): `local`.
    #[arg(long, help_heading = "Network")]
    local: bool,

    /// Ping-pong through MPI instead of TCP (with --peer, the peer's ADDR is the host mpirun
    /// starts the second rank on; its PORT is not used).
    #[arg(long, help_heading = "Network")]
    mpi: bool,

    /// The MPI library (default: Open MPI if installed, else MPICH).
    #[arg(long, value_name = "openmpi|mpich", value_parser = Library::named, requires = "mpi", help_heading = "Network")]
    mpi_lib: Option<Library>,

    /// An argument for mpirun, before the program (repeat for several), e.g. how it reaches
    /// the peer: `--mpirun-arg=--mca --mpirun-arg=plm_rsh_agent --mpirun-arg=/path/agent`.
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        requires = "mpi",
        help_heading = "Network"
    )]
    mpirun_arg: Vec<String>,

    /// This host's name for mpirun (default: the address that routes to the peer).
    #[arg(long, value_name = "HOST", requires = "mpi", help_heading = "Network")]
    self_host: Option<String>,

    /// Where the bundled MPI program is compiled and kept.
    #[arg(long, value_name = "DIR", help_heading = "Network")]
    mpi_dir: Option<PathBuf>,

    #[command(flatten)]
    pingpong: PingPongArgs,

    /// Measure this host's cores and speed.
    #[arg(long, help_heading = "CPU")]
    cpu: bool,

    /// With --cpu: how long to measure (many periods of a cgroup's cpu.max: 100 ms each by
    /// default).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 4.0,
        help_heading = "CPU"
    )]
    seconds: f64,

    /// With --cpu: rate against this host file (another host's --cpu -o) instead of the
    /// built-in reference.
    #[arg(long, value_name = "FILE", requires = "cpu", help_heading = "CPU")]
    reference: Option<PathBuf>,

    /// Write the result here (TOML): `remote = [...]` or `local = [...]` for a network,
    /// `cores` and `speed` for --cpu.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

const AFTER_HELP: &str = "\
Examples:
  # on host b                                  # on host a
  lbf-node calibrate --listen 0.0.0.0:7300     lbf-node calibrate --peer b:7300 -o net.toml

  # within this host, through Open MPI's shared memory
  lbf-node calibrate --local --mpi --mpi-lib openmpi -o local.toml

  # this host's cores and speed, then another host's relative to this one
  lbf-node calibrate --cpu -o a.toml
  lbf-node calibrate --cpu --reference a.toml -o b.toml

  # every host of a cluster, ordered by the coordinator `lbf-gag calibrate` (one file)
  LBF_NODE_TOKEN=... lbf-node calibrate --builder 10.0.0.1:7400 --ca builder.pem --node a

The files' keys are those of a cluster file (docs/targets.md): `remote` is a [[network]]'s
`table`, `local` a [[host]]'s `local`, `cores` and `speed` a [[host]]'s.";

/// Runs `lbf-node calibrate` with `args` (the words after `calibrate`, program name first).
pub(crate) fn main(args: Vec<String>) -> Result<()> {
    let cli = Calibrate::parse_from(args);
    if let Some(coordinator) = &cli.builder {
        return agent(&cli, coordinator);
    }
    if let Some(addr) = &cli.listen {
        let listener = TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?;
        eprintln!("answering ping-pongs on {}", listener.local_addr()?);
        return pingpong::serve(&listener, cli.clients).context("serving a ping-pong");
    }
    if cli.cpu {
        return calibrate_cpu(&cli);
    }
    let plan = cli.pingpong.plan().map_err(anyhow::Error::msg)?;
    let key = if cli.local { "local" } else { "remote" };
    let how = std::env::args().collect::<Vec<_>>().join(" ");
    let measured = if cli.mpi {
        let library = match cli.mpi_lib.or_else(Library::present) {
            Some(l) => l,
            None => bail!("--mpi: neither Open MPI (mpicc.openmpi, mpirun.openmpi) nor MPICH (mpicc.mpich, mpirun.mpich) is on the PATH"),
        };
        let hosts = match &cli.peer {
            None => None,
            Some(peer) => {
                let host = peer
                    .rsplit_once(':')
                    .map_or(peer.as_str(), |(h, _)| h)
                    .to_string();
                let me = match &cli.self_host {
                    Some(h) => h.clone(),
                    None => route_to(&host)?,
                };
                Some([me, host])
            }
        };
        let run = MpiRun {
            library,
            hosts,
            launcher_args: cli.mpirun_arg.clone(),
        };
        let dir = cli.mpi_dir.clone().unwrap_or_else(|| {
            // SAFETY: geteuid has no preconditions.
            std::env::temp_dir().join(format!("lbf-calibrate-{}", unsafe { libc::geteuid() }))
        });
        let mut progress = Progress::new(&format!("MPI ping-pong ({})", library.suffix()));
        mpi::measure(&run, &plan, &dir, &mut progress).context("the MPI ping-pong")?
    } else if let Some(peer) = &cli.peer {
        let mut progress = Progress::new(&format!("TCP ping-pong with {peer}"));
        pingpong::measure(peer.as_str(), &plan, &mut progress).with_context(|| {
            format!(
                "the TCP ping-pong with {peer} (tried for {} s: is `lbf-node calibrate --listen` \
                 answering there?)",
                pingpong::CONNECT_PATIENCE.as_secs()
            )
        })?
    } else {
        let mut progress = Progress::new("TCP ping-pong on the loopback");
        pingpong::measure_local(&plan, &mut progress).context("the loopback ping-pong")?
    };
    let table = NetworkTable::fit(key, how, measured);
    print!("{}", table.listing());
    write(&cli.output, &table.toml())
}

/// An agent of the coordinator at `coordinator`.
fn agent(cli: &Calibrate, coordinator: &str) -> Result<()> {
    let ca = cli.ca.as_deref().context("--builder needs --ca")?;
    let id = cli.identity.resolve(coordinator, ca)?;
    let patience = Duration::try_from_secs_f64(cli.patience)
        .with_context(|| format!("--patience {} is not a number of seconds", cli.patience))?;
    agent::run(AgentConfig {
        coordinator: coordinator.to_string(),
        server_name: id.server_name,
        tls: id.tls,
        node: id.node,
        token: id.token,
        patience,
    })
}

/// The CPU calibration.
fn calibrate_cpu(cli: &Calibrate) -> Result<()> {
    if !(cli.seconds.is_finite() && cli.seconds > 0.0) {
        bail!(
            "--seconds {} is not a positive number of seconds",
            cli.seconds
        );
    }
    let (reference, name) = match &cli.reference {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the reference {}", path.display()))?;
            let rates =
                reference_rates(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            (rates, path.display().to_string())
        }
        None => (REFERENCE, "the built-in reference host".to_string()),
    };
    let mut progress = Progress::new("CPU micro-benchmarks");
    let report = cpu::measure(
        Duration::from_secs_f64(cli.seconds),
        &reference,
        &mut progress,
    );
    print!("{}", cpu_listing(&report, &name));
    let how = format!(
        "{} (speed relative to {name})",
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    write(&cli.output, &cpu_toml(&report, &how))
}

/// Writes `text` to `path`, if given.
fn write(path: &Option<PathBuf>, text: &str) -> Result<()> {
    if let Some(path) = path {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// This host's address on the route to `host`.
fn route_to(host: &str) -> Result<String> {
    let target = (host, 9)
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    let any = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = UdpSocket::bind(any)?;
    socket
        .connect(target)
        .with_context(|| format!("no route to {host}"))?;
    Ok(socket.local_addr()?.ip().to_string())
}
