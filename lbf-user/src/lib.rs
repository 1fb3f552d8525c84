//! lbf: what-if performance prediction for unmodified distributed programs.
//!
//! Data flows one way through the modules of this crate:
//!
//! ```text
//! probe (eBPF load/attach, raw records) -> capture (matching, CPU accounting) -> event
//!     -> engine (online GAG, LBF/NF per target) -> report (table, JSON, timeline)
//! ```
//!
//! [`trace`] reads and writes the same [`event`]s to files, so the engine can replay a capture
//! offline. The engine knows nothing of eBPF, MPI or files.

pub use lbf_calibrate as calibrate;
pub use lbf_capture as capture;
pub use lbf_cluster as net;
pub use lbf_probe as probe;
pub use lbf_record as record;

pub use lbf_model::{
    advise, config, engine, event, live as predict_live, procedure, report, sink, source, startup,
    stream, target, trace,
};
