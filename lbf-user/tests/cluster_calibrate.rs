//! Calibration of a whole cluster: three network namespaces act as hosts, the coordinator
//! (`lbf-gag calibrate`) on the hub and an agent (`lbf-node calibrate --builder`) on each of
//! the two others, whose links to the hub's bridge are shaped to 100 Mbit/s with
//! `tc ... tbf`. The coordinator orders the measurements over real TLS; the cluster file it
//! writes must hold both hosts and the table between them, which must follow the shaping
//! from 64 KiB on, and `lbf-gag predict --cluster` must take it. An agent with a wrong token
//! is refused and says so.

mod cluster_support;
mod shaping;

use cluster_support::*;
use shaping::{comment_points, shape, shaping_implies};
use std::process::Command;
use std::time::Duration;

/// Relative error allowed between the measured table and the shaping, at 64 KiB and above
/// (as for `lbf-node calibrate --peer` in `tests/calibrate.rs`).
const RATE_TOLERANCE: f64 = 0.05;

/// The measured points of the `[[network]]` section of a cluster file.
fn network_points(cluster: &str) -> Vec<(f64, f64)> {
    comment_points(
        cluster
            .split("[[network]]")
            .nth(1)
            .expect("a [[network]] section"),
    )
}

/// `lbf-node calibrate --builder` as node `name` with `token`, in namespace `ns`.
fn agent(ns: &str, setup: &BuilderSetup, name: &str, token: &str) -> Command {
    let mut c = in_netns(Some(ns), env!("CARGO_BIN_EXE_lbf-node"));
    c.env("LBF_NODE_TOKEN", token)
        .args(["calibrate", "--builder", &setup.listen, "--node", name])
        .arg("--ca")
        .arg(&setup.cert)
        .args(["--patience", "30"]);
    c
}

#[test]
fn a_coordinator_calibrates_two_hosts_and_the_shaped_network_between_them() {
    let hosts = Hosts::new("cal");
    let root = scratch("calibrate");
    let tokens = [
        ("n1", "token-n1-for-tests-only"),
        ("n2", "token-n2-for-tests-only"),
    ];
    let listen = format!("{}:7400", Hosts::HUB_IP);
    let s = builder_setup(&root, &listen, &[Hosts::HUB_IP], 2, &[], &tokens);
    for ns in &hosts.names[1..] {
        shape(ns, "eth0", "100mbit", 4096);
    }
    let cluster = root.join("cluster.toml");
    let mut coordinator = in_netns(Some(&hosts.names[0]), env!("CARGO_BIN_EXE_lbf-gag"));
    coordinator
        .args(["calibrate", "--config"])
        .arg(&s.config)
        .arg("-o")
        .arg(&cluster)
        .args([
            "--max-bytes",
            "4M",
            "--min-reps",
            "3",
            "--seconds-per-size",
            "0.1",
        ])
        .args(["--cpu-seconds", "1", "--wait", "60"]);
    let coordinator_log = root.join("coordinator.log");
    let mut coordinator = Daemon::spawn("lbf-gag calibrate", coordinator, &coordinator_log);
    coordinator.wait_logged(&coordinator_log, "listening on");

    // An agent with another node's token is refused for good, and says why.
    let impostor = agent(&hosts.names[1], &s, "n1", tokens[1].1)
        .output()
        .expect("running the impostor agent");
    let said = String::from_utf8_lossy(&impostor.stderr);
    assert!(
        !impostor.status.success(),
        "the impostor was accepted: {said}"
    );
    assert!(said.contains("authentication failed"), "{said}");

    let agents: Vec<Daemon> = tokens
        .iter()
        .enumerate()
        .map(|(i, (name, token))| {
            let c = agent(&hosts.names[i + 1], &s, name, token);
            Daemon::spawn(name, c, &root.join(format!("agent-{name}.log")))
        })
        .collect();
    let (ok, listing) = coordinator.wait(Duration::from_secs(300));
    let log = std::fs::read_to_string(&coordinator_log).unwrap();
    assert!(ok, "the coordinator failed:\n{log}\n{listing}");
    for a in agents {
        let name = a.name.clone();
        let (ok, _) = a.wait(Duration::from_secs(30));
        let log = std::fs::read_to_string(root.join(format!("agent-{name}.log"))).unwrap();
        assert!(ok, "agent {name} failed:\n{log}");
        assert!(log.contains("the coordinator has finished"), "{log}");
    }
    eprintln!("{listing}");

    let text = std::fs::read_to_string(&cluster).expect("the cluster file");
    for name in ["n1", "n2"] {
        assert!(text.contains(&format!("name = \"{name}\"")), "{text}");
    }
    assert!(text.contains("name = \"n1-n2\""), "{text}");
    assert_eq!(text.matches("local = [[").count(), 2, "{text}");
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(
        text.matches(&format!("cores = {cores}\n")).count(),
        2,
        "{text}"
    );

    let points = network_points(&text);
    assert_eq!(points.len(), 24, "0 B and 1 B to 4 MiB: {points:?}");
    let base = points[0].1;
    let mut misses = Vec::new();
    for &(bytes, seconds) in points.iter().filter(|p| p.0 >= 65536.0) {
        let implied = shaping_implies(bytes, 1e8, 4096.0, base);
        let error = (seconds - implied) / implied;
        eprintln!(
            "{bytes:>9} B: measured {seconds:.4e} s, shaping implies {implied:.4e} s ({:+.1} %)",
            error * 100.0
        );
        if error.abs() > RATE_TOLERANCE {
            misses.push(format!("{bytes} B {:+.1} %", error * 100.0));
        }
    }
    assert!(misses.is_empty(), "off the shaping: {misses:?}");

    // The file is a cluster `lbf-gag predict` takes as a target.
    let trace = root.join("two.trace.jsonl");
    synthetic_trace(&trace, 2, 2_000, 3);
    let out = Command::new(env!("CARGO_BIN_EXE_lbf-gag"))
        .args(["predict", "--cluster"])
        .arg(&cluster)
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("cluster"));
}
