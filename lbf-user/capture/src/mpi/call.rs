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
//! or displacements the capture never needs (`mpi::dropped_args`); argument positions here
//! are the C prototype's, placed in the record by `mpi::word`.
//!
//! # Bytes of collectives
//!
//! Each member of a collective states its own payload ([`CollBytes`]), which the capture
//! resolves once it knows the communicator's size and the member's rank there:
//!
//! - `MPI_Gatherv`, `MPI_Scatterv`, `MPI_Allgatherv`: the member's own scalar count (what it
//!   contributes, or for a scatter what it receives), times its datatype's size; the count
//!   arrays, significant at the root only or repeating the other members' own counts, add
//!   nothing a member does not state itself.
//! - `MPI_Alltoall`, `MPI_Alltoallv`: what the member sends to the *other* members: the send
//!   count times the size less the own block, or the sum of the send count array less the
//!   member's own entry. The array is read at entry, one `int` per member, as much as a record
//!   holds (48 members for Open MPI, whose entry also reads the send datatype in the same
//!   record, `lbf_common::FnReads::entry_more`; 64 for MPICH); a longer one is cut short and
//!   counted as an anomaly (its bytes beyond are left out). `MPI_IN_PLACE` as the send buffer
//!   makes the size unknown (the receive counts are not read).
//! - `MPI_Reduce_scatter`: the whole vector reduced, the sum of the receive count array (read
//!   as for `MPI_Alltoallv`); `MPI_Reduce_scatter_block`: the block times the members.
//!
//! # Derived datatypes
//!
//! Open MPI's datatype handles point at the datatype's description, which the kernel reads
//! ([`Layout::datatype`]). MPICH's handles of derived datatypes are indices into object pools
//! that are not exported, so the capture follows the type constructors instead
//! (`MPI_Type_contiguous`, `_vector`, `_create_hvector`, `_indexed`, `_create_hindexed`,
//! `_create_indexed_block`, `_create_hindexed_block`, `_create_struct`, `_create_resized`,
//! `_dup`, `_create_subarray`, and `MPI_Type_free`): each one's size follows from its
//! arguments and its old types' sizes, and the new handle is read at its return
//! ([`Entry::TypeCreate`]). A type made before the capture saw the process (an attach) stays
//! of unknown size; a struct of more than 16 types is not sized.

use lbf_common::{mpi, FnReads, MemRead, ARG_WORDS, MAX_FNS, MEM_BYTES, MORE_MEM_AT};
use rustc_hash::FxHashMap;

use super::eager::SendMode;
use super::library::Abi;
use crate::anomaly::Anomaly;
use lbf_model::event::CollOp;

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
        /// This member's payload, as far as its arguments tell it.
        bytes: CollBytes,
    },
    /// A type constructor: the new type's handle is read at the return.
    TypeCreate {
        /// The new type's size in bytes, when its old types' sizes are known.
        size: Option<u64>,
    },
    /// `MPI_Type_free` of the handle read at entry.
    TypeFree {
        /// The freed handle, if it could be read.
        handle: Option<u64>,
    },
    /// `MPI_Cancel` of the request handle read at entry.
    Cancel {
        /// The request, if it could be read.
        request: Option<u64>,
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

/// A collective member's payload as its arguments state it; [`CollBytes::resolve`] makes
/// bytes of it once the communicator's size and the member's rank are known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CollBytes {
    /// Known from scalar arguments.
    Known(u64),
    /// Not known: a datatype of unknown size, or `MPI_IN_PLACE` where the counts that apply
    /// are not read.
    Unknown,
    /// One count per member (as many as were read), each of `elem` bytes (`None`: unknown);
    /// the payload is their sum, less the member's own entry if `others`.
    Counts {
        /// The counts read, in rank order.
        counts: Vec<u64>,
        /// Bytes per counted element.
        elem: Option<u64>,
        /// Whether only the other members' counts count (what a member sends to others).
        others: bool,
    },
    /// The same `block` bytes per member, times the members (`None`: unknown).
    PerMember(Option<u64>),
    /// `block` bytes to each other member (`MPI_Alltoall`): `block` times the size less 1.
    ToOthers(Option<u64>),
}

