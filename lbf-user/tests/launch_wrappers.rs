//! Source selection end to end, by the real `lbf-trace` binary (issue 14): an MPI job launched
//! bare, through `taskset -c 0,1`, through `env VAR=1` and through a shell script that runs
//! the launcher is captured as MPI (the trace header says `"source":"mpi"`, every rank is
//! there) with the messages, bytes and collectives its ranks counted themselves: the Fortran
//! workloads (`include 'mpif.h'`, `use mpi`, `use mpi_f08`, with Fortran datatypes and
//! communicators from `MPI_Comm_split` and `MPI_Cart_create`) and a C one, with Open MPI and
//! with MPICH. A socket program launched through the same wrappers stays a socket capture,
//! and an MPI job captured as sockets says so loudly.
//!
//! Needs root; skips otherwise, but fails when `CI` is set.

mod traced;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use lbf::capture::select::Source;
use lbf::event::{Event, EventKind};
use lbf::trace::TraceReader;
use traced::{
    can_trace, check_trace_file, lbf_trace, parse_checks, workload, workload_built_by, Mpi,
};

/// Iterations of each MPI workload: a few, enough that every call runs more than once.
const ITERS: &str = "4";

/// The ways a command is launched: its name, and the command around `launch` (a command's
/// words). The script is written to the test's scratch folder.
fn wrappers(label: &str, launch: &[String]) -> Vec<(&'static str, Vec<String>)> {
    let quoted: Vec<String> = launch.iter().map(|w| format!("'{w}'")).collect();
    let script = scratch().join(format!("{label}.sh"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# Runs the job as a batch script would.\nset -e\ncd /\n{} \"$@\"\n",
            quoted.join(" ")
        ),
    )
    .expect("writing the launch script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .expect("making the launch script executable");
    let around = |before: &[&str]| {
        before
            .iter()
            .map(|w| w.to_string())
            .chain(launch.iter().cloned())
            .collect::<Vec<_>>()
    };
    vec![
        ("bare", launch.to_vec()),
        ("taskset", around(&["taskset", "-c", "0,1"])),
        ("env", around(&["env", "LBF_WRAPPED=1"])),
        ("script", vec![script.to_string_lossy().into_owned()]),
    ]
}

/// A folder of this test process's own.
fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("launch-wrappers");
    std::fs::create_dir_all(&dir).expect("creating the scratch folder");
    dir
}

/// The words that launch 2 ranks of `program` with `mpi`, without a shell.
fn launch(mpi: Mpi, program: &Path) -> Vec<String> {
    let program = program.to_string_lossy().into_owned();
    let words: Vec<&str> = match mpi {
        Mpi::OpenMpi => vec![
            "mpirun.openmpi",
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
            "-np",
            "2",
            &program,
            ITERS,
        ],
        Mpi::Mpich => vec!["mpirun.mpich", "-n", "2", &program, ITERS],
    };
    words.into_iter().map(String::from).collect()
}

/// What one process did by a trace's events: messages and bytes sent and received, and
/// collectives entered.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    sends: u64,
    send_bytes: u64,
    recvs: u64,
    recv_bytes: u64,
    colls: u64,
}

/// Each process's counts in `events` (a received message's bytes are its send's).
fn counts(procs: usize, events: &[Event]) -> Vec<Counts> {
    let mut sizes = HashMap::new();
    for e in events {
        if let EventKind::Send { msg, bytes, .. } = e.kind {
            sizes.insert(msg, bytes);
        }
    }
    let mut counts: Vec<Counts> = (0..procs).map(|_| Counts::default()).collect();
    for e in events {
        let c = &mut counts[e.proc as usize];
        match e.kind {
            EventKind::Send { bytes, .. } => {
                c.sends += 1;
                c.send_bytes += bytes;
            }
            EventKind::RecvEnd { msg } => {
                c.recvs += 1;
                c.recv_bytes += sizes
                    .get(&msg)
                    .copied()
                    .expect("a received message was sent");
            }
            EventKind::CollStart { .. } => c.colls += 1,
            _ => {}
        }
    }
    counts
}

