//! Attaching to a running MPI job (`lbf-trace -p`): each workload runs under two tracers at
//! once, one from the job's start and one attached to its ranks while messages are in flight
//! (a rank waiting in a receive, nonblocking requests posted and not completed). Every event
//! the attached capture produced must be one the capture from the start produced (the same
//! call, the same CPU), every message it matched must be the one the capture from the start
//! matched, every message both ends of which it saw must be matched, and its prediction for
//! the configuration the job ran in must be within the tolerance of the other capture tests,
//! of the measured time (on an idle machine) and of the capture from the start's prediction
//! for the same stretch.
//! Needs root; skips otherwise.

mod traced;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use lbf::capture::anomaly::Anomaly;
use lbf::capture::mpi::inspect::ProcFs;
use lbf::capture::mpi::Capture;
use lbf::capture::{EventLog, Summary};
use lbf::event::{Event, EventKind, MsgId};
use lbf::record::CaptureSink;
use traced::{
    can_trace, check_accounts, check_prediction, predict_as_run, probe_mpi, timed, trace_attaching,
    workload_built_by, Attach, Measured, Mpi, Setup, Traced, TIME_TOLERANCE,
};

/// The boundary effects an attach may report (see `lbf::capture::alignment`), besides the
/// calls entered between the probes' attach and the process's.
const BOUNDARY: [Anomaly; 5] = [
    Anomaly::RecvOfEarlierSend,
    Anomaly::SendToEarlierRecv,
    Anomaly::RequestBeforeAttach,
    Anomaly::InProgressAtAttach,
    Anomaly::CollectiveEnteredBeforeAttach,
];

/// The longest this machine's virtual CPUs were seen to stop without the stopped thread's
/// scheduler clock counting it (`sum_exec_runtime` against `CLOCK_MONOTONIC` in a spinning
/// thread: ~120 pauses a second of 20-100 µs, a few a minute of 1-9 ms), and then some.
/// The two tracers stamp a call one after the other; a pause between their stamps is wall
/// time, which a clock read while the thread runs counts until the scheduler's total
/// replaces it at the next switch (see `lbf_common::maps::ThreadClock`), so one of the two
/// captures puts that much more CPU into the call's event and as much less into a later one.
const PAUSE_NS: u64 = 12_000_000;

/// One rank's CPU in the attached capture against the capture from the start: the events
/// that differ by more than the per-event tolerance ("transients", each at most
/// [`PAUSE_NS`]) and the running difference, which must stay within [`PAUSE_NS`]: what a
/// pause between the stamps puts into one event comes out of the following ones (or, for a
/// pause at a rank's first event after the attach, whose CPU is not compared, stays in the
/// running difference).
#[derive(Default)]
struct CpuDrift {
    /// Attached less from the start, summed over the events compared so far.
    running: i64,
    /// (event, attached CPU, CPU from the start) of each transient.
    transients: Vec<(usize, u64, u64)>,
    /// Events compared.
    events: usize,
}

impl CpuDrift {
    /// Compares event `k`'s CPU in the attached capture, `attached`, with the CPU the
    /// capture from the start has for the same stretch, `full`; returns why they disagree.
    fn compare(&mut self, k: usize, attached: u64, full: u64) -> Result<(), String> {
        self.events += 1;
        self.running += attached as i64 - full as i64;
        let off = attached.abs_diff(full);
        if off > 200_000 + full / 100 {
            self.transients.push((k, attached, full));
        }
        if off > PAUSE_NS || self.running.unsigned_abs() > PAUSE_NS {
            return Err(format!(
                "{off} ns apart, {} ns apart since the attach",
                self.running
            ));
        }
        // A pause puts its time into one capture's event and takes it out of the next ones
        // (two transients); more than a few a second is not what pauses do.
        if self.transients.len() > 4 + self.events / 50 {
            return Err(format!(
                "transients {:?} in {} events",
                self.transients, self.events
            ));
        }
        Ok(())
    }
}

/// A fresh MPI capture into memory.
fn capture() -> CaptureSink<EventLog> {
    CaptureSink::new(
        Capture::new(Box::new(ProcFs::new()), "localhost"),
        EventLog::default(),
    )
}

fn finish(sink: CaptureSink<EventLog>) -> (EventLog, Summary) {
    let (log, summary) = sink.into_parts();
    (log, summary.expect("the capture finished"))
}

