//! The PVM capture end to end, under the real eBPF tracer: the master/worker of
//! `tests/workloads/pvm`, with messages routed through pvmd (PVM's default) and task to task
//! (`PvmRouteDirect`), and the group program (`pvm_joingroup`, `pvm_bcast`, `pvm_barrier`). pvmd is started by the traced command, so the tasks it spawns are
//! traced too. Each run must match every message once, agree with the programs' own counts
//! and CPU times, and predict its own configuration. Under `lbf-trace --procs`, a longer
//! run's events must flow while it runs, and a task beyond the count must be reported; under
//! `lbf-trace --procedure`, the tasks' events must carry the CPU of the procedure followed.
//! Needs root and PVM; skips otherwise (fails with `CI=true`).

mod traced;

use std::path::Path;

use lbf::capture::pvm::{fn_reads, PvmCapture, RECEIVE_BUFFER};
use lbf::capture::EventLog;
use lbf::record::CaptureSink;
use lbf_common::pvm;
use traced::{
    can_trace, check, check_streamed, check_trace_file, lbf_trace, read_trace, timed, trace,
    workload, Traced,
};

/// The PVM task library.
const LIBPVM: &str = "/usr/lib/x86_64-linux-gnu/libpvm3.so.3";
/// The PVM group library.
const LIBGPVM: &str = "/usr/lib/x86_64-linux-gnu/libgpvm3.so.3";

/// A shell command running workload `name` with `args` under a pvmd it starts and halts.
/// Before the halt it prints the CPU that pvmd and PVM's group server used (`LBF-DAEMON-CPU`
/// lines): daemons the job relies on, outside the command's waited-for processes, whose CPU
/// is the job's, not other work's (see `traced::competing_share`).
fn pvm_command(name: &str, args: &str) -> String {
    let bin = workload("pvm", name, &["-lgpvm3", "-lpvm3"]);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pvm-run");
    std::fs::create_dir_all(&dir).expect("the PVM run directory");
    let bin_dir = bin.parent().expect("a folder").display().to_string();
    std::fs::write(
        dir.join("hostfile"),
        format!("* ep={bin_dir}:/usr/bin wd={}\n", dir.display()),
    )
    .expect("writing the hostfile");
    format!(
        "export PVM_ALLOW_ROOT=1; cd {dir}; rm -f /tmp/pvmd.0 /tmp/pvml.0; \
         (echo conf; echo quit) | pvm hostfile > /dev/null; \
         {bin} {args}; status=$?; \
         for p in $(pgrep -x 'pvmd|pvmd3|pvmgs'); do \
         read -r ns _ < /proc/$p/schedstat && echo \"LBF-DAEMON-CPU ns=$ns\"; done; \
         echo halt | pvm > /dev/null 2>&1; \
         rm -f /tmp/pvmd.0 /tmp/pvml.0; exit $status",
        dir = dir.display(),
        bin = bin.display(),
    )
}

/// Runs workload `name` with `args` under a pvmd the command starts and halts.
fn trace_pvm(label: &str, name: &str, args: &str) -> Traced {
    let command = pvm_command(name, args);
    let sink = CaptureSink::new(PvmCapture::new("localhost"), EventLog::default());
    trace(
        label,
        &command,
        |t| {
            let missing = t
                .attach_pvm_library(Path::new(LIBPVM), pvm::NAMES, &fn_reads(), RECEIVE_BUFFER)
                .expect("probing libpvm3");
            assert!(!missing.contains(&RECEIVE_BUFFER), "{missing:?}");
            t.attach_pvm_library(
                Path::new(LIBGPVM),
                pvm::GROUP_NAMES,
                &fn_reads(),
                RECEIVE_BUFFER,
            )
            .expect("probing libgpvm3");
        },
        sink,
        |s| {
            let (log, summary) = s.into_parts();
            (log, summary.expect("finished"))
        },
    )
}

fn can_run_pvm() -> bool {
    let there = [LIBPVM, LIBGPVM, "/usr/bin/pvm"]
        .iter()
        .all(|p| Path::new(p).exists());
    can_trace() && traced::machine::require("PVM (pvm, libpvm3, libgpvm3)", there)
}

/// Workers for the runs: one per core (the master waits blocked, using no CPU). With more
/// workers than cores, Linux keeps each worker on one core's run queue for the whole short
/// run, while the engine shares all of a node's cores equally among its runnable processes
/// (docs/engine.md, "Several cores"): with 3 workers on 2 cores, the runs came out 15-20 %
/// slower than predicted, and the master/worker's dynamic assignment (a worker alone on a
/// core does twice the tasks) no longer fit the schedule it was replayed on.
fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
}

#[test]
fn master_worker_through_pvmd() {
    if can_run_pvm() {
        // 10 ms tasks: pvmd's CPU (routing every message, ~40 ms in all), which no event
        // holds, is then a small share of the run (docs/capture-sockets-pvm.md).
        let args = format!("{} 4 10", workers());
        timed(|| {
            check(
                &trace_pvm("pvm-default", "master_worker", &args),
                workers() + 1,
            )
        });
    }
}

