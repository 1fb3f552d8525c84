//! Target configurations: where each process would run and over which network.
//!
//! A [`Target`] is what a "what if" question asks about: a placement of processes onto nodes
//! (LBF) and a pair of communication cost tables (NF). This module only models targets; reading
//! them from TOML files or command-line short forms lives in the `config` module.

use crate::event::ProcId;

/// One node of a target: the processes it runs and how fast it runs them.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The processes placed on this node.
    pub procs: Vec<ProcId>,
    /// Number of cores; runnable processes share them equally.
    pub cores: u32,
    /// Relative speed: 2.0 runs the same CPU work in half the time.
    pub speed: f64,
}

impl Node {
    /// A one-core node of speed 1 running `procs`.
    pub fn new(procs: Vec<ProcId>) -> Self {
        Node {
            procs,
            cores: 1,
            speed: 1.0,
        }
    }

    /// A node of `cores` and `speed` with no process yet, to place processes on.
    pub fn idle(cores: u32, speed: f64) -> Self {
        Node {
            procs: Vec::new(),
            cores,
            speed,
        }
    }

    /// Rate at which each of `runnable` processes progresses, in CPU-seconds per second:
    /// `speed * min(1, cores / runnable)` (processor sharing with an infinitely small quantum).
    pub fn rate(&self, runnable: usize) -> f64 {
        if runnable == 0 {
            return self.speed;
        }
        self.speed * f64::min(1.0, self.cores as f64 / runnable as f64)
    }
}

/// A message-size to one-way-time table (paper section 2.2).
///
/// Lookups interpolate linearly between points, extrapolate linearly past the last two points,
/// and return the first point's value below it. An empty table costs nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommTable {
    /// `(bytes, one-way seconds)`, sorted by bytes, bytes distinct.
    points: Vec<(f64, f64)>,
}

/// Why a table could not be built.
#[derive(Debug, Clone, PartialEq)]
pub enum TableError {
    /// A size or time is negative, infinite or NaN.
    NotFinite {
        /// Index of the offending point.
        index: usize,
    },
    /// Two points have the same size.
    DuplicateSize {
        /// The repeated size in bytes.
        bytes: f64,
    },
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::NotFinite { index } => write!(
                f,
                "point {index} of the table is not a pair of finite, non-negative numbers"
            ),
            TableError::DuplicateSize { bytes } => {
                write!(f, "the table lists {bytes} bytes twice")
            }
        }
    }
}

impl std::error::Error for TableError {}

impl CommTable {
    /// Builds a table from `(bytes, seconds)` points in any order.
    pub fn new(mut points: Vec<(f64, f64)>) -> Result<Self, TableError> {
        for (index, &(b, s)) in points.iter().enumerate() {
            if !(b.is_finite() && s.is_finite() && b >= 0.0 && s >= 0.0) {
                return Err(TableError::NotFinite { index });
            }
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(w) = points.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(TableError::DuplicateSize { bytes: w[0].0 });
        }
        Ok(CommTable { points })
    }

    /// The table's points, sorted by size.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// One-way time in seconds for a message of `bytes`.
    pub fn seconds(&self, bytes: u64) -> f64 {
        let x = bytes as f64;
        let p = &self.points;
        match p.len() {
            0 => 0.0,
            1 => p[0].1,
            n => {
                if x <= p[0].0 {
                    return p[0].1;
                }
                // First point at or beyond x; past the end, extrapolate from the last two.
                let i = p.partition_point(|&(b, _)| b < x).clamp(1, n - 1);
                let (x0, y0) = p[i - 1];
                let (x1, y1) = p[i];
                let y = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
                y.max(0.0)
            }
        }
    }
}

/// The communication costs of a target: one table within a node, one between nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Network {
    /// Cost when sender and receiver share a node.
    pub local: CommTable,
    /// Cost when they do not.
    pub remote: CommTable,
}

