//! The cluster path: node daemons (`lbf-node`) capture or replay their host's processes and
//! stream events over TLS to one central GAG builder (`lbf-gag serve`), which matches them
//! across hosts and runs the engine online. See `docs/cluster.md`.
//!
//! ```text
//! source (capture | replay) -> node (spool, resend) ==TLS==> builder (journal, ack)
//!     -> apply (streams: connections between hosts; engine, merged trace)
//!     -> status -> http (/results, /nodes, /metrics)
//! ```
//!
//! The wire format is `proto/lbf.proto` ([`lbf_proto`]); [`wire`] packs events into it.

pub mod apply;
pub mod builder;
pub mod framefile;
pub mod http;
pub mod journal;
pub mod node;
pub mod privileges;
pub mod serve_config;
pub mod source;
pub mod spool;
pub mod status;
pub mod streams;
pub mod tls;
pub mod wire;
