//! The MPI capture end to end: every workload of `tests/workloads/mpi`, run with Open MPI and
//! with MPICH under the eBPF tracer, must yield events that agree with what the program itself
//! counted and measured (its `LBF-CHECK` lines), and a prediction for the configuration it ran
//! in that is within 10 % of its run time. Messages sent by rendezvous: the capture flags
//! exactly the sends that waited for their receive (the libraries' eager limits, by default
//! and as configured), ties them to their receives; traces on one core and on two predict
//! alike, and each predicts the run on the other. Ranks that end before lbf-trace's reader
//! reaches their records are captured all the same. Collectives with count arrays and
//! messages and collectives of derived datatypes state the bytes each rank says it moved.
//! Needs root; skips otherwise (fails with `CI=true`).

mod traced;

use std::collections::HashMap;

use lbf::capture::mpi::eager::{EagerLimits, Route, SendMode};
use lbf::capture::mpi::inspect::ProcFs;
use lbf::capture::mpi::Capture;
use lbf::capture::EventLog;
use lbf::event::{Event, EventKind};
use lbf::record::CaptureSink;
use traced::{
    can_trace, check_accounts, check_prediction, check_trace_file, check_what_if, lbf_trace_during,
    lbf_trace_without_outputs, machine, parse_checks, predict_on, predicted_first_start, probe_mpi,
    timed, trace, wait_for, workload_built_by, Measured, Mpi, Setup, Traced,
};

/// Runs workload `name` with `np` ranks and `args` under the tracer with the MPI capture.
fn run(mpi: Mpi, name: &str, np: u32, args: &str) -> Traced {
    run_with(mpi, name, np, args, Setup::default())
}

/// [`run`] launched as `setup` says.
fn run_with(mpi: Mpi, name: &str, np: u32, args: &str, setup: Setup) -> Traced {
    let cc = format!("mpicc.{}", mpi.name());
    let bin = workload_built_by(&cc, "mpi", name, &[]);
    let command = mpi.launch(np, &bin.display().to_string(), args, setup);
    let capture = Capture::new(Box::new(ProcFs::new()), "localhost");
    let sink = CaptureSink::new(capture, EventLog::default());
    trace(
        &format!("{name}-{}", mpi.name()),
        &command,
        probe_mpi,
        sink,
        |sink| {
            let (log, summary) = sink.into_parts();
            (log, summary.expect("the capture finished"))
        },
    )
}

/// Checks a traced run against its ranks' own accounts, then its run time.
fn check(t: &Traced, mpi: Mpi, np: u32) -> Result<(), String> {
    let s = &t.summary;
    assert_eq!(
        s.procs.iter().map(|p| p.id).collect::<Vec<_>>(),
        (0..np).collect::<Vec<_>>(),
        "every rank seen, nothing else (not mpirun, not Hydra's proxies)"
    );
    check_accounts(t, np as usize, |c| c.num("rank") as usize);
    check_prediction(t, mpi.spin(np), Measured::Capture)
}

macro_rules! workload_tests {
    ($($test:ident: $mpi:expr, $name:literal, $np:literal, $args:literal;)*) => {$(
        #[test]
        fn $test() {
            if can_trace() {
                timed(|| check(&run($mpi, $name, $np, $args), $mpi, $np));
            }
        }
    )*};
}

// Every run has as many ranks as this machine has cores. With more ranks than cores, a rank
// waiting in a polling MPI library holds its core until the scheduler preempts it: a time-slice
// effect that processor sharing (the engine's model) does not capture, and that makes such runs
// vary by 20 % from one run to the next here. `cargo xtask validate` measures those cases.
workload_tests! {
    pingpong_mpich: Mpi::Mpich, "pingpong", 2, "20 5";
    pingpong_openmpi: Mpi::OpenMpi, "pingpong", 2, "20 5";
    ring_mpich: Mpi::Mpich, "ring", 2, "20 5";
    ring_openmpi: Mpi::OpenMpi, "ring", 2, "20 5";
    master_worker_mpich: Mpi::Mpich, "master_worker", 2, "20 5";
    master_worker_openmpi: Mpi::OpenMpi, "master_worker", 2, "20 5";
    halo_mpich: Mpi::Mpich, "halo", 2, "20 5";
    halo_openmpi: Mpi::OpenMpi, "halo", 2, "20 5";
    collectives_mpich: Mpi::Mpich, "collectives", 2, "20 5";
    collectives_openmpi: Mpi::OpenMpi, "collectives", 2, "20 5";
    rendezvous_mpich: Mpi::Mpich, "rendezvous", 2, "10 5";
    rendezvous_openmpi: Mpi::OpenMpi, "rendezvous", 2, "10 5";
}

