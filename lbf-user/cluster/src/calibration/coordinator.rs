//! The calibration coordinator (`lbf-gag calibrate`): waits for the agents of the hosts to
//! calibrate (`lbf-node calibrate --builder`), orders each host's CPU and loopback
//! measurements and a ping-pong per pair of hosts (or per network the user names), one at a
//! time, and assembles what they report into one cluster file (see [`super`]).

use super::{measured_of, order_of};
use crate::builder::authenticate;
use crate::serve_config::{check_listen, check_tokens, default_listen, load_with};
use crate::tls;
use crate::wire::{read_message, write_message};
use anyhow::{bail, Context, Result};
use lbf_calibrate::cpu::{CpuReport, BENCHMARKS};
use lbf_calibrate::output::{cpu_listing, NetworkTable};
use lbf_calibrate::pingpong::{Plan, KEY_BYTES};
use lbf_calibrate::progress::Progress;
use lbf_proto::{
    builder_frame, calibration_order, calibration_report, node_frame, BuilderFrame,
    CalibrationOrder, CpuMeasured, CpuOrder, Finish, Hello, ListenOrder, NodeFrame, Refusal,
    Welcome, PROTOCOL_VERSION,
};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Read as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a new connection may take to finish its TLS handshake and send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an agent's ping-pong server waits for the peer sent to it.
const LISTEN_PATIENCE: Duration = Duration::from_secs(60);

/// Where the coordinator listens and whom it admits: the listening address, TLS files and
/// `[tokens]` of a builder configuration (`deploy/builder.toml`), whose other keys (the
/// job's) it does not need and does not read.
pub struct CoordinatorConfig {
    /// Where agents connect (TLS).
    pub listen: SocketAddr,
    /// The coordinator's certificate (PEM), which the agents trust (`--ca`).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// Each agent's token, by node name.
    pub tokens: BTreeMap<String, String>,
}

/// The keys of a builder configuration the coordinator reads.
#[derive(Deserialize)]
struct Access {
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    #[serde(default)]
    allow_all_interfaces: bool,
    cert: PathBuf,
    key: PathBuf,
    #[serde(default)]
    tokens: BTreeMap<String, String>,
}

impl CoordinatorConfig {
    /// Reads `listen`, `cert`, `key` and `[tokens]` of the builder configuration at `path`
    /// (relative paths relative to its directory), checked as `lbf-gag serve` checks them.
    pub fn load(path: &Path) -> Result<Self> {
        load_with(path, Self::parse)
    }

    /// Parses configuration text whose relative paths are relative to `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self> {
        let file: Access = toml::from_str(text)?;
        check_listen(&[("listen", Some(file.listen))], file.allow_all_interfaces)?;
        check_tokens(&file.tokens)?;
        if file.tokens.is_empty() {
            bail!("[tokens] names no node: add one `NAME = \"TOKEN\"` line per host");
        }
        Ok(CoordinatorConfig {
            listen: file.listen,
            cert: base.join(file.cert),
            key: base.join(file.key),
            tokens: file.tokens,
        })
    }
}

/// A network segment to measure through one representative pair of its hosts.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkClass {
    /// The segment's name in the cluster file.
    pub name: String,
    /// Its hosts; the first two are measured.
    pub hosts: Vec<String>,
}

impl NetworkClass {
    /// `NAME=a,b,c`: a segment and its hosts, at least two.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, hosts) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}`: write NAME=HOST,HOST[,...]"))?;
        let hosts: Vec<String> = hosts.split(',').map(|h| h.trim().to_string()).collect();
        if name.trim().is_empty() || hosts.len() < 2 || hosts.iter().any(String::is_empty) {
            return Err(format!(
                "`{text}`: a network needs a name and at least two hosts (NAME=HOST,HOST[,...])"
            ));
        }
        Ok(NetworkClass {
            name: name.trim().to_string(),
            hosts,
        })
    }
}

/// What to measure, and how.
pub struct Survey {
    /// The hosts (agents' node names) to calibrate; empty: every node of `[tokens]`.
    pub hosts: Vec<String>,
    /// Networks measured by a representative pair each; empty: every pair of hosts, each a
    /// segment of its own (`a-b`).
    pub networks: Vec<NetworkClass>,
    /// The address a host's ping-pong server is reached at, where the agents' own
    /// addresses do not say (by default, the host's address that shares the longest prefix
    /// with one of its peer's).
    pub addresses: BTreeMap<String, IpAddr>,
    /// Each ping-pong's sizes and repetitions (between hosts and on each host's loopback).
    pub plan: Plan,
    /// How long each host's CPU micro-benchmarks run.
    pub cpu: Duration,
    /// How long to wait for every agent to connect.
    pub wait: Duration,
    /// How long an agent may take to answer one order.
    pub order_timeout: Duration,
    /// The command line, for the file's first comment.
    pub how: String,
}