/// Runs workload `name` with 2 ranks and `args`, traced from its start and by a tracer
/// attached to its ranks 0.3 s after the first capture's first 200 records (a dozen
/// iterations); returns both runs.
fn run(mpi: Mpi, name: &str, args: &str) -> (Traced, Traced) {
    let bin = workload_built_by(&format!("mpicc.{}", mpi.name()), "mpi", name, &[]);
    let attach = Attach {
        program: name.to_string(),
        procs: 2,
        after_records: 200,
        after: Duration::from_millis(300),
    };
    trace_attaching(
        &format!("attach-{name}-{}", mpi.name()),
        &mpi.launch(2, &bin.display().to_string(), args, Setup::default()),
        probe_mpi,
        &attach,
        capture(),
        finish,
        capture,
        finish,
    )
}

/// One event of one rank: its rank and index in that rank's events.
type At = (u32, usize);

/// Each rank's events, in order.
fn per_rank(log: &EventLog) -> HashMap<u32, Vec<Event>> {
    let mut ranks: HashMap<u32, Vec<Event>> = HashMap::new();
    for e in &log.events {
        ranks.entry(e.proc).or_default().push(*e);
    }
    ranks
}

/// Where each message was sent and received.
fn ends(ranks: &HashMap<u32, Vec<Event>>) -> (HashMap<MsgId, At>, HashMap<MsgId, At>) {
    let (mut sent, mut received) = (HashMap::new(), HashMap::new());
    for (&rank, events) in ranks {
        for (i, e) in events.iter().enumerate() {
            match e.kind {
                EventKind::Send { msg, .. } => sent.insert(msg, (rank, i)),
                EventKind::RecvEnd { msg } => received.insert(msg, (rank, i)),
                _ => None,
            };
        }
    }
    (sent, received)
}

