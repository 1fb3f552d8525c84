//! Cluster mode's fault tests on loopback, with the real binaries and real TLS: a builder
//! killed and restarted mid-run predicts exactly what an undisturbed one does (and what
//! `lbf-gag predict` computes from the merged trace); garbage and a wrong token are refused
//! while another node's stream goes on; a node whose spool fills reports the loss.

mod cluster_support;

use cluster_support::*;
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const PROCS: u32 = 8;
const MINUTE: Duration = Duration::from_secs(60);

/// A builder on a fresh loopback port for a job of [`PROCS`] with nodes `a` and `b`.
fn setup(dir: &Path) -> BuilderSetup {
    let targets = two_targets(PROCS);
    let targets: Vec<(&str, &str)> = targets.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let listen = format!("127.0.0.1:{}", free_port());
    builder_setup(
        dir,
        &listen,
        &["127.0.0.1"],
        PROCS,
        &targets,
        &[
            ("a", "token-a-for-tests-only"),
            ("b", "token-b-for-tests-only"),
        ],
    )
}

/// Runs nodes `a` (processes 0-3) and `b` (4-7) to completion, calling `meanwhile` once both
/// are started; returns the final report's predictions.
fn run_job(
    s: &BuilderSetup,
    trace: &Path,
    extra: &[&str],
    meanwhile: impl FnOnce(Daemon) -> Daemon,
) -> Vec<(String, f64)> {
    let builder = s.start("builder.log");
    let nodes: Vec<Daemon> = [
        ("a", "token-a-for-tests-only", "0-3"),
        ("b", "token-b-for-tests-only", "4-7"),
    ]
    .iter()
    .map(|(node, token, procs)| {
        let c = replay_node(None, s, node, token, trace, procs, extra);
        Daemon::spawn(node, c, &s.dir.join(format!("node-{node}.log")))
    })
    .collect();
    let builder = meanwhile(builder);
    for n in nodes {
        let name = n.name.clone();
        let (ok, _) = n.wait(MINUTE);
        let log = std::fs::read_to_string(s.dir.join(format!("node-{name}.log"))).unwrap();
        assert!(ok, "node {name} failed:\n{log}");
    }
    let (ok, _) = builder.wait(MINUTE);
    assert!(
        ok,
        "{}",
        std::fs::read_to_string(s.dir.join("builder.log")).unwrap()
    );
    let report = s.report();
    assert_eq!(report["complete"], true, "{report}");
    assert_eq!(report["lost_events"], 0, "{report}");
    report_predictions(&report)
}

#[test]
fn a_builder_killed_and_restarted_mid_run_predicts_exactly_what_an_undisturbed_one_does() {
    let root = scratch("restart");
    let trace = root.join("job.trace.jsonl");
    synthetic_trace(&trace, PROCS, 200_000, 7);
    let expected = predict(
        &trace,
        &setup(&root.join("ref")).dir,
        &["one-node", "two-nodes"],
    );

    let calm = setup(&root.join("calm"));
    let undisturbed = run_job(&calm, &trace, &[], |b| b);
    assert_eq!(undisturbed, expected);

    let rough = setup(&root.join("rough"));
    let paced = ["--rate", "60000", "--ack-timeout", "2"];
    let disturbed = run_job(&rough, &trace, &paced, |builder| {
        rough.wait_events(30_000);
        builder.kill();
        // Down until a node has noticed, and retries.
        wait_until_logged(&rough.dir.join("node-a.log"), "retrying", || {});
        rough.start("builder.log")
    });
    assert_eq!(disturbed, undisturbed);
    let log = std::fs::read_to_string(rough.dir.join("builder.log")).unwrap();
    assert!(log.contains("journal: node `a` holds batches"), "{log}");
    let merged = predict(&rough.merged(), &rough.dir, &["one-node", "two-nodes"]);
    assert_eq!(merged, undisturbed);
}

#[test]
fn garbage_and_a_wrong_token_are_refused_while_another_stream_goes_on() {
    let root = scratch("refuse");
    let trace = root.join("job.trace.jsonl");
    synthetic_trace(&trace, PROCS, 100_000, 3);
    let s = setup(&root.join("builder"));
    let expected = predict(&trace, &s.dir, &["one-node", "two-nodes"]);
    let builder = s.start("builder.log");
    let good = |node: &str, token: &str, procs: &str| {
        let c = replay_node(None, &s, node, token, &trace, procs, &["--rate", "50000"]);
        Daemon::spawn(node, c, &s.dir.join(format!("node-{node}.log")))
    };
    let a = good("a", "token-a-for-tests-only", "0-3");
    s.wait_events(10_000);

    let mut garbage = TcpStream::connect(&s.listen).unwrap();
    garbage.write_all(&[0x5a; 4096]).unwrap();
    let impostor = replay_node(
        None,
        &s,
        "b",
        "a-wrong-token-long-enough",
        &trace,
        "4-7",
        &[],
    );
    let impostor = Daemon::spawn("impostor", impostor, &s.dir.join("impostor.log"));
    let (ok, _) = impostor.wait(MINUTE);
    assert!(!ok, "a node with a wrong token must fail");
    let impostor_log = std::fs::read_to_string(s.dir.join("impostor.log")).unwrap();
    assert!(
        impostor_log.contains("authentication failed for node `b`"),
        "{impostor_log}"
    );

    let b = good("b", "token-b-for-tests-only", "4-7");
    for n in [a, b] {
        assert!(n.wait(MINUTE).0);
    }
    assert!(builder.wait(MINUTE).0);
    let log = std::fs::read_to_string(s.dir.join("builder.log")).unwrap();
    assert!(log.contains("TLS handshake failed"), "{log}");
    assert!(
        log.contains("refused node `b`") && log.contains("wrong token"),
        "{log}"
    );
    assert_eq!(report_predictions(&s.report()), expected);
}

