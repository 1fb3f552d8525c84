//! Socket matching on hand-made records, with a table for a resolver: byte streams cut into
//! messages, records out of order, datagrams, waits, descriptors that are no sockets.

use std::collections::HashMap;

use lbf_common::{syscalls::nr, Record, RecordKind};

use super::channels::Endpoint;
use super::resolve::Unidentified;
use super::test_support::{call, ends, exit, short_connections_between, Table};
use super::{SocketCapture, LABELS};
use crate::anomaly::Anomaly;
use crate::record_capture::Kept;
use crate::{EventLog, Summary};
use lbf_model::event::EventKind;

fn table() -> Table {
    let u = |inode| Endpoint::Unix { inode };
    let (s1, s2) = ends(u(10), u(11), true);
    let (d1, d2) = ends(u(20), u(21), false);
    Table(HashMap::from([
        ((1, 3), s1),
        ((2, 3), s2),
        ((1, 4), d1),
        ((2, 4), d2),
    ]))
}

fn run(records: &[Record]) -> (EventLog, Summary) {
    let run = run_expecting(records, None);
    (run.log, run.summary)
}

/// What a capture expecting some processes did.
struct Streamed {
    log: EventLog,
    summary: Summary,
    /// Events the sink had before the capture finished.
    before_finish: usize,
    /// The most events the capture held at once.
    most_held: usize,
    /// The most channels, descriptors and processes it kept at once (each its own most).
    most_kept: Kept,
    /// What it kept after the last record.
    kept_at_end: Kept,
}

/// Runs `records` through a capture expecting `expected` processes (`None`: no count).
fn run_expecting(records: &[Record], expected: Option<usize>) -> Streamed {
    run_on(table(), records, expected)
}

/// Runs `records` through a capture resolving descriptors by `table`, expecting `expected`
/// processes.
fn run_on(table: Table, records: &[Record], expected: Option<usize>) -> Streamed {
    let mut c = SocketCapture::new(Box::new(table), "h").expecting(expected);
    let mut log = EventLog::default();
    let (mut most_held, mut most_kept) = (0, Kept::default());
    let kept = |c: &SocketCapture| c.backlog().kept.expect("a socket capture tells");
    for r in records {
        c.record(r, &mut log);
        most_held = most_held.max(c.backlog().held_events);
        let k = kept(&c);
        most_kept = Kept {
            channels: most_kept.channels.max(k.channels),
            descriptors: most_kept.descriptors.max(k.descriptors),
            processes: most_kept.processes.max(k.processes),
        };
    }
    let before_finish = log.events.len();
    let kept_at_end = kept(&c);
    let summary = c.finish(&mut log);
    Streamed {
        log,
        summary,
        before_finish,
        most_held,
        most_kept,
        kept_at_end,
    }
}

/// `rounds` requests of 100 bytes from process 1, each read in two parts by process 2 and
/// answered with 10 bytes read by a `poll` and a `read`; then both exit.
fn ping_pong(rounds: u64) -> Vec<Record> {
    let mut records = Vec::new();
    for i in 0..rounds {
        let t = i * 100;
        records.extend([
            call(1, nr::WRITE, 3, 100, t, t + 1),
            call(2, nr::READ, 3, 60, t, t + 2),
            call(2, nr::READ, 3, 40, t + 2, t + 3),
            call(2, nr::WRITE, 3, 10, t + 40, t + 41),
            call(1, nr::POLL, 99, 1, t + 1, t + 2),
            call(1, nr::READ, 3, 10, t + 3, t + 4),
        ]);
    }
    records.extend([exit(1, rounds * 100), exit(2, rounds * 100)]);
    records
}

/// The events of process `p` as `(cpu_ns, kind)`.
fn of(log: &EventLog, p: u32) -> Vec<(u64, EventKind)> {
    log.events
        .iter()
        .filter(|e| e.proc == p)
        .map(|e| (e.cpu_ns, e.kind))
        .collect()
}

