//! Deterministic synthetic traces of any length, generated on the fly (memory does not grow
//! with the length), for benchmarks and tests.
//!
//! The program is a sequence of phases drawn by a seeded generator: halo exchanges on a ring,
//! master-worker rounds (process 0 hands out tasks and collects results), and collectives. Every
//! process sends before it receives in a halo phase, the master sends every task before it
//! collects any result, and every process joins every collective, so the program is
//! deadlock-free by construction. Compute stretches are split by keepalives, as a live capture
//! would.
//!
//! Events come phase by phase and, within a phase, process by process, so an online engine
//! never has to queue more than about one phase of events.

use super::Header;
use crate::event::{CollOp, Event, EventKind, ProcId, ProcInfo};

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Number of processes (at least 2).
    pub procs: u32,
    /// Minimum number of events: generation stops at the first phase boundary at or past it,
    /// then every process exits.
    pub events: u64,
    /// Seed of the generator: the same config gives the same trace.
    pub seed: u64,
}

/// The header of the trace `config` generates: processes `rank0`, `rank1`, ... on host
/// `synthetic`.
pub fn header(config: &Config) -> Header {
    let procs = (0..config.procs)
        .map(|id| ProcInfo {
            id,
            name: format!("rank{id}"),
            host: "synthetic".into(),
            ..Default::default()
        })
        .collect();
    Header {
        procs,
        source: None,
        procedures: Vec::new(),
    }
}

/// The events of the trace `config` describes, in an order a live capture could deliver.
pub fn events(config: Config) -> Synthetic {
    assert!(
        config.procs >= 2,
        "a synthetic trace needs at least 2 processes"
    );
    Synthetic {
        config,
        rng: SplitMix64::new(config.seed),
        phase: Phase::Exit,
        next_proc: config.procs,
        next_msg: 0,
        next_coll: 0,
        emitted: 0,
        buf: Vec::with_capacity(3 * config.procs as usize),
        pos: 0,
    }
}

/// The iterator returned by [`events`].
pub struct Synthetic {
    config: Config,
    rng: SplitMix64,
    phase: Phase,
    /// The process whose part of the current phase comes next.
    next_proc: u32,
    /// First message id of the current phase.
    next_msg: u64,
    next_coll: u64,
    emitted: u64,
    /// Events of one process in the current phase, and how many of them are out.
    buf: Vec<Event>,
    pos: usize,
}

/// One phase of the synthetic program; every process takes part in each.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Each process sends to both ring neighbours, then receives from both.
    Halo { bytes: u64 },
    /// Process 0 sends a task to every other process, then collects one result from each.
    MasterWorker { task_bytes: u64, result_bytes: u64 },
    /// All processes run one collective.
    Collective { op: CollOp, bytes: u64 },
    /// Every process exits; the trace ends.
    Exit,
}

impl Iterator for Synthetic {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        while self.pos == self.buf.len() {
            if self.next_proc == self.config.procs {
                if matches!(self.phase, Phase::Exit) && self.emitted > 0 {
                    return None;
                }
                self.start_phase();
            }
            self.buf.clear();
            self.pos = 0;
            let proc = self.next_proc;
            self.next_proc += 1;
            self.script(proc);
        }
        self.pos += 1;
        self.emitted += 1;
        Some(self.buf[self.pos - 1])
    }
}

impl Synthetic {
    /// Advances ids past the finished phase and draws the next one.
    fn start_phase(&mut self) {
        let n = self.config.procs as u64;
        match self.phase {
            Phase::Halo { .. } => self.next_msg += 2 * n,
            Phase::MasterWorker { .. } => self.next_msg += 2 * (n - 1),
            Phase::Collective { .. } => self.next_coll += 1,
            Phase::Exit => {}
        }
        self.next_proc = 0;
        self.phase = if self.emitted >= self.config.events {
            Phase::Exit
        } else {
            match self.rng.below(100) {
                0..60 => Phase::Halo {
                    bytes: 1024 * (1 + self.rng.below(64)),
                },
                60..85 => Phase::MasterWorker {
                    task_bytes: 1024 * (1 + self.rng.below(1024)),
                    result_bytes: 8 * (1 + self.rng.below(128)),
                },
                _ => {
                    let ops = [
                        CollOp::Barrier,
                        CollOp::Bcast,
                        CollOp::Reduce,
                        CollOp::Allreduce,
                    ];
                    let op = ops[self.rng.below(4) as usize];
                    Phase::Collective {
                        op,
                        bytes: 8 * (1 + self.rng.below(1024)),
                    }
                }
            }
        };
    }