/// One host's measurements.
pub struct HostMeasured {
    /// Its name (the agent's node name).
    pub name: String,
    /// Its CPU, against the built-in reference.
    pub cpu: CpuReport,
    /// Its loopback table.
    pub local: NetworkTable,
}

/// One segment's measurement.
pub struct NetworkMeasured {
    /// Its name.
    pub name: String,
    /// Its hosts.
    pub hosts: Vec<String>,
    /// The table measured between two of them.
    pub table: NetworkTable,
}

/// What a calibration found: every host and every segment.
pub struct Calibrated {
    /// The hosts, in name order.
    pub hosts: Vec<HostMeasured>,
    /// The segments, in the order measured.
    pub networks: Vec<NetworkMeasured>,
    /// The command line.
    pub how: String,
}

impl Calibrated {
    /// The cluster file (`docs/targets.md`): a `[[host]]` per host, a `[[network]]` per
    /// segment, every measurement kept as comments beside the fitted tables.
    pub fn cluster_toml(&self) -> String {
        let mut s = format!(
            "# Measured by lbf-gag calibrate ({}): each host's CPU and loopback, then a TCP \
             ping-pong\n# between two hosts of each network.\n",
            self.how
        );
        for h in &self.hosts {
            let measured: String = cpu_listing(&h.cpu, REFERENCE_NAME)
                .lines()
                .map(|l| format!("# {l}\n"))
                .collect();
            let _ = write!(
                s,
                "\n[[host]]\nname = \"{}\"\ncores = {}\nspeed = {:.4}\n{measured}{}",
                h.name,
                h.cpu.cores,
                h.cpu.speed,
                h.local.toml()
            );
        }
        for n in &self.networks {
            let hosts: Vec<String> = n.hosts.iter().map(|h| format!("\"{h}\"")).collect();
            let _ = write!(
                s,
                "\n[[network]]\nname = \"{}\"\nhosts = [{}]\n{}",
                n.name,
                hosts.join(", "),
                n.table.toml()
            );
        }
        s
    }

    /// What was measured, for the terminal: each host's CPU and each table's measured
    /// points beside the fitted ones.
    pub fn listing(&self) -> String {
        let mut s = String::new();
        for h in &self.hosts {
            let _ = write!(
                s,
                "host {}:\n{}{} loopback:\n{}\n",
                h.name,
                cpu_listing(&h.cpu, REFERENCE_NAME),
                h.name,
                h.local.listing()
            );
        }
        for n in &self.networks {
            let _ = write!(
                s,
                "network {} ({}): {}\n{}\n",
                n.name,
                n.hosts.join(", "),
                n.table.how,
                n.table.listing()
            );
        }
        s
    }
}

/// What the CPU micro-benchmarks are rated against (the agents measure against
/// `lbf_calibrate::cpu::REFERENCE`, so that the hosts' speeds compare).
const REFERENCE_NAME: &str = "the built-in reference host";

/// An agent's CPU report as the calibration's own, or why it is not one.
fn cpu_report(name: &str, cpu: CpuMeasured) -> Result<CpuReport> {
    let rates: [f64; 4] = cpu.rates.as_slice().try_into().map_err(|_| {
        anyhow::anyhow!(
            "agent `{name}` reported {} CPU rates, {} expected",
            cpu.rates.len(),
            BENCHMARKS.len()
        )
    })?;
    Ok(CpuReport {
        cpus: cpu.cpus,
        quota: (cpu.quota > 0.0).then_some(cpu.quota),
        cores: cpu.cores,
        rates,
        speed: cpu.speed,
        seconds: cpu.seconds,
    })
}

/// Calibrates the hosts of `survey`: waits for their agents, orders the measurements one at
/// a time, and returns what they found. Every agent is told to finish, whatever happens.
pub fn run(config: &CoordinatorConfig, survey: &Survey) -> Result<Calibrated> {
    let hosts = hosts_of(config, survey)?;
    let tls = tls::server_config(&config.cert, &config.key)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(coordinate(config, survey, hosts, TlsAcceptor::from(tls)))
}

