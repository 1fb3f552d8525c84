//! A TCP ping-pong: one-way times by message size between two hosts, or within one over the
//! loopback.
//!
//! The client sends each message as an 8-byte size followed by the payload; the server reads
//! it whole and sends the payload back (one byte for an empty message: TCP has no empty
//! message, so "0 B" is an 8-byte request and a 1-byte reply). Both ends set `TCP_NODELAY`.
//! A size's one-way time is half the median round trip over its repetitions: at least
//! [`Plan::min_reps`], more while the size's time budget lasts, at most [`Plan::max_reps`],
//! after one warm-up exchange.

use crate::progress::Progress;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The size that tells the server the client is done.
const DONE: u64 = u64::MAX;

/// One measured size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Message size in bytes.
    pub bytes: u64,
    /// One-way time, seconds: half the median round trip.
    pub seconds: f64,
    /// How many were timed: round trips of a ping-pong, or messages of a traced run
    /// ([`crate::output::Counted`]).
    pub reps: u32,
}

/// What to measure: sizes 0 and every power of two up to `max_bytes`, each repeated.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The largest size (rounded down to a power of two).
    pub max_bytes: u64,
    /// Round trips per size at least.
    pub min_reps: u32,
    /// Round trips per size at most.
    pub max_reps: u32,
    /// Time per size after which no more repetitions start (beyond `min_reps`).
    pub budget: Duration,
}

impl Default for Plan {
    /// 0 B to 16 MiB, 5 to 1000 round trips per size, 0.5 s a size.
    fn default() -> Self {
        Plan {
            max_bytes: 16 << 20,
            min_reps: 5,
            max_reps: 1000,
            budget: Duration::from_millis(500),
        }
    }
}

impl Plan {
    /// The sizes: 0, then 1, 2, 4, ... up to `max_bytes`.
    pub fn sizes(&self) -> Vec<u64> {
        let mut sizes = vec![0];
        let mut b = 1u64;
        while b <= self.max_bytes {
            sizes.push(b);
            b *= 2;
        }
        sizes
    }
}

/// The largest message a server accepts: 1 GiB (a peer asking for more is refused before
/// anything is allocated).
pub const MAX_MESSAGE: u64 = 1 << 30;

/// Serves ping-pong clients on `listener`, one at a time, until `clients` have been served
/// (`None`: forever). Each client's errors are returned.
pub fn serve(listener: &TcpListener, clients: Option<u32>) -> io::Result<()> {
    let mut served = 0;
    while clients.is_none_or(|c| served < c) {
        let (stream, _) = listener.accept()?;
        echo(stream)?;
        served += 1;
    }
    Ok(())
}

/// Answers one client until it says it is done.
fn echo(stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    // Buffered, so that a small message's size and payload take one read.
    let mut input = io::BufReader::with_capacity(64 << 10, stream.try_clone()?);
    let mut stream = stream;
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let mut head = [0u8; 8];
        input.read_exact(&mut head)?;
        let bytes = u64::from_le_bytes(head);
        if bytes == DONE {
            return Ok(());
        }
        if bytes > MAX_MESSAGE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the client asked for {bytes} bytes, more than {MAX_MESSAGE}"),
            ));
        }
        let len = bytes.max(1) as usize;
        if buf.len() < len {
            buf.resize(len, 0);
        }
        input.read_exact(&mut buf[..bytes as usize])?;
        stream.write_all(&buf[..len])?;
    }
}

/// How long a peer that refuses the connection is tried again: its server may still be
/// starting.
pub const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// Connects to `peer`, trying again for [`CONNECT_PATIENCE`] while it refuses.
fn connect(peer: impl ToSocketAddrs) -> io::Result<TcpStream> {
    let start = Instant::now();
    loop {
        match TcpStream::connect(&peer) {
            Err(e)
                if e.kind() == io::ErrorKind::ConnectionRefused
                    && start.elapsed() < CONNECT_PATIENCE =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            result => return result,
        }
    }
}

/// Measures `plan` against the ping-pong server at `peer` (tried again for
/// [`CONNECT_PATIENCE`] while it refuses), showing `progress`.
pub fn measure(
    peer: impl ToSocketAddrs,
    plan: &Plan,
    progress: &mut Progress,
) -> io::Result<Vec<Measured>> {
    ping_pong(connect(peer)?, plan, progress)
}

/// [`measure`] against a server of [`serve_keyed`]: presents `key` first.
pub fn measure_keyed(
    peer: impl ToSocketAddrs,
    key: &[u8; KEY_BYTES],
    plan: &Plan,
    progress: &mut Progress,
) -> io::Result<Vec<Measured>> {
    let mut stream = connect(peer)?;
    stream.write_all(key)?;
    ping_pong(stream, plan, progress)
}

