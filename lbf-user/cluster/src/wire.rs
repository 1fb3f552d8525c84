//! The cluster wire format in use: engine [`Event`]s, and a socket capture's sends and
//! receives on connections between hosts ([`StreamOp`]s) with their ends' closes, packed into
//! protobuf [`Batch`]es (columns of packed varints, the hot path), and length-prefixed frames
//! on a byte stream.
//!
//! A frame is a 4-byte little-endian length then that many bytes of one protobuf message.
//! Frames longer than [`MAX_FRAME_BYTES`] are refused before anything is allocated, so a
//! peer sending garbage costs nothing.

use lbf_capture::sockets::channels::{Direction, EndClosed, Endpoint, Role, StreamOp};
use lbf_model::event::{CollOp, Event, EventKind, ProcId, ProcedureCpu, MAX_PROCEDURES};
use lbf_proto::prost::Message;
use lbf_proto::{Batch, Closed, Conn};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame either side accepts: far above a full batch ([`BATCH_EVENTS`] events of
/// at most about 40 bytes), far below what would hurt memory.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// Events per batch a node sends: large enough that per-batch costs (a journal write, an
/// acknowledgement) are negligible, small enough that a batch is a fraction of a second.
pub const BATCH_EVENTS: usize = 8192;

/// Bits of `Batch.proc_kind` below the process: the event's kind code.
const KIND_BITS: u32 = 4;
/// Kind codes of `Batch.proc_kind`'s low [`KIND_BITS`] bits.
const SEND: u32 = 0;
const RECV_START: u32 = 1;
const RECV_END: u32 = 2;
const COLL_START: u32 = 3;
const COLL_END: u32 = 4;
const KEEPALIVE: u32 = 5;
const EXIT: u32 = 6;
const STREAM: u32 = 7;
/// A send by rendezvous (`EventKind::Send` with `rendezvous`).
const SEND_RENDEZVOUS: u32 = 8;
const RECV_POST: u32 = 9;
const SEND_END: u32 = 10;

/// One item of a node's stream, in its process's order: an event for the engine, or a send
/// or receive on a connection between hosts, for the builder to match.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeEvent {
    /// An engine event.
    Event(Event),
    /// A send or receive of process `proc` after `cpu_ns` of CPU, matched by the builder.
    Stream {
        /// The process.
        proc: ProcId,
        /// CPU nanoseconds since its previous event.
        cpu_ns: u64,
        /// What it did (boxed: larger than an event, and rarer).
        op: Box<StreamOp>,
    },
}

impl NodeEvent {
    /// The process it belongs to.
    pub fn proc(&self) -> ProcId {
        match self {
            NodeEvent::Event(e) => e.proc,
            NodeEvent::Stream { proc, .. } => *proc,
        }
    }
}

/// A batch's content, decoded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decoded {
    /// Its events, in order.
    pub events: Vec<NodeEvent>,
    /// The CPU each event's process spent in each procedure the node follows since its
    /// previous event: one entry per event, or none when the node follows no procedure.
    pub procedures: Vec<ProcedureCpu>,
    /// The ends of connections between hosts it says closed.
    pub closed: Vec<EndClosed>,
}

/// Accumulates events into the columns of a [`Batch`].
#[derive(Default)]
pub struct BatchBuilder {
    batch: Batch,
    /// The index of each direction in the batch's `conns`.
    conns: HashMap<Direction, u32>,
    /// How many procedures the node follows: `proc_ns` entries per event.
    procedures: usize,
    /// Sends in the batch so far: the batch's `after` column, once a send needs it, has one
    /// entry for each.
    sends: usize,
}

impl BatchBuilder {
    /// A builder for a node that follows `procedures` procedures (at most
    /// [`MAX_PROCEDURES`]; 0: none, and no `proc_ns` column).
    pub fn new(procedures: usize) -> Self {
        assert!(procedures <= MAX_PROCEDURES, "{procedures} procedures");
        BatchBuilder {
            procedures,
            ..Default::default()
        }
    }

