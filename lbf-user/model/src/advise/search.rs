//! Searching placements of a trace's processes onto hosts, scored by the engine.
//!
//! A [`Machine`] is the hosts a program could run on (cores, speed) and the network between
//! them. A [`Placement`] puts each process on one host. Every candidate is scored by the
//! engine itself, many candidates per pass over the trace (one target each, as `lbf-gag
//! predict` evaluates many targets at once): the predicted run time, not a proxy such as
//! hop-bytes.
//!
//! [`search`] starts from simple placements (block, round-robin, the fewest hosts, and one
//! built from the communication matrix: processes that exchange the most bytes together),
//! scores every placement when there are at most [`EXHAUSTIVE`], and improves the best by
//! moving one process to another host or swapping two, a batch of neighbours per pass, while
//! that helps and the time budget lasts.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::on_demand::OnDemand;
use crate::engine::{Engine, EngineError};
use crate::event::{Event, EventKind, MsgId, ProcId, ProcInfo};
use crate::target::{Network, Node, Target};

/// One host a process may run on.
#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    /// Its name, for reports and host files.
    pub name: String,
    /// Its cores.
    pub cores: u32,
    /// Its speed relative to the traced run's host.
    pub speed: f64,
}

/// The hosts a program could run on, and the network between them.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// The hosts.
    pub hosts: Vec<Host>,
    /// Message costs within a host and between two.
    pub network: Network,
    /// How much a waiting process loads its host (see [`Target::spin`]).
    pub spin: f64,
    /// Whether each process is bound to one core of its host, a host's processes dealt out
    /// to its cores in id order (see [`Target::bind_to_cores`]).
    pub bind_to_cores: bool,
}

/// The host of each process, by process id.
pub type Placement = Vec<usize>;

/// A placement and its predicted run time.
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    /// How it was found: `block`, `round-robin`, `fewest hosts`, `communication`,
    /// `work-rate`, `search`.
    pub label: String,
    /// The host of each process.
    pub placement: Placement,
    /// The engine's predicted run time, in seconds.
    pub seconds: f64,
}

impl Machine {
    /// The target that runs `placement` on this machine, named `name`.
    pub fn target(&self, placement: &[usize], name: &str) -> Target {
        let mut nodes: Vec<Node> = self
            .hosts
            .iter()
            .map(|h| Node::idle(h.cores, h.speed))
            .collect();
        for (p, &h) in placement.iter().enumerate() {
            nodes[h].procs.push(p as ProcId);
        }
        // Hosts left empty are no nodes: a target's nodes run something.
        nodes.retain(|n| !n.procs.is_empty());
        Target {
            name: name.to_string(),
            nodes,
            network: self.network.clone(),
            spin: self.spin,
            scheduler: None,
            bind_to_cores: self.bind_to_cores,
            procedures: Vec::new(),
        }
    }
}

impl Machine {
    /// `placement` with identical hosts (same cores and speed; the network is the same
    /// between any two) renamed in order of first use: two placements that differ only by
    /// which of such hosts they use have one canonical form.
    pub fn canonical(&self, placement: &[usize]) -> Placement {
        let class = |h: usize| (self.hosts[h].cores, self.hosts[h].speed.to_bits());
        let mut renamed: HashMap<usize, usize> = HashMap::new();
        let mut used: HashMap<(u32, u64), usize> = HashMap::new();
        placement
            .iter()
            .map(|&h| {
                *renamed.entry(h).or_insert_with(|| {
                    // The next unused host of this class, in host order.
                    let n = used.entry(class(h)).or_default();
                    let to = (0..self.hosts.len())
                        .filter(|&g| class(g) == class(h))
                        .nth(*n)
                        .expect("no more hosts of a class than there are");
                    *n += 1;
                    to
                })
            })
            .collect()
    }
}

/// `placement` on `hosts` in a line: `a: 0 1 | b: 2 3` (the hosts used, each with its
/// processes).
pub fn describe(hosts: &[Host], placement: &[usize]) -> String {
    let mut parts = Vec::new();
    for (h, host) in hosts.iter().enumerate() {
        let procs: Vec<String> = (0..placement.len())
            .filter(|&p| placement[p] == h)
            .map(|p| p.to_string())
            .collect();
        if !procs.is_empty() {
            parts.push(format!("{}: {}", host.name, procs.join(" ")));
        }
    }
    parts.join(" | ")
}

