//! The reference for the engine's time-slice node model (`docs/engine.md`, "Time slices"):
//! a plain simulation in integer nanoseconds that goes from one instant where something
//! happens to the next, rotates every core's holder at every slice end where a process is
//! queued, and keeps each process's remaining work explicitly. It shares nothing with the
//! engine but the event types. Programs are eager messages, collectives and computation;
//! every node runs at speed 1.

use std::collections::{HashMap, VecDeque};

use lbf_model::event::{CollOp, Event, EventKind};
use lbf_model::target::{Target, Wait};

/// Where a process is with respect to its node's cores.
#[derive(Clone, Copy, PartialEq, Debug)]
enum On {
    Core(usize),
    Queued,
    Off,
}

/// One process of the reference simulation.
#[derive(Clone, Debug)]
struct P {
    node: usize,
    /// Index of its current event.
    pos: usize,
    /// Nanoseconds of work left before the current event.
    left: u64,
    /// Blocked at its current event (a receive whose message has not arrived).
    waiting: bool,
    done: bool,
    on: On,
    /// When it last joined its node's queue.
    queued_at: u64,
}

/// One node: who holds each core and since when, and the queue for a core.
struct N {
    cores: Vec<Option<(usize, u64)>>,
    queue: VecDeque<usize>,
}

/// A collective in progress: who arrived, when the last did, the largest payload, whether
/// its participants span nodes, and when everyone may leave once all have arrived.
#[derive(Default)]
struct Coll {
    arrived: u32,
    latest: u64,
    bytes: u64,
    nodes: Vec<usize>,
    ends: Option<u64>,
}

/// The nanoseconds a collective takes after its last arrival (docs/engine.md,
/// "Collectives"): `ceil(log2 size)` rounds of one message of the payload, twice as many for
/// an all-reduce; an all-to-all `size - 1` rounds of a share of it.
fn coll_cost(target: &Target, op: CollOp, size: u32, bytes: u64, spans: bool) -> u64 {
    if size <= 1 {
        return 0;
    }
    let table = if spans {
        &target.network.remote
    } else {
        &target.network.local
    };
    let mut depth = 0;
    while (1u32 << depth) < size {
        depth += 1;
    }
    match op {
        CollOp::Barrier | CollOp::Bcast | CollOp::Reduce => depth * ns(table.seconds(bytes)),
        CollOp::Allreduce => 2 * depth * ns(table.seconds(bytes)),
        CollOp::Alltoall => {
            let rounds = u64::from(size - 1);
            rounds * ns(table.seconds(bytes.div_ceil(rounds)))
        }
    }
}

/// Nanoseconds of `seconds`, from a table that the test builds from whole nanoseconds.
fn ns(seconds: f64) -> u64 {
    (seconds * 1e9).round() as u64
}