#[test]
fn one_send_read_by_two_receives_becomes_two_messages() {
    let (log, s) = run(&[
        call(1, nr::WRITE, 3, 100, 5, 10),
        call(2, nr::READ, 3, 40, 1, 2),
        call(2, nr::READ, 3, 60, 3, 4),
        exit(1, 12),
        exit(2, 6),
    ]);
    use EventKind::*;
    assert_eq!(
        of(&log, 0),
        vec![
            (
                10,
                Send {
                    after: 0,
                    msg: 1,
                    bytes: 40,
                    rendezvous: false
                }
            ),
            (
                0,
                Send {
                    after: 40,
                    msg: 2,
                    bytes: 60,
                    rendezvous: false
                }
            ),
            (2, Exit)
        ]
    );
    assert_eq!(
        of(&log, 1),
        vec![
            (1, RecvStart),
            (1, RecvEnd { msg: 1 }),
            (1, RecvStart),
            (1, RecvEnd { msg: 2 }),
            (2, Exit)
        ]
    );
    assert_eq!((s.unmatched_sends, s.unmatched_recvs), (0, 0));
    assert_eq!((s.stats[0].sends, s.stats[0].send_bytes), (1, 100));
    assert_eq!((s.stats[1].recvs, s.stats[1].recv_bytes), (2, 100));
    assert_eq!(s.stats[0].cpu_ns, 12);
}

#[test]
fn sends_read_by_one_receive_travel_with_the_last_one() {
    let (log, s) = run(&[
        call(1, nr::SENDTO, 3, 8, 0, 1),
        call(1, nr::WRITEV, 3, 92, 1, 2),
        call(2, nr::RECVFROM, 3, 100, 0, 5),
    ]);
    use EventKind::*;
    assert_eq!(
        of(&log, 0),
        vec![
            (1, Keepalive),
            (
                1,
                Send {
                    after: 0,
                    msg: 1,
                    bytes: 100,
                    rendezvous: false
                }
            ),
            (0, Exit)
        ]
    );
    assert_eq!(
        of(&log, 1),
        vec![(0, RecvStart), (5, RecvEnd { msg: 1 }), (0, Exit)]
    );
    assert_eq!(s.anomalies[&Anomaly::StillRunning { labels: LABELS }], 2);
}

#[test]
fn a_receive_recorded_before_its_send_waits_for_it() {
    let (log, s) = run(&[
        call(2, nr::READ, 3, 30, 0, 5),
        call(1, nr::WRITE, 3, 20, 0, 1),
        call(1, nr::WRITE, 3, 20, 1, 2),
        call(2, nr::READ, 3, 10, 5, 6),
    ]);
    use EventKind::*;
    // Process 2 used a socket first: it is process 0.
    assert_eq!(
        of(&log, 1),
        vec![
            (1, Keepalive),
            (
                1,
                Send {
                    after: 0,
                    msg: 1,
                    bytes: 30,
                    rendezvous: false
                }
            ),
            (
                0,
                Send {
                    after: 30,
                    msg: 2,
                    bytes: 10,
                    rendezvous: false
                }
            ),
            (0, Exit)
        ]
    );
    assert_eq!(
        of(&log, 0),
        vec![
            (0, RecvStart),
            (5, RecvEnd { msg: 1 }),
            (0, RecvStart),
            (1, RecvEnd { msg: 2 }),
            (0, Exit)
        ]
    );
    assert_eq!((s.unmatched_sends, s.unmatched_recvs), (0, 0));
}

#[test]
fn datagrams_are_whole_messages() {
    let (log, _) = run(&[
        call(1, nr::SENDMSG, 4, 50, 0, 1),
        call(1, nr::SENDMSG, 4, 70, 1, 2),
        call(2, nr::RECVMSG, 4, 50, 0, 1),
        call(2, nr::RECVMSG, 4, 70, 1, 2),
    ]);
    use EventKind::*;
    let sends: Vec<_> = of(&log, 0).into_iter().map(|(_, k)| k).collect();
    assert_eq!(
        sends[..2],
        [
            Send {
                after: 0,
                msg: 1,
                bytes: 50,
                rendezvous: false
            },
            Send {
                after: 0,
                msg: 2,
                bytes: 70,
                rendezvous: false
            }
        ]
    );
}

