//! Where a trace's events came from: MPI calls, PVM calls or socket system calls. A trace's
//! header names it, and predictions print it, so that a reader knows what was modelled.

/// An event source.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
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

impl Source {
    /// The source as a trace header writes it and `--source` takes it: `mpi`, `pvm` or
    /// `sockets`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Mpi => "mpi",
            Source::Pvm => "pvm",
            Source::Sockets => "sockets",
        }
    }
}
