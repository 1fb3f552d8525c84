//! `cargo xtask`: project chores that are code rather than shell (see `cargo xtask --help`).

mod bench;
mod bench_cluster;
mod bench_probe;
mod cmd;
mod engine_diff;
mod stats;
mod validate;
mod validate_nf;

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::{Parser, Subcommand};

/// Project chores for lbf.
#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the eBPF object (lbf-ebpf, release, nightly + bpf-linker) and print its path.
    /// lbf-user's build does the same and embeds the object; this is for building it alone.
    BuildEbpf,
    /// Measure engine and trace-reading throughput and peak memory (release build).
    Bench(bench::Args),
    /// Measure what tracing costs an MPI program: per call (against an empty uprobe pair) and
    /// over whole runs (release build, MPICH, root).
    BenchProbe(bench_probe::Args),
    /// Trace 4-rank MPI programs on one CPU and on two, predict each configuration from each
    /// run, and print the errors against the measured times (release build, root, 2 CPUs).
    Validate(validate::Args),
    /// Trace the rendezvous MPI workload over a fast loopback, predict it on a rate-limited
    /// one with that link's ping-pong table (NF), and print the errors against a run there
    /// (release build, root).
    ValidateNf(validate_nf::Args),
    /// Measure cluster mode end to end: events/s from several lbf-node daemons into one
    /// lbf-gag serve on loopback (TLS, journal, acks), and the builder's peak RSS.
    BenchCluster(bench_cluster::Args),
    /// Compare two builds' `lbf-gag predict` on random traces and targets, to the last bit:
    /// for engine changes that must not change any prediction.
    EngineDiff(engine_diff::Args),
}

/// The workspace root (xtask lives one level below it).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::BuildEbpf => {
            let object = lbf_build::build(&workspace_root()).map_err(|e| anyhow!(e))?;
            println!("{}", object.display());
        }
        Command::Bench(args) => bench::run(&args)?,
        Command::BenchProbe(args) => bench_probe::run(&workspace_root(), &args)?,
        Command::Validate(args) => validate::run(&workspace_root(), &args)?,
        Command::ValidateNf(args) => validate_nf::run(&workspace_root(), &args)?,
        Command::BenchCluster(args) => bench_cluster::run(&workspace_root(), &args)?,
        Command::EngineDiff(args) => engine_diff::run(&args)?,
    }
    Ok(())
}
