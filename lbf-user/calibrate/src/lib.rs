//! Calibration: measuring the hosts and networks a prediction is for, as ChronosMix does
//! (a machine characterisation by micro-benchmarks, a communication characterisation by
//! ping-pong), so that a target's numbers are measured rather than invented.
//!
//! - [`pingpong`]: one-way times by message size over TCP between two hosts or within one.
//! - [`mpi`]: the same through an MPI library, by a bundled ping-pong run by `mpirun`.
//! - [`fit`]: the fewest table points that reproduce the measured times within 2 %.
//! - [`cpu`]: the host's cores and speed from integer, floating-point and memory benchmarks.
//! - [`program`]: a program's own speed on two hosts, from its traces on both.
//! - [`trace_network`]: the network table a traced run saw, from its own messages.
//! - [`output`]: what the measurements print and the TOML files they write.
//! - [`args`]: the ping-pong's command-line options, shared by the commands that run one.
//!
//! `lbf-node calibrate` is the command (and, for a whole cluster at once, `lbf-gag calibrate`
//! ordering `lbf-node calibrate --builder` agents: `lbf_cluster::calibration`); `docs/targets.md` says how to use its files.

pub mod args;
pub mod cpu;
pub mod fit;
pub mod mpi;
pub mod output;
pub mod pingpong;
pub mod program;
pub mod progress;
pub mod trace_network;
