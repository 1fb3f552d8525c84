//! The builder's matching of connections between hosts against the socket capture of one host
//! that sees both ends: the same records, split between two node captures, must give the same
//! events whatever order their streams reach the builder in; and what is held is let go once
//! the ends are known done.

use super::*;
use lbf_capture::anomaly::Anomaly;
use lbf_capture::sockets::channels::StreamOp;
use lbf_capture::sockets::test_support::{call, ends, exit, short_connections_between, Table};
use lbf_capture::sockets::SocketCapture;
use lbf_capture::{EventLog, EventSink};
use lbf_common::syscalls::nr;
use lbf_common::Record;
use lbf_model::event::{EventKind, ProcInfo, ProcedureCpu};
use std::collections::HashMap;
use std::net::SocketAddr;

/// What a node's capture hands its sink, in order.
#[derive(Clone, Debug)]
enum Out {
    Event(NodeEvent),
    Closed(EndClosed),
}

/// A node's sink: numbers its processes with the global ids `ids` (the k-th to join takes the
/// k-th), as `lbf-node --procs` does.
struct NodeSink {
    ids: Vec<ProcId>,
    out: Vec<Out>,
}

impl EventSink for NodeSink {
    fn process(&mut self, _info: &ProcInfo) {}
    fn event(&mut self, e: &Event) {
        let proc = self.ids[e.proc as usize];
        self.out
            .push(Out::Event(NodeEvent::Event(Event { proc, ..*e })));
    }
    fn stream_op(&mut self, proc: ProcId, cpu_ns: u64, _: &ProcedureCpu, op: &StreamOp) {
        let proc = self.ids[proc as usize];
        let op = Box::new(*op);
        self.out
            .push(Out::Event(NodeEvent::Stream { proc, cpu_ns, op }));
    }
    fn stream_closed(&mut self, end: &EndClosed) {
        self.out.push(Out::Closed(*end));
    }
}

const SERVER: &str = "10.0.0.1";
const CLIENT: &str = "10.0.0.2";

fn tcp(ip: &str, port: u16) -> Endpoint {
    Endpoint::Inet {
        addr: SocketAddr::new(ip.parse().unwrap(), port),
        netns: 0,
    }
}

/// `n` short connections from a client on host CLIENT (process 2) to a server on host SERVER
/// (process 1): see [`short_connections_between`].
fn connections(n: i32, closes: bool) -> (Table, Vec<Record>) {
    short_connections_between(n, closes, |i| {
        (tcp(SERVER, 7000), tcp(CLIENT, 40_000 + i as u16))
    })
}

/// The records run through one capture seeing both hosts.
fn on_one_host(table: Table, records: &[Record]) -> EventLog {
    let mut c = SocketCapture::new(Box::new(table), "h").expecting(Some(2));
    let mut log = EventLog::default();
    for r in records {
        c.record(r, &mut log);
    }
    c.finish(&mut log);
    log
}

/// The records of process `tgid` run through a node's capture, its process taking id `id`.
fn on_node(table: Table, records: &[Record], tgid: u32, id: ProcId) -> Vec<Out> {
    let mut c = SocketCapture::new(Box::new(table), "h")
        .expecting(Some(1))
        .matching_between_hosts();
    let mut sink = NodeSink {
        ids: vec![id],
        out: Vec::new(),
    };
    for r in records.iter().filter(|r| r.tgid == tgid) {
        c.record(r, &mut sink);
    }
    let summary = c.finish(&mut sink);
    assert!(summary.anomalies.is_empty(), "{:?}", summary.anomalies);
    sink.out
}

/// A builder that knows nodes `s` (host SERVER) and `c` (host CLIENT).
fn matcher() -> StreamMatcher {
    let mut m = StreamMatcher::new();
    m.add_node("s", &[SERVER.parse().unwrap()]);
    m.add_node("c", &[CLIENT.parse().unwrap()]);
    m
}

