//! Cluster mode with a PVM program: an `lbf-node` under real eBPF probes captures a PVM
//! master/worker (`tests/workloads/pvm/master_worker.c`, messages through pvmd) by its PVM
//! calls and streams it to the builder, which must match every message, lose nothing, predict
//! what `lbf-gag predict` does from the merged trace, and come within 10 % of the measured
//! time. Needs root and PVM; skips otherwise.

mod cluster_support;

use cluster_support::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Whether PVM is installed and this test may load eBPF; says why not if not.
fn can_run_pvm() -> bool {
    let there = ["/usr/bin/pvm", "/usr/lib/x86_64-linux-gnu/libpvm3.so.3"]
        .iter()
        .all(|p| Path::new(p).exists());
    machine::require("root (tracing loads eBPF)", machine::is_root())
        && machine::require("PVM (pvm, libpvm3)", there)
}

#[test]
fn a_pvm_job_is_streamed_by_its_pvm_calls_and_predicted_centrally() {
    if !can_run_pvm() {
        return;
    }
    predicted_within_tolerance(run_pvm_job);
}

/// One run: pvmd and the master/worker started by a shell the node follows by PID (its
/// source named with `--source pvm`: the shell itself maps no PVM library), checked for
/// completeness; returns the measured and the centrally predicted seconds, and who else used
/// the machine meanwhile.
fn run_pvm_job(attempt: u32) -> (f64, f64, Shares) {
    let root = scratch(&format!("pvm-{attempt}"));
    let bin = compile(&root, "pvm/master_worker.c", &["-lgpvm3", "-lpvm3"]);
    let (cores, workers) = cores_and_workers();
    std::fs::write(
        root.join("hostfile"),
        format!("* ep={}:/usr/bin wd={}\n", root.display(), root.display()),
    )
    .unwrap();
    let ids = format!("0-{workers}");
    let as_run = as_run(cores, workers);
    let listen = format!("127.0.0.1:{}", free_port());
    let s = builder_setup(
        &root,
        &listen,
        &["127.0.0.1"],
        workers as u32 + 1,
        &[("as-run", &as_run)],
        &[("n1", "token-n1-for-tests-only")],
    );
    let builder = s.start("builder.log");
    // The job waits on a FIFO (a shell builtin: no process of its own) until the node's
    // probes are attached, then starts pvmd and the master, and halts pvmd at the end.
    let go = root.join("go");
    assert!(Command::new("mkfifo").arg(&go).status().unwrap().success());
    let script = format!(
        "read x < {go}; export PVM_ALLOW_ROOT=1; cd {dir}; rm -f /tmp/pvmd.0 /tmp/pvml.0; \
         (echo conf; echo quit) | pvm hostfile > /dev/null; {bin} {workers} 4 5; status=$?; \
         for p in $(pgrep -x pvmd); do echo LBF-PVMD pid=$p cpu_s=$(( $(cut -d' ' -f14 \
         /proc/$p/stat) + $(cut -d' ' -f15 /proc/$p/stat) ))/$(getconf CLK_TCK); done; \
         echo halt | pvm > /dev/null 2>&1; rm -f /tmp/pvmd.0 /tmp/pvml.0; exit $status",
        go = go.display(),
        dir = root.display(),
        bin = bin.display(),
    );
    let mut job = Command::new("sh");
    job.args(["-c", &script]);
    let job = Daemon::spawn("job", job, &root.join("job.log"));
    let mut node = Command::new(env!("CARGO_BIN_EXE_lbf-node"));
    node.env("LBF_NODE_TOKEN", "token-n1-for-tests-only")
        .args(["--builder", &listen, "--node", "n1", "--procs", &ids])
        .arg("--ca")
        .arg(&s.cert)
        .args(["--source", "pvm", "--pid", &job.child.id().to_string()])
        .arg("--spool-dir")
        .arg(root.join("spool"));
    let mut node = Daemon::spawn("lbf-node", node, &root.join("node.log"));
    node.wait_attached(&root.join("node.log"));
    machine::raise_priority();
    let watch = machine::CpuWatch::start(&[node.child.id(), builder.child.id()], &[]);
    std::fs::write(&go, "go\n").unwrap();
    let (ok, out) = job.wait(Duration::from_secs(90));
    // The master (and the PVM console) are waited for by the job, which is waited for here;
    // the workers are pvmd's children and pvmd is nobody's: their CPU is added.
    let workers_cpu: f64 = out
        .lines()
        .filter(|l| l.contains("role=worker"))
        .map(|l| check_sum(l, "cpu_ns") * 1e-9)
        .sum();
    let shares = watch.shares(workers_cpu + pvmd_cpu_seconds(&out));
    let job_log = std::fs::read_to_string(root.join("job.log")).unwrap();
    assert!(ok, "the PVM job failed:\n{out}\n{job_log}");
    assert_eq!(out.matches("LBF-CHECK").count(), workers + 1, "{out}");
    let (report, node_log) = node_and_builder_done(node, &root.join("node.log"), builder, &s);
    let predicted = report_predictions(&report);
    assert_eq!(predict(&s.merged(), &root, &["as-run"]), predicted);
    assert_every_message_merged(&out, &s.merged(), &node_log);
    let (measured, predicted) = program_time_and_prediction(&out, &s, predicted[0].1);
    (measured, predicted, shares)
}

