//! Calibration on emulated hosts: network namespaces joined by a veth pair shaped with
//! `tc ... tbf` are two hosts and their network, a cgroup with `cpu.max` a slower host.
//! `lbf-node calibrate` must measure what the shaping and the quota imply, agree with an
//! third-party ping-pong (Debian's `sockperf`), and its tables must predict an MPI program moved from a fast link
//! to a shaped one (NF), with Open MPI and with MPICH.

mod traced;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use traced::machine::{self, machine_cpu_seconds, own_cpu_seconds, BUSY_MACHINE};
use traced::shaping::{comment_points, shaping_implies};
use traced::{
    across, cgroup_speed, lbf_trace, predict_on_this_machine, read_trace, run, timed,
    traced_job_retried, workload_built_by, Cgroup, Mpi, NetnsPair, Reference, BUSY,
};

/// Relative error allowed between a measured table and the shaping, at 64 KiB and above.
const RATE_TOLERANCE: f64 = 0.05;
/// Relative error allowed between calibrate's and an independent small-message latency.
const LATENCY_TOLERANCE: f64 = 0.10;
/// Relative error allowed between a measured speed and the cgroup's quota.
const SPEED_TOLERANCE: f64 = 0.05;
/// Relative error allowed between an NF prediction and the run it predicts.
const NF_TOLERANCE: f64 = 0.05;
/// Relative error allowed between the table fit-network finds in a trace and the shaping, at
/// 64 KiB and above.
const FIT_TOLERANCE: f64 = 0.10;

/// Root, to make namespaces and cgroups.
fn ready() -> bool {
    machine::require("root (network namespaces, tc, cgroups)", machine::is_root())
}

fn scratch(name: &str) -> PathBuf {
    traced::scratch(&format!("calibrate-{name}"))
}

/// `lbf-node calibrate ARGS` in network namespace `ns`.
fn calibrate_in(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        ns,
        env!("CARGO_BIN_EXE_lbf-node"),
        "calibrate",
    ]);
    c
}

/// `program` in network namespace `ns`, on CPU `cpu` alone.
fn pinned_in(ns: &str, cpu: u32, program: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "taskset", "-c", &cpu.to_string()])
        .arg(program);
    c
}

/// The measured points a table file calibrate wrote keeps as comments.
fn measured_points(file: &Path) -> Vec<(f64, f64)> {
    comment_points(&std::fs::read_to_string(file).expect("the table file"))
}

/// Runs `f`, and the share of the machine's CPU others took meanwhile.
fn watched<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let (machine0, own0, start) = (machine_cpu_seconds(), own_cpu_seconds(), Instant::now());
    let value = f();
    let others = machine::others_share(
        machine_cpu_seconds() - machine0,
        own_cpu_seconds() - own0,
        start.elapsed().as_secs_f64(),
    );
    (value, others)
}

