//! What the probe layer reads from `/proc`: whether a process exists, its threads and their
//! exact CPU time so far, and the objects it has mapped.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};

/// Whether process `pid` exists (a zombie counts).
pub fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).is_dir()
}

/// Thread ids of process `pid`.
pub fn thread_ids(pid: u32) -> Result<Vec<u32>> {
    let dir = format!("/proc/{pid}/task");
    let mut tids = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        if let Some(tid) = entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            tids.push(tid);
        }
    }
    Ok(tids)
}

/// The exact on-CPU nanoseconds of thread `tid` of `pid` so far (`schedstat`'s first field,
/// the scheduler's `sum_exec_runtime`, the same clock the kernel side keeps).
pub fn thread_cpu_ns(pid: u32, tid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/task/{tid}/schedstat");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("unexpected contents of {path}: {text:?}"))
}

/// The system call thread `tid` of `pid` is blocked in, as `/proc/PID/task/TID/syscall` shows
/// it: its number and its 6 arguments. `None` when the thread runs, is blocked outside a
/// system call, or is gone.
pub fn blocked_syscall(pid: u32, tid: u32) -> Option<(u32, [u64; 6])> {
    parse_syscall(&fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?)
}

/// [`blocked_syscall`] of the file's text: `NR ARG1 ... ARG6 SP PC` (arguments in hex), or
/// `-1 SP PC` (blocked, not in a call) or `running`.
fn parse_syscall(text: &str) -> Option<(u32, [u64; 6])> {
    let mut words = text.split_whitespace();
    let nr: u32 = words.next()?.parse().ok()?;
    let mut args = [0u64; 6];
    for arg in &mut args {
        *arg = u64::from_str_radix(words.next()?.trim_start_matches("0x"), 16).ok()?;
    }
    Some((nr, args))
}

/// Files mapped executable by process `pid`, each once, as paths this process can open
/// (through `/proc/PID/root` when the process sees another mount namespace).
pub fn executable_mappings(pid: u32) -> Result<Vec<PathBuf>> {
    let path = format!("/proc/{pid}/maps");
    let maps = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let mut files = BTreeSet::new();
    for line in maps.lines() {
        // address perms offset dev inode path
        let mut fields = line.splitn(6, char::is_whitespace);
        let perms = fields.nth(1).unwrap_or("");
        let Some(file) = fields.nth(3).map(str::trim) else {
            continue;
        };
        if perms.contains('x') && file.starts_with('/') {
            files.insert(file.to_string());
        }
    }
    Ok(files
        .into_iter()
        .map(|f| {
            let direct = PathBuf::from(&f);
            if direct.exists() {
                direct
            } else {
                PathBuf::from(format!("/proc/{pid}/root{f}"))
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_call_reads_as_its_number_and_arguments() {
        let text = "0 0x3 0x7ffd5b2c1e40 0x10 0x0 0x0 0x0 0x7ffd5b2c1e18 0x7f2b1c91a7e2\n";
        assert_eq!(
            parse_syscall(text),
            Some((0, [3, 0x7ffd5b2c1e40, 0x10, 0, 0, 0]))
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall("-1 0x7ffd5b2c1e18 0x7f2b1c91a7e2\n"), None);
        assert_eq!(parse_syscall("0 0x3 0x7ffd\n"), None);
    }

    #[test]
    fn a_sleeping_process_is_blocked_in_its_sleep() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        // clock_nanosleep (230) or nanosleep (35) on x86-64, once it is there.
        let mut seen = None;
        for _ in 0..200 {
            seen = blocked_syscall(pid, pid);
            if seen.is_some_and(|(nr, _)| nr == 230 || nr == 35) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            seen.is_some_and(|(nr, _)| nr == 230 || nr == 35),
            "sleep 5 blocked in {seen:?}"
        );
    }
}
