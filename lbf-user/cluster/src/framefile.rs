//! Files of frames (see [`super::wire`]): the builder's journal and the node's spool store
//! frames exactly as they travel, so nothing is re-encoded on the way in or out.
//!
//! A frame cut short at the end of a file (the writer was killed mid-write) is not an error:
//! [`FrameFile::next_frame`] reports the end there, and [`FrameFile::valid_len`] says where to cut.

use super::wire::MAX_FRAME_BYTES;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

/// Reads the frames of a file in order.
pub struct FrameFile {
    path: PathBuf,
    input: BufReader<File>,
    /// Bytes of whole frames read so far.
    valid_len: u64,
}

impl FrameFile {
    /// Opens `path` for reading from its start.
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(FrameFile {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(1 << 20, File::open(path)?),
            valid_len: 0,
        })
    }

    /// The next frame (its length prefix included), or `None` at the end of the file or at
    /// a frame cut short. A length beyond [`MAX_FRAME_BYTES`] is corruption and an error
    /// naming the file and offset.
    pub fn next_frame(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut len = [0u8; 4];
        if !read_full(&mut self.input, &mut len)? {
            return Ok(None);
        }
        let body = u32::from_le_bytes(len) as usize;
        if body > MAX_FRAME_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: corrupt at byte {}: a frame of {body} bytes; move the file away \
                     to start afresh",
                    self.path.display(),
                    self.valid_len
                ),
            ));
        }
        let mut frame = vec![0u8; 4 + body];
        frame[..4].copy_from_slice(&len);
        if !read_full(&mut self.input, &mut frame[4..])? {
            return Ok(None);
        }
        self.valid_len += frame.len() as u64;
        Ok(Some(frame))
    }

    /// Bytes of the whole frames read so far: where a writer should continue.
    pub fn valid_len(&self) -> u64 {
        self.valid_len
    }
}

/// Fills `buf`; false if the input ended before it was full.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => return Ok(false),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_torn_last_frame_ends_the_file_where_the_whole_ones_end() {
        let dir = tempdir("framefile");
        let path = dir.join("f");
        let mut file = File::create(&path).unwrap();
        file.write_all(&[2, 0, 0, 0, 7, 8, 5, 0, 0, 0, 1]).unwrap();
        let mut frames = FrameFile::open(&path).unwrap();
        assert_eq!(frames.next_frame().unwrap(), Some(vec![2, 0, 0, 0, 7, 8]));
        assert_eq!(frames.next_frame().unwrap(), None);
        assert_eq!(frames.valid_len(), 6);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A fresh directory for one test.
    pub(crate) fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lbf-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