impl CollBytes {
    /// The payload of the member of rank `rank` (`None`: unknown) in a communicator of `size`
    /// members, and the anomaly to count, if any: [`Anomaly::CollectiveOfUnknownSize`] (the
    /// payload is then 0) or [`Anomaly::CollectiveCountsCut`] (the members past the array are
    /// left out).
    pub fn resolve(&self, size: u32, rank: Option<u32>) -> (u64, Option<Anomaly>) {
        let unknown = (0, Some(Anomaly::CollectiveOfUnknownSize));
        match *self {
            CollBytes::Known(b) => (b, None),
            CollBytes::Unknown => unknown,
            CollBytes::PerMember(Some(b)) => (b * u64::from(size), None),
            CollBytes::ToOthers(Some(b)) => (b * u64::from(size.saturating_sub(1)), None),
            CollBytes::PerMember(None) | CollBytes::ToOthers(None) => unknown,
            CollBytes::Counts {
                ref counts,
                elem,
                others,
            } => {
                let Some(elem) = elem else {
                    return unknown;
                };
                let own = match (others, rank) {
                    (false, _) => None,
                    (true, Some(r)) => Some(r as usize),
                    (true, None) => return unknown,
                };
                let n = (size as usize).min(counts.len());
                let sum: u64 = (0..n).filter(|&i| Some(i) != own).map(|i| counts[i]).sum();
                let cut = counts.len() < size as usize;
                (sum * elem, cut.then_some(Anomaly::CollectiveCountsCut))
            }
        }
    }
}

/// Sizes of the derived datatypes a process made, by handle, learnt from its type
/// constructors (see the module documentation).
pub type DerivedTypes = FxHashMap<u64, u64>;

/// The low 32 bits of an argument word as a C `int` (the upper half of a register holding an
/// `int` is unspecified by the x86-64 ABI).
pub fn int_arg(word: u64) -> i32 {
    word as u32 as i32
}

/// The C `int`s at the start of `mem`, each as a count (negative ones as 0).
fn ints(mem: &[u8]) -> Vec<u64> {
    mem.chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")).max(0) as u64)
        .collect()
}