#[test]
fn master_worker_task_to_task() {
    if can_run_pvm() {
        let args = format!("{} 4 5 direct", workers());
        timed(|| {
            check(
                &trace_pvm("pvm-direct", "master_worker", &args),
                workers() + 1,
            )
        });
    }
}

#[test]
fn group_broadcasts_and_barriers() {
    if can_run_pvm() {
        // 16 rounds: long enough (some 0.4 s) that the daemons' fixed work (pvmd starting
        // the tasks, the group server) does not look like other work on the machine.
        let args = format!("{} 16 10", workers());
        timed(|| check(&trace_pvm("pvm-group", "group", &args), workers() + 1));
    }
}

/// `lbf-trace --source pvm --procs PROCS --interval 0.3 -o FILE` on the master/worker with
/// `iters` rounds of tasks per worker.
fn master_worker_under_lbf_trace(label: &str, procs: usize, iters: u32) -> traced::TraceRun {
    let command = pvm_command("master_worker", &format!("{} {iters} 5", workers()));
    let procs = procs.to_string();
    let args = ["--source", "pvm", "--procs", &procs, "--interval", "0.3"];
    lbf_trace(label, &[&args[..], &["--", "sh", "-c", &command]].concat())
}

/// With `--procs`, the events of a longer PVM run flow while it runs (none is ever held:
/// PVM messages are known at their send), and the trace is complete.
#[test]
fn lbf_trace_with_procs_hands_a_pvm_run_out_while_it_runs() {
    if can_run_pvm() {
        let run = master_worker_under_lbf_trace("pvm-live", workers() + 1, 60);
        check_trace_file(&run, workers() + 1);
        check_streamed(&run, 20);
    }
}

/// A task beyond `--procs` is left out, named, its events counted as lost.
#[test]
fn lbf_trace_with_too_small_procs_leaves_the_task_beyond_out_and_says_so() {
    if can_run_pvm() {
        let run = master_worker_under_lbf_trace("pvm-too-few", workers(), 4);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "sent or received a PVM message after the {} expected tasks had",
                workers()
            )) && run
                .stderr
                .contains("error: more processes sent or received"),
            "{}",
            run.stderr
        );
        let (procs, _, summary) = read_trace(&run.trace);
        assert_eq!(procs.len(), workers());
        assert!(summary.lost_events > 0);
    }
}

/// `lbf-trace --procedure compute` on the PVM master/worker (its tasks spawned by pvmd, from a
/// binary named inside a shell command): each worker's events carry the CPU it spent in
/// `compute`, which its own LBF-CHECK line counts as `work_ns` (within 5 %), and the
/// master's none.
#[test]
fn lbf_trace_follows_a_procedure_of_the_pvm_tasks() {
    if !can_run_pvm() {
        return;
    }
    let command = pvm_command("master_worker", &format!("{} 10 5", workers()));
    let args = [
        "--source",
        "pvm",
        "--procedure",
        "compute",
        "--",
        "sh",
        "-c",
    ];
    let run = lbf_trace("pvm-procedure", &[&args[..], &[&command]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Each task's work, by PID, from its LBF-CHECK line (a worker's comes through the master,
    // after a `[tTID]` prefix).
    let field = |line: &str, key: &str| -> Option<i64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
    };
    let work: std::collections::HashMap<i64, (bool, i64)> = run
        .stdout
        .lines()
        .filter(|l| l.contains("LBF-CHECK "))
        .filter_map(|l| {
            let master = l.contains("role=master");
            Some((field(l, "pid")?, (master, field(l, "work_ns")?)))
        })
        .collect();
    assert_eq!(work.len(), workers() + 1, "LBF-CHECK lines: {}", run.stdout);
    let mut reader = lbf::trace::TraceReader::open(&run.trace).expect("the trace");
    assert_eq!(reader.header().procedures, ["compute"]);
    // A trace's process is named like `master_worker[PID]`.
    let pids: Vec<i64> = reader
        .header()
        .procs
        .iter()
        .map(|p| {
            let pid = p
                .name
                .rsplit_once('[')
                .and_then(|(_, r)| r.strip_suffix(']'));
            pid.and_then(|pid| pid.parse().ok())
                .unwrap_or_else(|| panic!("no PID in the process name {:?}", p.name))
        })
        .collect();
    let mut in_compute = vec![0u64; pids.len()];
    while let Some(e) = reader.next_event().expect("reading the trace") {
        in_compute[e.event.proc as usize] += e.procedures.0[0];
    }
    let mut compared = 0;
    for (p, pid) in pids.iter().enumerate() {
        let Some(&(master, work_ns)) = work.get(pid) else {
            continue;
        };
        compared += 1;
        let got = in_compute[p] as f64;
        if master {
            assert_eq!(in_compute[p], 0, "the master ran compute: {in_compute:?}");
        } else {
            let want = work_ns as f64;
            assert!(
                (got - want).abs() <= 0.05 * want,
                "task {pid}: {got} ns in compute in its events, {want} ns of work by its own \
                 count ({in_compute:?})"
            );
        }
    }
    assert_eq!(
        compared,
        workers() + 1,
        "tasks in the trace: {pids:?}, in LBF-CHECK: {work:?}"
    );
}