/// Runs workload `name` (one that prints `LBF-COLL rank=R coll_bytes=B` lines) with 2 ranks,
/// checks it as [`check`] does (no anomaly, such as a collective of unknown size), and that
/// each rank's `CollStart` payloads add up to what the rank says it stated.
fn check_coll_bytes(mpi: Mpi, name: &str) {
    timed(|| {
        let t = run(mpi, name, 2, "10 5");
        let mut stated = HashMap::new();
        for line in t.output.lines() {
            let Some(rest) = line.trim().strip_prefix("LBF-COLL ") else {
                continue;
            };
            let field = |key: &str| -> u64 {
                rest.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{key} in {line:?}"))
            };
            stated.insert(field("rank") as u32, field("coll_bytes"));
        }
        assert_eq!(stated.len(), 2, "one LBF-COLL line per rank: {}", t.output);
        let mut captured: HashMap<u32, u64> = HashMap::new();
        for e in &t.log.events {
            if let EventKind::CollStart { bytes, .. } = e.kind {
                *captured.entry(e.proc).or_default() += bytes;
            }
        }
        for (rank, bytes) in &stated {
            eprintln!(
                "rank {rank}: program {bytes} collective bytes, capture {:?}",
                captured.get(rank)
            );
            assert_eq!(
                captured.get(rank),
                Some(bytes),
                "rank {rank}'s collective bytes"
            );
        }
        check(&t, mpi, 2)
    });
}

#[test]
fn vector_collectives_count_each_members_bytes_mpich() {
    if can_trace() {
        check_coll_bytes(Mpi::Mpich, "vcollectives");
    }
}

#[test]
fn vector_collectives_count_each_members_bytes_openmpi() {
    if can_trace() {
        check_coll_bytes(Mpi::OpenMpi, "vcollectives");
    }
}

#[test]
fn derived_datatypes_are_sized_mpich() {
    if can_trace() {
        check_coll_bytes(Mpi::Mpich, "derived");
    }
}

#[test]
fn derived_datatypes_are_sized_openmpi() {
    if can_trace() {
        check_coll_bytes(Mpi::OpenMpi, "derived");
    }
}

/// Checks the messages sent by rendezvous in `events`: each is flagged at its send, is
/// completed once by its sender (`send_end`) after the send, and received once; each
/// `recv_post` names a message its process receives later. Returns how many were sent by
/// rendezvous and how many receives were posted.
fn check_rendezvous(events: &[Event]) -> (usize, usize) {
    let mut senders = HashMap::new();
    let mut receivers = HashMap::new();
    let mut ended = HashMap::new();
    let mut posted = HashMap::new();
    for e in events {
        match e.kind {
            EventKind::Send {
                msg,
                rendezvous: true,
                ..
            } => assert!(senders.insert(msg, e.proc).is_none(), "{msg} sent twice"),
            EventKind::SendEnd { msg } => {
                assert_eq!(senders.get(&msg), Some(&e.proc), "send_end before its send");
                assert!(ended.insert(msg, e.proc).is_none(), "{msg} completed twice");
            }
            EventKind::RecvPost { msg } => {
                assert!(posted.insert(msg, e.proc).is_none(), "{msg} posted twice")
            }
            EventKind::RecvEnd { msg } => {
                receivers.insert(msg, e.proc);
                if let Some(&p) = posted.get(&msg) {
                    assert_eq!(
                        p, e.proc,
                        "{msg} posted by another process than its receiver"
                    );
                }
            }
            _ => {}
        }
    }
    assert_eq!(
        ended, senders,
        "every rendezvous send completed by its sender"
    );
    assert!(posted.keys().all(|m| receivers.contains_key(m)));
    (senders.len(), posted.len())
}

