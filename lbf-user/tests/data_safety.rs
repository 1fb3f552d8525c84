//! A capture is never lost, and a broken one is never predicted from without saying so: a
//! bad `-o` path is an error before the command runs; a `kill -9` of lbf-trace mid-run leaves
//! a trace that `lbf-gag predict` reads up to where it was cut, predicting the captured part
//! with exit status 3 (cut short). Needs root and MPICH; skips without root, fails with
//! `CI=true`.

mod traced;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use traced::{can_trace, workload_built_by};

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

/// `kill -9` of lbf-trace once it has written trace lines, early in a 2-rank MPICH ring of
/// some 4 s: the trace written so far (at least every second, in whole lines) predicts the
/// part captured, exit status 3, and says the capture was cut short.
#[test]
fn a_killed_capture_leaves_a_trace_that_predicts_what_it_has() {
    if !can_trace() {
        return;
    }
    let ring = workload_built_by("mpicc.mpich", "mpi", "ring", &[]);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("data-safety-kill");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("k.jsonl");
    // Not an earlier run's trace: the wait below is for this run's lines.
    let _ = std::fs::remove_file(&trace);
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
    let out = Command::new(env!("CARGO_BIN_EXE_lbf-gag"))
        .args(["predict", "--json", "--nodes", "1", "--cores", "2"])
        .arg(&trace)
        .output()
        .expect("running lbf-gag");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
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
