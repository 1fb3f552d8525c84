//! Reading records out of the ring buffer. The kernel side never waits for this reader: when
//! the buffer is full it drops the record and counts it (see `Tracer::lost_counts`).

use std::{
    mem,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
    time::Duration,
};

use anyhow::{Context, Result};
use lbf_common::{
    PairHead, Record, RecordKind, ARG_WORDS, MEM_BYTES, MORE_MEM_AT, PAIR_HEAD_BYTES,
    RECORD_HEAD_BYTES,
};

use super::{
    ring::{Found, RecordRing},
    tracer::monotonic_ns,
};

/// Where the record stream goes: the capture layer implements this to turn records into
/// engine events and trace files; `JsonLinesSink` dumps them for debugging.
pub trait RecordSink {
    /// One record, in stamp order across the ring buffers (see [`RecordReader`]); per thread,
    /// the order the thread produced them.
    fn record(&mut self, record: &Record) -> Result<()>;
    /// The capture ended; `lost` says what the kernel side dropped. Called once.
    fn finish(&mut self, lost: &super::LostCounts) -> Result<()>;
    /// Called every time the capture loop wakes up (at least every few hundred milliseconds,
    /// records or not), for periodic work such as progress reports. The default does nothing.
    fn tick(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Drains the record ring buffers (one per CPU) into one stream.
///
/// A thread that moves between CPUs writes into several rings, and some records must reach the
/// sink after records of other threads written into other rings (a `Fork` before the child's
/// records; every member's `MPI_Comm_split` entry before any member's return). Every such
/// dependency is "Y was stamped after X was submitted": a record's stamp (a pair's exit stamp)
/// is taken by the program that writes it, after everything its thread wrote before, and after
/// anything another process had to write for the event to happen. So each drain takes the time
/// T first, reads every ring, and hands over in stamp order the records stamped before T: what
/// they depend on was submitted before T and so was read, unless its ring stopped at an item a
/// probe was still writing, in which case that drain hands over nothing. Records stamped from T
/// on wait for the next drain, in the ring, read in place.
pub struct RecordReader {
    rings: Vec<RecordRing>,
    /// An epoll instance watching the rings edge-triggered: it reports the kernel side's
    /// wake-ups, not the mere presence of unread records (which a plain `poll` would report
    /// at once, making the reader chase the traced program record by record).
    epoll: OwnedFd,
    /// Unread bytes in one ring from which the kernel side wakes the reader.
    wake_bytes: u64,
    decoder: Decoder,
    /// Per ring, the items the current drain found (kept to reuse their allocations).
    found: Vec<Vec<Found>>,
    /// The items to hand over: (stamp, ring, index in `found`), sorted.
    order: Vec<(u64, usize, usize)>,
}

/// What one [`RecordReader::drain`] read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Records handed to the sink.
    pub records: u64,
    /// Whether the reader is behind: it read at least as many bytes of one ring as make the
    /// kernel side wake it. The capture loop then drains again at once rather than wait.
    pub behind: bool,
    /// `Exit` records among them: a traced process ended, maybe the last one.
    pub exits: u64,
}

impl RecordReader {
    /// Wraps the ring buffers taken from the tracer, whose kernel side wakes the reader from
    /// `wake_bytes` unread bytes in one of them.
    pub(super) fn new(rings: Vec<RecordRing>, wake_bytes: u64) -> Result<Self> {
        // SAFETY: a plain system call; the descriptor is owned from here on.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(std::io::Error::last_os_error()).context("creating an epoll instance");
        }
        // SAFETY: a new descriptor nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        for (i, ring) in rings.iter().enumerate() {
            let mut event = libc::epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLET) as u32,
                u64: i as u64,
            };
            let ring_fd = ring.as_fd().as_raw_fd();
            // SAFETY: both descriptors are open; `event` outlives the call.
            let rc = unsafe {
                libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, ring_fd, &mut event)
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error())
                    .context("watching the record ring buffers with epoll");
            }
        }
        let n = rings.len();
        Ok(Self {
            rings,
            epoll,
            wake_bytes,
            decoder: Decoder::default(),
            found: vec![Vec::new(); n],
            order: Vec::new(),
        })
    }

    /// Waits until the kernel side wakes the reader (a ring buffer has filled to an eighth
    /// since the last drain, see `lbf-ebpf`'s `record::commit`) or `timeout` passes. Records
    /// may be waiting either way: drain after it.
    pub fn wait(&self, timeout: Duration) -> Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: room for `events.len()` events.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                ms,
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(anyhow::Error::new(err).context("waiting for the record ring buffers"));
            }
        }
        Ok(())
    }

    /// Hands the records now in the buffers to `sink`, in order, but for those stamped since
    /// the drain began (see [`RecordReader`]).
    pub fn drain(&mut self, sink: &mut dyn RecordSink) -> Result<Drained> {
        self.read(sink, false)
    }

    /// Hands every record now in the buffers to `sink`, in stamp order: the last drain, when
    /// nothing more is coming that the records could depend on (the traced processes have
    /// ended, or the capture is stopping).
    pub fn drain_all(&mut self, sink: &mut dyn RecordSink) -> Result<Drained> {
        self.read(sink, true)
    }

    /// [`RecordReader::drain`], or with `all` [`RecordReader::drain_all`].
    fn read(&mut self, sink: &mut dyn RecordSink, all: bool) -> Result<Drained> {
        let now = monotonic_ns();
        let Self {
            rings,
            decoder,
            found,
            order,
            wake_bytes,
            ..
        } = self;
        let mut blocked = false;
        for (ring, found) in rings.iter().zip(found.iter_mut()) {
            found.clear();
            blocked |= ring.scan(found, stamp);
        }
        let limit = match (all, blocked) {
            (true, _) => None,
            (false, true) => Some(0),
            (false, false) => Some(now),
        };
        plan(found, limit, order);
        let (mut records, mut exits) = (0, 0);
        let mut outcome = Ok(());
        'items: for &(_, r, i) in order.iter() {
            let item = &mut found[r][i];
            item.handed = true;
            for record in decoder.decode(rings[r].bytes(item)) {
                if let Err(e) = sink.record(record) {
                    outcome = Err(e);
                    break 'items;
                }
                records += 1;
                exits += u64::from(record.kind == RecordKind::Exit as u16);
            }
        }
        let mut behind = false;
        for (ring, found) in rings.iter_mut().zip(found.iter()) {
            behind |= ring.consume(found) >= *wake_bytes;
        }
        outcome.map(|()| Drained {
            records,
            behind,
            exits,
        })
    }
}

