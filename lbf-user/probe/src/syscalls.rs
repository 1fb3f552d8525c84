//! System call records for the socket capture: attaches the kernel side's `sys_enter` and
//! `sys_exit` raw tracepoints and lists the calls to record (see `lbf_common::syscalls`).
//! Off unless asked for: every system call on the machine then passes one map lookup.

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap, MapData},
    programs::RawTracePoint,
};
use lbf_common::syscalls::{self, SyscallRead, AT_ATTACH, ENTRY_WORDS};

use super::Tracer;

/// `BPF_NOEXIST`: an insert that leaves an existing entry alone.
const NO_EXIST: u64 = 1;

impl Tracer {
    /// Records, for every traced process, the system calls `table` lists (number -> the
    /// memory to read at the return). Call once, before tracing starts.
    pub fn record_syscalls(&mut self, table: &[(u16, SyscallRead)]) -> Result<()> {
        let mut calls: HashMap<&mut MapData, u32, SyscallRead> = HashMap::try_from(
            self.ebpf
                .map_mut(syscalls::SYSCALLS)
                .context("map SYSCALLS")?,
        )?;
        for &(nr, reads) in table {
            calls
                .insert(&(nr as u32), &reads, 0)
                .with_context(|| format!("listing system call {nr}"))?;
        }
        for name in ["sys_enter", "sys_exit"] {
            let prog: &mut RawTracePoint = self
                .ebpf
                .program_mut(name)
                .with_context(|| format!("eBPF program {name} missing from the object"))?
                .try_into()?;
            prog.load()
                .with_context(|| format!("verifying eBPF program {name}"))?;
            prog.attach(name)
                .with_context(|| format!("attaching to raw tracepoint {name}"))?;
        }
        Ok(())
    }

    /// Marks `threads`, just attached to, as maybe inside a recorded system call
    /// (`lbf_common::syscalls::AT_ATTACH`): the kernel side then records the call a thread
    /// returns from next, its number and arguments read from the registers the kernel saved
    /// at its entry, unless the entry hook saw the call. Without it, a receive a process was
    /// in when `lbf-trace -p` attached went unseen, and the bytes it took shifted every
    /// later receive on its stream onto the message before the one it read (likewise a
    /// send's bytes, for the receiver).
    ///
    /// Call after the threads' process is in the kernel's filter. A thread that enters a
    /// call before its mark is in place keeps that call's entry (the insert leaves an entry
    /// alone); one whose call at the attach returned before the mark was in place has its
    /// mark taken by its next call's entry.
    pub(super) fn mark_system_calls_at_attach(&mut self, threads: &[u32]) -> Result<()> {
        let calls: HashMap<&MapData, u32, SyscallRead> =
            HashMap::try_from(self.ebpf.map(syscalls::SYSCALLS).context("map SYSCALLS")?)?;
        // No system call is recorded (not the socket source): nothing to mark.
        if calls.keys().next().is_none() {
            return Ok(());
        }
        let mut entries: HashMap<&mut MapData, u32, [u64; ENTRY_WORDS]> = HashMap::try_from(
            self.ebpf
                .map_mut(syscalls::SYSCALL_ENTRY)
                .context("map SYSCALL_ENTRY")?,
        )?;
        let mut mark = [0u64; ENTRY_WORDS];
        mark[6] = AT_ATTACH;
        for tid in threads {
            // Refused when the thread has entered a call since: that entry is the right one.
            let _ = entries.insert(tid, &mark, NO_EXIST);
        }
        Ok(())
    }
}
