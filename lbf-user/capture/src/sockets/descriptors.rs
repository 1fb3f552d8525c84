//! What each descriptor of each traced process is, and how many descriptors hold each
//! channel, so that a channel's matching state can be freed once no descriptor can use it.
//!
//! A descriptor holds the channels of its socket: the one it receives on and, when it has a
//! peer, the one it sends on. Both ends of a stream connection hold both its directions, so a
//! direction is released when the last descriptor of either end closes: the ends' own
//! `close`, copies (`dup*`, `fcntl(F_DUPFD)`), copies a forked child inherited and copies
//! received over a UNIX socket all count, in whichever process they are. A process's exit
//! closes all of its descriptors. Only descriptors whose socket is identified hold anything:
//! one not looked up yet, or no socket, holds nothing.

use rustc_hash::FxHashMap;

use super::channels::Channel;
use super::resolve::SocketChannels;

/// What a descriptor of a process is, as far as the capture is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fd {
    /// An identified socket.
    Socket(SocketChannels),
    /// A socket from before its process executed another program: it still holds its
    /// channels, but is looked up again on use (it may have been closed on exec, its number
    /// reused).
    BeforeExec(SocketChannels),
    /// Made by `socket`, `accept` or `socketpair`, not identified yet.
    Unresolved,
    /// No socket, or one that cannot be modelled (reported once).
    Ignored,
}

impl Fd {
    /// The socket whose channels this descriptor holds, if any.
    fn holds(self) -> Option<SocketChannels> {
        match self {
            Fd::Socket(s) | Fd::BeforeExec(s) => Some(s),
            Fd::Unresolved | Fd::Ignored => None,
        }
    }
}

/// Every traced process's known descriptors, and the number of them holding each channel.
#[derive(Debug, Default)]
pub struct Descriptors {
    fds: FxHashMap<(u32, i32), Fd>,
    holders: FxHashMap<Channel, usize>,
}

impl Descriptors {
    /// What descriptor `fd` of process `tgid` is, if known.
    pub fn get(&self, tgid: u32, fd: i32) -> Option<Fd> {
        self.fds.get(&(tgid, fd)).copied()
    }

    /// Descriptor `fd` of `tgid` is now `f` (replacing what the number was). Appends to
    /// `released` the channels no descriptor holds any more.
    pub fn set(&mut self, tgid: u32, fd: i32, f: Fd, released: &mut Vec<Channel>) {
        // Hold first: a descriptor found to be the socket it was holds it throughout.
        self.hold(f);
        if let Some(old) = self.fds.insert((tgid, fd), f) {
            self.release(old, released);
        }
    }

    /// Descriptor `fd` of `tgid` was closed. Appends to `released` the channels no
    /// descriptor holds any more.
    pub fn close(&mut self, tgid: u32, fd: i32, released: &mut Vec<Channel>) {
        if let Some(old) = self.fds.remove(&(tgid, fd)) {
            self.release(old, released);
        }
    }

    /// Process `child` was forked by `parent`: it has copies of all of its descriptors (and
    /// none of an earlier process of its PID whose exit went unrecorded). Appends to
    /// `released` the channels no descriptor holds any more.
    pub fn inherit(&mut self, parent: u32, child: u32, released: &mut Vec<Channel>) {
        self.ended(child, released);
        let copies: Vec<(i32, Fd)> = self
            .fds
            .iter()
            .filter(|((t, _), _)| *t == parent)
            .map(|(&(_, fd), &f)| (fd, f))
            .collect();
        for (fd, f) in copies {
            self.set(child, fd, f, released);
        }
    }

    /// Process `tgid` executed another program: its sockets survive unless close-on-exec,
    /// so each is looked up again on its next use.
    pub fn executed(&mut self, tgid: u32) {
        for ((t, _), f) in self.fds.iter_mut() {
            if let (true, Fd::Socket(s)) = (*t == tgid, *f) {
                *f = Fd::BeforeExec(s);
            }
        }
    }

    /// Process `tgid` ended, closing all of its descriptors. Appends to `released` the
    /// channels no descriptor holds any more.
    pub fn ended(&mut self, tgid: u32, released: &mut Vec<Channel>) {
        let fds: Vec<i32> = self
            .fds
            .keys()
            .filter(|(t, _)| *t == tgid)
            .map(|&(_, fd)| fd)
            .collect();
        for fd in fds {
            self.close(tgid, fd, released);
        }
    }

    /// Descriptors known, over all processes.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether no descriptor is known.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    fn hold(&mut self, f: Fd) {
        for c in f.holds().iter().flat_map(channels_of) {
            *self.holders.entry(c).or_default() += 1;
        }
    }

    fn release(&mut self, f: Fd, released: &mut Vec<Channel>) {
        for c in f.holds().iter().flat_map(channels_of) {
            let n = self.holders.get_mut(&c).expect("held");
            *n -= 1;
            if *n == 0 {
                self.holders.remove(&c);
                released.push(c);
            }
        }
    }
}

/// The channels socket `s` uses: its receiving one, and its sending one if it has a peer.
fn channels_of(s: &SocketChannels) -> impl Iterator<Item = Channel> {
    std::iter::once(s.recv).chain(s.send)
}
