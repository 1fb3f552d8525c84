//! Cluster mode with live capture across hosts: three network namespaces act as hosts, the
//! builder on one and an `lbf-node` under real eBPF probes on each of the others. A real Open
//! MPI job (the ring: blocking sends and receives, then `MPI_Sendrecv`; one rank per host, so
//! that every message crosses hosts over TCP) is launched by `mpirun` on host n1, which starts its daemon on host n2 through a
//! remote shell (`tests/workloads/cluster/rsh.c`, standing in for ssh). Each node sees one end
//! of every message; the builder must match them all, complete, lose nothing, and predict
//! what `lbf-gag predict` does from the merged trace, start-up model included.

mod cluster_support;

use cluster_support::*;
use std::process::Command;
use std::time::Duration;

/// Whether this test may load eBPF (root) and build Open MPI programs; says why not if not.
fn can_run_open_mpi() -> bool {
    machine::require("root (tracing loads eBPF)", machine::is_root())
        && machine::require(
            "Open MPI (mpicc.openmpi)",
            Command::new("mpicc.openmpi").arg("-v").output().is_ok(),
        )
}

#[test]
fn an_mpi_job_across_two_hosts_is_matched_and_predicted_centrally() {
    if !can_run_open_mpi() {
        return;
    }
    predicted_within_tolerance(|_| run_across_two_hosts());
}

/// One run of the job across two hosts, checked for completeness (every message matched,
/// nothing lost, the builder's prediction equal to `lbf-gag predict` on the merged trace);
/// returns the measured and the centrally predicted seconds, and who else used the machine
/// meanwhile.
fn run_across_two_hosts() -> (f64, f64, Shares) {
    let hosts = Hosts::new("live");
    let root = scratch("live");
    let ring = compile("mpicc.openmpi", "mpi/ring.c", &root);
    let rsh = compile("cc", "cluster/rsh.c", &root);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let as_run = format!("[[node]]\ncores = {cores}\nprocs = [0, 1]\n");
    let s = hub_builder(&root, &hosts, 2, &as_run);
    let builder = s.start("builder.log");

    // Host names are per host (UTS namespaces): Open MPI tells hosts apart by name.
    let rshd = Daemon::spawn(
        "rshd",
        host_shell(
            &hosts.names[2],
            "lbf-n2",
            &format!(
                "exec {} serve {}/lbf-n2.sock",
                rsh.display(),
                root.display()
            ),
        ),
        &root.join("rshd.log"),
    );
    // The job waits on a FIFO (a shell builtin: no process of its own) until both nodes'
    // probes are attached, then becomes mpirun.
    let go = root.join("go");
    assert!(Command::new("mkfifo").arg(&go).status().unwrap().success());
    let subnet = "10.231.0.0/24";
    let mpirun = format!(
        "read x < {go}; exec env LBF_RSH_DIR={dir} OMPI_ALLOW_RUN_AS_ROOT=1 \
         OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --mca plm_rsh_agent {rsh} \
         --host lbf-n1:1,lbf-n2:1 --mca btl self,tcp --mca btl_tcp_if_include {subnet} \
         --mca oob_tcp_if_include {subnet} --bind-to none -np 2 {ring} 20 5",
        go = go.display(),
        dir = root.display(),
        rsh = rsh.display(),
        ring = ring.display(),
    );
    let job = Daemon::spawn(
        "mpirun",
        host_shell(&hosts.names[1], "lbf-n1", &mpirun),
        &root.join("job.log"),
    );
    let pid = |d: &Daemon| d.child.id().to_string();
    let n1 = live_node(&s, Some(&hosts.names[1]), "n1", "0", &["--pid", &pid(&job)]);
    let n1 = Daemon::spawn("lbf-node n1", n1, &root.join("node-n1.log"));
    let n2 = live_node(
        &s,
        Some(&hosts.names[2]),
        "n2",
        "1",
        &["--pid", &pid(&rshd)],
    );
    let n2 = Daemon::spawn("lbf-node n2", n2, &root.join("node-n2.log"));
    let (mut n1, mut n2) = (n1, n2);
    n1.wait_attached(&root.join("node-n1.log"));
    n2.wait_attached(&root.join("node-n2.log"));
    machine::raise_priority();
    let watch = machine::CpuWatch::start(
        &[n1.child.id(), n2.child.id(), builder.child.id()],
        &[rshd.child.id()],
    );
    std::fs::write(&go, "go\n").unwrap();
    let (ok, out) = job.wait(Duration::from_secs(90));
    // Every process of the job is waited for: rank 0 by mpirun (waited for here), rank 1 by
    // its daemon, which the remote shell's server (a helper) reaps; so the programs' CPU is
    // in `own` and the helpers', and is not added again.
    let shares = watch.shares(0.0);
    let job_log = std::fs::read_to_string(root.join("job.log")).unwrap();
    assert!(ok, "the MPI job failed:\n{out}\n{job_log}");
    assert_eq!(out.matches("LBF-CHECK").count(), 2, "{out}\n{job_log}");
    // Host n2's node follows the remote shell, which outlives the job: stop it there.
    rshd.kill();
    for (name, node) in [("n1", n1), ("n2", n2)] {
        let (ok, _) = node.wait(Duration::from_secs(60));
        let log = std::fs::read_to_string(root.join(format!("node-{name}.log"))).unwrap();
        assert!(ok, "lbf-node {name} failed:\n{log}");
    }
    assert!(builder.wait(Duration::from_secs(60)).0);

    let report = s.report();
    assert_eq!(report["complete"], true, "{report}");
    assert_eq!(report["lost_events"], 0, "{report}");
    let predicted = report_predictions(&report);
    // Each node told the builder its ranks' start-up figures, so the builder's start-up
    // model (and `lbf-gag predict`'s from the merged trace) moves their starts on a target.
    let merged = lbf::trace::TraceReader::open(&s.merged()).expect("the merged trace");
    for p in &merged.header().procs {
        assert!(p.startup_cpu_ns > 0 && !p.cpus.is_empty(), "{p:?}");
    }
    assert_eq!(predict(&s.merged(), &root, &["as-run"]), predicted);
    assert_every_message_merged(&out, &s.merged(), "");
    (
        report["measured_seconds"].as_f64().unwrap(),
        predicted[0].1,
        shares,
    )
}

