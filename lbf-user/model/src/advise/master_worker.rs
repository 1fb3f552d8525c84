//! Recognising a master/worker program in its events, and its per-task figures for the
//! work-rate model ([`super::work_rate`]).
//!
//! A program is master/worker when one process (the master) exchanges messages with every
//! other and no two others exchange any. A task is one message from the master to a worker;
//! its figures are averages over the run: the master's CPU per task, each worker's CPU per
//! task it received, and the bytes each task moves both ways. Collectives are allowed (a
//! start-up broadcast, a final barrier) and their CPU counted; the waiting CPU of blocking
//! calls is not work (as in the engine).

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use crate::event::{Event, EventKind, MsgId, ProcId};

/// A master/worker program's figures, read from its events.
#[derive(Clone, Debug, PartialEq)]
pub struct MasterWorker {
    /// The master.
    pub master: ProcId,
    /// The workers, by id.
    pub workers: Vec<ProcId>,
    /// Tasks: messages from the master to the workers.
    pub tasks: u64,
    /// The master's CPU seconds per task.
    pub master_seconds_per_task: f64,
    /// Each worker's CPU seconds per task it received, in the order of `workers`.
    pub worker_seconds_per_task: Vec<f64>,
    /// Bytes per task, both ways (the task's data and its result).
    pub bytes_per_task: f64,
}

/// Why events are not those of a master/worker program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotMasterWorker {
    /// Fewer than three processes exchanged messages (a master needs two workers to be
    /// told from a pair).
    TooFewProcesses,
    /// Two processes other than any master candidate exchange messages.
    WorkersTalk {
        /// One of them.
        a: ProcId,
        /// The other.
        b: ProcId,
    },
    /// No process exchanges messages with every other.
    NoMaster,
    /// The declared master is not one of the trace's processes.
    NoSuchProcess {
        /// The declared master.
        master: ProcId,
        /// The trace's processes.
        procs: usize,
    },
    /// The declared master exchanges no messages.
    Silent {
        /// The declared master.
        master: ProcId,
    },
}

impl fmt::Display for NotMasterWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotMasterWorker::TooFewProcesses => {
                f.write_str("fewer than three processes exchange messages")
            }
            NotMasterWorker::WorkersTalk { a, b } => write!(
                f,
                "processes {a} and {b} exchange messages, and neither exchanges with every \
                 other process: not master/worker"
            ),
            NotMasterWorker::NoMaster => {
                f.write_str("no process exchanges messages with every other: not master/worker")
            }
            NotMasterWorker::NoSuchProcess { master, procs } => write!(
                f,
                "process {master} is not in the trace (its processes are 0 to {}): give \
                 --master one of them",
                procs.saturating_sub(1)
            ),
            NotMasterWorker::Silent { master } => write!(
                f,
                "process {master} exchanges no messages, so it has no workers: give --master \
                 the process that hands out the tasks"
            ),
        }
    }
}

impl std::error::Error for NotMasterWorker {}

/// Counts one message of `bytes` from `from` to `to`.
fn count(pairs: &mut HashMap<(ProcId, ProcId), (u64, u64)>, from: ProcId, to: ProcId, bytes: u64) {
    let e = pairs.entry((from, to)).or_default();
    e.0 += 1;
    e.1 += bytes;
}

/// Messages and bytes between each ordered pair (sender, receiver), and each process's
/// work (CPU not spent waiting in a blocking call), from the events of `procs` processes.
type Tally = (HashMap<(ProcId, ProcId), (u64, u64)>, Vec<u64>);

