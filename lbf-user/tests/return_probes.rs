//! Return probes only where the return matters (`lbf_common::mpi::return_optional`), end to
//! end by the real `lbf-trace`: each MPI workload of `tests/workloads/mpi` (C and Fortran),
//! with Open MPI and with MPICH, captured with returns as needed (the default) and with every
//! return probe (`--all-returns`), yields the same events: per rank the same kinds in the same
//! order, and the same events but for their CPU times (message ids, bytes, rendezvous flags,
//! collectives and their bytes). Completion order aside: a `MPI_Waitany` takes whichever
//! receive finished first, so which message each `RecvEnd` names is compared as a multiset.
//! The CPU times differ from run to run; the capture tests (`capture_mpi.rs`, in the default
//! mode) check them against the ranks' own accounts. `poll` is left out: whether a poll finds
//! its message at once (and so whether its receive has a `RecvStart`) depends on timing.
//!
//! The probes hit less: a C program's nonblocking calls skip their return (`halo`: fewer than
//! 2 hits per call, 2 with every return), as do blocking sends the kernel side finds eager
//! (`ring`; they have no out-parameter, so from anywhere), and other calls through a Fortran
//! binding keep theirs (the binding's own variable is gone by the thread's next probe hit).
//!
//! Needs root; skips otherwise, but fails when `CI` is set.

mod traced;

use std::collections::HashMap;
use std::mem::{discriminant, Discriminant};

use lbf::event::{Event, EventKind};
use traced::{can_trace, check_trace_file, lbf_trace, read_trace, workload_built_by, Mpi, Setup};

/// Iterations and compute milliseconds of each workload: every call runs a few times.
const ARGS: &str = "4 1";
/// The iterations in [`ARGS`].
const ITERS: u64 = 4;

/// One run's events per process: the kinds in order, and each event but for its CPU time,
/// counted.
type Events = HashMap<u32, (Vec<Discriminant<EventKind>>, HashMap<String, usize>)>;

/// `events` by process (see [`Events`]).
fn by_process(events: &[Event]) -> Events {
    let mut out: Events = HashMap::new();
    for e in events {
        let (kinds, bag) = out.entry(e.proc).or_default();
        kinds.push(discriminant(&e.kind));
        *bag.entry(format!("{:?}", e.kind)).or_default() += 1;
    }
    out
}

/// What `lbf-trace -v` reported of a run's probe hits.
#[derive(Clone, Copy, Debug)]
struct Hits {
    /// Calls (entry hits).
    calls: u64,
    /// Return hits.
    returns: u64,
    /// Blocking sends found eager whose return was skipped.
    eager_sends: u64,
}

impl Hits {
    /// Probe hits per call.
    fn per_call(&self) -> f64 {
        (self.calls + self.returns) as f64 / self.calls as f64
    }

    /// Calls other than the blocking sends found eager that skipped their return.
    fn other_unreturned(&self) -> u64 {
        self.calls - self.returns - self.eager_sends
    }
}

/// The probe hits line of `lbf-trace -v` ("N MPI/PVM calls took R return probes: X probe
/// hits per call (E blocking sends found eager skipped theirs)").
fn hits(stderr: &str) -> Hits {
    stderr
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("lbf-trace: ")?;
            let (calls, rest) = rest.split_once(" MPI/PVM calls took ")?;
            let (returns, rest) = rest.split_once(" return probes")?;
            let (_, rest) = rest.split_once('(')?;
            let (eager, _) = rest.split_once(' ')?;
            Some(Hits {
                calls: calls.parse().ok()?,
                returns: returns.parse().ok()?,
                eager_sends: eager.parse().ok()?,
            })
        })
        .unwrap_or_else(|| panic!("no probe hits line in:\n{stderr}"))
}