/// The ping-pong of `plan` on a connected `stream`.
fn ping_pong(
    mut stream: TcpStream,
    plan: &Plan,
    progress: &mut Progress,
) -> io::Result<Vec<Measured>> {
    stream.set_nodelay(true)?;
    let sizes = plan.sizes();
    let largest = *sizes.last().unwrap_or(&0) as usize;
    let mut out = vec![0u8; 8 + largest];
    let mut back = vec![0u8; largest.max(1)];
    let mut measured = Vec::with_capacity(sizes.len());
    for (i, &bytes) in sizes.iter().enumerate() {
        progress.show(i, sizes.len(), &format!("{} B", bytes));
        out[..8].copy_from_slice(&bytes.to_le_bytes());
        let request = &out[..8 + bytes as usize];
        let reply = &mut back[..(bytes as usize).max(1)];
        let mut round_trip = || -> io::Result<f64> {
            let start = Instant::now();
            stream.write_all(request)?;
            stream.read_exact(reply)?;
            Ok(start.elapsed().as_secs_f64())
        };
        round_trip()?;
        let start = Instant::now();
        let mut times = Vec::new();
        while times.len() < plan.min_reps as usize
            || (times.len() < plan.max_reps as usize && start.elapsed() < plan.budget)
        {
            times.push(round_trip()?);
        }
        measured.push(Measured {
            bytes,
            seconds: median(&mut times) / 2.0,
            reps: times.len() as u32,
        });
    }
    stream.write_all(&DONE.to_le_bytes())?;
    progress.done();
    Ok(measured)
}

/// Bytes of the key a client of [`serve_keyed`] presents.
pub const KEY_BYTES: usize = 32;

/// How long a connected client of [`serve_keyed`] may take to present its key.
const KEY_PATIENCE: Duration = Duration::from_secs(5);

/// Serves the first client on `listener` that presents `key` (see [`measure_keyed`]), then
/// returns; connections that present anything else are closed. Gives up, with an error,
/// when no such client has come within `patience`.
pub fn serve_keyed(
    listener: &TcpListener,
    key: &[u8; KEY_BYTES],
    patience: Duration,
) -> io::Result<()> {
    let deadline = Instant::now() + patience;
    listener.set_nonblocking(true)?;
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no peer presented the key within {patience:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(e),
        };
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(KEY_PATIENCE))?;
        let mut given = [0u8; KEY_BYTES];
        let presented = (&stream).read_exact(&mut given).is_ok();
        // Compared in constant time: how much of a guess matched is not told by its timing.
        let differs = given.iter().zip(key).fold(0u8, |d, (a, b)| d | (a ^ b));
        if presented && differs == 0 {
            stream.set_read_timeout(None)?;
            return echo(stream);
        }
    }
}

/// Measures `plan` within this host: a server thread on the loopback answers.
pub fn measure_local(plan: &Plan, progress: &mut Progress) -> io::Result<Vec<Measured>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = std::thread::spawn(move || serve(&listener, Some(1)));
    let measured = measure(addr, plan, progress)?;
    server
        .join()
        .map_err(|_| io::Error::other("the loopback server panicked"))??;
    Ok(measured)
}

/// The median of `times` (sorted in place); 0 for none.
pub fn median(times: &mut [f64]) -> f64 {
    if times.is_empty() {
        return 0.0;
    }
    times.sort_by(f64::total_cmp);
    let n = times.len();
    if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keyed_server_answers_only_the_key_and_gives_up_in_time() {
        let key = [7u8; KEY_BYTES];
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server =
            std::thread::spawn(move || serve_keyed(&listener, &key, Duration::from_secs(20)));
        let plan = Plan {
            max_bytes: 4,
            min_reps: 2,
            max_reps: 2,
            budget: Duration::ZERO,
        };
        // A wrong key is hung up on: its ping-pong fails, and the server waits on.
        let wrong = measure_keyed(addr, &[8u8; KEY_BYTES], &plan, &mut Progress::hidden());
        assert!(wrong.is_err());
        let measured = measure_keyed(addr, &key, &plan, &mut Progress::hidden()).unwrap();
        assert_eq!(
            measured.iter().map(|m| m.bytes).collect::<Vec<_>>(),
            [0, 1, 2, 4]
        );
        server.join().unwrap().unwrap();
        // Nobody comes: an error once the patience is spent.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let err = serve_keyed(&listener, &key, Duration::from_millis(50)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn sizes_run_from_zero_by_powers_of_two() {
        let plan = Plan {
            max_bytes: 5,
            ..Plan::default()
        };
        assert_eq!(plan.sizes(), vec![0, 1, 2, 4]);
        assert_eq!(Plan::default().sizes().len(), 26);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn the_loopback_answers_every_size() {
        let plan = Plan {
            max_bytes: 1 << 16,
            min_reps: 3,
            max_reps: 20,
            budget: Duration::from_millis(5),
        };
        let m = measure_local(&plan, &mut Progress::hidden()).unwrap();
        assert_eq!(m.len(), 18);
        assert!(m.iter().all(|p| p.seconds > 0.0 && p.reps >= 3), "{m:?}");
    }
}
