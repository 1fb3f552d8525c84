//! Which event source a capture uses: MPI calls, PVM calls, or plain sockets. A program is
//! captured from one source only, so MPI over TCP is not counted twice (the MPI layer is the
//! source, its launcher's control connections are not application messages) and PVM's
//! traffic through pvmd is not mistaken for the program's.
//!
//! A command is seen through the usual wrappers (`taskset`, `numactl`, `env VAR=1`, `nice`,
//! `chrt`, `time`, `timeout`, `sh -c '...'`) and shell scripts (read from their file, a few
//! levels deep): any word naming an MPI launcher means MPI, and any executable named that
//! links an MPI library (C, C++ or Fortran bindings of Open MPI or MPICH) means MPI too.
//! What the command line cannot tell, the processes' memory maps can
//! ([`mpi_library_mapped_by`]): lbf-trace checks each process of a socket or PVM capture.

use std::path::{Path, PathBuf};

use crate::mpi::Library;

pub use lbf_model::source::Source;

/// Library names that mark a source, in order of precedence. MPI: Open MPI's C library
/// (`libmpi.so.40`) and its bindings (`libmpi_mpifh`, `libmpi_usempif08`,
/// `libmpi_usempi_ignore_tkr`, `libmpi_cxx`, `libmpi_java`: all `libmpi_`), MPICH's
/// (`libmpich.so.12`, `libmpichfort`, `libmpichcxx`: all `libmpich`) and the names other
/// MPICH builds give its bindings (`libmpifort`, `libmpicxx`, `libmpi++`).
const MARKERS: [(&[u8], Source); 7] = [
    (b"libmpi.so", Source::Mpi),
    (b"libmpi_", Source::Mpi),
    (b"libmpich", Source::Mpi),
    (b"libmpifort.so", Source::Mpi),
    (b"libmpicxx.so", Source::Mpi),
    (b"libmpi++", Source::Mpi),
    (b"libpvm3.so", Source::Pvm),
];

/// Launchers whose programs are MPI programs: a word whose file name is one of these, or
/// one of these followed by `.` and a suffix (`mpirun.openmpi`, `mpiexec.hydra`).
const MPI_LAUNCHERS: [&str; 5] = ["mpirun", "mpiexec", "orterun", "srun", "prun"];

/// Shells whose first file argument is a script to read even without `#!`.
const SHELLS: [&str; 6] = ["sh", "bash", "dash", "zsh", "ksh", "ash"];

/// How deep scripts that run scripts are read.
const SCRIPT_DEPTH: u32 = 3;

/// Script files larger than this are not read as scripts.
const SCRIPT_BYTES: u64 = 1 << 20;

/// The source for processes already running: MPI if one of them has an MPI library mapped,
/// else PVM if one has libpvm3 mapped, else sockets.
pub fn for_pids(pids: &[u32]) -> Source {
    let maps = maps_of(pids);
    pick(|marker| names(&maps, marker))
}

/// Whether process `pid` has a library of `source` mapped (MPI: Open MPI's or MPICH's,
/// any of their language bindings; PVM: libpvm3), whatever else it maps.
pub fn maps_library_of(pid: u32, source: Source) -> bool {
    let maps = maps_of(&[pid]);
    MARKERS
        .iter()
        .any(|&(marker, s)| s == source && names(&maps, marker))
}

/// The path of an MPI library (C, C++ or Fortran, Open MPI or MPICH) that process `pid` has
/// mapped, if any (and if the process is still there).
pub fn mpi_library_mapped_by(pid: u32) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|path| is_mpi_library(path))
        .map(str::to_string)
}

/// The MPI library (C, C++ or Fortran, Open MPI or MPICH) that the executable at `path`
/// links, by the name its dynamic section gives (`libmpi_mpifh.so.40`); `None` if it links
/// none, or is no ELF file, or cannot be read.
pub fn mpi_library_linked_by(path: &Path) -> Option<String> {
    if !read_head(path).starts_with(b"\x7fELF") {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    MARKERS
        .iter()
        .filter(|&&(_, s)| s == Source::Mpi)
        .find_map(|&(marker, _)| {
            let at = bytes.windows(marker.len()).position(|w| w == marker)?;
            let end = bytes[at..]
                .iter()
                .position(|&b| b == 0)
                .map_or(bytes.len(), |n| at + n);
            Some(String::from_utf8_lossy(&bytes[at..end.min(at + 256)]).into_owned())
        })
}

/// Whether the file named by `path` (a library's path or file name) is an MPI library by its
/// name.
fn is_mpi_library(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).as_bytes();
    MARKERS
        .iter()
        .any(|&(marker, s)| s == Source::Mpi && name.starts_with(marker))
}

