//! lbf's own reader of the record ring buffer (`BPF_MAP_TYPE_RINGBUF`), used instead of aya's
//! `RingBuf` because of when it tells the kernel how far it has read.
//!
//! The kernel side reads the consumer position at every record it reserves (and at every
//! submit, for the reader's wake-up). aya's reader stores that position after every item, so
//! while it drains, the cache line holding it moves to the reader's core and back to the
//! traced thread's at almost every traced call. This reader stores it once per drain (session
//! 6 stored it every 64 KiB read and at the end of each drain: on bench-probe's call loop lbf's
//! exit program then ran 25 to 30 ns less per call than with aya's reader, by the kernel's eBPF
//! statistics). The space it frees reaches the kernel side that much later, which a ring of
//! megabytes does not notice.
//!
//! The layout is the kernel's (`kernel/bpf/ringbuf.c`): a page holding the consumer position
//! (mapped read-write), a page holding the producer position, then the data pages, which the
//! kernel maps twice in a row so that an item that wraps around the end reads as one slice.
//! Each item starts with an 8-byte header: its length, with a busy bit (reserved, not yet
//! submitted) and a discard bit, then the page offset; items are 8-byte aligned.

use std::{
    os::fd::{AsFd, BorrowedFd},
    ptr::NonNull,
    sync::atomic::{AtomicU32, AtomicUsize, Ordering},
};

use anyhow::{ensure, Context, Result};
use aya::maps::MapData;
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};

/// The item header's "reserved, not yet submitted" bit (`BPF_RINGBUF_BUSY_BIT`).
const BUSY_BIT: u32 = 1 << 31;
/// The item header's "discarded" bit (`BPF_RINGBUF_DISCARD_BIT`).
const DISCARD_BIT: u32 = 1 << 30;
/// Bytes of an item header (`BPF_RINGBUF_HDR_SZ`).
const HEADER_BYTES: usize = 8;

/// One memory mapping of the ring buffer map, unmapped on drop.
struct Mapping {
    at: NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes of the map `fd` from byte `offset`, writable if `write`.
    fn new(fd: BorrowedFd<'_>, len: usize, offset: usize, write: bool) -> Result<Self> {
        let prot = if write {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a new shared mapping of the map's file descriptor, at no fixed address.
        let at = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED,
                fd,
                offset as u64,
            )
        }
        .with_context(|| format!("mapping {len} bytes of the record ring buffer"))?;
        let at = NonNull::new(at as *mut u8).context("mmap returned a null mapping")?;
        Ok(Self { at, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; nothing borrowed from it outlives
        // the reader that owns it.
        let _ = unsafe { munmap(self.at.as_ptr() as *mut _, self.len) };
    }
}

/// The reader of one ring buffer map. Not `Sync`: one thread reads.
pub(crate) struct RecordRing {
    /// The map (its file descriptor, polled for records).
    map: MapData,
    /// The consumer position's page (read-write).
    consumer: Mapping,
    /// The producer position's page, then the data pages twice (read-only).
    producer: Mapping,
    /// Data bytes less one (the size is a power of two).
    mask: usize,
    /// The page size: where the data pages start in `producer`.
    page: usize,
    /// How far this reader has read.
    pos: usize,
    /// How far the kernel side has been told it has read.
    published: usize,
    /// Items handed over ahead of `pos` (see [`RecordRing::consume`]), by position.
    ahead: Vec<usize>,
}

/// An item [`RecordRing::scan`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    /// The position of its header.
    pub pos: usize,
    /// Its bytes, after the header.
    pub len: usize,
    /// Discarded, or handed over already: not to be read.
    pub skip: bool,
    /// Handed over by the drain that found it (the reader sets it).
    pub handed: bool,
    /// What the reader orders it by (see [`RecordRing::scan`]); 0 if skipped.
    pub stamp: u64,
}

// SAFETY: the mappings are owned by the reader and only touched through `&mut self` (and the
// kernel); moving the reader to another thread moves them with it.
unsafe impl Send for RecordRing {}

impl RecordRing {
    /// Maps the ring buffer `map`, of `bytes` data bytes (a power of two, a multiple of the
    /// page size, as the kernel requires of a ring buffer's size).
    pub(crate) fn new(map: MapData, bytes: u32) -> Result<Self> {
        let bytes = bytes as usize;
        let page = rustix::param::page_size();
        ensure!(
            bytes.is_power_of_two() && bytes.is_multiple_of(page),
            "ring buffer size {bytes} is not a power-of-two multiple of the page size"
        );
        let fd = map.fd().as_fd();
        let consumer = Mapping::new(fd, page, 0, true)?;
        let producer = Mapping::new(fd, page + 2 * bytes, page, false)?;
        let pos = consumer_pos(&consumer).load(Ordering::Acquire);
        Ok(Self {
            map,
            consumer,
            producer,
            mask: bytes - 1,
            page,
            pos,
            published: pos,
            ahead: Vec::new(),
        })
    }

    /// Calls `item` with the bytes of every item submitted and not yet read, in order, up to
    /// the first one still being written, and tells the kernel side it has read them.
    pub(crate) fn drain(&mut self, mut item: impl FnMut(&[u8])) {
        let mut found = Vec::new();
        self.scan(&mut found, |_| 0);
        for f in found.iter_mut().filter(|f| !f.skip) {
            item(self.bytes(f));
            f.handed = true;
        }
        self.consume(&found);
    }

