//! Shared by the capture integration tests (MPI, sockets, PVM), one module a concern:
//! [`workloads`] builds the C and Fortran workloads of `tests/workloads/*` and parses their
//! `LBF-CHECK` lines; [`tracer`] runs a shell command under the eBPF tracer with a capture
//! (also twice at once, from its start and by a tracer attached while it runs); [`lbf_trace`]
//! runs the `lbf-trace` binary and reads its reports; [`checks`] checks a capture against
//! the programs' own accounts (messages, bytes, CPU per process) and its prediction against
//! the measured time; [`mpi`] launches jobs of either MPI; [`netns`] makes two "hosts",
//! [`cgroup`] slower ones, and [`emulated`] a heterogeneous cluster of them.

#![allow(dead_code)] // each test crate uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

pub(crate) mod cgroup;
pub(crate) mod checks;
pub(crate) mod emulated;
pub(crate) mod lbf_trace;
#[path = "../machine/mod.rs"]
pub(crate) mod machine;
pub(crate) mod mpi;
pub(crate) mod netns;
#[path = "../shaping/mod.rs"]
pub(crate) mod shaping;
pub(crate) mod tracer;
mod watchdog;
pub(crate) mod workloads;

// The whole harness at `traced::`, whichever part a test crate uses.
#[allow(unused_imports)]
pub(crate) use {
    cgroup::*, checks::*, emulated::*, lbf_trace::*, mpi::*, netns::*, tracer::*, workloads::*,
};

/// One traced run at a time: the machine has 2 cores and the CPU checks need them.
static TRACING: Mutex<()> = Mutex::new(());

/// Whether this process may load eBPF programs; with `CI=true` a failure naming root if not
/// (see [`machine::require`]).
pub(crate) fn can_trace() -> bool {
    machine::require("root (tracing loads eBPF)", machine::is_root())
}

/// A scratch directory `name` under the tests' temporary directory, made if missing.
pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Runs `command`, which must succeed; its standard output.
pub(crate) fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}