/// The memory maps (`/proc/PID/maps`) of those of `pids` that are still there.
fn maps_of(pids: &[u32]) -> Vec<String> {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/maps")).ok())
        .collect()
}

/// Whether one of `maps` names `marker`.
fn names(maps: &[String], marker: &[u8]) -> bool {
    maps.iter().any(|m| contains(m.as_bytes(), marker))
}

/// Whether `haystack` contains `marker`.
fn contains(haystack: &[u8], marker: &[u8]) -> bool {
    haystack.windows(marker.len()).any(|w| w == marker)
}

/// The source for a command about to start: MPI if a word of it names an MPI launcher
/// (`mpirun*`, `mpiexec*`, `orterun`, `srun`, `prun`), whatever wraps it (`taskset`,
/// `numactl`, `env VAR=1`, `nice`, `chrt`, `time`, `timeout`, a shell's `-c` script, a shell
/// script the command runs, read from its file: one starting with `#!`, or one named by `sh`
/// or `bash`, a few levels deep); otherwise MPI or PVM if a word names an executable that
/// links that library (its dynamic string table names it: see `MARKERS`); otherwise
/// sockets.
pub fn for_command(argv: &[String]) -> Source {
    let mut found = Found::default();
    scan_words(argv.iter().map(String::as_str), SCRIPT_DEPTH, &mut found);
    if found.launcher.is_some() || !statically_linked_mpi(argv).is_empty() {
        return Source::Mpi;
    }
    pick(|marker| found.binaries.iter().any(|f| contains(f, marker)))
}

/// The MPI library whose launcher the command runs, when the launcher's name says, itself or
/// the file it resolves to (Debian's `mpirun` is a link through `/etc/alternatives`): Open
/// MPI's (`mpirun.openmpi`, `orterun`, `prterun`) or MPICH's (`mpirun.mpich`,
/// `mpiexec.hydra`). `None` when the command names no launcher or one that says neither
/// (`srun`): then every installed MPI library is to be probed. Probing only the job's own
/// library saves reading and attaching the other (some 0.1 s a run).
pub fn launcher_library(argv: &[String]) -> Option<Library> {
    let mut found = Found::default();
    scan_words(argv.iter().map(String::as_str), SCRIPT_DEPTH, &mut found);
    let word = found.launcher?;
    let resolved = file_of(&word, false).and_then(|p| p.canonicalize().ok());
    let names = [
        Some(file_name(&word).to_string()),
        resolved.map(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        }),
    ];
    names.into_iter().flatten().find_map(|name| {
        if ["openmpi", "orterun", "prterun"]
            .iter()
            .any(|m| name.contains(m))
        {
            Some(Library::OpenMpi)
        } else if ["mpich", "hydra"].iter().any(|m| name.contains(m)) {
            Some(Library::Mpich)
        } else {
            None
        }
    })
}

/// The ELF files a command names (its words, and the words of a shell's `-c` script) that
/// define `PMPI_Init` themselves: programs linked statically with MPI or with a copy of an MPI
/// library built in (and MPI libraries named outright, as in `LD_PRELOAD=...`). They are to be
/// probed themselves, as `--mpi-lib PROGRAM` would.
pub fn statically_linked_mpi(argv: &[String]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for word in words(argv.iter().map(String::as_str)) {
        let Some(path) = file_of(word, false) else {
            continue;
        };
        if !found.contains(&path) && defines_pmpi_init(&path) {
            found.push(path);
        }
    }
    found
}

