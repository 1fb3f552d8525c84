//! `cargo xtask bench-probe`: what tracing costs the traced MPI program, measured with MPICH.
//!
//! 1. Per call: `tests/workloads/probe/call_loop.c` times a loop of `MPI_Comm_rank` calls
//!    (its first instruction, `push`, is one the kernel emulates) untraced, under `lbf-trace`,
//!    and under lbf's empty uprobe + uretprobe attached the same way (the `empty_probe`
//!    example). (traced - untraced) / calls is lbf's cost per call; the same for the empty pair
//!    is the bare cost of the two probes. lbf's `MPI_Comm_rank` calls skip their return probe
//!    (`lbf_common::mpi::return_optional`), so lbf-trace pays one trap per call against the
//!    pair's two. One more run of each probed configuration with the kernel's eBPF statistics
//!    on gives the programs' own run time per call, which other load does not inflate.
//!    The halo exchange pattern alone (the call loop's `halo` mode) the same way, and under
//!    `lbf-trace --all-returns`: its probe hits per call (`lbf-trace -v`).
//! 2. Whole runs: communication-heavy (`ring`'s `MPI_Send`/`MPI_Recv` phase and `pingpong`,
//!    without compute) and compute-heavy (`halo`) workloads of `tests/workloads/mpi`, traced
//!    versus untraced, by their own
//!    reported wall time (`wall_ns`, from before `MPI_Init` to after `MPI_Finalize`), so the
//!    tracer's own start and end are not counted; those are printed separately. Each also
//!    runs under the empty uprobe + uretprobe on every function lbf probes: its slowdown is
//!    what the uprobe mechanism alone costs the workload, whatever a tracer does in it (`ring`
//!    without compute makes an MPI call every few microseconds, so even empty probes slow it
//!    down by a large factor). Also under `lbf-trace --all-returns`, and the probe hits per
//!    MPI call of both traced runs. For the communication-heavy ones, one more traced run with the
//!    kernel's statistics gives lbf's programs' time per call: above the one-rank loop's, it is
//!    what two ranks on two CPUs cost each other's probes (each CPU has a ring buffer of its
//!    own; before that, their contention for one ring's lock showed here).
//!
//! 3. Polling: the call loop of `MPI_Test` calls that find nothing (a progress loop), timed the
//!    same three ways, and the records lbf writes per call, counted in a raw dump of one
//!    traced run: an unsuccessful poll writes none (the kernel side counts it in the thread's
//!    run of polls, one record per run).
//! 4. A traced procedure: the call loop of a function of the program doing almost nothing
//!    (`lbf_hot`), untraced and under `lbf-trace --procedure lbf_hot`: what a procedure's
//!    probe pair costs per call, and so how often a procedure may be called before it costs a
//!    process 3 % of its time.
//!
//! 4. Fixed cost: an MPI program that only starts and ends, 4 ranks, with each library,
//!    untraced and under `lbf-trace` as users run it (`fixed_cost`).
//!
//! Each configuration runs `--runs` times, interleaved, and the fastest run counts: other
//! load on the machine only ever adds time. Needs root.
//! Prints numbers; asserts nothing.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, Context, Result};
use lbf_common::mpi;

use crate::cmd::run_cmd;

mod bpf_stats;
mod fixed_cost;

/// Options of `cargo xtask bench-probe`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// MPI_Comm_rank calls per run of the per-call loop.
    #[arg(long, default_value_t = 200_000)]
    calls: u64,
    /// Runs of each configuration (the fastest counts).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

/// The MPICH library the workloads link against (Debian's path).
const LIBMPICH: &str = "/usr/lib/x86_64-linux-gnu/libmpich.so.12";

