//! Reading records out of the ring buffer. The kernel side never waits for this reader: when
//! the buffer is full it drops the record and counts it (see `Tracer::lost_counts`).

use std::{mem, os::fd::AsRawFd, time::Duration};

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use lbf_common::{Record, RecordKind, RECORD_HEAD_BYTES};

/// Where the record stream goes: the capture layer implements this to turn records into
/// engine events and trace files; `JsonLinesSink` dumps them for debugging.
pub trait RecordSink {
    /// One record, in ring buffer order (per thread, the order the thread produced them).
    fn record(&mut self, record: &Record) -> Result<()>;
    /// The capture ended; `lost` says what the kernel side dropped. Called once.
    fn finish(&mut self, lost: &super::LostCounts) -> Result<()>;
    /// Called every time the capture loop wakes up (at least every few hundred milliseconds,
    /// records or not), for periodic work such as progress reports. The default does nothing.
    fn tick(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Drains the record ring buffer.
pub struct RecordReader {
    ring: RingBuf<MapData>,
}

impl RecordReader {
    /// Wraps the ring buffer taken from the tracer.
    pub(super) fn new(ring: RingBuf<MapData>) -> Self {
        Self { ring }
    }

    /// Waits until records are ready or `timeout` passes; true if records are ready.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.ring.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(anyhow::Error::new(err).context("polling the record ring buffer"));
        }
        Ok(n > 0)
    }

    /// Hands every record now in the buffer to `sink`; returns how many.
    pub fn drain(&mut self, sink: &mut dyn RecordSink) -> Result<u64> {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            for record in decode(&item) {
                sink.record(&record)?;
                n += 1;
            }
        }
        Ok(n)
    }
}

/// The records in the bytes of a ring buffer item, in order: its one record, or the entry and
/// the exit record of a [`RecordKind::CallPair`] (the first as a `CallEntry`). A record may
/// end anywhere after its head (see [`Record`]): the bytes past its end read as 0. None for
/// an item shorter than a head (never written by lbf-ebpf).
pub fn decode(bytes: &[u8]) -> impl Iterator<Item = Record> + '_ {
    let pair = bytes.len() >= 2 * RECORD_HEAD_BYTES
        && bytes[..2] == (RecordKind::CallPair as u16).to_ne_bytes();
    let (first, second) = if pair {
        bytes.split_at(RECORD_HEAD_BYTES)
    } else {
        (bytes, &[][..])
    };
    let entry = one(first).map(|mut r| {
        if pair {
            r.kind = RecordKind::CallEntry as u16;
        }
        r
    });
    entry.into_iter().chain(one(second))
}

/// The record at the start of `bytes`, which may end anywhere after its head; `None` if
/// `bytes` is shorter than a head.
fn one(bytes: &[u8]) -> Option<Record> {
    if bytes.len() < RECORD_HEAD_BYTES {
        return None;
    }
    let n = bytes.len().min(mem::size_of::<Record>());
    // SAFETY: Record is plain old data, for which all zeros is a valid value.
    let mut record: Record = unsafe { mem::zeroed() };
    // SAFETY: `n` bytes fit both the item and the record.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), &mut record as *mut Record as *mut u8, n)
    };
    Some(record)
}

#[cfg(test)]
mod tests {
    use lbf_common::SHORT_MEM_BYTES;

    use super::*;

    /// A record head of `kind` whose other bytes are `fill`.
    fn head(kind: RecordKind, fill: u8) -> Vec<u8> {
        let mut head = vec![fill; RECORD_HEAD_BYTES];
        head[..2].copy_from_slice(&(kind as u16).to_ne_bytes());
        head
    }

    #[test]
    fn items_cut_after_the_head_or_a_short_read_decode_with_zeros_past_their_end() {
        let mut item = head(RecordKind::CallExit, 0xff);
        item.extend([0xff; SHORT_MEM_BYTES]);
        item[4..6].copy_from_slice(&4u16.to_ne_bytes());
        let r = decode(&item).next().expect("a record");
        assert_eq!(r.kind, RecordKind::CallExit as u16);
        assert_eq!(r.mem_len, 4);
        assert_eq!(r.args, [u64::MAX; 8]);
        assert!(r.mem[..SHORT_MEM_BYTES].iter().all(|&b| b == 0xff));
        assert!(r.mem[SHORT_MEM_BYTES..].iter().all(|&b| b == 0));
        assert_eq!(decode(&item).count(), 1);
        assert_eq!(decode(&item[..RECORD_HEAD_BYTES]).count(), 1);
        assert_eq!(decode(&item[..RECORD_HEAD_BYTES - 1]).count(), 0);
    }

    /// A pair item yields its entry record (as a `CallEntry`, without memory) and then its exit
    /// record with the exit's memory; a record whose memory happens to be as long as a head is
    /// no pair.
    #[test]
    fn a_call_pair_item_decodes_as_its_entry_then_its_exit() {
        let mut item = head(RecordKind::CallPair, 1);
        item.extend(head(RecordKind::CallExit, 2));
        item.extend([3; SHORT_MEM_BYTES]);
        let records: Vec<Record> = decode(&item).collect();
        assert_eq!(records.len(), 2);
        let (entry, exit) = (&records[0], &records[1]);
        assert_eq!(entry.kind, RecordKind::CallEntry as u16);
        assert_eq!(entry.args, [0x0101_0101_0101_0101; 8]);
        assert!(entry.mem.iter().all(|&b| b == 0));
        assert_eq!(exit.kind, RecordKind::CallExit as u16);
        assert_eq!(exit.args, [0x0202_0202_0202_0202; 8]);
        assert!(exit.mem[..SHORT_MEM_BYTES].iter().all(|&b| b == 3));
        let mut single = head(RecordKind::CallEntry, 1);
        single.extend(head(RecordKind::CallPair, 2));
        assert_eq!(decode(&single).count(), 1);
    }
}
