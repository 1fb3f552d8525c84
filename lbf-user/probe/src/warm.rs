//! Taking the kernel's first-uprobe wait off lbf-trace's start-up path.
//!
//! The MPI probes' one `uprobe_multi` link took 1 to 23 ms to attach, and all but 0.1 ms of
//! that was a wait the kernel makes only when no uprobe was registered shortly before
//! (measured: an empty program attached at one point just before it took 5 to 24 ms, the
//! link after it 0.1 ms; whatever program, so it is the kernel's, not the program's). That
//! wait came after the MPI probes' program had verified, on the path to the command's start.
//! [`warm_uprobes`] attaches lbf's empty probe program while that program verifies, at a
//! point no process runs: offset 0 of an anonymous in-memory file (`memfd_create`), for this
//! process only. It pays the wait in parallel, so the MPI probes attach in a fraction of a
//! millisecond.

use std::{
    fs::File,
    os::fd::{AsRawFd, OwnedFd},
    path::PathBuf,
};

use anyhow::{Context, Result};
use aya::programs::{
    uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    UProbe,
};

/// What keeps the warming probe in place: its link and its file, released with the
/// tracer's other links.
pub(super) struct Warmth {
    _link: Box<dyn Send>,
    _file: OwnedFd,
}

/// Verifies `prog` (lbf's empty entry program) and attaches it at offset 0 of a new
/// in-memory file, for this process only (see the module documentation).
pub(super) fn warm_uprobes(prog: &mut UProbe) -> Result<Warmth> {
    prog.load().context("verifying the empty probe program")?;
    let fd = rustix::fs::memfd_create("lbf-uprobe-warmth", rustix::fs::MemfdFlags::CLOEXEC)
        .context("creating an in-memory file")?;
    let file = File::from(fd);
    file.set_len(4096).context("sizing the in-memory file")?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let point = UProbeAttachPoint {
        location: UProbeAttachLocation::AbsoluteOffset(0),
        cookie: None,
    };
    let link = prog
        .attach(&[point], &path, UProbeScope::CallingProcess)
        .context("attaching the empty probe")?;
    Ok(Warmth {
        _link: Box::new(prog.take_link(link)?),
        _file: file.into(),
    })
}