#[test]
fn a_node_whose_spool_fills_reports_the_loss_and_the_builder_shows_it() {
    let root = scratch("spool-full");
    let trace = root.join("job.trace.jsonl");
    synthetic_trace(&trace, PROCS, 100_000, 5);
    let s = setup(&root.join("builder"));
    let c = replay_node(
        None,
        &s,
        "a",
        "token-a-for-tests-only",
        &trace,
        "0-3",
        &["--spool-size", "64K"],
    );
    let node = Daemon::spawn("a", c, &s.dir.join("node-a.log"));
    let log_path = s.dir.join("node-a.log");
    let start = Instant::now();
    while !std::fs::read_to_string(&log_path)
        .unwrap()
        .contains("spool full")
    {
        assert!(start.elapsed() < MINUTE, "the spool never filled");
        std::thread::sleep(Duration::from_millis(20));
    }
    let builder = s.start("builder.log");
    let (ok, _) = node.wait(MINUTE);
    assert!(!ok, "a node that lost events must not exit 0");
    let log = std::fs::read_to_string(&log_path).unwrap();
    let lost: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("lbf-node: done: "))
        .and_then(|l| l.split(" batches acknowledged, ").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no loss count in the node's log:\n{log}"));
    assert!(lost > 0, "{log}");
    let results: serde_json::Value = serde_json::from_str(&s.get("/results").unwrap()).unwrap();
    assert_eq!(results["lost_events"], lost, "{results}");
    let metrics = s.get("/metrics").unwrap();
    assert!(
        metrics.contains(&format!("lbf_node_lost_events_total{{node=\"a\"}} {lost}")),
        "{metrics}"
    );
    // Every per-node metric docs/cluster.md names is there.
    assert!(
        metrics.contains("lbf_node_paused{node=\"a\"} 0"),
        "{metrics}"
    );
    builder.kill();
}

#[test]
fn a_node_of_another_protocol_version_is_refused_with_both_versions_named() {
    use lbf::net::{tls, wire};
    use lbf_proto::{builder_frame, node_frame, BuilderFrame, Hello, NodeFrame};
    let root = scratch("version");
    let s = setup(&root.join("builder"));
    let builder = s.start("builder.log");
    let refusal = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let connector = tokio_rustls::TlsConnector::from(tls::client_config(&s.cert).unwrap());
        let tcp = tokio::net::TcpStream::connect(&s.listen).await.unwrap();
        let name = tls::server_name("127.0.0.1").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        let hello = Hello {
            protocol_version: 99,
            node: "a".into(),
            token: "token-a-for-tests-only".into(),
            ..Hello::default()
        };
        let frame = NodeFrame {
            body: Some(node_frame::Body::Hello(hello)),
        };
        wire::write_message(&mut tls, &frame).await.unwrap();
        wire::read_message::<BuilderFrame>(&mut tls, &mut Vec::new())
            .await
            .unwrap()
    });
    let Some(builder_frame::Body::Refusal(r)) = refusal.body else {
        panic!("expected a refusal, got {refusal:?}");
    };
    let ours = lbf_proto::PROTOCOL_VERSION;
    assert!(r.permanent);
    assert!(
        r.reason.contains("version 99") && r.reason.contains(&format!("version {ours}")),
        "{}",
        r.reason
    );
    // The builder logs the refusal after sending it: give it a moment to do so.
    let logged = |log: &str| log.contains("refused node `a`") && log.contains("version 99");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut log = String::new();
    while std::time::Instant::now() < deadline {
        log = std::fs::read_to_string(s.dir.join("builder.log")).unwrap_or_default();
        if logged(&log) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    builder.kill();
    assert!(logged(&log), "{log}");
}

#[test]
fn a_calibration_agent_is_refused_by_a_jobs_builder_and_told_where_to_go() {
    let root = scratch("agent-at-builder");
    let s = setup(&root.join("builder"));
    let builder = s.start("builder.log");
    let out = Command::new(env!("CARGO_BIN_EXE_lbf-node"))
        .env("LBF_NODE_TOKEN", "token-a-for-tests-only")
        .args(["calibrate", "--builder", &s.listen, "--node", "a", "--ca"])
        .arg(&s.cert)
        .args(["--patience", "5"])
        .output()
        .unwrap();
    builder.kill();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("calibration agent") && said.contains("lbf-gag calibrate"),
        "{said}"
    );
}