    /// Fills `buf` with `proc`'s events of the current phase.
    fn script(&mut self, proc: ProcId) {
        let n = self.config.procs;
        let m = self.next_msg;
        match self.phase {
            Phase::Halo { bytes } => {
                let right = (proc + 1) % n;
                let left = (proc + n - 1) % n;
                self.compute(proc);
                self.push(
                    proc,
                    EventKind::Send {
                        after: 0,
                        msg: m + 2 * proc as u64,
                        bytes,
                        rendezvous: false,
                    },
                );
                self.push(
                    proc,
                    EventKind::Send {
                        after: 0,
                        msg: m + 2 * proc as u64 + 1,
                        bytes,
                        rendezvous: false,
                    },
                );
                self.receive(proc, m + 2 * left as u64);
                self.receive(proc, m + 2 * right as u64 + 1);
            }
            Phase::MasterWorker { task_bytes, .. } if proc == 0 => {
                for w in 1..n as u64 {
                    self.push(
                        0,
                        EventKind::Send {
                            after: 0,
                            msg: m + w - 1,
                            bytes: task_bytes,
                            rendezvous: false,
                        },
                    );
                }
                for w in 1..n as u64 {
                    self.receive(0, m + n as u64 - 1 + w - 1);
                }
            }
            Phase::MasterWorker { result_bytes, .. } => {
                let w = proc as u64;
                self.receive(proc, m + w - 1);
                self.compute(proc);
                let msg = m + n as u64 - 1 + w - 1;
                self.push(
                    proc,
                    EventKind::Send {
                        after: 0,
                        msg,
                        bytes: result_bytes,
                        rendezvous: false,
                    },
                );
            }
            Phase::Collective { op, bytes } => {
                let coll = self.next_coll;
                self.compute(proc);
                self.push(
                    proc,
                    EventKind::CollStart {
                        coll,
                        op,
                        size: n,
                        bytes,
                    },
                );
                self.push_spin(proc, EventKind::CollEnd { coll });
            }
            Phase::Exit => self.push(proc, EventKind::Exit),
        }
    }

    /// A compute stretch: the keepalive's CPU plus the CPU of the event pushed next.
    fn compute(&mut self, proc: ProcId) {
        self.push(proc, EventKind::Keepalive);
    }

    /// A blocking receive of `msg`.
    fn receive(&mut self, proc: ProcId, msg: u64) {
        self.push(proc, EventKind::RecvStart);
        self.push_spin(proc, EventKind::RecvEnd { msg });
    }

    /// An event after 10 µs to 1 ms of work.
    fn push(&mut self, proc: ProcId, kind: EventKind) {
        let cpu_ns = 10_000 + self.rng.below(990_000);
        self.buf.push(Event { proc, cpu_ns, kind });
    }

    /// An event after up to 5 µs of spinning (the CPU of a wait).
    fn push_spin(&mut self, proc: ProcId, kind: EventKind) {
        let cpu_ns = self.rng.below(5_000);
        self.buf.push(Event { proc, cpu_ns, kind });
    }
}

/// The SplitMix64 generator: tiny, fast, and good enough to vary a benchmark's workload or a
/// test's cases (`cargo xtask engine-diff` draws its random traces with it too).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator started at `seed`: the same seed gives the same numbers.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }

    /// A number in `0..bound` as an index.
    pub fn index(&mut self, bound: usize) -> usize {
        self.below(bound as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.index(items.len())]
    }
}