/// The TCP tables of a 100 Mbit/s and a 1 Gbit/s link follow the shaping from 64 KiB on, and
/// the small-message latency is that of a third-party ping-pong (Debian's `sockperf`).
#[test]
fn tcp_tables_follow_the_shaping_and_an_independent_ping_pong() {
    if !ready() || !have_sockperf() {
        return;
    }
    let dir = scratch("tcp");
    let pair = NetnsPair::new(71);
    // (tc rate, bits/s, burst, largest size, from which size on the table must follow the
    // shaping). At 100 Mbit/s the burst is the smallest that keeps tbf's timer from slowing
    // the link (a 1600-byte bucket reads 5 % slow). At 1 Gbit/s it is twice the largest
    // packet TCP hands the veth (64 KiB, segmentation offload): tbf splits a packet larger
    // than its bucket into 1514-byte frames, and at 1 Gbit/s those cost this virtual machine
    // 0.5 to 0.6 CPU-seconds per second of transfer (5 times what whole packets cost), which
    // made the table read 5 to 8 % slow at 1 to 8 MiB on a machine where other work ran.
    // A message within that bucket is not free, though: this ping-pong's 16 to 128 KiB
    // messages take 4.2 ns a byte (128 KiB 0.55 ms; Open MPI's ping-pong takes as long), so a
    // 256 KiB message reads 4 to 9 % above the shaping; from 512 KiB on, 0 to 2 %.
    for (rate, bps, burst, max, from) in [
        ("100mbit", 1e8, 4096u32, "4M", 65536.0),
        ("1gbit", 1e9, 131072, "16M", 524288.0),
    ] {
        pair.shape(rate, burst);
        let file = dir.join(format!("{rate}.toml"));
        timed(|| {
            let (listing, others) = watched(|| {
                let mut server = calibrate_in(&pair.names[1])
                    .args(["--listen", &format!("{}:7300", pair.addrs[1])])
                    .args(["--clients", "1"])
                    .spawn()
                    .expect("the ping-pong server");
                let listing = run(calibrate_in(&pair.names[0])
                    .args(["--peer", &format!("{}:7300", pair.addrs[1])])
                    .args(["--max-bytes", max, "--min-reps", "3"])
                    .args(["--seconds-per-size", "0.1", "-o"])
                    .arg(&file));
                assert!(server.wait().expect("the server").success());
                listing
            });
            eprintln!("{rate} (tbf burst {burst}):\n{listing}");
            let points = measured_points(&file);
            let base = points[0].1;
            let mut misses = Vec::new();
            for &(bytes, seconds) in points.iter().filter(|p| p.0 >= from) {
                let implied = shaping_implies(bytes, bps, f64::from(burst), base);
                let error = (seconds - implied) / implied;
                eprintln!(
                    "{rate} {bytes:>9} B: measured {seconds:.4e} s, shaping implies \
                     {implied:.4e} s ({:+.1} %)",
                    error * 100.0
                );
                if error.abs() > RATE_TOLERANCE {
                    misses.push(format!("{bytes} B {:+.1} %", error * 100.0));
                }
            }
            outcome(&format!("{rate} table"), misses, others)
        });
        timed(|| {
            let ((ours, theirs), others) =
                watched(|| small_latencies(&pair, &dir.join("small.toml")));
            let error = (ours - theirs) / theirs;
            eprintln!(
                "{rate}: {SMALL}-byte one-way {ours:.3e} s, sockperf's {theirs:.3e} s \
                 ({:+.1} %)",
                error * 100.0
            );
            let miss = (error.abs() > LATENCY_TOLERANCE).then(|| {
                format!(
                    "{SMALL} B latency {ours:.3e} s against sockperf's {theirs:.3e} s ({:+.1} %)",
                    error * 100.0
                )
            });
            outcome(
                &format!("{rate} latency"),
                miss.into_iter().collect(),
                others,
            )
        });
    }
}

/// `Ok` without `misses`; else the misses, flagged [`BUSY`] if `others` took more of the
/// machine than [`BUSY_MACHINE`].
fn outcome(what: &str, misses: Vec<String>, others: f64) -> Result<(), String> {
    if misses.is_empty() {
        return Ok(());
    }
    let busy = if others > BUSY_MACHINE { BUSY } else { "" };
    Err(format!(
        "{busy}{what}: {} (others used {:.0} % of the machine)",
        misses.join(", "),
        others * 100.0
    ))
}

/// The size of the small messages compared: sockperf's smallest is 14 bytes (its header).
const SMALL: u32 = 16;

/// Whether Debian's `sockperf` (a third-party ping-pong) is installed.
fn have_sockperf() -> bool {
    let there = Command::new("sockperf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    machine::require("sockperf (scripts/setup.sh installs it)", there)
}

/// The one-way time of a [`SMALL`] message over `pair`'s link by calibrate and by Debian's
/// `sockperf ping-pong` (half the median round trip, as calibrate reckons), each the median
/// of 5 runs taken in turn, each client on CPU 0 and each server on CPU 1: a small message's
/// latency on this virtual machine is about 8 us between processes on one CPU and 20 to 30
/// us across CPUs, so the two are measured alike and close in time.
fn small_latencies(pair: &NetnsPair, file: &Path) -> (f64, f64) {
    let node = Path::new(env!("CARGO_BIN_EXE_lbf-node"));
    let sockperf = Path::new("sockperf");
    let size = SMALL.to_string();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..5 {
        let port = format!("{}", 7310 + round);
        let mut server = pinned_in(&pair.names[1], 1, sockperf)
            .args(["server", "--tcp", "-i", &pair.addrs[1], "-p", &port])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("sockperf's server");
        // Its client does not wait for the server to listen: try again until it answers.
        let client = |_| {
            pinned_in(&pair.names[0], 0, sockperf)
                .args(["ping-pong", "--tcp", "-i", &pair.addrs[1], "-p", &port])
                .args(["-m", &size, "-t", "1"])
                .output()
                .expect("sockperf's client")
        };
        let out = (0..50)
            .map(client)
            .find(|o| o.status.success() && !o.stdout.is_empty())
            .expect("sockperf ping-pong never reached its server");
        let _ = server.kill();
        let _ = server.wait();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let median_us = text
            .lines()
            .find_map(|l| l.split("percentile 50.000 =").nth(1))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("sockperf printed no median:\n{text}"));
        theirs.push(median_us * 1e-6);
        let peer = format!("{}:{}", pair.addrs[1], 7320 + round);
        let mut server = pinned_in(&pair.names[1], 1, node)
            .args(["calibrate", "--listen", &peer, "--clients", "1"])
            .spawn()
            .expect("the ping-pong server");
        run(pinned_in(&pair.names[0], 0, node)
            .args(["calibrate", "--peer", &peer, "--max-bytes", &size])
            .args(["--min-reps", "2000", "--max-reps", "2000", "-o"])
            .arg(file));
        assert!(server.wait().expect("the server").success());
        let small = measured_points(file)
            .into_iter()
            .find(|p| p.0 == f64::from(SMALL))
            .expect("the small size measured");
        ours.push(small.1);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(&mut ours), median(&mut theirs))
}

