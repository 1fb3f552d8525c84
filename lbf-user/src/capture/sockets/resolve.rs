//! Which socket a process's descriptor is, and the channels it sends and receives on.
//!
//! [`ProcResolver`] asks the live system, without kernel struct offsets: `/proc/PID/fd/FD`
//! names the socket's inode (`socket:[INODE]`); the process's own view of its network
//! namespace, `/proc/PID/net/{tcp,tcp6,udp,udp6}`, gives a TCP or UDP socket's addresses by
//! inode; sock_diag gives a UNIX socket's type and peer. Both ends of a connection then name
//! their channels alike: a TCP direction by its 4-tuple (which also holds across hosts and
//! namespaces), a UNIX one by the two sockets' inodes.
//!
//! The descriptor must still be open when its first record is decoded (records are decoded
//! within milliseconds); one closed before that is reported as an anomaly. So a lookup must
//! cost little whatever else the host runs: the socket's protocol (the `system.sockprotoname`
//! attribute of its inode) says which one table to read, so that a UNIX socket costs no scan
//! of the TCP tables (which list every connection in `TIME_WAIT` too), and sock_diag is asked
//! through one socket per namespace, made once (entering a namespace costs an RCU grace
//! period, tens of milliseconds on a busy machine).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;

use super::channels::{Channel, Endpoint};
use super::sock_diag::{self, UnixSocket};

/// The channels of one socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketChannels {
    /// Where its sends go; `None` for a datagram socket without a connected peer.
    pub send: Option<Channel>,
    /// Where its receives come from.
    pub recv: Channel,
}

/// Answers which socket a descriptor is; tests answer from a table.
pub trait SocketResolver {
    /// The channels of descriptor `fd` of process `tgid`: `Ok(None)` if it is no socket,
    /// `Err` with a sentence when it is a socket lbf cannot model or cannot be looked at.
    fn resolve(&mut self, tgid: u32, fd: i32) -> Result<Option<SocketChannels>, String>;
}

/// Resolves through `/proc` and sock_diag (see the module documentation).
#[derive(Default)]
pub struct ProcResolver {
    /// A sock_diag socket per network namespace inode.
    diag: HashMap<u64, OwnedFd>,
}

impl ProcResolver {
    /// A resolver with no sock_diag socket yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn unix_socket(&mut self, tgid: u32, netns: u64, inode: u64) -> Option<UnixSocket> {
        let sock = match self.diag.entry(netns) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(sock_diag::socket(Some(tgid)).ok()?),
        };
        sock_diag::unix_socket(sock, inode).ok().flatten()
    }
}

/// The number in a `/proc` link target like `socket:[123]` or `net:[4026531840]`.
fn bracketed(link: &str, prefix: &str) -> Option<u64> {
    link.strip_prefix(prefix)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The `/proc/net` tables (and whether they are of stream sockets) that may list a socket of
/// protocol `proto` (`TCP`, `UDPv6`, `UNIX-STREAM`, ... as `system.sockprotoname` names it;
/// `None`: unknown, all of them).
fn inet_tables(proto: Option<&str>) -> &'static [(&'static str, bool)] {
    const ALL: [(&str, bool); 4] = [
        ("tcp", true),
        ("tcp6", true),
        ("udp", false),
        ("udp6", false),
    ];
    match proto {
        Some("TCP") => &ALL[0..1],
        Some("TCPv6") => &ALL[1..2],
        Some("UDP") => &ALL[2..3],
        Some("UDPv6") => &ALL[3..4],
        Some(p) if p.starts_with("UNIX") => &[],
        _ => &ALL,
    }
}

/// The protocol of the socket at `path` (a `/proc/PID/fd/FD` link), from its inode's
/// `system.sockprotoname` attribute, if the kernel tells.
fn protocol(path: &str) -> Option<String> {
    let path = CString::new(path).ok()?;
    let mut buf = [0u8; 32];
    // SAFETY: NUL-terminated strings and our buffer with its length.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            c"system.sockprotoname".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let name = buf.get(..usize::try_from(n).ok()?)?;
    let name = name.split(|&b| b == 0).next()?;
    Some(String::from_utf8_lossy(name).into_owned())
}

