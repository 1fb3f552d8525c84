//! Runs a command with lbf's empty uprobe + uretprobe on some functions of an object file: the
//! baseline of `cargo xtask bench-probe` (what a bare uprobe pair costs per call, without
//! lbf's own kernel-side work). Needs root.
//!
//! Usage: `empty_probe OBJECT_FILE FUNCTION[,FUNCTION...] -- CMD [ARGS...]`; exits with the
//! command's exit status.

use std::{path::Path, process::Command};

use anyhow::{bail, Context, Result};
use lbf::probe::EmptyProbes;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(object), Some(functions), Some("--")) =
        (args.first(), args.get(1), args.get(2).map(String::as_str))
    else {
        bail!("usage: empty_probe OBJECT_FILE FUNCTION[,FUNCTION...] -- CMD [ARGS...]");
    };
    let Some((program, rest)) = args[3..].split_first() else {
        bail!("empty_probe: no command after `--`");
    };
    let functions: Vec<&str> = functions.split(',').collect();
    let _probes = EmptyProbes::attach(Path::new(object), &functions)?;
    let status = Command::new(program)
        .args(rest)
        .status()
        .with_context(|| format!("running {program}"))?;
    std::process::exit(status.code().unwrap_or(1));
}
