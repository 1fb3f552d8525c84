//! Library-neutral MPI calls: what a probed call means once its raw arguments are decoded.
//!
//! The argument *positions* come from the MPI standard's C bindings and are the same for every
//! library, so they live here, once: [`decode_entry`] turns an entry record into an [`Entry`]
//! and [`fn_reads`] builds the kernel's table of memory reads. Everything that differs between
//! libraries (handle widths, special ranks, status layout, datatype sizes) is asked of the
//! [`Abi`].
//!
//! A record carries [`ARG_WORDS`] arguments. Functions with more (`MPI_Sendrecv`,
//! `MPI_Sendrecv_replace`, `MPI_Gatherv`, `MPI_Scatterv`, `MPI_Alltoallv`) leave out buffers
//! the capture never needs (`mpi::dropped_args`); argument positions here are the C
//! prototype's, placed in the record by `mpi::word`.

use lbf_common::{mpi, FnReads, MemRead, ARG_WORDS, MAX_FNS};

use super::eager::SendMode;
use super::library::Abi;
use crate::event::CollOp;

/// A rank argument of a point-to-point call, in the communicator's rank space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A specific rank.
    Rank(u32),
    /// `MPI_ANY_SOURCE`.
    Any,
    /// `MPI_PROC_NULL`: the call moves nothing.
    Null,
}

impl Peer {
    /// Decodes a rank argument given the library's `MPI_ANY_SOURCE` and `MPI_PROC_NULL`.
    pub fn decode(raw: i32, any_source: i32, proc_null: i32) -> Peer {
        match raw {
            r if r == any_source => Peer::Any,
            r if r == proc_null => Peer::Null,
            r if r >= 0 => Peer::Rank(r as u32),
            _ => Peer::Null,
        }
    }
}

/// Decodes a tag argument given the library's `MPI_ANY_TAG`: `None` for any tag.
pub fn decode_tag(raw: i32, any_tag: i32) -> Option<i32> {
    (raw != any_tag).then_some(raw)
}

/// What a completed receive reports in its `MPI_Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// `MPI_SOURCE`: the sender's rank in the communicator.
    pub source: i32,
    /// `MPI_TAG`.
    pub tag: i32,
    /// Bytes received (the library's hidden count field).
    pub bytes: u64,
}

/// The envelope and size of an outgoing message, as the sender's arguments state them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendArgs {
    /// Communicator handle, local to the calling process.
    pub comm: u64,
    /// Destination rank.
    pub dest: Peer,
    /// Message tag.
    pub tag: i32,
    /// `count * datatype size`, or `None` when the datatype's size is unknown.
    pub bytes: Option<u64>,
}

/// What a receive accepts, as the receiver's arguments state it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvArgs {
    /// Communicator handle, local to the calling process; `None` when not visible (Sendrecv).
    pub comm: Option<u64>,
    /// Source rank, `Any` for `MPI_ANY_SOURCE` or when not visible.
    pub source: Peer,
    /// Tag, `None` for `MPI_ANY_TAG` or when not visible.
    pub tag: Option<i32>,
}

/// How a completion call (wait or test family) reports which requests finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Every non-null request completes (`MPI_Wait`, `MPI_Waitall`); statuses are read at exit.
    All,
    /// Only the requests whose handle MPI reset to `MPI_REQUEST_NULL` completed (`Waitany`,
    /// `Waitsome`, the `Test` family): the request array is read again at exit and compared.
    Changed,
}

