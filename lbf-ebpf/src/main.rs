//! lbf's eBPF programs. Keep them dumb: filter by traced process, stamp the time and the
//! thread's exact CPU clock, copy raw arguments and the user memory user space asked for into
//! the ring buffer. No MPI semantics here; all of that lives in user space.
//!
//! One file per probe family: `sched` (process filter, lifecycle records, CPU clock), `mpi`
//! (call entry/exit probes) and `sockets` (system call records for the socket capture).
//! `maps` holds the shared state (`task_storage` the map type of the per-thread state), `record`
//! the record writer.
#![no_std]
#![no_main]

mod maps;
mod mpi;
mod procedure;
mod record;
mod ring_array;
mod sched;
mod sockets;
mod task_storage;

/// The license the kernel checks before it lets the programs use GPL-only helpers.
#[unsafe(no_mangle)]
#[unsafe(link_section = "license")]
pub static LICENSE: [u8; 4] = *b"GPL\0";

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
