//! Which socket a process's descriptor is, and the channels it sends and receives on.
//!
//! [`ProcResolver`] asks the live system, without kernel struct offsets: it copies the
//! process's descriptor and asks the socket itself ([`fd_copy`]) whether it is a socket, of
//! which family, and its addresses (TCP, UDP) or inode (UNIX); sock_diag gives a UNIX socket's
//! type and peer. Both ends of a connection then name their channels alike: a TCP direction by
//! its 4-tuple (which also holds across hosts and namespaces), a UNIX one by the two sockets'
//! inodes.
//!
//! The descriptor must still be open when its first record is decoded (records are decoded
//! within milliseconds); one closed before that is reported as an anomaly. So a lookup must
//! cost little whatever else the host runs: a copy and a few questions to it, and one
//! sock_diag request for the one UNIX inode, through one socket per namespace, made once
//! (entering a namespace costs an RCU grace period, tens of milliseconds on a busy machine).
//! Where lbf may not copy a process's descriptor (no right to ptrace it), `/proc/PID/fd/FD`
//! names the socket's inode and [`proc_net`] finds a TCP or UDP one in its namespace's tables,
//! which costs a read of every connection the namespace has.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;

use super::channels::{Channel, Endpoint};
use super::fd_copy::{self, Described, NoCopy};
use super::proc_net;
use super::sock_diag::{self, UnixSocket};

/// The channels of one socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketChannels {
    /// Where its sends go; `None` for a datagram socket without a connected peer.
    pub send: Option<Channel>,
    /// Where its receives come from.
    pub recv: Channel,
}

/// Why a socket descriptor could not be modelled (counted as an anomaly when it is used).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unidentified {
    /// The descriptor was closed, or its process ended, before lbf looked.
    Gone,
    /// A socket of a family lbf does not capture.
    Family,
    /// A UNIX stream socket without a peer.
    UnixWithoutPeer,
    /// A TCP socket not connected.
    TcpNotConnected,
    /// A socket whose addresses could not be read, and why.
    Unreadable(String),
}

impl std::fmt::Display for Unidentified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unidentified::Gone => {
                f.write_str("descriptor closed (or process ended) before lbf could identify it")
            }
            Unidentified::Family => f.write_str(
                "socket of a family lbf does not capture (it captures TCP, UDP and UNIX sockets)",
            ),
            Unidentified::UnixWithoutPeer => f.write_str("UNIX stream socket without a peer"),
            Unidentified::TcpNotConnected => f.write_str("TCP socket not connected"),
            Unidentified::Unreadable(why) => write!(f, "socket unreadable: {why}"),
        }
    }
}

/// Answers which socket a descriptor is; tests answer from a table.
pub trait SocketResolver {
    /// The channels of descriptor `fd` of process `tgid`: `Ok(None)` if it is no socket,
    /// `Err` when it is a socket lbf cannot model or cannot be looked at.
    fn resolve(&mut self, tgid: u32, fd: i32) -> Result<Option<SocketChannels>, Unidentified>;
}

/// Resolves through copies of the descriptors, sock_diag and `/proc` (see the module
/// documentation).
#[derive(Default)]
pub struct ProcResolver {
    /// A sock_diag socket per network namespace inode.
    diag: HashMap<u64, OwnedFd>,
}

/// The number in a `/proc` link target like `socket:[123]` or `net:[4026531840]`.
fn bracketed(link: &str, prefix: &str) -> Option<u64> {
    link.strip_prefix(prefix)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// What descriptor `fd` of `tgid` is when no copy of it may be made: from `/proc`.
fn describe_from_proc(tgid: u32, fd: i32) -> Result<Described, Unidentified> {
    let path = format!("/proc/{tgid}/fd/{fd}");
    let link = std::fs::read_link(&path).map_err(|_| Unidentified::Gone)?;
    let Some(inode) = bracketed(&link.to_string_lossy(), "socket") else {
        return Ok(Described::NotASocket);
    };
    // No TCP or UDP socket: a UNIX one if sock_diag knows it, else of another family.
    Ok(proc_net::describe(tgid, &path, inode).unwrap_or(Described::Unix { inode }))
}

impl ProcResolver {
    /// A resolver with no sock_diag socket yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn unix_socket(&mut self, tgid: u32, netns: u64, inode: u64) -> Option<UnixSocket> {
        let sock = match self.diag.entry(netns) {
            Entry::Occupied(e) => e.into_mut(),
            // In lbf's own namespace without entering it, which needs CAP_SYS_ADMIN (a node
            // daemon has dropped it) and costs an RCU grace period.
            Entry::Vacant(e) => {
                let own = netns == self::netns(std::process::id());
                e.insert(sock_diag::socket((!own).then_some(tgid)).ok()?)
            }
        };
        sock_diag::unix_socket(sock, inode).ok().flatten()
    }

    /// The channels of a UNIX socket of `tgid` with `inode`, from sock_diag.
    fn unix_channels(&mut self, tgid: u32, inode: u64) -> Result<SocketChannels, Unidentified> {
        let u = self
            .unix_socket(tgid, netns(tgid), inode)
            .ok_or(Unidentified::Family)?;
        let me = Endpoint::Unix { inode };
        let peer = Endpoint::Unix { inode: u.peer };
        if u.sock_type == libc::SOCK_STREAM as u8 {
            if u.peer == 0 {
                return Err(Unidentified::UnixWithoutPeer);
            }
            return Ok(SocketChannels {
                send: Some(Channel::Stream { from: me, to: peer }),
                recv: Channel::Stream { from: peer, to: me },
            });
        }
        Ok(SocketChannels {
            send: (u.peer != 0).then_some(Channel::Datagram { to: peer }),
            recv: Channel::Datagram { to: me },
        })
    }
}

