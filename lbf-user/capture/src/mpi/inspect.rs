//! What the capture needs to know about a live process that its records do not say: which
//! MPI library it mapped (and, for Open MPI, where `MPI_COMM_WORLD` is), the rank its
//! launcher gave it, and the eager limits its library's configuration sets. [`ProcFs`]
//! answers from `/proc`; tests answer with fixed values.
//!
//! `/proc` answers only while the process lives, and the capture asks when it reaches the
//! process's first record, which a reader far behind may do after a short rank has ended.
//! [`ProcFs::prefetcher`] inspects a process ahead of that, when it enters `MPI_Init`
//! (`probe::InitWatch` calls it), and keeps the answers until the capture asks.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use object::{Object, ObjectSymbol};

use lbf_common::maps::SendRules;

use super::eager::EagerLimits;
use super::library::{Abi, Library};
use super::mpich::Mpich;
use super::openmpi::{self, OpenMpi};
use crate::procfs::has_ended;

/// A process's place in `MPI_COMM_WORLD`, as its launcher announced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchRank {
    /// World rank.
    pub rank: u32,
    /// World size, when announced.
    pub size: Option<u32>,
}

/// Why a process could not be inspected.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InspectError {
    /// The process.
    pub tgid: u32,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for InspectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inspecting process {}: {}", self.tgid, self.reason)
    }
}

impl std::error::Error for InspectError {}

/// Answers questions about a traced process that only the live system can answer.
pub trait ProcessInspector {
    /// The ABI of the MPI library process `tgid` has mapped.
    fn abi(&mut self, tgid: u32) -> Result<Abi, InspectError>;
    /// The world rank the launcher put in the environment of `tgid`, if any.
    fn launch_rank(&mut self, tgid: u32) -> Option<LaunchRank>;
    /// The eager limits of process `tgid`, which uses `library`: the library's defaults
    /// unless its environment changes them.
    fn eager_limits(&mut self, tgid: u32, library: Library) -> EagerLimits {
        let _ = tgid;
        EagerLimits::default_of(library)
    }
    /// What process `tgid` may use of its host's CPUs, if known: the node it was traced on
    /// had that much for it (the start-up model, `lbf::startup`). The default knows nothing.
    fn cpus(&mut self, tgid: u32) -> Option<CpuAllowance> {
        let _ = tgid;
        None
    }
    /// Process `tgid` ended: whatever is kept about it can go. The default keeps nothing.
    fn forget(&mut self, tgid: u32) {
        let _ = tgid;
    }
}

/// What a process may use of its host's CPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuAllowance {
    /// The CPUs it may run on (its affinity), in the kernel's list format (`0-3,8`).
    pub list: String,
    /// The tightest CPU quota of its cgroups, where one limits it (a container's CPU limit).
    pub quota: Option<lbf_host::CpuQuota>,
}

/// The soname prefix of UCX's protocol library, which MPICH's `ch4:ucx` device maps.
const UCX_SONAME: &str = "libucp.so";

/// Environment variables that carry the world rank and size, per launcher: Open MPI's ORTE
/// and PMIx, MPICH's Hydra (PMI).
const RANK_VARS: [(&str, &str); 3] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
];

/// The rank and size announced in a NUL-separated environment block.
pub fn launch_rank_from_environ(environ: &[u8]) -> Option<LaunchRank> {
    let vars: HashMap<&[u8], &[u8]> = environ
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let eq = kv.iter().position(|&b| b == b'=')?;
            Some((&kv[..eq], &kv[eq + 1..]))
        })
        .collect();
    let number = |name: &str| -> Option<u32> {
        std::str::from_utf8(vars.get(name.as_bytes())?)
            .ok()?
            .parse()
            .ok()
    };
    RANK_VARS.iter().find_map(|&(rank, size)| {
        Some(LaunchRank {
            rank: number(rank)?,
            size: number(size),
        })
    })
}

/// One mapping of a file in `/proc/PID/maps`.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: u64,
    offset: u64,
    path: String,
}

