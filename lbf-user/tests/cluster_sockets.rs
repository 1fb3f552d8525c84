//! Cluster mode with a plain socket program across hosts: three network namespaces act as
//! hosts, the builder on one, and on each of the others an `lbf-node` capturing by socket
//! system calls (`--source sockets`) under real eBPF probes. The paper's SPA
//! (`tests/workloads/sockets/spa.c`) runs its server on host n1 and its three clients on host
//! n2, so every message crosses hosts over TCP: each node sees one end of every connection, and
//! the builder matches the two ends' byte offsets. It must match every message, lose nothing,
//! predict what `lbf-gag predict` does from the merged trace, and come within 10 % of the
//! measured time; and a builder killed mid-run and restarted from its journal must still do
//! all of that but the timing, with the server's node selecting it by its cgroup and the
//! clients' node selecting them by command name (both, in the first test, by the PID of the
//! script that starts them); in that run the nodes also follow the SPA's two procedures
//! (`--procedure servBusy1@PATH`), whose CPU in the server must reach the merged trace
//! through the builder's matching and its journal. Needs root; skips otherwise.

mod cluster_support;
// The capture tests' harness, for its check of the SPA's procedure CPU. It includes the
// `machine` module as `cluster_support` does: two copies, which share no state (it has none).
#[allow(clippy::duplicate_mod)]
mod traced;

use cluster_support::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The SPA's rounds per client and milliseconds of work per unit: about a second of run.
const ROUNDS: u32 = 20;
const WORK_MS: u32 = 12;
/// The server's port on host n1.
const PORT: u16 = 7300;
/// The restarted run's `[job]` procedures and what-if, and the what-if for `lbf-gag predict`.
const JOB_PROCEDURES: &str = "procedures = [\"servBusy1\", \"servBusy2\"]\nmove = [\"servBusy1\"]";
const WHAT_IF: [&str; 2] = ["--move", "servBusy1"];
/// The most events the builder may hold at once behind connections between hosts.
const HELD_BOUND: u64 = 200;

/// One job at a time: two at once would compete for the machine whose time is predicted.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Whether this test may load eBPF; says why not if not.
fn can_trace() -> bool {
    machine::require("root (tracing loads eBPF)", machine::is_root())
}

#[test]
fn a_tcp_program_across_two_hosts_is_matched_and_predicted_centrally() {
    if !can_trace() {
        return;
    }
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    predicted_within_tolerance(|attempt| {
        let run = run_spa(
            &format!("sockets-{attempt}"),
            ROUNDS,
            (Select::ByPid, false),
            |_, b| b,
        );
        // What one node reports waits for the other's next batch (a tenth of a second
        // apart): some tens of events, where holding everything would be some 550.
        assert!(run.most_held < HELD_BOUND, "held {} events", run.most_held);
        (run.measured, run.predicted, run.shares)
    });
}

/// A builder killed (SIGKILL) while it matches the two hosts' streams and started again
/// replays its journal into a fresh matcher and engine, takes the nodes' resent batches, and
/// completes as if undisturbed: every message matched, nothing lost, the prediction that of
/// `lbf-gag predict` on the merged trace. The server's node selects it by its cgroup, the
/// clients' node them by command name, from their exec on. The server's node follows its
/// procedures: their CPU, which its sends and receives to the clients' host carry, reaches
/// the merged trace, the journal's batches included, and the builder moves one.
#[test]
fn a_builder_restarted_mid_run_still_matches_every_message_between_hosts() {
    if !can_trace() {
        return;
    }
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_spa(
        "sockets-restart",
        3 * ROUNDS,
        (Select::ByCgroupAndCommand, true),
        |s, builder| {
            s.wait_events(200);
            builder.kill();
            // Down until a node has noticed, and retries.
            wait_until_logged(&s.dir.join("node-n1.log"), "retrying", || {});
            s.start("builder-restarted.log")
        },
    );
    let log = std::fs::read_to_string(run.dir.join("builder-restarted.log")).unwrap();
    assert!(log.contains("journal: node"), "{log}");
}

/// How the nodes select their processes.
#[derive(Clone, Copy, PartialEq)]
enum Select {
    /// Both by the PID of the script that starts them.
    ByPid,
    /// The server's node by a cgroup (v2) that the server's script is put in; the clients'
    /// node by their command name (the SPA copied under a name of its own), from their exec
    /// on.
    ByCgroupAndCommand,
}

/// A cgroup v2 directory of its own, removed when dropped (once its processes are gone).
struct Cgroup(PathBuf);

impl Cgroup {
    /// A new cgroup named `name` in the cgroup v2 hierarchy, holding process `pid`.
    fn holding(name: &str, pid: &str) -> Cgroup {
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        let root = mounts
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
            })
            .expect("a cgroup v2 hierarchy mounted");
        let dir = root.join(name);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let cgroup = Cgroup(dir);
        std::fs::write(cgroup.0.join("cgroup.procs"), pid).unwrap();
        cgroup
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// What one run of the SPA across hosts gave.
struct Run {
    /// The builder's measured seconds.
    measured: f64,
    /// Its prediction for the configuration the run had.
    predicted: f64,
    /// Who else used the machine meanwhile.
    shares: Shares,
    /// The most events the builder held behind connections between hosts, as sampled.
    most_held: u64,
    /// The run's scratch directory.
    dir: PathBuf,
}

