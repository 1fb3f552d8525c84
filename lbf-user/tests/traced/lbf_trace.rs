//! Runs the `lbf-trace` binary and reads what it reports: its progress lines on stderr and
//! the trace file it wrote.

use std::path::{Path, PathBuf};
use std::process::Command;

use lbf::event::{Event, EventKind};
use lbf::trace::TraceReader;

use super::checks::check_messages;
use super::machine;
use super::workloads::parse_checks;
use super::TRACING;

/// What a run of the `lbf-trace` binary printed and wrote.
pub(crate) struct TraceRun {
    /// Its exit status.
    pub code: i32,
    /// Its standard output: the traced command's, then the predictions.
    pub stdout: String,
    /// Its standard error: reports and warnings.
    pub stderr: String,
    /// The trace it wrote (-o); empty if it was asked for none.
    pub trace: PathBuf,
}

/// Runs `lbf-trace -o <label>.trace.jsonl ARGS` as one traced run at a time (see [`trace`]).
pub(crate) fn lbf_trace(label: &str, args: &[&str]) -> TraceRun {
    lbf_trace_during(label, args, |_| {})
}

/// [`lbf_trace`], calling `during` with lbf-trace's process id once it runs; lbf-trace's
/// output goes to files meanwhile, so that `during` may stop it for a while.
pub(crate) fn lbf_trace_during(label: &str, args: &[&str], during: impl FnOnce(u32)) -> TraceRun {
    let trace = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{label}.trace.jsonl"));
    run_lbf_trace(Some(trace), args, during)
}

/// Runs `lbf-trace ARGS` asked for neither a trace nor predictions, as one traced run at a
/// time (see [`trace`]).
pub(crate) fn lbf_trace_without_outputs(args: &[&str]) -> TraceRun {
    run_lbf_trace(None, args, |_| {})
}

/// Runs `lbf-trace [-o TRACE] ARGS` at the highest priority (as in [`trace`]), calling
/// `during` with its process id while it runs.
fn run_lbf_trace(trace: Option<PathBuf>, args: &[&str], during: impl FnOnce(u32)) -> TraceRun {
    let _one = TRACING.lock().unwrap_or_else(|e| e.into_inner());
    let mut command = Command::new(env!("CARGO_BIN_EXE_lbf-trace"));
    if let Some(trace) = &trace {
        let _ = std::fs::remove_file(trace);
        command.arg("-o").arg(trace);
    }
    let out = |name: &str| Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("lbf-trace.{name}"));
    let file = |name: &str| std::fs::File::create(out(name)).expect("creating an output file");
    machine::raise_priority();
    let mut child = command
        .args(args)
        .stdout(file("stdout"))
        .stderr(file("stderr"))
        .spawn()
        .expect("running lbf-trace");
    during(child.id());
    let status = child.wait().expect("waiting for lbf-trace");
    let read = |name: &str| std::fs::read_to_string(out(name)).expect("reading lbf-trace's output");
    TraceRun {
        code: status.code().unwrap_or(-1),
        stdout: read("stdout"),
        stderr: read("stderr"),
        trace: trace.unwrap_or_default(),
    }
}

/// The `capture:` reports of `lbf-trace --interval` in `stderr`: events handed out and
/// events held at each.
pub(crate) fn capture_reports(stderr: &str) -> Vec<(u64, u64)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("lbf-trace: capture: "))
        .map(|l| {
            let n: Vec<u64> = l
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            (n[0], n[1])
        })
        .collect()
}

/// What a socket capture kept at one `lbf-trace --interval` report.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeptReport {
    /// Events handed out so far.
    pub handed: u64,
    /// Channels with matching state.
    pub channels: u64,
    /// Descriptors known.
    pub descriptors: u64,
    /// Processes with an entry.
    pub processes: u64,
}

/// The socket capture's `kept:` counts in the `capture:` reports of `lbf-trace --interval`.
pub(crate) fn kept_reports(stderr: &str) -> Vec<KeptReport> {
    stderr
        .lines()
        .filter_map(|l| {
            let handed = l.strip_prefix("lbf-trace: capture: ")?.split(' ').next()?;
            let kept = l.split_once(", kept: ")?.1;
            let n: Vec<u64> = kept
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|w| w.parse().ok())
                .collect();
            Some(KeptReport {
                handed: handed.parse().ok()?,
                channels: n[0],
                descriptors: n[1],
                processes: n[2],
            })
        })
        .collect()
}

/// Checks that `lbf-trace --interval` handed the events out while the program ran: its
/// reports (at least 3) show events handed out before the end, never more than `most_held`
/// held back, and the trace has at least ten times that many events (so that holding them
/// all until the end could not pass). Returns the largest number held.
pub(crate) fn check_streamed(run: &TraceRun, most_held: u64) -> u64 {
    let reports = capture_reports(&run.stderr);
    eprintln!("capture reports (handed out, held): {reports:?}");
    assert!(reports.len() >= 3, "too few reports:\n{}", run.stderr);
    assert!(
        reports.iter().filter(|(handed, _)| *handed > 0).count() >= reports.len() - 1,
        "events were not handed out while the program ran:\n{}",
        run.stderr
    );
    assert!(reports.windows(2).all(|w| w[0].0 <= w[1].0), "{reports:?}");
    let held = reports.iter().map(|&(_, held)| held).max().unwrap_or(0);
    assert!(held <= most_held, "held up to {held} events: {reports:?}");
    let events = read_trace(&run.trace).1.len() as u64;
    assert!(
        events >= 10 * most_held,
        "a run this short ({events} events) shows nothing"
    );
    held
}

