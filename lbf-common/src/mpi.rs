//! The MPI functions lbf probes, numbered. The kernel side tags each call record with one of
//! these ids; user space attaches the probes (the id in each one's [`cookie`]) and decodes the
//! arguments.

/// Declares the probed functions: each gets an id constant, a symbol name in [`NAMES`] and
/// its number of arguments in [`arg_count`].
macro_rules! mpi_functions {
    ($($id:ident = $num:literal => $sym:literal ($args:literal),)*) => {
        $(
            #[doc = concat!("`", $sym, "`")]
            pub const $id: u16 = $num;
        )*
        /// `(id, PMPI symbol name)` of every probed function. The `MPI_` names are weak
        /// aliases at the same address, so one probe on the `PMPI_` symbol catches both.
        pub const NAMES: &[(u16, &str)] = &[$(($num, $sym),)*];

        /// The number of arguments of the probed function `fn_id` (from the MPI standard's
        /// C prototypes); `None` for ids not in the list.
        pub const fn arg_count(fn_id: u16) -> Option<u8> {
            match fn_id {
                $($num => Some($args),)*
                _ => None,
            }
        }
    };
}

/// Calls the macro `$callback` with the whole list of probed functions, one
/// `NAME = id => "PMPI_symbol" (argument count),` line each. This is the single place the list
/// is written: [`NAMES`], [`arg_count`] and the id constants come from it here. (The eBPF side
/// needs no list: its one entry and one exit program learn the function, and whether it takes
/// stack arguments, from the attach [`cookie`].)
#[macro_export]
macro_rules! with_mpi_functions {
    ($callback:ident) => {
        $callback! {
            INIT = 1 => "PMPI_Init" (2),
            INIT_THREAD = 2 => "PMPI_Init_thread" (4),
            FINALIZE = 3 => "PMPI_Finalize" (0),
            COMM_RANK = 4 => "PMPI_Comm_rank" (2),
            COMM_SIZE = 5 => "PMPI_Comm_size" (2),
            SEND = 10 => "PMPI_Send" (6),
            SSEND = 11 => "PMPI_Ssend" (6),
            BSEND = 12 => "PMPI_Bsend" (6),
            RSEND = 13 => "PMPI_Rsend" (6),
            ISEND = 14 => "PMPI_Isend" (7),
            ISSEND = 15 => "PMPI_Issend" (7),
            IBSEND = 16 => "PMPI_Ibsend" (7),
            IRSEND = 17 => "PMPI_Irsend" (7),
            RECV = 20 => "PMPI_Recv" (7),
            IRECV = 21 => "PMPI_Irecv" (7),
            SENDRECV = 22 => "PMPI_Sendrecv" (12),
            SENDRECV_REPLACE = 23 => "PMPI_Sendrecv_replace" (9),
            PROBE = 24 => "PMPI_Probe" (4),
            IPROBE = 25 => "PMPI_Iprobe" (5),
            WAIT = 30 => "PMPI_Wait" (2),
            WAITALL = 31 => "PMPI_Waitall" (3),
            WAITANY = 32 => "PMPI_Waitany" (4),
            WAITSOME = 33 => "PMPI_Waitsome" (5),
            TEST = 34 => "PMPI_Test" (3),
            TESTALL = 35 => "PMPI_Testall" (4),
            TESTANY = 36 => "PMPI_Testany" (5),
            TESTSOME = 37 => "PMPI_Testsome" (5),
            BARRIER = 40 => "PMPI_Barrier" (1),
            BCAST = 41 => "PMPI_Bcast" (5),
            REDUCE = 42 => "PMPI_Reduce" (7),
            ALLREDUCE = 43 => "PMPI_Allreduce" (6),
            GATHER = 44 => "PMPI_Gather" (8),
            GATHERV = 45 => "PMPI_Gatherv" (9),
            SCATTER = 46 => "PMPI_Scatter" (8),
            SCATTERV = 47 => "PMPI_Scatterv" (9),
            ALLGATHER = 48 => "PMPI_Allgather" (7),
            ALLGATHERV = 49 => "PMPI_Allgatherv" (8),
            ALLTOALL = 50 => "PMPI_Alltoall" (7),
            ALLTOALLV = 51 => "PMPI_Alltoallv" (9),
            REDUCE_SCATTER = 52 => "PMPI_Reduce_scatter" (6),
            SCAN = 53 => "PMPI_Scan" (6),
            REDUCE_SCATTER_BLOCK = 54 => "PMPI_Reduce_scatter_block" (6),
            COMM_DUP = 60 => "PMPI_Comm_dup" (2),
            COMM_SPLIT = 61 => "PMPI_Comm_split" (4),
            COMM_FREE = 62 => "PMPI_Comm_free" (1),
            CART_CREATE = 63 => "PMPI_Cart_create" (6),
            CANCEL = 64 => "PMPI_Cancel" (1),
            TYPE_CONTIGUOUS = 70 => "PMPI_Type_contiguous" (3),
            TYPE_VECTOR = 71 => "PMPI_Type_vector" (5),
            TYPE_CREATE_HVECTOR = 72 => "PMPI_Type_create_hvector" (5),
            TYPE_INDEXED = 73 => "PMPI_Type_indexed" (5),
            TYPE_CREATE_HINDEXED = 74 => "PMPI_Type_create_hindexed" (5),
            TYPE_CREATE_INDEXED_BLOCK = 75 => "PMPI_Type_create_indexed_block" (5),
            TYPE_CREATE_HINDEXED_BLOCK = 76 => "PMPI_Type_create_hindexed_block" (5),
            TYPE_CREATE_STRUCT = 77 => "PMPI_Type_create_struct" (5),
            TYPE_CREATE_RESIZED = 78 => "PMPI_Type_create_resized" (4),
            TYPE_DUP = 79 => "PMPI_Type_dup" (2),
            TYPE_FREE = 80 => "PMPI_Type_free" (1),
            TYPE_CREATE_SUBARRAY = 81 => "PMPI_Type_create_subarray" (7),
        }
    };
}