/// The hosts to calibrate, checked against `[tokens]` and the networks.
fn hosts_of(config: &CoordinatorConfig, survey: &Survey) -> Result<BTreeSet<String>> {
    let hosts: BTreeSet<String> = if survey.hosts.is_empty() {
        config.tokens.keys().cloned().collect()
    } else {
        survey.hosts.iter().cloned().collect()
    };
    let known = |h: &String, what: &str| -> Result<()> {
        if !config.tokens.contains_key(h) {
            bail!("{what} `{h}` has no token in the configuration's [tokens]");
        }
        if !hosts.contains(h) {
            bail!("{what} `{h}` is not among the hosts calibrated (--hosts)");
        }
        Ok(())
    };
    for h in &survey.hosts {
        known(h, "host")?;
    }
    for n in &survey.networks {
        for h in &n.hosts {
            known(h, &format!("network {}: host", n.name))?;
        }
    }
    for h in survey.addresses.keys() {
        known(h, "--address: host")?;
    }
    if hosts.len() < 2 && survey.networks.is_empty() {
        eprintln!(
            "lbf-gag calibrate: only one host ({}); measuring its CPU and loopback, no network",
            hosts.iter().next().map_or("", String::as_str)
        );
    }
    Ok(hosts)
}

/// An agent, connected and admitted.
struct Agent {
    name: String,
    hello: Hello,
    peer: SocketAddr,
    rd: ReadHalf<TlsStream<TcpStream>>,
    wr: WriteHalf<TlsStream<TcpStream>>,
    next_id: u64,
}

impl Agent {
    /// Sends `what` and waits up to `timeout` for the report; an agent's failure is an
    /// error naming the agent.
    async fn order(
        &mut self,
        what: calibration_order::What,
        timeout: Duration,
    ) -> Result<calibration_report::What> {
        self.next_id += 1;
        let id = self.next_id;
        let order = BuilderFrame {
            body: Some(builder_frame::Body::Order(CalibrationOrder {
                id,
                what: Some(what),
            })),
        };
        let name = &self.name;
        write_message(&mut self.wr, &order)
            .await
            .with_context(|| format!("agent `{name}` ({}) went away", self.peer))?;
        let mut buf = Vec::new();
        let frame =
            tokio::time::timeout(timeout, read_message::<NodeFrame>(&mut self.rd, &mut buf))
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "agent `{name}` did not answer within {timeout:?} (--order-timeout)"
                    )
                })?
                .with_context(|| format!("agent `{name}` ({}) went away", self.peer))?;
        match frame.body {
            Some(node_frame::Body::Report(r)) if r.id == id => match r.what {
                Some(calibration_report::What::Failed(why)) => bail!("agent `{name}`: {why}"),
                Some(what) => Ok(what),
                None => bail!("agent `{name}` sent an empty report"),
            },
            _ => bail!("agent `{name}` answered order {id} with something else than its report"),
        }
    }

    /// A ping-pong's measured sizes, from a report.
    fn measured(
        &self,
        report: calibration_report::What,
    ) -> Result<Vec<lbf_calibrate::pingpong::Measured>> {
        match report {
            calibration_report::What::Measured(sizes) => measured_of(&sizes)
                .map_err(|e| anyhow::anyhow!("agent `{}` reported a bad table: {e}", self.name)),
            _ => bail!(
                "agent `{}` answered a ping-pong with something else",
                self.name
            ),
        }
    }
}

