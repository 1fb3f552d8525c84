//! Open MPI 4.1 (`libmpi.so.40`): the ABI quirks, from
//! `/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h`.
//!
//! - Handles are pointers. Predefined ones are the addresses of exported objects:
//!   `MPI_COMM_WORLD` is `&ompi_mpi_comm_world`, so it differs per process (ASLR) and is
//!   resolved from the library's dynamic symbol table plus its load base (see `procfs`);
//!   `MPI_REQUEST_NULL` is `&ompi_request_null`.
//! - A datatype handle points at an `ompi_datatype_t`, whose first member is an
//!   `opal_datatype_t { opal_object_t super (16 bytes); u16 flags; u16 id; u32 bdt_used;
//!   size_t size; ... }`. The kernel reads the first [`DATATYPE_READ_BYTES`] at the handle at
//!   call entry and the size is taken at offset 24. This covers derived datatypes too, with no
//!   access to the process's memory from user space (checked against `MPI_INT`, `MPI_DOUBLE`,
//!   `MPI_BYTE` and a committed `MPI_Type_contiguous(7, MPI_DOUBLE)`: 4, 8, 1, 56).
//! - `MPI_Status` is `{ int MPI_SOURCE, MPI_TAG, MPI_ERROR; int _cancelled; size_t _ucount }`
//!   (24 bytes, `_ucount` in bytes); `MPI_STATUS_IGNORE` is `NULL`.
//! - `MPI_ANY_SOURCE` = -1, `MPI_PROC_NULL` = -2, `MPI_ANY_TAG` = -1.

use lbf_common::maps::abi::OPEN_MPI_DATATYPE_SIZE_AT;

use super::call::{decode_tag, Layout, Peer, Status};

/// Read lengths for the kernel's table.
pub const LAYOUT: Layout = Layout {
    handle: 8,
    status: 24,
    datatype: DATATYPE_READ_BYTES,
};

/// Bytes read at a datatype handle: `opal_datatype_t` up to and including `size`.
pub const DATATYPE_READ_BYTES: u16 = 32;

/// The exported object whose address is `MPI_COMM_WORLD`.
pub const COMM_WORLD_SYMBOL: &str = "ompi_mpi_comm_world";
/// The exported object whose address is `MPI_COMM_SELF`.
pub const COMM_SELF_SYMBOL: &str = "ompi_mpi_comm_self";

/// The exported object whose address is `MPI_REQUEST_NULL`.
pub const REQUEST_NULL_SYMBOL: &str = "ompi_request_null";

/// The soname that identifies Open MPI in a process's memory map.
pub const SONAME: &str = "libmpi.so.40";

const ANY_SOURCE: i32 = -1;
const PROC_NULL: i32 = -2;
const ANY_TAG: i32 = -1;

/// Open MPI as one process sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenMpi {
    /// `MPI_COMM_WORLD` in this process: the address of `ompi_mpi_comm_world`.
    pub comm_world: u64,
    /// `MPI_COMM_SELF` in this process: the address of `ompi_mpi_comm_self`.
    pub comm_self: u64,
    /// `MPI_REQUEST_NULL` in this process: the address of `ompi_request_null`.
    pub request_null: u64,
}

impl OpenMpi {
    /// Decodes a rank argument.
    pub fn peer(raw: i32) -> Peer {
        Peer::decode(raw, ANY_SOURCE, PROC_NULL)
    }

    /// Decodes a tag argument: `None` for `MPI_ANY_TAG`.
    pub fn tag(raw: i32) -> Option<i32> {
        decode_tag(raw, ANY_TAG)
    }

    /// Size of the datatype whose first bytes the kernel read at entry into `mem`.
    pub fn datatype_size(mem: &[u8]) -> Option<u64> {
        let field = mem.get(OPEN_MPI_DATATYPE_SIZE_AT..OPEN_MPI_DATATYPE_SIZE_AT + 8)?;
        Some(u64::from_le_bytes(field.try_into().ok()?))
    }

    /// Decodes one `MPI_Status` (24 bytes).
    pub fn status(mem: &[u8]) -> Option<Status> {
        let int = |at: usize| Some(i32::from_le_bytes(mem.get(at..at + 4)?.try_into().ok()?));
        let ucount = u64::from_le_bytes(mem.get(16..24)?.try_into().ok()?);
        Some(Status {
            source: int(0)?,
            tag: int(4)?,
            bytes: ucount,
        })
    }

    /// Decodes one handle (a pointer, 8 bytes).
    pub fn handle(mem: &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(mem.get(..8)?.try_into().ok()?))
    }
}