#[test]
fn a_poll_before_a_receive_is_the_wait() {
    let (log, _) = run(&[
        call(1, nr::WRITE, 3, 10, 0, 1),
        call(2, nr::POLL, 99, 1, 4, 5),
        call(2, nr::READ, 3, 10, 7, 8),
        exit(2, 20),
    ]);
    use EventKind::*;
    // Waiting from the poll's entry (CPU 4) to its return (5); the rest is work.
    assert_eq!(
        of(&log, 1),
        vec![(4, RecvStart), (1, RecvEnd { msg: 1 }), (15, Exit)]
    );
}

#[test]
fn a_poll_followed_by_other_calls_is_no_wait_for_a_later_receive() {
    let (log, _) = run(&[
        call(1, nr::WRITE, 3, 10, 0, 1),
        call(2, nr::POLL, 99, 1, 4, 5),
        call(2, nr::WRITE, 1, 10, 6, 7),
        call(2, nr::READ, 3, 10, 9, 10),
    ]);
    use EventKind::*;
    assert_eq!(of(&log, 1)[..2], [(9, RecvStart), (1, RecvEnd { msg: 1 })]);
}

#[test]
fn other_descriptors_and_refused_sockets_stay_out() {
    let (log, s) = run(&[
        call(1, nr::WRITE, 1, 10, 0, 1),
        call(1, nr::WRITE, 5, 10, 1, 2),
        call(1, nr::WRITE, 5, 10, 2, 3),
    ]);
    assert!(log.procs.is_empty() && log.events.is_empty());
    assert_eq!(
        s.anomalies[&Anomaly::SocketUnidentified(Unidentified::Family)],
        1
    );
}

/// A process that made a traced call before its exec (lbf-trace's own child, reading the
/// pipe it waits on for the command to start) is named by what it runs after the exec.
#[test]
fn a_process_seen_before_its_exec_is_named_by_what_it_runs() {
    let mut exec = call(4_000_000, 0, 0, 0, 2, 2);
    exec.kind = RecordKind::Exec as u16;
    let file = b"/usr/bin/true\0";
    exec.mem[..file.len()].copy_from_slice(file);
    exec.mem_len = file.len() as u16;
    let (_, s) = run(&[
        call(4_000_000, nr::READ, 0, 1, 0, 1),
        exec,
        exit(4_000_000, 3),
    ]);
    let seen = vec!["true[4000000]".to_string()];
    assert_eq!(
        s.anomalies[&Anomaly::NoSocketUsed { seen }],
        1,
        "{:?}",
        s.anomalies
    );
}

#[test]
fn bytes_never_read_are_unmatched() {
    let (_, s) = run(&[call(1, nr::WRITE, 3, 10, 0, 1), exit(1, 2)]);
    assert_eq!(s.unmatched_sends, 1);
}