    /// Lists into `found` the items submitted after the read position, in ring order, up to
    /// the first one still being written, each with the `stamp` of its bytes (read while its
    /// header is at hand: a second pass over a drain's items would miss the cache again);
    /// true if it stopped at such an item (a probe is writing it). Items discarded, or handed
    /// over ahead of the read position by an earlier [`RecordRing::consume`], are listed with
    /// `skip` set.
    pub(crate) fn scan(&self, found: &mut Vec<Found>, stamp: impl Fn(&[u8]) -> u64) -> bool {
        let end = self.producer_pos();
        let mut pos = self.pos;
        while pos != end {
            // SAFETY: the header is within the data pages (8-byte aligned, below the size).
            let header = unsafe { &*(self.data().add(pos & self.mask) as *const AtomicU32) };
            // Acquire: pairs with the kernel's submit, so the item's bytes are visible.
            let len = header.load(Ordering::Acquire);
            if len & BUSY_BIT != 0 {
                return true;
            }
            let skip = len & DISCARD_BIT != 0 || self.ahead.contains(&pos);
            let len = (len & !(BUSY_BIT | DISCARD_BIT)) as usize;
            let mut item = Found {
                pos,
                len,
                skip,
                handed: false,
                stamp: 0,
            };
            if !skip {
                item.stamp = stamp(self.bytes(&item));
            }
            found.push(item);
            pos = item.end();
        }
        false
    }

    /// The bytes of an item [`RecordRing::scan`] found (and [`RecordRing::consume`] has not
    /// passed).
    pub(crate) fn bytes(&self, item: &Found) -> &[u8] {
        // SAFETY: a submitted item of `len` bytes after its header; the data pages are mapped
        // twice in a row, so it is contiguous even where it wraps. The kernel does not reuse it
        // before the consumer position passes it.
        unsafe {
            std::slice::from_raw_parts(
                self.data().add((item.pos & self.mask) + HEADER_BYTES),
                item.len,
            )
        }
    }

    /// Moves the read position past the items of `found` (a [`RecordRing::scan`]'s) that are
    /// done with, skipped or handed over, up to the first one neither; remembers the ones
    /// handed over beyond it, and tells the kernel side how far it has read. Returns the bytes
    /// passed.
    pub(crate) fn consume(&mut self, found: &[Found]) -> u64 {
        let start = self.pos;
        self.pos = pass(found, self.pos, &mut self.ahead);
        self.publish();
        (self.pos - start) as u64
    }

    /// Tells the kernel side how far this reader has read.
    fn publish(&mut self) {
        if self.published != self.pos {
            // Release: the items read are done with before the kernel may reuse them.
            consumer_pos(&self.consumer).store(self.pos, Ordering::Release);
            self.published = self.pos;
        }
    }

    /// The kernel side's producer position: how far items are reserved.
    fn producer_pos(&self) -> usize {
        // SAFETY: the producer page starts with the position, an aligned `unsigned long`.
        unsafe { &*(self.producer.at.as_ptr() as *const AtomicUsize) }.load(Ordering::Acquire)
    }

    /// The start of the data pages.
    fn data(&self) -> *const u8 {
        // SAFETY: the data pages follow the producer page within the mapping.
        unsafe { self.producer.at.as_ptr().add(self.page) }
    }
}

impl AsFd for RecordRing {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.map.fd().as_fd()
    }
}

impl Found {
    /// The position just past it: its header and bytes, 8-byte aligned.
    fn end(&self) -> usize {
        self.pos + (HEADER_BYTES + self.len).next_multiple_of(8)
    }
}

/// The read position after [`RecordRing::consume`] of `found` from `pos`: past the items done
/// with (skipped or handed over) up to the first one not; the handed ones beyond it are added
/// to `ahead`, which keeps only positions from the new one on.
fn pass(found: &[Found], mut pos: usize, ahead: &mut Vec<usize>) -> usize {
    let mut passing = true;
    for item in found {
        let done = item.skip || item.handed;
        if passing && done {
            pos = item.end();
        } else if done {
            if !item.skip {
                ahead.push(item.pos);
            }
        } else {
            passing = false;
        }
    }
    ahead.retain(|&p| p >= pos);
    pos
}

/// The consumer position at the start of `page`.
fn consumer_pos(page: &Mapping) -> &AtomicUsize {
    // SAFETY: the consumer page starts with the position, an aligned `unsigned long`.
    unsafe { &*(page.at.as_ptr() as *const AtomicUsize) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An item of 16 bytes (24 with the header) at `pos`.
    fn item(pos: usize, skip: bool, handed: bool) -> Found {
        Found {
            pos,
            len: 16,
            skip,
            handed,
            stamp: 0,
        }
    }

    /// The read position passes what was handed over or skipped up to the first item kept
    /// back; items handed over beyond it are remembered until the position passes them.
    #[test]
    fn the_read_position_stops_at_the_first_item_kept_back() {
        // Item 1 is skipped, item 2 kept back, the others handed over.
        let found = [
            item(0, false, true),
            item(24, true, false),
            item(48, false, false),
            item(72, false, true),
            item(96, false, true),
        ];
        let mut ahead = Vec::new();
        let pos = pass(&found, 0, &mut ahead);
        assert_eq!(pos, 48, "past items 0 and 1 (skipped), stopping at item 2");
        assert_eq!(ahead, [72, 96]);
        // The next drain finds items 2 to 4 again, 3 and 4 marked to skip, and hands over 2.
        let found = [
            item(48, false, true),
            item(72, true, false),
            item(96, true, false),
        ];
        let pos = pass(&found, pos, &mut ahead);
        assert_eq!(pos, 120);
        assert!(ahead.is_empty());
        // Nothing handed over: the position stays.
        assert_eq!(pass(&[item(0, false, false)], 0, &mut ahead), 0);
    }
}