    /// Appends one event, whose process spent `shares` in the followed procedures since its
    /// previous event.
    pub fn push(&mut self, event: &Event, shares: &ProcedureCpu) {
        self.push_shares(shares);
        let b = &mut self.batch;
        let code = match event.kind {
            EventKind::Send {
                msg,
                bytes,
                rendezvous,
                after,
            } => {
                b.id.push(msg);
                b.bytes.push(bytes);
                if after > 0 {
                    b.after.resize(self.sends, 0);
                }
                if !b.after.is_empty() || after > 0 {
                    b.after.push(after);
                }
                self.sends += 1;
                if rendezvous {
                    SEND_RENDEZVOUS
                } else {
                    SEND
                }
            }
            EventKind::RecvStart => RECV_START,
            EventKind::RecvEnd { msg } => {
                b.id.push(msg);
                RECV_END
            }
            EventKind::RecvPost { msg } => {
                b.id.push(msg);
                RECV_POST
            }
            EventKind::SendEnd { msg } => {
                b.id.push(msg);
                SEND_END
            }
            EventKind::CollStart {
                coll,
                op,
                size,
                bytes,
            } => {
                b.id.push(coll);
                b.bytes.push(bytes);
                b.coll_shape.push(size << 2 | op_code(op));
                COLL_START
            }
            EventKind::CollEnd { coll } => {
                b.id.push(coll);
                COLL_END
            }
            EventKind::Keepalive => KEEPALIVE,
            EventKind::Exit => EXIT,
        };
        b.proc_kind.push(event.proc << KIND_BITS | code);
        b.cpu_ns.push(event.cpu_ns);
    }

    /// Appends a send or receive of `proc` on a connection between hosts, after `cpu_ns`
    /// of which `shares` in the followed procedures.
    pub fn push_stream(&mut self, proc: ProcId, cpu_ns: u64, shares: &ProcedureCpu, op: &StreamOp) {
        self.push_shares(shares);
        let conn = self.conn(op.dir);
        let b = &mut self.batch;
        b.stream.push(conn << 1 | u32::from(op.role == Role::Recv));
        b.bytes.push(op.bytes);
        b.proc_kind.push(proc << KIND_BITS | STREAM);
        b.cpu_ns.push(cpu_ns);
    }

    /// Appends an event's entries of the `proc_ns` column (none without procedures).
    fn push_shares(&mut self, shares: &ProcedureCpu) {
        self.batch
            .proc_ns
            .extend_from_slice(shares.first(self.procedures));
    }

    /// Appends the close of an end of a connection between hosts.
    pub fn push_closed(&mut self, end: &EndClosed) {
        let conn = self.conn(end.dir);
        self.batch.closed.push(Closed {
            conn,
            receiver: end.role == Role::Recv,
            bytes: end.bytes,
        });
    }

    /// The index of `dir` in the batch's `conns`, added if new.
    fn conn(&mut self, dir: Direction) -> u32 {
        let conns = &mut self.batch.conns;
        *self.conns.entry(dir).or_insert_with(|| {
            conns.push(conn_of(dir));
            conns.len() as u32 - 1
        })
    }

    /// Events accumulated so far.
    pub fn len(&self) -> usize {
        self.batch.proc_kind.len()
    }

    /// Whether nothing is accumulated: no event, no close.
    pub fn is_empty(&self) -> bool {
        self.len() == 0 && self.batch.closed.is_empty()
    }

    /// The batch so far (its `seq`, `lost_events` and `end` unset); starts a new one.
    pub fn take(&mut self) -> Batch {
        self.conns.clear();
        self.sends = 0;
        std::mem::take(&mut self.batch)
    }
}

