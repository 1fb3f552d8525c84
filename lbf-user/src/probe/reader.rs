//! Reading records out of the ring buffer. The kernel side never waits for this reader: when
//! the buffer is full it drops the record and counts it (see `Tracer::lost_counts`).

use std::{mem, os::fd::AsRawFd, time::Duration};

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use lbf_common::Record;

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
            if let Some(record) = decode(&item) {
                sink.record(&record)?;
                n += 1;
            }
        }
        Ok(n)
    }
}

/// A record from ring buffer bytes; `None` for a short item (never written by lbf-ebpf).
pub fn decode(bytes: &[u8]) -> Option<Record> {
    if bytes.len() < mem::size_of::<Record>() {
        return None;
    }
    // SAFETY: Record is plain old data and `bytes` holds at least one.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const Record) })
}
