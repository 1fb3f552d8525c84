//! Which event source a capture uses: MPI calls, PVM calls, or plain sockets. A program is
//! captured from one source only, so MPI over TCP is not counted twice (the MPI layer is the
//! source, its launcher's control connections are not application messages) and PVM's
//! traffic through pvmd is not mistaken for the program's.

use std::path::Path;

/// An event source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Source {
    /// MPI calls (uprobes on the MPI library).
    Mpi,
    /// PVM 3 calls (uprobes on libpvm3).
    Pvm,
    /// System calls on TCP, UDP and UNIX sockets.
    Sockets,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Mpi => "MPI",
            Source::Pvm => "PVM",
            Source::Sockets => "socket",
        })
    }
}

/// Library names that mark a source, in order of precedence.
const MARKERS: [(&[u8], Source); 3] = [
    (b"libmpi.so", Source::Mpi),
    (b"libmpich.so", Source::Mpi),
    (b"libpvm3.so", Source::Pvm),
];

/// Launchers whose programs are MPI programs.
const MPI_LAUNCHERS: [&str; 3] = ["mpirun", "mpiexec", "orterun"];

/// The source for processes already running: MPI if one of them has an MPI library mapped,
/// else PVM if one has libpvm3 mapped, else sockets.
pub fn for_pids(pids: &[u32]) -> Source {
    let maps = maps_of(pids);
    pick(|marker| names(&maps, marker))
}

/// Whether process `pid` has a library of `source` mapped (MPI: Open MPI's or MPICH's; PVM:
/// libpvm3), whatever else it maps.
pub fn maps_library_of(pid: u32, source: Source) -> bool {
    let maps = maps_of(&[pid]);
    MARKERS
        .iter()
        .any(|&(marker, s)| s == source && names(&maps, marker))
}

/// The memory maps (`/proc/PID/maps`) of those of `pids` that are still there.
fn maps_of(pids: &[u32]) -> Vec<String> {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/maps")).ok())
        .collect()
}

/// Whether one of `maps` names `marker`.
fn names(maps: &[String], marker: &[u8]) -> bool {
    maps.iter()
        .any(|m| m.as_bytes().windows(marker.len()).any(|w| w == marker))
}

/// The source for a command about to start: MPI if it is an MPI launcher; otherwise MPI or
/// PVM if the command, one of its arguments, or a word of one (a shell's `-c` script) names
/// an executable that links that library (its dynamic string table names it); otherwise
/// sockets.
pub fn for_command(argv: &[String]) -> Source {
    let Some(program) = argv.first() else {
        return Source::Sockets;
    };
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if MPI_LAUNCHERS.iter().any(|l| name.starts_with(l)) {
        return Source::Mpi;
    }
    let files: Vec<Vec<u8>> = argv
        .iter()
        .flat_map(|a| a.split(|c: char| c.is_whitespace() || ";|&()'\"`".contains(c)))
        .filter(|w| !w.is_empty())
        .filter_map(executable)
        .filter_map(|p| std::fs::read(p).ok())
        .collect();
    pick(|marker| {
        files
            .iter()
            .any(|f| f.windows(marker.len()).any(|w| w == marker))
    })
}

/// The first source whose marker `found` says is there, else sockets.
fn pick(found: impl Fn(&[u8]) -> bool) -> Source {
    MARKERS
        .iter()
        .find(|(marker, _)| found(marker))
        .map_or(Source::Sockets, |&(_, s)| s)
}

/// `arg` as an executable file: a path, or a name found in `PATH`.
fn executable(arg: &str) -> Option<std::path::PathBuf> {
    let path = Path::new(arg);
    if arg.contains('/') {
        return path.is_file().then(|| path.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|dirs| {
        std::env::split_paths(&dirs)
            .map(|d| d.join(arg))
            .find(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_pvm_program_in_a_shell_script_is_found() {
        if let Some(pvm) = executable("pvm") {
            let real = std::fs::canonicalize(pvm).unwrap();
            let script = format!("echo conf | {} hostfile; echo done", real.display());
            assert_eq!(for_command(&argv(&["sh", "-c", &script])), Source::Pvm);
        }
    }

    #[test]
    fn launchers_mean_mpi_and_plain_programs_mean_sockets() {
        assert_eq!(
            for_command(&argv(&["mpirun.openmpi", "-np", "2", "x"])),
            Source::Mpi
        );
        assert_eq!(for_command(&argv(&["sh", "-c", "echo"])), Source::Sockets);
        assert_eq!(for_command(&[]), Source::Sockets);
    }

    #[test]
    fn a_pvm_program_is_recognised_by_its_library() {
        let lib = Path::new("/usr/lib/x86_64-linux-gnu/libpvm3.so.3");
        if lib.exists() {
            // The PVM console links libpvm3.
            if let Some(pvm) = executable("pvm") {
                let real = std::fs::canonicalize(pvm).unwrap();
                assert_eq!(for_command(&argv(&[real.to_str().unwrap()])), Source::Pvm);
            }
        }
    }

    #[test]
    fn this_process_is_no_mpi_program() {
        assert_eq!(for_pids(&[std::process::id()]), Source::Sockets);
        assert!(!maps_library_of(std::process::id(), Source::Pvm));
    }
}