/// Parses the file-backed lines of `/proc/PID/maps`.
fn parse_maps(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let _perms = fields.next()?;
            let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
            let _dev = fields.next()?;
            let _inode = fields.next()?;
            let path = fields.next()?;
            let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
            path.starts_with('/').then(|| Mapping {
                start,
                offset,
                path: path.to_string(),
            })
        })
        .collect()
}

/// What [`ProcFs`] found about a process when [`ProcFs::prefetcher`] inspected it.
#[derive(Clone, Debug)]
struct Answers {
    abi: Result<Abi, InspectError>,
    launch_rank: Option<LaunchRank>,
    /// `None` when `abi` is an error.
    eager_limits: Option<EagerLimits>,
    cpus: Option<CpuAllowance>,
}

/// Answers found ahead of the capture's questions, by process id; shared between the
/// capture's inspector and its prefetcher.
type Prefetched = Arc<Mutex<HashMap<u32, Answers>>>;

/// Inspects processes through `/proc`. Symbol lookups are cached per file.
#[derive(Default)]
pub struct ProcFs {
    /// (file, symbol) -> `(st_value, absolute)` of the symbol if the file defines it;
    /// `absolute` for non-PIE executables, whose symbol values are addresses.
    symbols: HashMap<(PathBuf, &'static str), Option<(u64, bool)>>,
    /// What [`ProcFs::prefetcher`] found, until the process ends.
    prefetched: Prefetched,
}

impl ProcFs {
    /// An inspector with an empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// A function that inspects the process it is given now and keeps the answers for this
    /// inspector, which gives them when asked about that process, even after it ended (a
    /// failed inspection is tried again then, while the process lives); it hands
    /// `send_rules` what the kernel side needs to tell the process's eager sends
    /// ([`EagerLimits::send_rules`]), where the inspection found its library. For
    /// `probe::Tracer::watch_inits`, which calls it from another thread.
    pub fn prefetcher(
        &self,
        mut send_rules: impl FnMut(u32, SendRules) + Send + 'static,
    ) -> impl FnMut(u32) + Send + 'static {
        let mut live = ProcFs::new();
        let prefetched = self.prefetched.clone();
        move |tgid| {
            let abi = live.live_abi(tgid);
            let launch_rank = live.live_launch_rank(tgid);
            let eager_limits = abi
                .as_ref()
                .ok()
                .map(|abi| live.live_eager_limits(tgid, abi.library()));
            if let (Ok(abi), Some(limits)) = (&abi, &eager_limits) {
                send_rules(tgid, limits.send_rules(abi, launch_rank.map(|r| r.rank)));
            }
            let answers = Answers {
                launch_rank,
                eager_limits,
                abi,
                cpus: live_cpus(tgid),
            };
            lock(&prefetched).insert(tgid, answers);
        }
    }

    /// What the prefetcher found about `tgid`, if it did.
    fn prefetched(&self, tgid: u32) -> Option<Answers> {
        lock(&self.prefetched).get(&tgid).cloned()
    }

    /// `symbol`'s value in the object at `path` (seen through process `tgid`'s root, for
    /// mount namespaces), if that object defines it.
    fn symbol(
        &mut self,
        tgid: u32,
        path: &str,
        symbol: &'static str,
    ) -> Result<Option<(u64, bool)>, InspectError> {
        let file = PathBuf::from(format!("/proc/{tgid}/root{path}"));
        if let Some(&found) = self.symbols.get(&(file.clone(), symbol)) {
            return Ok(found);
        }
        let err = |reason: String| InspectError { tgid, reason };
        let data =
            std::fs::read(&file).map_err(|e| err(format!("reading {}: {e}", file.display())))?;
        let elf = object::File::parse(&*data)
            .map_err(|e| err(format!("parsing {} as ELF: {e}", file.display())))?;
        let absolute = elf.kind() == object::ObjectKind::Executable;
        let found = elf
            .dynamic_symbols()
            .find(|s| s.is_definition() && s.name() == Ok(symbol))
            .map(|s| (s.address(), absolute));
        self.symbols.insert((file, symbol), found);
        Ok(found)
    }