/// The inode of the network namespace process `tgid` is in (0 if unknown): a loopback
/// address is one per namespace.
fn netns(tgid: u32) -> u64 {
    std::fs::read_link(format!("/proc/{tgid}/ns/net"))
        .ok()
        .and_then(|l| bracketed(&l.to_string_lossy(), "net"))
        .unwrap_or(0)
}

/// The channels of a TCP (`stream`) or UDP socket of `tgid` with addresses `local` and
/// `remote`.
fn inet_channels(
    tgid: u32,
    stream: bool,
    local: SocketAddr,
    remote: Option<SocketAddr>,
) -> Result<SocketChannels, Unidentified> {
    if !stream {
        return Ok(SocketChannels {
            send: remote.map(|r| udp_channel(r.port())),
            recv: udp_channel(local.port()),
        });
    }
    let remote = remote.ok_or(Unidentified::TcpNotConnected)?;
    let netns = if local.ip().is_loopback() || remote.ip().is_loopback() {
        netns(tgid)
    } else {
        0
    };
    let ep = |addr: SocketAddr| Endpoint::Inet {
        addr,
        netns: if addr.ip().is_loopback() { netns } else { 0 },
    };
    let (l, r) = (ep(local), ep(remote));
    Ok(SocketChannels {
        send: Some(Channel::Stream { from: l, to: r }),
        recv: Channel::Stream { from: r, to: l },
    })
}

impl SocketResolver for ProcResolver {
    fn resolve(&mut self, tgid: u32, fd: i32) -> Result<Option<SocketChannels>, Unidentified> {
        let described = match fd_copy::copy(tgid, fd) {
            Ok(copy) => {
                fd_copy::describe(&copy).map_err(|e| Unidentified::Unreadable(e.to_string()))?
            }
            Err(NoCopy::Gone) => return Err(Unidentified::Gone),
            Err(NoCopy::Refused(_)) => describe_from_proc(tgid, fd)?,
        };
        match described {
            Described::NotASocket => Ok(None),
            Described::Inet {
                stream,
                local,
                remote,
            } => inet_channels(tgid, stream, local, remote).map(Some),
            Described::Unix { inode } => self.unix_channels(tgid, inode).map(Some),
            Described::Other => Err(Unidentified::Family),
        }
    }
}

/// The datagram channel of the UDP sockets receiving on `port`. UDP receivers are told apart
/// by port alone: a server bound to the wildcard address receives what a client sends to any
/// of the host's addresses (two sockets of one machine bound to one port on different
/// addresses, or in different namespaces, would be confused).
pub fn udp_channel(port: u16) -> Channel {
    Channel::Datagram {
        to: Endpoint::Inet {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            netns: 0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_connection_on_loopback_pairs_up() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        let me = std::process::id();
        let mut r = ProcResolver::new();
        use std::os::fd::AsRawFd;
        let c = r.resolve(me, client.as_raw_fd()).unwrap().unwrap();
        let s = r.resolve(me, server.as_raw_fd()).unwrap().unwrap();
        assert_eq!(c.send, Some(s.recv));
        assert_eq!(s.send, Some(c.recv));
        assert_eq!(r.resolve(me, 0).unwrap_or(None), None, "stdin is no socket");
    }

    #[test]
    fn unix_stream_ends_pair_up() {
        use std::os::fd::AsRawFd;
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let me = std::process::id();
        let mut r = ProcResolver::new();
        let ca = r.resolve(me, a.as_raw_fd()).unwrap().unwrap();
        let cb = r.resolve(me, b.as_raw_fd()).unwrap().unwrap();
        assert_eq!(ca.send, Some(cb.recv));
    }

    #[test]
    fn other_families_are_refused_with_a_reason() {
        use std::os::fd::AsRawFd;
        // SAFETY: plain socket(2), closed by OwnedFd.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM, 0) };
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let err = ProcResolver::new()
            .resolve(std::process::id(), fd.as_raw_fd())
            .unwrap_err();
        assert_eq!(err, Unidentified::Family, "{err}");
    }
}
