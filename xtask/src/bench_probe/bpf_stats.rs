//! The kernel's own run-time statistics of eBPF programs (`kernel.bpf_stats_enabled`): the
//! nanoseconds the programs of a process ran, per hit. Unlike wall-clock timings they do not
//! grow with other load on the machine, and they leave out the uprobe trap itself.

use std::{
    fs,
    process::{Command, Output, Stdio},
    thread,
    time::Duration,
};

use anyhow::{bail, Context, Result};

/// The switch that makes the kernel count each program's runs and run time.
const SWITCH: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// `(run_time_ns, run_cnt)` summed over the eBPF programs that `cmd`'s first process holds
/// and that ran at least `min_runs` times, sampled every 20 ms while it runs (the counts
/// vanish with the process), with statistics on for the run only. Also `cmd`'s output.
pub(super) fn program_run_time(cmd: &[String], min_runs: u64) -> Result<(Output, u64, u64)> {
    fs::write(SWITCH, "1").with_context(|| format!("writing 1 to {SWITCH} (needs root)"))?;
    let result = sample(cmd, min_runs);
    fs::write(SWITCH, "0").with_context(|| format!("writing 0 to {SWITCH}"))?;
    result
}

/// Runs `cmd`, keeping the last per-program counts of its process seen before it ended.
fn sample(cmd: &[String], min_runs: u64) -> Result<(Output, u64, u64)> {
    let (program, args) = cmd.split_first().context("an empty command")?;
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {program}"))?;
    let fdinfo = format!("/proc/{}/fdinfo", child.id());
    let mut last = (0, 0);
    while child.try_wait()?.is_none() {
        let now = programs(&fdinfo, min_runs);
        if now.1 >= last.1 {
            last = now;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}):\n{}",
            cmd.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((out, last.0, last.1))
}

/// Sums `run_time_ns` and `run_cnt` over the program fds in `fdinfo` that ran `min_runs`
/// times or more; (0, 0) if the process is gone.
fn programs(fdinfo: &str, min_runs: u64) -> (u64, u64) {
    let Ok(dir) = fs::read_dir(fdinfo) else {
        return (0, 0);
    };
    let mut sum = (0, 0);
    for entry in dir.flatten() {
        let Ok(text) = fs::read_to_string(entry.path()) else {
            continue;
        };
        let value = |key: &str| -> Option<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        };
        if let (Some(ns), Some(cnt)) = (value("run_time_ns:"), value("run_cnt:")) {
            if cnt >= min_runs {
                sum = (sum.0 + ns, sum.1 + cnt);
            }
        }
    }
    sum
}
