//! Cluster mode across hosts: three network namespaces act as hosts, the builder on one and a
//! node daemon on each of the others, talking over veth links and a bridge with real TLS.
//! One node's link is cut mid-run (packets silently dropped) and restored: nothing is lost,
//! and the central prediction equals `lbf-gag predict` on the original and the merged trace.

mod cluster_support;

use cluster_support::*;
use std::time::Duration;

const PROCS: u32 = 8;

#[test]
fn nodes_on_two_hosts_feed_a_builder_on_a_third_and_a_cut_link_loses_nothing() {
    let hosts = Hosts::new("cut");
    let root = scratch("netns-cut");
    let trace = root.join("job.trace.jsonl");
    synthetic_trace(&trace, PROCS, 200_000, 11);
    let targets = two_targets(PROCS);
    let targets: Vec<(&str, &str)> = targets.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let listen = format!("{}:7400", Hosts::HUB_IP);
    let mut s = builder_setup(
        &root,
        &listen,
        &[Hosts::HUB_IP],
        PROCS,
        &targets,
        &[
            ("a", "token-a-for-tests-only"),
            ("b", "token-b-for-tests-only"),
        ],
    );
    s.netns = Some(hosts.names[0].clone());
    let builder = s.start("builder.log");
    let paced = ["--rate", "40000", "--ack-timeout", "1"];
    let node = |host: usize, name: &str, procs: &str| {
        let token = format!("token-{name}-for-tests-only");
        let ns = Some(hosts.names[host].as_str());
        let c = replay_node(ns, &s, name, &token, &trace, procs, &paced);
        Daemon::spawn(name, c, &root.join(format!("node-{name}.log")))
    };
    let a = node(1, "a", "0-3");
    let b = node(2, "b", "4-7");
    s.wait_events(20_000);
    // The link to host 1 is down until its node has noticed (its acknowledgements time out).
    hosts.link(1, false);
    wait_until_logged(&root.join("node-a.log"), "retrying", || {});
    hosts.link(1, true);
    for n in [a, b] {
        let name = n.name.clone();
        let (ok, _) = n.wait(Duration::from_secs(60));
        let log = std::fs::read_to_string(root.join(format!("node-{name}.log"))).unwrap();
        assert!(ok, "node {name}:\n{log}");
    }
    let log_a = std::fs::read_to_string(root.join("node-a.log")).unwrap();
    assert!(
        log_a.contains("retrying"),
        "node a never noticed the cut:\n{log_a}"
    );
    assert!(builder.wait(Duration::from_secs(60)).0);
    let report = s.report();
    assert_eq!(report["complete"], true, "{report}");
    assert_eq!(report["lost_events"], 0, "{report}");
    let expected = predict(&trace, &root, &["one-node", "two-nodes"]);
    assert_eq!(report_predictions(&report), expected);
    assert_eq!(
        predict(&s.merged(), &root, &["one-node", "two-nodes"]),
        expected
    );
}
