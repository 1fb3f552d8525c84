//! The socket capture end to end, under the real eBPF tracer: the SPA client/server and the
//! TSP-like master/worker of `tests/workloads/sockets`, over UNIX sockets, TCP on IPv6
//! loopback, and TCP between two network namespaces joined by a veth pair; datagram ping-pong
//! over UDP (connected and unconnected sockets, destinations named by `sendto` and `sendmsg`)
//! and over a UNIX datagram socketpair (`sendmmsg`/`recvmmsg` of 100 messages); and a socket
//! handed to another process (`SCM_RIGHTS`), copied with `fcntl(F_DUPFD)` and `dup2`, and fed
//! by `sendfile` and `splice`. Each run must match every message, agree with the programs' own
//! counts and CPU times, and predict its own configuration's run time. `lbf-trace --procs`
//! must hand the events of a long run out while it runs, holding few, keep state only for the
//! connections open (a server handling thousands of short ones, over UNIX sockets and over TCP,
//! every socket identified), and say what went wrong when the count is not the program's.
//! Needs root; skips otherwise.

mod traced;

use lbf::capture::anomaly::Anomaly;
use lbf::capture::sockets::{resolve::ProcResolver, syscall, SocketCapture};
use lbf::capture::EventLog;
use lbf::event::EventKind;
use lbf::record::CaptureSink;
use traced::{
    can_trace, capture_reports, check, check_streamed, check_trace_file, kept_reports, lbf_trace,
    lbf_trace_without_outputs, parse_checks, predicted_so_far, read_trace, timed, trace, workload,
    NetnsPair, Traced,
};

/// Runs `command` with the socket capture.
fn trace_sockets(label: &str, command: &str) -> Traced {
    let sink = CaptureSink::new(
        SocketCapture::new(Box::new(ProcResolver::new()), "localhost"),
        EventLog::default(),
    );
    trace(
        label,
        command,
        |t| {
            t.record_syscalls(&syscall::traced())
                .expect("system call hooks")
        },
        sink,
        |s| {
            let (log, summary) = s.into_parts();
            (log, summary.expect("finished"))
        },
    )
}

/// A TCP port for this test process's runs.
fn port(offset: u32) -> u32 {
    20000 + std::process::id() % 20000 + offset
}

#[test]
fn spa_over_unix_sockets() {
    if !can_trace() {
        return;
    }
    let spa = workload("sockets", "spa", &[]);
    let path = std::env::temp_dir().join(format!("lbf-spa-{}.sock", std::process::id()));
    timed(|| {
        check(
            &trace_sockets(
                "spa-unix",
                &format!("{} all unix:{} 20 12", spa.display(), path.display()),
            ),
            4,
        )
    });
}

#[test]
fn spa_over_tcp_between_two_network_namespaces() {
    if !can_trace() {
        return;
    }
    let spa = workload("sockets", "spa", &[]);
    let ns = NetnsPair::new(1);
    let endpoint = format!("tcp:{}:{}", ns.addrs[0], port(1));
    let (a, b, spa) = (&ns.names[0], &ns.names[1], spa.display());
    let command = format!(
        "ip netns exec {a} {spa} server {endpoint} 3 20 12 & \
         for id in 0 1 2; do ip netns exec {b} {spa} client {endpoint} $id 20 12 & done; wait"
    );
    timed(|| check(&trace_sockets("spa-netns", &command), 4));
}

#[test]
fn tsp_over_tcp_on_ipv6_loopback() {
    if !can_trace() {
        return;
    }
    let tsp = workload("sockets", "tsp", &[]);
    timed(|| {
        check(
            &trace_sockets(
                "tsp-ipv6",
                &format!("{} all tcp:[::1]:{} 3 48 10", tsp.display(), port(2)),
            ),
            4,
        )
    });
}

/// UDP requests sent with `send` on a connected socket and with `sendmsg` naming the server
/// on an unconnected one; answers by `sendto` and by `sendmsg` naming the client.
#[test]
fn datagrams_over_udp_to_addresses_named_by_sendto_and_sendmsg() {
    if !can_trace() {
        return;
    }
    let dgram = workload("sockets", "dgram", &[]);
    timed(|| {
        check(
            &trace_sockets(
                "dgram-udp",
                &format!("{} udp {} 30 4", dgram.display(), port(3)),
            ),
            2,
        )
    });
}