/// A target configuration: a placement of every process onto nodes, and a network.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// Shown in reports.
    pub name: String,
    /// The nodes; every process of the trace must be on exactly one.
    pub nodes: Vec<Node>,
    /// The communication costs.
    pub network: Network,
    /// How much a waiting process loads its node, from 0 to 1. MPI libraries poll while they
    /// wait: on a node with more runnable processes than cores, a polling process takes CPU
    /// from those with work to do. 0 is the paper's model (a waiting process uses no CPU); 1 a
    /// process that polls as hard as a computing one; in between, one that yields the CPU now
    /// and then. Matters only on oversubscribed nodes.
    pub spin: f64,
    /// The scheduler-aware node model, if the target asks for it: cores handed out in time
    /// slices instead of shared continuously (see [`Scheduler`]). `None` is the paper's
    /// model, processor sharing with an infinitely small quantum, with `spin` as the load of
    /// waiting processes.
    pub scheduler: Option<Scheduler>,
    /// Whether each process is bound to one core of its node (`mpirun --bind-to core`,
    /// `taskset`), instead of running on whichever core is free. The processes listed on a
    /// node are dealt out to its cores in turn: the `i`th on core `i % cores`. Each core then
    /// shares itself among its own processes only, while another core of the node may sit
    /// idle. Linux comes close to this without any binding when every process stays runnable
    /// (MPI ranks polling while they wait): its load balancer sees as many runnable processes
    /// on each core and moves none. Messages between the cores of a node stay local.
    pub bind_to_cores: bool,
    /// Changes to traced procedures (moved, zeroed, sped up); empty for a plain placement and
    /// network.
    pub procedures: Vec<crate::procedure::ProcedureChange>,
}

/// How an operating system's scheduler hands out an oversubscribed node's cores: in slices,
/// to processes that keep a core until their slice ends or they give it up. Waiting
/// processes that poll then hold a core while they wait, and a message handed between two
/// processes sharing a core waits for the scheduler. `docs/engine.md` defines the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scheduler {
    /// Length of a time slice, in seconds: how long a process keeps a core that others are
    /// queued for. Linux preempts at its timer tick, 4 ms with `CONFIG_HZ=250`.
    pub slice: f64,
    /// What a waiting process does with its core.
    pub wait: Wait,
}

impl Scheduler {
    /// The default slice: one timer tick of a Linux kernel built with `CONFIG_HZ=250`.
    pub const DEFAULT_SLICE: f64 = 0.004;
}

/// What a waiting process does with its core under the [`Scheduler`] model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Wait {
    /// It polls, keeping its core until its slice ends (MPICH's default; Open MPI with no
    /// more processes than cores).
    Spin,
    /// It gives its core up at once, to the next process queued for it, and queues again
    /// when its wait is answered (Open MPI on an oversubscribed node, which yields while it
    /// polls; a process blocked in the kernel).
    Yield,
}

impl std::str::FromStr for Wait {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "spin" => Ok(Wait::Spin),
            "yield" => Ok(Wait::Yield),
            _ => Err(format!(
                "unknown wait \"{s}\": \"spin\" (a waiting process polls, holding its core) or \
                 \"yield\" (it gives its core up)"
            )),
        }
    }
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wait::Spin => "spin",
            Wait::Yield => "yield",
        })
    }
}

/// The most nodes a target may have: a count given on a command line or in a file is checked
/// against it before anything is allocated for it.
pub const MAX_NODES: u32 = 1 << 20;

/// The most processes a job may have (a cluster builder's `[job] procs`, a trace's header).
pub const MAX_PROCS: usize = 1 << 20;

/// Why a target cannot run a trace: what [`Target::placement`] found wrong. Its `Display` is
/// worded for a person editing a target file or a command line: it names the culprit and what
/// to do.
#[derive(Clone, Debug, PartialEq)]
pub enum PlacementError {
    /// `spin` is outside 0..=1.
    Spin(f64),
    /// Both a fluid `spin` and a [`Scheduler`], whose wait replaces it.
    SpinWithScheduler,
    /// The scheduler's slice is not a positive number of seconds.
    Slice(f64),
    /// Node `node` has no cores.
    NoCores {
        /// The node's index.
        node: usize,
    },
    /// Node `node` has a speed that is not a positive number.
    Speed {
        /// The node's index.
        node: usize,
        /// Its speed.
        speed: f64,
    },
    /// Node `node` lists a process the trace does not have.
    UnknownProcess {
        /// The node's index.
        node: usize,
        /// The process it lists.
        proc: ProcId,
        /// How many processes the trace has.
        num_procs: usize,
    },
    /// A process is on two nodes.
    TwoNodes {
        /// The process.
        proc: ProcId,
        /// The first node it is on.
        first: usize,
        /// The second.
        second: usize,
    },
    /// These processes are on no node.
    Homeless(Vec<ProcId>),
}