/// Compiles `source` (under tests/workloads) with `cc` and `libs` into `dir`.
fn compile(dir: &Path, source: &str, libs: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/workloads")
        .join(source);
    let bin = dir.join(src.file_stem().unwrap());
    let out = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .args(libs)
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// The machine's cores, and the workers to run: one per core, as in the lbf-trace PVM tests
/// (pvm_capture.rs says why).
fn cores_and_workers() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores, cores.min(8))
}

/// The configuration the job runs on: every task (master and `workers`) on one node of
/// `cores` cores (the hosts of the cluster tests share this machine's cores).
fn as_run(cores: usize, workers: usize) -> String {
    let ids: Vec<String> = (0..=workers).map(|i| i.to_string()).collect();
    format!("[[node]]\ncores = {cores}\nprocs = [{}]\n", ids.join(", "))
}

/// The program's own run time (its tasks' longest `wall_ns` in `out`) and the central
/// prediction `predicted` counted from the first task's start in the merged trace of `s`:
/// the builder's measured time includes starting and halting pvmd, as the lbf-trace PVM tests
/// say (`traced::Measured::Programs`).
fn program_time_and_prediction(out: &str, s: &BuilderSetup, predicted: f64) -> (f64, f64) {
    let merged = std::fs::read_to_string(s.merged()).unwrap();
    let wall_s = check_values(out, "wall_ns").fold(0.0, f64::max) * 1e-9;
    let header: Value = serde_json::from_str(merged.lines().next().unwrap()).unwrap();
    let first_start_ns = header["procs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["start_ns"].as_u64().unwrap_or(0))
        .min()
        .unwrap();
    (wall_s, predicted - first_start_ns as f64 * 1e-9)
}

#[test]
fn a_pvm_job_across_two_hosts_is_matched_and_predicted_centrally() {
    if !can_run_pvm() {
        return;
    }
    predicted_within_tolerance(run_across_two_hosts);
}

/// One run of a PVM master/worker whose virtual machine spans two hosts (network and UTS
/// namespaces): the master and the first pvmd on host n1, which starts the second pvmd on
/// host n2 through the remote shell (`tests/workloads/cluster/rsh.c`, as `PVM_RSH`); every
/// worker is spawned on n2, so every message crosses the hosts (pvmd to pvmd over UDP). An
/// `lbf-node` under live eBPF capture on each host (n1: the job's shell, n2: the remote
/// shell's server), the builder on a third. Checked: every message matched across the hosts,
/// nothing lost, the central prediction equal to `lbf-gag predict` on the merged trace.
/// Returns the measured and the centrally predicted seconds, and who else used the machine.
fn run_across_two_hosts(attempt: u32) -> (f64, f64, Shares) {
    // Before anything of the job starts: the pvmds and the tasks they spawn inherit it.
    machine::raise_priority();
    let hosts = Hosts::new("pvm");
    let root = scratch(&format!("pvm-hosts-{attempt}"));
    let bin = compile(&root, "pvm/master_worker.c", &["-lgpvm3", "-lpvm3"]);
    let rsh = compile(&root, "cluster/rsh.c", &[]);
    let (cores, workers) = cores_and_workers();
    let (n1_ip, n2_ip) = (Hosts::node_ip(1), Hosts::node_ip(2));
    // Hosts are named by their addresses: PVM resolves them, and no name service knows the
    // namespaces. Each host's pvmd keeps its socket files in a directory of its own
    // (PVM_TMP), as separate machines would in /tmp.
    std::fs::write(
        root.join("hostfile"),
        format!(
            "* ep={dir}:/usr/bin wd={dir}\n{n2_ip}\n",
            dir = root.display()
        ),
    )
    .unwrap();
    let tmp = |host: &str| {
        let d = root.join(format!("pvmtmp-{host}"));
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let s = hub_builder(&root, &hosts, workers as u32 + 1, &as_run(cores, workers));
    let builder = s.start("builder.log");
    let rshd = Daemon::spawn(
        "rshd",
        host_shell(
            &hosts.names[2],
            "lbf-n2",
            &format!(
                "export PVM_ALLOW_ROOT=1 PVM_TMP={tmp} && exec {rsh} serve {dir}/{n2_ip}.sock",
                tmp = tmp("n2").display(),
                rsh = rsh.display(),
                dir = root.display(),
            ),
        ),
        &root.join("rshd.log"),
    );
    // The job waits on a FIFO until both nodes' probes are attached, starts the virtual
    // machine (pvmd on n1, which starts n2's), says so on a second FIFO and waits on the
    // first again (the run whose time is checked starts there: starting pvmds is mostly
    // waiting, when other work would seem to compete), runs the master, reports the pvmds'
    // CPU (they are nobody's children; zombies left by earlier runs skipped) and halts them.
    let fifo = |name: &str| {
        let path = root.join(name);
        assert!(Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap()
            .success());
        path
    };
    let (go, ready) = (fifo("go"), fifo("ready"));
    let script = format!(
        "read x < {go}; export PVM_ALLOW_ROOT=1 PVM_TMP={tmp} PVM_RSH={rsh} LBF_RSH_DIR={dir}; \
         cd {dir}; (echo conf; echo quit) | pvm -n{n1_ip} hostfile > /dev/null; \
         echo > {ready}; read x < {go}; {bin} {workers} 4 5 pvmd {n2_ip}; status=$?; \
         for p in $(pgrep -x pvmd); do [ \"$(cut -d' ' -f3 /proc/$p/stat)\" = Z ] && continue; \
         echo LBF-PVMD pid=$p cpu_s=$(( $(cut -d' ' -f14 /proc/$p/stat) + \
         $(cut -d' ' -f15 /proc/$p/stat) ))/$(getconf CLK_TCK); done; \
         echo halt | pvm -n{n1_ip} > /dev/null 2>&1; exit $status",
        go = go.display(),
        ready = ready.display(),
        tmp = tmp("n1").display(),
        rsh = rsh.display(),
        dir = root.display(),
        bin = bin.display(),
    );
    let job = Daemon::spawn(
        "job",
        host_shell(&hosts.names[1], "lbf-n1", &script),
        &root.join("job.log"),
    );
    let node = |ns: &str, name: &str, procs: &str, pid: u32| {
        let mut c = in_netns(Some(ns), env!("CARGO_BIN_EXE_lbf-node"));
        c.env("LBF_NODE_TOKEN", format!("token-{name}-for-tests-only"))
            .args(["--builder", &s.listen, "--node", name, "--procs", procs])
            .arg("--ca")
            .arg(&s.cert)
            .args(["--source", "pvm", "--pid", &pid.to_string(), "--spool-dir"])
            .arg(root.join(format!("spool-{name}")));
        let log = root.join(format!("node-{name}.log"));
        let mut d = Daemon::spawn(&format!("lbf-node {name}"), c, &log);
        d.wait_attached(&log);
        d
    };
    // The master's tasks are on n1 (id 0), the workers on n2 (ids 1 to `workers`).
    let n1 = node(&hosts.names[1], "n1", "0", job.child.id());
    let n2 = node(
        &hosts.names[2],
        "n2",
        &format!("1-{workers}"),
        rshd.child.id(),
    );
    std::fs::write(&go, "go\n").unwrap();
    std::fs::read(&ready).unwrap();
    let watch = machine::CpuWatch::start(
        &[n1.child.id(), n2.child.id(), builder.child.id()],
        &[rshd.child.id()],
    );
    std::fs::write(&go, "go\n").unwrap();
    let (ok, out) = job.wait(Duration::from_secs(90));
    // The master and the consoles are waited for by the job; the workers are n2's pvmd's
    // children and the pvmds are nobody's: their CPU is added (all of it, though some was
    // spent before the watch began: this errs towards checking).
    let workers_cpu: f64 = out
        .lines()
        .filter(|l| l.contains("role=worker"))
        .map(|l| check_sum(l, "cpu_ns") * 1e-9)
        .sum();
    let shares = watch.shares(workers_cpu + pvmd_cpu_seconds(&out));
    let job_log = std::fs::read_to_string(root.join("job.log")).unwrap();
    assert!(ok, "the PVM job failed:\n{out}\n{job_log}");
    assert_eq!(out.matches("LBF-CHECK").count(), workers + 1, "{out}");
    // Host n2's node follows the remote shell's server, which outlives the job: stop it.
    rshd.kill();
    let mut logs = String::new();
    for (name, node) in [("n1", n1), ("n2", n2)] {
        let (ok, _) = node.wait(Duration::from_secs(60));
        let log = std::fs::read_to_string(root.join(format!("node-{name}.log"))).unwrap();
        assert!(ok, "lbf-node {name} failed:\n{log}");
        logs += &format!("lbf-node {name}:\n{log}\n");
    }
    assert!(
        builder.wait(Duration::from_secs(60)).0,
        "the builder failed"
    );
    let report = s.report();
    assert_eq!(report["complete"], true, "{report}\n{logs}");
    assert_eq!(report["lost_events"], 0, "{report}\n{logs}");
    let predicted = report_predictions(&report);
    assert_eq!(predict(&s.merged(), &root, &["as-run"]), predicted);
    assert_every_message_merged(&out, &s.merged(), &logs);
    let (measured, predicted) = program_time_and_prediction(&out, &s, predicted[0].1);
    (measured, predicted, shares)
}

/// pvmd's CPU seconds, from the `LBF-PVMD ... cpu_s=TICKS/HZ` line the job prints before it
/// halts pvmd (0 without one).
fn pvmd_cpu_seconds(out: &str) -> f64 {
    out.lines()
        .filter(|l| l.starts_with("LBF-PVMD"))
        .filter_map(|l| {
            let (ticks, hz) = l
                .split_whitespace()
                .find_map(|f| f.strip_prefix("cpu_s="))?
                .split_once('/')?;
            Some(ticks.parse::<f64>().ok()? / hz.parse::<f64>().ok()?)
        })
        .sum()
}
