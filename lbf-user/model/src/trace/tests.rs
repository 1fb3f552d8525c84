//! Reader and writer tests: round trips, and every error with its line number.

use super::*;
use crate::event::{ProcId, ProcedureCpu};

const HEADER: &str = r#"{"format":"lbf-trace","version":2,"procs":[{"id":0,"name":"rank0","host":"a"},{"id":1,"name":"rank1","host":"b"}]}"#;
const HEADER_V1: &str = r#"{"format":"lbf-trace","version":1,"procs":[{"id":0,"name":"rank0","host":"a"},{"id":1,"name":"rank1","host":"b"}]}"#;

fn read_all(text: &str) -> Result<(Vec<LineEvent>, Option<Summary>), TraceError> {
    let mut reader = TraceReader::new(text.as_bytes())?;
    let events = reader.by_ref().collect::<Result<Vec<_>, _>>()?;
    Ok((events, reader.summary().cloned()))
}

/// The error reading `body` after a valid header, as (line, message).
fn error(body: &str) -> (u64, String) {
    let err = read_all(&format!("{HEADER}\n{body}")).unwrap_err();
    (err.line, err.to_string())
}

fn ev(proc: ProcId, cpu_ns: u64, kind: EventKind) -> Event {
    Event { proc, cpu_ns, kind }
}

fn every_kind() -> Vec<Event> {
    vec![
        ev(
            0,
            1200,
            EventKind::Send {
                after: 0,
                msg: 17,
                bytes: 4096,
                rendezvous: false,
            },
        ),
        ev(1, 5, EventKind::RecvStart),
        ev(1, 0, EventKind::RecvEnd { msg: 17 }),
        ev(1, 4, EventKind::RecvPost { msg: 18 }),
        ev(
            0,
            6,
            EventKind::Send {
                after: 0,
                msg: 18,
                bytes: 1 << 20,
                rendezvous: true,
            },
        ),
        ev(0, 8, EventKind::SendEnd { msg: 18 }),
        ev(1, 2, EventKind::RecvStart),
        ev(1, 9, EventKind::RecvEnd { msg: 18 }),
        ev(
            0,
            7,
            EventKind::CollStart {
                coll: 3,
                op: CollOp::Allreduce,
                size: 2,
                bytes: 8,
            },
        ),
        ev(
            1,
            9,
            EventKind::CollStart {
                coll: 3,
                op: CollOp::Allreduce,
                size: 2,
                bytes: 8,
            },
        ),
        ev(0, 1, EventKind::CollEnd { coll: 3 }),
        ev(1, 1, EventKind::CollEnd { coll: 3 }),
        ev(0, u64::MAX, EventKind::Keepalive),
        ev(0, 2, EventKind::Exit),
        ev(1, 3, EventKind::Exit),
    ]
}

fn header() -> Header {
    let proc = |id, host: &str| ProcInfo {
        id,
        name: format!("rank{id}"),
        host: host.into(),
        ..Default::default()
    };
    Header {
        procs: vec![proc(0, "a"), proc(1, "b")],
        source: None,
        procedures: Vec::new(),
    }
}

