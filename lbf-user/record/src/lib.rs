//! The recorder: lbf's probes ([`lbf_probe`]) feeding a capture ([`lbf_capture`]), from
//! loading the probes of a source to the events a capture hands its sink. `lbf-trace` and
//! the cluster's node daemon record alike through it.

pub mod capture_sink;
pub mod recorder;
pub mod session;

pub use capture_sink::CaptureSink;
pub use recorder::{Recorder, Scope};
pub use session::{run, run_adopting, CaptureEnd};
