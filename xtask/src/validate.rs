//! `cargo xtask validate`: how close lbf's predictions come to real runs on this machine.
//!
//! For each MPI and workload, the same 4-rank (`--np`) program runs twice under `lbf-trace`: once with
//! every rank on CPU 0 (a one-core "node") and once on CPUs 0-1 (a two-core node). Each trace
//! predicts both configurations; the prediction for the configuration it ran in checks the
//! model, the one for the other configuration is the "what if" the tool is for. Errors are
//! printed against the measured time of the run in that configuration, for the paper's model
//! (waiting costs no CPU) and for waiting processes that poll (spin 1). Needs root and 2 CPUs.
//! Prints numbers; asserts nothing. The machine should be otherwise idle.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cmd::run_cmd;

/// Options of `cargo xtask validate`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// MPI implementations to run (openmpi, mpich).
    #[arg(long, value_delimiter = ',', default_value = "openmpi,mpich")]
    mpi: Vec<String>,
    /// Workloads of tests/workloads/mpi to run (`--np` ranks each).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "halo,ring,master_worker,collectives"
    )]
    workloads: Vec<String>,
    /// Iterations passed to each workload.
    #[arg(long, default_value_t = 40)]
    iters: u32,
    /// Milliseconds of computation per iteration passed to each workload.
    #[arg(long, default_value_t = 10)]
    compute_ms: u32,
    /// Ranks of each run.
    #[arg(long, default_value_t = 4)]
    np: u32,
    /// Compare the span from the first process's start to the last exit: the launcher's
    /// start-up and the library's teardown, which predictions take as measured in the traced
    /// run, left out of both sides.
    #[arg(long)]
    span: bool,
    /// The directory of the `lbf-trace` and `lbf-gag` to run (another build's
    /// `target/release`, to compare); by default this build's, built first.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// The two configurations: a CPU list for `taskset` and the matching target.
const CONFIGS: [(&str, &str, u32); 2] = [("1 core", "0", 1), ("2 cores", "0,1", 2)];

/// Spin weights predicted with (see docs/targets.md).
const SPINS: [f64; 2] = [0.0, 1.0];

/// Runs every workload in both configurations and prints the errors.
pub(crate) fn run(root: &Path, args: &Args) -> Result<()> {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        bail!("validate needs 2 CPUs (it compares a 1-core and a 2-core run)");
    }
    let bin = bin_dir(root, &args.bin_dir)?;
    let out = output_dir(root);
    let targets = write_targets(&out, args.np)?;
    println!(
        "{:<14} {:<8} {:>9} {:>9}  {:>22}  {:>22}  {:>5}",
        "workload",
        "mpi",
        "1 core",
        "2 cores",
        "1 core -> (err s0, s1)",
        "2 cores -> (err s0, s1)",
        "load"
    );
    for mpi in &args.mpi {
        let progs = build_workloads(root, mpi)?;
        for workload in &args.workloads {
            let mut runs = Vec::new();
            for (label, cpus, _) in CONFIGS {
                let trace = out.join(format!("{workload}-{mpi}-{}.jsonl", label.replace(' ', "")));
                let mut cmd = vec![
                    bin.join("lbf-trace").display().to_string(),
                    "-o".into(),
                    trace.display().to_string(),
                    "--".into(),
                    "taskset".into(),
                    "-c".into(),
                    cpus.into(),
                ];
                cmd.extend(launcher(mpi, args.np, false)?);
                cmd.push(progs.join(workload).display().to_string());
                cmd.push(args.iters.to_string());
                cmd.push(args.compute_ms.to_string());
                run_cmd(&cmd)?;
                runs.push(trace);
            }
            report(&bin, workload, mpi, &runs, &targets, args.span)?;
        }
    }
    Ok(())
}

/// Where the `lbf-trace` and `lbf-gag` to run are: `given` (another build's), else this
/// build's release binaries, built first.
pub(crate) fn bin_dir(root: &Path, given: &Option<PathBuf>) -> Result<PathBuf> {
    if let Some(dir) = given {
        return Ok(dir.clone());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run_cmd(&[cargo, "build".into(), "--release".into(), "--bins".into()])?;
    Ok(target_dir(root).join("release"))
}

/// Where validation runs keep their traces, targets and programs.
pub(crate) fn output_dir(root: &Path) -> PathBuf {
    target_dir(root).join("validate")
}

/// The workspace's target directory.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// Builds every MPI workload with `mpi`'s compiler wrapper; returns their directory.
pub(crate) fn build_workloads(root: &Path, mpi: &str) -> Result<PathBuf> {
    let progs = output_dir(root).join(mpi);
    run_cmd(&[
        "bash".into(),
        root.join("tests/workloads/mpi/build.sh")
            .display()
            .to_string(),
        mpi.into(),
        progs.display().to_string(),
    ])?;
    Ok(progs)
}

/// The launcher command for `np` ranks of `mpi`, inheriting the CPU set it is started in;
/// with `tcp_on_loopback`, the ranks talk over TCP on the loopback only (Open MPI's `tcp`
/// BTL, MPICH's UCX `tcp` transport), as `validate-nf` needs.
pub(crate) fn launcher(mpi: &str, np: u32, tcp_on_loopback: bool) -> Result<Vec<String>> {
    // The environment and the options that make it TCP on the loopback, the launcher and its
    // options, and the flag before the rank count.
    let (tcp_env, launcher, tcp_options, np_flag): (&[&str], &[&str], &[&str], &str) = match mpi {
        "openmpi" => (
            &[],
            &[
                "mpirun.openmpi",
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
            ],
            &[
                "--mca",
                "btl",
                "tcp,self",
                "--mca",
                "btl_tcp_if_include",
                "lo",
                "--mca",
                "oob_tcp_if_include",
                "lo",
            ],
            "-np",
        ),
        "mpich" => (&["env", "UCX_TLS=tcp,self"], &["mpirun.mpich"], &[], "-n"),
        other => bail!("unknown MPI `{other}`; use openmpi or mpich"),
    };
    let tcp = |words: &'static [&'static str]| if tcp_on_loopback { words } else { &[] };
    let np = np.to_string();
    Ok(tcp(tcp_env)
        .iter()
        .chain(launcher)
        .chain(tcp(tcp_options))
        .chain(&[np_flag, np.as_str()])
        .map(|s| s.to_string())
        .collect())
}