#[test]
fn round_trip_with_summary() {
    let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    for e in every_kind() {
        writer.write_event(&e).unwrap();
    }
    let summary = Summary {
        measured_seconds: 12.3,
        lost_events: 4,
        teardown_seconds: 0.0,
        gaps: vec![Gap {
            p: 1,
            from_seconds: 0.5,
            records: 4,
        }],
    };
    let bytes = writer.finish(&summary).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.starts_with(&format!("{HEADER}\n")), "{text}");
    assert!(text.contains(r#"{"p":0,"k":"send","cpu_ns":1200,"msg":17,"bytes":4096}"#));
    assert!(text.contains(r#"{"p":1,"k":"recv_post","cpu_ns":4,"msg":18}"#));
    assert!(text
        .contains(r#"{"p":0,"k":"send","cpu_ns":6,"msg":18,"bytes":1048576,"rendezvous":true}"#));
    assert!(text.contains(r#"{"p":0,"k":"send_end","cpu_ns":8,"msg":18}"#));
    assert!(text.ends_with(
        "{\"summary\":{\"measured_seconds\":12.3,\"lost_events\":4,\"gaps\":[{\"p\":1,\"from_seconds\":0.5,\"records\":4}]}}\n"
    ));

    let mut reader = TraceReader::new(text.as_bytes()).unwrap();
    assert_eq!(reader.header(), &header());
    let events: Vec<_> = reader.by_ref().map(Result::unwrap).collect();
    assert_eq!(
        events.iter().map(|e| e.event).collect::<Vec<_>>(),
        every_kind()
    );
    assert_eq!(
        events.iter().map(|e| e.line).collect::<Vec<_>>(),
        (2..17).collect::<Vec<_>>()
    );
    assert_eq!(reader.summary(), Some(&summary));
}

/// Version 1 traces (written before rendezvous) read as they always did.
#[test]
fn version_1_traces_read_as_before() {
    let body = r#"{"p":0,"k":"send","cpu_ns":1200,"msg":17,"bytes":4096}
{"p":1,"k":"recv_start","cpu_ns":5}
{"p":1,"k":"recv_end","cpu_ns":0,"msg":17}
{"p":0,"k":"exit","cpu_ns":2}
{"p":1,"k":"exit","cpu_ns":3}
{"summary":{"measured_seconds":1.5,"lost_events":0}}
"#;
    let (events, summary) = read_all(&format!(
        "{HEADER_V1}
{body}"
    ))
    .unwrap();
    let sent = EventKind::Send {
        after: 0,
        msg: 17,
        bytes: 4096,
        rendezvous: false,
    };
    assert_eq!(
        events.iter().map(|e| e.event).collect::<Vec<_>>(),
        vec![
            ev(0, 1200, sent),
            ev(1, 5, EventKind::RecvStart),
            ev(1, 0, EventKind::RecvEnd { msg: 17 }),
            ev(0, 2, EventKind::Exit),
            ev(1, 3, EventKind::Exit),
        ]
    );
    assert_eq!(summary.map(|s| s.measured_seconds), Some(1.5));
}

#[test]
fn unfinished_writer_leaves_a_truncated_trace() {
    let mut bytes = Vec::new();
    let mut writer = TraceWriter::new(&mut bytes, &header()).unwrap();
    writer.write_event(&every_kind()[0]).unwrap();
    writer.flush().unwrap();
    drop(writer);
    let (events, summary) = read_all(std::str::from_utf8(&bytes).unwrap()).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(summary, None);
}

#[test]
fn extra_fields_and_blank_lines_are_ignored() {
    let body = "\n{\"t_ns\":99,\"p\":1,\"note\":{\"a\":[1,2]},\"k\":\"recv_end\",\"cpu_ns\":3,\"msg\":4}\n  \n";
    let (events, _) = read_all(&format!("{HEADER}\n{body}")).unwrap();
    assert_eq!(
        events,
        vec![LineEvent {
            line: 3,
            event: ev(1, 3, EventKind::RecvEnd { msg: 4 }),
            procedures: ProcedureCpu::NONE,
            t_ns: Some(99),
        }]
    );
}

#[test]
fn header_errors_are_on_line_1() {
    let err = |text: &str| {
        let e = read_all(text).unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        e.to_string()
    };
    assert!(err("").contains("not an lbf trace"));
    assert!(err(r#"{"p":0,"k":"exit","cpu_ns":0}"#).contains("not an lbf trace"));
    assert!(err("garbage").contains("first line must be a header"));
    let v3 = err(r#"{"format":"lbf-trace","version":3,"procs":[]}"#);
    assert!(
        v3.contains("version 3 is not supported; this lbf reads versions 1 and 2"),
        "{v3}"
    );
    assert!(err(r#"{"format":"lbf-trace","procs":[]}"#).contains("\"version\" is missing"));
    assert!(err(r#"{"format":"lbf-trace","version":1}"#).contains("\"procs\" is missing"));
    let gap = err(r#"{"format":"lbf-trace","version":1,"procs":[{"id":0},{"id":2}]}"#);
    assert!(
        gap.contains("process number 1 in \"procs\" has id 2"),
        "{gap}"
    );
}

/// The header's `source`: written when known, read back, absent in older traces (and then
/// `None`), and an unknown value is a bad header.
#[test]
fn the_source_is_recorded_and_optional() {
    use crate::source::Source;
    for source in [Source::Mpi, Source::Pvm, Source::Sockets] {
        let header = Header {
            source: Some(source),
            ..header()
        };
        let writer = TraceWriter::new(Vec::new(), &header).unwrap();
        let text = String::from_utf8(writer.finish(&Summary::default()).unwrap()).unwrap();
        let first = text.lines().next().unwrap();
        assert!(
            first.starts_with(&format!(
                r#"{{"format":"lbf-trace","version":2,"source":"{}","procs":"#,
                source.name()
            )),
            "{first}"
        );
        let reader = TraceReader::new(text.as_bytes()).unwrap();
        assert_eq!(reader.header(), &header);
    }
    let writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    let text = String::from_utf8(writer.finish(&Summary::default()).unwrap()).unwrap();
    assert!(!text.contains("source"), "{text}");
    for old in [HEADER, HEADER_V1] {
        let reader = TraceReader::new(old.as_bytes()).unwrap();
        assert_eq!(reader.header().source, None);
    }
    let bad = read_all(r#"{"format":"lbf-trace","version":2,"source":"rpc","procs":[]}"#);
    let bad = bad.unwrap_err().to_string();
    assert!(bad.contains(r#""source" is "rpc""#), "{bad}");
}

#[test]
fn body_errors_name_their_line() {
    let exit0 = r#"{"p":0,"k":"exit","cpu_ns":0}"#;
    let cases = [
        (format!("{exit0}\n{{\"p\":1,\n{exit0}"), "line 3: bad JSON: EOF while parsing a value at column 7"),
        ("{\"p\":0,\"k\":\"sned\",\"cpu_ns\":1}".to_string(), "line 2: unknown event kind \"sned\""),
        ("{\"p\":0,\"cpu_ns\":1}".to_string(), "line 2: event event is missing the field \"k\""),
        ("{\"p\":0,\"k\":\"send\",\"cpu_ns\":1,\"msg\":1}".to_string(), "send event is missing the field \"bytes\""),
        ("{\"p\":0,\"k\":\"recv_end\",\"cpu_ns\":1}".to_string(), "recv_end event is missing the field \"msg\""),
        ("{\"p\":0,\"k\":\"recv_post\",\"cpu_ns\":1}".to_string(), "recv_post event is missing the field \"msg\""),
        ("{\"p\":0,\"k\":\"send_end\",\"cpu_ns\":1}".to_string(), "send_end event is missing the field \"msg\""),
        ("{\"p\":0,\"k\":\"send\",\"cpu_ns\":1,\"msg\":1,\"bytes\":2,\"rendezvous\":1}".to_string(), "line 2: bad JSON: invalid type: integer `1`, expected a boolean"),
        ("{\"k\":\"exit\",\"cpu_ns\":1}".to_string(), "exit event is missing the field \"p\""),
        ("{\"p\":0,\"k\":\"exit\"}".to_string(), "exit event is missing the field \"cpu_ns\""),
        ("{\"p\":0,\"k\":\"coll_start\",\"cpu_ns\":1,\"coll\":1,\"size\":2,\"bytes\":0}".to_string(), "coll_start event is missing the field \"op\""),
        ("{\"p\":0,\"k\":\"coll_start\",\"cpu_ns\":1,\"coll\":1,\"op\":\"scan\",\"size\":2,\"bytes\":0}".to_string(), "unknown collective op \"scan\""),
        ("{\"p\":0,\"k\":\"coll_end\",\"cpu_ns\":1}".to_string(), "coll_end event is missing the field \"coll\""),
        ("{\"p\":2,\"k\":\"exit\",\"cpu_ns\":1}".to_string(), "line 2: process 2 is not in the header, which lists 2 processes (ids 0 to 1)"),
        ("{\"p\":0,\"k\":\"exit\",\"cpu_ns\":-1}".to_string(), "line 2: bad JSON: invalid value: integer `-1`, expected u64 at column"),
        (format!("{{\"summary\":{{\"measured_seconds\":1,\"lost_events\":0}}}}\n\n{exit0}"), "line 4: a line follows the summary on line 2"),
    ];
    for (body, expected) in cases {
        let (line, message) = error(&body);
        assert!(
            message.contains(expected),
            "{body:?}: got {message:?}, want {expected:?}"
        );
        assert!(message.starts_with(&format!("line {line}: ")), "{message}");
    }
}

#[test]
fn open_reports_a_missing_file() {
    let err = TraceReader::open(std::path::Path::new("/nonexistent/t.jsonl"))
        .err()
        .unwrap();
    assert_eq!(err.line, 0);
    assert!(matches!(err.kind, TraceErrorKind::Io(_)));
    assert!(
        err.to_string().starts_with("cannot read the trace: "),
        "{err}"
    );
}

#[test]
fn synthetic_trace_is_consistent_and_deterministic() {
    let config = synthetic::Config {
        procs: 8,
        events: 5_000,
        seed: 7,
    };
    let events: Vec<Event> = synthetic::events(config).collect();
    assert!(events.len() >= 5_000);
    assert_eq!(events, synthetic::events(config).collect::<Vec<_>>());
    // every process exits last, every message is sent once and received once
    let mut exited = [false; 8];
    let mut sends = std::collections::HashMap::new();
    let mut recvs = std::collections::HashSet::new();
    for e in &events {
        assert!(!exited[e.proc as usize], "event after exit: {e:?}");
        match e.kind {
            EventKind::Exit => exited[e.proc as usize] = true,
            EventKind::Send { msg, .. } => assert!(sends.insert(msg, e.proc).is_none()),
            EventKind::RecvEnd { msg } => assert!(recvs.insert(msg)),
            _ => {}
        }
    }
    assert!(exited.iter().all(|&x| x));
    assert_eq!(sends.len(), recvs.len());
    assert!(recvs.iter().all(|m| sends.contains_key(m)));
    assert_eq!(synthetic::header(&config).procs[7].name, "rank7");
}

proptest::proptest! {
    /// Any events, written and read back, come back unchanged, one per line after the header.
    #[test]
    fn any_events_round_trip(raw in proptest::collection::vec(
        (0u32..2, proptest::prelude::any::<u64>(), 0u8..10, proptest::prelude::any::<u64>(),
         proptest::prelude::any::<u64>(), proptest::prelude::any::<u32>(), 0usize..4),
        0..50,
    )) {
        let ops = [CollOp::Barrier, CollOp::Bcast, CollOp::Reduce, CollOp::Allreduce];
        // Any values, within the format's rules about messages: each event's message id is
        // its own (its index in the high bits), and a process with a rendezvous send pending
        // ends it before it exits.
        let mut pending: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
        let events: Vec<Event> = raw
            .into_iter()
            .enumerate()
            .map(|(i, (proc, cpu_ns, k, a, b, size, op))| {
                let msg = (i as u64) << 48 | (a & 0xffff_ffff_ffff);
                let kind = match k {
                    0 => EventKind::Send { after: 0, msg, bytes: b, rendezvous: false },
                    1 => EventKind::RecvStart,
                    2 => EventKind::RecvEnd { msg },
                    3 => EventKind::CollStart { coll: a, op: ops[op], size, bytes: b },
                    4 => EventKind::CollEnd { coll: a },
                    5 => EventKind::Keepalive,
                    6 => {
                        pending[proc as usize].push(msg);
                        EventKind::Send { after: 0, msg, bytes: b, rendezvous: true }
                    }
                    7 => EventKind::RecvPost { msg },
                    8 => EventKind::SendEnd { msg },
                    _ => match pending[proc as usize].pop() {
                        Some(msg) => EventKind::SendEnd { msg },
                        None => EventKind::Exit,
                    },
                };
                ev(proc, cpu_ns, kind)
            })
            .collect();
        let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
        for e in &events {
            writer.write_event(e).unwrap();
        }
        let bytes = writer.finish(&Summary { measured_seconds: 0.5, ..Summary::default() }).unwrap();
        let (read, summary) = read_all(std::str::from_utf8(&bytes).unwrap()).unwrap();
        proptest::prop_assert_eq!(read.iter().map(|e| e.event).collect::<Vec<_>>(), events);
        proptest::prop_assert!(read.iter().enumerate().all(|(i, e)| e.line == i as u64 + 2));
        proptest::prop_assert_eq!(summary.map(|s| s.measured_seconds), Some(0.5));
    }
}

#[test]
fn a_trace_cut_in_the_middle_of_a_line_is_read_up_to_the_cut() {
    let exit0 = r#"{"p":0,"k":"exit","cpu_ns":0}"#;
    let text = format!("{HEADER}\n{exit0}\n{{\"p\":1,\"k\":\"ex");
    let mut reader = TraceReader::new(text.as_bytes()).unwrap();
    let events: Vec<_> = (&mut reader).collect::<Result<_, _>>().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(reader.cut_line(), Some((3, 14)));
    assert!(reader.summary().is_none());
    // A whole last line without its newline is no cut.
    let text = format!("{HEADER}\n{exit0}");
    let mut reader = TraceReader::new(text.as_bytes()).unwrap();
    assert_eq!((&mut reader).count(), 1);
    assert_eq!(reader.cut_line(), None);
    // Nor is a bad last line: it is an error.
    let text = format!("{HEADER}\n{{\"p\":0,\"k\":\"sned\",\"cpu_ns\":1}}");
    let mut reader = TraceReader::new(text.as_bytes()).unwrap();
    assert!(reader.next_event().is_err());
}

#[test]
fn the_rules_about_messages_are_checked_with_their_lines() {
    let line = |e: &str| format!("{e}\n");
    let send = r#"{"p":0,"k":"send","cpu_ns":1,"msg":5,"bytes":8}"#;
    let recv = r#"{"p":1,"k":"recv_end","cpu_ns":0,"msg":5}"#;
    let post = r#"{"p":1,"k":"recv_post","cpu_ns":0,"msg":5}"#;
    let rendezvous = r#"{"p":0,"k":"send","cpu_ns":1,"msg":6,"bytes":8,"rendezvous":true}"#;
    let exit0 = r#"{"p":0,"k":"exit","cpu_ns":0}"#;
    let cases = [
        (line(send) + &line(send), "line 3: message 5 is sent a second time (first on line 2)"),
        (line(recv) + &line(recv), "line 3: message 5 is received a second time (first on line 2)"),
        (line(post) + &line(post), "line 3: message 5 is posted a second time (first on line 2)"),
        (line(HEADER), "line 2: a second header line: two traces were written into one file"),
        (line(rendezvous) + &line(exit0), "line 3: process 0 exits before the send_end of message 6, which it sent by rendezvous on line 2"),
    ];
    for (body, expected) in cases {
        let (_, message) = error(&body);
        assert!(
            message.contains(expected),
            "got {message:?}, want {expected:?}"
        );
    }
    // A rendezvous send ended, and a message sent and received, are fine.
    let end = r#"{"p":0,"k":"send_end","cpu_ns":0,"msg":6}"#;
    let body = line(rendezvous) + &line(end) + &line(send) + &line(recv) + &line(exit0);
    assert!(read_all(&format!("{HEADER}\n{body}")).is_ok());
}

#[test]
fn a_byte_order_mark_before_the_header_is_skipped() {
    let text = format!("\u{feff}{HEADER}\n{}\n", r#"{"p":0,"k":"exit","cpu_ns":0}"#);
    let (events, _) = read_all(&text).unwrap();
    assert_eq!(events.len(), 1);
}

/// The header's `procedures` and the events' `proc_ns`: written only where a procedure ran,
/// read back in the header's order, absent (all zero) in traces without them.
#[test]
fn procedure_cpu_is_recorded_per_event() {
    let with = Header {
        procedures: vec!["servBusy1".into(), "servBusy2".into()],
        ..header()
    };
    let mut writer = TraceWriter::new(Vec::new(), &with).unwrap();
    let shares = ProcedureCpu::from_slice(&[700, 0]).unwrap();
    let send = ev(0, 1000, EventKind::Keepalive);
    writer.write_event_with(&send, &shares, None).unwrap();
    writer
        .write_event_with(&ev(0, 5, EventKind::Exit), &ProcedureCpu::NONE, None)
        .unwrap();
    let text = String::from_utf8(writer.finish(&Summary::default()).unwrap()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].ends_with(r#""procedures":["servBusy1","servBusy2"]}"#),
        "{}",
        lines[0]
    );
    assert_eq!(
        lines[1],
        r#"{"p":0,"k":"keepalive","cpu_ns":1000,"proc_ns":[700,0]}"#
    );
    assert_eq!(lines[2], r#"{"p":0,"k":"exit","cpu_ns":5}"#);
    let mut reader = TraceReader::new(text.as_bytes()).unwrap();
    assert_eq!(reader.header(), &with);
    let first = reader.next_event().unwrap().unwrap();
    assert_eq!((first.event, first.procedures), (send, shares));
    let second = reader.next_event().unwrap().unwrap();
    assert_eq!(second.procedures, ProcedureCpu::NONE);
    // A trace without procedures has no `procedures` in its header.
    let plain = TraceWriter::new(Vec::new(), &header()).unwrap();
    let plain = String::from_utf8(plain.finish(&Summary::default()).unwrap()).unwrap();
    assert!(!plain.contains("procedures"), "{plain}");
}

#[test]
fn proc_ns_must_match_the_header() {
    let (line, message) = error(r#"{"p":0,"k":"exit","cpu_ns":5,"proc_ns":[1]}"#);
    assert_eq!(line, 2);
    assert!(
        message.contains("\"proc_ns\" lists 1 numbers, but the header lists 0 procedures"),
        "{message}"
    );
    let twice = r#"{"format":"lbf-trace","version":2,"procs":[{"id":0}],"procedures":["f","f"]}"#;
    let err = TraceReader::new(twice.as_bytes())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("lists `f` twice"), "{err}");
}

/// A capture's wall-clock time (`t_ns`) is written last on the line, only where known, and
/// read back; a line without it reads as `None`.
#[test]
fn wall_clock_times_are_written_and_read_back() {
    let mut writer = TraceWriter::new(Vec::new(), &header()).unwrap();
    let send = ev(
        0,
        10,
        EventKind::Send {
            after: 0,
            msg: 1,
            bytes: 8,
            rendezvous: false,
        },
    );
    writer
        .write_event_with(&send, &ProcedureCpu::NONE, Some(1_500))
        .unwrap();
    writer.write_event(&ev(0, 5, EventKind::Exit)).unwrap();
    let text = String::from_utf8(writer.finish(&Summary::default()).unwrap()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[1],
        r#"{"p":0,"k":"send","cpu_ns":10,"msg":1,"bytes":8,"t_ns":1500}"#
    );
    let mut reader = TraceReader::new(text.as_bytes()).unwrap();
    let first = reader.next_event().unwrap().unwrap();
    assert_eq!((first.event, first.t_ns), (send, Some(1_500)));
    assert_eq!(reader.next_event().unwrap().unwrap().t_ns, None);
}