/// One run of the SPA with its server on host n1 and its clients on host n2, `rounds` rounds
/// each, the nodes selecting them as `select` says, the server's node following its
/// procedures if `procedures` (and the builder moving servBusy1), `meanwhile` called with the
/// builder once the job has started (it returns the builder to wait for); checked for
/// completeness: every message matched across the hosts, nothing lost, the builder's
/// predictions equal to `lbf-gag predict` on the merged trace, and with `procedures` the
/// server's CPU in them in the merged trace.
fn run_spa(
    tag: &str,
    rounds: u32,
    (select, procedures): (Select, bool),
    meanwhile: impl FnOnce(&BuilderSetup, Daemon) -> Daemon,
) -> Run {
    let hosts = Hosts::new(&tag.replace("sockets-", "s"));
    let root = scratch(tag);
    let spa = compile("cc", "sockets/spa.c", &root);
    // A name no other process has, for the node selecting by command name.
    let client_name = format!("spacl{}", std::process::id() % 100_000);
    let spa_client = root.join(&client_name);
    std::fs::copy(&spa, &spa_client).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let as_run = format!("[[node]]\ncores = {cores}\nprocs = [0, 1, 2, 3]\n");
    let s = hub_builder(&root, &hosts, 4, &as_run);
    if procedures {
        s.add_job_keys(JOB_PROCEDURES);
    }
    // The builder, the nodes and the job, all started from here on, at the highest priority.
    machine::raise_priority();
    let builder = s.start("builder.log");

    // Each host's part waits on a FIFO (a shell builtin: no process of its own) until both
    // nodes' probes are attached.
    let endpoint = format!("tcp:{}:{PORT}", Hosts::node_ip(1));
    let part = |host: usize, name: &str, script: String| {
        let go = root.join(format!("go-{name}"));
        assert!(Command::new("mkfifo").arg(&go).status().unwrap().success());
        let mut c = in_netns(Some(&hosts.names[host]), "sh");
        c.args(["-c", &format!("read x < {}; {script}", go.display())]);
        let job = Daemon::spawn(name, c, &root.join(format!("{name}.log")));
        (job, go)
    };
    let (spa, spa_client) = (spa.display(), spa_client.display());
    let (server, go_server) = part(
        1,
        "server",
        format!("exec {spa} server {endpoint} 3 {rounds} {WORK_MS}"),
    );
    let (job_clients, go_clients) = part(
        2,
        "clients",
        format!(
            "for id in 0 1 2; do {spa_client} client {endpoint} $id {rounds} {WORK_MS} & done; \
             wait"
        ),
    );
    let pid = |d: &Daemon| d.child.id().to_string();
    let (server_pid, clients_pid) = (pid(&server), pid(&job_clients));
    let cgroup = (select == Select::ByCgroupAndCommand)
        .then(|| Cgroup::holding(&format!("lbf-{client_name}"), &server_pid));
    let cgroup_dir = cgroup.as_ref().map(|c| c.0.display().to_string());
    let mut n1 = match &cgroup_dir {
        None => ["--source", "sockets", "--pid", &server_pid],
        Some(dir) => ["--source", "sockets", "--cgroup", dir],
    }
    .to_vec();
    // Selected by cgroup, the server's procedures are named with their program's path.
    let followed = ["servBusy1", "servBusy2"].map(|p| format!("{p}@{spa}"));
    if procedures {
        n1.extend(followed.iter().flat_map(|f| ["--procedure", f]));
    }
    let n1 = live_node(&s, Some(&hosts.names[1]), "n1", "0", &n1);
    let mut n1 = Daemon::spawn("lbf-node n1", n1, &root.join("node-n1.log"));
    let mut n2 = match select {
        Select::ByPid => ["--source", "sockets", "--pid", &clients_pid],
        Select::ByCgroupAndCommand => ["--source", "sockets", "--comm", &client_name],
    }
    .to_vec();
    // Every node of the job follows its procedures, the clients' in their copy of the SPA.
    let followed_by_clients = ["servBusy1", "servBusy2"].map(|p| format!("{p}@{spa_client}"));
    if procedures {
        n2.extend(followed_by_clients.iter().flat_map(|f| ["--procedure", f]));
    }
    let n2 = live_node(&s, Some(&hosts.names[2]), "n2", "1-3", &n2);
    let mut n2 = Daemon::spawn("lbf-node n2", n2, &root.join("node-n2.log"));
    n1.wait_attached(&root.join("node-n1.log"));
    match select {
        Select::ByPid => n2.wait_attached(&root.join("node-n2.log")),
        // It waits for a process of that name, which starts after `go`.
        Select::ByCgroupAndCommand => n2.wait_logged(&root.join("node-n2.log"), "probes loaded"),
    }
    let watch = machine::CpuWatch::start(&[n1.child.id(), n2.child.id(), builder.child.id()], &[]);
    std::fs::write(&go_server, "go\n").unwrap();
    std::fs::write(&go_clients, "go\n").unwrap();
    let builder = meanwhile(&s, builder);
    // What the builder holds behind connections not matched yet, sampled while the job runs.
    let running = AtomicBool::new(true);
    let (most_held, (ok_server, out_server), (ok_clients, out_clients)) =
        std::thread::scope(|scope| {
            let sampler = scope.spawn(|| {
                let mut most = 0;
                while running.load(Ordering::Relaxed) {
                    let held = s
                        .get("/results")
                        .and_then(|b| serde_json::from_str::<Value>(&b).ok())
                        .and_then(|v| v["streams"]["held_events"].as_u64());
                    most = most.max(held.unwrap_or(0));
                    std::thread::sleep(Duration::from_millis(20));
                }
                most
            });
            let server = server.wait(Duration::from_secs(90));
            let clients = job_clients.wait(Duration::from_secs(90));
            running.store(false, Ordering::Relaxed);
            (sampler.join().unwrap(), server, clients)
        });
    // The server and the clients' shell are this test's children, the clients the shell's:
    // their CPU is this process's own.
    let shares = watch.shares(0.0);
    let out = out_server + &out_clients;
    assert!(ok_server && ok_clients, "the SPA failed:\n{out}");
    assert_eq!(out.matches("LBF-CHECK").count(), 4, "{out}");
    let wall = check_values(&out, "wall_ns").fold(0.0, f64::max) * 1e-9;
    let cpu = check_sum(&out, "cpu_ns") * 1e-9;
    eprintln!(
        "the SPA's own longest run {wall:.3} s, its processes' CPU {cpu:.3} s; the builder held \
         at most {most_held} events behind connections between hosts"
    );
    let mut logs = String::new();
    for (name, node) in [("n1", n1), ("n2", n2)] {
        let (ok, _) = node.wait(Duration::from_secs(60));
        let log = std::fs::read_to_string(root.join(format!("node-{name}.log"))).unwrap();
        assert!(ok, "lbf-node {name} failed:\n{log}");
        logs += &log;
    }
    assert!(
        builder.wait(Duration::from_secs(60)).0,
        "the builder failed"
    );

    let report = s.report();
    assert_eq!(report["complete"], true, "{report}\n{logs}");
    assert_eq!(report["lost_events"], 0, "{report}\n{logs}");
    let predicted = report_predictions(&report);
    let what_if: &[&str] = if procedures { &WHAT_IF } else { &[] };
    assert_eq!(
        predict_with(&s.merged(), &root, &["as-run"], what_if),
        predicted
    );
    if procedures {
        traced::check_procedure_shares(&s.merged(), rounds, f64::from(WORK_MS));
    }
    assert_every_stream_message_merged(&out, &s.merged(), &report, &logs);
    Run {
        measured: report["measured_seconds"].as_f64().unwrap(),
        predicted: predicted[0].1,
        shares,
        most_held,
        dir: root,
    }
}

