//! Master/worker programs whose master hands out tasks on demand: scoring a placement by
//! dealing the trace's tasks again, as the program would on that placement.
//!
//! The engine replays a trace as it ran: every message goes from the process that sent it to
//! the process that received it. For most programs that is the program itself, but a master
//! that answers whichever worker reports first (`MPI_Recv` from `MPI_ANY_SOURCE`, then the
//! next task to that worker) deals its tasks by timing: on a placement where a worker is
//! faster than it was when traced, it would get more tasks, and a slower one fewer. Replayed,
//! each worker keeps the tasks it had, so a placement that puts the traced run's busiest
//! worker on a slow host is predicted far slower than the same placement with the workers
//! renamed, which runs as fast. [`OnDemand::read`] recognises such a master in a trace (after
//! each result it sends the next message to the worker that sent it, and the order in which
//! the workers report is not a fixed rotation) and keeps each task's cost; [`OnDemand::seconds`]
//! deals the tasks again on a placement, in the trace's order, each to the worker that
//! reports first.
//!
//! The deal is a small simulation: each process works at a constant rate on its host (its
//! host's speed, shared with the processes on its host or bound core: a worker counts fully,
//! the master and any other process by the machine's `spin`, since they mostly wait), a
//! message takes the network's time for its size (the table within a host or between two),
//! and the master hands out one task at a time at its own CPU cost per task.

use std::collections::HashMap;

use super::search::{Machine, Placement};
use crate::event::{Event, EventKind, MsgId, ProcId, ProcInfo};

/// One task as the trace shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    /// The worker CPU seconds it took (the worker's work from receiving it to receiving its
    /// next message).
    pub seconds: f64,
    /// Bytes of the task's message.
    pub bytes: u64,
    /// Bytes of its result.
    pub result_bytes: u64,
}

/// A master/worker program whose master deals tasks on demand, as its trace shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct OnDemand {
    /// The master.
    pub master: ProcId,
    /// The workers, in the order the master first sent to them.
    pub workers: Vec<ProcId>,
    /// The tasks, in the order the master handed them out.
    pub tasks: Vec<Task>,
    /// The master's CPU seconds per message it hands out, after its first.
    pub master_seconds_per_send: f64,
    /// Bytes of the message that tells a worker to stop (the largest seen).
    pub stop_bytes: u64,
    /// Each process's start, in seconds from the trace's (as the engine starts it).
    pub start: Vec<f64>,
    /// Each process's work before its part in the dealing (the master's up to its first
    /// send, a worker's up to its first task).
    pub startup: Vec<f64>,
    /// Each process's work after its part in the dealing (the master's after its last send,
    /// a worker's after its stop message).
    pub finish: Vec<f64>,
}

/// Whether the CPU of an event is spent waiting (not work), as the engine counts it.
fn waiting(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::RecvEnd { .. } | EventKind::SendEnd { .. } | EventKind::CollEnd { .. }
    )
}

