//! The CPU quota of a process's cgroups.

use std::path::PathBuf;

/// The tightest CPU quota among a process's cgroup and its parents.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuQuota {
    /// The CPU it allows, in CPUs (quota over period: 0.5 is half a CPU).
    pub cpus: f64,
    /// The cgroup that sets it (its path in its hierarchy, as `/proc/PID/cgroup` names it):
    /// the processes of one cgroup share its quota.
    pub cgroup: String,
}

/// The tightest CPU quota of process `pid`'s cgroups (this process's where `pid` is `None`):
/// `None` where none limits it, or where `/proc` or the cgroup files cannot be read (the
/// process ended, no cgroup file system is mounted).
pub fn cpu_quota(pid: Option<u32>) -> Option<CpuQuota> {
    let own = match pid {
        Some(pid) => std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?,
        None => std::fs::read_to_string("/proc/self/cgroup").ok()?,
    };
    // Mount points as this process sees them: the files read are this process's to open.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut tightest: Option<CpuQuota> = None;
    for (mount, v2) in cgroup_mounts(&mounts) {
        let Some(path) = cgroup_path(&own, v2) else {
            continue;
        };
        let root = PathBuf::from(mount);
        let mut dir = root.join(path.trim_start_matches('/'));
        loop {
            if let Some(cpus) = dir_quota(&dir, v2) {
                if tightest.as_ref().is_none_or(|t| cpus < t.cpus) {
                    let cgroup = dir
                        .strip_prefix(&root)
                        .map_or_else(|_| path.to_string(), |p| format!("/{}", p.display()));
                    tightest = Some(CpuQuota { cpus, cgroup });
                }
            }
            if dir == root || !dir.pop() {
                break;
            }
        }
    }
    tightest
}

/// The path, in `cgroup` (a `/proc/PID/cgroup`), of the cgroup of the v2 hierarchy (`v2`) or
/// of v1's `cpu` controller.
fn cgroup_path(cgroup: &str, v2: bool) -> Option<&str> {
    cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let ours = if v2 {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == "cpu")
        };
        ours.then_some(path)
    })
}

/// The CPU quota set in the cgroup directory `dir`, in CPUs; `None` for none (or unreadable).
fn dir_quota(dir: &std::path::Path, v2: bool) -> Option<f64> {
    if v2 {
        std::fs::read_to_string(dir.join("cpu.max"))
            .ok()
            .and_then(|t| parse_cpu_max(&t))
    } else {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        read("cpu.cfs_quota_us")
            .zip(read("cpu.cfs_period_us"))
            .and_then(|(q, p)| parse_cpu_max(&format!("{} {}", q.trim(), p.trim())))
    }
}

/// The cgroup file systems of a `/proc/PID/mountinfo` that can limit the CPU: each mount
/// point, and whether it is cgroup v2 (else v1 with the `cpu` controller).
fn cgroup_mounts(mountinfo: &str) -> Vec<(&str, bool)> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (before, after) = l.split_once(" - ")?;
            let mount = before.split(' ').nth(4)?;
            let mut f = after.split(' ');
            match (f.next()?, f.nth(1)) {
                ("cgroup2", _) => Some((mount, true)),
                ("cgroup", Some(options)) if options.split(',').any(|o| o == "cpu") => {
                    Some((mount, false))
                }
                _ => None,
            }
        })
        .collect()
}

/// `cpu.max`'s "QUOTA PERIOD" in CPUs; `None` for "max" (or v1's quota -1).
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut words = text.split_whitespace();
    let quota: f64 = words.next()?.parse().ok()?;
    let period: f64 = words.next()?.parse().ok()?;
    (period > 0.0 && quota > 0.0).then_some(quota / period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_reads_as_cpus() {
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(0.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cpu_max("-1 100000"), None);
    }

    #[test]
    fn the_cpu_limiting_cgroup_file_systems_are_found() {
        let mounts = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                      32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                      33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n\
                      40 31 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup_mounts(mounts),
            vec![
                ("/sys/fs/cgroup/cpu", false),
                ("/sys/fs/cgroup/unified", true)
            ]
        );
    }

    #[test]
    fn a_process_cgroup_is_found_per_hierarchy() {
        let cgroup = "12:cpu,cpuacct:/lbf/a\n4:memory:/x\n0::/user.slice\n";
        assert_eq!(cgroup_path(cgroup, false), Some("/lbf/a"));
        assert_eq!(cgroup_path(cgroup, true), Some("/user.slice"));
        assert_eq!(cgroup_path("4:memory:/x\n", false), None);
    }

    #[test]
    fn a_process_that_is_gone_has_no_quota() {
        // Far above pid_max's largest default (4 194 304).
        assert_eq!(cpu_quota(Some(u32::MAX - 1)), None);
    }
}