/// 100 datagrams per `sendmmsg` and `recvmmsg` call: more than one record of the kernel side
/// holds, each a message of its own.
#[test]
fn datagrams_over_a_unix_socketpair_with_long_sendmmsg_and_recvmmsg_vectors() {
    if !can_trace() {
        return;
    }
    let dgram = workload("sockets", "dgram", &[]);
    timed(|| {
        check(
            &trace_sockets("dgram-unix", &format!("{} unix 30 4", dgram.display())),
            2,
        )
    });
}

/// A socket received over a UNIX socket (`SCM_RIGHTS`), used through copies made by
/// `fcntl(F_DUPFD)` and `dup2`, its peer sending with `sendfile` and `splice`.
#[test]
fn a_handed_over_socket_fed_by_sendfile_and_splice() {
    if !can_trace() {
        return;
    }
    let handoff = workload("sockets", "handoff", &[]);
    timed(|| {
        check(
            &trace_sockets("handoff", &format!("{} 30 4", handoff.display())),
            2,
        )
    });
}

#[test]
fn a_program_without_sockets_is_named() {
    if !can_trace() {
        return;
    }
    let t = trace_sockets("no-sockets", "echo hello");
    assert!(t.summary.procs.is_empty());
    let seen = t
        .summary
        .anomalies
        .keys()
        .find_map(|k| match k {
            Anomaly::NoSocketUsed { seen } => Some(seen),
            _ => None,
        })
        .expect("a note saying no process used sockets");
    assert!(seen.iter().any(|p| p.starts_with("sh[")), "{seen:?}");
}

#[test]
fn lbf_trace_names_a_process_that_uses_no_sockets() {
    if !can_trace() {
        return;
    }
    let run = lbf_trace("no-sockets", &["--", "true"]);
    let (code, err) = (run.code, run.stderr);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("nothing to predict") && err.contains("true["),
        "{err}"
    );
    // Asked for no trace and no prediction, it says so and exits with the command's status.
    let run = lbf_trace_without_outputs(&["--", "sh", "-c", "exit 3"]);
    let (code, err) = (run.code, run.stderr);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("nothing captured") && err.contains("sh["),
        "{err}"
    );
}

/// `--nice N` lowers lbf-trace's own priority while it captures; the command it runs keeps
/// the priority lbf-trace was started with.
#[test]
fn lbf_trace_reads_at_the_niceness_asked_and_leaves_the_command_at_its_own() {
    if !can_trace() {
        return;
    }
    // Field 19 of /proc/PID/stat: the niceness. The command's parent is lbf-trace, which
    // sets its own once the command runs.
    let script = "sleep 0.5; echo LBF-NICE command=$(cut -d' ' -f19 /proc/$$/stat) \
                  tracer=$(cut -d' ' -f19 /proc/$PPID/stat)";
    let run = lbf_trace_without_outputs(&["--nice", "19", "--", "sh", "-c", script]);
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("LBF-NICE"))
        .unwrap_or_else(|| panic!("{}\n{}", run.stdout, run.stderr));
    // SAFETY: getpriority has no memory preconditions; `who` 0 is the calling thread, whose
    // niceness lbf-trace was started with (the harness runs it from this thread).
    let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    assert_eq!(
        line,
        format!("LBF-NICE command={ours} tracer=19"),
        "{}",
        run.stderr
    );
}

#[test]
fn lbf_trace_says_which_socket_family_it_does_not_capture() {
    if !can_trace() {
        return;
    }
    // `ip` talks to the kernel over a netlink socket only.
    let run = lbf_trace(
        "netlink",
        &["--source", "sockets", "--", "ip", "link", "show", "lo"],
    );
    let (code, err) = (run.code, run.stderr);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("socket of a family lbf does not capture"),
        "{err}"
    );
}