/// A probed call decoded at its entry.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// `MPI_Init` / `MPI_Init_thread`.
    Init,
    /// `MPI_Finalize`.
    Finalize,
    /// `MPI_Comm_rank` or `MPI_Comm_size` on `comm`; the answer is read at exit.
    CommQuery {
        /// Communicator handle.
        comm: u64,
        /// Whether this is `MPI_Comm_size` (else `MPI_Comm_rank`).
        size: bool,
    },
    /// A blocking (`nonblocking == false`) or nonblocking send; the request is read at exit.
    Send {
        /// The outgoing message.
        send: SendArgs,
        /// `MPI_Isend` and friends.
        nonblocking: bool,
        /// Standard, synchronous or buffered.
        mode: SendMode,
    },
    /// `MPI_Recv` or `MPI_Irecv`; the status or request is read at exit.
    Recv {
        /// What the receive accepts.
        recv: RecvArgs,
        /// `MPI_Irecv`.
        nonblocking: bool,
    },
    /// `MPI_Sendrecv` / `MPI_Sendrecv_replace`: a send then a blocking receive.
    SendRecv {
        /// The outgoing message.
        send: SendArgs,
        /// The receive.
        recv: RecvArgs,
    },
    /// `MPI_Probe`: waits for a message without receiving it.
    Probe,
    /// A wait or test call on `requests` (the handles as read at entry).
    Complete {
        /// Request handles, in array order.
        requests: Vec<u64>,
        /// How completion is reported.
        how: Completion,
        /// Whether the array was longer than the record could carry.
        truncated: bool,
    },
    /// A collective operation.
    Collective {
        /// Communicator handle; `None` when not visible (the `v` variants with 9 arguments).
        comm: Option<u64>,
        /// Cost-model kind.
        op: CollOp,
        /// Payload per participant, when the datatype's size is known.
        bytes: Option<u64>,
    },
    /// `MPI_Comm_dup` (`split == None`) or `MPI_Comm_split`; the new handle is read at exit.
    CommCreate {
        /// Parent communicator handle.
        parent: u64,
        /// `(color, key)` of a split.
        split: Option<(i32, i32)>,
    },
    /// `MPI_Comm_free` of the handle read at entry.
    CommFree {
        /// The freed handle, if it could be read.
        comm: Option<u64>,
    },
    /// A probed call with no effect on the events (`MPI_Iprobe`, or unknown ids).
    Other,
}

/// The low 32 bits of an argument word as a C `int` (the upper half of a register holding an
/// `int` is unspecified by the x86-64 ABI).
pub fn int_arg(word: u64) -> i32 {
    word as u32 as i32
}