/// Reads the events of `procs` processes (in any order that keeps each process's own
/// order) into a [`Tally`].
fn tally<'a>(procs: usize, events: impl IntoIterator<Item = &'a Event>) -> Tally {
    let mut sends: HashMap<MsgId, (ProcId, u64)> = HashMap::new();
    let mut pairs: HashMap<(ProcId, ProcId), (u64, u64)> = HashMap::new();
    let mut work_ns = vec![0u64; procs];
    let mut pending_recvs: HashMap<MsgId, ProcId> = HashMap::new();
    for e in events {
        let waiting = matches!(
            e.kind,
            EventKind::RecvEnd { .. } | EventKind::SendEnd { .. } | EventKind::CollEnd { .. }
        );
        if !waiting {
            if let Some(w) = work_ns.get_mut(e.proc as usize) {
                *w += e.cpu_ns;
            }
        }
        match e.kind {
            EventKind::Send { msg, bytes, .. } => match pending_recvs.remove(&msg) {
                Some(to) => count(&mut pairs, e.proc, to, bytes),
                None => {
                    sends.insert(msg, (e.proc, bytes));
                }
            },
            EventKind::RecvEnd { msg } => match sends.remove(&msg) {
                Some((from, bytes)) => count(&mut pairs, from, e.proc, bytes),
                None => {
                    pending_recvs.insert(msg, e.proc);
                }
            },
            _ => {}
        }
    }
    (pairs, work_ns)
}

/// Who exchanges messages with whom, either way, by process.
fn peers(procs: usize, pairs: &HashMap<(ProcId, ProcId), (u64, u64)>) -> Vec<BTreeSet<ProcId>> {
    let mut peers: Vec<BTreeSet<ProcId>> = vec![BTreeSet::new(); procs];
    for &(a, b) in pairs.keys() {
        if (a as usize) < procs && (b as usize) < procs && a != b {
            peers[a as usize].insert(b);
            peers[b as usize].insert(a);
        }
    }
    peers
}

/// Reads the events of `procs` processes (in any order that keeps each process's own
/// order) and tells whether they are a master/worker program's, with its figures.
pub fn recognise<'a>(
    procs: usize,
    events: impl IntoIterator<Item = &'a Event>,
) -> Result<MasterWorker, NotMasterWorker> {
    let (pairs, work_ns) = tally(procs, events);
    let peers = peers(procs, &pairs);
    let talking: Vec<ProcId> = (0..procs as ProcId)
        .filter(|&p| !peers[p as usize].is_empty())
        .collect();
    if talking.len() < 3 {
        return Err(NotMasterWorker::TooFewProcesses);
    }
    let master = talking
        .iter()
        .copied()
        .find(|&m| peers[m as usize].len() == talking.len() - 1)
        .ok_or(NotMasterWorker::NoMaster)?;
    for &a in &talking {
        if let Some(&b) = peers[a as usize]
            .iter()
            .find(|&&b| a != master && b != master)
        {
            return Err(NotMasterWorker::WorkersTalk { a, b });
        }
    }
    let workers: Vec<ProcId> = talking.into_iter().filter(|&p| p != master).collect();
    Ok(figures(master, workers, &pairs, &work_ns))
}

/// The figures of a program whose master is declared to be `master` (for programs that
/// [`recognise`] does not take for master/worker, such as workers that also exchange among
/// themselves): its workers are the processes it exchanges messages with.
pub fn declared<'a>(
    procs: usize,
    events: impl IntoIterator<Item = &'a Event>,
    master: ProcId,
) -> Result<MasterWorker, NotMasterWorker> {
    let (pairs, work_ns) = tally(procs, events);
    let workers: Vec<ProcId> = peers(procs, &pairs)
        .get(master as usize)
        .ok_or(NotMasterWorker::NoSuchProcess { master, procs })?
        .iter()
        .copied()
        .collect();
    if workers.is_empty() {
        return Err(NotMasterWorker::Silent { master });
    }
    Ok(figures(master, workers, &pairs, &work_ns))
}

