//! The C and Fortran workloads of `tests/workloads/*`, built on demand (cached by
//! modification time), and the `LBF-CHECK` lines in which they report their own accounts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn modified(path: &Path) -> std::time::SystemTime {
    path.metadata()
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Workload `name` of `tests/workloads/<family>` built with gcc and `libs`, rebuilt when a
/// file of that folder is newer than the binary.
pub(crate) fn workload(family: &str, name: &str, libs: &[&str]) -> PathBuf {
    workload_built_by("gcc", family, name, libs)
}

/// Workload `name` of `tests/workloads/<family>` built by the C compiler (or MPI wrapper)
/// `cc` with `args` (libraries, `-D` definitions), rebuilt when a file of that folder (or the
/// shared `work.h`) is newer than the binary. Its source is `name.c`, or for a Fortran
/// compiler (`mpif90.openmpi`) `name.f90`, the preprocessed `name.F90` or the fixed-form
/// `name.f`. Each `-DNAME` in `args` makes a build of its own, `name-NAME`.
pub(crate) fn workload_built_by(cc: &str, family: &str, name: &str, args: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/workloads")
        .join(family);
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{family}-{cc}"));
    std::fs::create_dir_all(&out_dir).expect("creating the workload build directory");
    let variant: String = args
        .iter()
        .filter_map(|a| a.strip_prefix("-D"))
        .map(|d| format!("-{d}"))
        .collect();
    let bin = out_dir.join(format!("{name}{variant}"));
    let newest = std::fs::read_dir(&dir)
        .expect("the workload folder")
        .map(|e| modified(&e.expect("a folder entry").path()))
        .chain([modified(&dir.join("../work.h"))])
        .max()
        .expect("a workload");
    if !(bin.exists() && modified(&bin) > newest) {
        // Built aside and renamed into place: tests running at once may build the same
        // workload, and one must not run a binary another is still writing.
        let aside = out_dir.join(format!(".{name}-{:?}", std::thread::current().id()));
        let src = ["c", "f90", "F90", "f"]
            .map(|ext| dir.join(format!("{name}.{ext}")))
            .into_iter()
            .find(|src| src.exists())
            .unwrap_or_else(|| panic!("no source of workload {name} in {}", dir.display()));
        let status = Command::new(cc)
            .args(["-O1", "-g", "-Wall", "-o"])
            .arg(&aside)
            .arg(&src)
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("running {cc}: {e}"));
        assert!(status.success(), "{cc} failed on {}", src.display());
        std::fs::rename(&aside, &bin).expect("moving the workload into place");
    }
    bin
}

/// One `LBF-CHECK` line: `key=value` fields.
#[derive(Clone, Debug)]
pub(crate) struct Check(pub HashMap<String, String>);

impl Check {
    /// Field `key` as a number.
    pub(crate) fn num(&self, key: &str) -> u64 {
        self.0
            .get(key)
            .unwrap_or_else(|| panic!("LBF-CHECK without {key}: {:?}", self.0))
            .parse()
            .expect("a number")
    }
}

/// The `LBF-CHECK` lines anywhere in `output` (PVM prefixes its workers' lines).
pub(crate) fn parse_checks(output: &str) -> Vec<Check> {
    output
        .lines()
        .filter_map(|l| l.split_once("LBF-CHECK ").map(|(_, rest)| rest))
        .map(|fields| {
            Check(
                fields
                    .split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        })
        .collect()
}

/// [`workload_built_by`] with the preprocessor definitions `defines` (`MOVED=1`): a variant
/// of the workload built from the same source, named after them (`spa-MOVED=1`).
pub(crate) fn workload_variant(
    cc: &str,
    family: &str,
    name: &str,
    defines: &[&str],
    libs: &[&str],
) -> PathBuf {
    let defines: Vec<String> = defines.iter().map(|d| format!("-D{d}")).collect();
    let args: Vec<&str> = defines
        .iter()
        .map(String::as_str)
        .chain(libs.iter().copied())
        .collect();
    workload_built_by(cc, family, name, &args)
}
