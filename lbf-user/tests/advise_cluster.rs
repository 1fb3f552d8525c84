//! `lbf-gag advise` on a heterogeneous cluster emulated on this machine (see
//! [`traced::emulated`]): four hosts of different cores and speeds (CPU cgroups, a quota per
//! core) on a 100 Mbit/s network (network namespaces on a bridge, every link shaped by a token
//! bucket). The cluster file is measured: each host's speed by `lbf-node calibrate --cpu` in
//! one of its cores' cgroups, the network's table by `lbf-node calibrate --peer` between two
//! hosts; the cores are the emulation's. A master/worker program whose master deals its tasks
//! on demand, and a stencil of uneven subdomains, are each traced once (on the block
//! placement), advised, and then the advised placement
//! and others (the baselines among them) are run for real, 3 times each: the advised placement
//! must measure fastest or within 5 % of the fastest, and the predicted times must order the
//! measured ones with a Spearman rank correlation of at least 0.9. See docs/advise.md for what
//! the emulation is, why the placements measured give every rank a core of its own, and a
//! run's figures.

mod traced;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use lbf::advise::search::{describe as describe_on, Host};

use traced::machine::{self, machine_cpu_seconds, own_cpu_seconds, BUSY_MACHINE};
use traced::{
    cgroup_speed, parse_checks, run, timed, traced_job_retried, workload_built_by, EmulatedCluster,
    HostSpec, Mpi, Reference, BUSY,
};

/// The cluster: a fast host of 2 cores, a slower one of 2, two slow ones of 1, by their
/// cores' quotas (`lbf-node calibrate --cpu` reads them a little faster on a quiet machine,
/// slower on a busy one); 1.31 of this machine's 2 CPUs in all, so that other work on the
/// machine leaves the hosts their quotas.
const HOSTS: [HostSpec; 4] = [
    HostSpec::new("a", 2, 0.3),
    HostSpec::new("b", 2, 0.22),
    HostSpec::new("c", 1, 0.15),
    HostSpec::new("d", 1, 0.12),
];
/// Every host's link, both ways: its rate and its token bucket in bytes (the smallest that
/// keeps tbf's timer from slowing a 100 Mbit/s link; see tests/calibrate.rs).
const LINK: (&str, u32) = ("100mbit", 4096);
/// Runs of each placement measured; the median counts.
const RUNS: usize = 3;
/// Placements measured: the advised one, the baselines, and others spread over the advice's
/// predicted times (see [`choose`]).
const MEASURED: usize = 7;
/// The least relative difference in predicted time between a placement measured beyond the
/// advised one and the baselines and every other measured one: closer, the runs' own spread
/// (a few %) would order them rather than the placements.
const APART: f64 = 0.03;
/// The slowest placement measured beyond the baselines, predicted, as a multiple of the
/// advised one's prediction: the measurements must fit in nextest's 3 minutes.
const SLOWEST: f64 = 2.0;
/// How much slower than the fastest measured the advised placement may measure.
const ADVISED_SLACK: f64 = 0.05;
/// The least Spearman rank correlation between predicted and measured times.
const MIN_SPEARMAN: f64 = 0.9;
/// How long the search may take.
const BUDGET: &str = "5";

/// Root (namespaces, cgroups, tracing), Open MPI, nsenter and tc.
fn ready() -> bool {
    let tools = ["nsenter", "tc", "ip"].iter().all(|t| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {t}"))
            .output()
            .is_ok_and(|o| o.status.success())
    });
    machine::require("root (network namespaces, tc, cgroups)", machine::is_root())
        && traced::can_trace()
        && Mpi::OpenMpi.required()
        && machine::require("nsenter, tc and ip", tools)
}

fn scratch(name: &str) -> PathBuf {
    traced::scratch(&format!("advise-cluster-{name}"))
}

/// `lbf-node calibrate ARGS` in network namespace `ns`.
fn calibrate_in(ns: &str) -> Command {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{ns}"))
        .args([env!("CARGO_BIN_EXE_lbf-node"), "calibrate"]);
    c
}

/// The table `key` (`local` or `remote`) of a file `lbf-node calibrate` wrote.
fn table_of(file: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(file).expect("the table file");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} table in {text}"))
        .to_string()
}

