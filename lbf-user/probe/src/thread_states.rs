//! User space's access to the kernel side's per-thread states (`lbf_common::maps::THREADS`):
//! a task-storage map, for which aya has no type. It is read and written with the `bpf`
//! system call, each thread named by a pidfd of it (`pidfd_open`; see [`thread_pidfd`]). The
//! map cannot be listed: its keys are tasks, not numbers.

use std::{
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
};

use anyhow::{bail, Context, Result};
use aya::maps::{Map, MapType};
use lbf_common::maps::{self, ThreadState};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

/// `BPF_MAP_LOOKUP_ELEM`.
const LOOKUP_ELEM: libc::c_long = 1;
/// `BPF_MAP_UPDATE_ELEM`.
const UPDATE_ELEM: libc::c_long = 2;
/// `BPF_NOEXIST`: an update that only creates.
const NOEXIST: u64 = 1;
/// `PIDFD_THREAD` (`O_EXCL`): a pidfd of one thread, not necessarily a group leader.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;

/// `union bpf_attr` as the `BPF_MAP_*_ELEM` commands read it.
#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The `THREADS` map of a loaded object.
pub(crate) struct ThreadStates<'a> {
    map: BorrowedFd<'a>,
}

impl<'a> ThreadStates<'a> {
    /// The per-thread states in `map`, the object's `THREADS` map.
    pub(crate) fn new(map: Option<&'a Map>) -> Result<Self> {
        let map = map.with_context(|| format!("map {}", maps::THREADS))?;
        // aya loads task-storage maps but has no type for them.
        if let Map::Unsupported(data) = map {
            if data.info()?.map_type()? == MapType::TaskStorage {
                return Ok(Self {
                    map: data.fd().as_fd(),
                });
            }
        }
        bail!("map {} is not a task-storage map", maps::THREADS)
    }

    /// The state of thread `tid` of process `pid`; `None` if it has none or has ended.
    pub(crate) fn get(&self, pid: u32, tid: u32) -> Result<Option<ThreadState>> {
        let Some(pidfd) = thread_pidfd(pid, tid)? else {
            return Ok(None);
        };
        let mut state = ThreadState::default();
        match self.elem(LOOKUP_ELEM, &pidfd, &mut state, 0) {
            Ok(()) => Ok(Some(state)),
            Err(e) if gone(&e) => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading the state of thread {tid}")),
        }
    }

    /// Gives thread `tid` of process `pid` the state `state` unless it has one. False if it
    /// had one already (the kernel side traces it) or has ended.
    pub(crate) fn insert_new(&self, pid: u32, tid: u32, state: &ThreadState) -> Result<bool> {
        let Some(pidfd) = thread_pidfd(pid, tid)? else {
            return Ok(false);
        };
        let mut value = *state;
        match self.elem(UPDATE_ELEM, &pidfd, &mut value, NOEXIST) {
            Ok(()) => Ok(true),
            Err(e) if gone(&e) || e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(e).with_context(|| format!("seeding the state of thread {tid}")),
        }
    }

    /// Runs the map element command `cmd` on the entry of the thread `pidfd` names.
    fn elem(
        &self,
        cmd: libc::c_long,
        pidfd: &OwnedFd,
        value: &mut ThreadState,
        flags: u64,
    ) -> io::Result<()> {
        let key: i32 = pidfd.as_raw_fd();
        let attr = ElemAttr {
            map_fd: self.map.as_raw_fd() as u32,
            _pad: 0,
            key: &key as *const i32 as u64,
            value: value as *mut ThreadState as u64,
            flags,
        };
        // SAFETY: `attr` points at a key and a value that outlive the call; the kernel reads
        // `size_of::<ElemAttr>()` bytes of it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                &attr as *const ElemAttr,
                size_of::<ElemAttr>(),
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// A pidfd of thread `tid` of process `pid`; `None` if there is no such thread (any more). A
/// process's first thread is named the classic way (Linux 5.3), the others with
/// `PIDFD_THREAD` (Linux 6.9).
fn thread_pidfd(pid: u32, tid: u32) -> Result<Option<OwnedFd>> {
    let id = Pid::from_raw(tid as i32).with_context(|| format!("thread id {tid}"))?;
    let flags = if tid == pid { 0 } else { PIDFD_THREAD };
    match pidfd_open(id, PidfdFlags::from_bits_retain(flags)) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::SRCH) => Ok(None),
        Err(e) => Err(e).with_context(|| {
            format!("pidfd_open of thread {tid} of process {pid} (threads: Linux 6.9 or later)")
        }),
    }
}

/// Whether `e` says the entry or its task is not there (`ENOENT`, `ESRCH`).
fn gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH))
}