/// `dir` as the wire names it.
fn conn_of(dir: Direction) -> Conn {
    let (from, to) = (socket_addr(dir.from), socket_addr(dir.to));
    let ip = |a: SocketAddr| match a.ip() {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    Conn {
        from_ip: ip(from),
        from_port: u32::from(from.port()),
        to_ip: ip(to),
        to_port: u32::from(to.port()),
    }
}

/// The address of an end of a connection between hosts (only TCP ends are streamed).
fn socket_addr(end: Endpoint) -> SocketAddr {
    match end {
        Endpoint::Inet { addr, .. } => addr,
        Endpoint::Unix { .. } => unreachable!("only TCP connections are matched between hosts"),
    }
}

/// The direction a wire `Conn` names; an address of another length than 4 or 16 bytes, or a
/// port above 65535, is an error naming it.
fn direction_of(conn: &Conn, index: usize) -> Result<Direction, String> {
    let end = |ip: &[u8], port: u32| -> Result<Endpoint, String> {
        let ip = match ip.len() {
            4 => IpAddr::from(<[u8; 4]>::try_from(ip).expect("4 bytes")),
            16 => IpAddr::from(<[u8; 16]>::try_from(ip).expect("16 bytes")),
            n => {
                return Err(format!(
                    "conn {index}: an address of {n} bytes (4 or 16 expected)"
                ))
            }
        };
        let port = u16::try_from(port).map_err(|_| format!("conn {index}: port {port}"))?;
        Ok(Endpoint::Inet {
            addr: SocketAddr::new(ip, port),
            netns: 0,
        })
    };
    Ok(Direction {
        from: end(&conn.from_ip, conn.from_port)?,
        to: end(&conn.to_ip, conn.to_port)?,
    })
}

/// The bit of a collective's `coll_shape` that marks [`CollOp::Alltoall`].
const ALLTOALL_BIT: u32 = 1 << 31;

fn op_code(op: CollOp) -> u32 {
    match op {
        CollOp::Barrier => 0,
        CollOp::Bcast => 1,
        CollOp::Reduce => 2,
        CollOp::Allreduce => 3,
        // Code 3 with bit 31 (sizes stay below 2^29): a node of an older lbf reads an
        // all-to-all as an all-reduce of an absurd size rather than as a wrong operation.
        CollOp::Alltoall => 3 | ALLTOALL_BIT,
    }
}

/// The content of `batch` from a node that follows `procedures` procedures (its hello's
/// list). `owns(proc)` says whether the sending node announced the process; an event of
/// another, an unknown kind, a short column, a `proc_ns` column of another length than
/// `procedures` entries per event, or a connection the batch does not name is an error
/// naming it.
pub fn decode_batch(
    batch: &Batch,
    procedures: usize,
    owns: impl Fn(ProcId) -> bool,
) -> Result<Decoded, String> {
    let n = batch.proc_kind.len();
    if batch.cpu_ns.len() != n {
        return Err(format!(
            "batch {}: {} events but {} CPU times",
            batch.seq,
            n,
            batch.cpu_ns.len()
        ));
    }
    if procedures > MAX_PROCEDURES {
        return Err(format!(
            "batch {}: a node follows at most {MAX_PROCEDURES} procedures, not {procedures}",
            batch.seq
        ));
    }
    if batch.proc_ns.len() != n * procedures {
        return Err(format!(
            "batch {}: {} events of a node following {procedures} procedures need {} entries \
             in `proc_ns` ({procedures} per event), but it has {}",
            batch.seq,
            n,
            n * procedures,
            batch.proc_ns.len()
        ));
    }
    let shares = match procedures {
        0 => Vec::new(),
        p => batch
            .proc_ns
            .chunks_exact(p)
            .map(|c| ProcedureCpu::from_slice(c).expect("at most MAX_PROCEDURES, checked"))
            .collect(),
    };
    let bad = |what: String| format!("batch {}: {what}", batch.seq);
    let short = |column: &str| bad(format!("column `{column}` is too short"));
    let dirs = batch
        .conns
        .iter()
        .enumerate()
        .map(|(i, c)| direction_of(c, i))
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    let dir = |conn: u32| {
        dirs.get(conn as usize)
            .copied()
            .ok_or_else(|| bad(format!("conn {conn} is not in the batch's {}", dirs.len())))
    };
    let (mut ids, mut bytes, mut shapes, mut streams, mut afters) = (
        batch.id.iter(),
        batch.bytes.iter(),
        batch.coll_shape.iter(),
        batch.stream.iter(),
        batch.after.iter(),
    );
    let mut events = Vec::with_capacity(n);
    for (i, (&pk, &cpu_ns)) in batch.proc_kind.iter().zip(&batch.cpu_ns).enumerate() {
        let proc = pk >> KIND_BITS;
        if !owns(proc) {
            return Err(format!(
                "batch {}, event {i}: process {proc} is not one this node announced",
                batch.seq
            ));
        }
        let mut id = || ids.next().copied().ok_or_else(|| short("id"));
        let kind = match pk & ((1 << KIND_BITS) - 1) {
            code @ (SEND | SEND_RENDEZVOUS) => EventKind::Send {
                msg: id()?,
                bytes: *bytes.next().ok_or_else(|| short("bytes"))?,
                rendezvous: code == SEND_RENDEZVOUS,
                after: match batch.after.is_empty() {
                    true => 0,
                    false => *afters.next().ok_or_else(|| short("after"))?,
                },
            },
            RECV_START => EventKind::RecvStart,
            RECV_END => EventKind::RecvEnd { msg: id()? },
            RECV_POST => EventKind::RecvPost { msg: id()? },
            SEND_END => EventKind::SendEnd { msg: id()? },
            COLL_START => {
                let coll = id()?;
                let bytes = *bytes.next().ok_or_else(|| short("bytes"))?;
                let shape = *shapes.next().ok_or_else(|| short("coll_shape"))?;
                EventKind::CollStart {
                    coll,
                    op: match (shape & 3, shape & ALLTOALL_BIT != 0) {
                        (3, true) => CollOp::Alltoall,
                        (code, _) => [
                            CollOp::Barrier,
                            CollOp::Bcast,
                            CollOp::Reduce,
                            CollOp::Allreduce,
                        ][code as usize],
                    },
                    size: (shape & !ALLTOALL_BIT) >> 2,
                    bytes,
                }
            }
            COLL_END => EventKind::CollEnd { coll: id()? },
            KEEPALIVE => EventKind::Keepalive,
            EXIT => EventKind::Exit,
            STREAM => {
                let s = *streams.next().ok_or_else(|| short("stream"))?;
                let role = if s & 1 == 1 { Role::Recv } else { Role::Send };
                let op = Box::new(StreamOp {
                    dir: dir(s >> 1)?,
                    role,
                    bytes: *bytes.next().ok_or_else(|| short("bytes"))?,
                });
                events.push(NodeEvent::Stream { proc, cpu_ns, op });
                continue;
            }
            code => {
                return Err(format!(
                    "batch {}, event {i}: unknown event kind code {code}",
                    batch.seq
                ))
            }
        };
        events.push(NodeEvent::Event(Event { proc, cpu_ns, kind }));
    }
    if ids.next().is_some()
        || bytes.next().is_some()
        || shapes.next().is_some()
        || streams.next().is_some()
    {
        return Err(bad("argument columns longer than its events need".into()));
    }
    let closed = batch
        .closed
        .iter()
        .map(|c| {
            Ok(EndClosed {
                dir: dir(c.conn)?,
                role: if c.receiver { Role::Recv } else { Role::Send },
                bytes: c.bytes,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Decoded {
        events,
        procedures: shares,
        closed,
    })
}

/// `message` as one frame: its length, then its bytes.
pub fn frame(message: &impl Message) -> Vec<u8> {
    let len = message.encoded_len();
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    message.encode(&mut out).expect("a Vec grows as needed");
    out
}

/// Reads one frame's body into `buf`; `Ok(false)` at a clean end of stream (before a frame).
pub async fn read_frame(
    input: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes announced; the limit is {MAX_FRAME_BYTES}"),
        ));
    }
    buf.resize(len, 0);
    input.read_exact(buf).await?;
    Ok(true)
}

/// Reads and decodes one frame; an end of stream or undecodable bytes are errors.
pub async fn read_message<M: Message + Default>(
    input: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> std::io::Result<M> {
    if !read_frame(input, buf).await? {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    M::decode(buf.as_slice())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
}

/// Writes `message` as one frame and flushes.
pub async fn write_message(
    output: &mut (impl AsyncWrite + Unpin),
    message: &impl Message,
) -> std::io::Result<()> {
    output.write_all(&frame(message)).await?;
    output.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Event> {
        let kinds = [
            EventKind::Send {
                after: 0,
                msg: u64::MAX,
                bytes: 7,
                rendezvous: false,
            },
            EventKind::Send {
                after: 0,
                msg: 5,
                bytes: 1 << 20,
                rendezvous: true,
            },
            EventKind::RecvStart,
            EventKind::RecvPost { msg: 3 },
            EventKind::RecvEnd { msg: 3 },
            EventKind::SendEnd { msg: 5 },
            EventKind::CollStart {
                coll: 9,
                op: CollOp::Reduce,
                size: 1000,
                bytes: 1 << 40,
            },
            EventKind::CollEnd { coll: 9 },
            EventKind::Keepalive,
            EventKind::Exit,
        ];
        kinds
            .iter()
            .enumerate()
            .map(|(i, &kind)| Event {
                proc: i as u32 * 1000,
                cpu_ns: i as u64 * 12345,
                kind,
            })
            .collect()
    }

    #[test]
    fn every_kind_round_trips_through_bytes() {
        let mut builder = BatchBuilder::default();
        for e in sample() {
            builder.push(&e, &ProcedureCpu::NONE);
        }
        let bytes = builder.take().encode_to_vec();
        let batch = Batch::decode(bytes.as_slice()).unwrap();
        let events: Vec<NodeEvent> = sample().into_iter().map(NodeEvent::Event).collect();
        assert_eq!(decode_batch(&batch, 0, |_| true).unwrap().events, events);
        assert!(builder.is_empty());
    }

    /// A send's `after` crosses the wire: the column stays empty while every send's is 0, and
    /// once one is not it holds one entry per send of the batch, those before it included.
    #[test]
    fn sends_after_other_bytes_of_their_call_round_trip() {
        let send = |msg, after| Event {
            proc: 0,
            cpu_ns: 0,
            kind: EventKind::Send {
                msg,
                bytes: 100,
                rendezvous: false,
                after,
            },
        };
        let mut builder = BatchBuilder::default();
        builder.push(&send(1, 0), &ProcedureCpu::NONE);
        assert!(builder.take().after.is_empty());
        let events = [send(2, 0), send(3, 100), send(4, 0)];
        for e in &events {
            builder.push(e, &ProcedureCpu::NONE);
        }
        let batch = builder.take();
        assert_eq!(batch.after, [0, 100, 0]);
        let back = decode_batch(&batch, 0, |_| true).unwrap().events;
        let events: Vec<NodeEvent> = events.into_iter().map(NodeEvent::Event).collect();
        assert_eq!(back, events);
    }

    #[test]
    fn foreign_processes_and_short_columns_are_named() {
        let mut builder = BatchBuilder::default();
        for e in sample() {
            builder.push(&e, &ProcedureCpu::NONE);
        }
        let mut batch = builder.take();
        batch.seq = 4;
        let err = decode_batch(&batch, 0, |p| p < 2000).unwrap_err();
        assert!(err.contains("process 2000"), "{err}");
        batch.bytes.pop();
        let err = decode_batch(&batch, 0, |_| true).unwrap_err();
        assert!(err.contains("batch 4") && err.contains("bytes"), "{err}");
    }

    /// Sends and receives on connections between hosts, among other events, and closes: each
    /// direction named once per batch, IPv4 and IPv6 alike.
    #[test]
    fn streams_and_closes_round_trip_through_bytes() {
        let end = inet;
        let v4 = Direction {
            from: end("10.0.0.2", 40000),
            to: end("10.0.0.1", 7000),
        };
        let v6 = Direction {
            from: end("fd00::1", 7001),
            to: end("fd00::2", 50000),
        };
        let op = |dir, role, bytes| StreamOp { dir, role, bytes };
        let mut builder = BatchBuilder::default();
        let mut expected = Vec::new();
        for (i, (dir, role)) in [(v4, Role::Send), (v6, Role::Recv), (v4, Role::Recv)]
            .into_iter()
            .enumerate()
        {
            let o = op(dir, role, 100 + i as u64);
            builder.push_stream(i as u32, 7, &ProcedureCpu::NONE, &o);
            expected.push(NodeEvent::Stream {
                proc: i as u32,
                cpu_ns: 7,
                op: Box::new(o),
            });
            let e = sample()[i];
            builder.push(&e, &ProcedureCpu::NONE);
            expected.push(NodeEvent::Event(e));
        }
        let closed = EndClosed {
            dir: v6,
            role: Role::Send,
            bytes: 12345,
        };
        builder.push_closed(&closed);
        let mut batch = builder.take();
        assert_eq!(batch.conns.len(), 2);
        batch = Batch::decode(batch.encode_to_vec().as_slice()).unwrap();
        let decoded = decode_batch(&batch, 0, |_| true).unwrap();
        assert_eq!(decoded.events, expected);
        assert_eq!(decoded.closed, [closed]);
        batch.conns[1].to_ip.pop();
        let err = decode_batch(&batch, 0, |_| true).unwrap_err();
        assert!(err.contains("conn 1") && err.contains("15 bytes"), "{err}");
        batch.conns.pop();
        let err = decode_batch(&batch, 0, |_| true).unwrap_err();
        assert!(err.contains("conn 1 is not in the batch"), "{err}");
    }

    /// The TCP end at `ip`, `port`.
    fn inet(ip: &str, port: u16) -> Endpoint {
        Endpoint::Inet {
            addr: SocketAddr::new(ip.parse().unwrap(), port),
            netns: 0,
        }
    }

    /// A node following procedures: every event, a stream's send or receive too, carries
    /// its shares through bytes, in order; a node following none sends no `proc_ns`.
    #[test]
    fn procedure_shares_round_trip_per_event_and_stream() {
        let mut builder = BatchBuilder::new(2);
        let mut shares = Vec::new();
        for (i, e) in sample().into_iter().enumerate() {
            let s = ProcedureCpu::from_slice(&[i as u64 * 1000, (i % 3) as u64]).unwrap();
            builder.push(&e, &s);
            shares.push(s);
        }
        let op = StreamOp {
            dir: Direction {
                from: inet("10.0.0.2", 40000),
                to: inet("10.0.0.1", 7000),
            },
            role: Role::Send,
            bytes: 9,
        };
        let s = ProcedureCpu::from_slice(&[7, 1 << 40]).unwrap();
        builder.push_stream(3, 8, &s, &op);
        shares.push(s);
        let batch = Batch::decode(builder.take().encode_to_vec().as_slice()).unwrap();
        assert_eq!(batch.proc_ns.len(), 2 * shares.len());
        let decoded = decode_batch(&batch, 2, |_| true).unwrap();
        assert_eq!(decoded.procedures, shares);
        let mut events: Vec<NodeEvent> = sample().into_iter().map(NodeEvent::Event).collect();
        events.push(NodeEvent::Stream {
            proc: 3,
            cpu_ns: 8,
            op: Box::new(op),
        });
        assert_eq!(decoded.events, events);
        let mut plain = BatchBuilder::default();
        plain.push(&sample()[0], &shares[1]);
        let plain = plain.take();
        assert!(plain.proc_ns.is_empty());
        assert!(decode_batch(&plain, 0, |_| true)
            .unwrap()
            .procedures
            .is_empty());
    }

    /// A `proc_ns` column that is not the hello's procedures per event is refused, named.
    #[test]
    fn a_proc_ns_column_of_another_length_is_refused() {
        let mut builder = BatchBuilder::new(2);
        for e in sample() {
            builder.push(&e, &ProcedureCpu::NONE);
        }
        let mut batch = builder.take();
        batch.seq = 6;
        let n = batch.proc_kind.len();
        // Read as from a node following 3 procedures, one, or none.
        for p in [3, 1, 0] {
            let err = decode_batch(&batch, p, |_| true).unwrap_err();
            assert!(
                err.contains("batch 6")
                    && err.contains(&format!("need {} entries in `proc_ns`", n * p))
                    && err.contains(&format!("it has {}", 2 * n)),
                "{err}"
            );
        }
        batch.proc_ns.pop();
        let err = decode_batch(&batch, 2, |_| true).unwrap_err();
        assert!(err.contains(&format!("it has {}", 2 * n - 1)), "{err}");
        let err = decode_batch(&batch, 9, |_| true).unwrap_err();
        assert!(err.contains("at most 8 procedures"), "{err}");
    }

    #[test]
    fn a_batch_costs_a_few_bytes_per_event() {
        let mut builder = BatchBuilder::default();
        for i in 0..1000u64 {
            let send = Event {
                proc: (i % 4) as u32,
                cpu_ns: 50_000 + i,
                kind: EventKind::Send {
                    after: 0,
                    msg: i,
                    bytes: 64,
                    rendezvous: false,
                },
            };
            builder.push(&send, &ProcedureCpu::NONE);
        }
        let len = builder.take().encoded_len();
        assert!(len < 10 * 1000, "{len} bytes for 1000 sends");
    }

    #[tokio::test]
    async fn oversized_frames_are_refused_unread() {
        let mut input: &[u8] = &[0xff, 0xff, 0xff, 0x7f, 1, 2, 3];
        let err = read_frame(&mut input, &mut Vec::new()).await.unwrap_err();
        assert!(err.to_string().contains("limit"), "{err}");
    }
}