/// The rendezvous workload's messages: every 1 MiB send and every synchronous one goes by
/// rendezvous, and every `MPI_Irecv` posts its message.
fn check_rendezvous_workload(mpi: Mpi) {
    if !can_trace() {
        return;
    }
    let iters = 10;
    let t = run(mpi, "rendezvous", 2, &format!("{iters} 5"));
    check_accounts(&t, 2, |c| c.num("rank") as usize);
    let (rendezvous, posts) = check_rendezvous(&t.log.events);
    // Phase 1: 1 MiB by MPI_Send; phase 2: 1 MiB by MPI_Isend and 4 bytes by MPI_Ssend.
    assert_eq!((rendezvous, posts), (3 * iters, iters), "{mpi:?}");
    let eager = t
        .log
        .events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::Send {
                    rendezvous: false,
                    ..
                }
            )
        })
        .count();
    assert_eq!(eager, 0, "{mpi:?}: no send of this workload goes eagerly");
}

#[test]
fn rendezvous_messages_are_flagged_and_tied_to_their_receives_mpich() {
    check_rendezvous_workload(Mpi::Mpich);
}

#[test]
fn rendezvous_messages_are_flagged_and_tied_to_their_receives_openmpi() {
    check_rendezvous_workload(Mpi::OpenMpi);
}

/// Runs the rendezvous workload's probe of the sizes around the eager limit that the
/// capture takes for a send to another rank of this host under `setup` (`environ`: its
/// environment variables, NUL-separated), and checks that the capture flags exactly the
/// sends that waited for their receive.
fn check_eager_limit(mpi: Mpi, setup: Setup, environ: &[u8]) {
    if !can_trace() {
        return;
    }
    let limits = EagerLimits::of(mpi.library(), environ, true);
    let last_eager = (0..1 << 20)
        .rev()
        .find(|&b| !limits.rendezvous(Route::SameHost, SendMode::Standard, b))
        .expect("an eager size");
    let sizes = [last_eager, last_eager + 1];
    let args = format!("0 0 eager:{} eager:{}", sizes[0], sizes[1]);
    let t = run_with(mpi, "rendezvous", 2, &args, setup);
    check_accounts(&t, 2, |c| c.num("rank") as usize);
    check_rendezvous(&t.log.events);
    let waited: HashMap<u64, bool> = t
        .output
        .lines()
        .filter_map(|l| l.strip_prefix("LBF-PROBE "))
        .map(|l| {
            let check = traced::parse_checks(&format!("LBF-CHECK {l}")).remove(0);
            (check.num("bytes"), check.num("waited") == 1)
        })
        .collect();
    let flagged: HashMap<u64, bool> = t
        .log
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Send {
                bytes, rendezvous, ..
            } => Some((bytes, rendezvous)),
            _ => None,
        })
        .collect();
    eprintln!("{mpi:?} {setup:?}: waited {waited:?}, flagged {flagged:?}");
    assert_eq!(waited.len(), 2, "{}", t.output);
    assert!(
        waited[&sizes[1]],
        "{mpi:?} {setup:?}: the larger size must wait"
    );
    assert_eq!(
        flagged, waited,
        "{mpi:?} {setup:?}: the capture's eager limit is not the library's"
    );
}

#[test]
fn eager_limit_by_default_mpich() {
    check_eager_limit(Mpi::Mpich, Setup::default(), b"");
}

#[test]
fn eager_limit_by_default_openmpi() {
    check_eager_limit(Mpi::OpenMpi, Setup::default(), b"");
}

#[test]
fn eager_limit_as_configured_mpich() {
    let setup = Setup {
        env: "UCX_RNDV_THRESH=2000",
        ..Setup::default()
    };
    check_eager_limit(Mpi::Mpich, setup, b"UCX_RNDV_THRESH=2000\0");
}

#[test]
fn eager_limit_as_configured_openmpi() {
    let setup = Setup {
        options: "--mca btl_vader_eager_limit 2048",
        ..Setup::default()
    };
    check_eager_limit(
        Mpi::OpenMpi,
        setup,
        b"OMPI_MCA_btl_vader_eager_limit=2048\0",
    );
}

/// Over TCP with Open MPI only: MPICH over UCX's TCP hung in `MPI_Finalize` (one rank
/// spinning, the other in its PMI read) in 2 of 4 CI-style runs of the suite with such a test,
/// on the loopback and on a veth alike, though in none of 80 runs alone; the capture's reading
/// of MPICH's TCP configuration is covered by `lbf::capture::eager`'s unit tests.
#[test]
fn eager_limit_over_tcp_openmpi() {
    let setup = Setup {
        options: "--mca btl tcp,self --mca btl_tcp_if_include lo",
        ..Setup::default()
    };
    check_eager_limit(Mpi::OpenMpi, setup, b"OMPI_MCA_btl=tcp,self\0");
}