/// The cluster file of `cluster`, measured: each host's speed by `calibrate --cpu` in its
/// first core's cgroup, against this machine measured at the same time on the other CPU
/// ([`Reference::OtherCpu`]: the runs keep both CPUs busy, and this machine's speed drifts
/// by 10 % within seconds; calibrate's built-in reference read it 0.78 to 0.94, which made
/// every prediction 20 to 30 % long), the network's table by
/// `calibrate --peer` from the first host to the second and within a host by `calibrate
/// --local` (outside the cgroups: the network alone). Its cores are the emulation's.
fn measure_cluster_file(cluster: &EmulatedCluster, dir: &Path) -> PathBuf {
    // Within a host: TCP over its loopback (see `traced::across`), the same kernel for all.
    let local = dir.join("local.toml");
    let listing = run(calibrate_in(&cluster.hosts[0].ns)
        .args(["--local", "--max-bytes", "1M", "--min-reps", "3"])
        .args(["--seconds-per-size", "0.02", "-o"])
        .arg(&local));
    eprintln!("within a host:\n{listing}");
    let local = table_of(&local, "local");
    let mut text = String::new();
    for h in &cluster.hosts {
        let file = dir.join(format!("host-{}.toml", h.spec.name));
        let reference = dir.join(format!("reference-{}.toml", h.spec.name));
        let speed = cgroup_speed(h.core(0), 1, &file, &reference, Reference::OtherCpu).speed;
        eprintln!(
            "host {}: {} cores, measured speed {speed:.3} (quota {:.3} of a CPU)",
            h.spec.name, h.spec.cores, h.spec.speed
        );
        text += &format!(
            "[[host]]\nname = \"{}\"\ncores = {}\nspeed = {speed}\nlocal = {local}\n\n",
            h.spec.name, h.spec.cores
        );
    }
    let table = dir.join("network.toml");
    let (a, b) = (&cluster.hosts[0], &cluster.hosts[1]);
    let peer = format!("{}:7300", b.addr);
    let mut server = calibrate_in(&b.ns)
        .args(["--listen", &peer, "--clients", "1"])
        .spawn()
        .expect("the ping-pong server");
    let listing = run(calibrate_in(&a.ns)
        .args(["--peer", &peer, "--max-bytes", "1M", "--min-reps", "3"])
        .args(["--seconds-per-size", "0.05", "-o"])
        .arg(&table));
    assert!(server.wait().expect("the server").success());
    eprintln!(
        "the network, {} to {}:\n{listing}",
        a.spec.name, b.spec.name
    );
    let remote = table_of(&table, "remote");
    let names: Vec<String> = cluster
        .hosts
        .iter()
        .map(|h| format!("\"{}\"", h.spec.name))
        .collect();
    text += &format!(
        "[[network]]\nname = \"switch\"\nhosts = [{}]\ntable = {remote}\n",
        names.join(", ")
    );
    let file = dir.join("cluster.toml");
    std::fs::write(&file, &text).expect("the cluster file");
    eprintln!("{}:\n{text}", file.display());
    file
}

/// One placement of the advice: how it was found, its predicted time, its hosts by process.
#[derive(Clone, Debug)]
struct Advised {
    label: String,
    predicted: f64,
    placement: Vec<usize>,
}

/// `lbf-gag advise --json` of `trace` on `cluster_file`: every placement it lists, best
/// first, hosts by their index in [`HOSTS`].
fn advise(trace: &Path, cluster_file: &Path, procs: usize) -> Vec<Advised> {
    let out = run(Command::new(env!("CARGO_BIN_EXE_lbf-gag"))
        .arg("advise")
        .arg(trace)
        .arg("--cluster")
        .arg(cluster_file)
        // Open MPI's ranks poll while they wait (as many slots as ranks), and the emulation
        // binds each rank to a core of its host.
        .args(["--spin", "1", "--bind-to-cores", "--budget", BUDGET])
        .args(["--top", "100", "--json"]));
    let host = |name: &str| {
        HOSTS
            .iter()
            .position(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name}"))
    };
    out.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
            Advised {
                label: v["label"].as_str().expect("a label").to_string(),
                predicted: v["predicted_seconds"].as_f64().expect("predicted_seconds"),
                placement: (0..procs)
                    .map(|p| host(v["placement"][p.to_string()].as_str().expect("a host")))
                    .collect(),
            }
        })
        .collect()
}

