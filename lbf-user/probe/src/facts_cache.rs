//! The running kernel's facts ([`KernelFacts`]: field offsets, tracepoint type ids), kept
//! across runs: finding them parses the kernel's BTF, on the tracer's start-up path, and they
//! change only with the kernel build. The cache is one small text file naming the kernel's
//! GNU build id (`/sys/kernel/notes`), every field and every tracepoint; a file of another
//! build, of other names, or that is not the owner's alone (a directory or file others may
//! write) is not used. Writing it is best effort: a tracer that cannot cache still runs.

use super::btf::LIFECYCLE_TRACEPOINTS;
use super::kernel_facts::KernelFacts;
use lbf_common::maps::KernelOffsets;
use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the cache lives unless `LBF_CACHE_DIR` says otherwise.
const SYSTEM_DIR: &str = "/var/cache/lbf";
/// The file in it.
const FILE: &str = "kernel-facts";
/// The first line of the file; another first line is another format.
const FORMAT: &str = "lbf kernel facts 1";

/// Every field of [`KernelOffsets`] by name, to write and read them alike.
macro_rules! fields {
    ($($field:ident),* $(,)?) => {
        /// The fields of `o`, by name.
        fn named(o: &KernelOffsets) -> Vec<(&'static str, u32)> {
            vec![$((stringify!($field), o.$field)),*]
        }

        /// Offsets from `value`, which must give every field.
        fn from_named(value: impl Fn(&str) -> Option<u32>) -> Option<KernelOffsets> {
            Some(KernelOffsets {
                $($field: value(stringify!($field))?),*
            })
        }
    };
}

fields!(
    binprm_filename,
    task_signal,
    signal_live,
    task_pid,
    task_sum_exec_runtime,
    task_mm,
    mm_start_code,
    task_cfs_rq,
    cfs_rq_rq,
    rq_cpu,
    percpu_runqueues,
    percpu_steal,
);

/// The cache file of one kernel build.
pub(crate) struct FactsCache {
    /// The file.
    path: PathBuf,
    /// The running kernel's build id, hex.
    build_id: String,
}

impl FactsCache {
    /// The cache of the running kernel in `LBF_CACHE_DIR` or [`SYSTEM_DIR`]; `None` where the
    /// kernel has no build id to tell its builds apart.
    pub(crate) fn of_running_kernel() -> Option<Self> {
        let dir =
            std::env::var_os("LBF_CACHE_DIR").map_or_else(|| SYSTEM_DIR.into(), PathBuf::from);
        let notes = std::fs::read("/sys/kernel/notes").ok()?;
        Some(FactsCache {
            path: dir.join(FILE),
            build_id: gnu_build_id(&notes)?,
        })
    }

    /// A cache at `path` for the kernel build `build_id` (tests).
    #[cfg(test)]
    fn at(path: PathBuf, build_id: &str) -> Self {
        FactsCache {
            path,
            build_id: build_id.into(),
        }
    }

    /// The facts kept for this build, if a trustworthy file keeps them.
    pub(crate) fn load(&self) -> Option<KernelFacts> {
        if !owned_alone(&self.path) || !self.path.parent().is_some_and(owned_alone) {
            return None;
        }
        let text = std::fs::read_to_string(&self.path).ok()?;
        let mut lines = text.lines();
        if lines.next()? != FORMAT {
            return None;
        }
        if lines.next()?.strip_prefix("build_id ")? != self.build_id {
            return None;
        }
        let pairs: Vec<(&str, u32)> = lines
            .map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k, v.parse().ok()?))
            })
            .collect::<Option<_>>()?;
        if pairs.len() != named(&KernelOffsets::UNKNOWN).len() + LIFECYCLE_TRACEPOINTS.len() {
            return None;
        }
        let value = |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|&(_, v)| v);
        let mut tracepoints = [0; 4];
        for (id, tp) in tracepoints.iter_mut().zip(LIFECYCLE_TRACEPOINTS) {
            *id = value(&tracepoint_key(tp))?;
        }
        Some(KernelFacts {
            offsets: from_named(value)?,
            tracepoints,
        })
    }

    /// Keeps `facts` for this build (created owner-only writable; replaced atomically).
    /// Errors are for the caller to ignore: the cache is an optimisation.
    pub(crate) fn store(&self, facts: &KernelFacts) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut text = format!("{FORMAT}\nbuild_id {}\n", self.build_id);
        for (name, value) in named(&facts.offsets) {
            let _ = writeln!(text, "{name} {value}");
        }
        for (id, tp) in facts.tracepoints.iter().zip(LIFECYCLE_TRACEPOINTS) {
            let _ = writeln!(text, "{} {id}", tracepoint_key(tp));
        }
        let tmp = dir.join(format!(".{FILE}.{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path)
    }
}

