//! The MPI functions lbf probes, numbered. The kernel side tags each call record with one of
//! these ids; user space attaches the probes (the id in each one's [`cookie`]) and decodes the
//! arguments.

/// Declares the probed functions: each gets an id constant and a symbol name in [`NAMES`].
macro_rules! mpi_functions {
    ($($id:ident = $num:literal => $sym:literal,)*) => {
        $(
            #[doc = concat!("`", $sym, "`")]
            pub const $id: u16 = $num;
        )*
        /// `(id, PMPI symbol name)` of every probed function. The `MPI_` names are weak
        /// aliases at the same address, so one probe on the `PMPI_` symbol catches both.
        pub const NAMES: &[(u16, &str)] = &[$(($num, $sym),)*];
    };
}

/// Calls the macro `$callback` with the whole list of probed functions, one
/// `NAME = id => "PMPI_symbol",` line each. This is the single place the list is written:
/// [`NAMES`] and the id constants come from it here. (The eBPF side needs no list: its one
/// entry and one exit program learn the function from the attach [`cookie`].)
#[macro_export]
macro_rules! with_mpi_functions {
    ($callback:ident) => {
        $callback! {
            INIT = 1 => "PMPI_Init",
            INIT_THREAD = 2 => "PMPI_Init_thread",
            FINALIZE = 3 => "PMPI_Finalize",
            COMM_RANK = 4 => "PMPI_Comm_rank",
            COMM_SIZE = 5 => "PMPI_Comm_size",
            SEND = 10 => "PMPI_Send",
            SSEND = 11 => "PMPI_Ssend",
            BSEND = 12 => "PMPI_Bsend",
            RSEND = 13 => "PMPI_Rsend",
            ISEND = 14 => "PMPI_Isend",
            ISSEND = 15 => "PMPI_Issend",
            IBSEND = 16 => "PMPI_Ibsend",
            IRSEND = 17 => "PMPI_Irsend",
            RECV = 20 => "PMPI_Recv",
            IRECV = 21 => "PMPI_Irecv",
            SENDRECV = 22 => "PMPI_Sendrecv",
            SENDRECV_REPLACE = 23 => "PMPI_Sendrecv_replace",
            PROBE = 24 => "PMPI_Probe",
            IPROBE = 25 => "PMPI_Iprobe",
            WAIT = 30 => "PMPI_Wait",
            WAITALL = 31 => "PMPI_Waitall",
            WAITANY = 32 => "PMPI_Waitany",
            WAITSOME = 33 => "PMPI_Waitsome",
            TEST = 34 => "PMPI_Test",
            TESTALL = 35 => "PMPI_Testall",
            TESTANY = 36 => "PMPI_Testany",
            TESTSOME = 37 => "PMPI_Testsome",
            BARRIER = 40 => "PMPI_Barrier",
            BCAST = 41 => "PMPI_Bcast",
            REDUCE = 42 => "PMPI_Reduce",
            ALLREDUCE = 43 => "PMPI_Allreduce",
            GATHER = 44 => "PMPI_Gather",
            GATHERV = 45 => "PMPI_Gatherv",
            SCATTER = 46 => "PMPI_Scatter",
            SCATTERV = 47 => "PMPI_Scatterv",
            ALLGATHER = 48 => "PMPI_Allgather",
            ALLGATHERV = 49 => "PMPI_Allgatherv",
            ALLTOALL = 50 => "PMPI_Alltoall",
            ALLTOALLV = 51 => "PMPI_Alltoallv",
            REDUCE_SCATTER = 52 => "PMPI_Reduce_scatter",
            SCAN = 53 => "PMPI_Scan",
            COMM_DUP = 60 => "PMPI_Comm_dup",
            COMM_SPLIT = 61 => "PMPI_Comm_split",
            COMM_FREE = 62 => "PMPI_Comm_free",
        }
    };
}

with_mpi_functions!(mpi_functions);

/// The attach cookie of the MPI probes on function `fn_id` of the library in slot `slot`: the
/// kernel hands it to the probe program (`bpf_get_attach_cookie`), so one entry and one exit
/// program serve every function and library. Low 16 bits: `fn_id`; next 16: `slot`.
pub const fn cookie(fn_id: u16, slot: u32) -> u64 {
    ((slot as u64 & 0xffff) << 16) | fn_id as u64
}

/// `(fn_id, slot)` from a [`cookie`].
pub const fn split_cookie(cookie: u64) -> (u16, u32) {
    (cookie as u16, (cookie >> 16) as u16 as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_round_trips() {
        for &(id, _) in NAMES {
            for slot in 0..crate::maps::MAX_LIBS {
                assert_eq!(split_cookie(cookie(id, slot)), (id, slot));
            }
        }
    }
}