/// How far apart the predictions for one configuration from runs traced in two others may
/// be: they differ only by the libraries' CPU outside their waits.
const TRACED_WHERE_TOLERANCE: f64 = 0.03;

/// The measurement as a check: the rendezvous workload traced on one core and on two.
/// Every wait is waiting, whatever the core it ran on, so both traces must give the same
/// prediction for each configuration (measured 0.0 to 0.5 % apart; before rendezvous, when
/// the CPU spent waiting inside a send counted as work, 4.7 to 11 % apart); the trace on one
/// core must predict the run on two, and the trace on two the run on one.
///
/// Its compute steps are 40 ms, not the 10 ms of the other workloads: on one core, every
/// hand-off between the two ranks waits for the scheduler to preempt the rank holding the
/// core (a ping-pong on one core here takes 4.0 ms one way at any size, against 1 to 122 µs
/// on two), which the engine's fair sharing leaves out (docs/targets.md). With 10 ms steps
/// the one-core runs took 7 to 11 % longer than predicted.
fn check_cores_what_if(mpi: Mpi) {
    if !can_trace() {
        return;
    }
    timed(|| {
        let on = |cpus| {
            let setup = Setup {
                cpus: Some(cpus),
                ..Setup::default()
            };
            let t = run_with(mpi, "rendezvous", 2, "10 40", setup);
            check_accounts(&t, 2, |c| c.num("rank") as usize);
            t
        };
        let (one, two) = (on("0"), on("0,1"));
        let spin = mpi.spin(2);
        for cores in [1, 2] {
            let [a, b] = [&one, &two].map(|t| {
                let p = predict_on(t, cores, spin);
                p.predicted_seconds - predicted_first_start(t, &p)
            });
            eprintln!("{cores} cores predicted from the run on 1 core: {a:.4} s, on 2: {b:.4} s");
            assert!(
                (a - b).abs() <= TRACED_WHERE_TOLERANCE * a.max(b),
                "{mpi:?}: {cores} cores predicted {a:.4} s from the run on 1 core, {b:.4} s from \
                 the run on 2"
            );
        }
        check_what_if(&one, 2, spin, &two)?;
        check_what_if(&two, 1, spin, &one)
    });
}

/// A job in a cgroup whose CPU quota allows it half a CPU (a container's CPU limit), on both
/// CPUs: each rank's header names the quota and its cgroup, and the trace predicts the job
/// run without the limit, start-up included. The start-up model takes the traced run's CPU
/// from the quota, not from the ranks' affinity (both CPUs), which made the limited run's
/// start-up look like that of a run on two full cores.
fn check_quota_what_if(mpi: Mpi) {
    if !can_trace() {
        return;
    }
    timed(|| {
        let group = traced::cgroup::Cgroup::new(&format!("quota-{}", mpi.name()), 50_000);
        let setup = Setup {
            cgroup: Some(group.path()),
            ..Setup::default()
        };
        let limited = run_with(mpi, "rendezvous", 2, "10 40", setup);
        check_accounts(&limited, 2, |c| c.num("rank") as usize);
        let name = group.path().file_name().expect("a name").to_string_lossy();
        for p in &limited.log.procs {
            assert_eq!(
                (p.cpu_quota_milli, p.quota_cgroup.rsplit('/').next()),
                (500, Some(&*name)),
                "{p:?}"
            );
        }
        // Their start-up CPU took four times as long under the quota as on two cores.
        let cpu: f64 = limited
            .log
            .procs
            .iter()
            .map(|p| p.startup_cpu_ns as f64 * 1e-9)
            .sum();
        let shift = predict_on(&limited, 2, mpi.spin(2)).startup_shift_seconds;
        eprintln!("start-up CPU {cpu:.3} s; start-up moved by {shift:+.3} s");
        assert!(
            (shift - (cpu / 2.0 - cpu / 0.5)).abs() < 1e-6,
            "{shift} for {cpu}"
        );
        let free = run_with(mpi, "rendezvous", 2, "10 40", Setup::default());
        check_what_if(&limited, 2, mpi.spin(2), &free)
    });
}

#[test]
fn a_trace_under_a_cgroup_quota_predicts_the_run_without_it_mpich() {
    check_quota_what_if(Mpi::Mpich);
}

#[test]
fn a_trace_under_a_cgroup_quota_predicts_the_run_without_it_openmpi() {
    check_quota_what_if(Mpi::OpenMpi);
}

