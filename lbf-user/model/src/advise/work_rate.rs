//! The work-rate model of master/worker programs, solved as a maximum flow.
//!
//! Tasks flow from the workers to the master (the task's data goes out and its result comes
//! back along one route; a resource counts the task once). Each worker `s` delivers at most
//! [`HostRates::worker`] tasks per second, the master at most [`HostRates::master`], and each
//! [`Resource`] on a task's route (a network segment, a link between segments) carries at
//! most its capacity. The program's rate with master `m` is the maximum flow from the workers
//! to `m` under these capacities; its run time is its tasks divided by that rate.
//!
//! Routes are given per pair of hosts. With the routes of a tree (every resource leads the
//! same way towards a master, as in the paper's logical views of local networks joined by
//! links) the flow is exact; with other routes the flow may switch routes where they share
//! a resource, and is then an upper bound.

use petgraph::algo::dinics;
use petgraph::graph::{DiGraph, NodeIndex};

/// What one host can do for a master/worker program, in tasks per second.
#[derive(Clone, Debug, PartialEq)]
pub struct HostRates {
    /// The host's name.
    pub name: String,
    /// Tasks per second it completes as a worker (its CPU per task, its availability).
    pub worker: f64,
    /// Tasks per second it serves as the master.
    pub master: f64,
}

/// A resource tasks share on their way between worker and master: a network segment or a
/// link, carrying at most `capacity` tasks per second (bandwidth over bytes per task).
#[derive(Clone, Debug, PartialEq)]
pub struct Resource {
    /// Its name.
    pub name: String,
    /// Tasks per second.
    pub capacity: f64,
}

/// The hosts, the resources and the route between every two hosts.
#[derive(Clone, Debug)]
pub struct WorkRateModel {
    hosts: Vec<HostRates>,
    resources: Vec<Resource>,
    /// The resources between two hosts, by host index pair (`None`: no route).
    routes: Vec<Vec<Option<Vec<usize>>>>,
}

/// The work-rate model's answer for one master.
#[derive(Clone, Debug, PartialEq)]
pub struct MasterChoice {
    /// The master's host, by index.
    pub master: usize,
    /// Tasks per second the program completes.
    pub rate: f64,
    /// Tasks per second each host works for it (0 for the master and hosts left out).
    pub worker_rates: Vec<f64>,
    /// The workers: the hosts that raise the rate, each needed (a host whose removal
    /// leaves the rate unchanged is left out, so that the program uses only what it needs).
    pub workers: Vec<usize>,
}

/// Relative slack under which two rates are the same (flows are sums of floats).
const SAME: f64 = 1e-9;

impl WorkRateModel {
    /// A model of `hosts` and `resources` with no routes yet.
    pub fn new(hosts: Vec<HostRates>, resources: Vec<Resource>) -> Self {
        let n = hosts.len();
        WorkRateModel {
            hosts,
            resources,
            routes: vec![vec![None; n]; n],
        }
    }

    /// The hosts.
    pub fn hosts(&self) -> &[HostRates] {
        &self.hosts
    }

    /// Tasks between hosts `a` and `b` cross `resources` (by index, in order from `a`), both
    /// ways.
    ///
    /// # Panics
    /// If a host or resource index is out of range.
    pub fn route(&mut self, a: usize, b: usize, resources: &[usize]) {
        assert!(resources.iter().all(|&r| r < self.resources.len()));
        let mut back = resources.to_vec();
        back.reverse();
        self.routes[a][b] = Some(resources.to_vec());
        self.routes[b][a] = Some(back);
    }

    /// The rate of a program whose master is host `master` and whose workers may be any of
    /// `candidates` (the master itself, and hosts with no route to it, are left out): the
    /// maximum flow, and the rate each host works at in one maximum flow.
    pub fn rate(&self, master: usize, candidates: &[usize]) -> (f64, Vec<f64>) {
        // Nodes: the source, the sink (behind the master's capacity), a node per host, and
        // an in and an out node per resource, their edge carrying its capacity.
        let mut g = DiGraph::<(), f64>::new();
        let source = g.add_node(());
        let sink = g.add_node(());
        let host: Vec<NodeIndex> = self.hosts.iter().map(|_| g.add_node(())).collect();
        let res: Vec<(NodeIndex, NodeIndex)> = self
            .resources
            .iter()
            .map(|r| {
                let (i, o) = (g.add_node(()), g.add_node(()));
                g.add_edge(i, o, r.capacity);
                (i, o)
            })
            .collect();
        g.add_edge(host[master], sink, self.hosts[master].master);
        let mut worker_edges = Vec::new();
        let mut linked = std::collections::HashSet::new();
        for &w in candidates {
            let Some(route) = self.routes[w][master].as_ref().filter(|_| w != master) else {
                continue;
            };
            worker_edges.push((w, g.add_edge(source, host[w], self.hosts[w].worker)));
            // The route's hops, each once: workers whose routes share a hop share its edge.
            let hops = std::iter::once(host[w])
                .chain(route.iter().flat_map(|&r| [res[r].0, res[r].1]))
                .chain(std::iter::once(host[master]));
            let hops: Vec<NodeIndex> = hops.collect();
            for pair in hops.windows(2) {
                let (from, to) = (pair[0], pair[1]);
                let internal = res.iter().any(|&(i, o)| (i, o) == (from, to));
                if !internal && linked.insert((from, to)) {
                    g.add_edge(from, to, f64::INFINITY);
                }
            }
        }
        let (flow, edge_flows) = dinics(&g, source, sink);
        let mut rates = vec![0.0; self.hosts.len()];
        for (w, e) in worker_edges {
            rates[w] = edge_flows[e.index()];
        }
        (flow, rates)
    }

