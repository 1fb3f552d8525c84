//! The start-up model: how much sooner or later a job's processes would start their modelled
//! work on a target than they did in the measured run.
//!
//! A process's modelled work starts when its start-up ends (for MPI, when `MPI_Init`
//! returns: [`ProcInfo::start_ns`]). Until then the launcher starts it, the dynamic linker
//! loads it and its library wires itself up with the others': wall time that is partly CPU
//! work of the processes themselves ([`ProcInfo::startup_cpu_ns`]) and partly waiting (for the
//! launcher, for timers, for the slowest process). The engine starts each process that late;
//! this module says by how much a target moves that instant.
//!
//! The model: the start-up's wall time is a part that waits, the same on every target, plus
//! the processes' start-up CPU, which the cores of each node share. On a host of the measured
//! run that had `k` CPUs (the union of its processes' affinities, [`ProcInfo::cpus`]) for `m`
//! processes whose start-up used `C` CPU-seconds together, the CPU part took `C / min(k, m)`;
//! the processes of a cgroup whose CPU quota allowed them `q` CPUs
//! ([`ProcInfo::cpu_quota_milli`]: a container's CPU limit) took `C / min(k, m, q)` of their
//! own at least. The slowest host's or cgroup's sets when the job got past its start-up (an
//! MPI start-up ends together for all ranks). On a target node of `cores` and `speed` the
//! same processes take `C / (min(cores, m) * speed)`. The shift is the slowest target node's
//! CPU part minus the slowest measured host's or cgroup's: every process starts that much
//! later (or sooner), never before the run's start.
//!
//! docs/engine.md ("Start-up") has what it was measured against, and how far off it is.
//!
//! A trace without the figures (an older one, a process attached while running, a source
//! that does not record them) keeps the measured start-up: the shift is 0.

use std::collections::BTreeSet;

use crate::event::ProcInfo;
use crate::target::Node;

/// What the measured run says about its processes' start-up: read once from a trace's
/// processes, then asked for each target ([`Startup::shift`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Startup {
    /// Each process's start-up CPU, in seconds, by process id.
    cpu: Vec<f64>,
    /// The CPU part of the measured start-up: the slowest host's or quota cgroup's start-up
    /// CPU over the CPUs its processes had.
    measured: f64,
}

impl Startup {
    /// The start-up of `procs` (a trace header's list, ids `0..procs.len()`); `None` unless
    /// every process has its start-up CPU and a readable CPU list, in which case every
    /// target keeps the measured start-up.
    pub fn of<'a>(procs: &'a [ProcInfo]) -> Option<Self> {
        if procs.is_empty() {
            return None;
        }
        let mut cpu = Vec::with_capacity(procs.len());
        // Per host, and per cgroup that set a quota: the processes' start-up CPU, their
        // number, the CPUs they had, and the quota (in CPUs; infinite for a host).
        let mut groups: Vec<Group<'_>> = Vec::new();
        for p in procs {
            if p.startup_cpu_ns == 0 {
                return None;
            }
            let seconds = p.startup_cpu_ns as f64 * 1e-9;
            let cpus = cpu_list(&p.cpus)?;
            cpu.push(seconds);
            let mut add = |key: (&'a str, &'a str), quota: f64| {
                let g = match groups.iter().position(|g| g.key == key) {
                    Some(i) => &mut groups[i],
                    None => {
                        groups.push(Group {
                            key,
                            cpu: 0.0,
                            procs: 0,
                            cpus: BTreeSet::new(),
                            quota,
                        });
                        groups.last_mut().expect("just pushed")
                    }
                };
                g.cpu += seconds;
                g.procs += 1;
                g.cpus.extend(&cpus);
            };
            add((&p.host, ""), f64::INFINITY);
            if p.cpu_quota_milli > 0 {
                add(
                    (&p.host, &p.quota_cgroup),
                    p.cpu_quota_milli as f64 / 1000.0,
                );
            }
        }
        let measured = groups
            .into_iter()
            .map(|g| {
                let room = (g.cpus.len().min(g.procs).max(1) as f64).min(g.quota);
                g.cpu / room
            })
            .fold(0.0, f64::max);
        Some(Startup { cpu, measured })
    }

    /// How many seconds later than measured the processes' modelled work starts on a target
    /// of `nodes` (a [`crate::target::Target`]'s; negative: sooner).
    pub fn shift(&self, nodes: &[Node]) -> f64 {
        let predicted = nodes
            .iter()
            .filter(|n| !n.procs.is_empty())
            .map(|n| {
                let c: f64 = n
                    .procs
                    .iter()
                    .filter_map(|&id| self.cpu.get(id as usize))
                    .sum();
                let cores = (n.cores as usize).min(n.procs.len()).max(1) as f64;
                c / (cores * n.speed)
            })
            .fold(0.0, f64::max);
        predicted - self.measured
    }
}

/// Processes of the measured run that shared CPUs: a host's, or a cgroup's with a CPU quota.
struct Group<'a> {
    /// The host, and the cgroup (empty for the whole host).
    key: (&'a str, &'a str),
    /// Their start-up CPU, in seconds.
    cpu: f64,
    /// How many.
    procs: usize,
    /// The CPUs they could run on.
    cpus: BTreeSet<u32>,
    /// The CPUs the cgroup's quota allowed them; infinite for a host.
    quota: f64,
}