/// Writes one target file per configuration and spin for `np` processes; returns their
/// paths, configuration-major.
fn write_targets(dir: &Path, np: u32) -> Result<Vec<Vec<PathBuf>>> {
    let procs: Vec<u32> = (0..np).collect();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    CONFIGS
        .iter()
        .map(|&(label, _, cores)| {
            SPINS
                .iter()
                .map(|spin| {
                    let path = dir.join(format!("{}-spin{spin}.toml", label.replace(' ', "")));
                    let text = format!(
                        "name = \"{label} spin {spin}\"\nspin = {spin}\n\
                         [[node]]\nprocs = {procs:?}\ncores = {cores}\n"
                    );
                    std::fs::write(&path, text)
                        .with_context(|| format!("writing {}", path.display()))?;
                    Ok(path)
                })
                .collect()
        })
        .collect()
}

/// Predicts every configuration from every run and prints one row of relative errors; of
/// the spans from the first start to the last exit if `span`.
fn report(
    bin: &Path,
    workload: &str,
    mpi: &str,
    runs: &[PathBuf],
    targets: &[Vec<PathBuf>],
    span: bool,
) -> Result<()> {
    // Each run's untimed seconds, read once (not once per target it is predicted for).
    let untimed: Vec<f64> = runs
        .iter()
        .map(|t| if span { untimed(t) } else { Ok(0.0) })
        .collect::<Result<_>>()?;
    let measured: Vec<f64> = runs
        .iter()
        .zip(&untimed)
        .map(|(t, u)| Ok(measured(t)? - u))
        .collect::<Result<_>>()?;
    let mut cells = Vec::new();
    for (run, untimed) in runs.iter().zip(&untimed) {
        for (config, spins) in targets.iter().enumerate() {
            let errors: Vec<String> = spins
                .iter()
                .map(|target| {
                    let p = predict(bin, run, target)? - untimed;
                    Ok(format!(
                        "{:+.1}%",
                        100.0 * (p - measured[config]) / measured[config]
                    ))
                })
                .collect::<Result<_>>()?;
            cells.push(format!("{}:{}", CONFIGS[config].0, errors.join(",")));
        }
    }
    println!(
        "{workload:<14} {mpi:<8} {:>8.3}s {:>8.3}s  {}  {}  {:>5}",
        measured[0],
        measured[1],
        cells[..2].join(" "),
        cells[2..].join(" "),
        load_average()
    );
    Ok(())
}

/// The machine's load average over the last minute (`/proc/loadavg`), to tell runs on an
/// otherwise idle machine from runs that competed with other work.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "?".into())
}

/// The measured run time in the summary line of a trace.
pub(crate) fn measured(trace: &Path) -> Result<f64> {
    let text =
        std::fs::read_to_string(trace).with_context(|| format!("reading {}", trace.display()))?;
    let last = text.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last)
        .with_context(|| format!("{}: the last line is not JSON", trace.display()))?;
    v["summary"]["measured_seconds"]
        .as_f64()
        .with_context(|| format!("{}: no summary line (capture cut short?)", trace.display()))
}

/// The seconds of a trace that no model predicts: until its first process started (the
/// header's least `start_ns`) and its teardown (the summary's `teardown_seconds`).
fn untimed(trace: &Path) -> Result<f64> {
    let text =
        std::fs::read_to_string(trace).with_context(|| format!("reading {}", trace.display()))?;
    let json = |line: Option<&str>| -> Result<serde_json::Value> {
        serde_json::from_str(line.unwrap_or_default())
            .with_context(|| format!("{}: a header and a summary", trace.display()))
    };
    let (header, summary) = (json(text.lines().next())?, json(text.lines().last())?);
    let first_start = header["procs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["start_ns"].as_u64().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let teardown = summary["summary"]["teardown_seconds"]
        .as_f64()
        .unwrap_or(0.0);
    Ok(first_start as f64 * 1e-9 + teardown)
}

/// `lbf-gag predict TRACE --target TARGET --json`'s predicted seconds.
pub(crate) fn predict(bin: &Path, trace: &Path, target: &Path) -> Result<f64> {
    let out = run_cmd(&[
        bin.join("lbf-gag").display().to_string(),
        "predict".into(),
        trace.display().to_string(),
        "--target".into(),
        target.display().to_string(),
        "--json".into(),
    ])?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("lbf-gag --json")?;
    v["predicted_seconds"]
        .as_f64()
        .context("lbf-gag --json printed no predicted_seconds")
}