/// Feeds `m` a batch of `items` of `node` as the applier does: events, then closes.
fn batch(m: &mut StreamMatcher, items: &[Out], out: &mut Ready) {
    for item in items {
        if let Out::Event(e) = item {
            m.push(e.clone(), &ProcedureCpu::NONE, out);
        }
    }
    for item in items {
        if let Out::Closed(end) = item {
            m.closed(*end, out);
        }
    }
}

/// Events per process with message ids renumbered in order of first appearance (process 0's
/// events first), so that two matchings are compared by which events they pair.
fn canonical(events: &[Event]) -> Vec<Vec<(u64, EventKind)>> {
    let procs = events.iter().map(|e| e.proc).max().map_or(0, |p| p + 1);
    let mut ids = HashMap::new();
    let mut out = Vec::new();
    for p in 0..procs {
        let mut mine = Vec::new();
        for e in events.iter().filter(|e| e.proc == p) {
            let mut id = |m: u64| {
                let next = ids.len() as u64 + 1;
                *ids.entry(m).or_insert(next)
            };
            let kind = e.kind.with_msg(&mut id);
            mine.push((e.cpu_ns, kind));
        }
        out.push(mine);
    }
    out
}

/// Runs the records `workload` makes through a capture of both hosts and through a node's
/// capture on each (process 1 on host SERVER, process 2 on host CLIENT, which joins first)
/// with the builder matching what they report, the nodes' streams reaching it wholly one
/// after the other, alternating in batches of about `per_round` items each (the server's and
/// the client's, in a round), or in batches of random sizes from either at random: the events
/// must be those of the capture of both hosts every time. Returns the most connection
/// directions the builder kept at once in the alternating order.
fn same_as_one_host(
    workload: impl Fn() -> (Table, Vec<Record>),
    per_round: (usize, usize),
) -> usize {
    let (table, records) = workload();
    let reference = canonical(&on_one_host(table, &records).events);
    assert_eq!(reference.len(), 2);
    let node = |tgid, id| {
        let (table, records) = workload();
        on_node(table, &records, tgid, id)
    };
    let (server, client) = (node(1, 1), node(2, 0));
    assert!(server
        .iter()
        .any(|o| matches!(o, Out::Event(NodeEvent::Stream { .. }))));

    let whole = |first: &'static str, a: &[Out], second: &'static str, b: &[Out]| {
        vec![(first, a.to_vec()), (second, b.to_vec())]
    };
    // A round of each node at a time, the client a batch ahead.
    let (per_s, per_c) = per_round;
    let mut alternating = vec![("c", client[..per_c].to_vec())];
    let (mut s, mut c) = (server.chunks(per_s), client[per_c..].chunks(per_c));
    loop {
        match (s.next(), c.next()) {
            (None, None) => break,
            (a, b) => {
                alternating.extend(a.map(|a| ("s", a.to_vec())));
                alternating.extend(b.map(|b| ("c", b.to_vec())));
            }
        }
    }
    let mut orders = vec![
        (
            "server first".to_string(),
            whole("s", &server, "c", &client),
        ),
        (
            "client first".to_string(),
            whole("c", &client, "s", &server),
        ),
        ("alternating".to_string(), alternating),
    ];
    // Batches of 1 to 8 items from whichever node a pseudo-random draw names.
    for seed in 1..=30u64 {
        let mut state = seed;
        let mut draw = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let (mut s, mut c) = (&server[..], &client[..]);
        let mut batches = Vec::new();
        while !s.is_empty() || !c.is_empty() {
            let from_server = c.is_empty() || (!s.is_empty() && draw(2) == 0);
            let (name, rest) = if from_server {
                ("s", &mut s)
            } else {
                ("c", &mut c)
            };
            let k = (1 + draw(8) as usize).min(rest.len());
            batches.push((name, rest[..k].to_vec()));
            *rest = &rest[k..];
        }
        orders.push((format!("random {seed}"), batches));
    }
    let mut most_alternating = 0;
    for (name, batches) in orders {
        let mut m = matcher();
        let mut events = Ready::default();
        let mut most_directions = 0;
        let last = |node: &str| batches.iter().rposition(|(n, _)| *n == node).unwrap();
        let (last_s, last_c) = (last("s"), last("c"));
        for (i, (node, items)) in batches.iter().enumerate() {
            batch(&mut m, items, &mut events);
            most_directions = most_directions.max(m.view().directions);
            if i == last_s || i == last_c {
                m.node_ended(node, &mut events);
            }
        }
        m.finish(&mut events);
        assert_eq!(canonical(&events.events), reference, "{name}");
        let view = m.view();
        assert_eq!(view.held_events, 0, "{name}");
        assert_eq!(
            (view.unmatched_sends, view.unmatched_receives),
            (0, 0),
            "{name}"
        );
        if name == "alternating" {
            most_alternating = most_directions;
        }
    }
    most_alternating
}