/// Whether an event of the attached capture can be `full`'s event: the same kind, except a
/// receive of a message sent before the attach, which the attached capture has no send for,
/// and a collective some member entered before the attach: those are `Keepalive`s.
fn same_call(attached: &EventKind, full: &EventKind) -> bool {
    use EventKind::*;
    match (attached, full) {
        (Send { bytes: a, .. }, Send { bytes: b, .. }) => a == b,
        (RecvEnd { .. } | Keepalive, RecvEnd { .. }) => true,
        (Keepalive, CollStart { .. } | CollEnd { .. }) => true,
        (CollStart { op: a, size: m, .. }, CollStart { op: b, size: n, .. }) => a == b && m == n,
        (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}

/// For each rank, the index in `full` of each of its events in `attached`. The attached
/// capture's events are the full capture's last ones, less those of calls that completed
/// only requests posted before the attach (it never saw them posted): matched from the end,
/// skipping the full capture's events that do not fit.
fn correspondence(
    full: &HashMap<u32, Vec<Event>>,
    attached: &HashMap<u32, Vec<Event>>,
) -> HashMap<u32, Vec<usize>> {
    let mut map = HashMap::new();
    for (&rank, b) in attached {
        let a = &full[&rank];
        let mut at = vec![0; b.len()];
        let mut x = a.len();
        for k in (0..b.len()).rev() {
            loop {
                assert!(
                    x > 0,
                    "rank {rank}: event {k} of the attached capture ({:?}) is not one of the \
                     capture from the start",
                    b[k]
                );
                x -= 1;
                if same_call(&b[k].kind, &a[x].kind) {
                    break;
                }
            }
            at[k] = x;
        }
        map.insert(rank, at);
    }
    map
}

/// The collective instance of a `CollStart` or `CollEnd`.
fn collective(kind: &EventKind) -> Option<u64> {
    match *kind {
        EventKind::CollStart { coll, .. } | EventKind::CollEnd { coll } => Some(coll),
        _ => None,
    }
}

/// Checks the attached capture's collectives against the capture from the start's: each of
/// its instances is one instance there, a different one for each, and an instance it left out
/// is one a member entered before its attach. Returns the instances it modelled.
fn check_collectives(
    a: &HashMap<u32, Vec<Event>>,
    b: &HashMap<u32, Vec<Event>>,
    at: &HashMap<u32, Vec<usize>>,
) -> usize {
    let mut instance: HashMap<u64, u64> = HashMap::new();
    let mut left_out = HashSet::new();
    for (&rank, events) in b {
        for (k, e) in events.iter().enumerate() {
            let Some(truth) = collective(&a[&rank][at[&rank][k]].kind) else {
                continue;
            };
            match collective(&e.kind) {
                Some(coll) => {
                    let was = *instance.entry(coll).or_insert(truth);
                    assert_eq!(was, truth, "rank {rank} event {k}: two instances made one");
                }
                None => {
                    left_out.insert(truth);
                }
            }
        }
    }
    let distinct: HashSet<u64> = instance.values().copied().collect();
    assert_eq!(distinct.len(), instance.len(), "one instance made two");
    // A member's event of a left-out instance that the attached capture has no event for:
    // the member entered it before the attach.
    for truth in &left_out {
        let unseen = a.iter().any(|(rank, events)| {
            events
                .iter()
                .enumerate()
                .any(|(x, e)| collective(&e.kind) == Some(*truth) && !at[rank].contains(&x))
        });
        assert!(
            unseen,
            "collective {truth:x} left out although every member entered it after the attach"
        );
    }
    instance.len()
}

/// The capture from the start, cut where the attached capture's events begin (each rank
/// leaves there; a receive whose send comes after the cut takes none, a collective not every
/// member entered before it is left out).
fn cut_at_attach(
    full: &Traced,
    a: &HashMap<u32, Vec<Event>>,
    at: &HashMap<u32, Vec<usize>>,
) -> Traced {
    let before = |rank: &u32| &a[rank][..at[rank][0]];
    let sent: HashSet<MsgId> = a
        .keys()
        .flat_map(before)
        .filter_map(|e| match e.kind {
            EventKind::Send { msg, .. } => Some(msg),
            _ => None,
        })
        .collect();
    let mut entered: HashMap<u64, u32> = HashMap::new();
    for e in a.keys().flat_map(before) {
        if let EventKind::CollStart { coll, .. } = e.kind {
            *entered.entry(coll).or_default() += 1;
        }
    }
    let size: HashMap<u64, u32> = a
        .values()
        .flatten()
        .filter_map(|e| match e.kind {
            EventKind::CollStart { coll, size, .. } => Some((coll, size)),
            _ => None,
        })
        .collect();
    let incomplete = |coll: u64| entered.get(&coll) < size.get(&coll);
    let mut log = EventLog {
        procs: full.log.procs.clone(),
        events: Vec::new(),
    };
    for &rank in a.keys() {
        for e in before(&rank) {
            let kind = match e.kind {
                EventKind::RecvEnd { msg } if !sent.contains(&msg) => EventKind::Keepalive,
                // Eager, as the attached capture models every message (see `eager`).
                kind @ (EventKind::Send { .. }
                | EventKind::SendEnd { .. }
                | EventKind::RecvPost { .. }) => eager(kind),
                EventKind::CollStart { coll, .. } | EventKind::CollEnd { coll }
                    if incomplete(coll) =>
                {
                    EventKind::Keepalive
                }
                kind => kind,
            };
            log.events.push(Event { kind, ..*e });
        }
        log.events.push(Event {
            proc: rank,
            cpu_ns: 0,
            kind: EventKind::Exit,
        });
    }
    Traced {
        log,
        summary: full.summary.clone(),
        checks: Vec::new(),
        output: String::new(),
        machine_cpu_seconds: 0.0,
        own_cpu_seconds: 0.0,
        steal_seconds: 0.0,
    }
}

/// `kind` as a capture attached mid-run models it: every message eager (a receive posted before
/// the attach is not seen, so no send may wait for its post).
fn eager(kind: EventKind) -> EventKind {
    match kind {
        EventKind::Send { msg, bytes, .. } => EventKind::Send {
            after: 0,
            msg,
            bytes,
            rendezvous: false,
        },
        EventKind::SendEnd { .. } | EventKind::RecvPost { .. } => EventKind::Keepalive,
        kind => kind,
    }
}

/// Checks that the attached capture's prediction for the configuration the job ran in is the
/// capture from the start's for the same stretch: the whole run's less the part before the
/// attach. Both come from the CPU the ranks used, so unlike a comparison with the measured
/// time this holds on a busy machine too.
fn check_model_of_the_tail(mpi: Mpi, full: &Traced, attached: &Traced) {
    let (a, b) = (per_rank(&full.log), per_rank(&attached.log));
    let at = correspondence(&a, &b);
    let whole = Traced {
        log: EventLog {
            procs: full.log.procs.clone(),
            events: full
                .log
                .events
                .iter()
                .map(|e| Event {
                    kind: eager(e.kind),
                    ..*e
                })
                .collect(),
        },
        summary: full.summary.clone(),
        checks: Vec::new(),
        output: String::new(),
        machine_cpu_seconds: 0.0,
        own_cpu_seconds: 0.0,
        steal_seconds: 0.0,
    };
    let spin = mpi.spin(full.summary.procs.len() as u32);
    let tail = predict_as_run(&whole, spin) - predict_as_run(&cut_at_attach(full, &a, &at), spin);
    let start = attached
        .summary
        .procs
        .iter()
        .map(|p| p.start_ns)
        .min()
        .unwrap_or(0) as f64
        * 1e-9;
    let predicted = predict_as_run(attached, spin) - start;
    eprintln!(
        "attached capture: predicted {predicted:.4} s from the attach, the capture from the start \
         {tail:.4} s for the same stretch"
    );
    assert!(
        (predicted - tail).abs() <= TIME_TOLERANCE * tail,
        "the attached capture predicts {predicted:.4} s from the attach, the capture from the \
         start {tail:.4} s"
    );
}

/// Checks the attached capture against the capture from the start: same events and CPU
/// (up to pauses between the two tracers' stamps, see [`CpuDrift`]), the same message for every receive it matched, every message matched whose two ends it
/// saw, and a receive without its message only for messages sent before its sender's attach;
/// the same for collectives ([`check_collectives`]). Returns how many of its receives took a
/// message sent before the attach, and how many of its sends went to receives posted before
/// it.
fn check_matching(full: &Traced, attached: &Traced) -> (usize, usize) {
    let (a, b) = (per_rank(&full.log), per_rank(&attached.log));
    let at = correspondence(&a, &b);
    let collectives = check_collectives(&a, &b, &at);
    let (a_sent, _) = ends(&a);
    let (b_sent, _) = ends(&b);
    let in_full = |(rank, i): At| (rank, at[&rank][i]);
    // The first event of each rank the attached capture saw, in the full capture.
    let window = |rank: u32| at[&rank].first().copied().unwrap_or(usize::MAX);
    let (mut matched, mut earlier) = (0, 0);
    let mut drift: HashMap<u32, CpuDrift> = HashMap::new();
    for (&rank, events) in &b {
        for (k, e) in events.iter().enumerate() {
            let x = at[&rank][k];
            let full_event = a[&rank][x];
            // The CPU since the previous event: the full capture's events in between (those
            // of calls the attached capture did not model) included. The first event carries
            // the CPU since the attach.
            if k == 0 {
                assert!(e.cpu_ns > 0, "rank {rank}: no CPU from the attach to {e:?}");
            } else {
                let since: u64 = a[&rank][at[&rank][k - 1] + 1..=x]
                    .iter()
                    .map(|e| e.cpu_ns)
                    .sum();
                let drift = drift.entry(rank).or_default();
                if let Err(why) = drift.compare(k, e.cpu_ns, since) {
                    panic!(
                        "rank {rank} event {k} {e:?}: CPU {} ns, from the start {since} ns (the \
                         full capture's events {}..={x}: {:?}): {why}",
                        e.cpu_ns,
                        at[&rank][k - 1] + 1,
                        &a[&rank][at[&rank][k - 1] + 1..=x],
                    );
                }
            }
            let EventKind::RecvEnd { msg: truth } = full_event.kind else {
                continue;
            };
            let send = a_sent[&truth];
            match e.kind {
                EventKind::RecvEnd { msg } => {
                    let got = b_sent.get(&msg).map(|&s| in_full(s));
                    assert_eq!(
                        got,
                        Some(send),
                        "rank {rank} event {k}: the attached capture matched it to the send at \
                         {got:?}, the capture from the start to the send at {send:?}"
                    );
                    matched += 1;
                }
                _ => {
                    assert!(
                        send.1 < window(send.0),
                        "rank {rank} event {k}: unmatched, but its message (sent at {send:?}) \
                         was sent after the attach"
                    );
                    earlier += 1;
                }
            }
        }
    }
    // Sends the attached capture saw and left unreceived: received by receives it did not
    // see (posted before the attach), so by none of the events it has.
    let b_received: HashSet<MsgId> = ends(&b).1.into_keys().collect();
    let a_received = ends(&a).1;
    let mut unreceived = 0;
    for (msg, &(rank, k)) in &b_sent {
        if b_received.contains(msg) {
            continue;
        }
        let EventKind::Send { msg: truth, .. } = a[&rank][at[&rank][k]].kind else {
            unreachable!("sends correspond to sends");
        };
        let (to, x) = a_received[&truth];
        assert!(
            !at[&to].contains(&x),
            "the message sent by rank {rank} (its event {k}) was received by an event the \
             attached capture has, yet left unmatched"
        );
        unreceived += 1;
    }
    for (rank, d) in &drift {
        eprintln!(
            "rank {rank}: CPU {} ns apart from the capture from the start after {} events; \
             transients (event, attached, from the start): {:?}",
            d.running, d.events, d.transients
        );
    }
    eprintln!(
        "attached capture: {matched} messages matched as from the start, {earlier} receives of \
         messages sent before the attach, {unreceived} sends received by receives posted before \
         it, {collectives} collectives"
    );
    assert!(
        matched + collectives > 100,
        "too few messages and collectives after the attach: {matched}, {collectives}"
    );
    (earlier, unreceived)
}

/// Checks a job attached mid-run; the capture from its start is checked as in `capture_mpi`.
/// `in_flight`: the workload has a message, request or collective in flight nearly always,
/// so the attach must have found one (a run whose attach found none is a miss, retried).
fn check(mpi: Mpi, in_flight: bool, (full, attached): (Traced, Traced)) -> Result<(), String> {
    check_accounts(&full, 2, |c| c.num("rank") as usize);
    let s = &attached.summary;
    eprintln!("attached capture: anomalies {:?}", s.anomalies);
    assert!(
        s.anomalies.keys().all(|k| BOUNDARY.contains(k)),
        "anomalies beyond the attach's boundary: {:?}",
        s.anomalies
    );
    assert_eq!(s.procs.len(), 2);
    let (earlier, unreceived) = check_matching(&full, &attached);
    let counted = |what: &Anomaly| s.anomalies.get(what).copied().unwrap_or(0) as usize;
    // A receive of an earlier message completed through a request made before the attach is
    // counted by the capture as that request (BOUNDARY[2]), not as the receive (BOUNDARY[0]).
    let (receives, requests) = (counted(&BOUNDARY[0]), counted(&BOUNDARY[2]));
    assert!(
        receives <= earlier
            && earlier <= receives + requests
            && counted(&BOUNDARY[1]) == unreceived,
        "what the capture says it could not pair: {receives} receives of earlier messages and \
         {requests} earlier requests for {earlier}, {} sends for {unreceived}",
        counted(&BOUNDARY[1])
    );
    // Calls in progress at the attach: requests posted before it, and calls entered between
    // the probes' attach and the process's (their exit comes without its entry). The attach
    // can fall in the few microseconds where none is (the master between a result received
    // and the next task's send gone): that run did not exercise the attach, and is retried.
    let found = earlier
        + unreceived
        + counted(&BOUNDARY[2])
        + counted(&BOUNDARY[3])
        + counted(&BOUNDARY[4]);
    if in_flight && found == 0 {
        return Err("nothing was in flight at the attach: the run did not exercise it".into());
    }
    check_model_of_the_tail(mpi, &full, &attached);
    let spin = mpi.spin(attached.summary.procs.len() as u32);
    check_prediction(&attached, spin, Measured::Capture)
}

macro_rules! attach_tests {
    ($($test:ident: $mpi:expr, $name:literal, $args:literal, $in_flight:literal;)*) => {$(
        #[test]
        fn $test() {
            if can_trace() {
                timed(|| check($mpi, $in_flight, run($mpi, $name, $args)));
            }
        }
    )*};
}

// The second tracer attaches some 0.3 s into the first phase of each: the ring's token
// phase (blocking Send/Recv: a rank is always waiting in a receive) lasts 1.5 s, the halo's
// (Irecv/Isend/Waitall: requests pending while the ranks compute) 1 s; the master always
// waits for a result while its workers compute. In the collectives' first phase (2 s) rank 0
// waits in a collective for rank 1 about half the time.
attach_tests! {
    ring_mpich: Mpi::Mpich, "ring", "150 5", true;
    ring_openmpi: Mpi::OpenMpi, "ring", "150 5", true;
    halo_mpich: Mpi::Mpich, "halo", "200 5", true;
    halo_openmpi: Mpi::OpenMpi, "halo", "200 5", true;
    collectives_mpich: Mpi::Mpich, "collectives", "100 5", false;
    collectives_openmpi: Mpi::OpenMpi, "collectives", "100 5", false;
    master_worker_mpich: Mpi::Mpich, "master_worker", "100 5", true;
    master_worker_openmpi: Mpi::OpenMpi, "master_worker", "100 5", true;
}