/// The predicted run time of each of `placements` of the processes `procs` whose events are
/// `events`, on `machine`: one pass of the engine over the events.
pub fn score(
    procs: &[ProcInfo],
    events: &[Event],
    machine: &Machine,
    placements: &[Placement],
) -> Result<Vec<f64>, EngineError> {
    let targets = placements
        .iter()
        .enumerate()
        .map(|(i, p)| machine.target(p, &format!("candidate {i}")))
        .collect();
    let mut engine = Engine::for_procs(procs, targets)?;
    for (i, e) in events.iter().enumerate() {
        engine.push(*e, i as u64 + 1)?;
    }
    Ok(engine
        .finish()?
        .into_iter()
        .map(|p| p.predicted_seconds)
        .collect())
}

/// Placements anyone would try first: `block` (fill each host's cores in turn),
/// `round-robin` (one process per host in turn), and `fewest hosts` (block on the hosts with
/// the most cores first, so that as few as possible are used).
pub fn baselines(procs: usize, machine: &Machine) -> Vec<(String, Placement)> {
    let hosts = machine.hosts.len();
    let by_order: Vec<usize> = (0..hosts).collect();
    let mut by_cores = by_order.clone();
    by_cores.sort_by(|&a, &b| {
        let (ha, hb) = (&machine.hosts[a], &machine.hosts[b]);
        hb.cores
            .cmp(&ha.cores)
            .then(hb.speed.total_cmp(&ha.speed))
            .then(a.cmp(&b))
    });
    vec![
        ("block".into(), block(procs, machine, &by_order)),
        (
            "round-robin".into(),
            (0..procs).map(|p| p % hosts).collect(),
        ),
        ("fewest hosts".into(), block(procs, machine, &by_cores)),
    ]
}

/// Processes in id order on `order`'s hosts, each filled to its cores before the next; past
/// the machine's cores, round-robin over them again.
fn block(procs: usize, machine: &Machine, order: &[usize]) -> Placement {
    let slots: Vec<usize> = order
        .iter()
        .flat_map(|&h| std::iter::repeat_n(h, machine.hosts[h].cores.max(1) as usize))
        .collect();
    (0..procs).map(|p| slots[p % slots.len()]).collect()
}

/// Bytes exchanged between each pair of processes (either way; `a < b`).
pub fn communication(events: &[Event]) -> HashMap<(ProcId, ProcId), u64> {
    let mut sent: HashMap<MsgId, (ProcId, u64)> = HashMap::new();
    let mut received: HashMap<MsgId, ProcId> = HashMap::new();
    let mut bytes: HashMap<(ProcId, ProcId), u64> = HashMap::new();
    let mut add = |a: ProcId, b: ProcId, n: u64| {
        if a != b {
            *bytes.entry((a.min(b), a.max(b))).or_default() += n;
        }
    };
    for e in events {
        match e.kind {
            EventKind::Send { msg, bytes: n, .. } => match received.remove(&msg) {
                Some(to) => add(e.proc, to, n),
                None => {
                    sent.insert(msg, (e.proc, n));
                }
            },
            EventKind::RecvEnd { msg } => match sent.remove(&msg) {
                Some((from, n)) => add(from, e.proc, n),
                None => {
                    received.insert(msg, e.proc);
                }
            },
            _ => {}
        }
    }
    bytes
}

