//! What identifying one TCP socket costs, with `TIME_WAIT` connections on the host:
//! `cargo bench -p lbf-capture --bench socket_lookup -- [TIME_WAIT] [LOOKUPS]` (defaults 3000
//! and 2000) makes that many loopback connections and closes them (the client first, so each
//! stays in `TIME_WAIT` for a minute), then looks one open connection's socket up LOOKUPS
//! times: through a copy of the descriptor (what the capture does) and through
//! `/proc/net/tcp` (its fallback, and how it looked TCP sockets up before). Prints the mean
//! cost of each and a `RESULT` line.

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

use lbf_capture::sockets::proc_net;
use lbf_capture::sockets::resolve::{ProcResolver, SocketResolver};

fn main() {
    // cargo passes `--bench`; everything else is ours.
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (time_wait, lookups) = (
        args.first().copied().unwrap_or(3000),
        args.get(1).copied().unwrap_or(2000),
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    for _ in 0..time_wait {
        let client = TcpStream::connect(addr).expect("connecting");
        let (server, _) = listener.accept().expect("accepting");
        drop(client);
        drop(server);
    }
    let client = TcpStream::connect(addr).expect("connecting");
    let me = std::process::id();
    let fd = client.as_raw_fd();
    let mut resolver = ProcResolver::new();
    let copy_us = mean_us(lookups, || {
        resolver
            .resolve(me, fd)
            .expect("resolved")
            .expect("a socket");
    });
    let path = format!("/proc/{me}/fd/{fd}");
    let inode = std::fs::metadata(&path).expect("the descriptor").ino();
    let table_us = mean_us(lookups, || {
        proc_net::describe(me, &path, inode).expect("listed");
    });
    let rows = std::fs::read_to_string("/proc/self/net/tcp")
        .map_or(0, |t| t.lines().count().saturating_sub(1));
    println!("{rows} rows in /proc/net/tcp ({time_wait} connections closed)");
    println!("descriptor copy: {copy_us:.1} us per lookup");
    println!("/proc/net/tcp:   {table_us:.1} us per lookup");
    println!("RESULT rows={rows} copy_us={copy_us:.2} table_us={table_us:.2}");
}

/// The mean time of `n` runs of `f`, in microseconds.
fn mean_us(n: usize, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64
}
