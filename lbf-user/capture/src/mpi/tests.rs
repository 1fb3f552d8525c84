//! Capture tests on synthetic records: matching, CPU accounting and process selection,
//! without eBPF.

use std::collections::HashMap;

use lbf_common::{mpi, Record, RecordKind, ARG_WORDS, MEM_BYTES};

use super::inspect::{CpuAllowance, InspectError, LaunchRank, ProcessInspector};
use super::library::Abi;
use super::matching::Envelope;
use super::mpich::{self, Mpich};
use super::openmpi::OpenMpi;
use super::Capture;
use crate::anomaly::Anomaly;
use crate::{ids, EventLog, EventSink, Summary};
use lbf_model::event::{CollOp, Event, EventDetail, EventKind, MsgId, ProcInfo};

/// Answers from a fixed table: tgid -> (ABI, world rank, world size).
struct FakeInspector(HashMap<u32, (Abi, Option<u32>, u32)>);

impl ProcessInspector for FakeInspector {
    fn abi(&mut self, tgid: u32) -> Result<Abi, InspectError> {
        self.0.get(&tgid).map(|p| p.0).ok_or(InspectError {
            tgid,
            reason: "no MPI library mapped".into(),
        })
    }
    fn launch_rank(&mut self, tgid: u32) -> Option<LaunchRank> {
        let &(_, rank, size) = self.0.get(&tgid)?;
        Some(LaunchRank {
            rank: rank?,
            size: Some(size),
        })
    }
    /// Every process it knows may run on CPUs 0 and 1, in a cgroup allowed 1.5 CPUs.
    fn cpus(&mut self, tgid: u32) -> Option<CpuAllowance> {
        self.0.contains_key(&tgid).then(|| CpuAllowance {
            list: "0-1".into(),
            quota: Some(lbf_host::CpuQuota {
                cpus: 1.5,
                cgroup: "/job".into(),
            }),
        })
    }
}

const WORLD: u64 = mpich::COMM_WORLD;
const INT: u64 = 0x4c00_0405;
const ANY_SOURCE: u64 = (-2i32) as u32 as u64;
const ANY_TAG: u64 = (-1i32) as u32 as u64;
const STATUS_IGNORE: u64 = 1;

/// Drives a capture with records of MPICH processes 100 + rank, into `log`.
struct Run<S = EventLog> {
    capture: Capture,
    log: S,
    ts: u64,
}

impl Run {
    fn mpich(ranks: u32) -> Self {
        let table = (0..ranks)
            .map(|r| (100 + r, (Abi::Mpich(Mpich), Some(r), ranks)))
            .collect();
        Run {
            capture: Capture::new(Box::new(FakeInspector(table)), "host"),
            log: EventLog::default(),
            ts: 1_000,
        }
    }

    fn finish(self) -> (EventLog, Summary) {
        let mut log = self.log;
        let summary = self.capture.finish(&mut log);
        (log, summary)
    }
}

impl<S: EventSink> Run<S> {
    fn record(
        &mut self,
        kind: RecordKind,
        rank: u32,
        fn_id: u16,
        cpu: u64,
        args: &[u64],
        mem: &[u8],
    ) {
        let mut r = Record {
            kind: kind as u16,
            fn_id,
            mem_len: mem.len() as u16,
            part: 0,
            tgid: 100 + rank,
            tid: 100 + rank,
            ts_ns: self.ts,
            cpu_ns: cpu,
            args: [0; ARG_WORDS],
            mem: [0; MEM_BYTES],
        };
        self.ts += 1_000;
        r.args[..args.len()].copy_from_slice(args);
        r.mem[..mem.len()].copy_from_slice(mem);
        self.capture.record(&r, &mut self.log);
    }

    fn enter(&mut self, rank: u32, fn_id: u16, cpu: u64, args: &[u64], mem: &[u8]) {
        self.record(RecordKind::CallEntry, rank, fn_id, cpu, args, mem);
    }

    fn leave(&mut self, rank: u32, fn_id: u16, cpu: u64, mem: &[u8]) {
        self.record(RecordKind::CallExit, rank, fn_id, cpu, &[0], mem);
    }

    fn init(&mut self, rank: u32, cpu: u64) {
        self.enter(rank, mpi::INIT, cpu, &[], &[]);
        self.leave(rank, mpi::INIT, cpu, &[]);
    }

    fn send(&mut self, rank: u32, cpu: u64, count: u64, dest: u64, tag: u64) {
        self.enter(
            rank,
            mpi::SEND,
            cpu,
            &[0, count, INT, dest, tag, WORLD],
            &[],
        );
        self.leave(rank, mpi::SEND, cpu + 10, &[]);
    }

    fn recv(&mut self, rank: u32, cpu: (u64, u64), source: u64, tag: u64, status: &[u8]) {
        let status_ptr = if status.is_empty() {
            STATUS_IGNORE
        } else {
            0x1000
        };
        self.enter(
            rank,
            mpi::RECV,
            cpu.0,
            &[0, 1, INT, source, tag, WORLD, status_ptr],
            &[],
        );
        self.leave(rank, mpi::RECV, cpu.1, status);
    }

    /// The tracer started tracing running rank `rank`, whose clock read `cpu`.
    fn attach(&mut self, rank: u32, cpu: u64) {
        self.record(RecordKind::Attach, rank, 0, cpu, &[], &[]);
    }