    /// The model's answer with host `master` as the master and every other host a
    /// candidate worker: the rate, and the fewest workers that give it (hosts removed one by
    /// one, the slowest first, while the rate stays).
    pub fn with_master(&self, master: usize) -> MasterChoice {
        let all: Vec<usize> = (0..self.hosts.len()).collect();
        let (rate, mut worker_rates) = self.rate(master, &all);
        let mut workers: Vec<usize> = all
            .into_iter()
            .filter(|&h| h != master && worker_rates[h] > 0.0)
            .collect();
        workers.sort_by(|&a, &b| self.hosts[a].worker.total_cmp(&self.hosts[b].worker));
        let mut i = 0;
        while i < workers.len() {
            let without: Vec<usize> = workers
                .iter()
                .copied()
                .filter(|&h| h != workers[i])
                .collect();
            let (r, rates) = self.rate(master, &without);
            if r >= rate * (1.0 - SAME) {
                workers = without;
                worker_rates = rates;
            } else {
                i += 1;
            }
        }
        workers.sort_unstable();
        MasterChoice {
            master,
            rate,
            worker_rates,
            workers,
        }
    }

    /// Every host as the master, best (highest rate) first; ties go to the lower index.
    pub fn choices(&self) -> Vec<MasterChoice> {
        let mut all: Vec<MasterChoice> =
            (0..self.hosts.len()).map(|m| self.with_master(m)).collect();
        all.sort_by(|a, b| b.rate.total_cmp(&a.rate).then(a.master.cmp(&b.master)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's Fig. 1: hosts A and B on local network Net1, C and D on Net2, the two
    /// networks joined by link Net3 (capacities in tasks per second; the figure's values,
    /// as Table 2 and the text of section 4.1 give them).
    fn figure_1() -> WorkRateModel {
        let host = |name: &str, worker: f64, master: f64| HostRates {
            name: name.into(),
            worker,
            master,
        };
        let net = |name: &str, capacity: f64| Resource {
            name: name.into(),
            capacity,
        };
        let mut m = WorkRateModel::new(
            vec![
                host("A", 80.0, 200.0),
                host("B", 60.0, 150.0),
                host("C", 50.0, 60.0),
                host("D", 10.0, 90.0),
            ],
            vec![net("Net1", 140.0), net("Net2", 100.0), net("Net3", 50.0)],
        );
        let (net1, net2, net3) = (0, 1, 2);
        m.route(0, 1, &[net1]);
        m.route(2, 3, &[net2]);
        for a in [0, 1] {
            for c in [2, 3] {
                m.route(a, c, &[net1, net3, net2]);
            }
        }
        m
    }

    /// Table 2: the rate for each master, and B the best with 130 tasks per second.
    #[test]
    fn the_papers_master_selection_example() {
        let m = figure_1();
        let rates: Vec<f64> = (0..4).map(|h| m.with_master(h).rate).collect();
        assert_eq!(rates, [110.0, 130.0, 60.0, 90.0]);
        let best = &m.choices()[0];
        assert_eq!((best.master, best.rate), (1, 130.0));
        // Table 2's row B: A works at 80 and C at 50; D adds nothing (Net3 is full) and is
        // left out.
        assert_eq!(best.worker_rates, [80.0, 0.0, 50.0, 0.0]);
        assert_eq!(best.workers, [0, 2]);
        // Row A: B at 60, C at 50 through Net3; D left out.
        let a = m.with_master(0);
        assert_eq!(a.worker_rates, [0.0, 60.0, 50.0, 0.0]);
        assert_eq!(a.workers, [1, 2]);
        // Row C: bounded by C's own capacity as master (60): D's 10 and 50 from A or B.
        let c = m.with_master(2);
        assert_eq!(c.worker_rates.iter().sum::<f64>(), 60.0);
        assert_eq!(c.worker_rates[3], 10.0);
    }

    /// A worker without a route to the master, and the master itself, add nothing.
    #[test]
    fn unrouted_hosts_and_the_master_do_not_work() {
        let mut m = figure_1();
        m.routes[3][1] = None;
        m.routes[1][3] = None;
        let (rate, rates) = m.rate(1, &[0, 1, 2, 3]);
        assert_eq!(rate, 130.0);
        assert_eq!(rates[1], 0.0);
        assert_eq!(rates[3], 0.0);
    }

    /// The master's own capacity bounds the rate whatever the workers could do.
    #[test]
    fn a_slow_master_bounds_the_rate() {
        let mut m = figure_1();
        m.hosts[1].master = 20.0;
        let b = m.with_master(1);
        assert_eq!(b.rate, 20.0);
        assert_eq!(b.workers.len(), 1, "one worker suffices: {b:?}");
    }
}