impl SocketResolver for ProcResolver {
    fn resolve(&mut self, tgid: u32, fd: i32) -> Result<Option<SocketChannels>, String> {
        let path = format!("/proc/{tgid}/fd/{fd}");
        let link = std::fs::read_link(&path).map_err(|_| {
            "descriptor closed (or process ended) before lbf could identify it".to_string()
        })?;
        let Some(inode) = bracketed(&link.to_string_lossy(), "socket") else {
            return Ok(None);
        };
        let netns = std::fs::read_link(format!("/proc/{tgid}/ns/net"))
            .ok()
            .and_then(|l| bracketed(&l.to_string_lossy(), "net"))
            .unwrap_or(0);
        let proto = protocol(&path);
        for &(table, stream) in inet_tables(proto.as_deref()) {
            let Ok(text) = std::fs::read_to_string(format!("/proc/{tgid}/net/{table}")) else {
                continue;
            };
            if let Some((local, remote)) = find_inet(&text, inode) {
                let ep = |addr: SocketAddr| Endpoint::Inet {
                    addr,
                    netns: if addr.ip().is_loopback() { netns } else { 0 },
                };
                let (l, r) = (ep(local), ep(remote));
                return Ok(Some(if stream {
                    SocketChannels {
                        send: Some(Channel::Stream { from: l, to: r }),
                        recv: Channel::Stream { from: r, to: l },
                    }
                } else {
                    SocketChannels {
                        send: (remote.port() != 0).then(|| udp_channel(remote.port())),
                        recv: udp_channel(local.port()),
                    }
                }));
            }
        }
        if let Some(u) = self.unix_socket(tgid, netns, inode) {
            let me = Endpoint::Unix { inode };
            let peer = Endpoint::Unix { inode: u.peer };
            if u.sock_type == libc::SOCK_STREAM as u8 {
                if u.peer == 0 {
                    return Err("UNIX stream socket without a peer".into());
                }
                return Ok(Some(SocketChannels {
                    send: Some(Channel::Stream { from: me, to: peer }),
                    recv: Channel::Stream { from: peer, to: me },
                }));
            }
            return Ok(Some(SocketChannels {
                send: (u.peer != 0).then_some(Channel::Datagram { to: peer }),
                recv: Channel::Datagram { to: me },
            }));
        }
        Err(
            "socket of a family lbf does not capture (it captures TCP, UDP and UNIX sockets)"
                .into(),
        )
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

/// The local and remote address of the socket with `inode` in a `/proc/net/{tcp,udp}[6]`
/// table.
fn find_inet(table: &str, inode: u64) -> Option<(SocketAddr, SocketAddr)> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(9)?.parse::<u64>().ok()? != inode {
            return None;
        }
        Some((parse_addr(f.get(1)?)?, parse_addr(f.get(2)?)?))
    })
}

/// An address as `/proc/net` writes it: the address's 32-bit words in hex, each in host
/// (little-endian) order, a colon, the port in hex. IPv4-mapped IPv6 addresses become IPv4,
/// so that an IPv6 socket and its IPv4 peer name the connection alike.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..addr.len() / 8)
        .map(|i| u32::from_str_radix(&addr[i * 8..i * 8 + 8], 16).map(u32::from_be))
        .collect::<Result<_, _>>()
        .ok()?;
    let ip = match words[..] {
        [w] => IpAddr::V4(Ipv4Addr::from(w.to_be_bytes())),
        [a, b, c, d] => {
            let mut bytes = [0u8; 16];
            for (i, w) in [a, b, c, d].iter().enumerate() {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
            }
            let v6 = Ipv6Addr::from(bytes);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_addresses_decode() {
        assert_eq!(
            parse_addr("0100007F:1F90"),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            parse_addr("00000000000000000000000001000000:0050"),
            Some("[::1]:80".parse().unwrap())
        );
        assert_eq!(
            parse_addr("0000000000000000FFFF00000100007F:0050"),
            Some("127.0.0.1:80".parse().unwrap())
        );
    }

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
        assert!(err.contains("family"), "{err}");
    }
}