/// `lbf-trace -- PROGRAM` run directly (no shell): the command is traced before its exec, and
/// the files its loader reads must not be taken for the sockets that reuse their numbers.
#[test]
fn a_command_run_directly_has_exactly_its_own_messages() {
    if !can_trace() {
        return;
    }
    let handoff = workload("sockets", "handoff", &[]);
    let run = lbf_trace(
        "direct",
        &[
            "--source",
            "sockets",
            "--",
            &handoff.to_string_lossy(),
            "30",
            "4",
        ],
    );
    let (stdout, stderr, out) = (run.stdout, run.stderr, run.trace);
    assert_eq!(run.code, 0, "{stdout}\n{stderr}");
    let field = |name: &str| -> u64 {
        stdout
            .lines()
            .filter(|l| l.starts_with("LBF-CHECK"))
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|f| f.strip_prefix(&format!("{name}=")))
            })
            .map(|n| n.parse::<u64>().unwrap())
            .sum()
    };
    let trace = std::fs::read_to_string(&out).unwrap();
    let count = |kind: &str| trace.matches(&format!("\"k\":\"{kind}\"")).count() as u64;
    assert!(field("recvs") > 0, "{stdout}");
    assert_eq!(
        (count("send"), count("recv_end")),
        (field("sends"), field("recvs")),
        "{stderr}"
    );
}

/// `lbf-trace --source sockets --interval 0.4 OPTIONS -o FILE -- spa all unix:PATH ITERS 2`:
/// the SPA server and its 3 clients for `iters` rounds.
fn spa_under_lbf_trace(label: &str, iters: &str, options: &[&str]) -> traced::TraceRun {
    let spa = workload("sockets", "spa", &[]);
    let path = std::env::temp_dir().join(format!("lbf-{label}-{}.sock", std::process::id()));
    let endpoint = format!("unix:{}", path.display());
    let mut args = vec!["--source", "sockets", "--interval", "0.4"];
    args.extend(options);
    let spa = spa.to_string_lossy();
    args.extend(["--", &spa, "all", &endpoint, iters, "2"]);
    lbf_trace(label, &args)
}

/// With `--procs`, a long socket run's events reach the trace and the live prediction while
/// it runs, and the capture holds only the few whose messages are not settled yet (without
/// it, all of them until the end: tens of thousands here). The trace is complete.
#[test]
fn lbf_trace_with_procs_hands_a_socket_run_out_while_it_runs() {
    if !can_trace() {
        return;
    }
    let run = spa_under_lbf_trace("spa-live", "400", &["--procs", "4", "--nodes", "2"]);
    check_trace_file(&run, 4);
    let held = check_streamed(&run, 200);
    eprintln!("held at most {held} events");
    let bounds = predicted_so_far(&run.stderr);
    assert!(
        bounds.iter().filter(|&&s| s > 0.0).count() >= 2,
        "no live prediction while the program ran:\n{}",
        run.stderr
    );
}

/// More processes than `--procs` said: the one beyond is left out of the trace, named in a
/// warning, its events counted as lost (in the reports, the error line and the trace's
/// summary), and the trace stays consistent enough to replay.
#[test]
fn lbf_trace_with_too_small_procs_leaves_the_process_beyond_out_and_says_so() {
    if !can_trace() {
        return;
    }
    let run = spa_under_lbf_trace("spa-too-few", "100", &["--procs", "3"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error: more processes sent or received than the 3 expected")
            && run
                .stderr
                .contains("used a socket after the 3 expected processes had"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("lost (processes beyond --procs)"),
        "{}",
        run.stderr
    );
    let (procs, _, summary) = read_trace(&run.trace);
    assert_eq!(procs.len(), 3);
    assert!(summary.lost_events > 0);
    let replay = std::process::Command::new(env!("CARGO_BIN_EXE_lbf-gag"))
        .args(["predict", "--nodes", "1"])
        .arg(&run.trace)
        .output()
        .expect("running lbf-gag");
    let err = String::from_utf8_lossy(&replay.stderr);
    assert!(replay.status.success(), "{err}");
    assert!(
        err.contains(&format!("lost {} events", summary.lost_events)),
        "{err}"
    );
}

/// A count never reached: nothing flows while the program runs, everything is handed out at
/// the end (the trace as complete as without a count), with a note.
#[test]
fn lbf_trace_with_a_count_never_reached_hands_everything_out_at_the_end() {
    if !can_trace() {
        return;
    }
    let run = spa_under_lbf_trace("spa-too-many", "100", &["--procs", "5"]);
    check_trace_file(&run, 4);
    assert!(
        run.stderr.contains(
            "fewer processes used a socket than the 5 expected (--procs or the targets' \
             processes): 4 did"
        ),
        "{}",
        run.stderr
    );
    assert!(capture_reports(&run.stderr)
        .iter()
        .all(|&(handed, _)| handed == 0));
}

/// Without --procs a socket capture holds every event until the program ends: past
/// --max-held it stops, as Ctrl-C would, writes what it has, and lets the program run on.
#[test]
fn lbf_trace_stops_a_capture_that_holds_more_than_max_held() {
    if !can_trace() {
        return;
    }
    let run = spa_under_lbf_trace("spa-max-held", "400", &["--max-held", "100"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("stopping the capture: it holds")
            && run.stderr.contains("more than --max-held 100"),
        "{}",
        run.stderr
    );
    // The program ran to its end, untraced after the stop.
    assert_eq!(parse_checks(&run.stdout).len(), 4, "{}", run.stdout);
    let (_, events, summary) = read_trace(&run.trace);
    assert!(!events.is_empty() && summary.measured_seconds > 0.0);
    let full: u64 = parse_checks(&run.stdout)
        .iter()
        .map(|c| c.num("recvs"))
        .sum();
    let received = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RecvEnd { .. }))
        .count() as u64;
    assert!(
        received < full,
        "{received} receives of {full}: the capture did not stop"
    );
}

#[test]
fn lbf_trace_refuses_procs_the_targets_contradict() {
    if !can_trace() {
        return;
    }
    let target = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/targets/two-nodes.toml"
    );
    let run = lbf_trace(
        "procs-vs-target",
        &[
            "--source", "sockets", "--procs", "3", "--target", target, "--", "true",
        ],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--procs 3, but the --target files place 4 processes"),
        "{}",
        run.stderr
    );
}