/// The per-task figures of `master` and `workers`.
fn figures(
    master: ProcId,
    workers: Vec<ProcId>,
    pairs: &HashMap<(ProcId, ProcId), (u64, u64)>,
    work_ns: &[u64],
) -> MasterWorker {
    let out = |w: ProcId| pairs.get(&(master, w)).copied().unwrap_or_default();
    let back = |w: ProcId| pairs.get(&(w, master)).copied().unwrap_or_default();
    let tasks: u64 = workers.iter().map(|&w| out(w).0).sum();
    let bytes: u64 = workers.iter().map(|&w| out(w).1 + back(w).1).sum();
    let per_task = |ns: u64, n: u64| ns as f64 * 1e-9 / n.max(1) as f64;
    MasterWorker {
        master,
        worker_seconds_per_task: workers
            .iter()
            .map(|&w| per_task(work_ns[w as usize], out(w).0))
            .collect(),
        workers,
        tasks,
        master_seconds_per_task: per_task(work_ns[master as usize], tasks),
        bytes_per_task: bytes as f64 / tasks.max(1) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(proc: ProcId, cpu_ns: u64, kind: EventKind) -> Event {
        Event { proc, cpu_ns, kind }
    }

    fn send(p: ProcId, cpu: u64, msg: MsgId, bytes: u64) -> Event {
        ev(
            p,
            cpu,
            EventKind::Send {
                after: 0,
                msg,
                bytes,
                rendezvous: false,
            },
        )
    }

    fn recv(p: ProcId, msg: MsgId) -> [Event; 2] {
        [
            ev(p, 0, EventKind::RecvStart),
            ev(p, 7, EventKind::RecvEnd { msg }),
        ]
    }

    /// Master 0 hands 2 tasks to worker 1 and 1 to worker 2; each result comes back.
    fn job() -> Vec<Event> {
        let mut e = Vec::new();
        let mut msg = 0;
        for (w, tasks) in [(1, 2), (2, 1)] {
            for _ in 0..tasks {
                msg += 2;
                e.push(send(0, 1_000_000, msg, 1000));
                e.extend(recv(w, msg));
                e.push(send(w, 10_000_000 * u64::from(w), msg + 1, 24));
                e.extend(recv(0, msg + 1));
            }
        }
        for p in 0..3 {
            e.push(ev(p, 0, EventKind::Exit));
        }
        e
    }

    #[test]
    fn a_master_and_its_workers_with_figures_per_task() {
        let mw = recognise(3, &job()).unwrap();
        assert_eq!(
            (mw.master, mw.workers.clone(), mw.tasks),
            (0, vec![1, 2], 3)
        );
        assert!((mw.master_seconds_per_task - 0.001).abs() < 1e-12, "{mw:?}");
        assert!(
            (mw.worker_seconds_per_task[0] - 0.010).abs() < 1e-12,
            "{mw:?}"
        );
        assert!(
            (mw.worker_seconds_per_task[1] - 0.020).abs() < 1e-12,
            "{mw:?}"
        );
        assert_eq!(mw.bytes_per_task, 1024.0);
    }

    #[test]
    fn workers_that_talk_are_not_master_worker() {
        let mut e = job();
        e.push(send(1, 0, 100, 8));
        e.extend(recv(2, 100));
        assert_eq!(
            recognise(3, &e),
            Err(NotMasterWorker::WorkersTalk { a: 1, b: 2 })
        );
    }

    /// Workers that talk are not recognised, but a declared master takes the processes it
    /// exchanges with as workers, with the same figures as recognised.
    #[test]
    fn a_declared_master_allows_workers_that_talk() {
        let mut e = job();
        let recognised = recognise(3, &e).unwrap();
        e.push(send(1, 0, 100, 8));
        e.extend(recv(2, 100));
        assert_eq!(declared(3, &e, 0).unwrap(), recognised);
        assert_eq!(
            declared(3, &e, 5),
            Err(NotMasterWorker::NoSuchProcess {
                master: 5,
                procs: 3
            })
        );
        e.push(ev(3, 0, EventKind::Exit));
        assert_eq!(
            declared(4, &e, 3),
            Err(NotMasterWorker::Silent { master: 3 })
        );
    }

    #[test]
    fn a_ring_has_no_master() {
        let mut e = Vec::new();
        for p in 0..4u32 {
            e.push(send(p, 0, u64::from(p), 8));
            e.extend(recv((p + 1) % 4, u64::from(p)));
        }
        assert_eq!(recognise(4, &e), Err(NotMasterWorker::NoMaster));
    }
}