/// The predicted run time, in seconds, of `streams` on `target`, whose scheduler must be
/// set.
pub(crate) fn simulate(target: &Target, streams: &[Vec<Event>]) -> f64 {
    let sched = target.scheduler.expect("a target with a scheduler");
    let slice = ns(sched.slice);
    let n = streams.len();
    let mut procs: Vec<P> = (0..n)
        .map(|p| P {
            node: target
                .nodes
                .iter()
                .position(|node| node.procs.contains(&(p as u32)))
                .unwrap(),
            pos: 0,
            left: work(&streams[p][0]),
            waiting: false,
            done: false,
            on: On::Off,
            queued_at: 0,
        })
        .collect();
    let mut nodes: Vec<N> = target
        .nodes
        .iter()
        .map(|node| N {
            cores: vec![None; node.cores as usize],
            queue: VecDeque::new(),
        })
        .collect();
    // message -> when it reaches its receiver
    let mut arrivals: HashMap<u64, u64> = HashMap::new();
    let mut colls: HashMap<u64, Coll> = HashMap::new();
    let mut t = 0u64;
    loop {
        // Everything that happens at `t`, until nothing changes: first what the nodes do
        // (work done, slice ends), then waits answered at `t` too.
        let mut answering = false;
        loop {
            let mut changed = false;
            for p in 0..n {
                let at = Instant { t, answering };
                changed |= settle(
                    p,
                    at,
                    streams,
                    target,
                    &mut procs,
                    &mut nodes,
                    &mut arrivals,
                    &mut colls,
                    sched.wait,
                );
            }
            // A slice end at `t` with a process queued (before `t`): the holder goes to the
            // tail. One at a time, in core order, with what it lets happen before the next
            // (finishes come before slice ends).
            'rotation: for node in nodes.iter_mut() {
                for c in 0..node.cores.len() {
                    let Some((holder, since)) = node.cores[c] else {
                        continue;
                    };
                    let head = node.queue.front().copied();
                    if t > since
                        && (t - since).is_multiple_of(slice)
                        && head.is_some_and(|h| procs[h].queued_at < t)
                    {
                        let next = node.queue.pop_front().unwrap();
                        node.queue.push_back(holder);
                        procs[holder].on = On::Queued;
                        procs[holder].queued_at = t;
                        node.cores[c] = Some((next, t));
                        procs[next].on = On::Core(c);
                        changed = true;
                        break 'rotation;
                    }
                }
            }
            if !changed {
                if answering {
                    break;
                }
                answering = true;
            }
        }
        if procs.iter().all(|p| p.done) {
            return t as f64 * 1e-9;
        }
        // The next instant: a holder's work done, a slice end with a queue, an arrival.
        let mut next = u64::MAX;
        for (p, pr) in procs.iter().enumerate() {
            if let On::Core(_) = pr.on {
                if !pr.waiting && pr.left > 0 {
                    next = next.min(t + pr.left);
                }
            }
            if pr.waiting {
                if let Some(a) = awaited(&streams[p][pr.pos], &arrivals, &colls) {
                    if a > t {
                        next = next.min(a);
                    }
                }
            }
        }
        for node in &nodes {
            if node.queue.is_empty() {
                continue;
            }
            for &(_, since) in node.cores.iter().flatten() {
                next = next.min(since + ((t - since) / slice + 1) * slice);
            }
        }
        assert!(next != u64::MAX, "reference simulation deadlocked");
        for pr in procs.iter_mut() {
            if matches!(pr.on, On::Core(_)) && !pr.waiting {
                pr.left = pr.left.saturating_sub(next - t);
            }
        }
        t = next;
    }
}

/// The work before event `e`, in nanoseconds: none before a receive's or a collective's end
/// (its CPU was spent waiting).
fn work(e: &Event) -> u64 {
    match e.kind {
        EventKind::RecvEnd { .. } | EventKind::CollEnd { .. } => 0,
        _ => e.cpu_ns,
    }
}

/// When what waiting event `e` waits for happens (its message arrives, its collective
/// ends), if that is known yet.
fn awaited(e: &Event, arrivals: &HashMap<u64, u64>, colls: &HashMap<u64, Coll>) -> Option<u64> {
    match e.kind {
        EventKind::RecvEnd { msg } => arrivals.get(&msg).copied(),
        EventKind::CollEnd { coll } => colls.get(&coll).and_then(|c| c.ends),
        _ => unreachable!("not a waiting event"),
    }
}

/// A moment of the simulation: its time, and whether waits whose message arrives at that very
/// time are answered yet.
#[derive(Clone, Copy)]
struct Instant {
    t: u64,
    answering: bool,
}

