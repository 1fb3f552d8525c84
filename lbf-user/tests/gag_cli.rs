//! Runs the built `lbf-gag` on small traces: the paper's Fig. 3 example, output formats, the
//! timeline, and every kind of error with its exit code.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HEADER3: &str = r#"{"format":"lbf-trace","version":1,"procs":[{"id":0,"name":"P1","host":"a"},{"id":1,"name":"P2","host":"a"},{"id":2,"name":"P3","host":"b"}]}"#;

/// The paper's Fig. 3 events in their arrival order; one time unit is one second.
const FIG3: &str = r#"{"p":0,"k":"recv_start","cpu_ns":1000000000}
{"p":1,"k":"keepalive","cpu_ns":2000000000}
{"p":0,"k":"recv_end","cpu_ns":0,"msg":1}
{"p":2,"k":"send","cpu_ns":5000000000,"msg":1,"bytes":64}
{"p":1,"k":"exit","cpu_ns":1000000000}
{"p":2,"k":"exit","cpu_ns":1000000000}
{"p":0,"k":"exit","cpu_ns":2000000000}
"#;

const SUMMARY: &str = r#"{"summary":{"measured_seconds":14.0,"lost_events":0}}"#;

/// P1 and P2 on node 0, P3 on node 1, no network: the paper's target.
const FIG3_TARGET: &str = "name = \"fig3\"\n[[node]]\nprocs = [0, 1]\n[[node]]\nprocs = [2]\n";