/// The CPUs of a list in the kernel's format (`0-3,8,10-11`: `Cpus_allowed_list`), or `None`
/// if it is empty or malformed.
pub fn cpu_list(list: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (first, last): (u32, u32) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let cpu = part.trim().parse().ok()?;
                (cpu, cpu)
            }
        };
        // At most 65 536 CPUs in all: a hostile list (a trace, a node's hello) cannot make
        // it allocate more.
        if last < first || (last - first) as usize + cpus.len() >= 1 << 16 {
            return None;
        }
        cpus.extend(first..=last);
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Target;

    /// The shift of `target` for `procs`; 0 where the start-up is taken as measured.
    fn shift(procs: &[ProcInfo], target: &Target) -> f64 {
        Startup::of(procs).map_or(0.0, |s| s.shift(&target.nodes))
    }

    /// Four processes on `host`, each with `cpu_ms` of start-up CPU and the CPUs `cpus`.
    fn procs(cpu_ms: u64, cpus: &str) -> Vec<ProcInfo> {
        (0..4)
            .map(|id| ProcInfo {
                id,
                host: "here".into(),
                start_ns: 300_000_000,
                startup_cpu_ns: cpu_ms * 1_000_000,
                cpus: cpus.into(),
                ..ProcInfo::default()
            })
            .collect()
    }

    /// A target of `nodes` (processes, cores, speed).
    fn target(nodes: &[(&[u32], u32, f64)]) -> Target {
        Target {
            nodes: nodes
                .iter()
                .map(|&(procs, cores, speed)| Node {
                    procs: procs.to_vec(),
                    cores,
                    speed,
                })
                .collect(),
            name: "t".into(),
            network: Default::default(),
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
            procedures: Vec::new(),
        }
    }

    #[test]
    fn lists_read_as_the_kernel_writes_them() {
        assert_eq!(cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(cpu_list("5"), Some(vec![5]));
        let hostile = ["0-60000"; 3].join(",");
        for bad in ["", "a", "3-1", "1,,2", "0-999999", &hostile] {
            assert_eq!(cpu_list(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_measured_configuration_is_not_moved() {
        let p = procs(30, "0-1");
        assert_eq!(shift(&p, &target(&[(&[0, 1, 2, 3], 2, 1.0)])), 0.0);
        // Two nodes of one core each hold the same CPU per core as one of two.
        assert_eq!(
            shift(&p, &target(&[(&[0, 1], 1, 1.0), (&[2, 3], 1, 1.0)])),
            0.0
        );
    }

    #[test]
    fn fewer_or_slower_cores_start_later_and_more_sooner() {
        // 120 ms of CPU on 2 CPUs took 60 ms; on 1 core 120 ms, on 4 cores 30 ms.
        let p = procs(30, "0-1");
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(shift(&p, &target(&[(&[0, 1, 2, 3], 1, 1.0)])), 0.060));
        assert!(close(
            shift(&p, &target(&[(&[0, 1, 2, 3], 4, 1.0)])),
            -0.030
        ));
        // Half as fast: twice the CPU part.
        assert!(close(shift(&p, &target(&[(&[0, 1, 2, 3], 2, 0.5)])), 0.060));
        // More cores than processes: each process's start-up is its own.
        assert!(close(
            shift(&p, &target(&[(&[0, 1, 2, 3], 8, 1.0)])),
            -0.030
        ));
        // The slowest node sets the pace.
        let uneven = target(&[(&[0, 1, 2], 1, 1.0), (&[3], 1, 1.0)]);
        assert!(close(shift(&p, &uneven), 0.090 - 0.060));
    }

    #[test]
    fn a_process_without_the_figures_keeps_the_measured_start_up() {
        let mut p = procs(30, "0-1");
        p[2].startup_cpu_ns = 0;
        assert_eq!(shift(&p, &target(&[(&[0, 1, 2, 3], 1, 1.0)])), 0.0);
        let mut p = procs(30, "0-1");
        p[1].cpus = String::new();
        assert_eq!(shift(&p, &target(&[(&[0, 1, 2, 3], 1, 1.0)])), 0.0);
    }

    #[test]
    fn a_cgroups_quota_is_the_cpu_its_processes_had() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // Ranks 0-1 in a cgroup allowed a quarter of a CPU, ranks 2-3 in one allowed a whole
        // CPU, all with CPUs 0-1: 60 ms of start-up CPU took 240 ms in the first and 60 in
        // the second; their own configuration (calibrated as a node of one core of speed
        // 0.25 and one of speed 1) is not moved.
        let mut p = procs(30, "0-1");
        for (i, q) in p.iter_mut().enumerate() {
            let (cgroup, milli) = if i < 2 { ("/a", 250) } else { ("/b", 1000) };
            q.quota_cgroup = cgroup.into();
            q.cpu_quota_milli = milli;
        }
        let own = target(&[(&[0, 1], 1, 0.25), (&[2, 3], 1, 1.0)]);
        assert!(close(shift(&p, &own), 0.0), "{}", shift(&p, &own));
        // The four on one unlimited node of 2 cores: 120 ms of CPU in 60 ms.
        assert!(close(
            shift(&p, &target(&[(&[0, 1, 2, 3], 2, 1.0)])),
            0.060 - 0.240
        ));
        // A quota above the CPUs the processes had limits nothing.
        for q in &mut p {
            q.cpu_quota_milli = 8000;
        }
        assert_eq!(shift(&p, &target(&[(&[0, 1, 2, 3], 2, 1.0)])), 0.0);
    }

    #[test]
    fn processes_bound_to_one_cpu_each_had_their_union() {
        // Bound to CPUs 0, 1, 0, 1: the host had 2 CPUs for them.
        let mut p = procs(30, "0");
        p[1].cpus = "1".into();
        p[3].cpus = "1".into();
        assert_eq!(shift(&p, &target(&[(&[0, 1, 2, 3], 2, 1.0)])), 0.0);
    }
}