/// Fills `order` with what a drain hands over, in order: `(stamp, ring, index)` of every item
/// of `found` (per ring) not skipped and, with a `limit`, stamped before it. Ties go by ring,
/// then ring order.
fn plan(found: &[Vec<Found>], limit: Option<u64>, order: &mut Vec<(u64, usize, usize)>) {
    order.clear();
    for (r, found) in found.iter().enumerate() {
        for (i, item) in found.iter().enumerate() {
            if !item.skip && limit.is_none_or(|limit| item.stamp < limit) {
                order.push((item.stamp, r, i));
            }
        }
    }
    // Each ring's items come mostly in stamp order already: the stable sort finds those runs
    // and merges them.
    order.sort();
}

/// The stamp a drain orders an item by: the exit's of a [`RecordKind::CallPair`] item, else
/// its record's `ts_ns` (0 for an item too short to have one).
fn stamp(item: &[u8]) -> u64 {
    let at = if item.get(..2) == Some(&(RecordKind::CallPair as u16).to_ne_bytes()[..]) {
        mem::offset_of!(PairHead, exit_ts_ns)
    } else {
        mem::offset_of!(Record, ts_ns)
    };
    item.get(at..at + 8)
        .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
}

/// Decodes ring buffer items into two records it keeps, so that an item's records are written
/// in place once, rather than built and moved: the reader's per-record cost is mostly copies.
struct Decoder {
    records: Box<[Record; 2]>,
    /// Per record, how many of its leading bytes the last item may have left non-zero.
    dirty: [usize; 2],
}

