//! lbf's cluster mode: node daemons (`lbf-node`) capture or replay their host's processes and
//! stream events over TLS to one central GAG builder (`lbf-gag serve`), which matches them
//! across hosts and runs the engine online. See `docs/cluster.md`.
//!
//! ```text
//! source (capture | replay) -> node (spool, resend) ==TLS==> builder (journal, ack)
//!     -> apply (streams: connections between hosts; engine, merged trace)
//!     -> status -> http (/results, /nodes, /metrics)
//! ```
//!
//! [`calibration`] uses the same connections the other way round: a coordinator (`lbf-gag
//! calibrate`) orders agents on every host to measure their CPU and the network between them.
//!
//! The wire format is `proto/lbf.proto` ([`lbf_proto`]); [`wire`] packs events into it.
//!
//! The builder needs only the model and the captures' matchers (`lbf-capture`); a node that
//! captures live processes (`live`, `privileges`) needs the recorder and its eBPF probes,
//! behind the feature `live`. A node that replays traces needs neither.

pub mod apply;
pub mod builder;
pub mod calibration;
pub mod framefile;
pub mod http;
pub mod journal;
#[cfg(feature = "live")]
pub mod live;
pub mod node;
#[cfg(feature = "live")]
pub mod privileges;
pub mod serve_config;
pub mod source;
pub mod spool;
pub mod status;
pub mod streams;
pub mod tls;
pub mod wire;