/// A node selecting by command name follows processes that start after it began capturing and
/// descend from none it traces: here the second rank, a sibling of the first under mpirun.
#[test]
fn a_node_selecting_by_command_name_adopts_ranks_started_later() {
    if !can_run_open_mpi() {
        return;
    }
    let root = scratch("adopt");
    let halo = compile("mpicc.openmpi", "mpi/halo.c", &root);
    // A name no other process has: the node waits for the first process of that name.
    let name = format!("lbfadopt{}", std::process::id() % 100_000);
    let bin = root.join(&name);
    std::fs::rename(&halo, &bin).unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let as_run = format!("[[node]]\ncores = {cores}\nprocs = [0, 1]\n");
    let s = builder_setup(
        &root,
        &listen,
        &["127.0.0.1"],
        2,
        &[("as-run", &as_run)],
        &[("n1", "token-n1-for-tests-only")],
    );
    let builder = s.start("builder.log");
    let mut node = Command::new(env!("CARGO_BIN_EXE_lbf-node"));
    node.env("LBF_NODE_TOKEN", "token-n1-for-tests-only")
        .args(["--builder", &listen, "--node", "n1", "--procs", "0-1"])
        .arg("--ca")
        .arg(&s.cert)
        .args(["--comm", &name, "--spool-dir"])
        .arg(root.join("spool"));
    let mut node = Daemon::spawn("lbf-node", node, &root.join("node.log"));
    // Probes loaded (and the name adopted at exec) before the job starts: a rank found by
    // the scan instead could be caught inside a call, whose return without an entry counts
    // as a lost record.
    node.wait_logged(&root.join("node.log"), "probes loaded");
    // The ranks start 1 s apart (Open MPI's wire-up waits for both): the node finds the first
    // by its selection and must adopt the second.
    let script = format!(
        "exec env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi \
         --bind-to none -np 1 sh -c 'exec {bin} 20 5' : -np 1 sh -c 'sleep 1; exec {bin} 20 5'",
        bin = bin.display()
    );
    let mut job = Command::new("sh");
    job.args(["-c", &script]);
    let job = Daemon::spawn("mpirun", job, &root.join("job.log"));
    let (ok, out) = job.wait(Duration::from_secs(90));
    let job_log = std::fs::read_to_string(root.join("job.log")).unwrap();
    assert!(ok, "the MPI job failed:\n{out}\n{job_log}");
    node_and_builder_done(node, &root.join("node.log"), builder, &s);
}