/// Where `Record::mem` starts.
const MEM_OFFSET: usize = mem::offset_of!(Record, mem);

/// Where `Record::mem_len` is.
const MEM_LEN_OFFSET: usize = mem::offset_of!(Record, mem_len);

impl Default for Decoder {
    fn default() -> Self {
        Self {
            // SAFETY: Record is plain old data, for which all zeros is a valid value.
            records: Box::new(unsafe { mem::zeroed() }),
            dirty: [0; 2],
        }
    }
}

impl Decoder {
    /// The records in the bytes of a ring buffer item, in order: its one record, or the entry
    /// and the exit record of a [`RecordKind::CallPair`] item ([`PairHead`]). A record may end
    /// anywhere after its head (see [`Record`]): the bytes past its end, and past its
    /// `mem_len` (the item's padding), read as 0. None for an
    /// item shorter than a head (never written by lbf-ebpf).
    fn decode(&mut self, bytes: &[u8]) -> &[Record] {
        if bytes.len() >= PAIR_HEAD_BYTES
            && bytes[..2] == (RecordKind::CallPair as u16).to_ne_bytes()
        {
            self.pair(bytes);
            &self.records[..]
        } else if bytes.len() >= RECORD_HEAD_BYTES {
            // The item may go on past the record's end (lbf-ebpf reserves whole cache lines):
            // only `mem_len` bytes of `mem` were written.
            let mem_len = u16::from_ne_bytes([bytes[MEM_LEN_OFFSET], bytes[MEM_LEN_OFFSET + 1]]);
            let n = bytes
                .len()
                .min(MEM_OFFSET + (mem_len as usize).min(MEM_BYTES));
            self.write(0, 0, &bytes[..n]);
            // An entry with all of `mem` may carry a second read past `MORE_MEM_AT`
            // (`lbf_common::FnReads::entry_more`), which `mem_len` does not count.
            let full = MEM_OFFSET + MEM_BYTES;
            let more = MEM_OFFSET + MORE_MEM_AT;
            if bytes.len() >= full
                && n <= more
                && bytes[..2] == (RecordKind::CallEntry as u16).to_ne_bytes()
            {
                self.records[0].mem[MORE_MEM_AT..].copy_from_slice(&bytes[more..full]);
                self.dirty[0] = full;
            }
            &self.records[..1]
        } else {
            &[]
        }
    }

    /// Writes a [`RecordKind::CallPair`] item's entry and exit record.
    fn pair(&mut self, bytes: &[u8]) {
        // SAFETY: PairHead is plain old data and `bytes` holds one; it may be unaligned.
        let head: PairHead = unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const PairHead) };
        let rest = &bytes[PAIR_HEAD_BYTES..];
        let (words, mem) = rest.split_at(rest.len().min(head.arg_words as usize * 8));
        let mut args = [0u64; ARG_WORDS];
        for (arg, word) in args.iter_mut().zip(words.chunks_exact(8)) {
            *arg = u64::from_ne_bytes(word.try_into().expect("8 bytes"));
        }
        let [entry, exit] = &mut *self.records;
        *entry = Record {
            kind: RecordKind::CallEntry as u16,
            fn_id: head.fn_id,
            mem_len: 0,
            part: 0,
            tgid: head.tgid,
            tid: head.tid,
            ts_ns: head.entry_ts_ns,
            cpu_ns: head.entry_cpu_ns,
            args,
            mem: entry.mem,
        };
        *exit = Record {
            kind: RecordKind::CallExit as u16,
            mem_len: head.mem_len,
            ts_ns: head.exit_ts_ns,
            cpu_ns: head.exit_cpu_ns,
            args: std::array::from_fn(|i| if i == 0 { head.ret } else { args[i - 1] }),
            mem: exit.mem,
            ..*entry
        };
        self.write(0, MEM_OFFSET, &[]);
        let mem_len = mem.len().min(head.mem_len as usize).min(MEM_BYTES);
        self.write(1, MEM_OFFSET, &mem[..mem_len]);
    }

    /// Copies `bytes` into record `i` from byte `at` on, and zeroes what the last item wrote
    /// past their end.
    fn write(&mut self, i: usize, at: usize, bytes: &[u8]) {
        // SAFETY: Record is plain old data: any bytes are a valid value, and it has no padding.
        let record = unsafe {
            std::slice::from_raw_parts_mut(
                &mut self.records[i] as *mut Record as *mut u8,
                mem::size_of::<Record>(),
            )
        };
        let end = at + bytes.len();
        record[at..end].copy_from_slice(bytes);
        if self.dirty[i] > end {
            record[end..self.dirty[i]].fill(0);
        }
        self.dirty[i] = end;
    }
}