/// Lets process `p` go as far as it can at `at.t`: events whose work is done happen (a process
/// with no work to do needs no core), a receive whose message is there completes if its
/// process holds a core or never waited for it. Returns whether anything changed.
#[allow(clippy::too_many_arguments)]
fn settle(
    p: usize,
    at: Instant,
    streams: &[Vec<Event>],
    target: &Target,
    procs: &mut [P],
    nodes: &mut [N],
    arrivals: &mut HashMap<u64, u64>,
    colls: &mut HashMap<u64, Coll>,
    wait: Wait,
) -> bool {
    let t = at.t;
    let mut changed = false;
    loop {
        let pr = procs[p].clone();
        if pr.done {
            return changed;
        }
        let e = streams[p][pr.pos];
        if pr.waiting {
            if awaited(&e, arrivals, colls).is_none_or(|a| a > t || (a == t && !at.answering)) {
                return changed;
            }
            match pr.on {
                On::Core(_) => {}
                // Answered while queued: goes on when it takes a core.
                On::Queued => return changed,
                // Answered after giving its core up: asks for one again.
                On::Off => {
                    ask(p, t, procs, nodes);
                    changed = true;
                    if !matches!(procs[p].on, On::Core(_)) {
                        return changed;
                    }
                }
            }
            procs[p].waiting = false;
            if let EventKind::RecvEnd { msg } = e.kind {
                arrivals.remove(&msg);
            }
        } else {
            if pr.left > 0 {
                // Work to do: it needs a core.
                if pr.on == On::Off {
                    ask(p, t, procs, nodes);
                    changed = true;
                }
                return changed;
            }
            match e.kind {
                EventKind::Send { msg, bytes, .. } => {
                    let to = streams
                        .iter()
                        .position(|s| s.iter().any(|x| x.kind == EventKind::RecvEnd { msg }))
                        .unwrap();
                    let table = if procs[to].node == pr.node {
                        &target.network.local
                    } else {
                        &target.network.remote
                    };
                    arrivals.insert(msg, t + ns(table.seconds(bytes)));
                }
                EventKind::CollStart {
                    coll,
                    op,
                    size,
                    bytes,
                } => {
                    let c = colls.entry(coll).or_default();
                    c.arrived += 1;
                    c.latest = c.latest.max(t);
                    c.bytes = c.bytes.max(bytes);
                    c.nodes.push(pr.node);
                    if c.arrived == size {
                        let spans = c.nodes.iter().any(|&n| n != c.nodes[0]);
                        c.ends = Some(c.latest + coll_cost(target, op, size, c.bytes, spans));
                    }
                }
                EventKind::RecvEnd { .. } | EventKind::CollEnd { .. } => {
                    if awaited(&e, arrivals, colls).is_none_or(|a| a > t) {
                        procs[p].waiting = true;
                        match wait {
                            Wait::Spin if pr.on == On::Off => ask(p, t, procs, nodes),
                            Wait::Spin => {}
                            Wait::Yield => give_up(p, t, procs, nodes),
                        }
                        return true;
                    }
                    if let EventKind::RecvEnd { msg } = e.kind {
                        arrivals.remove(&msg);
                    }
                }
                EventKind::Exit => {
                    give_up(p, t, procs, nodes);
                    procs[p].done = true;
                    return true;
                }
                _ => {}
            }
        }
        changed = true;
        procs[p].pos += 1;
        procs[p].left = work(&streams[p][procs[p].pos]);
    }
}

/// Process `p` wants a core at `t`: takes a free one or queues.
fn ask(p: usize, t: u64, procs: &mut [P], nodes: &mut [N]) {
    let node = &mut nodes[procs[p].node];
    match node.cores.iter().position(Option::is_none) {
        Some(c) => {
            node.cores[c] = Some((p, t));
            procs[p].on = On::Core(c);
        }
        None => {
            node.queue.push_back(p);
            procs[p].on = On::Queued;
            procs[p].queued_at = t;
        }
    }
}

/// Process `p` gives up its core (or its place in the queue) at `t`; the head of the queue
/// takes the core.
fn give_up(p: usize, t: u64, procs: &mut [P], nodes: &mut [N]) {
    let node = &mut nodes[procs[p].node];
    match procs[p].on {
        On::Core(c) => {
            node.cores[c] = None;
            if let Some(next) = node.queue.pop_front() {
                node.cores[c] = Some((next, t));
                procs[next].on = On::Core(c);
            }
        }
        On::Queued => node.queue.retain(|&q| q != p),
        On::Off => {}
    }
    procs[p].on = On::Off;
}