/// Runs `argv` under `lbf-trace -o`, and checks that the trace is an MPI job's: source `mpi`
/// in its header, both ranks (and nothing else), nothing lost, no warning, and per rank the
/// messages, bytes and collectives it counted itself.
fn check_mpi_run(label: &str, argv: &[String]) {
    let mut args = vec!["--"];
    args.extend(argv.iter().map(String::as_str));
    let run = lbf_trace(label, &args);
    eprintln!("{label}: {argv:?}\n{}", run.stderr);
    assert_eq!(run.code, 0, "{label}: {}\n{}", run.stdout, run.stderr);
    assert!(
        !run.stderr.contains("warning") && !run.stderr.contains("WARNING"),
        "{label}: {}",
        run.stderr
    );
    let mut reader = TraceReader::open(&run.trace).expect("opening the trace");
    assert_eq!(reader.header().source, Some(Source::Mpi), "{label}");
    let procs = reader.header().procs.clone();
    let names: Vec<&str> = procs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["rank 0", "rank 1"],
        "{label}: every rank, nothing else"
    );
    let mut events = Vec::new();
    while let Some(e) = reader.next_event().expect("reading the trace") {
        events.push(e.event);
    }
    let summary = reader.summary().expect("a complete trace").clone();
    assert_eq!(summary.lost_events, 0, "{label}");
    check_gag_names_the_source(&run.trace, "MPI", "mpi");
    let counted = counts(procs.len(), &events);
    let checks = parse_checks(&run.stdout);
    assert_eq!(checks.len(), 2, "{label}: {}", run.stdout);
    for c in &checks {
        let rank = c.num("rank");
        if c.0.contains_key("cart_rank") {
            // The capture takes a Cartesian communicator's ranks to be its parent's.
            assert_eq!(c.num("cart_rank"), rank, "{label}: the libraries reorder");
        }
        let program = Counts {
            sends: c.num("sends"),
            send_bytes: c.num("send_bytes"),
            recvs: c.num("recvs"),
            recv_bytes: c.num("recv_bytes"),
            colls: c.num("colls"),
        };
        assert_eq!(
            counted[rank as usize], program,
            "{label}: rank {rank}: the trace's counts, then the program's"
        );
    }
}

/// Checks that `lbf-gag predict` names the source of the trace at `path`: a line
/// `source: LABEL` in its table, a field `"source":"NAME"` in its JSON.
fn check_gag_names_the_source(path: &Path, label: &str, name: &str) {
    let predict = |json: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lbf-gag"));
        command.arg("predict").arg(path).args(["--nodes", "2"]);
        if json {
            command.arg("--json");
        }
        let out = command.output().expect("running lbf-gag");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let table = predict(false);
    assert!(
        table.lines().any(|l| l == format!("source: {label}")),
        "{table}"
    );
    let json = predict(true);
    assert!(
        json.lines()
            .all(|l| l.contains(&format!("\"source\":\"{name}\""))),
        "{json}"
    );
}

/// Builds MPI workload `name` (its source `name.c`, `.f90`, `.F90` or `.f`) with `mpi`'s C
/// or Fortran wrapper and `defines` (`-DMPI_F08`).
fn mpi_workload(mpi: Mpi, name: &str, fortran: bool, defines: &[&str]) -> PathBuf {
    let cc = format!(
        "{}.{}",
        if fortran { "mpif90" } else { "mpicc" },
        mpi.name()
    );
    workload_built_by(&cc, "mpi", name, defines)
}