/// The placements to measure: the advised one, the baselines, then up to [`MEASURED`] in
/// all, each the one whose predicted time is farthest from those chosen (at least [`APART`],
/// at most [`SLOWEST`] times the advised one's).
fn choose(advice: &[Advised]) -> Vec<Advised> {
    let mut chosen = vec![advice[0].clone()];
    let add = |a: &Advised, chosen: &mut Vec<Advised>| {
        if !chosen.iter().any(|c| c.placement == a.placement) {
            chosen.push(a.clone());
        }
    };
    // The advice lists a placement once, under the first label that found it: a baseline
    // missing is another one (on this cluster `fewest hosts` is `block`).
    for label in ["block", "round-robin", "fewest hosts"] {
        match advice.iter().find(|a| a.label == label) {
            Some(baseline) => add(baseline, &mut chosen),
            None => eprintln!("the advice lists no {label} placement apart: it is another's"),
        }
    }
    assert!(
        ["block", "round-robin"]
            .iter()
            .all(|label| advice.iter().any(|a| a.label == *label)),
        "the advice lists no block or no round-robin placement: {advice:?}"
    );
    // Then, while any is APART from all chosen, the one farthest from them: the measured
    // placements spread over the advice's range as evenly as it allows. Only placements that
    // give every rank a core of its own: ranks sharing one of the emulation's cores wait for
    // its quota's next period at every hand-off, which no real host does (see
    // docs/advise.md).
    let own_cores = |a: &Advised| {
        HOSTS
            .iter()
            .enumerate()
            .all(|(h, spec)| a.placement.iter().filter(|&&p| p == h).count() <= spec.cores as usize)
    };
    let distance = |a: &Advised, chosen: &[Advised]| {
        chosen
            .iter()
            .map(|c| (a.predicted - c.predicted).abs() / a.predicted.min(c.predicted))
            .fold(f64::INFINITY, f64::min)
    };
    let slowest = advice[0].predicted * SLOWEST;
    while chosen.len() < MEASURED {
        let Some(far) = advice
            .iter()
            .filter(|a| own_cores(a) && a.predicted <= slowest && distance(a, &chosen) >= APART)
            .max_by(|a, b| distance(a, &chosen).total_cmp(&distance(b, &chosen)))
        else {
            break;
        };
        add(far, &mut chosen);
    }
    chosen
}