/// Decodes the entry of probed function `fn_id` from its argument words and entry memory:
/// `mem` the first read's valid bytes, `more` the second read's
/// ([`lbf_common::FnReads::entry_more`]; empty without one), `derived` the sizes of the
/// process's derived datatypes known so far.
pub fn decode_entry(
    abi: &Abi,
    fn_id: u16,
    args: &[u64; ARG_WORDS],
    mem: &[u8],
    more: &[u8],
    derived: &DerivedTypes,
) -> Entry {
    // Argument `i` of the C prototype, wherever the record keeps it (`mpi::word`).
    let arg = |i: usize| args[mpi::word(fn_id, i)];
    let count = |i: usize| int_arg(arg(i)).max(0) as u64;
    // The size of the datatype handle `h`, whose read (if any) is in `at`.
    let size_in = |h: u64, at: &[u8]| {
        abi.datatype_size(h, at)
            .or_else(|| derived.get(&abi.datatype_handle(h)).copied())
    };
    let size_of = |type_arg: usize| size_in(arg(type_arg), mem);
    let bytes = |count_arg: usize, type_arg: usize| size_of(type_arg).map(|s| count(count_arg) * s);
    // A derived type of `n` elements of the old type in argument `old`.
    let derive = |n: u64, old: usize| Entry::TypeCreate {
        size: size_of(old).map(|s| n * s),
    };
    // The first `n` (argument `n_arg`) ints of the entry read, if all were read.
    let array = |n_arg: usize| {
        let v = ints(mem);
        let n = count(n_arg) as usize;
        (v.len() >= n).then(|| v[..n].to_vec())
    };
    let send = |comm: u64| SendArgs {
        comm,
        dest: abi.peer(int_arg(arg(3))),
        tag: int_arg(arg(4)),
        bytes: bytes(1, 2),
    };
    let known = |b: Option<u64>| b.map_or(CollBytes::Unknown, CollBytes::Known);
    let to_others = CollBytes::ToOthers;
    let collective = |comm: Option<u64>, op: CollOp, bytes: CollBytes| Entry::Collective {
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
        mpi::BARRIER => collective(Some(arg(0)), CollOp::Barrier, CollBytes::Known(0)),
        // (buf, count, datatype, root, comm)
        mpi::BCAST => collective(Some(arg(4)), CollOp::Bcast, known(bytes(1, 2))),
        // (sendbuf, recvbuf, count, datatype, op, root, comm)
        mpi::REDUCE => collective(Some(arg(6)), CollOp::Reduce, known(bytes(2, 3))),
        // (sendbuf, recvbuf, count, datatype, op, comm)
        mpi::ALLREDUCE => collective(Some(arg(5)), CollOp::Allreduce, known(bytes(2, 3))),
        mpi::SCAN => collective(Some(arg(5)), CollOp::Allreduce, known(bytes(2, 3))),
        // (sendbuf, recvbuf, recvcounts[], datatype, op, comm): the counts at entry, the
        // datatype in the second read.
        mpi::REDUCE_SCATTER => collective(
            Some(arg(5)),
            CollOp::Allreduce,
            CollBytes::Counts {
                counts: ints(mem),
                elem: size_in(arg(3), more),
                others: false,
            },
        ),
        // (sendbuf, recvbuf, recvcount, datatype, op, comm)
        mpi::REDUCE_SCATTER_BLOCK => collective(
            Some(arg(5)),
            CollOp::Allreduce,
            CollBytes::PerMember(bytes(2, 3)),
        ),
        // (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)
        mpi::GATHER => collective(Some(arg(7)), CollOp::Reduce, known(bytes(1, 2))),
        // (sendbuf, sendcount, sendtype, recvbuf, recvcounts[], displs[], recvtype, root, comm)
        mpi::GATHERV => collective(Some(arg(8)), CollOp::Reduce, known(bytes(1, 2))),
        // Scatter: the receive side is significant at every rank.
        mpi::SCATTER => collective(Some(arg(7)), CollOp::Bcast, known(bytes(4, 5))),
        // (sendbuf, sendcounts[], displs[], sendtype, recvbuf, recvcount, recvtype, root, comm)
        mpi::SCATTERV => collective(Some(arg(8)), CollOp::Bcast, known(bytes(5, 6))),
        // (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
        mpi::ALLGATHER => collective(Some(arg(6)), CollOp::Allreduce, known(bytes(1, 2))),
        mpi::ALLTOALL => collective(Some(arg(6)), CollOp::Alltoall, to_others(bytes(1, 2))),
        // (sendbuf, sendcount, sendtype, recvbuf, recvcounts[], displs[], recvtype, comm)
        mpi::ALLGATHERV => collective(Some(arg(7)), CollOp::Allreduce, known(bytes(1, 2))),
        // (sendbuf, sendcounts[], sdispls[], sendtype, recvbuf, recvcounts[], rdispls[],
        // recvtype, comm): the send counts at entry, the send type in the second read.
        mpi::ALLTOALLV if abi.in_place(arg(0)) => {
            collective(Some(arg(8)), CollOp::Alltoall, CollBytes::Unknown)
        }
        mpi::ALLTOALLV => collective(
            Some(arg(8)),
            CollOp::Alltoall,
            CollBytes::Counts {
                counts: ints(mem),
                elem: size_in(arg(3), more),
                others: true,
            },
        ),
        // (count, oldtype, newtype*)
        mpi::TYPE_CONTIGUOUS => derive(count(0), 1),
        // (count, blocklength, stride, oldtype, newtype*)
        mpi::TYPE_VECTOR
        | mpi::TYPE_CREATE_HVECTOR
        | mpi::TYPE_CREATE_INDEXED_BLOCK
        | mpi::TYPE_CREATE_HINDEXED_BLOCK => derive(count(0) * count(1), 3),
        // (count, blocklengths[], displacements[], oldtype, newtype*)
        mpi::TYPE_INDEXED | mpi::TYPE_CREATE_HINDEXED => match array(0) {
            Some(lengths) => derive(lengths.iter().sum(), 3),
            None => Entry::TypeCreate { size: None },
        },
        // (count, blocklengths[], displacements[], types[], newtype*): the lengths at entry,
        // the types in the second read.
        mpi::TYPE_CREATE_STRUCT => {
            let types = abi.handles(more);
            let size = array(0).and_then(|lengths| {
                let each = types.get(..lengths.len())?;
                lengths
                    .iter()
                    .zip(each)
                    .map(|(&n, &t)| size_in(t, &[]).map(|s| n * s))
                    .sum::<Option<u64>>()
            });
            Entry::TypeCreate { size }
        }
        // (oldtype, lb, extent, newtype*)
        mpi::TYPE_CREATE_RESIZED => derive(1, 0),
        // (oldtype, newtype*)
        mpi::TYPE_DUP => derive(1, 0),
        // (ndims, sizes[], subsizes[], starts[], order, oldtype, newtype*): the subsizes at
        // entry.
        mpi::TYPE_CREATE_SUBARRAY => match array(0) {
            Some(sub) => derive(sub.iter().product(), 5),
            None => Entry::TypeCreate { size: None },
        },
        mpi::TYPE_FREE => Entry::TypeFree {
            handle: abi.handles(mem).first().map(|&h| abi.datatype_handle(h)),
        },
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
        mpi::CANCEL => Entry::Cancel {
            request: abi.handles(mem).first().copied(),
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

/// Whether function `fn_id` has a second entry read ([`lbf_common::FnReads::entry_more`]) in
/// some library's table: its entry record's `mem` from [`MORE_MEM_AT`] on holds it.
pub fn has_more(fn_id: u16) -> bool {
    matches!(
        fn_id,
        mpi::ALLTOALLV | mpi::REDUCE_SCATTER | mpi::TYPE_CREATE_STRUCT
    )
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
    let mut set_more = |ids: &[u16], entry: MemRead, more: MemRead, exit: MemRead| {
        for &id in ids {
            table[id as usize] = FnReads {
                entry: place(id, entry),
                exit: place(id, exit),
                entry_more: place(id, more),
                ..FnReads::default()
            };
        }
    };
    // The functions without a second read.
    macro_rules! set {
        ($ids:expr, $entry:expr, $exit:expr $(,)?) => {
            set_more($ids, $entry, none, $exit)
        };
    }
    set!(&[mpi::COMM_RANK, mpi::COMM_SIZE], none, at(1, 4));
    set!(
        &[mpi::SEND, mpi::SSEND, mpi::BSEND, mpi::RSEND],
        datatype(2),
        none,
    );
    set!(
        &[mpi::ISEND, mpi::ISSEND, mpi::IBSEND, mpi::IRSEND],
        datatype(2),
        at(6, layout.handle),
    );
    set!(&[mpi::RECV], none, at(6, layout.status));
    set!(&[mpi::IRECV], none, at(6, layout.handle));
    set!(&[mpi::SENDRECV], datatype(2), at(11, layout.status));
    set!(&[mpi::SENDRECV_REPLACE], datatype(2), at(8, layout.status));
    set!(&[mpi::PROBE], none, at(3, layout.status));
    set!(&[mpi::WAIT], at(0, layout.handle), at(1, layout.status));
    set!(
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
    set!(
        &changed,
        array(1, 0, layout.handle),
        array(1, 0, layout.handle),
    );
    set!(&[mpi::TEST], at(0, layout.handle), at(0, layout.handle));
    set!(
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
    set!(&[mpi::ALLTOALL], datatype(2), none);
    set!(&[mpi::REDUCE, mpi::ALLREDUCE, mpi::SCAN], datatype(3), none);
    set!(&[mpi::SCATTER], datatype(5), none);
    set!(&[mpi::SCATTERV], datatype(6), none);
    set!(&[mpi::COMM_DUP], none, at(1, layout.handle));
    set!(&[mpi::COMM_SPLIT], none, at(3, layout.handle));
    set!(&[mpi::CART_CREATE], none, at(5, layout.handle));
    set!(&[mpi::CANCEL], at(0, layout.handle), none);
    set!(&[mpi::COMM_FREE], at(0, layout.handle), none);
    set!(&[mpi::REDUCE_SCATTER_BLOCK], datatype(3), none);
    // A count array, one int per member (its length is the communicator's size, which no
    // argument gives: as much as the record holds), and the datatype in a second read if it
    // needs one.
    let counts_and_type = |counts: u8, datatype_arg: u8| {
        if layout.datatype == 0 {
            (at(counts, MEM_BYTES as u16), none)
        } else {
            (at(counts, MORE_MEM_AT as u16), datatype(datatype_arg))
        }
    };
    let (counts, dt) = counts_and_type(1, 3);
    set_more(&[mpi::ALLTOALLV], counts, dt, none);
    let (counts, dt) = counts_and_type(2, 3);
    set_more(&[mpi::REDUCE_SCATTER], counts, dt, none);
    // Type constructors: needed where datatype handles do not lead to their size (MPICH).
    if layout.datatype == 0 {
        let new_type = |arg: u8| at(arg, layout.handle);
        set!(&[mpi::TYPE_CONTIGUOUS], none, new_type(2));
        set!(
            &[
                mpi::TYPE_VECTOR,
                mpi::TYPE_CREATE_HVECTOR,
                mpi::TYPE_CREATE_INDEXED_BLOCK,
                mpi::TYPE_CREATE_HINDEXED_BLOCK,
            ],
            none,
            new_type(4),
        );
        set!(
            &[mpi::TYPE_INDEXED, mpi::TYPE_CREATE_HINDEXED],
            array(1, 0, 4),
            new_type(4),
        );
        set_more(
            &[mpi::TYPE_CREATE_STRUCT],
            array(1, 0, 4),
            array(3, 0, layout.handle),
            new_type(4),
        );
        set!(&[mpi::TYPE_CREATE_RESIZED], none, new_type(3));
        set!(&[mpi::TYPE_DUP], none, new_type(1));
        set!(&[mpi::TYPE_CREATE_SUBARRAY], array(2, 0, 4), new_type(6));
        set!(&[mpi::TYPE_FREE], at(0, layout.handle), none);
    }
    (0..MAX_FNS as u16)
        .map(|id| (id, table[id as usize]))
        .filter(|(_, r)| *r != FnReads::default())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::mpich::Mpich;
    use super::super::openmpi::OpenMpi;
    use super::*;

    const INT: u64 = 0x4c00_0405;
    const DOUBLE: u64 = 0x4c00_080b;
    const CHAR: u64 = 0x4c00_0101;

    fn ints_mem(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|i| i.to_le_bytes()).collect()
    }

    /// The record words of `fn_id` for the prototype's arguments `proto`.
    fn words(fn_id: u16, proto: &[u64]) -> [u64; ARG_WORDS] {
        let mut w = [0; ARG_WORDS];
        for (i, &a) in proto.iter().enumerate() {
            if mpi::dropped_args(fn_id) & (1 << i) == 0 {
                w[mpi::word(fn_id, i)] = a;
            }
        }
        w
    }

    fn bytes_of(e: Entry) -> CollBytes {
        match e {
            Entry::Collective { bytes, .. } => bytes,
            other => panic!("not a collective: {other:?}"),
        }
    }

    #[test]
    fn alltoallv_states_what_a_member_sends_to_the_others() {
        let abi = Abi::Mpich(Mpich);
        // (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)
        let args = words(
            mpi::ALLTOALLV,
            &[
                0x1000,
                0x2000,
                0x3000,
                INT,
                0x4000,
                0x5000,
                0x6000,
                INT,
                0x4400_0000,
            ],
        );
        let mem = ints_mem(&[3, 5, 7]);
        let derived = DerivedTypes::default();
        let b = bytes_of(decode_entry(
            &abi,
            mpi::ALLTOALLV,
            &args,
            &mem,
            &[],
            &derived,
        ));
        // Rank 1 of 3 sends 3 + 7 ints to the others.
        assert_eq!(b.resolve(3, Some(1)), (40, None));
        // A count array shorter than the communicator: the members beyond are left out, said.
        assert_eq!(
            b.resolve(4, Some(1)),
            (40, Some(Anomaly::CollectiveCountsCut))
        );
        assert_eq!(
            b.resolve(3, None),
            (0, Some(Anomaly::CollectiveOfUnknownSize))
        );
        // MPI_IN_PLACE: the send counts do not apply.
        let mut in_place = args;
        in_place[0] = u64::MAX;
        let e = decode_entry(&abi, mpi::ALLTOALLV, &in_place, &mem, &[], &derived);
        assert_eq!(bytes_of(e), CollBytes::Unknown);
    }

    #[test]
    fn open_mpis_alltoallv_and_reduce_scatter_take_the_datatype_from_the_second_read() {
        let abi = Abi::OpenMpi(OpenMpi {
            comm_world: 0x7000,
            comm_self: 0x7200,
            request_null: 0x7100,
        });
        let mut datatype = vec![0u8; 64];
        datatype[24..32].copy_from_slice(&8u64.to_le_bytes());
        let derived = DerivedTypes::default();
        // (sendbuf, recvbuf, recvcounts, datatype, op, comm)
        let args = words(
            mpi::REDUCE_SCATTER,
            &[0x1000, 0x2000, 0x3000, 0x8000, 0x9000, 0x7000],
        );
        let mem = ints_mem(&[1, 2]);
        let e = decode_entry(&abi, mpi::REDUCE_SCATTER, &args, &mem, &datatype, &derived);
        assert_eq!(bytes_of(e).resolve(2, Some(0)), (24, None));
        // Without the second read the size is unknown.
        let e = decode_entry(&abi, mpi::REDUCE_SCATTER, &args, &mem, &[], &derived);
        assert_eq!(
            bytes_of(e).resolve(2, Some(0)).1,
            Some(Anomaly::CollectiveOfUnknownSize)
        );
        // Its table: the counts in the first 192 bytes, the datatype in the second read.
        let reads = fn_reads(super::super::openmpi::LAYOUT);
        let (_, r) = reads.iter().find(|(id, _)| *id == mpi::ALLTOALLV).unwrap();
        assert_eq!((r.entry.ptr_arg, r.entry.len), (2, MORE_MEM_AT as u16));
        assert_eq!((r.entry_more.ptr_arg, r.entry_more.len), (3, 32));
        let mpich = fn_reads(super::super::mpich::LAYOUT);
        let (_, r) = mpich.iter().find(|(id, _)| *id == mpi::ALLTOALLV).unwrap();
        assert_eq!(
            (r.entry.len, r.entry_more),
            (MEM_BYTES as u16, MemRead::default())
        );
    }

    #[test]
    fn reduce_scatter_block_and_alltoall_scale_with_the_members() {
        let abi = Abi::Mpich(Mpich);
        let derived = DerivedTypes::default();
        let args = words(
            mpi::REDUCE_SCATTER_BLOCK,
            &[0x1000, 0x2000, 16, INT, 0, 0x4400_0000],
        );
        let e = decode_entry(&abi, mpi::REDUCE_SCATTER_BLOCK, &args, &[], &[], &derived);
        assert_eq!(bytes_of(e).resolve(4, Some(2)), (256, None));
        let args = words(
            mpi::ALLTOALL,
            &[0x1000, 10, DOUBLE, 0x2000, 10, DOUBLE, 0x4400_0000],
        );
        let e = decode_entry(&abi, mpi::ALLTOALL, &args, &[], &[], &derived);
        assert_eq!(bytes_of(e).resolve(4, Some(0)), (240, None));
    }

    #[test]
    fn mpich_derived_types_are_sized_from_their_constructors() {
        let abi = Abi::Mpich(Mpich);
        let mut derived = DerivedTypes::default();
        let size = |e: Entry| match e {
            Entry::TypeCreate { size } => size,
            other => panic!("not a type constructor: {other:?}"),
        };
        // MPI_Type_vector(8, 3, 5, MPI_DOUBLE, &t): 192 bytes.
        let args = words(mpi::TYPE_VECTOR, &[8, 3, 5, DOUBLE, 0x1000]);
        let vec = size(decode_entry(
            &abi,
            mpi::TYPE_VECTOR,
            &args,
            &[],
            &[],
            &derived,
        ));
        assert_eq!(vec, Some(192));
        derived.insert(0x8c00_0007, 192);
        // A contiguous of 2 of that vector: the derived type's size is looked up.
        let args = words(mpi::TYPE_CONTIGUOUS, &[2, 0x8c00_0007, 0x1000]);
        let e = decode_entry(&abi, mpi::TYPE_CONTIGUOUS, &args, &[], &[], &derived);
        assert_eq!(size(e), Some(384));
        // A struct { int; double[3]; char[5] }: lengths at entry, types in the second read.
        let args = words(
            mpi::TYPE_CREATE_STRUCT,
            &[3, 0x1000, 0x2000, 0x3000, 0x4000],
        );
        let types: Vec<u8> = [INT, DOUBLE, CHAR]
            .iter()
            .flat_map(|&t| (t as u32).to_le_bytes())
            .chain([0; 52])
            .collect();
        let lengths = ints_mem(&[1, 3, 5]);
        let e = decode_entry(
            &abi,
            mpi::TYPE_CREATE_STRUCT,
            &args,
            &lengths,
            &types,
            &derived,
        );
        assert_eq!(size(e), Some(33));
        // Lengths cut short: unknown, not guessed.
        let e = decode_entry(
            &abi,
            mpi::TYPE_CREATE_STRUCT,
            &args,
            &lengths[..8],
            &types,
            &derived,
        );
        assert_eq!(size(e), None);
        // An indexed of blocks of 2 and 5 ints.
        let args = words(mpi::TYPE_INDEXED, &[2, 0x1000, 0x2000, INT, 0x3000]);
        let e = decode_entry(
            &abi,
            mpi::TYPE_INDEXED,
            &args,
            &ints_mem(&[2, 5]),
            &[],
            &derived,
        );
        assert_eq!(size(e), Some(28));
        // A send of the derived type is sized; an unknown one is not.
        let send = |dt| {
            let args = words(mpi::SEND, &[0x1000, 3, dt, 1, 0, 0x4400_0000]);
            match decode_entry(&abi, mpi::SEND, &args, &[], &[], &derived) {
                Entry::Send { send, .. } => send.bytes,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!((send(0x8c00_0007), send(0x8c00_0009)), (Some(576), None));
        let free = decode_entry(
            &abi,
            mpi::TYPE_FREE,
            &words(mpi::TYPE_FREE, &[0x1000]),
            &ints_mem(&[0x8c00_0007u32 as i32]),
            &[],
            &derived,
        );
        assert_eq!(
            free,
            Entry::TypeFree {
                handle: Some(0x8c00_0007)
            }
        );
    }
}