/// A placement from the communication matrix: the pairs that exchange the most bytes are
/// put together first, on the host with free cores that already holds one of them (else the
/// fastest with free cores); processes that exchange nothing fill the free cores last.
pub fn by_communication(
    procs: usize,
    machine: &Machine,
    matrix: &HashMap<(ProcId, ProcId), u64>,
) -> Placement {
    let mut free: Vec<i64> = machine.hosts.iter().map(|h| i64::from(h.cores)).collect();
    let mut at: Vec<Option<usize>> = vec![None; procs];
    let mut pairs: Vec<(&(ProcId, ProcId), &u64)> = matrix.iter().collect();
    pairs.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let fastest_free = |free: &[i64]| {
        (0..machine.hosts.len())
            .filter(|&h| free[h] > 0)
            .max_by(|&a, &b| {
                machine.hosts[a]
                    .speed
                    .total_cmp(&machine.hosts[b].speed)
                    .then(b.cmp(&a))
            })
    };
    let put = |p: usize, h: usize, at: &mut Vec<Option<usize>>, free: &mut Vec<i64>| {
        at[p] = Some(h);
        free[h] -= 1;
    };
    for (&(a, b), _) in pairs {
        let (a, b) = (a as usize, b as usize);
        if a >= procs || b >= procs {
            continue;
        }
        for (p, q) in [(a, b), (b, a)] {
            if at[p].is_none() {
                let host = at[q]
                    .filter(|&h| free[h] > 0)
                    .or_else(|| fastest_free(&free));
                if let Some(h) = host {
                    put(p, h, &mut at, &mut free);
                }
            }
        }
    }
    let spill = block(
        procs,
        machine,
        &(0..machine.hosts.len()).collect::<Vec<_>>(),
    );
    (0..procs)
        .map(|p| {
            at[p].unwrap_or_else(|| match fastest_free(&free) {
                Some(h) => {
                    free[h] -= 1;
                    h
                }
                None => spill[p],
            })
        })
        .collect()
}

/// How [`search`] may spend its effort.
#[derive(Clone, Copy, Debug)]
pub struct SearchOptions {
    /// Stop improving after this long.
    pub budget: Duration,
    /// Candidates scored per pass over the trace.
    pub batch: usize,
    /// Placements returned, best first.
    pub keep: usize,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            budget: Duration::from_secs(30),
            batch: 32,
            keep: 5,
        }
    }
}

/// Where a search is, for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Candidates scored so far.
    pub scored: usize,
    /// The best predicted time so far.
    pub best_seconds: f64,
    /// Of the budget, the part spent (0 to 1).
    pub spent: f64,
}

/// The best placements found for `procs` on `machine` within `options`, best first, with the
/// baselines and the `extra` starts (labelled, such as the work-rate model's) among them as
/// scored; `progress` is called after every pass. With `on_demand` (a master/worker program
/// whose master deals its tasks on demand) candidates are scored by dealing the tasks again
/// ([`OnDemand::seconds`]) instead of by the engine's replay.
#[allow(clippy::too_many_arguments)] // the search's inputs, each of its own kind
pub fn search(
    procs: &[ProcInfo],
    events: &[Event],
    machine: &Machine,
    on_demand: Option<&OnDemand>,
    extra: Vec<(String, Placement)>,
    options: SearchOptions,
    progress: impl FnMut(Progress),
) -> Result<Vec<Scored>, EngineError> {
    let started = Instant::now();
    let n = procs.len();
    let mut starts = baselines(n, machine);
    starts.extend(extra);
    starts.push((
        "communication".into(),
        by_communication(n, machine, &communication(events)),
    ));
    let placements: Vec<Placement> = starts.iter().map(|(_, p)| p.clone()).collect();
    let times = score_by(procs, events, machine, on_demand, &placements)?;
    let seen: Vec<Scored> = starts
        .into_iter()
        .zip(times)
        .map(|((label, placement), seconds)| Scored {
            label,
            placement,
            seconds,
        })
        .collect();
    let mut progress = progress;
    let mut seen = seen;
    if let Some(all) = every_placement(n, machine) {
        // Few enough to score them all: the answer is the best there is.
        let mut scored = seen.len();
        let mut known: std::collections::HashSet<Placement> = seen
            .iter()
            .map(|s| machine.canonical(&s.placement))
            .collect();
        let fresh: Vec<Placement> = all
            .into_iter()
            .filter(|p| known.insert(machine.canonical(p)))
            .collect();
        for batch in fresh.chunks(options.batch.max(1)) {
            if started.elapsed() >= options.budget {
                break;
            }
            let times = score_by(procs, events, machine, on_demand, batch)?;
            scored += batch.len();
            seen.extend(batch.iter().zip(times).map(|(p, seconds)| Scored {
                label: "search".into(),
                placement: p.clone(),
                seconds,
            }));
            keep_best(&mut seen, machine, options.keep);
            progress(Progress {
                scored,
                best_seconds: seen[0].seconds,
                spent: (started.elapsed().as_secs_f64() / options.budget.as_secs_f64().max(1e-9))
                    .min(1.0),
            });
        }
    }
    let budget = options.budget.saturating_sub(started.elapsed());
    improve(
        procs,
        events,
        machine,
        on_demand,
        seen,
        SearchOptions { budget, ..options },
        progress,
    )
}