async fn coordinate(
    config: &CoordinatorConfig,
    survey: &Survey,
    hosts: BTreeSet<String>,
    acceptor: TlsAcceptor,
) -> Result<Calibrated> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {} for agents", config.listen))?;
    let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
    eprintln!(
        "lbf-gag calibrate: listening on {} (TLS); waiting up to {:.0} s for the agents of {} \
         (lbf-node calibrate --builder {} --node NAME)",
        config.listen,
        survey.wait.as_secs_f64(),
        names.join(", "),
        config.listen
    );
    let (tx, mut rx) = mpsc::channel(16);
    let accepting = tokio::spawn(accept(
        listener,
        acceptor,
        config.tokens.clone(),
        hosts.clone(),
        tx,
    ));
    let mut agents: BTreeMap<String, Agent> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + survey.wait;
    while agents.len() < hosts.len() {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(mut agent)) => {
                if agents.contains_key(&agent.name) {
                    refuse(&mut agent.wr, "an agent of this name is already connected").await;
                    continue;
                }
                eprintln!(
                    "lbf-gag calibrate: agent `{}` connected from {}",
                    agent.name, agent.peer
                );
                agents.insert(agent.name.clone(), agent);
            }
            Ok(None) => break,
            Err(_) => break,
        }
    }
    accepting.abort();
    let missing: Vec<&str> = names
        .iter()
        .filter(|n| !agents.contains_key(**n))
        .copied()
        .collect();
    let outcome = if missing.is_empty() {
        measure(&mut agents, survey).await
    } else {
        Err(anyhow::anyhow!(
            "no agent connected for {} within {:.0} s: run `lbf-node calibrate --builder {} \
             --ca CERT --node NAME` on each (its token in LBF_NODE_TOKEN or --token-file)",
            missing.join(", "),
            survey.wait.as_secs_f64(),
            config.listen
        ))
    };
    for agent in agents.values_mut() {
        let finish = calibration_order::What::Finish(Finish {});
        if let Err(e) = agent.order(finish, HELLO_TIMEOUT).await {
            eprintln!(
                "lbf-gag calibrate: telling agent `{}` to finish: {e:#}",
                agent.name
            );
        }
    }
    outcome
}

/// Orders every measurement, one at a time.
async fn measure(agents: &mut BTreeMap<String, Agent>, survey: &Survey) -> Result<Calibrated> {
    let names: Vec<String> = agents.keys().cloned().collect();
    let pairs: Vec<(String, Vec<String>)> = if survey.networks.is_empty() {
        let mut pairs = Vec::new();
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                pairs.push((format!("{a}-{b}"), vec![a.clone(), b.clone()]));
            }
        }
        pairs
    } else {
        survey
            .networks
            .iter()
            .map(|n| (n.name.clone(), n.hosts.clone()))
            .collect()
    };
    let steps = names.len() * 2 + pairs.len();
    let mut progress = Progress::new("calibrating the cluster");
    let mut step = 0;
    let mut next = |what: &str| {
        progress.show(step, steps, what);
        step += 1;
    };
    let mut hosts = Vec::new();
    for name in &names {
        let agent = agents.get_mut(name).expect("connected");
        next(&format!("{name}: CPU"));
        let cpu = match agent
            .order(
                calibration_order::What::Cpu(CpuOrder {
                    seconds_ns: survey.cpu.as_nanos() as u64,
                }),
                survey.order_timeout,
            )
            .await?
        {
            calibration_report::What::Cpu(cpu) => cpu_report(name, cpu)?,
            _ => bail!("agent `{name}` answered the CPU order with something else"),
        };
        next(&format!("{name}: loopback"));
        let local = calibration_order::What::Local(order_of(&survey.plan, String::new(), vec![]));
        let report = agent.order(local, survey.order_timeout).await?;
        let measured = agent.measured(report)?;
        let how = format!("TCP ping-pong on {name}'s loopback");
        hosts.push(HostMeasured {
            name: name.clone(),
            cpu,
            local: NetworkTable::fit("local", how, measured),
        });
    }
    let mut networks = Vec::new();
    for (segment, members) in pairs {
        let (server, client) = (&members[0], &members[1]);
        next(&format!("{segment}: {client} to {server}"));
        let key = one_time_key()?;
        let listen = calibration_order::What::Listen(ListenOrder {
            key: key.to_vec(),
            patience_ns: LISTEN_PATIENCE.as_nanos() as u64,
        });
        let server_agent = agents.get_mut(server).expect("connected");
        let port = match server_agent.order(listen, survey.order_timeout).await? {
            calibration_report::What::Listening(port) => u16::try_from(port)
                .map_err(|_| anyhow::anyhow!("agent `{server}` reported port {port}"))?,
            _ => bail!("agent `{server}` answered the listen order with something else"),
        };
        let ip = dial_address(
            server,
            &agents[server].hello,
            &agents[client].hello,
            &survey.addresses,
        )?;
        let addr = SocketAddr::new(ip, port);
        let order = order_of(&survey.plan, addr.to_string(), key.to_vec());
        let client_agent = agents.get_mut(client).expect("connected");
        let report = client_agent
            .order(
                calibration_order::What::PingPong(order),
                survey.order_timeout,
            )
            .await
            .with_context(|| {
                format!(
                    "measuring network {segment} from {client} to {server} at {addr} (if \
                     {client} cannot reach {server} there, give --address {server}=IP)"
                )
            })?;
        let measured = client_agent.measured(report)?;
        let how = format!("TCP ping-pong from {client} to {server} at {addr}");
        networks.push(NetworkMeasured {
            name: segment,
            hosts: members,
            table: NetworkTable::fit("table", how, measured),
        });
    }
    progress.done();
    Ok(Calibrated {
        hosts,
        networks,
        how: survey.how.clone(),
    })
}

