//! The system calls the socket capture records, and what each record says: which descriptor
//! moved how many bytes, where a process began to wait, which descriptors were closed or
//! duplicated. x86-64 numbers and argument positions (see `lbf_common::syscalls`).

use lbf_common::{syscalls::nr, FnReads, MemRead, Record, ARG_WORDS};

/// Size of a `struct mmsghdr` on x86-64, and the offset of its `msg_len` field.
const MMSGHDR_SIZE: usize = 64;
const MMSGHDR_LEN_OFFSET: usize = 56;

/// `MSG_PEEK`: a receive that leaves the bytes in the socket.
const MSG_PEEK: u64 = 2;

/// Bytes of a `sockaddr_in6`, the largest address `sendto` is read for.
const SOCKADDR_BYTES: u16 = 28;

/// The port of an `AF_INET` or `AF_INET6` socket address (network byte order at offset 2).
fn inet_port(sockaddr: &[u8]) -> Option<u16> {
    let &[f0, f1, p0, p1, ..] = sockaddr else {
        return None;
    };
    let family = u16::from_le_bytes([f0, f1]) as i32;
    (family == libc::AF_INET || family == libc::AF_INET6).then(|| u16::from_be_bytes([p0, p1]))
}

/// `EINPROGRESS`: a nonblocking `connect` under way.
const EINPROGRESS: i64 = 115;

/// The system calls to record, with their memory reads: the message vectors of `sendmmsg`
/// and `recvmmsg` (as many `struct mmsghdr` as fit in a record: 4), the two descriptors of
/// `socketpair`, the destination address of `sendto`.
pub fn traced() -> Vec<(u16, FnReads)> {
    let vector = FnReads {
        entry: MemRead::default(),
        exit: MemRead {
            ptr_arg: 2,
            count_arg: 3,
            len: MMSGHDR_SIZE as u16,
        },
    };
    let mut table: Vec<(u16, FnReads)> = [
        nr::READ,
        nr::WRITE,
        nr::CLOSE,
        nr::POLL,
        nr::READV,
        nr::WRITEV,
        nr::SELECT,
        nr::DUP,
        nr::DUP2,
        nr::RECVFROM,
        nr::SENDMSG,
        nr::RECVMSG,
        nr::EPOLL_WAIT,
        nr::PSELECT6,
        nr::PPOLL,
        nr::EPOLL_PWAIT,
        nr::DUP3,
        nr::EPOLL_PWAIT2,
        nr::SOCKET,
        nr::CONNECT,
        nr::ACCEPT,
        nr::ACCEPT4,
    ]
    .into_iter()
    .map(|n| (n, FnReads::default()))
    .collect();
    table.push((nr::SENDMMSG, vector));
    // sendto's destination address (sockaddr_in or sockaddr_in6), read at the return.
    let address = FnReads {
        entry: MemRead::default(),
        exit: MemRead {
            ptr_arg: 5,
            count_arg: 0,
            len: SOCKADDR_BYTES,
        },
    };
    table.push((nr::SENDTO, address));
    table.push((nr::RECVMMSG, vector));
    let pair = FnReads {
        entry: MemRead::default(),
        exit: MemRead {
            ptr_arg: 4,
            count_arg: 0,
            len: 8,
        },
    };
    table.push((nr::SOCKETPAIR, pair));
    table
}

/// What one recorded call did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// Bytes left through `fd`: one entry per message (several for `sendmmsg`).
    Send {
        /// The descriptor.
        fd: i32,
        /// Bytes of each message sent.
        sizes: Vec<u64>,
        /// The destination port `sendto` named (IPv4 or IPv6), for unconnected UDP sockets.
        to_port: Option<u16>,
    },
    /// Bytes arrived through `fd`: one entry per message received.
    Recv {
        /// The descriptor.
        fd: i32,
        /// Bytes of each message received.
        sizes: Vec<u64>,
    },
    /// New socket descriptors: from `socket` (not connected), `accept` or `socketpair`
    /// (connected).
    Open {
        /// The descriptors.
        fds: Vec<i32>,
        /// Whether they are connected already.
        connected: bool,
        /// The address family (`AF_*`) given to `socket`/`socketpair`; `None` for `accept`.
        family: Option<i32>,
    },
    /// `fd` was connected (or is being connected, nonblocking).
    Connected {
        /// The descriptor.
        fd: i32,
    },
    /// A wait for descriptors to become ready (`poll`, `select`, `epoll_wait` and kin).
    Wait,
    /// `fd` was closed.
    Close {
        /// The descriptor.
        fd: i32,
    },
    /// `new` now refers to what `old` refers to.
    Dup {
        /// The original descriptor.
        old: i32,
        /// The copy.
        new: i32,
    },
    /// A call that moved nothing (failed, end of stream, peek) or that is not modelled.
    Nothing,
}

