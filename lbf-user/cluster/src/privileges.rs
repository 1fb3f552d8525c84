//! Dropping what the node daemon no longer needs once its probes are attached.
//!
//! Loading and attaching eBPF needs CAP_BPF, CAP_PERFMON and more; after that the capture
//! reads its ring buffer and maps through file descriptors it already holds, which needs no
//! capability. What it still needs is to read `/proc/PID/{maps,environ}` and the mapped MPI
//! library of traced processes, which may belong to other users: CAP_SYS_PTRACE (access
//! to another user's process memory maps and environment) and CAP_DAC_READ_SEARCH (those
//! files are mode 0400 and owned by the process's user). A replaying node keeps nothing.
//!
//! Capabilities are per thread: call [`drop_to`] before starting any other thread, so that
//! every thread of the process inherits the reduced sets.

use anyhow::{Context, Result};
use caps::{CapSet, Capability, CapsHashSet};

/// What a live capture keeps, and why (see the module documentation).
pub const CAPTURE_KEEPS: [Capability; 2] =
    [Capability::CAP_SYS_PTRACE, Capability::CAP_DAC_READ_SEARCH];

/// Reduces this thread's capabilities to `keep` (bounding, inheritable, ambient, effective
/// and permitted sets alike), and forbids regaining any through exec (`no_new_privs`).
/// Returns the capabilities that were dropped from the effective set.
pub fn drop_to(keep: &[Capability]) -> Result<Vec<Capability>> {
    let keep: CapsHashSet = keep.iter().copied().collect();
    let before = caps::read(None, CapSet::Effective).context("reading capabilities")?;
    for cap in caps::all() {
        if !keep.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap)
                .with_context(|| format!("dropping {cap} from the bounding set"))?;
        }
    }
    caps::clear(None, CapSet::Ambient).context("clearing the ambient capabilities")?;
    let kept: CapsHashSet = before.intersection(&keep).copied().collect();
    for set in [CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        caps::set(None, set, &kept).with_context(|| format!("reducing the {set:?} set"))?;
    }
    // SAFETY: prctl with constant integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("setting no_new_privs");
    }
    let mut dropped: Vec<Capability> = before.difference(&kept).copied().collect();
    dropped.sort_by_key(|c| c.index());
    Ok(dropped)
}