/// Decodes the entry of probed function `fn_id` from its argument words and entry memory.
pub fn decode_entry(abi: &Abi, fn_id: u16, args: &[u64; ARG_WORDS], mem: &[u8]) -> Entry {
    // Argument `i` of the C prototype, wherever the record keeps it (`mpi::word`).
    let arg = |i: usize| args[mpi::word(fn_id, i)];
    let count = |i: usize| int_arg(arg(i)).max(0) as u64;
    let bytes = |count_arg: usize, type_arg: usize| {
        abi.datatype_size(arg(type_arg), mem)
            .map(|size| count(count_arg) * size)
    };
    let send = |comm: u64| SendArgs {
        comm,
        dest: abi.peer(int_arg(arg(3))),
        tag: int_arg(arg(4)),
        bytes: bytes(1, 2),
    };
    let collective = |comm: Option<u64>, op: CollOp, bytes: Option<u64>| Entry::Collective {
        comm: comm.map(|c| abi.comm_handle(c)),
        op,
        bytes,
    };
    match fn_id {
        mpi::INIT | mpi::INIT_THREAD => Entry::Init,
        mpi::FINALIZE => Entry::Finalize,
        mpi::COMM_RANK | mpi::COMM_SIZE => Entry::CommQuery {
            comm: abi.comm_handle(arg(0)),
            size: fn_id == mpi::COMM_SIZE,
        },
        mpi::SEND | mpi::SSEND | mpi::BSEND | mpi::RSEND => Entry::Send {
            send: send(abi.comm_handle(arg(5))),
            nonblocking: false,
            mode: send_mode(fn_id),
        },
        mpi::ISEND | mpi::ISSEND | mpi::IBSEND | mpi::IRSEND => Entry::Send {
            send: send(abi.comm_handle(arg(5))),
            nonblocking: true,
            mode: send_mode(fn_id),
        },
        mpi::RECV | mpi::IRECV => Entry::Recv {
            recv: RecvArgs {
                comm: Some(abi.comm_handle(arg(5))),
                source: abi.peer(int_arg(arg(3))),
                tag: abi.tag(int_arg(arg(4))),
            },
            nonblocking: fn_id == mpi::IRECV,
        },
        // (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
        // recvtag, comm, status) and (buf, count, datatype, dest, sendtag, source, recvtag,
        // comm, status): the buffers are left out of the record, so all the rest fits.
        mpi::SENDRECV | mpi::SENDRECV_REPLACE => {
            let (source, tag, comm) = if fn_id == mpi::SENDRECV {
                (8, 9, 10)
            } else {
                (5, 6, 7)
            };
            let comm = abi.comm_handle(arg(comm));
            Entry::SendRecv {
                send: send(comm),
                recv: RecvArgs {
                    comm: Some(comm),
                    source: abi.peer(int_arg(arg(source))),
                    tag: abi.tag(int_arg(arg(tag))),
                },
            }
        }
        mpi::PROBE => Entry::Probe,
        mpi::WAIT | mpi::WAITALL => complete(abi, mem, Completion::All, fn_id, args),
        mpi::WAITANY | mpi::WAITSOME | mpi::TEST | mpi::TESTALL | mpi::TESTANY | mpi::TESTSOME => {
            complete(abi, mem, Completion::Changed, fn_id, args)
        }
        mpi::BARRIER => collective(Some(arg(0)), CollOp::Barrier, Some(0)),
        // (buf, count, datatype, root, comm)
        mpi::BCAST => collective(Some(arg(4)), CollOp::Bcast, bytes(1, 2)),
        // (sendbuf, recvbuf, count, datatype, op, root, comm)
        mpi::REDUCE => collective(Some(arg(6)), CollOp::Reduce, bytes(2, 3)),
        // (sendbuf, recvbuf, count, datatype, op, comm)
        mpi::ALLREDUCE => collective(Some(arg(5)), CollOp::Allreduce, bytes(2, 3)),
        mpi::SCAN => collective(Some(arg(5)), CollOp::Allreduce, bytes(2, 3)),
        // (sendbuf, recvbuf, recvcounts[], datatype, op, comm): counts not read.
        mpi::REDUCE_SCATTER => collective(Some(arg(5)), CollOp::Allreduce, None),
        // (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)
        mpi::GATHER => collective(Some(arg(7)), CollOp::Reduce, bytes(1, 2)),
        // (sendbuf, sendcount, sendtype, recvbuf, recvcounts[], displs[], recvtype, root, comm)
        mpi::GATHERV => collective(Some(arg(8)), CollOp::Reduce, bytes(1, 2)),
        // Scatter: the receive side is significant at every rank.
        mpi::SCATTER => collective(Some(arg(7)), CollOp::Bcast, bytes(4, 5)),
        // (sendbuf, sendcounts[], displs[], sendtype, recvbuf, recvcount, recvtype, root, comm)
        mpi::SCATTERV => collective(Some(arg(8)), CollOp::Bcast, bytes(5, 6)),
        // (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
        mpi::ALLGATHER | mpi::ALLTOALL => collective(Some(arg(6)), CollOp::Allreduce, bytes(1, 2)),
        // (sendbuf, sendcount, sendtype, recvbuf, recvcounts[], displs[], recvtype, comm)
        mpi::ALLGATHERV => collective(Some(arg(7)), CollOp::Allreduce, bytes(1, 2)),
        // (sendbuf, sendcounts[], sdispls[], sendtype, recvbuf, recvcounts[], rdispls[],
        // recvtype, comm): counts not read.
        mpi::ALLTOALLV => collective(Some(arg(8)), CollOp::Allreduce, None),
        mpi::COMM_DUP => Entry::CommCreate {
            parent: abi.comm_handle(arg(0)),
            split: None,
        },
        // (comm_old, ndims, dims[], periods[], reorder, comm_cart): neither Open MPI 4.1 nor
        // MPICH 4.0 reorders, so the grid's ranks are the parent's, as in a dup.
        mpi::CART_CREATE => Entry::CommCreate {
            parent: abi.comm_handle(arg(0)),
            split: None,
        },
        mpi::COMM_SPLIT => Entry::CommCreate {
            parent: abi.comm_handle(arg(0)),
            split: Some((int_arg(arg(1)), int_arg(arg(2)))),
        },
        mpi::COMM_FREE => Entry::CommFree {
            comm: abi.handles(mem).first().copied(),
        },
        _ => Entry::Other,
    }
}

/// The mode of send function `fn_id`: ready sends go as standard ones.
fn send_mode(fn_id: u16) -> SendMode {
    match fn_id {
        mpi::SSEND | mpi::ISSEND => SendMode::Synchronous,
        mpi::BSEND | mpi::IBSEND => SendMode::Buffered,
        _ => SendMode::Standard,
    }
}

/// Decodes a wait/test call: the request array (or single request) read at entry.
fn complete(abi: &Abi, mem: &[u8], how: Completion, fn_id: u16, args: &[u64; ARG_WORDS]) -> Entry {
    let requests = abi.handles(mem);
    let wanted = match fn_id {
        mpi::WAIT | mpi::TEST => 1,
        _ => int_arg(args[0]).max(0) as usize,
    };
    Entry::Complete {
        truncated: requests.len() < wanted,
        requests,
        how,
    }
}

