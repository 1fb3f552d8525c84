//! The builder's journal: every node's frames on disk, written before they are acknowledged,
//! so a restarted builder rebuilds exactly the state it acknowledged.
//!
//! One file per node, `<node>.journal`: the node's `Hello` (token removed) as the first
//! frame, then its `Batch` frames in sequence order, byte for byte as received. On start the
//! builder replays every file into a fresh engine ([`recover`]), cutting off a frame the
//! previous builder was killed in the middle of writing (never acknowledged), and answers each
//! node's next hello with the last sequence number it holds.

use super::framefile::FrameFile;
use super::wire::frame;
use lbf_proto::prost::Message;
use lbf_proto::{node_frame, Batch, Hello, NodeFrame};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Appends one node's frames.
pub struct NodeJournal {
    file: File,
    path: PathBuf,
    fsync: bool,
}

impl NodeJournal {
    /// Starts the journal of a node new to this job, with its hello. With `fsync`, every
    /// append reaches the disk before it returns (survives power loss, not only a crash).
    pub fn create(dir: &Path, hello: &Hello, fsync: bool) -> io::Result<Self> {
        let path = dir.join(format!("{}.journal", hello.node));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(|e| with_path(e, &path))?;
        let mut journal = NodeJournal { file, path, fsync };
        let mut stored = hello.clone();
        stored.token.clear();
        journal.append(&frame(&NodeFrame {
            body: Some(node_frame::Body::Hello(stored)),
        }))?;
        Ok(journal)
    }

    /// Appends one frame (length prefix included) durably.
    pub fn append(&mut self, frame: &[u8]) -> io::Result<()> {
        self.file
            .write_all(frame)
            .and_then(|()| {
                if self.fsync {
                    self.file.sync_data()
                } else {
                    Ok(())
                }
            })
            .map_err(|e| with_path(e, &self.path))
    }

    /// Appends one frame given by its body (as read off the wire), prefixing its length.
    pub fn append_body(&mut self, body: &[u8]) -> io::Result<()> {
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(body);
        self.append(&frame)
    }
}

/// A node found in the journal directory.
pub struct Recovered {
    /// Its hello, token removed.
    pub hello: Hello,
    /// The last batch sequence number held.
    pub last_seq: u64,
    /// Whether its final batch (the one with `end`) is held.
    pub ended: bool,
    /// Where its next frames go.
    pub journal: NodeJournal,
}

/// Replays every node journal in `dir` (created if missing): `apply(node, batch)` for every
/// batch, interleaving the nodes one batch at a time so that the engine's queues stay as
/// short as during the live run. Returns the nodes, in `apply`'s numbering.
pub fn recover(
    dir: &Path,
    fsync: bool,
    mut apply: impl FnMut(usize, &Hello, Batch) -> io::Result<()>,
) -> io::Result<Vec<Recovered>> {
    std::fs::create_dir_all(dir).map_err(|e| with_path(e, dir))?;
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| with_path(e, dir))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "journal"))
        .collect();
    paths.sort();
    let mut open = Vec::new();
    for path in paths {
        let mut frames = FrameFile::open(&path).map_err(|e| with_path(e, &path))?;
        let hello = match frames.next_frame()?.map(|f| decode(&f, &path)) {
            Some(Ok(Some(node_frame::Body::Hello(h)))) => h,
            _ => return Err(corrupt(&path, "it does not start with a node's hello")),
        };
        open.push((path, frames, hello, 0u64, false, true));
    }
    let mut live = open.len();
    while live > 0 {
        for (index, (path, frames, hello, last_seq, ended, more)) in open.iter_mut().enumerate() {
            if !*more {
                continue;
            }
            let Some(f) = frames.next_frame()? else {
                *more = false;
                live -= 1;
                continue;
            };
            let Ok(Some(node_frame::Body::Batch(batch))) = decode(&f, path) else {
                return Err(corrupt(path, "a frame after the hello is not a batch"));
            };
            if batch.seq != *last_seq + 1 {
                return Err(corrupt(path, "batch sequence numbers are not consecutive"));
            }
            *last_seq = batch.seq;
            *ended |= batch.end.is_some();
            apply(index, hello, batch)?;
        }
    }
    open.into_iter()
        .map(|(path, frames, hello, last_seq, ended, _)| {
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| with_path(e, &path))?;
            file.set_len(frames.valid_len())
                .map_err(|e| with_path(e, &path))?;
            drop(file);
            let file = OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(|e| with_path(e, &path))?;
            Ok(Recovered {
                hello,
                last_seq,
                ended,
                journal: NodeJournal { file, path, fsync },
            })
        })
        .collect()
}

fn decode(frame: &[u8], path: &Path) -> io::Result<Option<node_frame::Body>> {
    NodeFrame::decode(&frame[4..])
        .map(|f| f.body)
        .map_err(|e| corrupt(path, &e.to_string()))
}

fn corrupt(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "journal {} is corrupt: {what}; move it away to start the job afresh",
            path.display()
        ),
    )
}

/// `e` with the file it happened to.
fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framefile::tests::tempdir;

    fn batch(seq: u64) -> Vec<u8> {
        frame(&NodeFrame {
            body: Some(node_frame::Body::Batch(Batch {
                seq,
                ..Batch::default()
            })),
        })
    }

    #[test]
    fn recovery_interleaves_nodes_and_cuts_a_torn_frame() {
        let dir = tempdir("journal");
        for (node, n) in [("a", 3), ("b", 1)] {
            let hello = Hello {
                node: node.into(),
                token: "secret".into(),
                ..Hello::default()
            };
            let mut j = NodeJournal::create(&dir, &hello, false).unwrap();
            for seq in 1..=n {
                j.append(&batch(seq)).unwrap();
            }
            j.append(&batch(n + 1)[..3]).unwrap();
        }
        let mut seen = Vec::new();
        let nodes = recover(&dir, false, |i, h, b| {
            assert!(h.token.is_empty());
            seen.push((i, b.seq));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [(0, 1), (1, 1), (0, 2), (0, 3)]);
        assert_eq!(nodes[0].last_seq, 3);
        let mut a = nodes.into_iter().next().unwrap().journal;
        a.append(&batch(4)).unwrap();
        let again = recover(&dir, false, |_, _, _| Ok(())).unwrap();
        assert_eq!(again[0].last_seq, 4);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
