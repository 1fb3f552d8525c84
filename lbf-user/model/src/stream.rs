//! Sockets as the model names them: the ends of a connection, the channels messages travel
//! on, and the sends and receives on a connection to another host that a capture hands on to
//! where both ends meet (a cluster's builder), matched there by the socket capture's own
//! matcher (`lbf-capture`'s `sockets::channels`).

use std::net::SocketAddr;

/// One end of a socket connection, as both processes name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Endpoint {
    /// A TCP or UDP address and port. `netns` is the network namespace (its inode) when the
    /// address is a loopback one, which every namespace has its own of; 0 otherwise.
    Inet {
        /// Address and port (IPv4-mapped IPv6 addresses are written as IPv4).
        addr: SocketAddr,
        /// Namespace of a loopback address, else 0.
        netns: u64,
    },
    /// A UNIX socket, by its inode.
    Unix {
        /// The socket's inode number.
        inode: u64,
    },
}

/// Where a message goes: the key both ends compute alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// One direction of a stream connection.
    Stream {
        /// The sending end.
        from: Endpoint,
        /// The receiving end.
        to: Endpoint,
    },
    /// Datagrams to one receiving socket, from whoever sends them.
    Datagram {
        /// The receiving end.
        to: Endpoint,
    },
}

/// One direction of a stream connection, as both ends name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Direction {
    /// The sending end.
    pub from: Endpoint,
    /// The receiving end.
    pub to: Endpoint,
}

impl Direction {
    /// The channel this direction is.
    pub fn channel(self) -> Channel {
        Channel::Stream {
            from: self.from,
            to: self.to,
        }
    }
}

/// Which end of a direction did something: the one sending on it or the one receiving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The sending end.
    Send,
    /// The receiving end.
    Recv,
}

/// A send or a receive of `bytes` bytes on a stream direction whose other end another capture
/// sees: handed on to where both ends meet, which matches it as `lbf-capture`'s `Channels::send` and
/// `Channels::recv` do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOp {
    /// The direction.
    pub dir: Direction,
    /// Whether the capture's end sent or received.
    pub role: Role,
    /// The bytes moved (more than 0).
    pub bytes: u64,
}

/// The end `role` of direction `dir` is closed in the capture that saw it, after moving
/// `bytes` bytes on it in all: once that many are matched, nothing more comes from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndClosed {
    /// The direction.
    pub dir: Direction,
    /// Which of its ends closed.
    pub role: Role,
    /// The bytes that end sent (or received) on the direction, over its whole life.
    pub bytes: u64,
}