/// A host emulated by a cgroup with cpu.max at 50 % and at 25 % of a CPU measures speed 0.5
/// and 0.25 of this host, and one core.
///
/// This host is what the same CPU does at the same time: the group's share of the two
/// calibrations' sum when a process outside the group takes what its quota leaves (see
/// [`Reference::SameCpu`]).
#[test]
fn a_cgroups_cpu_max_is_its_speed() {
    if !ready() {
        return;
    }
    let dir = scratch("cpu");
    let reference = dir.join("reference.toml");
    for (quota, expected) in [(50_000, 0.5), (25_000, 0.25)] {
        let group = Cgroup::new(&format!("cpu{quota}"), quota);
        group.favour();
        let file = dir.join(format!("quota{quota}.toml"));
        timed(|| {
            let (measured, others) =
                watched(|| cgroup_speed(&group, 4, &file, &reference, Reference::SameCpu));
            let (speed, cores, listing) = (measured.speed, measured.cores, measured.listing);
            eprintln!("{listing}cpu.max {quota} 100000: speed {speed}, {cores} cores");
            assert_eq!(cores, 1, "a quota of less than a CPU is one core");
            let error = (speed - expected) / expected;
            if error.abs() <= SPEED_TOLERANCE {
                return Ok(());
            }
            let busy = if others > BUSY_MACHINE { BUSY } else { "" };
            Err(format!(
                "{busy}cpu.max {quota}: speed {speed}, expected {expected} ({:+.1} %; others used \
                 {:.0} % of the machine)",
                error * 100.0,
                others * 100.0
            ))
        });
    }
}

/// The shell command running `program args` as 2 ranks, one in each namespace of `pair`.
fn job(mpi: Mpi, pair: &NetnsPair, ssh: &Path, program: &Path, args: &str) -> String {
    let hosts = format!("{},{}", pair.addrs[0], pair.addrs[1]);
    let launch = match mpi {
        Mpi::OpenMpi => format!(
            "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi -np 2 \
             --host {hosts}"
        ),
        Mpi::Mpich => format!("mpirun.mpich -n 2 -hosts {hosts}"),
    };
    // A job's processes now and then take minutes to exit after their work is done (seen
    // with MPICH across two namespaces, 1 run in 8 to 20): its process group is killed after
    // 30 s, which the runs measured here (1 to 5 s) never reach otherwise.
    format!(
        "timeout -k 5 30 ip netns exec {} {launch} {} {} {args}",
        pair.names[0],
        across(mpi, &pair.net(), ssh).join(" "),
        program.display()
    )
}

/// `lbf-gag predict --json` of `trace` with `args`: the first target's predicted seconds from
/// the first rank's start to the last exit, as [`traced_job`] measures a run (lbf-gag adds
/// the traced run's teardown, which is taken out again here).
fn predicted(trace: &Path, args: &[&str]) -> f64 {
    let out = run(Command::new(env!("CARGO_BIN_EXE_lbf-gag"))
        .args(["predict", "--json"])
        .arg(trace)
        .args(args));
    let v: serde_json::Value =
        serde_json::from_str(out.lines().next().expect("a prediction")).expect("JSON");
    let (procs, _, summary) = read_trace(trace);
    let first = procs.iter().map(|p| p.start_ns).min().unwrap_or(0) as f64 * 1e-9;
    v["predicted_seconds"].as_f64().expect("predicted_seconds") - summary.teardown_seconds - first
}