    fn finalize(&mut self, rank: u32, cpu: u64) {
        self.enter(rank, mpi::FINALIZE, cpu, &[], &[]);
        self.leave(rank, mpi::FINALIZE, cpu, &[]);
    }
}

fn status(source: i32, tag: i32, bytes: u32) -> Vec<u8> {
    [bytes as i32, 0, source, tag, 0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

fn handles(hs: &[u32]) -> Vec<u8> {
    hs.iter().flat_map(|h| h.to_le_bytes()).collect()
}

/// The events of one process, as (cpu, kind).
/// The id of the `k`-th message from rank `src` to rank `dst` with `tag` in `MPI_COMM_WORLD`.
fn msg(src: u32, dst: u32, tag: i32, k: u64) -> MsgId {
    let env = Envelope {
        comm: ids::WORLD,
        src,
        dst,
        tag,
    };
    ids::message(&env, k)
}

fn of(log: &EventLog, proc: u32) -> Vec<(u64, EventKind)> {
    log.events
        .iter()
        .filter(|e| e.proc == proc)
        .map(|e| (e.cpu_ns, e.kind))
        .collect()
}

/// Checks every Send's message is consumed by exactly one RecvEnd.
fn assert_matched(log: &EventLog) {
    let mut sends: Vec<u64> = log
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Send { msg, .. } => Some(msg),
            _ => None,
        })
        .collect();
    let mut recvs: Vec<u64> = log
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::RecvEnd { msg } => Some(msg),
            _ => None,
        })
        .collect();
    sends.sort();
    recvs.sort();
    assert_eq!(sends, recvs);
}

/// Each rank's header says the CPU its thread had used when `MPI_Init` returned, the CPUs
/// it could run on and its cgroup's quota: what the start-up model needs (`lbf::startup`).
#[test]
fn ranks_carry_their_start_up_cpu_and_cpus() {
    let mut run = Run::mpich(2);
    for (rank, cpu) in [(0, 50), (1, 60)] {
        run.init(rank, cpu);
        run.finalize(rank, cpu + 100);
    }
    let (log, _) = run.finish();
    let figures: Vec<(u64, &str, u64, &str)> = log
        .procs
        .iter()
        .map(|p| {
            let quota = (p.cpu_quota_milli, p.quota_cgroup.as_str());
            (p.startup_cpu_ns, p.cpus.as_str(), quota.0, quota.1)
        })
        .collect();
    assert_eq!(
        figures,
        [(50, "0-1", 1500, "/job"), (60, "0-1", 1500, "/job")]
    );
}

#[test]
fn blocking_ping_pong_cpu_split_into_work_and_waiting() {
    let mut run = Run::mpich(2);
    run.init(0, 50);
    run.init(1, 60);
    run.send(0, 100, 4, 1, 0);
    run.recv(1, (150, 400), 0, 0, &status(0, 0, 16));
    run.send(1, 500, 2, 0, 0);
    run.recv(0, (120, 600), 1, 0, &[]);
    run.finalize(0, 700);
    run.finalize(1, 800);
    let (log, summary) = run.finish();
    assert_matched(&log);
    let p0 = of(&log, 0);
    // The 50 ns until MPI_Init returned are start-up, in no event.
    assert_eq!(
        p0[0],
        (
            50,
            EventKind::Send {
                after: 0,
                msg: msg(0, 1, 0, 0),
                bytes: 16,
                rendezvous: false,
            }
        )
    );
    // The 10 ns inside the send are work, carried to the receive's start.
    assert_eq!(p0[1], (20, EventKind::RecvStart));
    assert_eq!(
        p0[2],
        (
            480,
            EventKind::RecvEnd {
                msg: msg(1, 0, 0, 0)
            }
        )
    );
    assert_eq!(p0[3], (100, EventKind::Exit));
    let p1 = of(&log, 1);
    assert_eq!(p1[0], (90, EventKind::RecvStart));
    assert_eq!(
        p1[1],
        (
            250,
            EventKind::RecvEnd {
                msg: msg(0, 1, 0, 0)
            }
        )
    );
    assert_eq!(summary.stats[0].cpu_ns, 650);
    assert_eq!(summary.stats[1].cpu_ns, 740);
    assert_eq!(
        (
            summary.stats[0].untimed_cpu_ns,
            summary.stats[1].untimed_cpu_ns
        ),
        (50, 60)
    );
    assert_eq!(summary.stats[1].wait_ns, 250);
    assert_eq!(
        (summary.stats[0].recv_bytes, summary.stats[1].recv_bytes),
        (8, 16)
    );
    assert_eq!((summary.unmatched_sends, summary.unmatched_recvs), (0, 0));
    assert!(summary.anomalies.is_empty(), "{:?}", summary.anomalies);
    assert_eq!(
        log.procs
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["rank 0", "rank 1"]
    );
}

#[test]
fn any_source_receives_resolve_from_status() {
    let mut run = Run::mpich(3);
    for r in 0..3 {
        run.init(r, 0);
    }
    run.send(2, 10, 1, 0, 7);
    run.send(1, 10, 2, 0, 8);
    // The master receives rank 1's message first although rank 2 sent first.
    run.recv(0, (10, 20), ANY_SOURCE, ANY_TAG, &status(1, 8, 8));
    run.recv(0, (30, 40), ANY_SOURCE, ANY_TAG, &status(2, 7, 4));
    for r in 0..3 {
        run.finalize(r, 100);
    }
    let (log, summary) = run.finish();
    assert_matched(&log);
    let p0 = of(&log, 0);
    let sent_by = |proc| {
        of(&log, proc).iter().find_map(|(_, k)| match k {
            EventKind::Send { msg, .. } => Some(*msg),
            _ => None,
        })
    };
    assert_eq!(
        p0[1].1,
        EventKind::RecvEnd {
            msg: sent_by(1).unwrap()
        }
    );
    assert_eq!(
        p0[3].1,
        EventKind::RecvEnd {
            msg: sent_by(2).unwrap()
        }
    );
    assert_eq!(summary.stats[0].recv_bytes, 12);
}