/// A decoded `Syscall` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// What happened.
    pub call: Call,
    /// The thread's CPU clock at the call's entry.
    pub entry_cpu: u64,
    /// The thread's CPU clock at its return.
    pub exit_cpu: u64,
    /// `sendmmsg`/`recvmmsg` moved more messages than the record holds (the rest are lost).
    pub truncated: bool,
}

/// Decodes a `Syscall` record (`fn_id` = the number, `args[0]` = the return value,
/// `args[1..7]` = the arguments, `args[7]` = the entry's CPU clock).
pub fn decode(rec: &Record) -> Decoded {
    let args: &[u64; ARG_WORDS] = &rec.args;
    let ret = args[0] as i64;
    let arg = |i: usize| args[1 + i];
    let fd = arg(0) as i32;
    let moved = |sizes: Vec<u64>| sizes.into_iter().filter(|&n| n > 0).collect::<Vec<_>>();
    let mut truncated = false;
    let mut vector = || {
        let mem = &rec.mem[..usize::from(rec.mem_len).min(rec.mem.len())];
        let sizes: Vec<u64> = mem
            .chunks_exact(MMSGHDR_SIZE)
            .take(ret.max(0) as usize)
            .map(|m| {
                let b = &m[MMSGHDR_LEN_OFFSET..MMSGHDR_LEN_OFFSET + 4];
                u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64
            })
            .collect();
        truncated = (sizes.len() as i64) < ret;
        moved(sizes)
    };
    let call = match rec.fn_id {
        nr::CONNECT if ret == 0 || ret == -EINPROGRESS => Call::Connected { fd },
        _ if ret < 0 => Call::Nothing,
        nr::SOCKET => Call::Open {
            fds: vec![ret as i32],
            connected: false,
            family: Some(fd),
        },
        nr::ACCEPT | nr::ACCEPT4 => Call::Open {
            fds: vec![ret as i32],
            connected: true,
            family: None,
        },
        nr::SOCKETPAIR => {
            let mem = &rec.mem[..usize::from(rec.mem_len).min(8)];
            Call::Open {
                fds: mem
                    .chunks_exact(4)
                    .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                connected: true,
                family: Some(fd),
            }
        }
        nr::SENDTO if ret > 0 => Call::Send {
            fd,
            sizes: vec![ret as u64],
            to_port: inet_port(&rec.mem[..usize::from(rec.mem_len).min(rec.mem.len())]),
        },
        nr::WRITE | nr::WRITEV | nr::SENDMSG if ret > 0 => Call::Send {
            fd,
            sizes: vec![ret as u64],
            to_port: None,
        },
        nr::RECVFROM if arg(3) & MSG_PEEK != 0 => Call::Nothing,
        nr::RECVMSG if arg(2) & MSG_PEEK != 0 => Call::Nothing,
        nr::READ | nr::READV | nr::RECVFROM | nr::RECVMSG if ret > 0 => Call::Recv {
            fd,
            sizes: vec![ret as u64],
        },
        nr::SENDMMSG if ret > 0 => Call::Send {
            fd,
            sizes: vector(),
            to_port: None,
        },
        nr::RECVMMSG if ret > 0 && arg(3) & MSG_PEEK == 0 => Call::Recv {
            fd,
            sizes: vector(),
        },
        nr::POLL | nr::PPOLL | nr::SELECT | nr::PSELECT6 => Call::Wait,
        nr::EPOLL_WAIT | nr::EPOLL_PWAIT | nr::EPOLL_PWAIT2 => Call::Wait,
        nr::CLOSE => Call::Close { fd },
        nr::DUP => Call::Dup {
            old: fd,
            new: ret as i32,
        },
        nr::DUP2 | nr::DUP3 if arg(0) != arg(1) => Call::Dup {
            old: fd,
            new: arg(1) as i32,
        },
        _ => Call::Nothing,
    };
    Decoded {
        call,
        entry_cpu: args[7],
        exit_cpu: rec.cpu_ns,
        truncated,
    }
}