/// Asserts that the merged trace at `merged` holds every message of the programs (their
/// `LBF-CHECK` lines in `out`): one receive per receive call that returned bytes, each of a
/// message sent once, and as many bytes sent as the programs sent; and that the builder, whose
/// `report` this is, matched them all across the hosts and holds nothing.
fn assert_every_stream_message_merged(out: &str, merged: &Path, report: &Value, logs: &str) {
    let recvs = check_sum(out, "recvs") as usize;
    let send_bytes = check_sum(out, "send_bytes") as u64;
    let text = std::fs::read_to_string(merged).unwrap();
    let (mut sent, mut received) = (HashMap::new(), HashMap::new());
    let mut bytes = 0;
    for line in text.lines().skip(1) {
        let v: Value = serde_json::from_str(line).unwrap();
        let msg = || v["msg"].as_u64().unwrap();
        match v["k"].as_str() {
            Some("send") => {
                *sent.entry(msg()).or_insert(0) += 1;
                bytes += v["bytes"].as_u64().unwrap();
            }
            Some("recv_end") => *received.entry(msg()).or_insert(0) += 1,
            _ => {}
        }
    }
    let context = format!("{out}\n{report}\n{logs}");
    assert!(recvs > 0, "{context}");
    assert_eq!(
        received.len(),
        recvs,
        "receives in the merged trace\n{context}"
    );
    assert_eq!(
        sent.len(),
        recvs,
        "messages sent in the merged trace\n{context}"
    );
    assert!(
        sent.iter()
            .all(|(m, &n)| n == 1 && received.get(m) == Some(&1)),
        "every message sent once and received once\n{context}"
    );
    assert_eq!(bytes, send_bytes, "bytes sent\n{context}");
    let streams = &report["streams"];
    assert_eq!(streams["messages"], recvs, "{context}");
    assert_eq!(streams["unmatched_sends"], 0, "{context}");
    assert_eq!(streams["unmatched_receives"], 0, "{context}");
    assert_eq!(streams["held_events"], 0, "{context}");
}
