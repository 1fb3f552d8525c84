//! Cluster mode following procedures (issue 18): the paper's SPA over Open MPI (one server,
//! three clients; the server's `servBusy1` serves client 1, `servBusy2` clients 2 and 3)
//! under an `lbf-node` with `--procedure servBusy1 --procedure servBusy2`, streaming over
//! loopback to a builder whose `[job]` follows the same procedures and asks what if each
//! moved to the clients or were free (`move`, `zero`), and whose target file speeds one up
//! (`[[procedure]]`). The merged trace must carry the server's CPU in each procedure (as
//! `lbf-trace --procedure` does, within 5 %), the builder's results must hold every what-if,
//! each equal to `lbf-gag predict` on the merged trace with the same options. Then the merged
//! trace is replayed into a builder killed and restarted mid-run (its journal's batches carry
//! the shares) and into one whose job follows no procedure (the node is refused, both lists
//! named). Needs root and Open MPI (with `CI=true`, their absence fails).

mod cluster_support;
// The capture tests' harness, for the SPA's launch and its procedure checks. It includes the
// `machine` module as `cluster_support` does: two copies, which share no state (it has none).
#[allow(clippy::duplicate_mod)]
mod traced;

use cluster_support::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use traced::{check_procedure_shares, Mpi, Setup, SPA_WHAT_IFS};

/// Requests per client, and a client's compute per request (servBusy2's; servBusy1 takes
/// twice as long): about a second of run.
const ITERS: u32 = 20;
const MS: f64 = 10.0;
/// The node's name and token.
const NODE: (&str, &str) = ("n1", "token-n1-for-tests-only");
/// The job's procedures and what-ifs (those of [`SPA_WHAT_IFS`]), in `[job]`.
const JOB_KEYS: &str = "procedures = [\"servBusy1\", \"servBusy2\"]\n\
                        move = [\"servBusy1\", \"servBusy2\"]\n\
                        zero = [\"servBusy1\", \"servBusy2\"]";
/// The target files: the machine the job runs on, and it with servBusy1 twice as fast.
const TARGETS: [&str; 2] = ["as-run", "faster"];
const TARGET_FILES: [(&str, &str); 2] = [("as-run", AS_RUN), ("faster", FASTER)];
const AS_RUN: &str = "[[node]]\ncores = 2\nprocs = [0, 1, 2, 3]\n";
const FASTER: &str = "[[node]]\ncores = 2\nprocs = [0, 1, 2, 3]\n\
                      [[procedure]]\nname = \"servBusy1\"\nspeedup = 2.0\n";

/// A builder of the 4-process job in `dir`, for node [`NODE`], with the target files
/// `targets` (name, TOML) and the `[job]` lines `keys`.
fn setup(dir: &Path, targets: &[(&str, &str)], keys: &str) -> BuilderSetup {
    let listen = format!("127.0.0.1:{}", free_port());
    let s = builder_setup(dir, &listen, &["127.0.0.1"], 4, targets, &[NODE]);
    s.add_job_keys(keys);
    s
}

