//! `cargo xtask`: project chores that are code rather than shell (see `cargo xtask --help`).

mod bench;
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
    /// Measure engine and trace-reading throughput and peak memory (release build).
    Bench(bench::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench::run(&args),
    }
}
