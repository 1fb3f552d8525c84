//! `lbf-gag calibrate`: measures a whole cluster into one cluster file, ordering the
//! `lbf-node calibrate --builder` agents on its hosts (`lbf::net::calibration`).

use anyhow::{bail, Context, Result};
use lbf::calibrate::args::PingPongArgs;
use lbf::config::parse_cluster;
use lbf::net::calibration::coordinator::{self, CoordinatorConfig, NetworkClass, Survey};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Measure every host of a cluster and the networks between them into one cluster file.
///
/// Run `lbf-node calibrate --builder ADDR:PORT --ca CERT --node NAME` on every host (the
/// agents); this command, the coordinator, waits for them, then orders one measurement at a
/// time, so that none disturbs another: each host's CPU (cores and speed, against the
/// built-in reference) and its loopback table, then a TCP ping-pong between two hosts of
/// each network. Without --network, every pair of hosts is measured and is a network of its
/// own (`a-b`); with it, one representative pair per network (its first two hosts). It
/// prints every measurement beside the fitted tables and writes the cluster file
/// (docs/targets.md) that `lbf-gag predict --cluster` and `advise --cluster` take.
///
/// The coordinator reads where to listen, its certificate and key, and the agents' tokens
/// from a builder configuration (`listen`, `cert`, `key`, `[tokens]`; its job keys are not
/// used): agents authenticate as nodes do, and each ping-pong server answers only the peer
/// that presents the one-time key the coordinator gave both.
#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct Calibrate {
    /// The builder configuration (TOML): listen, cert, key, `[tokens]`.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,

    /// Write the cluster file here.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,

    /// The hosts to calibrate, by node name (comma-separated; default: every node of
    /// `[tokens]`).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    hosts: Vec<String>,

    /// A network and its hosts, NAME=HOST,HOST[,...], measured between its first two hosts
    /// (repeatable; default: every pair of hosts).
    #[arg(long, value_name = "NAME=HOSTS", value_parser = NetworkClass::parse)]
    network: Vec<NetworkClass>,

    /// The address peers reach HOST's ping-pong server at, HOST=IP (repeatable; default:
    /// HOST's address sharing the longest prefix with the peer's).
    #[arg(long, value_name = "HOST=IP", value_parser = parse_address)]
    address: Vec<(String, IpAddr)>,

    #[command(flatten)]
    pingpong: PingPongArgs,

    /// Seconds of CPU micro-benchmarks on each host.
    #[arg(long, value_name = "SECONDS", default_value_t = 4.0)]
    cpu_seconds: f64,

    /// Seconds to wait for every agent to connect.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    wait: f64,

    /// Seconds an agent may take to answer one order (a slow link's ping-pong up to
    /// --max-bytes takes a while).
    #[arg(long, value_name = "SECONDS", default_value_t = 900.0)]
    order_timeout: f64,
}

const AFTER_HELP: &str = "\
Example:
  # on the coordinator's host (builder.toml as for lbf-gag serve: listen, cert, key, [tokens])
  lbf-gag calibrate --config /etc/lbf/builder.toml -o lab.toml --network lan=a,b,c
  # on hosts a, b and c
  LBF_NODE_TOKEN=... lbf-node calibrate --builder 10.0.0.1:7400 --ca builder.pem --node a
  # then predict on the measured hosts
  lbf-gag predict run.trace.jsonl --cluster lab.toml";

/// `HOST=IP`.
fn parse_address(text: &str) -> Result<(String, IpAddr), String> {
    let (host, ip) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: write HOST=IP"))?;
    let ip = ip
        .parse()
        .map_err(|_| format!("`{text}`: `{ip}` is not an IP address"))?;
    Ok((host.to_string(), ip))
}

/// Seconds given on the command line as a duration, or what is wrong with them.
fn seconds(option: &str, value: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("--{option} {value} is not a positive number of seconds"))
}

/// Runs the calibration and writes the file.
pub(crate) fn calibrate(args: &Calibrate) -> Result<()> {
    let config = CoordinatorConfig::load(&args.config)?;
    let mut addresses = BTreeMap::new();
    for (host, ip) in &args.address {
        if addresses.insert(host.clone(), *ip).is_some() {
            bail!("--address {host} given twice");
        }
    }
    let survey = Survey {
        hosts: args.hosts.clone(),
        networks: args.network.clone(),
        addresses,
        plan: args.pingpong.plan().map_err(anyhow::Error::msg)?,
        cpu: seconds("cpu-seconds", args.cpu_seconds)?,
        wait: seconds("wait", args.wait)?,
        order_timeout: seconds("order-timeout", args.order_timeout)?,
        how: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let calibrated = coordinator::run(&config, &survey)?;
    print!("{}", calibrated.listing());
    let text = calibrated.cluster_toml();
    let name = args.output.display().to_string();
    if let Err(e) = parse_cluster(&text, &name) {
        bail!("the cluster file made from these measurements is not valid ({e}); not written");
    }
    std::fs::write(&args.output, text)
        .with_context(|| format!("writing {}", args.output.display()))?;
    eprintln!("wrote {}", args.output.display());
    Ok(())
}