with_mpi_functions!(mpi_functions);

/// Most arguments a probed function has; a record carries [`crate::ARG_WORDS`] of them.
pub const MAX_ARGS: u8 = 12;

/// The arguments of `fn_id` left out of its records, as a bit mask (bit `i`: argument `i`),
/// for the functions with more than [`crate::ARG_WORDS`] arguments: buffers and the like,
/// which the capture never needs, so that the communicator, the receive's source and tag and
/// its status fit. 0 for the others.
pub const fn dropped_args(fn_id: u16) -> u16 {
    match fn_id {
        // (sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
        // recvtag, comm, status)
        SENDRECV => 0b0000_1110_0001,
        // Sendrecv_replace: the buffer; Gatherv, Scatterv: the send buffer.
        SENDRECV_REPLACE | GATHERV | SCATTERV => 0b1,
        // Alltoallv: the send displacements (the send buffer tells `MPI_IN_PLACE`).
        ALLTOALLV => 0b100,
        _ => 0,
    }
}

/// Where argument `arg` of `fn_id` is in its records' `args`: `arg` less the arguments before
/// it that are left out ([`dropped_args`]).
pub const fn word(fn_id: u16, arg: usize) -> usize {
    let below = dropped_args(fn_id) & ((1u16 << arg) - 1);
    arg - below.count_ones() as usize
}

/// Whether the entry record of a call of `fn_id` must reach user space before the call
/// returns, rather than at the return with the exit record (see
/// `crate::maps::ThreadState::entry`): the functions whose entry the capture needs to make
/// sense of *another* process's records. `MPI_Comm_split`: a member's rank in the new
/// communicator is computed from every member's entry, which MPI guarantees before any
/// returns. `pvm_send`, `pvm_psend`: the PVM capture matches a receive, at its return, to the
/// sends seen so far. (`pvm_mcast` and `pvm_bcast` read memory at entry, so their entry
/// records are written at once anyway.)
pub const fn entry_at_once(fn_id: u16) -> bool {
    matches!(fn_id, COMM_SPLIT | crate::pvm::SEND | crate::pvm::PSEND)
}