/// Traces MPI workload `name` built for `mpi` (with `defines`) through every wrapper.
fn every_wrapper(mpi: Mpi, name: &str, fortran: bool, defines: &[&str]) {
    if !can_trace() {
        return;
    }
    let bin = mpi_workload(mpi, name, fortran, defines);
    let label = format!("wrapped-{name}-{}", mpi.name());
    for (how, argv) in wrappers(&label, &launch(mpi, &bin)) {
        check_mpi_run(&format!("{label}-{how}"), &argv);
    }
}

#[test]
fn fortran_77_with_open_mpi() {
    every_wrapper(Mpi::OpenMpi, "fortran_f77", true, &[]);
}

#[test]
fn fortran_77_with_mpich() {
    every_wrapper(Mpi::Mpich, "fortran_f77", true, &[]);
}

#[test]
fn fortran_90_with_open_mpi() {
    every_wrapper(Mpi::OpenMpi, "fortran_bindings", true, &[]);
}

#[test]
fn fortran_90_with_mpich() {
    every_wrapper(Mpi::Mpich, "fortran_bindings", true, &[]);
}

#[test]
fn fortran_2008_with_open_mpi() {
    every_wrapper(Mpi::OpenMpi, "fortran_bindings", true, &["-DMPI_F08"]);
}

#[test]
fn fortran_2008_with_mpich() {
    every_wrapper(Mpi::Mpich, "fortran_bindings", true, &["-DMPI_F08"]);
}

#[test]
fn c_with_open_mpi() {
    every_wrapper(Mpi::OpenMpi, "ring", false, &[]);
}

#[test]
fn c_with_mpich() {
    every_wrapper(Mpi::Mpich, "ring", false, &[]);
}

/// A socket program (a server and its 3 clients over a UNIX socket) launched through the
/// same wrappers is still a socket capture, with its messages, and no word of MPI.
#[test]
fn a_socket_program_stays_sockets_whatever_launches_it() {
    if !can_trace() {
        return;
    }
    let spa = workload("sockets", "spa", &[]);
    let socket = scratch().join(format!("spa-{}.sock", std::process::id()));
    let launch: Vec<String> = [
        spa.to_string_lossy().as_ref(),
        "all",
        &format!("unix:{}", socket.display()),
        "10",
        "2",
    ]
    .map(String::from)
    .to_vec();
    for (how, argv) in wrappers("wrapped-spa", &launch) {
        let label = format!("wrapped-spa-{how}");
        let mut args = vec!["--"];
        args.extend(argv.iter().map(String::as_str));
        let run = lbf_trace(&label, &args);
        eprintln!("{label}: {argv:?}\n{}", run.stderr);
        check_trace_file(&run, 4);
        let reader = TraceReader::open(&run.trace).expect("opening the trace");
        assert_eq!(reader.header().source, Some(Source::Sockets), "{label}");
        check_gag_names_the_source(&run.trace, "sockets", "sockets");
        assert!(!run.stderr.contains("MPI"), "{label}: {}", run.stderr);
    }
}

/// An MPI job captured as sockets (here by --source sockets; the same goes for one whose
/// command line hides it) is said to be one, loudly, naming a rank and its MPI library.
#[test]
fn an_mpi_job_captured_as_sockets_says_so() {
    if !can_trace() {
        return;
    }
    let bin = mpi_workload(Mpi::Mpich, "fortran_bindings", true, &[]);
    let mut args = vec!["--source", "sockets", "--"];
    let launch = launch(Mpi::Mpich, &bin);
    args.extend(launch.iter().map(String::as_str));
    let run = lbf_trace("mpi-as-sockets", &args);
    eprintln!("{}", run.stderr);
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("WARNING"))
        .collect();
    assert_eq!(warnings.len(), 2, "at once and at the end: {}", run.stderr);
    assert!(
        warnings[0].contains("is an MPI program")
            && warnings[0].contains("libmpich")
            && warnings[0].contains("--source mpi"),
        "{}",
        run.stderr
    );
    assert!(warnings[1].contains("--source mpi"), "{}", run.stderr);
}