impl OnDemand {
    /// The program of `procs` and `events` with master `master`, if the master deals its
    /// tasks on demand: at least 90 % of the results it receives are followed by its next
    /// message going to the worker that sent the result, and the workers do not report in a
    /// fixed rotation. `None` otherwise.
    pub fn read(procs: &[ProcInfo], events: &[Event], master: ProcId) -> Option<OnDemand> {
        let n = procs.len();
        if master as usize >= n {
            return None;
        }
        let mut sender: HashMap<MsgId, (ProcId, u64)> = HashMap::new();
        let mut receiver: HashMap<MsgId, ProcId> = HashMap::new();
        let mut own: Vec<Vec<&Event>> = vec![Vec::new(); n];
        for e in events {
            if let Some(list) = own.get_mut(e.proc as usize) {
                list.push(e);
            }
            match e.kind {
                EventKind::Send { msg, bytes, .. } => {
                    sender.insert(msg, (e.proc, bytes));
                }
                EventKind::RecvEnd { msg } => {
                    receiver.insert(msg, e.proc);
                }
                _ => {}
            }
        }
        // The master's sends (message, receiver) and the senders of what it receives, in
        // its order; whether each result is answered to its sender.
        let mut sends: Vec<(MsgId, ProcId, u64)> = Vec::new();
        let (mut results, mut answered) = (0usize, 0usize);
        let mut reporters: Vec<ProcId> = Vec::new();
        let mut awaiting: Option<ProcId> = None;
        let (mut startup, mut finish, mut between) = (0.0, 0.0, 0.0);
        for e in &own[master as usize] {
            let cpu = e.cpu_ns as f64 * 1e-9;
            if !waiting(&e.kind) {
                if sends.is_empty() {
                    startup += cpu;
                } else {
                    finish += cpu;
                }
            }
            match e.kind {
                EventKind::Send { msg, bytes, .. } => {
                    let to = *receiver.get(&msg)?;
                    if !sends.is_empty() {
                        between += finish;
                    }
                    finish = 0.0;
                    if let Some(w) = awaiting.take() {
                        answered += usize::from(w == to);
                    }
                    sends.push((msg, to, bytes));
                }
                EventKind::RecvEnd { msg } => {
                    if let Some(&(from, _)) = sender.get(&msg) {
                        results += 1;
                        reporters.push(from);
                        awaiting = Some(from);
                    }
                }
                _ => {}
            }
        }
        let mut workers: Vec<ProcId> = Vec::new();
        for &(_, to, _) in &sends {
            if !workers.contains(&to) {
                workers.push(to);
            }
        }
        let w = workers.len();
        if w < 2 || results <= w || (answered as f64) < 0.9 * results as f64 {
            return None;
        }
        if reporters
            .iter()
            .enumerate()
            .all(|(i, r)| *r == reporters[i % w])
        {
            return None; // a fixed rotation: the master waits for its workers in turn
        }
        // Each worker's segments: its work after each message from the master, and the
        // bytes it sends back before the next.
        let mut cost: HashMap<MsgId, (f64, Option<u64>)> = HashMap::new();
        let mut start_work = vec![0.0; n];
        let mut finish_work = vec![0.0; n];
        for &wk in &workers {
            let mut current: Option<MsgId> = None;
            for e in &own[wk as usize] {
                let cpu = e.cpu_ns as f64 * 1e-9;
                if !waiting(&e.kind) {
                    match current {
                        Some(m) => cost.entry(m).or_insert((0.0, None)).0 += cpu,
                        None => start_work[wk as usize] += cpu,
                    }
                }
                match e.kind {
                    EventKind::RecvEnd { msg } if sender.get(&msg).map(|s| s.0) == Some(master) => {
                        current = Some(msg);
                        cost.entry(msg).or_insert((0.0, None));
                    }
                    EventKind::Send { msg, bytes, .. } if receiver.get(&msg) == Some(&master) => {
                        if let Some(m) = current {
                            let entry = cost.entry(m).or_insert((0.0, None));
                            entry.1 = Some(entry.1.unwrap_or(0) + bytes);
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut tasks = Vec::new();
        let mut stop_bytes = 0;
        for &(msg, to, bytes) in &sends {
            let (seconds, result) = cost.get(&msg).copied().unwrap_or((0.0, None));
            match result {
                Some(result_bytes) => tasks.push(Task {
                    seconds,
                    bytes,
                    result_bytes,
                }),
                None => {
                    stop_bytes = stop_bytes.max(bytes);
                    finish_work[to as usize] += seconds;
                }
            }
        }
        let mut start_work_all = start_work;
        start_work_all[master as usize] = startup;
        finish_work[master as usize] = finish;
        Some(OnDemand {
            master,
            workers,
            tasks,
            master_seconds_per_send: between / (sends.len() - 1).max(1) as f64,
            stop_bytes,
            start: procs.iter().map(|p| p.start_ns as f64 * 1e-9).collect(),
            startup: start_work_all,
            finish: finish_work,
        })
    }

    /// The rate at which each process works on `machine` with `placement`: its host's speed,
    /// shared with the other processes on its host (or on its core, with
    /// [`Machine::bind_to_cores`]), each worker counting fully and any other process by the
    /// machine's `spin`.
    fn speeds(&self, machine: &Machine, placement: &[usize]) -> Vec<f64> {
        let weight = |p: usize| {
            if self.workers.contains(&(p as ProcId)) {
                1.0
            } else {
                machine.spin
            }
        };
        // Processes sharing: the host's, or with binding its cores' in turn.
        let mut groups: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
        let mut dealt = vec![0usize; machine.hosts.len()];
        for (p, &h) in placement.iter().enumerate() {
            let cores = machine.hosts[h].cores.max(1) as usize;
            let core = if machine.bind_to_cores {
                dealt[h] % cores
            } else {
                0
            };
            dealt[h] += 1;
            groups.entry((h, core)).or_default().push(p);
        }
        let mut speed = vec![0.0; placement.len()];
        for ((h, _), members) in &groups {
            let host = &machine.hosts[*h];
            let cores = if machine.bind_to_cores {
                1.0
            } else {
                f64::from(host.cores.max(1))
            };
            let load: f64 = members.iter().map(|&q| weight(q)).sum();
            for &p in members {
                // A process runs with its whole weight while it works.
                let others = load - weight(p);
                speed[p] = host.speed * (cores / (1.0 + others)).min(1.0);
            }
        }
        speed
    }

    /// The predicted run time of the program on `machine` with `placement` (the host of
    /// each process): the tasks dealt again in the trace's order, each to the worker that
    /// reports first; the time of the last process's end, from the trace's start.
    pub fn seconds(&self, machine: &Machine, placement: &Placement) -> f64 {
        let speed = self.speeds(machine, placement);
        let message = |a: usize, b: usize, bytes: u64| {
            let table = if placement[a] == placement[b] {
                &machine.network.local
            } else {
                &machine.network.remote
            };
            table.seconds(bytes)
        };
        let m = self.master as usize;
        let ready = |p: usize| self.start[p] + self.startup[p] / speed[p].max(1e-12);
        let mut now = ready(m);
        let mut first = true;
        let mut hand_out = |now: &mut f64| {
            if !first {
                *now += self.master_seconds_per_send / speed[m].max(1e-12);
            }
            first = false;
        };
        // (time its result reaches the master, worker), as a list the master takes from in
        // order of arrival.
        let mut pending: Vec<(f64, usize)> = Vec::new();
        let mut free_at: Vec<f64> = (0..placement.len()).map(ready).collect();
        let mut end: f64 = 0.0;
        let mut next = 0;
        let mut deal = |w: usize, now: f64, next: &mut usize, pending: &mut Vec<(f64, usize)>| {
            if let Some(task) = self.tasks.get(*next) {
                *next += 1;
                let start = (now + message(m, w, task.bytes)).max(free_at[w]);
                let done = start + task.seconds / speed[w].max(1e-12);
                free_at[w] = done;
                pending.push((done + message(w, m, task.result_bytes), w));
                None
            } else {
                let stop = (now + message(m, w, self.stop_bytes)).max(free_at[w]);
                Some(stop + self.finish[w] / speed[w].max(1e-12))
            }
        };
        for &w in &self.workers {
            hand_out(&mut now);
            if let Some(done) = deal(w as usize, now, &mut next, &mut pending) {
                end = end.max(done);
            }
        }
        while !pending.is_empty() {
            let i = (0..pending.len())
                .min_by(|&a, &b| pending[a].0.total_cmp(&pending[b].0))
                .expect("a pending result");
            let (arrives, w) = pending.swap_remove(i);
            now = now.max(arrives);
            hand_out(&mut now);
            if let Some(done) = deal(w, now, &mut next, &mut pending) {
                end = end.max(done);
            }
        }
        end = end.max(now + self.finish[m] / speed[m].max(1e-12));
        // Processes outside the dealing end after their own work.
        let outside = (0..placement.len())
            .filter(|&p| p != m && !self.workers.contains(&(p as ProcId)))
            .map(|p| ready(p) + self.finish[p] / speed[p].max(1e-12));
        outside.fold(end, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::search::Host;
    use crate::target::{CommTable, Network};

    fn ev(proc: ProcId, cpu_ns: u64, kind: EventKind) -> Event {
        Event { proc, cpu_ns, kind }
    }

    fn send(msg: MsgId, bytes: u64) -> EventKind {
        EventKind::Send {
            after: 0,
            msg,
            bytes,
            rendezvous: false,
        }
    }

    fn procs(n: u32) -> Vec<ProcInfo> {
        (0..n)
            .map(|id| ProcInfo {
                id,
                name: format!("p{id}"),
                host: String::new(),
                start_ns: 0,
                ..Default::default()
            })
            .collect()
    }

    /// Master 0 and workers 1 and 2 on demand: 6 tasks of 10 ms each, the first two to 1
    /// and 2; `order` is the worker whose result the master takes next, which then gets the
    /// next task (or, when none is left, the stop message).
    fn on_demand_trace(order: &[ProcId]) -> Vec<Event> {
        let mut e = Vec::new();
        let mut msg = 0;
        // The result each worker owes.
        let mut owed: HashMap<ProcId, MsgId> = HashMap::new();
        let give =
            |e: &mut Vec<Event>, owed: &mut HashMap<ProcId, MsgId>, w: ProcId, msg: &mut u64| {
                *msg += 2;
                e.push(ev(0, 1_000, send(*msg, 4)));
                e.push(ev(w, 0, EventKind::RecvStart));
                e.push(ev(w, 5, EventKind::RecvEnd { msg: *msg }));
                // Messages 2 to 12 are the 6 tasks, those after them stops.
                if *msg <= 12 {
                    e.push(ev(w, 10_000_000, send(*msg + 1, 8)));
                    owed.insert(w, *msg + 1);
                }
            };
        give(&mut e, &mut owed, 1, &mut msg);
        give(&mut e, &mut owed, 2, &mut msg);
        for &w in order {
            let result = owed[&w];
            e.push(ev(0, 0, EventKind::RecvStart));
            e.push(ev(0, 5, EventKind::RecvEnd { msg: result }));
            give(&mut e, &mut owed, w, &mut msg);
        }
        for p in 0..3 {
            e.push(ev(p, 0, EventKind::Exit));
        }
        e
    }

    fn machine(speeds: &[f64]) -> Machine {
        Machine {
            hosts: speeds
                .iter()
                .enumerate()
                .map(|(i, &speed)| Host {
                    name: format!("h{i}"),
                    cores: 1,
                    speed,
                })
                .collect(),
            network: Network {
                local: CommTable::default(),
                remote: CommTable::default(),
            },
            spin: 0.0,
            bind_to_cores: false,
        }
    }

    /// Results answered to their senders, in no fixed order: on demand, with each task's
    /// cost; a fixed rotation is not.
    #[test]
    fn a_master_that_answers_whoever_reports_deals_on_demand() {
        let events = on_demand_trace(&[1, 1, 2, 1, 2, 1]);
        let d = OnDemand::read(&procs(3), &events, 0).expect("on demand");
        assert_eq!(d.workers, vec![1, 2]);
        assert_eq!(d.tasks.len(), 6);
        assert!(d
            .tasks
            .iter()
            .all(|t| (t.seconds - 0.010).abs() < 1e-9 && t.bytes == 4 && t.result_bytes == 8));
        assert_eq!(d.stop_bytes, 4);
        let rotation = on_demand_trace(&[1, 2, 1, 2, 1, 2]);
        assert_eq!(OnDemand::read(&procs(3), &rotation, 0), None);
        assert_eq!(OnDemand::read(&procs(3), &events, 1), None);
    }

    /// Dealt again, a worker on a host twice as fast takes twice the tasks: 6 tasks of
    /// 10 ms, workers at speed 1 and 0.5 take 4 and 2 (40 ms); either way round the same.
    #[test]
    fn dealt_again_the_faster_worker_takes_more_tasks() {
        let events = on_demand_trace(&[1, 1, 2, 1, 2, 1]);
        let d = OnDemand::read(&procs(3), &events, 0).unwrap();
        let m = machine(&[1.0, 1.0, 0.5]);
        let one = d.seconds(&m, &vec![0, 1, 2]);
        let other = d.seconds(&m, &vec![0, 2, 1]);
        assert!((one - other).abs() < 1e-9, "{one} {other}");
        assert!((one - 0.040).abs() < 1e-4, "{one}");
        // Both workers on the slow host, sharing its core: 6 tasks at 0.25 of the speed.
        let shared = d.seconds(&m, &vec![0, 2, 2]);
        assert!((shared - 0.120).abs() < 1e-4, "{shared}");
    }
}
