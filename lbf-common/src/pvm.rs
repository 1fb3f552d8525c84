//! The PVM 3 functions lbf probes, numbered. Their ids follow the MPI ids' range (below 64)
//! in the same per-function memory read table, so a PVM process (library slot 0) reads with
//! its own entries; one source is probed per capture anyway.

/// `pvm_mytid()`: the caller's task id (return value).
pub const MYTID: u16 = 100;
/// `pvm_initsend(encoding)`: a new active send buffer.
pub const INITSEND: u16 = 101;
/// `pvm_send(tid, tag)`: sends the active buffer.
pub const SEND: u16 = 102;
/// `pvm_mcast(tids, ntask, tag)`: sends the active buffer to each of `tids`.
pub const MCAST: u16 = 103;
/// `pvm_psend(tid, tag, buf, len, datatype)`: packs and sends in one call.
pub const PSEND: u16 = 104;
/// `pvm_recv(tid, tag)`: blocking receive.
pub const RECV: u16 = 105;
/// `pvm_nrecv(tid, tag)`: nonblocking receive (0: nothing).
pub const NRECV: u16 = 106;
/// `pvm_trecv(tid, tag, timeout)`: receive with a timeout (0: nothing).
pub const TRECV: u16 = 107;
/// `pvm_precv(tid, tag, buf, len, datatype, &rtid, &rtag, &rcnt)`: receive and unpack.
pub const PRECV: u16 = 108;
/// `pvm_exit()`: the task leaves PVM.
pub const EXIT: u16 = 109;
/// `pvm_pkbyte(ptr, n, stride)`, 1 byte per item.
pub const PKBYTE: u16 = 110;
/// `pvm_pkshort`, 2 bytes per item.
pub const PKSHORT: u16 = 111;
/// `pvm_pkushort`, 2 bytes per item.
pub const PKUSHORT: u16 = 112;
/// `pvm_pkint`, 4 bytes per item.
pub const PKINT: u16 = 113;
/// `pvm_pkuint`, 4 bytes per item.
pub const PKUINT: u16 = 114;
/// `pvm_pkfloat`, 4 bytes per item.
pub const PKFLOAT: u16 = 115;
/// `pvm_pklong`, 8 bytes per item.
pub const PKLONG: u16 = 116;
/// `pvm_pkulong`, 8 bytes per item.
pub const PKULONG: u16 = 117;
/// `pvm_pkdouble`, 8 bytes per item.
pub const PKDOUBLE: u16 = 118;
/// `pvm_pkcplx`, 8 bytes per item.
pub const PKCPLX: u16 = 119;
/// `pvm_pkdcplx`, 16 bytes per item.
pub const PKDCPLX: u16 = 120;
/// `pvm_pkstr(s)`: the string is read to find its length.
pub const PKSTR: u16 = 121;
/// `pvm_bcast(group, tag)` (libgpvm3): sends the active buffer to the group's other members.
pub const BCAST: u16 = 122;
/// `pvm_barrier(group, count)` (libgpvm3).
pub const BARRIER: u16 = 123;
/// `pvm_joingroup(group)` (libgpvm3): returns the caller's instance number.
pub const JOINGROUP: u16 = 124;

/// `(id, symbol)` of every probed function of libpvm3.
pub const NAMES: &[(u16, &str)] = &[
    (MYTID, "pvm_mytid"),
    (INITSEND, "pvm_initsend"),
    (SEND, "pvm_send"),
    (MCAST, "pvm_mcast"),
    (PSEND, "pvm_psend"),
    (RECV, "pvm_recv"),
    (NRECV, "pvm_nrecv"),
    (TRECV, "pvm_trecv"),
    (PRECV, "pvm_precv"),
    (EXIT, "pvm_exit"),
    (PKBYTE, "pvm_pkbyte"),
    (PKSHORT, "pvm_pkshort"),
    (PKUSHORT, "pvm_pkushort"),
    (PKINT, "pvm_pkint"),
    (PKUINT, "pvm_pkuint"),
    (PKFLOAT, "pvm_pkfloat"),
    (PKLONG, "pvm_pklong"),
    (PKULONG, "pvm_pkulong"),
    (PKDOUBLE, "pvm_pkdouble"),
    (PKCPLX, "pvm_pkcplx"),
    (PKDCPLX, "pvm_pkdcplx"),
    (PKSTR, "pvm_pkstr"),
];

/// `(id, symbol)` of every probed function of libgpvm3 (groups).
pub const GROUP_NAMES: &[(u16, &str)] = &[
    (BCAST, "pvm_bcast"),
    (BARRIER, "pvm_barrier"),
    (JOINGROUP, "pvm_joingroup"),
];
