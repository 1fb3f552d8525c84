//! A third-party MPI application, not written here: Debian's `hpcc` (HPC Challenge: HPL,
//! PTRANS, FFT, RandomAccess, b_eff, STREAM, DGEMM; built with Open MPI), default input, 4
//! ranks on this machine's cores, traced by the real `lbf-trace`. Every rank is seen, every
//! message is matched, no record is lost, no warning is printed, and the prediction for the
//! placement it ran on (one node of this machine's cores) is within 20 % of its run time.
//!
//! The reference is the same command run without the tracer (the median of 3 runs): what lbf
//! predicts is the program's own run time. The traced run itself is some 2.4 times slower, by
//! the probes on hpcc's millions of `MPI_Test` polls (4.2 million in a 10 s traced run), and
//! that inflation is in the prediction: a run of polls followed by a wait goes into the wait
//! (9.5 s of the polls' CPU here), but RandomAccess polls between updates it generates, and
//! those polls' CPU (2.6 s) stays work. Left out, the prediction falls to 24 % short of the
//! untraced run, which the model's hand-offs between yielding ranks sharing a core do not
//! explain either (docs/engine.md, "Where the error comes from"). Kept, it is 6 to 15 % long:
//! two errors that partly cancel, hence the wider bound than the bundled workloads'.
//!
//! Needs root and hpcc (`scripts/setup.sh` installs it); skips without them, fails when `CI`
//! is set.

mod traced;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lbf::capture::select::Source;
use lbf::event::EventKind;
use traced::{can_trace, machine, predict_on_this_machine, timed};

/// Debian's example input, which `hpcc` reads from `hpccinf.txt` in its working directory.
const EXAMPLE_INPUT: &str = "/usr/share/doc/hpcc/examples/_hpccinf.txt";

/// Ranks of the run.
const RANKS: &str = "4";

/// How far the prediction may be from the median untraced run, as a fraction (see the
/// module's doc for why it is wider than the bundled workloads' `TIME_TOLERANCE`).
const HPCC_TOLERANCE: f64 = 0.20;

/// Untraced runs whose median is the reference.
const UNTRACED_RUNS: usize = 3;

/// The folder hpcc runs in, with its input.
fn workdir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hpcc");
    std::fs::create_dir_all(&dir).expect("creating hpcc's folder");
    std::fs::copy(EXAMPLE_INPUT, dir.join("hpccinf.txt")).expect("copying hpcc's input");
    dir
}

/// Whether hpcc and its input are installed; skips without them, unless `CI` is set.
fn have_hpcc() -> bool {
    let there = Path::new(EXAMPLE_INPUT).exists()
        && Command::new("sh")
            .args(["-c", "command -v hpcc"])
            .output()
            .is_ok_and(|o| o.status.success());
    machine::require("hpcc (scripts/setup.sh installs it)", there)
}

/// `mpirun` of 4 hpcc ranks on this machine (more ranks than cores: `--oversubscribe`).
fn launch() -> Vec<&'static str> {
    vec![
        "mpirun.openmpi",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        RANKS,
        "hpcc",
    ]
}

/// Runs `argv` in `dir`; its wall seconds, and its standard error.
fn run(dir: &Path, argv: &[&str]) -> (f64, String) {
    let start = Instant::now();
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {argv:?}: {e}"));
    let wall = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{argv:?} failed: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    (wall, stderr)
}

/// Checks the trace at `path`: an MPI capture of the 4 ranks and nothing else, nothing lost,
/// every message sent once and received once.
fn check_trace(path: &Path) {
    let (procs, events, summary) = traced::read_trace(path);
    let reader = lbf::trace::TraceReader::open(path).expect("opening the trace");
    assert_eq!(reader.header().source, Some(Source::Mpi));
    let names: Vec<&str> = procs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["rank 0", "rank 1", "rank 2", "rank 3"]);
    assert_eq!(summary.lost_events, 0);
    let (mut sent, mut received) = (HashMap::new(), HashMap::new());
    for e in &events {
        match e.kind {
            EventKind::Send { msg, .. } => *sent.entry(msg).or_insert(0) += 1,
            EventKind::RecvEnd { msg } => *received.entry(msg).or_insert(0) += 1,
            _ => {}
        }
    }
    assert!(
        sent.len() > 10_000,
        "hpcc sends tens of thousands: {}",
        sent.len()
    );
    assert!(sent.values().chain(received.values()).all(|&n| n == 1));
    assert_eq!(sent.len(), received.len(), "every message received");
    assert!(sent.keys().all(|m| received.contains_key(m)));
}

/// lbf-gag's prediction for one node of this machine's cores (the placement hpcc ran on).
fn predict_as_run(trace: &Path) -> f64 {
    predict_on_this_machine(trace, &[])[0].1
}

#[test]
fn hpcc_is_captured_whole_and_predicted_within_20_percent() {
    if !can_trace() || !have_hpcc() {
        return;
    }
    let dir = workdir();
    let trace = dir.join("hpcc.trace.jsonl");
    timed(|| {
        let mut untraced: Vec<f64> = (0..UNTRACED_RUNS).map(|_| run(&dir, &launch()).0).collect();
        untraced.sort_by(f64::total_cmp);
        let measured = untraced[UNTRACED_RUNS / 2];
        let trace_arg = trace.to_str().expect("a UTF-8 path");
        let mut argv = vec![env!("CARGO_BIN_EXE_lbf-trace"), "-o", trace_arg, "--"];
        argv.extend(launch());
        let (traced, stderr) = run(&dir, &argv);
        assert!(
            !stderr.contains("warning") && !stderr.contains("WARNING"),
            "{stderr}"
        );
        check_trace(&trace);
        let predicted = predict_as_run(&trace);
        let error = predicted / measured - 1.0;
        eprintln!(
            "hpcc: untraced {untraced:.3?} s, traced {traced:.3} s, predicted {predicted:.3} s \
             ({:+.1} % of the median untraced run)",
            error * 100.0
        );
        if error.abs() <= HPCC_TOLERANCE {
            Ok(())
        } else {
            Err(format!(
                "predicted {predicted:.3} s, measured {measured:.3} s ({:+.1} %)",
                error * 100.0
            ))
        }
    });
}