/// Whether the ELF file at `path` defines `PMPI_Init` (in its dynamic or its full symbol
/// table: a static function of a program that keeps its symbol table counts too).
fn defines_pmpi_init(path: &Path) -> bool {
    use object::{Object, ObjectSymbol};
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    if !data.starts_with(b"\x7fELF") {
        return false;
    }
    let Ok(elf) = object::File::parse(&*data) else {
        return false;
    };
    let defined = |s: object::Symbol<'_, '_>| s.is_definition() && s.name() == Ok("PMPI_Init");
    elf.dynamic_symbols().any(defined) || elf.symbols().any(defined)
}

/// What the words of a command (and of the scripts it runs) name.
#[derive(Default)]
struct Found {
    /// An MPI launcher: the word naming it.
    launcher: Option<String>,
    /// The contents of the executables (ELF files) named.
    binaries: Vec<Vec<u8>>,
    /// The files already read, so that a script naming itself is read once.
    seen: Vec<PathBuf>,
}

/// The words of `args`: each argument split at whitespace and shell punctuation, so that a
/// shell's `-c` script is words too.
fn words<'a>(args: impl Iterator<Item = &'a str>) -> impl Iterator<Item = &'a str> {
    args.flat_map(|a| a.split(|c: char| c.is_whitespace() || ";|&()'\"`<>{}".contains(c)))
        .filter(|w| !w.is_empty())
}

/// Scans the words of `args` (each argument split at whitespace and shell punctuation, so a
/// shell's `-c` script is words too) into `found`, reading the scripts they name while
/// `depth` lasts.
fn scan_words<'a>(args: impl Iterator<Item = &'a str>, depth: u32, found: &mut Found) {
    // Whether the words since the last shell's name are its options only.
    let mut after_shell = false;
    for word in words(args) {
        if found.launcher.is_some() {
            return;
        }
        if is_launcher(word) {
            found.launcher = Some(word.to_string());
            return;
        }
        if after_shell && word.starts_with('-') {
            // The shell's options.
            continue;
        }
        let named_by_shell = after_shell;
        after_shell = SHELLS.contains(&file_name(word));
        let Some(path) = file_of(word, named_by_shell) else {
            continue;
        };
        if found.seen.contains(&path) {
            continue;
        }
        found.seen.push(path.clone());
        let Ok(meta) = path.metadata() else {
            continue;
        };
        let head = read_head(&path);
        if head.starts_with(b"\x7fELF") {
            if let Ok(bytes) = std::fs::read(&path) {
                found.binaries.push(bytes);
            }
        } else if depth > 0
            && meta.len() <= SCRIPT_BYTES
            && (head.starts_with(b"#!") || named_by_shell)
        {
            if let Ok(text) = std::fs::read(&path) {
                let text = String::from_utf8_lossy(&text);
                // Comment lines say nothing about what runs (the `#!` line names the
                // interpreter, which is a word of the command like any other).
                let lines: Vec<&str> = text
                    .lines()
                    .map(|l| l.strip_prefix("#!").unwrap_or(l))
                    .filter(|l| !l.trim_start().starts_with('#'))
                    .collect();
                scan_words(lines.into_iter(), depth - 1, found);
            }
        }
    }
}

/// The last component of the path `word`.
fn file_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Whether `word` names an MPI launcher: its file name is one of [`MPI_LAUNCHERS`], or one of
/// them followed by `.` and a variant's name (`mpirun.openmpi`, `mpiexec.hydra`), not a
/// file's extension (`mpirun.log`).
fn is_launcher(word: &str) -> bool {
    let name = file_name(word);
    let variant = |s: &str| {
        !s.is_empty()
            && !FILE_EXTENSIONS.contains(&s)
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    MPI_LAUNCHERS.iter().any(|l| {
        name == *l
            || name
                .strip_prefix(l)
                .and_then(|s| s.strip_prefix('.'))
                .is_some_and(variant)
    })
}

/// Extensions of files that are no launcher although named like one (`mpirun.log`).
const FILE_EXTENSIONS: [&str; 8] = ["log", "txt", "out", "err", "sh", "c", "conf", "cfg"];

/// The first bytes of the file at `path` (empty if unreadable).
fn read_head(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut head = Vec::with_capacity(4);
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(4).read_to_end(&mut head);
    }
    head
}