/// Whether this test may make namespaces, trace, and run jobs of `mpi` (see
/// [`machine::require`]).
fn can_trace_jobs_of(mpi: Mpi) -> bool {
    ready() && traced::can_trace() && mpi.required()
}

/// NF, end to end: an MPI job traced on a fast link, predicted on a 100 Mbit/s link from the
/// MPI tables `lbf-node calibrate --mpi` measured there, then run there: the prediction is
/// within 5 % of the median of 3 runs.
fn nf_on_a_shaped_link(mpi: Mpi) {
    if !can_trace_jobs_of(mpi) {
        return;
    }
    let dir = scratch(&format!("nf-{}", mpi.name()));

    let program = workload_built_by(&format!("mpicc.{}", mpi.name()), "mpi", "pingpong", &[]);
    // 10 rounds of 4 sizes (8 B to 200 kB), 10 ms of compute before each exchange: about
    // 0.8 s on the shaped link, half of it messages. Short, because the check takes 10 traced
    // runs at most and a loaded machine stretches each.
    let args = "10 10";
    let pair = NetnsPair::new(72);
    let ssh = pair.ssh(&dir);
    let command = job(mpi, &pair, &ssh, &program, args);
    let label = format!("nf-{}", mpi.name());
    let (fast, fast_seconds) = traced_job_retried(&format!("{label}-fast"), &command, 2);
    pair.shape("100mbit", 4096);
    let table = dir.join("net.toml");
    let mut calibrate = calibrate_in(&pair.names[0]);
    calibrate
        .args(["--peer", &pair.addrs[1], "--mpi", "--mpi-lib", mpi.name()])
        .args([
            "--max-bytes",
            "1M",
            "--min-reps",
            "3",
            "--seconds-per-size",
            "0.1",
        ])
        .arg("--mpi-dir")
        .arg(dir.join("mpi"))
        .arg("--self-host")
        .arg(&pair.addrs[0]);
    for a in across(mpi, &pair.net(), &ssh) {
        calibrate.arg(format!("--mpirun-arg={a}"));
    }
    eprintln!("{}", run(calibrate.arg("-o").arg(&table)));
    let remote = std::fs::read_to_string(&table).expect("the table");
    let remote = remote
        .lines()
        .find_map(|l| l.strip_prefix("remote = "))
        .expect("a remote table");
    let cluster = dir.join("shaped.toml");
    std::fs::write(
        &cluster,
        format!(
            "[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[network]]\nname = \"tbf\"\n\
             hosts = [\"a\", \"b\"]\ntable = {remote}\n"
        ),
    )
    .expect("the cluster file");
    let target = dir.join("apart.toml");
    std::fs::write(
        &target,
        "[[node]]\nhost = \"a\"\nprocs = [0]\n[[node]]\nhost = \"b\"\nprocs = [1]\n",
    )
    .expect("the target file");
    let cluster_arg = cluster.display().to_string();
    let target_arg = target.display().to_string();
    let prediction = predicted(&fast, &["--cluster", &cluster_arg, "--target", &target_arg]);
    timed(|| {
        let (mut runs, others) = watched(|| {
            (0..3)
                .map(|i| traced_job_retried(&format!("{label}-shaped-{i}"), &command, 2).1)
                .collect::<Vec<f64>>()
        });
        runs.sort_by(f64::total_cmp);
        let measured = runs[1];
        let error = (prediction - measured) / measured;
        eprintln!(
            "{}: traced {fast_seconds:.3} s on the fast link; on 100 Mbit/s predicted \
             {prediction:.3} s, measured {runs:.3?} s, median {measured:.3} s ({:+.1} %)",
            mpi.name(),
            error * 100.0
        );
        if error.abs() <= NF_TOLERANCE {
            return Ok(());
        }
        let busy = if others > BUSY_MACHINE { BUSY } else { "" };
        Err(format!(
            "{busy}{}: predicted {prediction:.3} s, measured median {measured:.3} s ({:+.1} %; \
             others used {:.0} % of the machine)",
            mpi.name(),
            error * 100.0,
            others * 100.0
        ))
    });
}

