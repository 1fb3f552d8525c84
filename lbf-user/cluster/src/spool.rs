//! The node's spool: a bounded on-disk queue of the frames the builder has not acknowledged.
//!
//! Frames are appended to segment files in a private directory and read back for sending and
//! for resending after a reconnection; an acknowledgement frees every frame up to it, and a
//! segment is deleted once all its frames are free. Memory holds only the index (a few words
//! per batch), so a long builder outage costs disk, within [`Spool::new`]'s limit, not memory.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// One segment file.
struct Segment {
    id: u64,
    file: File,
    len: u64,
    /// The highest sequence number stored in it.
    last_seq: u64,
}

/// Where one stored frame is.
struct Entry {
    seq: u64,
    segment: u64,
    offset: u64,
    len: u32,
}

/// The queue of unacknowledged frames; see the module documentation.
pub struct Spool {
    dir: PathBuf,
    limit: u64,
    segment_limit: u64,
    segments: VecDeque<Segment>,
    entries: VecDeque<Entry>,
    next_segment: u64,
}

impl Spool {
    /// A spool in `dir` (created; leftovers of an earlier run are removed, since their
    /// session cannot be continued) holding at most `limit` bytes.
    pub fn new(dir: &Path, limit: u64) -> io::Result<Self> {
        let context = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir).map_err(context)?;
        for entry in std::fs::read_dir(dir).map_err(context)? {
            let path = entry.map_err(context)?.path();
            if path.extension().is_some_and(|x| x == "spool") {
                std::fs::remove_file(&path).map_err(context)?;
            }
        }
        Ok(Spool {
            dir: dir.to_path_buf(),
            limit,
            segment_limit: (limit / 8).clamp(1 << 16, 64 << 20),
            segments: VecDeque::new(),
            entries: VecDeque::new(),
            next_segment: 0,
        })
    }

    /// Bytes on disk now.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }

    /// Whether `len` more bytes would exceed the limit.
    pub fn would_overflow(&self, len: usize) -> bool {
        self.bytes() + len as u64 > self.limit
    }

    /// Stores `frame`, sequence number `seq` (one above the last stored), even beyond the
    /// limit: callers check [`Spool::would_overflow`] first, and overrule it only for the
    /// small final batch that reports the loss.
    pub fn push(&mut self, seq: u64, frame: &[u8]) -> io::Result<()> {
        if self
            .segments
            .back()
            .is_none_or(|s| s.len + frame.len() as u64 > self.segment_limit)
        {
            let id = self.next_segment;
            self.next_segment += 1;
            let path = self.segment_path(id);
            let file = OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            self.segments.push_back(Segment {
                id,
                file,
                len: 0,
                last_seq: 0,
            });
        }
        let segment = self.segments.back_mut().expect("ensured above");
        segment.file.write_all(frame)?;
        self.entries.push_back(Entry {
            seq,
            segment: segment.id,
            offset: segment.len,
            len: frame.len() as u32,
        });
        segment.len += frame.len() as u64;
        segment.last_seq = seq;
        Ok(())
    }

    /// The stored frame with sequence number `seq`, if it is still held.
    pub fn get(&self, seq: u64) -> io::Result<Option<Vec<u8>>> {
        let Some(first) = self.entries.front() else {
            return Ok(None);
        };
        let Some(entry) = seq
            .checked_sub(first.seq)
            .and_then(|i| self.entries.get(i as usize))
        else {
            return Ok(None);
        };
        let segment = self
            .segments
            .iter()
            .find(|s| s.id == entry.segment)
            .expect("an entry's segment is kept");
        let mut frame = vec![0u8; entry.len as usize];
        segment.file.read_exact_at(&mut frame, entry.offset)?;
        Ok(Some(frame))
    }

    /// The highest sequence number stored, if any frame is held.
    pub fn last_seq(&self) -> Option<u64> {
        self.entries.back().map(|e| e.seq)
    }

    /// Frees every frame up to and including `seq` (acknowledged by the builder).
    pub fn release_through(&mut self, seq: u64) -> io::Result<()> {
        while self.entries.front().is_some_and(|e| e.seq <= seq) {
            self.entries.pop_front();
        }
        while self.segments.front().is_some_and(|s| s.last_seq <= seq) {
            let s = self.segments.pop_front().expect("checked");
            std::fs::remove_file(self.segment_path(s.id))?;
        }
        Ok(())
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no frame is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn segment_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:08}.spool"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framefile::tests::tempdir;

    #[test]
    fn frames_come_back_until_acknowledged_and_space_is_freed() {
        let dir = tempdir("spool");
        let mut spool = Spool::new(&dir, 1 << 20).unwrap();
        let frame = |i: u64| vec![i as u8; 40_000];
        for seq in 1..=10 {
            assert!(!spool.would_overflow(40_000));
            spool.push(seq, &frame(seq)).unwrap();
        }
        assert_eq!(spool.get(7).unwrap(), Some(frame(7)));
        assert_eq!(spool.get(11).unwrap(), None);
        let before = spool.bytes();
        spool.release_through(6).unwrap();
        assert!(spool.bytes() < before);
        assert_eq!(spool.get(6).unwrap(), None);
        assert_eq!(spool.get(10).unwrap(), Some(frame(10)));
        spool.release_through(10).unwrap();
        assert!(spool.is_empty());
        assert_eq!(spool.bytes(), 0);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_limit_is_reported_before_it_is_crossed() {
        let dir = tempdir("spool-limit");
        let mut spool = Spool::new(&dir, 100_000).unwrap();
        spool.push(1, &[0; 60_000]).unwrap();
        assert!(spool.would_overflow(60_000));
        spool.release_through(1).unwrap();
        assert!(!spool.would_overflow(60_000));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
