//! Records and socket tables made by hand: the socket capture's tests use them, and so do the
//! cluster builder's (with the feature `test-support`), which must match the same records
//! split between two hosts as one capture does.

use std::collections::HashMap;

use lbf_common::{syscalls::nr, Record, RecordKind, ARG_WORDS, MEM_BYTES};

use super::channels::{Channel, Endpoint};
use super::resolve::{SocketChannels, SocketResolver, Unidentified};

/// Descriptor 3 of process 1 and of process 2 are the two ends of a stream; descriptor 4 of
/// both, of a datagram pair; descriptor 5 of process 1 is a socket lbf refuses.
pub struct Table(pub HashMap<(u32, i32), SocketChannels>);

/// The channels of the two ends, `a` and `b`, of a stream connection (`stream`) or of a
/// datagram pair.
pub fn ends(a: Endpoint, b: Endpoint, stream: bool) -> (SocketChannels, SocketChannels) {
    if stream {
        (
            SocketChannels {
                send: Some(Channel::Stream { from: a, to: b }),
                recv: Channel::Stream { from: b, to: a },
            },
            SocketChannels {
                send: Some(Channel::Stream { from: b, to: a }),
                recv: Channel::Stream { from: a, to: b },
            },
        )
    } else {
        (
            SocketChannels {
                send: Some(Channel::Datagram { to: b }),
                recv: Channel::Datagram { to: a },
            },
            SocketChannels {
                send: Some(Channel::Datagram { to: a }),
                recv: Channel::Datagram { to: b },
            },
        )
    }
}

impl SocketResolver for Table {
    fn resolve(&mut self, tgid: u32, fd: i32) -> Result<Option<SocketChannels>, Unidentified> {
        if fd == 5 {
            return Err(Unidentified::Family);
        }
        Ok(self.0.get(&(tgid, fd)).copied())
    }
}

/// A `Syscall` record of process `tgid`: call `nr` on `fd` returning `ret`, entered when the
/// thread's clock read `entry_cpu` and returning at `exit_cpu`.
pub fn call(tgid: u32, nr: u16, fd: i32, ret: i64, entry_cpu: u64, exit_cpu: u64) -> Record {
    let mut args = [0u64; ARG_WORDS];
    args[0] = ret as u64;
    args[1] = fd as u64;
    args[7] = entry_cpu;
    Record {
        kind: RecordKind::Syscall as u16,
        fn_id: nr,
        mem_len: 0,
        part: 0,
        tgid,
        tid: tgid,
        ts_ns: exit_cpu,
        cpu_ns: exit_cpu,
        args,
        mem: [0; MEM_BYTES],
    }
}

/// The `Exit` record of process `tgid`, its clock reading `cpu`.
pub fn exit(tgid: u32, cpu: u64) -> Record {
    Record {
        kind: RecordKind::Exit as u16,
        fn_id: 0,
        ..call(tgid, 0, 0, 0, cpu, cpu)
    }
}

/// Process 2 (a client) makes `n` short connections to process 1 (a server), as
/// `short_connections` in the tests does, with connection `i` between the server's end `ends(i).0` and the
/// client's `ends(i).1`.
pub fn short_connections_between(
    n: i32,
    closes: bool,
    endpoints: impl Fn(i32) -> (Endpoint, Endpoint),
) -> (Table, Vec<Record>) {
    let mut table = HashMap::new();
    let mut records = Vec::new();
    for i in 0..n {
        let fd = 100 + i;
        let (s, c) = endpoints(i);
        let (server, client) = ends(s, c, true);
        table.insert((1, fd), server);
        table.insert((2, fd), client);
        let t = i as u64 * 100;
        let last = i == n - 1;
        records.extend([
            call(2, nr::CONNECT, fd, 0, t, t + 1),
            call(1, nr::ACCEPT, 3, fd.into(), t, t + 1),
            call(2, nr::WRITE, fd, 64, t + 1, t + 2),
            call(1, nr::READ, fd, 64, t + 1, t + 3),
            call(1, nr::WRITE, fd, 512, t + 3, t + 4),
            call(2, nr::READ, fd, 300, t + 2, t + 5),
        ]);
        if !last {
            records.push(call(2, nr::READ, fd, 212, t + 5, t + 6));
        }
        if closes {
            records.extend([
                call(2, nr::CLOSE, fd, 0, t + 6, t + 7),
                call(1, nr::READ, fd, 0, t + 4, t + 8),
                call(1, nr::CLOSE, fd, 0, t + 8, t + 9),
            ]);
        }
    }
    let end = n as u64 * 100;
    records.extend([exit(2, end), exit(1, end)]);
    (Table(table), records)
}
