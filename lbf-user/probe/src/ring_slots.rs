//! Making the record ring buffers and putting them in the object's `RINGS` array (an array of
//! maps, `lbf_common::maps::RINGS`), where the kernel side finds the ring of its CPU.
//!
//! After each update of a map of maps the kernel waits for the BPF programs running meanwhile
//! to finish (an RCU grace period: 8 to 18 ms here), so that user space knows no program
//! still uses the old value. Updated one at a time, the two rings of this 2-CPU machine took
//! 20 to 30 ms of lbf-trace's start-up, more than verifying any program. They are put in place
//! with one `BPF_MAP_UPDATE_BATCH`, after which the kernel waits once; a kernel that has no
//! batch update for arrays of maps gets them one at a time, as before.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use anyhow::{Context, Result};
use aya::maps::{ArrayOfMaps, Map, MapData};

/// `BPF_MAP_UPDATE_BATCH`, the `bpf(2)` command (`enum bpf_cmd`).
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

/// The `batch` member of `union bpf_attr` (`BPF_MAP_*_BATCH` commands); the kernel zero-fills
/// the rest of the union.
#[repr(C)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Creates `count` ring buffers of `bytes` each and puts them in the object's `RINGS` array
/// (`slots`), in slots 0 to `count - 1`.
pub(crate) fn create_rings(slots: &mut Map, count: u32, bytes: u32) -> Result<Vec<MapData>> {
    let rings = (0..count)
        .map(|i| {
            let def = aya_obj::Map::new_from_params(
                aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_RINGBUF as u32,
                0,
                0,
                bytes,
                0,
            );
            MapData::create(def, &format!("lbf_ring_{i}"), None)
                .with_context(|| format!("creating record ring buffer {i} of {bytes} bytes"))
        })
        .collect::<Result<Vec<_>>>()?;
    let all_at_once = match &*slots {
        Map::ArrayOfMaps(data) => put_all(data.fd().as_fd(), &rings),
        _ => Err(std::io::Error::other("RINGS is not an array of maps")),
    };
    if all_at_once.is_err() {
        let mut slots: ArrayOfMaps<&mut MapData> = ArrayOfMaps::try_from(slots)?;
        for (i, ring) in (0u32..).zip(&rings) {
            slots
                .set(i, ring, 0)
                .with_context(|| format!("putting record ring buffer {i} in place"))?;
        }
    }
    Ok(rings)
}

/// Puts `rings` in slots 0 to `rings.len() - 1` of the array of maps `slots` with one
/// `BPF_MAP_UPDATE_BATCH`. An error where the kernel refuses it (no batch update for arrays
/// of maps); a batch stopped part way leaves the later slots to the caller's one-at-a-time
/// updates, which set them all again.
fn put_all(slots: BorrowedFd<'_>, rings: &[MapData]) -> std::io::Result<()> {
    let keys: Vec<u32> = (0..rings.len() as u32).collect();
    let values: Vec<u32> = rings
        .iter()
        .map(|r| r.fd().as_fd().as_raw_fd() as u32)
        .collect();
    let mut attr = BatchAttr {
        in_batch: 0,
        out_batch: 0,
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count: keys.len() as u32,
        map_fd: slots.as_raw_fd() as u32,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: `attr` is a valid `bpf_attr` prefix of the size given; the keys and values it
    // points at live until the call returns.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_BATCH,
            &mut attr as *mut BatchAttr,
            std::mem::size_of::<BatchAttr>() as u32,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if attr.count as usize != rings.len() {
        return Err(std::io::Error::other(format!(
            "the kernel put {} of {} ring buffers in place",
            attr.count,
            rings.len()
        )));
    }
    Ok(())
}
