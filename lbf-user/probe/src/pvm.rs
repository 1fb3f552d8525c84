//! Probing PVM 3: the task library `libpvm3.so.3` and the group library `libgpvm3.so.3`, with
//! the same entry and exit programs as MPI (the function id travels in the attach cookie,
//! library slot 0), and their memory reads set in slot 0 of the read table.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use aya::{
    maps::{Array, MapData},
    programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint},
};
use lbf_common::{maps, mpi, pvm, FnReads, MemRead, MAX_FNS};

use super::{symbols, Tracer};

/// The PVM task library, where Debian installs it, and the functions lbf probes in it.
pub const TASK_LIBRARY: (&str, &[(u16, &str)]) =
    ("/usr/lib/x86_64-linux-gnu/libpvm3.so.3", pvm::NAMES);

/// The PVM group library (`pvm_joingroup`, `pvm_bcast`, `pvm_barrier`), where Debian
/// installs it, and the functions lbf probes in it. Optional: not every PVM installation has
/// it.
pub const GROUP_LIBRARY: (&str, &[(u16, &str)]) =
    ("/usr/lib/x86_64-linux-gnu/libgpvm3.so.3", pvm::GROUP_NAMES);

impl Tracer {
    /// Probes the functions `names` (`(fn_id, symbol)`, e.g. `lbf_common::pvm::NAMES`) of the
    /// PVM library at `path` for every traced process, with memory reads `reads` (those of
    /// the functions the library defines). A read from a global
    /// ([`lbf_common::MemRead::FROM_GLOBAL`]) starts at the GOT slot of the library's variable
    /// `global`, its distance from each function filled in here. Returns the symbols the file
    /// does not define (not probed), and `global` if it has no GOT slot for it (those reads
    /// are not made); an error if it defines none of `names`.
    pub fn attach_pvm_library(
        &mut self,
        path: &Path,
        names: &[(u16, &'static str)],
        reads: &[(u16, FnReads)],
        global: &'static str,
    ) -> Result<Vec<&'static str>> {
        let target = path
            .canonicalize()
            .with_context(|| format!("PVM library {}", path.display()))?;
        let wanted: Vec<&str> = names.iter().map(|(_, n)| *n).collect();
        let functions = symbols::dynamic_functions(&target, &wanted)?;
        let mut points = Vec::new();
        let mut missing = Vec::new();
        let mut defined = Vec::new();
        for &(id, name) in names {
            match functions.get(name) {
                Some(f) => {
                    points.push(UProbeAttachPoint {
                        location: UProbeAttachLocation::AbsoluteOffset(f.offset),
                        cookie: Some(mpi::cookie(id, 0)),
                    });
                    defined.push((id, f.address));
                }
                None => missing.push(name),
            }
        }
        ensure!(
            !points.is_empty(),
            "{} defines none of the PVM functions lbf probes (pvm_send, pvm_recv, ...)",
            path.display()
        );
        let slot = symbols::got_slot(&target, global)?;
        let mut table: Array<&mut MapData, FnReads> =
            Array::try_from(self.ebpf.map_mut(maps::FN_READS).context("map FN_READS")?)?;
        for &(id, mut r) in reads {
            let Some(&(_, address)) = defined.iter().find(|(d, _)| *d == id) else {
                continue;
            };
            ensure!((id as u32) < MAX_FNS, "function id {id} out of range");
            match slot {
                Some(slot) => r.global.delta = slot.wrapping_sub(address) as i64,
                None => {
                    let mut any = false;
                    let global_reads = [&mut r.entry, &mut r.exit]
                        .into_iter()
                        .filter(|m| m.ptr_arg == MemRead::FROM_GLOBAL);
                    for m in global_reads {
                        *m = MemRead::default();
                        any = true;
                    }
                    if any && !missing.contains(&global) {
                        missing.push(global);
                    }
                }
            }
            table.set(id as u32, &r, 0)?;
        }
        self.attach_entry_exit(&target, &points)?;
        Ok(missing)
    }

    /// Probes the installed PVM libraries ([`TASK_LIBRARY`], and [`GROUP_LIBRARY`] if it is
    /// there) with memory reads `reads`, reads from a global starting at variable `global`
    /// (see [`Tracer::attach_pvm_library`]). Returns each library probed with the number of
    /// functions probed in it, and what it lacks.
    pub fn attach_pvm_libraries(
        &mut self,
        reads: &[(u16, FnReads)],
        global: &'static str,
    ) -> Result<Vec<ProbedPvmLibrary>> {
        let mut probed = Vec::new();
        for (i, (path, names)) in [TASK_LIBRARY, GROUP_LIBRARY].into_iter().enumerate() {
            let path = Path::new(path);
            if i > 0 && !path.exists() {
                continue;
            }
            let missing = self.attach_pvm_library(path, names, reads, global)?;
            probed.push(ProbedPvmLibrary {
                path: path.to_path_buf(),
                functions: names.len() - missing.iter().filter(|m| **m != global).count(),
                missing,
            });
        }
        Ok(probed)
    }
}

/// A PVM library [`Tracer::attach_pvm_libraries`] probed.
#[derive(Clone, Debug)]
pub struct ProbedPvmLibrary {
    /// Where it is.
    pub path: PathBuf,
    /// How many of its functions are probed.
    pub functions: usize,
    /// The functions it does not define, and the global it has no GOT slot for.
    pub missing: Vec<&'static str>,
}
