//! MPICH 4.0 (`libmpich.so.12`): the ABI quirks, from
//! `/usr/include/x86_64-linux-gnu/mpich/mpi.h`.
//!
//! - Handles are `int`s. Bits 30-31 are the kind (1 = builtin), bits 26-29 the object type.
//!   `MPI_COMM_WORLD` = `0x44000000` in every process.
//! - Builtin datatypes encode their size in bits 8-15 (`MPI_INT` = `0x4c000405`: 4 bytes). The
//!   pair types for `MINLOC`/`MAXLOC` are not builtins (`0x8c00000N`) and are tabled here.
//!   Derived datatypes' sizes live in MPICH's object pools (`MPIR_Datatype_direct`,
//!   `MPIR_Datatype_mem`), which `libmpich.so.12` does not export (`nm -D`; the library is
//!   stripped): the capture sizes them by following the type constructors instead
//!   (`call`'s module documentation). A derived type made before the capture saw the
//!   process has unknown size (counted in the capture summary).
//! - `MPI_Status` is `{ int count_lo; int count_hi_and_cancelled; int MPI_SOURCE, MPI_TAG,
//!   MPI_ERROR }` (20 bytes; the count is in bytes: `count_lo | (count_hi_and_cancelled >> 1)
//!   << 32`); `MPI_STATUS_IGNORE` is `(MPI_Status *)1`, which the kernel fails to read.
//! - `MPI_ANY_SOURCE` = -2, `MPI_PROC_NULL` = -1, `MPI_ANY_TAG` = -1.

use lbf_common::maps::abi::mpich_builtin_size;

use super::call::{decode_tag, Layout, Peer, Status};

/// Read lengths for the kernel's table (datatypes need no read).
pub const LAYOUT: Layout = Layout {
    handle: 4,
    status: 20,
    datatype: 0,
};

/// `MPI_COMM_WORLD`.
pub const COMM_WORLD: u64 = 0x4400_0000;

/// `MPI_COMM_SELF`.
pub const COMM_SELF: u64 = 0x4400_0001;

/// `MPI_REQUEST_NULL`.
pub const REQUEST_NULL: u64 = 0x2c00_0000;

/// The soname that identifies MPICH in a process's memory map.
pub const SONAME: &str = "libmpich.so.12";

const ANY_SOURCE: i32 = -2;
const PROC_NULL: i32 = -1;
const ANY_TAG: i32 = -1;

/// `(handle, bytes)` of the predefined pair datatypes, which are not encoded as builtins.
const PAIR_TYPES: [(u32, u64); 5] = [
    (0x8c00_0000, 8),  // MPI_FLOAT_INT
    (0x8c00_0001, 16), // MPI_DOUBLE_INT
    (0x8c00_0002, 16), // MPI_LONG_INT
    (0x8c00_0003, 8),  // MPI_SHORT_INT
    (0x8c00_0004, 32), // MPI_LONG_DOUBLE_INT
];

/// MPICH's ABI (the same in every process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mpich;

impl Mpich {
    /// Decodes a rank argument.
    pub fn peer(raw: i32) -> Peer {
        Peer::decode(raw, ANY_SOURCE, PROC_NULL)
    }

    /// Decodes a tag argument: `None` for `MPI_ANY_TAG`.
    pub fn tag(raw: i32) -> Option<i32> {
        decode_tag(raw, ANY_TAG)
    }

    /// Size of the datatype `handle` when it is predefined.
    pub fn datatype_size(handle: u64) -> Option<u64> {
        let handle = handle as u32;
        if let Some(size) = mpich_builtin_size(handle) {
            return Some(size);
        }
        PAIR_TYPES
            .iter()
            .find(|(h, _)| *h == handle)
            .map(|&(_, bytes)| bytes)
    }

    /// Decodes one `MPI_Status` (20 bytes).
    pub fn status(mem: &[u8]) -> Option<Status> {
        let int = |at: usize| Some(u32::from_le_bytes(mem.get(at..at + 4)?.try_into().ok()?));
        let bytes = u64::from(int(0)?) | (u64::from(int(4)? >> 1) << 32);
        Some(Status {
            source: int(8)? as i32,
            tag: int(12)? as i32,
            bytes,
        })
    }

    /// Decodes one handle (an `int`, 4 bytes).
    pub fn handle(mem: &[u8]) -> Option<u64> {
        Some(u64::from(u32::from_le_bytes(
            mem.get(..4)?.try_into().ok()?,
        )))
    }
}
