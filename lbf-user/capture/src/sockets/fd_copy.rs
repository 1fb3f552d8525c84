//! What a descriptor of another process is, asked of the socket itself: a copy of the
//! descriptor is made in lbf (`pidfd_open` + `pidfd_getfd`, Linux 5.6; it needs the right to
//! ptrace the process, which the tracer has: CAP_SYS_PTRACE, kept by the node daemon too), the
//! socket is asked its family, protocol and addresses (`SO_DOMAIN`, `SO_PROTOCOL`,
//! `getsockname`, `getpeername`) or inode (`fstat`), and the copy is closed. A handful of
//! system calls, whatever else the host has open, and in whatever network namespace the socket
//! lives (the addresses are the socket's own, as its namespace names them): unlike a
//! `/proc/net/tcp` table, which lists every connection of the namespace, `TIME_WAIT` ones too.
//!
//! The copy holds the socket open for those few microseconds: a process closing its own copy
//! meanwhile has its connection end (the peer sees the end of stream) when lbf closes it.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;

use rustix::fs::FileType;
use rustix::net::{ipproto, sockopt, AddressFamily};
use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};

/// Why no copy of a descriptor could be made.
#[derive(Debug)]
pub enum NoCopy {
    /// The descriptor is closed or the process ended.
    Gone,
    /// This process may not copy it (no right to ptrace the process, a kernel without
    /// `pidfd_getfd`): other means must tell.
    Refused(io::Error),
}

/// A copy in this process of descriptor `fd` of process `tgid`.
pub fn copy(tgid: u32, fd: i32) -> Result<OwnedFd, NoCopy> {
    let gone_or_refused = |e: rustix::io::Errno| match e {
        rustix::io::Errno::SRCH | rustix::io::Errno::BADF => NoCopy::Gone,
        e => NoCopy::Refused(e.into()),
    };
    let pid = i32::try_from(tgid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or(NoCopy::Gone)?;
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).map_err(gone_or_refused)?;
    pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty()).map_err(gone_or_refused)
}

/// What a descriptor is, as far as the socket capture cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Described {
    /// No socket.
    NotASocket,
    /// A TCP (`stream`) or UDP socket: its address, and its peer's when connected. IPv4-mapped
    /// IPv6 addresses are IPv4 (see [`unmapped`]).
    Inet {
        /// TCP rather than UDP.
        stream: bool,
        /// Its own address.
        local: SocketAddr,
        /// Its peer's address; `None` when not connected.
        remote: Option<SocketAddr>,
    },
    /// A UNIX socket, by inode (its peer is sock_diag's to tell).
    Unix {
        /// The socket's inode.
        inode: u64,
    },
    /// A socket of another family or protocol (netlink, SCTP, raw, ...).
    Other,
}

/// What the descriptor `copy` (see [`copy`]) is.
pub fn describe(copy: &OwnedFd) -> io::Result<Described> {
    let stat = rustix::fs::fstat(copy)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Socket {
        return Ok(Described::NotASocket);
    }
    let family = sockopt::socket_domain(copy)?;
    if family == AddressFamily::UNIX {
        return Ok(Described::Unix { inode: stat.st_ino });
    }
    if family != AddressFamily::INET && family != AddressFamily::INET6 {
        return Ok(Described::Other);
    }
    let stream = match sockopt::socket_protocol(copy)? {
        Some(ipproto::TCP) => true,
        Some(ipproto::UDP) => false,
        _ => return Ok(Described::Other),
    };
    let inet = |a: rustix::net::SocketAddrAny| SocketAddr::try_from(a).ok().map(unmapped);
    let local = inet(rustix::net::getsockname(copy)?)
        .ok_or_else(|| io::Error::other("an inet socket without an inet address"))?;
    let remote = match rustix::net::getpeername(copy) {
        Ok(peer) => peer.and_then(inet),
        Err(rustix::io::Errno::NOTCONN) => None,
        Err(e) => return Err(e.into()),
    };
    Ok(Described::Inet {
        stream,
        local,
        remote,
    })
}

/// `addr` with an IPv4-mapped IPv6 address as IPv4, and no IPv6 flow label or scope, so that
/// an IPv6 socket and its IPv4 peer, and both ends of any connection, name it alike.
pub fn unmapped(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    SocketAddr::new(ip, addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_tcp_connection_describes_both_ends() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let me = std::process::id();
        let c = describe(&copy(me, client.as_raw_fd()).unwrap()).unwrap();
        assert_eq!(
            c,
            Described::Inet {
                stream: true,
                local: client.local_addr().unwrap(),
                remote: Some(listener.local_addr().unwrap()),
            }
        );
        let l = describe(&copy(me, listener.as_raw_fd()).unwrap()).unwrap();
        assert!(matches!(l, Described::Inet { remote: None, .. }), "{l:?}");
    }

    #[test]
    fn a_file_is_no_socket_and_a_closed_descriptor_or_ended_process_gone() {
        let me = std::process::id();
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let f = describe(&copy(me, file.as_raw_fd()).unwrap()).unwrap();
        assert_eq!(f, Described::NotASocket);
        // No number this process could have open (another test may reuse a closed one).
        assert!(matches!(copy(me, i32::MAX), Err(NoCopy::Gone)));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(matches!(copy(pid, 0), Err(NoCopy::Gone)));
    }

    #[test]
    fn mapped_addresses_become_ipv4() {
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:80".parse().unwrap();
        assert_eq!(unmapped(mapped), "127.0.0.1:80".parse().unwrap());
    }
}
