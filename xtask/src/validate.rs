//! `cargo xtask validate`: lbf's accuracy suite on this machine.
//!
//! For each MPI and workload, the same `--np`-rank program runs `--runs` times under
//! `lbf-trace` in each of two configurations: every rank on CPU 0 (a one-core "node") and on
//! CPUs 0-1 (a two-core node). Each trace predicts both configurations. The prediction for
//! the configuration it ran in checks the model; the one for the other configuration is the
//! "what if" the tool is for. Each row compares the median prediction with the median of as
//! many untraced runs of the target configuration (alternated with the traced ones), shows
//! their spread, and the traced runs' time over the untraced (`traced`: what tracing cost
//! that run; with `--span` the traced runs' spans are the reference instead): where the runs themselves
//! spread wider than +-5 %, a prediction inside their range counts as met. The last lines give
//! the median and worst absolute error per library, against the targets of docs/engine.md
//! (median 3 %, worst 8 %).
//!
//! Workloads: the C programs of tests/workloads/mpi (iterations and milliseconds of
//! computation per iteration), its Fortran ones (`fortran_bindings`, `fortran_f77`:
//! iterations), and Debian's `hpcc` (HPC Challenge, Open MPI only, with Debian's example
//! input). Targets use the scheduler-aware node model (time slices of one 4 ms tick): waiting
//! ranks poll, keeping their core (`wait = "spin"`), with MPICH, which polls flat out, and give
//! it up (`wait = "yield"`) with Open MPI, which yields while it polls when it has more ranks
//! than the machine has cores (docs/targets.md). With `--bind` the 2-core runs bind each rank
//! to a core and the 2-core target binds them alike (`bind_to_cores`). Needs root and 2
//! CPUs; prints numbers and asserts nothing. The machine should be otherwise idle (the load
//! average is printed per row).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::cmd::{run_cmd, run_cmd_in};
use crate::stats::median;

/// Options of `cargo xtask validate`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// MPI implementations to run (openmpi, mpich).
    #[arg(long, value_delimiter = ',', default_value = "openmpi,mpich")]
    mpi: Vec<String>,
    /// Workloads: programs of tests/workloads/mpi (C and Fortran), and hpcc.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "halo,ring,master_worker,collectives,fortran_bindings,fortran_f77,hpcc"
    )]
    workloads: Vec<String>,
    /// Traced runs of each workload in each configuration.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Iterations passed to each workload (not hpcc).
    #[arg(long, default_value_t = 40)]
    iters: u32,
    /// Milliseconds of computation per iteration passed to the C workloads.
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
    /// Bind each rank of the 2-core runs to one core, dealt out in turn (Open MPI's
    /// `--bind-to core:overload-allowed --map-by core`, MPICH's `-bind-to core`), and predict
    /// them with `bind_to_cores`: unbound, which ranks share a core changes from run to run.
    #[arg(long)]
    bind: bool,
    /// The directory of the `lbf-trace` and `lbf-gag` to run (another build's
    /// `target/release`, to compare); by default this build's, built first.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// The two configurations: a label, a CPU list for `taskset`, and the target's cores.
const CONFIGS: [(&str, &str, u32); 2] = [("1 core", "0", 1), ("2 cores", "0,1", 2)];

/// Relative spread of the measured runs beyond which a prediction inside their range counts
/// as met.
const SPREAD: f64 = 0.05;

/// The accuracy targets (issue: median and worst absolute error).
const MEDIAN_TARGET: f64 = 0.03;
/// See [`MEDIAN_TARGET`].
const WORST_TARGET: f64 = 0.08;