#[test]
fn nf_on_a_shaped_link_open_mpi() {
    nf_on_a_shaped_link(Mpi::OpenMpi);
}

#[test]
fn nf_on_a_shaped_link_mpich() {
    nf_on_a_shaped_link(Mpi::Mpich);
}

/// `lbf-gag fit-network` on a trace of an MPI ping-pong (the calibration's own program, 0 B
/// to 1 MiB) across the 100 Mbit/s link finds the shaping's table from its messages alone (see
/// [`fit_misses`]).
#[test]
fn fit_network_finds_the_shaped_link_in_a_trace() {
    if !can_trace_jobs_of(Mpi::OpenMpi) {
        return;
    }
    let dir = scratch("fit-network");
    let program = workload_built_by("mpicc.openmpi", "mpi", "calibrate_pingpong", &[]);
    let pair = NetnsPair::new(73);
    pair.shape("100mbit", 4096);
    let ssh = pair.ssh(&dir);
    // Up to 1 MiB, 5 to 200 round trips a size for 0.1 s: about 4 s traced.
    let command = job(Mpi::OpenMpi, &pair, &ssh, &program, "1048576 5 200 100");
    timed(|| {
        let (run, others) = traced_ping_pong("fit-network", "mpi", &command);
        // The program's own one-way times: `LBF-PINGPONG bytes seconds reps`.
        let own: Vec<(f64, f64)> = run
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("LBF-PINGPONG "))
            .map(|fields| {
                let v: Vec<f64> = fields
                    .split_whitespace()
                    .map(|x| x.parse().expect("a number"))
                    .collect();
                (v[0], v[1])
            })
            .collect();
        assert!(
            own.iter().any(|&(bytes, _)| bytes == 1048576.0),
            "the ping-pong reached 1 MiB:\n{}",
            run.stdout
        );
        let misses = fit_misses(&run.trace, &dir.join("fitted.toml"), &own, 0.5);
        outcome("fit-network's table", misses, others)
    });
}

/// `lbf-gag fit-network` on a trace of a socket program, `lbf-node calibrate`'s own TCP
/// ping-pong (0 B to 1 MiB, each message read by as many reads as TCP hands it over in)
/// across the 100 Mbit/s link, captured with `--source sockets`: the same (see
/// [`fit_misses`]), but for a floor at small sizes; and the trace predicted with that table
/// on two nodes is the run within [`NF_TOLERANCE`] (see [`own_network_miss`]).
#[test]
fn fit_network_finds_the_shaped_link_in_a_socket_trace() {
    if !(ready() && traced::can_trace()) {
        return;
    }
    let dir = scratch("fit-network-sockets");
    let pair = NetnsPair::new(74);
    pair.shape("100mbit", 4096);
    let peer = format!("{}:7400", pair.addrs[1]);
    let node = env!("CARGO_BIN_EXE_lbf-node");
    let measured = dir.join("measured.toml");
    let command = format!(
        "ip netns exec {b} {node} calibrate --listen {peer} --clients 1 & \
         ip netns exec {a} {node} calibrate --peer {peer} --max-bytes 1M --min-reps 5 \
         --seconds-per-size 0.1 -o {measured} && wait",
        a = pair.names[0],
        b = pair.names[1],
        measured = measured.display(),
    );
    timed(|| {
        let (run, others) = traced_ping_pong("fit-network-sockets", "sockets", &command);
        let own = measured_points(&measured);
        assert!(
            own.iter().any(|&(bytes, _)| bytes == 1048576.0),
            "the ping-pong reached 1 MiB: {own:?}"
        );
        // Not half: on this link the ping-pong's 128 and 256 B one-way times (half the
        // median round trip, 21 to 27 us) are twice its 64 B ones, and their lower envelope
        // is 0.41 to 0.66 of them.
        let table = dir.join("fitted.toml");
        let mut misses = fit_misses(&run.trace, &table, &own, 0.0);
        misses.extend(own_network_miss(&run.trace, &table, &dir));
        outcome("fit-network's table", misses, others)
    });
}

