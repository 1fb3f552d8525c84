//! The two installed MPI implementations: how to launch a job with each, and how to probe
//! their libraries.

use lbf::capture::mpi::Library;
use lbf::probe::{self, Tracer};

use super::machine;

/// An installed MPI implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mpi {
    OpenMpi,
    Mpich,
}

impl Mpi {
    /// The name Debian's compiler wrapper and launcher carry (`mpicc.NAME`, `mpirun.NAME`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi",
            Mpi::Mpich => "mpich",
        }
    }

    /// The shell command that runs `np` ranks of `program args` as `setup` says.
    pub(crate) fn launch(self, np: u32, program: &str, args: &str, setup: Setup) -> String {
        let Setup {
            env,
            options,
            cpus,
            cgroup,
        } = setup;
        let taskset = cpus.map_or(String::new(), |c| format!("taskset -c {c} "));
        // `echo 0` moves the shell that writes it (the command's own subshell), which then
        // starts the launcher there.
        let join = cgroup.map_or(String::new(), |c| {
            format!("echo 0 > {}/cgroup.procs && ", c.display())
        });
        match self {
            Mpi::OpenMpi => format!(
                "{join}OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {env} {taskset}\
                 mpirun.openmpi --oversubscribe --bind-to none {options} -np {np} {program} {args}"
            ),
            Mpi::Mpich => format!("{join}{env} {taskset}mpirun.mpich -n {np} {program} {args}"),
        }
    }

    /// Whether its compiler wrapper and launcher (`mpicc.NAME`, `mpirun.NAME`) are installed;
    /// with `CI=true` a failure naming them if not (see [`machine::require`]).
    pub(crate) fn required(self) -> bool {
        let there = ["mpicc", "mpirun"].iter().all(|c| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {c}.{}", self.name()))
                .output()
                .is_ok_and(|o| o.status.success())
        });
        machine::require(&format!("{} (mpicc.{0}, mpirun.{0})", self.name()), there)
    }

    /// The library.
    pub(crate) fn library(self) -> Library {
        match self {
            Mpi::OpenMpi => Library::OpenMpi,
            Mpi::Mpich => Library::Mpich,
        }
    }

    /// How much a waiting rank of a job of `np` ranks loads its core (see docs/targets.md):
    /// MPICH polls flat out; Open MPI yields the CPU while it polls only when `mpirun` finds
    /// more ranks than slots (this machine's cores, whatever `taskset` allows), and polls flat
    /// out otherwise.
    pub(crate) fn spin(self, np: u32) -> f64 {
        match self {
            Mpi::OpenMpi if f64::from(np) > machine::cores() => 0.0,
            Mpi::OpenMpi | Mpi::Mpich => 1.0,
        }
    }
}

/// How an MPI run is launched beyond the defaults.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Setup<'a> {
    /// Environment variables (`NAME=value ...`) of the launcher and the ranks.
    pub env: &'a str,
    /// Open MPI's options beyond the defaults: `--mca` settings, a binding.
    pub options: &'a str,
    /// The CPUs (a `taskset -c` list) the job runs on; all if `None`.
    pub cpus: Option<&'a str>,
    /// The cgroup (its directory) the job runs in; the command's own if `None`.
    pub cgroup: Option<&'a std::path::Path>,
}

/// Probes every installed MPI library: how the MPI tests prepare a tracer.
pub(crate) fn probe_mpi(tracer: &mut Tracer) {
    for path in probe::installed_mpi_libraries().expect("finding MPI libraries") {
        if let Some(lib) = Library::from_path(&path.to_string_lossy()) {
            tracer
                .attach_mpi_library(&path, &lib.fn_reads())
                .expect("attaching");
        }
    }
}