impl std::fmt::Display for PlacementError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlacementError::Spin(spin) => write!(
                f,
                "spin is {spin}; it must be between 0 (waiting uses no CPU) and 1 (waiting polls \
                 as hard as computing)"
            ),
            PlacementError::SpinWithScheduler => write!(
                f,
                "the target gives both spin and a scheduler; with a scheduler, its wait (spin or \
                 yield) says what waiting processes do: leave spin out"
            ),
            PlacementError::Slice(slice) => write!(
                f,
                "the scheduler's slice is {slice} s; it must be a positive number of seconds \
                 (Linux: one timer tick, 0.004 with CONFIG_HZ=250)"
            ),
            PlacementError::NoCores { node } => {
                write!(f, "node {node} has 0 cores; give it at least 1")
            }
            PlacementError::Speed { node, speed } => {
                write!(f, "node {node} has speed {speed}; it must be positive")
            }
            PlacementError::UnknownProcess {
                node,
                proc,
                num_procs,
            } => write!(
                f,
                "node {node} lists process {proc}, but the trace has only {num_procs} processes \
                 (ids 0 to {})",
                num_procs.saturating_sub(1)
            ),
            PlacementError::TwoNodes {
                proc,
                first,
                second,
            } => write!(
                f,
                "process {proc} is on node {first} and on node {second}; put it on one"
            ),
            PlacementError::Homeless(procs) => {
                let ids: Vec<String> = procs.iter().map(u32::to_string).collect();
                let (one, are, them) = if procs.len() == 1 {
                    ("process", "is", "it")
                } else {
                    ("processes", "are", "them")
                };
                write!(
                    f,
                    "{one} {} {are} on no node; add {them} to a node's procs",
                    ids.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for PlacementError {}

impl Target {
    /// The node of each process `0..num_procs`, checking what the engine relies on: spin in
    /// 0..=1 (and 0 with a scheduler, whose slice is positive), every node with a core and a positive, finite speed, every process on exactly
    /// one node.
    pub fn placement(&self, num_procs: usize) -> Result<Vec<usize>, PlacementError> {
        if !(0.0..=1.0).contains(&self.spin) {
            return Err(PlacementError::Spin(self.spin));
        }
        if let Some(scheduler) = &self.scheduler {
            if self.spin != 0.0 {
                return Err(PlacementError::SpinWithScheduler);
            }
            if !(scheduler.slice.is_finite() && scheduler.slice > 0.0) {
                return Err(PlacementError::Slice(scheduler.slice));
            }
        }
        let mut node_of = vec![usize::MAX; num_procs];
        for (n, node) in self.nodes.iter().enumerate() {
            if node.cores == 0 {
                return Err(PlacementError::NoCores { node: n });
            }
            if !(node.speed.is_finite() && node.speed > 0.0) {
                return Err(PlacementError::Speed {
                    node: n,
                    speed: node.speed,
                });
            }
            for &proc in &node.procs {
                let slot =
                    node_of
                        .get_mut(proc as usize)
                        .ok_or(PlacementError::UnknownProcess {
                            node: n,
                            proc,
                            num_procs,
                        })?;
                if *slot != usize::MAX {
                    return Err(PlacementError::TwoNodes {
                        proc,
                        first: *slot,
                        second: n,
                    });
                }
                *slot = n;
            }
        }
        let homeless: Vec<ProcId> = (0..num_procs)
            .filter(|&p| node_of[p] == usize::MAX)
            .map(|p| p as ProcId)
            .collect();
        if !homeless.is_empty() {
            return Err(PlacementError::Homeless(homeless));
        }
        Ok(node_of)
    }

    /// The groups of processes that share cores, each with the index of its node: every node
    /// whole or, with [`Target::bind_to_cores`], every core of every node as a one-core group
    /// of the processes dealt to it (the `i`th process listed on the node on core
    /// `i % cores`). Assumes a valid [`Target::placement`].
    pub fn core_groups(&self) -> Vec<(usize, Node)> {
        if !self.bind_to_cores {
            return self.nodes.iter().cloned().enumerate().collect();
        }
        let mut groups = Vec::new();
        for (n, node) in self.nodes.iter().enumerate() {
            let cores = node.cores as usize;
            if node.procs.len() <= cores {
                groups.push((n, node.clone()));
                continue;
            }
            groups.extend((0..cores).map(|c| {
                let procs = node.procs.iter().skip(c).step_by(cores).copied().collect();
                (
                    n,
                    Node {
                        procs,
                        cores: 1,
                        speed: node.speed,
                    },
                )
            }));
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(points: &[(f64, f64)]) -> CommTable {
        CommTable::new(points.to_vec()).unwrap()
    }

    #[test]
    fn bound_processes_are_dealt_out_to_their_nodes_cores_in_turn() {
        let node = |procs: Vec<ProcId>, cores| Node {
            procs,
            cores,
            speed: 2.0,
        };
        let mut target = Target {
            name: "t".into(),
            nodes: vec![node(vec![0, 2, 1, 3, 4], 2), node(vec![5, 6], 2)],
            network: Network::default(),
            spin: 0.0,
            scheduler: None,
            bind_to_cores: false,
            procedures: Vec::new(),
        };
        assert_eq!(
            target.core_groups(),
            vec![(0, target.nodes[0].clone()), (1, target.nodes[1].clone())]
        );
        target.bind_to_cores = true;
        let one_core = |procs| Node {
            procs,
            cores: 1,
            speed: 2.0,
        };
        assert_eq!(
            target.core_groups(),
            vec![
                (0, one_core(vec![0, 1, 4])),
                (0, one_core(vec![2, 3])),
                // No more processes than cores: each has one already.
                (1, node(vec![5, 6], 2)),
            ]
        );
    }

    #[test]
    fn empty_table_costs_nothing() {
        assert_eq!(CommTable::default().seconds(1 << 20), 0.0);
    }

    #[test]
    fn single_point_is_constant() {
        let table = t(&[(100.0, 2e-6)]);
        assert_eq!(table.seconds(0), 2e-6);
        assert_eq!(table.seconds(1_000_000), 2e-6);
    }

    #[test]
    fn interpolates_between_points() {
        let table = t(&[(0.0, 1e-6), (1000.0, 11e-6), (2000.0, 31e-6)]);
        assert!((table.seconds(500) - 6e-6).abs() < 1e-15);
        assert!((table.seconds(1500) - 21e-6).abs() < 1e-15);
        assert_eq!(table.seconds(1000), 11e-6);
    }

    #[test]
    fn below_first_point_takes_its_value() {
        let table = t(&[(100.0, 5e-6), (200.0, 7e-6)]);
        assert_eq!(table.seconds(0), 5e-6);
        assert_eq!(table.seconds(100), 5e-6);
    }

    #[test]
    fn extrapolates_past_the_last_two_points() {
        let table = t(&[(0.0, 1e-6), (1000.0, 11e-6), (2000.0, 31e-6)]);
        // slope of the last segment is 20e-9 per byte
        assert!((table.seconds(3000) - 51e-6).abs() < 1e-15);
    }

    #[test]
    fn points_are_sorted_and_validated() {
        let table = t(&[(2000.0, 3.0), (0.0, 1.0)]);
        assert_eq!(table.points(), &[(0.0, 1.0), (2000.0, 3.0)]);
        assert_eq!(
            CommTable::new(vec![(1.0, 1.0), (1.0, 2.0)]),
            Err(TableError::DuplicateSize { bytes: 1.0 })
        );
        assert_eq!(
            CommTable::new(vec![(1.0, f64::NAN)]),
            Err(TableError::NotFinite { index: 0 })
        );
    }

    #[test]
    fn rate_shares_cores() {
        let node = Node {
            procs: vec![],
            cores: 2,
            speed: 1.5,
        };
        assert_eq!(node.rate(1), 1.5);
        assert_eq!(node.rate(2), 1.5);
        assert_eq!(node.rate(4), 0.75);
    }
}