/// A fresh key for one ping-pong server.
fn one_time_key() -> Result<[u8; KEY_BYTES]> {
    let mut key = [0u8; KEY_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .context("reading /dev/urandom for a ping-pong key")?;
    Ok(key)
}

/// The address `client` reaches `server`'s ping-pong server at: the one given, else the
/// server's address sharing the longest prefix with one of the client's (of the same
/// family), else its first. IPv6 link-local addresses are left out: without the interface
/// they belong to, which the server cannot name for the client, they reach nothing.
fn dial_address(
    server: &str,
    server_hello: &Hello,
    client_hello: &Hello,
    given: &BTreeMap<String, IpAddr>,
) -> Result<IpAddr> {
    if let Some(ip) = given.get(server) {
        return Ok(*ip);
    }
    let ips = |h: &Hello| -> Vec<IpAddr> {
        h.addresses
            .iter()
            .filter_map(|a| match a.len() {
                4 => <[u8; 4]>::try_from(a.as_slice()).ok().map(IpAddr::from),
                16 => <[u8; 16]>::try_from(a.as_slice()).ok().map(IpAddr::from),
                _ => None,
            })
            .filter(|ip| !matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80))
            .collect()
    };
    let (theirs, ours) = (ips(server_hello), ips(client_hello));
    let shared = |a: &IpAddr, b: &IpAddr| -> u32 {
        match (a, b) {
            (IpAddr::V4(a), IpAddr::V4(b)) => (a.to_bits() ^ b.to_bits()).leading_zeros(),
            (IpAddr::V6(a), IpAddr::V6(b)) => (a.to_bits() ^ b.to_bits()).leading_zeros(),
            _ => 0,
        }
    };
    let best = theirs
        .iter()
        .map(|a| (ours.iter().map(|b| shared(a, b)).max().unwrap_or(0), *a))
        .max_by_key(|&(bits, a)| (bits, std::cmp::Reverse(theirs.iter().position(|x| *x == a))));
    best.map(|(_, a)| a).ok_or_else(|| {
        anyhow::anyhow!(
            "agent `{server}` reported no network address to reach it at; give --address \
             {server}=IP"
        )
    })
}

/// Accepts agents until aborted: admits those of `hosts` with their token, refuses the rest
/// (saying why), and hands the admitted ones over.
async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    tokens: BTreeMap<String, String>,
    hosts: BTreeSet<String>,
    admitted: mpsc::Sender<Agent>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("lbf-gag calibrate: accepting a connection: {e}");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, tokens, hosts, admitted) = (
            acceptor.clone(),
            tokens.clone(),
            hosts.clone(),
            admitted.clone(),
        );
        tokio::spawn(async move {
            match admit(acceptor, tcp, peer, &tokens, &hosts).await {
                Ok(agent) => {
                    let _ = admitted.send(agent).await;
                }
                Err(why) => eprintln!("lbf-gag calibrate: refused {peer}: {why}"),
            }
        });
    }
}

