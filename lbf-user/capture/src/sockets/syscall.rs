//! The system calls the socket capture records, and what each record says: which descriptor
//! moved how many bytes, where a process began to wait, which descriptors were closed or
//! duplicated. x86-64 numbers and argument positions (see `lbf_common::syscalls`).

use lbf_common::{
    syscalls::{how, nr, SyscallRead, WORDS_PER_PART},
    Record, ARG_WORDS, MEM_BYTES,
};

use crate::timeline::At;

/// Size of a `struct mmsghdr` on x86-64, and the offset of its `msg_len` field.
const MMSGHDR_SIZE: u16 = 64;
const MMSGHDR_LEN_OFFSET: u16 = 56;

/// Offsets in a `struct msghdr` on x86-64 of `msg_name` and of `msg_control` (each followed
/// by its length).
const MSGHDR_NAME_OFFSET: u16 = 0;
const MSGHDR_CONTROL_OFFSET: u16 = 32;

/// `MSG_PEEK`: a receive that leaves the bytes in the socket.
const MSG_PEEK: u64 = 2;

/// Bytes of a `sockaddr_in6`, the largest destination address read.
const SOCKADDR_BYTES: u16 = 28;

/// `fcntl` commands that copy a descriptor: `F_DUPFD`, `F_DUPFD_CLOEXEC`.
const F_DUPFD: u64 = 0;
const F_DUPFD_CLOEXEC: u64 = 1030;

/// The port of an `AF_INET` or `AF_INET6` socket address (network byte order at offset 2).
fn inet_port(sockaddr: &[u8]) -> Option<u16> {
    let &[f0, f1, p0, p1, ..] = sockaddr else {
        return None;
    };
    let family = u16::from_le_bytes([f0, f1]) as i32;
    (family == libc::AF_INET || family == libc::AF_INET6).then(|| u16::from_be_bytes([p0, p1]))
}

/// The descriptors `SCM_RIGHTS` messages of control data (`struct cmsghdr`s, 8-byte
/// aligned, as `recvmsg` leaves them) carry.
fn passed_fds(control: &[u8]) -> Vec<i32> {
    const HEAD: usize = 16; // cmsg_len (size_t), cmsg_level, cmsg_type (int)
    let word = |b: &[u8]| i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut fds = Vec::new();
    let mut at = 0;
    while let Some(head) = control.get(at..at + HEAD) {
        let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes")) as usize;
        if len < HEAD {
            break;
        }
        if word(&head[8..]) == libc::SOL_SOCKET && word(&head[12..]) == libc::SCM_RIGHTS {
            let data = &control[at + HEAD..(at + len).min(control.len())];
            fds.extend(data.chunks_exact(4).map(word));
        }
        at += len.next_multiple_of(8);
    }
    fds
}

/// `EINPROGRESS`: a nonblocking `connect` under way.
const EINPROGRESS: i64 = 115;

