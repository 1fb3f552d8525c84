//! `cargo xtask validate-nf`: how close lbf's network-factor (NF) predictions come for
//! messages sent by rendezvous, which leave only once their receive is posted.
//!
//! The 2-rank rendezvous workload (`tests/workloads/mpi/rendezvous.c`) runs under `lbf-trace`
//! over TCP on the loopback of a network namespace of its own: once as the link is (fast) and
//! once with the loopback rate-limited by `tc`'s token bucket (slow). A ping-pong on the slow
//! link gives the slow network's table; the fast run's trace predicts the slow run with it
//! (the "what if the network were slower" question), and the slow run's trace predicts itself.
//! `--bin-dir` runs another build's `lbf-trace` and `lbf-gag` (e.g. one before rendezvous) on
//! the same experiment. Prints the errors against the measured times; asserts nothing. Needs
//! root, `ip` and `tc`; the machine should be otherwise idle.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cmd::run_cmd;
use crate::validate::{
    bin_dir, build_workloads, launcher, load_average, measured, output_dir, predict,
};

/// Options of `cargo xtask validate-nf`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// MPI implementations to run (openmpi, mpich).
    #[arg(long, value_delimiter = ',', default_value = "openmpi,mpich")]
    mpi: Vec<String>,
    /// The slow link's rate, as `tc ... tbf rate` takes it.
    #[arg(long, default_value = "100mbit")]
    rate: String,
    /// Iterations passed to the workload.
    #[arg(long, default_value_t = 20)]
    iters: u32,
    /// Milliseconds of computation per iteration passed to the workload.
    #[arg(long, default_value_t = 10)]
    compute_ms: u32,
    /// Runs of each configuration.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// The directory of the `lbf-trace` and `lbf-gag` to run (another build's
    /// `target/release`); by default this build's, built first.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// The sizes of the slow link's table: an empty message (the ping-pong's smallest) and 1 MiB,
/// the workload's messages.
const TABLE_SIZES: [u64; 2] = [8, 1 << 20];

/// Runs the experiment for every MPI and prints one row per run.
pub(crate) fn run(root: &Path, args: &Args) -> Result<()> {
    let bin = bin_dir(root, &args.bin_dir)?;
    let out = output_dir(root).join("nf");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let ns = Namespace::new()?;
    println!(
        "{:<8} {:>3} {:>8} {:>8}  {:>24}  {:>24}  {:>5}",
        "mpi", "run", "fast", "slow", "slow from fast (error)", "slow from slow (error)", "load"
    );
    for mpi in &args.mpi {
        let program = build_workloads(root, mpi)?.join("rendezvous");
        ns.throttle(Some(&args.rate))?;
        let table = half_round_trips(&ns, mpi, &program);
        ns.throttle(None)?;
        let target = write_target(&out, mpi, &table?)?;
        for run in 0..args.runs {
            let trace = |label: &str, rate: Option<&str>| -> Result<PathBuf> {
                let trace = out.join(format!("{mpi}-{label}-{run}.jsonl"));
                ns.throttle(rate)?;
                let mut cmd = vec![
                    bin.join("lbf-trace").display().to_string(),
                    "-o".into(),
                    trace.display().to_string(),
                    "--".into(),
                ];
                cmd.extend(ns.enter());
                cmd.extend(launcher(mpi, 2, true)?);
                cmd.push(program.display().to_string());
                cmd.push(args.iters.to_string());
                cmd.push(args.compute_ms.to_string());
                let result = run_patiently(&cmd, &out);
                ns.throttle(None)?;
                result.map(|_| trace)
            };
            let fast = trace("fast", None)?;
            let slow = trace("slow", Some(&args.rate))?;
            let slow_seconds = measured(&slow)?;
            let cell = |from: &Path| -> Result<String> {
                let p = predict(&bin, from, &target)?;
                Ok(format!(
                    "{p:.3} s ({:+.1}%)",
                    100.0 * (p - slow_seconds) / slow_seconds
                ))
            };
            println!(
                "{mpi:<8} {run:>3} {:>7.3}s {slow_seconds:>7.3}s  {:>24}  {:>24}  {:>5}",
                measured(&fast)?,
                cell(&fast)?,
                cell(&slow)?,
                load_average()
            );
        }
    }
    Ok(())
}

/// How much a waiting rank loads its node (see docs/targets.md): MPICH polls flat out, Open
/// MPI yields.
fn spin(mpi: &str) -> f64 {
    if mpi == "mpich" {
        1.0
    } else {
        0.0
    }
}

/// The least half round trips of [`TABLE_SIZES`] on the link as it is now, in seconds.
fn half_round_trips(ns: &Namespace, mpi: &str, program: &Path) -> Result<Vec<(u64, f64)>> {
    let mut cmd = ns.enter();
    cmd.extend(launcher(mpi, 2, true)?);
    cmd.push(program.display().to_string());
    cmd.extend(["0".into(), "0".into()]);
    cmd.extend(TABLE_SIZES.map(|b| format!("halfrtt:{b}")));
    let text = run_patiently(&cmd, program.parent().unwrap_or(Path::new(".")))?;
    let table: Vec<(u64, f64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("LBF-PROBE halfrtt_bytes="))
        .filter_map(|l| {
            let (bytes, ns) = l.split_once(" ns=")?;
            Some((bytes.parse().ok()?, ns.trim().parse::<f64>().ok()? * 1e-9))
        })
        .collect();
    if table.len() != TABLE_SIZES.len() {
        bail!("the ping-pong printed no half round trips:\n{text}");
    }
    Ok(table)
}