#[test]
fn waitany_completes_out_of_order_and_test_without_completion_is_work() {
    let mut run = Run::mpich(3);
    for r in 0..3 {
        run.init(r, 0);
    }
    // Rank 0 posts receives from 1 and 2 (requests 0xa, 0xb).
    run.enter(0, mpi::IRECV, 10, &[0, 1, INT, 1, 5, WORLD, 0x2000], &[]);
    run.leave(0, mpi::IRECV, 11, &handles(&[0xa]));
    run.enter(0, mpi::IRECV, 12, &[0, 1, INT, 2, 5, WORLD, 0x2004], &[]);
    run.leave(0, mpi::IRECV, 13, &handles(&[0xb]));
    // A test that completes nothing: no events, its CPU stays work.
    run.enter(
        0,
        mpi::TEST,
        20,
        &[0x2000, 0x3000, STATUS_IGNORE],
        &handles(&[0xa]),
    );
    run.leave(0, mpi::TEST, 25, &handles(&[0xa]));
    run.send(2, 30, 1, 0, 5);
    // Waitany returns index 1: request 0xb became MPI_REQUEST_NULL.
    let null = 0x2c00_0000;
    run.enter(
        0,
        mpi::WAITANY,
        40,
        &[2, 0x2000, 0x3000, STATUS_IGNORE],
        &handles(&[0xa, 0xb]),
    );
    run.leave(0, mpi::WAITANY, 70, &handles(&[0xa, null]));
    run.send(1, 80, 1, 0, 5);
    run.enter(
        0,
        mpi::WAITANY,
        90,
        &[2, 0x2000, 0x3000, STATUS_IGNORE],
        &handles(&[0xa, null]),
    );
    run.leave(0, mpi::WAITANY, 95, &handles(&[null, null]));
    for r in 0..3 {
        run.finalize(r, 200);
    }
    let (log, summary) = run.finish();
    assert_matched(&log);
    let (from1, from2) = (msg(1, 0, 5, 0), msg(2, 0, 5, 0));
    // Each MPI_Irecv posts its receive where it was called; the 1 ns inside the first and
    // the test's CPU are work, carried to the next event.
    assert_eq!(
        of(&log, 0),
        vec![
            (10, EventKind::RecvPost { msg: from1 }),
            (2, EventKind::RecvPost { msg: from2 }),
            (28, EventKind::RecvStart),
            (30, EventKind::RecvEnd { msg: from2 }),
            (20, EventKind::RecvStart),
            (5, EventKind::RecvEnd { msg: from1 }),
            (105, EventKind::Exit),
        ],
        "rank 2's message first"
    );
    assert_eq!(summary.stats[0].recvs, 2);
}

#[test]
fn waitall_uses_statuses_for_any_source() {
    let mut run = Run::mpich(3);
    for r in 0..3 {
        run.init(r, 0);
    }
    run.enter(
        0,
        mpi::IRECV,
        10,
        &[0, 1, INT, ANY_SOURCE, 3, WORLD, 0x2000],
        &[],
    );
    run.leave(0, mpi::IRECV, 10, &handles(&[0xa]));
    run.enter(
        0,
        mpi::IRECV,
        10,
        &[0, 1, INT, ANY_SOURCE, 3, WORLD, 0x2004],
        &[],
    );
    run.leave(0, mpi::IRECV, 10, &handles(&[0xb]));
    run.enter(0, mpi::ISEND, 11, &[0, 3, INT, 1, 3, WORLD, 0x2008], &[]);
    run.leave(0, mpi::ISEND, 12, &handles(&[0xc]));
    run.send(1, 20, 1, 0, 3);
    run.send(2, 20, 2, 0, 3);
    run.recv(1, (30, 40), 0, 3, &[]);
    let statuses = [status(2, 3, 8), status(1, 3, 4), status(0, 0, 0)].concat();
    run.enter(
        0,
        mpi::WAITALL,
        50,
        &[3, 0x2000, 0x4000],
        &handles(&[0xa, 0xb, 0xc]),
    );
    run.leave(0, mpi::WAITALL, 90, &statuses);
    for r in 0..3 {
        run.finalize(r, 100);
    }
    let (log, summary) = run.finish();
    assert_matched(&log);
    // Request 0xa got rank 2's message (status), 0xb rank 1's; each post names it.
    let (from1, from2) = (msg(1, 0, 3, 0), msg(2, 0, 3, 0));
    let p0 = of(&log, 0);
    assert_eq!(
        p0[..6],
        [
            (10, EventKind::RecvPost { msg: from2 }),
            (0, EventKind::RecvPost { msg: from1 }),
            (
                1,
                EventKind::Send {
                    after: 0,
                    msg: msg(0, 1, 3, 0),
                    bytes: 12,
                    rendezvous: false
                }
            ),
            (39, EventKind::RecvStart),
            (40, EventKind::RecvEnd { msg: from2 }),
            (0, EventKind::RecvEnd { msg: from1 }),
        ]
    );
    assert_eq!(summary.stats[0].sends, 1);
}

