//! A TCP or UDP socket's addresses from its network namespace's `/proc/net/{tcp,tcp6,udp,udp6}`
//! tables, by inode: what identifies a socket when lbf may not copy the process's descriptor
//! (see [`super::fd_copy`]). Each lookup reads a whole table, which lists every connection of
//! the namespace, `TIME_WAIT` ones too: slow on a host making many connections.

use std::ffi::CString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::fd_copy::{unmapped, Described};

/// What `/proc/PID/net` says of the socket with `inode`, descriptor `fd_path` (a
/// `/proc/PID/fd/FD` link) of process `tgid`: `Described::Inet` if a TCP or UDP table of its
/// namespace lists it, `None` otherwise.
pub fn describe(tgid: u32, fd_path: &str, inode: u64) -> Option<Described> {
    let proto = protocol(fd_path);
    inet_tables(proto.as_deref())
        .iter()
        .find_map(|&(table, stream)| {
            let text = std::fs::read_to_string(format!("/proc/{tgid}/net/{table}")).ok()?;
            let (local, remote) = find_inet(&text, inode)?;
            Some(Described::Inet {
                stream,
                local,
                remote: (remote.port() != 0).then_some(remote),
            })
        })
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
/// as [`unmapped`] makes them.
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
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(unmapped(SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

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
    fn the_table_tells_what_a_copy_of_the_descriptor_tells() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let me = std::process::id();
        let path = format!("/proc/{me}/fd/{}", client.as_raw_fd());
        let inode = std::fs::metadata(&path).unwrap().ino();
        let copy = super::super::fd_copy::copy(me, client.as_raw_fd()).unwrap();
        assert_eq!(
            describe(me, &path, inode),
            Some(super::super::fd_copy::describe(&copy).unwrap())
        );
    }
}
