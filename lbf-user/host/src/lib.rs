//! What a host lets a process use, read from `/proc` and the cgroup file systems.
//!
//! A process's CPU affinity says which CPUs it may run on; its cgroups may allow it less than
//! all of them (a container's CPU limit: `cpu.max` under cgroup v2, `cpu.cfs_quota_us` over
//! `cpu.cfs_period_us` under v1's `cpu` controller). Calibration rates this host by what its
//! own process may use ([`cpu_quota`] of itself); the capture records what the traced
//! processes could use, so that a prediction does not take a run under a quota for a run with
//! every CPU of its affinity.

mod cgroup;

pub use cgroup::{cpu_quota, CpuQuota};
