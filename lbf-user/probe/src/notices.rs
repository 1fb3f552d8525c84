//! `MPI_Init` notices (`lbf_common::maps::INIT_NOTICES`): a thread that waits on their ring
//! buffer and hands each process id to a callback at once, apart from the record reader.
//!
//! The capture learns a rank's MPI library and launcher rank from `/proc` when it reaches the
//! rank's first record. A reader behind the traced program by more than a short rank's whole
//! run found only a zombie or nothing there, and left the rank out. The kernel side wakes this
//! thread at every `MPI_Init` entry, while the library is mapped and the process surely alive
//! (the call takes milliseconds), so the callback can inspect it then.

use std::{
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
};

use anyhow::{Context, Result};

use super::ring::RecordRing;

/// The thread watching `MPI_Init` notices; stopped by [`InitWatch::finish`] or on drop.
pub struct InitWatch {
    /// Set to stop the thread; `wake` then interrupts its wait.
    stop: Arc<AtomicBool>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl InitWatch {
    /// Starts a thread that calls `on_init` with the process id of every notice in `ring`, as
    /// soon as the kernel side wakes it.
    pub(super) fn spawn(
        mut ring: RecordRing,
        mut on_init: impl FnMut(u32) + Send + 'static,
    ) -> Result<Self> {
        // SAFETY: a plain system call; the descriptor is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("creating an eventfd");
        }
        // SAFETY: a new descriptor nothing else owns.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let stop = Arc::new(AtomicBool::new(false));
        let (stopping, woken) = (stop.clone(), wake.clone());
        let thread = std::thread::Builder::new()
            .name("lbf-init-watch".into())
            .spawn(move || loop {
                let last = stopping.load(Ordering::Acquire);
                ring.drain(|item| {
                    if let Some(tgid) = item.get(..4) {
                        on_init(u32::from_ne_bytes(tgid.try_into().expect("4 bytes")));
                    }
                });
                if last {
                    return Ok(());
                }
                wait_for_either(&ring, &woken)?;
            })
            .context("starting the MPI_Init watch thread")?;
        Ok(Self {
            stop,
            wake,
            thread: Some(thread),
        })
    }

    /// Stops the thread after it has handled the notices already written; its error if it
    /// failed.
    pub fn finish(mut self) -> Result<()> {
        self.stop_thread()
    }

    fn stop_thread(&mut self) -> Result<()> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        self.stop.store(true, Ordering::Release);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes to the eventfd, which the thread's poll then reports.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        match thread.join() {
            Ok(result) => result.context("watching MPI_Init notices"),
            Err(_) => anyhow::bail!("the MPI_Init watch thread panicked"),
        }
    }
}

impl Drop for InitWatch {
    fn drop(&mut self) {
        let _ = self.stop_thread();
    }
}

/// Waits until the kernel side wakes the notices' reader, `wake` is written, or a second
/// passes (so that a stop is seen even if writing `wake` failed).
fn wait_for_either(ring: &RecordRing, wake: &OwnedFd) -> Result<()> {
    let mut fds = [ring.as_fd().as_raw_fd(), wake.as_raw_fd()].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    // SAFETY: two initialised pollfds.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1000) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(anyhow::Error::new(err).context("waiting for MPI_Init notices"));
        }
    }
    Ok(())
}
