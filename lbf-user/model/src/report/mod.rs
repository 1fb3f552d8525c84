//! Presenting predictions: a readable table, JSON lines for scripts, warnings about the
//! capture's quality, the predicted schedule as a Perfetto timeline, and the critical path's
//! profile.
//!
//! This module knows the engine's outputs and the trace's summary, nothing of how they were
//! obtained.

pub mod critical_path;
mod outcome;
mod timeline;

pub use outcome::{
    add_teardown, gap_lines, json_lines, loss_as_cause, table, warnings, GAPS_LISTED,
};
pub use timeline::Timeline;
