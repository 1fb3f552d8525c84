//! Cluster mode with a PVM program: an `lbf-node` under real eBPF probes captures a PVM
//! master/worker (`tests/workloads/pvm/master_worker.c`, messages through pvmd) by its PVM
//! calls and streams it to the builder, which must match every message, lose nothing, predict
//! what `lbf-gag predict` does from the merged trace, and come within 10 % of the measured
//! time. Needs root and PVM; skips otherwise.

mod cluster_support;

use cluster_support::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Whether PVM is installed and this test may load eBPF; says why not if not.
fn can_run_pvm() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let there = ["/usr/bin/pvm", "/usr/lib/x86_64-linux-gnu/libpvm3.so.3"]
        .iter()
        .all(|p| Path::new(p).exists());
    if !(root && there) {
        eprintln!("skipping: needs root and PVM");
    }
    root && there
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
/// completeness; returns the measured and the centrally predicted seconds, and the share of
/// the machine other work used meanwhile.
fn run_pvm_job(attempt: u32) -> (f64, f64, f64) {
    let root = scratch(&format!("pvm-{attempt}"));
    let bin = root.join("master_worker");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/pvm/master_worker.c");
    let out = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .args(["-lgpvm3", "-lpvm3"])
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One worker per core, as in the lbf-trace PVM tests (pvm_capture.rs says why).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = cores.min(8);
    std::fs::write(
        root.join("hostfile"),
        format!("* ep={}:/usr/bin wd={}\n", root.display(), root.display()),
    )
    .unwrap();
    let ids = format!("0-{workers}");
    let as_run = format!(
        "[[node]]\ncores = {cores}\nprocs = [{}]\n",
        (0..=workers)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let listen = format!("127.0.0.1:{}", free_port());
    let s = builder_setup(
        &root,
        &listen,
        &["127.0.0.1"],
        workers as u32 + 1,
        &[("as-run", &as_run)],
        &[("n1", "token-n1")],
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
    node.env("LBF_NODE_TOKEN", "token-n1")
        .args(["--builder", &listen, "--node", "n1", "--procs", &ids])
        .arg("--ca")
        .arg(&s.cert)
        .args(["--source", "pvm", "--pid", &job.child.id().to_string()])
        .arg("--spool-dir")
        .arg(root.join("spool"));
    let mut node = Daemon::spawn("lbf-node", node, &root.join("node.log"));
    node.wait_attached(&root.join("node.log"));
    machine::raise_priority();
    let watch = machine::CpuWatch::start(&[node.child.id(), builder.child.id()]);
    std::fs::write(&go, "go\n").unwrap();
    let (ok, out) = job.wait(Duration::from_secs(90));
    // The master (and the PVM console) are waited for by the job, which is waited for here;
    // the workers are pvmd's children and pvmd is nobody's: their CPU is added.
    let workers_cpu: f64 = out
        .lines()
        .filter(|l| l.contains("role=worker"))
        .map(|l| check_sum(l, "cpu_ns") * 1e-9)
        .sum();
    let others = watch.others_share(workers_cpu + pvmd_cpu_seconds(&out));
    let job_log = std::fs::read_to_string(root.join("job.log")).unwrap();
    assert!(ok, "the PVM job failed:\n{out}\n{job_log}");
    assert_eq!(out.matches("LBF-CHECK").count(), workers + 1, "{out}");
    let (report, node_log) = node_and_builder_done(node, &root.join("node.log"), builder, &s);
    let predicted = report_predictions(&report);
    assert_eq!(predict(&s.merged(), &root, &["as-run"]), predicted);
    assert_every_message_merged(&out, &s.merged(), &node_log);
    let merged = std::fs::read_to_string(s.merged()).unwrap();
    // The builder's measured time includes starting and halting pvmd: compare the program's
    // own run time (its longest `wall_ns`) with the prediction from the first task's start,
    // as the lbf-trace PVM tests do (`traced::Measured::Programs`).
    let wall_s = check_values(&out, "wall_ns").fold(0.0, f64::max) * 1e-9;
    let header: Value = serde_json::from_str(merged.lines().next().unwrap()).unwrap();
    let first_start_ns = header["procs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["start_ns"].as_u64().unwrap_or(0))
        .min()
        .unwrap();
    (
        wall_s,
        predicted[0].1 - first_start_ns as f64 * 1e-9,
        others,
    )
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