/// `word` as a file: a path (absolute or relative), a name found in `PATH`, or, when a shell
/// names it (`sh run.sh`), a file of that name in the working directory.
fn file_of(word: &str, named_by_shell: bool) -> Option<PathBuf> {
    let path = Path::new(word);
    if word.contains('/') {
        return path.is_file().then(|| path.to_path_buf());
    }
    if named_by_shell && path.is_file() {
        return Some(path.to_path_buf());
    }
    executable(word)
}

/// The first source whose marker `found` says is there, else sockets.
fn pick(found: impl Fn(&[u8]) -> bool) -> Source {
    MARKERS
        .iter()
        .find(|(marker, _)| found(marker))
        .map_or(Source::Sockets, |&(_, s)| s)
}

/// `arg` as an executable file: a path, or a name found in `PATH`.
fn executable(arg: &str) -> Option<PathBuf> {
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

    #[test]
    fn a_program_that_carries_mpi_itself_is_an_mpi_program() {
        let dir = std::env::temp_dir().join(format!("lbf-select-static-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, exe) = (dir.join("static_mpi.c"), dir.join("static_mpi"));
        std::fs::write(
            &src,
            "int PMPI_Init(int *c, char ***v) { return 0; }\n\
             int main(int c, char **v) { return PMPI_Init(&c, &v); }\n",
        )
        .unwrap();
        let built = std::process::Command::new("gcc")
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("running gcc");
        assert!(built.success());
        let exe_word = exe.to_str().unwrap().to_string();
        let cmd = argv(&["taskset", "-c", "0", &exe_word]);
        assert_eq!(statically_linked_mpi(&cmd), std::slice::from_ref(&exe));
        assert_eq!(for_command(&cmd), Source::Mpi);
        // A launcher in front: still found, to be probed.
        let cmd = argv(&["mpirun", "-np", "2", &exe_word]);
        assert_eq!(statically_linked_mpi(&cmd), [exe]);
        assert!(statically_linked_mpi(&argv(&["sh", "-c", "echo"])).is_empty());
        std::fs::remove_dir_all(dir).ok();
    }
    use std::os::unix::fs::PermissionsExt;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    /// A fresh directory for this test's files.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lbf-select-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes an executable file `name` in `dir` with `contents`; returns its path.
    fn file(dir: &Path, name: &str, contents: &[u8]) -> String {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.to_string_lossy().into_owned()
    }

    /// Something shaped like an ELF executable whose dynamic string table names `needed`.
    fn fake_elf(needed: &[&str]) -> Vec<u8> {
        let mut bytes = b"\x7fELF\x02\x01\x01\0".to_vec();
        bytes.extend([0u8; 56]);
        for n in ["libc.so.6", "libgfortran.so.5"].iter().chain(needed) {
            bytes.extend(n.as_bytes());
            bytes.push(0);
        }
        bytes
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
    fn every_launcher_is_seen_through_every_wrapper() {
        let launchers = [
            "mpirun",
            "mpirun.openmpi",
            "mpirun.mpich",
            "mpiexec",
            "mpiexec.hydra",
            "mpiexec.openmpi",
            "/usr/bin/mpiexec.mpich",
            "orterun",
            "srun",
            "prun",
            "/opt/slurm/bin/srun",
        ];
        let wrappers: [&[&str]; 11] = [
            &[],
            &["taskset", "-c", "0,1"],
            &["numactl", "--cpunodebind=0", "--membind=0"],
            &["env", "VAR=1", "OTHER=2"],
            &["nice", "-n", "5"],
            &["chrt", "-f", "10"],
            &["time"],
            &["/usr/bin/time", "-v"],
            &["timeout", "60"],
            &["taskset", "-c", "0", "env", "A=1", "nice"],
            &["setsid"],
        ];
        for launcher in launchers {
            for wrapper in wrappers {
                let mut command = argv(wrapper);
                command.extend(argv(&[
                    launcher,
                    "--bind-to",
                    "core",
                    "-x",
                    "FOO=1",
                    "-np",
                    "4",
                    "./cg",
                ]));
                assert_eq!(for_command(&command), Source::Mpi, "{command:?}");
            }
            let line = format!("cd /tmp && OMP_NUM_THREADS=1 {launcher} -n 4 ./cg > out.txt");
            for shell in ["sh", "bash", "/bin/sh"] {
                let command = argv(&[shell, "-c", &line]);
                assert_eq!(for_command(&command), Source::Mpi, "{command:?}");
            }
            let command = argv(&["taskset", "-c", "0,1", "sh", "-c", &line]);
            assert_eq!(for_command(&command), Source::Mpi, "{command:?}");
        }
    }

    /// The launcher's library, from its name or the file it resolves to; none for a
    /// launcher that does not say, or no launcher.
    #[test]
    fn the_launcher_says_which_library_the_job_uses() {
        let lib = |words: &[&str]| launcher_library(&argv(words));
        assert_eq!(
            lib(&["mpirun.openmpi", "-np", "2", "x"]),
            Some(Library::OpenMpi)
        );
        assert_eq!(
            lib(&["taskset", "-c", "0", "mpirun.mpich", "-n", "2", "x"]),
            Some(Library::Mpich)
        );
        assert_eq!(
            lib(&["sh", "-c", "mpiexec.hydra -n 2 x"]),
            Some(Library::Mpich)
        );
        assert_eq!(lib(&["srun", "-n", "2", "x"]), None);
        assert_eq!(lib(&["./a.out"]), None);
        // A link named like no library, to a launcher that is one.
        let dir = std::env::temp_dir().join(format!("lbf-launcher-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (target, link) = (dir.join("orterun"), dir.join("mpirun"));
        std::fs::write(&target, "#!/bin/sh\n").unwrap();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let word = link.display().to_string();
        assert_eq!(lib(&[&word, "-np", "2", "x"]), Some(Library::OpenMpi));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn names_like_a_launcher_are_not_one() {
        for word in [
            "mpirun.log",
            "mpirun.sh",
            "mpirunner",
            "smpirun",
            "sruns",
            "/tmp/mpiexec.out",
            "",
        ] {
            assert!(!is_launcher(word), "{word}");
        }
        let command = argv(&["taskset", "-c", "0", "cat", "mpirun.log"]);
        assert_eq!(for_command(&command), Source::Sockets);
    }

    #[test]
    fn scripts_are_read_for_their_launchers() {
        let dir = scratch("scripts");
        let run = file(
            &dir,
            "run.sh",
            b"#!/bin/sh\n# mpirun is named in a comment only here: no matter\nset -e\n\
              OMPI_ALLOW_RUN_AS_ROOT=1 mpirun.openmpi --bind-to none -np 4 ./cg \"$@\"\n",
        );
        assert_eq!(for_command(&argv(&[&run])), Source::Mpi);
        assert_eq!(
            for_command(&argv(&["taskset", "-c", "0,1", &run, "arg"])),
            Source::Mpi
        );
        // Without `#!`, but named by a shell.
        let plain = file(&dir, "plain", b"srun -n 4 ./cg\n");
        assert_eq!(for_command(&argv(&[&plain])), Source::Sockets);
        for shell in ["sh", "bash", "/usr/bin/bash"] {
            assert_eq!(for_command(&argv(&[shell, &plain])), Source::Mpi);
            assert_eq!(
                for_command(&argv(&["env", "A=1", shell, "-e", &plain])),
                Source::Mpi
            );
        }
        // A script running a script running mpiexec.hydra.
        let inner = file(
            &dir,
            "inner.sh",
            b"#!/bin/bash\nexec mpiexec.hydra -n 2 ./cg\n",
        );
        let outer = file(
            &dir,
            "outer.sh",
            format!("#!/bin/sh\nnice -n 1 {inner}\n").as_bytes(),
        );
        assert_eq!(for_command(&argv(&["timeout", "60", &outer])), Source::Mpi);
        // Too deep: a chain longer than SCRIPT_DEPTH is not followed to its end.
        let mut last = inner.clone();
        for i in 0..SCRIPT_DEPTH + 1 {
            last = file(
                &dir,
                &format!("chain{i}.sh"),
                format!("#!/bin/sh\n{last}\n").as_bytes(),
            );
        }
        assert_eq!(for_command(&argv(&[&last])), Source::Sockets);
        // A script naming itself is read once.
        let selfish = dir.join("self.sh");
        let selfish = file(
            &dir,
            "self.sh",
            format!("#!/bin/sh\n{}\n", selfish.display()).as_bytes(),
        );
        assert_eq!(for_command(&argv(&[&selfish])), Source::Sockets);
        // A script that starts servers and clients is a socket program.
        let server = file(&dir, "server", &fake_elf(&[]));
        let sockets = file(
            &dir,
            "sockets.sh",
            format!("#!/bin/sh\n{server} 7300 &\n{server} client\nwait\n").as_bytes(),
        );
        assert_eq!(
            for_command(&argv(&["taskset", "-c", "0,1", &sockets])),
            Source::Sockets
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_mpi_binding_marks_an_mpi_program() {
        let dir = scratch("bindings");
        let bindings: [&[&str]; 9] = [
            // Open MPI: Fortran (mpif.h, use mpi, use mpi_f08), C++, and C.
            &["libmpi_mpifh.so.40"],
            &["libmpi_usempi_ignore_tkr.so.40", "libmpi_mpifh.so.40"],
            &["libmpi_usempif08.so.40"],
            &["libmpi_cxx.so.40"],
            &["libmpi.so.40"],
            // MPICH: Fortran, C++ and C, by Debian's names and by MPICH's own.
            &["libmpichfort.so.12"],
            &["libmpichcxx.so.12"],
            &["libmpifort.so.12", "libmpicxx.so.12"],
            &["libmpich.so.12"],
        ];
        for (i, needed) in bindings.iter().enumerate() {
            let program = file(&dir, &format!("prog{i}"), &fake_elf(needed));
            for command in [
                argv(&[&program]),
                argv(&["taskset", "-c", "0,1", &program, "10"]),
                argv(&["env", "VAR=1", &program]),
                argv(&["sh", "-c", &format!("{program} 10 > out")]),
            ] {
                assert_eq!(
                    for_command(&command),
                    Source::Mpi,
                    "{needed:?}: {command:?}"
                );
            }
            for library in needed.iter() {
                assert!(is_mpi_library(&format!("/usr/lib/{library}")), "{library}");
            }
            let linked = mpi_library_linked_by(Path::new(&program));
            assert!(
                linked.as_deref().is_some_and(|l| needed.contains(&l)),
                "{needed:?}: {linked:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn libraries_named_like_mpi_are_not_mpi() {
        let dir = scratch("lookalikes");
        let lookalikes = [
            "libmpfr.so.6",
            "libmpc.so.3",
            "libmpg123.so.0",
            "libmpdec.so.3",
        ];
        let program = file(&dir, "prog", &fake_elf(&lookalikes));
        assert_eq!(
            for_command(&argv(&["taskset", "-c", "0", &program])),
            Source::Sockets
        );
        for library in lookalikes {
            assert!(!is_mpi_library(library), "{library}");
        }
        assert_eq!(mpi_library_linked_by(Path::new(&program)), None);
        // A text file that names an MPI library is no program linking it.
        let notes = file(&dir, "notes", b"link with libmpi.so and libmpichfort.so\n");
        assert_eq!(for_command(&argv(&["cat", &notes])), Source::Sockets);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn plain_commands_are_socket_programs() {
        for command in [
            &["true"][..],
            &["taskset", "-c", "0,1", "true"],
            &["env", "VAR=1", "sh", "-c", "echo hello | cat"],
            &["nice", "-n", "5", "timeout", "10", "sleep", "1"],
        ] {
            assert_eq!(for_command(&argv(command)), Source::Sockets, "{command:?}");
        }
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
        let dir = scratch("pvm");
        let program = file(&dir, "master", &fake_elf(&["libpvm3.so.3"]));
        assert_eq!(
            for_command(&argv(&["taskset", "-c", "0", &program])),
            Source::Pvm
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_source_names_itself_as_traces_write_it() {
        for (s, name) in [
            (Source::Mpi, "mpi"),
            (Source::Pvm, "pvm"),
            (Source::Sockets, "sockets"),
        ] {
            assert_eq!(s.name(), name);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{name}\""));
            assert_eq!(
                serde_json::from_str::<Source>(&format!("\"{name}\"")).unwrap(),
                s
            );
        }
    }

    #[test]
    fn this_process_is_no_mpi_program() {
        assert_eq!(for_pids(&[std::process::id()]), Source::Sockets);
        assert!(!maps_library_of(std::process::id(), Source::Pvm));
        assert_eq!(mpi_library_mapped_by(std::process::id()), None);
    }
}
