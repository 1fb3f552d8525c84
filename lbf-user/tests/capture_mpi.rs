//! The MPI capture end to end: every workload of `tests/workloads/mpi`, run with Open MPI and
//! with MPICH under the eBPF tracer, must yield events that agree with what the program itself
//! counted and measured (its `LBF-CHECK` lines). Needs root; skips otherwise.

mod common;

use std::collections::HashMap;

use common::{can_trace, trace, Mpi, Traced};
use lbf::event::EventKind;

/// Relative tolerance between the CPU a rank measured and the CPU of its events.
const CPU_TOLERANCE: f64 = 0.05;

/// Checks a traced run against its programs' own accounts.
fn check(t: &Traced, np: u32) {
    let s = &t.summary;
    eprintln!("anomalies: {:?}", s.anomalies);
    assert_eq!(t.checks.len(), np as usize, "one LBF-CHECK line per rank");
    assert_eq!(
        s.procs.iter().map(|p| p.id).collect::<Vec<_>>(),
        (0..np).collect::<Vec<_>>(),
        "every rank seen, nothing else"
    );
    // Every send consumed by exactly one receive.
    let mut sent: HashMap<u64, u32> = HashMap::new();
    let mut received: HashMap<u64, u32> = HashMap::new();
    for e in &t.log.events {
        match e.kind {
            EventKind::Send { msg, .. } => *sent.entry(msg).or_default() += 1,
            EventKind::RecvEnd { msg } => *received.entry(msg).or_default() += 1,
            _ => {}
        }
    }
    assert!(sent.values().all(|&n| n == 1) && received.values().all(|&n| n == 1));
    assert_eq!(sent.len(), received.len(), "sends and receives pair up");
    assert!(sent.keys().all(|m| received.contains_key(m)));
    assert_eq!((s.unmatched_sends, s.unmatched_recvs), (0, 0));
    for (c, st) in t.checks.iter().zip(&s.stats) {
        eprintln!("rank {}: program {c:?}\n        capture {st:?}", c.rank);
        assert_eq!(
            (st.sends, st.send_bytes),
            (c.sends, c.send_bytes),
            "rank {} sends",
            c.rank
        );
        assert_eq!(
            (st.recvs, st.recv_bytes),
            (c.recvs, c.recv_bytes),
            "rank {} receives",
            c.rank
        );
        assert_eq!(st.collectives, c.colls, "rank {} collectives", c.rank);
        let err = (st.cpu_ns as f64 - c.cpu_ns as f64).abs() / c.cpu_ns as f64;
        assert!(
            err <= CPU_TOLERANCE,
            "rank {} CPU: capture {} ns, program {} ns",
            c.rank,
            st.cpu_ns,
            c.cpu_ns
        );
    }
    assert_eq!(s.lost_records, 0);
}

macro_rules! workload_tests {
    ($($test:ident: $mpi:expr, $name:literal, $np:literal, $args:literal;)*) => {$(
        #[test]
        fn $test() {
            if can_trace() {
                check(&trace($mpi, $name, $np, $args), $np);
            }
        }
    )*};
}

workload_tests! {
    pingpong_mpich: Mpi::Mpich, "pingpong", 2, "5 2";
    pingpong_openmpi: Mpi::OpenMpi, "pingpong", 2, "5 2";
    ring_mpich: Mpi::Mpich, "ring", 4, "5 2";
    ring_openmpi: Mpi::OpenMpi, "ring", 4, "5 2";
    master_worker_mpich: Mpi::Mpich, "master_worker", 4, "5 2";
    master_worker_openmpi: Mpi::OpenMpi, "master_worker", 4, "5 2";
    halo_mpich: Mpi::Mpich, "halo", 4, "5 2";
    halo_openmpi: Mpi::OpenMpi, "halo", 4, "5 2";
    collectives_mpich: Mpi::Mpich, "collectives", 4, "5 2";
    collectives_openmpi: Mpi::OpenMpi, "collectives", 4, "5 2";
}
