//! The ping-pong through an MPI library: the bundled program
//! (`tests/workloads/mpi/calibrate_pingpong.c`, compiled by the library's `mpicc` on first
//! use into a cache directory) run by the library's `mpirun`, two ranks: on this host and a
//! peer host, or both on this host (the library's shared memory).

use crate::pingpong::{Measured, Plan};
use crate::progress::Progress;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The program's source, compiled as it is here.
const SOURCE: &str = include_str!("../../../tests/workloads/mpi/calibrate_pingpong.c");

/// An MPI library by its Debian command names (`mpicc.openmpi`, `mpirun.openmpi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    /// Open MPI.
    OpenMpi,
    /// MPICH.
    Mpich,
}

impl Library {
    /// The suffix of its commands: `openmpi` or `mpich`.
    pub fn suffix(self) -> &'static str {
        match self {
            Library::OpenMpi => "openmpi",
            Library::Mpich => "mpich",
        }
    }

    /// The library named `name` (`openmpi` or `mpich`).
    pub fn named(name: &str) -> Result<Self, String> {
        match name {
            "openmpi" => Ok(Library::OpenMpi),
            "mpich" => Ok(Library::Mpich),
            other => Err(format!("no MPI library \"{other}\": give openmpi or mpich")),
        }
    }

    /// The first library whose `mpicc` and `mpirun` are on the PATH: Open MPI, then MPICH.
    pub fn present() -> Option<Self> {
        [Library::OpenMpi, Library::Mpich].into_iter().find(|l| {
            on_path(&format!("mpicc.{}", l.suffix())) && on_path(&format!("mpirun.{}", l.suffix()))
        })
    }
}

/// Whether `name` is an executable on the PATH.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}

/// How to run the ping-pong.
#[derive(Clone, Debug)]
pub struct MpiRun {
    /// The library.
    pub library: Library,
    /// The two ranks' hosts (this host first), or `None` for both on this host.
    pub hosts: Option<[String; 2]>,
    /// More arguments for `mpirun`, before the program (e.g. how to reach the peer).
    pub launcher_args: Vec<String>,
}

/// The bundled program compiled by `library`'s `mpicc`, in `dir` (made if missing); compiled
/// again when the source differs from the one it was compiled from.
pub fn program(library: Library, dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let source = dir.join("calibrate_pingpong.c");
    let bin = dir.join(format!("calibrate_pingpong.{}", library.suffix()));
    let stale = std::fs::read_to_string(&source).map_or(true, |s| s != SOURCE) || !bin.exists();
    if stale {
        std::fs::write(&source, SOURCE)?;
        let cc = format!("mpicc.{}", library.suffix());
        let status = Command::new(&cc)
            .args(["-O2", "-o"])
            .arg(&bin)
            .arg(&source)
            .status()
            .map_err(|e| io::Error::new(e.kind(), format!("running {cc}: {e}")))?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "{cc} failed on {}",
                source.display()
            )));
        }
    }
    Ok(bin)
}

/// Runs the ping-pong of `plan` with `run`, the program compiled into `dir`.
pub fn measure(
    run: &MpiRun,
    plan: &Plan,
    dir: &Path,
    progress: &mut Progress,
) -> io::Result<Vec<Measured>> {
    let bin = program(run.library, dir)?;
    let mpirun = format!("mpirun.{}", run.library.suffix());
    let mut cmd = Command::new(&mpirun);
    cmd.args(["-np", "2"]);
    if let Some([a, b]) = &run.hosts {
        let flag = match run.library {
            Library::OpenMpi => "--host",
            Library::Mpich => "-hosts",
        };
        cmd.args([flag, &format!("{a},{b}")]);
    }
    if run.library == Library::OpenMpi {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    cmd.args(&run.launcher_args)
        .arg(&bin)
        .args([
            plan.max_bytes.to_string(),
            plan.min_reps.to_string(),
            plan.max_reps.to_string(),
            plan.budget.as_millis().to_string(),
        ])
        .stdout(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("running {mpirun}: {e}")))?;
    let total = plan.sizes().len();
    let mut measured = Vec::with_capacity(total);
    let stdout = child.stdout.take().expect("piped stdout");
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if let Some(m) = parse_line(&line) {
            measured.push(m);
            progress.show(measured.len(), total, &format!("{} B", m.bytes));
        }
    }
    let status = child.wait()?;
    progress.done();
    if !status.success() || measured.len() != total {
        return Err(io::Error::other(format!(
            "{mpirun} {} ended with {status} after {} of {total} sizes",
            bin.display(),
            measured.len()
        )));
    }
    Ok(measured)
}

/// A line `LBF-PINGPONG bytes seconds reps` of the program.
fn parse_line(line: &str) -> Option<Measured> {
    let mut w = line.strip_prefix("LBF-PINGPONG ")?.split_whitespace();
    Some(Measured {
        bytes: w.next()?.parse().ok()?,
        seconds: w.next()?.parse().ok()?,
        reps: w.next()?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_says_one_line_a_size() {
        assert_eq!(
            parse_line("LBF-PINGPONG 4096 1.5e-05 200"),
            Some(Measured {
                bytes: 4096,
                seconds: 1.5e-5,
                reps: 200
            })
        );
        assert_eq!(parse_line("LBF-PINGPONG 4096"), None);
        assert_eq!(parse_line("hello"), None);
        assert_eq!(Library::named("mpich"), Ok(Library::Mpich));
        assert!(Library::named("lam")
            .unwrap_err()
            .contains("openmpi or mpich"));
    }
}