#[cfg(test)]
mod tests {
    use lbf_common::SHORT_MEM_BYTES;

    use super::*;

    /// A drain hands over the items stamped before its start, across rings in stamp order,
    /// leaving out skipped ones; without a limit (the last drain), all of them.
    #[test]
    fn a_drain_hands_over_what_was_stamped_before_it_in_stamp_order() {
        let found = |items: &[(bool, u64)]| -> Vec<Found> {
            items
                .iter()
                .enumerate()
                .map(|(i, &(skip, stamp))| Found {
                    pos: i * 24,
                    len: 16,
                    skip,
                    handed: false,
                    stamp,
                })
                .collect()
        };
        // Ring 0: stamps 5, 30, 10 (a probe preempted between reservation and stamp); ring 1:
        // 7, (skipped), 20.
        let rings = [
            found(&[(false, 5), (false, 30), (false, 10)]),
            found(&[(false, 7), (true, 99), (false, 20)]),
        ];
        let mut order = Vec::new();
        plan(&rings, Some(25), &mut order);
        assert_eq!(order, [(5, 0, 0), (7, 1, 0), (10, 0, 2), (20, 1, 2)]);
        plan(&rings, Some(0), &mut order);
        assert!(order.is_empty(), "a blocked drain hands over nothing");
        plan(&rings, None, &mut order);
        assert_eq!(order.len(), 5);
        assert_eq!(order[4], (30, 0, 1));
    }

    /// A record head of `kind` whose other bytes are `fill`.
    fn head(kind: RecordKind, fill: u8) -> Vec<u8> {
        let mut head = vec![fill; RECORD_HEAD_BYTES];
        head[..2].copy_from_slice(&(kind as u16).to_ne_bytes());
        head
    }

    /// A decoder whose records the items before were written all over (0xee): what it decodes
    /// next must not show any of it.
    fn dirtied() -> Decoder {
        let mut decoder = Decoder::default();
        let mut item = head(RecordKind::CallExit, 0xee);
        item.resize(mem::size_of::<Record>(), 0xee);
        assert_eq!(decoder.decode(&item).len(), 1);
        let mut pair = pair_head(ARG_WORDS as u16);
        pair.resize(PAIR_HEAD_BYTES + 8 * ARG_WORDS + MEM_BYTES, 0xee);
        assert_eq!(decoder.decode(&pair).len(), 2);
        decoder
    }

    /// The records of `item`, decoded after [`dirtied`] items.
    fn decode(item: &[u8]) -> Vec<Record> {
        dirtied().decode(item).to_vec()
    }