/// What is wrong with the prediction of the two-process `trace` on two one-core nodes joined
/// by the remote table in `table` (written into `dir`): it must be the run within
/// [`NF_TOLERANCE`]. A stream's large send, one message per receive (some 700 for 1 MiB),
/// arrives when all its bytes would, not when each piece's own would (then the prediction was
/// 58 to 77 % short).
fn own_network_miss(trace: &Path, table: &Path, dir: &Path) -> Option<String> {
    let remote = std::fs::read_to_string(table)
        .expect("the fitted table")
        .lines()
        .find(|l| l.starts_with("remote = "))
        .expect("a remote table")
        .to_string();
    let target = dir.join("two-hosts.toml");
    std::fs::write(
        &target,
        format!(
            "name = \"two-hosts\"\n[[node]]\ncores = 1\nprocs = [0]\n[[node]]\ncores = 1\n\
             procs = [1]\n[network]\n{remote}\n"
        ),
    )
    .expect("writing the target");
    let target = target.display().to_string();
    let predicted = predict_on_this_machine(trace, &["--target", &target])
        .into_iter()
        .find(|(name, _)| name == "two-hosts")
        .expect("the target's prediction")
        .1;
    let measured = read_trace(trace).2.measured_seconds;
    let error = predicted / measured - 1.0;
    eprintln!(
        "on its own network: predicted {predicted:.3} s, measured {measured:.3} s ({:+.1} %)",
        error * 100.0
    );
    (error.abs() > NF_TOLERANCE).then(|| {
        format!(
            "the run on its own network predicted {predicted:.3} s, measured {measured:.3} s \
             ({:+.1} %)",
            error * 100.0
        )
    })
}

/// `sh -c COMMAND` traced with `--source SOURCE` as `label`, which must succeed; with the
/// share of the machine other work took meanwhile.
fn traced_ping_pong(label: &str, source: &str, command: &str) -> (traced::TraceRun, f64) {
    let (run, others) =
        watched(|| lbf_trace(label, &["--source", source, "--", "sh", "-c", command]));
    assert_eq!(
        run.code, 0,
        "the traced ping-pong:\n{}\n{}",
        run.stdout, run.stderr
    );
    (run, others)
}

/// What is wrong with the table `lbf-gag fit-network --remote` fits (into `table`) from the
/// messages of `trace`, a ping-pong across the 100 Mbit/s link whose own one-way times by
/// size are `own`: from 64 KiB on, each size's time must be within [`FIT_TOLERANCE`] of what
/// the shaping implies. Below, the link's rate does not show and no independent one-way time
/// exists to compare with; what must hold there (to 256 B) is that a message's lower
/// envelope is no faster than an empty message's, at most the program's own one-way time
/// (half its median round trip, which also holds each side's turn-around) and at least
/// `floor` of it.
fn fit_misses(trace: &Path, table: &Path, own: &[(f64, f64)], floor: f64) -> Vec<String> {
    let listing = run(Command::new(env!("CARGO_BIN_EXE_lbf-gag"))
        .arg("fit-network")
        .arg(trace)
        .args(["--remote", "-o"])
        .arg(table));
    eprintln!("{listing}");
    let text = std::fs::read_to_string(table).expect("the fitted table");
    let points: Vec<(f64, f64)> = text
        .lines()
        .find_map(|l| l.strip_prefix("remote = "))
        .map(|t| serde_json::from_str(t).expect("a table of [bytes, seconds]"))
        .expect("a remote table");
    // No message is faster than an empty one (as fit-network takes the handshake).
    let base = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let fitted = lbf::target::CommTable::new(points).expect("a valid table");
    let mut misses = Vec::new();
    for &(bytes, own) in own {
        let ours = fitted.seconds(bytes as u64);
        if bytes >= 65536.0 {
            let implied = shaping_implies(bytes, 1e8, 4096.0, base);
            let error = (ours - implied) / implied;
            eprintln!(
                "{bytes:>9} B: fitted {ours:.4e} s, shaping implies {implied:.4e} s ({:+.1} %)",
                error * 100.0
            );
            if error.abs() > FIT_TOLERANCE {
                misses.push(format!("{bytes} B {:+.1} %", error * 100.0));
            }
        } else if bytes <= 256.0 {
            eprintln!(
                "{bytes:>9} B: fitted {ours:.4e} s, the program's one-way {own:.4e} s ({:.2})",
                ours / own
            );
            if !((own * floor).max(base)..=own).contains(&ours) {
                misses.push(format!(
                    "{bytes} B: fitted {ours:.3e} s, not between {floor} of the program's \
                     one-way {own:.3e} s (or the empty message's {base:.3e} s) and all of it"
                ));
            }
        }
    }
    misses
}
