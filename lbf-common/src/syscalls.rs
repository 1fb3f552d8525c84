//! The system calls the socket capture records, and the maps that select them.
//!
//! The kernel side hooks every system call's entry and exit (the `sys_enter`/`sys_exit` raw
//! tracepoints, which need neither kprobes nor tracefs) but records only calls of traced
//! processes whose number user space put in [`SYSCALLS`]. Each recorded call yields one
//! [`crate::RecordKind::Syscall`] record at its return, so the kernel side never needs to know
//! which file descriptors are sockets: user space works that out from `/proc` and sock_diag.

/// Which system calls to record (`u32` x86-64 syscall number -> [`crate::FnReads`], whose
/// `exit` read is done at the return with pointers taken from the call's arguments). Empty
/// unless the socket source is on.
pub const SYSCALLS: &str = "SYSCALLS";

/// Maximum number of entries in [`SYSCALLS`].
pub const MAX_SYSCALLS: u32 = 64;

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
    /// `sendmsg(fd, msg, flags)`
    pub const SENDMSG: u16 = 46;
    /// `recvmsg(fd, msg, flags)`
    pub const RECVMSG: u16 = 47;
    /// `socketpair(domain, type, protocol, fds)`: `fds` is read at the return.
    pub const SOCKETPAIR: u16 = 53;
    /// `epoll_wait(epfd, events, max, timeout)`
    pub const EPOLL_WAIT: u16 = 232;
    /// `pselect6(...)`
    pub const PSELECT6: u16 = 270;
    /// `ppoll(...)`
    pub const PPOLL: u16 = 271;
    /// `epoll_pwait(...)`
    pub const EPOLL_PWAIT: u16 = 281;
    /// `accept4(fd, addr, len, flags)`
    pub const ACCEPT4: u16 = 288;
    /// `dup3(old, new, flags)`
    pub const DUP3: u16 = 292;
    /// `recvmmsg(fd, vec, vlen, flags, timeout)`: `vec` is read at the return.
    pub const RECVMMSG: u16 = 299;
    /// `sendmmsg(fd, vec, vlen, flags)`: `vec` is read at the return.
    pub const SENDMMSG: u16 = 307;
    /// `epoll_pwait2(...)`
    pub const EPOLL_PWAIT2: u16 = 441;
}