/// Placements of `procs` processes on `machine` at most [`EXHAUSTIVE`] in number (hosts to
/// the power of processes): every one of them; `None` when there are more.
fn every_placement(procs: usize, machine: &Machine) -> Option<Vec<Placement>> {
    let hosts = machine.hosts.len();
    let total = (0..procs).try_fold(1usize, |t, _| t.checked_mul(hosts))?;
    if hosts == 0 || total > EXHAUSTIVE {
        return None;
    }
    Some(
        (0..total)
            .map(|mut i| {
                (0..procs)
                    .map(|_| {
                        let h = i % hosts;
                        i /= hosts;
                        h
                    })
                    .collect()
            })
            .collect(),
    )
}

/// The most placements [`search`] scores all of (within its budget) before it improves the
/// best: 4 hosts and 6 processes, 3 hosts and 7.
pub const EXHAUSTIVE: usize = 4096;

/// The predicted run time of each of `placements`: by the engine ([`score`]), or with
/// `on_demand` by dealing its tasks again.
fn score_by(
    procs: &[ProcInfo],
    events: &[Event],
    machine: &Machine,
    on_demand: Option<&OnDemand>,
    placements: &[Placement],
) -> Result<Vec<f64>, EngineError> {
    match on_demand {
        Some(d) => Ok(placements.iter().map(|p| d.seconds(machine, p)).collect()),
        None => score(procs, events, machine, placements),
    }
}

/// Improves the best of the placements `seen` (scored) by moves and swaps, a batch per pass,
/// while that helps and `options.budget` lasts; returns the best placements seen, best
/// first. `on_demand` scores as in [`search`].
pub fn improve(
    procs: &[ProcInfo],
    events: &[Event],
    machine: &Machine,
    on_demand: Option<&OnDemand>,
    mut seen: Vec<Scored>,
    options: SearchOptions,
    mut progress: impl FnMut(Progress),
) -> Result<Vec<Scored>, EngineError> {
    let started = Instant::now();
    let mut scored = seen.len();
    let Some(mut best) = seen
        .iter()
        .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
        .cloned()
    else {
        return Ok(seen);
    };
    let spent = |started: Instant| {
        (started.elapsed().as_secs_f64() / options.budget.as_secs_f64().max(1e-9)).min(1.0)
    };
    let mut neighbours = Neighbours::new(procs.len(), machine.hosts.len());
    while started.elapsed() < options.budget {
        let batch = neighbours.next_batch(&best.placement, options.batch.max(1));
        if batch.is_empty() {
            break; // every neighbour of the best was tried: a local optimum
        }
        let times = score_by(procs, events, machine, on_demand, &batch)?;
        scored += batch.len();
        let mut improved = false;
        for (placement, seconds) in batch.into_iter().zip(times) {
            let candidate = Scored {
                label: "search".into(),
                placement,
                seconds,
            };
            if candidate.seconds < best.seconds * (1.0 - 1e-9) {
                best = candidate.clone();
                improved = true;
            }
            seen.push(candidate);
        }
        if improved {
            neighbours = Neighbours::new(procs.len(), machine.hosts.len());
        }
        keep_best(&mut seen, machine, options.keep);
        progress(Progress {
            scored,
            best_seconds: best.seconds,
            spent: spent(started),
        });
    }
    keep_best(&mut seen, machine, options.keep);
    Ok(seen)
}

/// Sorts `seen` best first, one entry per placement (placements that differ only by
/// exchanging identical hosts are one), and drops all but the best `keep` and the
/// baselines.
fn keep_best(seen: &mut Vec<Scored>, machine: &Machine, keep: usize) {
    seen.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mut placements = std::collections::HashSet::new();
    let mut kept = 0;
    seen.retain(|s| {
        if !placements.insert(machine.canonical(&s.placement)) {
            return false;
        }
        kept += 1;
        kept <= keep.max(1) || s.label != "search"
    });
}

