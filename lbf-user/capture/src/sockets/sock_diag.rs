//! UNIX socket peers from the kernel's sock_diag netlink interface (`UNIX_DIAG` with
//! `UDIAG_SHOW_PEER`, what `ss -x` uses): for a UNIX socket of a network namespace, asked for
//! by inode, its type and the inode of the socket it is connected to. No kernel struct
//! offsets.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const UDIAG_SHOW_PEER: u32 = 4;
const UNIX_DIAG_PEER: u16 = 2;
/// `nlmsghdr` and `unix_diag_msg` sizes.
const NLMSG_HDR: usize = 16;
const UNIX_DIAG_MSG: usize = 16;

/// A UNIX socket as sock_diag reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnixSocket {
    /// `SOCK_STREAM` (1), `SOCK_DGRAM` (2) or `SOCK_SEQPACKET` (5).
    pub sock_type: u8,
    /// The inode of the connected peer, 0 if none.
    pub peer: u64,
}

/// A sock_diag socket in the network namespace of process `tgid` (or of this process when
/// `None`): it answers about that namespace for as long as it is kept. Entering another
/// namespace for it costs an RCU grace period: keep it rather than make one per question.
pub fn socket(tgid: Option<u32>) -> io::Result<OwnedFd> {
    match tgid {
        None => netlink_socket(),
        Some(pid) => {
            let ns = File::open(format!("/proc/{pid}/ns/net"))?;
            // setns affects only the calling thread: do it in a thread of its own. The
            // socket stays in the namespace it was created in.
            std::thread::scope(|s| {
                s.spawn(|| {
                    // SAFETY: plain setns on an open namespace file, in this thread only.
                    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    netlink_socket()
                })
                .join()
                .map_err(|_| io::Error::other("the sock_diag thread panicked"))?
            })
        }
    }
}

fn netlink_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The UNIX socket with `inode` in the network namespace of sock_diag socket `sock` (see
/// [`socket`]), asked for alone: what costs the same however many sockets the host has.
/// `Ok(None)`: no such socket (closed).
pub fn unix_socket(sock: &OwnedFd, inode: u64) -> io::Result<Option<UnixSocket>> {
    let Ok(ino) = u32::try_from(inode) else {
        return Ok(None);
    };
    // No cookie to check (`INET_DIAG_NOCOOKIE`).
    request(sock, ino, [u32::MAX; 2])?;
    let mut buf = vec![0u8; 1 << 12];
    // SAFETY: receiving into our buffer.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = HashMap::new();
    match parse(&buf[..n as usize], &mut found) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
        Ok(()) => Ok(found.get(&inode).copied()),
    }
}

/// Sends a `UNIX_DIAG` request for the socket with inode `ino` and `cookie`, asking for its
/// peer.
fn request(sock: &OwnedFd, ino: u32, cookie: [u32; 2]) -> io::Result<()> {
    let mut req = Vec::with_capacity(NLMSG_HDR + 24);
    req.extend_from_slice(&((NLMSG_HDR + 24) as u32).to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&[0; 8]); // sequence number, port id
    req.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]); // family, protocol, padding
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&ino.to_ne_bytes());
    req.extend_from_slice(&UDIAG_SHOW_PEER.to_ne_bytes());
    for c in cookie {
        req.extend_from_slice(&c.to_ne_bytes());
    }
    // SAFETY: sending our buffer on our socket (to the kernel: address zeroed = kernel).
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses one datagram of netlink messages into `found`.
fn parse(mut b: &[u8], found: &mut HashMap<u64, UnixSocket>) -> io::Result<()> {
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0) as usize;
        if len < NLMSG_HDR || len > b.len() {
            return Err(io::Error::other("malformed sock_diag answer"));
        }
        match u16_at(b, 4) {
            NLMSG_DONE => return Ok(()),
            NLMSG_ERROR => {
                let errno = b.get(16..20).map_or(0, |_| u32_at(b, 16) as i32);
                return Err(io::Error::from_raw_os_error(-errno));
            }
            SOCK_DIAG_BY_FAMILY if len >= NLMSG_HDR + UNIX_DIAG_MSG => {
                let msg = &b[NLMSG_HDR..len];
                let mut sock = UnixSocket {
                    sock_type: msg[1],
                    peer: 0,
                };
                let inode = u32_at(msg, 4) as u64;
                let mut attrs = &msg[UNIX_DIAG_MSG..];
                while attrs.len() >= 4 {
                    let alen = u16_at(attrs, 0) as usize;
                    if alen < 4 || alen > attrs.len() {
                        break;
                    }
                    if u16_at(attrs, 2) == UNIX_DIAG_PEER && alen >= 8 {
                        sock.peer = u32_at(attrs, 4) as u64;
                    }
                    attrs = &attrs[((alen + 3) & !3).min(attrs.len())..];
                }
                found.insert(inode, sock);
            }
            _ => {}
        }
        b = &b[((len + 3) & !3).min(b.len())..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::net::UnixStream;

    fn inode(fd: &impl AsRawFd) -> u64 {
        std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap()
            .ino()
    }

    #[test]
    fn a_socketpair_reports_each_end_as_the_others_peer() {
        let (a, b) = UnixStream::pair().unwrap();
        let sock = socket(None).unwrap();
        let (ia, ib) = (inode(&a), inode(&b));
        let (sa, sb) = (
            unix_socket(&sock, ia).unwrap(),
            unix_socket(&sock, ib).unwrap(),
        );
        assert_eq!(sa.map(|s| s.peer), Some(ib));
        assert_eq!(sb.map(|s| s.peer), Some(ia));
        assert_eq!(sa.unwrap().sock_type, libc::SOCK_STREAM as u8);
        drop(a);
        assert_eq!(unix_socket(&sock, ia).unwrap(), None, "closed");
    }
}