#[test]
fn the_spa_s_procedures_are_followed_and_changed_centrally() {
    let open_mpi = Command::new("mpicc.openmpi").arg("-v").output().is_ok();
    if !(traced::can_trace() && machine::require("Open MPI (mpicc.openmpi)", open_mpi)) {
        return;
    }
    let root = scratch("procedures");
    let spa = compile("mpicc.openmpi", "mpi/spa.c", &root);
    let s = setup(&root.join("live"), &TARGET_FILES, JOB_KEYS);
    let builder = s.start("builder.log");
    // The job waits on a FIFO until the node's probes are attached, then becomes mpirun: the
    // node finds the procedures in the program its command line names.
    let go = root.join("go");
    assert!(Command::new("mkfifo").arg(&go).status().unwrap().success());
    let launch = Mpi::OpenMpi.launch(
        4,
        &spa.to_string_lossy(),
        &format!("{ITERS} {MS}"),
        Setup::default(),
    );
    let mut job = Command::new("sh");
    job.arg("-c")
        .arg(format!("read x < {}; exec env {launch}", go.display()));
    let job = Daemon::spawn("mpirun", job, &root.join("job.log"));
    let pid = job.child.id().to_string();
    let args = [
        "--pid",
        &pid,
        "--procedure",
        "servBusy1",
        "--procedure",
        "servBusy2",
    ];
    let node_log = s.dir.join("node.log");
    let mut node = Daemon::spawn(
        "lbf-node",
        live_node(&s, None, NODE.0, "0-3", &args),
        &node_log,
    );
    node.wait_attached(&node_log);
    std::fs::write(&go, "go\n").unwrap();
    let (ok, _) = job.wait(Duration::from_secs(90));
    let job_log = std::fs::read_to_string(root.join("job.log")).unwrap();
    assert!(ok, "the SPA failed:\n{job_log}");
    let (report, node_log) = node_and_builder_done(node, &node_log, builder, &s);
    // What the node found, as lbf-trace -v prints it.
    assert!(
        node_log.contains("procedure servBusy1: servBusy1 at offset")
            && node_log.contains(&*spa.to_string_lossy()),
        "{node_log}"
    );

    check_procedure_shares(&s.merged(), ITERS, MS);
    let central = report_predictions(&report);
    let names: Vec<&str> = central.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        names,
        [
            "as-run",
            "faster",
            "move servBusy1",
            "move servBusy2",
            "zero servBusy1",
            "zero servBusy2"
        ]
    );
    assert_eq!(
        predict_with(&s.merged(), &s.dir, &TARGETS, &SPA_WHAT_IFS),
        central
    );
    // Each change changes the prediction: the shares reached the engine.
    let as_run = central[0].1;
    assert!(
        central[1..].iter().all(|(_, p)| (p - as_run).abs() > 1e-6),
        "{central:?}"
    );

    replayed_through_a_restart(&s.merged(), &root);
    refused_by_a_job_without_procedures(&s.merged(), &root);
}

/// The merged trace `trace`, replayed by one node into a builder of the same job killed
/// (SIGKILL) and restarted mid-run: the restarted builder reads the batches it acknowledged
/// from its journal, shares and all, so the new merged trace has the same events and
/// shares, and its predictions are `lbf-gag predict`'s on it.
fn replayed_through_a_restart(trace: &Path, root: &Path) {
    let s = setup(&root.join("restart"), &TARGET_FILES, JOB_KEYS);
    let builder = s.start("builder.log");
    let events = event_lines(trace);
    let pace = [
        "--rate",
        &(events.len() / 2).to_string(),
        "--ack-timeout",
        "1",
    ];
    let replay = replay_node(None, &s, NODE.0, NODE.1, trace, "0-3", &pace);
    let node = Daemon::spawn("lbf-node", replay, &s.dir.join("node.log"));
    s.wait_events(events.len() as u64 / 3);
    builder.kill();
    wait_until_logged(&s.dir.join("node.log"), "retrying", || {});
    let builder = s.start("builder.log");
    let (report, _) = node_and_builder_done(node, &s.dir.join("node.log"), builder, &s);
    let log = std::fs::read_to_string(s.dir.join("builder.log")).unwrap();
    assert!(log.contains("journal: node `n1` holds batches"), "{log}");
    assert_eq!(event_lines(&s.merged()), events);
    check_procedure_shares(&s.merged(), ITERS, MS);
    assert_eq!(
        predict_with(&s.merged(), &s.dir, &TARGETS, &SPA_WHAT_IFS),
        report_predictions(&report)
    );
}

/// A node following procedures (here replaying a trace that did) is refused by a builder
/// whose job follows none, the reason naming both lists.
fn refused_by_a_job_without_procedures(trace: &Path, root: &Path) {
    let s = setup(&root.join("refused"), &TARGET_FILES[..1], "");
    let builder = s.start("builder.log");
    let replay = replay_node(None, &s, NODE.0, NODE.1, trace, "0-3", &[]);
    let log = s.dir.join("node.log");
    let (ok, _) = Daemon::spawn("lbf-node", replay, &log).wait(Duration::from_secs(30));
    let log = std::fs::read_to_string(log).unwrap();
    assert!(!ok, "{log}");
    assert!(
        log.contains("follows the procedures `servBusy1`, `servBusy2`, but the job")
            && log.contains("follows no procedure"),
        "{log}"
    );
    builder.kill();
}

/// The event lines of the trace at `path` (its header and summary left out).
fn event_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("{\"p\":"))
        .map(str::to_string)
        .collect()
}