/// Runs every workload in both configurations and prints the errors.
pub(crate) fn run(root: &Path, args: &Args) -> Result<()> {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        bail!("validate needs 2 CPUs (it compares a 1-core and a 2-core run)");
    }
    let bin = bin_dir(root, &args.bin_dir)?;
    let out = output_dir(root);
    println!(
        "{:<17} {:<8} {:<18} {:>26} {:>10} {:>8}  {:>5}",
        "workload",
        "mpi",
        "trace -> target",
        "measured median [range]",
        "predicted",
        "error",
        "load"
    );
    let mut rows = Vec::new();
    for mpi in &args.mpi {
        let progs = build_workloads(root, mpi)?;
        let wait = if mpi == "mpich" { "spin" } else { "yield" };
        let targets = write_targets(&out, args.np, mpi, wait, args.bind)?;
        for workload in &args.workloads {
            let Some(job) = Job::new(workload, mpi, &progs, args)? else {
                println!("{workload:<17} {mpi:<8} (hpcc is built for Open MPI only)");
                continue;
            };
            // Traces by configuration, what each traced run measured, and the untraced runs'
            // times (alternated with the traced ones): what a prediction is for.
            // Each traced run: its trace, its measured time, and (with --span) the seconds no
            // model predicts, read once.
            let mut traces: Vec<Vec<(PathBuf, f64, f64)>> = Vec::new();
            let mut untraced: Vec<Vec<f64>> = Vec::new();
            for (label, cpus, cores) in CONFIGS {
                let (mut runs, mut plain) = (Vec::new(), Vec::new());
                for i in 0..args.runs {
                    let trace = out.join(format!(
                        "{workload}-{mpi}-{}-{i}.jsonl",
                        label.replace(' ', "")
                    ));
                    job.trace(&bin, cpus, cores, args.np, &trace)?;
                    let untimed = if args.span { untimed(&trace)? } else { 0.0 };
                    runs.push((trace.clone(), measured(&trace)? - untimed, untimed));
                    plain.push(job.untraced(cpus, cores, args.np)?);
                }
                traces.push(runs);
                untraced.push(plain);
            }
            for (from, runs) in traces.iter().enumerate() {
                for (to, target) in targets.iter().enumerate() {
                    let mut predicted = Vec::new();
                    for (trace, _, untimed) in runs {
                        predicted.push(predict(&bin, trace, target)? - untimed);
                    }
                    let traced: Vec<f64> = traces[to].iter().map(|&(_, m, _)| m).collect();
                    let measured = if args.span { &traced } else { &untraced[to] };
                    let overhead = median(&traced) / median(&untraced[to]);
                    let row = Row::new(workload, mpi, from, to, measured, &predicted, overhead);
                    row.print();
                    rows.push(row);
                }
            }
        }
    }
    summarise(&rows);
    Ok(())
}

/// How one workload is run: its command after the launcher, and the folder it runs in.
struct Job {
    mpi: String,
    program: Vec<String>,
    dir: PathBuf,
    /// Whether runs on more than one core bind each rank to one (`--bind`).
    bind: bool,
}

impl Job {
    /// The job of `workload` with `mpi`, whose built programs are in `progs`; `None` for a
    /// combination that does not exist (hpcc with MPICH).
    fn new(workload: &str, mpi: &str, progs: &Path, args: &Args) -> Result<Option<Job>> {
        let (program, dir) = match workload {
            "hpcc" => {
                if mpi != "openmpi" {
                    return Ok(None);
                }
                // Beside the programs' folder (`target/validate/MPI`).
                let dir = progs.parent().unwrap_or(progs).join("hpcc");
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                std::fs::copy(HPCC_INPUT, dir.join("hpccinf.txt")).with_context(|| {
                    format!("copying {HPCC_INPUT} (scripts/setup.sh installs hpcc)")
                })?;
                (vec!["hpcc".to_string()], dir)
            }
            w if w.starts_with("fortran") => (
                vec![progs.join(w).display().to_string(), args.iters.to_string()],
                progs.to_path_buf(),
            ),
            w => (
                vec![
                    progs.join(w).display().to_string(),
                    args.iters.to_string(),
                    args.compute_ms.to_string(),
                ],
                progs.to_path_buf(),
            ),
        };
        Ok(Some(Job {
            mpi: mpi.to_string(),
            program,
            dir,
            bind: args.bind,
        }))
    }

    /// The launcher of `np` ranks on a configuration of `cores`, binding them to its cores
    /// where asked (as [`write_targets`] binds the target).
    fn launcher(&self, cores: u32, np: u32) -> Result<Vec<String>> {
        let mut cmd = launcher(&self.mpi, np, false)?;
        if self.bind && cores > 1 {
            let binding: &[&str] = match self.mpi.as_str() {
                // After launcher()'s `--bind-to none`, which it overrides.
                "openmpi" => &["--bind-to", "core:overload-allowed", "--map-by", "core"],
                _ => &["-bind-to", "core"],
            };
            cmd.extend(binding.iter().map(|s| s.to_string()));
        }
        Ok(cmd)
    }

    /// The wall seconds of one untraced run of `np` ranks on `cpus`.
    fn untraced(&self, cpus: &str, cores: u32, np: u32) -> Result<f64> {
        let mut cmd = vec!["taskset".to_string(), "-c".into(), cpus.into()];
        cmd.extend(self.launcher(cores, np)?);
        cmd.extend(self.program.iter().cloned());
        let start = std::time::Instant::now();
        run_cmd_in(&cmd, &self.dir)?;
        Ok(start.elapsed().as_secs_f64())
    }