    /// The address of Open MPI's object `symbol` in process `tgid` (a predefined handle such
    /// as `MPI_COMM_WORLD` is one's address): where the dynamic linker bound it. It searches
    /// the executable first: a PIE compiled by GCC refers to the library's data through a
    /// copy relocation, so the object then lives in the executable's `.bss`, not in
    /// `libmpi.so`.
    fn open_mpi_object(
        &mut self,
        tgid: u32,
        mappings: &[Mapping],
        library: &Mapping,
        symbol: &'static str,
    ) -> Result<u64, InspectError> {
        let exe = std::fs::read_link(format!("/proc/{tgid}/exe")).ok();
        let exe_mapping = exe.and_then(|exe| {
            let exe = exe.to_string_lossy().into_owned();
            mappings.iter().find(|m| m.offset == 0 && m.path == exe)
        });
        for mapping in exe_mapping.into_iter().chain([library]) {
            // Shared objects and PIEs are linked at address 0: a symbol's value is its offset
            // from where the first (offset 0) segment is mapped.
            if let Some((value, absolute)) = self.symbol(tgid, &mapping.path, symbol)? {
                return Ok(if absolute {
                    value
                } else {
                    mapping.start + value
                });
            }
        }
        Err(InspectError {
            tgid,
            reason: format!(
                "neither its executable nor {} defines {symbol}",
                library.path,
            ),
        })
    }
}

impl ProcessInspector for ProcFs {
    fn abi(&mut self, tgid: u32) -> Result<Abi, InspectError> {
        match self.prefetched(tgid) {
            Some(Answers { abi: Ok(abi), .. }) => Ok(abi),
            _ => self.live_abi(tgid),
        }
    }

    fn launch_rank(&mut self, tgid: u32) -> Option<LaunchRank> {
        match self.prefetched(tgid) {
            Some(Answers {
                abi: Ok(_),
                launch_rank,
                ..
            }) => launch_rank,
            _ => self.live_launch_rank(tgid),
        }
    }

    fn eager_limits(&mut self, tgid: u32, library: Library) -> EagerLimits {
        match self.prefetched(tgid).and_then(|a| a.eager_limits) {
            Some(limits) => limits,
            None => self.live_eager_limits(tgid, library),
        }
    }

    fn cpus(&mut self, tgid: u32) -> Option<CpuAllowance> {
        match self.prefetched(tgid) {
            Some(Answers { cpus: Some(c), .. }) => Some(c),
            _ => live_cpus(tgid),
        }
    }

    fn forget(&mut self, tgid: u32) {
        lock(&self.prefetched).remove(&tgid);
    }
}

/// What process `tgid` may use of the CPUs: the `Cpus_allowed_list` of `/proc/TGID/status`
/// (its affinity), if it is there, and its cgroups' CPU quota.
fn live_cpus(tgid: u32) -> Option<CpuAllowance> {
    let status = std::fs::read_to_string(format!("/proc/{tgid}/status")).ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_string())
        .filter(|list| !list.is_empty())?;
    Some(CpuAllowance {
        list,
        quota: lbf_host::cpu_quota(Some(tgid)),
    })
}

/// `prefetched`, locked; a prefetcher that panicked holding it left nothing half-written (one
/// insert), so its answers are used anyway.
fn lock(prefetched: &Prefetched) -> std::sync::MutexGuard<'_, HashMap<u32, Answers>> {
    prefetched.lock().unwrap_or_else(|e| e.into_inner())
}