#[test]
fn sendrecv_ring_and_probe() {
    let mut run = Run::mpich(2);
    run.init(0, 0);
    run.init(1, 0);
    for r in 0..2u32 {
        let other = u64::from(1 - r);
        // The record keeps (sendcount, sendtype, dest, sendtag, source, recvtag, comm,
        // status): the buffers, receive count and type are left out.
        let args = [4, INT, other, 9, other, 9, WORLD, 0x1000];
        run.enter(r, mpi::SENDRECV, 10, &args, &[]);
    }
    // Rank 0's status says rank 1 sent 16 bytes with tag 9.
    run.leave(0, mpi::SENDRECV, 30, &status(1, 9, 16));
    run.leave(1, mpi::SENDRECV, 35, &[]);
    // Rank 1 probes, then receives what it probed: the wait starts at the probe.
    run.send(0, 40, 1, 1, 4);
    run.enter(1, mpi::PROBE, 50, &[0, ANY_TAG, WORLD, 0x1000], &[]);
    run.leave(1, mpi::PROBE, 80, &status(0, 4, 4));
    run.recv(1, (85, 90), 0, 4, &[]);
    run.finalize(0, 100);
    run.finalize(1, 100);
    let (log, _) = run.finish();
    assert_matched(&log);
    let p1 = of(&log, 1);
    assert_eq!(
        p1[0],
        (
            10,
            EventKind::Send {
                after: 0,
                msg: msg(1, 0, 9, 0),
                bytes: 16,
                rendezvous: false,
            }
        )
    );
    assert_eq!(p1[1], (0, EventKind::RecvStart));
    assert_eq!(
        p1[2],
        (
            25,
            EventKind::RecvEnd {
                msg: msg(0, 1, 9, 0)
            }
        )
    );
    assert_eq!(p1[3], (15, EventKind::RecvStart), "from the probe's entry");
    assert_eq!(
        p1[4],
        (
            40,
            EventKind::RecvEnd {
                msg: msg(0, 1, 4, 0)
            }
        )
    );
}

#[test]
fn collectives_and_split_communicators() {
    let mut run = Run::mpich(4);
    for r in 0..4 {
        run.init(r, 0);
    }
    for r in 0..4 {
        run.enter(r, mpi::ALLREDUCE, 10, &[0, 0, 8, INT, 0, WORLD], &[]);
    }
    for r in 0..4 {
        run.leave(r, mpi::ALLREDUCE, 20 + u64::from(r), &[]);
    }
    // Split by parity, key = -rank: ranks in the new communicators are reversed.
    for r in 0..4u32 {
        run.enter(
            r,
            mpi::COMM_SPLIT,
            30,
            &[WORLD, u64::from(r % 2), (-(r as i32)) as u32 as u64, 0x5000],
            &[],
        );
    }
    for r in 0..4 {
        run.leave(r, mpi::COMM_SPLIT, 40, &handles(&[0x8400_0001]));
    }
    // Point-to-point inside the odd communicator: new rank 0 (world 3) sends to new rank 1
    // (world 1).
    run.enter(3, mpi::SEND, 50, &[0, 1, INT, 1, 0, 0x8400_0001], &[]);
    run.leave(3, mpi::SEND, 51, &[]);
    run.enter(
        1,
        mpi::RECV,
        50,
        &[0, 1, INT, 0, 0, 0x8400_0001, STATUS_IGNORE],
        &[],
    );
    run.leave(1, mpi::RECV, 60, &[]);
    for r in [0, 2] {
        run.enter(r, mpi::BARRIER, 50, &[0x8400_0001], &[]);
        run.leave(r, mpi::BARRIER, 55, &[]);
    }
    for r in 0..4 {
        run.finalize(r, 100);
    }
    let (log, summary) = run.finish();
    assert_matched(&log);
    let starts: Vec<(u32, u64, u32, u64)> = log
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::CollStart {
                coll,
                op: CollOp::Allreduce | CollOp::Barrier,
                size,
                bytes,
            } => Some((e.proc, coll, size, bytes)),
            _ => None,
        })
        .collect();
    // Allreduce: one instance of 4 with 32 bytes; the split: one of 4; the barrier: one of 2.
    let instance = |proc: u32, n: usize| {
        starts
            .iter()
            .filter(|s| s.0 == proc)
            .nth(n)
            .copied()
            .unwrap()
    };
    assert!((0..4).all(|p| instance(p, 0).1 == instance(0, 0).1
        && instance(p, 0).2 == 4
        && instance(p, 0).3 == 32));
    assert!((0..4).all(|p| instance(p, 1).1 == instance(0, 1).1));
    assert_eq!((instance(0, 2).1, instance(0, 2).2), (instance(2, 2).1, 2));
    assert_ne!(instance(0, 2).1, instance(0, 1).1);
    assert_eq!(summary.stats[1].recvs, 1);
    assert!(summary.anomalies.is_empty(), "{:?}", summary.anomalies);
}