    /// One run of `np` ranks on `cpus` under `bin`'s lbf-trace, writing `trace`.
    fn trace(&self, bin: &Path, cpus: &str, cores: u32, np: u32, trace: &Path) -> Result<()> {
        let mut cmd = vec![
            bin.join("lbf-trace").display().to_string(),
            "-o".into(),
            trace.display().to_string(),
            "--".into(),
            "taskset".into(),
            "-c".into(),
            cpus.into(),
        ];
        cmd.extend(self.launcher(cores, np)?);
        cmd.extend(self.program.iter().cloned());
        run_cmd_in(&cmd, &self.dir)?;
        Ok(())
    }
}

/// Debian's example input of hpcc, which it reads from `hpccinf.txt` in its working folder.
const HPCC_INPUT: &str = "/usr/share/doc/hpcc/examples/_hpccinf.txt";

/// One prediction: from the traces of one configuration to another configuration.
struct Row {
    label: String,
    /// Median measured, least and most.
    measured: (f64, f64, f64),
    /// Median predicted.
    predicted: f64,
    /// Relative error of the median prediction against the median measured.
    error: f64,
    /// Whether it meets the targets' rule for one prediction: within [`WORST_TARGET`], or
    /// inside the measured range where that spreads wider than [`SPREAD`].
    inside_spread: bool,
    mpi: String,
    /// The traced runs' median time over the untraced runs' (the target configuration's).
    overhead: f64,
}

impl Row {
    fn new(
        workload: &str,
        mpi: &str,
        from: usize,
        to: usize,
        measured: &[f64],
        predicted: &[f64],
        overhead: f64,
    ) -> Row {
        let m = median(measured);
        let (lo, hi) = (
            measured.iter().copied().fold(f64::INFINITY, f64::min),
            measured.iter().copied().fold(0.0, f64::max),
        );
        let p = median(predicted);
        let spread = (hi - lo) / m / 2.0;
        Row {
            label: format!(
                "{workload:<17} {mpi:<8} {:<18}",
                format!("{} -> {}", CONFIGS[from].0, CONFIGS[to].0)
            ),
            measured: (m, lo, hi),
            predicted: p,
            error: (p - m) / m,
            inside_spread: spread > SPREAD && (lo..=hi).contains(&p),
            mpi: mpi.to_string(),
            overhead,
        }
    }

    fn print(&self) {
        let (m, lo, hi) = self.measured;
        println!(
            "{} {:>9.3} s [{:.3}-{:.3}] {:>8.3} s {:>+7.1}%{} {:>7.2}x  {:>5}",
            self.label,
            m,
            lo,
            hi,
            self.predicted,
            100.0 * self.error,
            if self.inside_spread { "*" } else { " " },
            self.overhead,
            load_average()
        );
    }

    /// The error the targets count: 0 for a prediction inside a wide measured range.
    fn counted_error(&self) -> f64 {
        if self.inside_spread {
            0.0
        } else {
            self.error.abs()
        }
    }
}

/// Prints the median and worst counted error per library, against the targets.
fn summarise(rows: &[Row]) {
    println!("(* inside the range of measured runs that spread wider than +-5 %: counted as 0)");
    let mut mpis: Vec<&str> = rows.iter().map(|r| r.mpi.as_str()).collect();
    mpis.dedup();
    for mpi in mpis {
        let errors: Vec<f64> = rows
            .iter()
            .filter(|r| r.mpi == mpi)
            .map(Row::counted_error)
            .collect();
        let worst = errors.iter().copied().fold(0.0, f64::max);
        let med = median(&errors);
        println!(
            "{mpi}: {} predictions, median |error| {:.1} % (target {:.0} %), worst {:.1} % \
             (target {:.0} %): {}",
            errors.len(),
            100.0 * med,
            100.0 * MEDIAN_TARGET,
            100.0 * worst,
            100.0 * WORST_TARGET,
            if med <= MEDIAN_TARGET && worst <= WORST_TARGET {
                "met"
            } else {
                "not met"
            }
        );
    }
}

/// Writes one target file per configuration for `np` processes of `mpi`, under the
/// scheduler-aware model with waiting ranks doing what `wait` says; returns their paths, in
/// [`CONFIGS`] order.
fn write_targets(dir: &Path, np: u32, mpi: &str, wait: &str, bind: bool) -> Result<Vec<PathBuf>> {
    let procs: Vec<u32> = (0..np).collect();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    CONFIGS
        .iter()
        .map(|&(label, _, cores)| {
            let path = dir.join(format!("{}-{mpi}.toml", label.replace(' ', "")));
            let bound = bind && cores > 1;
            let text = format!(
                "name = \"{label} {wait}{}\"\nbind_to_cores = {bound}\n\
                 [scheduler]\nwait = \"{wait}\"\n[[node]]\nprocs = {procs:?}\ncores = {cores}\n",
                if bound { " bound" } else { "" }
            );
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        })
        .collect()
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
