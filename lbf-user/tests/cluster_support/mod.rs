//! What the cluster tests share: scratch directories, synthetic traces, a builder and node
//! daemons run from the real binaries (killed on drop, even when a test fails), HTTP reads,
//! and `lbf-gag predict` for reference.

#![allow(dead_code)] // each test crate uses its own part

use lbf::trace::{synthetic, Summary, TraceWriter};
pub(crate) use machine::Shares;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../machine/mod.rs"]
pub(crate) mod machine;

/// A fresh scratch directory for one test, under cargo's target tmpdir.
pub(crate) fn scratch(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("cluster")
        .join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes a synthetic trace of `procs` processes and about `events` events; process `p`
/// starts `p` milliseconds late, as if a launcher had started them one by one.
pub(crate) fn synthetic_trace(path: &Path, procs: u32, events: u64, seed: u64) {
    let config = synthetic::Config {
        procs,
        events,
        seed,
    };
    let mut header = synthetic::header(&config);
    for p in &mut header.procs {
        p.start_ns = u64::from(p.id) * 1_000_000;
    }
    let mut w = TraceWriter::create(path, &header).unwrap();
    for e in synthetic::events(config) {
        w.write_event(&e).unwrap();
    }
    w.finish(&Summary {
        measured_seconds: 1.0,
        lost_events: 0,
        ..Default::default()
    })
    .unwrap();
}

/// A port free on 127.0.0.1 now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when dropped.
pub(crate) struct Daemon {
    pub child: Child,
    pub name: String,
}

impl Daemon {
    /// Starts `command`, its stderr to `log`.
    pub(crate) fn spawn(name: &str, mut command: Command, log: &Path) -> Daemon {
        let log = std::fs::File::create(log).unwrap();
        let child = command
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Daemon {
            child,
            name: name.into(),
        }
    }

    /// Waits until this `lbf-node`'s `log` says it traces its selection (it drops
    /// capabilities then); fails at once, with the log, if the node ends before.
    pub(crate) fn wait_attached(&mut self, log: &Path) {
        self.wait_logged(log, "capabilities");
    }

    /// Waits until this daemon's `log` holds `needle`; fails at once, with the log, if the
    /// daemon ends before.
    pub(crate) fn wait_logged(&mut self, log: &Path, needle: &str) {
        let name = self.name.clone();
        wait_until_logged(log, needle, || {
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "{name} ended before it logged `{needle}`:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        });
    }

    /// Waits up to `limit` for the exit; the output (stdout) and whether it succeeded.
    pub(crate) fn wait(mut self, limit: Duration) -> (bool, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                self.child
                    .stdout
                    .take()
                    .unwrap()
                    .read_to_string(&mut out)
                    .unwrap();
                return (status.success(), out);
            }
            assert!(
                start.elapsed() < limit,
                "{} did not finish within {limit:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills it (SIGKILL) and reaps it.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A builder's files and addresses.
pub(crate) struct BuilderSetup {
    /// The namespace the builder runs in, if any.
    pub netns: Option<String>,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub cert: PathBuf,
    pub listen: String,
    pub http: String,
}

/// The builder of a job of `procs` processes on the hub of `hosts` (listening on
/// [`Hosts::HUB_IP`], port 7400), its one target `as-run` (`as_run`, TOML), for nodes `n1`
/// and `n2`: how the tests across hosts set up.
pub(crate) fn hub_builder(root: &Path, hosts: &Hosts, procs: u32, as_run: &str) -> BuilderSetup {
    let listen = format!("{}:7400", Hosts::HUB_IP);
    let mut s = builder_setup(
        root,
        &listen,
        &[Hosts::HUB_IP],
        procs,
        &[("as-run", as_run)],
        &[
            ("n1", "token-n1-for-tests-only"),
            ("n2", "token-n2-for-tests-only"),
        ],
    );
    s.netns = Some(hosts.names[0].clone());
    s
}

/// `script` run by `sh` in namespace `ns` with a host name of its own (`name`, in a UTS
/// namespace): Open MPI and PVM tell hosts apart by name.
pub(crate) fn host_shell(ns: &str, name: &str, script: &str) -> Command {
    let mut c = in_netns(Some(ns), "unshare");
    c.args(["--uts", "--", "sh", "-c"])
        .arg(format!("hostname {name} && {script}"));
    c
}

/// Writes a certificate for `names` and a configuration for a job of `procs` processes with
/// the target files `targets` (name, TOML) and nodes `tokens` (name, token).
pub(crate) fn builder_setup(
    dir: &Path,
    listen: &str,
    names: &[&str],
    procs: u32,
    targets: &[(&str, &str)],
    tokens: &[(&str, &str)],
) -> BuilderSetup {
    std::fs::create_dir_all(dir).unwrap();
    let mut cert = Command::new(env!("CARGO_BIN_EXE_lbf-gag"));
    cert.args(["cert", "--out"]).arg(dir.join("builder"));
    for n in names {
        cert.args(["--name", n]);
    }
    let out = cert.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let http = format!("127.0.0.1:{}", free_port());
    let mut text = format!(
        "listen = \"{listen}\"\nhttp = \"{http}\"\ncert = \"builder.pem\"\nkey = \"builder.key\"\n\
         journal = \"journal\"\nmerged_trace = \"merged.trace.jsonl\"\nreport = \"report.json\"\n\
         [job]\nprocs = {procs}\ntargets = ["
    );
    for (i, (name, toml)) in targets.iter().enumerate() {
        std::fs::write(dir.join(format!("{name}.toml")), toml).unwrap();
        text += &format!("{}\"{name}.toml\"", if i > 0 { ", " } else { "" });
    }
    text += "]\n[tokens]\n";
    for (node, token) in tokens {
        text += &format!("{node} = \"{token}\"\n");
    }
    let config = dir.join("builder.toml");
    std::fs::write(&config, text).unwrap();
    BuilderSetup {
        netns: None,
        dir: dir.to_path_buf(),
        config,
        cert: dir.join("builder.pem"),
        listen: listen.into(),
        http,
    }
}

impl BuilderSetup {
    /// `lbf-gag serve --exit-when-done`, in the setup's network namespace if any; returns
    /// once it serves.
    pub(crate) fn start(&self, log: &str) -> Daemon {
        let mut c = in_netns(self.netns.as_deref(), env!("CARGO_BIN_EXE_lbf-gag"));
        c.args(["serve", "--exit-when-done", "--config"])
            .arg(&self.config);
        let d = Daemon::spawn("lbf-gag serve", c, &self.dir.join(log));
        self.wait_listening();
        d
    }

    /// Adds the lines `keys` to the configuration's `[job]` (e.g. `procedures = [...]`).
    pub(crate) fn add_job_keys(&self, keys: &str) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let text = text.replacen("[tokens]\n", &format!("{keys}\n[tokens]\n"), 1);
        std::fs::write(&self.config, text).unwrap();
    }

    /// GET `path` from the builder's HTTP endpoint.
    pub(crate) fn get(&self, path: &str) -> Option<String> {
        http_get_in(self.netns.as_deref(), &self.http, path)
    }

    /// Waits until the builder answers HTTP (it listens for nodes before that).
    fn wait_listening(&self) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if self.get("/results").is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the builder did not come up");
    }

    /// Waits until the engine has consumed at least `events` events.
    pub(crate) fn wait_events(&self, events: u64) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            let done = self
                .get("/results")
                .and_then(|b| serde_json::from_str::<Value>(&b).ok())
                .and_then(|v| v["events"].as_u64())
                .is_some_and(|n| n >= events);
            if done {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the builder never reached {events} events");
    }

    /// The final report (JSON).
    pub(crate) fn report(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join("report.json")).unwrap())
            .unwrap()
    }

    /// The merged trace's path.
    pub(crate) fn merged(&self) -> PathBuf {
        self.dir.join("merged.trace.jsonl")
    }
}

/// A command for `program`, run inside network namespace `netns` if given, through `nsenter`,
/// which changes only the network namespace (`ip netns exec` also mounts a sysfs of the
/// namespace's own).
pub(crate) fn in_netns(netns: Option<&str>, program: &str) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net=/var/run/netns/{ns}")).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// An `lbf-node` replaying `procs` of `trace` to the builder of `setup`, in network
/// namespace `netns` if given.
pub(crate) fn replay_node(
    netns: Option<&str>,
    setup: &BuilderSetup,
    node: &str,
    token: &str,
    trace: &Path,
    procs: &str,
    extra: &[&str],
) -> Command {
    let mut c = in_netns(netns, env!("CARGO_BIN_EXE_lbf-node"));
    c.env("LBF_NODE_TOKEN", token)
        .args([
            "--builder",
            &setup.listen,
            "--node",
            node,
            "--procs",
            procs,
            "--ca",
        ])
        .arg(&setup.cert)
        .arg("--replay")
        .arg(trace)
        .arg("--spool-dir")
        .arg(setup.dir.join(format!("spool-{node}")))
        .args(extra);
    c
}

/// Compiles `source` (under tests/workloads) with `cc` into `dir`.
pub(crate) fn compile(cc: &str, source: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/workloads")
        .join(source);
    let stem = src.file_stem().unwrap().to_str().unwrap().to_string();
    let bin = dir.join(stem);
    let out = Command::new(cc)
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// `lbf-node` on host `netns` (this one if `None`) streaming the processes `procs` (global
/// ids) under live capture, with `args`: the selection (`--pid PID`, `--comm NAME`, ...) and
/// other options.
pub(crate) fn live_node(
    s: &BuilderSetup,
    netns: Option<&str>,
    name: &str,
    procs: &str,
    args: &[&str],
) -> Command {
    let mut node = in_netns(netns, env!("CARGO_BIN_EXE_lbf-node"));
    node.env("LBF_NODE_TOKEN", format!("token-{name}-for-tests-only"))
        .args(["--builder", &s.listen, "--node", name, "--procs", procs])
        .arg("--ca")
        .arg(&s.cert)
        .arg("--spool-dir")
        .arg(s.dir.join(format!("spool-{name}")))
        .args(args);
    node
}

/// GET `path` from `addr` (HTTP/1.0); the body, or `None` if nothing answers.
pub(crate) fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
}

/// `lbf-gag predict --json` on `trace` with the target files in `dir`: predicted seconds
/// per target name.
pub(crate) fn predict(trace: &Path, dir: &Path, targets: &[&str]) -> Vec<(String, f64)> {
    predict_with(trace, dir, targets, &[])
}

/// [`predict`] with more options (`--move NAME`, ...) after the target files.
pub(crate) fn predict_with(
    trace: &Path,
    dir: &Path,
    targets: &[&str],
    options: &[&str],
) -> Vec<(String, f64)> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lbf-gag"));
    c.args(["predict", "--json"]).arg(trace);
    for t in targets {
        c.arg("--target").arg(dir.join(format!("{t}.toml")));
    }
    c.args(options);
    let out: Output = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["target"].as_str().unwrap().to_string(),
                v["predicted_seconds"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The predictions of a report: (target, predicted seconds).
pub(crate) fn report_predictions(report: &Value) -> Vec<(String, f64)> {
    report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["target"].as_str().unwrap().to_string(),
                t["predicted_seconds"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Two targets for a job of `procs` processes: all on one node, and two nodes over a slow
/// network; they make message matching and CPU sharing both matter.
pub(crate) fn two_targets(procs: u32) -> Vec<(&'static str, String)> {
    let ids = |r: std::ops::Range<u32>| r.map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
    let half = procs / 2;
    vec![
        (
            "one-node",
            format!("[[node]]\ncores = 2\nprocs = [{}]\n", ids(0..procs)),
        ),
        (
            "two-nodes",
            format!(
                "[network]\npreset = \"gige\"\n[[node]]\nprocs = [{}]\n[[node]]\nprocs = [{}]\n",
                ids(0..half),
                ids(half..procs)
            ),
        ),
    ]
}

/// Three network namespaces acting as hosts: `hub` (the builder's host, with a bridge at
/// [`Hosts::HUB_IP`]) and `n1`, `n2` (at [`Hosts::node_ip`]), each wired to the bridge by a
/// veth pair, so every host reaches every other. Deleted on drop, even when a test fails.
pub(crate) struct Hosts {
    /// The namespaces' names: hub, n1, n2.
    pub names: [String; 3],
}

impl Hosts {
    /// The builder host's address.
    pub(crate) const HUB_IP: &'static str = "10.231.0.1";

    /// Creates the namespaces, unique to this process and `tag`.
    pub(crate) fn new(tag: &str) -> Hosts {
        let id = std::process::id();
        let names = ["hub", "n1", "n2"].map(|h| format!("lbf-{tag}-{id}-{h}"));
        let hosts = Hosts { names };
        let [hub, n1, n2] = &hosts.names;
        for ns in &hosts.names {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&["-n", hub, "link", "add", "br0", "type", "bridge"]);
        ip(&[
            "-n",
            hub,
            "addr",
            "add",
            &format!("{}/24", Self::HUB_IP),
            "dev",
            "br0",
        ]);
        ip(&["-n", hub, "link", "set", "br0", "up"]);
        for (i, ns) in [n1, n2].into_iter().enumerate() {
            let (port, end) = (format!("port{}", i + 1), "eth0");
            ip(&[
                "link", "add", &port, "netns", hub, "type", "veth", "peer", "name", end, "netns",
                ns,
            ]);
            ip(&["-n", hub, "link", "set", &port, "master", "br0", "up"]);
            let addr = format!("{}/24", Self::node_ip(i + 1));
            ip(&["-n", ns, "addr", "add", &addr, "dev", end]);
            ip(&["-n", ns, "link", "set", end, "up"]);
        }
        hosts
    }

    /// Node host `n`'s (1 or 2) address.
    pub(crate) fn node_ip(n: usize) -> String {
        format!("10.231.0.{}", n + 1)
    }

    /// Takes node host `n`'s (1 or 2) link down (`up` false) or up again, at the hub's side:
    /// packets are silently dropped, as when a cable is pulled.
    pub(crate) fn link(&self, n: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        ip(&[
            "-n",
            &self.names[0],
            "link",
            "set",
            &format!("port{n}"),
            state,
        ]);
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `ip ARGS`, panicking with its message on failure.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`http_get`] from inside network namespace `netns` (a thread that enters it).
pub(crate) fn http_get_in(netns: Option<&str>, addr: &str, path: &str) -> Option<String> {
    let Some(ns) = netns else {
        return http_get(addr, path);
    };
    let (ns, addr, path) = (ns.to_string(), addr.to_string(), path.to_string());
    std::thread::spawn(move || {
        let file = std::fs::File::open(format!("/var/run/netns/{ns}")).ok()?;
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a valid namespace descriptor; affects this thread only.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        http_get(&addr, &path)
    })
    .join()
    .ok()
    .flatten()
}

/// The values of field `name` (`name=VALUE`) in the programs' `LBF-CHECK` lines in `out`.
pub(crate) fn check_values<'a>(out: &'a str, name: &str) -> impl Iterator<Item = f64> + 'a {
    let prefix = format!("{name}=");
    out.lines()
        .filter(|l| l.contains("LBF-CHECK"))
        .filter_map(move |l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix(prefix.as_str()))
                .map(|v| v.parse::<f64>().unwrap())
        })
}

/// The sum of field `name` over the programs' `LBF-CHECK` lines in `out`.
pub(crate) fn check_sum(out: &str, name: &str) -> f64 {
    check_values(out, name).sum()
}

/// Asserts that the merged trace at `merged` holds every message the programs sent (their
/// `LBF-CHECK` lines in `out` count them), each with its receive.
pub(crate) fn assert_every_message_merged(out: &str, merged: &Path, context: &str) {
    let sent = check_sum(out, "sends") as usize;
    let merged = std::fs::read_to_string(merged).unwrap();
    let count = |kind: &str| merged.matches(&format!("\"k\":\"{kind}\"")).count();
    assert!(sent > 0, "{out}");
    assert_eq!(
        (count("send"), count("recv_end")),
        (sent, sent),
        "sends and receives in the merged trace, against the programs' sends\n{context}"
    );
}

/// How close a central prediction for the configuration a job ran on must come to the
/// measured time (issue 5's acceptance criterion).
pub(crate) const TOLERANCE: f64 = 0.10;
/// Runs of a job before a prediction outside [`TOLERANCE`] fails a test: one run of the same
/// job varies from the next (as the capture tests' `TIMING_ATTEMPTS` explains); a systematic
/// error misses every time.
pub(crate) const ATTEMPTS: u32 = 3;

/// Runs a job up to [`ATTEMPTS`] times (`run(attempt)` gives the measured seconds, the
/// central prediction and who else used the machine meanwhile) until its prediction is within
/// [`TOLERANCE`]; panics with every miss. lbf's node daemons and builder shared the job's
/// cores, so a prediction of the job alone may also fall short by their share of the machine
/// ([`Shares::lbf`]). A run on a machine busy with other work
/// ([`machine::BUSY_MACHINE`]) is not the configuration predicted: it is retried, and if every
/// run was busy the check is recorded as not made ([`machine::not_checked`]).
pub(crate) fn predicted_within_tolerance(mut run: impl FnMut(u32) -> (f64, f64, Shares)) {
    let (mut misses, mut busy) = (Vec::new(), 0);
    for attempt in 1..=ATTEMPTS {
        let (measured, predicted, shares) = run(attempt);
        eprintln!(
            "attempt {attempt}: measured {measured:.3} s, predicted centrally {predicted:.3} s \
             ({:+.1} %); lbf's daemons used {:.1} % of the machine, other work {:.0} %",
            (predicted / measured - 1.0) * 100.0,
            shares.lbf * 100.0,
            shares.others * 100.0
        );
        if shares.others > machine::BUSY_MACHINE {
            busy += 1;
            misses.push(format!(
                "machine busy: other work used {:.0} % of it",
                shares.others * 100.0
            ));
            continue;
        }
        let short = (TOLERANCE + shares.lbf) * measured;
        if predicted <= (1.0 + TOLERANCE) * measured && predicted >= measured - short {
            return;
        }
        misses.push(format!(
            "{predicted:.3} s for {measured:.3} s (lbf {:.1} %)",
            shares.lbf * 100.0
        ));
    }
    if busy == ATTEMPTS {
        machine::not_checked(&misses.join("; "));
        return;
    }
    panic!(
        "the central prediction missed the measured time by more than {:.0} % (below it, by \
         more than that and lbf's daemons' share) in all {ATTEMPTS} runs: {}",
        TOLERANCE * 100.0,
        misses.join("; ")
    );
}

/// Once the job has ended: waits for the live `node` (logging to `log`), then for the
/// builder of `setup`; asserts that both succeeded and that the builder's report is complete
/// with no event lost. Returns the report and the node's log.
pub(crate) fn node_and_builder_done(
    node: Daemon,
    log: &Path,
    builder: Daemon,
    setup: &BuilderSetup,
) -> (Value, String) {
    let (ok, _) = node.wait(Duration::from_secs(60));
    let node_log = std::fs::read_to_string(log).unwrap();
    assert!(ok, "lbf-node failed:\n{node_log}");
    assert!(
        builder.wait(Duration::from_secs(60)).0,
        "the builder failed"
    );
    let report = setup.report();
    assert_eq!(report["complete"], true, "{report}\n{node_log}");
    assert_eq!(report["lost_events"], 0, "{report}\n{node_log}");
    (report, node_log)
}

/// Waits up to a minute until `log` contains `needle`, calling `check` between looks (to
/// fail early, e.g. when the daemon writing it has ended).
pub(crate) fn wait_until_logged(log: &Path, needle: &str, mut check: impl FnMut()) {
    let start = Instant::now();
    let text = || std::fs::read_to_string(log).unwrap_or_default();
    while !text().contains(needle) {
        check();
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} never logged `{needle}`:\n{}",
            log.display(),
            text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
