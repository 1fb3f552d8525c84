//! System call records for the socket capture: attaches the kernel side's `sys_enter` and
//! `sys_exit` raw tracepoints and lists the calls to record (see `lbf_common::syscalls`).
//! Off unless asked for: every system call on the machine then passes one map lookup.

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap, MapData},
    programs::RawTracePoint,
};
use lbf_common::syscalls::{self, SyscallRead};

use super::Tracer;

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
}