/// A Cartesian communicator (`MPI_Cart_create`) has its parent's ranks and size: its
/// point-to-point messages are matched and its collectives have every member.
#[test]
fn cartesian_communicators_keep_their_parents_ranks() {
    let mut run = Run::mpich(2);
    for r in 0..2 {
        run.init(r, 0);
    }
    // (comm_old, ndims, dims, periods, reorder, comm_cart)
    for r in 0..2 {
        run.enter(
            r,
            mpi::CART_CREATE,
            10,
            &[WORLD, 1, 0x7000, 0x7010, 0, 0x5000],
            &[],
        );
    }
    for r in 0..2 {
        run.leave(r, mpi::CART_CREATE, 20, &handles(&[0x8400_0002]));
    }
    run.enter(0, mpi::SEND, 30, &[0, 4, INT, 1, 3, 0x8400_0002], &[]);
    run.leave(0, mpi::SEND, 31, &[]);
    run.enter(
        1,
        mpi::RECV,
        30,
        &[0, 4, INT, 0, 3, 0x8400_0002, STATUS_IGNORE],
        &[],
    );
    run.leave(1, mpi::RECV, 40, &[]);
    for r in 0..2 {
        run.enter(r, mpi::BARRIER, 50, &[0x8400_0002], &[]);
        run.leave(r, mpi::BARRIER, 55, &[]);
    }
    for r in 0..2 {
        run.finalize(r, 100);
    }
    let (log, summary) = run.finish();
    assert_matched(&log);
    assert!(summary.anomalies.is_empty(), "{:?}", summary.anomalies);
    assert_eq!(
        (summary.stats[0].send_bytes, summary.stats[1].recvs),
        (16, 1)
    );
    // The creation and the barrier, each one instance of both ranks.
    let sizes: Vec<(u32, u32)> = log
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::CollStart { size, .. } => Some((e.proc, size)),
            _ => None,
        })
        .collect();
    assert_eq!(sizes, [(0, 2), (1, 2), (0, 2), (1, 2)]);
}

#[test]
fn processes_without_mpi_calls_are_not_ranks_and_ids_follow_ranks() {
    // Rank comes from MPI_Comm_rank only (no launcher environment); tgid 300 is mpirun.
    let table = HashMap::from([
        (101, (Abi::Mpich(Mpich), None, 2)),
        (100, (Abi::Mpich(Mpich), None, 2)),
    ]);
    let mut run = Run {
        capture: Capture::new(Box::new(FakeInspector(table)), "h"),
        log: EventLog::default(),
        ts: 0,
    };
    let lifecycle = |run: &mut Run, kind, tgid: u32| {
        let mut r = Record {
            kind: kind as u16,
            fn_id: 0,
            mem_len: 0,
            part: 0,
            tgid,
            tid: tgid,
            ts_ns: run.ts,
            cpu_ns: 5,
            args: [0; ARG_WORDS],
            mem: [0; MEM_BYTES],
        };
        run.ts += 1_000_000_000;
        r.args[0] = 101;
        run.capture.record(&r, &mut run.log);
    };
    lifecycle(&mut run, RecordKind::Exec, 300);
    lifecycle(&mut run, RecordKind::Fork, 300);
    // tgid 101 is rank 0, tgid 100 rank 1.
    run.init(1, 0);
    run.init(0, 0);
    run.enter(1, mpi::COMM_RANK, 5, &[WORLD, 0x10], &[]);
    run.leave(1, mpi::COMM_RANK, 6, &0i32.to_le_bytes());
    run.enter(0, mpi::COMM_RANK, 5, &[WORLD, 0x10], &[]);
    run.send(0, 7, 1, 0, 0);
    run.leave(0, mpi::COMM_RANK, 6, &1i32.to_le_bytes());
    run.recv(1, (8, 9), 1, 0, &[]);
    run.finalize(0, 10);
    run.finalize(1, 10);
    lifecycle(&mut run, RecordKind::Exit, 300);
    let (log, summary) = run.finish();
    assert_matched(&log);
    assert_eq!(
        summary.procs.iter().map(|p| p.id).collect::<Vec<_>>(),
        [0, 1]
    );
    assert!(log.events.iter().all(|e| e.proc < 2));
    assert!(summary.measured_seconds > 2.0);
}

#[test]
fn open_mpi_handles_statuses_and_datatypes() {
    let world = 0x7f00_1234_5000;
    let abi = Abi::OpenMpi(OpenMpi {
        comm_world: world,
        comm_self: world + 0x200,
        request_null: 0x5000,
    });
    let table = HashMap::from([(100, (abi, Some(0), 2)), (101, (abi, Some(1), 2))]);
    let mut run = Run {
        capture: Capture::new(Box::new(FakeInspector(table)), "h"),
        log: EventLog::default(),
        ts: 0,
    };
    let mut datatype = vec![0u8; 32];
    datatype[24..32].copy_from_slice(&8u64.to_le_bytes());
    run.init(0, 0);
    run.init(1, 0);
    run.enter(
        0,
        mpi::SEND,
        10,
        &[0, 100, 0x7f00_0000_1000, 1, 3, world],
        &datatype,
    );
    run.leave(0, mpi::SEND, 11, &[]);
    let ompi_any_source = (-1i32) as u32 as u64;
    run.enter(
        1,
        mpi::RECV,
        10,
        &[0, 100, 0x7f00_0000_1000, ompi_any_source, 3, world, 0x1000],
        &[],
    );
    let mut status = Vec::new();
    for v in [0i32, 3, 0, 0] {
        status.extend(v.to_le_bytes());
    }
    status.extend(800u64.to_le_bytes());
    run.leave(1, mpi::RECV, 20, &status);
    run.finalize(0, 30);
    run.finalize(1, 30);
    let (log, summary) = run.finish();
    assert_matched(&log);
    assert_eq!(summary.stats[0].send_bytes, 800);
    assert_eq!(summary.stats[1].recv_bytes, 800);
}

