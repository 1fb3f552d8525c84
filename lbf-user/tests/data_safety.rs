//! A capture is never lost, and a broken one is never predicted from without saying so: a
//! bad `-o` path is an error before the command runs; a `kill -9` of lbf-trace mid-run leaves
//! a trace that `lbf-gag predict` reads up to where it was cut, predicting the captured part
//! with exit status 3 (cut short). Needs root and MPICH; skips without root, fails with
//! `CI=true`.

mod traced;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use traced::{can_trace, predict_here, workload_built_by};

#[test]
fn an_unwritable_output_is_an_error_before_the_command_runs() {
    if !can_trace() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("data-safety-bad-o");
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("the-command-ran");
    let _ = std::fs::remove_file(&marker);
    let out = Command::new(env!("CARGO_BIN_EXE_lbf-trace"))
        .args(["-o", "/nonexistent/d/x.jsonl", "--", "touch"])
        .arg(&marker)
        .output()
        .expect("running lbf-trace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot write the trace /nonexistent/d/x.jsonl: nothing was run"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the command ran");
}

/// MPICH's build of the ring workload, and where test `name` writes its trace (no earlier
/// run's trace left there: a test waiting for lines must see this run's).
fn ring_and_trace(name: &str) -> (PathBuf, PathBuf) {
    let ring = workload_built_by("mpicc.mpich", "mpi", "ring", &[]);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.jsonl");
    let _ = std::fs::remove_file(&trace);
    (ring, trace)
}

/// `lbf-gag predict` of `trace` for one node of this machine's cores (where it ran), with
/// `args`: its output, stdout and stderr.
fn predict_as_run(trace: &Path, args: &[&str]) -> (Output, String, String) {
    let out = predict_here(trace, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// `kill -9` of lbf-trace once it has written trace lines, early in a 2-rank MPICH ring of
/// some 4 s: the trace written so far (at least every second, in whole lines) predicts the
/// part captured, exit status 3, and says the capture was cut short.
#[test]
fn a_killed_capture_leaves_a_trace_that_predicts_what_it_has() {
    if !can_trace() {
        return;
    }
    let (ring, trace) = ring_and_trace("data-safety-kill");
    let mut tracer = Command::new(env!("CARGO_BIN_EXE_lbf-trace"))
        .arg("-o")
        .arg(&trace)
        .args(["--", "mpirun.mpich", "-n", "2"])
        .arg(&ring)
        .args(["400", "10"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("running lbf-trace");
    // Killed mid-run, once the trace has some lines (written every --flush-interval).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&trace).map_or(0, |m| m.len()) <= 1000 {
        assert!(
            std::time::Instant::now() < deadline,
            "lbf-trace wrote no trace lines in a minute"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    tracer.kill().expect("killing lbf-trace");
    tracer.wait().expect("waiting for lbf-trace");
    // The job runs on untraced; it is not needed any more.
    let _ = Command::new("pkill")
        .arg("-9")
        .arg("-f")
        .arg(&ring)
        .status();
    let written = std::fs::read(&trace).expect("reading the trace");
    assert!(written.len() > 1000, "only {} bytes written", written.len());
    let (out, stdout, stderr) = predict_as_run(&trace, &["--json"]);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stderr.contains("cut short"), "{stderr}");
    let line: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(line["complete"], false, "{stdout}");
    let predicted = line["predicted_seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("no prediction in {stdout}"));
    assert!(
        predicted > 0.2 && predicted < 4.0,
        "predicted {predicted} s for the part of a 4 s run captured"
    );
}

/// A ring buffer far too small for a 2-rank MPICH ring of 20,000 short messages: records are
/// lost, the trace's summary says how many and which processes they were of, from when, and
/// `lbf-gag predict` either refuses the trace naming the loss (and those gaps) as the cause
/// and how to avoid it, or predicts with the loss stated next to the numbers.
#[test]
fn a_tiny_ring_buffer_loses_records_and_says_where() {
    if !can_trace() {
        return;
    }
    let (ring, trace) = ring_and_trace("data-safety-tiny-ring");
    let out = Command::new(env!("CARGO_BIN_EXE_lbf-trace"))
        .args(["--ringbuf-size", "8192", "-o"])
        .arg(&trace)
        .args(["--", "mpirun.mpich", "-n", "2"])
        .arg(&ring)
        .args(["20000", "0"])
        .output()
        .expect("running lbf-trace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("try a larger --ringbuf-size"), "{stderr}");
    let text = std::fs::read_to_string(&trace).expect("reading the trace");
    let summary: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("a summary line")).unwrap();
    let summary = &summary["summary"];
    let lost = summary["lost_events"].as_u64().unwrap();
    let gaps = summary["gaps"].as_array().expect("gaps in the summary");
    let in_gaps: u64 = gaps.iter().map(|g| g["records"].as_u64().unwrap()).sum();
    let measured = summary["measured_seconds"].as_f64().unwrap();
    assert!(lost > 1000, "{summary}");
    assert!(in_gaps > 0 && in_gaps <= lost, "{summary}");
    for g in gaps {
        assert!(g["p"].as_u64().unwrap() < 2, "{g}");
        let from = g["from_seconds"].as_f64().unwrap();
        assert!(
            (0.0..=measured).contains(&from),
            "{g} in a run of {measured} s"
        );
    }
    let (out, stdout, stderr) = predict_as_run(&trace, &[]);
    let (p, records) = (&gaps[0]["p"], &gaps[0]["records"]);
    match out.status.code() {
        Some(1) => {
            let cause = format!("the capture lost {lost} records (process {p}: {records} from");
            assert!(stderr.contains(&cause), "{stderr}");
            assert!(stderr.contains("--ringbuf-size"), "{stderr}");
        }
        Some(0) => {
            let stated = format!("(the capture lost {lost} events");
            assert!(stdout.contains(&stated), "{stdout}");
            let named = format!("process {p} lost {records} records from");
            assert!(stderr.contains(&named), "{stderr}");
        }
        _ => panic!("lbf-gag: {:?}\n{stdout}\n{stderr}", out.status),
    }
}

/// `-p 1` would follow every process the host starts from then on: refused, saying why.
#[test]
fn tracing_the_init_process_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_lbf-trace"))
        .args(["-p", "1"])
        .output()
        .expect("running lbf-trace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("-p 1 would trace the init process"),
        "{stderr}"
    );
}
