//! The system calls the socket capture records, and the maps that select them.
//!
//! The kernel side hooks every system call's entry and exit (the `sys_enter`/`sys_exit` raw
//! tracepoints, which need neither kprobes nor tracefs) but records only calls of traced
//! processes whose number user space put in [`SYSCALLS`]. Each recorded call yields one
//! [`crate::RecordKind::Syscall`] record at its return, so the kernel side never needs to know
//! which file descriptors are sockets: user space works that out from `/proc` and sock_diag.

/// Which system calls to record (`u32` x86-64 syscall number -> [`SyscallRead`], done at a
/// successful return with pointers taken from the call's arguments). Empty unless the socket
/// source is on.
pub const SYSCALLS: &str = "SYSCALLS";

/// The system call each thread of a traced process is in (`u32` thread id -> [`ENTRY_WORDS`]
/// words: its 6 arguments, its number, the thread's CPU clock and the time at the entry):
/// kept by the entry hook for the return's record. For each thread of a process
/// `lbf-trace -p` attaches to, user space puts in an entry whose number is [`AT_ATTACH`]
/// (unless the entry hook has put one in first), which the thread's next return takes.
pub const SYSCALL_ENTRY: &str = "SYSCALL_ENTRY";

/// Words of a [`SYSCALL_ENTRY`] value: the 6 arguments (0-5), the number (6), the CPU clock
/// (7) and the time (8) at the entry.
pub const ENTRY_WORDS: usize = 9;

/// The number in a [`SYSCALL_ENTRY`] entry that says "the thread was attached to, maybe in a
/// system call" (blocked, waiting for a CPU, or running in the kernel): the return hook takes
/// the call's number and arguments from the registers the kernel saved at its entry (the
/// calls recorded leave them as they were), and the CPU clock at the return for the entry's.
/// A call the entry hook saw overwrites the entry first.
pub const AT_ATTACH: u64 = u64::MAX;

/// Maximum number of entries in [`SYSCALLS`].
pub const MAX_SYSCALLS: u32 = 64;

/// The user memory a recorded system call's record carries, read at its successful return.
///
/// Its own type rather than [`crate::MemRead`]: the socket calls need reads the MPI probes do
/// not, a pointer found inside a structure (`sendmsg`'s destination, `recvmsg`'s control
/// data) and one field of each element of a vector (`sendmmsg`'s and `recvmmsg`'s `msg_len`),
/// which the kernel side does without knowing what the bytes mean.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallRead {
    /// How to read: one of the [`how`] constants.
    pub how: u8,
    /// Which argument (0 to 5) holds the pointer.
    pub arg: u8,
    /// [`how::PLAIN`]: bytes to read. [`how::INDIRECT`]: the most bytes to read at the
    /// pointer found.
    pub len: u16,
    /// [`how::INDIRECT`]: offset of the pointer in the structure the argument points at; the
    /// next word holds the length of what it points at (its low 32 bits, which fits
    /// `msg_namelen` and `msg_controllen` alike). [`how::STRIDED`]: offset of the `u32` read
    /// in each element.
    pub offset: u16,
    /// [`how::STRIDED`]: bytes per element.
    pub stride: u16,
}

/// The ways of [`SyscallRead::how`].
pub mod how {
    /// Nothing.
    pub const NONE: u8 = 0;
    /// `len` bytes at the pointer argument.
    pub const PLAIN: u8 = 1;
    /// At the pointer argument plus `offset`, a pointer and a length: up to `len` bytes
    /// there, as many as that length says.
    pub const INDIRECT: u8 = 2;
    /// The `u32` at `offset` in each of the first `ret` (the return value) elements of
    /// `stride` bytes the argument points at, [`super::WORDS_PER_PART`] to a record: a call
    /// that returned more gives records of parts 0, 1, ... (`crate::Record::part`).
    pub const STRIDED: u8 = 3;
}

/// `u32` elements a [`how::STRIDED`] read puts in one record.
pub const WORDS_PER_PART: usize = crate::MEM_BYTES / 4;

/// Most records a [`how::STRIDED`] read makes of one call: enough for the 1024 messages
/// (`UIO_MAXIOV`) a `sendmmsg` or `recvmmsg` moves at most.
pub const MAX_PARTS: usize = 1024 / WORDS_PER_PART;

/// x86-64 system call numbers the socket capture uses. Each is its own `fn_id` in
/// [`crate::RecordKind::Syscall`] records.
pub mod nr {
    /// `read(fd, buf, count)`
    pub const READ: u16 = 0;
    /// `write(fd, buf, count)`
    pub const WRITE: u16 = 1;
    /// `close(fd)`
    pub const CLOSE: u16 = 3;
    /// `poll(fds, nfds, timeout)`
    pub const POLL: u16 = 7;
    /// `readv(fd, iov, iovcnt)`
    pub const READV: u16 = 19;
    /// `writev(fd, iov, iovcnt)`
    pub const WRITEV: u16 = 20;
    /// `select(nfds, r, w, e, timeout)`
    pub const SELECT: u16 = 23;
    /// `dup(fd)`
    pub const DUP: u16 = 32;
    /// `dup2(old, new)`
    pub const DUP2: u16 = 33;
    /// `sendfile(out_fd, in_fd, offset, count)`
    pub const SENDFILE: u16 = 40;
    /// `socket(domain, type, protocol)`
    pub const SOCKET: u16 = 41;
    /// `connect(fd, addr, len)`
    pub const CONNECT: u16 = 42;
    /// `accept(fd, addr, len)`
    pub const ACCEPT: u16 = 43;
    /// `sendto(fd, buf, len, flags, addr, addrlen)` (also `send`)
    pub const SENDTO: u16 = 44;
    /// `recvfrom(fd, buf, len, flags, addr, addrlen)` (also `recv`)
    pub const RECVFROM: u16 = 45;
    /// `sendmsg(fd, msg, flags)`: the destination address (`msg_name`) is read at the return.
    pub const SENDMSG: u16 = 46;
    /// `recvmsg(fd, msg, flags)`: the control data (`msg_control`) is read at the return.
    pub const RECVMSG: u16 = 47;
    /// `socketpair(domain, type, protocol, fds)`: `fds` is read at the return.
    pub const SOCKETPAIR: u16 = 53;
    /// `fcntl(fd, cmd, arg)`: `F_DUPFD` and `F_DUPFD_CLOEXEC` copy descriptors.
    pub const FCNTL: u16 = 72;
    /// `epoll_wait(epfd, events, max, timeout)`
    pub const EPOLL_WAIT: u16 = 232;
    /// `pselect6(...)`
    pub const PSELECT6: u16 = 270;
    /// `ppoll(...)`
    pub const PPOLL: u16 = 271;
    /// `splice(fd_in, off_in, fd_out, off_out, len, flags)`
    pub const SPLICE: u16 = 275;
    /// `epoll_pwait(...)`
    pub const EPOLL_PWAIT: u16 = 281;
    /// `accept4(fd, addr, len, flags)`
    pub const ACCEPT4: u16 = 288;
    /// `dup3(old, new, flags)`
    pub const DUP3: u16 = 292;
    /// `recvmmsg(fd, vec, vlen, flags, timeout)`: `msg_len` of each message is read at the
    /// return.
    pub const RECVMMSG: u16 = 299;
    /// `sendmmsg(fd, vec, vlen, flags)`: `msg_len` of each message is read at the return.
    pub const SENDMMSG: u16 = 307;
    /// `epoll_pwait2(...)`
    pub const EPOLL_PWAIT2: u16 = 441;
}
