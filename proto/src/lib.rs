//! lbf's cluster wire format, generated from `proto/lbf.proto` by prost: the frames node
//! daemons (`lbf-node`) and the central GAG builder (`lbf-gag serve`) exchange.
//!
//! Only the message types live here; framing, encoding of events into [`Batch`]es and the
//! protocol's rules are in `lbf::net`. See `proto/lbf.proto` for what every field means.

#![allow(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/lbf.v1.rs"));

/// The prost runtime the generated types use, re-exported so users need not pin it.
pub use prost;

/// The protocol version this build speaks; `Hello` and `Welcome` carry it, and the builder
/// refuses a node with another, naming both.
pub const PROTOCOL_VERSION: u32 = 6;
