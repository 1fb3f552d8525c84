//! The socket capture end to end, under the real eBPF tracer: the SPA client/server and the
//! TSP-like master/worker of `tests/workloads/sockets`, over UNIX sockets, TCP on IPv6
//! loopback, and TCP between two network namespaces joined by a veth pair; datagram ping-pong
//! over UDP (connected and unconnected sockets, destinations named by `sendto` and `sendmsg`)
//! and over a UNIX datagram socketpair (`sendmmsg`/`recvmmsg` of 100 messages); and a socket
//! handed to another process (`SCM_RIGHTS`), copied with `fcntl(F_DUPFD)` and `dup2`, and fed
//! by `sendfile` and `splice`. Each run must match every message, agree with the programs' own
//! counts and CPU times, and predict its own configuration's run time. Needs root; skips
//! otherwise.

mod traced;

use lbf::capture::sockets::{resolve::ProcResolver, syscall, SocketCapture};
use lbf::capture::{CaptureSink, EventLog};
use traced::{can_trace, check, timed, trace, workload, NetnsPair, Traced};

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
    let note = t
        .summary
        .anomalies
        .keys()
        .find(|k| k.starts_with("no traced process used"))
        .expect("a note saying no process used sockets");
    assert!(note.contains("sh["), "{note}");
}

/// Runs `lbf-trace -o FILE -- command...`; returns its exit status and standard error.
fn lbf_trace(args: &[&str]) -> (i32, String) {
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bad-input.trace.jsonl");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lbf-trace"))
        .arg("-o")
        .arg(&out)
        .args(args)
        .output()
        .expect("running lbf-trace");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn lbf_trace_names_a_process_that_uses_no_sockets() {
    if !can_trace() {
        return;
    }
    let (code, err) = lbf_trace(&["--", "true"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("nothing to predict") && err.contains("true["),
        "{err}"
    );
}

#[test]
fn lbf_trace_says_which_socket_family_it_does_not_capture() {
    if !can_trace() {
        return;
    }
    // `ip` talks to the kernel over a netlink socket only.
    let (code, err) = lbf_trace(&["--source", "sockets", "--", "ip", "link", "show", "lo"]);
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
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("direct.trace.jsonl");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lbf-trace"))
        .arg("-o")
        .arg(&out)
        .args(["--source", "sockets", "--"])
        .arg(&handoff)
        .args(["30", "4"])
        .output()
        .expect("running lbf-trace");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{stdout}\n{stderr}");
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
