//! Running the commands that chores are made of.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Command, Output};

/// Runs `cmd` (program and arguments) to completion; fails, with its output, unless it
/// succeeded.
pub(crate) fn run_cmd(cmd: &[String]) -> Result<Output> {
    run_cmd_in(cmd, Path::new("."))
}

/// [`run_cmd`] in the folder `dir`.
pub(crate) fn run_cmd_in(cmd: &[String], dir: &Path) -> Result<Output> {
    let (program, args) = cmd.split_first().context("an empty command")?;
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .with_context(|| {
            format!("cannot run {program} (scripts/setup.sh installs what is needed)")
        })?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}):\n{}{}",
            cmd.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}
