//! The probe layer: loads lbf's eBPF object (embedded in the binary), attaches it, and
//! delivers raw [`lbf_common::Record`]s. It knows how to find MPI libraries and traced
//! processes, not what an MPI call means: decoding is the capture layer's job.
//!
//! Use: [`Tracer::load`], [`Tracer::attach_mpi_library`] for each library (found with
//! [`mpi_libraries_mapped_by`] or [`installed_mpi_libraries`]), [`Tracer::trace_pid`] for
//! each process (or [`HeldChild`] to start a command traced from its first instruction),
//! then `lbf-record`'s capture loop with a [`RecordSink`].
//!
//! What a record holds (see `lbf_common::Record`): `ts_ns` is CLOCK_MONOTONIC, `cpu_ns` the
//! thread's exact on-CPU time (0 if the thread has no clock). `CallEntry`: `args` = rdi, rsi,
//! rdx, rcx, r8, r9, then the 64-bit words at user sp+8 and sp+16 (the 7th and 8th integer
//! arguments; 0 if unreadable or if the function takes at most 6); `mem` = the entry read.
//! `CallExit`: `args[0]` = rax (the return value), `args[1..8]` = the entry's `args[0..7]`
//! (the 8th entry word is not repeated); `mem` = the exit read, whose pointer and count come
//! from the entry's 8 words.
//! `Fork`: `args[0]` = the child's tgid (record of the parent). `Exec`: `mem` = the file
//! name, NUL-terminated. `Exit`: the last thread of the group ended. Bytes of `mem` past
//! `mem_len` are unspecified (0 past the end of a short ring buffer item).
//!
//! Each thread's records come in the order it made them, but an entry record without user
//! memory comes only at the call's return, in one ring buffer item with the exit record
//! (`lbf_common::RecordKind::CallPair`, split by the reader), still stamped as at the entry.

mod baseline;
mod btf;
mod child;
mod dump;
mod facts_cache;
mod kernel_facts;
mod libraries;
mod notices;
pub mod procedures;
pub mod procfs;
pub mod pvm;
mod reader;
mod ring;
mod ring_slots;
mod symbols;
mod syscalls;
mod thread_states;
mod tracer;
mod warm;

pub use baseline::EmptyProbes;
pub use child::HeldChild;
pub use dump::{record_json, JsonLinesSink};
pub use libraries::{installed as installed_mpi_libraries, mapped_by as mpi_libraries_mapped_by};
pub use notices::InitWatch;
pub use reader::{Drained, RecordReader, RecordSink};
pub use tracer::{
    unix_ns_of, AttachMode, AttachedLibrary, LostCounts, Returns, Tracer, TracerOptions,
};