#[test]
fn unmatched_receive_becomes_keepalive_and_missing_exit_is_added() {
    let mut run = Run::mpich(2);
    run.init(0, 0);
    run.recv(0, (10, 20), 1, 0, &[]);
    run.enter(0, mpi::BARRIER, 30, &[WORLD], &[]);
    let (log, summary) = run.finish();
    let p0 = of(&log, 0);
    assert_eq!(
        p0.iter().map(|e| e.1).collect::<Vec<_>>()[..2],
        [EventKind::RecvStart, EventKind::Keepalive]
    );
    assert_eq!(p0.last().unwrap().1, EventKind::Exit);
    assert_eq!(summary.unmatched_recvs, 1);
    assert!(!summary.anomalies.is_empty());
}

/// Attached to a token ring while rank 1 waits in a receive (not seen) and rank 0 computes:
/// rank 0's first send goes to that receive, so rank 1's first receive seen takes rank 0's
/// second send; each rank's first event carries the CPU since the attach. A barrier rank 0
/// was inside at the attach is left out; the next one is modelled.
#[test]
fn attached_mid_run_aligns_at_the_end_and_counts_cpu_from_the_attach() {
    let mut run = Run::mpich(2);
    run.attach(0, 5_000);
    run.attach(1, 7_000);
    // Rank 0 leaves the barrier it was in at the attach (not seen); rank 1 enters and leaves
    // it. Both then enter the next.
    run.enter(1, mpi::BARRIER, 7_100, &[WORLD], &[]);
    run.leave(1, mpi::BARRIER, 7_200, &[]);
    run.send(0, 6_000, 4, 1, 7);
    run.enter(0, mpi::BARRIER, 6_100, &[WORLD], &[]);
    run.enter(1, mpi::BARRIER, 7_300, &[WORLD], &[]);
    run.leave(0, mpi::BARRIER, 6_200, &[]);
    run.leave(1, mpi::BARRIER, 7_400, &[]);
    run.send(1, 8_000, 4, 0, 7);
    run.send(0, 10_000, 4, 1, 7);
    run.recv(1, (8_100, 12_000), 0, 7, &[]);
    run.recv(0, (10_100, 13_000), 1, 7, &[]);
    run.finalize(0, 14_000);
    run.finalize(1, 15_000);
    let (log, summary) = run.finish();
    let p0 = of(&log, 0);
    let p1 = of(&log, 1);
    assert_eq!(
        p0[0],
        (
            1_000,
            EventKind::Send {
                after: 0,
                msg: msg(0, 1, 7, 0),
                bytes: 16,
                rendezvous: false
            }
        ),
        "the CPU from the attach is work"
    );
    assert!(matches!(p0[1], (100, EventKind::CollStart { size: 2, .. })));
    assert!(matches!(p1[0], (100, EventKind::Keepalive)));
    assert!(matches!(p1[2], (100, EventKind::CollStart { .. })));
    assert_eq!(collective_of(&p0[1].1), collective_of(&p1[2].1));
    assert_eq!(
        p1.iter()
            .find(|e| matches!(e.1, EventKind::RecvEnd { .. }))
            .map(|e| e.1),
        Some(EventKind::RecvEnd {
            msg: msg(0, 1, 7, 1)
        }),
        "rank 1's receive takes rank 0's second send"
    );
    assert_eq!(
        p0.iter()
            .find(|e| matches!(e.1, EventKind::RecvEnd { .. }))
            .map(|e| e.1),
        Some(EventKind::RecvEnd {
            msg: msg(1, 0, 7, 0)
        })
    );
    // The CPU before the attach is in no figure.
    assert_eq!(summary.stats[0].cpu_ns, 14_000 - 5_000);
    assert_eq!(summary.stats[0].untimed_cpu_ns, 0);
    assert_eq!(
        log.procs[1].start_ns, 1_000,
        "the model starts at the attach"
    );
    let counted = |what: Anomaly| summary.anomalies.get(&what).copied();
    assert_eq!(counted(Anomaly::SendToEarlierRecv), Some(1));
    assert_eq!(counted(Anomaly::CollectiveEnteredBeforeAttach), Some(1));
    assert_eq!(summary.anomalies.len(), 2, "{:?}", summary.anomalies);
    assert_eq!(summary.unmatched_sends, 1);
}

/// The collective instance of a `CollStart` or `CollEnd`.
fn collective_of(kind: &EventKind) -> Option<u64> {
    match *kind {
        EventKind::CollStart { coll, .. } | EventKind::CollEnd { coll } => Some(coll),
        _ => None,
    }
}