/// The neighbours of a placement, in a fixed order: every process moved to every other host,
/// then every two processes on different hosts swapped.
struct Neighbours {
    procs: usize,
    hosts: usize,
    /// The next neighbour's index in that order.
    next: usize,
}

impl Neighbours {
    fn new(procs: usize, hosts: usize) -> Self {
        Neighbours {
            procs,
            hosts,
            next: 0,
        }
    }

    /// Up to `n` neighbours of `of` not given before (since the last [`Neighbours::new`]).
    fn next_batch(&mut self, of: &[usize], n: usize) -> Vec<Placement> {
        let moves = self.procs * self.hosts.saturating_sub(1);
        let swaps = self.procs * self.procs.saturating_sub(1) / 2;
        let mut batch = Vec::new();
        while batch.len() < n && self.next < moves + swaps {
            let i = self.next;
            self.next += 1;
            let mut p = of.to_vec();
            if i < moves {
                let (proc, k) = (i / (self.hosts - 1), i % (self.hosts - 1));
                // The k-th host other than its own.
                p[proc] = if k >= of[proc] { k + 1 } else { k };
            } else {
                let (a, b) = nth_pair(i - moves, self.procs);
                if of[a] == of[b] {
                    continue;
                }
                p.swap(a, b);
            }
            batch.push(p);
        }
        batch
    }
}

