//! Which MPI library a process uses, and the [`Abi`] that decodes its calls.

use lbf_common::FnReads;

use super::call::{self, Peer, Status};
use super::mpich::{self, Mpich};
use super::openmpi::{self, OpenMpi};

/// An MPI implementation lbf knows the ABI of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Library {
    /// Open MPI 4.x, `libmpi.so.40`.
    OpenMpi,
    /// MPICH 4.x, `libmpich.so.12`.
    Mpich,
}

impl Library {
    /// Every known library.
    pub const ALL: [Library; 2] = [Library::OpenMpi, Library::Mpich];

    /// The shared object's soname, as it appears in `/proc/PID/maps` and to the loader.
    pub fn soname(self) -> &'static str {
        match self {
            Library::OpenMpi => openmpi::SONAME,
            Library::Mpich => mpich::SONAME,
        }
    }

    /// The library whose file `path` is (a mapped file or a library the loader attaches to):
    /// its file name is the soname, possibly followed by more version numbers
    /// (`libmpich.so.12.2.2`).
    pub fn from_path(path: &str) -> Option<Library> {
        let name = path.rsplit('/').next()?;
        Library::ALL.into_iter().find(|lib| {
            name.strip_prefix(lib.soname())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
    }

    /// The memory reads the kernel must do for this library's calls: `(lbf_common::mpi`
    /// function id, reads)` for each function that reads anything (the form
    /// `probe::Tracer::attach_mpi_library` takes).
    pub fn fn_reads(self) -> Vec<(u16, FnReads)> {
        call::fn_reads(match self {
            Library::OpenMpi => openmpi::LAYOUT,
            Library::Mpich => mpich::LAYOUT,
        })
    }
}

/// One process's MPI ABI: decodes handles, ranks, tags, statuses and datatype sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abi {
    /// Open MPI, with this process's `MPI_COMM_WORLD` address.
    OpenMpi(OpenMpi),
    /// MPICH.
    Mpich(Mpich),
}

impl Abi {
    /// The library.
    pub fn library(&self) -> Library {
        match self {
            Abi::OpenMpi(_) => Library::OpenMpi,
            Abi::Mpich(_) => Library::Mpich,
        }
    }

    /// `MPI_COMM_WORLD`'s handle in this process.
    pub fn world(&self) -> u64 {
        match self {
            Abi::OpenMpi(o) => o.comm_world,
            Abi::Mpich(_) => mpich::COMM_WORLD,
        }
    }

    /// `MPI_COMM_SELF`'s handle in this process.
    pub fn comm_self(&self) -> u64 {
        match self {
            Abi::OpenMpi(o) => o.comm_self,
            Abi::Mpich(_) => mpich::COMM_SELF,
        }
    }

    /// `MPI_REQUEST_NULL` in this process.
    pub fn request_null(&self) -> u64 {
        match self {
            Abi::OpenMpi(o) => o.request_null,
            Abi::Mpich(_) => mpich::REQUEST_NULL,
        }
    }

    /// A communicator handle passed as an argument word, normalised (`int` handles masked).
    pub fn comm_handle(&self, word: u64) -> u64 {
        match self {
            Abi::OpenMpi(_) => word,
            Abi::Mpich(_) => u64::from(word as u32),
        }
    }

    /// Decodes a rank argument.
    pub fn peer(&self, raw: i32) -> Peer {
        match self {
            Abi::OpenMpi(_) => OpenMpi::peer(raw),
            Abi::Mpich(_) => Mpich::peer(raw),
        }
    }

    /// Decodes a tag argument: `None` for `MPI_ANY_TAG`.
    pub fn tag(&self, raw: i32) -> Option<i32> {
        match self {
            Abi::OpenMpi(_) => OpenMpi::tag(raw),
            Abi::Mpich(_) => Mpich::tag(raw),
        }
    }

    /// Size in bytes of datatype `handle`; `entry_mem` is what the kernel read at entry.
    pub fn datatype_size(&self, handle: u64, entry_mem: &[u8]) -> Option<u64> {
        match self {
            Abi::OpenMpi(_) => OpenMpi::datatype_size(entry_mem),
            Abi::Mpich(_) => Mpich::datatype_size(handle),
        }
    }

    /// A datatype handle from an argument word or a read handle, as [`Self::handles`] and
    /// the derived types' table key it.
    pub fn datatype_handle(&self, word: u64) -> u64 {
        self.comm_handle(word)
    }

    /// Whether a buffer argument is `MPI_IN_PLACE` (Open MPI's `(void *)1`, MPICH's
    /// `(void *)-1`).
    pub fn in_place(&self, word: u64) -> bool {
        match self {
            Abi::OpenMpi(_) => word == 1,
            Abi::Mpich(_) => word == u64::MAX,
        }
    }

    /// The handles in `mem` (an array of requests or communicators).
    pub fn handles(&self, mem: &[u8]) -> Vec<u64> {
        match self {
            Abi::OpenMpi(_) => mem.chunks_exact(8).filter_map(OpenMpi::handle).collect(),
            Abi::Mpich(_) => mem.chunks_exact(4).filter_map(Mpich::handle).collect(),
        }
    }

    /// The statuses in `mem` (empty when the kernel could not read them, e.g. ignored).
    pub fn statuses(&self, mem: &[u8]) -> Vec<Status> {
        match self {
            Abi::OpenMpi(_) => mem.chunks_exact(24).filter_map(OpenMpi::status).collect(),
            Abi::Mpich(_) => mem.chunks_exact(20).filter_map(Mpich::status).collect(),
        }
    }

    /// A C `int` the call wrote (e.g. `MPI_Comm_rank`'s answer).
    pub fn int(mem: &[u8]) -> Option<i32> {
        Some(i32::from_le_bytes(mem.get(..4)?.try_into().ok()?))
    }
}