/// MPICH sends more than 8255 bytes to a rank of its host by rendezvous: the send's CPU
/// inside is waiting, on a `SendEnd` at its exit. A smaller send stays eager.
#[test]
fn large_blocking_sends_go_by_rendezvous_and_end_at_their_return() {
    let mut run = Run::mpich(2);
    run.init(0, 0);
    run.init(1, 0);
    // 2064 ints = 8256 bytes, one above MPICH's eager limit on one host.
    run.enter(0, mpi::SEND, 100, &[0, 2064, INT, 1, 0, WORLD], &[]);
    run.leave(0, mpi::SEND, 130, &[]);
    run.recv(1, (20, 40), 0, 0, &status(0, 0, 8256));
    run.send(0, 150, 2063, 1, 1);
    run.recv(1, (50, 60), 0, 1, &status(0, 1, 8252));
    for r in 0..2 {
        run.finalize(r, 200);
    }
    let (log, summary) = run.finish();
    assert_matched(&log);
    let big = msg(0, 1, 0, 0);
    assert_eq!(
        of(&log, 0)[..3],
        [
            (
                100,
                EventKind::Send {
                    after: 0,
                    msg: big,
                    bytes: 8256,
                    rendezvous: true
                }
            ),
            (30, EventKind::SendEnd { msg: big }),
            (
                20,
                EventKind::Send {
                    after: 0,
                    msg: msg(0, 1, 1, 0),
                    bytes: 8252,
                    rendezvous: false
                }
            ),
        ]
    );
    assert_eq!(summary.stats[0].wait_ns, 30);
    // The receiver posts its blocking receive at its entry, as before: no RecvPost.
    assert_eq!(of(&log, 1)[0], (20, EventKind::RecvStart));
}

/// A synchronous send waits for its receive at any size; a nonblocking rendezvous send is
/// completed by the wait that returns its request: the wait's entry starts a wait, its exit
/// ends the send.
#[test]
fn synchronous_and_nonblocking_rendezvous_sends_end_where_they_complete() {
    let mut run = Run::mpich(2);
    run.init(0, 0);
    run.init(1, 0);
    run.enter(0, mpi::SSEND, 10, &[0, 1, INT, 1, 0, WORLD], &[]);
    run.leave(0, mpi::SSEND, 20, &[]);
    run.enter(0, mpi::ISEND, 30, &[0, 5000, INT, 1, 1, WORLD, 0x2000], &[]);
    run.leave(0, mpi::ISEND, 31, &handles(&[0xc]));
    run.enter(0, mpi::WAIT, 50, &[0x2000, 0x3000], &handles(&[0xc]));
    run.leave(0, mpi::WAIT, 90, &[]);
    run.recv(1, (5, 6), 0, 0, &status(0, 0, 4));
    run.recv(1, (7, 8), 0, 1, &status(0, 1, 20000));
    for r in 0..2 {
        run.finalize(r, 100);
    }
    let (log, _) = run.finish();
    assert_matched(&log);
    let (sync, big) = (msg(0, 1, 0, 0), msg(0, 1, 1, 0));
    let sent = |msg, bytes| EventKind::Send {
        after: 0,
        msg,
        bytes,
        rendezvous: true,
    };
    assert_eq!(
        of(&log, 0),
        vec![
            (10, sent(sync, 4)),
            (10, EventKind::SendEnd { msg: sync }),
            (10, sent(big, 20000)),
            (20, EventKind::RecvStart),
            (40, EventKind::SendEnd { msg: big }),
            (10, EventKind::Exit),
        ]
    );
}

/// The post of an `MPI_Irecv` never completed (its request freed) is dropped when its
/// handle comes back for another request: it must not hold the process's events back.
#[test]
fn a_receive_never_completed_drops_its_post_when_its_handle_is_reused() {
    let mut run = Run::mpich(2);
    run.init(0, 0);
    run.init(1, 0);
    run.enter(0, mpi::IRECV, 10, &[0, 1, INT, 1, 5, WORLD, 0x2000], &[]);
    run.leave(0, mpi::IRECV, 11, &handles(&[0xa]));
    run.enter(0, mpi::BARRIER, 20, &[WORLD], &[]);
    run.leave(0, mpi::BARRIER, 21, &[]);
    let held = run.log.events.iter().filter(|e| e.proc == 0).count();
    assert_eq!(held, 0, "the pending post holds rank 0's events back");
    run.enter(0, mpi::IRECV, 30, &[0, 1, INT, 1, 6, WORLD, 0x2000], &[]);
    run.leave(0, mpi::IRECV, 31, &handles(&[0xa]));
    let p0 = of(&run.log, 0);
    assert_eq!(p0[0], (10, EventKind::Keepalive), "the dropped post");
    assert!(matches!(p0[1].1, EventKind::CollStart { .. }), "{p0:?}");
    let (_, summary) = run.finish();
    assert_eq!(
        summary.anomalies.get(&Anomaly::RecvNeverCompleted),
        Some(&2),
        "{:?}",
        summary.anomalies
    );
}

#[test]
fn cpu_inside_unsuccessful_polls_goes_into_the_wait_they_were_for() {
    let mut run = Run::mpich(2);
    for r in 0..2 {
        run.init(r, 0);
    }
    // Rank 0 posts a receive from 1, then polls: a run of 1000 polls from clock 20, 300 of
    // CPU inside them (the rest, between them, is work), then the Test that completes.
    run.enter(0, mpi::IRECV, 10, &[0, 1, INT, 1, 5, WORLD, 0x2000], &[]);
    run.leave(0, mpi::IRECV, 11, &handles(&[0xa]));
    run.record(
        RecordKind::Polls,
        0,
        mpi::TEST,
        600,
        &[1000, 0, 20, 300],
        &[],
    );
    run.send(1, 30, 1, 0, 5);
    run.enter(
        0,
        mpi::TEST,
        610,
        &[0x2000, 0x3000, STATUS_IGNORE],
        &handles(&[0xa]),
    );
    run.leave(0, mpi::TEST, 620, &handles(&[mpich::REQUEST_NULL as u32]));
    run.finalize(0, 700);
    run.finalize(1, 700);
    let (log, _) = run.finish();
    let p0 = of(&log, 0);
    // RecvPost at the Irecv's entry (10); RecvStart at 610 - 300 = 310 (600 of CPU since the
    // post less the 300 inside the polls: 300 of work); RecvEnd at 620 (310 of waiting).
    assert_eq!(p0[1], (300, EventKind::RecvStart), "{p0:?}");
    assert_eq!(
        p0[2],
        (
            310,
            EventKind::RecvEnd {
                msg: msg(1, 0, 5, 0)
            }
        )
    );
}

