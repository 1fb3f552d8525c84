//! The work-rate model's advice for a master/worker program on a [`Machine`], as a placement
//! of the trace's processes: a start for the engine-scored search like the baselines.
//!
//! The model ([`super::work_rate`]) is built from the program's per-task figures
//! ([`MasterWorker`]) and the machine: a host works at `cores × speed / worker CPU per task`
//! tasks per second and serves as the master at `speed / master CPU per task`; each host's
//! link to the others carries one task (its data out and its result back, as one message of
//! the bytes per task) in the network's time for that message, so at most the inverse of
//! that many a second. The master's
//! host lends its other cores to workers through the machine's table within a host. Every
//! host is tried as the master; the best rate wins, with the fewest worker hosts that give
//! it. The worker processes are then shared among the chosen hosts by the cores each works
//! with in the flow (a slow host at full use gets as many processes as its cores).

use super::master_worker::MasterWorker;
use super::search::{Machine, Placement};
use super::work_rate::{HostRates, Resource, WorkRateModel};

/// The model's advice: where the master goes, the rate, and the placement built from it.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkRateAdvice {
    /// The master's host, by index into the machine's hosts.
    pub master_host: usize,
    /// The machine's hosts that work (the master's host among them when its other cores
    /// raise the rate), by index.
    pub worker_hosts: Vec<usize>,
    /// Tasks per second the model expects.
    pub rate: f64,
    /// The model's run time: the trace's tasks over the rate.
    pub seconds: f64,
    /// The host of each process: the master on the master's host, the workers shared among
    /// the working hosts.
    pub placement: Placement,
}

/// The model of `mw` on `machine` with host `master` as the master: the machine's hosts
/// (index `h`), then the master host's other cores as one more host (index `hosts`).
fn model(mw: &MasterWorker, machine: &Machine, master: usize) -> WorkRateModel {
    let worker_cpu = mean(&mw.worker_seconds_per_task).max(1e-12);
    let master_cpu = mw.master_seconds_per_task.max(1e-12);
    let bytes = mw.bytes_per_task.round() as u64;
    let per_task = |table: &crate::target::CommTable| 1.0 / table.seconds(bytes).max(1e-12);
    let mut hosts: Vec<HostRates> = machine
        .hosts
        .iter()
        .map(|h| HostRates {
            name: h.name.clone(),
            worker: f64::from(h.cores) * h.speed / worker_cpu,
            master: h.speed / master_cpu,
        })
        .collect();
    let m = &machine.hosts[master];
    hosts.push(HostRates {
        name: format!("{} (other cores)", m.name),
        worker: f64::from(m.cores.saturating_sub(1)) * m.speed / worker_cpu,
        master: 0.0,
    });
    let n = machine.hosts.len();
    // A link per host to the others, and the master host's table within.
    let mut resources: Vec<Resource> = machine
        .hosts
        .iter()
        .map(|h| Resource {
            name: format!("{} link", h.name),
            capacity: per_task(&machine.network.remote),
        })
        .collect();
    resources.push(Resource {
        name: format!("within {}", m.name),
        capacity: per_task(&machine.network.local),
    });
    let mut model = WorkRateModel::new(hosts, resources);
    for w in (0..n).filter(|&w| w != master) {
        model.route(w, master, &[w, master]);
    }
    model.route(n, master, &[n]);
    model
}

/// The arithmetic mean of `xs` (0 when empty).
fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// The work-rate model's advice for the `procs` processes of the master/worker program `mw`
/// on `machine` (`None` when the machine has no hosts or the program no workers).
pub fn advise(mw: &MasterWorker, procs: usize, machine: &Machine) -> Option<WorkRateAdvice> {
    let n = machine.hosts.len();
    if n == 0 || mw.workers.is_empty() {
        return None;
    }
    let worker_cpu = mean(&mw.worker_seconds_per_task).max(1e-12);
    let (master_host, choice) = (0..n)
        .map(|m| (m, model(mw, machine, m).with_master(m)))
        .max_by(|(a, x), (b, y)| x.rate.total_cmp(&y.rate).then(b.cmp(a)))?;
    // The cores each machine host works with in the flow (the extra host is the master's).
    let mut cores = vec![0.0; n];
    for &w in &choice.workers {
        let host = if w == n { master_host } else { w };
        cores[host] += choice.worker_rates[w] * worker_cpu / machine.hosts[host].speed;
    }
    let worker_hosts: Vec<usize> = (0..n).filter(|&h| cores[h] > 0.0).collect();
    let mut placement = vec![master_host; procs];
    let others: Vec<usize> = (0..procs).filter(|&p| p != mw.master as usize).collect();
    for (p, h) in others.iter().zip(share(others.len(), &cores)) {
        placement[*p] = h;
    }
    Some(WorkRateAdvice {
        master_host,
        worker_hosts,
        rate: choice.rate,
        seconds: mw.tasks as f64 / choice.rate.max(1e-12),
        placement,
    })
}

