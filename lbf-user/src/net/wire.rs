//! The cluster wire format in use: engine [`Event`]s packed into protobuf [`Batch`]es
//! (columns of packed varints, the hot path), and length-prefixed frames on a byte stream.
//!
//! A frame is a 4-byte little-endian length then that many bytes of one protobuf message.
//! Frames longer than [`MAX_FRAME_BYTES`] are refused before anything is allocated, so a
//! peer sending garbage costs nothing.

use crate::event::{CollOp, Event, EventKind, ProcId};
use lbf_proto::prost::Message;
use lbf_proto::Batch;
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
/// A send by rendezvous (`EventKind::Send` with `rendezvous`).
const SEND_RENDEZVOUS: u32 = 7;
const RECV_POST: u32 = 8;
const SEND_END: u32 = 9;

/// Accumulates events into the columns of a [`Batch`].
#[derive(Default)]
pub struct BatchBuilder {
    batch: Batch,
}

impl BatchBuilder {
    /// Appends one event.
    pub fn push(&mut self, event: &Event) {
        let b = &mut self.batch;
        let code = match event.kind {
            EventKind::Send {
                msg,
                bytes,
                rendezvous,
            } => {
                b.id.push(msg);
                b.bytes.push(bytes);
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

    /// Events accumulated so far.
    pub fn len(&self) -> usize {
        self.batch.proc_kind.len()
    }

    /// Whether no event is accumulated.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch so far (its `seq`, `lost_events` and `end` unset); starts a new one.
    pub fn take(&mut self) -> Batch {
        std::mem::take(&mut self.batch)
    }
}

fn op_code(op: CollOp) -> u32 {
    match op {
        CollOp::Barrier => 0,
        CollOp::Bcast => 1,
        CollOp::Reduce => 2,
        CollOp::Allreduce => 3,
    }
}

/// The events of `batch`, in order. `owns(proc)` says whether the sending node announced the
/// process; an event of another, an unknown kind or a short column is an error naming it.
pub fn decode_events(batch: &Batch, owns: impl Fn(ProcId) -> bool) -> Result<Vec<Event>, String> {
    let n = batch.proc_kind.len();
    if batch.cpu_ns.len() != n {
        return Err(format!(
            "batch {}: {} events but {} CPU times",
            batch.seq,
            n,
            batch.cpu_ns.len()
        ));
    }
    let short = |column: &str| format!("batch {}: column `{column}` is too short", batch.seq);
    let (mut ids, mut bytes, mut shapes) =
        (batch.id.iter(), batch.bytes.iter(), batch.coll_shape.iter());
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
                    op: [
                        CollOp::Barrier,
                        CollOp::Bcast,
                        CollOp::Reduce,
                        CollOp::Allreduce,
                    ][(shape & 3) as usize],
                    size: shape >> 2,
                    bytes,
                }
            }
            COLL_END => EventKind::CollEnd { coll: id()? },
            KEEPALIVE => EventKind::Keepalive,
            EXIT => EventKind::Exit,
            other => {
                return Err(format!(
                    "batch {}, event {i}: unknown event kind {other}",
                    batch.seq
                ))
            }
        };
        events.push(Event { proc, cpu_ns, kind });
    }
    if ids.next().is_some() || bytes.next().is_some() || shapes.next().is_some() {
        return Err(format!(
            "batch {}: argument columns longer than its events need",
            batch.seq
        ));
    }
    Ok(events)
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
                msg: u64::MAX,
                bytes: 7,
                rendezvous: false,
            },
            EventKind::Send {
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
            builder.push(&e);
        }
        let bytes = builder.take().encode_to_vec();
        let batch = Batch::decode(bytes.as_slice()).unwrap();
        assert_eq!(decode_events(&batch, |_| true).unwrap(), sample());
        assert!(builder.is_empty());
    }

    #[test]
    fn foreign_processes_and_short_columns_are_named() {
        let mut builder = BatchBuilder::default();
        for e in sample() {
            builder.push(&e);
        }
        let mut batch = builder.take();
        batch.seq = 4;
        let err = decode_events(&batch, |p| p < 2000).unwrap_err();
        assert!(err.contains("process 2000"), "{err}");
        batch.bytes.pop();
        let err = decode_events(&batch, |_| true).unwrap_err();
        assert!(err.contains("batch 4") && err.contains("bytes"), "{err}");
    }

    #[test]
    fn a_batch_costs_a_few_bytes_per_event() {
        let mut builder = BatchBuilder::default();
        for i in 0..1000u64 {
            builder.push(&Event {
                proc: (i % 4) as u32,
                cpu_ns: 50_000 + i,
                kind: EventKind::Send {
                    msg: i,
                    bytes: 64,
                    rendezvous: false,
                },
            });
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