/// Sizes of the things the kernel reads for one library.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Bytes of one handle (`MPI_Request`, `MPI_Comm`) in user memory.
    pub handle: u16,
    /// Bytes of one `MPI_Status`.
    pub status: u16,
    /// Bytes to read at a datatype handle to learn its size (0: the handle itself tells).
    pub datatype: u16,
}

/// The kernel's memory reads for a library with `layout`: `(function id, reads)` for every
/// function that reads anything.
pub fn fn_reads(layout: Layout) -> Vec<(u16, FnReads)> {
    let at = |arg: u8, len: u16| MemRead {
        ptr_arg: arg + 1,
        count_arg: 0,
        len,
    };
    let array = |arg: u8, count: u8, len: u16| MemRead {
        ptr_arg: arg + 1,
        count_arg: count + 1,
        len,
    };
    let datatype = |arg: u8| {
        if layout.datatype == 0 {
            MemRead::default()
        } else {
            at(arg, layout.datatype)
        }
    };
    let none = MemRead::default();
    let mut table = [FnReads::default(); MAX_FNS as usize];
    // Reads name prototype positions; the kernel takes record words (`mpi::word`).
    let place = |id: u16, r: MemRead| {
        let word = |a: u8| match a {
            0 => 0,
            a => mpi::word(id, a as usize - 1) as u8 + 1,
        };
        MemRead {
            ptr_arg: word(r.ptr_arg),
            count_arg: word(r.count_arg),
            len: r.len,
        }
    };
    let mut set = |ids: &[u16], entry: MemRead, exit: MemRead| {
        for &id in ids {
            table[id as usize] = FnReads {
                entry: place(id, entry),
                exit: place(id, exit),
                ..FnReads::default()
            };
        }
    };
    set(&[mpi::COMM_RANK, mpi::COMM_SIZE], none, at(1, 4));
    set(
        &[mpi::SEND, mpi::SSEND, mpi::BSEND, mpi::RSEND],
        datatype(2),
        none,
    );
    set(
        &[mpi::ISEND, mpi::ISSEND, mpi::IBSEND, mpi::IRSEND],
        datatype(2),
        at(6, layout.handle),
    );
    set(&[mpi::RECV], none, at(6, layout.status));
    set(&[mpi::IRECV], none, at(6, layout.handle));
    set(&[mpi::SENDRECV], datatype(2), at(11, layout.status));
    set(&[mpi::SENDRECV_REPLACE], datatype(2), at(8, layout.status));
    set(&[mpi::PROBE], none, at(3, layout.status));
    set(&[mpi::WAIT], at(0, layout.handle), at(1, layout.status));
    set(
        &[mpi::WAITALL],
        array(1, 0, layout.handle),
        array(2, 0, layout.status),
    );
    let changed = [
        mpi::WAITANY,
        mpi::WAITSOME,
        mpi::TESTALL,
        mpi::TESTANY,
        mpi::TESTSOME,
    ];
    set(
        &changed,
        array(1, 0, layout.handle),
        array(1, 0, layout.handle),
    );
    set(&[mpi::TEST], at(0, layout.handle), at(0, layout.handle));
    set(
        &[
            mpi::BCAST,
            mpi::GATHER,
            mpi::GATHERV,
            mpi::ALLGATHER,
            mpi::ALLGATHERV,
        ],
        datatype(2),
        none,
    );
    set(&[mpi::ALLTOALL], datatype(2), none);
    set(&[mpi::REDUCE, mpi::ALLREDUCE, mpi::SCAN], datatype(3), none);
    set(&[mpi::SCATTER], datatype(5), none);
    set(&[mpi::SCATTERV], datatype(6), none);
    set(&[mpi::COMM_DUP], none, at(1, layout.handle));
    set(&[mpi::COMM_SPLIT], none, at(3, layout.handle));
    set(&[mpi::CART_CREATE], none, at(5, layout.handle));
    set(&[mpi::COMM_FREE], at(0, layout.handle), none);
    (0..MAX_FNS as u16)
        .map(|id| (id, table[id as usize]))
        .filter(|(_, r)| *r != FnReads::default())
        .collect()
}