#[test]
fn one_and_two_core_traces_agree_and_predict_each_other_mpich() {
    check_cores_what_if(Mpi::Mpich);
}

#[test]
fn one_and_two_core_traces_agree_and_predict_each_other_openmpi() {
    check_cores_what_if(Mpi::OpenMpi);
}

/// `lbf-trace -- CMD` asked for neither a trace nor predictions prints each rank's totals: a
/// row per rank whose messages and bytes are the ones the program counted, then the measured
/// time, and says how to ask for predictions; it exits with the command's status.
fn check_totals_table(mpi: Mpi) {
    if !can_trace() {
        return;
    }
    let bin = workload_built_by(&format!("mpicc.{}", mpi.name()), "mpi", "pingpong", &[]);
    let command = mpi.launch(2, &bin.display().to_string(), "200 1", Setup::default());
    let run = lbf_trace_without_outputs(&["--", "sh", "-c", &command]);
    let context = format!("{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.code, 0, "{context}");
    assert!(
        run.stderr.contains("--nodes N or --target FILE"),
        "{context}"
    );
    let checks = parse_checks(&run.stdout);
    assert_eq!(checks.len(), 2, "{context}");
    for check in &checks {
        let rank = check.num("rank");
        let row: Vec<&str> = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("rank {rank}@")))
            .unwrap_or_else(|| panic!("no row for rank {rank}: {context}"))
            .split_whitespace()
            .collect();
        // rank, N@host, sends, bytes and unit, recvs, bytes and unit, colls, CPU...
        let (sends, recvs): (u64, u64) = (row[2].parse().unwrap(), row[5].parse().unwrap());
        assert_eq!(
            (sends, recvs),
            (check.num("sends"), check.num("recvs")),
            "rank {rank}: {context}"
        );
    }
    assert!(
        run.stdout.lines().any(|l| l.starts_with("total ")),
        "{context}"
    );
    assert!(run.stdout.contains("measured "), "{context}");
}

#[test]
fn without_outputs_lbf_trace_prints_each_ranks_totals_mpich() {
    check_totals_table(Mpi::Mpich);
}

#[test]
fn without_outputs_lbf_trace_prints_each_ranks_totals_openmpi() {
    check_totals_table(Mpi::OpenMpi);
}

/// A job whose ranks end before lbf-trace reads any of their records is captured whole: each
/// rank was inspected when it entered `MPI_Init` (`probe::InitWatch`), not when the reader got
/// to it, by which time its `/proc` entry was gone. lbf-trace's reader (its main thread) is
/// held stopped with ptrace from before the job starts until the job has ended, while its
/// other threads run.
fn check_ranks_ending_before_the_reader(mpi: Mpi) {
    if !can_trace() {
        return;
    }
    let bin = workload_built_by(&format!("mpicc.{}", mpi.name()), "mpi", "ring", &[]);
    let job = mpi.launch(2, &bin.display().to_string(), "200 0", Setup::default());
    let command = format!("sleep 1; {job}");
    let label = format!("late-reader-{}", mpi.name());
    let run = lbf_trace_during(&label, &["--", "sh", "-c", &command], |lbf_trace| {
        // Released by lbf-trace (which starts it held) once it exec'd the shell, which then
        // sleeps a second before it starts the job.
        let shell = wait_for(|| {
            child_of(lbf_trace)
                .filter(|&c| machine::comm(c).as_deref() == Some("sh"))
                .ok_or_else(|| "lbf-trace's command has not started".to_string())
        });
        assert!(
            thread_named(lbf_trace, "lbf-init-watch"),
            "no MPI_Init watch"
        );
        let reader = Stopped::new(lbf_trace);
        // The shell ends with the job; lbf-trace, stopped, cannot reap it.
        wait_for(|| {
            has_ended(shell)
                .then_some(())
                .ok_or_else(|| "the job has not ended".to_string())
        });
        drop(reader);
    });
    check_trace_file(&run, 2);
}

#[test]
fn ranks_ending_before_the_reader_are_captured_mpich() {
    check_ranks_ending_before_the_reader(Mpi::Mpich);
}

#[test]
fn ranks_ending_before_the_reader_are_captured_openmpi() {
    check_ranks_ending_before_the_reader(Mpi::OpenMpi);
}

/// Whether process `pid` has a thread named `name`.
fn thread_named(pid: u32, name: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| {
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .any(|comm| comm.trim_end() == name)
    })
}