/// Where the outcome of a poll is: for the calls that only look whether something has
/// happened (`MPI_Test`, `MPI_Testall`, `MPI_Testany`, `MPI_Testsome`, `MPI_Iprobe`), the
/// argument pointing at the `int` that is 0 when the call found nothing (`flag`; for
/// `MPI_Testsome`, `outcount`). `None` for every other function.
///
/// An unsuccessful poll changes nothing the capture models: it writes no record. The kernel
/// side reads this `int` at the return and, when it is 0, only counts the call in the
/// thread's run of polls (`crate::maps::PollRun`); a polling loop then costs one record per
/// change of state instead of one per poll.
pub const fn poll_flag_arg(fn_id: u16) -> Option<u8> {
    match fn_id {
        // (request, flag, status)
        TEST => Some(1),
        // (count, requests, flag, statuses) and (incount, requests, outcount, indices,
        // statuses)
        TESTALL | TESTSOME => Some(2),
        // (count, requests, index, flag, status) and (source, tag, comm, flag, status)
        TESTANY | IPROBE => Some(3),
        _ => None,
    }
}

/// Whether a call of `fn_id` may go without its return probe: the one place that says which
/// probes each function takes, and why.
///
/// Every function takes an entry probe. The return probe is a second trap per call (some
/// 300 ns here against the entry's 800: docs/probe-overhead.md); it is needed where the return
/// brings something that cannot be had later:
///
/// - the return's clock and CPU: a blocking call's return is an event of the model (a
///   receive's or a rendezvous send's end, a collective's end, `MPI_Init`'s end of untimed
///   start-up, `MPI_Finalize`'s teardown), and the CPU inside a wait or a poll is waiting,
///   told apart from the work after it only by the return's CPU clock. A blocking
///   `MPI_Send` keeps its return unless the kernel side finds it surely eager
///   ([`eager_by_size`]): whether it went by rendezvous (its return then ends the model's
///   `SendEnd`) is the capture's decision, from the message's size and route;
/// - the outcome of a poll (`MPI_Test*`, `MPI_Iprobe`: [`poll_flag_arg`]), at the moment it
///   is known: an unsuccessful poll writes no record, and a later read could see the flag of a
///   later poll;
/// - a handle the capture must see before another process's records (`MPI_Comm_split`,
///   `MPI_Comm_dup`, `MPI_Cart_create`: the new communicator, a collective's end).
///
/// The calls left return only out-parameters that stay where they were written until the
/// program uses them: the request handle of a nonblocking send or receive (`MPI_Isend`,
/// `MPI_Issend`, `MPI_Ibsend`, `MPI_Irsend`, `MPI_Irecv`; the program passes it to the wait
/// or test that completes it, a probe hit) and the answer of `MPI_Comm_rank` and
/// `MPI_Comm_size`. None of their return stamps makes an event: the CPU inside them counts
/// as work, as the CPU after them does. Where the kernel runs each call's return probe only
/// if its entry asks for it (uprobe sessions, Linux 6.13), the entry of such a call skips it
/// when the call comes from the program's own executable (its return address in the
/// executable's text), and keeps the out-parameter's pointer instead: the thread's next probe
/// hit (or its end) reads the memory and writes the record the return would have written,
/// before anything else of that thread. Calls made from elsewhere keep their return: a
/// language binding (Open MPI's Fortran wrappers) passes a variable of its own frame, gone
/// once it returns.
pub const fn return_optional(fn_id: u16) -> bool {
    matches!(
        fn_id,
        ISEND | ISSEND | IBSEND | IRSEND | IRECV | COMM_RANK | COMM_SIZE
    )
}

/// Whether a call of `fn_id` may go without its return probe when the kernel side finds that
/// its message surely goes eagerly (`crate::maps::SendRules`): the blocking standard-mode
/// sends, `MPI_Send` and `MPI_Rsend`. An eager blocking send's return is no event of the model
/// (the CPU inside counts as work) and it has no out-parameter, so its exit record, written at
/// the thread's next probe hit as for [`return_optional`] calls, makes the same events; one
/// sent by rendezvous ends its wait at the return (`SendEnd`), so a send the kernel side is
/// not sure of keeps its return. With it a ring of `MPI_Send`/`MPI_Recv` takes 3 traps per
/// pair of calls instead of 4.
pub const fn eager_by_size(fn_id: u16) -> bool {
    matches!(fn_id, SEND | RSEND)
}