/// The `i`-th pair `(a, b)`, `a < b`, of `n` items in lexicographic order.
fn nth_pair(mut i: usize, n: usize) -> (usize, usize) {
    for a in 0..n {
        let after = n - a - 1;
        if i < after {
            return (a, a + 1 + i);
        }
        i -= after;
    }
    unreachable!("i is below n(n-1)/2")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::CommTable;

    fn proc(id: ProcId) -> ProcInfo {
        ProcInfo {
            id,
            name: format!("p{id}"),
            host: String::new(),
            start_ns: 0,
            ..Default::default()
        }
    }

    fn ev(proc: ProcId, cpu_ns: u64, kind: EventKind) -> Event {
        Event { proc, cpu_ns, kind }
    }

    /// Processes 0-3 in two pairs, (0, 2) and (1, 3), each exchanging `rounds` messages of
    /// `bytes` after 1 ms of work each: a pair is fast together, slow apart.
    fn pairs(rounds: u64, bytes: u64) -> Vec<Event> {
        let mut e = Vec::new();
        let mut msg = 0;
        for _ in 0..rounds {
            for (a, b) in [(0, 2), (1, 3)] {
                // The request after 1 ms of work on both sides, then the reply.
                for (from, to, cpu_ns) in [(a, b, 1_000_000), (b, a, 0)] {
                    msg += 1;
                    let send = EventKind::Send {
                        after: 0,
                        msg,
                        bytes,
                        rendezvous: false,
                    };
                    e.push(ev(from, cpu_ns, send));
                    e.push(ev(to, cpu_ns, EventKind::RecvStart));
                    e.push(ev(to, 0, EventKind::RecvEnd { msg }));
                }
            }
        }
        for p in 0..4 {
            e.push(ev(p, 0, EventKind::Exit));
        }
        e
    }

    /// Two 2-core hosts; a message between hosts costs 10 ms, within one nothing.
    fn machine() -> Machine {
        let host = |name: &str| Host {
            name: name.into(),
            cores: 2,
            speed: 1.0,
        };
        Machine {
            hosts: vec![host("a"), host("b")],
            network: Network {
                local: CommTable::default(),
                remote: CommTable::new(vec![(0.0, 0.010)]).unwrap(),
            },
            spin: 0.0,
            bind_to_cores: false,
        }
    }

    /// [`search`] for [`pairs`] of `rounds` on [`machine`], counting its passes in `passes`.
    fn search_pairs(rounds: u64, options: SearchOptions, passes: &mut usize) -> Vec<Scored> {
        let events = pairs(rounds, 100);
        let procs: Vec<ProcInfo> = (0..4).map(proc).collect();
        let count = |_| *passes += 1;
        search(
            &procs,
            &events,
            &machine(),
            None,
            Vec::new(),
            options,
            count,
        )
        .unwrap()
    }

    #[test]
    fn baselines_fill_hosts_as_named() {
        let b = baselines(4, &machine());
        assert_eq!(b[0], ("block".to_string(), vec![0, 0, 1, 1]));
        assert_eq!(b[1], ("round-robin".to_string(), vec![0, 1, 0, 1]));
        assert_eq!(b[2].1, vec![0, 0, 1, 1]);
    }

    /// The communication matrix puts each pair on one host.
    #[test]
    fn the_communication_start_keeps_pairs_together() {
        let events = pairs(3, 100);
        let p = by_communication(4, &machine(), &communication(&events));
        assert_eq!(p[0], p[2]);
        assert_eq!(p[1], p[3]);
        assert_ne!(p[0], p[1]);
    }

    /// The search ranks a placement that keeps each pair on a host first, with its engine
    /// time: 20 rounds in which both of a pair work 1 ms at once, then exchange for free;
    /// the baselines stay in the answer, block (pairs split: 10 ms a message) far behind.
    #[test]
    fn the_search_ranks_the_placement_that_keeps_pairs_together_first() {
        let mut passes = 0;
        let found = search_pairs(20, SearchOptions::default(), &mut passes);
        let best = &found[0];
        assert_eq!(best.placement[0], best.placement[2], "{best:?}");
        assert_eq!(best.placement[1], best.placement[3], "{best:?}");
        assert!((best.seconds - 0.020).abs() < 1e-9, "{best:?}");
        let block = found.iter().find(|s| s.label == "block").unwrap();
        assert!(block.seconds > 0.4, "{block:?}");
        assert!(passes >= 1);
    }

    /// From block alone (both pairs split), moves and swaps reach a placement that keeps
    /// each pair together.
    #[test]
    fn improving_from_a_split_placement_joins_the_pairs() {
        let events = pairs(20, 100);
        let procs: Vec<ProcInfo> = (0..4).map(proc).collect();
        let start = vec![0, 0, 1, 1];
        let seconds = score(&procs, &events, &machine(), std::slice::from_ref(&start)).unwrap()[0];
        let start = Scored {
            label: "block".into(),
            placement: start,
            seconds,
        };
        let found = improve(
            &procs,
            &events,
            &machine(),
            None,
            vec![start],
            SearchOptions::default(),
            |_| {},
        )
        .unwrap();
        let best = &found[0];
        assert_eq!(best.label, "search");
        assert_eq!(best.placement[0], best.placement[2], "{best:?}");
        assert_eq!(best.placement[1], best.placement[3], "{best:?}");
        assert!((best.seconds - 0.020).abs() < 1e-9, "{best:?}");
    }

    /// 4 processes on 2 hosts make 16 placements, 8 once the identical hosts are told
    /// apart only by use: all are scored and listed.
    #[test]
    fn a_small_problem_is_searched_exhaustively() {
        let options = SearchOptions {
            keep: 100,
            ..SearchOptions::default()
        };
        let found = search_pairs(2, options, &mut 0);
        assert_eq!(found.len(), 8, "{found:?}");
        assert_eq!(every_placement(4, &machine()).unwrap().len(), 16);
        let mut bigger = machine();
        bigger.hosts.push(bigger.hosts[0].clone());
        bigger.hosts.push(bigger.hosts[0].clone());
        assert!(
            every_placement(7, &bigger).is_none(),
            "4^7 is more than EXHAUSTIVE"
        );
    }

    /// Placements that only swap identical hosts are one; a different host is not.
    #[test]
    fn identical_hosts_are_interchangeable() {
        let mut m = machine();
        assert_eq!(m.canonical(&[1, 1, 0, 0]), vec![0, 0, 1, 1]);
        m.hosts[1].speed = 2.0;
        assert_eq!(m.canonical(&[1, 1, 0, 0]), vec![1, 1, 0, 0]);
    }

    #[test]
    fn every_pair_is_enumerated_once() {
        let n = 5;
        let all: Vec<(usize, usize)> = (0..n * (n - 1) / 2).map(|i| nth_pair(i, n)).collect();
        let mut expected = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                expected.push((a, b));
            }
        }
        assert_eq!(all, expected);
    }
}
