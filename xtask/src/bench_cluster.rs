//! `cargo xtask bench-cluster`: events per second end to end through cluster mode, and the
//! builder's peak memory.
//!
//! Starts `lbf-gag serve` (release build) on loopback and several `lbf-node` daemons that
//! replay disjoint parts of one synthetic trace generated on the fly (`--synthetic`), with
//! real TLS, journaling and acknowledgements; times from the first daemon's start to the
//! builder's final prediction. Runs two lengths, to show that the builder's memory does not
//! grow with the stream. Prints numbers; asserts nothing.

use anyhow::{bail, Context, Result};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of `cargo xtask bench-cluster`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Node daemons streaming at once.
    #[arg(long, default_value_t = 4)]
    nodes: u32,
    /// Processes of the synthetic job (split evenly over the daemons).
    #[arg(long, default_value_t = 64)]
    procs: u32,
    /// Events of the long run (the short one has a fifth as many).
    #[arg(long, default_value_t = 20_000_000)]
    events: u64,
}

/// One run's numbers.
struct Run {
    events: u64,
    seconds: f64,
    peak_rss_kib: u64,
}

/// Builds the binaries, runs both lengths and prints a summary.
pub(crate) fn run(root: &Path, args: &Args) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "lbf-user",
            "--bin",
            "lbf-gag",
            "--bin",
            "lbf-node",
        ])
        .status()
        .context("cannot run cargo to build lbf-gag and lbf-node")?;
    if !status.success() {
        bail!("building lbf-gag and lbf-node failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
    let bin = target.join("release");
    let work = target.join("bench-cluster");
    let short = measure(&bin, &work, args, args.events / 5)?;
    let long = measure(&bin, &work, args, args.events)?;
    println!(
        "\nsummary ({} daemons -> 1 builder on loopback, TLS, journaled, 1 target, {} processes)",
        args.nodes, args.procs
    );
    for r in [&short, &long] {
        println!(
            "  {:>10} events in {:6.2} s: {:5.2} M events/s end to end, builder peak RSS {:6.1} MiB",
            r.events,
            r.seconds,
            r.events as f64 / r.seconds / 1e6,
            r.peak_rss_kib as f64 / 1024.0
        );
    }
    println!(
        "  builder peak RSS, 5x the events: x{:.2}",
        long.peak_rss_kib as f64 / short.peak_rss_kib.max(1) as f64
    );
    Ok(())
}

/// One run of `events` events.
fn measure(bin: &Path, work: &Path, args: &Args, events: u64) -> Result<Run> {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let cert = Command::new(bin.join("lbf-gag"))
        .args(["cert", "--out"])
        .arg(work.join("builder"))
        .output()
        .context("running lbf-gag cert")?;
    if !cert.status.success() {
        bail!(
            "lbf-gag cert failed: {}",
            String::from_utf8_lossy(&cert.stderr)
        );
    }
    let (listen, http) = (free_port()?, free_port()?);
    let mut config = format!(
        "listen = \"127.0.0.1:{listen}\"\nhttp = \"127.0.0.1:{http}\"\ncert = \"builder.pem\"\n\
         key = \"builder.key\"\njournal = \"journal\"\nreport = \"report.json\"\n\
         [job]\nprocs = {}\n[[job.short]]\nnodes = {}\nnetwork = \"10gige\"\n[tokens]\n",
        args.procs, args.nodes
    );
    for n in 0..args.nodes {
        config += &format!("node{n} = \"bench-token-{n}\"\n");
    }
    std::fs::write(work.join("builder.toml"), config)?;
    let mut builder = Guard(
        Command::new(bin.join("lbf-gag"))
            .args(["serve", "--exit-when-done", "--config"])
            .arg(work.join("builder.toml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.join("builder.log"))?)
            .spawn()
            .context("starting lbf-gag serve")?,
    );
    wait_for_port(http)?;
    let start = Instant::now();
    let per_node = args.procs / args.nodes;
    let mut nodes = Vec::new();
    for n in 0..args.nodes {
        let first = n * per_node;
        let last = if n + 1 == args.nodes {
            args.procs
        } else {
            first + per_node
        } - 1;
        let child = Command::new(bin.join("lbf-node"))
            .env("LBF_NODE_TOKEN", format!("bench-token-{n}"))
            .args([
                "--builder",
                &format!("127.0.0.1:{listen}"),
                "--node",
                &format!("node{n}"),
            ])
            .args(["--procs", &format!("{first}-{last}")])
            .args(["--synthetic", &format!("{}:{events}:1", args.procs)])
            .arg("--ca")
            .arg(work.join("builder.pem"))
            .arg("--spool-dir")
            .arg(work.join(format!("spool{n}")))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.join(format!("node{n}.log")))?)
            .spawn()
            .context("starting lbf-node")?;
        nodes.push(Guard(child));
    }
    let mut peak = 0;
    let status = loop {
        if let Some(status) = builder.0.try_wait()? {
            break status;
        }
        peak = peak.max(vm_hwm_kib(builder.0.id()).unwrap_or(0));
        if start.elapsed() > Duration::from_secs(600) {
            bail!(
                "the builder did not finish within 10 minutes; see {}",
                work.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let seconds = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!(
            "the builder failed; see {}",
            work.join("builder.log").display()
        );
    }
    for mut n in nodes {
        if !n.0.wait()?.success() {
            bail!("a node daemon failed; see its log in {}", work.display());
        }
    }
    let report = std::fs::read_to_string(work.join("report.json"))?;
    let applied = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("\"events\": "))
        .and_then(|v| v.trim_end_matches(',').parse().ok())
        .context("the report has no event count")?;
    println!(
        "{applied} events, {seconds:.2} s, {:.2} M events/s, builder peak RSS {peak} KiB",
        applied as f64 / seconds / 1e6
    );
    Ok(Run {
        events: applied,
        seconds,
        peak_rss_kib: peak,
    })
}

/// Kills the child if it is still running when dropped (the benchmark failed midway).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A port free on 127.0.0.1 now.
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until something listens on 127.0.0.1:`port`.
fn wait_for_port(port: u16) -> Result<()> {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if start.elapsed() > Duration::from_secs(20) {
            bail!("the builder did not start listening within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Peak resident memory of process `pid` so far (VmHWM).
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