/// A child of process `parent`, if it has one.
fn child_of(parent: u32) -> Option<u32> {
    machine::process_ids()
        .into_iter()
        .find(|&pid| machine::parent_of(pid) == Some(parent))
}

/// Whether process `pid` has ended: a zombie, or gone.
fn has_ended(pid: u32) -> bool {
    machine::stat_fields(pid).is_none_or(|f| f[0] == "Z")
}

/// A thread held in a ptrace stop (`PTRACE_SEIZE` + `PTRACE_INTERRUPT`) until dropped; the
/// other threads of its process run on.
struct Stopped(libc::pid_t);

impl Stopped {
    fn new(tid: u32) -> Self {
        let tid = tid as libc::pid_t;
        let null = std::ptr::null_mut::<libc::c_void>();
        let last_error = std::io::Error::last_os_error;
        // SAFETY: ptrace and waitpid on a thread of a process this test started.
        unsafe {
            assert_eq!(
                libc::ptrace(libc::PTRACE_SEIZE, tid, null, null),
                0,
                "{}",
                last_error()
            );
            assert_eq!(
                libc::ptrace(libc::PTRACE_INTERRUPT, tid, null, null),
                0,
                "{}",
                last_error()
            );
            let mut status = 0;
            assert_eq!(
                libc::waitpid(tid, &mut status, libc::__WALL),
                tid,
                "{}",
                last_error()
            );
        }
        Self(tid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let null = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: detaches the thread this value stopped.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, self.0, null, null) };
    }
}

/// Ranks polling for seconds on both cores (`MPI_Test`, `MPI_Iprobe`, `MPI_Testany`,
/// `MPI_Testall`, `MPI_Testsome` in progress loops, as real codes write them) through rings
/// of 256 KiB, with lbf-trace at the job's own priority: an unsuccessful poll writes no record
/// (the kernel side counts it in the thread's run of polls), so however little CPU the reader
/// gets, nothing is lost. Every unsuccessful poll the ranks counted is counted by the kernel
/// side, and the messages are all there.
fn check_polling_loses_nothing(mpi: Mpi) {
    let cc = format!("mpicc.{}", mpi.name());
    let bin = workload_built_by(&cc, "mpi", "poll", &[]);
    let trace = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("poll-{}.trace.jsonl", mpi.name()));
    let ring = (256 * 1024 * machine::cores() as u64).to_string();
    let mut args = vec!["--ringbuf-size", &ring, "-o", trace.to_str().unwrap(), "--"];
    let launcher = format!("mpirun.{}", mpi.name());
    args.push(&launcher);
    if mpi == Mpi::OpenMpi {
        args.extend([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ]);
    }
    let bin = bin.to_str().unwrap();
    // 3 rounds, each polling 1 s, then 3 x 0.25 s.
    args.extend(["-n", "2", bin, "3", "1000"]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lbf-trace"))
        .args(&args)
        .output()
        .expect("running lbf-trace");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("records lost"), "{stderr}");
    let run = traced::TraceRun {
        code: 0,
        stdout: stdout.to_string(),
        stderr: stderr.to_string(),
        trace,
    };
    check_trace_file(&run, 2);
    let probes: Vec<_> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("LBF-PROBE "))
        .map(|l| parse_checks(&format!("LBF-CHECK {l}")).remove(0))
        .collect();
    assert_eq!(probes.len(), 2, "{stdout}");
    let unsuccessful: u64 = probes.iter().map(|c| c.num("unsuccessful")).sum();
    let polls: u64 = probes.iter().map(|c| c.num("polls")).sum();
    let coalesced: u64 = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("lbf-trace: "))
        .find_map(|l| l.split_once(" unsuccessful polls"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of coalesced polls: {stderr}"));
    eprintln!("{mpi:?}: {polls} polls, {unsuccessful} unsuccessful, {coalesced} coalesced");
    assert!(
        unsuccessful > 100_000,
        "the ranks polled too little: {unsuccessful}"
    );
    assert_eq!(coalesced, unsuccessful, "every unsuccessful poll coalesced");
}

#[test]
fn polling_for_seconds_loses_nothing_mpich() {
    check_polling_loses_nothing(Mpi::Mpich);
}

#[test]
fn polling_for_seconds_loses_nothing_openmpi() {
    check_polling_loses_nothing(Mpi::OpenMpi);
}
