//! `cargo xtask bench`: throughput and memory of the offline pipeline.
//!
//! Runs lbf-model's `throughput` benchmark (release build) in a separate process per
//! measurement, so each peak RSS (VmHWM) is that run's own: the engine on a synthetic
//! 64-process trace with four targets at two lengths (to show memory does not grow with the
//! trace), reading a generated JSONL trace, and the placement search's candidates scored per
//! second on a 1-million-event trace. Prints numbers; asserts nothing.

use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::process::Command;

/// Options of `cargo xtask bench`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Events of the long engine run (the short one has a tenth as many).
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Lines of the generated trace file whose reading is timed.
    #[arg(long, default_value_t = 2_000_000)]
    lines: u64,
    /// Events of the trace whose candidate placements the placement search scores.
    #[arg(long, default_value_t = 1_000_000)]
    advise_events: u64,
}

/// One run's `RESULT` line as key-value pairs.
type Measurement = HashMap<String, String>;

/// Runs the measurements and prints a summary.
pub(crate) fn run(args: &Args) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args([
            "bench",
            "-p",
            "lbf-model",
            "--bench",
            "throughput",
            "--no-run",
        ])
        .status()
        .context("cannot run cargo to build the benchmark")?;
    if !status.success() {
        bail!("building the throughput benchmark failed");
    }
    let short = measure(&cargo, "engine", args.events / 10)?;
    let long = measure(&cargo, "engine", args.events)?;
    let jsonl = measure(&cargo, "jsonl", args.lines)?;
    let advise = measure(&cargo, "advise", args.advise_events)?;

    println!("\nsummary");
    for m in [&short, &long] {
        let rate: f64 = number(m, "events_per_s")?;
        let targets: f64 = number(m, "targets")?;
        println!(
            "  engine {:>10} events: {:6.2} M events/s ({:6.2} M target-events/s; engine only, \
             trace generation not timed), peak RSS {:6.1} MiB",
            m["events"],
            rate / 1e6,
            rate * targets / 1e6,
            number(m, "peak_rss_kib")? / 1024.0
        );
    }
    let growth = number(&long, "peak_rss_kib")? / number(&short, "peak_rss_kib")?;
    println!("  peak RSS, 10x the events: x{growth:.2}");
    println!(
        "  jsonl  {:>10} lines:  {:6.2} M lines/s read, {:6.2} M lines/s written",
        jsonl["lines"],
        number(&jsonl, "read_lines_per_s")? / 1e6,
        number(&jsonl, "write_lines_per_s")? / 1e6
    );
    println!(
        "  advise {:>10} events: {:6.1} candidate placements scored per second (64 processes \
         on 8 hosts, {} per pass)",
        advise["events"],
        number(&advise, "candidates_per_s")?,
        32
    );
    Ok(())
}

/// Runs `throughput KIND COUNT`, echoing its report and returning its `RESULT` line.
fn measure(cargo: &str, kind: &str, count: u64) -> Result<Measurement> {
    let output = Command::new(cargo)
        .args([
            "bench",
            "-q",
            "-p",
            "lbf-model",
            "--bench",
            "throughput",
            "--",
            kind,
        ])
        .arg(count.to_string())
        .output()
        .context("cannot run cargo bench")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "throughput {kind} {count} failed:\n{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut result = None;
    for line in stdout.lines() {
        match line.strip_prefix("RESULT ") {
            Some(pairs) => result = Some(parse_pairs(pairs)),
            None => println!("{line}"),
        }
    }
    result.with_context(|| format!("throughput {kind} {count} printed no RESULT line"))
}

/// `a=1 b=2` as a map.
fn parse_pairs(pairs: &str) -> Measurement {
    pairs
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The numeric value of `key` in `m`.
fn number(m: &Measurement, key: &str) -> Result<f64> {
    m.get(key)
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("the benchmark's RESULT line has no number {key}"))
}
