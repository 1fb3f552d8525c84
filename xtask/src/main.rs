//! `cargo xtask`: project chores that are code rather than shell (see `cargo xtask --help`).

use clap::{Parser, Subcommand};

/// Project chores for lbf.
#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {}
}