/// Short connections between two hosts (see [`short_connections_between`]): matched as by a
/// capture of both hosts; and with the ends' closes the builder keeps the state of the
/// connections open only, both directions of a connection or two, not of every one made.
#[test]
fn short_connections_between_two_hosts_match_as_on_one() {
    // The server reports 5 things per connection, the client 7.
    let most = same_as_one_host(|| connections(200, true), (5, 7));
    assert!(most <= 6, "{most} directions kept");
}

/// The SPA's framing between two hosts: a 216-byte request read as 16 and 200, a reply sent as
/// 16 and 1000 and read in one read or two (every other round), and the client closing before
/// the server: matched as by a capture of both hosts. (A reply's first part read together
/// with the second must travel with it, also when the client's close overtakes the server's
/// sends at the builder.)
#[test]
fn the_spa_s_framing_between_two_hosts_matches_as_on_one() {
    let spa = || {
        let (server, client) = ends(tcp(SERVER, 7000), tcp(CLIENT, 40_000), true);
        let table = Table(HashMap::from([((1, 3), server), ((2, 3), client)]));
        let mut records = vec![
            call(2, nr::CONNECT, 3, 0, 0, 1),
            call(1, nr::ACCEPT, 9, 3, 0, 1),
        ];
        for i in 0..51u64 {
            let t = 10 + i * 100;
            records.extend([
                call(2, nr::WRITE, 3, 216, t, t + 10),
                call(1, nr::POLL, 99, 1, t, t + 11),
                call(1, nr::READ, 3, 16, t + 11, t + 12),
                call(1, nr::READ, 3, 200, t + 12, t + 13),
                call(1, nr::WRITE, 3, 16, t + 40, t + 41),
                call(1, nr::WRITE, 3, 1000, t + 41, t + 42),
            ]);
            if i % 2 == 0 {
                records.push(call(2, nr::READ, 3, 1016, t + 10, t + 43));
            } else {
                records.extend([
                    call(2, nr::READ, 3, 16, t + 10, t + 43),
                    call(2, nr::READ, 3, 1000, t + 43, t + 44),
                ]);
            }
        }
        records.extend([
            call(2, nr::CLOSE, 3, 0, 9000, 9001),
            exit(2, 9002),
            call(1, nr::READ, 3, 0, 9000, 9003),
            call(1, nr::CLOSE, 3, 0, 9003, 9004),
            exit(1, 9005),
        ]);
        (table, records)
    };
    // A round: the server reports 6 things, the client 2 or 4.
    same_as_one_host(spa, (6, 3));
}

/// A client whose server no node of the job holds (an address no node has): its sends are
/// unmatched at once, as in a capture that does not see the server, and nothing waits.
#[test]
fn a_peer_no_node_holds_is_unmatched_at_once() {
    let mut m = StreamMatcher::new();
    m.add_node("c", &[CLIENT.parse().unwrap()]);
    let dir = Direction {
        from: tcp(CLIENT, 40_000),
        to: tcp("192.0.2.9", 80),
    };
    let mut out = Ready::default();
    let op = |role, bytes| NodeEvent::Stream {
        proc: 0,
        cpu_ns: 5,
        op: Box::new(StreamOp { dir, role, bytes }),
    };
    m.push(op(Role::Send, 100), &ProcedureCpu::NONE, &mut out);
    m.push(
        NodeEvent::Event(ev(0, 1, EventKind::Exit)),
        &ProcedureCpu::NONE,
        &mut out,
    );
    assert_eq!(
        out.events,
        [ev(0, 5, EventKind::Keepalive), ev(0, 1, EventKind::Exit)]
    );
    assert_eq!(m.view().unmatched_sends, 1);
    assert_eq!(m.view().held_events, 0);
}