/// One run of `command` (a job of `ranks` ranks): the longest of its ranks' own times (from
/// before `MPI_Init` to after `MPI_Finalize`), and the CPU seconds its ranks' main threads
/// used (they run under Open MPI's daemon, not as children this process waits for, so its
/// own CPU clock leaves them out); retried up to 3 times if the job fails.
fn measure(command: &str, ranks: usize) -> (f64, f64) {
    let mut failures = Vec::new();
    for _ in 0..3 {
        let out = Command::new("sh")
            .args(["-c", command])
            .output()
            .expect("running the job");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let checks = parse_checks(&stdout);
        if checks.len() == ranks {
            let wall = checks.iter().map(|c| c.num("wall_ns")).max().unwrap_or(0);
            let cpu: u64 = checks.iter().map(|c| c.num("cpu_ns")).sum();
            return (wall as f64 * 1e-9, cpu as f64 * 1e-9);
        }
        failures.push(format!(
            "exit {:?}:\n{stdout}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    panic!("{command} failed 3 times: {}", failures.join("\n"));
}

/// The ranks of `xs` (1 the smallest), ties sharing their mean rank.
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut r = vec![0.0; xs.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && xs[order[j + 1]] == xs[order[i]] {
            j += 1;
        }
        for &k in &order[i..=j] {
            r[k] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation of `xs` and `ys`: Pearson's of their ranks.
fn spearman(xs: &[f64], ys: &[f64]) -> f64 {
    let (a, b) = (ranks(xs), ranks(ys));
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(&b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let var = |v: &[f64], m: f64| v.iter().map(|x| (x - m).powi(2)).sum::<f64>();
    cov / (var(&a, ma) * var(&b, mb)).sqrt()
}

#[test]
fn spearman_of_rankings() {
    assert!((spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]) - 1.0).abs() < 1e-12);
    assert!((spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
    // One adjacent pair swapped among 6: 1 - 6 * 2 / (6 * 35).
    let r = spearman(
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        &[1.0, 3.0, 2.0, 4.0, 5.0, 6.0],
    );
    assert!((r - (1.0 - 12.0 / 210.0)).abs() < 1e-12, "{r}");
    assert_eq!(ranks(&[5.0, 1.0, 5.0]), vec![2.5, 1.0, 2.5]);
}

/// `host: processes | ...` of `placement`.
fn describe(placement: &[usize]) -> String {
    let hosts: Vec<Host> = HOSTS
        .iter()
        .map(|h| Host {
            name: h.name.to_string(),
            cores: h.cores,
            speed: h.speed,
        })
        .collect();
    describe_on(&hosts, placement)
}

/// The experiment for `program args` of `procs` ranks, up to three times while
/// it misses (see [`timed`]): placements a few percent apart swap places now and then, their
/// runs spreading by up to 6 % (one run in CI read Spearman 0.893 where others read 1.000).
fn experiment(name: &str, args: &str, procs: usize) {
    if !ready() {
        return;
    }
    timed(|| attempt(name, args, procs));
}

/// One attempt of [`experiment`]: measure the cluster, trace the program on the block
/// placement, advise, then measure the chosen placements [`RUNS`] times each (in rounds,
/// every placement once a round) and check the advice against them; the misses, if any.
fn attempt(name: &str, args: &str, procs: usize) -> Result<(), String> {
    let dir = scratch(name);
    let program = workload_built_by("mpicc.openmpi", "mpi", name, &[]);
    let cluster = EmulatedCluster::new(&HOSTS, LINK.0, LINK.1, &dir);
    let cluster_file = measure_cluster_file(&cluster, &dir);
    let block: Vec<usize> = (0..procs).map(|p| [0, 0, 1, 1, 2][p % 5]).collect();
    let (trace, traced_seconds) =
        traced_job_retried(name, &cluster.job(&block, &program, args, 60), procs);
    eprintln!(
        "traced on {}: {traced_seconds:.3} s (first rank's start to last exit)",
        describe(&block)
    );
    let advice = advise(&trace, &cluster_file, procs);
    let chosen = choose(&advice);
    assert!(
        chosen.len() >= 6,
        "fewer than 6 placements to measure: {chosen:?}"
    );
    let (machine0, own0, start) = (machine_cpu_seconds(), own_cpu_seconds(), Instant::now());
    let mut runs: HashMap<usize, Vec<f64>> = HashMap::new();
    let mut ranks_cpu = 0.0;
    for _ in 0..RUNS {
        for (i, c) in chosen.iter().enumerate() {
            let (seconds, cpu) = measure(&cluster.job(&c.placement, &program, args, 60), procs);
            runs.entry(i).or_default().push(seconds);
            ranks_cpu += cpu;
        }
    }
    let others = machine::others_share(
        machine_cpu_seconds() - machine0,
        own_cpu_seconds() - own0 + ranks_cpu,
        start.elapsed().as_secs_f64(),
    );
    let measured: Vec<f64> = (0..chosen.len())
        .map(|i| {
            let mut r = runs[&i].clone();
            r.sort_by(f64::total_cmp);
            r[r.len() / 2]
        })
        .collect();
    let predicted: Vec<f64> = chosen.iter().map(|c| c.predicted).collect();
    let rho = spearman(&predicted, &measured);
    let fastest = measured.iter().copied().fold(f64::INFINITY, f64::min);
    let mut table = format!(
        "{name} {args}: {} placements, {RUNS} runs each (others used {:.0} % of the machine)\n\
         {:<16} {:<24} {:>10} {:>10}  runs (s)\n",
        chosen.len(),
        others * 100.0,
        "found by",
        "placement",
        "predicted",
        "measured"
    );
    for (i, c) in chosen.iter().enumerate() {
        table += &format!(
            "{:<16} {:<24} {:>10.3} {:>10.3}  {:.3?}\n",
            if i == 0 {
                format!("{} (advised)", c.label)
            } else {
                c.label.clone()
            },
            describe(&c.placement),
            c.predicted,
            measured[i],
            runs[&i]
        );
    }
    table += &format!(
        "Spearman {rho:.3} (at least {MIN_SPEARMAN}); advised {:.3} s, fastest {fastest:.3} s \
         ({:+.1} %, at most {:+.1} %)",
        measured[0],
        (measured[0] / fastest - 1.0) * 100.0,
        ADVISED_SLACK * 100.0
    );
    eprintln!("{table}");
    let mut misses = Vec::new();
    if rho < MIN_SPEARMAN {
        misses.push(format!("Spearman {rho:.3} below {MIN_SPEARMAN}"));
    }
    if measured[0] > fastest * (1.0 + ADVISED_SLACK) {
        misses.push(format!(
            "the advised placement measured {:.3} s, more than {:.0} % over the fastest \
             {fastest:.3} s",
            measured[0],
            ADVISED_SLACK * 100.0
        ));
    }
    if misses.is_empty() {
        return Ok(());
    }
    if others > BUSY_MACHINE {
        return Err(format!(
            "{BUSY}{name}: {} while others used {:.0} % of the machine",
            misses.join("; "),
            others * 100.0
        ));
    }
    Err(format!("{}\n{table}", misses.join("; ")))
}

/// A master/worker program (the master hands out 48 tasks of 20 to 60 ms on demand): the
/// advice deals the tasks again on each placement.
#[test]
fn master_worker_advice_holds_on_an_emulated_cluster() {
    experiment("master_worker", "12 20", 4);
}

/// A stencil of uneven subdomains (rank r of 4 computes 5 + r shares of 2 ms a step, 40
/// steps): the slowest rank for its host sets the pace, and which one it is changes with the
/// placement.
#[test]
fn stencil_advice_holds_on_an_emulated_cluster() {
    experiment("stencil", "40 2", 4);
}