/// Connections the `conns` workload's client keeps open at most (its `MAX_OPEN`).
const CONNS_OPEN: u64 = 400;

/// An HTTP-like server answering 3,000 short connections at `endpoint` (a greeting, one
/// request and one reply each, the client computing 1 ms before each, closing each after
/// 500 ms), under `lbf-trace --procs 2`: every socket is identified and every message
/// matched, and what the capture keeps stays bounded by the connections open at once (at most
/// 400) while the connections handled grow past that: a closed connection's channels and
/// descriptors are freed. Keeping them, it would hold two channels per connection ever made.
fn conns_keep_only_the_open_connections(label: &str, endpoint: &str) {
    let conns = workload("sockets", "conns", &[]);
    let conns = conns.to_string_lossy();
    let run = lbf_trace(
        label,
        &[
            "--source",
            "sockets",
            "--procs",
            "2",
            "--interval",
            "0.2",
            "--",
            &conns,
            "all",
            endpoint,
            "3000",
            "500",
            "1",
        ],
    );
    check_trace_file(&run, 2);
    assert!(
        !run.stderr.contains("before lbf could identify it"),
        "{}",
        run.stderr
    );
    let kept = kept_reports(&run.stderr);
    eprintln!("kept: {kept:?}");
    assert!(kept.len() >= 3, "too few reports:\n{}", run.stderr);
    // Both ends of each open connection, and the server's side closing a little later.
    let bound = 2 * CONNS_OPEN + 200;
    for k in &kept {
        assert!(
            k.channels <= bound && k.descriptors <= bound && k.processes <= 2,
            "kept {k:?}, more than the open connections need: {kept:?}"
        );
    }
    // 9 events per connection (a greeting, a request and a reply, each a send, a receive's
    // start and its end): reports after more connections than the bound allows for.
    assert!(
        kept.iter().filter(|k| k.handed / 9 > bound).count() >= 2,
        "no report after enough connections: {kept:?}"
    );
}

/// [`conns_keep_only_the_open_connections`] over a UNIX socket.
#[test]
fn lbf_trace_keeps_only_the_open_connections_of_a_server_with_many_short_ones() {
    if !can_trace() {
        return;
    }
    let path = std::env::temp_dir().join(format!("lbf-conns-{}.sock", std::process::id()));
    conns_keep_only_the_open_connections("conns", &format!("unix:{}", path.display()));
}

/// [`conns_keep_only_the_open_connections`] over TCP on loopback: every connection's sockets
/// identified although the host then has thousands of connections in `TIME_WAIT` (the
/// client's ends, closed first), which a lookup in `/proc/net/tcp` has to read through.
#[test]
fn lbf_trace_identifies_every_tcp_connection_of_a_server_with_many_short_ones() {
    if !can_trace() {
        return;
    }
    conns_keep_only_the_open_connections("conns-tcp", &format!("tcp:127.0.0.1:{}", port(7)));
}