fn ev(proc: ProcId, cpu_ns: u64, kind: EventKind) -> Event {
    Event { proc, cpu_ns, kind }
}

/// A send or receive of `bytes` by `proc` after `cpu_ns`, on the connection from the
/// client's port 40000 to the server's port 7000, as a node reports it.
fn client_to_server(proc: ProcId, cpu_ns: u64, role: Role, bytes: u64) -> NodeEvent {
    let dir = Direction {
        from: tcp(CLIENT, 40_000),
        to: tcp(SERVER, 7000),
    };
    NodeEvent::Stream {
        proc,
        cpu_ns,
        op: Box::new(StreamOp { dir, role, bytes }),
    }
}

/// A sender's events wait for the receiver's reads from the other node; while they do, the
/// starved sender waits for that node (which must not be stopped); the receiver's node ending
/// after reading part of the send settles the rest as it would at the end of a capture.
#[test]
fn a_send_waits_for_the_other_node_and_its_end_settles_it() {
    let mut m = matcher();
    let op = |proc, role, bytes| client_to_server(proc, 10, role, bytes);
    let mut out = Ready::default();
    m.push(op(0, Role::Send, 100), &ProcedureCpu::NONE, &mut out);
    m.push(
        NodeEvent::Event(ev(0, 3, EventKind::Exit)),
        &ProcedureCpu::NONE,
        &mut out,
    );
    assert!(out.events.is_empty());
    assert_eq!(m.held_of(0), 2);
    assert_eq!(m.awaited(|p| p == 0), HashSet::from(["s".to_string()]));
    assert!(m.awaited(|_| false).is_empty());

    m.push(
        NodeEvent::Event(ev(1, 1, EventKind::RecvStart)),
        &ProcedureCpu::NONE,
        &mut out,
    );
    m.push(op(1, Role::Recv, 60), &ProcedureCpu::NONE, &mut out);
    // The receive's message is known (its last byte is sent), the send's cuts are not.
    assert_eq!(out.events.len(), 2);
    assert!(matches!(out.events[1].kind, EventKind::RecvEnd { .. }));
    m.node_ended("s", &mut out);
    let msg = match out.events[1].kind {
        EventKind::RecvEnd { msg } => msg,
        _ => unreachable!(),
    };
    assert_eq!(
        out.events[2..],
        [
            ev(
                0,
                10,
                EventKind::Send {
                    after: 0,
                    msg,
                    bytes: 100,
                    rendezvous: false
                }
            ),
            ev(0, 3, EventKind::Exit)
        ]
    );
    assert_eq!(m.view().held_events, 0);
}