#[test]
fn polls_before_anything_but_a_wait_stay_work() {
    let mut run = Run::mpich(2);
    for r in 0..2 {
        run.init(r, 0);
    }
    run.record(
        RecordKind::Polls,
        0,
        mpi::IPROBE,
        500,
        &[10, 0, 20, 400],
        &[],
    );
    run.send(0, 510, 1, 1, 5);
    run.recv(1, (20, 600), 0, 5, &[]);
    run.finalize(0, 700);
    run.finalize(1, 700);
    let (log, _) = run.finish();
    assert_eq!(
        of(&log, 0)[0].0,
        510,
        "the send's work is all the CPU before it"
    );
}

#[test]
fn a_collective_on_comm_self_is_a_collective_of_one() {
    let mut run = Run::mpich(2);
    for r in 0..2 {
        run.init(r, 0);
    }
    run.enter(1, mpi::BARRIER, 50, &[mpich::COMM_SELF], &[]);
    run.leave(1, mpi::BARRIER, 55, &[]);
    run.finalize(0, 60);
    run.finalize(1, 60);
    let (log, summary) = run.finish();
    assert!(summary.anomalies.is_empty(), "{:?}", summary.anomalies);
    let p1 = of(&log, 1);
    assert!(
        matches!(p1[0].1, EventKind::CollStart { size: 1, .. }),
        "{p1:?}"
    );
    assert!(matches!(p1[1].1, EventKind::CollEnd { .. }));
}

#[test]
fn a_cancelled_receive_takes_no_message() {
    let mut run = Run::mpich(2);
    for r in 0..2 {
        run.init(r, 0);
    }
    // Rank 0 posts a receive nobody answers, cancels it and waits for it; then receives the
    // message rank 1 does send, which the cancelled receive must not have taken.
    run.enter(0, mpi::IRECV, 10, &[0, 1, INT, 1, 5, WORLD, 0x2000], &[]);
    run.leave(0, mpi::IRECV, 11, &handles(&[0xa]));
    run.enter(0, mpi::CANCEL, 12, &[0x2000], &handles(&[0xa]));
    run.leave(0, mpi::CANCEL, 13, &[]);
    run.enter(0, mpi::WAIT, 14, &[0x2000, STATUS_IGNORE], &handles(&[0xa]));
    run.leave(0, mpi::WAIT, 15, &[]);
    run.send(1, 30, 1, 0, 5);
    run.recv(0, (20, 40), 1, 5, &[]);
    run.finalize(0, 50);
    run.finalize(1, 50);
    let (log, summary) = run.finish();
    assert_matched(&log);
    assert_eq!(summary.unmatched_recvs, 0);
    let ends: Vec<_> = of(&log, 0)
        .into_iter()
        .filter(|(_, k)| matches!(k, EventKind::RecvEnd { .. }))
        .collect();
    assert_eq!(
        ends,
        [(
            20,
            EventKind::RecvEnd {
                msg: msg(1, 0, 5, 0)
            }
        )]
    );
}

/// The events and the times (`EventDetail::monotonic_ns`) a capture hands out.
#[derive(Default)]
struct Times(Vec<(u32, EventKind, Option<u64>)>);

impl EventSink for Times {
    fn process(&mut self, _: &ProcInfo) {}
    fn event(&mut self, event: &Event) {
        self.event_with(event, &EventDetail::NONE);
    }
    fn event_with(&mut self, event: &Event, detail: &EventDetail) {
        self.0.push((event.proc, event.kind, detail.monotonic_ns));
    }
}

/// Each event carries the time of the record that made it: a send its call's entry, a
/// receive's wait its call's entry (though the event is made at the return), its end the
/// call's return, an exit `MPI_Finalize`'s entry.
#[test]
fn events_carry_the_time_of_their_records() {
    let mut run = Run {
        capture: Run::mpich(2).capture,
        log: Times::default(),
        ts: 1_000,
    };
    // Each record is 1000 ns after the one before, from 1000.
    run.init(0, 0); // 1000, 2000
    run.init(1, 0); // 3000, 4000
    run.enter(
        1,
        mpi::RECV,
        10,
        &[0, 1, INT, 0, 5, WORLD, STATUS_IGNORE],
        &[],
    ); // 5000
    run.send(0, 20, 1, 1, 5); // 6000, 7000
    run.leave(1, mpi::RECV, 30, &[]); // 8000
    run.finalize(0, 40); // 9000, 10000
    run.finalize(1, 50); // 11000, 12000
    let m = msg(0, 1, 5, 0);
    let send = EventKind::Send {
        after: 0,
        msg: m,
        bytes: 4,
        rendezvous: false,
    };
    assert_eq!(
        run.log.0,
        vec![
            (0, send, Some(6_000)),
            (1, EventKind::RecvStart, Some(5_000)),
            (1, EventKind::RecvEnd { msg: m }, Some(8_000)),
            (0, EventKind::Exit, Some(9_000)),
            (1, EventKind::Exit, Some(11_000)),
        ]
    );
}