/// A fresh directory for one test.
fn dir(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gag_cli")
        .join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `files` (name, content) into the test's directory and runs `lbf-gag` there.
fn run(test: &str, files: &[(&str, &str)], args: &[&str]) -> Output {
    let d = dir(test);
    for (name, text) in files {
        std::fs::write(d.join(name), text).unwrap();
    }
    Command::new(env!("CARGO_BIN_EXE_lbf-gag"))
        .current_dir(&d)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn fig3(with_summary: bool) -> String {
    format!(
        "{HEADER3}\n{FIG3}{}",
        if with_summary { SUMMARY } else { "" }
    )
}

/// Runs a Fig. 3-shaped trace whose body is `body` and expects failure; returns stderr.
fn failing(test: &str, body: &str) -> String {
    let trace = format!("{HEADER3}\n{body}");
    let out = run(
        test,
        &[("t.jsonl", &trace), ("fig3.toml", FIG3_TARGET)],
        &["predict", "t.jsonl", "--target", "fig3.toml"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
    let err = stderr(&out);
    assert!(err.starts_with("error: t.jsonl"), "{err}");
    err
}

#[test]
fn fig3_predicts_seven_units() {
    let trace = fig3(true);
    let out = run(
        "fig3",
        &[("t.jsonl", &trace), ("fig3.toml", FIG3_TARGET)],
        &["predict", "t.jsonl", "--target", "fig3.toml"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with("fig3"))
        .expect("a row for fig3");
    assert!(row.contains("7.000 s") && row.contains("2.00x"), "{text}");
    assert!(
        text.contains("(measured)") && text.contains("14.000 s"),
        "{text}"
    );
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

/// Hosts a (2 cores) and b, one segment whose messages take 1 s.
const LAB: &str = "[[host]]\nname = \"a\"\ncores = 2\n[[host]]\nname = \"b\"\n\
                   [[network]]\nname = \"slow\"\nhosts = [\"a\", \"b\"]\ntable = [[0, 1.0]]\n";

#[test]
fn a_cluster_file_gives_hosts_by_name() {
    // P1 and P2 on host a's two cores, P3 on b: P3's message leaves at 5 s and arrives at
    // 6 s, P1 then computes 2 s more.
    let trace = fig3(true);
    let apart = "name = \"apart\"\n[[node]]\nhost = \"a\"\nprocs = [0, 1]\n\
                 [[node]]\nhost = \"b\"\nprocs = [2]\n";
    // lbf-gag predict on the trace, the cluster and `target` as apart.toml, with `args`.
    let on_lab = |test: &str, target: &str, args: &[&str]| {
        let files = [
            ("t.jsonl", trace.as_str()),
            ("lab.toml", LAB),
            ("apart.toml", target),
        ];
        let mut all = vec!["predict", "t.jsonl", "--cluster", "lab.toml"];
        all.extend(args);
        run(test, &files, &all)
    };
    // The table's row for `target`.
    let row = |out: &Output, target: &str| {
        assert!(out.status.success(), "{}", stderr(out));
        let text = stdout(out);
        let row = text
            .lines()
            .find(|l| l.starts_with(target))
            .map(str::to_string);
        row.unwrap_or_else(|| panic!("no row for {target}: {text}"))
    };
    let out = on_lab("cluster", apart, &["--target", "apart.toml"]);
    assert!(row(&out, "apart").contains("8.000 s"), "{}", stdout(&out));
    // Alone, the cluster is the target: processes by cores, 0 and 1 on a, 2 on b.
    let out = on_lab("cluster-alone", apart, &[]);
    assert!(row(&out, "lab").contains("8.000 s"), "{}", stdout(&out));
    // A host the cluster does not have, and a host without a cluster file.
    let elsewhere = apart.replace("\"b\"", "\"z\"");
    let out = on_lab("cluster-unknown", &elsewhere, &["--target", "apart.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(
        e.contains("apart.toml") && e.contains("host \"z\" is not in cluster lab"),
        "{e}"
    );
    let files = [("t.jsonl", trace.as_str()), ("apart.toml", apart)];
    let out = run(
        "cluster-none",
        &files,
        &["predict", "t.jsonl", "--target", "apart.toml"],
    );
    assert!(stderr(&out).contains("--cluster FILE"), "{}", stderr(&out));
}

#[test]
fn a_programs_speed_is_its_compute_cpu_ratio() {
    // The same events with every CPU time doubled: a host half as fast. Waits (recv_end) do
    // not count, whatever they hold.
    let slow = FIG3
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let cpu = v["cpu_ns"].as_u64().unwrap() * 2;
            l.replace(
                &format!("\"cpu_ns\":{}", v["cpu_ns"]),
                &format!("\"cpu_ns\":{cpu}"),
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let slow = format!("{HEADER3}\n{slow}\n{SUMMARY}");
    let fast = fig3(true).replace(
        r#""k":"recv_end","cpu_ns":0"#,
        r#""k":"recv_end","cpu_ns":999000000000"#,
    );
    let files = [("fast.jsonl", fast.as_str()), ("slow.jsonl", slow.as_str())];
    let out = run(
        "speed",
        &files,
        &["speed", "--reference", "fast.jsonl", "slow.jsonl"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("speed = 0.5000\n"),
        "{}",
        stdout(&out)
    );
    let out = run(
        "speed-procs",
        &[
            ("one.jsonl", HEADER3),
            (
                "two.jsonl",
                r#"{"format":"lbf-trace","version":1,"procs":[{"id":0}]}"#,
            ),
        ],
        &["speed", "--reference", "one.jsonl", "two.jsonl"],
    );
    assert!(stderr(&out).contains("has 3 processes"), "{}", stderr(&out));
}

#[test]
fn json_lines_for_files_and_short_forms() {
    let trace = fig3(true);
    let out = run(
        "json",
        &[("t.jsonl", &trace), ("fig3.toml", FIG3_TARGET)],
        &[
            "predict",
            "t.jsonl",
            "--target",
            "fig3.toml",
            "--nodes",
            "1",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["target"], "fig3");
    assert_eq!(rows[0]["predicted_seconds"], 7.0);
    assert_eq!(rows[0]["measured_seconds"], 14.0);
    assert_eq!(rows[0]["speedup"], 2.0);
    assert_eq!(rows[0]["lost_events"], 0);
    // one core runs all 12 CPU-seconds
    assert_eq!(rows[1]["target"], "1x1 block zero");
    assert_eq!(rows[1]["predicted_seconds"], 12.0);
}

#[test]
fn missing_summary_and_lost_events_are_warned() {
    let trace = fig3(false);
    let out = run(
        "warn",
        &[("t.jsonl", &trace)],
        &["predict", "t.jsonl", "--nodes", "3"],
    );
    // Predicted all the same, with a status that tells a cut trace from a complete one.
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: t.jsonl: the trace has no summary line"));
    assert!(!stdout(&out).contains("speed-up"));
    assert!(stdout(&out).contains("predicted"), "{}", stdout(&out));

    // Cut in the middle of a line, as a capture killed while writing leaves it: the partial
    // line is dropped and said so.
    let cut = &trace[..trace.len() - 7];
    let out = run(
        "cut",
        &[("t.jsonl", cut)],
        &["predict", "t.jsonl", "--nodes", "3"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("was cut short"), "{}", stderr(&out));

    let lossy = format!(
        "{HEADER3}\n{FIG3}{}",
        SUMMARY.replace("\"lost_events\":0", "\"lost_events\":5")
    );
    let out = run(
        "lossy",
        &[("t.jsonl", &lossy)],
        &["predict", "t.jsonl", "--nodes", "3", "--json"],
    );
    assert!(out.status.success());
    assert!(stderr(&out).contains("lost 5 events"), "{}", stderr(&out));
    assert!(stdout(&out).contains("\"lost_events\":5"));
}

#[test]
fn timeline_is_a_perfetto_trace() {
    let trace = fig3(true);
    let out = run(
        "timeline",
        &[("t.jsonl", &trace), ("fig3.toml", FIG3_TARGET)],
        &[
            "predict",
            "t.jsonl",
            "--nodes",
            "1",
            "--target",
            "fig3.toml",
            "--timeline",
            "tl.json",
            "--timeline-target",
            "fig3",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir_of("timeline").join("tl.json")).unwrap())
            .unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let threads: Vec<(u64, u64, &str)> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(threads, [(0, 0, "P1"), (0, 1, "P2"), (1, 2, "P3")]);
    let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(slices
        .iter()
        .any(|e| e["name"] == "running" && e["args"]["share"] == 0.5));
    assert!(slices
        .iter()
        .any(|e| e["name"] == "waiting" && e["tid"] == 0));
    let end = slices
        .iter()
        .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!((end - 7e6).abs() < 1.0, "the schedule ends at {end} us");
    let flow_start = events
        .iter()
        .find(|e| e["ph"] == "s")
        .expect("a message arrow");
    let flow_end = events.iter().find(|e| e["ph"] == "f").expect("its head");
    assert_eq!(flow_start["id"], flow_end["id"]);
    assert_eq!(
        (flow_start["tid"].as_u64(), flow_end["tid"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(flow_start["ts"].as_f64(), Some(5e6));
}

fn dir_of(test: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gag_cli")
        .join(test)
}

#[test]
fn trace_errors_name_the_line() {
    let exit = |p: u32| format!("{{\"p\":{p},\"k\":\"exit\",\"cpu_ns\":0}}\n");
    let err = failing("bad_json", &format!("{}{{\"p\":1,\n", exit(0)));
    assert!(err.contains("line 3: bad JSON"), "{err}");
    let err = failing("unknown_proc", &format!("{}{}", exit(0), exit(7)));
    assert!(
        err.contains("line 3: process 7 is not in the header"),
        "{err}"
    );
    let err = failing("unknown_kind", "{\"p\":0,\"k\":\"jump\",\"cpu_ns\":0}\n");
    assert!(err.contains("line 2: unknown event kind \"jump\""), "{err}");
    let err = failing(
        "missing_field",
        "{\"p\":0,\"k\":\"send\",\"cpu_ns\":0,\"bytes\":1}\n",
    );
    assert!(
        err.contains("line 2: send event is missing the field \"msg\""),
        "{err}"
    );
}

#[test]
fn header_errors() {
    let out = run(
        "no_header",
        &[("t.jsonl", "{\"p\":0,\"k\":\"exit\",\"cpu_ns\":0}\n")],
        &["predict", "t.jsonl", "--nodes", "1"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("t.jsonl: line 1: not an lbf trace"),
        "{}",
        stderr(&out)
    );
    let out = run(
        "missing_file",
        &[],
        &["predict", "absent.jsonl", "--nodes", "1"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("error: absent.jsonl: cannot read the trace"),
        "{}",
        stderr(&out)
    );
    // The operating system's reason, once.
    assert_eq!(
        stderr(&out).matches("(os error 2)").count(),
        1,
        "{}",
        stderr(&out)
    );
}

#[test]
fn engine_errors_name_the_line() {
    // P1 waits for message 9, which nobody sends
    let body = "{\"p\":0,\"k\":\"recv_start\",\"cpu_ns\":0}\n{\"p\":0,\"k\":\"recv_end\",\"cpu_ns\":0,\"msg\":9}\n{\"p\":0,\"k\":\"exit\",\"cpu_ns\":0}\n{\"p\":1,\"k\":\"exit\",\"cpu_ns\":0}\n{\"p\":2,\"k\":\"exit\",\"cpu_ns\":0}\n";
    let err = failing("never_sent", body);
    assert!(
        err.contains("(\"at N\" is line N)") && err.contains("(at 3)"),
        "{err}"
    );
    // P3 never exits, yet the capture says it completed (its summary): inconsistent.
    let body = format!(
        "{{\"p\":0,\"k\":\"exit\",\"cpu_ns\":0}}\n{{\"p\":1,\"k\":\"exit\",\"cpu_ns\":0}}\n{{\"p\":2,\"k\":\"keepalive\",\"cpu_ns\":5}}\n{SUMMARY}\n"
    );
    let err = failing("truncated", &body);
    assert!(err.contains("process 2") && err.contains("4"), "{err}");
    // Without the summary it is a capture cut short: predicted as far as it goes.
    let body = "{\"p\":0,\"k\":\"exit\",\"cpu_ns\":0}\n{\"p\":1,\"k\":\"exit\",\"cpu_ns\":0}\n{\"p\":2,\"k\":\"keepalive\",\"cpu_ns\":5}\n";
    let trace = format!("{HEADER3}\n{body}");
    let out = run(
        "cut_short",
        &[("t.jsonl", &trace), ("fig3.toml", FIG3_TARGET)],
        &["predict", "t.jsonl", "--target", "fig3.toml"],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 processes had not exited"),
        "{}",
        stderr(&out)
    );
    // an event after the process's exit
    let body =
        "{\"p\":0,\"k\":\"exit\",\"cpu_ns\":0}\n{\"p\":0,\"k\":\"keepalive\",\"cpu_ns\":0}\n";
    let err = failing("after_exit", body);
    assert!(err.contains("after its exit (at 3)"), "{err}");
}

#[test]
fn target_errors_name_the_file() {
    let trace = fig3(true);
    let bad = "[[node]]\nprocs = [0, 1]\ncorez = 2\n";
    let out = run(
        "bad_target",
        &[("t.jsonl", &trace), ("bad.toml", bad)],
        &["predict", "t.jsonl", "--target", "bad.toml"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("bad.toml") && err.contains("corez"), "{err}");
    let half = "[[node]]\nprocs = [0, 1]\n";
    let out = run(
        "homeless",
        &[("t.jsonl", &trace), ("half.toml", half)],
        &["predict", "t.jsonl", "--target", "half.toml"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("half.toml: process 2 is on no node; add it to a node's procs"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unwritable_timeline_is_an_error() {
    let trace = fig3(true);
    let out = run(
        "bad_timeline",
        &[("t.jsonl", &trace)],
        &[
            "predict",
            "t.jsonl",
            "--nodes",
            "2",
            "--timeline",
            "no/such/dir/tl.json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot write the timeline no/such/dir/tl.json"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn usage_errors_exit_2() {
    let trace = fig3(true);
    let files = [("t.jsonl", trace.as_str())];
    for args in [
        &["predict", "t.jsonl"][..],
        &["predict", "t.jsonl", "--cores", "2"],
        &[
            "predict",
            "t.jsonl",
            "--nodes",
            "2",
            "--network",
            "carrier-pigeon",
        ],
        &[
            "predict",
            "t.jsonl",
            "--nodes",
            "2",
            "--timeline",
            "x.json",
            "--timeline-target",
            "nope",
        ],
        &["frobnicate"],
    ] {
        let out = run("usage", &files, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty());
    }
}

#[test]
fn help_teaches_with_examples() {
    let out = run("help", &[], &["predict", "--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(
        text.contains("Examples:") && text.contains("--network gige"),
        "{text}"
    );
    assert!(text.contains("ib-hdr"), "{text}");
}

/// `lbf-gag fit-network` prints the table of a trace's timed messages and writes it; a trace
/// without timestamps is an error that says how to get them.
#[test]
fn fit_network_times_a_traces_messages() {
    let timed = format!(
        "{}\n{}\n{}\n{}\n{SUMMARY}\n",
        r#"{"format":"lbf-trace","version":2,"procs":[{"id":0,"host":"a"},{"id":1,"host":"a"}]}"#,
        r#"{"p":1,"k":"recv_start","cpu_ns":0,"t_ns":1000}"#,
        r#"{"p":0,"k":"send","cpu_ns":0,"msg":1,"bytes":64,"t_ns":2000}"#,
        r#"{"p":1,"k":"recv_end","cpu_ns":0,"msg":1,"t_ns":52000}"#,
    );
    let out = run(
        "fit_network",
        &[("t.jsonl", &timed)],
        &["fit-network", "t.jsonl", "--remote", "-o", "net.toml"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("remote: 1 messages timed, of 1 messages"),
        "{text}"
    );
    let file = std::fs::read_to_string(dir_of("fit_network").join("net.toml")).unwrap();
    assert!(file.ends_with("\nremote = [[64, 5e-5]]\n"), "{file}");
    let out = run(
        "fit_network_untimed",
        &[("t.jsonl", &fig3(true))],
        &["fit-network", "t.jsonl"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: t.jsonl has no wall-clock timestamps"),
        "{err}"
    );
    let help = stdout(&run("fit_network_help", &[], &["fit-network", "--help"]));
    assert!(
        help.contains("Examples:") && help.contains("--remote"),
        "{help}"
    );
}

/// An id used again once its message is complete names a new message: each receive takes
/// the send before it. Where a target would have both messages of the id in flight at once
/// (process 1 receives late), the trace is refused for it, naming the line.
#[test]
fn a_message_id_reused_after_its_message_completed() {
    let trace = |late: u64| {
        let lines = [
            r#"{"p":0,"k":"send","cpu_ns":1000000,"msg":5,"bytes":10}"#.to_string(),
            format!(r#"{{"p":1,"k":"recv_start","cpu_ns":{late}}}"#),
            r#"{"p":1,"k":"recv_end","cpu_ns":0,"msg":5}"#.to_string(),
            r#"{"p":0,"k":"send","cpu_ns":2000000,"msg":5,"bytes":10}"#.to_string(),
            r#"{"p":1,"k":"recv_start","cpu_ns":0}"#.to_string(),
            r#"{"p":1,"k":"recv_end","cpu_ns":0,"msg":5}"#.to_string(),
            r#"{"p":0,"k":"exit","cpu_ns":0}"#.to_string(),
            r#"{"p":1,"k":"exit","cpu_ns":1000000}"#.to_string(),
            r#"{"p":2,"k":"exit","cpu_ns":0}"#.to_string(),
        ];
        format!("{HEADER3}\n{}\n{SUMMARY}", lines.join("\n"))
    };
    let out = run(
        "reuse_after_completion",
        &[("t.jsonl", &trace(0))],
        &["predict", "t.jsonl", "--nodes", "3", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Process 0 computes 3 ms in all; process 1 receives the second message at 3 ms and
    // computes 1 ms more.
    let predicted = row["predicted_seconds"].as_f64().unwrap();
    assert!((predicted - 0.004).abs() < 1e-9, "{row}");

    let out = run(
        "reuse_overlapping",
        &[("t.jsonl", &trace(10_000_000))],
        &["predict", "t.jsonl", "--nodes", "3"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("message 5 is sent twice"), "{err}");
    assert!(err.contains("at 5"), "{err}");
    assert!(err.contains("an id names one message at a time"), "{err}");
}

/// A trace whose capture lost records and which is inconsistent because of it: the error names
/// the loss as the likely cause and says how to avoid it, not only the deadlock.
#[test]
fn an_inconsistency_in_a_lossy_trace_names_the_loss() {
    // Process 1 waits for a message whose send was lost.
    let trace = format!(
        "{HEADER3}\n{}\n{}\n{}\n{}\n{}\n{}",
        r#"{"p":0,"k":"exit","cpu_ns":10}"#,
        r#"{"p":1,"k":"recv_start","cpu_ns":10}"#,
        r#"{"p":1,"k":"recv_end","cpu_ns":0,"msg":77}"#,
        r#"{"p":1,"k":"exit","cpu_ns":0}"#,
        r#"{"p":2,"k":"exit","cpu_ns":10}"#,
        SUMMARY.replace("\"lost_events\":0", "\"lost_events\":12")
    );
    let out = run(
        "lossy_deadlock",
        &[("t.jsonl", &trace)],
        &["predict", "t.jsonl", "--nodes", "3"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("the capture lost 12 records"), "{err}");
    assert!(err.contains("--ringbuf-size"), "{err}");
    assert!(err.contains("inconsistent trace"), "{err}");
}

/// Counts past lbf's stated limits are errors before anything is allocated for them (a
/// `--nodes 4294967295` once tried to allocate 103 GB and aborted).
#[test]
fn huge_counts_are_refused_before_allocating() {
    let trace = fig3(true);
    let out = run(
        "huge_nodes",
        &[("t.jsonl", &trace)],
        &["predict", "t.jsonl", "--nodes", "4294967295"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("4294967295 nodes is more than lbf models (at most 1048576)"),
        "{}",
        stderr(&out)
    );
}

/// A trace of `procs` processes (ids 0 up) that send `messages` in order, each `(from, to,
/// sender's CPU ns before it, bytes)`, received at once with no CPU; then every process
/// exits.
fn messages_trace(procs: u32, messages: &[(u32, u32, u64, u64)]) -> String {
    let ids: Vec<String> = (0..procs).map(|p| format!(r#"{{"id":{p}}}"#)).collect();
    let mut lines = vec![format!(
        r#"{{"format":"lbf-trace","version":2,"procs":[{}]}}"#,
        ids.join(",")
    )];
    for (i, &(from, to, cpu_ns, bytes)) in messages.iter().enumerate() {
        let msg = i + 1;
        lines.push(format!(
            r#"{{"p":{from},"k":"send","cpu_ns":{cpu_ns},"msg":{msg},"bytes":{bytes}}}"#
        ));
        lines.push(format!(r#"{{"p":{to},"k":"recv_start","cpu_ns":0}}"#));
        lines.push(format!(
            r#"{{"p":{to},"k":"recv_end","cpu_ns":0,"msg":{msg}}}"#
        ));
    }
    for p in 0..procs {
        lines.push(format!(r#"{{"p":{p},"k":"exit","cpu_ns":0}}"#));
    }
    lines.push(SUMMARY.to_string());
    lines.join("\n") + "\n"
}

/// Four processes in two pairs, (0, 2) and (1, 3), each pair exchanging 20 rounds of 64 KiB
/// after 1 ms of work on both sides.
fn two_pairs_trace() -> String {
    let mut messages = Vec::new();
    for _ in 0..20 {
        for (a, b) in [(0, 2), (1, 3)] {
            messages.push((a, b, 1_000_000, 65536));
            messages.push((b, a, 1_000_000, 65536));
        }
    }
    messages_trace(4, &messages)
}

/// `advise` ranks first a placement that keeps each pair on one host, prints the baselines
/// and the curve by hosts used, and writes the files to run and predict the best with; the
/// target file written predicts what advise said.
#[test]
fn advise_keeps_communicating_pairs_together_and_writes_run_files() {
    let trace = two_pairs_trace();
    let out = run(
        "advise",
        &[("t.jsonl", &trace)],
        &[
            "advise",
            "t.jsonl",
            "--hosts",
            "2",
            "--cores",
            "2",
            "--network",
            "gige",
            "--budget",
            "2",
            "--json",
            "--write",
            "advised",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let best = &rows[0];
    assert_eq!(best["rank"], 1);
    let host = |p: &str| best["placement"][p].as_str().unwrap().to_string();
    assert_eq!(host("0"), host("2"), "{best}");
    assert_eq!(host("1"), host("3"), "{best}");
    let block = rows.iter().find(|r| r["label"] == "block").expect("block");
    assert!(
        block["predicted_seconds"].as_f64() > best["predicted_seconds"].as_f64(),
        "{block} {best}"
    );
    let d = dir_of("advise").join("advised");
    for f in ["hostfile", "rankfile", "machinefile", "target.toml"] {
        assert!(d.join(f).exists(), "{f} written");
    }
    let target = std::fs::read_to_string(d.join("target.toml")).unwrap();
    let again = run(
        "advise-predict",
        &[("t.jsonl", &trace), ("target.toml", &target)],
        &["predict", "t.jsonl", "--target", "target.toml", "--json"],
    );
    let row: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    let predicted = row["predicted_seconds"].as_f64().unwrap();
    // predict adds the teardown (none here) and nothing else.
    assert!(
        (predicted - best["predicted_seconds"].as_f64().unwrap()).abs() < 1e-9,
        "{row} {best}"
    );

    let table = run(
        "advise-table",
        &[("t.jsonl", &trace)],
        &[
            "advise", "t.jsonl", "--hosts", "2", "--cores", "2", "--budget", "1",
        ],
    );
    let text = stdout(&table);
    assert!(text.contains("block"), "{text}");
    assert!(text.contains("hosts used  best predicted"), "{text}");

    let bad = run(
        "advise-bad",
        &[("t.jsonl", &trace)],
        &["advise", "t.jsonl", "--hosts", "0"],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("--hosts and --cores must be at least 1"));
}

/// `advise --cluster` places on the cluster file's hosts, by their names, over its network.
#[test]
fn advise_uses_a_cluster_files_hosts() {
    let trace = two_pairs_trace();
    let lab = "[[host]]\nname = \"fast\"\ncores = 2\nspeed = 2.0\n\
               [[host]]\nname = \"slow\"\ncores = 2\n\
               [[network]]\nname = \"lan\"\nhosts = [\"fast\", \"slow\"]\n\
               table = [[0, 0.01]]\n";
    let out = run(
        "advise-cluster",
        &[("t.jsonl", &trace), ("lab.toml", lab)],
        &[
            "advise",
            "t.jsonl",
            "--cluster",
            "lab.toml",
            "--budget",
            "2",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let best: serde_json::Value =
        serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    let host = |p: &str| best["placement"][p].as_str().unwrap().to_string();
    assert_eq!(host("0"), host("2"), "{best}");
    assert_eq!(host("1"), host("3"), "{best}");
    // A pair on each host, or all four on fast's 2 cores at twice the speed: 20 ms either
    // way (the search scores every placement of so small a problem, and either may come
    // first).
    assert!(["fast", "slow"].contains(&host("0").as_str()), "{best}");
    assert!(
        (best["predicted_seconds"].as_f64().unwrap() - 0.020).abs() < 1e-9,
        "{best}"
    );

    let both = run(
        "advise-cluster-and-cores",
        &[("t.jsonl", &trace), ("lab.toml", lab)],
        &["advise", "t.jsonl", "--cluster", "lab.toml", "--cores", "4"],
    );
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));
}

/// A master (process 0) handing 16 tasks of 1000 bytes round the workers 1 to 4, 4 ms of
/// its CPU each; a worker computes 10 ms and sends back 8 bytes.
fn master_worker_trace() -> String {
    let mut messages = Vec::new();
    for t in 0..16 {
        let w = 1 + t % 4;
        messages.push((0, w, 4_000_000, 1000));
        messages.push((w, 0, 10_000_000, 8));
    }
    messages_trace(5, &messages)
}

/// A master that hands 8 tasks of 10 ms out on demand to workers 1 and 2, as traced with 2
/// slow: worker 1 took 6 of them, worker 2 two. Dealt again on two hosts of speed 1 the
/// workers take 4 each (40 ms); the engine's replay of the traced deal would give worker 1
/// its 6 (60 ms).
#[test]
fn advise_deals_an_on_demand_masters_tasks_again() {
    let task = |w: u32| (0, w, 0, 4);
    let result = |w: u32| (w, 0, 10_000_000, 8);
    // Who reports each result, and so gets the next task (or the stop, 9th and 10th).
    let mut messages = vec![task(1), task(2)];
    for w in [1, 1, 1, 2, 1, 1, 2, 1] {
        messages.push(result(w));
        messages.push(task(w));
    }
    // The last message to each worker (after the 7th and 8th result) is its stop.
    let trace = messages_trace(3, &messages);
    let lab = "[[host]]\nname = \"fast\"\n[[host]]\nname = \"also-fast\"\n\
               [[host]]\nname = \"slow\"\nspeed = 0.25\n\
               [[network]]\nname = \"lan\"\nhosts = [\"fast\", \"also-fast\", \"slow\"]\n\
               table = [[0, 0.0]]\n";
    let files = [("t.jsonl", trace.as_str()), ("lab.toml", lab)];
    let args = ["advise", "t.jsonl", "--cluster", "lab.toml", "--json"];
    let out = run("advise-on-demand", &files, &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("process 0 deals 8 tasks on demand to 2 workers"),
        "{}",
        stderr(&out)
    );
    let best: serde_json::Value =
        serde_json::from_str(stdout(&out).lines().next().expect("a placement")).unwrap();
    let seconds = best["predicted_seconds"].as_f64().unwrap();
    assert!((seconds - 0.040).abs() < 1e-6, "{best}");
    assert_ne!(best["placement"]["1"], "slow", "{best}");
    assert_ne!(best["placement"]["2"], "slow", "{best}");
}

/// For a master/worker trace the work-rate model's placement is a start, labelled
/// `work-rate`, with the model's rate and time next to the engine's: the master on the fast
/// host. `--master` declares a master where recognition fails, and names a wrong one.
#[test]
fn advise_scores_the_work_rate_models_placement() {
    let trace = master_worker_trace();
    let lab = "[[host]]\nname = \"fast\"\ncores = 2\nspeed = 1.0\n\
               [[host]]\nname = \"slow\"\ncores = 2\nspeed = 0.25\n\
               [[network]]\nname = \"lan\"\nhosts = [\"fast\", \"slow\"]\n\
               table = [[0, 0.0001]]\n";
    let files = [("t.jsonl", trace.as_str()), ("lab.toml", lab)];
    let args = [
        "advise",
        "t.jsonl",
        "--cluster",
        "lab.toml",
        "--budget",
        "1",
    ];
    let out = run(
        "advise-work-rate",
        &files,
        &[&args[..], &["--json"]].concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let model = rows
        .iter()
        .find(|r| r["model_rate"].is_f64())
        .expect("a row with the model's rate");
    assert_eq!(model["placement"]["0"], "fast", "{model}");
    // Master on fast (it serves 250 tasks/s): its other core works at 100 tasks/s, slow's 2
    // cores at 25 each; on slow the master would serve only 62.5.
    assert!(
        (model["model_rate"].as_f64().unwrap() - 150.0).abs() < 1e-6,
        "{model}"
    );
    assert!(model["model_seconds"].as_f64().unwrap() > 0.0, "{model}");

    let table = run("advise-work-rate-table", &files, &args);
    let text = stdout(&table);
    assert!(text.contains("work-rate model: master on fast"), "{text}");
    assert!(text.contains("by the engine (rank"), "{text}");

    // The pairs' process 0 exchanges with process 2 only: declared, 2 is its worker.
    let pairs = two_pairs_trace();
    let with_master = |test: &str, master: &str| {
        let out = run(
            test,
            &[("t.jsonl", &pairs), ("lab.toml", lab)],
            &[&args[..], &["--master", master]].concat(),
        );
        (out.status.code(), stdout(&out), stderr(&out))
    };
    let (code, out, err) = with_master("advise-declared", "0");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("work-rate model"), "{out}");
    let (code, _, err) = with_master("advise-declared-wrong", "9");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("process 9 is not in the trace"), "{err}");
}

/// The paper's Fig. 1 as a trace that followed procedure F: S computes 5 s, 3 of them in F,
/// and sends to R, which computed 1 s and waits, then computes 1 s.
const FIG1: &str = r#"{"format":"lbf-trace","version":2,"procs":[{"id":0,"name":"S","host":"a"},{"id":1,"name":"R","host":"b"}],"procedures":["F"]}
{"p":1,"k":"recv_start","cpu_ns":1000000000}
{"p":1,"k":"recv_end","cpu_ns":0,"msg":1}
{"p":0,"k":"send","cpu_ns":5000000000,"msg":1,"bytes":8,"proc_ns":[3000000000]}
{"p":0,"k":"exit","cpu_ns":1000000000}
{"p":1,"k":"exit","cpu_ns":1000000000}
{"summary":{"measured_seconds":6.0,"lost_events":0}}
"#;

#[test]
fn procedure_what_ifs_each_add_a_target() {
    let moved = "name = \"moved\"\n[[node]]\nprocs = [0]\n[[node]]\nprocs = [1]\n\
                 [[procedure]]\nname = \"F\"\nmove = true\n";
    let out = run(
        "procedures",
        &[("t.jsonl", FIG1), ("moved.toml", moved)],
        &[
            "predict",
            "t.jsonl",
            "--target",
            "moved.toml",
            "--move",
            "F",
            "--zero",
            "F",
            "--speedup",
            "F=2",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let predicted = |target: &str| {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("\"target\":\"{target}\"")))
            .unwrap_or_else(|| panic!("no target {target} in {text}"));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["predicted_seconds"].as_f64().unwrap()
    };
    // A target file that changes a procedure is no placement for the options: they apply to
    // the run's own (a node per host), and are named by their change alone.
    assert_eq!(predicted("moved"), 5.0);
    assert_eq!(predicted("move F"), 5.0);
    assert_eq!(predicted("zero F"), 3.0);
    assert_eq!(predicted("speedup F=2"), 4.5);
    // One placement given: the change applies to it.
    let out = run(
        "procedures_two",
        &[("t.jsonl", FIG1)],
        &["predict", "t.jsonl", "--nodes", "1", "--zero", "F"],
    );
    // One core: S's 2 s of work left before its send and R's 1 s share it until 2; S sends
    // at 3; then each has 1 s left, shared: 5.
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("zero F") && l.contains("5.000 s")),
        "{text}"
    );
    // Without a placement, the run's own (a node per host), named by the change alone.
    let out = run(
        "procedures_as_run",
        &[("t.jsonl", FIG1)],
        &["predict", "t.jsonl", "--zero", "F"],
    );
    assert!(stdout(&out).contains("zero F"), "{}", stdout(&out));
    let unknown = run(
        "procedures_unknown",
        &[("t.jsonl", FIG1)],
        &["predict", "t.jsonl", "--zero", "G"],
    );
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("procedure `G` is not in the trace, which records `F`"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn critical_path_names_what_to_tune() {
    let out = run(
        "critical_path",
        &[("t.jsonl", FIG1)],
        &["predict", "t.jsonl", "--nodes", "2", "--critical-path"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    // S's 5 s (3 of them in F), then R's last second.
    let line = |what: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no `{what}` in {text}"))
            .to_string()
    };
    assert!(line("process S").contains("83.3 %"), "{text}");
    assert!(line("process R").contains("16.7 %"), "{text}");
    assert!(line("of which F").contains("50.0 %"), "{text}");
    assert!(line("communication").contains("0.0 %"), "{text}");
}