/// The lower bounds `lbf-trace --interval` reported for its targets while the program ran,
/// in seconds ("at least S s predicted so far").
pub(crate) fn predicted_so_far(stderr: &str) -> Vec<f64> {
    stderr
        .lines()
        .filter_map(|l| {
            l.split_once(": at least ")?
                .1
                .split_once(" s predicted so far")
        })
        .map(|(seconds, _)| seconds.parse().expect("seconds"))
        .collect()
}

/// The processes, events and summary of the trace at `path`.
pub(crate) fn read_trace(
    path: &Path,
) -> (Vec<lbf::event::ProcInfo>, Vec<Event>, lbf::trace::Summary) {
    let mut reader = TraceReader::open(path).expect("opening the trace");
    let mut events = Vec::new();
    while let Some(e) = reader.next_event().expect("reading the trace") {
        events.push(e.event);
    }
    let summary = reader.summary().expect("a complete trace").clone();
    (reader.header().procs.clone(), events, summary)
}

/// Checks the trace `lbf-trace` wrote against the programs' `LBF-CHECK` lines in its
/// output: `expected_procs` processes, nothing lost, every message sent and received once,
/// and per process (MPI ranks by their `rank`, named `rank N`; other processes by the `pid`
/// their name ends with) the receives and the bytes sent.
pub(crate) fn check_trace_file(run: &TraceRun, expected_procs: usize) {
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let (procs, events, summary) = read_trace(&run.trace);
    assert_eq!(procs.len(), expected_procs, "{procs:?}");
    assert_eq!(summary.lost_events, 0);
    check_messages(&events);
    let checks = parse_checks(&run.stdout);
    assert_eq!(checks.len(), expected_procs, "{}", run.stdout);
    for c in &checks {
        let named = |name: &str| match c.0.get("pid") {
            Some(pid) => name.ends_with(&format!("[{pid}]")),
            None => name == format!("rank {}", c.num("rank")),
        };
        let p = procs
            .iter()
            .position(|p| named(&p.name))
            .unwrap_or_else(|| panic!("process of {:?} not in the trace: {procs:?}", c.0));
        let of_p = || events.iter().filter(|e| e.proc == p as u32);
        let recvs = of_p()
            .filter(|e| matches!(e.kind, EventKind::RecvEnd { .. }))
            .count() as u64;
        let send_bytes: u64 = of_p()
            .map(|e| match e.kind {
                EventKind::Send { bytes, .. } => bytes,
                _ => 0,
            })
            .sum();
        assert_eq!(
            (recvs, send_bytes),
            (c.num("recvs"), c.num("send_bytes")),
            "{}: receives and bytes sent",
            procs[p].name
        );
    }
}

/// `lbf-gag predict TRACE ARGS` on one node of this machine's cores (`--nodes 1 --cores C`,
/// the placement a run here had): its output, whatever its exit status.
pub(crate) fn predict_here(trace: &Path, args: &[&str]) -> std::process::Output {
    let cores = machine::cores().to_string();
    Command::new(env!("CARGO_BIN_EXE_lbf-gag"))
        .args(["predict", "--nodes", "1", "--cores", &cores])
        .args(args)
        .arg(trace)
        .output()
        .expect("running lbf-gag")
}

/// [`predict_here`] with `--json`, which must succeed: each target's name and predicted
/// seconds, in order.
pub(crate) fn predict_on_this_machine(trace: &Path, args: &[&str]) -> Vec<(String, f64)> {
    let mut json = vec!["--json"];
    json.extend(args);
    let out = predict_here(trace, &json);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("lbf-gag's JSON line");
            let target = v["target"].as_str().expect("a target").to_string();
            (
                target,
                v["predicted_seconds"].as_f64().expect("a predicted time"),
            )
        })
        .collect()
}

/// A trace of `command` (an MPI job of `ranks` ranks that print their `LBF-CHECK` lines): its
/// file, and its run time from the first rank's start to the last exit (what a prediction
/// from it covers, less the launcher's start-up); or why the job failed.
pub(crate) fn traced_job(
    label: &str,
    command: &str,
    ranks: usize,
) -> Result<(PathBuf, f64), String> {
    let run = lbf_trace(label, &["--source", "mpi", "--", "sh", "-c", command]);
    // A job across namespaces is killed by `timeout` if its teardown hangs (seen with MPICH):
    // killed after its ranks had done their work and said so, a run still measures what a
    // prediction covers, since the teardown is taken out.
    let finished = parse_checks(&run.stdout).len() == ranks;
    if run.code != 0 && !finished {
        return Err(format!(
            "{label}: exit status {}:\n{}\n{}",
            run.code, run.stdout, run.stderr
        ));
    }
    if run.code != 0 {
        eprintln!(
            "{label}: the job was killed in its teardown (exit status {})",
            run.code
        );
    }
    let (procs, _, summary) = read_trace(&run.trace);
    let first = procs.iter().map(|p| p.start_ns).min().unwrap_or(0) as f64 * 1e-9;
    Ok((
        run.trace,
        summary.measured_seconds - summary.teardown_seconds - first,
    ))
}

/// [`traced_job`] until it succeeds, at most 3 times: an MPI job across namespaces now and
/// then fails to start (UCX under MPICH finding no interface once in a while).
pub(crate) fn traced_job_retried(label: &str, command: &str, ranks: usize) -> (PathBuf, f64) {
    let mut failures = Vec::new();
    for _ in 0..3 {
        match traced_job(label, command, ranks) {
            Ok(run) => return run,
            Err(why) => {
                eprintln!("{why}");
                failures.push(why);
            }
        }
    }
    panic!("the job failed 3 times: {}", failures.join("\n"));
}