/// Writes the slow network's target for `mpi`: the ranks on one node of 2 cores, whose
/// messages cost the slow link's times. A large message's half round trip includes the
/// rendezvous handshake (two empty messages), which the engine adds itself: it is taken out.
fn write_target(dir: &Path, mpi: &str, table: &[(u64, f64)]) -> Result<PathBuf> {
    let small = table[0].1;
    let points: Vec<String> = table
        .iter()
        .map(|&(bytes, seconds)| {
            let seconds = if bytes == table[0].0 {
                seconds
            } else {
                (seconds - 2.0 * small).max(small)
            };
            format!("[{bytes}, {seconds:e}]")
        })
        .collect();
    println!("{mpi}: slow link table {}", points.join(", "));
    let path = dir.join(format!("{mpi}-slow.toml"));
    let text = format!(
        "name = \"slow link\"\nspin = {}\n[[node]]\nprocs = [0, 1]\ncores = 2\n\
         [network]\nlocal = [{}]\n",
        spin(mpi),
        points.join(", ")
    );
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// How long one run may take before it is taken for hung.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Runs of one command before giving up.
const ATTEMPTS: u32 = 3;

/// Runs `cmd` in a process group of its own, its output in a file of `dir`; returns its
/// standard output. A run that has not ended within [`RUN_LIMIT`] is killed, group and all,
/// and run again, up to [`ATTEMPTS`] times: MPICH 4.0 over UCX's TCP transport sometimes
/// hangs in `MPI_Finalize` here (one rank waits in the launcher's barrier while the other
/// waits for it to close its UCX connection; 2 runs of about 10).
fn run_patiently(cmd: &[String], dir: &Path) -> Result<String> {
    let (program, args) = cmd.split_first().context("an empty command")?;
    let log = dir.join("run.out");
    for attempt in 1..=ATTEMPTS {
        let file = std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?;
        let mut child = Command::new(program)
            .args(args)
            .stdout(file.try_clone()?)
            .stderr(file)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot run {program}"))?;
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if start.elapsed() > RUN_LIMIT {
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        match status {
            Some(status) if status.success() => return Ok(output),
            Some(status) => bail!("`{}` failed ({status}):\n{output}", cmd.join(" ")),
            None => {
                eprintln!(
                    "attempt {attempt} of {ATTEMPTS}: `{}` hung for {} s; killed",
                    cmd.join(" "),
                    RUN_LIMIT.as_secs()
                );
                // Hydra starts its proxy in a session of its own: kill by descent.
                let mut pids: Vec<String> =
                    descendants(child.id()).iter().map(u32::to_string).collect();
                pids.push(format!("-{}", child.id()));
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg("--")
                    .args(&pids)
                    .output();
                let _ = child.wait();
            }
        }
    }
    bail!("`{}` hung {ATTEMPTS} times", cmd.join(" "))
}

/// The processes descended from `pid`, from `/proc`.
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // After the command name, which may hold spaces: state, then the parent.
            let parent = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(
            parents
                .iter()
                .filter(|&&(_, parent)| parent == p)
                .map(|&(c, _)| c),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// A network namespace of this process with its loopback up, deleted on drop.
struct Namespace {
    name: String,
}

impl Namespace {
    fn new() -> Result<Namespace> {
        let name = format!("lbf-nf-{}", std::process::id());
        run_cmd(&["ip".into(), "netns".into(), "add".into(), name.clone()])?;
        let ns = Namespace { name };
        run_cmd(&ns.ip(&["link", "set", "lo", "up"]))?;
        Ok(ns)
    }

    /// `ip -n NAME ARGS`.
    fn ip(&self, args: &[&str]) -> Vec<String> {
        ["ip", "-n", &self.name]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect()
    }

    /// The prefix that runs a command inside the namespace (through `nsenter`, which keeps
    /// the host's sysfs, unlike `ip netns exec`).
    fn enter(&self) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--net=/var/run/netns/{}", self.name),
        ]
    }

    /// Limits the loopback to `rate` (a token bucket), or lifts the limit.
    fn throttle(&self, rate: Option<&str>) -> Result<()> {
        // Fails when there is no limit to lift.
        let _ = Command::new("tc")
            .args(["-n", &self.name, "qdisc", "del", "dev", "lo", "root"])
            .output();
        if let Some(rate) = rate {
            run_cmd(
                &[
                    "tc", "-n", &self.name, "qdisc", "add", "dev", "lo", "root", "tbf", "rate",
                    rate, "burst", "96kb", "latency", "400ms",
                ]
                .map(String::from),
            )?;
        }
        Ok(())
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}