/// The CPU in procedures that a node reports with a send or receive between hosts goes with
/// the first event made from it (a send cut into two messages: the first), and that of events
/// held behind it stays theirs, whether they went straight on or waited.
#[test]
fn procedure_shares_go_with_the_first_event_made_from_a_stream() {
    let mut m = matcher();
    let op = |proc, role, bytes| client_to_server(proc, 10, role, bytes);
    let share = |a, b| ProcedureCpu::from_slice(&[a, b]).unwrap();
    let mut out = Ready::default();
    m.push(op(0, Role::Send, 100), &share(4, 1), &mut out);
    let exit = NodeEvent::Event(ev(0, 3, EventKind::Exit));
    m.push(exit, &share(2, 0), &mut out);
    let start = NodeEvent::Event(ev(1, 1, EventKind::RecvStart));
    m.push(start, &share(0, 1), &mut out);
    m.push(op(1, Role::Recv, 60), &share(7, 0), &mut out);
    m.push(op(1, Role::Recv, 40), &ProcedureCpu::NONE, &mut out);
    let got: Vec<(ProcId, &str, u64, ProcedureCpu)> = out
        .drain()
        .map(|(e, s)| {
            let kind = match e.kind {
                EventKind::Send { .. } => "send",
                EventKind::RecvEnd { .. } => "recv_end",
                EventKind::RecvStart => "recv_start",
                EventKind::Exit => "exit",
                _ => "other",
            };
            (e.proc, kind, e.cpu_ns, s)
        })
        .collect();
    let of = |p| -> Vec<_> { got.iter().filter(|g| g.0 == p).cloned().collect() };
    assert_eq!(
        of(0),
        [
            (0, "send", 10, share(4, 1)),
            (0, "send", 0, ProcedureCpu::NONE),
            (0, "exit", 3, share(2, 0)),
        ]
    );
    assert_eq!(
        of(1),
        [
            (1, "recv_start", 1, share(0, 1)),
            (1, "recv_end", 10, share(7, 0)),
            (1, "recv_end", 10, ProcedureCpu::NONE),
        ]
    );
    assert!(out.events.is_empty());
}

/// An end's close may arrive before its last events (another batch, another process's stream
/// on the node): the direction is let go only once the bytes the close counts are matched.
#[test]
fn a_close_ahead_of_its_end_s_events_waits_for_them() {
    let mut m = matcher();
    let dir = Direction {
        from: tcp(CLIENT, 40_000),
        to: tcp(SERVER, 7000),
    };
    let op = |proc, role, bytes| NodeEvent::Stream {
        proc,
        cpu_ns: 1,
        op: Box::new(StreamOp { dir, role, bytes }),
    };
    let mut out = Ready::default();
    for role in [Role::Send, Role::Recv] {
        m.closed(
            EndClosed {
                dir,
                role,
                bytes: 50,
            },
            &mut out,
        );
    }
    assert_eq!(m.view().directions, 1);
    m.push(op(0, Role::Send, 20), &ProcedureCpu::NONE, &mut out);
    m.push(op(1, Role::Recv, 20), &ProcedureCpu::NONE, &mut out);
    m.push(op(0, Role::Send, 30), &ProcedureCpu::NONE, &mut out);
    assert_eq!(m.view().directions, 1, "30 bytes are not received yet");
    m.push(op(1, Role::Recv, 30), &ProcedureCpu::NONE, &mut out);
    assert_eq!(m.view().directions, 0);
    assert_eq!(m.view().messages, 2);
    assert_eq!(out.events.len(), 4);
}