/// The answers from `/proc` as it is now.
impl ProcFs {
    fn live_abi(&mut self, tgid: u32) -> Result<Abi, InspectError> {
        // A process that ended has no maps (reaped) or empty ones (a zombie).
        let ended = || InspectError {
            tgid,
            reason: "it had ended before its MPI library could be read from /proc/PID/maps: \
                     it was not inspected when it entered MPI_Init (its notice was lost, or it \
                     was past MPI_Init when traced), and lbf-trace read its first record only \
                     after its whole run"
                .into(),
        };
        let maps = match std::fs::read_to_string(format!("/proc/{tgid}/maps")) {
            Ok(maps) if maps.is_empty() => return Err(ended()),
            Ok(maps) => maps,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ended()),
            Err(e) => {
                return Err(InspectError {
                    tgid,
                    reason: format!("reading /proc/{tgid}/maps: {e}"),
                })
            }
        };
        let mappings = parse_maps(&maps);
        let (library, mapping) = mappings
            .iter()
            .filter(|m| m.offset == 0)
            .find_map(|m| Some((Library::from_path(&m.path)?, m)))
            .ok_or_else(|| {
                // Maps read while the process exited, its memory half torn down.
                if has_ended(tgid) {
                    return ended();
                }
                InspectError {
                    tgid,
                    reason: format!(
                        "no {} or {} mapped",
                        Library::OpenMpi.soname(),
                        Library::Mpich.soname()
                    ),
                }
            })?;
        Ok(match library {
            Library::Mpich => Abi::Mpich(Mpich),
            Library::OpenMpi => Abi::OpenMpi(OpenMpi {
                comm_world: self.open_mpi_object(
                    tgid,
                    &mappings,
                    mapping,
                    openmpi::COMM_WORLD_SYMBOL,
                )?,
                comm_self: self.open_mpi_object(
                    tgid,
                    &mappings,
                    mapping,
                    openmpi::COMM_SELF_SYMBOL,
                )?,
                request_null: self.open_mpi_object(
                    tgid,
                    &mappings,
                    mapping,
                    openmpi::REQUEST_NULL_SYMBOL,
                )?,
            }),
        })
    }

    fn live_launch_rank(&mut self, tgid: u32) -> Option<LaunchRank> {
        launch_rank_from_environ(&std::fs::read(format!("/proc/{tgid}/environ")).ok()?)
    }

    fn live_eager_limits(&mut self, tgid: u32, library: Library) -> EagerLimits {
        let environ = std::fs::read(format!("/proc/{tgid}/environ")).unwrap_or_default();
        let maps = std::fs::read_to_string(format!("/proc/{tgid}/maps")).unwrap_or_default();
        let ucx = parse_maps(&maps).iter().any(|m| {
            m.path
                .rsplit('/')
                .next()
                .is_some_and(|name| name.starts_with(UCX_SONAME))
        });
        EagerLimits::of(library, &environ, ucx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_ended_is_named_as_such() {
        let reason = |tgid| ProcFs::new().abi(tgid).map(|_| ()).unwrap_err().reason;
        // A zombie (not reaped yet): empty maps.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        while !has_ended(pid) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(reason(pid).starts_with("it had ended"), "{}", reason(pid));
        // Reaped: no /proc entry at all.
        child.wait().unwrap();
        assert!(reason(pid).starts_with("it had ended"), "{}", reason(pid));
    }

    #[test]
    fn ranks_come_from_either_launcher() {
        let ompi = b"A=1\0OMPI_COMM_WORLD_RANK=3\0OMPI_COMM_WORLD_SIZE=4\0";
        assert_eq!(
            launch_rank_from_environ(ompi),
            Some(LaunchRank {
                rank: 3,
                size: Some(4)
            })
        );
        let hydra = b"PMI_FD=8\0PMI_RANK=1\0PMI_SIZE=2\0";
        assert_eq!(
            launch_rank_from_environ(hydra),
            Some(LaunchRank {
                rank: 1,
                size: Some(2)
            })
        );
        assert_eq!(launch_rank_from_environ(b"HOME=/root\0"), None);
    }

    #[test]
    fn maps_lines_yield_file_mappings() {
        let maps = "7f00-7f10 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libmpich.so.12.2.0\n\
                    7f10-7f20 r-xp 00010000 08:01 123 /usr/lib/x86_64-linux-gnu/libmpich.so.12.2.0\n\
                    7ffd-7ffe rw-p 00000000 00:00 0 [stack]\n";
        let m = parse_maps(maps);
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[0],
            Mapping {
                start: 0x7f00,
                offset: 0,
                path: "/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.0".into()
            }
        );
    }
}