/// The attach cookie of the probes on function `fn_id` of the library in slot `slot`: the
/// kernel hands it to the probe program (`bpf_get_attach_cookie`), so one entry and one exit
/// program serve every function and library. Low 16 bits: `fn_id`; next 16: `slot`; bit 32:
/// the function may take stack arguments (more than the 6 passed in registers, or a count
/// [`arg_count`] does not know), which the entry program then reads; bits 33-44: the
/// [`dropped_args`] mask, with which the entry program reads all [`MAX_ARGS`] and keeps the
/// others; bit 45: [`entry_at_once`]; bit 46: its [`pair_arg_words`] are
/// [`crate::SHORT_ARG_WORDS`]; bits 47-49: 1 + its [`poll_flag_arg`], 0 if none; bit 50:
/// [`return_optional`]; bit 51: [`eager_by_size`].
pub const fn cookie(fn_id: u16, slot: u32) -> u64 {
    let stack_args = match arg_count(fn_id) {
        Some(n) => n > 6,
        None => true,
    };
    let poll = match poll_flag_arg(fn_id) {
        Some(arg) => arg as u64 + 1,
        None => 0,
    };
    ((eager_by_size(fn_id) as u64) << 51)
        | ((return_optional(fn_id) as u64) << 50)
        | ((poll & 0b111) << 47)
        | (((pair_arg_words(fn_id) == crate::SHORT_ARG_WORDS) as u64) << 46)
        | ((entry_at_once(fn_id) as u64) << 45)
        | ((dropped_args(fn_id) as u64 & 0xfff) << 33)
        | ((stack_args as u64) << 32)
        | ((slot as u64 & 0xffff) << 16)
        | fn_id as u64
}

/// What a probe's attach [`cookie`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cookie {
    /// The probed function.
    pub fn_id: u16,
    /// The slot of the library the probe is in.
    pub slot: u32,
    /// Whether the function may take arguments on the stack.
    pub stack_args: bool,
    /// The arguments left out of its records ([`dropped_args`]).
    pub dropped: u16,
    /// Whether its entry record is written at the entry ([`entry_at_once`]).
    pub entry_at_once: bool,
    /// Whether its [`pair_arg_words`] are [`crate::SHORT_ARG_WORDS`].
    pub short_args: bool,
    /// 1 + its [`poll_flag_arg`]; 0 for a function that is no poll.
    pub poll_flag: u8,
    /// Whether its return probe may be skipped ([`return_optional`]).
    pub return_optional: bool,
    /// Whether its return probe may be skipped if its message surely goes eagerly
    /// ([`eager_by_size`]).
    pub eager_by_size: bool,
}

/// The argument words a [`crate::RecordKind::CallPair`] item of `fn_id` carries:
/// [`crate::SHORT_ARG_WORDS`] for the functions known to take at most that many arguments,
/// [`crate::ARG_WORDS`] for the others (and for ids not in the list).
pub const fn pair_arg_words(fn_id: u16) -> usize {
    match arg_count(fn_id) {
        Some(n) if n as usize <= crate::SHORT_ARG_WORDS => crate::SHORT_ARG_WORDS,
        _ => crate::ARG_WORDS,
    }
}

