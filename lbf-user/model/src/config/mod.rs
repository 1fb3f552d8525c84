//! Target configurations from the outside world: TOML target files, named network presets,
//! and the command line's short form for common placements (see `docs/targets.md`).
//!
//! Everything here produces a validated [`Target`]: every process of
//! the trace on exactly one node, cores and speeds positive, communication tables well formed.
//! This module knows nothing of traces beyond their process count, nor of the engine.

mod cli;
mod cluster;
mod file;
mod presets;
mod procedures;
mod short;
mod table;

pub use cli::{parse_preset, TargetArgs};
pub use cluster::{load_cluster, parse_cluster, Cluster, Host, Segment};
pub use file::{load_target, load_target_on, parse_target, parse_target_on, procs_placed};
pub use presets::{preset, NetworkPreset, PRESETS};
pub use procedures::{as_run, parse_speedup, ProcedureArgs};
pub use short::{short_form, Layout, ShortForm};
pub use table::MAX_TABLE_POINTS;

use crate::target::Target;
use std::fmt;

/// Why a target could not be built, and from what (a file path, or the command line option).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigError {
    /// Where the bad configuration came from, such as `targets/two.toml` or `--nodes`.
    pub source: String,
    /// What is wrong and what to do about it.
    pub message: String,
}

impl ConfigError {
    fn new(source: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            source: source.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Checks what the engine relies on ([`Target::placement`]), worded for a person editing a
/// target file or a command line.
fn validate(target: &Target, num_procs: usize) -> Result<(), String> {
    target
        .placement(num_procs)
        .map(drop)
        .map_err(|e| e.to_string())
}
