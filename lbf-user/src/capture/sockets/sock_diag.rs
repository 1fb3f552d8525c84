//! UNIX socket peers from the kernel's sock_diag netlink interface (`UNIX_DIAG` with
//! `UDIAG_SHOW_PEER`, what `ss -x` uses): for every UNIX socket of a network namespace, its
//! inode, type and the inode of the socket it is connected to. No kernel struct offsets.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
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

/// Every UNIX socket of the network namespace of process `tgid` (or of this process when
/// `None`), by inode.
pub fn unix_sockets(tgid: Option<u32>) -> io::Result<HashMap<u64, UnixSocket>> {
    let sock = match tgid {
        None => netlink_socket()?,
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
            })?
        }
    };
    dump(&sock)
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

/// Sends the dump request and parses the answers.
fn dump(sock: &OwnedFd) -> io::Result<HashMap<u64, UnixSocket>> {
    let mut req = Vec::with_capacity(NLMSG_HDR + 24);
    req.extend_from_slice(&((NLMSG_HDR + 24) as u32).to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req.extend_from_slice(&[0; 8]); // sequence number, port id
    req.extend_from_slice(&[libc::AF_UNIX as u8, 0, 0, 0]); // family, protocol, padding
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&0u32.to_ne_bytes()); // any inode
    req.extend_from_slice(&UDIAG_SHOW_PEER.to_ne_bytes());
    req.extend_from_slice(&[0; 8]); // no cookie
                                    // SAFETY: sending our buffer on our socket (to the kernel: address zeroed = kernel).
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = HashMap::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: receiving into our buffer.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if parse(&buf[..n as usize], &mut found)? {
            return Ok(found);
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses one datagram of netlink messages into `found`; true at the end of the dump.
fn parse(mut b: &[u8], found: &mut HashMap<u64, UnixSocket>) -> io::Result<bool> {
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0) as usize;
        if len < NLMSG_HDR || len > b.len() {
            return Err(io::Error::other("malformed sock_diag answer"));
        }
        match u16_at(b, 4) {
            NLMSG_DONE => return Ok(true),
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
    Ok(false)
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
        let all = unix_sockets(None).unwrap();
        let (ia, ib) = (inode(&a), inode(&b));
        assert_eq!(all[&ia].peer, ib);
        assert_eq!(all[&ib].peer, ia);
        assert_eq!(all[&ia].sock_type, libc::SOCK_STREAM as u8);
    }
}