/// `count` processes shared among hosts in proportion to `weights` (largest remainder),
/// in host order; all on host 0 when every weight is 0.
fn share(count: usize, weights: &[f64]) -> Vec<usize> {
    let total: f64 = weights.iter().sum();
    if total <= 0.0 {
        return vec![0; count];
    }
    let quota: Vec<f64> = weights.iter().map(|w| w / total * count as f64).collect();
    let mut counts: Vec<usize> = quota.iter().map(|q| q.floor() as usize).collect();
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    by_remainder.sort_by(|&a, &b| {
        (quota[b] - quota[b].floor())
            .total_cmp(&(quota[a] - quota[a].floor()))
            .then(a.cmp(&b))
    });
    let left = count - counts.iter().sum::<usize>();
    for &h in by_remainder.iter().take(left) {
        counts[h] += 1;
    }
    counts
        .iter()
        .enumerate()
        .flat_map(|(h, &c)| std::iter::repeat_n(h, c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::search::Host;
    use crate::target::{CommTable, Network};

    /// A master (process 0) and `workers` workers: 1 ms of master CPU and 10 ms of worker
    /// CPU per task, 100 tasks of 1000 bytes.
    fn program(workers: u32) -> MasterWorker {
        MasterWorker {
            master: 0,
            workers: (1..=workers).collect(),
            tasks: 100,
            master_seconds_per_task: 0.001,
            worker_seconds_per_task: vec![0.010; workers as usize],
            bytes_per_task: 1000.0,
        }
    }

    fn machine(hosts: &[(u32, f64)], remote: f64) -> Machine {
        Machine {
            hosts: hosts
                .iter()
                .enumerate()
                .map(|(i, &(cores, speed))| Host {
                    name: format!("h{i}"),
                    cores,
                    speed,
                })
                .collect(),
            network: Network {
                local: CommTable::default(),
                remote: CommTable::new(vec![(0.0, remote)]).unwrap(),
            },
            spin: 0.0,
            bind_to_cores: false,
        }
    }

    /// Two fast 2-core hosts and a slow one over a free network: the master on a fast host,
    /// every host works, each with a process per core it works with.
    #[test]
    fn the_master_goes_fast_and_workers_follow_the_rates() {
        let m = machine(&[(2, 0.25), (2, 1.0), (2, 1.0)], 0.0);
        let a = advise(&program(5), 6, &m).unwrap();
        assert_eq!(a.master_host, 1, "{a:?}");
        assert_eq!(a.placement[0], 1);
        // Rates: host 0 works at 2 × 0.25 / 0.01 = 50, host 2 at 200, host 1's other core
        // at 100: 350 tasks/s, 100 tasks in 2/7 s.
        assert!((a.rate - 350.0).abs() < 1e-6, "{a:?}");
        assert!((a.seconds - 100.0 / 350.0).abs() < 1e-9, "{a:?}");
        assert_eq!(a.worker_hosts, [0, 1, 2]);
        // Cores worked: 2 on host 0 (slow but full), 1 on host 1, 2 on host 2: five workers.
        let on = |h: usize| a.placement[1..].iter().filter(|&&x| x == h).count();
        assert_eq!((on(0), on(1), on(2)), (2, 1, 2), "{a:?}");
    }

    /// A slow network: each remote host's link carries at most 1 / 50 ms = 20 tasks/s, so
    /// a remote host adds only that and the master's own other cores do most of the work.
    #[test]
    fn a_slow_link_keeps_workers_with_the_master() {
        let m = machine(&[(4, 1.0), (4, 1.0)], 0.050);
        let a = advise(&program(6), 7, &m).unwrap();
        // Master host: 3 other cores at 100 each; the other host: 20 through the links.
        assert!((a.rate - 320.0).abs() < 1e-6, "{a:?}");
        let on_master = a.placement.iter().filter(|&&h| h == a.master_host).count();
        assert!(on_master >= 6, "most workers with the master: {a:?}");
    }

    #[test]
    fn shares_follow_weights_by_largest_remainder() {
        assert_eq!(share(5, &[1.0, 0.0, 1.5]), [0, 0, 2, 2, 2]);
        assert_eq!(share(3, &[0.0, 0.0]), [0, 0, 0]);
        assert_eq!(share(4, &[1.0, 1.0, 1.0, 1.0]), [0, 1, 2, 3]);
    }
}
