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
//! the slowest host's sets when the job got past its start-up (an MPI start-up ends together
//! for all ranks). On a target node of `cores` and `speed` the same processes take
//! `C / (min(cores, m) * speed)`. The shift is the slowest target node's CPU part minus the
//! slowest measured host's: every process starts that much later (or sooner), never before
//! the run's start.
//!
//! docs/engine.md ("Start-up") has what it was measured against, and how far off it is.
//!
//! A trace without the figures (an older one, a process attached while running, a source
//! that does not record them) keeps the measured start-up: the shift is 0.

use crate::event::ProcInfo;
use crate::target::Target;

/// What the measured run says about its processes' start-up: read once from a trace's
/// processes, then asked for each target ([`Startup::shift`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Startup {
    /// Each process's start-up CPU, in seconds, by process id.
    cpu: Vec<f64>,
    /// The CPU part of the measured start-up: the slowest host's start-up CPU over the CPUs
    /// its processes had.
    measured: f64,
}

impl Startup {
    /// The start-up of `procs` (a trace header's list, ids `0..procs.len()`); `None` unless
    /// every process has its start-up CPU and a readable CPU list, in which case every
    /// target keeps the measured start-up.
    pub fn of(procs: &[ProcInfo]) -> Option<Self> {
        if procs.is_empty() {
            return None;
        }
        let mut cpu = Vec::with_capacity(procs.len());
        // Per host: its processes' start-up CPU, their number, and the CPUs they had.
        let mut hosts: Vec<(&str, f64, usize, Vec<u32>)> = Vec::new();
        for p in procs {
            if p.startup_cpu_ns == 0 {
                return None;
            }
            let seconds = p.startup_cpu_ns as f64 * 1e-9;
            let cpus = cpu_list(&p.cpus)?;
            cpu.push(seconds);
            match hosts.iter_mut().find(|h| h.0 == p.host) {
                Some(h) => {
                    h.1 += seconds;
                    h.2 += 1;
                    h.3.extend(cpus);
                }
                None => hosts.push((&p.host, seconds, 1, cpus)),
            }
        }
        let measured = hosts
            .into_iter()
            .map(|(_, c, m, mut cpus)| {
                cpus.sort_unstable();
                cpus.dedup();
                c / cpus.len().min(m).max(1) as f64
            })
            .fold(0.0, f64::max);
        Some(Startup { cpu, measured })
    }

    /// How many seconds later than measured the processes' modelled work starts on `target`
    /// (negative: sooner).
    pub fn shift(&self, target: &Target) -> f64 {
        let predicted = target
            .nodes
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
        if last < first || last - first > 1 << 16 {
            return None;
        }
        cpus.extend(first..=last);
    }
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Node;

    /// The shift of `target` for `procs`; 0 where the start-up is taken as measured.
    fn shift(procs: &[ProcInfo], target: &Target) -> f64 {
        Startup::of(procs).map_or(0.0, |s| s.shift(target))
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
        for bad in ["", "a", "3-1", "1,,2", "0-999999"] {
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
    fn processes_bound_to_one_cpu_each_had_their_union() {
        // Bound to CPUs 0, 1, 0, 1: the host had 2 CPUs for them.
        let mut p = procs(30, "0");
        p[1].cpus = "1".into();
        p[3].cpus = "1".into();
        assert_eq!(shift(&p, &target(&[(&[0, 1, 2, 3], 2, 1.0)])), 0.0);
    }
}