/// Binaries the benchmark runs.
struct Tools {
    lbf_trace: PathBuf,
    empty_probe: PathBuf,
    call_loop: PathBuf,
    workloads: PathBuf,
    /// The empty MPI program, built by each library.
    empty_mpi: Vec<(&'static str, PathBuf)>,
}

/// Builds everything, runs the measurements and prints the results.
pub(crate) fn run(root: &Path, args: &Args) -> Result<()> {
    if !Path::new(LIBMPICH).exists() {
        bail!("{LIBMPICH} not found: install MPICH (scripts/setup.sh)");
    }
    let tools = build(root)?;
    let runs = args.runs.max(1);

    println!(
        "per-call cost: {} MPI_Comm_rank calls, {runs} runs each",
        args.calls
    );
    let loop_cmd = |prefix: Vec<String>| loop_command(&tools, prefix, args.calls, "rank");
    let configs = loop_configs(&tools, "PMPI_Comm_rank", &loop_cmd);
    let best = fastest_loops(&configs, runs)?;
    let n = args.calls as f64;
    for ((name, _), m) in configs.iter().zip(&best) {
        println!("  {name:<24} {:9.1} ns per call", m / n);
    }
    let empty = (best[1] - best[0]) / n;
    let lbf = (best[2] - best[0]) / n;
    println!("  added by an empty uprobe+uretprobe: {empty:8.1} ns per call");
    println!("  added by lbf-trace:                 {lbf:8.1} ns per call");
    println!(
        "  lbf / empty: {:.3} ({:+.1} % of an empty probe pair's cost; target: within 20 %)",
        lbf / empty,
        (lbf / empty - 1.0) * 100.0
    );
    // What that means for a whole run: the probes' time is 3 % of a rank's once it makes a
    // call every lbf / 0.03 ns (the reader's CPU, where no core is free for it, comes on top).
    println!(
        "  so the probes stay under 3 % of a rank's time while it makes at most {:.0} MPI \
         calls a second (one every {:.1} µs)",
        0.03e9 / lbf,
        lbf / 0.03 / 1e3
    );
    // The programs alone, by the kernel's statistics (one more run of each, statistics on).
    // lbf's MPI_Comm_rank calls skip their return: one program run per call, not two.
    let mut per_call = Vec::new();
    for (name, cmd) in &configs[1..] {
        let (ns, runs, hits) = program_time_per_call(cmd, args.calls / 2)?;
        println!(
            "  {name:<24} eBPF programs ran {ns:6.1} ns per call ({runs} runs, {hits:.3} per call)"
        );
        per_call.push(ns);
    }
    println!(
        "  lbf's programs take {:+.1} ns per call against the empty pair's ({:+.1} % of the \
         empty pair's whole added cost above)",
        per_call[1] - per_call[0],
        (per_call[1] - per_call[0]) / empty * 100.0
    );

    user_space_cost(&tools, loop_cmd(vec![]), runs)?;
    halo_exchange(&tools, args.calls, runs)?;
    polling(&tools, args.calls, runs)?;
    procedure(&tools, args.calls, runs, empty)?;

    println!(
        "\nwhole runs (2 ranks; wall time reported by the ranks), {runs} runs each; \"empty\": \
         the empty uprobe+uretprobe on all {} functions lbf probes",
        mpi::NAMES.len()
    );
    let all_functions = mpi::NAMES
        .iter()
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(",");
    // The probe programs' runs per workload are in the tens of thousands (halo's are fewer:
    // its programs' time is not sampled); any other program of lbf's runs a few hundred times.
    let workloads = [
        // The ring's Send/Recv phase only (no `MPI_Sendrecv` shifts).
        ("ring 20000 0 0", "communication-heavy", Some(20_000)),
        ("pingpong 500 0", "communication-heavy", Some(2_000)),
        ("halo 10 50", "compute-heavy", None),
    ];
    for (workload, kind, min_runs) in workloads {
        let mut words = workload.split_whitespace();
        let exe = tools.workloads.join(words.next().expect("a workload name"));
        let mut cmd: Vec<String> = ["mpirun.mpich", "-n", "2"].map(String::from).to_vec();
        cmd.push(exe.display().to_string());
        cmd.extend(words.map(String::from));
        let prefixed = |mut prefix: Vec<String>| {
            prefix.extend(cmd.iter().cloned());
            prefix
        };
        let mut all_returns = lbf_trace_prefix(&tools);
        all_returns.insert(1, "--all-returns".into());
        let configs = [
            cmd.clone(),
            prefixed(empty_probe_prefix(&tools, &all_functions)),
            prefixed(lbf_trace_prefix(&tools)),
            prefixed(all_returns),
        ];
        let (mut wall, mut total) = (vec![Vec::new(); 4], vec![Vec::new(); 4]);
        let mut hits = [0.0; 4];
        for _ in 0..runs {
            for (i, cmd) in configs.iter().enumerate() {
                let start = Instant::now();
                let out = run_cmd(cmd)?;
                total[i].push(start.elapsed().as_secs_f64());
                wall[i].push(max_field(&out.stdout, "LBF-CHECK", "wall_ns")? / 1e9);
                if i >= 2 {
                    hits[i] = hits_per_call(&out.stderr)?;
                }
            }
        }
        let [p, e, t, a] = [0, 1, 2, 3].map(|i| fastest(&wall[i]));
        println!(
            "  {workload:<16} ({kind}): untraced {p:7.3} s, empty {e:7.3} s (x{:.4}), traced \
             {t:7.3} s: slowdown x{:.4} ({:+.2} %; target: under 3 %), x{:.4} of the empty \
             probes' run; whole command incl. lbf-trace start and end: {:.2} s vs {:.2} s",
            e / p,
            t / p,
            (t / p - 1.0) * 100.0,
            t / e,
            fastest(&total[2]),
            fastest(&total[0])
        );
        println!(
            "    probe hits per MPI call: {:.3} (returns as needed), {:.3} with every return \
             (lbf-trace --all-returns: {a:7.3} s, x{:.4}; the empty probes: 2 per call, x{:.4})",
            hits[2],
            hits[3],
            a / p,
            e / p
        );
        // The programs' time per call with two ranks on two CPUs against the one-rank loop's:
        // what the ranks cost each other's probes.
        if let Some(min_runs) = min_runs {
            let (ns, runs, _) = program_time_per_call(&configs[2], min_runs)?;
            println!(
                "    lbf's eBPF programs ran {ns:.1} ns per call here ({runs} runs; {:.1} on the \
                 one-rank call loop above)",
                per_call[1]
            );
        }
    }
    println!(
        "  (the empty probes' slowdown is what the uprobe mechanism alone costs a workload, \
         {empty:.0} ns per probed call here: no uprobe-based tracer does better; lbf's own \
         share is its ratio to the empty probes' run)"
    );
    fixed_cost::measure(&tools.lbf_trace, &tools.empty_mpi, runs)?;
    Ok(())
}

/// `mpirun.mpich -n 1 call_loop CALLS MODE` after `prefix`.
fn loop_command(tools: &Tools, prefix: Vec<String>, calls: u64, mode: &str) -> Vec<String> {
    let mut cmd = prefix;
    cmd.extend(["mpirun.mpich", "-n", "1"].map(String::from));
    cmd.push(tools.call_loop.display().to_string());
    cmd.extend([calls.to_string(), mode.to_string()]);
    cmd
}

/// The call loop `loop_cmd` untraced, under the empty probe pair on `symbol`, and under
/// lbf-trace.
fn loop_configs(
    tools: &Tools,
    symbol: &str,
    loop_cmd: &dyn Fn(Vec<String>) -> Vec<String>,
) -> [(&'static str, Vec<String>); 3] {
    [
        ("untraced", loop_cmd(vec![])),
        (
            "empty uprobe+uretprobe",
            loop_cmd(empty_probe_prefix(tools, symbol)),
        ),
        ("lbf-trace", loop_cmd(lbf_trace_prefix(tools))),
    ]
}

/// The eBPF programs' run time per MPI call of `cmd` (one run, the kernel's statistics on,
/// programs that ran `min_runs` times or more), their runs, and the probe hits per call: 2
/// for the empty probes (an entry and a return program each call), as `lbf-trace -v` reports
/// for lbf's (whose calls skip the returns they do not need).
fn program_time_per_call(cmd: &[String], min_runs: u64) -> Result<(f64, u64, f64)> {
    let (out, ns, runs) = bpf_stats::program_run_time(cmd, min_runs)?;
    let hits = if String::from_utf8_lossy(&out.stderr).contains(HITS) {
        hits_per_call(&out.stderr)?
    } else {
        2.0
    };
    Ok((ns as f64 / (runs as f64 / hits), runs, hits))
}

/// What `lbf-trace -v` prints after the probe hits per call.
const HITS: &str = " probe hits per call";

/// The probe hits per MPI call `lbf-trace -v` reported on `stderr`.
fn hits_per_call(stderr: &[u8]) -> Result<f64> {
    String::from_utf8_lossy(stderr)
        .lines()
        .find_map(|l| l.split_once(HITS)?.0.rsplit(' ').next()?.parse().ok())
        .context("lbf-trace -v reported no probe hits per call")
}

/// The fastest loop time (`LBF_LOOP ns=`) of each of `configs` over `runs` interleaved runs.
fn fastest_loops(configs: &[(&str, Vec<String>)], runs: usize) -> Result<Vec<f64>> {
    let mut loop_ns = vec![Vec::new(); configs.len()];
    for _ in 0..runs {
        for (i, (_, cmd)) in configs.iter().enumerate() {
            let out = run_cmd(cmd)?;
            loop_ns[i].push(field(&out.stdout, "LBF_LOOP", "ns")?);
        }
    }
    Ok(loop_ns.iter().map(|v| fastest(v)).collect())
}

/// The halo exchange pattern alone: the call loop's `halo` mode (a rank exchanging with itself:
/// `MPI_Irecv` twice, `MPI_Isend` twice, `MPI_Waitall`), untraced, under the empty probe pair
/// on the three functions, under lbf-trace (the nonblocking calls skip their return) and
/// under `lbf-trace --all-returns`: the cost per call and the probe hits per call.
fn halo_exchange(tools: &Tools, calls: u64, runs: usize) -> Result<()> {
    println!(
        "\nhalo exchange: {calls} calls (MPI_Irecv x2, MPI_Isend x2, MPI_Waitall), {runs} runs each"
    );
    let loop_cmd = |prefix: Vec<String>| loop_command(tools, prefix, calls, "halo");
    let mut configs = loop_configs(tools, "PMPI_Irecv,PMPI_Isend,PMPI_Waitall", &loop_cmd).to_vec();
    let mut all_returns = lbf_trace_prefix(tools);
    all_returns.insert(1, "--all-returns".into());
    configs.push(("lbf-trace --all-returns", loop_cmd(all_returns)));
    let best = fastest_loops(&configs, runs)?;
    let n = calls as f64;
    for ((name, _), m) in configs.iter().zip(&best) {
        println!(
            "  {name:<24} {:9.1} ns per call (x{:.3} untraced)",
            m / n,
            m / best[0]
        );
    }
    let mut hits = Vec::new();
    for (_, cmd) in &configs[2..] {
        hits.push(hits_per_call(&run_cmd(cmd)?.stderr)?);
    }
    println!(
        "  probe hits per call: {:.3} (returns as needed; target: at most 1.25), {:.3} with \
         every return; lbf-trace's slowdown is x{:.3} that of the empty entry+return pair",
        hits[0],
        hits[1],
        (best[2] - best[0]) / (best[1] - best[0])
    );
    Ok(())
}

/// A progress loop: `MPI_Test` calls that find nothing. Each writes no record of its own (the
/// kernel side counts it in the thread's run of polls); prints the records written per call
/// (from a raw dump of one traced run) and the cost per call against the empty probe pair's.
fn polling(tools: &Tools, calls: u64, runs: usize) -> Result<()> {
    println!(
        "
polling: {calls} MPI_Test calls finding nothing, {runs} runs each"
    );
    let loop_cmd = |prefix: Vec<String>| loop_command(tools, prefix, calls, "test");
    let configs = loop_configs(tools, "PMPI_Test", &loop_cmd);
    let best = fastest_loops(&configs, runs)?;
    let n = calls as f64;
    for ((name, _), m) in configs.iter().zip(&best) {
        println!("  {name:<24} {:9.1} ns per call", m / n);
    }
    let (empty, lbf) = ((best[1] - best[0]) / n, (best[2] - best[0]) / n);
    println!(
        "  added by an empty uprobe+uretprobe: {empty:8.1} ns per call; by lbf-trace: \
         {lbf:8.1} ns per call (x{:.3})",
        lbf / empty
    );
    let dump = std::env::temp_dir().join(format!("lbf-bench-poll-{}.jsonl", std::process::id()));
    let mut cmd = vec![
        tools.lbf_trace.display().to_string(),
        "--raw-dump".into(),
        dump.display().to_string(),
    ];
    cmd.extend(lbf_trace_prefix(tools).into_iter().skip(1));
    run_cmd(&loop_command(tools, cmd, calls, "test"))?;
    let text = std::fs::read_to_string(&dump)
        .with_context(|| format!("reading the raw dump {}", dump.display()))?;
    let _ = std::fs::remove_file(&dump);
    let records = text
        .lines()
        .filter(|l| l.contains(r#""fn":"PMPI_Test""#) || l.contains(r#""kind":"Polls""#))
        .count();
    println!(
        "  records written per MPI_Test call: {:.5} ({records} records for {calls} calls; \
         target: under 0.01)",
        records as f64 / n
    );
    Ok(())
}

/// lbf-trace's user space per record: the CPU it used while capturing `command` into a trace
/// file (`-v` reports it, all its threads), over the records read; the least of `runs` runs.
fn user_space_cost(tools: &Tools, command: Vec<String>, runs: usize) -> Result<()> {
    let trace = std::env::temp_dir().join(format!("lbf-bench-probe-{}.jsonl", std::process::id()));
    // The prefix's `-v` reports it.
    let mut cmd = vec![tools.lbf_trace.display().to_string(), "-o".into()];
    cmd.push(trace.display().to_string());
    cmd.extend(lbf_trace_prefix(tools).into_iter().skip(1));
    cmd.extend(command);
    let mut per_record = Vec::new();
    for _ in 0..runs {
        let out = run_cmd(&cmd)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ns = stderr
            .lines()
            .filter_map(|l| l.strip_suffix(" ns per record)"))
            .filter_map(|l| l.rsplit('(').next()?.trim().parse::<f64>().ok())
            .next()
            .with_context(|| format!("lbf-trace -v reported no cost per record:\n{stderr}"))?;
        per_record.push(ns);
    }
    let _ = std::fs::remove_file(&trace);
    println!(
        "  lbf-trace's user space, capturing to a trace file: {:.0} ns of CPU per record \
         (least of {runs} runs; a call is an entry and an exit record)",
        fastest(&per_record)
    );
    Ok(())
}

/// A traced procedure called in a loop (`lbf-trace --procedure lbf_hot`): the cost its probe
/// pair adds per call, against the empty pair's on an MPI function (`empty`, ns per call),
/// and how often a procedure may be called before its probes cost 3 % of a process's time.
fn procedure(tools: &Tools, calls: u64, runs: usize, empty: f64) -> Result<()> {
    println!(
        "\ntraced procedure: {calls} calls of a function doing almost nothing, {runs} runs each"
    );
    let mut traced = lbf_trace_prefix(tools);
    traced.splice(1..1, ["--procedure".to_string(), "lbf_hot".to_string()]);
    let configs = [
        ("untraced", loop_command(tools, vec![], calls, "proc")),
        (
            "--procedure lbf_hot",
            loop_command(tools, traced, calls, "proc"),
        ),
    ];
    let best = fastest_loops(&configs, runs)?;
    let n = calls as f64;
    let added = (best[1] - best[0]) / n;
    println!(
        "  added by its probes: {added:8.1} ns per call ({:.2} x an empty uprobe+uretprobe \
         pair's {empty:.1} ns)",
        added / empty
    );
    println!(
        "  so they stay under 3 % of a process's time while it calls the procedure at most \
         {:.0} times a second (once every {:.1} µs)",
        0.03e9 / added,
        added / 0.03 / 1e3
    );
    Ok(())
}

/// `empty_probe LIBMPICH FUNCTIONS --`: the command prefix of a run under the empty uprobe +
/// uretprobe on `functions` (comma-separated).
fn empty_probe_prefix(tools: &Tools, functions: &str) -> Vec<String> {
    vec![
        tools.empty_probe.display().to_string(),
        LIBMPICH.into(),
        functions.into(),
        "--".into(),
    ]
}

/// `lbf-trace -v --mpi-lib LIBMPICH --`: the command prefix of a traced run (`-v` reports the
/// probe hits per call).
fn lbf_trace_prefix(tools: &Tools) -> Vec<String> {
    vec![
        tools.lbf_trace.display().to_string(),
        "-v".into(),
        "--mpi-lib".into(),
        LIBMPICH.into(),
        "--".into(),
    ]
}

/// Builds lbf-trace and the empty-probe runner (release), `call_loop` and the MPI workloads.
fn build(root: &Path) -> Result<Tools> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .current_dir(root)
        .args(["build", "--release", "-p", "lbf-user", "--bin", "lbf-trace"])
        .args(["--example", "empty_probe"])
        .status()
        .context("cannot run cargo to build lbf-trace and the empty_probe example")?;
    if !status.success() {
        bail!("building lbf-trace and the empty_probe example failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let out = target.join("bench-probe");
    let call_loop = out.join("call_loop");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    run_cmd(&[
        "mpicc.mpich".into(),
        "-O2".into(),
        "-o".into(),
        call_loop.display().to_string(),
        root.join("tests/workloads/probe/call_loop.c")
            .display()
            .to_string(),
    ])?;
    let workloads = out.join("mpi");
    run_cmd(&[
        "bash".into(),
        root.join("tests/workloads/mpi/build.sh")
            .display()
            .to_string(),
        "mpich".into(),
        workloads.display().to_string(),
    ])?;
    Ok(Tools {
        lbf_trace: target.join("release/lbf-trace"),
        empty_probe: target.join("release/examples/empty_probe"),
        call_loop,
        workloads,
        empty_mpi: fixed_cost::build(root, &out)?,
    })
}

/// The numeric `key=` field of the output line starting with `tag` (the first such line).
fn field(stdout: &[u8], tag: &str, key: &str) -> Result<f64> {
    values(stdout, tag, key)?
        .into_iter()
        .next()
        .with_context(|| format!("no {tag} line in the output"))
}

/// The largest `key=` value over the output lines starting with `tag` (one per rank).
fn max_field(stdout: &[u8], tag: &str, key: &str) -> Result<f64> {
    values(stdout, tag, key)?
        .into_iter()
        .reduce(f64::max)
        .with_context(|| format!("no {tag} line in the output"))
}

/// The `key=` values of the output lines starting with `tag`.
fn values(stdout: &[u8], tag: &str, key: &str) -> Result<Vec<f64>> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| l.starts_with(tag))
        .map(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("no number {key}= in `{l}`"))
        })
        .collect()
}

/// The smallest of `v`; NaN if empty.
fn fastest(v: &[f64]) -> f64 {
    v.iter().copied().reduce(f64::min).unwrap_or(f64::NAN)
}