/// A node's capture matches itself what it sees both ends of (a TCP connection on loopback),
/// leaves UDP datagrams unmatched (their other end may be on another host; noted), and hands
/// on, in their place, the sends and receives of a TCP connection that may join hosts, then
/// its ends' closes with the bytes each moved.
#[test]
fn a_node_matches_local_connections_and_hands_on_those_between_hosts() {
    let inet = |ip: &str, port, netns| Endpoint::Inet {
        addr: SocketAddr::new(ip.parse().unwrap(), port),
        netns,
    };
    let (lo1, lo2) = ends(
        inet("127.0.0.1", 5000, 7),
        inet("127.0.0.1", 40_001, 7),
        true,
    );
    let (udp1, udp2) = ends(inet("0.0.0.0", 9000, 0), inet("0.0.0.0", 9001, 0), false);
    let (far, _) = ends(tcp(CLIENT, 40_000), tcp(SERVER, 7000), true);
    let table = Table(HashMap::from([
        ((1, 3), lo1),
        ((2, 3), lo2),
        ((1, 4), udp1),
        ((2, 4), udp2),
        ((1, 6), far),
    ]));
    let mut c = SocketCapture::new(Box::new(table), "h")
        .expecting(Some(2))
        .matching_between_hosts();
    let mut sink = NodeSink {
        ids: vec![0, 1],
        out: Vec::new(),
    };
    for r in [
        call(1, nr::CONNECT, 6, 0, 0, 1),
        call(1, nr::WRITE, 3, 100, 1, 2),
        call(2, nr::READ, 3, 100, 1, 3),
        call(1, nr::WRITE, 4, 8, 2, 3),
        call(2, nr::READ, 4, 8, 3, 4),
        call(1, nr::WRITE, 6, 50, 3, 4),
        call(1, nr::READ, 6, 20, 4, 6),
        call(1, nr::CLOSE, 6, 0, 6, 7),
        exit(1, 8),
        exit(2, 5),
    ] {
        c.record(&r, &mut sink);
    }
    let summary = c.finish(&mut sink);
    assert_eq!(summary.anomalies.len(), 1, "{:?}", summary.anomalies);
    assert_eq!(
        summary.anomalies[&Anomaly::UdpUnmatched],
        2,
        "the datagram's send and its receive"
    );
    assert_eq!((summary.unmatched_sends, summary.unmatched_recvs), (1, 1));

    let dir = Direction {
        from: tcp(CLIENT, 40_000),
        to: tcp(SERVER, 7000),
    };
    let back = Direction {
        from: dir.to,
        to: dir.from,
    };
    let process_0: Vec<String> = sink
        .out
        .iter()
        .filter_map(|o| match o {
            Out::Event(NodeEvent::Event(e)) if e.proc == 0 => Some(format!("{:?}", e.kind)),
            Out::Event(NodeEvent::Stream { proc: 0, op, .. }) => {
                Some(format!("{:?} {}", op.role, op.bytes))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        process_0,
        [
            "Send { msg: 1, bytes: 100, rendezvous: false, after: 0 }",
            "Keepalive",
            "Send 50",
            "RecvStart",
            "Recv 20",
            "Exit"
        ]
    );
    let closed: Vec<EndClosed> = sink
        .out
        .iter()
        .filter_map(|o| match o {
            Out::Closed(end) => Some(*end),
            Out::Event(_) => None,
        })
        .collect();
    assert_eq!(
        closed,
        [
            EndClosed {
                dir: back,
                role: Role::Recv,
                bytes: 20
            },
            EndClosed {
                dir,
                role: Role::Send,
                bytes: 50
            }
        ]
    );
}

/// The receiver's close may reach the builder while a send it read is not known to be read
/// yet: the receive waits for a later send's bytes (two sends read by one receive). That send
/// is consumed, not left over: its bytes travel with the next, and nothing is unmatched.
#[test]
fn a_receiver_closed_before_the_second_of_two_sends_it_read_together() {
    let mut m = matcher();
    let dir = Direction {
        from: tcp(SERVER, 7000),
        to: tcp(CLIENT, 40_000),
    };
    let op = |proc, role, bytes| NodeEvent::Stream {
        proc,
        cpu_ns: 1,
        op: Box::new(StreamOp { dir, role, bytes }),
    };
    let mut out = Ready::default();
    m.push(op(1, Role::Send, 16), &ProcedureCpu::NONE, &mut out);
    m.push(op(0, Role::Recv, 1016), &ProcedureCpu::NONE, &mut out);
    let closed = EndClosed {
        dir,
        role: Role::Recv,
        bytes: 1016,
    };
    m.closed(closed, &mut out);
    m.push(op(1, Role::Send, 1000), &ProcedureCpu::NONE, &mut out);
    let of = |p| -> Vec<EventKind> {
        out.events
            .iter()
            .filter(|e| e.proc == p)
            .map(|e| e.kind)
            .collect()
    };
    let msg = match of(0)[..] {
        [EventKind::RecvEnd { msg }] => msg,
        ref other => panic!("{other:?}"),
    };
    assert_eq!(
        of(1),
        [
            EventKind::Keepalive,
            EventKind::Send {
                after: 0,
                msg,
                bytes: 1016,
                rendezvous: false
            }
        ]
    );
    assert_eq!(
        (m.view().unmatched_sends, m.view().unmatched_receives),
        (0, 0)
    );
}
