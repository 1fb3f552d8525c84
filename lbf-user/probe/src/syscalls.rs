//! System call records for the socket capture: attaches the kernel side's `sys_enter` and
//! `sys_exit` raw tracepoints and lists the calls to record (see `lbf_common::syscalls`).
//! Off unless asked for: every system call on the machine then passes one map lookup.

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap, MapData},
    programs::RawTracePoint,
};
use lbf_common::{
    syscalls::{self, SyscallRead},
    ARG_WORDS,
};

use super::{procfs, Tracer};

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

    /// Keeps, for each of `threads` (thread id and its CPU clock at the attach) of process
    /// `pid` blocked in a recorded system call, the call's entry as the entry hook would
    /// have: its return then makes a record like any other. Without it, a receive a process
    /// was blocked in when `lbf-trace -p` attached went unseen, and the bytes it took shifted
    /// every later receive on its stream onto the message before the one it read.
    ///
    /// Call after the process is in the kernel's filter: a call that returns before its
    /// entry is in place leaves nothing the entry hook has not overwritten (the insert leaves
    /// an entry alone) or that the return hook takes for another call's (it checks the
    /// number).
    pub(super) fn adopt_blocked_calls(&mut self, pid: u32, threads: &[(u32, u64)]) -> Result<()> {
        let calls: HashMap<&MapData, u32, SyscallRead> =
            HashMap::try_from(self.ebpf.map(syscalls::SYSCALLS).context("map SYSCALLS")?)?;
        // No system call is recorded (not the socket source): nothing to read in /proc.
        if calls.keys().next().is_none() {
            return Ok(());
        }
        let blocked: Vec<(u32, [u64; ARG_WORDS])> = threads
            .iter()
            .filter_map(|&(tid, cpu_ns)| {
                let (nr, args) = procfs::blocked_syscall(pid, tid)?;
                calls.get(&nr, 0).ok()?;
                let mut entry = [0u64; ARG_WORDS];
                entry[..6].copy_from_slice(&args);
                entry[6] = u64::from(nr);
                entry[7] = cpu_ns;
                Some((tid, entry))
            })
            .collect();
        let mut entries: HashMap<&mut MapData, u32, [u64; ARG_WORDS]> = HashMap::try_from(
            self.ebpf
                .map_mut(syscalls::SYSCALL_ENTRY)
                .context("map SYSCALL_ENTRY")?,
        )?;
        for (tid, entry) in blocked {
            // Refused when the thread has entered a call since: that entry is the right one.
            let _ = entries.insert(&tid, &entry, NO_EXIST);
        }
        Ok(())
    }
}