    /// Past `mem_len` an item holds whatever the ring buffer held there (lbf-ebpf reserves
    /// whole cache lines and writes only the record): it decodes as zeros.
    #[test]
    fn items_cut_after_the_head_or_a_short_read_decode_with_zeros_past_their_end() {
        let mut item = head(RecordKind::CallExit, 0xff);
        item.extend([0xff; SHORT_MEM_BYTES]);
        item[4..6].copy_from_slice(&4u16.to_ne_bytes());
        let r = decode(&item)[0];
        assert_eq!(r.kind, RecordKind::CallExit as u16);
        assert_eq!(r.mem_len, 4);
        assert_eq!(r.args, [u64::MAX; 8]);
        assert!(r.mem[..4].iter().all(|&b| b == 0xff));
        assert!(r.mem[4..].iter().all(|&b| b == 0));
        assert_eq!(decode(&item).len(), 1);
        let cut = decode(&item[..RECORD_HEAD_BYTES]);
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].args, [u64::MAX; ARG_WORDS]);
        assert!(cut[0].mem.iter().all(|&b| b == 0));
        assert!(decode(&item[..RECORD_HEAD_BYTES - 1]).is_empty());
    }

    /// The bytes of a pair item's head: `fn_id` 9, `mem_len` 4, `arg_words` `words`, tgid 1,
    /// tid 2, stamps 10, 11 (entry) and 12, 13 (exit), return value 14.
    fn pair_head(words: u16) -> Vec<u8> {
        let head = PairHead {
            kind: RecordKind::CallPair as u16,
            fn_id: 9,
            mem_len: 4,
            arg_words: words,
            tgid: 1,
            tid: 2,
            entry_ts_ns: 10,
            entry_cpu_ns: 11,
            exit_ts_ns: 12,
            exit_cpu_ns: 13,
            ret: 14,
        };
        // SAFETY: PairHead is plain old data without padding.
        let bytes = unsafe {
            std::slice::from_raw_parts(&head as *const PairHead as *const u8, PAIR_HEAD_BYTES)
        };
        bytes.to_vec()
    }

    /// A pair item yields its entry record (as a `CallEntry`, without memory) and then its exit
    /// record with the return value, the entry's arguments after it, and the exit's memory.
    #[test]
    fn a_call_pair_item_decodes_as_its_entry_then_its_exit() {
        for words in [lbf_common::SHORT_ARG_WORDS, ARG_WORDS] {
            let mut item = pair_head(words as u16);
            for w in 0..words as u64 {
                item.extend((100 + w).to_ne_bytes());
            }
            item.extend([3; SHORT_MEM_BYTES]);
            let records = decode(&item);
            assert_eq!(records.len(), 2);
            let (entry, exit) = (&records[0], &records[1]);
            assert_eq!(entry.kind, RecordKind::CallEntry as u16);
            assert_eq!((entry.fn_id, entry.tgid, entry.tid), (9, 1, 2));
            assert_eq!((entry.ts_ns, entry.cpu_ns, entry.mem_len), (10, 11, 0));
            let args: [u64; ARG_WORDS] =
                std::array::from_fn(|i| if i < words { 100 + i as u64 } else { 0 });
            assert_eq!(entry.args, args);
            assert!(entry.mem.iter().all(|&b| b == 0));
            assert_eq!(exit.kind, RecordKind::CallExit as u16);
            assert_eq!((exit.fn_id, exit.tgid, exit.tid), (9, 1, 2));
            assert_eq!((exit.ts_ns, exit.cpu_ns, exit.mem_len), (12, 13, 4));
            assert_eq!(exit.args[0], 14);
            assert_eq!(exit.args[1..], args[..ARG_WORDS - 1]);
            // `mem_len` 4 of the item's SHORT_MEM_BYTES: the rest is padding.
            assert!(exit.mem[..4].iter().all(|&b| b == 3));
            assert!(exit.mem[4..].iter().all(|&b| b == 0));
        }
    }

    /// A pair item cut inside its arguments decodes with zeros past its end; one cut inside
    /// its head is no pair, and a record whose `kind` is another's is no pair either.
    #[test]
    fn cut_pair_items_decode_with_zeros_and_other_kinds_are_no_pairs() {
        let mut item = pair_head(ARG_WORDS as u16);
        item.extend(7u64.to_ne_bytes());
        let records = decode(&item);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].args, [7, 0, 0, 0, 0, 0, 0, 0]);
        assert!(decode(&item[..PAIR_HEAD_BYTES - 1]).is_empty());
        let mut single = head(RecordKind::CallEntry, 1);
        single.extend(pair_head(4));
        assert_eq!(decode(&single).len(), 1);
    }
}