/// The key of a tracepoint's type id in the file.
fn tracepoint_key(tracepoint: &str) -> String {
    format!("btf_trace_{tracepoint}")
}

/// Whether `path` exists and no one but its owner, root or the user running this, may write
/// it: a cache others could write could make the kernel side read the wrong fields.
fn owned_alone(path: &Path) -> bool {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    std::fs::metadata(path).is_ok_and(|m| (m.uid() == 0 || m.uid() == me) && m.mode() & 0o022 == 0)
}

/// The GNU build id (hex) in an ELF note section's bytes (`/sys/kernel/notes`).
fn gnu_build_id(notes: &[u8]) -> Option<String> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(notes.get(at..at + 4)?.try_into().ok()?))
    };
    let align = |n: usize| n.div_ceil(4) * 4;
    let mut at = 0;
    while at + 12 <= notes.len() {
        let (namesz, descsz, kind) = (word(at)? as usize, word(at + 4)? as usize, word(at + 8)?);
        let name_at = at + 12;
        let desc_at = name_at + align(namesz);
        let name = notes.get(name_at..name_at + namesz)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            let desc = notes.get(desc_at..desc_at + descsz)?;
            return (!desc.is_empty()).then(|| desc.iter().map(|b| format!("{b:02x}")).collect());
        }
        at = desc_at + align(descsz);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> KernelFacts {
        let mut offsets = KernelOffsets::UNKNOWN;
        offsets.binprm_filename = 72;
        offsets.task_pid = 1234;
        offsets.percpu_steal = KernelOffsets::ABSENT;
        KernelFacts {
            offsets,
            tracepoints: [11, 12, 13, 14],
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lbf-facts-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn offsets_round_trip_for_their_build_only() {
        let dir = scratch("round-trip");
        let cache = FactsCache::at(dir.join(FILE), "4a5a9b0a");
        assert_eq!(cache.load(), None, "nothing kept yet");
        cache.store(&sample()).unwrap();
        assert_eq!(cache.load(), Some(sample()));
        let other = FactsCache::at(dir.join(FILE), "ffff0000");
        assert_eq!(other.load(), None, "another kernel build");
        let text = std::fs::read_to_string(dir.join(FILE)).unwrap();
        std::fs::write(dir.join(FILE), text.replace("task_pid 1234\n", "")).unwrap();
        assert_eq!(cache.load(), None, "a field missing");
        std::fs::write(dir.join(FILE), "garbage").unwrap();
        assert_eq!(cache.load(), None, "another format");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_cache_others_may_write_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("writable");
        let cache = FactsCache::at(dir.join(FILE), "4a5a9b0a");
        cache.store(&sample()).unwrap();
        let open = std::fs::Permissions::from_mode(0o666);
        std::fs::set_permissions(dir.join(FILE), open).unwrap();
        assert_eq!(cache.load(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_running_kernel_has_a_build_id() {
        let notes = std::fs::read("/sys/kernel/notes").expect("/sys/kernel/notes");
        let id = gnu_build_id(&notes).expect("a GNU build id note");
        assert_eq!(id.len(), 40, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(gnu_build_id(&notes[..10]), None);
    }
}