/// Traces workload `name` (built by `cc`, 2 ranks of `mpi`) with returns as needed and with
/// every return, checks both traces against the ranks' accounts, and compares their events.
/// Returns the probe hits of each run: `(as needed, every)`.
fn compare(mpi: Mpi, cc: &str, name: &str) -> (Hits, Hits) {
    let bin = workload_built_by(&format!("{cc}.{}", mpi.name()), "mpi", name, &[]);
    let command = mpi.launch(2, &bin.display().to_string(), ARGS, Setup::default());
    let runs = [&[][..], &["--all-returns"][..]].map(|extra| {
        let label = format!("returns-{name}-{}{}", mpi.name(), extra.join(""));
        let mut args = vec!["-v"];
        args.extend(extra);
        args.extend(["--", "sh", "-c", &command]);
        let run = lbf_trace(&label, &args);
        check_trace_file(&run, 2);
        let (_, events, _) = read_trace(&run.trace);
        (by_process(&events), hits(&run.stderr))
    });
    let [(needed, needed_hits), (every, every_hits)] = runs;
    assert_eq!(needed.len(), 2, "{name}: both ranks");
    for (p, (kinds, bag)) in &every {
        let (other_kinds, other_bag) = &needed[p];
        assert_eq!(
            kinds, other_kinds,
            "{name}, {mpi:?}: process {p}'s kinds in order"
        );
        assert_eq!(bag, other_bag, "{name}, {mpi:?}: process {p}'s events");
    }
    assert_eq!(
        every_hits.per_call(),
        2.0,
        "{name}, {mpi:?}: every call takes its return"
    );
    (needed_hits, every_hits)
}

macro_rules! same_events {
    ($($test:ident: $mpi:expr, $cc:literal, $name:literal;)*) => {$(
        #[test]
        fn $test() {
            if can_trace() {
                compare($mpi, $cc, $name);
            }
        }
    )*};
}

same_events! {
    pingpong_mpich: Mpi::Mpich, "mpicc", "pingpong";
    pingpong_openmpi: Mpi::OpenMpi, "mpicc", "pingpong";
    master_worker_mpich: Mpi::Mpich, "mpicc", "master_worker";
    master_worker_openmpi: Mpi::OpenMpi, "mpicc", "master_worker";
    collectives_mpich: Mpi::Mpich, "mpicc", "collectives";
    collectives_openmpi: Mpi::OpenMpi, "mpicc", "collectives";
    vcollectives_mpich: Mpi::Mpich, "mpicc", "vcollectives";
    vcollectives_openmpi: Mpi::OpenMpi, "mpicc", "vcollectives";
    derived_mpich: Mpi::Mpich, "mpicc", "derived";
    derived_openmpi: Mpi::OpenMpi, "mpicc", "derived";
    rendezvous_mpich: Mpi::Mpich, "mpicc", "rendezvous";
    rendezvous_openmpi: Mpi::OpenMpi, "mpicc", "rendezvous";
    fortran_77_mpich: Mpi::Mpich, "mpif90", "fortran_f77";
    fortran_bindings_mpich: Mpi::Mpich, "mpif90", "fortran_bindings";
}

/// The halo exchange (`MPI_Irecv`, `MPI_Isend`, then waits): the same events, and its
/// nonblocking calls skip their return.
fn halo(mpi: Mpi) {
    if !can_trace() {
        return;
    }
    let (needed, every) = compare(mpi, "mpicc", "halo");
    assert!(
        needed.per_call() < 1.5,
        "halo, {mpi:?}: {needed:?} probe hits per call ({every:?} with all)"
    );
}

/// The ring (each rank's `MPI_Send` of 64 bytes, then its `MPI_Recv`, [`ITERS`] times, then
/// `MPI_Sendrecv`s): the same events, and every `MPI_Send` is found eager and skips its
/// return (a long ring's calls take 1.5 hits each: `cargo xtask bench-probe`).
fn ring(mpi: Mpi) {
    if !can_trace() {
        return;
    }
    let (needed, every) = compare(mpi, "mpicc", "ring");
    assert_eq!(
        needed.eager_sends,
        2 * ITERS,
        "ring, {mpi:?}: {needed:?} ({} probe hits per call; {every:?} with all)",
        needed.per_call()
    );
}

#[test]
fn ring_mpich() {
    ring(Mpi::Mpich);
}

#[test]
fn ring_openmpi() {
    ring(Mpi::OpenMpi);
}

#[test]
fn halo_mpich() {
    halo(Mpi::Mpich);
}

#[test]
fn halo_openmpi() {
    halo(Mpi::OpenMpi);
}

/// Open MPI's Fortran bindings call the C functions with a request variable of their own
/// frame: those calls keep their return, and the events are the same.
#[test]
fn fortran_calls_through_open_mpis_bindings_keep_their_returns() {
    if !can_trace() {
        return;
    }
    for name in ["fortran_f77", "fortran_bindings"] {
        let (needed, _) = compare(Mpi::OpenMpi, "mpif90", name);
        assert_eq!(
            needed.other_unreturned(),
            0,
            "{name}: every call from the bindings takes its return but the blocking sends \
             found eager ({needed:?})"
        );
    }
}