/// Decodes a [`cookie`].
pub const fn split_cookie(cookie: u64) -> Cookie {
    Cookie {
        fn_id: cookie as u16,
        slot: (cookie >> 16) as u16 as u32,
        stack_args: (cookie >> 32) & 1 != 0,
        dropped: ((cookie >> 33) & 0xfff) as u16,
        entry_at_once: (cookie >> 45) & 1 != 0,
        short_args: (cookie >> 46) & 1 != 0,
        poll_flag: ((cookie >> 47) & 0b111) as u8,
        return_optional: (cookie >> 50) & 1 != 0,
        eager_by_size: (cookie >> 51) & 1 != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_round_trips() {
        for &(id, _) in NAMES {
            for slot in 0..crate::maps::MAX_LIBS {
                let c = split_cookie(cookie(id, slot));
                assert_eq!((c.fn_id, c.slot), (id, slot));
                assert_eq!(c.entry_at_once, entry_at_once(id));
            }
        }
        let at_once = |id| split_cookie(cookie(id, 0)).entry_at_once;
        assert!(at_once(COMM_SPLIT) && at_once(crate::pvm::SEND) && !at_once(SEND));
    }

    #[test]
    fn polls_carry_their_flag_argument_in_the_cookie() {
        let flag = |id| split_cookie(cookie(id, 3)).poll_flag;
        assert_eq!((flag(TEST), flag(TESTALL), flag(TESTANY)), (2, 3, 4));
        assert_eq!((flag(TESTSOME), flag(IPROBE)), (3, 4));
        for &(id, _) in NAMES {
            let c = split_cookie(cookie(id, 3));
            assert_eq!(
                c.poll_flag != 0,
                poll_flag_arg(id).is_some(),
                "function {id}"
            );
            // Polls keep every argument, so the flag's word is its argument's.
            assert!(c.poll_flag == 0 || dropped_args(id) == 0);
            assert_eq!((c.fn_id, c.slot), (id, 3));
        }
    }

    /// Only calls whose return brings nothing but an out-parameter may skip it: no poll, no
    /// blocking call, nothing whose entry must be seen at once.
    #[test]
    fn returns_are_optional_for_nonblocking_calls_and_communicator_queries_only() {
        let optional = |id| split_cookie(cookie(id, 1)).return_optional;
        assert!(optional(ISEND) && optional(IRECV) && optional(COMM_RANK) && optional(COMM_SIZE));
        assert!(!optional(SEND) && !optional(RECV) && !optional(WAITALL) && !optional(INIT));
        for &(id, _) in NAMES {
            assert_eq!(optional(id), return_optional(id), "function {id}");
            if return_optional(id) {
                assert!(
                    poll_flag_arg(id).is_none() && !entry_at_once(id),
                    "function {id}"
                );
            }
            assert_eq!(split_cookie(cookie(id, 1)).fn_id, id);
        }
    }

    /// Only the blocking standard-mode sends wait on their size; no call is both.
    #[test]
    fn blocking_standard_sends_alone_skip_their_return_by_size() {
        let by_size = |id| split_cookie(cookie(id, 2)).eager_by_size;
        assert!(by_size(SEND) && by_size(RSEND));
        assert!(!by_size(SSEND) && !by_size(ISEND) && !by_size(SENDRECV) && !by_size(RECV));
        for &(id, _) in NAMES {
            assert_eq!(by_size(id), eager_by_size(id), "function {id}");
            assert!(!(eager_by_size(id) && return_optional(id)), "function {id}");
            assert!(
                !eager_by_size(id) || arg_count(id) == Some(6),
                "function {id}"
            );
        }
    }

    #[test]
    fn pairs_of_functions_of_at_most_4_arguments_carry_4_words() {
        let short = |id| split_cookie(cookie(id, 2)).short_args;
        assert!(short(COMM_RANK) && short(WAIT) && short(TEST) && short(BARRIER));
        assert!(short(PROBE) && short(FINALIZE));
        assert!(!short(IPROBE) && !short(SEND) && !short(SENDRECV) && !short(crate::pvm::SEND));
        for &(id, _) in NAMES {
            assert_eq!(short(id), pair_arg_words(id) == crate::SHORT_ARG_WORDS);
        }
    }

    /// Every function's kept arguments fit a record, and those with more arguments than a
    /// record holds keep what the capture reads.
    #[test]
    fn kept_arguments_fit_and_sendrecv_keeps_its_receive() {
        for &(id, _) in NAMES {
            let n = arg_count(id).unwrap();
            assert!(n <= MAX_ARGS);
            let kept = n as u32 - dropped_args(id).count_ones();
            assert!(kept as usize <= crate::ARG_WORDS, "function {id}");
            assert_eq!(split_cookie(cookie(id, 3)).dropped, dropped_args(id));
        }
        // source, recvtag, comm, status after sendcount, sendtype, dest, sendtag.
        let at: [usize; 8] = core::array::from_fn(|i| [1, 2, 3, 4, 8, 9, 10, 11][i]);
        assert_eq!(at.map(|a| word(SENDRECV, a)), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!((word(GATHERV, 8), word(SEND, 5)), (7, 5));
        assert_eq!(
            (word(ALLTOALLV, 1), word(ALLTOALLV, 3), word(ALLTOALLV, 8)),
            (1, 2, 7)
        );
    }

    #[test]
    fn only_functions_of_more_than_6_arguments_or_unknown_ones_read_stack_arguments() {
        let stack_args = |id| split_cookie(cookie(id, 1)).stack_args;
        assert!(!stack_args(SEND) && !stack_args(COMM_RANK) && !stack_args(FINALIZE));
        assert!(stack_args(ISEND) && stack_args(RECV) && stack_args(SENDRECV));
        assert!(stack_args(crate::pvm::PRECV));
        assert!(NAMES.iter().all(|&(id, _)| arg_count(id).is_some()));
    }
}