/// `rec` as part `part` of its call, carrying the `u32` words `words` (message sizes).
fn with_words(mut rec: Record, part: u16, words: &[u32]) -> Record {
    rec.part = part;
    for (i, w) in words.iter().enumerate() {
        rec.mem[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    rec.mem_len = (words.len() * 4) as u16;
    rec
}

#[test]
fn a_message_vector_in_two_records_is_one_call_of_a_message_each() {
    use lbf_common::syscalls::WORDS_PER_PART;
    let n = WORDS_PER_PART + 6;
    let sizes: Vec<u32> = (1..=n as u32).collect();
    let (first, rest) = sizes.split_at(WORDS_PER_PART);
    let sendmmsg = call(1, nr::SENDMMSG, 4, n as i64, 0, 1);
    let recvmmsg = call(2, nr::RECVMMSG, 4, n as i64, 2, 3);
    let (log, s) = run(&[
        with_words(sendmmsg, 0, first),
        with_words(sendmmsg, 1, rest),
        with_words(recvmmsg, 0, first),
        with_words(recvmmsg, 1, rest),
        exit(1, 4),
        exit(2, 4),
    ]);
    assert!(s.anomalies.is_empty(), "{:?}", s.anomalies);
    assert_eq!((s.stats[0].sends, s.stats[1].recvs), (n as u64, n as u64));
    let total: u64 = sizes.iter().map(|&b| b as u64).sum();
    assert_eq!(s.stats[1].recv_bytes, total);
    // One receive: a single RecvStart, then a RecvEnd per datagram, in order.
    let recvs = of(&log, 1);
    assert_eq!(recvs[0], (2, EventKind::RecvStart));
    assert_eq!(
        recvs[1..=n].last(),
        Some(&(0, EventKind::RecvEnd { msg: n as u64 }))
    );
}

#[test]
fn a_message_vector_missing_its_last_record_is_noted() {
    use lbf_common::syscalls::WORDS_PER_PART;
    let sendmmsg = call(1, nr::SENDMMSG, 4, WORDS_PER_PART as i64 + 1, 0, 1);
    let (_, s) = run(&[
        with_words(sendmmsg, 0, &[8; WORDS_PER_PART]),
        call(1, nr::WRITE, 3, 10, 1, 2),
    ]);
    assert_eq!(s.stats[0].sends, WORDS_PER_PART as u64 + 1);
    assert_eq!(s.anomalies[&Anomaly::MmsgSizesUnread], 1);
}

#[test]
fn sendfile_and_splice_move_bytes_into_and_out_of_sockets() {
    let mut sendfile = call(1, nr::SENDFILE, 3, 100, 0, 1);
    sendfile.args[2] = 9; // from a file
    let mut splice = call(2, nr::SPLICE, 3, 100, 2, 3);
    splice.args[3] = 8; // into a pipe
    let (log, s) = run(&[sendfile, splice, exit(1, 4), exit(2, 4)]);
    assert_eq!((s.stats[0].sends, s.stats[0].send_bytes), (1, 100));
    assert_eq!((s.stats[1].recvs, s.stats[1].recv_bytes), (1, 100));
    assert_eq!(of(&log, 1)[1], (1, EventKind::RecvEnd { msg: 1 }));
}

#[test]
fn a_copy_made_by_fcntl_is_the_same_socket() {
    let mut dupfd = call(1, nr::FCNTL, 3, 20, 0, 1);
    dupfd.args[2] = 1030; // F_DUPFD_CLOEXEC
    let (_, s) = run(&[
        dupfd,
        call(1, nr::CLOSE, 3, 0, 1, 1),
        call(1, nr::WRITE, 20, 10, 1, 2),
        call(2, nr::READ, 3, 10, 0, 3),
    ]);
    assert_eq!((s.unmatched_sends, s.unmatched_recvs), (0, 0));
    assert_eq!(s.stats[0].sends, 1);
}

/// With the number of processes known, events reach the sink while the program runs, the
/// capture holds only those not settled yet, and the result is the one handed out at the end.
#[test]
fn with_an_expected_count_events_flow_as_they_settle_and_the_result_is_the_same() {
    let records = ping_pong(2_000);
    let at_end = run_expecting(&records, None);
    let live = run_expecting(&records, Some(2));
    assert_eq!(at_end.before_finish, 0);
    assert!(at_end.most_held >= 2_000 * 8, "{}", at_end.most_held);
    assert!(
        live.before_finish >= 2_000 * 8,
        "events before the end: {}",
        live.before_finish
    );
    assert!(live.most_held <= 4, "held at most {}", live.most_held);
    for p in 0..2 {
        assert_eq!(of(&live.log, p), of(&at_end.log, p), "process {p}");
    }
    assert_eq!(live.log.procs, at_end.log.procs);
    assert_eq!(live.summary.stats, at_end.summary.stats);
    assert_eq!(live.summary.procs, at_end.summary.procs);
    assert!(
        live.summary.anomalies.is_empty(),
        "{:?}",
        live.summary.anomalies
    );
}

/// A process using a socket after the expected ones is left out: noted, its events counted
/// as lost, and a receive of its message is a `Keepalive` (its send is not in the trace).
#[test]
fn a_process_beyond_the_expected_count_is_left_out_and_its_events_counted() {
    let s = run_expecting(
        &[
            call(2, nr::WRITE, 3, 10, 0, 1),
            call(1, nr::READ, 3, 10, 0, 2),
            call(1, nr::WRITE, 3, 5, 2, 3),
            call(2, nr::READ, 3, 5, 1, 4),
            exit(1, 5),
            exit(2, 6),
        ],
        Some(1),
    );
    use EventKind::*;
    assert_eq!(s.log.procs.len(), 1);
    assert_eq!(
        of(&s.log, 0),
        vec![
            (
                1,
                Send {
                    after: 0,
                    msg: 1,
                    bytes: 10,
                    rendezvous: false
                }
            ),
            (0, RecvStart),
            (3, Keepalive),
            (2, Exit)
        ]
    );
    // Process 1's RecvStart, RecvEnd, Send and Exit.
    assert_eq!(s.summary.lost_events, 4);
    assert!(
        s.summary.anomalies.keys().any(|k| matches!(
            k,
            Anomaly::LeftOut { name, expected: 1, .. } if name.ends_with("[1]")
        )),
        "{:?}",
        s.summary.anomalies
    );
    assert_eq!(
        s.summary.anomalies[&Anomaly::RecvFromLeftOut { labels: LABELS }],
        1
    );
}

/// A count never reached: everything is handed out at the end, as without one, with a note.
#[test]
fn an_expected_count_never_reached_hands_everything_out_at_the_end() {
    let records = ping_pong(3);
    let s = run_expecting(&records, Some(3));
    let at_end = run_expecting(&records, None);
    assert_eq!(s.before_finish, 0);
    assert_eq!(s.log.events, at_end.log.events);
    let fewer = Anomaly::FewerJoined {
        labels: LABELS,
        expected: 3,
        joined: 2,
    };
    assert_eq!(s.summary.anomalies.keys().collect::<Vec<_>>(), [&fewer]);
    assert_eq!(
        fewer.to_string(),
        "fewer processes used a socket than the 3 expected (--procs or the targets' processes): \
         2 did, and their events were handed out at the end"
    );
}

/// Process 2 (a client) makes `n` short connections to process 1 (a server), each on
/// descriptor `100 + i` of both: connect, a 64-byte request, a 512-byte reply read in two
/// parts, then both close (`closes`: else the descriptors stay open until both exit). The
/// last connection's client reads only 300 bytes of its reply and closes: the rest is never
/// consumed. Returns the resolver's table and the records.
fn short_connections(n: i32, closes: bool) -> (Table, Vec<Record>) {
    let u = |inode| Endpoint::Unix { inode };
    short_connections_between(n, closes, |i| {
        (u(1000 + 2 * i as u64), u(1001 + 2 * i as u64))
    })
}

/// A server's many short connections: each connection's channels and descriptors are freed
/// once both ends closed, each process's entry once it ended and its events left, so the
/// capture keeps the open ones only; and the result is the one of keeping everything to the
/// end (the same records without the closes, or handed out at the end).
#[test]
fn closed_connections_are_forgotten_and_the_result_is_the_same() {
    let n = 1_000;
    let (table, records) = short_connections(n, true);
    let closing = run_on(table, &records, Some(2));
    let (table, records) = short_connections(n, false);
    let kept_open = run_on(table, &records, Some(2));
    let (table, records) = short_connections(n, true);
    let at_end = run_on(table, &records, None);

    assert!(
        closing.most_kept.channels <= 2 && closing.most_kept.descriptors <= 2,
        "{:?}",
        closing.most_kept
    );
    assert_eq!(closing.most_kept.processes, 2);
    assert_eq!(closing.kept_at_end, Kept::default());
    // Without the closes, every connection's state stays until the processes end.
    assert_eq!(kept_open.most_kept.channels, 2 * n as usize);
    assert_eq!(kept_open.most_kept.descriptors, 2 * n as usize);
    assert!(closing.most_held <= 4, "held at most {}", closing.most_held);

    for other in [&kept_open, &at_end] {
        for p in 0..2 {
            assert_eq!(of(&closing.log, p), of(&other.log, p), "process {p}");
        }
        assert_eq!(closing.log.procs, other.log.procs);
        assert_eq!(closing.summary.stats, other.summary.stats);
    }
    let s = &closing.summary;
    assert_eq!((s.unmatched_sends, s.unmatched_recvs), (0, 0));
    assert_eq!(s.stats[1].sends, n as u64);
    assert_eq!(s.stats[0].recvs, 2 * n as u64 - 1);
    assert!(s.anomalies.is_empty(), "{:?}", s.anomalies);
    // The last reply's unread 212 bytes travel with the message of the 300 read.
    let last = of(&closing.log, 1)
        .into_iter()
        .rev()
        .find_map(|(_, k)| match k {
            EventKind::Send { bytes, .. } => Some(bytes),
            _ => None,
        });
    assert_eq!(last, Some(512));
}

/// A socket open in two processes (a forked child's copy) and through a `dup` copy keeps its
/// connection's state until the last copy closes: bytes sent before the parent closed its
/// copy, and after, are matched as one stream.
#[test]
fn a_connection_stays_while_any_copy_of_either_end_is_open() {
    let fork = Record {
        kind: RecordKind::Fork as u16,
        ..call(1, 0, 0, 7, 0, 0)
    };
    let s = run_expecting(
        &[
            call(1, nr::WRITE, 3, 100, 0, 1),
            call(2, nr::READ, 3, 40, 0, 2),
            fork,
            call(1, nr::CLOSE, 3, 0, 1, 2),
            call(7, nr::WRITE, 3, 10, 0, 1),
            call(2, nr::DUP, 3, 9, 2, 3),
            call(2, nr::CLOSE, 3, 0, 3, 4),
            call(2, nr::READ, 9, 70, 4, 5),
            call(7, nr::CLOSE, 3, 0, 1, 2),
            call(2, nr::CLOSE, 9, 0, 5, 6),
            exit(1, 3),
            exit(7, 3),
            exit(2, 7),
        ],
        Some(3),
    );
    let sm = &s.summary;
    assert_eq!((sm.unmatched_sends, sm.unmatched_recvs), (0, 0));
    assert!(sm.anomalies.is_empty(), "{:?}", sm.anomalies);
    use EventKind::*;
    // The child's 10 bytes are the end of the message of the read of 70.
    assert_eq!(
        of(&s.log, 2),
        vec![
            (
                1,
                Send {
                    after: 0,
                    msg: 2,
                    bytes: 10,
                    rendezvous: false
                }
            ),
            (2, Exit)
        ]
    );
    assert_eq!(s.kept_at_end, Kept::default());
}

/// A datagram socket's channel goes when the last descriptor using it closes (the receiver,
/// and a sender connected to it); a datagram nobody received is unmatched, as at the end.
#[test]
fn a_closed_datagram_socket_is_forgotten() {
    let records = [
        call(1, nr::SENDMSG, 4, 50, 0, 1),
        call(1, nr::SENDMSG, 4, 70, 1, 2),
        call(2, nr::RECVMSG, 4, 50, 0, 1),
        call(2, nr::CLOSE, 4, 0, 1, 2),
        call(1, nr::CLOSE, 4, 0, 2, 3),
        exit(1, 4),
        exit(2, 4),
    ];
    let closing = run_expecting(&records, Some(2));
    let at_end = run_expecting(&records, None);
    assert_eq!(closing.kept_at_end, Kept::default());
    assert_eq!(closing.summary.unmatched_sends, 1);
    for p in 0..2 {
        assert_eq!(of(&closing.log, p), of(&at_end.log, p), "process {p}");
    }
    // Process 1's two datagrams leave before the end.
    assert!(closing.before_finish >= 5, "{}", closing.before_finish);
}

/// A process attached while running (`lbf-trace -p`): each thread's first event carries the
/// CPU it used since the attach (its `Attach` record), not since the process started, whether
/// the process has joined by then or joins later.
#[test]
fn an_attached_process_counts_its_cpu_from_the_attach() {
    let attach = |tgid, cpu| Record {
        kind: RecordKind::Attach as u16,
        fn_id: 0,
        ..call(tgid, 0, 0, 0, cpu, cpu)
    };
    let (log, s) = run(&[
        attach(1, 5_000),
        call(1, nr::WRITE, 3, 100, 5_010, 5_020),
        attach(2, 7_000),
        call(2, nr::READ, 3, 100, 7_001, 7_030),
        exit(1, 5_050),
        exit(2, 7_060),
    ]);
    let first = |p| of(&log, p)[0].0;
    assert_eq!((first(0), first(1)), (20, 1), "{:?}", log.events);
    let cpu: Vec<u64> = s.stats.iter().map(|st| st.cpu_ns).collect();
    assert_eq!(cpu, vec![50, 60]);
}
