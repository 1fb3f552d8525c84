//! Presenting predictions: a readable table, JSON lines for scripts, warnings about the
//! capture's quality, and the predicted schedule as a Perfetto timeline.
//!
//! This module knows the engine's outputs and the trace's summary, nothing of how they were
//! obtained.

mod outcome;
mod timeline;

pub use outcome::{
    add_teardown, gap_lines, json_lines, loss_as_cause, table, warnings, GAPS_LISTED,
};
pub use timeline::Timeline;