/// The TLS handshake, the hello and its checks; the agent if admitted.
async fn admit(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    tokens: &BTreeMap<String, String>,
    hosts: &BTreeSet<String>,
) -> Result<Agent, String> {
    let tls = tokio::time::timeout(HELLO_TIMEOUT, acceptor.accept(tcp))
        .await
        .map_err(|_| format!("no TLS handshake within {HELLO_TIMEOUT:?}"))?
        .map_err(|e| {
            format!("TLS handshake failed: {e} (not an agent, or one that does not trust this certificate)")
        })?;
    let (mut rd, mut wr) = tokio::io::split(tls);
    let mut buf = Vec::new();
    let first = tokio::time::timeout(HELLO_TIMEOUT, read_message::<NodeFrame>(&mut rd, &mut buf))
        .await
        .map_err(|_| format!("no hello within {HELLO_TIMEOUT:?}"))?
        .map_err(|e| format!("no valid hello: {e}"))?;
    let Some(node_frame::Body::Hello(hello)) = first.body else {
        return Err("the first frame is not a hello".into());
    };
    let checked = authenticate(&hello, tokens).and_then(|()| {
        if !hello.calibration {
            Err(format!(
                "node `{}` streams a job's events (lbf-node); this is a calibration \
                 coordinator (lbf-gag calibrate), which takes `lbf-node calibrate --builder`",
                hello.node
            ))
        } else if !hosts.contains(&hello.node) {
            Err(format!(
                "`{}` is not among the hosts calibrated",
                hello.node
            ))
        } else {
            Ok(())
        }
    });
    if let Err(why) = checked {
        refuse(&mut wr, &why).await;
        return Err(format!("agent `{}`: {why}", hello.node));
    }
    let welcome = BuilderFrame {
        body: Some(builder_frame::Body::Welcome(Welcome {
            protocol_version: PROTOCOL_VERSION,
            last_seq: 0,
        })),
    };
    write_message(&mut wr, &welcome)
        .await
        .map_err(|e| format!("agent `{}`: {e}", hello.node))?;
    Ok(Agent {
        name: hello.node.clone(),
        hello,
        peer,
        rd,
        wr,
        next_id: 0,
    })
}

/// Tells a connection why it is refused, for good.
async fn refuse(wr: &mut WriteHalf<TlsStream<TcpStream>>, reason: &str) {
    let refusal = BuilderFrame {
        body: Some(builder_frame::Body::Refusal(Refusal {
            reason: reason.to_string(),
            permanent: true,
        })),
    };
    let _ = write_message(wr, &refusal).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(addresses: &[&str]) -> Hello {
        Hello {
            addresses: addresses
                .iter()
                .map(|a| match a.parse::<IpAddr>().unwrap() {
                    IpAddr::V4(v4) => v4.octets().to_vec(),
                    IpAddr::V6(v6) => v6.octets().to_vec(),
                })
                .collect(),
            ..Hello::default()
        }
    }

    #[test]
    fn the_server_is_dialled_on_the_peers_network() {
        let server = hello(&["fe80::1", "192.168.7.1", "10.0.0.1", "fd00::1"]);
        let client = hello(&["fe80::2", "10.0.0.2"]);
        let none = BTreeMap::new();
        let ip = dial_address("a", &server, &client, &none).unwrap();
        assert_eq!(ip, "10.0.0.1".parse::<IpAddr>().unwrap());
        let v6 = hello(&["fe80::2", "fd00::2"]);
        assert_eq!(
            dial_address("a", &server, &v6, &none).unwrap(),
            "fd00::1".parse::<IpAddr>().unwrap()
        );
        let given = BTreeMap::from([("a".to_string(), "172.16.0.9".parse().unwrap())]);
        assert_eq!(
            dial_address("a", &server, &client, &given).unwrap(),
            "172.16.0.9".parse::<IpAddr>().unwrap()
        );
        let err = dial_address("a", &hello(&["fe80::1"]), &client, &none).unwrap_err();
        assert!(err.to_string().contains("--address a=IP"), "{err}");
    }

    #[test]
    fn networks_are_a_name_and_two_hosts_or_more() {
        assert_eq!(
            NetworkClass::parse("lan=a, b,c").unwrap(),
            NetworkClass {
                name: "lan".into(),
                hosts: vec!["a".into(), "b".into(), "c".into()]
            }
        );
        for bad in ["lan", "lan=a", "=a,b", "lan=a,,b"] {
            assert!(NetworkClass::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_builder_configuration_serves_with_its_job_keys_ignored() {
        let text = "listen = \"127.0.0.1:7400\"\ncert = \"b.pem\"\nkey = \"b.key\"\n\
                    journal = \"j\"\n[job]\nprocs = 2\n[tokens]\n\
                    a = \"token-a-for-tests-only\"\nb = \"token-b-for-tests-only\"\n";
        let c = CoordinatorConfig::parse(text, Path::new("/etc/lbf")).unwrap();
        assert_eq!(c.cert, Path::new("/etc/lbf/b.pem"));
        assert_eq!(c.tokens.len(), 2);
        let shared = text.replace("token-b-for-tests-only", "token-a-for-tests-only");
        let refused = |text: &str| match CoordinatorConfig::parse(text, Path::new(".")) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => format!("{e:#}"),
        };
        let err = refused(&shared);
        assert!(err.contains("same token"), "{err}");
        let err = refused("cert = \"b.pem\"\nkey = \"b.key\"\n");
        assert!(err.contains("[tokens]"), "{err}");
    }
}
