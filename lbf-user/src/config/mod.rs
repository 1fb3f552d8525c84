//! Target configurations from the outside world: TOML target files, named network presets,
//! and the command line's short form for common placements (see `docs/targets.md`).
//!
//! Everything here produces a validated [`Target`](crate::target::Target): every process of
//! the trace on exactly one node, cores and speeds positive, communication tables well formed.
//! This module knows nothing of traces beyond their process count, nor of the engine.

mod cli;
mod file;
mod presets;
mod short;

pub use cli::TargetArgs;
pub use file::{load_target, parse_target};
pub use presets::{preset, NetworkPreset, PRESETS};
pub use short::{short_form, Layout, ShortForm};

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

/// Checks what the engine relies on: every process `0..num_procs` on exactly one node, every
/// node with at least one core and a positive, finite speed. The message names the culprit.
fn validate(target: &Target, num_procs: usize) -> Result<(), String> {
    if !(0.0..=1.0).contains(&target.spin) {
        return Err(format!(
            "spin is {}; it must be between 0 (waiting uses no CPU) and 1 (waiting polls \
             as hard as computing)",
            target.spin
        ));
    }
    let mut home: Vec<Option<usize>> = vec![None; num_procs];
    for (index, node) in target.nodes.iter().enumerate() {
        if node.cores == 0 {
            return Err(format!("node {index} has 0 cores; give it at least 1"));
        }
        if !(node.speed.is_finite() && node.speed > 0.0) {
            return Err(format!(
                "node {index} has speed {}; it must be positive",
                node.speed
            ));
        }
        for &proc in &node.procs {
            let slot = home.get_mut(proc as usize).ok_or_else(|| {
                format!(
                    "node {index} lists process {proc}, but the trace has only {num_procs} \
                     processes (ids 0 to {})",
                    num_procs.saturating_sub(1)
                )
            })?;
            if let Some(other) = slot.replace(index) {
                return Err(format!(
                    "process {proc} is on node {other} and on node {index}; put it on one"
                ));
            }
        }
    }
    let homeless: Vec<String> = (0..num_procs)
        .filter(|&p| home[p].is_none())
        .map(|p| p.to_string())
        .collect();
    if !homeless.is_empty() {
        return Err(format!(
            "process(es) {} are on no node; add them to a node's procs",
            homeless.join(", ")
        ));
    }
    Ok(())
}
