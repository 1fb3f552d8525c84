//! Starting the traced command so that no early event is missed: fork, let the caller add
//! the child to the kernel's filter, and only then let the child exec (a pipe handshake).

use std::{ffi::CString, io};

use anyhow::{bail, Context, Result};

/// A forked child waiting, before exec, for [`HeldChild::release`].
pub struct HeldChild {
    pid: u32,
    go: Option<libc::c_int>,
}

impl HeldChild {
    /// Forks a child that will run `argv` (looked up in PATH) once released. If this process
    /// drops the child without releasing it, the child exits with status 1 without exec'ing.
    pub fn spawn(argv: &[String]) -> Result<Self> {
        let Some(program) = argv.first() else {
            bail!("no command given to run")
        };
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_str()))
            .collect::<Result<_, _>>()
            .context("a command argument contains a NUL byte")?;
        let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let failed = format!("lbf-trace: cannot run {program:?}\n");
        let mut fds = [0; 2];
        // SAFETY: valid out array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error()).context("creating the start pipe");
        }
        let (rd, wr) = (fds[0], fds[1]);
        // SAFETY: the child only makes async-signal-safe calls before exec or _exit.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()).context("forking the command"),
            0 => unsafe {
                libc::close(wr);
                let mut byte = 0u8;
                let n = libc::read(rd, &mut byte as *mut u8 as *mut libc::c_void, 1);
                if n != 1 {
                    libc::_exit(1);
                }
                libc::execvp(ptrs[0], ptrs.as_ptr());
                libc::write(2, failed.as_ptr() as *const libc::c_void, failed.len());
                libc::_exit(127)
            },
            pid => {
                // SAFETY: our end of the pipe we no longer need.
                unsafe { libc::close(rd) };
                Ok(Self {
                    pid: pid as u32,
                    go: Some(wr),
                })
            }
        }
    }

    /// The child's PID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child exec.
    pub fn release(&mut self) -> Result<()> {
        if let Some(fd) = self.go.take() {
            // SAFETY: our pipe end, written once and closed.
            let n = unsafe { libc::write(fd, b"g".as_ptr() as *const libc::c_void, 1) };
            unsafe { libc::close(fd) };
            if n != 1 {
                return Err(io::Error::last_os_error()).context("releasing the command");
            }
        }
        Ok(())
    }

    /// Sends signal `sig` to the child (ignored if it has already ended).
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.pid as libc::pid_t, sig) };
    }

    /// Waits for the child and returns its exit status as a shell reports it: the exit code,
    /// or 128 + the signal number that killed it.
    pub fn wait(&mut self) -> Result<i32> {
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, 0) };
            if r >= 0 {
                break;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err).with_context(|| format!("waiting for PID {}", self.pid));
            }
        }
        Ok(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        })
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        if let Some(fd) = self.go.take() {
            // SAFETY: closing our pipe end makes an unreleased child exit.
            unsafe { libc::close(fd) };
        }
    }
}
