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