/// The system calls to record, with their memory reads: the destination address of `sendto`
/// and `sendmsg` (for unconnected UDP sockets), the control data of `recvmsg` (descriptors
/// passed over UNIX sockets), the two descriptors of `socketpair`, and each message's size
/// of `sendmmsg` and `recvmmsg`.
pub fn traced() -> Vec<(u16, SyscallRead)> {
    let plain = |arg, len| SyscallRead {
        how: how::PLAIN,
        arg,
        len,
        ..SyscallRead::default()
    };
    let in_msghdr = |offset, len| SyscallRead {
        how: how::INDIRECT,
        arg: 1,
        len,
        offset,
        stride: 0,
    };
    let sizes = SyscallRead {
        how: how::STRIDED,
        arg: 1,
        len: 0,
        offset: MMSGHDR_LEN_OFFSET,
        stride: MMSGHDR_SIZE,
    };
    let mut table: Vec<(u16, SyscallRead)> = [
        nr::READ,
        nr::WRITE,
        nr::CLOSE,
        nr::POLL,
        nr::READV,
        nr::WRITEV,
        nr::SELECT,
        nr::DUP,
        nr::DUP2,
        nr::SENDFILE,
        nr::RECVFROM,
        nr::FCNTL,
        nr::EPOLL_WAIT,
        nr::PSELECT6,
        nr::PPOLL,
        nr::SPLICE,
        nr::EPOLL_PWAIT,
        nr::DUP3,
        nr::EPOLL_PWAIT2,
        nr::SOCKET,
        nr::CONNECT,
        nr::ACCEPT,
        nr::ACCEPT4,
    ]
    .into_iter()
    .map(|n| (n, SyscallRead::default()))
    .collect();
    table.extend([
        (nr::SENDTO, plain(4, SOCKADDR_BYTES)),
        (nr::SENDMSG, in_msghdr(MSGHDR_NAME_OFFSET, SOCKADDR_BYTES)),
        (
            nr::RECVMSG,
            in_msghdr(MSGHDR_CONTROL_OFFSET, MEM_BYTES as u16),
        ),
        (nr::SENDMMSG, sizes),
        (nr::RECVMMSG, sizes),
        (nr::SOCKETPAIR, plain(3, 8)),
    ]);
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
        /// The destination port `sendto` or `sendmsg` named (IPv4 or IPv6), for unconnected
        /// UDP sockets.
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
    /// `bytes` moved from descriptor `from` to `to` inside the kernel (`sendfile`, `splice`):
    /// a send if `to` is a socket, else a receive if `from` is one.
    Transfer {
        /// The descriptor read.
        from: i32,
        /// The descriptor written.
        to: i32,
        /// Bytes moved.
        bytes: u64,
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
    /// What happened (as far as this record tells: a `sendmmsg`/`recvmmsg` of many messages
    /// takes several records, see [`Decoded::continue_with`]).
    pub call: Call,
    /// The call's entry: the thread's CPU clock and the time.
    pub entry: At,
    /// Its return.
    pub exit: At,
    /// Which part of its call the record is (`lbf_common::Record::part`).
    pub part: u16,
    /// Whether a record of the call's next part follows.
    pub more: bool,
    /// Messages `sendmmsg`/`recvmmsg` moved that neither this record nor the call's earlier
    /// parts hold: those of later parts, or lost (a failed read of the message vector).
    pub missing: u64,
    /// Descriptors the call received from another process (`SCM_RIGHTS`).
    pub received: Vec<i32>,
}

impl Decoded {
    /// Where the events of a send this call made go: at its return on the thread's CPU clock
    /// (the CPU of the call is the sender's work), at its entry in time (when its bytes began
    /// to leave: a write larger than the socket's buffer returns only once most of them have,
    /// and the engine starts a message's journey where the sender computed up to, which is
    /// there).
    pub fn sent(&self) -> At {
        At {
            cpu: self.exit.cpu,
            ts: self.entry.ts,
        }
    }

    /// Adds the messages of `next`, the record of this call's next part; false (and nothing
    /// added) if `next` is no such record.
    pub fn continue_with(&mut self, next: Decoded) -> bool {
        if !self.more || next.part != self.part + 1 {
            return false;
        }
        match (&mut self.call, next.call) {
            (Call::Send { sizes, .. }, Call::Send { sizes: later, .. })
            | (Call::Recv { sizes, .. }, Call::Recv { sizes: later, .. }) => sizes.extend(later),
            (Call::Nothing, Call::Nothing) => {}
            _ => return false,
        }
        self.part = next.part;
        self.more = next.more;
        self.missing = next.missing;
        true
    }
}

/// Decodes a `Syscall` record (`fn_id` = the number, `args[0]` = the return value,
/// `args[1..6]` = the first 5 arguments, `args[6]` and `args[7]` = the entry's time and CPU
/// clock).
pub fn decode(rec: &Record) -> Decoded {
    let args: &[u64; ARG_WORDS] = &rec.args;
    let ret = args[0] as i64;
    let arg = |i: usize| args[1 + i];
    let fd = arg(0) as i32;
    let mem = &rec.mem[..usize::from(rec.mem_len).min(rec.mem.len())];
    let moved = |sizes: Vec<u64>| sizes.into_iter().filter(|&n| n > 0).collect::<Vec<_>>();
    // sendmmsg/recvmmsg: this part's `msg_len`s, WORDS_PER_PART to a full part.
    let words: Vec<u64> = mem
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
        .collect();
    let is_vector = matches!(rec.fn_id, nr::SENDMMSG | nr::RECVMMSG) && ret > 0;
    let held = u64::from(rec.part) * WORDS_PER_PART as u64 + words.len() as u64;
    let full_part = words.len() == WORDS_PER_PART;
    let missing = if is_vector {
        (ret as u64).saturating_sub(held)
    } else {
        0
    };
    let received = match rec.fn_id {
        nr::RECVMSG if ret >= 0 => passed_fds(mem),
        _ => Vec::new(),
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
        nr::SOCKETPAIR => Call::Open {
            fds: words.iter().take(2).map(|&w| w as i32).collect(),
            connected: true,
            family: Some(fd),
        },
        nr::SENDTO | nr::SENDMSG if ret > 0 => Call::Send {
            fd,
            sizes: vec![ret as u64],
            to_port: inet_port(mem),
        },
        nr::WRITE | nr::WRITEV if ret > 0 => Call::Send {
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
            sizes: moved(words),
            to_port: None,
        },
        nr::RECVMMSG if ret > 0 && arg(3) & MSG_PEEK == 0 => Call::Recv {
            fd,
            sizes: moved(words),
        },
        nr::SENDFILE if ret > 0 => Call::Transfer {
            from: arg(1) as i32,
            to: fd,
            bytes: ret as u64,
        },
        nr::SPLICE if ret > 0 => Call::Transfer {
            from: fd,
            to: arg(2) as i32,
            bytes: ret as u64,
        },
        nr::POLL | nr::PPOLL | nr::SELECT | nr::PSELECT6 => Call::Wait,
        nr::EPOLL_WAIT | nr::EPOLL_PWAIT | nr::EPOLL_PWAIT2 => Call::Wait,
        nr::CLOSE => Call::Close { fd },
        nr::DUP => Call::Dup {
            old: fd,
            new: ret as i32,
        },
        nr::FCNTL if matches!(arg(1), F_DUPFD | F_DUPFD_CLOEXEC) => Call::Dup {
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
        entry: At::new(args[7], args[6]),
        exit: At::new(rec.cpu_ns, rec.ts_ns),
        part: rec.part,
        more: missing > 0 && full_part,
        missing,
        received,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scm_rights_descriptors_are_found_among_control_messages() {
        let cmsg = |level: i32, kind: i32, data: &[i32]| {
            let mut b = ((16 + 4 * data.len()) as u64).to_le_bytes().to_vec();
            b.extend(level.to_le_bytes());
            b.extend(kind.to_le_bytes());
            b.extend(data.iter().flat_map(|d| d.to_le_bytes()));
            b.resize(b.len().next_multiple_of(8), 0);
            b
        };
        let mut control = cmsg(libc::SOL_SOCKET, libc::SCM_CREDENTIALS, &[1, 2, 3]);
        control.extend(cmsg(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[7, 9, 11]));
        assert_eq!(passed_fds(&control), [7, 9, 11]);
        assert_eq!(passed_fds(&control[..20]), Vec::<i32>::new());
        assert_eq!(passed_fds(&[]), Vec::<i32>::new());
    }
}
